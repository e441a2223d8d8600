//! The crash simulator with values of 100 KiB to 1 MiB (the API's largest)
//! in a 16 MiB pool, on every engine: large blocks from the substrate,
//! replaced by large and by small values, deleted, and reopened. The
//! random workloads stop at 70 KiB values in 2 MiB pools (review,
//! 2026-12-02: nothing crashed a 1 MiB value).
//!
//! `PMINDEX_CRASH_STATES=5000 cargo test --release --test crash_large_values`
//! runs a longer budget (per engine).

use std::sync::Arc;

use pmindex::engine::{ENGINES, MAX_VALUE_LEN};
use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

fn val(len: usize, tag: u8) -> Arc<[u8]> {
    let mut v = vec![tag; len];
    // Distinct ends: a value cut short or stale at either end shows.
    if len > 1 {
        v[0] = tag ^ 0x5a;
        v[len - 1] = tag ^ 0xa5;
    }
    v.into()
}

fn workload(v: u64) -> Vec<Op> {
    let k = |i: u64| format!("big{}", (i + v) % 4).into_bytes();
    vec![
        Op::Put(k(0), val(300 << 10, 1)),
        Op::Put(k(1), val(MAX_VALUE_LEN, 2)),
        Op::Update(k(0), val(150 << 10, 3)),
        Op::Put(k(2), val(700 << 10, 4)),
        Op::Delete(k(1)),
        Op::Put(k(3), val(MAX_VALUE_LEN, 5)),
        Op::Update(k(2), val(8, 6)),
        Op::Put(k(1), val(16, 7)),
        Op::Reopen,
        Op::Update(k(1), val(100 << 10, 8)),
        Op::Put(k(2), val(MAX_VALUE_LEN - 1, 9)),
        Op::Delete(k(3)),
        Op::Delete(k(0)),
    ]
}

#[test]
fn large_values_survive_every_crash_on_every_engine() {
    let states = states_from_env(600);
    for info in ENGINES {
        let mut cfg = CrashConfig::new(info.name);
        cfg.pool_size = 16 << 20;
        cfg.recovery_checks = 10;
        cfg.per_point = 4;
        let t = common::crash_budget(&mut cfg, states, workload);
        println!(
            "{}: {} images, {} crash points, {} variants, {:.1} s",
            info.name, t.images, t.points, t.rounds, t.seconds
        );
    }
}
