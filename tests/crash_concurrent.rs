//! The crash simulator with several writers at once: each engine runs two
//! (or three) workloads on one pool from as many threads, each over its own
//! share of the keys, and every crash image must hold each writer's
//! acknowledged operations, with each writer's operation in flight
//! all-or-nothing (docs/design.md §8, "Several writers"). The threads'
//! interleaving differs between runs, so these tests check different
//! images each time; `PMINDEX_CRASH_STATES=100000 cargo test --release
//! --test crash_concurrent` runs a long budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use pmindex::pm::{Fault, FlushKind, PersistConfig, PmObserver, Pool, PoolConfig};
use pmindex::sim::cache::CacheModel;
use pmindex::sim::trace::{Event, Recorder};
use pmindex::sim::{run, states_from_env, CrashConfig};

/// One test at a time: each test's writers need the machine's cores to run
/// at once (on two cores, two tests side by side leave each writer waiting
/// for a core, and the writers then take turns a whole operation apart).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn config(engine: &str, writers: usize, settings: &[(&str, &str)]) -> CrashConfig {
    let mut cfg = CrashConfig::new(engine);
    for (k, v) in settings {
        cfg.engine_config.insert(k.to_string(), v.to_string());
    }
    cfg.writers = writers;
    cfg.keys = 96;
    cfg.states = states_from_env(1500);
    cfg
}

fn crash_test(engine: &str, writers: usize, settings: &[(&str, &str)]) {
    let _turn = ONE_AT_A_TIME.lock();
    let mut cfg = config(engine, writers, settings);
    // On a loaded machine the writers may take turns whole operations
    // apart in a round; then run another round (seed) until some crash
    // point catches two operations in flight, at most five times.
    for attempt in 0..5 {
        let r = run(&cfg).expect("crash test runs");
        println!(
            "{engine} {settings:?}, {writers} writers, seed {}: {} images ({} during recovery), \
             {} crash points ({} with two or more operations in flight), {} rounds, {:.1} s",
            cfg.seed,
            r.images,
            r.recovery_images,
            r.crash_points,
            r.overlapping_points,
            r.rounds,
            r.seconds
        );
        assert!(
            r.failures.is_empty(),
            "{} failures; first: {:?}\nreproduce: {}",
            r.failures.len(),
            r.failures[0],
            r.reproduce
        );
        assert!(r.images >= cfg.states, "only {} images checked", r.images);
        if r.overlapping_points > 0 {
            return;
        }
        cfg.seed += 1000 * (attempt + 1);
    }
    panic!(
        "in five runs no crash point had two operations in flight: the writers never overlapped"
    );
}

#[test]
fn pmlog() {
    crash_test("pmlog", 2, &[]);
}

/// One writer at a time (the tree-wide lock), leaves of 3 slots.
#[test]
fn fptree() {
    crash_test("fptree", 2, &[("fptree.leaf_slots", "3")]);
}

/// One writer at a time (the tree-wide lock), merging every 4 writes.
#[test]
fn dptree() {
    crash_test(
        "dptree",
        2,
        &[("dptree.leaf_slots", "3"), ("dptree.merge_min", "4")],
    );
}

/// One writer at a time (the tree-wide lock), nodes of 4 entry slots.
#[test]
fn fastfair() {
    crash_test("fastfair", 2, &[("fastfair.node_bytes", "128")]);
}

/// One writer at a time (the tree-wide lock).
#[test]
fn art_bplus() {
    crash_test("art-bplus", 2, &[]);
}

#[test]
fn hart() {
    crash_test("hart", 2, &[]);
}

/// Leaves by hash key: both writers allocate from the same stripes' chunks.
#[test]
fn hart_stripes_by_hash_key() {
    crash_test("hart", 2, &[("hart.stripes", "hash_key")]);
}

#[test]
fn hart_paper_order_three_writers() {
    crash_test("hart", 3, &[("hart.persist_order", "paper")]);
}

/// A point index on every ART that holds a key (by default only on ARTs of
/// more than 64 keys, which the workload never reaches).
#[test]
fn hart_point_index_everywhere() {
    crash_test("hart", 2, &[("hart.point_index_above", "0")]);
}

#[test]
fn hart_hashed_index() {
    crash_test("hart", 2, &[("hart.hash_key_len", "3")]);
}

#[test]
fn wort() {
    crash_test("wort", 2, &[]);
}

#[test]
fn woart_three_writers() {
    crash_test("woart", 3, &[]);
}

#[test]
fn art_cow() {
    crash_test("art-cow", 2, &[]);
}

#[test]
fn wort_tree_wide_lock() {
    crash_test("wort", 2, &[("wort.writers", "locked")]);
}

/// An injected bug is still caught with two writers, and the failure says
/// which writer's operation was in flight.
fn must_catch(fault: Fault, engine: &str) {
    let _turn = ONE_AT_A_TIME.lock();
    let mut cfg = config(engine, 2, &[]);
    cfg.fault = Some(fault);
    cfg.states = 4000;
    let r = run(&cfg).expect("crash test runs");
    assert!(
        !r.failures.is_empty(),
        "fault {fault} on {engine} with two writers was not caught ({} images)",
        r.images
    );
    assert!(r.reproduce.contains("--writers 2"), "{}", r.reproduce);
    assert!(r.shrunk.is_none(), "a run of several writers is not shrunk");
    let f = &r.failures[0];
    println!("{fault} on {engine}: {} ({:?})", f.message, f.in_flight);
    assert!(
        f.message.contains("writer ")
            || f.in_flight
                .as_deref()
                .is_some_and(|s| s.contains("writer ")),
        "the failure names a writer: {f:?}"
    );
}

#[test]
fn hart_missing_leaf_flush_is_caught_with_two_writers() {
    must_catch(Fault::HartSkipLeafFlush, "hart");
}

#[test]
fn wort_missing_leaf_flush_is_caught_with_two_writers() {
    must_catch(Fault::WortSkipLeafFlush, "wort");
}

const POOL: u64 = 2 << 20;

/// A new anonymous pool of `POOL` bytes whose PM events `rec` records.
fn recorded_pool() -> (Arc<Recorder>, Pool) {
    let rec = Arc::new(Recorder::new());
    let cfg = PoolConfig {
        persist: PersistConfig::new(FlushKind::Eadr, None).unwrap(),
        observer: Some(Arc::clone(&rec) as Arc<dyn PmObserver>),
        fault: None,
        small_pages: false,
    };
    let pool = Pool::create_anonymous(POOL, "alloc", &cfg).unwrap();
    (rec, pool)
}

/// Found by the first runs with several writers: two threads setting bits
/// of one PM word with atomic ORs (the allocator's slab bitmaps, one lane
/// each) were recorded after the fact, so the trace could hold the later
/// OR's value first and the earlier one's last, and its crash images lost
/// a bit that memory held ("pointer is not an allocated block" at
/// recovery). The recorder now runs a read-modify-write inside its own
/// order (`PmObserver::rmw`).
#[test]
fn two_threads_read_modify_writes_of_one_word_are_recorded_in_effect_order() {
    let _turn = ONE_AT_A_TIME.lock();
    let (rec, pool) = recorded_pool();
    const WORDS: u64 = 4096;
    let block = pool.reserve(8 * WORDS).unwrap().offset();
    let words: Vec<u64> = (0..WORDS).map(|i| block + 8 * i).collect();
    // Two threads OR one bit each into every word, the two at once (they
    // meet before each word), then clear them again with ANDs.
    let both = |set: bool| {
        let arrived = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (pool, words, arrived) = (&pool, &words, &arrived);
                s.spawn(move || {
                    for (i, &w) in words.iter().enumerate() {
                        arrived.fetch_add(1, Ordering::AcqRel);
                        while arrived.load(Ordering::Acquire) < 2 * (i + 1) {
                            std::hint::spin_loop();
                        }
                        if set {
                            pool.fetch_or_u64(w, 1 << t).unwrap();
                        } else {
                            pool.fetch_and_u64(w, !(1 << t)).unwrap();
                        }
                    }
                });
            }
        });
    };
    both(true);
    for &w in &words {
        assert_eq!(pool.load_u64(w).unwrap(), 0b11);
    }
    let mid = rec.position();
    both(false);
    drop(pool);
    let trace = rec.take();
    // Every store survives (eADR): the image after the ORs must hold what
    // memory held, both bits of every word; after the ANDs, none.
    let word_bits = |model: &CacheModel| -> Vec<u64> {
        words
            .iter()
            .map(|&w| {
                let o = w as usize;
                u64::from_le_bytes(model.durable()[o..o + 8].try_into().unwrap())
            })
            .collect()
    };
    let mut model = CacheModel::new(vec![0; POOL as usize], true);
    for e in &trace.events[..mid] {
        model.apply(&trace, e);
    }
    let lost = word_bits(&model).iter().filter(|&&v| v != 0b11).count();
    for e in &trace.events[mid..] {
        model.apply(&trace, e);
    }
    let kept = word_bits(&model).iter().filter(|&&v| v != 0).count();
    assert_eq!(
        (lost, kept),
        (0, 0),
        "words the trace shows without a bit after the ORs, with one after the ANDs"
    );
}

/// A fence orders only its own thread's flushes, through the pool's API:
/// a store and flush by one thread stay pending after another thread's
/// fence, and are durable after their own thread's.
#[test]
fn another_thread_s_fence_does_not_make_a_flush_durable() {
    let (rec, pool) = recorded_pool();
    let word = pool.reserve(64).unwrap().offset();
    let start = rec.position();
    let step = std::sync::Barrier::new(2);
    let other_fenced = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            pool.store_u64(word, 0xABCD).unwrap();
            pool.flush(word, 8);
            step.wait(); // the other thread fences now
            step.wait();
            pool.fence();
        });
        s.spawn(|| {
            step.wait();
            pool.fence();
            other_fenced.store(rec.position(), Ordering::Relaxed);
            step.wait();
        });
    });
    drop(pool);
    let trace = rec.take();
    let fences: Vec<&Event> = trace.events[start..]
        .iter()
        .filter(|e| e.is_fence())
        .collect();
    assert_eq!(fences.len(), 2);
    assert_ne!(
        fences[0], fences[1],
        "the two fences carry different threads"
    );
    let durable = |upto: usize| {
        let mut model = CacheModel::new(vec![0; POOL as usize], false);
        for e in &trace.events[..upto] {
            model.apply(&trace, e);
        }
        let o = word as usize;
        u64::from_le_bytes(model.durable()[o..o + 8].try_into().unwrap())
    };
    assert_eq!(
        durable(other_fenced.into_inner()),
        0,
        "after the other thread's fence"
    );
    assert_eq!(
        durable(trace.events.len()),
        0xABCD,
        "after its own thread's fence"
    );
}

/// Found by the per-thread fences: hart's recovery repairs torn commit
/// words on its worker threads, and only the thread that called the
/// recovery fenced; a fence orders only its own thread's flushes, so the
/// repairs were never made durable by that fence. Each worker now fences
/// its own repairs. The recorded recoveries of these two seeds repair
/// commit words on a worker (two recovery threads, on any machine), and
/// the harness requires every recovery thread's flushes to be fenced by
/// that thread ("recovery/unfenced").
#[test]
fn hart_recovery_workers_fence_their_own_repairs() {
    let _turn = ONE_AT_A_TIME.lock();
    for seed in [2, 8] {
        let mut cfg = CrashConfig::new("hart");
        cfg.engine_config
            .insert("hart.recovery_threads".into(), "2".into());
        cfg.seed = seed;
        cfg.states = 2000;
        cfg.shrink = false;
        let r = run(&cfg).expect("crash test runs");
        assert!(
            r.failures.is_empty(),
            "seed {seed}: {:?}",
            r.failures.first()
        );
        assert!(r.recovery_images > 0);
    }
}

/// The library refuses writer counts it cannot run.
#[test]
fn writer_counts_out_of_range_are_refused() {
    for (engine, writers) in [("hart", 0), ("hart", 17), ("alloc", 2)] {
        let mut cfg = CrashConfig::new(engine);
        cfg.writers = writers;
        cfg.states = 10;
        match run(&cfg) {
            Err(pmindex::Error::InvalidArgument(m)) => assert!(m.contains("writers"), "{m}"),
            other => panic!("{engine} with {writers} writers: {other:?}"),
        }
    }
}

/// `run_plans` runs given plans, one a writer, each on keys of its own,
/// and refuses plans it cannot check: one writer, a key in two plans, a
/// read (which needs the shared-key check), a reopen.
#[test]
fn given_plans_run_on_keys_of_their_own() {
    use pmindex::sim::run_plans;
    use pmindex::sim::workload::Op;
    let _turn = ONE_AT_A_TIME.lock();
    let v: Arc<[u8]> = vec![5u8; 40].into();
    let plan = |who: &str, n: usize| -> Vec<Op> {
        (0..n)
            .map(|i| Op::Put(format!("{who}{i}").into_bytes(), Arc::clone(&v)))
            .chain(
                (0..n)
                    .step_by(3)
                    .map(|i| Op::Delete(format!("{who}{i}").into_bytes())),
            )
            .collect()
    };
    let mut cfg = CrashConfig::new("wort");
    cfg.states = 400;
    let r = run_plans(&cfg, vec![plan("a", 30), plan("b", 30)]).expect("the plans run");
    assert!(r.failures.is_empty(), "{:?}", r.failures.first());
    assert_eq!(r.ops, 80);
    assert!(r.images > 0);

    // From the 35th operation of one writer on: some points. From the
    // 41st none, though the writers acknowledge 80 together: `from_op`
    // counts one writer's operations (each plan has 40).
    cfg.from_op = 35;
    let late = run_plans(&cfg, vec![plan("a", 30), plan("b", 30)]).expect("the plans run");
    assert!(late.failures.is_empty(), "{:?}", late.failures.first());
    assert!(late.crash_points > 0 && late.images > 0);
    cfg.from_op = 41;
    let none = run_plans(&cfg, vec![plan("a", 30), plan("b", 30)]).expect("the plans run");
    assert_eq!(none.crash_points, 0);
    cfg.from_op = 0;

    let refused = |plans: Vec<Vec<Op>>, what: &str| {
        let e = run_plans(&cfg, plans).expect_err(what);
        assert!(
            matches!(e, pmindex::Error::InvalidArgument(_)),
            "{what}: {e}"
        );
        println!("{what}: {e}");
    };
    refused(vec![plan("a", 3)], "one plan");
    refused(vec![plan("a", 3), plan("a", 2)], "a key in two plans");
    refused(vec![plan("a", 3), vec![Op::Get(b"b0".to_vec())]], "a read");
    refused(vec![plan("a", 3), vec![Op::Reopen]], "a reopen");
}
