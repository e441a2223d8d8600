//! The WOART prefix-split bug that Witcher (SOSP'21) found in the published
//! code, which persisted the parent pointer and the split node's path in two
//! steps: here the node's depth, path length and path are one 8-byte word,
//! stored before the parent's pointer swap (the commit). This test crashes a
//! sequence of prefix splits at every persist point and checks that each
//! image recovers to a correct tree, and that the images include the state
//! between the header store and the swap (repaired by Algorithm 2 at open).
//! The counts in [`pmindex::pm::cases`] are process-wide, so this binary
//! holds one test.

use std::sync::Arc;

use pmindex::pm::cases::{self, Case};
use pmindex::sim::workload::Op;
use pmindex::sim::{run_ops, CrashConfig};

fn ops() -> Vec<Op> {
    let v: Arc<[u8]> = vec![1u8; 8].into();
    let mut ops = Vec::new();
    // A long compressed path (longer than the 5 bytes the header stores),
    // then keys leaving it at every depth: each insert splits the path.
    for k in ["user:0000000000:a", "user:0000000000:b"] {
        ops.push(Op::Insert(k.as_bytes().to_vec(), Arc::clone(&v)));
    }
    for k in [
        "user:00000000009",
        "user:000009",
        "user:09",
        "user:",
        "usex",
        "u",
    ] {
        ops.push(Op::Insert(k.as_bytes().to_vec(), Arc::clone(&v)));
    }
    ops.push(Op::Delete(b"user:000009".to_vec()));
    ops
}

#[test]
fn prefix_splits_survive_every_crash_and_are_repaired() {
    for engine in ["woart", "wort"] {
        let before = cases::count(Case::RadixHeaderRepaired);
        let mut cfg = CrashConfig::new(engine);
        cfg.states = 3000;
        cfg.per_point = 60;
        cfg.between = 3;
        let r = run_ops(&cfg, ops()).expect("crash test runs");
        let repaired = cases::count(Case::RadixHeaderRepaired) - before;
        println!(
            "{engine}: {} images, {} crash points, {repaired} headers repaired",
            r.images, r.crash_points
        );
        assert!(r.failures.is_empty(), "{engine}: {:?}", r.failures[0]);
        assert!(
            repaired > 0,
            "{engine}: no image held a split between its header store and its pointer swap"
        );
    }
}
