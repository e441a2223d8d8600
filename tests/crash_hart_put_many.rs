//! The crash simulator on HART's batched puts (`Db::put_many`, one fence
//! per batch of up to 32 items; docs/design.md §7, "Batched puts"): batches
//! of fresh keys (inline values, value objects, a large block), batches
//! that update every key they name, mixed batches, keys given twice in one
//! call, a batch that spreads over many ARTs and one that stays in a
//! single ART, across a reopen. While a `put_many` is in flight, the
//! harness lets each of its keys hold its old value or one the call gave
//! it, and nothing else.
//!
//! `PMINDEX_CRASH_STATES=100000 cargo test --release --test crash_hart_put_many`
//! runs the long budget.

use std::sync::{Arc, Mutex};

use pmindex::pm::cases::{self, Case};
use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

/// Key `i`: the first 40 share one hash key ("pm", one ART); the others
/// spread over many.
fn key(i: usize) -> Vec<u8> {
    if i < 40 {
        format!("pm{i:03}").into_bytes()
    } else {
        let mut k = (i as u64 * 0x9E37_79B9).to_be_bytes().to_vec();
        k.push(b'x');
        k
    }
}

fn val(len: usize, tag: usize) -> Arc<[u8]> {
    vec![tag as u8; len].into()
}

fn put_many(items: impl IntoIterator<Item = (usize, usize, usize)>) -> Op {
    Op::PutMany(
        items
            .into_iter()
            .map(|(k, len, tag)| (key(k), val(len, tag)))
            .collect(),
    )
}

fn workload() -> Vec<Op> {
    let mut ops = vec![
        // Fresh keys in one ART: inline values and 24-byte value objects.
        put_many((0..16).map(|i| (i, if i % 2 == 0 { 8 } else { 24 }, i))),
        // Fresh keys over many ARTs, past one batch (40 items: 32 + 8).
        put_many((40..80).map(|i| (i, 12, i))),
        // Every key updated: slot flips, value objects replaced and freed
        // after the fence, reused by the next batch.
        put_many((0..16).map(|i| (i, 40, i + 1))),
        put_many((0..16).map(|i| (i, 40, i + 2))),
    ];
    // Mixed: updates and inserts, a key given twice (a second batch), a
    // large block, an empty value.
    ops.push(put_many([
        (3, 100, 7),
        (20, 8, 8),
        (41, 5000, 9),
        (21, 0, 10),
        (3, 16, 11),
        (22, 300, 12),
    ]));
    ops.push(Op::Reopen);
    ops.push(put_many((16..40).map(|i| (i, 30, i))));
    ops.push(Op::Delete(key(5)));
    ops.push(put_many([(5, 8, 13), (6, 8, 14), (41, 16, 15)]));
    ops.push(put_many((40..80).rev().map(|i| (i, 64, i + 3))));
    ops
}

#[test]
fn batched_puts_survive_every_crash() {
    batched_puts(&[]);
}

/// The same with 3-byte hash keys: the hashed index of ARTs, whose
/// batches look their ARTs up in the hash table (the persist order is the
/// direct index's).
#[test]
fn batched_puts_on_the_hashed_index_survive_every_crash() {
    batched_puts(&[("hart.hash_key_len", "3")]);
}

/// The case counters are per process: the two tests take turns, so that
/// each counts its own cases.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn batched_puts(settings: &[(&str, &str)]) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let states = states_from_env(3000);
    let cases_of_interest = [Case::HartTornLeaf, Case::HartUpdateFallback];
    let before: Vec<u64> = cases_of_interest.iter().map(|&c| cases::count(c)).collect();
    let mut cfg = CrashConfig::new("hart");
    for (k, v) in settings {
        cfg.engine_config.insert(k.to_string(), v.to_string());
    }
    cfg.per_point = cfg.per_point.max(states / 300);
    let t = common::crash_budget(&mut cfg, states, |_| workload());
    println!(
        "hart put_many {settings:?}: {} images, {} crash points, {} rounds, {:.1} s",
        t.images, t.points, t.rounds, t.seconds
    );
    // The crashes fell inside batches: leaves written but not committed,
    // and updates whose commit word did not persist, were both recovered.
    for (&c, b) in cases_of_interest.iter().zip(before) {
        let n = cases::count(c) - b;
        println!("  {c:?}: {n}");
        assert!(n > 0, "{c:?} never reached");
    }
}
