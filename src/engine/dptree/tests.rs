//! Unit tests of the dptree engine: merges (in place, rewrites,
//! consolidation, deletes), the log across pages and merges, recovery
//! after a cut-short append, and damage refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::engine::testing::{contents, same};
use crate::pm::counters;

fn pool() -> Arc<Pool> {
    Arc::new(Pool::create_anonymous(32 << 20, "dptree", &Default::default()).unwrap())
}

fn settings(slots: u32, merge_min: u64) -> Settings {
    Settings {
        leaf_slots: Some(slots),
        merge_ratio: DEFAULT_MERGE_RATIO,
        merge_min,
    }
}

fn key(i: u32) -> Vec<u8> {
    // Keys of mixed lengths, not in insertion order.
    let x = i.wrapping_mul(2_654_435_761);
    format!("k{:x}{}", x, "z".repeat((i % 5) as usize)).into_bytes()
}

fn reopen(pool: &Arc<Pool>, t: DpTree, s: Settings) -> DpTree {
    drop(t);
    DpTree::open(
        Arc::clone(pool),
        Settings {
            leaf_slots: None,
            ..s
        },
    )
    .unwrap()
}

/// Random puts, updates and deletes against a model, with leaves of
/// `slots` slots and merges every few writes: every merge path runs
/// (in-place writes, rewrites, consolidation, emptied leaves), and every
/// state checks, scans and reopens as the model says.
fn against_model(slots: u32, merge_min: u64, ops: u32) -> DpTree {
    let pool = pool();
    let s = settings(slots, merge_min);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    let mut model = BTreeMap::new();
    let mut x = 12345u64;
    for i in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = key((x % 700) as u32);
        match x >> 60 {
            0..=8 => {
                let v = format!("v{i}").repeat((x % 3) as usize + 1).into_bytes();
                let want = if model.insert(k.clone(), v.clone()).is_some() {
                    PutOutcome::Replaced
                } else {
                    PutOutcome::Inserted
                };
                assert_eq!(t.put(&k, &v, PutMode::Upsert).unwrap(), want);
            }
            9 => {
                let present = model.contains_key(&k);
                let got = t.put(&k, b"ins", PutMode::Insert).unwrap();
                assert_eq!(got == PutOutcome::Inserted, !present);
                model.entry(k).or_insert_with(|| b"ins".to_vec());
            }
            10 => {
                let present = model.contains_key(&k);
                let got = t.put(&k, b"upd", PutMode::Update).unwrap();
                assert_eq!(got == PutOutcome::Replaced, present);
                if present {
                    model.insert(k, b"upd".to_vec());
                }
            }
            _ => {
                assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some());
            }
        }
        if i % 97 == 0 {
            same(&t, &model);
        }
        if i % 1013 == 0 {
            t = reopen(&pool, t, s);
            same(&t, &model);
        }
    }
    same(&t, &model);
    let merges = t.merges();
    let t = reopen(&pool, t, s);
    same(&t, &model);
    assert!(merges > 10, "only {merges} merges");
    t
}

#[test]
fn small_leaves_and_frequent_merges_match_a_model() {
    against_model(3, 4, 6000);
}

#[test]
fn default_leaves_match_a_model() {
    against_model(leaf::DEFAULT_SLOTS, 16, 8000);
}

#[test]
fn deleting_every_key_empties_the_base_tree() {
    let pool = pool();
    let s = settings(4, 8);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    for i in 0..500 {
        t.put(&key(i), b"x", PutMode::Upsert).unwrap();
    }
    assert!(t.leaves.len() > 50);
    for i in 0..500 {
        assert!(t.delete(&key(i)).unwrap());
    }
    // The last deletes may still be buffered: one more merge.
    t.merge().unwrap();
    assert_eq!(t.len(), 0);
    assert_eq!(t.leaves.len(), 0);
    assert_eq!(t.base_keys, 0);
    t.check().unwrap();
    let t = reopen(&pool, t, s);
    assert!(contents(&t).is_empty());
    t.check().unwrap();
}

/// A put costs one fence (the log's page aside); a merge two.
#[test]
fn a_put_fences_once_and_a_merge_twice() {
    let pool = pool();
    let mut t = DpTree::create(Arc::clone(&pool), settings(32, 1000)).unwrap();
    t.put(b"first", b"v", PutMode::Upsert).unwrap(); // the log's first page
    let before = counters::this_thread();
    for i in 0..500 {
        t.put(&key(i), b"value", PutMode::Upsert).unwrap();
    }
    let d = counters::this_thread() - before;
    assert_eq!(t.merges(), 0);
    assert_eq!(d.fences, 500);
    // The first merge takes the heap's first chunk for leaves (the
    // substrate's activation fences); the second finds room in it.
    t.merge().unwrap();
    for i in 500..520 {
        t.put(&key(i), b"value", PutMode::Upsert).unwrap();
    }
    let before = counters::this_thread();
    t.merge().unwrap();
    assert_eq!((counters::this_thread() - before).fences, 2);
    assert_eq!(t.merges(), 2);
    t.check().unwrap();
}

/// Enough writes between merges for the log to take several pages; they
/// are all replayed at open, and after the merge the log starts again on
/// the same pages, which its next version finds ready.
#[test]
fn the_log_spans_pages_and_is_reused_after_a_merge() {
    let pool = pool();
    let s = settings(32, 5000);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..2000 {
        let v = format!("{i}").into_bytes();
        t.put(&key(i), &v, PutMode::Upsert).unwrap();
        model.insert(key(i), v);
    }
    // Room for a delete of every buffered key too: 4,002 entries.
    let pages = recovery::log_of(&t).pages().to_vec();
    assert_eq!(
        pages.len(),
        8,
        "2,001 entries, room for 2,001 more, 511 a page"
    );
    let mut t = reopen(&pool, t, s);
    same(&t, &model);
    // The merge keeps the 4 pages the log used and frees the rest.
    t.merge().unwrap();
    assert_eq!(recovery::log_of(&t).pages(), &pages[..4]);
    for i in 0..600 {
        let v = format!("again {i}").into_bytes();
        t.put(&key(i), &v, PutMode::Upsert).unwrap();
        model.insert(key(i), v);
    }
    let t = reopen(&pool, t, s);
    same(&t, &model);
    // The merge before padded the log, and this one cut the pages it did
    // not reach.
    let mut t = t;
    t.merge().unwrap();
    assert_eq!(recovery::log_of(&t).pages(), &pages[..2]);
    let t = reopen(&pool, t, s);
    same(&t, &model);
}

/// An entry that reached PM before its record (a crash in a put, before
/// its fence) ends the log at open, and the next put overwrites it.
#[test]
fn an_entry_without_its_record_ends_the_log() {
    let pool = pool();
    let s = settings(32, 1000);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    t.put(b"kept", b"1", PutMode::Upsert).unwrap();
    // A record block reserved and left unwritten, and an entry naming it.
    let b = t.heap.reserve(&pool, record::size(4, 1)).unwrap();
    let e = log::entry(b.offset(), false, t.gv & 1, t.opens);
    t.log.append(&pool, &mut t.heap, t.sb, e).unwrap();
    pool.fence();
    let mut t = reopen(&pool, t, s);
    assert_eq!(contents(&t), vec![(b"kept".to_vec(), b"1".to_vec())]);
    t.check().unwrap();
    t.put(b"next", b"2", PutMode::Upsert).unwrap();
    let t = reopen(&pool, t, s);
    assert_eq!(t.len(), 2);
    t.check().unwrap();
}

/// A put that a crash cut short after its record was durable and before
/// its entry was: recovery frees the record's block, whole. The next put
/// of that size takes the block again; if a crash then keeps its entry and
/// loses the new record's lines, the old record must not pass for it (a
/// review found it did: the record's check covered only the global
/// version, the key and the value, and the deleted key came back).
#[test]
fn a_whole_record_left_by_a_cut_put_is_not_taken_for_the_next_one() {
    let pool = pool();
    let s = settings(32, 1000);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    t.put(b"key", b"v0", PutMode::Upsert).unwrap();
    // put(key, v1) cut short: its record durable, no entry.
    let cut = t.write_record(b"key", b"v1").unwrap();
    pool.fence();
    let mut t = reopen(&pool, t, s);
    assert_eq!(contents(&t), vec![(b"key".to_vec(), b"v0".to_vec())]);
    assert!(t.delete(b"key").unwrap());
    // The next put of that size reserves the same block; a crash keeps its
    // entry and none of its record's new lines.
    let b = t.heap.reserve(&pool, record::size(3, 2)).unwrap();
    assert_eq!(b.offset(), cut, "the freed block is handed out again");
    t.log_room(2).unwrap();
    let e = log::entry(cut, false, t.gv & 1, t.opens);
    t.log.append(&pool, &mut t.heap, t.sb, e).unwrap();
    pool.fence();
    let t = reopen(&pool, t, s);
    assert!(contents(&t).is_empty(), "{:?}", contents(&t));
    t.check().unwrap();
}

/// The check finds a key written behind the tree's back, and open refuses
/// a leaf whose fingerprint does not match its key, writing nothing.
#[test]
fn damage_is_found_and_refused() {
    let pool = pool();
    let s = settings(8, 16);
    let mut t = DpTree::create(Arc::clone(&pool), s).unwrap();
    for i in 0..100 {
        t.put(&key(i), b"v", PutMode::Upsert).unwrap();
    }
    t.merge().unwrap();
    let (_, l) = t.leaves.iter().nth(3).unwrap();
    let m = Meta::read(&pool, l, t.cv(), t.slots).unwrap();
    let j = m.live().next().unwrap();
    let fp = pool.load_u64(l + leaf::FPS).unwrap();
    // SAFETY: the test holds the only reference to the tree.
    unsafe {
        pool.write_bytes(l + leaf::FPS + u64::from(j), &[m.fps[j as usize] ^ 1])
            .unwrap()
    };
    assert!(matches!(t.check(), Err(Error::CheckFailed(_))));
    drop(t);
    let image = pool.image();
    let r = DpTree::open(
        Arc::clone(&pool),
        Settings {
            leaf_slots: None,
            ..s
        },
    );
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{:?}", r.err());
    assert!(pool.image() == image, "a refused open wrote nothing");
    assert_ne!(pool.load_u64(l + leaf::FPS).unwrap(), fp);
}

#[test]
fn settings_are_checked() {
    let bad = |k: &str, v: &str| {
        let c = EngineConfig::from([(format!("dptree.{k}"), v.to_string())]);
        assert!(Settings::parse(&c).is_err(), "{k}={v}");
    };
    bad("leaf_slots", "1");
    bad("leaf_slots", "33");
    bad("merge_ratio", "0");
    bad("merge_ratio", "1.5");
    bad("merge_min", "0");
    bad("nope", "1");
    let c = EngineConfig::from([
        ("dptree.leaf_slots".to_string(), "5".to_string()),
        ("dptree.merge_ratio".to_string(), "0.25".to_string()),
        ("dptree.merge_min".to_string(), "3".to_string()),
    ]);
    let s = Settings::parse(&c).unwrap();
    assert_eq!(
        (s.leaf_slots, s.merge_ratio, s.merge_min),
        (Some(5), 0.25, 3)
    );
    let pool = pool();
    let t = DpTree::create(Arc::clone(&pool), s).unwrap();
    drop(t);
    let r = DpTree::open(
        Arc::clone(&pool),
        Settings {
            leaf_slots: Some(6),
            ..s
        },
    );
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}
