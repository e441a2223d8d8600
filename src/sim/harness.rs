//! The crash harness: run a seeded workload on a recorded pool, crash it at
//! every fence and at sampled points between fences, materialise crash images
//! from the cache model, recover each one and verify it.
//!
//! Verification of each image (key-value engines):
//! 1. every operation acknowledged before the crash point is present with its
//!    latest value;
//! 2. the operation in flight is all-or-nothing;
//! 3. no other key exists (1-3: the recovered contents equal the model before
//!    or after the in-flight operation);
//! 4. `Db::check()` passes, which includes
//! 5. the leak check: allocated blocks = blocks the index references, and
//! 6. the heap past the allocator's frontier is all zero (engines may leave
//!    the zero lines of a never-written block unwritten and unflushed).
//!
//! A sample of images is also crashed *during recovery*: recovery is recorded,
//! crashed at each of its fences, and recovered again (recovery must be
//! idempotent). Crash points inside pool creation are included: there the
//! pool may be "not a pool" (creation never finished) or an empty index.
//!
//! This module holds the configuration, the report and the rounds; the
//! subjects and the enumeration are modules of their own:
//! - `kv`: one writer's key-value workload, its model and checks;
//! - `concurrent`: several writers on keys of their own;
//! - `shared`: several writers on the same keys;
//! - `alloc`: the allocator alone ([`ALLOC_SUBJECT`]);
//! - `check`: crash points, images, recovery and the checks on workers.

use std::sync::Arc;
use std::time::Instant;

use super::trace::Trace;
use super::workload::{self, Op};
use crate::error::{Error, Result};
use crate::pm::Fault;

/// The pseudo-engine name that runs the allocator workload.
pub const ALLOC_SUBJECT: &str = "alloc";

/// The most writers a crash test runs at once ([`CrashConfig::writers`]).
pub const MAX_WRITERS: usize = 16;

/// [`CrashConfig::after_churn`]'s default: two of pmlog's segments.
pub const DEFAULT_AFTER_CHURN: u64 = 512 << 10;

/// A progress callback: images checked so far, and the budget.
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// What to crash-test and how hard.
#[derive(Clone)]
pub struct CrashConfig {
    /// Engine name, or [`ALLOC_SUBJECT`] for the allocator alone.
    pub engine: String,
    /// Operations in the workload.
    pub ops: usize,
    /// Distinct keys (key-value workloads) or slots (allocator workload).
    pub keys: usize,
    /// Budget of distinct crash images to check.
    pub states: usize,
    /// Workload and sampling seed.
    pub seed: u64,
    /// Size of the simulated pool.
    pub pool_size: u64,
    /// At most this many random images per crash point (besides the
    /// all-pending and durable-only images).
    pub per_point: usize,
    /// Crash points sampled between two fences.
    pub between: usize,
    /// Simulate an eADR platform (caches drained at power loss).
    pub eadr: bool,
    /// Images that are also crashed during their recovery.
    pub recovery_checks: usize,
    /// Bytes of churn in the writes after a recovery (default
    /// [`DEFAULT_AFTER_CHURN`]; 0: none): where not zero, those writes leave every third key as it is, and then put
    /// and at once delete this many bytes of filler values, so that a log
    /// seals and frees (or cleans) the segments that recovery's winners
    /// were in (`writes_after_recovery` (in `kv`)).
    pub after_churn: u64,
    /// A persist to drop on purpose (self-test).
    pub fault: Option<Fault>,
    /// Stop after this many failures.
    pub max_failures: usize,
    /// Verification threads.
    pub threads: usize,
    /// Threads that run the workload at once (key-value engines): 1 runs
    /// one workload; more run one workload each, over keys of their own
    /// (docs/design.md §8, "Several writers"). Their interleaving differs
    /// from run to run, so a failing round is not shrunk.
    pub writers: usize,
    /// The writers share one key space (`--shared-keys`): their operations
    /// on a key race, reads are among them, and each key must hold what
    /// some order of its operations leaves (docs/design.md §8, "Writers on
    /// the same keys"). Key-value engines only.
    pub shared_keys: bool,
    /// On failure, shrink the workload to a minimal failing sequence.
    pub shrink: bool,
    /// Progress callback.
    pub progress: Option<Progress>,
    /// Engine settings (for example `hart.persist_order = paper`).
    pub engine_config: crate::engine::EngineConfig,
    /// Crash only at points where at least this many operations were
    /// acknowledged (0, the default: at every point); with several
    /// writers, at least this many of one writer's own. The operations
    /// before still run, and every image is checked against them, but
    /// they take none of the image budget: for a workload whose set-up (a
    /// pool filled, say) has many fences and whose phase of interest few.
    /// Shrinking a failure ignores it.
    pub from_op: usize,
}

impl std::fmt::Debug for CrashConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashConfig")
            .field("engine", &self.engine)
            .field("ops", &self.ops)
            .field("states", &self.states)
            .field("seed", &self.seed)
            .field("fault", &self.fault)
            .finish_non_exhaustive()
    }
}

impl CrashConfig {
    /// Defaults for `engine`: 200 operations, 2,000 images.
    pub fn new(engine: &str) -> Self {
        CrashConfig {
            engine: engine.to_string(),
            ops: 200,
            keys: 48,
            states: 2000,
            seed: 1,
            pool_size: 2 << 20,
            per_point: 20,
            between: 1,
            eadr: false,
            recovery_checks: 50,
            after_churn: DEFAULT_AFTER_CHURN,
            fault: None,
            max_failures: 5,
            threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            writers: 1,
            shared_keys: false,
            shrink: true,
            progress: None,
            engine_config: Default::default(),
            from_op: 0,
        }
    }
}

/// One failed crash image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    /// Crash point: the number of PM events executed before the crash.
    /// `None` for a failure of the live run itself.
    pub crash_point: Option<usize>,
    /// Operations acknowledged before the crash point.
    pub acked_ops: usize,
    /// The operation in flight, if any.
    pub in_flight: Option<String>,
    /// Which image: `all`, `durable`, `random`, or `recovery/...`.
    pub image: String,
    /// What was wrong.
    pub message: String,
}

/// What a crash test found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CrashReport {
    /// Engine or subject.
    pub engine: String,
    /// Seed.
    pub seed: u64,
    /// Operations in the workload.
    pub ops: usize,
    /// PM events recorded.
    pub events: usize,
    /// Fences recorded.
    pub fences: usize,
    /// Crash points visited.
    pub crash_points: usize,
    /// Points before a fence (or at a round's end) not visited: a round
    /// with more crash points than its share of the image budget visits
    /// every fence point only if they fit, after dropping the points
    /// sampled between fences; 0 means every fence of every round was a
    /// crash point.
    pub skipped_fence_points: usize,
    /// Of which points with two or more operations in flight (several
    /// writers).
    pub overlapping_points: usize,
    /// Of which points where two writers' operations in flight share a key,
    /// one of them at least a write (shared-key workloads).
    pub same_key_points: usize,
    /// Distinct crash images recovered and verified (including recovery crashes).
    pub images: usize,
    /// Of which crashed during recovery.
    pub recovery_images: usize,
    /// Images skipped because an identical one was already checked.
    pub duplicates: usize,
    /// Workload rounds run (each with its own seed).
    pub rounds: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// The failures (at most `max_failures`).
    pub failures: Vec<Failure>,
    /// A minimal failing operation sequence, if shrinking found one.
    pub shrunk: Option<Vec<String>>,
    /// The command that reproduces this run.
    pub reproduce: String,
}

impl CrashReport {
    /// Images verified per second.
    pub fn images_per_second(&self) -> f64 {
        self.images as f64 / self.seconds.max(1e-9)
    }
}

/// At crash `point`: how many operations were acknowledged (their spans of
/// PM events ended before it), and whether the next one was in flight.
fn expected_at(spans: &[(usize, usize)], point: usize) -> (usize, bool) {
    let acked = spans.partition_point(|&(_, end)| end <= point);
    let in_flight = acked < spans.len() && spans[acked].0 < point;
    (acked, in_flight)
}

/// A failure of the live (uncrashed) run of operation `i`.
fn live_failure(i: usize, op: &impl std::fmt::Display, message: String) -> Failure {
    Failure {
        crash_point: None,
        acked_ops: i,
        in_flight: Some(op.to_string()),
        image: "live".into(),
        message,
    }
}

/// Something whose crash images can be verified.
trait Subject: Sync {
    /// Recovers `image` and checks it against what must hold at `point`.
    fn verify(&self, image: &[u8], point: usize) -> std::result::Result<(), String>;
    /// How a key-value subject's pools are opened; `None` for the
    /// allocator subject, which overrides [`Subject::record_recovery`].
    fn kv(&self) -> Option<&KvSettings> {
        None
    }
    /// Recovers `image` while recording, then (key-value subjects) makes
    /// `writes_after_recovery` (in `kv`); returns the trace of both.
    fn record_recovery(&self, image: &[u8]) -> std::result::Result<RecoveryRun, String> {
        match self.kv() {
            Some(kv) => kv.record_recovery(image),
            None => Err("this subject cannot record a recovery".into()),
        }
    }
    /// Recovers `image`, an image taken after [`Subject::record_recovery`]'s
    /// writes were durable, and checks that it holds exactly `expected`.
    fn verify_after(
        &self,
        image: &[u8],
        expected: &[(Vec<u8>, Vec<u8>)],
    ) -> std::result::Result<(), String> {
        match self.kv() {
            Some(kv) => kv.verify_after(image, expected),
            None => Err("this subject makes no writes after recovery".into()),
        }
    }
    /// Describes the state expected at `point`: (acked ops, op in flight).
    fn at(&self, point: usize) -> (usize, Option<String>);
    /// How far the run was at `point`, as [`CrashConfig::from_op`] counts
    /// it: the operations acknowledged, or, of several writers, those of
    /// the writer furthest along.
    fn progress(&self, point: usize) -> usize {
        self.at(point).0
    }
    /// How many operations are in flight at `point`.
    fn in_flight(&self, point: usize) -> usize {
        usize::from(self.at(point).1.is_some())
    }
    /// Whether two writers' operations in flight at `point` share a key.
    fn in_flight_on_one_key(&self, _point: usize) -> bool {
        false
    }
}

/// Key-value pairs in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A recovery recorded for the checks of [`Shared::verify`](check::Shared::verify).
struct RecoveryRun {
    /// The recovery's events, then those of the writes made after it.
    trace: Trace,
    /// Where the recovery's events end in `trace`.
    recovered: usize,
    /// The contents the writes after recovery leave; `None` where none
    /// were made (the allocator subject, or an image with no pool yet).
    after: Option<Pairs>,
}

mod kv;
use kv::{
    apply_op, compare_models, panic_message, run_op, scan_range, sim_persist, KvSettings,
    KvSubject, LiveRun, Model,
};

mod concurrent;
use concurrent::{
    live_check, recorded_db, run_writers, writers_at, writers_in_flight, writers_progress,
    ConcurrentKvSubject, WRITER_FENCE_DELAY,
};

mod shared;
use shared::SharedKvSubject;

mod alloc;
use alloc::{AllocOp, AllocSubject, TABLE_ROOT};

mod check;
use check::{check_trace, report_from};

/// Runs the crash test described by `cfg`: rounds of fresh workloads (seeds
/// `seed`, `seed + 1`, ...) until `states` distinct images have been checked
/// or a round fails. A failing round is shrunk (key-value engines) and its
/// own seed and budget are given in `reproduce`.
pub fn run(cfg: &CrashConfig) -> Result<CrashReport> {
    if cfg.engine != ALLOC_SUBJECT {
        crate::engine::find(&cfg.engine)?;
    }
    for (name, n) in [
        ("states", cfg.states),
        ("ops", cfg.ops),
        ("keys", cfg.keys),
        ("threads", cfg.threads),
        ("max_failures", cfg.max_failures),
    ] {
        if n == 0 {
            return Err(Error::InvalidArgument(format!(
                "{name}: must be at least 1"
            )));
        }
    }
    if let Some(f) = cfg.fault.filter(|f| !f.acts_on(&cfg.engine)) {
        return Err(Error::InvalidArgument(format!(
            "fault {f} is in {}'s code, not {}'s: it would drop nothing here",
            f.engine().unwrap_or("the substrate"),
            cfg.engine
        )));
    }
    if !(1..=MAX_WRITERS).contains(&cfg.writers) {
        return Err(Error::InvalidArgument(format!(
            "writers: {} (1 to {MAX_WRITERS})",
            cfg.writers
        )));
    }
    if cfg.writers > 1 && cfg.engine == ALLOC_SUBJECT {
        return Err(Error::InvalidArgument(
            "writers: the allocator workload runs on one thread".into(),
        ));
    }
    if cfg.shared_keys && cfg.engine == ALLOC_SUBJECT {
        return Err(Error::InvalidArgument(
            "shared keys: the allocator workload has no keys".into(),
        ));
    }
    let t0 = Instant::now();
    let mut total: Option<CrashReport> = None;
    let max_rounds = (cfg.states / 20).max(1) as u64;
    for round in 0..max_rounds {
        let done = total.as_ref().map_or(0, |t| t.images);
        if done >= cfg.states {
            break;
        }
        let rcfg = CrashConfig {
            seed: cfg.seed.wrapping_add(round),
            states: cfg.states - done,
            progress: cfg.progress.clone().map(|p| {
                let total = cfg.states;
                let f: Progress = Arc::new(move |n, _| p(done + n, total));
                f
            }),
            ..cfg.clone()
        };
        let mut r = run_round(&rcfg)?;
        let failed = !r.failures.is_empty();
        if failed
            && cfg.shrink
            && cfg.engine != ALLOC_SUBJECT
            && cfg.writers <= 1
            && !cfg.shared_keys
        {
            let ops = workload::generate(rcfg.seed, rcfg.ops, rcfg.keys);
            r.shrunk = Some(
                shrink_kv(&rcfg, ops, &r)?
                    .iter()
                    .map(Op::to_string)
                    .collect(),
            );
        }
        total = Some(match total {
            None => r,
            Some(mut t) => {
                t.events += r.events;
                t.fences += r.fences;
                t.crash_points += r.crash_points;
                t.overlapping_points += r.overlapping_points;
                t.same_key_points += r.same_key_points;
                t.images += r.images;
                t.recovery_images += r.recovery_images;
                t.duplicates += r.duplicates;
                t.skipped_fence_points += r.skipped_fence_points;
                t.rounds += 1;
                if failed {
                    t.failures = r.failures;
                    t.shrunk = r.shrunk;
                    t.reproduce = r.reproduce;
                }
                t
            }
        });
        if failed {
            break;
        }
    }
    let mut t = total.expect("at least one round runs");
    t.seed = cfg.seed;
    t.seconds = t0.elapsed().as_secs_f64();
    Ok(t)
}

fn run_round(cfg: &CrashConfig) -> Result<CrashReport> {
    if cfg.engine == ALLOC_SUBJECT {
        let ops = AllocSubject::generate(cfg.seed, cfg.ops, cfg.keys.max(TABLE_ROOT + 1));
        run_alloc(cfg, ops)
    } else if cfg.shared_keys {
        let plans = workload::generate_shared(cfg.seed, cfg.ops, cfg.keys, cfg.writers);
        let t0 = Instant::now();
        check_recorded(cfg, t0, SharedKvSubject::record(cfg, plans)?)
    } else if cfg.writers > 1 {
        let plans = workload::generate_concurrent(cfg.seed, cfg.ops, cfg.keys, cfg.writers);
        let t0 = Instant::now();
        check_recorded(cfg, t0, ConcurrentKvSubject::record(cfg, plans)?)
    } else {
        run_kv(cfg, workload::generate(cfg.seed, cfg.ops, cfg.keys))
    }
}

/// Crash-tests a given operation sequence (one round), for regression tests
/// of bugs the simulator found.
pub fn run_ops(cfg: &CrashConfig, ops: Vec<Op>) -> Result<CrashReport> {
    crate::engine::find(&cfg.engine)?;
    let n = ops.len();
    let mut r = run_kv(cfg, ops)?;
    r.ops = n;
    // The command line generates its workloads: these operations are the
    // caller's, run with the settings the command names.
    r.reproduce = format!(
        "sim::run_ops with the same {n} operations, settings as `{}`",
        r.reproduce
    );
    Ok(r)
}

/// Crash-tests given plans of several writers at once (one round), as
/// [`CrashConfig::writers`] does generated ones: each plan runs on a
/// thread of its own, all started together, on keys that no other plan
/// writes; for workloads the generator does not make (a pool that two
/// writers fill, then refill once it refused them). `cfg.writers` is not
/// read: the plans say how many. Reads and reopens are refused (they
/// belong to the shared-key workloads and to one writer).
pub fn run_plans(cfg: &CrashConfig, plans: Vec<Vec<Op>>) -> Result<CrashReport> {
    crate::engine::find(&cfg.engine)?;
    if !(2..=MAX_WRITERS).contains(&plans.len()) {
        return Err(Error::InvalidArgument(format!(
            "plans: {} (2 to {MAX_WRITERS} writers)",
            plans.len()
        )));
    }
    let mut owner: std::collections::HashMap<&[u8], usize> = std::collections::HashMap::new();
    for (t, ops) in plans.iter().enumerate() {
        for op in ops {
            let keys: Vec<&[u8]> = match op {
                Op::Put(k, _) | Op::Insert(k, _) | Op::Update(k, _) | Op::Delete(k) => vec![k],
                Op::PutMany(items) => items.iter().map(|(k, _)| &k[..]).collect(),
                Op::Get(_) | Op::Scan(..) | Op::Reopen => {
                    return Err(Error::InvalidArgument(format!(
                        "plan {t}: `{op}`: these plans hold writes only (puts, inserts, updates, deletes, put_many)"
                    )))
                }
            };
            for k in keys {
                match owner.insert(k, t) {
                    Some(o) if o != t => {
                        return Err(Error::InvalidArgument(format!(
                            "key {} is in plans {o} and {t}: each writer keeps keys of its own",
                            crate::sim::show_key(k)
                        )))
                    }
                    _ => {}
                }
            }
        }
    }
    let (n, writers) = (plans.iter().map(Vec::len).sum(), plans.len());
    let t0 = Instant::now();
    let mut r = check_recorded(cfg, t0, ConcurrentKvSubject::record(cfg, plans)?)?;
    r.ops = n;
    // The command line generates its workloads: these plans are the
    // caller's.
    r.reproduce = format!(
        "sim::run_plans with the same {writers} plans ({n} operations), settings as `{}`",
        r.reproduce
    );
    Ok(r)
}

fn run_kv(cfg: &CrashConfig, ops: Vec<Op>) -> Result<CrashReport> {
    let t0 = Instant::now();
    check_recorded(cfg, t0, KvSubject::record(cfg, ops)?)
}

/// Checks a recorded run (its subject, trace and live failures) at every
/// crash point, and reports it (`t0`: when the run began).
fn check_recorded(
    cfg: &CrashConfig,
    t0: Instant,
    (subject, trace, live): (impl Subject, Trace, Vec<Failure>),
) -> Result<CrashReport> {
    let base = vec![0u8; cfg.pool_size as usize];
    let (stats, shared) = check_trace(&subject, &trace, base, cfg);
    Ok(report_from(cfg, &trace, stats, shared, live, t0))
}

fn run_alloc(cfg: &CrashConfig, ops: Vec<AllocOp>) -> Result<CrashReport> {
    let t0 = Instant::now();
    check_recorded(cfg, t0, AllocSubject::record(cfg, ops)?)
}

/// Shrinks a failing workload: cut it after the failing operation, then drop
/// operations one at a time while it still fails (at most 60 trials or 20 s,
/// each trial with a quarter of the budget).
fn shrink_kv(cfg: &CrashConfig, ops: Vec<Op>, report: &CrashReport) -> Result<Vec<Op>> {
    let last = report
        .failures
        .iter()
        .map(|f| f.acked_ops + 1)
        .min()
        .unwrap_or(ops.len());
    let mut cur: Vec<Op> = ops.into_iter().take(last).collect();
    let trial_cfg = CrashConfig {
        states: (cfg.states / 4).max(200),
        max_failures: 1,
        shrink: false,
        progress: None,
        // A shorter sequence's operations are not the original's.
        from_op: 0,
        ..cfg.clone()
    };
    let fails =
        |ops: &[Op]| -> Result<bool> { Ok(!run_kv(&trial_cfg, ops.to_vec())?.failures.is_empty()) };
    if !fails(&cur)? {
        return Ok(cur);
    }
    let mut trials = 0;
    let mut i = 0;
    let t0 = Instant::now();
    while i < cur.len() && trials < 60 && t0.elapsed().as_secs() < 20 {
        let mut cand = cur.clone();
        cand.remove(i);
        trials += 1;
        if !cand.is_empty() && fails(&cand)? {
            cur = cand;
        } else {
            i += 1;
        }
    }
    Ok(cur)
}

/// Convenience for tests: the number of failures of `cfg`, with the report.
pub fn run_expecting(cfg: &CrashConfig) -> Result<CrashReport> {
    let r = run(cfg)?;
    if !r.failures.is_empty() {
        return Err(Error::CheckFailed(format!(
            "{} crash failures, first: {:?}; reproduce with `{}`",
            r.failures.len(),
            r.failures[0],
            r.reproduce
        )));
    }
    Ok(r)
}
