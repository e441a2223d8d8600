//! The crash simulator on an `fptree` workload built to reach every
//! recovery case, and a check that it did: leaf splits crashed between the
//! old leaf's link to the new one and its new bitmap (finished at open, the
//! case FPTree's split micro-log covers), deletes crashed between the
//! commit that empties a leaf and the leaf's unlinking (the first leaf and
//! a later one), chunks taken from the substrate and given back, and a
//! value too large for a carved block. Leaves have 3 slots, so a dozen
//! keys make several leaves.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_fptree_cases`
//! runs the long budget. The counts in [`pmindex::pm::cases`] are
//! process-wide, so this binary holds one test.

use std::sync::Arc;

use pmindex::pm::cases::{self, Case};
use pmindex::sim::workload::Op;
use pmindex::sim::{run_ops, states_from_env, CrashConfig};

fn val(tag: usize) -> Arc<[u8]> {
    vec![tag as u8; 8].into()
}

fn key(i: usize) -> Vec<u8> {
    format!("key{:02}", (i * 7) % 24).into_bytes()
}

fn workload() -> Vec<Op> {
    let mut ops = Vec::new();
    // Splits: 24 keys in an order that fills leaves in the middle too.
    for i in 0..24 {
        ops.push(Op::Insert(key(i), val(i)));
    }
    // Updates in full leaves.
    for i in (0..24).step_by(5) {
        ops.push(Op::Update(key(i), val(100 + i)));
    }
    ops.push(Op::Reopen);
    // Deletes that empty leaves: the first leaf's keys, then a middle
    // leaf's, then all the rest.
    for i in 0..24 {
        ops.push(Op::Delete(format!("key{i:02}").into_bytes()));
        if i == 12 {
            ops.push(Op::Reopen);
        }
    }
    // A value over 32 KiB takes a chunk of its own, given back when the
    // key goes; the tree empties and fills again.
    let big: Arc<[u8]> = vec![7u8; 33_000].into();
    ops.push(Op::Insert(b"big".to_vec(), Arc::clone(&big)));
    ops.push(Op::Update(b"big".to_vec(), val(6)));
    ops.push(Op::Update(b"big".to_vec(), big));
    for i in 0..6 {
        ops.push(Op::Put(key(i), val(i)));
    }
    ops.push(Op::Delete(b"big".to_vec()));
    ops.push(Op::Reopen);
    ops
}

#[test]
fn every_fptree_recovery_case_is_reached_and_survived() {
    let states = states_from_env(6000);
    let wanted = [
        Case::FptreeSplitFinished,
        Case::FptreeEmptyLeafUnlinked,
        Case::AllocActivateRolledBack,
        Case::AllocFreeRolledBack,
        Case::RadixChunkReleasedAtOpen,
    ];
    let before: Vec<u64> = wanted.iter().map(|&c| cases::count(c)).collect();
    let mut cfg = CrashConfig::new("fptree");
    cfg.engine_config
        .insert("fptree.leaf_slots".into(), "3".into());
    cfg.states = states;
    // One fixed trace: more images per crash point, and points between
    // fences, so that the budget is reached on it.
    cfg.per_point = 60;
    cfg.between = 3;
    let r = run_ops(&cfg, workload()).expect("crash test runs");
    println!(
        "fptree recovery cases: {} images ({} during recovery), {} crash points, {:.1} s",
        r.images, r.recovery_images, r.crash_points, r.seconds
    );
    assert!(
        r.failures.is_empty(),
        "{} failures; first: {:?}",
        r.failures.len(),
        r.failures[0]
    );
    assert!(r.images >= states.min(300), "only {} images", r.images);
    let mut missing = Vec::new();
    for (&c, b) in wanted.iter().zip(before) {
        let n = cases::count(c) - b;
        println!("  {c:?}: {n}");
        if n == 0 {
            missing.push(c);
        }
    }
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
