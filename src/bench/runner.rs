//! Runs experiments on engines: one pool per engine and round, phases in
//! order, each timed on its own.
//!
//! # Fair comparison
//! Every engine runs in this one process, on the same key set and the same
//! operation streams. An experiment runs in rounds; in each round every
//! engine runs once, in the listed order in even rounds and in reverse order
//! in odd rounds, so that machine drift (other load, thermal throttling,
//! page-cache state) falls on all engines alike. The report gives medians
//! over the rounds ([`super::summary`]).
//!
//! # Timing a phase
//! A phase's operations are split over its threads (each thread a
//! contiguous share). The threads wait at a start gate, then each notes its
//! start; the phase's wall time runs from the earliest start to the latest
//! end. Nothing else is timed: key sets, random orders and pools are made
//! before, and PM counters are read before the threads start and after
//! they have all ended ([`crate::pm::counters()`] are process-wide, so nothing
//! else may touch a pool meanwhile).
//!
//! # Latency sampling
//! Every [`RunConfig::sample_every`]-th operation of each thread is timed
//! on its own (two `Instant::now` calls, about 40 ns) and recorded in an
//! HDR histogram (3 significant digits) per kind of operation; the
//! percentiles come from those samples. In a `search-many` phase a sample
//! is one multi-key call, taken when the call holds such an operation.
//! The sampled operations run inside the timed phase. Reading the clock
//! waits for the operations before it to finish, so a timed search runs
//! alone, without the overlap of its PM misses with its neighbours' that
//! the others get: timing 1 in 8 made searches up to 30% slower, 1 in 32
//! (the default) costs a few percent (docs/design.md §9, "The bench's
//! timed loop").
//!
//! # The loop
//! A thread runs its share in runs of up to [`super::PROGRESS_BATCH`]
//! operations, checking the stop flag and its clock between runs, and each
//! kind of work has a loop of its own ([`ops`], and
//! [`PhaseArgs::searches`] for a search phase): the harness's own
//! instructions between two searches limit how far the CPU overlaps them.
//!
//! # Checking results
//! A read checks the value's length and its key tag
//! ([`super::workload::value_matches`]); so does every record a scan
//! returns. A missing key is an *error* when the key must be present (no
//! delete has run, and the key was inserted before the phase or by the same
//! thread), and a *miss* otherwise. An insert that finds its key present is
//! an error (the keys are distinct).
//!
//! # Time limit
//! A range-scan phase, or a mix with scans, stops after
//! [`RunConfig::scan_time_limit`] (each thread checks its own clock between
//! batches) and reports the operations done, marked `stopped_early`: an
//! engine without ordered scans answers each one by sorting the whole index
//! ([`crate::Db::scan_with`]), which must not hold a run up for minutes.
//! Stopping such a phase early leaves the database consistent with what the
//! later phases expect (scans change nothing; a mix's inserts are counted as
//! they happen).
//!
//! # Progress
//! Worker threads add their operations to a shared counter every
//! [`super::PROGRESS_BATCH`] operations (or fewer for short phases); the
//! calling thread reports the counter to [`Progress`] while it waits, so the
//! progress bar costs the workers nothing measurable.

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::alloc::dram_in_use;
use super::dist::{Distribution, KeyChooser, ScanLen};
use super::experiment::{op_stream_seed, thread_share, Experiment, PhaseSpec};
use super::keys::KeySet;
use super::mix::{OpKind, OpPicker};
use super::report::{
    EngineRun, LatencySummary, MemoryReport, OpResult, PhaseResult, RecoveryReport,
};
use super::temp_pool::TempPool;
use super::workload::{mix64, pool_size_for, shuffled_order, value_matches, ValueGen};
use super::{BenchError, BenchResult, Progress, PROGRESS_BATCH};
use crate::db::{Db, Options};
use crate::engine::EngineConfig;
use crate::error::{Error, Result};
use crate::pm::{self, FlushKind, PersistConfig};

/// Lowest and highest latency the histograms hold, in ns (1 ns to 100 s).
const HIST_BOUNDS: (u64, u64) = (1, 100_000_000_000);
/// Significant digits of the histograms.
const HIST_DIGITS: u8 = 3;

/// An engine as the bench runs it: an engine of this build, with settings
/// (`--engines hart:persist_order=paper`), so that one engine can run
/// beside itself with other settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSpec {
    /// How reports name it: the engine's name, then `:key=value` for each
    /// setting, keys without the engine's prefix, in the order first given
    /// (`hart:persist_order=paper`). Two entries with the same engine and
    /// settings are one engine, whatever their order ([`Self::same`]).
    pub label: String,
    /// The engine ([`crate::engine::ENGINES`]).
    pub name: &'static str,
    /// Its settings, keys with the engine's prefix (`hart.persist_order`).
    pub config: EngineConfig,
}

impl EngineSpec {
    /// Parses `NAME[:KEY=VALUE]...`: an engine of this build, and settings
    /// of it, each KEY with or without the engine's prefix (`hart:stripes=
    /// hash_key` or `hart:hart.stripes=hash_key`). Whether the engine knows
    /// the settings is checked when a pool is made ([`Self::check`]).
    pub fn parse(s: &str) -> Result<EngineSpec> {
        let mut parts = s.split(':').map(str::trim);
        let name = parts.next().unwrap_or("");
        let info = crate::engine::find(name)?;
        let mut label = info.name.to_string();
        let mut config = EngineConfig::new();
        for kv in parts {
            let k =
                crate::engine::add_setting(&mut config, info.name, kv).map_err(|e| match e {
                    Error::InvalidArgument(m) if !kv.contains('=') => Error::InvalidArgument(
                        format!("engine `{s}`: {m} (as in `{}:KEY=VALUE`)", info.name),
                    ),
                    Error::InvalidArgument(m) => {
                        Error::InvalidArgument(format!("engine `{s}`: {m}"))
                    }
                    e => e,
                })?;
            label.push_str(&format!(":{k}={}", config[&format!("{}.{k}", info.name)]));
        }
        Ok(EngineSpec {
            label,
            name: info.name,
            config,
        })
    }

    /// The same engine with the same settings (labels may differ in the
    /// order of the settings, or in prefixes and spaces).
    pub fn same(&self, other: &EngineSpec) -> bool {
        self.name == other.name && self.config == other.config
    }

    /// The engine with no settings.
    pub fn plain(name: &'static str) -> EngineSpec {
        EngineSpec {
            label: name.to_string(),
            name,
            config: EngineConfig::new(),
        }
    }

    /// Makes an empty index with these settings in anonymous memory, so
    /// that a setting the engine does not know, or a value it refuses,
    /// fails before any experiment runs.
    pub fn check(&self) -> Result<()> {
        if self.config.is_empty() {
            return Ok(());
        }
        Db::create_anonymous(&Options {
            engine: Some(self.name.to_string()),
            engine_config: self.config.clone(),
            pool_size: 64 << 20,
            ..Options::default()
        })
        .map(drop)
        .map_err(|e| {
            let why = match e {
                Error::InvalidArgument(m) => m,
                e => e.to_string(),
            };
            Error::InvalidArgument(format!("engine `{}`: {why}", self.label))
        })
    }
}

/// How to run experiments (what is the same for all of them).
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The engines, in the order of even rounds.
    pub engines: Vec<EngineSpec>,
    /// The label of the engine ratios are taken against (one of `engines`).
    pub baseline: String,
    /// Rounds per experiment.
    pub rounds: u32,
    /// Seed of key sets, values and operation streams.
    pub seed: u64,
    /// Where pool files go.
    pub dir: PathBuf,
    /// Pool size; `None` sizes each pool from its experiment.
    pub pool_size: Option<u64>,
    /// The flush instruction (the latency comes from each experiment).
    pub flush: FlushKind,
    /// The word list of the `dictionary` key set.
    pub dictionary: PathBuf,
    /// Time every N-th operation of each thread.
    pub sample_every: u32,
    /// Stop range-scan phases (and mixes with scans) after this long; the
    /// figures are then over the operations done. `None`: no limit.
    pub scan_time_limit: Option<Duration>,
    /// Threads of every [`PhaseSpec::Load`] (not `insert-many`, which
    /// keeps the experiment's); `None`: the experiment's threads.
    pub load_threads: Option<usize>,
    /// Whether every [`PhaseSpec::Load`] upserts its keys ([`Db::put`], the
    /// papers' insert) instead of inserting them if absent ([`Db::insert`]).
    pub load_by_put: bool,
    /// Map every page of each pool after it is created and after it is
    /// reopened (`Db::prefault`), outside the timed phases.
    pub prefault: bool,
}

/// What an experiment needs before any engine runs it.
#[derive(Debug)]
pub struct Prepared {
    /// The keys (loaded and to insert).
    pub keys: KeySet,
    /// The pool size each engine gets.
    pub pool_size: u64,
    /// Flush instruction and latency.
    pub persist: PersistConfig,
}

/// Generates the key set and sizes the pool of `exp`.
pub fn prepare(cfg: &RunConfig, exp: &Experiment) -> BenchResult<Prepared> {
    exp.check()?;
    let persist = PersistConfig::new(cfg.flush, exp.latency)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    let extra = exp.planned_inserts(cfg.seed);
    let keys = KeySet::generate(exp.keys, exp.records, extra, cfg.seed, &cfg.dictionary)?;
    let pool_size = match cfg.pool_size {
        Some(s) => s,
        None => pool_size_for(keys.len() as u64, keys.max_len() as u64, exp.value_size)?,
    };
    Ok(Prepared {
        keys,
        pool_size,
        persist,
    })
}

/// Runs every phase of `exp` on the engine `which` in a fresh temporary
/// pool.
pub fn run_engine(
    cfg: &RunConfig,
    exp: &Experiment,
    prep: &Prepared,
    which: &EngineSpec,
    round: u32,
    progress: &mut dyn Progress,
) -> BenchResult<EngineRun> {
    let started = Instant::now();
    let dram_before = dram_in_use();
    let engine = which.label.as_str();
    let opts = Options {
        engine: Some(which.name.to_string()),
        engine_config: which.config.clone(),
        pool_size: prep.pool_size,
        persist: prep.persist,
        ..Options::default()
    };
    let mut pool = TempPool::create(&cfg.dir, which.name, &opts)?;
    if cfg.prefault {
        prefault(&pool)?;
    }
    let mapping = pool.db().pool().mapping_mode();
    let mut prefaulted = pool.db().pool().is_prefaulted();
    let mut count = 0u64; // keys 0..count have been inserted
    let mut deleted = false; // some key may have been deleted
    let mut phases: Vec<PhaseResult> = Vec::new();
    let mut memory = None;
    let mut huge_page_bytes = None;
    let mut recovery = None;
    for (pi, spec) in exp.phases.iter().enumerate() {
        let context = || {
            format!(
                "engine `{engine}`, experiment `{}`, phase `{}`",
                exp.id,
                spec.name()
            )
        };
        let seed = phase_seed(cfg.seed, &exp.phases, pi);
        let limit = match spec {
            PhaseSpec::Scan { .. } => cfg.scan_time_limit,
            PhaseSpec::Mix { mix, .. } if mix.has(OpKind::Scan) => cfg.scan_time_limit,
            _ => None,
        };
        let threads = match spec {
            PhaseSpec::Load => cfg.load_threads.unwrap_or(exp.threads),
            _ => exp.threads,
        };
        let run = |work: Work<'_>, count: u64, deleted: bool, progress: &mut dyn Progress| {
            run_phase(
                &PhaseArgs {
                    db: pool.db(),
                    keys: &prep.keys,
                    value_size: exp.value_size as usize,
                    threads,
                    sample_every: u64::from(cfg.sample_every.max(1)),
                    seed,
                    stream: (cfg.seed, pi),
                    count,
                    deleted,
                    engine,
                    name: spec.name(),
                    limit,
                    by_put: cfg.load_by_put && *spec == PhaseSpec::Load,
                },
                work,
                progress,
            )
            .map_err(|e| BenchError::failed(context(), e))
        };
        let result = match spec {
            PhaseSpec::Load => {
                let r = run(Work::Load, 0, deleted, progress)?;
                count = exp.records;
                let stats = pool.db().stats();
                huge_page_bytes = pool.db().pool().huge_page_bytes();
                memory = Some(MemoryReport {
                    records: exp.records,
                    dram_bytes: dram_in_use()
                        .zip(dram_before)
                        .map(|(now, before)| now.saturating_sub(before)),
                    engine_dram_bytes: stats.dram_bytes,
                    pm_bytes: stats.pm_bytes,
                });
                r
            }
            PhaseSpec::Recover => {
                let keys_before = pool.db().len();
                progress.start(engine, "recovery", keys_before);
                let before = pm::counters();
                let open = Options {
                    engine: Some(which.name.to_string()),
                    engine_config: which.config.clone(),
                    persist: prep.persist,
                    ..Options::default()
                };
                let took = pool.reopen(&open);
                let counters = pm::counters() - before;
                progress.advance(keys_before);
                progress.finish();
                let took = took?;
                if cfg.prefault {
                    prefault(&pool)?;
                }
                prefaulted &= pool.db().pool().is_prefaulted();
                let keys_after = pool.db().len();
                let mut r = PhaseResult::new("recovery", 1, keys_after, took, counters);
                r.errors = keys_before.abs_diff(keys_after);
                let build_secs = phases
                    .iter()
                    .find(|p| p.phase == PhaseSpec::Load.name())
                    .map_or(0.0, |p| p.secs);
                recovery = Some(RecoveryReport {
                    records: keys_before,
                    build_secs,
                    recovery_secs: took.as_secs_f64(),
                    dram_bytes_after: dram_in_use()
                        .zip(dram_before)
                        .map(|(now, before)| now.saturating_sub(before)),
                });
                r
            }
            PhaseSpec::InsertMany { batch } => {
                let r = run(Work::LoadMany { batch: *batch }, 0, false, progress)?;
                // Every record is back (delete, before, emptied the index).
                count = exp.records;
                deleted = false;
                r
            }
            PhaseSpec::SearchMany { batch } => {
                // `search`'s order (its seed, above).
                let order = shuffled_order(seed, 1, count as usize);
                let work = Work::EachMany {
                    order: &order,
                    batch: *batch,
                };
                run(work, count, deleted, progress)?
            }
            PhaseSpec::Search | PhaseSpec::Update | PhaseSpec::Delete => {
                let op = match spec {
                    PhaseSpec::Search => OpKind::Read,
                    PhaseSpec::Update => OpKind::Update,
                    _ => OpKind::Delete,
                };
                let order = shuffled_order(seed, 1, count as usize);
                let mut r = run(Work::Each { op, order: &order }, count, deleted, progress)?;
                if op == OpKind::Delete {
                    deleted = true;
                    // Every key ever inserted was deleted: none may remain.
                    r.errors += pool.db().len();
                }
                r
            }
            PhaseSpec::Mix {
                mix,
                ops,
                dist,
                scan,
            } => {
                deleted |= mix.has(OpKind::Delete);
                let work = Work::Mix {
                    picker: mix.picker(),
                    chooser: KeyChooser::new(*dist, count, seed),
                    ops: *ops,
                    scan: *scan,
                    wrap: false,
                };
                let r = run(work, count, deleted, progress)?;
                count += r
                    .by_op
                    .iter()
                    .find(|o| o.op == OpKind::Insert)
                    .map_or(0, |o| o.ops);
                r
            }
            PhaseSpec::Scan { count: n, len, .. } => {
                let work = Work::Mix {
                    picker: super::mix::Mix::parse("scan=1")
                        .expect("`scan=1` is a valid mix")
                        .picker(),
                    chooser: KeyChooser::new(Distribution::Uniform, count, seed),
                    ops: *n,
                    scan: *len,
                    wrap: true,
                };
                run(work, count, deleted, progress)?
            }
        };
        phases.push(result);
    }
    drop(pool);
    Ok(EngineRun {
        engine: engine.to_string(),
        round,
        phases,
        memory,
        recovery,
        pool_size: prep.pool_size,
        mapping,
        huge_page_bytes,
        prefaulted,
        secs: started.elapsed().as_secs_f64(),
    })
}

/// Maps every page of `pool` (`--prefault`), outside any timing.
fn prefault(pool: &TempPool) -> BenchResult<()> {
    pool.db()
        .prefault()
        .map_err(|e| BenchError::failed(format!("prefault {}", pool.path().display()), e))
}

/// The seed of phase `pi`'s keys (orders, choices, scan starts). Each
/// phase has its own, except that `search-many` reads in `search`'s
/// order; it takes no index of its own, so that adding it changes no
/// other phase's keys.
fn phase_seed(seed: u64, phases: &[PhaseSpec], pi: usize) -> u64 {
    let index = match phases[pi] {
        PhaseSpec::SearchMany { .. } => phases
            .iter()
            .position(|p| *p == PhaseSpec::Search)
            .unwrap_or(pi),
        _ => phases[..pi]
            .iter()
            .filter(|p| !matches!(p, PhaseSpec::SearchMany { .. }))
            .count(),
    };
    mix64(seed ^ mix64(index as u64 + 1))
}

/// What a phase's threads do.
enum Work<'a> {
    /// Insert keys `0..records` (thread `t` a contiguous share).
    Load,
    /// `op` on every key of `order` (thread `t` a contiguous share).
    Each { op: OpKind, order: &'a [u32] },
    /// Reads of every key of `order`, `batch` keys per multi-key get.
    EachMany { order: &'a [u32], batch: usize },
    /// Inserts of keys `0..records`, `batch` per multi-key put (thread `t`
    /// a contiguous share).
    LoadMany { batch: usize },
    /// `ops` operations drawn from `picker`, keys from `chooser`.
    Mix {
        picker: OpPicker,
        chooser: KeyChooser,
        ops: u64,
        scan: ScanLen,
        /// Scans that reach the last key go on from the first, so that each
        /// returns its full length (range-query phases).
        wrap: bool,
    },
}

impl Work<'_> {
    fn total(&self, records: u64) -> u64 {
        match self {
            Work::Load | Work::LoadMany { .. } => records,
            Work::Each { order, .. } | Work::EachMany { order, .. } => order.len() as u64,
            Work::Mix { ops, .. } => *ops,
        }
    }
}

/// Everything a phase's threads share (read-only).
struct PhaseArgs<'a> {
    db: &'a Db,
    keys: &'a KeySet,
    value_size: usize,
    threads: usize,
    sample_every: u64,
    /// Seed of the key choice.
    seed: u64,
    /// Seed and phase index of the operation-kind streams (the same as
    /// [`Experiment::planned_inserts`] draws).
    stream: (u64, usize),
    /// Keys `0..count` were inserted before the phase.
    count: u64,
    /// Some key may be missing (a delete ran before or runs in this phase).
    deleted: bool,
    engine: &'a str,
    name: &'a str,
    /// Stop after this long (scan phases).
    limit: Option<Duration>,
    /// Inserts upsert ([`RunConfig::load_by_put`]; load phases only).
    by_put: bool,
}

/// Shared counters of a running phase.
struct Live {
    /// Keys claimed so far (inserted, or being inserted).
    next_key: AtomicU64,
    /// Set when a thread fails: the others stop at their next batch.
    stop: AtomicBool,
    /// Operations done (updated in batches).
    done: AtomicU64,
    /// Threads finished.
    finished: AtomicUsize,
    /// Threads at the start gate ([`Live::start_together`]).
    arrived: AtomicUsize,
}

impl Live {
    /// Waits until all `threads` have arrived, or until one failed (a
    /// thread that panicked before arriving sets `stop` instead, see
    /// [`run_phase`]), so that no thread waits for ever. A spin with
    /// yields rather than a `Barrier`, which a missing thread would hang.
    fn start_together(&self, threads: usize) {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while self.arrived.load(Ordering::Acquire) < threads && !self.stop.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
    }
}

/// What one thread measured.
struct ThreadOut {
    start: Instant,
    end: Instant,
    ops: [u64; 6],
    misses: [u64; 6],
    errors: u64,
    scans: u64,
    scanned: u64,
    hist: [Option<Histogram<u64>>; 6],
    failure: Option<Error>,
    /// Stopped at the time limit.
    stopped: bool,
}

struct ThreadState {
    values: ValueGen,
    updates: ValueGen,
    ops: [u64; 6],
    misses: [u64; 6],
    errors: u64,
    scans: u64,
    scanned: u64,
    hist: [Option<Histogram<u64>>; 6],
}

impl ThreadState {
    fn new(args: &PhaseArgs<'_>) -> Self {
        ThreadState {
            values: ValueGen::new(args.stream.0, args.value_size),
            updates: ValueGen::updated(args.stream.0, args.value_size),
            ops: [0; 6],
            misses: [0; 6],
            errors: 0,
            scans: 0,
            scanned: 0,
            hist: Default::default(),
        }
    }

    fn record(&mut self, kind: OpKind, ns: u64) {
        self.hist[kind.index()]
            .get_or_insert_with(|| {
                Histogram::new_with_bounds(HIST_BOUNDS.0, HIST_BOUNDS.1, HIST_DIGITS)
                    .expect("the histogram bounds are constants that hdrhistogram accepts")
            })
            .saturating_record(ns.max(1));
    }

    fn missed(&mut self, kind: OpKind, must_exist: bool) {
        if must_exist {
            self.errors += 1;
        } else {
            self.misses[kind.index()] += 1;
        }
    }
}

impl PhaseArgs<'_> {
    /// Runs one operation on key `idx`.
    fn exec(
        &self,
        st: &mut ThreadState,
        kind: OpKind,
        idx: u64,
        must_exist: bool,
        scan: (u64, bool),
    ) -> Result<()> {
        let (scan_len, wrap) = scan;
        let Some(key) = self.key(st, kind, idx) else {
            return Ok(());
        };
        let vs = self.value_size;
        let db = self.db;
        match kind {
            // A load's keys are new: an upsert that replaced counts as an
            // error, as an insert that found its key does.
            OpKind::Insert if self.by_put => {
                if db.put(key, st.values.value_of(key))? {
                    st.errors += 1;
                }
            }
            OpKind::Insert => match db.insert(key, st.values.value_of(key)) {
                Ok(()) => {}
                Err(Error::KeyExists) => st.errors += 1,
                Err(e) => return Err(e),
            },
            OpKind::Read => {
                self.get(st, kind, key, must_exist)?;
            }
            OpKind::Update => match db.update(key, st.updates.value_of(key)) {
                Ok(()) => {}
                Err(Error::KeyNotFound) => st.missed(kind, must_exist),
                Err(e) => return Err(e),
            },
            OpKind::Delete => {
                if !db.delete(key)? {
                    st.missed(kind, must_exist);
                }
            }
            OpKind::Scan => {
                let (mut got, mut bad) = (0u64, 0u64);
                db.scan_with(Bound::Included(key), Bound::Unbounded, |k, v| {
                    count_record(k, v, vs, scan_len, &mut got, &mut bad)
                })?;
                if wrap && got < scan_len {
                    db.scan_with(Bound::Unbounded, Bound::Excluded(key), |k, v| {
                        count_record(k, v, vs, scan_len, &mut got, &mut bad)
                    })?;
                }
                st.errors += bad;
                st.scans += 1;
                st.scanned += got;
            }
            OpKind::ReadModifyWrite => {
                if self.get(st, kind, key, must_exist)? {
                    match db.update(key, st.updates.value_of(key)) {
                        Ok(()) => {}
                        Err(Error::KeyNotFound) => st.missed(kind, must_exist),
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads the keys `idxs` in turn, as [`Self::exec`] of [`OpKind::Read`]
    /// would each, timing those `sampler` picks: a search phase, or a mix
    /// of reads alone.
    ///
    /// A loop of its own, with its counts in registers: one search's PM
    /// misses overlap the next searches' only while few instructions lie
    /// between them, and the general loop ([`ops`] over `exec`) made
    /// searches take 1.1 to 1.7 times this loop's time (docs/design.md
    /// §9, "The bench's timed loop").
    fn searches(
        &self,
        st: &mut ThreadState,
        sampler: &mut Sampler,
        idxs: impl Iterator<Item = u64>,
    ) -> Result<()> {
        let (keys, vs) = (self.keys, self.value_size);
        let (mut wrong, mut done) = (0u64, 0u64);
        let mut outcome = Ok(());
        for idx in idxs {
            let t0 = sampler.next().then(Instant::now);
            let Some(key) = keys.try_get(idx as usize) else {
                // As in `exec`: a bug in the planning, reported as an error.
                wrong += 1;
                done += 1;
                continue;
            };
            match self.db.get_with(key, |v| value_matches(v, key, vs)) {
                Ok(Some(ok)) => wrong += u64::from(!ok),
                Ok(None) => st.missed(OpKind::Read, self.must_exist(idx)),
                Err(e) => outcome = Err(e),
            }
            done += 1;
            if let Some(t0) = t0 {
                st.record(OpKind::Read, t0.elapsed().as_nanos() as u64);
            }
            if outcome.is_err() {
                break;
            }
        }
        st.ops[OpKind::Read.index()] += done;
        st.errors += wrong;
        outcome
    }

    /// Counts an operation of `kind` on key `idx` and returns the key, or
    /// counts an error if there is no such key: the key set was sized for
    /// the planned inserts, and running past it would be a bug in the
    /// planning.
    #[inline(always)]
    fn key(&self, st: &mut ThreadState, kind: OpKind, idx: u64) -> Option<&[u8]> {
        st.ops[kind.index()] += 1;
        if idx < self.keys.len() as u64 {
            Some(self.keys.get(idx as usize))
        } else {
            st.errors += 1;
            None
        }
    }

    /// Looks `key` up and checks its value (a wrong value is an error, a
    /// missing key a miss or an error); whether the key was found.
    #[inline(always)]
    fn get(
        &self,
        st: &mut ThreadState,
        kind: OpKind,
        key: &[u8],
        must_exist: bool,
    ) -> Result<bool> {
        match self
            .db
            .get_with(key, |v| value_matches(v, key, self.value_size))?
        {
            Some(ok) => {
                st.errors += u64::from(!ok);
                Ok(true)
            }
            None => {
                st.missed(kind, must_exist);
                Ok(false)
            }
        }
    }

    /// Whether key `idx` must be present (so that a miss is an error).
    fn must_exist(&self, idx: u64) -> bool {
        !self.deleted && (self.threads == 1 || idx < self.count)
    }

    /// Inserts the keys `idxs` with one [`Db::put_many`] call, with the
    /// values [`Self::exec`] gives them (`values` is scratch space).
    fn exec_put_many(
        &self,
        st: &mut ThreadState,
        idxs: std::ops::Range<u64>,
        values: &mut Vec<u8>,
    ) -> Result<()> {
        let want = idxs.end - idxs.start;
        st.ops[OpKind::Insert.index()] += want;
        let end = idxs.end.min(self.keys.len() as u64);
        let idxs = idxs.start.min(end)..end;
        // As in `exec`: keys past the set are a bug in the planning.
        st.errors += want - (idxs.end - idxs.start);
        let vs = self.value_size;
        values.clear();
        for idx in idxs.clone() {
            values.extend_from_slice(st.values.value_of(self.keys.get(idx as usize)));
        }
        let items: Vec<(&[u8], &[u8])> = idxs
            .enumerate()
            .map(|(j, idx)| (self.keys.get(idx as usize), &values[j * vs..(j + 1) * vs]))
            .collect();
        self.db.put_many(&items)
    }

    /// Reads the keys `idxs` with one [`Db::get_many_with`] call and checks
    /// each value as [`Self::exec`] does (`keys` and `looked_up`, the
    /// indices of `keys`, are scratch space).
    fn exec_many<'k>(
        &'k self,
        st: &mut ThreadState,
        idxs: &[u32],
        keys: &mut Vec<&'k [u8]>,
        looked_up: &mut Vec<u32>,
    ) -> Result<()> {
        let kind = OpKind::Read;
        st.ops[kind.index()] += idxs.len() as u64;
        keys.clear();
        looked_up.clear();
        for &idx in idxs {
            if (idx as usize) < self.keys.len() {
                keys.push(self.keys.get(idx as usize));
                looked_up.push(idx);
            } else {
                // As in `exec`: a bug in the planning, reported as an error.
                st.errors += 1;
            }
        }
        let vs = self.value_size;
        self.db.get_many_with(keys, |i, v| match v {
            Some(v) => st.errors += u64::from(!value_matches(v, keys[i], vs)),
            None => st.missed(kind, self.must_exist(u64::from(looked_up[i]))),
        })
    }
}

/// Which operations of a thread are timed: every `every`-th, from the
/// first, found by a countdown rather than a division per operation.
struct Sampler {
    every: u64,
    left: u64,
}

impl Sampler {
    fn new(every: u64) -> Self {
        Sampler {
            every: every.max(1),
            left: 0,
        }
    }

    /// Whether the next operation is timed.
    #[inline(always)]
    fn next(&mut self) -> bool {
        if self.left == 0 {
            self.left = self.every - 1;
            true
        } else {
            self.left -= 1;
            false
        }
    }
}

/// Runs the operations `run` of a thread: `op(st, i)` runs operation `i`
/// and returns its kind; those `sampler` picks are timed on their own.
///
/// Generic over `op`, so that each kind of work gets a loop of its own with
/// its operation inlined, with no division and no `match` on the work kind
/// per operation (docs/design.md §9, "The bench's timed loop").
#[inline(always)]
fn ops(
    st: &mut ThreadState,
    sampler: &mut Sampler,
    run: std::ops::Range<u64>,
    mut op: impl FnMut(&mut ThreadState, u64) -> Result<OpKind>,
) -> Result<()> {
    for i in run {
        let t0 = sampler.next().then(Instant::now);
        let kind = op(st, i)?;
        if let Some(t0) = t0 {
            st.record(kind, t0.elapsed().as_nanos() as u64);
        }
    }
    Ok(())
}

/// Counts one record a scan returned (and whether its value is wrong);
/// returns whether the scan wants more.
#[inline]
fn count_record(k: &[u8], v: &[u8], vs: usize, len: u64, got: &mut u64, bad: &mut u64) -> bool {
    if !value_matches(v, k, vs) {
        *bad += 1;
    }
    *got += 1;
    *got < len
}

/// Runs thread `t`'s share of `work`.
fn run_thread(
    args: &PhaseArgs<'_>,
    live: &Live,
    work: &Work<'_>,
    t: usize,
    batch: u64,
) -> ThreadOut {
    let mut st = ThreadState::new(args);
    let total = work.total(args.keys.records() as u64);
    let n = thread_share(total, args.threads, t);
    // First item of this thread's share (for Load, Each and EachMany).
    let first: u64 = (0..t).map(|u| thread_share(total, args.threads, u)).sum();
    let (mut op_rng, mut key_rng, mut chooser, picker, scan) = match work {
        Work::Mix {
            picker,
            chooser,
            scan,
            ..
        } => {
            let s = op_stream_seed(args.stream.0, args.stream.1, t);
            (
                Some(SmallRng::seed_from_u64(s)),
                Some(SmallRng::seed_from_u64(mix64(s ^ args.seed))),
                Some(chooser.clone()),
                Some(picker),
                Some(*scan),
            )
        }
        _ => (None, None, None, None, None),
    };
    let mut failure = None;
    let mut stopped = false;
    live.start_together(args.threads);
    let start = Instant::now();
    let mut reported = 0;
    // Reports the operations done up to `i`; whether to stop.
    let mut checkpoint = |i: u64, stopped: &mut bool| {
        live.done.fetch_add(i - reported, Ordering::Relaxed);
        reported = i;
        if live.stop.load(Ordering::Relaxed) {
            return true;
        }
        *stopped = args.limit.is_some_and(|l| start.elapsed() >= l);
        *stopped
    };
    if let Work::LoadMany { batch: g } | Work::EachMany { batch: g, .. } = work {
        // Calls of up to `g` keys: multi-key puts of keys in load order, or
        // multi-key gets of `order`'s keys.
        let g = (*g).max(1) as u64;
        let mut values = Vec::new();
        let (mut keys, mut looked_up) = (Vec::new(), Vec::new());
        let (mut i, mut last) = (0, 0);
        while i < n {
            if i - last >= batch {
                last = i;
                if checkpoint(i, &mut stopped) {
                    break;
                }
            }
            // Timed if it holds an operation that `each` would time.
            let len = g.min(n - i);
            let timed =
                i % args.sample_every == 0 || i % args.sample_every + len > args.sample_every;
            let t0 = timed.then(Instant::now);
            let (from, to) = (first + i, first + i + len);
            let (kind, outcome) = match work {
                Work::LoadMany { .. } => (
                    OpKind::Insert,
                    args.exec_put_many(&mut st, from..to, &mut values),
                ),
                Work::EachMany { order, .. } => (
                    OpKind::Read,
                    args.exec_many(
                        &mut st,
                        &order[from as usize..to as usize],
                        &mut keys,
                        &mut looked_up,
                    ),
                ),
                _ => unreachable!("only multi-key work runs here"),
            };
            if let Err(e) = outcome {
                failure = Some(e);
                live.stop.store(true, Ordering::Relaxed);
                break;
            }
            if let Some(t0) = t0 {
                st.record(kind, t0.elapsed().as_nanos() as u64);
            }
            i += len;
        }
    } else {
        // Runs of up to `batch` operations between checkpoints, each run a
        // loop of its own work kind (`ops`), so that few instructions lie
        // between one operation and the next (see `ops`).
        let mut sampler = Sampler::new(args.sample_every);
        let mut i = 0;
        while i < n {
            if i > 0 && checkpoint(i, &mut stopped) {
                break;
            }
            let run = i..n.min(i + batch);
            i = run.end;
            let outcome = match (work, &mut op_rng) {
                (Work::Load, _) => ops(&mut st, &mut sampler, run, |st, i| {
                    let kind = OpKind::Insert;
                    args.exec(st, kind, first + i, false, (0, false))
                        .map(|()| kind)
                }),
                (
                    Work::Each {
                        op: OpKind::Read,
                        order,
                    },
                    _,
                ) => args.searches(
                    &mut st,
                    &mut sampler,
                    order[(first + run.start) as usize..(first + run.end) as usize]
                        .iter()
                        .map(|&i| u64::from(i)),
                ),
                (Work::Each { op, order }, _) => ops(&mut st, &mut sampler, run, |st, i| {
                    let idx = u64::from(order[(first + i) as usize]);
                    args.exec(st, *op, idx, args.must_exist(idx), (0, false))
                        .map(|()| *op)
                }),
                (Work::Mix { wrap, .. }, Some(op_rng)) => {
                    let (Some(key_rng), Some(chooser), Some(picker), Some(scan)) =
                        (&mut key_rng, &mut chooser, picker, &scan)
                    else {
                        unreachable!("a mix sets up every generator")
                    };
                    if picker.only() == Some(OpKind::Read) {
                        // The keys the general loop below would read, in
                        // the loop of a search phase.
                        let next = &live.next_key;
                        let idxs = run.map(|_| chooser.next(key_rng, next.load(Ordering::Relaxed)));
                        args.searches(&mut st, &mut sampler, idxs)
                    } else {
                        ops(&mut st, &mut sampler, run, |st, _| {
                            let kind = picker.pick(op_rng);
                            let idx = if kind == OpKind::Insert {
                                live.next_key.fetch_add(1, Ordering::Relaxed)
                            } else {
                                chooser.next(key_rng, live.next_key.load(Ordering::Relaxed))
                            };
                            let len = if kind == OpKind::Scan {
                                scan.sample(key_rng)
                            } else {
                                0
                            };
                            let must = kind != OpKind::Insert && args.must_exist(idx);
                            if kind == OpKind::Read {
                                // Inlined here, as in `searches`.
                                if let Some(key) = args.key(st, kind, idx) {
                                    args.get(st, kind, key, must)?;
                                }
                                return Ok(kind);
                            }
                            args.exec(st, kind, idx, must, (len, *wrap)).map(|()| kind)
                        })
                    }
                }
                (Work::Mix { .. }, None) => unreachable!("a mix sets up every generator"),
                (Work::EachMany { .. } | Work::LoadMany { .. }, _) => {
                    unreachable!("multi-key gets and puts run above")
                }
            };
            if let Err(e) = outcome {
                failure = Some(e);
                live.stop.store(true, Ordering::Relaxed);
                break;
            }
        }
    }
    let end = Instant::now();
    // Report the whole share, so that the progress bar ends full.
    live.done.fetch_add(n - reported, Ordering::Relaxed);
    ThreadOut {
        start,
        end,
        ops: st.ops,
        misses: st.misses,
        errors: st.errors,
        scans: st.scans,
        scanned: st.scanned,
        hist: st.hist,
        failure,
        stopped,
    }
}

/// Runs one phase on `args.threads` threads and merges what they measured.
fn run_phase(
    args: &PhaseArgs<'_>,
    work: Work<'_>,
    progress: &mut dyn Progress,
) -> Result<PhaseResult> {
    let total = work.total(args.keys.records() as u64);
    let threads = args.threads.max(1);
    let batch = (total / threads as u64 / 64).clamp(1, PROGRESS_BATCH);
    let live = Live {
        next_key: AtomicU64::new(args.count),
        stop: AtomicBool::new(false),
        done: AtomicU64::new(0),
        finished: AtomicUsize::new(0),
        arrived: AtomicUsize::new(0),
    };
    progress.start(args.engine, args.name, total);
    let before = pm::counters();
    let main = std::thread::current();
    let mut spawn_failure = None;
    let outs: Vec<ThreadOut> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let (live, work, main) = (&live, &work, main.clone());
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                // A panic (an engine's bug) stops the other threads and
                // still counts this one finished, so that the phase
                // ends and the panic reaches the caller at the join,
                // instead of a run that waits for ever.
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_thread(args, live, work, t, batch)
                }));
                if out.is_err() {
                    live.stop.store(true, Ordering::Relaxed);
                }
                live.finished.fetch_add(1, Ordering::Release);
                main.unpark();
                out.unwrap_or_else(|p| std::panic::resume_unwind(p))
            });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // The threads started wait at the gate for this one:
                    // `stop` lets them go, and the phase fails.
                    live.stop.store(true, Ordering::Relaxed);
                    spawn_failure = Some(e);
                    break;
                }
            }
        }
        let started = handles.len();
        let mut reported = 0;
        loop {
            let done = live.done.load(Ordering::Relaxed);
            if done > reported {
                progress.advance(done - reported);
                reported = done;
            }
            if live.finished.load(Ordering::Acquire) == started {
                break;
            }
            std::thread::park_timeout(Duration::from_millis(50));
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let counters = pm::counters() - before;
    progress.finish();
    if let Some(e) = spawn_failure {
        return Err(Error::io(
            format!("start thread {} of {threads}", outs.len() + 1),
            e,
        ));
    }

    let mut outs = outs;
    if let Some(e) = outs.iter_mut().find_map(|o| o.failure.take()) {
        return Err(e);
    }
    let start = outs
        .iter()
        .map(|o| o.start)
        .min()
        .expect("at least one thread");
    let end = outs
        .iter()
        .map(|o| o.end)
        .max()
        .expect("at least one thread");
    let elapsed = end.saturating_duration_since(start);
    let ops: u64 = outs.iter().map(|o| o.ops.iter().sum::<u64>()).sum();
    let mut r = PhaseResult::new(args.name, threads, ops, elapsed, counters);
    r.errors = outs.iter().map(|o| o.errors).sum();
    r.stopped_early = outs.iter().any(|o| o.stopped);
    r.misses = outs.iter().map(|o| o.misses.iter().sum::<u64>()).sum();
    let scans: u64 = outs.iter().map(|o| o.scans).sum();
    if scans > 0 {
        r.records_per_scan =
            Some(outs.iter().map(|o| o.scanned).sum::<u64>() as f64 / scans as f64);
    }
    let secs = elapsed.as_secs_f64();
    let mut all: Option<Histogram<u64>> = None;
    for kind in OpKind::ALL {
        let k = kind.index();
        let n: u64 = outs.iter().map(|o| o.ops[k]).sum();
        if n == 0 {
            continue;
        }
        let mut merged: Option<Histogram<u64>> = None;
        for o in &mut outs {
            if let Some(h) = o.hist[k].take() {
                match &mut merged {
                    None => merged = Some(h),
                    Some(m) => m.add(&h).expect("the histograms share their bounds"),
                }
            }
        }
        if let Some(m) = &merged {
            match &mut all {
                None => all = Some(m.clone()),
                Some(a) => a.add(m).expect("the histograms share their bounds"),
            }
        }
        r.by_op.push(OpResult {
            op: kind,
            ops: n,
            misses: outs.iter().map(|o| o.misses[k]).sum(),
            mops_per_sec: if secs > 0.0 {
                n as f64 / secs / 1e6
            } else {
                0.0
            },
            latency: merged.as_ref().and_then(LatencySummary::of),
        });
    }
    r.latency = all.as_ref().and_then(LatencySummary::of);
    Ok(r)
}

#[cfg(test)]
mod tests;
