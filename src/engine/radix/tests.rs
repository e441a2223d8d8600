//! Unit tests of the radix trees (`super`): searches and their line
//! counts, the lock-free reader, damage, batches, and the format 4 pointer
//! tags.

use super::*;

#[test]
fn a_search_counts_the_distinct_lines_it_reads() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    // Three keys that differ in their first nibble: one root NODE16 at
    // depth 0 with slots 0 and 1 in its header line, slot 14 two lines on.
    t.put(&[0x00, 1], b"v", PutMode::Upsert).unwrap();
    t.put(&[0x10, 2], &[7; 200], PutMode::Upsert).unwrap();
    t.put(&[0xE0, 3], b"v", PutMode::Upsert).unwrap();
    let lines = |k: &[u8]| t.search().lookup_counted(k).unwrap();
    // Root slot, node header (slot 0 in the same line), one-line leaf.
    let (found, n) = lines(&[0x00, 1]);
    assert!(found.is_some());
    assert_eq!(n, 3);
    // The slot in another line than the header: one more.
    assert_eq!(lines(&[0xE0, 3]).1, 4);
    // A leaf of 8 + 2 + 200 bytes spans four lines; all are counted when
    // found (the caller reads the value) ...
    assert_eq!(lines(&[0x10, 2]).1, 2 + 4);
    // ... and only the line with its key when the key differs.
    let (found, n) = lines(&[0x10, 9]);
    assert!(found.is_none());
    assert_eq!(n, 3);
    // An empty slot: no leaf read.
    assert_eq!(lines(&[0x50, 0]), (None, 2));
}

/// A value too long for the lock-free reader's buffer goes to the lock:
/// its lines are counted once, as a read under the lock counts them
/// (the lock-free try counted them too, before). Also for a batch.
#[test]
fn a_read_that_falls_back_to_the_lock_counts_its_lines_once() {
    use crate::engine::{Engine, Reads};
    use crate::pm::counters::this_thread;
    let long = vec![5u8; 2 * crate::engine::VALUE_BUF];
    // Two trees of the same puts in fresh pools (so the same layout),
    // one read lock-free (falling back for long values), one locked.
    let tree = |flavor, reads| {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        let db = Locked::with_reads(pool, t, reads);
        for i in 0..50u8 {
            let v: &[u8] = if i % 2 == 0 { &long } else { b"short" };
            db.put(&[b'k', i], v, PutMode::Upsert).unwrap();
        }
        db
    };
    let lines = |f: &mut dyn FnMut()| {
        let r0 = this_thread().lines_read;
        f();
        this_thread().lines_read - r0
    };
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let fast = tree(flavor, Reads::Optimistic);
        let slow = tree(flavor, Reads::Locked);
        for i in [0u8, 1, 2] {
            let key = [b'k', i];
            let count = |db: &Locked<RadixTree>| {
                let mut n = 0;
                let l = lines(&mut || {
                    assert!(db.get_with(&key, &mut |v| n = v.len()).unwrap());
                });
                assert_eq!(n, if i % 2 == 0 { long.len() } else { 5 });
                l
            };
            let (optimistic, locked) = (count(&fast), count(&slow));
            assert!(locked > 0);
            assert_eq!(optimistic, locked, "{flavor:?}, key {i}");
            // A batch of this key and a short value's.
            let batch = |db: &Locked<RadixTree>| {
                lines(&mut || {
                    db.get_many(&[&key, &[b'k', 1]], &mut |_, v| assert!(v.is_some()))
                        .unwrap();
                })
            };
            assert_eq!(batch(&fast), batch(&slow), "{flavor:?}, batch with key {i}");
        }
    }
}

/// A leaf word whose value length is over the API's limit is damage:
/// so a search of a damaged or torn word counts (and, with emulated
/// latency, waits for) at most a limit's worth of lines.
#[test]
fn a_leaf_word_with_a_value_over_the_limit_is_refused() {
    let w = |value_len| {
        leaf::LeafWord {
            key_len: 8,
            value_len,
        }
        .encode()
    };
    assert!(leaf::LeafWord::decode(64, w(MAX_VALUE_LEN)).is_ok());
    let e = leaf::LeafWord::decode(64, w(MAX_VALUE_LEN + 1)).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}

/// The engine itself refuses a key or value its leaf word cannot hold
/// (`Db` checks first; a caller of the engine may not): an error, and
/// nothing written. In a batch, the items before it stand.
#[test]
fn the_engine_refuses_what_a_leaf_word_cannot_hold() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        t.put(b"kept", b"v", PutMode::Upsert).unwrap();
        let long_key = vec![b'x'; MAX_KEY_LEN + 1];
        let long_value = vec![1u8; MAX_VALUE_LEN + 1];
        let e = t.put(&long_key, b"v", PutMode::Upsert).unwrap_err();
        assert!(matches!(e, Error::KeyTooLong { .. }), "{flavor:?}: {e}");
        let e = t.put(b"big", &long_value, PutMode::Upsert).unwrap_err();
        assert!(matches!(e, Error::ValueTooLong { .. }), "{flavor:?}: {e}");
        let e = t.put(b"", b"v", PutMode::Upsert).unwrap_err();
        assert!(matches!(e, Error::EmptyKey { .. }), "{flavor:?}: {e}");
        let items: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"), (&long_key, b"2"), (b"c", b"3")];
        assert!(t.put_many(&items).is_err(), "{flavor:?}");
        assert_eq!(
            all_keys(&t),
            vec![b"a".to_vec(), b"kept".to_vec()],
            "{flavor:?}"
        );
        assert_eq!(t.len(), 2, "{flavor:?}");
        t.check().unwrap();
    }
}

/// Every key of `t`, in scan order.
fn all_keys(t: &RadixTree) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    t.scan(
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
        &mut |k, _| {
            got.push(k.to_vec());
            true
        },
    )
    .unwrap();
    got
}

/// The lazy expansion (an insert that meets a leaf) builds a node of the
/// two leaves on the stack: whichever key comes first, with or without a
/// shared path, and with one key ending where they part (the end slot),
/// both are found and a scan lists them in order.
#[test]
fn a_lazy_expansion_holds_both_leaves_in_order() {
    let pairs: [(&[u8], &[u8]); 6] = [
        (b"kb", b"ka"),
        (b"ka", b"kb"),
        (b"k", b"ka"),
        (b"ka", b"k"),
        (b"a shared path, then z", b"a shared path, then a"),
        (b"a shared path", b"a shared path, longer"),
    ];
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        for (first, second) in pairs {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            t.put(first, b"1", PutMode::Upsert).unwrap();
            t.put(second, b"2", PutMode::Upsert).unwrap();
            let what = format!("{flavor:?}: {first:?} then {second:?}");
            for (k, v) in [(first, b"1"), (second, b"2")] {
                let mut got = None;
                t.get_with(k, &mut |v| got = Some(v.to_vec())).unwrap();
                assert_eq!(got.as_deref(), Some(&v[..]), "{what}");
            }
            let mut want = vec![first.to_vec(), second.to_vec()];
            want.sort();
            assert_eq!(all_keys(&t), want, "{what}");
            t.check().unwrap();
        }
    }
}

/// A tree of `flavor` with 3,000 keys of 1 to 46 bytes: a shared 6-byte
/// prefix on a third of them (compressed paths), a 150-byte value on a
/// tenth (leaves of several lines). Returns it with its keys.
fn mixed_tree(flavor: Flavor) -> (RadixTree, Vec<Vec<u8>>) {
    let pool = Arc::new(Pool::create_anonymous(64 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(pool, flavor).unwrap();
    let mut x = 7u64;
    let mut keys = Vec::new();
    for i in 0..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let r = x;
        let len = 1 + (r % 40) as usize;
        let mut k: Vec<u8> = (0..len)
            .map(|j| (r >> (j % 8 * 8)) as u8 ^ j as u8)
            .collect();
        if i % 3 == 0 {
            k.splice(0..0, *b"prefix");
        }
        let vlen = if i % 10 == 0 {
            150
        } else {
            (r >> 40) as usize % 20
        };
        t.put(&k, &vec![i as u8; vlen], PutMode::Upsert).unwrap();
        keys.push(k);
    }
    (t, keys)
}

/// Searches around a present key `k`: itself, its prefix one byte
/// shorter, a longer key, and `k` with its last byte changed (non-empty
/// ones only).
fn probes_around(k: &[u8]) -> Vec<Vec<u8>> {
    let mut longer = k.to_vec();
    longer.push(0x5A);
    let mut other = k.to_vec();
    *other.last_mut().unwrap() ^= 0x80;
    let mut probes = vec![k.to_vec(), k[..k.len() - 1].to_vec(), longer, other];
    probes.retain(|q| !q.is_empty());
    probes
}

/// `mixed_tree` with keys that fill NODE48s and NODE256s too: under
/// "n" one more byte of 0 to 29 (a NODE48), under "N" of 0 to 99 (a
/// NODE256), and under "N" + 7 a third byte of 0 to 39 (a NODE48 below
/// a NODE256).
fn every_kind_tree(flavor: Flavor) -> (RadixTree, Vec<Vec<u8>>) {
    let (mut t, mut keys) = mixed_tree(flavor);
    let mut more: Vec<Vec<u8>> = (0..30u8).map(|i| vec![b'n', i]).collect();
    more.extend((0..100u8).map(|i| vec![b'N', i]));
    more.extend((0..40u8).map(|i| vec![b'N', 7, i]));
    for k in &more {
        t.put(k, k, PutMode::Upsert).unwrap();
    }
    keys.extend(more);
    (t, keys)
}

/// Each tree's search takes a loop of its own in the common case
/// (`Search::walk_w16`, `Search::walk_bytes`) and a one-line leaf check,
/// and the general walk otherwise; both must give what the general walk
/// alone gives, lines included, for present and absent keys of every
/// length, short and long leaves, compressed paths and every node kind.
#[test]
fn fast_searches_agree_with_the_general_walk() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let (t, keys) = every_kind_tree(flavor);
        let s = t.search();
        let general = |q: &[u8]| match flavor {
            Flavor::Wort => s.lookup_in::<true>(q, s.root, 0, 1),
            _ => s.lookup_in::<false>(q, s.root, 0, 1),
        };
        let mut absent = 0;
        for k in &keys {
            for q in probes_around(k) {
                let fast = s.lookup_counted(&q).unwrap();
                assert_eq!(fast, general(&q).unwrap(), "{flavor:?} key {q:?}");
                absent += usize::from(fast.0.is_none());
            }
            assert!(s.lookup_counted(k).unwrap().0.is_some());
        }
        assert!(absent > 1000, "absent keys are probed too ({absent})");
    }
}

/// The lock-free reader's one-key search (`Reader::get_into`, whose
/// WORT path reads a one-line leaf's value from the line its key was
/// compared in) answers as the search under the lock, value and PM
/// lines counted included, for the keys of `mixed_tree` (one-line and
/// longer leaves, compressed paths) and the probes around them, in all
/// three trees.
#[test]
fn the_lock_free_reader_agrees_with_the_locked_search() {
    use crate::engine::{Probe, ValueBuf};
    use crate::pm::counters::this_thread;
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let (t, keys) = every_kind_tree(flavor);
        let reader = t.optimistic_reader().expect("a reader");
        let (mut found, mut absent) = (0, 0);
        for k in &keys {
            for q in probes_around(k).into_iter().chain([k.clone()]) {
                let mut buf = ValueBuf::new();
                let r0 = this_thread().lines_read;
                let probe = reader.get_into(&q, &mut buf).unwrap();
                let lines = this_thread().lines_read - r0;
                let mut want = None;
                let r0 = this_thread().lines_read;
                t.get_with(&q, &mut |v| want = Some(v.to_vec())).unwrap();
                let want_lines = this_thread().lines_read - r0;
                match probe {
                    Probe::Absent => {
                        assert_eq!(want, None, "{flavor:?} {q:?}");
                        absent += 1;
                    }
                    Probe::Found(r) => {
                        assert_eq!(Some(&buf.bytes()[r]), want.as_deref(), "{flavor:?} {q:?}");
                        found += 1;
                    }
                    Probe::TooLong => panic!("{flavor:?} {q:?}: no value here is too long"),
                }
                assert_eq!(lines, want_lines, "{flavor:?} {q:?}: lines");
            }
        }
        assert!(
            found >= keys.len() && absent > 1000,
            "{flavor:?}: {found} found, {absent} absent"
        );
    }
}

/// The batched search (`Search::lookup_many`) gives each key what
/// `lookup_counted` gives it alone, lines included, in all three trees,
/// for batches of every size up to `BATCH`: the keys of `mixed_tree`,
/// the probes around them, and random 8-byte keys.
#[test]
fn batched_searches_agree_with_single_searches() {
    use crate::engine::BATCH;
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let (t, keys) = mixed_tree(flavor);
        let mut probes = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            probes.extend(probes_around(k));
            probes.push(
                (i as u64)
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .to_be_bytes()
                    .to_vec(),
            );
        }
        let s = t.search();
        let (mut at, mut size, mut found) = (0, 1, 0);
        while at < probes.len() {
            let batch: Vec<&[u8]> = probes[at..(at + size).min(probes.len())]
                .iter()
                .map(Vec::as_slice)
                .collect();
            let mut seen = vec![false; batch.len()];
            s.lookup_many(&batch, |i, got| {
                assert!(!seen[i], "{flavor:?}: key {i} answered twice");
                seen[i] = true;
                let want = s.lookup_counted(batch[i]).unwrap();
                assert_eq!(got.unwrap(), want, "{flavor:?}: key {:?}", batch[i]);
                found += usize::from(want.0.is_some());
            });
            assert!(seen.iter().all(|&s| s), "{flavor:?}: every key answered");
            at += batch.len();
            size = size % BATCH + 1;
        }
        assert!(found >= keys.len(), "{flavor:?}: {found} found");
        assert!(found < probes.len() / 2, "{flavor:?}: absent keys probed");
    }
}

/// Regression (review of the batched search): a WORT slot holding a
/// word near `u64::MAX` (a torn read of a reused block, or a damaged
/// pool) made the batch's prefetch address overflow, a panic in builds
/// with overflow checks. It is an error, as in the single search.
#[test]
fn a_huge_child_word_is_an_error_in_a_batch_too() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    t.put(&[0x10], b"a", PutMode::Upsert).unwrap();
    t.put(&[0x20], b"b", PutMode::Upsert).unwrap();
    let n = pool.load_u64(t.root_slot()).unwrap();
    assert_eq!(nodes::kind(&pool, n).unwrap(), Kind::W16);
    pool.store_u64(nodes::w16::slot(n, 1), u64::MAX - 7)
        .unwrap();
    assert!(t.search().lookup(&[0x10]).is_err());
    let mut answers = Vec::new();
    t.search()
        .lookup_many(&[&[0x10], &[0x20]], |i, r| answers.push((i, r)));
    answers.sort_by_key(|(i, _)| *i);
    assert!(answers[0].1.is_err(), "{:?}", answers[0].1);
    assert!(answers[1].1.as_ref().unwrap().0.is_some());
}

/// `put_many` in a pool too full for one item's leaf applies the items
/// before it (`Db::put_many`'s contract). Before, a failed reservation
/// sent every block of the batch back: none of its items was applied.
#[test]
fn a_batch_whose_leaf_cannot_be_reserved_applies_the_items_before() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let pool = Arc::new(Pool::create_anonymous(8 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        let mut i = 0u64;
        while t.put(&i.to_be_bytes(), b"v", PutMode::Upsert).is_ok() {
            i += 1;
        }
        for j in 0..20u64 {
            assert!(t.delete(&(j * 7).to_be_bytes()).unwrap());
        }
        let (k0, k1, big) = (
            0u64.to_be_bytes(),
            u64::MAX.to_be_bytes(),
            vec![1u8; 20_000],
        );
        let e = t
            .put_many_impl(&[(&k0[..], &b"w"[..]), (&k1[..], &big[..])], &mut 0)
            .unwrap_err();
        assert!(matches!(e, Error::PoolFull { .. }), "{flavor:?}: {e}");
        assert!(t.search().lookup(&k0).unwrap().is_some(), "{flavor:?}");
        assert!(t.search().lookup(&k1).unwrap().is_none(), "{flavor:?}");
        t.check().unwrap();
    }
}

/// A WORT tree of keys [0x10], [0x20], [0x30] and [0x40], where the
/// slot of [0x10] points 64 bytes into the leaf of [0x40], at a leaf of
/// [0x10] inside its 200-byte value: a leaf that is not a block
/// (damage), which no release accepts.
fn wort_with_a_fake_leaf() -> RadixTree {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    for (k, v) in [(0x10u8, b"a"), (0x20, b"b"), (0x30, b"c")] {
        t.put(&[k], v, PutMode::Upsert).unwrap();
    }
    let mut v = vec![0u8; 200];
    let word: u64 = 1 | (1 << 8) | (1u64 << 32);
    v[55..63].copy_from_slice(&word.to_le_bytes());
    v[63] = 0x10;
    v[64] = b'X';
    t.put(&[0x40], &v, PutMode::Upsert).unwrap();
    let (big, _) = t.search().lookup(&[0x40]).unwrap().unwrap();
    let n = pool.load_u64(t.root_slot()).unwrap();
    // A leaf's pointer, tagged as one (format 4).
    pool.store_u64(nodes::w16::slot(n, 1), (big + 64) | nodes::LEAF_TAG)
        .unwrap();
    t
}

/// A delete whose leaf cannot be released after its commit (damage: the
/// slot points into a large leaf's value, where a fake leaf of the key
/// lies, not at a block): the delete is durable and the error returned,
/// and the key count follows PM. Before, `len` stayed one too high and
/// `check` reported the mismatch.
#[test]
fn a_delete_whose_release_fails_after_its_commit_is_counted() {
    let mut t = wort_with_a_fake_leaf();
    assert!(t.search().lookup(&[0x10]).unwrap().is_some());
    let e = t.delete(&[0x10]).unwrap_err().to_string();
    assert!(e.contains("no block"), "{e}");
    assert!(t.search().lookup(&[0x10]).unwrap().is_none(), "durable");
    let mut scanned = 0;
    t.scan(Bound::Unbounded, Bound::Unbounded, &mut |_, _| {
        scanned += 1;
        true
    })
    .unwrap();
    assert_eq!(t.len(), scanned);
}

/// A batch of puts whose replaced leaf cannot be given back at the
/// batch's end (damage: the slot points at a fake leaf inside a value):
/// every item of the call is applied, the later batches too, and the
/// error comes at the end. Before, the call returned after the first
/// batch of 32, with the rest of the items not applied.
#[test]
fn a_batch_whose_replaced_leaf_cannot_be_released_applies_every_item() {
    let mut t = wort_with_a_fake_leaf();
    let mut keys: Vec<Vec<u8>> = vec![vec![0x10]];
    keys.extend((0..40u8).map(|i| vec![0x50, i]));
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"new"[..])).collect();
    let mut applied = 0;
    let e = t
        .put_many_impl(&items, &mut applied)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no block"), "{e}");
    assert_eq!(applied, items.len());
    for k in &keys {
        let mut got = Vec::new();
        t.get_with(k, &mut |v| got = v.to_vec()).unwrap();
        assert_eq!(got, b"new", "{k:?}");
    }
    assert_eq!(t.len(), 44);
}

/// A copy of node `n`'s block, 128 bytes into the value of a new large
/// leaf of key `[0x40]` (the leaf's value starts 9 bytes in): a node
/// that is not a block, for the damage tests below. `n` is the node's
/// pointer word; returns the copy's, with the same tags (a WORT node's
/// slot map).
fn fake_node(t: &mut RadixTree, n: u64) -> u64 {
    let size = t.block_size(n).unwrap();
    let mut v = vec![0u8; 119];
    for w in 0..size / 8 {
        let word = t.pool.load_u64(nodes::block_of(n) + 8 * w).unwrap();
        v.extend_from_slice(&word.to_le_bytes());
    }
    t.put(&[0x40], &v, PutMode::Upsert).unwrap();
    let (big, _) = t.search().lookup(&[0x40]).unwrap().unwrap();
    (big + 128) | (n & nodes::TAGS)
}

/// A delete that leaves a node with one child merges it away; if the
/// node cannot be released after that commit (damage: the root slot
/// points at a copy of the node inside a value, not at a block), the
/// delete is durable, its error returned, and the key count follows
/// PM. Before, `merge` returned the error before the count changed.
///
/// Both of `merge`'s cases: the child left is a leaf (`retract`), or a
/// node (its header merged and published; ART+CoW publishes a copy and
/// releases two blocks).
#[test]
fn a_delete_whose_merge_cannot_release_the_node_is_counted() {
    let leaf_child: &[&[u8]] = &[&[0x20]];
    let node_child: &[&[u8]] = &[&[0x20, 1], &[0x20, 2]];
    for others in [leaf_child, node_child] {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            t.put(&[0x10], b"a", PutMode::Upsert).unwrap();
            for k in others {
                t.put(k, b"b", PutMode::Upsert).unwrap();
            }
            let n = pool.load_u64(t.root_slot()).unwrap();
            assert_ne!(nodes::kind(&pool, n).unwrap(), Kind::Leaf);
            let fake = fake_node(&mut t, n);
            pool.store_u64(t.root_slot(), fake).unwrap();
            assert!(t.search().lookup(&[0x10]).unwrap().is_some());
            let before = t.len();
            let e = t.delete(&[0x10]).unwrap_err().to_string();
            assert!(e.contains("no block"), "{flavor:?} {others:?}: {e}");
            assert!(t.search().lookup(&[0x10]).unwrap().is_none(), "{flavor:?}");
            for k in others {
                assert!(t.search().lookup(k).unwrap().is_some(), "{flavor:?} {k:?}");
            }
            assert_eq!(t.len(), before - 1, "{flavor:?} {others:?}");
        }
    }
}

/// An insert that grows (WOART) or copies (ART+CoW) a full NODE4
/// releases the old node after its commit; if that fails (the node is
/// a copy inside a value), the insert is durable and counted, and the
/// error returned. Before, `len` missed the key.
#[test]
fn an_insert_whose_old_node_cannot_be_released_is_counted() {
    for flavor in [Flavor::Woart, Flavor::ArtCow] {
        let pool =
            Arc::new(Pool::create_anonymous(16 << 20, "woart", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        for k in [0x10u8, 0x20, 0x30, 0x50] {
            t.put(&[k], b"a", PutMode::Upsert).unwrap();
        }
        let n = pool.load_u64(t.root_slot()).unwrap();
        assert_eq!(nodes::kind(&pool, n).unwrap(), Kind::N4, "{flavor:?}");
        let fake = fake_node(&mut t, n);
        pool.store_u64(t.root_slot(), fake).unwrap();
        let before = t.len();
        let e = t
            .put(&[0x60], b"z", PutMode::Upsert)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no block"), "{flavor:?}: {e}");
        assert!(t.search().lookup(&[0x60]).unwrap().is_some(), "{flavor:?}");
        assert_eq!(t.len(), before + 1, "{flavor:?}");
    }
}

/// A large leaf's chunk is unlinked from the chunk list when the leaf
/// is released, by the substrate's `free_and_store` on the slot before
/// it, which frees whatever that slot holds. In a damaged list whose
/// slot holds another chunk, that was a live chunk: freed, with a key's
/// leaf in it. Now the unlink refuses, and nothing is freed.
#[test]
fn a_chunk_that_its_list_slot_does_not_hold_is_not_unlinked() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    let (v1, v2) = (vec![1u8; 40 << 10], vec![2u8; 40 << 10]);
    t.put(&[1], &v1, PutMode::Upsert).unwrap();
    t.put(&[2], &v2, PutMode::Upsert).unwrap();
    // A large leaf is its chunk's one block, at `FIRST`.
    let chunk = |t: &RadixTree, k: u8| t.search().lookup(&[k]).unwrap().unwrap().0 - chunks::FIRST;
    let (a, b) = (chunk(&t, 1), chunk(&t, 2));
    // Damage: the slot that holds `b` skips it.
    let mut slot = t.sb + superblock::CHUNKS;
    while pool.load_u64(slot).unwrap() != b {
        slot = pool.load_u64(slot).unwrap() + chunks::NEXT;
    }
    pool.store_u64(slot, pool.load_u64(b + chunks::NEXT).unwrap())
        .unwrap();
    assert_eq!(pool.load_u64(slot).unwrap(), a, "b's next is a");
    let r = t.delete(&[2]);
    assert!(
        pool.block_size(a).is_ok(),
        "the live chunk is still allocated"
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("does not hold"), "{e}");
    assert!(
        t.search().lookup(&[2]).unwrap().is_none(),
        "the delete stands"
    );
    assert_eq!(t.len(), 1);
    let mut got = Vec::new();
    t.get_with(&[1], &mut |v| got = v.to_vec()).unwrap();
    assert_eq!(got, v1);
}

/// The same unlink with the chunk's own `next` rewritten (to null, so
/// that this damage alone cuts nothing the walk below needs): the
/// unlink compares `next` with the DRAM map's successor and refuses,
/// changing nothing in PM. Before, a null `next` passed the check and
/// the chunk was freed and the list rewritten on the damaged word.
#[test]
fn a_chunk_whose_next_was_rewritten_is_not_unlinked() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    t.put(&[1], &vec![1u8; 40 << 10], PutMode::Upsert).unwrap();
    t.put(&[2], &vec![2u8; 40 << 10], PutMode::Upsert).unwrap();
    let chunk = |t: &RadixTree, k: u8| t.search().lookup(&[k]).unwrap().unwrap().0 - chunks::FIRST;
    let (a, b) = (chunk(&t, 1), chunk(&t, 2));
    assert_eq!(pool.load_u64(b + chunks::NEXT).unwrap(), a);
    let mut slot = t.sb + superblock::CHUNKS;
    while pool.load_u64(slot).unwrap() != b {
        slot = pool.load_u64(slot).unwrap() + chunks::NEXT;
    }
    pool.store_u64(b + chunks::NEXT, 0).unwrap();
    let e = t.delete(&[2]).unwrap_err().to_string();
    assert!(e.contains("next is not"), "{e}");
    assert_eq!(pool.load_u64(slot).unwrap(), b, "the list is as it was");
    assert!(pool.block_size(b).is_ok(), "the chunk is not freed");
    assert!(
        t.search().lookup(&[2]).unwrap().is_none(),
        "the delete stands"
    );
}

#[test]
fn a_node_in_an_end_slot_is_an_error_not_an_endless_walk() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        // One node, branching where key [1] ends: [1] in its end slot.
        t.put(&[1], b"a", PutMode::Upsert).unwrap();
        t.put(&[1, 5], b"b", PutMode::Upsert).unwrap();
        let n = pool.load_u64(t.root_slot()).unwrap();
        assert_ne!(nodes::kind(&pool, n).unwrap(), Kind::Leaf);
        let end = nodes::block_of(n) + END;
        assert_ne!(pool.load_u64(end).unwrap(), 0);
        // Damage: the end slot points back at its node, a cycle that
        // a walk would follow for ever without the end-slot check.
        pool.store_u64(end, n).unwrap();
        let e = t.search().lookup(&[1]).unwrap_err().to_string();
        assert!(e.contains("end slot"), "{flavor:?}: {e}");
        // The batched search too, beside a key it still finds.
        let mut answers = Vec::new();
        t.search()
            .lookup_many(&[&[1], &[1, 5]], |i, r| answers.push((i, r)));
        answers.sort_by_key(|(i, _)| *i);
        assert!(answers[0]
            .1
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("end slot"));
        assert!(answers[1].1.as_ref().unwrap().0.is_some());
        assert!(t.search().lookup(&[1, 5]).unwrap().is_some());
        // Writes and scans too: before, a put or delete of [1] walked
        // the cycle for ever (holding the write lock), and a scan
        // recursed until the stack overflowed.
        for r in [
            t.put(&[1], b"z", PutMode::Upsert).map(|_| ()),
            t.put(&[1], b"z", PutMode::Update).map(|_| ()),
            t.delete(&[1]).map(|_| ()),
            t.scan(Bound::Unbounded, Bound::Unbounded, &mut |_, _| true),
        ] {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("end slot"), "{flavor:?}: {e}");
        }
    }
}

#[test]
fn check_finds_a_dram_map_that_differs_from_the_tree() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "woart", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Woart).unwrap();
    for i in 0..100u32 {
        t.put(&i.to_be_bytes(), b"v", PutMode::Upsert).unwrap();
    }
    t.check_impl().unwrap();
    // In use in DRAM, never published: a leak until reopen.
    let b = t.reserve(64).unwrap();
    let e = t.check_impl().unwrap_err().to_string();
    assert!(e.contains("leak"), "{e}");
    t.cancel(b).unwrap();
    t.check_impl().unwrap();
    // Reached, but released: it would be handed out twice. The releasing
    // thread keeps it ready (`caches`), where `check` finds it.
    let (leaf, _) = t.search().lookup(&5u32.to_be_bytes()).unwrap().unwrap();
    t.release(leaf).unwrap();
    let e = t.check_impl().unwrap_err().to_string();
    assert!(e.contains("a block in a thread's cache"), "{e}");
    // Given back to the heap: free in the map.
    t.caches.give_all_back(&t.heap, &t.pool).unwrap();
    let e = t.check_impl().unwrap_err().to_string();
    assert!(e.contains("free in the DRAM map"), "{e}");
}

/// Blocks a thread's cache holds ready (`caches`) are in use in the DRAM
/// map and not reached: `check` accepts them, and reports one that the
/// tree reaches too (it would be handed out while in use).
#[test]
fn check_counts_cached_blocks_and_refuses_one_the_tree_reaches() {
    let pool = Arc::new(Pool::create_anonymous(16 << 20, "woart", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Woart).unwrap();
    for i in 0..100u32 {
        t.put(&i.to_be_bytes(), b"v", PutMode::Upsert).unwrap();
    }
    let cached = t.caches.cached();
    assert!(!cached.is_empty(), "the writer keeps blocks ready");
    t.check_impl().unwrap();
    // A leaf's slot pointed at a cached block holding a copy of the leaf.
    let (leaf, _) = t.search().lookup(&5u32.to_be_bytes()).unwrap().unwrap();
    let copy = *cached
        .iter()
        .find(|&&o| t.block_size(o).unwrap() == 64)
        .expect("a leaf's size is cached");
    for w in 0..8 {
        let word = pool.load_u64(leaf + 8 * w).unwrap();
        pool.store_u64(copy + 8 * w, word).unwrap();
    }
    let (slot, word, _) = pointer_words(&t)
        .into_iter()
        .find(|&(_, w, _)| nodes::block_of(w) == leaf)
        .unwrap();
    pool.store_u64(slot, copy | (word & nodes::TAGS)).unwrap();
    let (found, _) = t.search().lookup(&5u32.to_be_bytes()).unwrap().unwrap();
    assert_eq!(found, copy, "the tree reaches the cached block");
    let e = t.check_impl().unwrap_err().to_string();
    assert!(e.contains("a block in a thread's cache"), "{e}");
}

/// Every pointer word of a tree (root, `end` slots, children), with
/// the kind of the block it names.
fn pointer_words(t: &RadixTree) -> Vec<(u64, u64, Kind)> {
    fn walk(t: &RadixTree, slot: u64, out: &mut Vec<(u64, u64, Kind)>) {
        let w = t.pool.load_u64(slot).unwrap();
        if w == 0 {
            return;
        }
        let kind = nodes::kind(&t.pool, w).unwrap();
        out.push((slot, w, kind));
        if kind != Kind::Leaf {
            walk(t, nodes::block_of(w) + END, out);
            for e in nodes::entries(&t.pool, w, kind).unwrap() {
                walk(t, e.slot, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(t, t.root_slot(), &mut out);
    out
}

/// Format 4 tags every pointer to a leaf, and no pointer to a node but
/// a WORT node's slot map (some nonzero), in every place a pointer is
/// stored or moved: an insert into an empty slot and into each ART
/// kind (in place and by copy), a leaf expansion, a split, growth, an
/// update, an `end` slot, a shrink, and a merge that moves a leaf or a
/// node up (a leaf to the root too). Formats 2 and 3 tag nothing.
/// Searches, `check` and a reopen agree with a model.
#[test]
fn leaf_pointers_are_tagged_in_format_4_only() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        for version in [2, 3, 4] {
            let pool = Arc::new(
                Pool::create_anonymous(32 << 20, flavor.name(), &Default::default()).unwrap(),
            );
            let mut t = RadixTree::create_format(Arc::clone(&pool), flavor, version).unwrap();
            let mut model = std::collections::BTreeMap::new();
            let maps = std::cell::Cell::new(0);
            let tags = |t: &RadixTree| {
                let words = pointer_words(t);
                assert!(!words.is_empty());
                for (slot, w, kind) in words {
                    let what = format!(
                        "{flavor:?} format {version}: slot {slot:#x} holds {w:#x} ({kind:?})"
                    );
                    match kind {
                        _ if version < 4 => assert_eq!(w & nodes::TAGS, 0, "{what}"),
                        Kind::Leaf => assert_eq!(w & nodes::TAGS, nodes::LEAF_TAG, "{what}"),
                        Kind::W16 => {
                            assert_eq!(w & nodes::LEAF_TAG, 0, "{what}");
                            maps.set(maps.get() + usize::from(w & nodes::w16::MAP != 0));
                        }
                        _ => assert_eq!(w & nodes::TAGS, 0, "{what}"),
                    }
                }
            };
            // One leaf at the root.
            t.put(b"root", b"r", PutMode::Upsert).unwrap();
            model.insert(b"root".to_vec(), b"r".to_vec());
            tags(&t);
            // Growth through every ART kind, a prefix key (`end`),
            // a split (a key leaving `pre/`'s path), updates.
            for i in 0..300u32 {
                let k = format!("pre/{:03}", i * 7 % 300).into_bytes();
                t.put(&k, &i.to_le_bytes(), PutMode::Upsert).unwrap();
                model.insert(k, i.to_le_bytes().to_vec());
            }
            for (k, v) in [
                (&b"pre"[..], &b"end"[..]),
                (b"pr", b"split"),
                (b"pre/007", b"upd"),
            ] {
                t.put(k, v, PutMode::Upsert).unwrap();
                model.insert(k.to_vec(), v.to_vec());
            }
            tags(&t);
            // Shrinks and merges, down to one leaf at the root.
            let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
            for (n, k) in keys.iter().enumerate() {
                if k.as_slice() == b"pre/123" {
                    continue;
                }
                assert!(t.delete(k).unwrap());
                model.remove(k);
                if n % 37 == 0 {
                    tags(&t);
                }
            }
            assert_eq!(model.len(), 1);
            tags(&t);
            let (slot, w, kind) = pointer_words(&t)[0];
            assert_eq!((slot, kind), (t.root_slot(), Kind::Leaf), "{flavor:?}");
            assert_eq!(w & nodes::LEAF_TAG, u64::from(version >= 4));
            let maps = maps.get();
            assert_eq!(
                maps > 0,
                flavor == Flavor::Wort && version >= 4,
                "{flavor:?} format {version}: {maps} WORT nodes with a map"
            );
            for k in ["pre/123", "pre/12", "x"] {
                let mut got = None;
                t.get_with(k.as_bytes(), &mut |v| got = Some(v.to_vec()))
                    .unwrap();
                assert_eq!(got.as_ref(), model.get(k.as_bytes()), "{flavor:?} {k}");
            }
            t.check().unwrap();
            drop(t);
            let t = RadixTree::open(Arc::clone(&pool), flavor).unwrap();
            assert_eq!(t.version, version);
            assert_eq!(t.len(), 1);
            tags(&t);
        }
    }
}

/// A pointer whose tags do not match its block is damage (no crash
/// leaves one: a pointer is stored whole): `check` and open refuse a
/// format 4 leaf pointer without its tag or with map bits, a node
/// pointer with the leaf tag, an ART node pointer with map bits, and
/// in format 3 a leaf pointer with its tag and a WORT node pointer with
/// a map.
#[test]
fn a_wrong_leaf_tag_is_damage() {
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        for (version, damage, bits) in [
            (4, "untag a leaf", nodes::LEAF_TAG),
            (4, "tag a node", nodes::LEAF_TAG),
            (4, "map bits on a leaf", 0x8),
            (4, "map bits on a node", 0x8),
            (3, "tag a leaf", nodes::LEAF_TAG),
            (3, "map bits on a node", 0x8),
        ] {
            if flavor == Flavor::Wort && version == 4 && damage == "map bits on a node" {
                // Any map is a WORT node's own (changing it misplaces
                // its children, which `check` finds by their keys).
                continue;
            }
            let pool = Arc::new(
                Pool::create_anonymous(16 << 20, flavor.name(), &Default::default()).unwrap(),
            );
            let mut t = RadixTree::create_format(Arc::clone(&pool), flavor, version).unwrap();
            for k in [&b"ab"[..], b"ac", b"b", b"bcd", b"bce"] {
                t.put(k, b"v", PutMode::Upsert).unwrap();
            }
            t.check().unwrap();
            let words = pointer_words(&t);
            let want_leaf = damage.ends_with("leaf");
            let &(slot, w, _) = words
                .iter()
                .rfind(|&&(_, _, k)| (k == Kind::Leaf) == want_leaf)
                .unwrap();
            pool.store_u64(slot, w ^ bits).unwrap();
            let e = t.check().unwrap_err().to_string();
            assert!(e.contains("leaf tag"), "{flavor:?} {damage}: {e}");
            drop(t);
            let e = RadixTree::open(Arc::clone(&pool), flavor)
                .err()
                .unwrap_or_else(|| panic!("{flavor:?} {damage}: opened"));
            assert!(
                matches!(e, Error::Corrupt { .. }),
                "{flavor:?} {damage}: {e}"
            );
            assert!(
                e.to_string().contains("leaf tag"),
                "{flavor:?} {damage}: {e}"
            );
        }
    }
}

/// [`Scope::Below`] (a writer holding its key's stripe only, see
/// `striped.rs`) changes what lies under the root node and the root node's
/// slot for the key's unit, and refuses, before any store, every change of
/// the root slot or of the root node's shared words: the whole-tree writer
/// then runs it. It fails if a refusal is dropped, or if the stripe's own
/// changes are refused.
#[test]
fn a_stripe_writer_changes_nothing_but_its_own_child_of_the_root() {
    let below = |t: &RadixTree, k: &[u8]| {
        let path = t.root_shape().map(|s| s.1).unwrap_or_default();
        t.put_impl(k, b"v", PutMode::Upsert, Scope::Below { root_path: &path })
    };
    let del = |t: &RadixTree, k: &[u8]| {
        let path = t.root_shape().map(|s| s.1).unwrap_or_default();
        t.delete_impl(k, Scope::Below { root_path: &path })
    };
    let tree_put = |t: &mut RadixTree, k: &[u8]| {
        assert_eq!(
            t.put(k, b"v", PutMode::Upsert).unwrap(),
            PutOutcome::Inserted
        );
    };
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        // The root slot's word and the root node's bytes (a refused put
        // may have written its leaf into a free block first: harmless).
        let image = |t: &RadixTree| {
            let root = t.pool.load_u64(t.root_slot()).unwrap();
            let mut b = root.to_le_bytes().to_vec();
            let p = nodes::block_of(root);
            if p != 0 && nodes::kind(&t.pool, p).unwrap() != Kind::Leaf {
                let n = t.block_size(p).unwrap();
                // SAFETY: no other thread uses the pool.
                b.extend_from_slice(unsafe { t.pool.bytes(p, n).unwrap() });
            }
            b
        };
        // An empty root, then a leaf at the root: refused, nothing stored.
        let before = image(&t);
        assert_eq!(below(&t, &[0x10, 1]).unwrap(), None, "{flavor:?}");
        assert!(image(&t) == before, "{flavor:?}: a refused put stored");
        tree_put(&mut t, &[0x10, 1]);
        assert_eq!(t.root_shape(), None);
        assert_eq!(below(&t, &[0x20, 1]).unwrap(), None, "{flavor:?}");
        // The root leaf's own update is the root slot's change too.
        assert_eq!(below(&t, &[0x10, 1]).unwrap(), None, "{flavor:?}");
        tree_put(&mut t, &[0x20, 1]);
        assert_eq!(t.root_shape(), Some((0, vec![])));
        // A new child of the root node: one store into its slot in a WORT
        // node; a NODE4's packed word otherwise.
        let before = image(&t);
        let new_child = below(&t, &[0x30, 1]).unwrap();
        if flavor == Flavor::Wort {
            assert_eq!(new_child, Some(PutOutcome::Inserted));
        } else {
            assert_eq!(new_child, None, "{flavor:?}");
            assert!(image(&t) == before, "{flavor:?}: a refused put stored");
            tree_put(&mut t, &[0x30, 1]);
        }
        // Under a child of the root: an expansion, an update, a merge.
        assert_eq!(below(&t, &[0x10, 2]).unwrap(), Some(PutOutcome::Inserted));
        assert_eq!(below(&t, &[0x10, 2]).unwrap(), Some(PutOutcome::Replaced));
        assert_eq!(del(&t, &[0x10, 2]).unwrap(), Some(true));
        assert_eq!(below(&t, &[0x20, 1]).unwrap(), Some(PutOutcome::Replaced));
        // A delete in the root node (which may shrink or merge it).
        let before = image(&t);
        assert_eq!(del(&t, &[0x10, 1]).unwrap(), None);
        assert!(image(&t) == before, "{flavor:?}: a refused delete stored");
        assert_eq!(del(&t, &[0x77, 1]).unwrap(), Some(false));
        // An ART root of 256 children takes a new one in its slot.
        if flavor != Flavor::Wort {
            for b in 0x40..0x90u8 {
                tree_put(&mut t, &[b, 1]);
            }
            assert_eq!(below(&t, &[0xF0, 1]).unwrap(), Some(PutOutcome::Inserted));
        }
        assert_eq!(t.len(), t.check().unwrap().keys);

        // A root path longer than the header holds (7 bytes; 5 fit, or
        // WORT's 10 nibbles): the walk takes it from `root_path`, and a key
        // that leaves it would split the root.
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        let p = [9u8; 7];
        tree_put(&mut t, &[&p[..], &[1]].concat());
        tree_put(&mut t, &[&p[..], &[2]].concat());
        let (branch, path) = t.root_shape().unwrap();
        assert!(branch >= t.span.len(&p), "{flavor:?}");
        assert_eq!(path, t.span.units(&[&p[..], &[1]].concat(), 0, branch));
        let before = image(&t);
        assert_eq!(below(&t, &[9, 9, 9, 8, 1]).unwrap(), None, "{flavor:?}");
        assert!(image(&t) == before, "{flavor:?}: a refused split stored");
        let on_path = [&p[..], &[1, 5]].concat();
        assert_eq!(below(&t, &on_path).unwrap(), Some(PutOutcome::Inserted));
        // The walk takes the path it is given (a path of another length
        // than the root's branch is refused), not one read from a leaf.
        let given = |root_path: &[u8]| {
            t.put_impl(&on_path, b"w", PutMode::Upsert, Scope::Below { root_path })
                .unwrap()
        };
        assert_eq!(given(&path[1..]), None, "{flavor:?}");
        assert_eq!(given(&path), Some(PutOutcome::Replaced), "{flavor:?}");
        assert_eq!(t.len(), t.check().unwrap().keys);
    }
}

/// Damage: a child slot below the root points back at the root node, a
/// cycle. Every walk sees the node branch above the depth it was reached
/// at and fails, through the tree and through the striped wrapper (its
/// lock-free reader, batched reader, one-stripe scan, stripe writers and
/// batched puts).
/// Before, a delete of a key under the cycle walked it for ever.
#[test]
fn a_child_pointing_back_at_an_ancestor_is_an_error_not_an_endless_walk() {
    use crate::engine::{Engine, Reads};
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        for k in [[1u8, 1, 1], [1, 1, 2], [1, 2, 1], [1, 2, 2], [2, 1, 1]] {
            t.put(&k, b"v", PutMode::Upsert).unwrap();
        }
        let root = pool.load_u64(t.root_slot()).unwrap();
        let rk = nodes::kind(&pool, root).unwrap();
        // The root's child on the way to [1, 1, 1] is a node (four keys
        // under it); its first child goes back to the root.
        let (n, nk) = nodes::entries(&pool, root, rk)
            .unwrap()
            .into_iter()
            .map(|e| (e.ptr, nodes::kind(&pool, e.ptr).unwrap()))
            .find(|(_, k)| *k != Kind::Leaf)
            .expect("a node below the root");
        let child = nodes::entries(&pool, n, nk).unwrap()[0];
        pool.store_u64(child.slot, root).unwrap();
        let cyclic = |r: Result<()>| {
            let e = r.expect_err("a walk through the cycle").to_string();
            assert!(e.contains("branches above its depth"), "{flavor:?}: {e}");
        };
        let key: &[u8] = &[1, 1, 1];
        let all = |t: &dyn Fn(&mut ScanFn<'_>) -> Result<()>| {
            let mut seen = 0;
            let r = t(&mut |_, _| {
                seen += 1;
                true
            });
            assert!(seen < 5, "{flavor:?}: a scan returned {seen} keys");
            r
        };
        cyclic(t.search().lookup(key).map(|_| ()));
        cyclic(all(&|f| t.scan(Bound::Unbounded, Bound::Unbounded, f)));
        cyclic(t.check_impl().map(|_| ()));
        cyclic(t.put(&[1, 1, 1, 7], b"z", PutMode::Upsert).map(|_| ()));
        cyclic(t.put_many(&[(&[1, 1, 1, 7], b"z")]));
        cyclic(t.delete(key).map(|_| ()));
        let db = striped::Striped::new(Arc::clone(&pool), t, Reads::Optimistic);
        cyclic(db.get_with(key, &mut |_| ()).map(|_| ()));
        cyclic(db.get_many(&[key], &mut |_, _| ()));
        cyclic(all(&|f| db.scan(Bound::Unbounded, Bound::Unbounded, f)));
        cyclic(db.put(&[1, 1, 1, 7], b"z", PutMode::Upsert).map(|_| ()));
        cyclic(db.put_many(&[(&[1, 1, 1, 7], b"z")]));
        cyclic(db.delete(key).map(|_| ()));
    }
}

/// A batch of puts in a full pool counts the items it applied: two
/// deletes free two leaves, and of five updates of other keys to values
/// of the same size, the first two fit (the replaced leaves go back only
/// at the batch's end) and the third fails. A compaction's retry goes on
/// from there (`RadixTree::put_many_compacting`).
#[test]
fn a_batch_in_a_full_pool_counts_what_it_applied() {
    let pool = Arc::new(Pool::create_anonymous(1 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    t.compact = false;
    let key = |i: u32| i.to_be_bytes().to_vec();
    let mut n = 0;
    while t.put(&key(n), &[1u8; 200], PutMode::Upsert).is_ok() {
        n += 1;
    }
    assert!(n > 1000, "{n}");
    assert!(t.delete(&key(0)).unwrap() && t.delete(&key(1)).unwrap());
    let keys: Vec<Vec<u8>> = (10..15).map(key).collect();
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &[2u8; 200][..])).collect();
    let mut applied = 0;
    let e = t.put_many_impl(&items, &mut applied).unwrap_err();
    assert!(matches!(e, Error::PoolFull { .. }), "{e}");
    assert_eq!(applied, 2);
    for (i, k) in keys.iter().enumerate() {
        let mut got = Vec::new();
        t.get_with(k, &mut |v| got = v.to_vec()).unwrap();
        assert_eq!(got[0], if i < 2 { 2 } else { 1 }, "item {i}");
    }
    t.check().unwrap();
}

/// A compaction that gives nothing back marks the tree futile, and the
/// next put that finds the pool full does not compact again
/// (`compact.rs`, "A futile compaction"); a released block, or a chunk
/// taken from the substrate, clears the mark.
#[test]
fn a_futile_compaction_is_not_run_again_until_a_block_is_released() {
    let pool = Arc::new(Pool::create_anonymous(1 << 20, "wort", &Default::default()).unwrap());
    let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
    let key = |i: u32| i.to_be_bytes().to_vec();
    // A chunk taken after the mark clears it.
    t.mark_futile();
    assert!(t.compaction_futile());
    t.put(&key(0), &[1u8; 200], PutMode::Upsert).unwrap();
    assert!(!t.compaction_futile(), "the first put took chunks");
    let mut n = 1;
    while t.put(&key(n), &[1u8; 200], PutMode::Upsert).is_ok() {
        n += 1;
    }
    // Every chunk full with blocks of one class: nothing to move.
    assert!(t.compaction_futile());
    let tried = t.compactions_tried;
    assert!(tried >= 1);
    for i in 0..50 {
        let e = t
            .put(&key(n + i), &[1u8; 200], PutMode::Upsert)
            .unwrap_err();
        assert!(matches!(e, Error::PoolFull { .. }), "{e}");
        assert!(t.compaction_futile());
    }
    assert_eq!(t.compactions_tried, tried, "no compaction while futile");
    // Nor in a batch.
    let e = t.put_many(&[(&key(n)[..], &[1u8; 200][..])]).unwrap_err();
    assert!(matches!(e, Error::PoolFull { .. }), "{e}");
    assert_eq!(t.compactions_tried, tried);
    // A delete releases a leaf: the mark goes, and the next refused put
    // (a leaf of a larger class) compacts, finds nothing, and marks again.
    assert!(t.delete(&key(0)).unwrap());
    assert!(!t.compaction_futile());
    let e = t.put(&key(n), &[1u8; 900], PutMode::Upsert).unwrap_err();
    assert!(matches!(e, Error::PoolFull { .. }), "{e}");
    assert!(t.compaction_futile());
    assert_eq!(t.compactions_tried, tried + 1);
    let e = t.put(&key(n), &[1u8; 900], PutMode::Upsert).unwrap_err();
    assert!(matches!(e, Error::PoolFull { .. }), "{e}");
    assert_eq!(t.compactions_tried, tried + 1);
    // The freed block still serves a key of its class.
    t.put(&key(n), &[2u8; 200], PutMode::Upsert).unwrap();
    t.check().unwrap();
}
