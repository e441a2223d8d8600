//! Value compaction in a full pool (docs/design.md §7, "A full pool:
//! values moved out of sparse chunks").
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
//! Leaves are not moved: a leaf is referenced from the ART and the point
//! index, and moving one would make two live leaves of a key, which
//! recovery resolves only as an upsert's early leaf. Values above 4 KiB
//! have blocks of their own and inline values no object.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use super::art::LeafKeys;
use super::leaf::{Commit, LEAF_SIZES};
use super::superblock::{self, STRIPES, VALUE_SIZES};
use super::trees::HashKey;
use super::{Hart, LeafRef};
use crate::error::{Error, Result};

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
    }
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
        // end.
        let mut drained: BTreeMap<u64, u64> = BTreeMap::new();
        let drains = Drains(self);
        for (st, vc) in value_lists() {
            drained.extend(
                self.values(st, vc)
                    .lock()
                    .begin_drain()
                    .into_iter()
                    .map(|(c, size)| (c, c + size)),
            );
        }
        if !drained.is_empty() {
            self.compactions.moving.store(true, Ordering::Relaxed);
            self.move_values_out(&drained)?;
        }
        drop(drains);
        // The lists left with one empty chunk give it back too (release
        // keeps it: `ChunkList::recycle_if_empty`).
        for (st, vc) in value_lists() {
            self.values(st, vc).lock().recycle_if_empty(&self.pool)?;
        }
        for st in 0..STRIPES {
            for lc in 0..LEAF_SIZES.len() {
                self.leaves(st, lc).lock().recycle_if_empty(&self.pool)?;
            }
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
        let leaves: u64 = (0..STRIPES)
            .flat_map(|st| (0..LEAF_SIZES.len()).map(move |lc| (st, lc)))
            .map(|(st, lc)| self.leaves(st, lc).lock().recycled())
            .sum();
        values + leaves
    }

    /// Updates every key whose current value is an object inside one of
    /// the `drained` chunks to that same value, one ART at a time under its
    /// write lock. A move refused for want of a free object leaves the key
    /// as it was (the update changed nothing) and the compaction goes on.
    fn move_values_out(&self, drained: &BTreeMap<u64, u64>) -> Result<()> {
        let inside = |p: u64| {
            drained
                .range(..=p)
                .next_back()
                .is_some_and(|(_, &end)| p < end)
        };
        let mut from = Bound::Unbounded;
        let mut page = Vec::with_capacity(KEYS_PER_PAGE);
        loop {
            page.clear();
            self.trees.keys_after(from, KEYS_PER_PAGE, &mut page);
            let Some(&last) = page.last() else {
                return Ok(());
            };
            for hk in &page {
                self.move_values_of(hk, &inside)?;
            }
            from = Bound::Excluded(last);
        }
    }

    /// [`Self::move_values_out`] for the ART of hash key `hk`.
    fn move_values_of(&self, hk: &HashKey, inside: &impl Fn(u64) -> bool) -> Result<()> {
        let Some(tree) = self.trees.find(hk) else {
            return Ok(());
        };
        let t = tree.write();
        if t.dead {
            return Ok(());
        }
        let keys = self.keys();
        let mut movers: Vec<(LeafRef, u64, usize)> = Vec::new();
        let mut failed = None;
        t.art
            .range_values(Bound::Unbounded, Bound::Unbounded, &keys, |l| {
                match self.object_of(l.off()) {
                    Ok(Some((p, len))) if inside(p) => movers.push((l, p, len)),
                    Ok(_) => {}
                    Err(e) => {
                        failed = Some(e);
                        return false;
                    }
                }
                true
            });
        if let Some(e) = failed {
            return Err(e);
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
        Ok(())
    }

    /// Whether object `p`, which holds a value of `len` bytes of stripe
    /// `st`, is in a chunk being drained (of its class's list or a larger
    /// one's, in format 6).
    fn draining_at(&self, st: usize, p: u64, len: usize) -> bool {
        superblock::value_classes(len, self.any_class)
            .any(|vc| self.values(st, vc).lock().draining_at(p))
    }

    /// The value object that live leaf `leaf`'s current value is in, and
    /// the value's length, if it is in one (not inline, not empty, not a
    /// block of its own).
    fn object_of(&self, leaf: u64) -> Result<Option<(u64, usize)>> {
        let c: Commit = self.live_commit(leaf)?;
        let v = self.slot(leaf, c.active)?;
        let len = v.meta.value_len;
        Ok((len > 0 && !v.meta.inline() && !v.meta.large).then_some((v.p, len)))
    }
}
