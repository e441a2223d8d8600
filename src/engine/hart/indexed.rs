//! Searches and updates through the point index (`hart.point_index=on`,
//! the default; beyond the paper, docs/design.md §7 "The point index"):
//! each ART's [`Points`] finds a key's leaf with one probe, where a descent
//! of the ART is a chain of cache misses, one per inner node. A search and
//! an update no longer descend the ART; an insert still does, to link its
//! new leaf, and then adds it to the point index ([`Hart::link_point`]).
//!
//! The PM writes, and their persist orders, are those of [`mod@super::write`],
//! unchanged: the point index is DRAM only, changed under the ART's write
//! lock together with the ART, and rebuilt with it at recovery.
//!
//! # Searches without the lock
//! On the direct index of ARTs (`k_h` ≤ 2), with `hart.reads=optimistic`
//! (not the default: on the 2-vCPU VM of docs/design.md §7 "Searches
//! without the lock" it measured no faster with one thread and slower with
//! two), a search probes the point index without the ART's lock first, as
//! a sequence lock reader (the protocol of
//! [`crate::engine::Locked`]): it loads the cell's `seq`
//! ([`super::trees::PointCell`]), probes the published table, reads and
//! compares the leaf's key and copies its value into a buffer, all through
//! atomic word loads, and trusts what it found only if `seq` was even and
//! is unchanged; else it tries again, and then takes the read lock. A read
//! lock is two locked instructions on the ART's slot line, each a full
//! barrier on x86, so the misses of successive searches cannot overlap
//! across it (docs/design.md §7, "Searches without the lock").
//!
//! Every writer that changes what such a reader reads holds the ART's
//! write lock and makes `seq` odd around the change ([`Hart::writing`]):
//! the point index's entries and table; an update's slot and commit word
//! and the old value it frees; a delete's commit word and the leaf and
//! value it frees. A freed leaf or value may be written again, later, by
//! a writer of another ART; a reader that reached it through this ART
//! started before the free's `seq` change and fails its check. A table
//! that a reader may still hold is never deallocated
//! ([`super::points::Tables`]).

use std::ops::Bound;
use std::sync::atomic::{fence, Ordering};

use super::art::LeafKeys;
use super::leaf::{Commit, Meta};
use super::points::{self, Points};
use super::trees::{PointCell, Tree};
use super::{leaf, Hart, LeafRef};
use crate::engine::locked::{self, Writing};
use crate::engine::{Probe, PutMode, PutOutcome, ValueBuf, OPTIMISTIC_TRIES, VALUE_BUF};
use crate::error::Result;

impl Hart {
    /// Makes the `seq` of the point index of `hk` odd until the returned
    /// guard drops: around every change that a reader without the lock
    /// could see ([`mod@self`], "Searches without the lock"). The caller
    /// holds the ART's write lock. `None` where no reader goes without the
    /// lock (no point index, `hart.reads=locked`, or the hashed index).
    #[inline(always)]
    pub(super) fn writing(&self, hk: &[u8]) -> Option<Writing<'_>> {
        if !self.point_index || !self.optimistic {
            return None;
        }
        self.trees.point_cell(hk).map(|c| Writing::begin(c.seq))
    }

    /// Algorithm 4 with the point index: without the ART's lock where
    /// [`Self::get_unlocked`] can answer, else under its read lock, where a
    /// found entry's leaf is checked and answered by [`Self::answer`] (a
    /// tag that matched another key's leaf goes on to the next entry). An
    /// ART without a built point index (a small one, [`points`]) is
    /// searched, its root prefetched from its hint before the lock.
    #[inline]
    pub(super) fn get_indexed(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let (hk, ak) = self.split(key);
        let h = points::hash(ak);
        let (tree, cell) = self.trees.find_bytes_with_cell(hk);
        let Some(tree) = tree else {
            return Ok(false);
        };
        if let Some(cell) = cell {
            let word = cell.table.load(Ordering::Relaxed);
            if word == 0 {
                self.prefetch_root_hint(cell.root.load(Ordering::Relaxed), ak);
            } else if self.optimistic {
                let mut buf = ValueBuf::new();
                if let Some(found) = self.get_unlocked(cell, h, key, &mut buf) {
                    if let Some(value) = found {
                        f(value);
                    }
                    return Ok(found.is_some());
                }
            } else {
                points::prefetch_published(word, h);
            }
        }
        let t = tree.read();
        if !t.points.is_built() {
            let Some(leaf) = t.art.probe(ak) else {
                return Ok(false);
            };
            return self.answer::<false>(leaf.off(), key, f);
        }
        let found = t.points.find(h, |l| {
            self.answer::<false>(l.off(), key, &mut *f)
                .map(|hit| hit.then_some(()))
        })?;
        Ok(found.is_some())
    }

    /// A search of `key` (hash `h` of its ART key) in the point index of
    /// `cell` without its ART's lock: `Some(None)` for an absent key,
    /// `Some(Some(value))` for a present one (its value in `buf`), each
    /// found between two writes of the ART; `None` when the lock must
    /// decide (a writer inside at every try, a value longer than the
    /// buffer, an error, or an ART without a built point index).
    #[inline(always)]
    fn get_unlocked<'b>(
        &self,
        cell: PointCell<'_>,
        h: u64,
        key: &[u8],
        buf: &'b mut ValueBuf,
    ) -> Option<Option<&'b [u8]>> {
        for _ in 0..OPTIMISTIC_TRIES {
            let v = cell.seq.load(Ordering::Acquire);
            if v & 1 != 0 {
                return None;
            }
            buf.clear();
            let table = self
                .trees
                .tables()
                .view(cell.table.load(Ordering::Relaxed))?;
            let probe =
                points::probe_view(table, h, |l| self.read_leaf_unlocked(l.off(), key, buf))
                    .map(|found| found.unwrap_or(Probe::Absent));
            fence(Ordering::Acquire);
            if cell.seq.load(Ordering::Relaxed) == v {
                return locked::answer(&probe, buf);
            }
        }
        None
    }

    /// Whether the leaf at `leaf` holds `key`, read without its ART's lock
    /// through atomic word loads: `Some` with the value copied into `buf`
    /// if it does, `None` if not. What it reads may be torn: a torn read
    /// may answer anything, or fail, but reads only inside the pool and
    /// returns (the caller discards it). The PM lines it reads are counted
    /// (and their emulated latency charged) as it reads them, inside the
    /// caller's window between its two loads of `seq`.
    #[inline(always)]
    fn read_leaf_unlocked(
        &self,
        leaf: u64,
        key: &[u8],
        buf: &mut ValueBuf,
    ) -> Result<Option<Probe>> {
        let pm = self.pool.words();
        if key.len() <= leaf::LINE_KEY_MAX {
            if let Some(l) = pm.block::<{ crate::pm::CACHE_LINE }>(leaf) {
                return self.read_line_unlocked(l, leaf, key, buf);
            }
        }
        let w = pm.load(leaf)?;
        self.pool.touch_lines(1);
        let Some(c) = Commit::decode(w) else {
            return Err(leaf::corrupt(leaf, "indexed leaf is not committed"));
        };
        if c.key_len != key.len() {
            return Ok(None);
        }
        let at = leaf + leaf::HEADER;
        if !key_words_match(key, |j| pm.load(at + 8 * j as u64))? {
            return Ok(None);
        }
        self.pool
            .touch_lines(crate::pm::lines_spanned(leaf, leaf::HEADER + key.len() as u64) - 1);
        let so = leaf::slot_off(leaf, c.active);
        let (p, meta) = (pm.load(so)?, pm.load(so + 8)?);
        self.copy_value_unlocked(p, meta, buf).map(Some)
    }

    /// The value of a slot whose words are `p` and `meta`, copied into
    /// `buf` through atomic word loads (without the ART's lock, as
    /// [`Self::read_leaf_unlocked`]), its lines counted.
    #[inline(always)]
    fn copy_value_unlocked(&self, p: u64, meta: u64, buf: &mut ValueBuf) -> Result<Probe> {
        if let Some(len) = Meta::in_slot_len(meta) {
            buf.set_words(1, |_| p);
            return Ok(Probe::Found(0..len as usize));
        }
        let len = Meta::value_len_of(meta);
        if meta & leaf::LARGE != 0 || len > VALUE_BUF as u64 {
            return Ok(Probe::TooLong);
        }
        let pm = self.pool.words();
        for i in 0..len.div_ceil(8) {
            buf.push(pm.load(p + 8 * i)?);
        }
        self.pool.touch_lines(crate::pm::lines_spanned(p, len));
        Ok(Probe::Found(0..len as usize))
    }

    /// [`Self::read_leaf_unlocked`] for a key of at most
    /// [`leaf::LINE_KEY_MAX`] bytes, from the leaf's first line `l`
    /// (checked once): the commit word, the key and the slot are in it.
    #[inline(always)]
    fn read_line_unlocked(
        &self,
        l: crate::pm::WordBlock<'_, { crate::pm::CACHE_LINE }>,
        leaf: u64,
        key: &[u8],
        buf: &mut ValueBuf,
    ) -> Result<Option<Probe>> {
        let w = l.load(0);
        self.pool.touch_lines(1);
        if !Commit::tagged(w) {
            return Err(leaf::corrupt(leaf, "indexed leaf is not committed"));
        }
        if (w >> 8) & 0xFF != key.len() as u64 {
            // Another key's leaf, unless its length is one no leaf has.
            return match Commit::decode(w) {
                Some(_) => Ok(None),
                None => Err(leaf::corrupt(leaf, "indexed leaf is not committed")),
            };
        }
        // The key's words from `HEADER` (bytes 40..64 of the line).
        let word =
            |j: usize| Ok(l.load((leaf::HEADER + 8 * j as u64) & (crate::pm::CACHE_LINE - 8)));
        if !key_words_match(key, word)? {
            return Ok(None);
        }
        let so = 8 + 16 * (w & 1);
        self.copy_value_unlocked(l.load(so), l.load(so + 8), buf)
            .map(Some)
    }

    /// The leaf of `key` (hash `h` of its ART key) in `points`, if the key
    /// is present; the caller holds the lock of the ART they index.
    pub(super) fn find_leaf(&self, points: &Points, h: u64, key: &[u8]) -> Result<Option<LeafRef>> {
        points.find(h, |l| Ok(self.holds_key(l.off(), key)?.then_some(l)))
    }

    /// Algorithm 3 through the point index, for a put whose key is likely
    /// present (an update, or an upsert after one of its stripe that
    /// updated): the caller holds the ART's write lock `t`. A key found is
    /// updated in place ([`Self::update_leaf`]: one fence), without a
    /// descent, and the outcome returned; an absent one returns
    /// `PutOutcome::Unchanged` for an update, or `None`: the caller inserts.
    #[allow(
        clippy::too_many_arguments,
        reason = "the put's key, value and mode, and what the caller found of them"
    )]
    pub(super) fn update_indexed(
        &self,
        t: &Tree,
        h: Option<u64>,
        st: usize,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
    ) -> Result<Option<PutOutcome>> {
        let (hk, ak) = self.split(key);
        let found = if t.points.is_built() {
            let h = h.unwrap_or_else(|| points::hash(ak));
            self.find_leaf(&t.points, h, key)?
        } else {
            t.art.get(ak, &self.keys())
        };
        match found {
            Some(l) if mode != PutMode::Insert => {
                // The slot, the commit word and the old value's free, as one
                // change for readers without the lock.
                let _w = self.writing(hk);
                self.update_leaf(l.stripe(), l.off(), key, value)?;
                if mode == PutMode::Upsert {
                    self.note_upsert(st, false);
                }
                Ok(Some(PutOutcome::Replaced))
            }
            Some(_) => Ok(Some(PutOutcome::Unchanged)),
            None if mode == PutMode::Update => Ok(Some(PutOutcome::Unchanged)),
            None => Ok(None),
        }
    }

    /// Adds `leaf`, the leaf of `key` just linked into the ART of `t`, to
    /// its point index (`h`: the hash of its ART key, if the caller has
    /// it), or builds the index if the ART now holds more than
    /// `hart.point_index_above` keys (every leaf's key read from PM once),
    /// and publishes the table.
    pub(super) fn link_point(&self, t: &mut Tree, h: Option<u64>, key: &[u8], leaf: LeafRef) {
        if !t.points.is_built() && t.art.len() <= self.point_above {
            return;
        }
        let (hk, ak) = self.split(key);
        let keys = self.keys();
        let tables = self.trees.tables();
        let before = t.points.word();
        if t.points.is_built() {
            let h = h.unwrap_or_else(|| points::hash(ak));
            let _w = self.writing(hk);
            t.points.insert(h, leaf, |x| keys.key(x), tables);
        } else if t.art.len() > self.point_above {
            let mut entries = Vec::with_capacity(t.art.len());
            t.art
                .range_values(Bound::Unbounded, Bound::Unbounded, &keys, |l| {
                    entries.push((points::hash(keys.key(l)), l));
                    true
                });
            let _w = self.writing(hk);
            t.points = Points::with_entries(&entries, tables);
        }
        if t.points.word() != before {
            self.trees.note_points(hk, &t.points);
        }
    }
}

/// Whether the stored key whose `j`th 8-byte word `word(j)` loads is
/// `key` (of the same length, checked by the caller): a word at a time,
/// the last word's bytes past the key masked off.
#[inline(always)]
fn key_words_match(key: &[u8], mut word: impl FnMut(usize) -> Result<u64>) -> Result<bool> {
    for (j, chunk) in key.chunks(8).enumerate() {
        let mut mine = [0u8; 8];
        mine[..chunk.len()].copy_from_slice(chunk);
        let mask = u64::MAX >> (64 - 8 * chunk.len() as u32);
        if (word(j)? ^ u64::from_le_bytes(mine)) & mask != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}
