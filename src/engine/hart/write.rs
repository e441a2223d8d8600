//! Writing leaves and values: Algorithm 1 (insert), Algorithm 3 (update)
//! and Algorithm 5 (delete) as far as PM is concerned, the value objects
//! and large blocks a slot points to, and the leaf-first upsert's early
//! leaf ("Leaf first", docs/design.md §7). Each function states its persist
//! order; the table of them all is docs/design.md §7, "Persist order
//! (`tight`) and why it is safe". The ART side of each operation (locks,
//! descent, linking) is in [`super`]'s `Engine` methods.

use std::sync::atomic::Ordering;

use super::leaf::{self, Commit, Meta, MAX_OBJECT};
use super::superblock::{self, value_class};
use super::{DeleteError, Hart, LeafRef, OldValue, PersistOrder, ValueRef};
use crate::error::{Error, Result};
use crate::pm::Fault;

impl Hart {
    /// Whether a value of `len` bytes takes a value object (neither inline
    /// nor a large block).
    pub(super) fn takes_object(len: usize) -> bool {
        len > leaf::INLINE_MAX && len <= MAX_OBJECT
    }

    /// Takes a free value object of stripe `st` for a value of `len` bytes
    /// (DRAM only): from its class's list, or, in format 6 when that list
    /// has no free object and the pool no new chunk, a free object of the
    /// next larger class that has one ([`superblock`], "Value objects of a
    /// larger class"; docs/design.md §7, "A full pool"), unless a
    /// compaction is to make room first ([`Self::value_classes_now`]).
    pub(super) fn alloc_value(&self, st: usize, len: usize) -> Result<u64> {
        let vc = value_class(len);
        let own = self.retry_when_full(|| self.values(st, vc).lock().alloc(&self.pool));
        if !matches!(own, Err(Error::PoolFull { .. })) {
            return own;
        }
        for c in self.value_classes_now(len).skip(1) {
            if let Some(obj) = self.values(st, c).lock().take_free(&self.pool)? {
                return Ok(obj);
            }
        }
        own
    }

    /// Gives back value object `p` of stripe `st`, which holds a value of
    /// `len` bytes: to its class's list, or to the larger class's list
    /// that holds it ([`Self::alloc_value`]).
    pub(super) fn release_value(&self, st: usize, len: usize, p: u64) -> Result<()> {
        self.note_room();
        let mut classes = superblock::value_classes(len, self.any_class);
        let own = classes.next().expect("a value's own class");
        if let Some(r) = self.values(st, own).lock().try_release(&self.pool, p) {
            return r;
        }
        for c in classes {
            if let Some(r) = self.values(st, c).lock().try_release(&self.pool, p) {
                return r;
            }
        }
        Err(Error::corrupt(
            p,
            "hart: released object is not in its chunk list",
        ))
    }

    /// Writes `value` into a fresh value object (`obj` if the caller took
    /// it already, see [`Self::takes_object`]; else one taken here), or
    /// reserves a large block and writes it there, and flushes it. Returns
    /// the word for the slot (the value itself if it is inline, 0 for a
    /// large value, which is activated later) and the reservation.
    pub(super) fn write_value(
        &self,
        st: usize,
        value: &[u8],
        obj: Option<u64>,
    ) -> Result<(u64, Option<crate::pm::Reservation>)> {
        if value.is_empty() {
            return Ok((0, None));
        }
        if value.len() <= leaf::INLINE_MAX {
            let mut w = [0u8; 8];
            w[..value.len()].copy_from_slice(value);
            return Ok((u64::from_le_bytes(w), None));
        }
        if value.len() > MAX_OBJECT {
            let r = self.retry_when_full(|| self.pool.reserve(value.len() as u64))?;
            // SAFETY: the block is reserved by us and not yet published.
            if let Err(e) = unsafe { self.pool.write_bytes(r.offset(), value) } {
                self.pool.cancel(r)?;
                return Err(e);
            }
            self.pool.flush(r.offset(), value.len() as u64);
            return Ok((0, Some(r)));
        }
        let obj = match obj {
            Some(o) => o,
            None => self.alloc_value(st, value.len())?,
        };
        // SAFETY: the object was free (nothing references it) and is now
        // taken by us in DRAM, so no other thread writes or reads it.
        unsafe { self.pool.write_bytes(obj, value)? };
        if !(self.pool.fault(Fault::HartCompactSkipMoveFlush) && self.compactions.moving()) {
            self.pool.flush(obj, value.len() as u64);
        }
        Ok((obj, None))
    }

    /// Frees a value that is no longer current (its replacement or removal
    /// is durable). `slot_off` is the slot that points to it.
    pub(super) fn drop_value(&self, st: usize, v: ValueRef, slot_off: u64) -> Result<()> {
        if v.meta.value_len == 0 || v.meta.inline() {
            return Ok(());
        }
        if v.meta.large {
            self.note_room();
            return self.pool.free(slot_off);
        }
        // At once, not through the thread's shard ([`frees`]): the pointer
        // was read from PM, and a damaged one is an error of this operation.
        self.release_value(st, v.meta.value_len, v.p)
    }

    /// Writes slot `s` of `leaf`, in this order within its cache line:
    /// `meta = 0`, `p_value`, `meta`. So at every crash point a slot that
    /// says `LARGE` with a non-null pointer points to a block activated into
    /// it (the bug the crash simulator found: storing `p_value` first let an
    /// old `LARGE` meet a new small-object pointer, and recovery "freed" it).
    /// For a large value `p_value` is null until the block is activated into
    /// the slot, after `meta` is flushed. Does not fence for small values.
    ///
    /// In the `paper` order it adds the paper's persists: the value
    /// (Algorithm 1 line 12 / Algorithm 3 line 5), `PNewV` in the update log
    /// if `log` is given (Algorithm 3 line 6), the value pointer (Algorithm 1
    /// line 13) and the value bit (Algorithm 1 line 14 / Algorithm 3 line 7).
    /// `obj`: the value object, if the caller took it already.
    #[allow(
        clippy::too_many_arguments,
        reason = "the slot's place, its contents, and two options"
    )]
    pub(super) fn fill_slot(
        &self,
        st: usize,
        leaf: u64,
        s: u64,
        key: &[u8],
        value: &[u8],
        log: Option<u64>,
        obj: Option<u64>,
    ) -> Result<()> {
        let paper = self.order == PersistOrder::Paper;
        let (p, res) = self.write_value(st, value, obj)?;
        if paper {
            self.pool.fence();
            if let Some(log) = log {
                self.pool.store_u64(log + 16, p)?;
                self.pool.persist(log + 16, 8);
            }
        }
        let so = leaf::slot_off(leaf, s);
        let meta = Meta {
            crc: self.checksum.of(key, value),
            value_len: value.len(),
            large: res.is_some(),
        };
        self.pool.store_u64(so + 8, 0)?;
        self.pool.store_u64(so, p)?;
        self.pool.store_u64(so + 8, meta.encode())?;
        if let Some(r) = res {
            self.pool.flush(so, 16);
            self.pool.activate(r, so)?;
        } else if paper {
            self.pool.persist(so, 16);
            self.persist_value_bit(st, p, value.len());
        }
        Ok(())
    }

    /// `paper` order: persist the chunk header that holds a value object's
    /// bit (the header word itself is kept current by the chunk list).
    pub(super) fn persist_value_bit(&self, st: usize, p: u64, len: usize) {
        if self.order != PersistOrder::Paper || len <= leaf::INLINE_MAX || len > MAX_OBJECT {
            return;
        }
        let chunk = superblock::value_classes(len, self.any_class)
            .find_map(|vc| self.values(st, vc).lock().locate(p));
        if let Some((c, _)) = chunk {
            self.pool.persist(c, 8);
        }
    }

    /// `paper` order: persist the chunk header that holds a leaf's bit.
    pub(super) fn persist_leaf_bit(&self, st: usize, leaf: u64, key_len: usize) {
        if self.order != PersistOrder::Paper {
            return;
        }
        if let Some((c, _)) = self
            .leaves(st, leaf::class_for_key(key_len))
            .lock()
            .locate(leaf)
        {
            self.pool.persist(c, 8);
        }
    }

    /// The update-log line used for `leaf` in the `paper` order.
    pub(super) fn log_line(&self, leaf: u64) -> u64 {
        self.sb + superblock::UPDATE_LOGS + 64 * ((leaf / 64) % superblock::UPDATE_LOG_LANES)
    }

    /// Algorithm 1, lines 10-16 and 18, in the tight order: one fence.
    pub(super) fn insert_leaf(&self, st: usize, key: &[u8], value: &[u8]) -> Result<LeafRef> {
        let leaf = self.new_leaf(st, key, value)?;
        self.pool.fence();
        // Algorithm 1 line 18 (paper order): persist the leaf bit.
        self.persist_leaf_bit(leaf.stripe(), leaf.off(), key.len());
        Ok(leaf)
    }

    /// Algorithm 1, lines 10-16: takes a free leaf, of stripe `st` or, in a
    /// full pool, of another ([`Self::take_leaf`]), and writes and flushes
    /// it ([`Self::write_leaf`]); the caller fences. The leaf's stripe is
    /// in the returned reference.
    pub(super) fn new_leaf(&self, st: usize, key: &[u8], value: &[u8]) -> Result<LeafRef> {
        let (st, leaf, obj) = self.take_leaf(st, key.len(), value.len())?;
        if let Err(e) = self.write_leaf(st, leaf, key, value, obj) {
            // The value object, if one was taken, may hold the value, which
            // no commit word names: it stays taken until the next open, as
            // when `write_leaf` takes it itself.
            self.release_leaf(st, leaf, key.len())?;
            return Err(e);
        }
        Ok(LeafRef::new(leaf, st))
    }

    /// Takes (in DRAM) a free leaf for a key of `key_len` bytes and, if a
    /// value of `value_len` bytes takes one ([`Self::takes_object`]), a
    /// value object, both from stripe `st`. Returns the stripe they came
    /// from, the leaf and the object.
    ///
    /// **A full pool** (docs/design.md §7, "A full pool: leaves from
    /// another stripe"): when `st` has no free leaf or object of the
    /// classes needed and the pool gives no new chunk, both come from the
    /// first other stripe, in turn from `st`, that has them free in its
    /// chunks (no chunk is added there), where the format lets a leaf live
    /// in any stripe (format 5 and later), whatever `hart.stripes` says.
    /// Deletes free into the stripe that holds the leaf, whatever thread
    /// deletes, so without this a thread whose stripe is full could not
    /// reuse the room that other threads' deletes made. A leaf and its
    /// value objects still share one stripe, as recovery requires; nothing
    /// in PM changes.
    pub(super) fn take_leaf(
        &self,
        st: usize,
        key_len: usize,
        value_len: usize,
    ) -> Result<(usize, u64, Option<u64>)> {
        let first = self.take_leaf_in(st, key_len, value_len);
        if !matches!(first, Err(Error::PoolFull { .. })) || !self.any_stripe {
            return first.map(|(leaf, obj)| (st, leaf, obj));
        }
        // The frees the threads gathered were handed over by the failed
        // attempt's `retry_when_full`.
        for s in (1..superblock::STRIPES).map(|d| (st + d) % superblock::STRIPES) {
            if let Some((leaf, obj)) = self.take_free_leaf_in(s, key_len, value_len)? {
                return Ok((s, leaf, obj));
            }
        }
        first.map(|(leaf, obj)| (st, leaf, obj))
    }

    /// [`Self::take_leaf`]'s fallback in stripe `st`: a free leaf and, if
    /// the value takes one, a free object of a class that may hold it,
    /// both from the stripe's chunks as they are (none added); `None` if
    /// either is missing (a leaf taken goes back).
    fn take_free_leaf_in(
        &self,
        st: usize,
        key_len: usize,
        value_len: usize,
    ) -> Result<Option<(u64, Option<u64>)>> {
        let lc = leaf::class_for_key(key_len);
        let Some(leaf) = self.leaves(st, lc).lock().take_free(&self.pool)? else {
            return Ok(None);
        };
        if !Self::takes_object(value_len) {
            return Ok(Some((leaf, None)));
        }
        for c in self.value_classes_now(value_len) {
            if let Some(obj) = self.values(st, c).lock().take_free(&self.pool)? {
                return Ok(Some((leaf, Some(obj))));
            }
        }
        self.release_leaf(st, leaf, key_len)?;
        Ok(None)
    }

    /// [`Self::take_leaf`] in stripe `st` only: the leaf, then the object;
    /// the leaf goes back if no object can be taken.
    fn take_leaf_in(
        &self,
        st: usize,
        key_len: usize,
        value_len: usize,
    ) -> Result<(u64, Option<u64>)> {
        let leaf = self.alloc_leaf(st, key_len)?;
        if !Self::takes_object(value_len) {
            return Ok((leaf, None));
        }
        match self.alloc_value(st, value_len) {
            Ok(obj) => Ok((leaf, Some(obj))),
            Err(e) => {
                self.release_leaf(st, leaf, key_len)?;
                Err(e)
            }
        }
    }

    /// Whether an upsert writes its leaf before the descent ("Leaf first",
    /// docs/design.md §7): with `hart.leaf_first = on` (the default), in
    /// the tight order, for a value that takes no large block, when the
    /// last upsert of stripe `st` inserted.
    pub(super) fn leaf_first(&self, st: usize, value: &[u8]) -> bool {
        self.leaf_first
            && self.order == PersistOrder::Tight
            && value.len() <= MAX_OBJECT
            && self.stripes[st].upserts_insert.load(Ordering::Relaxed)
    }

    /// Notes whether an upsert of stripe `st` inserted (the hint that
    /// [`Self::leaf_first`] reads), storing only a change.
    pub(super) fn note_upsert(&self, st: usize, inserted: bool) {
        let hint = &self.stripes[st].upserts_insert;
        if hint.load(Ordering::Relaxed) != inserted {
            hint.store(inserted, Ordering::Relaxed);
        }
    }

    /// An upsert whose leaf `early` was written before the descent found
    /// the key in `leaf`: updates `leaf` in place (Algorithm 3) and kills
    /// `early`, both under one fence.
    ///
    /// Persist order: `early.commit = 0` → flush; `leaf`'s inactive slot and
    /// commit word → flush (as [`Self::write_update`]); fence; then, in
    /// DRAM, `early` and its value object and `leaf`'s old value are given
    /// back. A crash before the fence may leave `early` live beside `leaf`
    /// (old or new value): two live leaves of one key, both from this
    /// upsert or before it, of which recovery keeps either
    /// ([`super::recovery`], "a key held by two live leaves").
    pub(super) fn update_instead(
        &self,
        st: usize,
        early: u64,
        leaf: LeafRef,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        // The fault: `early` is left live in PM (and taken in DRAM, so
        // nothing overwrites it), unreachable from the ART.
        let leave_live = self.pool.fault(Fault::HartEarlyLeafLeftLive);
        let killed = if leave_live {
            Ok(())
        } else {
            self.pool
                .store_u64(early, 0)
                .map(|()| self.pool.flush(early, 8))
        };
        let give_back = killed.is_ok() && !leave_live;
        let updated = killed
            .and_then(|()| self.write_update(leaf.stripe(), leaf.off(), key, value, None, None));
        self.pool.fence();
        let back = if give_back {
            self.give_back_early(st, early, key.len())
        } else {
            Ok(())
        };
        let old = match updated {
            // The early leaf held the object the update needed (a nearly
            // full pool): now that it is back, the update runs as it would
            // have without it.
            Err(Error::PoolFull { .. }) if give_back && back.is_ok() => {
                return self.update_leaf(leaf.stripe(), leaf.off(), key, value);
            }
            r => r?,
        };
        // The update is durable: its old value is freed even if giving the
        // early leaf back failed, whose error then follows.
        let dropped = self.drop_value(leaf.stripe(), old.value, old.slot);
        back.and(dropped)
    }

    /// Kills an early leaf that was never linked (`commit = 0` → flush;
    /// fence) and gives it back: an upsert that failed after writing it.
    pub(super) fn abandon_early(&self, st: usize, early: u64, key_len: usize) -> Result<()> {
        self.pool.store_u64(early, 0)?;
        self.pool.persist(early, 8);
        self.give_back_early(st, early, key_len)
    }

    /// Gives back, in DRAM, an early leaf whose cleared commit word is
    /// durable, and its value object.
    pub(super) fn give_back_early(&self, st: usize, early: u64, key_len: usize) -> Result<()> {
        let v = self.slot(early, 0)?;
        self.drop_value(st, v, leaf::slot_off(early, 0))?;
        self.release_leaf(st, early, key_len)
    }

    /// Takes a free leaf for a key of `key_len` bytes from stripe `st`
    /// (DRAM only) and notes the one after it for the next insert's
    /// prefetch.
    pub(super) fn alloc_leaf(&self, st: usize, key_len: usize) -> Result<u64> {
        let lc = leaf::class_for_key(key_len);
        self.retry_when_full(|| {
            let mut list = self.leaves(st, lc).lock();
            let leaf = list.alloc(&self.pool)?;
            let next = list.next_free().unwrap_or(0);
            self.stripes[st].next_leaf[lc].store(next, Ordering::Relaxed);
            Ok(leaf)
        })
    }

    /// Gives back a leaf whose commit word was never stored (its value
    /// object, if any, was written but is unreferenced and free at
    /// recovery; in DRAM it stays taken until reopen).
    pub(super) fn release_leaf(&self, st: usize, leaf: u64, key_len: usize) -> Result<()> {
        self.leaves(st, leaf::class_for_key(key_len))
            .lock()
            .release(&self.pool, leaf)
    }

    /// Algorithm 1, lines 10-16, without the fence: writes the value and the
    /// free leaf `leaf` (slot 0, slot 1 zeroed, key, the commit word last)
    /// and flushes them. The leaf is committed once the caller's fence is
    /// done; it must not be reachable before.
    pub(super) fn write_leaf(
        &self,
        st: usize,
        leaf: u64,
        key: &[u8],
        value: &[u8],
        obj: Option<u64>,
    ) -> Result<()> {
        self.fill_slot(st, leaf, 0, key, value, None, obj)?;
        self.pool.store_u64(leaf::slot_off(leaf, 1), 0)?;
        self.pool.store_u64(leaf::slot_off(leaf, 1) + 8, 0)?;
        // SAFETY: the leaf was free and is taken by us in DRAM.
        unsafe { self.pool.write_bytes(leaf + leaf::HEADER, key)? };
        if self.order == PersistOrder::Paper {
            // Algorithm 1 line 15: leaf.key = K; persistent(leaf.key).
            self.pool.persist(leaf + leaf::HEADER, key.len() as u64);
        }
        let c = Commit {
            key_len: key.len(),
            active: 0,
        };
        self.pool.store_u64(leaf, c.encode())?;
        if self.pool.fault(Fault::HartSkipLeafFlush) {
            self.pool.flush(
                leaf + 64,
                (leaf::HEADER + key.len() as u64).saturating_sub(64),
            );
        } else {
            self.pool.flush(leaf, leaf::HEADER + key.len() as u64);
        }
        Ok(())
    }

    /// Algorithm 3 in the tight order: one fence, then the old value is freed.
    pub(super) fn update_leaf(&self, st: usize, leaf: u64, key: &[u8], value: &[u8]) -> Result<()> {
        let log = (self.order == PersistOrder::Paper).then(|| self.log_line(leaf));
        let old = self.write_update(st, leaf, key, value, log, None)?;
        self.pool.fence();
        self.drop_value(st, old.value, old.slot)?;
        if let Some(log) = log {
            // Algorithm 3 line 9 (reset the old value bit) and line 11
            // (reclaim the log).
            self.persist_value_bit(st, old.value.p, old.value.meta.value_len);
            self.pool.store_u64(log, 0)?;
            self.pool.persist(log, 8);
        }
        Ok(())
    }

    /// Algorithm 3 up to its fence: writes the new value into the leaf's
    /// inactive slot and stores the commit word with the active slot
    /// flipped, then flushes line 0. Returns the old value, which the
    /// caller frees once its fence is done (not before: a crash before the
    /// fence may fall back to it).
    #[allow(
        clippy::too_many_arguments,
        reason = "write_leaf's, and the update log"
    )]
    pub(super) fn write_update(
        &self,
        st: usize,
        leaf: u64,
        key: &[u8],
        value: &[u8],
        log: Option<u64>,
        obj: Option<u64>,
    ) -> Result<OldValue> {
        let c = leaf::commit(&self.pool, leaf)?
            .ok_or_else(|| leaf::corrupt(leaf, "indexed leaf is not committed"))?;
        let old = self.slot(leaf, c.active)?;
        let s = 1 - c.active;
        if let Some(log) = log {
            // Algorithm 3 lines 2-3: PLeaf, then POldV, each persisted.
            self.pool.store_u64(log, leaf)?;
            self.pool.persist(log, 8);
            self.pool.store_u64(log + 8, old.p)?;
            self.pool.persist(log + 8, 8);
        }
        if self.pool.fault(Fault::HartCommitBeforeSlot) {
            self.pool
                .store_u64(leaf, Commit { active: s, ..c }.encode())?;
            self.pool.flush(leaf, 8);
        }
        self.fill_slot(st, leaf, s, key, value, log, obj)?;
        // The slot and the commit word share line 0, and the commit word is
        // stored last: one flush of the line covers both.
        self.pool
            .store_u64(leaf, Commit { active: s, ..c }.encode())?;
        if !self.pool.fault(Fault::HartSkipLeafFlush) {
            self.pool.flush(leaf, 8);
        }
        Ok(OldValue {
            value: old,
            slot: leaf::slot_off(leaf, c.active),
        })
    }

    /// Algorithm 5, lines 10-14, in the tight order: one fence.
    ///
    /// `Err(Unchanged(e))` if it failed before the commit word was cleared
    /// (the leaf still holds its key), `Err(Deleted(e))` if freeing the
    /// value or the leaf failed after that (the delete is durable; what was
    /// not given back stays taken until the next open, whose recovery
    /// frees it). `Ok(true)`: this thread's freed leaves make a group, to
    /// hand over once the caller lets go of the ART ([`super::frees`]).
    pub(super) fn delete_leaf(
        &self,
        st: usize,
        leaf: u64,
    ) -> std::result::Result<bool, DeleteError> {
        let (c, v) = (|| {
            let c = leaf::commit(&self.pool, leaf)?
                .ok_or_else(|| leaf::corrupt(leaf, "indexed leaf is not committed"))?;
            let v = self.slot(leaf, c.active)?;
            self.pool.store_u64(leaf, 0)?;
            Ok((c, v))
        })()
        .map_err(DeleteError::Unchanged)?;
        if self.pool.fault(Fault::HartDeleteFenceUnlocked) {
            // The fence comes in `delete`, after the ART's lock (the fault).
            self.pool.flush(leaf, 8);
        } else {
            self.pool.persist(leaf, 8);
        }
        (|| {
            self.drop_value(st, v, leaf::slot_off(leaf, c.active))?;
            // Algorithm 5 line 12 (paper order): persist the reset value bit.
            self.persist_value_bit(st, v.p, v.meta.value_len);
            self.free_leaf(st, leaf::class_for_key(c.key_len), leaf)
        })()
        .map_err(DeleteError::Deleted)
    }
}
