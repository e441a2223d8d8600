//! Multi-threaded stress test of `fptree` against an oracle (the test is in
//! `common/stress.rs`): writers, scanners and batched readers on one tree
//! behind its reader-writer lock, with leaves of 40 slots (the default)
//! and of 3 (a split or an unlink every few writes, under the scanners).
//!
//! `PMINDEX_STRESS_THREADS=16 PMINDEX_STRESS_OPS=5000 cargo test --release
//! --test fptree_stress` on a bigger machine.

mod common;

use common::stress::{env, stress, KEYS};

/// Key `j` of writer `w`: the writers' keys interleave in key order, so
/// that they share leaves; each writer's lone key sorts first.
fn key(w: usize, j: usize) -> Vec<u8> {
    if j == KEYS {
        return vec![0x01, w as u8];
    }
    format!("k{:05}.{w:02}", (j * 7919) % KEYS).into_bytes()
}

fn ops() -> usize {
    env("PMINDEX_STRESS_OPS", 100_000) / 4
}

#[test]
fn fptree_writers_scanners_and_batches() {
    stress("fptree", key, ops());
}

#[test]
fn fptree_small_leaves() {
    stress("fptree:leaf_slots=3", key, ops());
}
