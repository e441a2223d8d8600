//! The crash simulator on a HART workload built to reach every recovery
//! case, and a check that it did: torn inserts, torn updates (the update
//! log's recovery, Algorithm 3), large blocks left over between a slot write
//! and an activate or free, chunk recycling (Algorithm 6) rolled back and
//! redone at open, allocator records of every kind rolled back, and a key
//! held by two live leaves (an upsert that wrote its leaf first and found
//! the key present, with `hart.point_index=off`), on a pool with several
//! chunks per list that is reopened (Algorithm 7) mid-run.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_hart_cases`
//! runs the long budget.
//!
//! The counts in [`pmindex::pm::cases`] are process-wide, so this binary
//! holds one test.

use std::sync::Arc;

use pmindex::pm::cases::Case;
use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

fn key(i: usize) -> Vec<u8> {
    // One hash key ("rc"), so one ART and one allocation stripe: the
    // 64-byte leaf list and the value lists get several chunks each.
    format!("rc{i:04}").into_bytes()
}

fn val(len: usize, tag: usize) -> Arc<[u8]> {
    vec![tag as u8; len].into()
}

/// Variant `v` of the workload: the same shape, keys in another order.
fn workload(v: usize) -> Vec<Op> {
    let n = 130; // 56 + 56 + 18 leaves: three leaf chunks.
                 // A permutation of 0..n (37 is prime to 130).
    let key = |i: usize| key((i * 37 + v * 11) % n);
    let mut ops = Vec::new();
    // Values of 8 bytes are inline in the leaf's first line (an insert of
    // one cannot be torn); 24-byte values are value objects in another line.
    for i in 0..n {
        ops.push(Op::Insert(key(i), val(if i % 2 == 0 { 8 } else { 24 }, i)));
    }
    // New 100-byte values for the first 60 keys: the first chunk of 32-byte
    // value objects empties and is recycled.
    for i in 0..60 {
        ops.push(Op::Update(key(i), val(100, i + 1)));
    }
    // Large values in, and out again.
    for i in 60..64 {
        ops.push(Op::Put(key(i), val(5000, i)));
    }
    for i in 60..64 {
        ops.push(Op::Put(key(i), val(16, i + 2)));
    }
    ops.push(Op::Reopen);
    // Deleting the first 70 keys empties the first leaf chunk.
    for i in 0..70 {
        ops.push(Op::Delete(key(i)));
    }
    for i in 70..100 {
        ops.push(Op::Update(key(i), val(30, i + 3)));
    }
    ops.push(Op::Reopen);
    for i in 70..n {
        ops.push(Op::Delete(key(i)));
    }
    for i in 0..10 {
        ops.push(Op::Insert(key(i), val(8, i + 4)));
    }
    // Upserts that insert, each followed by one of a present key: the
    // second writes its leaf first (the stripe's last upsert inserted),
    // finds the key and kills that leaf (a key held by two live leaves at
    // a crash in between). Values inline and in value objects.
    for i in 0..10 {
        ops.push(Op::Put(key(10 + i), val(8, i + 5)));
        ops.push(Op::Put(key(i), val(if i % 2 == 0 { 8 } else { 40 }, i + 6)));
    }
    ops
}

#[test]
fn every_recovery_case_is_reached_and_survived() {
    let states = states_from_env(4000);
    // HART never calls the allocator's `replace`.
    let wanted = [
        Case::AllocActivateRolledBack,
        Case::AllocFreeRolledBack,
        Case::HartTornLeaf,
        Case::HartUpdateFallback,
        Case::HartLeftoverBlock,
        Case::HartChunkRecycledAtOpen,
    ];
    // Two live leaves of a key come only from an upsert that guessed it
    // would insert, which only an index without the point index does (with
    // it, an upsert knows first): the same budget again runs there.
    let mut cfg = CrashConfig::new("hart");
    // One pass over this workload has about 900 crash points: a large budget
    // samples more images at each.
    cfg.per_point = cfg.per_point.max(states / 600);
    let missing = common::cases_missed(&wanted, || {
        let t = common::crash_budget(&mut cfg, states, |v| workload(v as usize));
        println!(
            "hart recovery cases: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    cfg.engine_config
        .insert("hart.point_index".into(), "off".into());
    let both = [&wanted[..], &[Case::HartDuplicateLeaf]].concat();
    let mut missing_off = common::cases_missed(&both, || {
        let t = common::crash_budget(&mut cfg, states, |v| workload(v as usize));
        println!(
            "hart recovery cases, hart.point_index=off: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    missing_off.extend(missing);
    assert!(
        missing_off.is_empty(),
        "recovery cases never reached: {missing_off:?}"
    );
}
