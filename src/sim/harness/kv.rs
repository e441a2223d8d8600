//! The crash harness's one-writer key-value subject: the pool's settings,
//! the workload's run against a model, the writes made after each
//! recovery, and the check of a recovered image against the model.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{expected_at, live_failure, CrashConfig, Failure, Pairs, RecoveryRun, Subject};
use crate::db::{Db, Options};
use crate::error::{Error, Result};
use crate::pm::{Fault, FlushKind, PersistConfig};
use crate::sim::trace::{Recorder, Trace};
use crate::sim::workload::Op;

/// The key [`writes_after_recovery`] adds (no workload key has a `~`).
const AFTER_RECOVERY_KEY: &[u8] = b"~after-recovery";

/// The prefix of the filler keys of [`writes_after_recovery`]'s churn.
const CHURN_KEY: &str = "~churn";

/// The size of one filler value of [`writes_after_recovery`]'s churn.
const CHURN_VALUE: usize = 4 << 10;

/// The writes made on a recovered database before the second crash of
/// [`Shared::verify`](super::check::Shared::verify): of the keys `got` holds (in key order), the 2nd,
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
                crate::sim::show_key(key)
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

pub(super) fn sim_persist() -> PersistConfig {
    // Real flush instructions are pointless on anonymous memory; the observer
    // sees every flush call regardless of the instruction.
    PersistConfig::new(FlushKind::Eadr, None).expect("eadr is always supported")
}

// ----- key-value engines --------------------------------------------------

pub(super) type Model = BTreeMap<Vec<u8>, Arc<[u8]>>;

/// How a key-value subject's pools are opened.
pub(super) struct KvSettings {
    engine: String,
    engine_config: crate::engine::EngineConfig,
    fault: Option<Fault>,
    after_churn: u64,
}

impl KvSettings {
    pub(super) fn new(cfg: &CrashConfig) -> Self {
        KvSettings {
            engine: cfg.engine.clone(),
            engine_config: cfg.engine_config.clone(),
            fault: cfg.fault,
            after_churn: cfg.after_churn,
        }
    }

    pub(super) fn options(&self, observer: Option<Arc<Recorder>>) -> Options {
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
    pub(super) fn verify(
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

    pub(super) fn record_recovery(&self, image: &[u8]) -> std::result::Result<RecoveryRun, String> {
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
    pub(super) fn verify_after(
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
pub(super) fn apply_op(db: &Db, model: &mut Model, op: &Op) -> (Result<bool>, bool) {
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
pub(super) fn run_op(db: &Db, op: &Op) -> Result<bool> {
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
pub(super) fn scan_range(db: &Db, lo: &[u8], hi: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use std::ops::Bound::Included;
    db.scan(Included(lo), Included(hi), None)
}

/// The message of a caught panic.
pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// A workload's live run as it goes: the model of its keys, and the
/// failures of its operations' results.
pub(super) struct LiveRun<'a> {
    pub(super) model: Model,
    /// The keys this workload may change.
    own: &'a dyn Fn(&[u8]) -> bool,
    /// Put before each failure's message (which writer).
    pub(super) who: String,
    pub(super) failures: Vec<Failure>,
}

impl<'a> LiveRun<'a> {
    pub(super) fn new(own: &'a dyn Fn(&[u8]) -> bool, who: String) -> Self {
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
    pub(super) fn settle(
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
pub(super) fn compare_models(
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

pub(super) struct KvSubject {
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
    pub(super) fn record(
        cfg: &CrashConfig,
        ops: Vec<Op>,
    ) -> Result<(KvSubject, Trace, Vec<Failure>)> {
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
                crate::sim::show_key(k),
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
            None => return format!("acknowledged key {} is missing", crate::sim::show_key(k)),
            Some(g) if *g != &v[..] => {
                return format!(
                    "key {} has a {}-byte value, expected the acknowledged {}-byte value",
                    crate::sim::show_key(k),
                    g.len(),
                    v.len()
                )
            }
            _ => {}
        }
    }
    for (k, _) in got {
        if !model.contains_key(k) {
            return format!("key {} exists but should not", crate::sim::show_key(k));
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
