//! The crash harness's enumeration: crash points of a trace, crash images
//! from the cache model, their recovery (also crashed during recovery) and
//! check on worker threads, and the report of a round.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{CrashConfig, CrashReport, Failure, Subject, ALLOC_SUBJECT, DEFAULT_AFTER_CHURN};
use crate::sim::cache::CacheModel;
use crate::sim::trace::Trace;

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

pub(super) struct Shared<'a> {
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

pub(super) struct EnumStats {
    points: usize,
    /// Points before a fence (or at the end) left out to fit the budget.
    skipped_fence_points: usize,
    overlapping: usize,
    same_key: usize,
    duplicates: usize,
}

/// Walks the trace, materialises images at each crash point, and verifies
/// them on `cfg.threads` threads.
pub(super) fn check_trace<'a>(
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
        points.retain(|&p| subject.progress(p) >= cfg.from_op);
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

pub(super) fn report_from(
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
