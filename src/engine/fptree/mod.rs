//! `fptree`: the Fingerprinting Persistent Tree of Oukid, Lasperas, Nica,
//! Willhalm and Lehner (SIGMOD'16), the baseline the HART paper compares
//! itself with (HART §IV: "We compare HART with FPTree as both target a
//! DRAM-PM hybrid memory system"), and the WORT paper's B+-tree rival.
//!
//! - **Leaves in PM** ([`leaf`]): unsorted slots, a bitmap of the live ones
//!   as the commit word, a one-byte fingerprint per slot so that a search
//!   reads about one record per leaf, and a persistent pointer to the next
//!   leaf: the leaf list, from which recovery rebuilds everything else.
//! - **Inner nodes in DRAM** ([`inner`]): FPTree keeps a volatile B+-tree
//!   of inner nodes. Here it is Rust's B-tree keyed by the first 8 bytes
//!   of each leaf's lower bound (integers compared in the node, as
//!   FPTree's fixed-size keys are), mapping bounds to leaves: the first
//!   leaf's bound is the empty key, every other leaf's is the key that its
//!   split moved first into it (its least key at recovery). A key belongs
//!   to the last leaf whose bound is at or below it.
//! - **Records** ([`record`]): FPTree's variable-size keys live out of the
//!   leaf, behind a pointer (§4.2); the value sits beside its key.
//! - **Blocks** come from the radix trees' heap ([`super::radix::chunks`]):
//!   chunks taken from the substrate once, carved in DRAM, and a block is
//!   in use exactly when the leaf list reaches it. A block written but not
//!   yet reachable when a crash strikes is free after it, so no insert,
//!   split or delete needs an allocation log; FPTree's split and delete
//!   micro-logs exist to keep its allocator from leaking, which
//!   reachability does here (docs/design.md §13).
//! - **Concurrency**: one reader-writer lock over the tree ([`Locked`]).
//!   FPTree's selective concurrency (HTM for the inner nodes, a lock per
//!   leaf) is not built: no HTM here.
//!
//! # Persist order
//! - **Insert** into a leaf with a free slot `j`: write the record, flush
//!   it; store its offset in slot `j`, flush that line; **fence**; store the
//!   key's fingerprint in `fp[j]` and then `bitmap | 1 << j` (the same
//!   line, in that order); flush the line; **fence**. The bitmap store is
//!   the commit point. 2 fences.
//! - **Update** (key present in slot `j`): write a new record, flush it;
//!   **fence**; store its offset in slot `j` (one 8-byte store, the commit
//!   point); flush; **fence**; the old record goes back to the heap. 2
//!   fences, and no free slot needed. (FPTree writes the new pair in a
//!   free slot and swaps both bits in one bitmap store, because its pairs
//!   are in the leaf; a pointer swap is the same single atomic store.)
//! - **Delete** (slot `j`): store `bitmap & !(1 << j)` (the commit point),
//!   flush, **fence**. If the leaf is now empty, unlink it: store its
//!   `next` in its predecessor's `next` (or in the superblock's `head`),
//!   flush, **fence**, and the leaf goes back to the heap. Then the record
//!   goes back to the heap. A crash between the two fences leaves an empty
//!   leaf in the list whose slot still points to the deleted record, which
//!   recovery takes as the sign of such a crash and unlinks the leaf the
//!   same way. 1 fence, 2 when a leaf goes.
//! - **Split** of a full leaf `L` (FPTree's `SplitLeaf`): reserve a leaf
//!   `N`; write into it `L`'s line and slots with the bitmap of the upper
//!   half of `L`'s keys and `next = L.next`; flush `N`; **fence**. Then,
//!   in `L`'s first line, store `next = N` *and then* `bitmap = ` the lower
//!   half (one line: they reach PM in that order, docs/design.md §1 item
//!   4); flush; **fence**. A crash leaves `N` unreachable (free after
//!   recovery), or `L` and `N` both holding the upper half, or the split
//!   done. The middle case, which FPTree's split micro-log covers, is
//!   recognised by recovery without a log: two live slots never hold one
//!   record except there, `L` is then still full, and `N`'s live slots
//!   are exactly the `S - S/2` it shares with `L`; recovery finishes the
//!   split (stores `L`'s lower-half bitmap, flush, fence). The other order (bitmap first) would lose the
//!   upper half in a crash between; `Fault::FptreeSplitBitmapFirst`
//!   makes it, and the crash simulator catches it.
//! - **First leaf**: write the record and a leaf holding it (bitmap `1`),
//!   flush both; **fence**; store the leaf in the superblock's `head`;
//!   flush; **fence**.
//!
//! # Recovery ([`recovery`])
//! Walk the leaf list: finish a torn split, unlink empty leaves, mark every
//! leaf and live record in the heap, check each record and the key order
//! across leaves; give the unreached blocks back; rebuild the DRAM map.

pub(crate) mod inner;
pub(crate) mod leaf;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod superblock;
#[cfg(test)]
mod tests;

use std::ops::Bound;
use std::sync::Arc;

use super::radix::chunks::Chunks;
use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};
use inner::Inner;
use leaf::{fingerprint, Header};

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "fptree",
    paper: "Oukid et al., FPTree (SIGMOD'16): DRAM inner nodes, PM leaves with fingerprints",
    create,
    open,
};

/// The settings: `fptree.leaf_slots` (when the pool is made).
fn leaf_slots(config: &EngineConfig) -> Result<Option<u32>> {
    let mut slots = None;
    for (k, v) in super::settings(config, INFO.name, &["leaf_slots"])? {
        debug_assert_eq!(k, "leaf_slots");
        slots = Some(
            v.parse::<u32>()
                .ok()
                .filter(|s| leaf::SLOTS.contains(s))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "fptree.leaf_slots `{v}`: expected {} to {}",
                        leaf::SLOTS.start(),
                        leaf::SLOTS.end()
                    ))
                })?,
        );
    }
    Ok(slots)
}

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let slots = leaf_slots(config)?.unwrap_or(leaf::DEFAULT_SLOTS);
    let tree = FpTree::create(Arc::clone(&pool), slots)?;
    Ok(Box::new(Locked::new(pool, tree)))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let slots = leaf_slots(config)?;
    let tree = FpTree::open(Arc::clone(&pool), slots)?;
    Ok(Box::new(Locked::new(pool, tree)))
}

/// The fptree engine (serial; wrapped in [`Locked`]).
pub struct FpTree {
    pool: Arc<Pool>,
    sb: u64,
    /// Slots per leaf.
    slots: u32,
    heap: Chunks,
    /// Each leaf's lower bound → the leaf (the DRAM inner nodes).
    leaves: Inner,
    count: u64,
}

/// A live slot found by a search.
#[derive(Clone, Copy)]
struct Found {
    leaf: u64,
    j: u32,
    rec: u64,
    value_len: usize,
    key_len: usize,
}

impl FpTree {
    /// Makes an empty tree whose leaves have `slots` slots in a new pool.
    pub fn create(pool: Arc<Pool>, slots: u32) -> Result<FpTree> {
        if !leaf::SLOTS.contains(&slots) {
            return Err(Error::InvalidArgument(format!(
                "fptree: {slots} slots per leaf; expected 2 to 40"
            )));
        }
        let sb = superblock::create(&pool, slots)?;
        let heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
        Ok(FpTree {
            pool,
            sb,
            slots,
            heap,
            leaves: Inner::default(),
            count: 0,
        })
    }

    /// Recovers the tree of a pool (see [`recovery`]). `slots`, if given,
    /// must be what the pool was made with; it is checked before recovery
    /// writes anything.
    pub fn open(pool: Arc<Pool>, slots: Option<u32>) -> Result<FpTree> {
        recovery::open(pool, slots)
    }

    fn leaf_size(&self) -> u64 {
        leaf::size(self.slots)
    }

    /// The leaf a key belongs to, with its lower bound.
    fn leaf_for(&self, key: &[u8]) -> Option<(&[u8], u64)> {
        self.leaves.find(key)
    }

    /// The live slot of `leaf` that holds `key`.
    fn find_in(&self, leaf: u64, h: &Header, key: &[u8], fp: u8) -> Result<Option<Found>> {
        for j in h.live() {
            if h.fps[j as usize] != fp {
                continue;
            }
            let rec = self.pool.load_u64(leaf::slot(leaf, j))?;
            let w = self.pool.load_u64(rec)?;
            let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
            if k != key.len() {
                continue;
            }
            self.pool.touch(rec, record::size(k, 0));
            // SAFETY: a reachable record is never written again; writers
            // hold the tree exclusively.
            if unsafe { record::key(&self.pool, rec, k)? } == key {
                return Ok(Some(Found {
                    leaf,
                    j,
                    rec,
                    value_len: v,
                    key_len: k,
                }));
            }
        }
        Ok(None)
    }

    /// Finds `key`: its leaf (with the leaf's bound and first line) and its
    /// slot, if present.
    fn find(&self, key: &[u8]) -> Result<Option<Found>> {
        let Some((_, leaf)) = self.leaf_for(key) else {
            return Ok(None);
        };
        let h = Header::read(&self.pool, leaf, self.slots)?;
        self.find_in(leaf, &h, key, fingerprint(key))
    }

    fn value<'a>(&'a self, f: &Found) -> Result<&'a [u8]> {
        let at = f.rec + record::HEADER + f.key_len as u64;
        self.pool.touch(at, f.value_len as u64);
        // SAFETY: as in `find_in`.
        unsafe { self.pool.bytes(at, f.value_len as u64) }
    }

    /// [`record::write`] into this tree's heap.
    fn write_record(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        record::write(&self.pool, &mut self.heap, key, value)
    }

    /// Gives back a block that a durable store made unreachable.
    fn release(&mut self, off: u64) -> Result<()> {
        self.heap.release(&self.pool, off)
    }

    /// `r`, after giving back the reserved, unpublished `blocks` if it is
    /// an error (a store into a block of the pool fails only on a bug, but
    /// a failed step must not keep a block reserved for good). The error
    /// returned is `r`'s; a block whose release fails too stays reserved
    /// until the pool is opened again.
    fn or_release<T>(&mut self, r: Result<T>, blocks: &[u64]) -> Result<T> {
        if r.is_err() {
            for &b in blocks {
                let _ = self.release(b);
            }
        }
        r
    }

    /// Update: see the module doc, "Persist order".
    fn update(&mut self, f: Found, key: &[u8], value: &[u8]) -> Result<()> {
        let rec = self.write_record(key, value)?;
        self.pool.fence();
        let slot = leaf::slot(f.leaf, f.j);
        let stored = self.pool.store_u64(slot, rec);
        self.or_release(stored, &[rec])?;
        self.pool.flush(slot, 8);
        self.pool.fence();
        self.release(f.rec)
    }

    /// Insert into `leaf`, which has a free slot: see the module doc.
    fn insert_into(&mut self, leaf: u64, key: &[u8], value: &[u8]) -> Result<()> {
        let h = Header::read(&self.pool, leaf, self.slots)?;
        let j = h
            .free_slot(self.slots)
            .expect("a full leaf is split before an insert");
        let rec = self.write_record(key, value)?;
        let slot = leaf::slot(leaf, j);
        let stored = self.pool.store_u64(slot, rec);
        self.or_release(stored, &[rec])?;
        self.pool.flush(slot, 8);
        if !self.pool.fault(Fault::FptreeInsertSkipFence) {
            self.pool.fence();
        }
        // SAFETY: `fp[j]` belongs to a free slot; writers hold the tree
        // exclusively, and readers do not read a free slot's fingerprint.
        let stored = unsafe {
            self.pool
                .write_bytes(leaf + leaf::FPS + u64::from(j), &[fingerprint(key)])
        }
        .and_then(|()| self.pool.store_u64(leaf + leaf::BITMAP, h.bitmap | 1 << j));
        self.or_release(stored, &[rec])?;
        self.pool.flush(leaf, 64);
        self.pool.fence();
        self.count += 1;
        Ok(())
    }

    /// The first leaf: see the module doc.
    fn first_leaf(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let rec = self.write_record(key, value)?;
        let b = match self.heap.reserve(&self.pool, self.leaf_size()) {
            Ok(b) => b,
            Err(e) => {
                self.release(rec)?;
                return Err(e);
            }
        };
        let l = b.offset();
        let mut img = vec![0u8; self.leaf_size() as usize];
        img[0..8].copy_from_slice(&1u64.to_le_bytes());
        img[leaf::FPS as usize] = fingerprint(key);
        img[leaf::SLOT0 as usize..][..8].copy_from_slice(&rec.to_le_bytes());
        // SAFETY: reserved by us and unreachable.
        let written = unsafe { self.pool.write_bytes(l, &img) };
        self.or_release(written, &[rec, l])?;
        self.pool.flush(l, self.leaf_size());
        self.pool.fence();
        let stored = self.pool.store_u64(self.sb + superblock::HEAD, l);
        self.or_release(stored, &[rec, l])?;
        self.pool.flush(self.sb + superblock::HEAD, 8);
        self.pool.fence();
        self.leaves.insert(Box::default(), l);
        self.count += 1;
        Ok(())
    }

    /// Splits the full leaf `l` (FPTree's `SplitLeaf`; persist order in
    /// the module doc). Returns the leaf that `key` now belongs to.
    fn split(&mut self, l: u64, key: &[u8]) -> Result<u64> {
        let h = Header::read(&self.pool, l, self.slots)?;
        // The records' first words are loaded in one pass and the keys
        // compared in another, so that the misses of the first overlap.
        let mut recs = [(0u64, 0u64); leaf::MAX_SLOTS as usize];
        for j in h.live() {
            let rec = self.pool.load_u64(leaf::slot(l, j))?;
            recs[j as usize] = (rec, self.pool.load_u64(rec)?);
        }
        let mut keyed: Vec<(&[u8], u32)> = Vec::with_capacity(self.slots as usize);
        for j in h.live() {
            let (rec, lens) = recs[j as usize];
            self.pool.touch(rec, 8);
            // SAFETY: as in `find_in`.
            keyed.push((
                unsafe { record::key(&self.pool, rec, (lens & 0xFFFF) as usize)? },
                j,
            ));
        }
        keyed.sort_unstable();
        let upper = &keyed[keyed.len() / 2..];
        let bits = upper.iter().fold(0u64, |b, &(_, j)| b | 1 << j);
        let bound: Box<[u8]> = upper[0].0.into();
        drop(keyed);
        // SAFETY: `l` is a leaf, read under the exclusive hold of the tree.
        let mut img = unsafe { self.pool.bytes(l, self.leaf_size())? }.to_vec();
        img[0..8].copy_from_slice(&bits.to_le_bytes());
        img[8..16].copy_from_slice(&h.next.to_le_bytes());
        let b = self.heap.reserve(&self.pool, self.leaf_size())?;
        let n = b.offset();
        // SAFETY: reserved by us and unreachable.
        let written = unsafe { self.pool.write_bytes(n, &img) };
        self.or_release(written, &[n])?;
        self.pool.flush(n, self.leaf_size());
        self.pool.fence();
        let lower = h.bitmap & !bits;
        if self.pool.fault(Fault::FptreeSplitBitmapFirst) {
            self.pool.store_u64(l + leaf::BITMAP, lower)?;
            self.pool.store_u64(l + leaf::NEXT, n)?;
        } else {
            let linked = self.pool.store_u64(l + leaf::NEXT, n);
            self.or_release(linked, &[n])?;
            // (Once linked, `n` is reachable: on an error here it stays
            // reserved, and the next open finishes the split.)
            self.pool.store_u64(l + leaf::BITMAP, lower)?;
        }
        self.pool.flush(l, 64);
        self.pool.fence();
        let to_new = key >= &bound[..];
        self.leaves.insert(bound, n);
        Ok(if to_new { n } else { l })
    }

    /// Unlinks the empty leaf `l` whose bound is `bound` from the list and
    /// the DRAM map (see the module doc, "Delete"); the caller gives the
    /// leaf back to the heap.
    fn unlink(&mut self, bound: &[u8], l: u64) -> Result<()> {
        let next = self.pool.load_u64(l + leaf::NEXT)?;
        let pred = self.leaves.pred(bound);
        let at = match pred {
            Some(p) => p + leaf::NEXT,
            None => self.sb + superblock::HEAD,
        };
        self.pool.store_u64(at, next)?;
        self.pool.flush(at, 8);
        self.pool.fence();
        // The DRAM map before the heap: the map must never route a key to
        // a leaf the list no longer holds.
        self.leaves.remove(bound);
        if pred.is_none() {
            // The next leaf is first now: its bound becomes the empty key.
            if let Some((_, n)) = self.leaves.pop_first() {
                self.leaves.insert(Box::default(), n);
            }
        }
        Ok(())
    }
}

impl SerialEngine for FpTree {
    fn name(&self) -> &'static str {
        INFO.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ordered_scan: true,
            concurrent: false,
            max_key_len: MAX_KEY_LEN,
            max_value_len: MAX_VALUE_LEN,
        }
    }

    fn settings(&self) -> EngineConfig {
        EngineConfig::from([("fptree.leaf_slots".to_string(), self.slots.to_string())])
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.find(key)? {
            Some(found) => {
                f(self.value(&found)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        let Some((_, l)) = self.leaf_for(key) else {
            if mode == PutMode::Update {
                return Ok(PutOutcome::Unchanged);
            }
            self.first_leaf(key, value)?;
            return Ok(PutOutcome::Inserted);
        };
        let h = Header::read(&self.pool, l, self.slots)?;
        match (self.find_in(l, &h, key, fingerprint(key))?, mode) {
            (Some(_), PutMode::Insert) | (None, PutMode::Update) => Ok(PutOutcome::Unchanged),
            (Some(f), _) => {
                self.update(f, key, value)?;
                Ok(PutOutcome::Replaced)
            }
            (None, _) => {
                let l = match h.free_slot(self.slots) {
                    Some(_) => l,
                    None => self.split(l, key)?,
                };
                self.insert_into(l, key, value)?;
                Ok(PutOutcome::Inserted)
            }
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let Some((_, l)) = self.leaf_for(key) else {
            return Ok(false);
        };
        let h = Header::read(&self.pool, l, self.slots)?;
        let Some(f) = self.find_in(l, &h, key, fingerprint(key))? else {
            return Ok(false);
        };
        let left = h.bitmap & !(1 << f.j);
        self.pool.store_u64(l + leaf::BITMAP, left)?;
        self.pool.flush(l, 64);
        self.pool.fence();
        self.count -= 1;
        // The unlink before the record's release: the leaf's list and the
        // DRAM map agree whatever fails after the commit, and the record
        // is still there, as the trace recovery looks for, until the
        // unlink is durable (`recovery::deleted_key_left`).
        if left == 0 {
            // The bound is copied only here, not on every delete.
            let bound: Box<[u8]> = self.leaf_for(key).map_or(Box::default(), |(b, _)| b.into());
            self.unlink(&bound, l)?;
        }
        self.release(f.rec)?;
        if left == 0 {
            self.release(l)?;
        }
        Ok(true)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        let start: &[u8] = match lo {
            Bound::Included(k) | Bound::Excluded(k) => self.leaf_for(k).map_or(&[], |(b, _)| b),
            Bound::Unbounded => &[],
        };
        let below_hi = |k: &[u8]| super::below_hi(k, hi);
        let above_lo = |k: &[u8]| super::above_lo(k, lo);
        let mut pairs: Vec<(&[u8], u64, usize)> = Vec::with_capacity(self.slots as usize);
        for (_, l) in self.leaves.iter_from(Bound::Included(start)) {
            let h = Header::read(&self.pool, l, self.slots)?;
            // The next leaf's first line and this leaf's records at once.
            self.pool.words().prefetch(h.next);
            h.prefetch_records(&self.pool, l);
            pairs.clear();
            for j in h.live() {
                let rec = self.pool.load_u64(leaf::slot(l, j))?;
                let w = self.pool.load_u64(rec)?;
                let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
                // SAFETY: as in `find_in`.
                let key = unsafe { record::key(&self.pool, rec, k)? };
                pairs.push((key, rec, v));
            }
            pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for &(k, rec, v) in &pairs {
                if !above_lo(k) {
                    continue;
                }
                if !below_hi(k) {
                    return Ok(());
                }
                let at = rec + record::HEADER + k.len() as u64;
                self.pool.touch(rec, record::size(k.len(), v));
                // SAFETY: as in `find_in`.
                let value = unsafe { self.pool.bytes(at, v as u64)? };
                if !f(k, value) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.count
    }

    fn check(&self) -> Result<CheckReport> {
        self.check_impl()
    }

    fn dram_bytes(&self) -> u64 {
        self.leaves.dram_bytes() + self.heap.dram_bytes()
    }
}
