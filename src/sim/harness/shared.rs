//! The crash harness's writers on the same keys (`CrashConfig::shared_keys`,
//! docs/design.md §8, "Writers on the same keys"): the workload's run and
//! log, each key's history of operations, and their check
//! ([`crate::sim::linear`]) at every crash point.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    expected_at, live_check, live_failure, panic_message, recorded_db, run_op, run_writers,
    scan_range, writers_at, writers_in_flight, writers_progress, Failure, KvSettings, Subject,
    WRITER_FENCE_DELAY,
};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::sim::linear::{Action, KeyHistory, KeyOp};
use crate::sim::trace::{Recorder, Trace};
use crate::sim::workload::Op;
use crate::sim::CrashConfig;

/// What an operation of a shared-key writer returned.
#[derive(Debug, Clone)]
enum Outcome {
    /// A write's result ([`run_op`]).
    Returned(bool),
    /// A read's value.
    Read(Option<Vec<u8>>),
    /// A scan's pairs.
    Scanned(Vec<(Vec<u8>, Vec<u8>)>),
    /// A full pool: a single operation changed nothing, a `put_many`
    /// applied some prefix of its items.
    Full,
    /// Another error, or a panic: anything may have happened.
    Failed,
}

/// What one writer of a [`SharedKvSubject`] did.
struct SharedLog {
    ops: Vec<Op>,
    /// Event positions (start, end) of each op, as `WriterLog::spans` (in `concurrent`).
    spans: Vec<(usize, usize)>,
    /// The operation clock at each op's call and return ([`KeyOp::called`]).
    ticks: Vec<(u64, u64)>,
    outcomes: Vec<Outcome>,
}

/// Several threads running workloads at once on one pool over the **same**
/// keys ([`crate::sim::workload::generate_shared`]), reads among their operations. At a
/// crash point each key must hold what some order of the operations on it
/// leaves (the check of [`crate::sim::linear`]): every operation acknowledged
/// before the point, with the result it returned, and any of those in
/// flight, in each writer's order and in real time. The live run is held
/// to the same check with every operation returned.
pub(super) struct SharedKvSubject {
    settings: KvSettings,
    writers: Vec<SharedLog>,
    /// Every key an operation wrote or read, and its operations.
    keys: BTreeMap<Vec<u8>, KeyHistory>,
    create_end: usize,
}

impl SharedKvSubject {
    /// Creates a recorded anonymous pool, then runs each plan on a thread
    /// of its own, all started together.
    pub(super) fn record(
        cfg: &CrashConfig,
        plans: Vec<Vec<Op>>,
    ) -> Result<(SharedKvSubject, Trace, Vec<Failure>)> {
        let (rec, settings, db, create_end) = recorded_db(cfg)?;
        rec.delay_fences(WRITER_FENCE_DELAY);
        let clock = AtomicU64::new(0);
        let (writers, mut failures) =
            run_writers(plans, |t, ops| run_shared_writer(t, ops, &db, &rec, &clock))?;
        let acked = writers.iter().map(|w| w.ops.len()).sum();
        let (keys, foreign) = histories(&writers);
        failures.extend(foreign.into_iter().map(|m| Failure {
            crash_point: None,
            acked_ops: acked,
            in_flight: None,
            image: "live".into(),
            message: format!("live run: {m}"),
        }));
        let got = db
            .scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None)
            .map_err(|e| format!("scan: {e}"))
            .and_then(|got| compare_shared(&keys, got, usize::MAX - 1));
        if let Err(m) = got {
            failures.push(Failure {
                crash_point: None,
                acked_ops: acked,
                in_flight: None,
                image: "live".into(),
                message: format!("live run: {m}"),
            });
        }
        failures.extend(live_check(&db, acked));
        drop(db);
        let subject = SharedKvSubject {
            settings,
            writers,
            keys,
            create_end,
        };
        Ok((subject, rec.take(), failures))
    }
}

/// One writer of [`SharedKvSubject::record`]: runs `ops` on `db` and keeps
/// what each returned. An operation that panics ends the writer and stays
/// in flight, as in `run_writer` (in `concurrent`).
fn run_shared_writer(
    t: usize,
    mut ops: Vec<Op>,
    db: &Db,
    rec: &Recorder,
    clock: &AtomicU64,
) -> (SharedLog, Vec<Failure>) {
    let mut log = SharedLog {
        ops: Vec::new(),
        spans: Vec::new(),
        ticks: Vec::new(),
        outcomes: Vec::new(),
    };
    let mut failures = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let called = clock.fetch_add(1, Ordering::SeqCst);
        let begin = rec.position();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match op {
            Op::Get(k) => db.get(k).map(Outcome::Read),
            Op::Scan(lo, hi) => scan_range(db, lo, hi).map(Outcome::Scanned),
            op => run_op(db, op).map(Outcome::Returned),
        }));
        let end = rec.position();
        let returned = clock.fetch_add(1, Ordering::SeqCst);
        let outcome = match ran {
            Ok(Ok(o)) => o,
            Ok(Err(Error::PoolFull { .. })) => Outcome::Full,
            Ok(Err(e)) => {
                failures.push(live_failure(i, op, format!("writer {t}: live run: {e}")));
                Outcome::Failed
            }
            Err(panic) => {
                let msg = panic_message(&*panic);
                failures.push(live_failure(
                    i,
                    op,
                    format!("writer {t}: live run: the operation panicked: {msg}"),
                ));
                log.spans.push((begin, usize::MAX));
                log.ticks.push((called, u64::MAX));
                log.outcomes.push(Outcome::Failed);
                break;
            }
        };
        log.spans.push((begin, end));
        log.ticks.push((called, returned));
        log.outcomes.push(outcome);
    }
    ops.truncate(log.spans.len());
    log.ops = ops;
    (log, failures)
}

/// Each key's operations, by writer, from the writers' logs; and the reads
/// that returned a value no operation wrote (failures of the live run).
fn histories(writers: &[SharedLog]) -> (BTreeMap<Vec<u8>, KeyHistory>, Vec<String>) {
    let n = writers.len();
    let mut keys: BTreeMap<Vec<u8>, KeyHistory> = BTreeMap::new();
    // First every value written, so that a read can name the one it got.
    for w in writers {
        for op in &w.ops {
            let items: Vec<(&Vec<u8>, &Arc<[u8]>)> = match op {
                Op::Put(k, v) | Op::Insert(k, v) | Op::Update(k, v) => vec![(k, v)],
                Op::PutMany(items) => items.iter().map(|(k, v)| (k, v)).collect(),
                Op::Delete(k) | Op::Get(k) => {
                    keys.entry(k.clone()).or_insert_with(|| KeyHistory::new(n));
                    Vec::new()
                }
                Op::Scan(..) | Op::Reopen => Vec::new(),
            };
            for (k, v) in items {
                keys.entry(k.clone())
                    .or_insert_with(|| KeyHistory::new(n))
                    .value_id(v);
            }
        }
    }
    let mut foreign = Vec::new();
    for (t, w) in writers.iter().enumerate() {
        for (index, (((op, &(begin, end)), &(called, returned)), outcome)) in w
            .ops
            .iter()
            .zip(&w.spans)
            .zip(&w.ticks)
            .zip(&w.outcomes)
            .enumerate()
        {
            let (result, partial) = match outcome {
                Outcome::Returned(_) if matches!(op, Op::PutMany(_)) => (None, false),
                Outcome::Returned(r) => (Some(*r), false),
                // A read's value is its result (`Action::Get`).
                Outcome::Read(_) | Outcome::Scanned(_) => (None, false),
                Outcome::Full | Outcome::Failed => (None, true),
            };
            let push = |keys: &mut BTreeMap<Vec<u8>, KeyHistory>, k: &[u8], action| {
                let h = keys.get_mut(k).expect("every key was entered above");
                h.writers[t].push(KeyOp {
                    action,
                    begin,
                    end,
                    called,
                    returned,
                    result,
                    partial,
                    index,
                });
            };
            let single_full = matches!(outcome, Outcome::Full) && !matches!(op, Op::PutMany(_));
            match op {
                // A single operation that found the pool full changed nothing.
                _ if single_full => {}
                Op::Put(k, v) | Op::Insert(k, v) | Op::Update(k, v) => {
                    let id = keys[k.as_slice()].find_value(v).expect("entered above");
                    let action = match op {
                        Op::Put(..) => Action::Put(id),
                        Op::Insert(..) => Action::Insert(id),
                        _ => Action::Update(id),
                    };
                    push(&mut keys, k, action);
                }
                Op::Delete(k) => push(&mut keys, k, Action::Delete),
                // One operation per item, with the call's span (not atomic).
                Op::PutMany(items) => {
                    for (k, v) in items {
                        let id = keys[k.as_slice()].find_value(v).expect("entered above");
                        push(&mut keys, k, Action::Put(id));
                    }
                }
                // A read that failed says nothing.
                Op::Get(k) => {
                    if let Outcome::Read(got) = outcome {
                        let id = match got {
                            None => Some(None),
                            Some(v) => keys[k.as_slice()].find_value(v).map(Some),
                        };
                        match id {
                            Some(id) => push(&mut keys, k, Action::Get(id)),
                            None => foreign.push(format!(
                                "writer {t}: op {index}, get {}, returned a {}-byte value \
                                 that no operation wrote",
                                crate::sim::show_key(k),
                                got.as_ref().map_or(0, Vec::len)
                            )),
                        }
                    }
                }
                // A scan reads each key of its range, at some instant of its
                // span: the value it returned, or absent if it returned none.
                Op::Scan(lo, hi) => {
                    if let Outcome::Scanned(got) = outcome {
                        let range = lo.clone()..=hi.clone();
                        for (k, v) in got {
                            let known = keys.get(k).and_then(|h| h.find_value(v));
                            if !range.contains(k) || known.is_none() {
                                foreign.push(format!(
                                    "writer {t}: op {index}, {op}, returned key {} with a \
                                     {}-byte value, {}",
                                    crate::sim::show_key(k),
                                    v.len(),
                                    if range.contains(k) {
                                        "which no operation wrote"
                                    } else {
                                        "outside its range"
                                    }
                                ));
                            }
                        }
                        // (A key returned with a value no operation wrote
                        // is a failure above, and read nothing here.)
                        let read: Vec<(Vec<u8>, Option<u32>)> = keys
                            .range(range.clone())
                            .filter_map(|(k, h)| {
                                match got.binary_search_by(|(g, _)| g.as_slice().cmp(k)) {
                                    Ok(i) => h.find_value(&got[i].1).map(|v| (k.clone(), Some(v))),
                                    Err(_) => Some((k.clone(), None)),
                                }
                            })
                            .collect();
                        for (k, v) in read {
                            push(&mut keys, &k, Action::Get(v));
                        }
                    }
                }
                Op::Reopen => {}
            }
        }
    }
    (keys, foreign)
}

/// Whether the recovered contents `got` are what a crash at `point` may
/// leave, key by key ([`KeyHistory::explains`]).
fn compare_shared(
    keys: &BTreeMap<Vec<u8>, KeyHistory>,
    got: Vec<(Vec<u8>, Vec<u8>)>,
    point: usize,
) -> std::result::Result<(), String> {
    let got: BTreeMap<Vec<u8>, Vec<u8>> = got.into_iter().collect();
    if let Some(k) = got.keys().find(|k| !keys.contains_key(*k)) {
        return Err(format!(
            "key {} exists but no writer wrote it",
            crate::sim::show_key(k)
        ));
    }
    for (k, h) in keys {
        let now = got.get(k);
        let state = match now {
            None => Ok(None),
            Some(v) => h.find_value(v).map(Some).ok_or(()),
        };
        if !h.explains(point, state) {
            return Err(format!(
                "key {} {}, which no order of the writers' operations on it explains \
                 ({})",
                crate::sim::show_key(k),
                match (now, state) {
                    (None, _) => "is absent".to_string(),
                    (Some(v), Ok(Some(id))) => format!("holds {} B #{id}", v.len()),
                    (Some(v), _) => format!("holds a {}-byte value no operation wrote", v.len()),
                },
                h.describe(point)
            ));
        }
    }
    Ok(())
}

impl Subject for SharedKvSubject {
    fn verify(&self, image: &[u8], point: usize) -> std::result::Result<(), String> {
        self.settings.verify(image, point, self.create_end, |got| {
            compare_shared(&self.keys, got, point)
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

    fn progress(&self, point: usize) -> usize {
        writers_progress(self.writers.iter().map(|w| &w.spans[..]), point)
    }

    /// Two operations in flight on one key, one of them at least a write
    /// (two reads of a key say nothing of each other). A panicked op stays
    /// in flight, and counts, as long as the run goes on.
    fn in_flight_on_one_key(&self, point: usize) -> bool {
        // Keys read, and keys written, by the writers seen so far.
        let mut read: HashSet<&[u8]> = HashSet::new();
        let mut written: HashSet<&[u8]> = HashSet::new();
        for w in &self.writers {
            let (acked, in_flight) = expected_at(&w.spans, point);
            if !in_flight {
                continue;
            }
            let op = &w.ops[acked];
            let keys: HashSet<&[u8]> = match op {
                Op::PutMany(items) => items.iter().map(|(k, _)| &k[..]).collect(),
                Op::Scan(lo, hi) => self
                    .keys
                    .range(lo.clone()..=hi.clone())
                    .map(|(k, _)| &k[..])
                    .collect(),
                op => std::iter::once(op.key()).collect(),
            };
            let writes = !matches!(op, Op::Get(_) | Op::Scan(..));
            if keys
                .iter()
                .any(|k| written.contains(k) || (writes && read.contains(k)))
            {
                return true;
            }
            if writes {
                written.extend(keys);
            } else {
                read.extend(keys);
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(b: &[u8]) -> Arc<[u8]> {
        b.to_vec().into()
    }

    /// A writer's log with one event per operation.
    fn log(ops: Vec<Op>, outcomes: Vec<Outcome>) -> SharedLog {
        SharedLog {
            spans: (0..ops.len()).map(|i| (2 * i, 2 * i + 1)).collect(),
            ticks: (0..ops.len() as u64).map(|i| (2 * i, 2 * i + 1)).collect(),
            ops,
            outcomes,
        }
    }

    #[test]
    fn a_scan_reads_every_key_of_its_range() {
        let put = |k: &[u8], x: &[u8]| Op::Put(k.to_vec(), v(x));
        let w0 = log(
            vec![
                put(b"a", b"1"),
                put(b"b", b"2"),
                put(b"c", b"3"),
                put(b"d", b"4"),
            ],
            vec![Outcome::Returned(false); 4],
        );
        let mut w1 = log(
            vec![Op::Scan(b"a".to_vec(), b"c".to_vec())],
            vec![Outcome::Scanned(vec![(b"b".to_vec(), b"2".to_vec())])],
        );
        // Over all four puts (events 0 to 7).
        w1.spans = vec![(0, 10)];
        w1.ticks = vec![(0, 10)];
        let (keys, foreign) = histories(&[w0, w1]);
        assert!(foreign.is_empty(), "{foreign:?}");
        let reads = |k: &[u8]| keys[k].writers[1].clone();
        assert_eq!(reads(b"a")[0].action, Action::Get(None));
        assert_eq!(reads(b"b")[0].action, Action::Get(Some(0)));
        assert_eq!(reads(b"c")[0].action, Action::Get(None));
        assert!(reads(b"d").is_empty(), "outside the range");
        // The scan overlapped the puts: a and c absent and b present is
        // explained, and the puts' values after them all.
        assert!(keys[&b"a"[..]].explains(100, Ok(Some(0))));
        // Had it begun after the put of b returned, b absent would not be.
        let mut late = keys[&b"b"[..]].clone();
        late.writers[1][0].called = 4;
        late.writers[1][0].action = Action::Get(None);
        assert!(!late.explains(100, Ok(Some(0))));
        assert!(compare_shared(
            &keys,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"b".to_vec(), b"2".to_vec()),
                (b"c".to_vec(), b"3".to_vec()),
                (b"d".to_vec(), b"4".to_vec()),
            ],
            100
        )
        .is_ok());
        assert!(compare_shared(&keys, vec![(b"a".to_vec(), b"1".to_vec())], 100).is_err());
    }

    #[test]
    fn a_scan_or_a_read_of_a_value_no_one_wrote_is_a_failure() {
        let w0 = log(
            vec![Op::Put(b"a".to_vec(), v(b"1"))],
            vec![Outcome::Returned(false)],
        );
        let w1 = log(
            vec![
                Op::Scan(b"a".to_vec(), b"z".to_vec()),
                Op::Get(b"a".to_vec()),
                Op::Scan(b"b".to_vec(), b"c".to_vec()),
            ],
            vec![
                Outcome::Scanned(vec![(b"a".to_vec(), b"9".to_vec())]),
                Outcome::Read(Some(b"8".to_vec())),
                Outcome::Scanned(vec![(b"a".to_vec(), b"1".to_vec())]),
            ],
        );
        let (keys, foreign) = histories(&[w0, w1]);
        assert_eq!(foreign.len(), 3, "{foreign:?}");
        assert!(
            foreign[0].contains("which no operation wrote"),
            "{}",
            foreign[0]
        );
        assert!(foreign[1].contains("no operation wrote"), "{}", foreign[1]);
        assert!(foreign[2].contains("outside its range"), "{}", foreign[2]);
        // None of them became a read of the key.
        assert!(keys[&b"a"[..]].writers[1].is_empty());
    }

    #[test]
    fn a_full_pool_drops_a_single_op_and_leaves_a_put_many_s_items_optional() {
        let w0 = log(
            vec![
                Op::Put(b"a".to_vec(), v(b"1")),
                Op::PutMany(vec![(b"a".to_vec(), v(b"2")), (b"a".to_vec(), v(b"3"))]),
                Op::PutMany(vec![(b"a".to_vec(), v(b"4"))]),
            ],
            vec![Outcome::Full, Outcome::Returned(true), Outcome::Full],
        );
        let (keys, _) = histories(&[w0]);
        let ops = &keys[&b"a"[..]].writers[0];
        assert_eq!(ops.len(), 3, "the full single put is gone: {ops:?}");
        assert!(ops[..2].iter().all(|o| !o.partial && o.result.is_none()));
        assert!(ops[2].partial);
        let h = &keys[&b"a"[..]];
        let id = |b: &[u8]| h.find_value(b).unwrap();
        assert!(h.explains(100, Ok(Some(id(b"3")))));
        assert!(h.explains(100, Ok(Some(id(b"4")))));
        assert!(!h.explains(100, Ok(Some(id(b"1")))));
        assert!(!h.explains(100, Ok(Some(id(b"2")))));
    }
}
