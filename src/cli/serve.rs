//! `pmindex serve` (a memcached server on a pool) and `pmindex mc-bench`
//! (the WORT paper's §5.4 experiment: mc-benchmark's `set`s then `get`s
//! against the server, every engine side by side).

use std::io::IsTerminal;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pmindex::bench::report::{fmt_bytes, fmt_count, fmt_num, Align, Table};
use pmindex::bench::summary::median;
use pmindex::bench::temp_pool::TempPool;
use pmindex::pm::PersistConfig;
use pmindex::serve::cache::MAX_DATA_LEN;
use pmindex::serve::load::{self, LoadConfig, Phase, PhaseReport};
use pmindex::serve::{Config, Server};
use pmindex::{Db, Options};
use serde_json::json;

use super::error::CliError;
use super::kv::{self, Access, How};
use super::output::{print_json, print_text, Output};

/// The engine of a pool that `serve` creates, unless `--engine` names one:
/// the fastest engine here on point reads.
pub const SERVE_ENGINE: &str = "hart";

/// What `pmindex serve` was asked.
pub struct ServeOpts<'a> {
    pub pool: &'a Path,
    pub listen: &'a str,
    pub engine: Option<&'a str>,
    pub size: u64,
    pub max_connections: usize,
    pub allow_shutdown: bool,
    pub prefault: bool,
    pub concurrency: Option<usize>,
}

/// `pmindex serve`: opens the pool (creating it if there is no such file),
/// serves it until SIGINT, SIGTERM or an allowed `shutdown`, then closes it.
pub fn serve(out: Output, how: &How, o: &ServeOpts<'_>) -> Result<(), CliError> {
    if o.max_connections == 0 || o.concurrency == Some(0) {
        return Err(CliError::Usage(
            "--max-connections and --concurrency must be at least 1".into(),
        ));
    }
    // The address first: one it cannot listen on (a typo, a port in use)
    // must not leave a new pool behind.
    let listener = std::net::TcpListener::bind(o.listen)
        .map_err(|e| CliError::Failed(format!("listen on {}: {e}", o.listen)))?;
    let created = !o.pool.exists();
    let db = if created {
        Db::create(
            o.pool,
            &Options {
                engine: Some(o.engine.unwrap_or(SERVE_ENGINE).to_string()),
                pool_size: o.size,
                persist: how.persist,
                engine_config: how.config.clone(),
                ..Options::default()
            },
        )?
    } else {
        let db = kv::open(o.pool, how, Access::Write)?;
        if let Some(e) = o.engine.filter(|&e| e != db.engine().name()) {
            return Err(CliError::Usage(format!(
                "--engine {e}: {} holds a {} index (--engine only chooses the engine of a \
                 pool that serve creates)",
                o.pool.display(),
                db.engine().name()
            )));
        }
        db
    };
    if o.prefault {
        db.prefault()?;
    }
    let (engine, items, size) = (db.engine().name(), db.len(), db.pool().size());
    pmindex::serve::stop_on_signals()
        .map_err(|e| CliError::Failed(format!("install the signal handlers: {e}")))?;
    let config = Config {
        max_connections: o.max_connections,
        allow_shutdown: o.allow_shutdown,
        concurrency: o.concurrency,
    };
    let server = Server::on(db, listener, config);
    let addr = server
        .local_addr()
        .map_err(|e| CliError::Failed(format!("listen on {}: {e}", o.listen)))?;
    if out.json {
        // One line each, for a program that reads the address and waits
        // for the end: JSON Lines.
        print_text(&format!(
            "{}\n",
            json!({
                "listening": addr.to_string(),
                "pool": o.pool.display().to_string(),
                "created": created,
                "engine": engine,
                "items": items,
                "pool_size": size,
            })
        ))?;
    } else {
        print_text(&format!(
            "{} {} ({} index, {}, {} items): memcached protocol on {addr}; \
             Ctrl-C or SIGTERM stops\n",
            if created { "created" } else { "opened" },
            o.pool.display(),
            engine,
            fmt_bytes(size),
            items,
        ))?;
    }
    let db = server
        .run()
        .map_err(|e| CliError::Failed(format!("serve on {addr}: {e}")))?;
    let items = db.len();
    drop(db);
    if out.json {
        print_text(&format!("{}\n", json!({"stopped": true, "items": items})))
    } else {
        print_text(&format!(
            "stopped; {} closed with {items} items\n",
            o.pool.display()
        ))
    }
}

/// What `pmindex mc-bench` was asked.
pub struct McBenchOpts {
    pub engines: String,
    pub server: Option<String>,
    pub clients: usize,
    pub requests: u64,
    pub keyspace: Option<u64>,
    pub value_size: usize,
    pub pipeline: usize,
    pub rounds: u32,
    pub seed: u64,
    pub dir: Option<PathBuf>,
    pub pool_size: Option<u64>,
    pub concurrency: Option<usize>,
}

/// One target's phases in one round.
struct Run {
    set: PhaseReport,
    get: PhaseReport,
}

/// `pmindex mc-bench`.
pub fn mc_bench(out: Output, persist: PersistConfig, o: &McBenchOpts) -> Result<(), CliError> {
    let usage = |m: String| Err(CliError::Usage(m));
    if !(1..=1024).contains(&o.clients) {
        return usage(format!("--clients {}: use 1 to 1024", o.clients));
    }
    if !(1..=1024).contains(&o.pipeline) {
        return usage(format!("--pipeline {}: use 1 to 1024", o.pipeline));
    }
    if o.requests == 0 || o.rounds == 0 || o.keyspace == Some(0) || o.concurrency == Some(0) {
        return usage(
            "--requests, --rounds, --keyspace and --concurrency must be at least 1".into(),
        );
    }
    if o.value_size > MAX_DATA_LEN {
        return usage(format!(
            "--value-size {}: at most {MAX_DATA_LEN} bytes",
            o.value_size
        ));
    }
    let keyspace = o.keyspace.unwrap_or(o.requests);
    // The targets: a running server, or one temporary pool per engine.
    let targets: Vec<String> = match &o.server {
        Some(s) => vec![s.clone()],
        None => {
            let names: Vec<String> = if o.engines.trim() == "all" {
                pmindex::engine::ENGINES
                    .iter()
                    .map(|e| e.name.to_string())
                    .collect()
            } else {
                o.engines.split(',').map(|s| s.trim().to_string()).collect()
            };
            for n in &names {
                pmindex::engine::find(n).map_err(|e| CliError::Usage(e.to_string()))?;
            }
            names
        }
    };
    let pool_size = match o.pool_size {
        Some(s) => s,
        None => pmindex::bench::workload::pool_size_for(
            keyspace,
            load::key(0).len() as u64,
            (o.value_size + pmindex::serve::item::HEADER_LEN) as u64,
        )?,
    };
    let dir = o
        .dir
        .clone()
        .unwrap_or_else(pmindex::bench::suite::default_pool_dir);
    pmindex::bench::temp_pool::remove_on_signal();
    let mut runs: Vec<Vec<Run>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..o.rounds {
        for (t, target) in targets.iter().enumerate() {
            let label = if o.rounds > 1 {
                format!("{target} (round {} of {})", round + 1, o.rounds)
            } else {
                target.clone()
            };
            let mut cfg = LoadConfig {
                addr: "127.0.0.1:0".parse().expect("an address"),
                clients: o.clients,
                requests: o.requests,
                keyspace,
                value_size: o.value_size,
                pipeline: o.pipeline,
                seed: o.seed,
            };
            let run = if o.server.is_some() {
                cfg.addr = target
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| CliError::Usage(format!("--server {target}: not an address")))?;
                phases(out, &cfg, &label)?
            } else {
                let opts = Options {
                    engine: Some(target.clone()),
                    pool_size,
                    persist,
                    ..Options::default()
                };
                let mut pool = TempPool::create(&dir, &format!("mc-{target}"), &opts)?;
                let db = pool.take().expect("a fresh pool holds its database");
                let config = Config {
                    concurrency: o.concurrency,
                    ..Config::default()
                };
                let server = Server::bind(db, "127.0.0.1:0", config)
                    .map_err(|e| CliError::Failed(format!("start a server: {e}")))?;
                cfg.addr = server
                    .local_addr()
                    .map_err(|e| CliError::Failed(format!("start a server: {e}")))?;
                let stop = server.stop_handle();
                let (result, db) = std::thread::scope(|s| {
                    let serving = s.spawn(move || server.run());
                    let result = phases(out, &cfg, &label);
                    stop.stop();
                    let db = serving.join().expect("the server thread does not panic");
                    (result, db)
                });
                pool.restore(db.map_err(|e| CliError::Failed(format!("serve: {e}")))?);
                result?
            };
            runs[t].push(run);
        }
    }
    report(out, o, keyspace, &targets, &runs)
}

/// The `set` phase, then the `get` phase, with a progress bar each on a
/// terminal.
fn phases(out: Output, cfg: &LoadConfig, label: &str) -> Result<Run, CliError> {
    let phase = |p: Phase, name: &str| -> Result<PhaseReport, CliError> {
        let done = AtomicU64::new(0);
        let bar = (!out.json && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::new(cfg.requests);
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec})")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.set_message(format!("{label}: {name}"));
            b
        });
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| load::run_phase(cfg, p, &done));
            while !h.is_finished() {
                if let Some(b) = &bar {
                    b.set_position(done.load(std::sync::atomic::Ordering::Relaxed));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            h.join().expect("the load threads do not panic")
        });
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        r.map_err(|e| CliError::Failed(format!("{label}: {name} phase: {e}")))
    };
    let set = phase(Phase::Set, "set")?;
    let get = phase(Phase::Get, "get")?;
    Ok(Run { set, get })
}

fn report(
    out: Output,
    o: &McBenchOpts,
    keyspace: u64,
    targets: &[String],
    runs: &[Vec<Run>],
) -> Result<(), CliError> {
    let med = |xs: Vec<f64>| median(xs).unwrap_or(f64::NAN);
    let lat = |r: &PhaseReport, f: fn(&pmindex::bench::report::LatencySummary) -> f64| {
        r.latency.as_ref().map_or(f64::NAN, f)
    };
    if out.json {
        let rows: Vec<_> = targets
            .iter()
            .zip(runs)
            .map(|(t, rs)| {
                json!({
                    "target": t,
                    "rounds": rs.iter().map(|r| json!({"set": r.set, "get": r.get})).collect::<Vec<_>>(),
                    "set_ops_per_sec_median": med(rs.iter().map(|r| r.set.ops_per_sec).collect()),
                    "get_ops_per_sec_median": med(rs.iter().map(|r| r.get.ops_per_sec).collect()),
                })
            })
            .collect();
        return print_json(&json!({
            "clients": o.clients,
            "requests": o.requests,
            "keyspace": keyspace,
            "value_size": o.value_size,
            "pipeline": o.pipeline,
            "rounds": o.rounds,
            "results": rows,
        }));
    }
    let mut table = Table::new(&[
        (
            if o.server.is_some() {
                "server"
            } else {
                "engine"
            },
            Align::Left,
        ),
        ("set/s", Align::Right),
        ("set p50 µs", Align::Right),
        ("set p99 µs", Align::Right),
        ("get/s", Align::Right),
        ("get p50 µs", Align::Right),
        ("get p99 µs", Align::Right),
        ("get hits", Align::Right),
    ]);
    for (t, rs) in targets.iter().zip(runs) {
        let m = |f: &dyn Fn(&Run) -> f64| med(rs.iter().map(f).collect());
        table.row(vec![
            t.clone(),
            fmt_count(m(&|r| r.set.ops_per_sec)),
            fmt_num(m(&|r| lat(&r.set, |l| l.p50_ns)) / 1e3),
            fmt_num(m(&|r| lat(&r.set, |l| l.p99_ns)) / 1e3),
            fmt_count(m(&|r| r.get.ops_per_sec)),
            fmt_num(m(&|r| lat(&r.get, |l| l.p50_ns)) / 1e3),
            fmt_num(m(&|r| lat(&r.get, |l| l.p99_ns)) / 1e3),
            format!(
                "{:.1}%",
                m(&|r| 100.0 * r.get.hits as f64 / r.get.requests.max(1) as f64)
            ),
        ]);
    }
    print_text(&format!(
        "mc-bench: {} clients, {} requests per phase, keys from a space of {}, {}-byte values, \
         pipeline {}{}\n(latency: one pipelined batch's round trip; medians of rounds)\n\n{table}",
        o.clients,
        o.requests,
        keyspace,
        o.value_size,
        o.pipeline,
        if o.rounds > 1 {
            format!(", {} rounds", o.rounds)
        } else {
            String::new()
        },
    ))
}
