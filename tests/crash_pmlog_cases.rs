//! The crash simulator on pmlog workloads built to reach its cleaning
//! (cold keys among hot updates in a 2 MiB pool: without cleaning, each
//! cold key pins a segment and the pool fills after a few; and a full pool
//! whose deletes leave a segment with one small live record) and its
//! recovery cases: torn log tails zeroed, superseded records killed.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_pmlog_cases`
//! runs the long budget.
//!
//! The counts in [`pmindex::pm::cases`] are process-wide, so this binary
//! holds one test.

use std::sync::Arc;

use pmindex::pm::cases::Case;
use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

const POOL: u64 = 2 << 20;
/// The full-pool workload's: large enough that the log keeps a segment's
/// worth free for cleaning (pools of 4 MiB and more).
const FULL_POOL: u64 = 4 << 20;

/// Variant `v`: cold keys, each followed by hot updates that fill more
/// than a segment; a reopen, deletes of some cold keys, and more.
fn workload(v: usize) -> Vec<Op> {
    let cold = |i: usize| format!("cold{:03}", (i * 7 + v) % 16).into_bytes();
    let hot = |j: usize| -> Arc<[u8]> { vec![(j % 251) as u8; 12 << 10].into() };
    let mut ops = Vec::new();
    for i in 0..16 {
        ops.push(Op::Put(cold(i), vec![i as u8; 100].into()));
        for j in 0..24 {
            ops.push(Op::Put(b"hot".to_vec(), hot(i * 24 + j)));
        }
        if i == 8 {
            ops.push(Op::Reopen);
        }
    }
    for i in (0..16).step_by(3) {
        ops.push(Op::Delete(cold(i)));
    }
    for j in 0..30 {
        ops.push(Op::Put(b"hot".to_vec(), hot(j + 7)));
    }
    ops
}

/// A full pool whose first segment keeps one small live record among
/// dead ones: the puts after the deletes find no room for a new segment
/// and clean that one ("make room"); then segments left half live by
/// deletes, cleaned into the room the log keeps for that.
fn full_pool(v: usize) -> Vec<Op> {
    let k = |p: &str, i: usize| format!("{p}{i:03}").into_bytes();
    let val = |i: usize| -> Arc<[u8]> { vec![(i + v) as u8; 8 << 10].into() };
    let mut ops = vec![Op::Put(b"s".to_vec(), Arc::from(&b""[..]))];
    for i in 0..28 {
        ops.push(Op::Put(k("a", i), val(i)));
    }
    // More than the pool holds: the last ones fail (PoolFull).
    for i in 0..480 {
        ops.push(Op::Put(k("f", i), val(i)));
    }
    for i in 0..28 {
        ops.push(Op::Delete(k("a", i)));
    }
    for i in 0..20 {
        ops.push(Op::Put(k("b", i), val(i)));
    }
    // Every other one of the first 320 deleted (each segment half live),
    // then 120 puts: they fit only once half-live segments are cleaned.
    for i in (0..320).step_by(2) {
        ops.push(Op::Delete(k("f", i)));
    }
    for i in 0..120 {
        ops.push(Op::Put(k("g", i), val(i)));
    }
    ops
}

/// Runs `ops` live on a pool of the simulator's size; panics if a put
/// fails for want of room, except those of keys that `may_fail` names.
fn run_live(ops: &[Op], pool_size: u64, may_fail: impl Fn(&[u8]) -> bool, ctx: &str) {
    let db = pmindex::Db::create_anonymous(&pmindex::Options {
        pool_size,
        ..pmindex::Options::with_engine("pmlog")
    })
    .unwrap();
    for (n, op) in ops.iter().enumerate() {
        let r = match op {
            Op::Put(k, val) => db.put(k, val).map(|_| ()),
            Op::Delete(k) => db.delete(k).map(|_| ()),
            _ => Ok(()),
        };
        if let Err(e) = r {
            assert!(may_fail(op.key()), "{ctx}, op {n} ({op}): {e}");
        }
    }
}

/// Both workloads need cleaning: run live on a pool of the simulator's
/// size, no put fails for want of room (but the full pool's fill).
#[test]
fn cleaning_and_every_recovery_case_are_reached_and_survived() {
    for v in 0..2 {
        run_live(&workload(v), POOL, |_| false, &format!("variant {v}"));
        let ctx = format!("full pool {v}");
        run_live(&full_pool(v), FULL_POOL, |k| k[0] == b'f', &ctx);
    }
    let states = states_from_env(4000);
    let mut cfg = CrashConfig::new("pmlog");
    cfg.pool_size = POOL;
    cfg.per_point = cfg.per_point.max(states / 600);
    let wanted = [Case::PmlogTornTail, Case::PmlogLoserKilled];
    let missing = common::cases_missed(&wanted, || {
        let t = common::crash_budget(&mut cfg, states, |v| workload(v as usize));
        println!(
            "pmlog cases: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
        cfg.pool_size = FULL_POOL;
        let t = common::crash_budget(&mut cfg, states / 2, |v| full_pool(v as usize));
        println!(
            "pmlog, a full pool: {} images, {} crash points, {} variants, {:.1} s",
            t.images, t.points, t.rounds, t.seconds
        );
    });
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
