//! The crash simulator's quick budget on the allocator and on every engine:
//! at least 2,000 distinct crash images each, 0 failures allowed.
//! `PMINDEX_CRASH_STATES=1000000 cargo test --release --test crash_engines`
//! runs the long budget.

use pmindex::sim::{run, states_from_env, CrashConfig};

fn budget() -> usize {
    states_from_env(2000)
}

fn crash_test(engine: &str, eadr: bool) {
    crash_test_with(engine, eadr, &[]);
}

fn crash_test_with(engine: &str, eadr: bool, settings: &[(&str, &str)]) {
    let mut cfg = CrashConfig::new(engine);
    for (k, v) in settings {
        cfg.engine_config.insert(k.to_string(), v.to_string());
    }
    cfg.states = budget();
    cfg.eadr = eadr;
    let r = run(&cfg).expect("crash test runs");
    println!(
        "{engine}{settings:?}{}: {} images ({} during recovery), {} crash points, {} rounds, {:.1} s, {:.0} images/s",
        if eadr { " (eadr)" } else { "" },
        r.images,
        r.recovery_images,
        r.crash_points,
        r.rounds,
        r.seconds,
        r.images_per_second()
    );
    assert!(
        r.failures.is_empty(),
        "{} failures; first: {:?}\nshrunk: {:?}\nreproduce: {}",
        r.failures.len(),
        r.failures[0],
        r.shrunk,
        r.reproduce
    );
    // eADR gives one image per crash point, so a round yields fewer images.
    let want = if eadr { budget() / 2 } else { budget() };
    assert!(
        r.images >= want.min(2000),
        "only {} images checked",
        r.images
    );
}

/// One line per engine (and one for the allocator alone).
macro_rules! crash_suite {
    ($($name:ident => $engine:expr),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn adr() {
                    super::crash_test($engine, false);
                }
                #[test]
                fn eadr() {
                    super::crash_test($engine, true);
                }
            }
        )*
    };
}

crash_suite! {
    allocator => pmindex::sim::ALLOC_SUBJECT,
    pmlog => "pmlog",
    hart => "hart",
    wort => "wort",
    woart => "woart",
    art_cow => "art-cow",
    fptree => "fptree",
    dptree => "dptree",
    fastfair => "fastfair",
    art_bplus => "art-bplus",
}

/// HART in the paper's persist order (same recovery, more fences).
#[test]
fn hart_paper_order() {
    crash_test_with("hart", false, &[("hart.persist_order", "paper")]);
}

/// HART without the point index (`hart.point_index=off`): upserts guess
/// whether they insert and write their leaf first only then, inserts by
/// `insert` descend before they write.
#[test]
fn hart_without_point_index() {
    crash_test_with("hart", false, &[("hart.point_index", "off")]);
}

/// HART with a point index on every ART that holds a key
/// (`hart.point_index_above=0`; by default only ARTs of more than 64 keys
/// get one, which the workload's 48 keys never reach): every insert into
/// an empty ART builds an index, every delete of an ART's last key drops
/// it, and searches, updates and upserts go through it between crashes
/// and after each recovery, which rebuilds it.
#[test]
fn hart_point_index_everywhere() {
    crash_test_with("hart", false, &[("hart.point_index_above", "0")]);
}

/// HART with each new leaf from the next stripe in turn
/// (`hart.stripes=round_robin`): the leaves of one hash key spread over
/// every stripe, as when many threads insert into it (the simulator runs
/// one thread, whose own stripe would hold them all), so recovery meets
/// one ART's leaves in many stripes in every image.
#[test]
fn hart_round_robin_stripes() {
    crash_test_with("hart", false, &[("hart.stripes", "round_robin")]);
}

/// HART in format 5 (`hart.format=5`, the format before 2026-12-02): each
/// value in an object of its own class, which builds of format 5 read.
/// Pools of that format still open here and keep it.
#[test]
fn hart_format_5() {
    crash_test_with("hart", false, &[("hart.format", "5")]);
}

/// The radix trees in format 2 (`<engine>.format=2`: block sizes powers
/// of two only), which older builds still read and this build still
/// writes into such pools.
#[test]
fn radix_format_2() {
    for engine in ["wort", "woart", "art-cow"] {
        crash_test_with(engine, false, &[(&format!("{engine}.format"), "2")]);
    }
}

/// HART with 3-byte hash keys: the hashed index of ARTs (ARTs created and
/// retired in a hash table) instead of the direct array.
#[test]
fn hart_hashed_index() {
    crash_test_with("hart", false, &[("hart.hash_key_len", "3")]);
}

/// FPTree with leaves of 3 slots: the crash workload's 48 keys then fill
/// many leaves, so that splits (torn between the new leaf's link and the
/// old leaf's bitmap) and leaf unlinks are among the crash points.
/// Leaves of 3 slots and a merge every 4 writes: crashes in merges that
/// write in place, rewrite, consolidate and empty leaves.
#[test]
fn dptree_merging() {
    let s = [("dptree.leaf_slots", "3"), ("dptree.merge_min", "4")];
    crash_test_with("dptree", false, &s);
    crash_test_with("dptree", true, &s);
}

/// Nodes of 4 entry slots (3 keys): the workload's 48 keys make a tree of
/// 3 or 4 levels, so that crashes fall in splits at every level (between
/// a new node's link, the old node's cut and the parent's entry) and in
/// the root's growth.
#[test]
fn fastfair_small_nodes() {
    let s = [("fastfair.node_bytes", "128")];
    crash_test_with("fastfair", false, &s);
    crash_test_with("fastfair", true, &s);
}

#[test]
fn fptree_small_leaves() {
    crash_test_with("fptree", false, &[("fptree.leaf_slots", "3")]);
    crash_test_with("fptree", true, &[("fptree.leaf_slots", "3")]);
}

/// A budget too small for every crash point of a round keeps the points
/// before fences and drops those sampled between them first; a smaller one
/// still drops fence points, and says how many.
#[test]
fn a_tight_budget_keeps_fence_points_first() {
    use std::sync::Arc;
    let ops: Vec<pmindex::sim::workload::Op> = (0..40)
        .map(|i| {
            pmindex::sim::workload::Op::Put(
                format!("key{}", i % 25).into_bytes(),
                Arc::from(vec![i as u8; 40]),
            )
        })
        .collect();
    let mut cfg = CrashConfig::new("hart");
    cfg.between = 4;
    cfg.recovery_checks = 0;
    cfg.shrink = false;
    cfg.states = 1_000_000;
    let all = pmindex::sim::run_ops(&cfg, ops.clone()).unwrap();
    assert_eq!(all.skipped_fence_points, 0);
    assert!(all.crash_points > 3 * all.fences, "{all:?}");
    // Four images a point: room for every fence point and the end.
    cfg.states = 4 * (all.fences + 1);
    let r = pmindex::sim::run_ops(&cfg, ops.clone()).unwrap();
    assert!(r.failures.is_empty());
    assert_eq!(r.skipped_fence_points, 0, "{r:?}");
    assert!(r.crash_points >= all.fences, "{r:?}");
    // Room for half of them.
    cfg.states = 2 * (all.fences + 1);
    let r = pmindex::sim::run_ops(&cfg, ops).unwrap();
    assert!(r.failures.is_empty());
    assert!(
        r.skipped_fence_points >= all.fences / 2 - 1,
        "{} of {} fences skipped",
        r.skipped_fence_points,
        all.fences
    );
}
