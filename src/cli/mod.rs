//! The `pmindex` command line: argument definitions (clap derive) and
//! dispatch. The commands themselves are in [`kv`] (pool and key commands),
//! [`bench`] (benchmark wrappers around `pmindex::bench`), [`crashtest`]
//! and [`serve`] (the memcached server and its load generator).
//!
//! Errors are printed as `error: <message>` on standard error (with
//! `--json`, as one JSON object there: `error` and `exit_status`); the exit
//! code is 0 on success, 1 on failure (including a key that is not found),
//! 2 on a usage error.

mod bench;
mod crashtest;
mod error;
mod kv;
mod output;
mod parse;
mod serve;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::PossibleValuesParser;
use clap::{Args, Parser, Subcommand};
use pmindex::db::DEFAULT_ENGINE;
use pmindex::engine::EngineConfig;
use pmindex::pm::{FlushKind, PersistConfig, PmLatency};

use error::CliError;
use output::Output;

const AFTER_HELP: &str = "\
Examples:
  pmindex create /tmp/demo.pool --size 64M
  pmindex put /tmp/demo.pool hello world
  pmindex get /tmp/demo.pool hello
  pmindex --hex put /tmp/demo.pool 00ff 0102
  pmindex scan /tmp/demo.pool --from a --to m --limit 10
  pmindex info /tmp/demo.pool --json
  pmindex bench --records 100000 --flush clflushopt --pm-latency 300/100
  pmindex serve /tmp/cache.pool --listen 127.0.0.1:11211
  pmindex mc-bench --engines hart,woart --clients 50

Reading commands (get, scan, info, check) open the pool read-only: they
never write it, not even recovery's repairs of a crashed or damaged pool
(made in memory), and run beside each other. put and delete open it alone.
A command waits up to --wait seconds for a handle that excludes it (put and
delete for any other; a reading command for a writer).

Exit status: 0 on success, 1 on failure (also when a key is not found),
2 on a usage error.";

/// Crash-consistent key-value indexes for persistent memory.
///
/// A pool is a file (ideally on a DAX file system, where it is mapped with
/// MAP_SYNC) holding one persistent index. Every change is durable when the
/// command returns.
#[derive(Debug, Parser)]
#[command(name = "pmindex", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options accepted by every command.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// Print machine-readable JSON instead of text; an error is then one
    /// JSON object on standard error (`error`, `exit_status`).
    #[arg(long, global = true)]
    json: bool,

    /// Take KEY, VALUE, --from and --to as hex (e.g. 00ff) and print keys and
    /// values as hex.
    #[arg(long, global = true)]
    hex: bool,

    /// Flush instruction: auto (the best this CPU has: clwb, else clflushopt,
    /// else clflush), clwb, clflushopt, clflush, or eadr (fences only, for
    /// platforms whose caches are persistent) [default: auto].
    #[arg(long, global = true, value_name = "MODE", value_parser = parse::parse_flush)]
    flush: Option<FlushKind>,

    /// Emulate slower PM: WRITE/READ latency in ns (e.g. 300/100), charged as
    /// the excess over DRAM's 100 ns per flushed line and per PM line read
    /// (WRITE/READ@DRAM sets the DRAM figure).
    #[arg(long = "pm-latency", global = true, value_name = "W/R", value_parser = parse::parse_latency)]
    pm_latency: Option<PmLatency>,

    /// How long a pool command waits, in seconds, for a pool that another
    /// process (or handle) holds in a way that excludes it (a writer
    /// excludes every other handle; readers exclude writers), before it
    /// fails; 0 fails at once. Pool commands only (create, bench and
    /// crashtest make their own pools).
    #[arg(long, global = true, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    wait: u64,
}

impl Global {
    fn output(&self) -> Output {
        Output {
            json: self.json,
            hex: self.hex,
        }
    }

    /// How a command opens the pool at `path`: the persistence settings
    /// and `settings` resolved for the pool's engine.
    fn how(&self, settings: &EngineOpts, path: &Path) -> Result<kv::How, CliError> {
        Ok(kv::How {
            persist: self.persist()?,
            config: settings.config_for_pool(path)?,
            wait: std::time::Duration::from_secs(self.wait),
        })
    }

    /// The persistence settings from `--flush` and `--pm-latency`.
    fn persist(&self) -> Result<PersistConfig, CliError> {
        if self.flush.is_none() && self.pm_latency.is_none() {
            return Ok(PersistConfig::default());
        }
        let kind = self.flush.unwrap_or_else(FlushKind::detect);
        Ok(PersistConfig::new(kind, self.pm_latency)?)
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a pool file holding an empty index.
    Create(CreateArgs),
    /// Insert a key or replace its value.
    ///
    /// Prints `inserted` or `replaced`. The change is durable when the command
    /// returns.
    Put(PutArgs),
    /// Print a key's value, or the values of several keys.
    ///
    /// One key: the value's bytes are written exactly as stored (a newline is
    /// added only when standard output is a terminal); with --hex, as one hex
    /// line. Several keys: one `KEY<TAB>VALUE` line per key found, in the
    /// order given, escaped as `scan` escapes them (the keys are looked up
    /// together, as memcached's `get k1 k2 ...`). With --json, an array of
    /// one object per key asked: `key` and `value` (`value_hex` for a value
    /// that is not UTF-8), neither value field for an absent key. Exits with
    /// status 1 if a key is absent, after printing the others.
    Get(GetArgs),
    /// Remove a key.
    ///
    /// Prints `deleted`; exits with status 1 if the key is absent.
    Delete(KeyArgs),
    /// Print the pairs in a key range, in key order.
    ///
    /// One `KEY<TAB>VALUE` per line. The range includes --from and excludes --to unless --from-excluded or
    /// --to-included say otherwise. In text, tabs, newlines, backslashes,
    /// other control characters and bytes that are not UTF-8 are escaped
    /// (`\t`, `\n`, `\\`, `\u{7}`, `\xff`); use --hex for exact bytes.
    Scan(ScanArgs),
    /// Describe a pool.
    ///
    /// Header fields, engine and its settings, uuid, creation time, size,
    /// mapping mode, flush instruction, layout, allocator use per class and
    /// the number of keys. Opens the pool read-only (MAP_PRIVATE): the file
    /// is not written.
    Info(PoolArg),
    /// Check a pool's consistency.
    ///
    /// Walks the index and checks its invariants, then checks that every
    /// allocated block is referenced by the index and every referenced block
    /// is allocated. Prints the keys and blocks checked; exits with status 1
    /// on the first broken invariant. Opens the pool read-only: what
    /// recovery repairs (a crash's leftovers) is repaired in memory, and
    /// the file is not written. Lists what recovery repaired at this open,
    /// and how often: a crash leaves about one repair per write in flight;
    /// many more point to damage that reads as a crash's leftovers (a torn
    /// record, an unlisted pointer), which no format here can tell from one
    /// (docs/design.md §8, the limits of the formats).
    Check(PoolArg),
    /// Benchmark every engine side by side, or reproduce a paper's evaluation.
    ///
    /// Without options: 200,000 random 8-byte keys on every engine, each in
    /// a temporary pool file (removed afterwards): load, recovery, search,
    /// update, range scans and delete, then YCSB A; three rounds with the
    /// engines alternating. Prints medians of ns/op, Mops/s, sampled latency
    /// percentiles, PM flushes, fences and lines read per operation, DRAM
    /// and PM bytes per record, build against recovery time, and ratios
    /// against the baseline engine. --preset runs a paper's experiments and
    /// judges its claims; --json, --csv and --plot write the results.
    Bench(Box<BenchArgs>),
    /// Benchmark the pool's store API against raw DRAM stores.
    ///
    /// On an anonymous pool: Pool::store_u64 against write_volatile, and
    /// Pool::write_bytes of 64 bytes against copy_nonoverlapping, each with a
    /// sequential and a random pattern inside --region; medians of --repeats
    /// alternating runs, and their ratio.
    BenchStoreApi(StoreApiArgs),
    /// Crash-test an engine (or the allocator) in the crash simulator.
    ///
    /// Runs seeded workloads on a simulated pool that records every PM store,
    /// flush and fence; crashes at every fence and at sampled points between
    /// fences; builds the crash images a power failure can leave (the
    /// all-pending image, the durable-only image and random per-line
    /// prefixes); recovers each distinct image and verifies it against the
    /// acknowledged operations, with `check()` and a leak check. Some images
    /// are crashed again during their recovery. Exits with status 1 on any
    /// failure, printing the crash point, a shrunk workload and the command
    /// that reproduces it.
    Crashtest(CrashtestArgs),
    /// Serve a pool over the memcached text protocol.
    ///
    /// Opens POOL (creating it if there is no such file, with --engine and
    /// --size) and answers memcached's text commands on --listen: set, add,
    /// replace, append, prepend, cas, get, gets, gat, gats, delete, incr,
    /// decr, touch, flush_all, stats, version, verbosity, quit (and shutdown
    /// with --allow-shutdown); a client of the binary protocol is
    /// disconnected at once. A reply is sent once its change is durable,
    /// so items survive a killed server (on PM with MAP_SYNC, a power
    /// failure). Items keep their flags, expiration time and CAS value in
    /// the pool. No eviction: a full pool answers `SERVER_ERROR out of
    /// memory storing object`. Runs until SIGINT or SIGTERM, then closes
    /// the pool.
    Serve(ServeArgs),
    /// Benchmark engines behind the memcached server (WORT paper §5.4).
    ///
    /// mc-benchmark's experiment: --requests `set`s, then as many `get`s,
    /// over --clients connections, keys drawn uniformly from --keyspace
    /// (`key:<12 digits>`). Each engine in --engines is served from a
    /// temporary pool by a server in this process (so client and server
    /// share this machine's cores); --server loads a running server
    /// instead (pmindex serve, or memcached itself). Prints requests per
    /// second and round-trip latency per phase.
    McBench(McBenchArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  pmindex serve /tmp/cache.pool                     # creates a hart pool of 1 GiB if absent
  pmindex serve /tmp/cache.pool --listen 0.0.0.0:11211 --engine woart --size 4G
  printf 'set k 0 0 5\\r\\nhello\\r\\nget k\\r\\nquit\\r\\n' | nc 127.0.0.1 11211")]
struct ServeArgs {
    /// The pool file; created if there is no such file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    /// The address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:11211")]
    listen: String,
    /// The engine of a pool created here [default: hart, the fastest here
    /// on point reads]; for an existing pool, the engine it must hold.
    #[arg(long, value_name = "ENGINE", value_parser = PossibleValuesParser::new(engine_names()))]
    engine: Option<String>,
    /// The size of a pool created here (K, M, G, T suffixes).
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse::parse_size)]
    size: u64,
    /// Connections served at once; more are answered `ERROR Too many open
    /// connections` (memcached's words) and closed.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_connections: usize,
    /// Obey the `shutdown` command (stop the server and close the pool).
    #[arg(long)]
    allow_shutdown: bool,
    /// At most N commands at work on the index at once; the others wait
    /// their turn [default: no limit]. For many more connections than
    /// cores, without pipelining: their commands otherwise meet preempted
    /// lock holders (50 connections on 2 cores: p99 set latency 11 ms
    /// without a limit, 1.6-2.7 ms with N of 2-4). It costs a wake-up per
    /// command that waits: pipelined or few connections run slower.
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Map every page of the pool before serving (see `bench --prefault`).
    #[arg(long)]
    prefault: bool,
    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  pmindex mc-bench                                   # every engine, 50 clients, 100,000 requests
  pmindex mc-bench --engines hart,woart --clients 4 --requests 1M --rounds 3
  pmindex mc-bench --server 127.0.0.1:11211 --clients 50")]
struct McBenchArgs {
    /// Engines to serve, comma separated, or `all`.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "all",
        conflicts_with = "server"
    )]
    engines: String,
    /// Load this running server instead of serving engines here.
    #[arg(long, value_name = "ADDR:PORT")]
    server: Option<String>,
    /// Client connections, each a thread (the paper: 4 and 50).
    #[arg(long, value_name = "N", default_value_t = 50)]
    clients: usize,
    /// Requests per phase, over all clients.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse::parse_count)]
    requests: u64,
    /// Keys are drawn uniformly from this many [default: REQUESTS].
    #[arg(long, value_name = "N", value_parser = parse::parse_count)]
    keyspace: Option<u64>,
    /// Bytes of each `set`'s data.
    #[arg(long, value_name = "BYTES", default_value_t = 32)]
    value_size: usize,
    /// Requests a client sends before reading their replies.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pipeline: usize,
    /// Rounds (engines alternate; medians are reported).
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: u32,
    /// Seed of the key draws.
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,
    /// Directory for the temporary pools [default: as bench's --dir].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Pool size per engine [default: from the key space and value size].
    #[arg(long, value_name = "SIZE", value_parser = parse::parse_size)]
    pool_size: Option<u64>,
    /// The servers' --concurrency (see `pmindex serve --help`).
    #[arg(long, value_name = "N", conflicts_with = "server")]
    concurrency: Option<usize>,
}

/// The longest workload round `crashtest` takes (`--ops`).
const CRASHTEST_MAX_OPS: usize = 100_000;
/// The most keys a `crashtest` workload takes (`--keys`).
const CRASHTEST_MAX_KEYS: usize = 1_000_000;

#[derive(Debug, Args)]
struct CrashtestArgs {
    /// Engine to test, or `alloc` for the allocator alone.
    #[arg(long, default_value = "pmlog")]
    engine: String,
    /// Operations per workload round.
    #[arg(long, default_value_t = 200)]
    ops: usize,
    /// Distinct crash images to check (1000000 is the long budget): whole
    /// rounds run until this many are checked, so the last may pass it.
    #[arg(long, default_value_t = 2000)]
    states: usize,
    /// Seed of the first round (round i uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Distinct keys (or allocator slots) in the workload.
    #[arg(long, default_value_t = 48)]
    keys: usize,
    /// At most this many random images per crash point.
    #[arg(long, default_value_t = 20)]
    per_point: usize,
    /// Simulate an eADR platform (caches drained at power loss).
    #[arg(long)]
    eadr: bool,
    /// Drop one named persist on purpose (harness self-test), e.g. pmlog-skip-append-fence.
    #[arg(long)]
    fault: Option<String>,
    /// Stop after this many failures.
    #[arg(long, default_value_t = 5)]
    max_failures: usize,
    /// Do not shrink a failing workload.
    #[arg(long)]
    no_shrink: bool,
    /// Verification threads (default: the number of cores, at most 4).
    #[arg(long)]
    threads: Option<usize>,
    /// Threads that write at once, each its own workload of --ops
    /// operations over its own share of the keys; a crash may then catch
    /// one operation of each in flight. Their interleaving differs from run
    /// to run, so a failure is not shrunk and a rerun may pass.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    writers: u8,
    /// The writers share one key space, with reads among their operations:
    /// their operations on a key race, and after a crash each key must hold
    /// what some order of them (each writer's own, and real time) leaves.
    #[arg(long)]
    shared_keys: bool,
    /// After each recovery checked, the writes made before the second
    /// crash leave every third key as it is and then put and delete SIZE
    /// of 4 KiB filler values (K, M suffixes) [default: 512K; 0: none]: a
    /// log then seals and cleans or frees the segments that recovery's
    /// records were in, so that a store recovery made and never
    /// persisted, and that matters only then, shows.
    #[arg(long, value_name = "SIZE", value_parser = parse::parse_size)]
    after_churn: Option<u64>,
    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
struct PoolArg {
    /// The pool file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    #[command(flatten)]
    settings: EngineOpts,
}

/// Engine settings for this command (`--engine-opt`, repeatable).
#[derive(Debug, Args, Default)]
struct EngineOpts {
    /// An engine setting, KEY=VALUE (repeatable); the key with or without
    /// the engine's prefix. Fixed at create (at open, a value other than
    /// the pool's is refused): hart.hash_key_len=3 (1 to 8), hart.format=5
    /// (a pool that builds before HART format 6 read), wort.format=3
    /// or 2 (a radix pool older builds read; 4, the default, tags leaf
    /// pointers and maps WORT slots; also woart, art-cow),
    /// fptree.leaf_slots=N (2 to 40, default 40), dptree.leaf_slots=N
    /// (2 to 32, default 32), fastfair.node_bytes=N (128 to 4096, 64
    /// plus a multiple of 16, default 512). For this command only:
    /// dptree.merge_ratio=R (the buffer's size over the base tree's
    /// that starts a merge, default 0.1), dptree.merge_min=N (default
    /// 256), hart.persist_order=paper, hart.stripes=hash_key,
    /// hart.leaf_first=off, hart.point_index=off,
    /// hart.point_index_above=N (default 64), hart.reads=optimistic,
    /// wort.reads=locked, fastfair.reads=locked, wort.writers=locked, wort.compact=off (a
    /// put that finds the pool full fails at once, without moving blocks
    /// to empty chunks; also woart, art-cow), hart.compact=off (the
    /// same, without moving values out of sparse chunks); at open,
    /// hart.recovery_threads=N. An unknown key
    /// is refused with the engine's list of settings.
    #[arg(long = "engine-opt", value_name = "KEY=VALUE")]
    engine_opt: Vec<String>,
}

impl EngineOpts {
    /// The settings for an index of `engine` ([`pmindex::engine::add_setting`]:
    /// a key without a prefix gets the engine's, and a key with another
    /// engine's prefix, which the engine would ignore, is a usage error
    /// here). Keys the engine does not know are refused by the engine, with
    /// its list.
    fn config(&self, engine: &str) -> Result<EngineConfig, CliError> {
        let mut config = EngineConfig::new();
        for kv in &self.engine_opt {
            pmindex::engine::add_setting(&mut config, engine, kv).map_err(|e| {
                CliError::Usage(match e {
                    pmindex::Error::InvalidArgument(m) => {
                        format!("--engine-opt: {m} (this index is {engine})")
                    }
                    e => e.to_string(),
                })
            })?;
        }
        Ok(config)
    }

    /// [`Self::config`] for the pool file at `path`, whose engine is read
    /// from its header (only when there are settings to resolve).
    fn config_for_pool(&self, path: &Path) -> Result<EngineConfig, CliError> {
        if self.engine_opt.is_empty() {
            return Ok(EngineConfig::new());
        }
        self.config(&pmindex::pm::Pool::engine_of(path)?)
    }
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The pool file to create (it must not exist).
    #[arg(value_name = "POOL")]
    pool: PathBuf,

    /// The engine (index design) of the pool.
    #[arg(long, value_name = "ENGINE", default_value = DEFAULT_ENGINE,
          value_parser = PossibleValuesParser::new(engine_names()))]
    engine: String,

    /// Pool size: bytes, or with a K, M, G or T suffix (binary); at least 1M,
    /// a multiple of 4K. The file's disk space is reserved whole at create
    /// (so that a full disk is an error now, not a crash later).
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse::parse_size)]
    size: u64,

    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
#[command(after_help = "Use `--` before a KEY or VALUE that starts with `-`.")]
struct PutArgs {
    /// The pool file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    /// The key: 1 to 250 bytes (hex with --hex).
    #[arg(value_name = "KEY")]
    key: String,
    /// The value: up to 1 MiB (hex with --hex); or --value-file.
    #[arg(value_name = "VALUE", required_unless_present = "value_file")]
    value: Option<String>,
    /// Take the value's bytes from FILE (`-`: standard input), exactly as
    /// they are, never as hex: for values that are not text, or too long
    /// for a command line (Linux passes at most 128 KiB in one argument).
    #[arg(long, value_name = "FILE", conflicts_with = "value")]
    value_file: Option<PathBuf>,
    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
#[command(after_help = "Use `--` before a KEY that starts with `-`.")]
struct KeyArgs {
    /// The pool file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    /// The key (hex with --hex).
    #[arg(value_name = "KEY")]
    key: String,
    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
#[command(after_help = "Use `--` before a KEY that starts with `-`.")]
struct GetArgs {
    /// The pool file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    /// The keys (hex with --hex).
    #[arg(value_name = "KEY", required = true, num_args = 1..)]
    keys: Vec<String>,
    #[command(flatten)]
    settings: EngineOpts,
}

#[derive(Debug, Args)]
struct ScanArgs {
    /// The pool file.
    #[arg(value_name = "POOL")]
    pool: PathBuf,
    /// Start at this key (included unless --from-excluded) [default: the first key].
    #[arg(long, value_name = "KEY")]
    from: Option<String>,
    /// Leave the --from key itself out.
    #[arg(long, requires = "from")]
    from_excluded: bool,
    /// Stop at this key (excluded unless --to-included) [default: after the last key].
    #[arg(long, value_name = "KEY")]
    to: Option<String>,
    /// Include the --to key itself.
    #[arg(long, requires = "to")]
    to_included: bool,
    /// Print at most N pairs.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    #[command(flatten)]
    settings: EngineOpts,
}

const BENCH_AFTER_HELP: &str = "\
Examples:
  pmindex bench                                   # the default comparison, under a minute
  pmindex bench --preset hart                     # the HART paper's evaluation, quick scale
  pmindex bench --preset dptree --full --plot /tmp/plots
  pmindex bench --keys dense,clustered --mix ycsb-a,ycsb-e --threads 1,2 --csv
  pmindex bench --mix read=90,update=10 --dist zipfian:0.8 --value-size 8,256,4096
  pmindex bench --pm-latencies none,300/100,600/300 --flush eadr --json
  pmindex bench --engines hart,hart:persist_order=paper --baseline hart --mix basic

Key sets: dictionary, seq-string, rand-string, dense, sparse, clustered, random-u64.
Mixes: basic (load, recovery, search, update, scan, delete), hart-read-intensive,
hart-rmw, hart-write-intensive, dptree-insert-only, dptree-read-only,
dptree-read-update, dptree-scan-insert, dptree-mixed, ycsb-a .. ycsb-f, or
weights such as read=90,update=10 (insert, read, update, delete, scan, rmw).
See docs/bench.md.";

#[derive(Debug, Args)]
#[command(after_help = BENCH_AFTER_HELP)]
struct BenchArgs {
    /// Reproduce a paper's evaluation: hart, wort, dptree or art-bplus.
    /// Runs the paper's engines that this build has (plus pmlog) and ends
    /// with a verdict on each of the paper's claims.
    #[arg(long, value_name = "PAPER", value_parser = parse_preset,
          conflicts_with_all = ["keys", "records", "ops", "value_size", "mix", "dist",
                                "scan_len", "threads", "pm_latencies", "get_many",
                                "put_many"])]
    preset: Option<pmindex::bench::preset::Preset>,

    /// With --preset: the paper's record counts (capped to what this
    /// machine holds) instead of the quick scale.
    #[arg(long, requires = "preset")]
    full: bool,

    /// Engines to run, comma separated, or `all`.
    ///
    /// An engine may carry settings, `ENGINE:KEY=VALUE[:KEY=VALUE...]`, to
    /// run beside itself with other settings: `--engines
    /// hart,hart:persist_order=paper` shows what HART's tight persist order
    /// buys, op by op; `wort,wort:reads=locked` what lock-free reads do.
    /// Reports name such an engine by its entry (keys without the engine's
    /// prefix); the same settings in another order are the same engine.
    #[arg(long, value_name = "LIST", default_value = "all")]
    engines: String,

    /// The engine the others are compared with, as named in --engines
    /// (settings included) [default: pmlog].
    #[arg(long, value_name = "ENGINE")]
    baseline: Option<String>,

    /// Key sets, comma separated (a sweep).
    #[arg(long, value_name = "LIST", default_value = "sparse")]
    keys: String,

    /// Word list of the `dictionary` key set (Debian: wamerican-insane).
    #[arg(long, value_name = "FILE", default_value = pmindex::bench::keys::DEFAULT_DICTIONARY)]
    dict: PathBuf,

    /// Keys loaded per experiment.
    #[arg(long, value_name = "N", default_value = "200000", value_parser = parse::parse_count)]
    records: u64,

    /// Operations per mix, and records read by the scans of `basic`
    /// [default: RECORDS].
    #[arg(long, value_name = "N", value_parser = parse::parse_count)]
    ops: Option<u64>,

    /// Bytes per value, comma separated for a sweep (K/M suffixes; at most 1M).
    #[arg(long, value_name = "LIST", default_value = "8")]
    value_size: String,

    /// Workloads: names, comma separated, or one custom mix such as
    /// read=90,update=10; repeat the option for more.
    #[arg(long, value_name = "LIST", default_value = "basic,ycsb-a")]
    mix: Vec<String>,

    /// Request distribution of every mix: uniform, zipfian[:SKEW] or
    /// latest[:SKEW], SKEW in (0, 1) [default: each mix's own].
    #[arg(long, value_name = "DIST", value_parser = parse_dist)]
    dist: Option<pmindex::bench::dist::Distribution>,

    /// Records per range scan (YCSB E: up to this many).
    #[arg(long, value_name = "N", default_value = "100", value_parser = parse::parse_count)]
    scan_len: u64,

    /// Also time multi-key gets (memcached's `get k1 k2 ...`): the basic
    /// workload reads every key again, N keys per `Db::get_many_with` call,
    /// in a `search-many` phase after `search`. Its ns/op is per key; a
    /// latency sample is one whole call. The engines overlap up to 32 keys
    /// at a time, so N above 16 adds no overlap.
    #[arg(long, value_name = "N", value_parser = parse_get_many)]
    get_many: Option<usize>,

    /// Also time multi-key puts: after `delete`, the basic workload inserts
    /// every record again, N per `Db::put_many` call, in an `insert-many`
    /// phase. Its ns/op is per key; a latency sample is one whole call.
    /// `hart` writes up to 32 items per fence, so N above 32 adds nothing.
    #[arg(long, value_name = "N", value_parser = parse_get_many)]
    put_many: Option<usize>,

    /// Thread counts, comma separated (1,2,4 for a scaling sweep).
    #[arg(long, value_name = "LIST", default_value = "1")]
    threads: String,

    /// Threads that load each pool (the load phase, which every workload
    /// starts with) [default: as many as the phases after it]. With 1, a
    /// multi-threaded run works on a pool one thread built, as after a bulk
    /// load: an engine that keeps per-thread state (hart's allocation
    /// stripes) shows what that costs.
    #[arg(long, value_name = "N")]
    load_threads: Option<usize>,

    /// Load each pool with upserts (`Db::put`, memcached `set`: the HART
    /// and WORT papers' insert, which updates a key it finds) instead of
    /// insert-if-absent (`Db::insert`, memcached `add`). The keys are
    /// distinct either way; an engine may take another path for each (hart
    /// writes an upsert's leaf before its descent, "Leaf first").
    #[arg(long)]
    load_by_put: bool,

    /// Map every page of each pool after it is created and after it is
    /// reopened, outside the timed phases, so that no operation waits for
    /// a page fault or for the allocator mapping fresh heap (about 300 µs
    /// per MiB, in the insert that first reaches it: WORT's p99.9 insert
    /// latency). Costs about 1 µs per 4 KiB page of pool, untimed.
    #[arg(long)]
    prefault: bool,

    /// PM latencies to sweep, comma separated: none or WRITE/READ ns (e.g.
    /// none,300/100,300/300,600/300). The global --pm-latency sets one.
    #[arg(long, value_name = "LIST")]
    pm_latencies: Option<String>,

    /// Rounds per experiment (engines alternate; medians are reported)
    /// [default: 3; 1 with --full].
    #[arg(long, value_name = "N")]
    rounds: Option<u32>,

    /// Seed of the keys, values and operation streams.
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,

    /// Directory for the temporary pool files (a DAX mount to measure real
    /// PM) [default: /dev/shm if it has 1 GiB free, else the system's
    /// temporary directory].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Pool size per engine: SIZE (e.g. 4G) or auto (from the records,
    /// keys and values).
    #[arg(long, value_name = "SIZE", default_value = "auto")]
    pool_size: String,

    /// Time every N-th operation for the latency percentiles. A timed
    /// operation runs alone (reading the clock waits for the operations
    /// before it), so a smaller N costs searches throughput: 1 in 8 cost
    /// them up to 30%.
    #[arg(long, value_name = "N", default_value_t = 32)]
    sample: u32,

    /// Stop a range-scan phase (or a mix with scans) after this many
    /// seconds and report the operations done; 0 for no limit
    /// [default: 5; none with --full].
    #[arg(long, value_name = "SECS")]
    scan_time_limit: Option<u64>,

    /// Print the results as CSV (one row per experiment, engine and phase).
    #[arg(long)]
    csv: bool,

    /// Write PNG and SVG charts in the style of the papers' figures into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,

    /// Run the store-API benchmark instead (like `pmindex bench-store-api`
    /// with its defaults and this --seed).
    #[arg(long, conflicts_with_all = ["records", "value_size", "engines", "dir", "preset",
                                      "keys", "mix", "threads", "plot", "csv", "baseline"])]
    store_api: bool,
}

fn parse_preset(s: &str) -> Result<pmindex::bench::preset::Preset, String> {
    s.parse()
}

fn parse_get_many(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}` is not a key count of 1 or more")),
    }
}

fn parse_dist(s: &str) -> Result<pmindex::bench::dist::Distribution, String> {
    s.parse()
}

#[derive(Debug, Args)]
struct StoreApiArgs {
    /// 8-byte stores per measurement (`_` separators allowed).
    #[arg(long, value_name = "N", default_value = "50000000", value_parser = parse::parse_count)]
    stores: u64,

    /// 64-byte writes per measurement [default: STORES / 8].
    #[arg(long, value_name = "N", value_parser = parse::parse_count)]
    writes: Option<u64>,

    /// Bytes of the region the stores land in: a power of two from 4K to 1G.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse::parse_size)]
    region: u64,

    /// Measurements per side (pool and raw alternate); medians are reported.
    #[arg(long, value_name = "N", default_value_t = 7)]
    repeats: u32,

    /// Seed of the random access pattern.
    #[arg(long, value_name = "N", default_value_t = 42)]
    seed: u64,
}

fn engine_names() -> Vec<&'static str> {
    pmindex::engine::ENGINES.iter().map(|e| e.name).collect()
}

/// Parses the command line, runs the command, and turns its outcome into
/// an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap's usage errors in JSON too when --json was given (help and
        // --version are not errors).
        Err(e) if e.use_stderr() && std::env::args().any(|a| a == "--json") => {
            let text = e.to_string();
            let message = text.trim().trim_start_matches("error: ");
            let _ = writeln!(
                std::io::stderr(),
                "{}",
                serde_json::json!({"error": message, "exit_status": e.exit_code()})
            );
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => e.exit(),
    };
    // A pool file that a command is creating when Ctrl-C, SIGTERM or
    // SIGHUP ends it is removed (a half-made pool would only block its
    // name); the signal then ends the process as it would have. `serve`
    // replaces these handlers with its own once its pool is open.
    pmindex::pm::signal::remove_on_signal();
    let json = cli.global.json;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            let code = e.exit_code();
            let line = if json {
                serde_json::json!({"error": e.to_string(), "exit_status": code}).to_string()
            } else {
                format!("error: {e}")
            };
            let _ = writeln!(std::io::stderr(), "{line}");
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    let g = &cli.global;
    let out = g.output();
    match cli.command {
        Command::Create(a) => {
            let how = kv::How {
                persist: g.persist()?,
                config: a.settings.config(&a.engine)?,
                wait: std::time::Duration::ZERO,
            };
            kv::create(out, &how, &a.pool, &a.engine, a.size)
        }
        Command::Put(a) => kv::put(
            out,
            &g.how(&a.settings, &a.pool)?,
            &a.pool,
            &a.key,
            a.value.as_deref(),
            a.value_file.as_deref(),
        ),
        Command::Get(a) => kv::get(out, &g.how(&a.settings, &a.pool)?, &a.pool, &a.keys),
        Command::Delete(a) => kv::delete(out, &g.how(&a.settings, &a.pool)?, &a.pool, &a.key),
        Command::Scan(a) => kv::scan(
            out,
            &g.how(&a.settings, &a.pool)?,
            &a.pool,
            &kv::ScanRange {
                from: a.from.as_deref(),
                from_excluded: a.from_excluded,
                to: a.to.as_deref(),
                to_included: a.to_included,
                limit: a.limit,
            },
        ),
        Command::Info(a) => kv::info(out, &g.how(&a.settings, &a.pool)?, &a.pool),
        Command::Check(a) => kv::check(out, &g.how(&a.settings, &a.pool)?, &a.pool),
        Command::Bench(a) => {
            let a = *a;
            if a.store_api {
                let cfg = pmindex::bench::store_api::StoreApiConfig {
                    seed: a.seed,
                    ..Default::default()
                };
                return bench::store_api(out, &cfg);
            }
            bench::run(
                out,
                g.flush,
                g.pm_latency,
                &bench::BenchOpts {
                    preset: a.preset,
                    full: a.full,
                    engines: &a.engines,
                    baseline: a.baseline,
                    keys: &a.keys,
                    dict: a.dict,
                    records: a.records,
                    ops: a.ops,
                    value_sizes: &a.value_size,
                    mixes: &a.mix,
                    dist: a.dist,
                    scan_len: a.scan_len,
                    get_many: a.get_many,
                    put_many: a.put_many,
                    threads: &a.threads,
                    load_threads: a.load_threads,
                    load_by_put: a.load_by_put,
                    prefault: a.prefault,
                    pm_latencies: a.pm_latencies.as_deref(),
                    rounds: a.rounds,
                    seed: a.seed,
                    dir: a.dir,
                    pool_size: &a.pool_size,
                    sample: a.sample,
                    scan_time_limit: a.scan_time_limit,
                    csv: a.csv,
                    plot: a.plot,
                },
            )
        }
        Command::Crashtest(a) => {
            let mut cfg = pmindex::sim::CrashConfig::new(&a.engine);
            cfg.ops = a.ops;
            cfg.states = a.states;
            cfg.seed = a.seed;
            cfg.keys = a.keys;
            cfg.per_point = a.per_point;
            cfg.eadr = a.eadr;
            cfg.max_failures = a.max_failures;
            cfg.shrink = !a.no_shrink;
            if let Some(t) = a.threads {
                cfg.threads = t;
            }
            cfg.writers = a.writers.into();
            cfg.shared_keys = a.shared_keys;
            if let Some(c) = a.after_churn {
                cfg.after_churn = c;
            }
            if a.engine == pmindex::sim::ALLOC_SUBJECT && a.after_churn.is_some() {
                return Err(CliError::Usage(
                    "--after-churn: the allocator workload (`--engine alloc`) makes no writes after recovery".into(),
                ));
            }
            if a.engine == pmindex::sim::ALLOC_SUBJECT && a.shared_keys {
                return Err(CliError::Usage(
                    "--shared-keys: the allocator workload (`--engine alloc`) has no keys".into(),
                ));
            }
            if a.engine == pmindex::sim::ALLOC_SUBJECT && a.writers > 1 {
                return Err(CliError::Usage(
                    "--writers: the allocator workload (`--engine alloc`) runs on one thread"
                        .into(),
                ));
            }
            if a.engine == pmindex::sim::ALLOC_SUBJECT && !a.settings.engine_opt.is_empty() {
                return Err(CliError::Usage(
                    "--engine-opt: the allocator (`--engine alloc`) has no settings".into(),
                ));
            }
            if a.engine != pmindex::sim::ALLOC_SUBJECT {
                pmindex::engine::find(&a.engine).map_err(|e| CliError::Usage(e.to_string()))?;
            }
            for (name, n) in [
                ("--states", a.states),
                ("--ops", a.ops),
                ("--keys", a.keys),
                ("--threads", cfg.threads),
                ("--max-failures", a.max_failures),
            ] {
                if n == 0 {
                    return Err(CliError::Usage(format!("{name} must be at least 1")));
                }
            }
            // The simulator keeps every operation's PM events and every
            // key's expected values in memory (about 100 bytes an operation
            // and more per key): past these a run would exhaust memory
            // long before it ended.
            for (name, n, most) in [
                ("--ops", a.ops, CRASHTEST_MAX_OPS),
                ("--keys", a.keys, CRASHTEST_MAX_KEYS),
            ] {
                if n > most {
                    return Err(CliError::Usage(format!(
                        "{name} {n}: at most {most} (the crash simulator keeps each \
                         operation's PM events in memory; more rounds, through --states, \
                         test more)"
                    )));
                }
            }
            cfg.engine_config = a.settings.config(&a.engine)?;
            if let Some(f) = &a.fault {
                let f: pmindex::pm::Fault = f
                    .parse()
                    .map_err(|e: pmindex::Error| CliError::Usage(e.to_string()))?;
                if !f.acts_on(&a.engine) {
                    return Err(CliError::Usage(format!(
                        "--fault {f}: the fault is in {}'s code, not {}'s, so it would \
                         drop nothing (the self-test would pass for no reason)",
                        f.engine().unwrap_or("the substrate"),
                        a.engine
                    )));
                }
                cfg.fault = Some(f);
            }
            crashtest::run(out, cfg)
        }
        Command::Serve(a) => {
            // A pool that does not exist yet takes its settings for the
            // engine it will be created with.
            let how = if a.pool.exists() {
                g.how(&a.settings, &a.pool)?
            } else {
                kv::How {
                    persist: g.persist()?,
                    config: a
                        .settings
                        .config(a.engine.as_deref().unwrap_or(serve::SERVE_ENGINE))?,
                    wait: std::time::Duration::ZERO,
                }
            };
            serve::serve(
                out,
                &how,
                &serve::ServeOpts {
                    pool: &a.pool,
                    listen: &a.listen,
                    engine: a.engine.as_deref(),
                    size: a.size,
                    max_connections: a.max_connections,
                    allow_shutdown: a.allow_shutdown,
                    prefault: a.prefault,
                    concurrency: a.concurrency,
                },
            )
        }
        Command::McBench(a) => serve::mc_bench(
            out,
            g.persist()?,
            &serve::McBenchOpts {
                engines: a.engines,
                server: a.server,
                clients: a.clients,
                requests: a.requests,
                keyspace: a.keyspace,
                value_size: a.value_size,
                pipeline: a.pipeline,
                rounds: a.rounds,
                seed: a.seed,
                dir: a.dir,
                pool_size: a.pool_size,
                concurrency: a.concurrency,
            },
        ),
        Command::BenchStoreApi(a) => {
            let cfg = pmindex::bench::store_api::StoreApiConfig {
                stores: a.stores,
                range_writes: a.writes.unwrap_or((a.stores / 8).max(1)),
                region_bytes: a.region,
                repeats: a.repeats,
                seed: a.seed,
            };
            bench::store_api(out, &cfg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_options_go_anywhere() {
        let c = Cli::try_parse_from(["pmindex", "get", "p", "k", "--hex", "--json"]).unwrap();
        assert!(c.global.hex && c.global.json);
        let c = Cli::try_parse_from(["pmindex", "--flush", "clflush", "info", "p"]).unwrap();
        assert_eq!(c.global.flush, Some(FlushKind::Clflush));
    }

    #[test]
    fn usage_errors() {
        for args in [
            &["pmindex", "create", "p", "--size", "12Q"][..],
            &["pmindex", "create", "p", "--engine", "nope"],
            &["pmindex", "scan", "p", "--from-excluded"],
            &["pmindex", "--flush", "bogus", "info", "p"],
            &["pmindex", "--pm-latency", "300", "info", "p"],
            &["pmindex", "bench", "--store-api", "--records", "5"],
            &["pmindex", "bench", "--preset", "nope"],
            &["pmindex", "bench", "--preset", "hart", "--records", "5"],
            &["pmindex", "bench", "--full"],
            &["pmindex", "bench", "--dist", "zipfian:2"],
            &["pmindex", "put", "p", "k"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn sizes_and_counts_parse() {
        let c = Cli::try_parse_from(["pmindex", "create", "p", "--size", "64M"]).unwrap();
        match c.command {
            Command::Create(a) => assert_eq!((a.size, a.engine.as_str()), (64 << 20, "pmlog")),
            _ => panic!("not create"),
        }
        let c = Cli::try_parse_from(["pmindex", "bench", "--records", "1_000"]).unwrap();
        match c.command {
            Command::Bench(a) => {
                assert_eq!((a.records, a.value_size.as_str()), (1000, "8"));
                assert_eq!(a.mix, ["basic,ycsb-a"]);
            }
            _ => panic!("not bench"),
        }
        let c = Cli::try_parse_from([
            "pmindex",
            "bench",
            "--mix",
            "ycsb-a",
            "--mix",
            "read=9,scan=1",
        ])
        .unwrap();
        match c.command {
            Command::Bench(a) => assert_eq!(a.mix, ["ycsb-a", "read=9,scan=1"]),
            _ => panic!("not bench"),
        }
        let c =
            Cli::try_parse_from(["pmindex", "bench", "--preset", "art-bplus", "--full"]).unwrap();
        match c.command {
            Command::Bench(a) => assert!(a.full && a.preset.is_some()),
            _ => panic!("not bench"),
        }
    }
}
