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

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::cache::CacheModel;
use super::trace::{Recorder, Trace};
use super::workload::{self, Op};
use crate::db::{Db, Options};
use crate::error::{Error, Result};
use crate::pm::{Fault, FlushKind, PersistConfig};

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
    /// were in ([`writes_after_recovery`]).
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
    /// acknowledged (0, the default: at every point). The operations
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
    /// [`writes_after_recovery`]; returns the trace of both.
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

/// A recovery recorded for the checks of [`Shared::verify`].
struct RecoveryRun {
    /// The recovery's events, then those of the writes made after it.
    trace: Trace,
    /// Where the recovery's events end in `trace`.
    recovered: usize,
    /// The contents the writes after recovery leave; `None` where none
    /// were made (the allocator subject, or an image with no pool yet).
    after: Option<Pairs>,
}

/// The key [`writes_after_recovery`] adds (no workload key has a `~`).
const AFTER_RECOVERY_KEY: &[u8] = b"~after-recovery";

/// The prefix of the filler keys of [`writes_after_recovery`]'s churn.
const CHURN_KEY: &str = "~churn";

/// The size of one filler value of [`writes_after_recovery`]'s churn.
const CHURN_VALUE: usize = 4 << 10;

/// The writes made on a recovered database before the second crash of
/// [`Shared::verify`]: of the keys `got` holds (in key order), the 2nd,
/// 4th, ... get a new value and the others are deleted; then
/// [`AFTER_RECOVERY_KEY`] is put. Each is durable on return, so a crash
/// after them must keep all of them, whatever recovery left unpersisted:
/// a superseded record or a duplicate leaf that recovery retired with a
/// store it never made durable would come back once the key it shadowed
/// is deleted or updated. Returns the contents they leave; a write that
/// finds the pool full ends them there.
///
/// With `churn` bytes ([`CrashConfig::after_churn`]), the 3rd, 6th, ...
/// keys are left as they are (so that the places that hold them stay),
/// and after the new key, filler values of 4 KiB are put and each deleted
/// at once until `churn` bytes were put. In pmlog that seals the segment
/// appends resumed in and cleans or frees it: a superseded record that
/// recovery killed without a flush, in an older segment that a kept key
/// holds, outlives the record that superseded it only then.
fn writes_after_recovery(db: &Db, got: Pairs, churn: u64) -> std::result::Result<Pairs, String> {
    let keys: Vec<Vec<u8>> = got.iter().map(|(k, _)| k.clone()).collect();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = got.into_iter().collect();
    let fail = |i: usize, key: &[u8], e: Error| -> std::result::Result<bool, String> {
        match e {
            Error::PoolFull { .. } => Ok(false),
            e => Err(format!(
                "write {i} after recovery ({}): {e}",
                super::show_key(key)
            )),
        }
    };
    let mut write = |i: usize, key: &[u8]| -> std::result::Result<bool, String> {
        let r = if i.is_multiple_of(2) {
            db.delete(key).map(|_| {
                model.remove(key);
            })
        } else {
            let value = format!("written after recovery, {i}").into_bytes();
            db.put(key, &value).map(|_| {
                model.insert(key.to_vec(), value);
            })
        };
        match r {
            Ok(()) => Ok(true),
            Err(e) => fail(i, key, e),
        }
    };
    for (i, k) in keys.iter().enumerate() {
        if churn > 0 && i % 3 == 2 {
            continue;
        }
        if !write(i, k)? {
            return Ok(model.into_iter().collect());
        }
    }
    if !write(keys.len() | 1, AFTER_RECOVERY_KEY)? {
        return Ok(model.into_iter().collect());
    }
    let filler = vec![0x5a; CHURN_VALUE];
    for j in 0..churn.div_ceil(CHURN_VALUE as u64) {
        let key = format!("{CHURN_KEY}{j:06}").into_bytes();
        let r = db
            .put(&key, &filler)
            .and_then(|_| db.delete(&key).map(|_| ()));
        if let Err(e) = r {
            // A put refused leaves nothing; a delete refused (it needs no
            // room, so an error of another kind) fails the image.
            fail(j as usize, &key, e)?;
            break;
        }
    }
    Ok(model.into_iter().collect())
}

fn sim_persist() -> PersistConfig {
    // Real flush instructions are pointless on anonymous memory; the observer
    // sees every flush call regardless of the instruction.
    PersistConfig::new(FlushKind::Eadr, None).expect("eadr is always supported")
}

// ----- key-value engines --------------------------------------------------

type Model = BTreeMap<Vec<u8>, Arc<[u8]>>;

/// How a key-value subject's pools are opened.
struct KvSettings {
    engine: String,
    engine_config: crate::engine::EngineConfig,
    fault: Option<Fault>,
    after_churn: u64,
}

impl KvSettings {
    fn new(cfg: &CrashConfig) -> Self {
        KvSettings {
            engine: cfg.engine.clone(),
            engine_config: cfg.engine_config.clone(),
            fault: cfg.fault,
            after_churn: cfg.after_churn,
        }
    }

    fn options(&self, observer: Option<Arc<Recorder>>) -> Options {
        Options {
            engine: Some(self.engine.clone()),
            persist: sim_persist(),
            observer: observer.map(|r| r as Arc<dyn crate::pm::PmObserver>),
            fault: self.fault,
            engine_config: self.engine_config.clone(),
            ..Options::default()
        }
    }

    /// Recovers `image` and verifies it: `compare` judges the recovered
    /// contents (every pair, in key order), then `check()` runs. A crash
    /// before creation ended (at event `create_end`) may leave no pool.
    fn verify(
        &self,
        image: &[u8],
        point: usize,
        create_end: usize,
        compare: impl FnOnce(Vec<(Vec<u8>, Vec<u8>)>) -> std::result::Result<(), String>,
    ) -> std::result::Result<(), String> {
        let db = match Db::open_image(image, &self.options(None)) {
            Ok(db) => db,
            Err(Error::NotAPool { .. }) if point < create_end => return Ok(()),
            Err(e) => return Err(format!("recovery failed: {e}")),
        };
        let got = db
            .scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None)
            .map_err(|e| format!("scan after recovery failed: {e}"))?;
        compare(got)?;
        db.check()
            .map_err(|e| format!("check after recovery: {e}"))?;
        Ok(())
    }

    fn record_recovery(&self, image: &[u8]) -> std::result::Result<RecoveryRun, String> {
        let rec = Arc::new(Recorder::new());
        let db = match Db::open_image(image, &self.options(Some(Arc::clone(&rec)))) {
            Ok(db) => db,
            Err(Error::NotAPool { .. }) => {
                let trace = rec.take();
                return Ok(RecoveryRun {
                    recovered: trace.events.len(),
                    trace,
                    after: None,
                });
            }
            Err(e) => return Err(format!("recovery failed: {e}")),
        };
        let recovered = rec.position();
        let got = db
            .scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None)
            .map_err(|e| format!("scan after recovery failed: {e}"))?;
        let after = writes_after_recovery(&db, got, self.after_churn)?;
        drop(db);
        Ok(RecoveryRun {
            trace: rec.take(),
            recovered,
            after: Some(after),
        })
    }

    /// [`Subject::verify_after`].
    fn verify_after(
        &self,
        image: &[u8],
        expected: &[(Vec<u8>, Vec<u8>)],
    ) -> std::result::Result<(), String> {
        let db = Db::open_image(image, &self.options(None))
            .map_err(|e| format!("recovery failed: {e}"))?;
        let got = db
            .scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None)
            .map_err(|e| format!("scan after recovery failed: {e}"))?;
        if got != expected {
            let model: Model = expected
                .iter()
                .map(|(k, v)| (k.clone(), Arc::from(&v[..])))
                .collect();
            return Err(describe_diff(&model, &got));
        }
        db.check()
            .map_err(|e| format!("check after recovery: {e}"))?;
        Ok(())
    }
}

/// Runs `op` on `db` and applies it to `model`: what the database returned,
/// and what the model says it must return. A reopen is the caller's (it
/// needs the database by value); here it does nothing. A read returns
/// whether it found the model's value, a scan whether it found the model's
/// pairs.
fn apply_op(db: &Db, model: &mut Model, op: &Op) -> (Result<bool>, bool) {
    if let Op::Get(k) = op {
        let want = model.get(k).map(|v| v.to_vec());
        return (db.get(k).map(|got| got == want), true);
    }
    if let Op::Scan(lo, hi) = op {
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .range(lo.clone()..=hi.clone())
            .map(|(k, v)| (k.clone(), v.to_vec()))
            .collect();
        return (scan_range(db, lo, hi).map(|got| got == want), true);
    }
    let expect = model_apply(model, op);
    (run_op(db, op), expect)
}

/// Applies `op` to `model`, and says what the database must return for it
/// ([`run_op`]).
fn model_apply(model: &mut Model, op: &Op) -> bool {
    match op {
        Op::Put(k, v) => model.insert(k.clone(), Arc::clone(v)).is_some(),
        Op::Insert(k, v) => {
            let absent = !model.contains_key(k);
            if absent {
                model.insert(k.clone(), Arc::clone(v));
            }
            absent
        }
        Op::Update(k, v) => {
            let present = model.contains_key(k);
            if present {
                model.insert(k.clone(), Arc::clone(v));
            }
            present
        }
        Op::Delete(k) => model.remove(k.as_slice()).is_some(),
        Op::PutMany(items) => {
            for (k, v) in items {
                model.insert(k.clone(), Arc::clone(v));
            }
            true
        }
        Op::Get(k) => model.contains_key(k),
        Op::Scan(..) | Op::Reopen => true,
    }
}

/// Runs `op` on `db`: whether a put replaced a value, an insert inserted,
/// an update replaced, a delete or a read found its key; `true` for a
/// `put_many`, a scan and a reopen (the caller's).
fn run_op(db: &Db, op: &Op) -> Result<bool> {
    match op {
        Op::Put(k, v) => db.put(k, v),
        Op::Insert(k, v) => db.insert(k, v).map(|()| true).or_else(|e| match e {
            Error::KeyExists => Ok(false),
            e => Err(e),
        }),
        Op::Update(k, v) => db.update(k, v).map(|()| true).or_else(|e| match e {
            Error::KeyNotFound => Ok(false),
            e => Err(e),
        }),
        Op::Delete(k) => db.delete(k),
        Op::PutMany(items) => {
            let refs: Vec<(&[u8], &[u8])> = items.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            db.put_many(&refs).map(|()| true)
        }
        Op::Get(k) => db.get(k).map(|v| v.is_some()),
        Op::Scan(lo, hi) => scan_range(db, lo, hi).map(|_| true),
        Op::Reopen => Ok(true),
    }
}

/// The pairs of `db` with keys from `lo` to `hi`, both included.
fn scan_range(db: &Db, lo: &[u8], hi: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use std::ops::Bound::Included;
    db.scan(Included(lo), Included(hi), None)
}

/// The message of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// A workload's live run as it goes: the model of its keys, and the
/// failures of its operations' results.
struct LiveRun<'a> {
    model: Model,
    /// The keys this workload may change.
    own: &'a dyn Fn(&[u8]) -> bool,
    /// Put before each failure's message (which writer).
    who: String,
    failures: Vec<Failure>,
}

impl<'a> LiveRun<'a> {
    fn new(own: &'a dyn Fn(&[u8]) -> bool, who: String) -> Self {
        LiveRun {
            model: Model::new(),
            own,
            who,
            failures: Vec::new(),
        }
    }

    /// Checks what op `i` returned (`got`) against what the model says
    /// (`expect`, from [`apply_op`]), and on a full pool takes the op's
    /// effect back out of the model (`before`: the model before it).
    fn settle(
        &mut self,
        db: &Db,
        i: usize,
        op: &Op,
        (got, expect): (Result<bool>, bool),
        before: &Model,
    ) {
        let who = &self.who;
        match got {
            Ok(got) if got == expect => {}
            Ok(got) => self.failures.push(live_failure(
                i,
                op,
                format!("{who}live run: returned {got}, the model says {expect}"),
            )),
            Err(Error::PoolFull { .. }) => {
                // A single op changed nothing: undo it in the model. A
                // put_many applied the items before the one that failed.
                self.model = before.clone();
                if let Op::PutMany(items) = op {
                    match applied_prefix(db, &self.model, items, self.own) {
                        Ok(m) => self.model = m,
                        Err(msg) => self
                            .failures
                            .push(live_failure(i, op, format!("{who}{msg}"))),
                    }
                }
            }
            Err(e) => self
                .failures
                .push(live_failure(i, op, format!("{who}live run: {e}"))),
        }
    }
}

/// What the recovered contents `got` must be after `acked` operations of
/// `ops`, with the next one in flight or not (`models[i]`: the contents
/// after `i` operations).
fn compare_models(
    models: &[Model],
    ops: &[Op],
    acked: usize,
    in_flight: bool,
    got: &[(Vec<u8>, Vec<u8>)],
) -> std::result::Result<(), String> {
    if in_flight {
        if let Op::PutMany(items) = &ops[acked] {
            return compare_put_many(&models[acked], items, got);
        }
    }
    let mut candidates = vec![&models[acked]];
    if in_flight {
        candidates.push(&models[acked + 1]);
    }
    if candidates.iter().any(|m| same_contents(m, got)) {
        return Ok(());
    }
    Err(describe_diff(candidates[0], got))
}

struct KvSubject {
    settings: KvSettings,
    ops: Vec<Op>,
    /// Event positions (start, end) of each op.
    spans: Vec<(usize, usize)>,
    /// `models[i]`: the contents after `i` ops.
    models: Vec<Model>,
    create_end: usize,
}

impl KvSubject {
    /// Runs `ops` on a recorded anonymous pool.
    fn record(cfg: &CrashConfig, ops: Vec<Op>) -> Result<(KvSubject, Trace, Vec<Failure>)> {
        let rec = Arc::new(Recorder::new());
        let mut s = KvSubject {
            settings: KvSettings::new(cfg),
            ops: Vec::new(),
            spans: Vec::new(),
            models: vec![Model::new()],
            create_end: 0,
        };
        let opts = Options {
            pool_size: cfg.pool_size,
            ..s.settings.options(Some(Arc::clone(&rec)))
        };
        let mut db = Db::create_anonymous(&opts)?;
        s.create_end = rec.position();
        let all = |_: &[u8]| true;
        let mut live = LiveRun::new(&all, String::new());
        for (i, op) in ops.iter().enumerate() {
            let start = rec.position();
            let outcome = if let Op::Reopen = op {
                // The new mapping starts as a copy of the old one, so the
                // trace and the cache model simply continue.
                let image = db.pool().image();
                drop(db);
                db = Db::open_image(&image, &opts)?;
                (Ok(true), true)
            } else {
                apply_op(&db, &mut live.model, op)
            };
            live.settle(&db, i, op, outcome, &s.models[i]);
            s.spans.push((start, rec.position()));
            s.models.push(live.model.clone());
        }
        let mut failures = live.failures;
        if let Err(e) = db.check() {
            failures.push(Failure {
                crash_point: None,
                acked_ops: ops.len(),
                in_flight: None,
                image: "live".into(),
                message: format!("live run: check failed: {e}"),
            });
        }
        drop(db);
        s.ops = ops;
        Ok((s, rec.take(), failures))
    }

    fn expected(&self, point: usize) -> (usize, bool) {
        expected_at(&self.spans, point)
    }

    fn compare(&self, got: &[(Vec<u8>, Vec<u8>)], point: usize) -> std::result::Result<(), String> {
        let (acked, in_flight) = self.expected(point);
        compare_models(&self.models, &self.ops, acked, in_flight, got)
    }
}

/// The contents after a `put_many` that failed on a full pool: `before`
/// with the items before the failing one applied. Fails unless the
/// database's keys for which `own` holds are exactly that for some prefix
/// of `items`.
fn applied_prefix(
    db: &Db,
    before: &Model,
    items: &[(Vec<u8>, Arc<[u8]>)],
    own: &dyn Fn(&[u8]) -> bool,
) -> std::result::Result<Model, String> {
    let mut got = db
        .scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None)
        .map_err(|e| format!("live run: scan after a failed put_many: {e}"))?;
    got.retain(|(k, _)| own(k));
    let mut model = before.clone();
    for n in 0..=items.len() {
        if n > 0 {
            let (k, v) = &items[n - 1];
            model.insert(k.clone(), Arc::clone(v));
        }
        if same_contents(&model, &got) {
            return Ok(model);
        }
    }
    Err(format!(
        "live run: after a put_many failed on a full pool, the contents are no prefix \
         of its items applied ({})",
        describe_diff(before, &got)
    ))
}

/// The check of a crash during a `put_many`: each key of `items` holds its
/// value in `before` (or is absent if it was) or one of the values the call
/// gives it; every other key is as in `before`.
fn compare_put_many(
    before: &Model,
    items: &[(Vec<u8>, Arc<[u8]>)],
    got: &[(Vec<u8>, Vec<u8>)],
) -> std::result::Result<(), String> {
    let got_map: BTreeMap<&[u8], &[u8]> = got
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    let mut batch: BTreeMap<&[u8], Vec<&[u8]>> = BTreeMap::new();
    for (k, v) in items {
        batch.entry(k.as_slice()).or_default().push(v);
    }
    for (k, given) in &batch {
        let now = got_map.get(k).copied();
        let old = before.get(*k).map(|v| &v[..]);
        if now != old && !now.is_some_and(|n| given.contains(&n)) {
            return Err(format!(
                "key {} of the put_many in flight has {}, neither its value from before \
                 nor one the call gave it",
                super::show_key(k),
                now.map_or_else(
                    || "no value".to_string(),
                    |v| format!("a {}-byte value", v.len())
                )
            ));
        }
    }
    let rest: Model = before
        .iter()
        .filter(|(k, _)| !batch.contains_key(k.as_slice()))
        .map(|(k, v)| (k.clone(), Arc::clone(v)))
        .collect();
    let others: Vec<(Vec<u8>, Vec<u8>)> = got
        .iter()
        .filter(|(k, _)| !batch.contains_key(k.as_slice()))
        .cloned()
        .collect();
    if same_contents(&rest, &others) {
        Ok(())
    } else {
        Err(describe_diff(&rest, &others))
    }
}

/// Whether a recovered scan `got` holds exactly the pairs of `model`.
fn same_contents(model: &Model, got: &[(Vec<u8>, Vec<u8>)]) -> bool {
    model.len() == got.len()
        && model
            .iter()
            .zip(got)
            .all(|((k, v), (gk, gv))| k == gk && v[..] == gv[..])
}

fn describe_diff(model: &Model, got: &[(Vec<u8>, Vec<u8>)]) -> String {
    let got_map: BTreeMap<&[u8], &[u8]> = got
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_slice()))
        .collect();
    for (k, v) in model {
        match got_map.get(k.as_slice()) {
            None => return format!("acknowledged key {} is missing", super::show_key(k)),
            Some(g) if *g != &v[..] => {
                return format!(
                    "key {} has a {}-byte value, expected the acknowledged {}-byte value",
                    super::show_key(k),
                    g.len(),
                    v.len()
                )
            }
            _ => {}
        }
    }
    for (k, _) in got {
        if !model.contains_key(k) {
            return format!("key {} exists but should not", super::show_key(k));
        }
    }
    "contents differ from the model".into()
}

impl Subject for KvSubject {
    fn verify(&self, image: &[u8], point: usize) -> std::result::Result<(), String> {
        self.settings.verify(image, point, self.create_end, |got| {
            self.compare(&got, point)
        })
    }

    fn kv(&self) -> Option<&KvSettings> {
        Some(&self.settings)
    }

    fn at(&self, point: usize) -> (usize, Option<String>) {
        let (acked, in_flight) = self.expected(point);
        (acked, in_flight.then(|| self.ops[acked].to_string()))
    }
}

// ----- several writers at once ---------------------------------------------

/// What one writer of a [`ConcurrentKvSubject`] did.
struct WriterLog {
    ops: Vec<Op>,
    /// Event positions (start, end) of each op: the trace's length when it
    /// began and when it had returned.
    spans: Vec<(usize, usize)>,
    /// `models[i]`: this writer's keys after its first `i` ops.
    models: Vec<Model>,
}

/// Several threads running workloads at once on one pool, each over keys
/// of its own ([`workload::generate_concurrent`]). At a crash point each
/// writer has acknowledged some of its operations and may have one in
/// flight; since no two writers share a key, each writer's keys must hold
/// what its own operations say, and its operation in flight is
/// all-or-nothing on its own, whatever the other writers' are.
struct ConcurrentKvSubject {
    settings: KvSettings,
    writers: Vec<WriterLog>,
    /// The writer each key belongs to.
    owner: std::collections::HashMap<Vec<u8>, usize>,
    create_end: usize,
}

impl ConcurrentKvSubject {
    /// Creates a recorded anonymous pool, then runs each plan on a thread
    /// of its own, all started together.
    fn record(
        cfg: &CrashConfig,
        plans: Vec<Vec<Op>>,
    ) -> Result<(ConcurrentKvSubject, Trace, Vec<Failure>)> {
        let (rec, settings, db, create_end) = recorded_db(cfg)?;
        rec.delay_fences(WRITER_FENCE_DELAY);
        let mut owner = std::collections::HashMap::new();
        for (t, ops) in plans.iter().enumerate() {
            for op in ops {
                match op {
                    Op::PutMany(items) => {
                        for (k, _) in items {
                            owner.insert(k.clone(), t);
                        }
                    }
                    op => {
                        owner.insert(op.key().to_vec(), t);
                    }
                }
            }
        }
        let (writers, mut failures) =
            run_writers(plans, |t, ops| run_writer(t, ops, &db, &rec, &owner))?;
        let acked = writers.iter().map(|w| w.ops.len()).sum();
        failures.extend(live_check(&db, acked));
        drop(db);
        let subject = ConcurrentKvSubject {
            settings,
            writers,
            owner,
            create_end,
        };
        Ok((subject, rec.take(), failures))
    }
}

/// The most a writer of several waits before each fence while recording
/// ([`Recorder::delay_fences`]): long enough for another writer to read a
/// key, or to finish a short write, between a thread's stores and its
/// fence, and for writers to overlap on a loaded machine.
const WRITER_FENCE_DELAY: std::time::Duration = std::time::Duration::from_micros(40);

/// A recorded anonymous pool for `cfg`: the recorder, the settings, the
/// database, and the event at which its creation ended.
fn recorded_db(cfg: &CrashConfig) -> Result<(Arc<Recorder>, KvSettings, Db, usize)> {
    let rec = Arc::new(Recorder::new());
    let settings = KvSettings::new(cfg);
    let opts = Options {
        pool_size: cfg.pool_size,
        ..settings.options(Some(Arc::clone(&rec)))
    };
    let db = Db::create_anonymous(&opts)?;
    let create_end = rec.position();
    Ok((rec, settings, db, create_end))
}

/// Runs `body(t, plans[t])` on a thread of its own for each plan, all
/// started together (none, if one of the threads cannot start): the
/// writers' logs, in order, and their failures.
fn run_writers<L: Send>(
    plans: Vec<Vec<Op>>,
    body: impl Fn(usize, Vec<Op>) -> (L, Vec<Failure>) + Sync,
) -> Result<(Vec<L>, Vec<Failure>)> {
    // 0: wait, 1: run, 2: give up (a writer's thread could not start).
    let go = AtomicU8::new(0);
    let mut failures = Vec::new();
    let mut logs = Vec::new();
    let mut spawn_error = None;
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (t, ops) in plans.into_iter().enumerate() {
            let (go, body) = (&go, &body);
            let spawned = std::thread::Builder::new()
                .name(format!("crash-writer-{t}"))
                .spawn_scoped(scope, move || loop {
                    match go.load(Ordering::Acquire) {
                        0 => std::thread::yield_now(),
                        1 => break Some(body(t, ops)),
                        _ => break None,
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        go.store(if spawn_error.is_some() { 2 } else { 1 }, Ordering::Release);
        for h in handles {
            // A writer catches its operations' panics; its own code has
            // none to throw.
            if let Some((log, mut f)) = h.join().expect("a crash-test writer panicked") {
                logs.push(log);
                failures.append(&mut f);
            }
        }
    });
    match spawn_error {
        Some(e) => Err(Error::io("starting a crash-test writer thread", e)),
        None => Ok((logs, failures)),
    }
}

/// `check()` of the live database after the writers, as a failure.
fn live_check(db: &Db, acked: usize) -> Option<Failure> {
    db.check().err().map(|e| Failure {
        crash_point: None,
        acked_ops: acked,
        in_flight: None,
        image: "live".into(),
        message: format!("live run: check failed: {e}"),
    })
}

/// One writer of [`ConcurrentKvSubject::record`]: runs `ops` on `db`,
/// keeping its log and the failures of its results. An
/// operation that panics (an engine bug) ends the writer: it is reported
/// with its message and stays in flight at every later crash point, since
/// it never returned.
fn run_writer(
    t: usize,
    mut ops: Vec<Op>,
    db: &Db,
    rec: &Recorder,
    owner: &std::collections::HashMap<Vec<u8>, usize>,
) -> (WriterLog, Vec<Failure>) {
    let own = |k: &[u8]| owner.get(k) == Some(&t);
    let mut live = LiveRun::new(&own, format!("writer {t}: "));
    let mut log = WriterLog {
        ops: Vec::new(),
        spans: Vec::new(),
        models: vec![Model::new()],
    };
    for (i, op) in ops.iter().enumerate() {
        let begin = rec.position();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            apply_op(db, &mut live.model, op)
        }));
        match ran {
            Ok(outcome) => {
                live.settle(db, i, op, outcome, &log.models[i]);
                log.spans.push((begin, rec.position()));
                log.models.push(live.model.clone());
            }
            Err(panic) => {
                let msg = panic_message(&*panic);
                live.failures.push(live_failure(
                    i,
                    op,
                    format!("{}live run: the operation panicked: {msg}", live.who),
                ));
                // `apply_op` applied the op to the model before calling
                // the engine: the model with it is the "after" of an op
                // in flight.
                log.spans.push((begin, usize::MAX));
                log.models.push(live.model.clone());
                break;
            }
        }
    }
    ops.truncate(log.spans.len());
    log.ops = ops;
    (log, live.failures)
}

impl ConcurrentKvSubject {
    /// Each writer's keys of the recovered contents `got` against that
    /// writer's models at `point`; a key no writer wrote is a failure.
    fn compare(
        &self,
        got: Vec<(Vec<u8>, Vec<u8>)>,
        point: usize,
    ) -> std::result::Result<(), String> {
        let mut mine: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); self.writers.len()];
        for (k, v) in got {
            match self.owner.get(&k) {
                Some(&t) => mine[t].push((k, v)),
                None => {
                    return Err(format!(
                        "key {} exists but no writer wrote it",
                        super::show_key(&k)
                    ))
                }
            }
        }
        for (t, (w, got)) in self.writers.iter().zip(&mine).enumerate() {
            let (acked, in_flight) = expected_at(&w.spans, point);
            compare_models(&w.models, &w.ops, acked, in_flight, got)
                .map_err(|m| format!("writer {t}: {m}"))?;
        }
        Ok(())
    }
}

impl Subject for ConcurrentKvSubject {
    fn verify(&self, image: &[u8], point: usize) -> std::result::Result<(), String> {
        self.settings.verify(image, point, self.create_end, |got| {
            self.compare(got, point)
        })
    }

    fn kv(&self) -> Option<&KvSettings> {
        Some(&self.settings)
    }

    fn at(&self, point: usize) -> (usize, Option<String>) {
        writers_at(
            self.writers.iter().map(|w| (&w.ops[..], &w.spans[..])),
            point,
        )
    }

    fn in_flight(&self, point: usize) -> usize {
        writers_in_flight(self.writers.iter().map(|w| &w.spans[..]), point)
    }
}

/// [`Subject::in_flight`] of several writers, given each one's spans.
fn writers_in_flight<'a>(spans: impl Iterator<Item = &'a [(usize, usize)]>, point: usize) -> usize {
    spans.filter(|s| expected_at(s, point).1).count()
}

/// [`Subject::at`] of several writers, given each one's operations and
/// their spans: the operations acknowledged by all, and each writer's in
/// flight.
fn writers_at<'a>(
    writers: impl Iterator<Item = (&'a [Op], &'a [(usize, usize)])>,
    point: usize,
) -> (usize, Option<String>) {
    let mut acked_all = 0;
    let mut flying = Vec::new();
    for (t, (ops, spans)) in writers.enumerate() {
        let (acked, in_flight) = expected_at(spans, point);
        acked_all += acked;
        if in_flight {
            flying.push(format!("writer {t}: {}", ops[acked]));
        }
    }
    (acked_all, (!flying.is_empty()).then(|| flying.join("; ")))
}

mod shared;
use shared::SharedKvSubject;

mod alloc;
use alloc::{AllocOp, AllocSubject, TABLE_ROOT};

// ----- enumeration -------------------------------------------------------------

/// Crash points of a trace: before every fence, at the end, and `between`
/// sampled points between consecutive fences.
fn crash_points(trace: &Trace, between: usize, rng: &mut SmallRng) -> Vec<usize> {
    let mut pts = Vec::new();
    let mut prev = 0usize;
    for (i, e) in trace.events.iter().enumerate() {
        if e.is_fence() {
            if i > prev + 1 {
                for _ in 0..between {
                    pts.push(rng.gen_range(prev + 1..i));
                }
            }
            pts.push(i);
            prev = i;
        }
    }
    let n = trace.events.len();
    if n > prev + 1 {
        for _ in 0..between {
            pts.push(rng.gen_range(prev + 1..n));
        }
    }
    pts.push(n);
    pts.sort_unstable();
    pts.dedup();
    pts
}

struct Job {
    image: Vec<u8>,
    point: usize,
    kind: &'static str,
    recovery: bool,
}

struct Shared<'a> {
    subject: &'a dyn Subject,
    failures: Mutex<Vec<Failure>>,
    stop: AtomicBool,
    checked: AtomicUsize,
    recovery_images: AtomicUsize,
    max_failures: usize,
}

impl Shared<'_> {
    fn fail(&self, point: usize, kind: &str, message: String) {
        let (acked, in_flight) = self.subject.at(point);
        let mut f = self.failures.lock();
        if f.len() < self.max_failures {
            f.push(Failure {
                crash_point: Some(point),
                acked_ops: acked,
                in_flight,
                image: kind.to_string(),
                message,
            });
        }
        if f.len() >= self.max_failures {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    fn verify(&self, job: &Job, eadr: bool, seed: u64) {
        self.checked.fetch_add(1, Ordering::Relaxed);
        if let Err(m) = self.subject.verify(&job.image, job.point) {
            self.fail(job.point, job.kind, m);
            return;
        }
        if !job.recovery {
            return;
        }
        // Crash during recovery: record recovery and the writes after it
        // (`writes_after_recovery`). Recovery is crashed before each of its
        // fences, at a sampled point between two, and at its end (the
        // all-pending, durable-only and one random image each), and each
        // image recovered again: recovery must be idempotent.
        let run = match self.subject.record_recovery(&job.image) {
            Ok(r) => r,
            Err(m) => return self.fail(job.point, "recovery/record", m),
        };
        let trace = &run.trace;
        let mut rng = SmallRng::seed_from_u64(seed ^ job.point as u64);
        let mut points: Vec<usize> = crash_points(trace, 1, &mut rng)
            .into_iter()
            .filter(|&p| p < run.recovered)
            .collect();
        points.push(run.recovered);
        let mut model = CacheModel::new(job.image.clone(), eadr);
        let mut seen = HashSet::new();
        let mut idx = 0;
        for p in points {
            while idx < p {
                model.apply(trace, &trace.events[idx]);
                idx += 1;
            }
            let check = |img: &[u8]| self.subject.verify(img, job.point);
            if let Some((kind, m)) = self.check_images(&model, &mut rng, 1, &mut seen, check) {
                return self.fail(
                    job.point,
                    &format!("recovery/{kind}"),
                    format!("after a crash at event {p} of recovery: {m}"),
                );
            }
        }
        // A recovery's threads end with their flushes fenced, each by its
        // own thread. (Not required of the live run: the radix trees write
        // and flush a leaf before they know whether an insert or update
        // will publish it, and leave the flush of one they then drop
        // unfenced; nothing references that block.)
        if let Some(m) = unfenced_message(&model) {
            self.fail(job.point, "recovery/unfenced", format!("recovery: {m}"));
            return;
        }
        // A second crash after the writes that followed recovery: every
        // one of them was durable on return, so each image must hold what
        // they left, whatever recovery's own stores that nothing persisted
        // did or did not reach PM.
        let Some(expected) = &run.after else {
            return;
        };
        while idx < trace.events.len() {
            model.apply(trace, &trace.events[idx]);
            idx += 1;
        }
        let check = |img: &[u8]| self.subject.verify_after(img, expected);
        if let Some((kind, m)) = self.check_images(&model, &mut rng, 2, &mut HashSet::new(), check)
        {
            self.fail(
                job.point,
                &format!("after/{kind}"),
                format!("after recovery, durable writes and a second crash: {m}"),
            );
        }
    }

    /// Checks with `check` the all-pending, durable-only and `randoms`
    /// random images of `model` that `seen` does not hold yet (a
    /// recovery's, counted as such); returns the first failure's image
    /// kind and message.
    fn check_images(
        &self,
        model: &CacheModel,
        rng: &mut SmallRng,
        randoms: usize,
        seen: &mut HashSet<u64>,
        check: impl Fn(&[u8]) -> std::result::Result<(), String>,
    ) -> Option<(&'static str, String)> {
        for i in 0..2 + randoms {
            let (kind, (img, h)) = match i {
                0 => ("all", model.image_all()),
                1 => ("durable", model.image_durable()),
                _ => ("random", model.image_random(rng)),
            };
            if !seen.insert(h) {
                continue;
            }
            self.recovery_images.fetch_add(1, Ordering::Relaxed);
            self.checked.fetch_add(1, Ordering::Relaxed);
            if let Err(m) = check(&img) {
                return Some((kind, m));
            }
        }
        None
    }
}

/// At the end of a trace: the flushes that no fence of their own thread
/// followed (a fence orders only its own thread's flushes, so nothing makes
/// them durable), described; `None` if there are none.
fn unfenced_message(model: &CacheModel) -> Option<String> {
    let left = model.unfenced();
    let &(t, line) = left.first()?;
    Some(format!(
        "{} flushed line(s) with no fence of the flushing thread after them, \
         the first line {line:#x} by thread {t}",
        left.len()
    ))
}

struct EnumStats {
    points: usize,
    /// Points before a fence (or at the end) left out to fit the budget.
    skipped_fence_points: usize,
    overlapping: usize,
    same_key: usize,
    duplicates: usize,
}

/// Walks the trace, materialises images at each crash point, and verifies
/// them on `cfg.threads` threads.
fn check_trace<'a>(
    subject: &'a dyn Subject,
    trace: &Trace,
    base: Vec<u8>,
    cfg: &CrashConfig,
) -> (EnumStats, Shared<'a>) {
    let shared = Shared {
        subject,
        failures: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        checked: AtomicUsize::new(0),
        recovery_images: AtomicUsize::new(0),
        max_failures: cfg.max_failures.max(1),
    };
    let mut rng = SmallRng::seed_from_u64(cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut points = crash_points(trace, cfg.between, &mut rng);
    if cfg.from_op > 0 {
        points.retain(|&p| subject.at(p).0 >= cfg.from_op);
    }
    // A point before a fence or at the end, as opposed to one sampled
    // between two fences.
    let at_fence = |p: usize| trace.events.get(p).is_none_or(|e| e.is_fence());
    let fence_points = points.iter().filter(|&&p| at_fence(p)).count();
    // Fit the budget: the all-pending and durable-only images plus at least
    // MIN_RANDOM random ones per point. If there are too many points for
    // that, the sampled points between fences go first (evenly), then
    // fence points (evenly); the report counts the fence points skipped.
    const MIN_RANDOM: usize = 2;
    let budget = cfg.states.max(1);
    let randoms = (budget / points.len().max(1))
        .saturating_sub(2)
        .clamp(MIN_RANDOM.min(cfg.per_point), cfg.per_point);
    let per_point = 2 + randoms;
    if points.len() * per_point > budget {
        let keep = (budget / per_point).max(1);
        let evenly = |pts: Vec<usize>, keep: usize| -> Vec<usize> {
            let step = pts.len() as f64 / keep.max(1) as f64;
            (0..keep.min(pts.len()))
                .map(|i| pts[(i as f64 * step) as usize])
                .collect()
        };
        let (fences, between): (Vec<usize>, Vec<usize>) =
            points.into_iter().partition(|&p| at_fence(p));
        points = if fences.len() >= keep {
            evenly(fences, keep)
        } else {
            let rest = keep - fences.len();
            let mut pts = fences;
            pts.extend(evenly(between, rest));
            pts.sort_unstable();
            pts
        };
    }
    let skipped_fence_points = fence_points - points.iter().filter(|&&p| at_fence(p)).count();
    let recovery_every = budget
        .checked_div(cfg.recovery_checks)
        .map_or(usize::MAX, |n| n.max(1));
    let mut stats = EnumStats {
        points: 0,
        skipped_fence_points,
        overlapping: 0,
        same_key: 0,
        duplicates: 0,
    };
    let threads = cfg.threads.max(1);
    let (tx, rx) = sync_channel::<Job>(threads * 2);
    let rx = Mutex::new(rx);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let job = rx.lock().recv();
                let Ok(job) = job else { break };
                if !shared.stop.load(Ordering::Relaxed) {
                    shared.verify(&job, cfg.eadr, cfg.seed);
                    if let Some(p) = &cfg.progress {
                        p(shared.checked.load(Ordering::Relaxed), budget);
                    }
                }
            });
        }
        let mut model = CacheModel::new(base, cfg.eadr);
        let mut seen = HashSet::new();
        let mut idx = 0;
        let mut sent = 0usize;
        'points: for &p in &points {
            while idx < p {
                model.apply(trace, &trace.events[idx]);
                idx += 1;
            }
            stats.points += 1;
            stats.overlapping += usize::from(subject.in_flight(p) >= 2);
            stats.same_key += usize::from(subject.in_flight_on_one_key(p));
            // An image is a duplicate only where the same outcome is
            // expected: one image at a point where an operation is in
            // flight and at a later one where it is acknowledged must be
            // checked at both (keyed on the image alone, a fence dropped
            // from an operation left the durable image of its end equal to
            // that of its start, and the check that must fail was skipped).
            let expected = subject.at(p);
            let mut dup_streak = 0;
            for i in 0..2 + randoms {
                if shared.stop.load(Ordering::Relaxed) || sent >= budget {
                    break 'points;
                }
                let (kind, (image, h)) = match i {
                    0 => ("all", model.image_all()),
                    1 => ("durable", model.image_durable()),
                    _ => ("random", model.image_random(&mut rng)),
                };
                if !seen.insert((h, expected.clone())) {
                    stats.duplicates += 1;
                    dup_streak += 1;
                    // Few pending lines: the random images repeat; move on.
                    if i >= 2 && dup_streak >= 3 {
                        break;
                    }
                    continue;
                }
                dup_streak = 0;
                sent += 1;
                let recovery = sent.is_multiple_of(recovery_every);
                if tx
                    .send(Job {
                        image,
                        point: p,
                        kind,
                        recovery,
                    })
                    .is_err()
                {
                    break 'points;
                }
            }
        }
        drop(tx);
    });
    (stats, shared)
}

fn report_from(
    cfg: &CrashConfig,
    trace: &Trace,
    stats: EnumStats,
    shared: Shared<'_>,
    mut live: Vec<Failure>,
    t0: Instant,
) -> CrashReport {
    let mut failures = shared.failures.into_inner();
    live.append(&mut failures);
    live.truncate(cfg.max_failures.max(1));
    CrashReport {
        engine: cfg.engine.clone(),
        seed: cfg.seed,
        ops: cfg.ops,
        events: trace.events.len(),
        fences: trace.events.iter().filter(|e| e.is_fence()).count(),
        crash_points: stats.points,
        overlapping_points: stats.overlapping,
        same_key_points: stats.same_key,
        images: shared.checked.load(Ordering::Relaxed),
        recovery_images: shared.recovery_images.load(Ordering::Relaxed),
        duplicates: stats.duplicates,
        skipped_fence_points: stats.skipped_fence_points,
        rounds: 1,
        seconds: t0.elapsed().as_secs_f64(),
        failures: live,
        shrunk: None,
        reproduce: format!(
            "pmindex crashtest --engine {} --ops {} --keys {} --states {} --seed {}{}{}{}{}{}{}",
            cfg.engine,
            cfg.ops,
            cfg.keys,
            cfg.states,
            cfg.seed,
            if cfg.writers > 1 {
                format!(" --writers {}", cfg.writers)
            } else {
                String::new()
            },
            if cfg.shared_keys {
                " --shared-keys"
            } else {
                ""
            },
            if cfg.eadr { " --eadr" } else { "" },
            if cfg.after_churn != DEFAULT_AFTER_CHURN && cfg.engine != ALLOC_SUBJECT {
                format!(" --after-churn {}", cfg.after_churn)
            } else {
                String::new()
            },
            cfg.fault
                .map(|f| format!(" --fault {f}"))
                .unwrap_or_default(),
            cfg.engine_config
                .iter()
                .map(|(k, v)| format!(" --engine-opt {k}={v}"))
                .collect::<String>()
        ),
    }
}

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
