//! The crash harness's several writers on keys of their own
//! (`CrashConfig::writers`, docs/design.md §8, "Several writers"): the
//! writers' run on one recorded pool, their logs, and what must hold at
//! each crash point.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::{
    apply_op, compare_models, expected_at, live_failure, panic_message, CrashConfig, Failure,
    KvSettings, LiveRun, Model, Subject,
};
use crate::db::{Db, Options};
use crate::error::{Error, Result};
use crate::sim::trace::{Recorder, Trace};
use crate::sim::workload::Op;

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
/// of its own ([`workload::generate_concurrent`](crate::sim::workload::generate_concurrent)). At a crash point each
/// writer has acknowledged some of its operations and may have one in
/// flight; since no two writers share a key, each writer's keys must hold
/// what its own operations say, and its operation in flight is
/// all-or-nothing on its own, whatever the other writers' are.
pub(super) struct ConcurrentKvSubject {
    settings: KvSettings,
    writers: Vec<WriterLog>,
    /// The writer each key belongs to.
    owner: std::collections::HashMap<Vec<u8>, usize>,
    create_end: usize,
}

impl ConcurrentKvSubject {
    /// Creates a recorded anonymous pool, then runs each plan on a thread
    /// of its own, all started together.
    pub(super) fn record(
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
pub(super) const WRITER_FENCE_DELAY: std::time::Duration = std::time::Duration::from_micros(40);

/// A recorded anonymous pool for `cfg`: the recorder, the settings, the
/// database, and the event at which its creation ended.
pub(super) fn recorded_db(cfg: &CrashConfig) -> Result<(Arc<Recorder>, KvSettings, Db, usize)> {
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
pub(super) fn run_writers<L: Send>(
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
pub(super) fn live_check(db: &Db, acked: usize) -> Option<Failure> {
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
                        crate::sim::show_key(&k)
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

    fn progress(&self, point: usize) -> usize {
        writers_progress(self.writers.iter().map(|w| &w.spans[..]), point)
    }
}

/// [`Subject::progress`] of several writers, given each one's spans: the
/// most operations one of them acknowledged.
pub(super) fn writers_progress<'a>(
    spans: impl Iterator<Item = &'a [(usize, usize)]>,
    point: usize,
) -> usize {
    spans.map(|s| expected_at(s, point).0).max().unwrap_or(0)
}

/// [`Subject::in_flight`] of several writers, given each one's spans.
pub(super) fn writers_in_flight<'a>(
    spans: impl Iterator<Item = &'a [(usize, usize)]>,
    point: usize,
) -> usize {
    spans.filter(|s| expected_at(s, point).1).count()
}

/// [`Subject::at`] of several writers, given each one's operations and
/// their spans: the operations acknowledged by all, and each writer's in
/// flight.
pub(super) fn writers_at<'a>(
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
