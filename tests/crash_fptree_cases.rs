//! The crash simulator on an `fptree` workload built to reach every
//! recovery case, and a check that it did: leaf splits crashed between the
//! old leaf's link to the new one and its new bitmap (finished at open, the
//! case FPTree's split micro-log covers), deletes crashed between the
//! commit that empties a leaf and the leaf's unlinking (the first leaf and
//! later ones), chunks taken from the substrate and given back, and a
//! value too large for a carved block. Leaves have 3 slots, so a dozen
//! keys make several leaves; each variant of the workload inserts and
//! deletes the keys in another order, so that a budget larger than one
//! trace's distinct images is spent on new traces.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_fptree_cases`
//! runs the long budget. The counts in [`pmindex::pm::cases`] are
//! process-wide, so this binary holds one test.

use std::sync::Arc;

use pmindex::pm::cases::Case;
use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

fn val(tag: usize) -> Arc<[u8]> {
    vec![tag as u8; 8].into()
}

/// Key `i` of 24, in the order of variant `v` (a stride coprime with 24).
fn key(v: u64, i: usize) -> Vec<u8> {
    let stride = [7, 5, 11, 13, 17, 19, 23, 1][(v % 8) as usize];
    format!("key{:02}", (i * stride + v as usize) % 24).into_bytes()
}

fn workload(v: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    // Splits: 24 keys in an order that fills leaves in the middle too.
    for i in 0..24 {
        ops.push(Op::Insert(key(v, i), val(i)));
    }
    // Updates in full leaves.
    for i in (0..24).step_by(5) {
        ops.push(Op::Update(key(v, i), val(100 + i)));
    }
    ops.push(Op::Reopen);
    // Deletes that empty leaves: in key order (the first leaf's keys, then
    // the next one's...) or in the variant's order, with a reopen halfway.
    for i in 0..24 {
        let k = if v.is_multiple_of(2) {
            format!("key{i:02}").into_bytes()
        } else {
            key(v + 1, i)
        };
        ops.push(Op::Delete(k));
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
        ops.push(Op::Put(key(v, i), val(i)));
    }
    ops.push(Op::Delete(b"big".to_vec()));
    ops.push(Op::Reopen);
    ops
}

#[test]
fn every_fptree_recovery_case_is_reached_and_survived() {
    let states = states_from_env(3000);
    let wanted = [
        Case::FptreeSplitFinished,
        Case::FptreeEmptyLeafUnlinked,
        Case::AllocActivateRolledBack,
        Case::AllocFreeRolledBack,
        Case::RadixChunkReleasedAtOpen,
    ];
    let mut cfg = CrashConfig::new("fptree");
    cfg.engine_config
        .insert("fptree.leaf_slots".into(), "3".into());
    // More images per crash point, and points between fences.
    cfg.per_point = 60;
    cfg.between = 3;
    let missing = common::cases_missed(&wanted, || {
        let t = common::crash_budget(&mut cfg, states, workload);
        println!(
            "fptree recovery cases: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
