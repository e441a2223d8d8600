//! Batches of puts (`put_many`): the state a batch keeps, the blocks its
//! commits unlink (released after its last fence), and the commits it
//! holds back to share one fence (docs/design.md §11, "Batched puts" and
//! "Held-back commits"). The batch itself runs in `write.rs`
//! ([`RadixTree::put_many_impl`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::nodes::{self, Kind};
use super::RadixTree;
use crate::error::Result;

/// A batch of puts in progress (`put_many`, docs/design.md §11, "Batched
/// puts"). Only the writer, under the tree lock, touches it; the atomics
/// only make the tree `Sync`.
pub(super) struct Batch {
    /// A batch is running: a commit leaves its last fence to the batch's
    /// end, and a block a commit unlinks is released after that fence.
    pub(super) on: AtomicBool,
    /// Something other than a commit store was flushed since the last
    /// fence (a leaf, a node, a split's header): the next commit fences
    /// first. Set by every such flush, batch or not.
    pub(super) unfenced: AtomicBool,
    /// Blocks unlinked during the batch, released after its last fence:
    /// `deferred[..deferred_len]`. Plain loads and stores, no
    /// read-modify-write: a locked instruction would wait for the batch's
    /// write-backs as a fence does, and only the writer touches them.
    pub(super) deferred: [AtomicU64; DEFERRED],
    pub(super) deferred_len: AtomicUsize,
    /// Commits held back until one fence covers what they publish
    /// ([`RadixTree::hold`]): `held[..held_len]`, each as its
    /// [`nodes::Commit`]'s `at` (with `is_slot` in bit 0: offsets of words
    /// are even) and `word`.
    held: [[AtomicU64; 2]; HELD],
    held_len: AtomicUsize,
    /// Every held slot's offset / 8, and every held commit word's offset /
    /// 1024: [`RadixTree::settle`] scans `held` only where the filter
    /// has what a walk reaches (most walks reach none of them).
    held_slots: Filter,
    held_words: Filter,
}

/// A Bloom filter of one hash over 1,024 bits: 32 held commits leave 97%
/// of the bits clear.
struct Filter([AtomicU64; 16]);

impl Filter {
    const fn new() -> Filter {
        Filter([const { AtomicU64::new(0) }; 16])
    }

    /// The word and bit that stand for `x`.
    #[inline]
    fn at(x: u64) -> (usize, u64) {
        let h = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
        ((h >> 6) as usize, 1 << (h & 63))
    }

    fn insert(&self, x: u64) {
        let (w, bit) = Filter::at(x);
        let v = self.0[w].load(Ordering::Relaxed);
        self.0[w].store(v | bit, Ordering::Relaxed);
    }

    #[inline]
    fn may_hold(&self, x: u64) -> bool {
        let (w, bit) = Filter::at(x);
        self.0[w].load(Ordering::Relaxed) & bit != 0
    }

    fn clear(&self) {
        for w in &self.0 {
            w.store(0, Ordering::Relaxed);
        }
    }
}

/// A held commit word's unit in [`Batch::held_words`] (a node's commit
/// words lie in its first 1 KiB, NODE48's index included).
const WORD_UNIT: u32 = 10;

impl Default for Batch {
    fn default() -> Self {
        Batch {
            on: AtomicBool::new(false),
            unfenced: AtomicBool::new(false),
            deferred: [const { AtomicU64::new(0) }; DEFERRED],
            deferred_len: AtomicUsize::new(0),
            held: [const { [const { AtomicU64::new(0) }; 2] }; HELD],
            held_len: AtomicUsize::new(0),
            held_slots: Filter::new(),
            held_words: Filter::new(),
        }
    }
}

/// Blocks a batch of puts may hold back before it fences and releases
/// them (a put unlinks at most two: a replaced leaf and a grown or copied
/// node).
pub(super) const DEFERRED: usize = 4 * crate::engine::BATCH;

/// Commits a batch may hold back (one per put).
const HELD: usize = crate::engine::BATCH;

/// What a put of a batch is about to read ([`RadixTree::settle`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Reach {
    /// The pointer in a slot.
    Slot(u64),
    /// A node it passes through: the header and the commit word that
    /// lists its children (not the pointers of other children).
    Node(u64, Kind),
    /// Every word of a node (a copy, a growth).
    Copy(u64, Kind),
}

impl RadixTree {
    /// Releases the blocks a batch held back; the caller has fenced since
    /// the commits that unlinked them.
    pub(super) fn release_deferred(&self) -> Result<()> {
        let n = self.batch.deferred_len.load(Ordering::Relaxed);
        self.batch.deferred_len.store(0, Ordering::Relaxed);
        let mut heap = self.heap.write();
        let mut r = Ok(());
        for d in &self.batch.deferred[..n] {
            if let Err(e) = heap.release(&self.pool, d.load(Ordering::Relaxed)) {
                r = r.and(Err(e));
            }
        }
        r
    }

    /// Stores the commit `c` (a slot swap, or a WOART node's in-place
    /// insert). One put at a time: [`nodes::Commit::apply`] (fence, store,
    /// flush, fence). In a batch of puts: if what it publishes is durable
    /// already (nothing new flushed since the last fence, and no flush of
    /// its own pending), store and flush it now, the last fence being the
    /// batch's; else hold it back ([`Self::hold`]) rather than fence now.
    pub(super) fn commit(&self, c: nodes::Commit) -> Result<()> {
        if !self.batch.on.load(Ordering::Relaxed) {
            return c.apply(&self.pool);
        }
        if c.fence_first || self.batch.unfenced.load(Ordering::Relaxed) {
            return self.hold(c);
        }
        c.store(&self.pool)
    }

    /// Holds the batch's commit `c` back: it is stored, after one fence for
    /// all the commits held, when the batch ends, when a later put of the
    /// batch reaches the node or slot it changes ([`Self::settle`]), or when
    /// the blocks the batch unlinked must be released early. Until then the
    /// tree in PM and in the writer's view lacks it; no reader looks (they
    /// wait for the batch). A crash before it leaves the put undone, as
    /// before its fence one at a time; the entry a WOART add stored ahead is
    /// an orphan pointer, cleared at open.
    pub(super) fn hold(&self, c: nodes::Commit) -> Result<()> {
        let mut n = self.batch.held_len.load(Ordering::Relaxed);
        if n == HELD {
            // Full (only if a put ever commits twice): store them now,
            // then `c`, whose own flushes that fence covered.
            self.drain_held()?;
            return c.store(&self.pool);
        }
        let h = &self.batch.held[n];
        h[0].store(c.at | u64::from(c.is_slot), Ordering::Relaxed);
        h[1].store(c.word, Ordering::Relaxed);
        n += 1;
        self.batch.held_len.store(n, Ordering::Relaxed);
        if c.is_slot {
            self.batch.held_slots.insert(c.at >> 3);
        } else {
            self.batch.held_words.insert(c.at >> WORD_UNIT);
        }
        Ok(())
    }

    /// Stores the held commits. Persist order: **fence** (everything they
    /// publish, flushed before, is durable); each commit word stored and
    /// flushed (their fence is the batch's last, or the next one). They
    /// are independent (a put that reached what another changes stored it
    /// first: [`Self::settle`]), so their order among themselves does not
    /// matter.
    pub(super) fn drain_held(&self) -> Result<()> {
        let n = self.batch.held_len.load(Ordering::Relaxed);
        if n == 0 {
            return Ok(());
        }
        self.batch.held_len.store(0, Ordering::Relaxed);
        self.batch.held_slots.clear();
        self.batch.held_words.clear();
        if !self.pool.fault(crate::pm::Fault::RadixBatchHeldUnfenced) {
            self.pool.fence();
        }
        self.batch.unfenced.store(false, Ordering::Relaxed);
        let mut r = Ok(());
        for h in &self.batch.held[..n] {
            let at = h[0].load(Ordering::Relaxed) & !1;
            let word = h[1].load(Ordering::Relaxed);
            r = r.and(self.pool.store_u64(at, word));
            self.pool.flush(at, 8);
        }
        r
    }

    /// Before a put of a batch reads what it reaches: stores the held
    /// commits if one of them changes a word the put may read there, so
    /// that it sees the tree with them ([`Reach`]). A held commit is the
    /// root slot, a slot in a node, or a node's commit word. Inlined for
    /// its common answers (nothing held, or nothing held there).
    #[inline(always)]
    pub(super) fn settle(&self, reach: Reach) -> Result<()> {
        if self.batch.held_len.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        let maybe = match reach {
            Reach::Slot(s) => self.batch.held_slots.may_hold(s >> 3),
            // Only these kinds have commit words.
            Reach::Node(p, kind @ (Kind::N4 | Kind::N16 | Kind::N48)) => {
                // Commit words lie in the node's first 1 KiB.
                let last = p + kind.size().min(1 << WORD_UNIT) - 1;
                let words = &self.batch.held_words;
                words.may_hold(p >> WORD_UNIT) || words.may_hold(last >> WORD_UNIT)
            }
            Reach::Node(..) => false,
            Reach::Copy(..) => true,
        };
        if maybe {
            self.settle_held(reach)?;
        }
        Ok(())
    }

    /// [`Self::settle`] where the filters cannot rule a held commit out.
    #[inline(never)]
    fn settle_held(&self, reach: Reach) -> Result<()> {
        let (off, len, slots) = match reach {
            Reach::Slot(s) => (s, 8, true),
            Reach::Node(p, kind) => (p, kind.size(), false),
            Reach::Copy(p, kind) => (p, kind.size(), true),
        };
        let n = self.batch.held_len.load(Ordering::Relaxed);
        let hit = self.batch.held[..n].iter().any(|h| {
            let at = h[0].load(Ordering::Relaxed);
            (at & !1).wrapping_sub(off) < len && (slots || at & 1 == 0)
        });
        if hit {
            self.drain_held()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{Flavor, RadixTree};
    use crate::engine::{PutMode, SerialEngine};
    use crate::error::Error;
    use crate::pm::Pool;

    /// An empty tree of `flavor` in a new anonymous pool of `size` bytes.
    fn tree(flavor: Flavor, size: u64) -> (Arc<Pool>, RadixTree) {
        let pool = Arc::new(Pool::create_anonymous(size, "wort", &Default::default()).unwrap());
        let t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
        (pool, t)
    }

    /// The value of `key`, if the tree holds it.
    fn value(t: &RadixTree, key: &[u8]) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        t.get_with(key, &mut |b| v = b.to_vec())
            .unwrap()
            .then_some(v)
    }

    /// Fences of a batch's worth of puts one at a time and in one batch, on a tree that
    /// already has its chunks (so no substrate `activate` is counted).
    #[test]
    fn a_batch_of_updates_takes_two_fences_where_single_puts_take_two_each() {
        use crate::pm::counters::this_thread;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (_pool, mut t) = tree(flavor, 16 << 20);
            // Keys "k" + one byte: a NODE16 then NODE48 under "k" in the
            // ART flavors, 16-way nodes in WORT.
            let key = |i: u8| vec![b'k', i.wrapping_mul(37)];
            let n = crate::engine::BATCH as u8;
            for i in 0..2 * n + 8 {
                t.put(&key(i), b"v", PutMode::Upsert).unwrap();
            }
            let single = |t: &mut RadixTree, keys: std::ops::Range<u8>| {
                let f0 = this_thread().fences;
                for i in keys {
                    t.put(&key(i), b"w", PutMode::Upsert).unwrap();
                }
                this_thread().fences - f0
            };
            // Updates: each replaces a leaf in its slot.
            assert_eq!(single(&mut t, 0..n), 2 * u64::from(n), "{flavor:?}");
            let keys: Vec<Vec<u8>> = (n..2 * n).map(key).collect();
            let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"x"[..])).collect();
            let f0 = this_thread().fences;
            t.put_many_impl(&items, &mut 0).unwrap();
            let batched = this_thread().fences - f0;
            // The leaves' fence and the last one; NODE48's adds keep the
            // fence between pointer and index byte, but these are updates.
            assert_eq!(batched, 2, "{flavor:?}: a batch of updates");
            for k in &keys {
                assert_eq!(value(&t, k).as_deref(), Some(&b"x"[..]));
            }
            // The replaced leaves went back after the batch, none before:
            // `check` compares the DRAM map with the blocks the tree reaches.
            t.check().unwrap();
        }
    }

    /// A batch of inserts whose commits need a fence one at a time (WOART
    /// NODE16 adds with the pointer outside the bitmap's line, ART+CoW
    /// copies) holds them back and stores them after one fence: the
    /// leaves' fence, that one and the batch's last. (No item here reaches
    /// another's held commit: `a_later_put_of_a_batch_sees_the_commits_held_before_it`
    /// tests that.)
    #[test]
    fn a_batch_of_inserts_shares_one_fence_among_its_commits() {
        use crate::pm::counters::this_thread;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (_pool, mut t) = tree(flavor, 16 << 20);
            // 32 first bytes, 5 second bytes under each: a NODE16 under
            // each first byte in the ART flavors (entries 0..5 used).
            let n = crate::engine::BATCH as u8;
            let key = |j: u8, x: u8| vec![j.wrapping_mul(7), x];
            for j in 0..n {
                for x in 0..5 {
                    t.put(&key(j, x * 40), b"v", PutMode::Upsert).unwrap();
                }
            }
            // One more key under each: NODE16 entry 5, whose pointer is
            // in the node's second line (WOART); a copy (ART+CoW).
            let keys: Vec<Vec<u8>> = (0..n).map(|j| key(j, 250)).collect();
            let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"x"[..])).collect();
            let f0 = this_thread().fences;
            t.put_many_impl(&items, &mut 0).unwrap();
            let batched = this_thread().fences - f0;
            match flavor {
                // Empty WORT slots: the leaves' fence made what each
                // commit publishes durable, nothing is held.
                Flavor::Wort => assert_eq!(batched, 2, "{flavor:?}"),
                _ => assert_eq!(batched, 3, "{flavor:?}"),
            }
            // The same puts one at a time take 2 fences each.
            let f0 = this_thread().fences;
            for j in 0..n {
                t.put(&key(j, 251), b"y", PutMode::Upsert).unwrap();
            }
            assert_eq!(this_thread().fences - f0, 2 * u64::from(n), "{flavor:?}");
            for j in 0..n {
                for (x, want) in [(0, &b"v"[..]), (250, b"x"), (251, b"y")] {
                    assert_eq!(
                        value(&t, &key(j, x)).as_deref(),
                        Some(want),
                        "{flavor:?} {j} {x}"
                    );
                }
            }
            assert_eq!(t.len(), u64::from(n) * 7);
            t.check().unwrap();
        }
    }

    /// A batch's held commits are stored before a later put of the same
    /// batch reads what they change: the node's `end` slot before a copy
    /// of the node (a growth), a slot before an expansion of the leaf in
    /// it, a NODE4/16/48 commit word before another add to the node. Then
    /// random batches over a small key space (keys that are prefixes of
    /// others, nodes that grow and split), each checked against a model.
    #[test]
    fn a_later_put_of_a_batch_sees_the_commits_held_before_it() {
        use std::collections::BTreeMap;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (_pool, mut t) = tree(flavor, 32 << 20);
            let mut model = BTreeMap::new();
            let mut batch = |t: &mut RadixTree, items: &[(Vec<u8>, Vec<u8>)]| {
                let refs: Vec<(&[u8], &[u8])> =
                    items.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                t.put_many_impl(&refs, &mut 0).unwrap();
                for (k, v) in items {
                    model.insert(k.clone(), v.clone());
                }
                for (k, v) in &model {
                    assert_eq!(value(t, k).as_ref(), Some(v), "{flavor:?} {k:?}");
                }
                assert_eq!(t.len(), model.len() as u64, "{flavor:?}");
                t.check().unwrap();
            };
            let kv = |k: &str, v: u8| (k.as_bytes().to_vec(), vec![v; 8]);
            // A full NODE4 under "ab", and a leaf "zz0".
            batch(
                &mut t,
                &[kv("ab1", 1), kv("ab2", 1), kv("ab3", 1), kv("ab4", 1)],
            );
            batch(&mut t, &[kv("zz0", 1), kv("m", 1)]);
            // "zz1" expands the leaf "zz0" (a new node: what follows is
            // held); "ab" goes into the node's `end`; "ab5" grows the node,
            // whose copy must hold "ab"; "zz2" expands nothing but adds to
            // the node "zz1" made, "zz3" and "zz4" add to it again; "m5"
            // expands the leaf "m" that "m" (again) just replaced.
            batch(
                &mut t,
                &[
                    kv("zz1", 2),
                    kv("ab", 2),
                    kv("ab5", 2),
                    kv("zz2", 2),
                    kv("zz3", 2),
                    kv("zz4", 2),
                    kv("zz5", 2),
                    kv("m", 2),
                    kv("m5", 2),
                ],
            );
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ flavor as u64;
            for round in 0..200u8 {
                let items: Vec<(Vec<u8>, Vec<u8>)> = (0..1 + round % 40)
                    .map(|_| {
                        x = x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1);
                        let len = 1 + (x >> 60) as usize % 4;
                        let k: Vec<u8> = (0..len)
                            .map(|i| b'a' + (x >> (8 * i + 8)) as u8 % 5)
                            .collect();
                        (k, vec![round; 1 + (x >> 40) as usize % 12])
                    })
                    .collect();
                batch(&mut t, &items);
            }
        }
    }

    /// Batches that fill a small pool: a batch cut short by `PoolFull`
    /// (a leaf or a node that cannot be reserved, with commits of the
    /// items before it held back) has applied exactly a prefix of its
    /// items, and the tree passes `check`, before and after a reopen.
    /// (From a review of the held commits, 2026-11-25.)
    #[test]
    fn a_batch_cut_short_by_a_full_pool_applies_a_prefix_of_it() {
        use std::collections::BTreeMap;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            for size in [2u64 << 20, 3 << 20] {
                let (pool, mut t) = tree(flavor, size);
                let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
                let holds = |t: &RadixTree, m: &BTreeMap<Vec<u8>, Vec<u8>>| {
                    t.len() == m.len() as u64
                        && m.iter().all(|(k, v)| value(t, k).as_ref() == Some(v))
                };
                let mut x = 77u64 ^ flavor as u64;
                let mut full = 0;
                for round in 0..100_000u32 {
                    let items: Vec<(Vec<u8>, Vec<u8>)> = (0..32)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let len = 2 + (x % 5) as usize;
                            let last = (x >> 40) as u8 % 100;
                            let k = (0..len)
                                .map(|i| {
                                    (x >> (8 * i + 4)) as u8 % 7
                                        + if i == len - 1 { last } else { 0 }
                                })
                                .collect();
                            (k, vec![round as u8; 1 + (x >> 50) as usize % 60])
                        })
                        .collect();
                    let refs: Vec<(&[u8], &[u8])> =
                        items.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                    match t.put_many_impl(&refs, &mut 0) {
                        Ok(()) => model.extend(items),
                        Err(Error::PoolFull { .. }) => {
                            let applied = (0..=items.len()).rev().find_map(|n| {
                                let mut m = model.clone();
                                m.extend(items[..n].iter().cloned());
                                holds(&t, &m).then_some(m)
                            });
                            model = applied
                                .unwrap_or_else(|| panic!("{flavor:?} {round}: no prefix applied"));
                            t.check().unwrap();
                            full += 1;
                            if full > 20 {
                                break;
                            }
                        }
                        Err(e) => panic!("{flavor:?} {round}: {e}"),
                    }
                }
                assert!(full > 0, "{flavor:?}: the pool never filled");
                drop(t);
                let t = RadixTree::open(Arc::clone(&pool), flavor).unwrap();
                assert!(holds(&t, &model), "{flavor:?}: after a reopen");
                t.check().unwrap();
            }
        }
    }
}
