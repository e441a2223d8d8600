//! Batched gets and puts of `hart` (beyond the paper; docs/design.md §7,
//! "Interleaved batched searches" and "Batched puts"): the ARTs of a batch
//! locked once each in address order, the keys' descents run side by side,
//! and a batch of puts made durable with one fence.

use std::sync::atomic::Ordering;

use parking_lot::{RwLock, RwLockWriteGuard};

use super::art::{Art, ProbeCursor};
use super::leaf;
use super::points::{self, Points};
use super::trees::{HashKey, Tree, TreeRef};
use super::{Hart, LeafRef, OldValue};
use crate::engine::locked::Writing;
use crate::engine::BATCH;
use crate::error::{Error, Result};
use crate::keycmp;
use crate::pm::{lines_spanned, Fault};

/// Locks the distinct ARTs of `tree` (`tree[i]`: key `i`'s, if any) with
/// `lock`, once each, in the order of their addresses, and returns the
/// guards and, for each key, the index of its ART's guard. Every thread
/// that holds several ART locks takes them this way (batched gets and
/// puts), and single operations hold one; so along any chain of waits the
/// addresses rise and it cannot close, even with the fair locks' queued
/// writers (docs/design.md §7, "Why the lock order cannot deadlock").
/// Locking one ART twice could deadlock (a writer queued between the two),
/// hence once each.
#[inline(always)]
fn lock_in_address_order<'t, G>(
    tree: &[Option<&'t RwLock<Tree>>],
    lock: impl Fn(&'t RwLock<Tree>) -> G,
) -> ([Option<G>; BATCH], [Option<usize>; BATCH]) {
    let addr = |t: &RwLock<Tree>| t as *const RwLock<Tree> as usize;
    let mut order = [(0usize, 0usize); BATCH];
    let mut m = 0;
    for (i, t) in tree.iter().enumerate() {
        if let Some(t) = t {
            order[m] = (addr(t), i);
            m += 1;
        }
    }
    order[..m].sort_unstable();
    let mut guards: [Option<G>; BATCH] = std::array::from_fn(|_| None);
    let mut guard_of = [None; BATCH];
    let mut g = 0;
    for (j, &(a, i)) in order[..m].iter().enumerate() {
        if j == 0 || order[j - 1].0 != a {
            guards[g] = tree[i].map(&lock);
            g += 1;
        }
        guard_of[i] = Some(g - 1);
    }
    (guards, guard_of)
}

/// The length of the longest prefix of `items`, at most `max` long, whose/// The length of the longest prefix of `items`, at most `max` long, whose
/// keys are distinct (at least 1 if `items` is not empty): a key given
/// twice starts a new batch, so that within a batch no item changes
/// another's presence, and the later value is the one that stays.
pub(super) fn distinct_prefix(items: &[(&[u8], &[u8])], max: usize) -> usize {
    let mut n = 0;
    while n < items.len().min(max) && !items[..n].iter().any(|(k, _)| *k == items[n].0) {
        n += 1;
    }
    n
}

impl Hart {
    /// One batch of [`crate::engine::Engine::get_many`] (either index of
    /// ARTs): `batch[i]` is key `base + i`. The ARTs of the batch are read-locked once each,
    /// for the whole batch, in the order of their addresses
    /// ([`lock_in_address_order`]); the searches run side by side
    /// ([`Self::probe_side_by_side`]), so the misses of up to [`BATCH`]
    /// keys overlap at every level instead of only where the CPU's window
    /// reaches; then the leaves are checked and answered in key order.
    pub(super) fn get_batch(
        &self,
        base: usize,
        batch: &[&[u8]],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        if self.point_index {
            return self.get_batch_indexed(base, batch, f);
        }
        let n = batch.len();
        debug_assert!(n <= BATCH);
        crate::hint::prefetch_keys(batch.iter().copied());
        // Each key's ART; the slot line (lock and root) starts loading. The
        // hashed index hands out counted references, held to the end.
        let refs: [Option<TreeRef<'_>>; BATCH] = std::array::from_fn(|i| {
            let (hk, ak) = self.split(batch.get(i)?);
            let t = self.trees.find_bytes(hk)?;
            crate::hint::prefetch(&*t);
            self.prefetch_root(hk, ak);
            Some(t)
        });
        let tree: [Option<&RwLock<Tree>>; BATCH] = std::array::from_fn(|i| refs[i].as_deref());
        // A hashed ART retired meanwhile is empty and stays so (a new one
        // takes its hash key): its keys are absent, as when it was retired.
        let (guards, guard_of) = lock_in_address_order(&tree[..n], RwLock::read);
        let mut leaf = [None; BATCH];
        self.probe_side_by_side(
            n,
            |i| {
                let t = guards[guard_of[i]?].as_ref()?;
                Some((&t.art, self.split(batch[i]).1))
            },
            &mut leaf,
        );
        for (i, key) in batch.iter().enumerate() {
            let hit = match leaf[i] {
                Some(l) => self.answer::<true>(l.off(), key, &mut |v| f(base + i, Some(v)))?,
                None => false,
            };
            if !hit {
                f(base + i, None);
            }
        }
        Ok(())
    }

    /// [`Self::get_batch`] through the point indexes: the first entry of
    /// each key's probe starts loading before the ARTs are locked, then
    /// each key's leaf (the first entry with its tag), and then the keys
    /// are answered in order, each from lines already on their way.
    fn get_batch_indexed(
        &self,
        base: usize,
        batch: &[&[u8]],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let n = batch.len();
        debug_assert!(n <= BATCH);
        crate::hint::prefetch_keys(batch.iter().copied());
        let mut h = [0u64; BATCH];
        let refs: [Option<TreeRef<'_>>; BATCH] = std::array::from_fn(|i| {
            let (hk, ak) = self.split(batch.get(i)?);
            h[i] = points::hash(ak);
            let (t, cell) = self.trees.find_bytes_with_cell(hk);
            let t = t?;
            crate::hint::prefetch(&*t);
            match cell.map(|c| c.table.load(Ordering::Relaxed)) {
                Some(0) | None => self.prefetch_root(hk, ak),
                Some(word) => points::prefetch_published(word, h[i]),
            }
            Some(t)
        });
        let tree: [Option<&RwLock<Tree>>; BATCH] = std::array::from_fn(|i| refs[i].as_deref());
        let (guards, guard_of) = lock_in_address_order(&tree[..n], RwLock::read);
        let tree_of = |i: usize| guard_of[i].and_then(|g| guards[g].as_deref());
        // Keys of ARTs with a built point index probe it; the others
        // descend their ARTs, side by side.
        let points_of = |i: usize| tree_of(i).map(|t| &t.points).filter(|p| p.is_built());
        self.prefetch_candidates(n, &h, points_of);
        let mut leaf = [None; BATCH];
        self.probe_side_by_side(
            n,
            |i| {
                let t = tree_of(i).filter(|t| !t.points.is_built())?;
                Some((&t.art, self.split(batch[i]).1))
            },
            &mut leaf,
        );
        for (i, key) in batch.iter().enumerate() {
            let mut answer =
                |l: LeafRef| self.answer::<true>(l.off(), key, &mut |v| f(base + i, Some(v)));
            let hit = match (points_of(i), leaf[i]) {
                (Some(p), _) => p
                    .find(h[i], |l| answer(l).map(|hit| hit.then_some(())))?
                    .is_some(),
                (None, Some(l)) => answer(l)?,
                (None, None) => false,
            };
            if !hit {
                f(base + i, None);
            }
        }
        Ok(())
    }

    /// Starts loading the leaf of the first entry with key `i`'s tag in
    /// its point index `points_of(i)` (hash `h[i]`), for the first `n` keys
    /// of a batch: the leaves' misses overlap, as the probes' did.
    #[inline(always)]
    fn prefetch_candidates<'p>(
        &self,
        n: usize,
        h: &[u64; BATCH],
        points_of: impl Fn(usize) -> Option<&'p Points>,
    ) {
        let pm = self.pool.words();
        for (i, &h) in h.iter().enumerate().take(n) {
            if let Some(p) = points_of(i) {
                let first = p.find(h, |l| Ok::<_, ()>(Some(l)));
                if let Ok(Some(l)) = first {
                    pm.prefetch(l.off());
                }
            }
        }
    }

    /// [`Art::probe`] of key `i` in its ART, `art_of(i)` (`None`: no ART,
    /// no entry), for `n` ≤ [`BATCH`] keys, run side by side, into
    /// `leaf[i]`: each round takes
    /// one node per key still descending ([`ProbeCursor::step`]), which
    /// starts loading what the key reads in its next node, so the misses
    /// of the keys overlap at every level; a descent that ends prefetches
    /// its PM leaf. The caller holds the ARTs' locks. Inlined into its two
    /// callers: as a call, batched searches were 6% slower.
    #[inline(always)]
    fn probe_side_by_side<'a>(
        &self,
        n: usize,
        art_of: impl Fn(usize) -> Option<(&'a Art<LeafRef>, &'a [u8])>,
        leaf: &mut [Option<LeafRef>; BATCH],
    ) {
        let pm = self.pool.words();
        let mut cursor: [Option<ProbeCursor<'a, LeafRef>>; BATCH] = Default::default();
        let mut running = 0;
        for i in 0..n {
            let Some((art, key)) = art_of(i) else {
                continue;
            };
            match art.probe_cursor(key) {
                Ok(c) => {
                    cursor[i] = Some(c);
                    running += 1;
                }
                Err(found) => leaf[i] = found,
            }
        }
        while running > 0 {
            for i in 0..n {
                let Some(c) = cursor[i].take() else {
                    continue;
                };
                match c.step() {
                    Ok(c) => cursor[i] = Some(c),
                    Err(found) => {
                        if let Some(l) = found {
                            pm.prefetch(l.off());
                        }
                        leaf[i] = found;
                        running -= 1;
                    }
                }
            }
        }
    }

    /// Whether the leaf a probe of `key` ended at holds `key` (the caller
    /// holds the read or write lock of the ART that holds the leaf).
    pub(super) fn holds_key(&self, leaf: u64, key: &[u8]) -> Result<bool> {
        let c = self.live_commit(leaf)?;
        // SAFETY: as in `answer`: an indexed leaf's key is not written while
        // it is reachable, and the caller holds its ART's lock.
        let k = unsafe { leaf::key(&self.pool, leaf, c)? };
        self.pool
            .touch_lines(lines_spanned(leaf, leaf::HEADER + c.key_len as u64));
        // `keycmp`: the batch prefetched the leaf's line, and `memcmp`
        // would wait for the next one (docs/design.md §7, "Ordered scans").
        Ok(keycmp::eq(k, key))
    }

    /// One batch of [`crate::engine::Engine::put_many`] (either index of
    /// ARTs), in the tight order: `batch` holds at most [`BATCH`] items with distinct keys.
    /// Beyond the paper (docs/design.md §7, "Batched puts"):
    ///
    /// 1. the batch's ARTs are write-locked once each, in the order of
    ///    their addresses (as [`Self::get_batch`] read-locks them: every
    ///    thread that holds several ART locks took them in rising address
    ///    order, so no chain of waits closes), and held to the end;
    /// 2. the keys' searches run side by side ([`ProbeCursor`]), which
    ///    tells which keys are present and leaves their paths in cache;
    /// 3. each item is written and flushed without a fence: an absent key
    ///    gets a new leaf (value, slots, key, commit word last:
    ///    [`Self::write_leaf`]), a present one its inactive slot and a
    ///    flipped commit word ([`Self::write_update`]);
    /// 4. **one fence** for the batch: every item is durable;
    /// 5. the new leaves are linked into their ARTs (after the fence, so no
    ///    reader sees a leaf a crash could lose) and the replaced values
    ///    are freed (after the fence, so none is reused while a crash could
    ///    still fall back to it).
    ///
    /// Each item alone is what a single put makes durable, in the same
    /// order up to the fence, so a crash before the fence leaves each key
    /// old or new, independently. The keys are distinct, so no item
    /// changes another's presence. If item `j` fails (a full pool), the
    /// items before it are still fenced and linked and its error returned;
    /// it and the items after it are not applied. `applied` is set to how
    /// many items, from the first, were applied (all of them on success).
    pub(super) fn put_batch(&self, batch: &[(&[u8], &[u8])], applied: &mut usize) -> Result<()> {
        let n = batch.len();
        debug_assert!(n <= BATCH);
        let mut stripe = [0usize; BATCH];
        crate::hint::prefetch_keys(batch.iter().map(|(k, _)| *k));
        // Each key's ART, made if it has none, locked once each in address
        // order. A hashed ART can be emptied and retired between the
        // lookup and the lock (`Tree::dead`); then the whole batch looks
        // its ARTs up again, as a single put does, before it has written
        // anything.
        let mut refs: [Option<TreeRef<'_>>; BATCH];
        let (mut guards, guard_of) = loop {
            refs = std::array::from_fn(|i| {
                let (hk, ak) = self.split(batch.get(i)?.0);
                let hk_key = HashKey::new(hk);
                let r = hk_key.route();
                stripe[i] = self.insert_stripe(r);
                let t = self.trees.for_insert(&hk_key, r);
                crate::hint::prefetch(&*t);
                self.prefetch_root(hk, ak);
                if self.point_index {
                    points::prefetch_published(self.trees.point_word(hk), points::hash(ak));
                }
                Some(t)
            });
            #[cfg(test)]
            if let Some(f) = tests::BEFORE_LOCKING.with(|hook| hook.borrow_mut().take()) {
                f();
            }
            let tree: [Option<&RwLock<Tree>>; BATCH] = std::array::from_fn(|i| refs[i].as_deref());
            let (guards, guard_of) = lock_in_address_order(&tree[..n], RwLock::write);
            if !guards.iter().flatten().any(|g| g.dead) {
                break (guards, guard_of);
            }
        };
        // For readers without the lock, each ART of the batch changes as
        // one: its `seq` is odd until the batch is done.
        let mut writing: [Option<Writing<'_>>; BATCH] = std::array::from_fn(|_| None);
        for (i, (key, _)) in batch.iter().enumerate() {
            if let Some(g) = guard_of[i].filter(|&g| writing[g].is_none()) {
                writing[g] = self.writing(self.split(key).0);
            }
        }
        let result = self.put_locked(batch, &mut stripe, &mut guards, &guard_of, applied);
        // On the hashed index, an ART made for this batch stays empty if
        // its items were not applied (a full pool): it leaves the index, as
        // an emptied one does.
        for (i, (key, _)) in batch.iter().enumerate() {
            if let Some(t) = guard_of[i].and_then(|g| guards[g].as_mut()) {
                if !t.dead && t.art.is_empty() {
                    let hk = HashKey::new(self.split(key).0);
                    self.trees.retire(&hk, hk.route(), t);
                }
            }
        }
        drop(writing);
        result
    }

    /// [`Self::put_batch`] once every item's ART is write-locked:
    /// `guards[guard_of[i]]` is item `i`'s. `stripe[i]` is where item `i`
    /// takes a new leaf if its key is absent; a present key's becomes its
    /// leaf's stripe, from which its new value object comes. `applied`: as
    /// for [`Self::put_batch`].
    fn put_locked(
        &self,
        batch: &[(&[u8], &[u8])],
        stripe: &mut [usize; BATCH],
        guards: &mut [Option<RwLockWriteGuard<'_, Tree>>; BATCH],
        guard_of: &[Option<usize>; BATCH],
        applied: &mut usize,
    ) -> Result<()> {
        let n = batch.len();
        let mut h = [0u64; BATCH];
        for (i, (key, _)) in batch.iter().enumerate() {
            h[i] = points::hash(self.split(key).1);
        }
        // The searches, side by side: `found[i]` is the leaf that holds
        // key `i`, if it is present (then its stripe is where the new value
        // object comes from): from the point indexes, or from the ARTs'
        // probes (the probe's leaf, if it holds the key).
        let mut found: [Option<u64>; BATCH] = [None; BATCH];
        // The ARTs' probes, also with the point index: they find a present
        // key as cheaply as the point index would, and leave the paths
        // that the new leaves' links take in cache.
        let mut found_ref = [None; BATCH];
        self.probe_side_by_side(
            n,
            |i| {
                let t = guards[guard_of[i]?].as_deref()?;
                Some((&t.art, self.split(batch[i].0).1))
            },
            &mut found_ref,
        );
        for (i, (key, _)) in batch.iter().enumerate() {
            if let Some(l) = found_ref[i] {
                if self.holds_key(l.off(), key)? {
                    found[i] = Some(l.off());
                    stripe[i] = l.stripe();
                }
            }
        }
        // Leaves for the absent keys and value objects for the values that
        // take one, all taken before any is written (each takes a list's
        // mutex, and a locked instruction waits for the write-backs before
        // it as a fence does, docs/design.md §11 "Batched puts"); their
        // lines are fetched for writing while the others are taken.
        let mut new_leaf: [Option<u64>; BATCH] = [None; BATCH];
        let mut obj: [Option<u64>; BATCH] = [None; BATCH];
        let mut failed: Option<(usize, Error)> = None;
        for (i, &(key, value)) in batch.iter().enumerate() {
            let taken = (|| {
                if found[i].is_none() {
                    // In a full pool, maybe from another stripe, which is
                    // then the item's (`Hart::take_leaf`).
                    let (s, l, o) = self.take_leaf(stripe[i], key.len(), value.len())?;
                    stripe[i] = s;
                    self.pool.prefetch_write(l);
                    new_leaf[i] = Some(l);
                    obj[i] = o;
                } else if Self::takes_object(value.len()) {
                    obj[i] = Some(self.alloc_value(stripe[i], value.len())?);
                }
                if let Some(o) = obj[i] {
                    self.pool.prefetch_write(o);
                }
                Ok(())
            })();
            if let Err(e) = taken {
                failed = Some((i, e));
                break;
            }
        }
        // Write and flush every item before the first failure.
        let mut old: [Option<OldValue>; BATCH] = [None; BATCH];
        let mut done = failed.as_ref().map_or(n, |f| f.0);
        let mut write_failed = None;
        for (i, &(key, value)) in batch.iter().enumerate().take(done) {
            let written = match (found[i], new_leaf[i]) {
                (Some(l), _) => self
                    .write_update(stripe[i], l, key, value, None, obj[i])
                    .map(|o| old[i] = Some(o)),
                (None, Some(l)) => self.write_leaf(stripe[i], l, key, value, obj[i]),
                (None, None) => unreachable!("a leaf was taken for every absent key before `done`"),
            };
            if let Err(e) = written {
                failed = Some((i, e));
                done = i;
                write_failed = Some(i);
                break;
            }
        }
        // Leaves and value objects taken for items that were not written go
        // back (the failing item's value object may hold its value, which
        // no commit word names: it stays taken until the next open, as for
        // a single put). A release that fails (damaged state) does not stop
        // the batch: the items before `done` are written and must still be
        // fenced and linked.
        let mut first_err = None;
        for (i, &(key, value)) in batch.iter().enumerate().skip(done) {
            if let Some(l) = new_leaf[i].take() {
                if let Err(e) = self.release_leaf(stripe[i], l, key.len()) {
                    first_err.get_or_insert(e);
                }
            }
            if let Some(o) = obj[i].take().filter(|_| write_failed != Some(i)) {
                let released = self.release_value(stripe[i], value.len(), o);
                if let Err(e) = released {
                    first_err.get_or_insert(e);
                }
            }
        }
        if done > 0 && !self.pool.fault(Fault::HartBatchSkipFence) {
            self.pool.fence();
        }
        let keys = self.keys();
        for (i, &(key, _)) in batch.iter().enumerate().take(done) {
            let t = guard_of[i]
                .and_then(|g| guards[g].as_mut())
                .expect("every item's ART is locked");
            if let Some(o) = old[i] {
                if let Err(e) = self.drop_value(stripe[i], o.value, o.slot) {
                    first_err.get_or_insert(e);
                }
                continue;
            }
            let Some(l) = new_leaf[i] else {
                continue;
            };
            let was_empty = t.art.is_empty();
            let (hk, ak) = self.split(key);
            let leaf = LeafRef::new(l, stripe[i]);
            let present = t.art.insert(ak, leaf, &keys).is_some();
            self.trees.note_root(hk, &t.art);
            if present {
                // The search found the key absent under this write lock.
                first_err.get_or_insert(leaf::corrupt(l, "batched put: key present twice"));
                continue;
            }
            if self.point_index {
                self.link_point(t, Some(h[i]), key, leaf);
            }
            if was_empty {
                self.trees.filled(&HashKey::new(hk));
            }
            self.stripes[stripe[i]].len.fetch_add(1, Ordering::Relaxed);
        }
        *applied = done;
        match (first_err, failed) {
            (Some(e), _) | (None, Some((_, e))) => Err(e),
            (None, None) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::*;
    use crate::engine::{Engine, PutMode};
    use crate::pm::{counters, Pool};

    thread_local! {
        /// Taken and run once by `put_batch` between looking its ARTs up
        /// and locking them: a race with another thread made to happen.
        pub(super) static BEFORE_LOCKING: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    /// With the hashed index, an ART that a batched put found can be
    /// emptied and retired by another thread before the batch locks it.
    /// The batch must not write into the retired ART (no longer in the
    /// index: its key would be lost); it looks its ARTs up again. Without
    /// the `dead` test after locking, the key is missing below and
    /// `check` fails.
    #[test]
    fn a_batched_put_whose_art_was_retired_meanwhile_looks_again() {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Arc::new(Hart::create(pool, 8).unwrap());
        h.put(b"abcdefgh-1", b"old", PutMode::Upsert).unwrap();
        h.put(b"zzzzzzzz-1", b"other", PutMode::Upsert).unwrap();
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h2, ran2) = (Arc::clone(&h), Arc::clone(&ran));
        BEFORE_LOCKING.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                // Another thread's delete of the ART's only key retires it.
                std::thread::spawn(move || assert!(h2.delete(b"abcdefgh-1").unwrap()))
                    .join()
                    .unwrap();
                ran2.store(true, Ordering::Relaxed);
            }));
        });
        let items: [(&[u8], &[u8]); 2] = [(b"abcdefgh-2", b"new"), (b"zzzzzzzz-2", b"also")];
        h.put_many(&items).unwrap();
        assert!(ran.load(Ordering::Relaxed), "the hook ran");
        let get = |k: &[u8]| {
            let mut got = None;
            h.get_with(k, &mut |v| got = Some(v.to_vec())).unwrap();
            got
        };
        assert_eq!(get(b"abcdefgh-2").as_deref(), Some(&b"new"[..]));
        assert_eq!(get(b"zzzzzzzz-2").as_deref(), Some(&b"also"[..]));
        assert_eq!(get(b"abcdefgh-1"), None);
        assert_eq!(h.len(), 3);
        h.check().unwrap();
    }

    #[test]
    fn a_batch_ends_before_a_repeated_key() {
        let v: &[u8] = b"v";
        let items: Vec<(&[u8], &[u8])> =
            [&b"a"[..], b"b", b"abcdefghij", b"abcdefghik", b"b", b"c"]
                .iter()
                .map(|k| (*k, v))
                .collect();
        assert_eq!(distinct_prefix(&items, BATCH), 4);
        assert_eq!(distinct_prefix(&items[4..], BATCH), 2);
        assert_eq!(distinct_prefix(&items, 3), 3);
        assert_eq!(distinct_prefix(&[], BATCH), 0);
        // Keys that differ only past their first eight bytes, or in length.
        let keys: Vec<Vec<u8>> = (0..BATCH as u8)
            .map(|i| [&[7u8; 8][..], &[i]].concat())
            .chain([vec![7u8; 8]])
            .collect();
        let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], v)).collect();
        assert_eq!(distinct_prefix(&items, BATCH), BATCH);
        assert_eq!(distinct_prefix(&items[1..], BATCH), BATCH);
    }

    #[test]
    fn a_batch_of_puts_takes_one_fence() {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(pool, 2).unwrap();
        // A first put opens the stripe's leaf and value chunks (with fences
        // of their own); every key has the hash key "kb", so one stripe.
        let n = BATCH as u8;
        let keys: Vec<Vec<u8>> = (0..n).map(|i| vec![b'k', b'b', i]).collect();
        h.put(b"kb-first", &[1; 40], PutMode::Upsert).unwrap();
        let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"12345678"[..])).collect();
        let c0 = counters::this_thread();
        h.put_many(&items).unwrap();
        let c1 = counters::this_thread();
        assert_eq!(c1.fences - c0.fences, 1, "a batch of inserts, one fence");
        // A batch of updates with value objects: one fence; the old
        // (inline) values need no freeing.
        let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &[3u8; 40][..])).collect();
        h.put_many(&items).unwrap();
        let c2 = counters::this_thread();
        assert_eq!(c2.fences - c1.fences, 1, "a batch of updates, one fence");
        let batch_flushes = c2.flushes - c1.flushes;
        // One upsert of a present key, so that the stripe's hint (the last
        // upsert inserted: write the leaf first) says update: otherwise the
        // first put below writes a leaf that it then kills.
        h.put(b"kb-first", &[2; 40], PutMode::Upsert).unwrap();
        let c2 = counters::this_thread();
        // The same items one put at a time: one fence each, and as many
        // lines flushed as the batch flushed.
        for (k, v) in &items {
            h.put(k, v, PutMode::Upsert).unwrap();
        }
        let c3 = counters::this_thread();
        assert_eq!(c3.fences - c2.fences, BATCH as u64);
        assert_eq!(c3.flushes - c2.flushes, batch_flushes);
        // One item past a batch: a second batch; a repeated key also starts
        // one. (Inline values: no value chunk fills up and takes fences of
        // its own.)
        let mut items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"w"[..])).collect();
        items.push((b"kb-one-more", b"v"));
        h.put_many(&items).unwrap();
        let c4 = counters::this_thread();
        assert_eq!(c4.fences - c3.fences, 2);
        h.put_many(&[(&b"kb-a"[..], &b"1"[..]), (b"kb-b", b"2"), (b"kb-a", b"3")])
            .unwrap();
        assert_eq!(counters::this_thread().fences - c4.fences, 2);
        let mut got = Vec::new();
        h.get_with(b"kb-a", &mut |v| got = v.to_vec()).unwrap();
        assert_eq!(got, b"3");
        assert_eq!(h.len(), BATCH as u64 + 1 + 1 + 2);
    }

    #[test]
    fn a_batch_that_fills_the_pool_applies_the_items_before_the_failing_one() {
        a_batch_fills_the_pool(2);
    }

    /// The hashed index: the ARTs made for the items after the failing one
    /// stay empty, and must not stay in the index (without the retire in
    /// `put_batch`, `check` fails: "the ART of hash key ... is empty").
    #[test]
    fn a_batch_that_fills_the_pool_leaves_no_empty_hashed_art() {
        a_batch_fills_the_pool(4);
    }

    fn a_batch_fills_the_pool(hash_key_len: usize) {
        let pool = Arc::new(Pool::create_anonymous(8 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(pool, hash_key_len).unwrap();
        // With `k_h` = 4, every key has an ART of its own.
        let keys: Vec<Vec<u8>> = (0..4000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let value = [5u8; 3000];
        let mut applied = 0;
        for batch in keys.chunks(16) {
            let items: Vec<(&[u8], &[u8])> = batch.iter().map(|k| (&k[..], &value[..])).collect();
            match h.put_many(&items) {
                Ok(()) => applied += batch.len(),
                Err(Error::PoolFull { .. }) => {
                    // Exactly a prefix of this batch is in.
                    let found: Vec<bool> = batch
                        .iter()
                        .map(|k| h.get_with(k, &mut |_| {}).unwrap())
                        .collect();
                    let n = found.iter().take_while(|&&f| f).count();
                    assert!(found[n..].iter().all(|&f| !f), "not a prefix: {found:?}");
                    assert!(n < batch.len());
                    applied += n;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(applied < keys.len(), "the pool never filled");
        assert_eq!(h.len(), applied as u64);
        let report = h.check().unwrap();
        assert_eq!(report.keys, applied as u64);
        // Space freed by deletes takes a whole batch again.
        for k in &keys[..32] {
            assert!(h.delete(k).unwrap());
        }
        let items: Vec<(&[u8], &[u8])> = keys[..16].iter().map(|k| (&k[..], &value[..])).collect();
        h.put_many(&items).unwrap();
    }
}
