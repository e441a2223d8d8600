//! Value and leaf compaction in a full pool (docs/design.md §7, "A full
//! pool: values moved out of sparse chunks", "Leaves moved too").
//!
//! Deletes leave value chunks partly empty, and a chunk goes back to the
//! pool (EPRecycle, Algorithm 6) only once it is empty. So a full pool with
//! half its values deleted has no room for a chunk of another class: a
//! larger value than the deleted ones was refused, whatever room the
//! deletes made. When a put finds the pool full, [`Hart::compact_values`]
//! empties chunks of every value list (in offset order, as many as the
//! list's other chunks have room for the objects of): for each of their
//! objects that holds a key's current value, it updates the key to that
//! same value (Algorithm 3), with the new object taken from a chunk of the
//! list that is not being emptied. The update's release of the old object
//! recycles its chunk once the chunk is empty. Then the put runs again.
//!
//! # Persist order
//! None of its own: each move is an update ([`Hart::update_leaf`]: the
//! value written and flushed into a free object, the leaf's inactive slot
//! and commit word, one fence, then the old object released), made under
//! the ART's write lock as every update is, and each emptied chunk leaves
//! its list through EPRecycle's one failure-atomic allocator step. A crash
//! at any point leaves every key with its one value, in the old object or
//! the new, and recovery's rules for an update in flight hold unchanged.
//! What is new is only which free object an update takes (in DRAM: the
//! chunks being emptied are skipped,
//! [`ChunkList::begin_drain`](super::chunk::ChunkList::begin_drain)).
//!
//! # Leaves (2026-12-04)
//! Leaf chunks are drained too, as value chunks are: each leaf in one of
//! them is copied, with its value, into a free leaf of another chunk, and
//! the old one killed ([`Hart::move_leaves`], where the persist order is).
//! For the moment between the two fences a key has two live leaves with
//! one value; recovery keeps one of them, as it does for an upsert's early
//! leaf, so recovery needs no new rule. A leaf whose value has a block of
//! its own (above 4 KiB) is not moved: the copy would name the same block.
//! Inline values have no object.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use super::art::LeafKeys;
use super::leaf::LEAF_SIZES;
use super::superblock::{self, STRIPES, VALUE_SIZES};
use super::trees::HashKey;
use super::{points, Hart, LeafRef};
use crate::error::{Error, Result};
use crate::pm::Fault;

/// Compactions that gave a chunk back, and values moved, in this process.
static COMPACTIONS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// How many compactions of `hart` engines in this process gave back a
/// chunk, and how many values they moved (for tests and measurements).
pub fn compactions() -> (u64, u64) {
    (
        COMPACTIONS[0].load(Ordering::Relaxed),
        COMPACTIONS[1].load(Ordering::Relaxed),
    )
}

/// How many hash keys a compaction takes from the index at a time.
const KEYS_PER_PAGE: usize = 256;

/// How compactions of one engine are kept from running at once, and from
/// running again where the last one gave nothing back.
#[derive(Debug, Default)]
pub(super) struct Compactions {
    /// Held by the compaction that runs.
    run: parking_lot::Mutex<()>,
    /// Compactions begun: a put that failed while one ran (its drained
    /// chunks serve no allocation) tries again after it.
    pub(super) begun: AtomicU64,
    /// Set when a compaction gave no chunk back (or failed); cleared when
    /// something is freed ([`Hart::note_room`]): until then another
    /// compaction would find the same chunks.
    pub(super) futile: std::sync::atomic::AtomicBool,
    /// Whether a compaction is moving values, for the fault
    /// `hart-compact-skip-move-flush` only: it then leaves every value
    /// write of the engine unflushed, the moves' and any other thread's
    /// (the tests that switch it on run one writer).
    moving: std::sync::atomic::AtomicBool,
}

impl Compactions {
    /// Whether a compaction is moving values.
    pub(super) fn moving(&self) -> bool {
        self.moving.load(Ordering::Relaxed)
    }
}

/// Ends the drains of every value list when dropped, also if a move
/// panics: no chunk stays out of allocation.
struct Drains<'a>(&'a Hart);

impl Drop for Drains<'_> {
    fn drop(&mut self) {
        self.0.compactions.moving.store(false, Ordering::Relaxed);
        for (st, vc) in value_lists() {
            self.0.values(st, vc).lock().end_drain();
        }
        for (st, lc) in leaf_lists() {
            self.0.leaves(st, lc).lock().end_drain();
        }
    }
}

/// The chunks a compaction drains, pool-wide (chunks never overlap):
/// offset to end.
#[derive(Default)]
struct Drained {
    values: BTreeMap<u64, u64>,
    leaves: BTreeMap<u64, u64>,
}

impl Drained {
    fn inside(chunks: &BTreeMap<u64, u64>, p: u64) -> bool {
        chunks
            .range(..=p)
            .next_back()
            .is_some_and(|(_, &end)| p < end)
    }
}

/// Every leaf list: (stripe, class).
fn leaf_lists() -> impl Iterator<Item = (usize, usize)> {
    (0..STRIPES).flat_map(|st| (0..LEAF_SIZES.len()).map(move |lc| (st, lc)))
}

/// Every value list: (stripe, class).
fn value_lists() -> impl Iterator<Item = (usize, usize)> {
    (0..STRIPES).flat_map(|st| (0..VALUE_SIZES.len()).map(move |vc| (st, vc)))
}

/// Where this thread's put may take a value object of a larger class than
/// its value's (format 6, [`superblock`]'s "Value objects of a larger
/// class"). Each such object wastes the difference of the two sizes for
/// as long as the value stays, so a put that a compaction may make room
/// for first tries without them (docs/design.md §7, "A full pool: a
/// compaction before a larger class").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LargerClass {
    /// Everywhere but inside [`Hart::with_compaction`]'s first try.
    Allowed,
    /// That first try, as long as no larger class was passed over.
    Deferred,
    /// That first try, where a larger class was passed over.
    Passed,
}

thread_local! {
    static LARGER_CLASS: std::cell::Cell<LargerClass> =
        const { std::cell::Cell::new(LargerClass::Allowed) };
}

/// Defers larger classes on this thread while it lives; allows them again
/// when dropped, also if the put panics.
struct DeferLarger;

impl DeferLarger {
    fn new() -> Self {
        LARGER_CLASS.with(|c| c.set(LargerClass::Deferred));
        DeferLarger
    }

    /// Whether the put passed over a larger class.
    fn passed(&self) -> bool {
        LARGER_CLASS.with(|c| c.get()) == LargerClass::Passed
    }
}

impl Drop for DeferLarger {
    fn drop(&mut self) {
        LARGER_CLASS.with(|c| c.set(LargerClass::Allowed));
    }
}

impl Hart {
    /// Runs `put` and, if it finds the pool full, makes room
    /// ([`Self::compact_values`]) and runs it once more. `put` must change
    /// nothing when it fails with `PoolFull`, or (a `put_many`) run only
    /// what is left the second time.
    ///
    /// The first run takes no object of a larger class than its value's
    /// ([`Self::value_classes_now`]) while a compaction may run: if that
    /// is what it lacked, the compaction's room is taken instead, and the
    /// second run, whatever the compaction gave back, may take one.
    pub(super) fn with_compaction<T>(&self, mut put: impl FnMut() -> Result<T>) -> Result<T> {
        let begun = self.compactions.begun.load(Ordering::SeqCst);
        let (first, passed) = if self.compact {
            let defer = DeferLarger::new();
            let r = put();
            (r, defer.passed())
        } else {
            (put(), false)
        };
        match first {
            Err(Error::PoolFull { .. }) if self.compact_values(begun)? || passed => put(),
            r => r,
        }
    }

    /// The value lists a free object may be taken from now for a value of
    /// `len` bytes ([`superblock::value_classes`]): its own class only in
    /// [`Self::with_compaction`]'s first run while the last compaction did
    /// not give nothing back (noting that larger classes were passed over).
    pub(super) fn value_classes_now(&self, len: usize) -> std::ops::Range<usize> {
        let all = superblock::value_classes(len, self.any_class);
        if all.len() > 1
            && LARGER_CLASS.with(|c| c.get()) != LargerClass::Allowed
            && !self.compactions.futile.load(Ordering::Relaxed)
        {
            LARGER_CLASS.with(|c| c.set(LargerClass::Passed));
            return all.start..all.start + 1;
        }
        all
    }

    /// Notes that something was freed: a compaction may find room again.
    /// A load first, so that frees outside a full pool store nothing.
    pub(super) fn note_room(&self) {
        if self.compactions.futile.load(Ordering::Relaxed) {
            self.compactions.futile.store(false, Ordering::SeqCst);
        }
    }

    /// Moves value objects out of the chunks of every value list that
    /// [`ChunkList::begin_drain`](super::chunk::ChunkList::begin_drain) chooses
    /// (module doc), for a put that found the pool full when `begun`
    /// compactions had begun. Returns whether that put should run again:
    /// a chunk went back to the pool, or another compaction began since
    /// the put did (whose drained chunks the put could not take, and whose
    /// room it may now take). The caller holds no lock.
    pub(super) fn compact_values(&self, begun: u64) -> Result<bool> {
        if !self.compact {
            return Ok(false);
        }
        let Some(_run) = self.compactions.run.try_lock() else {
            // Another thread compacts: what it gives back is this put's
            // room too.
            drop(self.compactions.run.lock());
            return Ok(true);
        };
        if self.compactions.begun.load(Ordering::SeqCst) != begun {
            return Ok(true);
        }
        if self.compactions.futile.load(Ordering::SeqCst) {
            return Ok(false);
        }
        self.compactions.begun.fetch_add(1, Ordering::SeqCst);
        let r = self.compact_now();
        if !matches!(r, Ok(true)) {
            // Nothing given back, or a move met damage (another key's, which
            // every later compaction would meet again): refused puts stop
            // walking the ARTs until something is freed.
            self.compactions.futile.store(true, Ordering::SeqCst);
        }
        r
    }

    /// [`Self::compact_values`] once it holds the compaction's lock.
    fn compact_now(&self) -> Result<bool> {
        // The leaves the threads' shards gathered go to their lists first:
        // an emptied leaf chunk's room is room for a value chunk too.
        self.hand_over_frees();
        let recycled_before = self.recycled_chunks();
        // Every drained chunk, pool-wide (chunks never overlap): offset to
        // end; value chunks, then leaf chunks.
        let mut drained = Drained::default();
        let drains = Drains(self);
        for (st, vc) in value_lists() {
            let chunks = self.values(st, vc).lock().begin_drain();
            drained
                .values
                .extend(chunks.into_iter().map(|(c, n)| (c, c + n)));
        }
        for (st, lc) in leaf_lists() {
            let chunks = self.leaves(st, lc).lock().begin_drain();
            drained
                .leaves
                .extend(chunks.into_iter().map(|(c, n)| (c, c + n)));
        }
        if !drained.values.is_empty() || !drained.leaves.is_empty() {
            self.compactions.moving.store(true, Ordering::Relaxed);
            self.move_out(&drained)?;
        }
        drop(drains);
        // The lists left with one empty chunk give it back too (release
        // keeps it: `ChunkList::recycle_if_empty`).
        for (st, vc) in value_lists() {
            self.values(st, vc).lock().recycle_if_empty(&self.pool)?;
        }
        for (st, lc) in leaf_lists() {
            self.leaves(st, lc).lock().recycle_if_empty(&self.pool)?;
        }
        let gave_back = self.recycled_chunks() > recycled_before;
        if gave_back {
            COMPACTIONS[0].fetch_add(1, Ordering::Relaxed);
        }
        Ok(gave_back)
    }

    /// Chunks recycled so far by the value and leaf lists.
    fn recycled_chunks(&self) -> u64 {
        let values: u64 = value_lists()
            .map(|(st, vc)| self.values(st, vc).lock().recycled())
            .sum();
        let leaves: u64 = leaf_lists()
            .map(|(st, lc)| self.leaves(st, lc).lock().recycled())
            .sum();
        values + leaves
    }

    /// Moves, one ART at a time under its write lock, every leaf inside a
    /// drained leaf chunk ([`Self::move_leaves`]) and every other key's
    /// value that is an object inside a drained value chunk (an update to
    /// the same value). A move refused for want of a free leaf or object
    /// leaves the key as it was, and the compaction goes on.
    fn move_out(&self, drained: &Drained) -> Result<()> {
        let mut from = Bound::Unbounded;
        let mut page = Vec::with_capacity(KEYS_PER_PAGE);
        loop {
            page.clear();
            self.trees.keys_after(from, KEYS_PER_PAGE, &mut page);
            let Some(&last) = page.last() else {
                return Ok(());
            };
            for hk in &page {
                self.move_out_of(hk, drained)?;
            }
            from = Bound::Excluded(last);
        }
    }

    /// [`Self::move_out`] for the ART of hash key `hk`.
    fn move_out_of(&self, hk: &HashKey, drained: &Drained) -> Result<()> {
        let Some(tree) = self.trees.find(hk) else {
            return Ok(());
        };
        let mut t = tree.write();
        if t.dead {
            return Ok(());
        }
        let keys = self.keys();
        let mut leaf_movers: Vec<LeafRef> = Vec::new();
        let mut movers: Vec<(LeafRef, u64, usize)> = Vec::new();
        let mut failed = None;
        t.art
            .range_values(Bound::Unbounded, Bound::Unbounded, &keys, |l| {
                let v = match self
                    .live_commit(l.off())
                    .and_then(|c| self.slot(l.off(), c.active))
                {
                    Ok(v) => v,
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                };
                let len = v.meta.value_len;
                if Drained::inside(&drained.leaves, l.off()) {
                    // A leaf whose value has a block of its own stays: its
                    // copy would name the same block, and recovery refuses
                    // what two live leaves name.
                    if !v.meta.large {
                        leaf_movers.push(l);
                    }
                } else if len > 0
                    && !v.meta.inline()
                    && !v.meta.large
                    && Drained::inside(&drained.values, v.p)
                {
                    movers.push((l, v.p, len));
                }
                true
            });
        if let Some(e) = failed {
            return Err(e);
        }
        if leaf_movers.is_empty() && movers.is_empty() {
            return Ok(());
        }
        let _w = self.writing(hk.as_slice());
        let mut key = Vec::new();
        let mut value = Vec::new();
        for (l, p, len) in movers {
            // A drained chunk emptied and recycled, and a new chunk at its
            // offset since, of this list or another: its objects stay.
            if !self.draining_at(l.stripe(), p, len) {
                continue;
            }
            key.clear();
            key.extend_from_slice(hk.as_slice());
            key.extend_from_slice(keys.key(l));
            let c = self.live_commit(l.off())?;
            value.clear();
            value.extend_from_slice(self.current_value(l.off(), c)?.0);
            match self.update_leaf(l.stripe(), l.off(), &key, &value) {
                Ok(()) => {
                    COMPACTIONS[1].fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::PoolFull { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if !leaf_movers.is_empty() {
            self.move_leaves(hk, &mut t, &leaf_movers)?;
        }
        Ok(())
    }

    /// Moves the leaves `movers` of the ART of `hk` (write-locked: `t`)
    /// out of their drained chunks: each is copied, its value too, into a
    /// new leaf taken from a chunk that is not drained, and the old one
    /// killed.
    ///
    /// # Persist order
    /// 1. Each copy written and flushed as an insert writes its leaf
    ///    ([`Hart::new_leaf`]: the value into a new object, the slots, the
    ///    key, the commit word last); **fence**. A crash before it leaves
    ///    each copy torn or whole: a whole one is a second live leaf of its
    ///    key, with the same value, and recovery keeps one of the two (the
    ///    lower offset: the rule for an upsert's early leaf, which holds
    ///    here since both hold the key's value) and kills the other.
    /// 2. Each old leaf's commit word cleared and flushed; **fence**. A
    ///    crash before it leaves some old leaves live beside their copies,
    ///    as above.
    /// 3. In DRAM: the old leaf and its value object are given back (after
    ///    the second fence: neither is reused while a crash could still
    ///    bring the old leaf back). The ART entry and the point index entry
    ///    name the copy from before step 2 (the ART reads keys through its
    ///    leaves, and a killed one reads as keyless).
    ///
    /// Two fences for the ART's moves, however many. A copy that finds no
    /// free leaf or object (the pool full) ends the moves of this ART; the
    /// copies made are finished.
    fn move_leaves(
        &self,
        hk: &HashKey,
        t: &mut super::trees::Tree,
        movers: &[LeafRef],
    ) -> Result<()> {
        let keys = self.keys();
        let mut key = Vec::new();
        let mut value = Vec::new();
        let mut moved: Vec<(LeafRef, LeafRef, u64)> = Vec::with_capacity(movers.len());
        let mut failed = None;
        for &l in movers {
            // A drained chunk emptied and recycled, and a new chunk at its
            // offset since: its leaves stay.
            let key_len = hk.as_slice().len() + keys.key(l).len();
            let lc = super::leaf::class_for_key(key_len);
            if !self.leaves(l.stripe(), lc).lock().draining_at(l.off()) {
                continue;
            }
            key.clear();
            key.extend_from_slice(hk.as_slice());
            key.extend_from_slice(keys.key(l));
            let c = match self.live_commit(l.off()) {
                Ok(c) => c,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            value.clear();
            match self.current_value(l.off(), c) {
                Ok((v, _)) => value.extend_from_slice(v),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            match self.new_leaf(l.stripe(), &key, &value) {
                Ok(copy) => moved.push((l, copy, c.active)),
                Err(Error::PoolFull { .. }) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if moved.is_empty() {
            return failed.map_or(Ok(()), Err);
        }
        self.pool.fence();
        // The ART and the point index name the copies before the old
        // leaves are killed: the ART compares keys through its leaves, and
        // a killed leaf reads as keyless. No reader sees the change in
        // between (the write lock, and `writing` for those without it).
        let mut olds = Vec::with_capacity(moved.len());
        for &(old, copy, active) in &moved {
            let ak = keys.key(copy);
            let was = t.art.insert(ak, copy, &keys);
            debug_assert_eq!(was, Some(old));
            if t.points.is_built() {
                let replaced = t.points.replace(points::hash(ak), old, copy);
                debug_assert!(replaced, "a built point index holds the ART's leaves");
            }
            if old.stripe() != copy.stripe() {
                self.stripes[old.stripe()]
                    .len
                    .fetch_sub(1, Ordering::Relaxed);
                self.stripes[copy.stripe()]
                    .len
                    .fetch_add(1, Ordering::Relaxed);
            }
            olds.push((old, active, hk.as_slice().len() + ak.len()));
        }
        let skip_flush = self.pool.fault(Fault::HartCompactSkipLeafKillFlush);
        for &(old, _, _) in &moved {
            self.pool.store_u64(old.off(), 0)?;
            if !skip_flush {
                self.pool.flush(old.off(), 8);
            }
        }
        self.pool.fence();
        self.trees.note_root(hk.as_slice(), &t.art);
        COMPACTIONS[1].fetch_add(moved.len() as u64, Ordering::Relaxed);
        for (old, active, key_len) in olds {
            // The slots stay as they were: only the commit word was
            // cleared.
            let (st, off) = (old.stripe(), old.off());
            let v = self.slot(off, active)?;
            self.drop_value(st, v, super::leaf::slot_off(off, active))?;
            self.release_leaf(st, off, key_len)?;
        }
        failed.map_or(Ok(()), Err)
    }

    /// Whether object `p`, which holds a value of `len` bytes of stripe
    /// `st`, is in a chunk being drained (of its class's list or a larger
    /// one's, in format 6).
    fn draining_at(&self, st: usize, p: u64, len: usize) -> bool {
        superblock::value_classes(len, self.any_class)
            .any(|vc| self.values(st, vc).lock().draining_at(p))
    }
}
