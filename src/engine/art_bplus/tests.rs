//! Unit tests of the art-bplus engine: NVNode inserts, splits and unlinks
//! against a model, the ordered scan where prefixes extend keys, the fences
//! each operation takes, and recovery's repair and refusals made by hand.

use std::ops::Bound;
use std::sync::Arc;

use super::*;
use crate::engine::testing::{contents_in, same, Model};
use crate::pm::cases::{count, Case};
use crate::pm::counters;

fn pool() -> Arc<Pool> {
    Arc::new(Pool::create_anonymous(64 << 20, "art-bplus", &Default::default()).unwrap())
}

/// Keys of three kinds: 8-byte integers of a few prefixes (so that
/// NVNodes fill and split), strings of mixed lengths, and short keys that
/// are prefixes of other keys (so that scans interleave subtrees).
fn key(i: u32) -> Vec<u8> {
    let x = i.wrapping_mul(2_654_435_761) % 3000;
    match i % 3 {
        0 => (u64::from(x % 4) << 8 | u64::from(x / 4 % 256))
            .to_be_bytes()
            .to_vec(),
        1 => format!("k{:x}{}", x % 200, "z".repeat((x % 4) as usize)).into_bytes(),
        _ => b"abcab"[..1 + (x % 5) as usize].to_vec(),
    }
}

fn reopen(pool: &Arc<Pool>, t: ArtBplus) -> ArtBplus {
    drop(t);
    ArtBplus::open(Arc::clone(pool)).unwrap()
}

/// Random puts, updates and deletes against the model, checked, scanned
/// with random bounds and reopened along the way.
#[test]
fn against_a_model() {
    let pool = pool();
    let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
    let mut model = Model::new();
    let mut x = 12345u64;
    let mut splits = 0;
    for i in 0..30_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = key((x % 6000) as u32);
        let leaves = t.upper.leaf_count();
        let had_prefix = t.upper.find(split_key(&k).0).is_some();
        match x >> 60 {
            0..=10 => {
                let v = format!("v{i}").into_bytes();
                let was = model.insert(k.clone(), v.clone());
                let got = t.put(&k, &v, PutMode::Upsert).unwrap();
                assert_eq!(got == PutOutcome::Replaced, was.is_some());
                if had_prefix && t.upper.leaf_count() > leaves {
                    splits += 1;
                }
            }
            _ => assert_eq!(t.delete(&k).unwrap(), model.remove(&k).is_some()),
        }
        if i % 1500 == 0 {
            same(&t, &model);
            let (a, b) = (key((x % 6000) as u32), key((x >> 20) as u32 % 6000));
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            for (l, h) in [
                (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                (Bound::Excluded(&lo[..]), Bound::Included(&hi[..])),
                (Bound::Included(&lo[..]), Bound::Unbounded),
            ] {
                let want: Vec<_> = model
                    .range::<[u8], _>((l, h))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(contents_in(&t, l, h), want, "{l:?}..{h:?}");
            }
        }
        if i % 7000 == 6999 {
            t = reopen(&pool, t);
            same(&t, &model);
        }
    }
    assert!(splits > 20, "{splits} splits");
    same(&t, &model);
    // Everything deleted: no block left in use but the heap's own.
    for k in model.keys() {
        assert!(t.delete(k).unwrap());
    }
    same(&t, &Model::new());
    assert!(t.upper.is_empty());
    assert_eq!(pool.load_u64(t.sb + superblock::HEAD).unwrap(), 0);
    let t = reopen(&pool, t);
    same(&t, &Model::new());
}

/// Where a prefix extends a key, the keys of two subtrees interleave: a
/// scan from every bound returns them in order.
#[test]
fn scans_interleave_subtrees_in_key_order() {
    let pool = pool();
    let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
    let mut model = Model::new();
    let keys: [&[u8]; 12] = [
        b"a",
        b"ab",
        b"abc",
        b"abcd",
        b"abd",
        b"ac",
        b"b",
        b"ba",
        b"abcda",
        b"\x00",
        b"a\x00",
        b"\xff\xff",
    ];
    for k in keys {
        t.put(k, k, PutMode::Upsert).unwrap();
        model.insert(k.to_vec(), k.to_vec());
    }
    same(&t, &model);
    let mut bounds: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    bounds.extend([
        b"".to_vec(),
        b"aa".to_vec(),
        b"abca".to_vec(),
        b"c".to_vec(),
    ]);
    for lo in &bounds {
        for hi in &bounds {
            for (l, h) in [
                (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
                (Bound::Excluded(&lo[..]), Bound::Excluded(&hi[..])),
            ] {
                if lo > hi || (lo == hi && matches!(l, Bound::Excluded(_))) {
                    continue;
                }
                let want: Vec<_> = model
                    .range::<[u8], _>((l, h))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(contents_in(&t, l, h), want, "{l:?}..{h:?}");
            }
        }
    }
    // A scan that its callback stops.
    let mut n = 0;
    t.scan(Bound::Unbounded, Bound::Unbounded, &mut |_, _| {
        n += 1;
        n < 5
    })
    .unwrap();
    assert_eq!(n, 5);
}

/// The fences of each operation, as the module doc's persist order says.
#[test]
fn fences_per_operation() {
    let pool = pool();
    let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
    let fences = |t: &mut ArtBplus, f: &mut dyn FnMut(&mut ArtBplus)| {
        let before = counters::this_thread();
        f(t);
        (counters::this_thread() - before).fences
    };
    let k = |i: u64| i.to_be_bytes();
    // The heap's first chunks, for records and NVNodes, taken first.
    t.put(&k(0x9900), b"v", PutMode::Upsert).unwrap();
    t.put(&k(0x9901), b"v", PutMode::Upsert).unwrap();
    // A new prefix, then a key into its NVNode: 2 each.
    assert_eq!(
        fences(&mut t, &mut |t| {
            t.put(&k(0x100), b"v", PutMode::Upsert).unwrap();
        }),
        2
    );
    assert_eq!(
        fences(&mut t, &mut |t| {
            t.put(&k(0x101), b"v", PutMode::Upsert).unwrap();
        }),
        2
    );
    // An update: 2.
    assert_eq!(
        fences(&mut t, &mut |t| {
            t.put(&k(0x101), b"w", PutMode::Upsert).unwrap();
        }),
        2
    );
    // Fill the NVNode; the 25th key splits it: 2 more.
    for i in 2..24 {
        t.put(&k(0x100 + i), b"v", PutMode::Upsert).unwrap();
    }
    let leaves = t.upper.leaf_count();
    assert_eq!(
        fences(&mut t, &mut |t| {
            t.put(&k(0x1FF), b"v", PutMode::Upsert).unwrap();
        }),
        4
    );
    assert_eq!(t.upper.leaf_count(), leaves + 1);
    // A delete: 1, whether it empties its NVNode or not.
    assert_eq!(
        fences(&mut t, &mut |t| {
            assert!(t.delete(&k(0x100)).unwrap());
        }),
        1
    );
    t.put(&k(0x300), b"v", PutMode::Upsert).unwrap();
    assert_eq!(
        fences(&mut t, &mut |t| {
            assert!(t.delete(&k(0x300)).unwrap());
        }),
        1
    );
    // A miss takes none.
    assert_eq!(
        fences(&mut t, &mut |t| {
            assert!(!t.delete(&k(0x300)).unwrap());
            assert_eq!(
                t.put(&k(0x300), b"v", PutMode::Update).unwrap(),
                PutOutcome::Unchanged
            );
        }),
        0
    );
    t.check().unwrap();
}

/// A full prefix: 256 keys of one 7-byte prefix, in NVNodes split down to
/// halves, every one in order.
#[test]
fn a_full_prefix_splits_into_ordered_nvnodes() {
    let pool = pool();
    let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
    let mut model = Model::new();
    for i in (0..256u64).rev() {
        let k = (0xAB00 | i).to_be_bytes();
        t.put(&k, &k, PutMode::Insert).unwrap();
        model.insert(k.to_vec(), k.to_vec());
    }
    assert_eq!(t.upper.sub_count(), 1);
    assert!(t.upper.leaf_count() >= 256 / 24, "{}", t.upper.leaf_count());
    same(&t, &model);
    let t = reopen(&pool, t);
    same(&t, &model);
}

/// A crash between a split's link and its lower-half bitmap leaves both
/// NVNodes holding the upper half: recovery finishes the split, and the
/// check reports the state instead.
#[test]
fn a_torn_split_is_finished_at_open() {
    let pool = pool();
    let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
    let mut model = Model::new();
    for i in 0..24u64 {
        let k = (0x500 | i).to_be_bytes();
        t.put(&k, b"v", PutMode::Upsert).unwrap();
        model.insert(k.to_vec(), b"v".to_vec());
    }
    let l = t.upper.sub(t.upper.first()).leaf0;
    let full = pool.load_u64(l + leaf::BITMAP).unwrap();
    assert_eq!(full, FULL);
    let k = 0x5FFu64.to_be_bytes();
    let at = t.place(&k[..7], 0xFF).unwrap().unwrap();
    t.split(&at, 0xFF).unwrap();
    let n = pool.load_u64(l + leaf::NEXT).unwrap();
    assert_eq!(pool.load_u64(n + leaf::BITMAP).unwrap().count_ones(), 12);
    assert_eq!(pool.load_u64(l + leaf::BITMAP).unwrap().count_ones(), 12);
    drop(t);
    // The torn state: `next` reached PM, the lower half's bitmap did not.
    pool.store_u64(l + leaf::BITMAP, full).unwrap();
    let before = count(Case::ArtBplusSplitFinished);
    let t = ArtBplus::open(Arc::clone(&pool)).unwrap();
    assert!(count(Case::ArtBplusSplitFinished) > before);
    assert_eq!(t.upper.leaf_count(), 2);
    same(&t, &model);
    pool.store_u64(l + leaf::BITMAP, full).unwrap();
    let e = t.check().expect_err("reported");
    assert!(e.to_string().contains("torn split"), "{e}");
}

/// Damage a crash cannot leave is refused, with nothing written.
#[test]
fn damage_is_refused() {
    let fill = || {
        let pool = pool();
        let mut t = ArtBplus::create(Arc::clone(&pool)).unwrap();
        for i in 0..40u64 {
            t.put(&(0x700 | i).to_be_bytes(), b"v", PutMode::Upsert)
                .unwrap();
            t.put(format!("s{i}").as_bytes(), b"v", PutMode::Upsert)
                .unwrap();
        }
        let l = t.upper.sub(t.upper.first()).leaf0;
        (pool, l)
    };
    let refused = |pool: &Arc<Pool>, what: &str| {
        let e = ArtBplus::open(Arc::clone(pool))
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains(what), "{e}");
    };
    // An empty NVNode.
    let (pool, l) = fill();
    pool.store_u64(l + leaf::BITMAP, 0).unwrap();
    refused(&pool, "empty NVNode");
    // A fragment that is not its key's last byte.
    let (pool, l) = fill();
    let j = pool.load_u64(l + leaf::BITMAP).unwrap().trailing_zeros();
    // SAFETY: no tree is open on the pool.
    let f = unsafe { pool.bytes(l + leaf::FPS + u64::from(j), 1) }.unwrap()[0];
    // SAFETY: as above.
    unsafe { pool.write_bytes(l + leaf::FPS + u64::from(j), &[f ^ 0x40]) }.unwrap();
    refused(&pool, "fragment");
    // NVNodes out of order: the head moved to the second NVNode, whose
    // list goes on past the first one's keys... and a cycle.
    let (pool, l) = fill();
    let next = pool.load_u64(l + leaf::NEXT).unwrap();
    let after = pool.load_u64(next + leaf::NEXT).unwrap();
    pool.store_u64(next + leaf::NEXT, l).unwrap();
    pool.store_u64(l + leaf::NEXT, after).unwrap();
    let sb = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
    pool.store_u64(sb + superblock::HEAD, next).unwrap();
    refused(&pool, "follow");
    let (pool, l) = fill();
    pool.store_u64(l + leaf::NEXT, l).unwrap();
    refused(&pool, "cycle");
    // A setting the engine does not have.
    let cfg = EngineConfig::from([("art-bplus.slots".to_string(), "8".to_string())]);
    let e = create(self::pool(), &cfg)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("no settings"), "{e}");
}
