//! Regression test for a HART bug the crash simulator found.
//!
//! A slot whose large value had been freed keeps `LARGE` in its `meta` with a
//! null pointer. Writing a small value into it stored `p_value` before
//! `meta`; a crash between the two left `LARGE` next to a small-object
//! pointer, and recovery tried to free that "large block" and refused the
//! pool ("pointer is not an allocated block"). Slots are now written as
//! `meta = 0`, `p_value`, `meta`.

use std::sync::Arc;

use pmindex::sim::workload::Op;
use pmindex::sim::{run_ops, CrashConfig};

#[test]
fn small_value_into_a_slot_that_held_a_large_one() {
    let key = b"k".to_vec();
    let large: Arc<[u8]> = vec![7u8; 10_000].into();
    let small: Arc<[u8]> = vec![1u8; 100].into();
    let other: Arc<[u8]> = vec![2u8; 200].into();
    let ops = vec![
        Op::Put(key.clone(), large),              // slot 0: large
        Op::Put(key.clone(), small),              // slot 1: small; slot 0's block freed
        Op::Put(key.clone(), Arc::clone(&other)), // slot 0 again: the bug's window
        Op::Put(key, other),
    ];
    let mut cfg = CrashConfig::new("hart");
    cfg.states = 3000;
    cfg.per_point = 40;
    let r = run_ops(&cfg, ops).expect("crash test runs");
    assert!(r.images > 100, "only {} images", r.images);
    assert!(r.failures.is_empty(), "{:?}", r.failures);
}
