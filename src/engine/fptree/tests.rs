//! Unit tests of the fptree engine: splits and unlinks with small leaves,
//! recovery's two repairs on crafted images, damage refused.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::*;
use crate::engine::testing::same;
use crate::pm::cases::{count, Case};

fn pool() -> Arc<Pool> {
    Arc::new(Pool::create_anonymous(16 << 20, "fptree", &Default::default()).unwrap())
}

fn key(i: u32) -> Vec<u8> {
    // Keys of mixed lengths, not in insertion order.
    let x = i.wrapping_mul(2_654_435_761);
    format!("k{:x}{}", x, "z".repeat((i % 5) as usize)).into_bytes()
}

/// A tree of `n` keys in leaves of `slots` slots, with the model.
fn filled(slots: u32, n: u32) -> (Arc<Pool>, FpTree, BTreeMap<Vec<u8>, Vec<u8>>) {
    let pool = pool();
    let mut t = FpTree::create(Arc::clone(&pool), slots).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..n {
        let v = format!("value {i}").into_bytes();
        assert_eq!(
            t.put(&key(i), &v, PutMode::Upsert).unwrap(),
            PutOutcome::Inserted
        );
        model.insert(key(i), v);
    }
    (pool, t, model)
}

/// Opens `pool`, which must be refused with an error that says `what`,
/// with nothing written to it.
fn refused(pool: &Arc<Pool>, what: &str) {
    let before = pool.image();
    let e = FpTree::open(Arc::clone(pool), None)
        .err()
        .expect("a damaged pool is refused");
    assert!(e.to_string().contains(what), "{e}");
    assert!(pool.image() == before, "a refused open wrote to the pool");
}

#[test]
fn small_leaves_split_and_unlink_and_recover() {
    let (pool, mut t, mut model) = filled(4, 600);
    assert!(t.leaves.len() > 150, "{} leaves", t.leaves.len());
    same(&t, &model);
    // Updates in full leaves need no split.
    for i in (0..600).step_by(3) {
        let v = vec![i as u8; (i % 300) as usize];
        assert_eq!(
            t.put(&key(i), &v, PutMode::Upsert).unwrap(),
            PutOutcome::Replaced
        );
        model.insert(key(i), v);
    }
    // Deletes empty and unlink leaves, the first one among them.
    let first = model.keys().next().unwrap().clone();
    for i in 0..600 {
        if i % 4 != 1 {
            assert!(t.delete(&key(i)).unwrap());
            model.remove(&key(i));
        }
    }
    assert!(!t.delete(&first).unwrap() || !model.contains_key(&first));
    same(&t, &model);
    drop(t);
    let t = FpTree::open(Arc::clone(&pool), None).unwrap();
    same(&t, &model);
    // Everything deleted: the list is empty, and the blocks are free.
    let mut t = t;
    for k in model.keys() {
        assert!(t.delete(k).unwrap());
    }
    assert!(t.leaves.is_empty());
    assert_eq!(pool.load_u64(t.sb + superblock::HEAD).unwrap(), 0);
    t.check().unwrap();
    assert_eq!(
        t.put(b"again", b"1", PutMode::Insert).unwrap(),
        PutOutcome::Inserted
    );
    t.check().unwrap();
}

#[test]
fn put_modes_and_scan_bounds() {
    let (_pool, mut t, model) = filled(5, 100);
    assert_eq!(
        t.put(&key(3), b"x", PutMode::Insert).unwrap(),
        PutOutcome::Unchanged
    );
    assert_eq!(
        t.put(b"absent", b"x", PutMode::Update).unwrap(),
        PutOutcome::Unchanged
    );
    same(&t, &model);
    let keys: Vec<&Vec<u8>> = model.keys().collect();
    let (lo, hi) = (keys[10].as_slice(), keys[60].as_slice());
    for (lb, hb) in [
        (Bound::Included(lo), Bound::Excluded(hi)),
        (Bound::Excluded(lo), Bound::Included(hi)),
        (Bound::Included(hi), Bound::Excluded(lo)),
        (Bound::Unbounded, Bound::Excluded(lo)),
    ] {
        let mut got = Vec::new();
        t.scan(lb, hb, &mut |k, _| {
            got.push(k.to_vec());
            true
        })
        .unwrap();
        let inside = |k: &[u8]| {
            (match lb {
                Bound::Included(l) => k >= l,
                Bound::Excluded(l) => k > l,
                Bound::Unbounded => true,
            }) && match hb {
                Bound::Included(h) => k <= h,
                Bound::Excluded(h) => k < h,
                Bound::Unbounded => true,
            }
        };
        let want: Vec<Vec<u8>> = model.keys().filter(|k| inside(k)).cloned().collect();
        assert_eq!(got, want, "{lb:?}..{hb:?}");
    }
}

/// A crash inside a split after `L.next = N` and before `L`'s new bitmap
/// leaves both leaves listing the upper half: recovery finishes the split.
#[test]
fn a_torn_split_is_finished_at_open() {
    let (pool, mut t, model) = filled(4, 4);
    let l = t.leaves.iter().next().unwrap().1;
    let full = pool.load_u64(l + leaf::BITMAP).unwrap();
    assert_eq!(full, 0b1111);
    t.split(l, b"zzz").unwrap();
    let n = pool.load_u64(l + leaf::NEXT).unwrap();
    assert_eq!(
        pool.load_u64(n + leaf::BITMAP).unwrap() & pool.load_u64(l + leaf::BITMAP).unwrap(),
        0
    );
    drop(t);
    // The torn state: `next` reached PM, the lower-half bitmap did not.
    pool.store_u64(l + leaf::BITMAP, full).unwrap();
    let before = count(Case::FptreeSplitFinished);
    let t = FpTree::open(Arc::clone(&pool), None).unwrap();
    assert!(count(Case::FptreeSplitFinished) > before);
    assert_eq!(t.leaves.len(), 2);
    same(&t, &model);
    // The check reports the torn state instead of repairing it.
    pool.store_u64(l + leaf::BITMAP, full).unwrap();
    let e = t.check().expect_err("reported");
    assert!(e.to_string().contains("torn split"), "{e}");
}

/// A crash between a delete's commit and the unlinking of the leaf it
/// emptied leaves an empty leaf in the list: recovery unlinks it.
#[test]
fn an_empty_leaf_is_unlinked_at_open() {
    let (pool, t, mut model) = filled(4, 40);
    let (_, second) = t.leaves.iter().nth(1).unwrap();
    let first = t.leaves.iter().next().unwrap().1;
    let mut lost = Vec::new();
    let h = Header::read(&pool, second, 4).unwrap();
    for j in h.live() {
        let rec = pool.load_u64(leaf::slot(second, j)).unwrap();
        let (k, _) = record::read_lens(&pool, rec, 1 << 20).unwrap();
        // SAFETY: the tree is dropped below before anything writes the pool.
        lost.push(unsafe { record::key(&pool, rec, k) }.unwrap().to_vec());
    }
    drop(t);
    pool.store_u64(second + leaf::BITMAP, 0).unwrap();
    for k in &lost {
        model.remove(k);
    }
    let before = count(Case::FptreeEmptyLeafUnlinked);
    let t = FpTree::open(Arc::clone(&pool), None).unwrap();
    assert!(count(Case::FptreeEmptyLeafUnlinked) > before);
    assert_eq!(pool.load_u64(first + leaf::NEXT).unwrap(), h.next);
    same(&t, &model);
    // The first leaf emptied the same way: `head` moves on.
    drop(t);
    pool.store_u64(first + leaf::BITMAP, 0).unwrap();
    let t = FpTree::open(Arc::clone(&pool), None).unwrap();
    assert_eq!(pool.load_u64(t.sb + superblock::HEAD).unwrap(), h.next);
    t.check().unwrap();
}

#[test]
fn damage_is_refused_not_followed() {
    // A cycle in the leaf list.
    let (pool, t, _) = filled(4, 30);
    let last = t.leaves.iter().last().unwrap().1;
    let first = t.leaves.iter().next().unwrap().1;
    drop(t);
    pool.store_u64(last + leaf::NEXT, first).unwrap();
    refused(&pool, "cycle");

    // A fingerprint that does not match its key.
    let (pool, t, _) = filled(4, 30);
    let first = t.leaves.iter().next().unwrap().1;
    drop(t);
    let fp = pool.load_u64(first + leaf::FPS).unwrap();
    pool.store_u64(first + leaf::FPS, fp ^ 0xFF).unwrap();
    refused(&pool, "fingerprint");

    // Two leaves in the wrong order.
    let (pool, t, _) = filled(4, 30);
    let ls: Vec<u64> = t.leaves.iter().map(|(_, l)| l).collect();
    drop(t);
    // a -> c -> b -> d: every leaf once, b's keys below c's.
    let (a, b, c, d) = (ls[0], ls[1], ls[2], ls[3]);
    pool.store_u64(a + leaf::NEXT, c).unwrap();
    pool.store_u64(c + leaf::NEXT, b).unwrap();
    pool.store_u64(b + leaf::NEXT, d).unwrap();
    refused(&pool, "do not all follow the previous leaf's");

    // A bitmap with bits past the slots.
    let (pool, t, _) = filled(4, 30);
    let first = t.leaves.iter().next().unwrap().1;
    drop(t);
    let b = pool.load_u64(first + leaf::BITMAP).unwrap();
    pool.store_u64(first + leaf::BITMAP, b | 1 << 20).unwrap();
    refused(&pool, "past its");
}

#[test]
fn leaf_slots_are_fixed_at_creation() {
    let (pool, t, model) = filled(6, 50);
    drop(t);
    let e = FpTree::open(Arc::clone(&pool), Some(8))
        .err()
        .expect("refused");
    assert!(e.to_string().contains("fixed at creation"), "{e}");
    let t = FpTree::open(Arc::clone(&pool), Some(6)).unwrap();
    same(&t, &model);
    assert_eq!(t.settings()["fptree.leaf_slots"], "6");
    for bad in ["1", "41", "x", "-3"] {
        let cfg = EngineConfig::from([("fptree.leaf_slots".to_string(), bad.to_string())]);
        let e = leaf_slots(&cfg).expect_err("refused");
        assert!(e.to_string().contains("expected 2 to 40"), "{e}");
    }
    let cfg = EngineConfig::from([("fptree.slots".to_string(), "4".to_string())]);
    assert!(leaf_slots(&cfg).is_err());
}

/// Damage: a leaf whose `next` names itself, or a cycle through an empty
/// leaf, is refused with nothing written. Before (found in review), the
/// leaf "shared" its records with itself, looked like a torn split, and
/// recovery zeroed its bitmap in PM before it saw the cycle: undoing the
/// damage then left its keys lost.
#[test]
fn a_cycle_is_refused_with_nothing_written() {
    let (pool, t, model) = filled(4, 30);
    let ls: Vec<u64> = t.leaves.iter().map(|(_, l)| l).collect();
    drop(t);
    let last = *ls.last().unwrap();
    pool.store_u64(last + leaf::NEXT, last).unwrap();
    refused(&pool, "cycle");
    pool.store_u64(last + leaf::NEXT, 0).unwrap();
    same(&FpTree::open(Arc::clone(&pool), None).unwrap(), &model);

    // L -> E -> L, E a leaf a crash left empty.
    let (a, e_leaf) = (ls[0], ls[1]);
    let next_of_e = pool.load_u64(e_leaf + leaf::NEXT).unwrap();
    let bits = pool.load_u64(e_leaf + leaf::BITMAP).unwrap();
    pool.store_u64(e_leaf + leaf::BITMAP, 0).unwrap();
    pool.store_u64(e_leaf + leaf::NEXT, a).unwrap();
    refused(&pool, "cycle");
    pool.store_u64(e_leaf + leaf::NEXT, next_of_e).unwrap();
    pool.store_u64(e_leaf + leaf::BITMAP, bits).unwrap();
    same(&FpTree::open(Arc::clone(&pool), None).unwrap(), &model);
}

/// Damage: a `next` that names a zeroed block the size of a leaf is
/// refused. Before (found in review), the block passed for a leaf a crash
/// had left empty, was "unlinked", and the list ended there: the open
/// succeeded, `check` passed, and every later leaf and key was freed.
#[test]
fn a_next_into_a_zero_block_is_refused() {
    let (pool, t, model) = filled(4, 60);
    let ls: Vec<u64> = t.leaves.iter().map(|(_, l)| l).collect();
    let zero = (1..400u64)
        .map(|i| ls[0] + i * 64)
        .find(|&b| {
            t.heap.block_size(b).is_ok_and(|s| s >= leaf::size(4))
                && t.heap.in_use_at(b).is_err()
                && (0..leaf::size(4))
                    .step_by(8)
                    .all(|o| pool.load_u64(b + o).unwrap() == 0)
        })
        .expect("a free zero block");
    drop(t);
    let next = pool.load_u64(ls[1] + leaf::NEXT).unwrap();
    pool.store_u64(ls[1] + leaf::NEXT, zero).unwrap();
    refused(&pool, "no trace of a deleted key");
    pool.store_u64(ls[1] + leaf::NEXT, next).unwrap();
    same(&FpTree::open(Arc::clone(&pool), None).unwrap(), &model);
}

/// Keys that all share their first 8 bytes (memcached-style
/// `user:session:...`) put every bound under one head of the DRAM index;
/// the tree still works, and its bounds stay in order.
#[test]
fn keys_sharing_their_first_bytes() {
    let pool = pool();
    let mut t = FpTree::create(Arc::clone(&pool), 3).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u32 {
        let k = format!("user:session:{:08x}", i.wrapping_mul(2_654_435_761)).into_bytes();
        t.put(&k, b"v", PutMode::Upsert).unwrap();
        model.insert(k, b"v".to_vec());
    }
    same(&t, &model);
    for k in model.keys().step_by(2).cloned().collect::<Vec<_>>() {
        assert!(t.delete(&k).unwrap());
        model.remove(&k);
    }
    same(&t, &model);
    drop(t);
    same(&FpTree::open(pool, None).unwrap(), &model);
}

/// Damage: a copy of a leaf's line 0 and slots written over the next leaf
/// (a stale image) is refused with nothing written. Before (found in a
/// second review), the two leaves "shared" every record, passed for a
/// torn split, the first leaf's bitmap was emptied and the leaf unlinked,
/// and the next leaf's own keys were dropped: 27 of 30 keys, and `check`
/// passed.
#[test]
fn a_leaf_copied_over_its_successor_is_refused() {
    let (pool, t, model) = filled(4, 30);
    let ls: Vec<u64> = t.leaves.iter().map(|(_, l)| l).collect();
    drop(t);
    let (l, n) = (ls[0], ls[1]);
    let saved: Vec<u64> = (0..leaf::size(4) / 8)
        .map(|w| pool.load_u64(n + 8 * w).unwrap())
        .collect();
    for w in 0..leaf::size(4) / 8 {
        if 8 * w != leaf::NEXT {
            pool.store_u64(n + 8 * w, pool.load_u64(l + 8 * w).unwrap())
                .unwrap();
        }
    }
    refused(&pool, "not as a split leaves them");
    for (w, v) in saved.into_iter().enumerate() {
        pool.store_u64(n + 8 * w as u64, v).unwrap();
    }
    same(&FpTree::open(Arc::clone(&pool), None).unwrap(), &model);
}
