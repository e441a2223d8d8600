//! The crash simulator on an `art-bplus` workload built to split NVNodes:
//! fifty keys of one prefix (an NVNode holds 24 fragments, so the prefix's
//! subtree splits twice and more), keys of two other prefixes around it,
//! then deletes that empty NVNodes and whole subtrees (each unlinked by
//! one store) and inserts that refill them. Every split crashes between
//! the new NVNode's link and the old one's bitmap, and recovery must
//! finish it ([`Case::ArtBplusSplitFinished`]); each variant inserts and
//! deletes in another order.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_art_bplus_cases`
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

/// Key `i` of 74, in the order of variant `v` (a stride coprime with 74):
/// 50 of prefix `nv1`, 10 each of `nv0` and `nv2`, and `nv`, `nv0`, `nv1`,
/// `nv2` themselves, keys of subtree `nv` whose subtrees' prefixes extend
/// them (scans interleave the two).
fn key(v: u64, i: usize) -> Vec<u8> {
    let stride = [3, 11, 13, 17, 19, 23, 1, 9][(v % 8) as usize];
    let j = (i * stride + v as usize) % 74;
    let (group, b) = match j {
        0..=9 => (0, j * 25),
        10..=59 => (1, (j - 10) * 5),
        60..=69 => (2, (j - 60) * 25),
        70 => return b"nv".to_vec(),
        _ => return format!("nv{}", j - 71).into_bytes(),
    };
    let mut k = format!("nv{group}").into_bytes();
    k.push(b as u8);
    k
}

fn workload(v: u64) -> Vec<Op> {
    let mut ops = Vec::new();
    for i in 0..74 {
        ops.push(Op::Insert(key(v, i), val(i)));
    }
    for i in (0..74).step_by(9) {
        ops.push(Op::Update(key(v, i), val(100 + i)));
    }
    ops.push(Op::Reopen);
    for i in 0..64 {
        ops.push(Op::Delete(key(v + 3, i)));
        if i == 30 {
            ops.push(Op::Reopen);
        }
    }
    for i in 0..40 {
        ops.push(Op::Put(key(v, i), val(i)));
    }
    ops.push(Op::Reopen);
    ops
}

#[test]
fn every_art_bplus_recovery_case_is_reached_and_survived() {
    let states = states_from_env(3000);
    let wanted = [Case::ArtBplusSplitFinished];
    let mut cfg = CrashConfig::new("art-bplus");
    cfg.per_point = 60;
    cfg.between = 3;
    let missing = common::cases_missed(&wanted, || {
        let t = common::crash_budget(&mut cfg, states, workload);
        println!(
            "art-bplus recovery cases: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
