//! Tests of the runner (`super`): phases, threads, sampling, pools.

use super::*;
use crate::bench::keys::KeyKind;
use crate::bench::mix::Mix;
use crate::bench::NoProgress;

/// [`run_engine`], round 0, on `engine` without settings.
fn run_plain(c: &RunConfig, e: &Experiment, prep: &Prepared, engine: &'static str) -> EngineRun {
    run_engine(c, e, prep, &EngineSpec::plain(engine), 0, &mut NoProgress).unwrap()
}

fn cfg(dir: &std::path::Path) -> RunConfig {
    RunConfig {
        engines: vec![EngineSpec::plain("pmlog")],
        baseline: "pmlog".into(),
        rounds: 1,
        seed: 7,
        dir: dir.to_path_buf(),
        pool_size: None,
        flush: FlushKind::Eadr,
        dictionary: "/nonexistent".into(),
        sample_every: 1,
        scan_time_limit: None,
        load_threads: None,
        load_by_put: false,
        prefault: false,
    }
}

fn exp(threads: usize, phases: Vec<PhaseSpec>) -> Experiment {
    Experiment {
        id: "t".into(),
        title: "t".into(),
        keys: KeyKind::RandString,
        records: 3000,
        value_size: 16,
        threads,
        latency: None,
        phases,
    }
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmindex-runner-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A thread that panics (here: zero load threads, which the CLI and
/// `suite::run` refuse, divide by zero in the worker) ends its phase:
/// the panic reaches the caller. Before, the phase waited for ever for
/// the thread to count itself finished.
#[test]
fn a_panicking_thread_ends_its_phase_instead_of_hanging_it() {
    let dir = tmpdir("panic");
    let path = dir.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let e = exp(2, vec![PhaseSpec::Load, PhaseSpec::Search]);
        let mut c = cfg(&dir);
        c.load_threads = Some(0);
        let prep = prepare(&c, &e).unwrap();
        let spec = EngineSpec::plain("pmlog");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_engine(&c, &e, &prep, &spec, 0, &mut NoProgress).is_ok()
        }));
        let _ = tx.send(r.is_err());
    });
    let panicked = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the phase ended");
    assert!(panicked, "the worker's panic reaches the caller");
    // The pool went with the unwinding; the directory is left to us.
    assert_eq!(std::fs::read_dir(&path).unwrap().count(), 0);
    std::fs::remove_dir(&path).unwrap();
}

/// Threads at the start gate leave it when all have arrived, or when
/// one that will not arrive has set `stop`.
#[test]
fn the_start_gate_opens_for_all_or_on_stop() {
    let live = Live {
        next_key: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        done: AtomicU64::new(0),
        finished: AtomicUsize::new(0),
        arrived: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| live.start_together(3));
        }
    });
    assert_eq!(live.arrived.load(Ordering::Relaxed), 3);
    live.arrived.store(0, Ordering::Relaxed);
    std::thread::scope(|s| {
        s.spawn(|| live.start_together(3));
        std::thread::sleep(Duration::from_millis(20));
        live.stop.store(true, Ordering::Relaxed);
    });
}

/// `load_threads` sets the load phase's threads alone; the phases after
/// it use the experiment's, on the pool that many loaded.
#[test]
fn the_load_phase_runs_on_its_own_thread_count() {
    let dir = tmpdir("load-threads");
    for (engine, load) in [("pmlog", 1), ("hart", 1), ("wort", 2)] {
        let e = exp(
            if load == 1 { 2 } else { 1 },
            vec![
                PhaseSpec::Load,
                PhaseSpec::Search,
                PhaseSpec::Update,
                PhaseSpec::Delete,
            ],
        );
        let mut c = cfg(&dir);
        c.load_threads = Some(load);
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, engine);
        let threads: Vec<_> = run
            .phases
            .iter()
            .map(|p| (p.phase.as_str(), p.threads))
            .collect();
        let rest = e.threads;
        assert_eq!(
            threads,
            [
                ("insert", load),
                ("search", rest),
                ("update", rest),
                ("delete", rest)
            ],
            "{engine}"
        );
        for p in &run.phases {
            assert_eq!((p.errors, p.misses), (0, 0), "{engine}: {p:?}");
            assert_eq!(p.ops, 3000, "{engine}: {}", p.phase);
        }
    }
    std::fs::remove_dir(&dir).unwrap();
}

/// `load_by_put` loads with upserts: every key goes in once (an upsert
/// that replaced would count as an error), and the phases after it find
/// every key.
#[test]
fn a_load_by_put_upserts_every_key_once() {
    let dir = tmpdir("load-by-put");
    for engine in ["pmlog", "hart", "wort"] {
        let e = exp(
            1,
            vec![
                PhaseSpec::Load,
                PhaseSpec::Search,
                PhaseSpec::Update,
                PhaseSpec::Delete,
            ],
        );
        let mut c = cfg(&dir);
        c.load_by_put = true;
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, engine);
        for p in &run.phases {
            assert_eq!((p.errors, p.misses), (0, 0), "{engine}: {p:?}");
            assert_eq!(p.ops, 3000, "{engine}: {}", p.phase);
        }
    }
    std::fs::remove_dir(&dir).unwrap();
}

/// `prefault` maps the pool after create and again after the reopen
/// of a recovery phase (the run reads it from the pool at both), and
/// the phases after it still run clean.
#[test]
fn a_prefaulted_pool_is_mapped_after_create_and_after_each_reopen() {
    let dir = tmpdir("prefault");
    let phases = |recover: bool| {
        let mut p = vec![PhaseSpec::Load];
        if recover {
            p.push(PhaseSpec::Recover);
        }
        p.extend([PhaseSpec::Search, PhaseSpec::Delete]);
        p
    };
    for (prefault, recover) in [(true, true), (true, false), (false, true)] {
        let e = exp(1, phases(recover));
        let mut c = cfg(&dir);
        c.prefault = prefault;
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "wort");
        assert_eq!(
            run.prefaulted, prefault,
            "prefault {prefault}, recover {recover}"
        );
        for p in &run.phases {
            assert_eq!(p.errors, 0, "{p:?}");
        }
    }
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn every_phase_kind_runs_clean_on_one_and_two_threads() {
    let dir = tmpdir("phases");
    for threads in [1, 2] {
        let e = exp(
            threads,
            vec![
                PhaseSpec::Load,
                PhaseSpec::Recover,
                PhaseSpec::Search,
                PhaseSpec::Update,
                PhaseSpec::mix(Mix::named("ycsb-d").unwrap(), 2000, None, 10),
                PhaseSpec::mix(Mix::named("ycsb-f").unwrap(), 2000, None, 10),
                PhaseSpec::Scan {
                    name: "scan".into(),
                    count: 50,
                    len: ScanLen::Fixed { len: 20 },
                },
                PhaseSpec::mix(Mix::named("hart-read-intensive").unwrap(), 2000, None, 10),
                PhaseSpec::Delete,
            ],
        );
        let c = cfg(&dir);
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "pmlog");
        let names: Vec<_> = run.phases.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(
            names,
            [
                "insert",
                "recovery",
                "search",
                "update",
                "ycsb-d",
                "ycsb-f",
                "scan",
                "hart-read-intensive",
                "delete"
            ]
        );
        for p in &run.phases {
            assert_eq!(p.errors, 0, "{threads} threads, {}: {p:?}", p.phase);
            // Recovery is one `Db::open`, on one thread.
            let want = if p.phase == "recovery" { 1 } else { threads };
            assert_eq!(p.threads, want);
        }
        let search = &run.phases[2];
        assert_eq!((search.ops, search.misses), (3000, 0));
        assert_eq!(search.latency.unwrap().samples, 3000);
        let ycsb_d = &run.phases[4];
        assert_eq!(ycsb_d.ops, 2000);
        let kinds: Vec<_> = ycsb_d.by_op.iter().map(|o| o.op).collect();
        assert_eq!(kinds, [OpKind::Insert, OpKind::Read]);
        // Range-query phases wrap around the end of the key space, so
        // every query returns its full length.
        assert!((run.phases[6].records_per_scan.unwrap() - 20.0).abs() < 1e-9);
        // The read-intensive mix deletes keys, so the final delete finds some gone.
        assert!(run.phases[8].misses > 0);
        let rec = run.recovery.unwrap();
        assert_eq!(rec.records, 3000);
        assert!(rec.build_secs > 0.0 && rec.recovery_secs > 0.0);
        let mem = run.memory.unwrap();
        assert!(mem.pm_bytes > 3000 * 16);
        // The counting allocator is not the unit tests' global allocator.
        assert_eq!(mem.dram_bytes, None);
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "pool left behind"
    );
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn one_key_phases_time_every_nth_operation_of_each_thread_and_count_misses() {
    let dir = tmpdir("sampled");
    let mut c = cfg(&dir);
    c.sample_every = 7;
    let read_only = PhaseSpec::mix(Mix::parse("read=100").unwrap(), 2000, None, 10);
    for threads in [1, 2] {
        let phases = vec![PhaseSpec::Load, PhaseSpec::Search, read_only.clone()];
        let e = exp(threads, phases);
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "wort");
        // Each thread times its operations 0, 7, 14, ... of its share,
        // across the runs between its checkpoints.
        let timed = |ops: u64| threads as u64 * (ops / threads as u64).div_ceil(7);
        for (i, ops) in [(0, 3000), (1, 3000), (2, 2000)] {
            let p = &run.phases[i];
            assert_eq!((p.ops, p.misses, p.errors), (ops, 0, 0), "{p:?}");
            assert_eq!(p.latency.unwrap().samples, timed(ops), "{p:?}");
        }
        // After every key is deleted, each search is a miss, not an
        // error, and still counted and timed.
        let e = exp(
            threads,
            vec![PhaseSpec::Load, PhaseSpec::Delete, PhaseSpec::Search],
        );
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "woart");
        let p = &run.phases[2];
        assert_eq!((p.ops, p.misses, p.errors), (3000, 3000, 0));
        assert_eq!(p.latency.unwrap().samples, timed(3000));
    }
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_sampler_picks_every_nth_operation_from_the_first() {
    for every in [1, 2, 7, 32] {
        let mut s = Sampler::new(every);
        let picked: Vec<u64> = (0..100).filter(|_| s.next()).collect();
        let want: Vec<u64> = (0..100).step_by(every as usize).collect();
        assert_eq!(picked, want, "every {every}");
    }
    // 0 is taken as 1 (the CLI refuses it; the runner does not rely on that).
    let mut s = Sampler::new(0);
    assert!((0..5).all(|_| s.next()));
}

#[test]
fn multi_key_gets_read_every_key_and_count_the_missing_ones() {
    let dir = tmpdir("many");
    let c = cfg(&dir);
    for threads in [1, 2] {
        let many = PhaseSpec::SearchMany { batch: 7 };
        let e = exp(threads, vec![PhaseSpec::Load, many.clone()]);
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "wort");
        let p = &run.phases[1];
        assert_eq!(p.phase, "search-many");
        assert_eq!((p.ops, p.misses, p.errors), (3000, 0, 0));
        assert_eq!(p.threads, threads);
        let kinds: Vec<_> = p.by_op.iter().map(|o| (o.op, o.ops)).collect();
        assert_eq!(kinds, [(OpKind::Read, 3000)]);
        // One latency sample per call (every call is timed here): a
        // thread's share of 3000 / threads keys in calls of 7.
        let calls = threads as u64 * (3000 / threads as u64).div_ceil(7);
        assert_eq!(p.latency.unwrap().samples, calls);

        // After every key is deleted, each read is a miss, not an error.
        let e = exp(threads, vec![PhaseSpec::Load, PhaseSpec::Delete, many]);
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, "pmlog");
        let p = &run.phases[2];
        assert_eq!((p.ops, p.misses, p.errors), (3000, 3000, 0));
    }
    // A call is timed when it holds an operation the one-key loop
    // would time: with every 8th and calls of 3 keys, the calls that
    // start at 6, 7 mod 8 or hold a multiple of 8.
    let mut c = cfg(&dir);
    c.sample_every = 8;
    let e = exp(1, vec![PhaseSpec::Load, PhaseSpec::SearchMany { batch: 3 }]);
    let prep = prepare(&c, &e).unwrap();
    let run = run_plain(&c, &e, &prep, "woart");
    let timed = (0..3000u64)
        .step_by(3)
        .filter(|&i| (i..i + 3).any(|j| j % 8 == 0))
        .count() as u64;
    assert_eq!(run.phases[1].latency.unwrap().samples, timed);

    let e = exp(1, vec![PhaseSpec::Load, PhaseSpec::SearchMany { batch: 0 }]);
    assert!(e.check().unwrap_err().to_string().contains("--get-many"));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn multi_key_puts_insert_every_record_again_after_delete() {
    let dir = tmpdir("putmany");
    let c = cfg(&dir);
    for (threads, engine) in [(1, "hart"), (2, "hart"), (2, "wort")] {
        let e = exp(
            threads,
            vec![
                PhaseSpec::Load,
                PhaseSpec::Delete,
                PhaseSpec::InsertMany { batch: 7 },
                PhaseSpec::Search,
            ],
        );
        let prep = prepare(&c, &e).unwrap();
        let run = run_plain(&c, &e, &prep, engine);
        let p = &run.phases[2];
        assert_eq!(p.phase, "insert-many");
        assert_eq!((p.ops, p.misses, p.errors), (3000, 0, 0));
        let kinds: Vec<_> = p.by_op.iter().map(|o| (o.op, o.ops)).collect();
        assert_eq!(kinds, [(OpKind::Insert, 3000)]);
        let calls = threads as u64 * (3000 / threads as u64).div_ceil(7);
        assert_eq!(p.latency.unwrap().samples, calls);
        // Every key is back with its value: no miss, no wrong value.
        let search = &run.phases[3];
        assert_eq!((search.ops, search.misses, search.errors), (3000, 0, 0));
    }
    let e = exp(1, vec![PhaseSpec::Load, PhaseSpec::InsertMany { batch: 0 }]);
    assert!(e.check().unwrap_err().to_string().contains("--put-many"));
    let e = exp(1, vec![PhaseSpec::Load, PhaseSpec::InsertMany { batch: 4 }]);
    assert!(e
        .check()
        .unwrap_err()
        .to_string()
        .contains("must follow delete"));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn search_many_reads_in_the_order_of_search_and_moves_no_other_phase() {
    let basic = crate::bench::suite::basic_phases(1000, 10, None, None);
    let many = crate::bench::suite::basic_phases(1000, 10, Some(16), Some(16));
    assert_eq!(many[3], PhaseSpec::SearchMany { batch: 16 });
    assert_eq!(phase_seed(42, &many, 3), phase_seed(42, &many, 2));
    for (pi, p) in basic.iter().enumerate() {
        let mi = many.iter().position(|q| q == p).unwrap();
        assert_eq!(
            phase_seed(42, &basic, pi),
            phase_seed(42, &many, mi),
            "{p:?}"
        );
    }
    // Distinct phases still draw from distinct seeds.
    assert_ne!(phase_seed(42, &many, 2), phase_seed(42, &many, 4));
}

#[test]
fn scan_phases_stop_at_the_time_limit() {
    let dir = tmpdir("limit");
    let mut c = cfg(&dir);
    c.scan_time_limit = Some(Duration::from_millis(30));
    let e = exp(
        1,
        vec![
            PhaseSpec::Load,
            PhaseSpec::Scan {
                name: "scan".into(),
                count: 10_000_000,
                len: ScanLen::Fixed { len: 3000 },
            },
        ],
    );
    let prep = prepare(&c, &e).unwrap();
    let run = run_plain(&c, &e, &prep, "pmlog");
    let scan = &run.phases[1];
    assert!(scan.stopped_early);
    assert!(scan.ops < 10_000_000 && scan.ops > 0);
    assert!(scan.secs < 5.0);
    assert!(!run.phases[0].stopped_early);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_full_pool_is_an_error_and_the_pool_is_removed() {
    let dir = tmpdir("full");
    let mut c = cfg(&dir);
    c.pool_size = Some(1 << 20);
    let mut e = exp(1, vec![PhaseSpec::Load]);
    e.records = 100_000;
    e.value_size = 100;
    let prep = prepare(&c, &e).unwrap();
    let err = run_engine(
        &c,
        &e,
        &prep,
        &EngineSpec::plain("pmlog"),
        0,
        &mut NoProgress,
    )
    .unwrap_err();
    assert!(err.to_string().contains("phase `insert`"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}
