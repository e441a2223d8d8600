//! Value compaction in a full pool (docs/design.md §7, "A full pool:
//! values moved out of sparse chunks").
//!
//! Deletes leave value chunks partly empty, and a chunk goes back to the
//! pool (EPRecycle, Algorithm 6) only once it is empty. So a full pool with
//! half its values deleted has no room for a chunk of another class: a
//! larger value than the deleted ones was refused, whatever room the
//! deletes made. When a put finds the pool full, [`Hart::compact_values`]
//! empties the sparsest chunks of every value list: for each of their
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
use super::leaf::Commit;
use super::superblock::{STRIPES, VALUE_SIZES};
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
    /// Set when a compaction gave no chunk back; cleared when a value
    /// object is released ([`Hart::release_value`]): until then another
    /// compaction would find the same chunks.
    pub(super) futile: std::sync::atomic::AtomicBool,
    /// Whether a compaction is moving values (for the fault
    /// `hart-compact-skip-move-flush` only, which acts on the moves' writes:
    /// the crash simulator runs one writer).
    moving: std::sync::atomic::AtomicBool,
}

impl Compactions {
    /// Whether a compaction is moving values.
    pub(super) fn moving(&self) -> bool {
        self.moving.load(Ordering::Relaxed)
    }
}

impl Hart {
    /// Runs `put` and, if it finds the pool full, makes room
    /// ([`Self::compact_values`]) and runs it once more. `put` must change
    /// nothing when it fails with `PoolFull` (a put), or leave what a
    /// second run completes (a `put_many`, whose items are upserts).
    pub(super) fn with_compaction<T>(&self, put: impl Fn() -> Result<T>) -> Result<T> {
        match put() {
            Err(Error::PoolFull { .. }) if self.compact_values()? => put(),
            r => r,
        }
    }

    /// Moves value objects out of the sparsest chunks of every value list
    /// (module doc). Returns whether room was made: a chunk went back to
    /// the pool, or another thread's compaction ran while this one waited
    /// for it. The caller holds no lock.
    pub(super) fn compact_values(&self) -> Result<bool> {
        if !self.compact || self.compactions.futile.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let Some(_run) = self.compactions.run.try_lock() else {
            // Another thread compacts: what it gives back is this put's
            // room too.
            drop(self.compactions.run.lock());
            return Ok(true);
        };
        // The frees the threads gathered go to their lists first: they may
        // empty chunks, and they are part of what the drained chunks hold.
        self.hand_over_frees();
        let lists =
            || (0..STRIPES).flat_map(move |st| (0..VALUE_SIZES.len()).map(move |vc| (st, vc)));
        let recycled_before = self.recycled_values(lists());
        // Every drained chunk, pool-wide (chunks never overlap): offset to
        // end.
        let mut drained: BTreeMap<u64, u64> = BTreeMap::new();
        for (st, vc) in lists() {
            drained.extend(
                self.values(st, vc)
                    .lock()
                    .begin_drain()
                    .into_iter()
                    .map(|(c, size)| (c, c + size)),
            );
        }
        let moved = if drained.is_empty() {
            Ok(())
        } else {
            self.compactions.moving.store(true, Ordering::Relaxed);
            let moved = self.move_values_out(&drained);
            self.compactions.moving.store(false, Ordering::Relaxed);
            moved
        };
        for (st, vc) in lists() {
            self.values(st, vc).lock().end_drain();
        }
        moved?;
        let gave_back = self.recycled_values(lists()) > recycled_before;
        if gave_back {
            COMPACTIONS[0].fetch_add(1, Ordering::Relaxed);
        } else {
            self.compactions.futile.store(true, Ordering::SeqCst);
        }
        Ok(gave_back)
    }

    /// Chunks recycled so far by the value lists `lists`.
    fn recycled_values(&self, lists: impl Iterator<Item = (usize, usize)>) -> u64 {
        lists
            .map(|(st, vc)| self.values(st, vc).lock().recycled())
            .sum()
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
        let mut movers: Vec<LeafRef> = Vec::new();
        let mut failed = None;
        t.art
            .range_values(Bound::Unbounded, Bound::Unbounded, &keys, |l| {
                match self.object_of(l.off()) {
                    Ok(Some(p)) if inside(p) => movers.push(l),
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
        for l in movers {
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

    /// The value object that live leaf `leaf`'s current value is in, if it
    /// is in one (not inline, not empty, not a block of its own).
    fn object_of(&self, leaf: u64) -> Result<Option<u64>> {
        let c: Commit = self.live_commit(leaf)?;
        let v = self.slot(leaf, c.active)?;
        Ok((v.meta.value_len > 0 && !v.meta.inline() && !v.meta.large).then_some(v.p))
    }
}
