//! Unit tests of the HART engine (`super`).

use super::*;
use crate::pm::counters;

/// The PM leaf that holds `key` (present).
fn leaf_of(h: &Hart, key: &[u8]) -> u64 {
    let (hk, ak) = h.split(key);
    let tree = h.trees.find_bytes(hk).expect("the key's ART");
    let leaf = tree.read().art.probe(ak).expect("the key's leaf");
    leaf.off()
}

/// The stripe that holds the leaf of `key` (present).
fn stripe_of(h: &Hart, key: &[u8]) -> usize {
    let (hk, ak) = h.split(key);
    let tree = h.trees.find_bytes(hk).expect("the key's ART");
    let leaf = tree.read().art.probe(ak).expect("the key's leaf");
    leaf.stripe()
}

/// A delete whose value cannot be freed once the leaf's commit word is
/// cleared and persisted (a damaged value pointer, not an object of its
/// list): the key is deleted in PM, so the ART, the count and `check`
/// must say so too, and the error is still returned. Before, the leaf
/// went back into the ART uncommitted: `get` failed with "indexed leaf
/// is not committed", `len` counted it, and `check` failed.
#[test]
fn a_delete_that_fails_after_its_commit_stands() {
    for k_h in [2, 8] {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(Arc::clone(&pool), k_h).unwrap();
        h.put(b"abcdefgh-object", &[7; 100], PutMode::Upsert)
            .unwrap();
        h.put(b"zzzzzzzz-other", b"kept", PutMode::Upsert).unwrap();
        let leaf = leaf_of(&h, b"abcdefgh-object");
        let so = leaf::slot_off(leaf, h.live_commit(leaf).unwrap().active);
        pool.store_u64(so, leaf).unwrap();
        assert!(h.delete(b"abcdefgh-object").is_err(), "k_h {k_h}");
        assert_eq!(pool.load_u64(leaf).unwrap(), 0, "k_h {k_h}: durable in PM");
        let got = h.get_with(b"abcdefgh-object", &mut |_| {});
        assert!(matches!(got, Ok(false)), "k_h {k_h}: {got:?}");
        assert_eq!(h.len(), 1, "k_h {k_h}");
        h.check().unwrap();
        assert_eq!(
            h.put(b"abcdefgh-object", b"new", PutMode::Upsert).unwrap(),
            PutOutcome::Inserted
        );
        drop(h);
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        assert_eq!(h.len(), 2, "k_h {k_h}: reopened");
        h.check().unwrap();
    }
}

/// PM lines a `get_with` of `key` reports, and whether it found it.
fn lines_of_get(h: &Hart, key: &[u8]) -> (bool, u64) {
    let before = counters::this_thread().lines_read;
    let found = h.get_with(key, &mut |_| {}).unwrap();
    (found, counters::this_thread().lines_read - before)
}

#[test]
fn a_search_reads_the_leaf_line_and_the_value_lines() {
    for point_index in [true, false] {
        searches_read_lines(point_index);
    }
}

/// [`a_search_reads_the_leaf_line_and_the_value_lines`] with the point
/// index or without it.
fn searches_read_lines(point_index: bool) {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let mut h = Hart::create(pool, 2).unwrap();
    h.point_index = point_index;
    h.put(b"ab-inline", b"8 bytes!", PutMode::Upsert).unwrap();
    h.put(b"ab-object", &[7; 100], PutMode::Upsert).unwrap();
    h.put(b"ab-long", &[9; 5000], PutMode::Upsert).unwrap();
    h.put(b"ab-empty", b"", PutMode::Upsert).unwrap();
    let long_key = [b'x'; 200];
    h.put(&long_key, b"v", PutMode::Upsert).unwrap();
    // An inline value is in the leaf's first line, with the key.
    assert_eq!(lines_of_get(&h, b"ab-inline"), (true, 1));
    assert_eq!(lines_of_get(&h, b"ab-empty"), (true, 1));
    // A value object: its own lines (100 bytes: 2 or 3 lines).
    let (found, n) = lines_of_get(&h, b"ab-object");
    assert!(found && (3..=4).contains(&n), "{n} lines");
    // A large value: ceil(5000 / 64) = 79 lines, or one more.
    let (found, n) = lines_of_get(&h, b"ab-long");
    assert!(found && (80..=81).contains(&n), "{n} lines");
    // A 200-byte key: the leaf to the end of its key (40 + 200 bytes
    // from a line-aligned leaf: 4 lines).
    assert_eq!(lines_of_get(&h, &long_key), (true, 4));
    // The ART's one candidate for an absent key: its key line is read
    // and compared, and nothing is found. (So with the point index too:
    // an ART this small has none.)
    let candidate = 1;
    assert_eq!(lines_of_get(&h, b"ab-inlinf"), (false, candidate));
    // An absent short key whose candidate is the 200-byte key's leaf: the
    // lengths differ, so only the leaf's first line (the commit word) is
    // read, and counted (four lines, the stored key's, before
    // 2026-11-27).
    assert_eq!(lines_of_get(&h, b"xxx"), (false, candidate));
    // No ART for the hash key: nothing read in PM.
    assert_eq!(lines_of_get(&h, b"zz"), (false, 0));
    // Values are what was stored.
    let mut got = Vec::new();
    assert!(h.get_with(b"ab-long", &mut |v| got = v.to_vec()).unwrap());
    assert_eq!(got, vec![9; 5000]);
}

/// An ART gets its point index once it holds more than `BUILD_ABOVE`
/// keys (or `hart.point_index_above`) and loses it below `DROP_BELOW`
/// (half of it, at least 1): `check` passes at every size, a search of an
/// absent key reads no leaf while the index is built (no entry with its
/// tag) and one (the ART's candidate) before and after, and every key is
/// found throughout, also after a reopen.
#[test]
fn a_point_index_is_built_for_large_arts_and_dropped_for_small_ones() {
    use super::points::{drop_below, BUILD_ABOVE, DROP_BELOW};
    assert_eq!(DROP_BELOW, drop_below(BUILD_ABOVE));
    assert_eq!((drop_below(4), drop_below(1), drop_below(0)), (2, 1, 1));
    for above in [BUILD_ABOVE, 4, 1, 0] {
        built_above_and_dropped_below(above);
    }
}

/// [`a_point_index_is_built_for_large_arts_and_dropped_for_small_ones`]
/// with the index built above `above` keys.
fn built_above_and_dropped_below(above: usize) {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
    h.point_above = above;
    let below = super::points::drop_below(above);
    let key = |i: usize| format!("pi{i:04}").into_bytes();
    let built = |h: &Hart| {
        h.trees
            .find(&HashKey::new(b"pi"))
            .is_some_and(|t| t.read().points.is_built())
    };
    for i in 0..=above {
        assert!(!built(&h), "{i} keys, above {above}");
        h.put(&key(i), b"v", PutMode::Upsert).unwrap();
        if i % 16 == 0 {
            h.check().unwrap();
        }
    }
    assert!(built(&h), "built at {} keys", above + 1);
    h.check().unwrap();
    assert_eq!(lines_of_get(&h, b"pi-absent"), (false, 0));
    for i in 0..=above {
        assert!(lines_of_get(&h, &key(i)).0, "key {i}");
    }
    // Reopened: rebuilt by recovery.
    drop(h);
    let h = recovery::open(Arc::clone(&pool), None, (None, None), Some(above)).unwrap();
    assert!(built(&h), "rebuilt above {above}");
    h.check().unwrap();
    // Down to `below - 1` keys: dropped, and the ART is searched.
    let mut left = above + 1;
    for i in 0..=above {
        if left < below {
            break;
        }
        assert!(built(&h), "{left} keys, above {above}");
        assert!(h.delete(&key(i)).unwrap());
        left -= 1;
    }
    assert!(!built(&h), "dropped at {left} keys, above {above}");
    h.check().unwrap();
    assert!(!lines_of_get(&h, b"pi-absent").0);
    for i in above + 1 - left..=above {
        assert!(lines_of_get(&h, &key(i)).0, "key {i}");
    }
    drop(h);
    let h = recovery::open(Arc::clone(&pool), None, (None, None), Some(above)).unwrap();
    assert!(!built(&h), "not built by recovery for {left} keys");
    h.check().unwrap();
    // Grown again past the threshold: built again.
    for i in 0..=above + 1 - left {
        h.put(&key(i), b"w", PutMode::Upsert).unwrap();
    }
    assert!(built(&h), "built again above {above}");
    h.check().unwrap();
}

/// A search checks the commit word of the leaf its ART leads it to, on
/// the path of keys that end in the leaf's first line
/// (`Hart::answer_in_line`) and on the general one: a word without the
/// commit tag (a damaged pool, or a bug) is an error, not a value read
/// from a leaf that is not live; a committed word of another key length,
/// or a key that differs in any byte, is not the key. Restored, the key is
/// found again with its value.
#[test]
fn a_search_checks_the_commit_word_and_every_key_byte_of_its_leaf() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let long_key = [b'y'; 100];
    for key in [
        &b"ab"[..],
        b"abc",
        b"ab-4",
        b"ab-seven",
        b"ab-sixteen-bytes",
        &[b'z'; 24],
        &long_key,
    ] {
        h.put(key, b"value", PutMode::Upsert).unwrap();
        let leaf = leaf_of(&h, key);
        let w = pool.load_u64(leaf).unwrap();
        let get = |k: &[u8]| {
            let mut got = None;
            h.get_with(k, &mut |v| got = Some(v.to_vec())).map(|_| got)
        };
        pool.store_u64(leaf, w ^ (1 << 60)).unwrap();
        let err = get(key).expect_err("a leaf without its tag");
        assert!(
            err.to_string().contains("not committed"),
            "{}: {err}",
            key.len()
        );
        // A key length no leaf has (over 250 bytes): an error too.
        pool.store_u64(leaf, w | 0xFF00).unwrap();
        let err = get(key).expect_err("a key length over 250");
        assert!(
            err.to_string().contains("not committed"),
            "{}: {err}",
            key.len()
        );
        let other_len = (w & !0xFF00) | ((key.len() as u64 ^ 1) << 8);
        pool.store_u64(leaf, other_len).unwrap();
        assert_eq!(
            get(key).unwrap(),
            None,
            "{} bytes, another length",
            key.len()
        );
        pool.store_u64(leaf, w).unwrap();
        // Each byte of the stored key, the hash key's too, changed in turn.
        for i in 0..key.len() {
            let at = leaf + leaf::HEADER + i as u64;
            let byte = pool.load_u64(at & !7).unwrap();
            let flip = 1u64 << (8 * (at % 8));
            pool.store_u64(at & !7, byte ^ flip).unwrap();
            assert_eq!(get(key).unwrap(), None, "{} bytes, byte {i}", key.len());
            pool.store_u64(at & !7, byte).unwrap();
        }
        assert_eq!(get(key).unwrap(), Some(b"value".to_vec()));
    }
}

/// The root hint of an ART's slot follows its root through every
/// change that moves it: a first key (a leaf root), growth through
/// every node kind by single and batched puts, shrinking by deletes,
/// emptying, and recovery. `check` compares the hints with the roots,
/// so the conformance suite checks this too; a missing update fails it.
#[test]
fn the_root_hint_follows_the_root() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let hint = |h: &Hart| h.trees.root_hint(b"rh");
    let root = |h: &Hart| {
        h.trees
            .find_bytes(b"rh")
            .map_or(0, |t| t.read().art.root_hint())
    };
    let key = |i: u32| vec![b'r', b'h', i as u8, (i >> 8) as u8];
    assert_eq!(hint(&h), 0);
    let mut roots = std::collections::HashSet::new();
    for i in 0..300u32 {
        if i % 2 == 0 {
            h.put(&key(i), b"v", PutMode::Upsert).unwrap();
        } else {
            let (k, v) = (key(i), b"w");
            h.put_many(&[(&k[..], &v[..])]).unwrap();
        }
        assert_eq!(hint(&h), root(&h), "after insert {i}");
        roots.insert(hint(&h));
    }
    // A leaf, then a Node4, a Node16, a Node48 and a Node256 at the
    // root (the ART key's first byte takes 256 values).
    assert_eq!(roots.len(), 5, "{} roots", roots.len());
    h.check().unwrap();
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(hint(&h), root(&h), "after recovery");
    assert_ne!(hint(&h), 0);
    for i in 0..300u32 {
        assert!(h.delete(&key(i)).unwrap());
        assert_eq!(hint(&h), root(&h), "after delete {i}");
    }
    assert_eq!(hint(&h), 0);
    h.check().unwrap();
}

/// Recovery frees the large block an inactive slot names (an update
/// that crashed between the new value's `activate` and its commit)
/// only if it is a block of its own. A damaged slot naming the
/// superblock, a leaf chunk or another key's value made open free it,
/// and the pool could not be opened again (found by a helper's fuzzing
/// of damaged pools through the CLI). Now open refuses it, having
/// freed nothing, and opens once the slot is cleared.
#[test]
fn recovery_frees_no_block_that_a_damaged_slot_names() {
    for target in ["superblock", "chunk", "value"] {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(Arc::clone(&pool), 2).unwrap();
        h.put(b"key-one", b"small", PutMode::Upsert).unwrap();
        h.put(b"key-two", &[7; 5000], PutMode::Upsert).unwrap();
        let leaf = leaf_of(&h, b"key-one");
        let p = match target {
            "superblock" => h.sb,
            "chunk" => {
                let st = stripe_of(&h, b"key-one");
                let lc = leaf::class_for_key(7);
                let chunk = h.stripes[st].leaves[lc].lock().locate(leaf).unwrap().0;
                chunk
            }
            _ => {
                let other = leaf_of(&h, b"key-two");
                read_slot(&pool, other, h.live_commit(other).unwrap().active)
                    .unwrap()
                    .p
            }
        };
        let size = pool.block_size(p).unwrap();
        let so = leaf::slot_off(leaf, 1 - h.live_commit(leaf).unwrap().active);
        drop(h);
        let meta = Meta {
            crc: 0,
            value_len: 5000,
            large: true,
        };
        pool.store_u64(so, p).unwrap();
        pool.store_u64(so + 8, meta.encode()).unwrap();
        let e = Hart::open(Arc::clone(&pool)).err().expect("refused");
        assert!(
            e.to_string().contains("large value's block"),
            "{target}: {e}"
        );
        assert_eq!(
            pool.block_size(p).unwrap(),
            size,
            "{target}: still allocated"
        );
        pool.store_u64(so + 8, 0).unwrap();
        pool.store_u64(so, 0).unwrap();
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        assert_eq!(h.len(), 2, "{target}");
        let mut v = Vec::new();
        assert!(h.get_with(b"key-two", &mut |x| v = x.to_vec()).unwrap());
        assert_eq!(v, [7; 5000], "{target}");
        h.check().unwrap();
    }
}

/// A chunk on two chunk lists (damage: one chunk's `PNext` rewritten
/// to a chunk of another list) is refused on open. Before, recovery
/// recycled it as empty in the list where it held nothing, while the
/// other list still used it (found by the same fuzzing).
#[test]
fn recovery_refuses_a_chunk_on_two_lists() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
    // Leaves by hash key (`hart.stripes=hash_key`), so that one thread
    // fills several stripes' lists.
    h.set_stripes(Some(StripeChoice::HashKey)).unwrap();
    for i in 0..400u32 {
        let key = format!("{:02x}-key-{i}", i % 97);
        h.put(key.as_bytes(), b"v", PutMode::Upsert).unwrap();
    }
    let lc = leaf::class_for_key(11);
    let heads: Vec<u64> = (0..STRIPES)
        .map(|s| pool.load_u64(h.sb + superblock::leaf_head(s, lc)).unwrap())
        .filter(|&c| c != 0)
        .collect();
    assert!(heads.len() >= 2, "keys in two stripes at least");
    drop(h);
    let pnext = heads[0] + 8;
    let old = pool.load_u64(pnext).unwrap();
    pool.store_u64(pnext, heads[1]).unwrap();
    let e = Hart::open(Arc::clone(&pool)).err().expect("refused");
    assert!(e.to_string().contains("two chunk lists"), "{e}");
    pool.store_u64(pnext, old).unwrap();
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(h.len(), 400);
    h.check().unwrap();
}

/// Regression (tests/damaged_engine_pools.rs): a slot whose length
/// field was damaged to more than the largest value object, without
/// the large flag, made recovery panic in `value_class`. It is an
/// invalid slot: the leaf is torn and its key gone, the rest stays.
#[test]
fn a_small_slot_longer_than_any_object_is_damage_not_a_panic() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    h.put(b"ab-object", &[7; 100], PutMode::Upsert).unwrap();
    h.put(b"ab-other", b"kept", PutMode::Upsert).unwrap();
    let leaf = leaf_of(&h, b"ab-object");
    let meta_at = leaf::slot_off(leaf, h.live_commit(leaf).unwrap().active) + 8;
    let mut meta = Meta::decode(pool.load_u64(meta_at).unwrap()).unwrap();
    assert!(!meta.large && !meta.inline());
    meta.value_len = leaf::MAX_OBJECT + 904;
    pool.store_u64(meta_at, meta.encode()).unwrap();
    drop(h);
    let h = recovery::open(pool, Some(1), (None, None), Some(points::BUILD_ABOVE)).unwrap();
    assert!(!h.get_with(b"ab-object", &mut |_| {}).unwrap());
    let mut got = Vec::new();
    assert!(h.get_with(b"ab-other", &mut |v| got = v.to_vec()).unwrap());
    assert_eq!(got, b"kept");
    h.check().unwrap();
}

/// A value of a length that depends on `i`: empty, inline, a value
/// object, or a large block.
fn value_of(i: u32) -> Vec<u8> {
    let len = [0, 3, 8, 9, 100, 5000][i as usize % 6];
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

fn all_there(h: &Hart, n: u32) {
    for i in 0..n {
        let mut got = None;
        let found = h
            .get_with(format!("key{i}").as_bytes(), &mut |v| {
                got = Some(v.to_vec())
            })
            .unwrap();
        assert!(found, "key{i}");
        assert_eq!(got, Some(value_of(i)), "key{i}");
    }
    assert_eq!(h.len(), u64::from(n));
}

/// Every leaf's ART entry: key, stripe.
fn entries(h: &Hart) -> Vec<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    h.scan(Bound::Unbounded, Bound::Unbounded, &mut |k, _| {
        out.push(k.to_vec());
        true
    })
    .unwrap();
    out.into_iter()
        .map(|k| {
            let st = stripe_of(h, &k);
            (k, st)
        })
        .collect()
}

/// How many leaves each stripe's count says it holds.
fn lens(h: &Hart) -> Vec<u64> {
    h.stripes
        .iter()
        .map(|s| s.len.load(Ordering::Relaxed))
        .collect()
}

/// Format 5: threads that insert keys of one hash key take their leaves
/// from their own stripes, and the value objects of a leaf come from
/// its stripe through updates by another thread. `check` (each leaf in
/// the list of the stripe its ART entry names, each value object in
/// that stripe's lists), the stripes' counts, deletes and recovery
/// agree. With the hash key's stripe for every leaf (formats 3 and 4,
/// and this version before), all leaves are in one stripe.
#[test]
fn leaves_of_one_hash_key_come_from_the_inserting_threads_stripes() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    assert!(h.any_stripe);
    let key = |t: u32, i: u32| format!("hk{t}-{i:03}").into_bytes();
    std::thread::scope(|sc| {
        for t in 0..4 {
            let h = &h;
            sc.spawn(move || {
                for i in 0..150 {
                    h.put(&key(t, i), &value_of(i), PutMode::Upsert).unwrap();
                }
            });
        }
    });
    h.check().unwrap();
    let before = entries(&h);
    assert_eq!(before.len(), 600);
    let mut used: Vec<usize> = before.iter().map(|e| e.1).collect();
    used.sort_unstable();
    used.dedup();
    assert!(used.len() >= 2, "one hash key, leaves of stripes {used:?}");
    for (k, st) in &before {
        let t = (k[2] - b'0') as usize;
        assert_eq!(*st, before[t * 150].1, "a thread's leaves share its stripe");
    }
    // Another thread updates every key (value objects from the leaf's
    // stripe, the old ones freed into it) and deletes a third.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for t in 0..4 {
                for i in 0..150 {
                    h.put(&key(t, i), &value_of(i + 1), PutMode::Upsert)
                        .unwrap();
                    if i % 3 == 0 {
                        assert!(h.delete(&key(t, i)).unwrap());
                    }
                }
            }
        });
    });
    h.check().unwrap();
    let kept = entries(&h);
    assert_eq!(kept.len(), 400);
    let mut per = vec![0u64; STRIPES];
    for (k, st) in &kept {
        assert!(
            before.contains(&(k.clone(), *st)),
            "an update keeps the leaf"
        );
        per[*st] += 1;
    }
    assert_eq!(lens(&h), per, "each stripe counts its own leaves");
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    h.check().unwrap();
    assert_eq!(entries(&h), kept, "recovery puts each leaf in its stripe");
    assert_eq!(lens(&h), per);
    for t in 0..4 {
        for i in (0..150).filter(|i| i % 3 != 0) {
            let mut got = None;
            assert!(h
                .get_with(&key(t, i), &mut |v| got = Some(v.to_vec()))
                .unwrap());
            assert_eq!(got, Some(value_of(i + 1)));
        }
    }
}

/// Formats 3 and 4 keep every leaf in its hash key's stripe, also when
/// several threads insert, so that the versions that wrote them can
/// still open them; and their recovery refuses a leaf in another
/// stripe, which format 5 accepts.
#[test]
fn a_format_4_pool_keeps_each_hash_key_in_its_stripe() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    pool.store_u64(h.sb, superblock::MAGIC_4).unwrap();
    let sb = h.sb;
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert!(!h.any_stripe);
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let h = &h;
            sc.spawn(move || {
                for i in 0..100u32 {
                    let k = format!("{}{t}-{i}", (b'a' + (i % 20) as u8) as char);
                    h.put(k.as_bytes(), &value_of(i), PutMode::Upsert).unwrap();
                }
            });
        }
    });
    h.check().unwrap();
    for (k, st) in entries(&h) {
        assert_eq!(st, HashKey::new(h.split(&k).0).route().stripe);
    }
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(h.len(), 400);
    drop(h);

    // A leaf outside its hash key's stripe: written as format 5 by a
    // thread whose stripe is not the hash key's.
    pool.store_u64(sb, superblock::MAGIC).unwrap();
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    let mine = thread_stripe();
    let k = (0u8..=255)
        .map(|b| vec![b'~', b, b'!'])
        .find(|k| HashKey::new(&k[..2]).route().stripe != mine)
        .expect("a hash key of another stripe");
    h.put(&k, b"elsewhere", PutMode::Upsert).unwrap();
    assert_eq!(stripe_of(&h, &k), mine);
    h.check().unwrap();
    drop(h);
    pool.store_u64(sb, superblock::MAGIC_4).unwrap();
    let e = Hart::open(Arc::clone(&pool)).err().expect("refused");
    assert!(e.to_string().contains("another allocation stripe"), "{e}");
    pool.store_u64(sb, superblock::MAGIC).unwrap();
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(h.len(), 401);
    h.check().unwrap();
}

/// `hart.stripes`: by thread by default in a new pool, by hash key on
/// request (every leaf in its hash key's stripe, whatever thread
/// inserts, in a format 5 or 6 pool too, until that stripe is full:
/// `Hart::take_leaf`); by thread is refused in a pool of
/// format 4, where it would write leaves that pool's format forbids;
/// a bad value is refused.
#[test]
fn the_stripes_setting_chooses_where_new_leaves_come_from() {
    let cfg = |v: Option<&str>| {
        let mut c = EngineConfig::default();
        if let Some(v) = v {
            c.insert("hart.stripes".into(), v.into());
        }
        c
    };
    let key = |t: u32, i: u32| format!("{}{t}{i:03}", (b'a' + (i % 16) as u8) as char);
    let fill = |e: &Hart| {
        std::thread::scope(|sc| {
            for t in 0..4 {
                sc.spawn(move || {
                    for i in 0..64 {
                        e.put(key(t, i).as_bytes(), b"v", PutMode::Upsert).unwrap();
                    }
                });
            }
        });
    };
    let stripes_of = |h: &Hart| {
        entries(h)
            .into_iter()
            .map(|(k, st)| (st, HashKey::new(h.split(&k).0).route().stripe))
            .collect::<Vec<_>>()
    };
    for v in [None, Some("thread"), Some("hash_key"), Some("round_robin")] {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let e = create_hart(Arc::clone(&pool), &cfg(v)).unwrap();
        fill(&e);
        e.check().unwrap();
        let found = stripes_of(&e);
        let by_route = found.iter().all(|(st, route)| st == route);
        assert_eq!(by_route, v == Some("hash_key"), "hart.stripes={v:?}");
        drop(e);
        let e = open_hart(Arc::clone(&pool), &cfg(v)).unwrap();
        assert_eq!(stripes_of(&e), found, "reopened");
    }
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    pool.store_u64(h.sb, superblock::MAGIC_4).unwrap();
    drop(h);
    for v in ["thread", "round_robin"] {
        let err = open_hart(Arc::clone(&pool), &cfg(Some(v)))
            .err()
            .expect("refused");
        assert!(
            err.to_string().contains(&format!("hart.stripes={v}:")),
            "{err}"
        );
    }
    let e = open_hart(Arc::clone(&pool), &cfg(Some("hash_key"))).unwrap();
    fill(&e);
    e.check().unwrap();
    assert!(stripes_of(&e).iter().all(|(st, route)| st == route));
    let err = create_hart(pool, &cfg(Some("both")))
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("expected thread, hash_key or round_robin"),
        "{err}"
    );
    // Round robin: one thread spreads one hash key's leaves over every
    // stripe.
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = create_hart(Arc::clone(&pool), &cfg(Some("round_robin"))).unwrap();
    for i in 0..32 {
        h.put(format!("rr{i:02}").as_bytes(), b"v", PutMode::Upsert)
            .unwrap();
    }
    h.check().unwrap();
    let mut used: Vec<usize> = entries(&h).into_iter().map(|e| e.1).collect();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used.len(), STRIPES, "one hash key over every stripe");
}

/// Pools of format 3 (slots with CRC-32) open, stay format 3 and keep
/// writing CRC-32; new pools are format 6 (CRC-32C, as formats 4 and 5). Read as the other
/// format, every slot fails its checksum: the checksum is really
/// checked at recovery.
#[test]
fn a_format_3_pool_opens_and_keeps_its_crc32_slots() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
    assert_eq!(pool.load_u64(h.sb).unwrap(), superblock::MAGIC);
    assert_eq!(h.checksum, Checksum::Crc32c);
    // What the previous version wrote: its magic and CRC-32 slots, each
    // leaf in its hash key's stripe.
    pool.store_u64(h.sb, superblock::MAGIC_3).unwrap();
    h.checksum = Checksum::Crc32;
    h.any_stripe = false;
    h.stripe_choice = StripeChoice::HashKey;
    for i in 0..120 {
        h.put(format!("key{i}").as_bytes(), &value_of(i), PutMode::Upsert)
            .unwrap();
    }
    let sb = h.sb;
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(h.checksum, Checksum::Crc32);
    assert!(!h.any_stripe, "format 3 keeps each hash key in one stripe");
    all_there(&h, 120);
    for i in 120..200 {
        h.put(format!("key{i}").as_bytes(), &value_of(i), PutMode::Upsert)
            .unwrap();
    }
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    all_there(&h, 200);
    assert_eq!(pool.load_u64(sb).unwrap(), superblock::MAGIC_3);
    drop(h);
    pool.store_u64(sb, superblock::MAGIC).unwrap();
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert_eq!(h.len(), 0, "CRC-32 slots read as CRC-32C are all torn");
}

/// Format 5 pools, which the versions before format 6 wrote and read,
/// keep every value object in its value's class: with half of its
/// 1,000-byte values deleted, a full format 5 pool refuses a 100-byte
/// value (without a compaction), where format 6 takes a freed 1,024-byte
/// object. And a format 6
/// pool read as format 5 finds such a value torn (the key is gone), which
/// is why format 6 has its own magic: a version that reads only format 5
/// refuses the pool instead.
#[test]
fn a_format_5_pool_keeps_each_value_in_its_class() {
    for format_5 in [true, false] {
        let pool = Arc::new(Pool::create_anonymous(8 << 20, "hart", &Default::default()).unwrap());
        let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
        let sb = h.sb;
        assert!(h.any_class);
        if format_5 {
            pool.store_u64(sb, superblock::MAGIC_5).unwrap();
            drop(h);
            h = Hart::open(Arc::clone(&pool)).unwrap();
            assert!(!h.any_class && h.any_stripe);
        }
        // The format's rule alone: a compaction would make room in both.
        h.compact = false;
        let key = |i: u32| format!("{:02}/{i:06}", i % 37).into_bytes();
        let big = [7u8; 1000];
        let n = (0..)
            .find(|&i| match h.put(&key(i), &big, PutMode::Upsert) {
                Ok(_) => false,
                Err(Error::PoolFull { .. }) => true,
                Err(e) => panic!("{e}"),
            })
            .unwrap();
        for i in (0..n).step_by(2) {
            assert!(h.delete(&key(i)).unwrap());
        }
        let small = [3u8; 100];
        let put = h.put(&key(n + 1), &small, PutMode::Upsert);
        if format_5 {
            assert!(matches!(put, Err(Error::PoolFull { .. })), "{put:?}");
            h.check().unwrap();
            continue;
        }
        put.unwrap();
        h.check().unwrap();
        drop(h);
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        let mut got = None;
        assert!(h
            .get_with(&key(n + 1), &mut |v| got = Some(v.to_vec()))
            .unwrap());
        assert_eq!(got.as_deref(), Some(&small[..]));
        drop(h);
        pool.store_u64(sb, superblock::MAGIC_5).unwrap();
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        assert!(!h.get_with(&key(n + 1), &mut |_| {}).unwrap());
        assert!(h.get_with(&key(1), &mut |_| {}).unwrap());
    }
}

#[test]
fn older_and_newer_formats_are_refused_by_name() {
    for (magic, format) in superblock::OLD_MAGICS
        .into_iter()
        .zip(["format 1", "format 2"])
    {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(Arc::clone(&pool), 2).unwrap();
        pool.store_u64(h.sb, magic).unwrap();
        drop(h);
        let e = Hart::open(pool).err().expect("refused").to_string();
        assert!(e.contains(format), "{e}");
    }
    // A format newer than this version reads is named as such, not as a
    // missing superblock.
    let newer = superblock::MAGIC + (1 << 56);
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    pool.store_u64(h.sb, newer).unwrap();
    drop(h);
    let e = Hart::open(pool).err().expect("refused").to_string();
    assert!(
        e.contains(&format!("HART format {}, newer than", newer >> 56)),
        "{e}"
    );
}

/// Inserts keys "fr000000", "fr000001", ... (8-byte inline values) until
/// the pool is full; returns how many went in.
fn fill_with_fr_keys(h: &Hart) -> u32 {
    let mut n = 0u32;
    loop {
        let k = format!("fr{n:06}");
        match h.put(k.as_bytes(), b"12345678", PutMode::Upsert) {
            Ok(_) => n += 1,
            Err(Error::PoolFull { .. }) => return n,
            Err(e) => panic!("{e}"),
        }
    }
}

/// `n` keys of one hash key ("fr"), 8-byte inline values, inserted by
/// this thread (so their leaves are in its stripe, one leaf list).
fn insert_fr_keys(h: &Hart, n: u32) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("fr{i:06}").into_bytes()).collect();
    for k in &keys {
        h.put(k, b"12345678", PutMode::Upsert).unwrap();
    }
    keys
}

/// In the `tight` order a delete hands its leaf to its list only in a
/// group of [`frees::BATCH`] ([`frees`]): a worker deletes `BATCH - 1`
/// keys while the test holds their leaf list's mutex, and only the
/// `BATCH`-th delete waits for it, having let go of its ART. (With the
/// leaf released at once, the first delete waits: "a delete waited for
/// the leaf list".)
#[test]
fn a_delete_hands_its_leaf_over_in_a_group() {
    use std::sync::mpsc;
    use std::time::Duration;
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Arc::new(Hart::create(pool, 2).unwrap());
    let keys = insert_fr_keys(&h, frees::BATCH as u32 + 8);
    let st = stripe_of(&h, &keys[0]);
    let lc = leaf::class_for_key(keys[0].len());
    assert!(keys.iter().all(|k| stripe_of(&h, k) == st));
    let (tx, rx) = mpsc::channel();
    // Locked before the worker starts: locked after, a worker that ran
    // ahead (a loaded machine) handed its group over before the lock, and
    // the test failed (CI, 2026-11-27).
    let list = h.leaves(st, lc).lock();
    let worker = {
        let (h, keys) = (Arc::clone(&h), keys.clone());
        std::thread::spawn(move || {
            for k in &keys[..frees::BATCH] {
                assert!(h.delete(k).unwrap());
                tx.send(()).unwrap();
            }
        })
    };
    for i in 0..frees::BATCH - 1 {
        rx.recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("delete {i} waited for the leaf list"));
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "the group's last delete did not wait for the leaf list"
    );
    // It waits with its ART let go: the group is handed over after.
    let (hk, _) = h.split(&keys[frees::BATCH - 1]);
    let tree = h.trees.find_bytes(hk).expect("the keys' ART");
    assert!(
        tree.try_read().is_some(),
        "the group is handed over with the ART locked"
    );
    drop(list);
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the last delete, once the list is free");
    worker.join().unwrap();
    assert_eq!(h.frees.pending(), 0);
    assert_eq!(h.len(), 8);
    h.check().unwrap();
}

/// The `paper` order keeps the chunk header current at every free
/// (Algorithm 5), so it releases a leaf at once: the header in PM no
/// longer has the deleted leaf's bit right after the delete.
#[test]
fn the_paper_order_frees_a_leaf_at_once() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let mut config = EngineConfig::new();
    config.insert("hart.persist_order".into(), "paper".into());
    let h = create_hart(Arc::clone(&pool), &config).unwrap();
    let keys = insert_fr_keys(&h, 4);
    let (st, leaf) = (stripe_of(&h, &keys[1]), leaf_of(&h, &keys[1]));
    let lc = leaf::class_for_key(keys[1].len());
    let (c, i) = h.leaves(st, lc).lock().locate(leaf).unwrap();
    assert_ne!(pool.load_u64(c).unwrap() & (1 << i), 0, "the leaf's bit");
    assert!(h.delete(&keys[1]).unwrap());
    assert_eq!(h.frees.pending(), 0);
    assert_eq!(pool.load_u64(c).unwrap() & (1 << i), 0, "the bit, cleared");
}

/// An insert that finds the pool full takes the leaves that deletes left
/// in the thread's shard before it says the pool is full
/// ([`Hart::retry_when_full`]). Without it, the inserts after fewer than
/// a group of deletes fail: the list has no leaf to give and no chunk
/// can be added.
#[test]
fn a_full_pool_takes_the_leaves_a_thread_still_holds() {
    let pool = Arc::new(Pool::create_anonymous(4 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let n = fill_with_fr_keys(&h);
    assert!(n > 1000, "{n} keys");
    let deleted = 5;
    for i in 0..deleted {
        assert!(h.delete(format!("fr{i:06}").as_bytes()).unwrap());
    }
    assert_eq!(h.frees.pending(), deleted as usize);
    for i in 0..deleted {
        let k = format!("new{i:05}");
        h.put(k.as_bytes(), b"12345678", PutMode::Upsert)
            .unwrap_or_else(|e| panic!("insert {i} after {deleted} deletes: {e}"));
    }
    assert_eq!(h.len(), u64::from(n));
    h.check().unwrap();
}

/// A group with a leaf its list does not hold (a bug upstream): the
/// operation that hands the group over reports it, and the group's other
/// leaves still go back.
#[test]
fn a_bad_free_in_a_group_is_reported_and_the_rest_go_back() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let keys = insert_fr_keys(&h, 56 * 3);
    let st = stripe_of(&h, &keys[0]);
    let lc = leaf::class_for_key(keys[0].len());
    let chunks = || h.leaves(st, lc).lock().chunk_offsets().count();
    let before = chunks();
    h.free_leaf(st, lc, 64).unwrap();
    // The bad free is in the first group.
    let mut errors = 0;
    for k in &keys {
        if let Err(e) = h.delete(k) {
            assert!(e.to_string().contains("not in its chunk list"), "{e}");
            errors += 1;
        }
    }
    assert_eq!(errors, 1);
    h.settle_frees().unwrap();
    assert_eq!(h.len(), 0);
    // Every chunk emptied, and recycled but the list's last, whose 56
    // leaves are all free again: 56 new keys fit in it.
    assert!(before >= 3, "{before} chunks");
    assert_eq!(chunks(), 1, "of {before} chunks");
    for i in 0..56 {
        h.put(format!("fr-new{i:03}").as_bytes(), b"v", PutMode::Upsert)
            .unwrap();
    }
    assert_eq!(chunks(), 1, "56 leaves did not fit in the emptied chunk");
    h.check().unwrap();
}

/// `check` hands the shards' leaves over first, so a chunk that a held
/// leaf empties is recycled by it (from a review: without the settle in
/// `check`, every test passed).
#[test]
fn check_settles_the_shards() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let keys = insert_fr_keys(&h, 57);
    let st = stripe_of(&h, &keys[0]);
    let lc = leaf::class_for_key(keys[0].len());
    let chunks = || h.leaves(st, lc).lock().chunk_offsets().count();
    assert_eq!(chunks(), 2);
    assert!(h.delete(&keys[56]).unwrap());
    assert_eq!(h.frees.pending(), 1);
    assert_eq!(chunks(), 2);
    h.check().unwrap();
    assert_eq!(h.frees.pending(), 0);
    assert_eq!(chunks(), 1);
}

/// A group of one thread's frees that names two leaf lists (two key
/// lengths) goes back whole (from a review: a hand-over that stopped
/// after its first list passed every test).
#[test]
fn a_group_of_two_lists_goes_back_whole() {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let long = |i: u32| format!("fr{i:06}{}", "x".repeat(60)).into_bytes();
    let short = insert_fr_keys(&h, 4);
    for i in 0..4 {
        h.put(&long(i), b"12345678", PutMode::Upsert).unwrap();
    }
    assert_ne!(
        leaf::class_for_key(short[0].len()),
        leaf::class_for_key(long(0).len())
    );
    for i in 0..4 {
        assert!(h.delete(&short[i as usize]).unwrap());
        assert!(h.delete(&long(i)).unwrap());
    }
    assert_eq!(h.frees.pending(), 8);
    h.settle_frees().unwrap();
    assert_eq!(h.frees.pending(), 0);
    h.check().unwrap();
}

/// A full pool's hand-over that meets a leaf its list does not hold still
/// retries the allocation (the error is another operation's), and `check`
/// reports that error once (from a review: the insert failed with the
/// other leaf's "not in its chunk list").
#[test]
fn a_full_pool_retries_past_a_bad_free_and_check_reports_it() {
    let pool = Arc::new(Pool::create_anonymous(4 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let n = fill_with_fr_keys(&h);
    let k0 = b"fr000000".to_vec();
    let (st, lc) = (stripe_of(&h, &k0), leaf::class_for_key(k0.len()));
    for i in 0..5 {
        assert!(h.delete(format!("fr{i:06}").as_bytes()).unwrap());
    }
    h.free_leaf(st, lc, 64).unwrap();
    h.put(b"new00000", b"12345678", PutMode::Upsert)
        .expect("the insert after the hand-over");
    let e = h.check().unwrap_err();
    assert!(e.to_string().contains("not in its chunk list"), "{e}");
    h.check().unwrap();
    assert_eq!(h.len(), u64::from(n) - 4);
}

/// Objects taken in DRAM over every stripe: leaves of the leaf list for
/// keys of `key_len` bytes, and value objects of every size.
fn taken(h: &Hart, key_len: usize) -> (u32, u32) {
    let lc = leaf::class_for_key(key_len);
    let leaves = h
        .stripes
        .iter()
        .map(|s| s.leaves[lc].lock().taken_objects())
        .sum();
    let values = h
        .stripes
        .iter()
        .flat_map(|s| s.values.iter())
        .map(|l| l.lock().taken_objects())
        .sum();
    (leaves, values)
}

/// "Leaf first" (docs/design.md §7): after an upsert that inserted, the
/// next upsert writes its leaf before the descent. When that one finds its
/// key present, it updates the indexed leaf in place under one fence, and
/// the early leaf is dead in PM and given back (with its value object) in
/// DRAM: nothing is left taken, and a reopen finds one live leaf (a delete
/// then stays deleted).
#[test]
fn an_upsert_that_wrote_its_leaf_first_kills_it_when_the_key_is_present() {
    for value_len in [8, 40] {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(Arc::clone(&pool), 2).unwrap();
        let (v1, v2) = (vec![1u8; value_len], vec![2u8; value_len]);
        assert_eq!(
            h.put(b"ef-a", &v1, PutMode::Upsert).unwrap(),
            PutOutcome::Inserted
        );
        let before = taken(&h, 4);
        let c0 = counters::this_thread();
        assert_eq!(
            h.put(b"ef-a", &v2, PutMode::Upsert).unwrap(),
            PutOutcome::Replaced
        );
        let c1 = counters::this_thread();
        assert_eq!(c1.fences - c0.fences, 1, "value {value_len} B: one fence");
        // The early leaf (and its value object) given back; the old value
        // object freed by the update, the new one taken: as before.
        assert_eq!(taken(&h, 4), before, "value {value_len} B");
        // The hint now says update: the next upsert of a present key writes
        // no leaf first (one line flushed for an inline value).
        let c2 = counters::this_thread();
        h.put(b"ef-a", &v1, PutMode::Upsert).unwrap();
        h.put(b"ef-a", &v2, PutMode::Upsert).unwrap();
        let c3 = counters::this_thread();
        if value_len == 8 {
            assert_eq!(c3.flushes - c2.flushes, 2, "two updates in place");
        }
        let mut got = Vec::new();
        assert!(h.get_with(b"ef-a", &mut |v| got = v.to_vec()).unwrap());
        assert_eq!(got, v2);
        assert_eq!(h.len(), 1);
        h.check().unwrap();
        drop(h);
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        assert_eq!(taken(&h, 4), before, "value {value_len} B: reopened");
        assert!(h.delete(b"ef-a").unwrap());
        drop(h);
        let h = Hart::open(Arc::clone(&pool)).unwrap();
        assert!(!h.get_with(b"ef-a", &mut |_| {}).unwrap(), "stays deleted");
        assert_eq!(h.len(), 0);
        h.check().unwrap();
    }
}

/// A HART on a pool of `size` bytes whose upserts leave their early leaf
/// live beside a present key's leaf (the fault), so that two live leaves
/// of one key reach recovery. Without the point index: with it, an upsert
/// knows the key is present before it writes a leaf, and writes none.
fn early_leaves_left_live(size: u64) -> (Arc<Pool>, Hart) {
    let cfg = crate::pm::PoolConfig {
        fault: Some(Fault::HartEarlyLeafLeftLive),
        ..Default::default()
    };
    let pool = Arc::new(Pool::create_anonymous(size, "hart", &cfg).unwrap());
    let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
    h.point_index = false;
    (pool, h)
}

/// Two live leaves of one key (as a crash leaves them while an upsert that
/// wrote its leaf first finds the key present; made here by the fault that
/// leaves the early leaf live): recovery keeps one, kills the other in PM
/// and gives it and its value object back. Before 2026-11-28 the open
/// failed (`Corrupt`).
#[test]
fn recovery_keeps_one_of_two_live_leaves_of_a_key() {
    let (pool, h) = early_leaves_left_live(64 << 20);
    for (k, len) in [(&b"dup-a"[..], 40), (b"dup-b", 8)] {
        h.put(k, &vec![1; len], PutMode::Upsert).unwrap();
        h.put(k, &vec![2; len], PutMode::Upsert).unwrap();
    }
    h.put(b"dup-c", b"single", PutMode::Upsert).unwrap();
    let (leaves, values) = taken(&h, 5);
    assert_eq!((leaves, values), (5, 2), "two early leaves left taken");
    drop(h);
    let seen = crate::pm::cases::count(crate::pm::cases::Case::HartDuplicateLeaf);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert!(crate::pm::cases::count(crate::pm::cases::Case::HartDuplicateLeaf) >= seen + 2);
    assert_eq!(taken(&h, 5), (3, 1), "one leaf per key, one value object");
    for (k, len) in [(&b"dup-a"[..], 40), (b"dup-b", 8)] {
        let mut got = Vec::new();
        assert!(h.get_with(k, &mut |v| got = v.to_vec()).unwrap());
        assert_eq!(got, vec![2; len]);
    }
    assert_eq!(h.len(), 3);
    h.check().unwrap();
    assert!(h.delete(b"dup-a").unwrap());
    drop(h);
    let h = Hart::open(Arc::clone(&pool)).unwrap();
    assert!(
        !h.get_with(b"dup-a", &mut |_| {}).unwrap(),
        "the killed leaf stays dead"
    );
    assert_eq!(h.len(), 2);
    assert_eq!(taken(&h, 5), (2, 0));
    h.check().unwrap();
}

/// Which of a key's two live leaves recovery keeps follows from the pool's
/// bytes alone, not from which recovery thread met which leaf first: a
/// read-only open (which repairs only its private copy) and the writable
/// open after it must agree on the key's value. Found by
/// `tests/killed_process.rs` with `PMINDEX_KILL_ROUNDS=10` (round 8 of
/// `hart`: "the read-only open saw other keys"). The two leaves lie in
/// different chunks, so that two recovery threads can take them in either
/// order; 300 recoveries of the one image must give one result.
#[test]
fn which_of_two_live_leaves_recovery_keeps_does_not_depend_on_its_threads() {
    let (pool, h) = early_leaves_left_live(8 << 20);
    h.put(b"dup-a", b"old", PutMode::Insert).unwrap();
    // Fill the first leaf chunk (56 leaves), so the early leaf lands in a
    // second one.
    for i in 0..80u32 {
        h.put(format!("fill-{i:03}").as_bytes(), b"f", PutMode::Insert)
            .unwrap();
    }
    h.put(b"dup-a", b"new", PutMode::Upsert).unwrap();
    drop(h);
    let image = pool.image();
    drop(pool);
    let recovered = || {
        let p = Arc::new(Pool::open_image(&image, Some("hart"), &Default::default()).unwrap());
        let h = recovery::open(Arc::clone(&p), Some(2), (None, None), None).unwrap();
        h.check().unwrap();
        assert_eq!(h.len(), 81);
        drop(h);
        p.image()
    };
    let first = recovered();
    assert_ne!(first, image, "recovery killed one of the two leaves");
    for round in 1..300 {
        assert!(recovered() == first, "recovery {round} kept the other leaf");
    }
}

/// A full pool, whose last upsert inserted (so the hint says "write the
/// leaf first"): an upsert of a present key with an inline value still
/// succeeds, in place, though no early leaf can be taken (it failed with
/// "pool full" while the early leaf was taken unconditionally).
#[test]
fn a_full_pool_still_updates_in_place_after_a_hint_to_insert() {
    let pool = Arc::new(Pool::create_anonymous(4 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let n = fill_with_fr_keys(&h);
    assert!(n > 1000, "{n} keys");
    assert_eq!(
        h.put(b"fr000000", b"87654321", PutMode::Upsert).unwrap(),
        PutOutcome::Replaced
    );
    let mut got = Vec::new();
    assert!(h.get_with(b"fr000000", &mut |v| got = v.to_vec()).unwrap());
    assert_eq!(got, b"87654321");
    assert_eq!(h.len(), u64::from(n));
    h.check().unwrap();
}

/// A compaction that gives nothing back (a full pool, nothing deleted)
/// marks itself futile, so the next refused put does not walk the ARTs
/// again; a release of a value object clears the mark, and then a
/// compaction runs and makes room for a value of another class.
#[test]
fn a_futile_compaction_is_not_run_again_until_a_value_is_released() {
    let pool = Arc::new(Pool::create_anonymous(4 << 20, "hart", &Default::default()).unwrap());
    let h = Hart::create(Arc::clone(&pool), 2).unwrap();
    let key = |i: u32| format!("{:02}/{i:06}", i % 37).into_bytes();
    let n = (0..)
        .find(|&i| match h.put(&key(i), &[7u8; 1000], PutMode::Upsert) {
            Ok(_) => false,
            Err(Error::PoolFull { .. }) => true,
            Err(e) => panic!("{e}"),
        })
        .unwrap();
    assert!(
        h.compactions.futile.load(Ordering::SeqCst),
        "nothing to move"
    );
    let moved = compact::compactions().1;
    let begun = h.compactions.begun.load(Ordering::SeqCst);
    assert!(!h.compact_values(begun).unwrap());
    assert_eq!(
        h.compactions.begun.load(Ordering::SeqCst),
        begun,
        "no walk began"
    );
    // Every other key deleted: the mark is gone, and a larger value's
    // put compacts (the values of half the 1,024-byte chunks move).
    for i in (0..n).step_by(2) {
        assert!(h.delete(&key(i)).unwrap());
    }
    assert!(!h.compactions.futile.load(Ordering::SeqCst));
    h.put(&key(n), &[8u8; 2000], PutMode::Upsert).unwrap();
    assert!(compact::compactions().1 > moved, "values were moved");
    // A put that failed while that compaction ran (its drained chunks
    // serve no allocation) is told to try again, without a walk.
    let now = h.compactions.begun.load(Ordering::SeqCst);
    assert_eq!(now, begun + 1);
    assert!(h.compact_values(begun).unwrap());
    assert_eq!(h.compactions.begun.load(Ordering::SeqCst), now);
    h.check().unwrap();
    for i in (1..n).step_by(2) {
        let mut got = Vec::new();
        assert!(h.get_with(&key(i), &mut |v| got = v.to_vec()).unwrap());
        assert_eq!(got, [7u8; 1000]);
    }
}

/// A `put_many` that a full pool stops at an item runs, after the
/// compaction, only the items not yet applied: an item applied twice
/// would be an update of its own insert (and, between the two, another
/// thread's put of its key would be overwritten). Here the first item's
/// new key is inserted once: its leaf's active slot is still slot 0.
#[test]
fn a_put_many_after_a_compaction_applies_each_item_once() {
    for paper in [false, true] {
        let pool = Arc::new(Pool::create_anonymous(4 << 20, "hart", &Default::default()).unwrap());
        let mut h = Hart::create(Arc::clone(&pool), 2).unwrap();
        if paper {
            h.set_order(PersistOrder::Paper);
        }
        let key = |i: u32| format!("{:02}/{i:06}", i % 37).into_bytes();
        let n = (0..)
            .find(|&i| h.put(&key(i), &[7u8; 1000], PutMode::Upsert).is_err())
            .unwrap();
        for i in (0..n).step_by(2) {
            assert!(h.delete(&key(i)).unwrap());
        }
        // The first item fits in a freed object; the second needs a chunk
        // of 2,048-byte objects, which only a compaction makes room for.
        let (a, b) = (key(n + 1), key(n + 2));
        h.put_many(&[(&a, &[5u8; 1000]), (&b, &[6u8; 2000])])
            .unwrap();
        let leaf = leaf_of(&h, &a);
        let c = leaf::commit(&pool, leaf).unwrap().expect("a live leaf");
        assert_eq!(
            c.active, 0,
            "paper order {paper}: the first item was applied twice"
        );
        let mut got = Vec::new();
        assert!(h.get_with(&b, &mut |v| got = v.to_vec()).unwrap());
        assert_eq!(got, [6u8; 2000]);
        h.check().unwrap();
    }
}
