//! The crash simulator on the radix trees' batched puts (`Db::put_many`:
//! one write-lock hold and few fences per 32 items; docs/design.md §11,
//! "Batched puts"), for `wort`, `woart` and `art-cow`: batches that split
//! compressed paths and fill `end` slots, batches that grow one node
//! through every ART kind (4 → 16 → 48 → 256) and add to NODE4, NODE16 and
//! NODE48 in place, batches that replace leaves (whose blocks are given
//! back only after the batch's last fence) beside inserts that take new
//! blocks of the same size, keys given twice, a leaf too large for a
//! carved block, and a reopen. While a `put_many` is in flight, the
//! harness lets each of its keys hold its old value or one the call gave
//! it, and nothing else.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_radix_put_many`
//! runs the long budget (per engine).

use std::sync::Arc;

use pmindex::sim::workload::Op;
use pmindex::sim::{run_ops, states_from_env, CrashConfig};

mod common;

fn val(len: usize, tag: usize) -> Arc<[u8]> {
    vec![tag as u8; len].into()
}

fn fan(i: usize) -> Vec<u8> {
    // One node with up to 60 children: partial keys spread over the byte.
    vec![b'f', b'a', b'n', (i * 37 % 256) as u8]
}

fn put_many(items: impl IntoIterator<Item = (Vec<u8>, Arc<[u8]>)>) -> Op {
    Op::PutMany(items.into_iter().collect())
}

fn workload() -> Vec<Op> {
    let paths = [
        "path/long/common/a",
        "path/long/common/b",
        "path/lo",
        "path/long/x",
        "path/",
        "pa",
        "path/long/common/c",
    ];
    let mut ops = vec![put_many(
        paths
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_bytes().to_vec(), val(8, i))),
    )];
    // Growth through every kind, 15 keys per batch, and in-place adds.
    for b in 0..4 {
        ops.push(put_many((b * 15..b * 15 + 15).map(|i| (fan(i), val(8, i)))));
    }
    // Replaced leaves beside new keys that take blocks of a leaf's size
    // (new NODE4s by lazy expansion, ART+CoW's NODE4 copies), a key twice.
    ops.push(put_many(
        (0..6)
            .map(|i| (fan(i), val(8, i + 100)))
            .chain((0..6).map(|i| (format!("new{i}/a").into_bytes(), val(8, i))))
            .chain((0..3).map(|i| (format!("new{i}/b").into_bytes(), val(8, i))))
            .chain([(fan(2), val(8, 7))]),
    ));
    ops.push(Op::Reopen);
    // Updates of path keys (splits' nodes stay), a large leaf in and out.
    ops.push(put_many([
        (b"path/long/common/a".to_vec(), val(20, 1)),
        (b"big".to_vec(), val(33_000, 2)),
        (b"pa".to_vec(), val(0, 3)),
        (b"path/long/y".to_vec(), val(8, 4)),
    ]));
    ops.push(put_many([
        (b"big".to_vec(), val(8, 5)),
        (b"path/long/common/a".to_vec(), val(8, 6)),
        (b"path/l".to_vec(), val(8, 7)),
    ]));
    ops
}

/// Batches whose items reach what earlier items of the same batch changed
/// (docs/design.md §11, "Held-back commits": a commit held back must be
/// stored before a later item reads it): one node split three times, an
/// expansion followed by adds into the node it made, an update of the
/// leaf it moved, growth followed by adds, `end` slots, keys given twice,
/// NODE16 entries past the pointer's line, NODE48 adds in place. (From a
/// review of the held commits, 2026-11-25.)
fn held_workload() -> Vec<Op> {
    let batch = |items: &[(&str, usize)]| {
        put_many(
            items
                .iter()
                .map(|&(k, t)| (k.as_bytes().to_vec(), val(8 + t % 5, t))),
        )
    };
    let mut ops = vec![batch(&[
        ("aaaa1", 1),
        ("aaaa2", 1),
        ("b", 1),
        ("c1", 1),
        ("c2", 1),
        ("c3", 1),
        ("c4", 1),
        ("d", 1),
    ])];
    ops.push(batch(&[
        ("ab", 2),
        ("aab", 2),
        ("aaab", 2),
        ("b2", 2),
        ("b3", 2),
        ("b", 2),
        ("c5", 2),
        ("c6", 2),
        ("c7", 2),
        ("c", 2),
        ("aaaa", 2),
        ("aaaa3", 2),
        ("b4", 2),
        ("b2", 3),
        ("d1", 2),
        ("d", 3),
        ("d2", 2),
    ]));
    let keys: Vec<String> = (b'A'..b'A' + 30)
        .map(|c| format!("e{}", c as char))
        .collect();
    let items: Vec<(&str, usize)> = keys[..3].iter().map(|k| (k.as_str(), 4)).collect();
    ops.push(batch(&items));
    let mut items: Vec<(&str, usize)> = keys[3..].iter().map(|k| (k.as_str(), 5)).collect();
    items.extend([("eA", 6), ("e", 6)]);
    ops.push(batch(&items));
    ops.push(Op::Reopen);
    ops.push(batch(&[
        ("eB1", 7),
        ("eB2", 7),
        ("eB", 8),
        ("c55", 7),
        ("c5", 8),
        ("aab1", 7),
        ("a", 7),
    ]));
    ops
}

fn crash_test(engine: &str) {
    crash_test_of(engine, "put_many", workload);
}

fn crash_test_of(engine: &str, name: &str, workload: fn() -> Vec<Op>) {
    let states = states_from_env(2000);
    let mut cfg = CrashConfig::new(engine);
    cfg.per_point = cfg.per_point.max(states / 300);
    let t = common::crash_budget(&mut cfg, states, |_| workload());
    println!(
        "{engine} {name}: {} images, {} crash points, {} rounds, {:.1} s",
        t.images, t.points, t.rounds, t.seconds
    );
}

#[test]
fn batches_that_reach_their_own_held_commits_survive_every_crash() {
    for engine in ["wort", "woart", "art-cow"] {
        crash_test_of(engine, "held", held_workload);
    }
}

#[test]
fn wort_batched_puts_survive_every_crash() {
    crash_test("wort");
}

#[test]
fn woart_batched_puts_survive_every_crash() {
    crash_test("woart");
}

#[test]
fn art_cow_batched_puts_survive_every_crash() {
    crash_test("art-cow");
}

/// The same workload with the blocks that commits unlink given back at
/// once, not after the batch's last fence: the simulator must see a
/// replaced leaf's block overwritten by a later item while the commit
/// that replaced it can still be lost.
#[test]
fn releasing_before_the_batch_fence_is_caught() {
    for engine in ["woart", "art-cow"] {
        let mut cfg = CrashConfig::new(engine);
        cfg.fault = Some(pmindex::pm::Fault::RadixBatchReleaseEarly);
        cfg.states = 4000;
        let r = run_ops(&cfg, workload()).expect("crash test runs");
        println!(
            "{engine}: {} failures in {} images; first: {:?}",
            r.failures.len(),
            r.images,
            r.failures.first().map(|f| &f.message)
        );
        assert!(!r.failures.is_empty(), "{engine}: early release not caught");
    }
}

/// The same workload with the commits a batch held back stored without
/// the fence before them: the simulator must see a commit reach PM before
/// the node (a lazy expansion's, a split's parent, an ART+CoW copy) or
/// the NODE16/NODE48 pointer it publishes, in every tree.
#[test]
fn held_commits_without_their_fence_are_caught() {
    for engine in ["wort", "woart", "art-cow"] {
        let mut cfg = CrashConfig::new(engine);
        cfg.fault = Some(pmindex::pm::Fault::RadixBatchHeldUnfenced);
        cfg.states = 4000;
        for (name, ops) in [("put_many", workload()), ("held", held_workload())] {
            let r = run_ops(&cfg, ops).expect("crash test runs");
            println!(
                "{engine} {name}: {} failures in {} images; first: {:?}",
                r.failures.len(),
                r.images,
                r.failures.first().map(|f| &f.message)
            );
            assert!(
                !r.failures.is_empty(),
                "{engine} {name}: unfenced held commits not caught"
            );
        }
    }
}
