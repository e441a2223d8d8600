//! The crash simulator on a radix-tree workload built to reach every
//! recovery case of `wort`, `woart` and `art-cow`, and a check that it did:
//! prefix splits (Algorithm 1) crashed between the node's header store and
//! the parent's pointer swap, repaired at open by Algorithm 2 (the published
//! code exited there); merges crashed likewise; WOART orphan pointers (a
//! child stored but not yet in the commit word, or hidden but not yet
//! nulled); chunks taken from the substrate (crashed inside its `activate`,
//! or linked with nothing published in them yet) and large leaves' chunks
//! given back (crashed inside `free_and_store`). The workload grows one
//! node through every ART kind (4 → 16 → 48 → 256), shrinks it back by
//! deletes (256 → 48 → 16 → 4) until it merges away, splits long
//! compressed paths, deletes keys that are prefixes of others, writes,
//! updates and deletes a value too large for a carved block (over 32 KiB),
//! and reopens.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_radix_cases`
//! runs the long budget. The counts in [`pmindex::pm::cases`] are
//! process-wide, so this binary holds one test.

use std::sync::Arc;

use pmindex::pm::cases::Case;
use pmindex::sim::workload::Op;
use pmindex::sim::{run_ops, states_from_env, CrashConfig};

mod common;

fn val(tag: usize) -> Arc<[u8]> {
    vec![tag as u8; 8].into()
}

fn fan(i: usize) -> Vec<u8> {
    // One node with up to 60 children: partial keys spread over the byte.
    vec![b'f', b'a', b'n', (i * 37 % 256) as u8]
}

fn workload() -> Vec<Op> {
    let mut ops = Vec::new();
    // Long shared paths, then keys that leave them early (splits), and a
    // key that is a prefix of the others (an `end` slot).
    for s in [
        "path/long/common/a",
        "path/long/common/b",
        "path/long/common/c",
    ] {
        ops.push(Op::Insert(s.as_bytes().to_vec(), val(1)));
    }
    ops.push(Op::Insert(b"path/lo".to_vec(), val(2)));
    ops.push(Op::Insert(b"path/long/x".to_vec(), val(3)));
    ops.push(Op::Insert(b"path/".to_vec(), val(4)));
    ops.push(Op::Insert(b"pa".to_vec(), val(5)));
    // Growth through every kind.
    for i in 0..60 {
        ops.push(Op::Insert(fan(i), val(i)));
    }
    ops.push(Op::Reopen);
    // Shrink through every kind, down to a merge.
    for i in 0..60 {
        ops.push(Op::Delete(fan(i)));
    }
    // Deletes that merge paths back.
    ops.push(Op::Delete(b"path/long/x".to_vec()));
    ops.push(Op::Delete(b"path/lo".to_vec()));
    ops.push(Op::Delete(b"path/".to_vec()));
    ops.push(Op::Delete(b"path/long/common/b".to_vec()));
    ops.push(Op::Update(b"path/long/common/a".to_vec(), val(9)));
    ops.push(Op::Delete(b"path/long/common/a".to_vec()));
    ops.push(Op::Delete(b"pa".to_vec()));
    // A leaf too large for a carved block takes a chunk of its own, given
    // back when the leaf goes.
    let big: Arc<[u8]> = vec![7u8; 33_000].into();
    ops.push(Op::Insert(b"big".to_vec(), Arc::clone(&big)));
    ops.push(Op::Update(b"big".to_vec(), val(6)));
    ops.push(Op::Update(b"big".to_vec(), big));
    ops.push(Op::Delete(b"big".to_vec()));
    ops.push(Op::Reopen);
    ops
}

fn run(engine: &str, states: usize, wanted: &[Case]) -> Vec<Case> {
    let mut cfg = CrashConfig::new(engine);
    cfg.states = states;
    // One fixed trace: more images per crash point, and points between
    // fences, so that the budget is reached on it.
    cfg.per_point = 60;
    cfg.between = 3;
    common::cases_missed(wanted, || {
        let r = run_ops(&cfg, workload()).expect("crash test runs");
        println!(
            "{engine} recovery cases: {} images ({} during recovery), {} crash points, {:.1} s",
            r.images, r.recovery_images, r.crash_points, r.seconds
        );
        assert!(
            r.failures.is_empty(),
            "{engine}: {} failures; first: {:?}",
            r.failures.len(),
            r.failures[0]
        );
        // Distinct images of one trace are finite (de-duplicated per epoch).
        assert!(r.images >= states.min(300), "only {} images", r.images);
    })
}

#[test]
fn every_radix_recovery_case_is_reached_and_survived() {
    let states = states_from_env(6000);
    let mut missing = Vec::new();
    let common = [
        Case::AllocActivateRolledBack,
        Case::AllocFreeRolledBack,
        Case::RadixChunkReleasedAtOpen,
    ];
    let mut wort = common.to_vec();
    wort.push(Case::RadixHeaderRepaired);
    for c in run("wort", states, &wort) {
        missing.push(("wort", c));
    }
    let mut woart = wort.clone();
    woart.push(Case::RadixOrphanCleared);
    for c in run("woart", states, &woart) {
        missing.push(("woart", c));
    }
    // ART+CoW splits and merges by copy-on-write, so no header is ever
    // left mismatched, and it removes from NODE4/16 by copy (in place only
    // in a full pool), so it leaves orphan pointers only in its NODE48.
    for c in run("art-cow", states, &common) {
        missing.push(("art-cow", c));
    }
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
