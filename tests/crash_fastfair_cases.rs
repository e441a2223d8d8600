//! The crash simulator on a `fastfair` workload built to reach every
//! recovery case, and a check that it did: shifts crashed with their
//! trace in a node (inserts and deletes), splits crashed between the new
//! node's link and the old node's cut, and splits crashed before their
//! separator reached the parent (at every level of a 4-level tree, and
//! the root's growth). Nodes have 4 entry slots (3 keys), so a few dozen
//! keys make a tall tree; each variant inserts and deletes the keys in
//! another order, so that a budget larger than one trace's distinct
//! images is spent on new traces.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_fastfair_cases`
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

/// Key `i` of 40, in the order of variant `v` (a stride coprime with 40).
/// Keys share their first 8 bytes in fours, so that separators are told
/// apart by their whole keys.
fn key(v: u64, i: usize) -> Vec<u8> {
    let stride = [7, 3, 11, 13, 17, 19, 23, 1][(v % 8) as usize];
    let j = (i * stride + v as usize) % 40;
    format!("key{:05}/{}", j / 4, j % 4).into_bytes()
}

fn workload(v: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    for i in 0..40 {
        ops.push(Op::Insert(key(v, i), val(i)));
    }
    for i in (0..40).step_by(7) {
        ops.push(Op::Update(key(v, i), val(100 + i)));
    }
    ops.push(Op::Reopen);
    for i in 0..40 {
        ops.push(Op::Delete(key(v + 3, i)));
        if i == 20 {
            ops.push(Op::Reopen);
        }
    }
    for i in 0..12 {
        ops.push(Op::Put(key(v, i), val(i)));
    }
    ops.push(Op::Reopen);
    ops
}

#[test]
fn every_fastfair_recovery_case_is_reached_and_survived() {
    let states = states_from_env(3000);
    let wanted = [
        Case::FastfairShiftFinished,
        Case::FastfairSplitCut,
        Case::FastfairSeparatorLinked,
    ];
    let mut cfg = CrashConfig::new("fastfair");
    cfg.engine_config
        .insert("fastfair.node_bytes".into(), "128".into());
    cfg.per_point = 60;
    cfg.between = 3;
    let missing = common::cases_missed(&wanted, || {
        let t = common::crash_budget(&mut cfg, states, workload);
        println!(
            "fastfair recovery cases: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
