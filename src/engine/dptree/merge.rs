//! The merge of the buffer tree into the base tree (DPTree §2.3,
//! Algorithm 1), in place, under one principle: nothing the active
//! version `cv` reaches is written. The next version `nv` is built beside
//! it, then one store of `gv` commits it.
//!
//! The phases, as the paper numbers them:
//! 1. **Upsert merge** and 2. **delete merge**, in one pass over the
//!    active leaf list (the paper makes two; one pass over both kinds of
//!    writes, in key order, does the same): each leaf takes the buffered
//!    writes of its key range. A replaced or deleted key's slot is left out
//!    of the leaf's `nv` bitmap (its record is freed after the flip); a new
//!    or replaced key's record goes into a slot that neither version uses,
//!    with its fingerprint, and into the `nv` bitmap. A leaf whose writes
//!    do not fit in its free slots is **rewritten**: its keys in order, in
//!    new leaves filled to [`FILL`] of their slots (the paper's fill rate
//!    FR, §4.1: 0.7), which replace it in the `nv` list.
//! 3. **Consolidation**: a leaf left with fewer than [`CONSOLIDATE`] of its
//!    slots live (the paper's CT, 0.34) hands its keys to the next leaf
//!    (their slot pointers move; the records stay) and leaves the `nv`
//!    list; an empty leaf leaves it too. The last leaf keeps its keys.
//! 4. **Flush**: every line written, no fence.
//! 5. **Inner nodes** (DRAM) rebuilt from the `nv` list.
//! 6. **Flip**: **fence**; store `gv + 1`, flush; **fence**.
//! 7. **Garbage**: the leaves only `cv` reached, the records of replaced
//!    and deleted keys, and the log's records of deletes and of superseded
//!    puts go back to the heap; the log starts again.
//!
//! Every leaf of the `nv` list gets its `nv` metadata (bitmap and next)
//! stored where it differs from what is there: an untouched leaf's `nv`
//! set is two merges old. The paper's `in_merge` bit of `gv` (line 2, one
//! persist) is not kept: recovery reads only the version `gv` names and
//! frees by reachability what a merge cut short had reserved, so it has
//! nothing to learn from the bit (docs/design.md §14).

use std::sync::Arc;

use super::leaf::{self, fingerprint, Meta};
use super::{record, superblock, DpTree, Pending};
use crate::engine::fptree::inner::Inner;
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};

/// Fill rate of a leaf a merge writes (the paper's FR).
pub const FILL: f64 = 0.7;
/// Occupancy under which a leaf hands its keys to the next (the paper's
/// consolidation threshold CT).
pub const CONSOLIDATE: f64 = 0.34;

/// A leaf of the next version's list.
struct Out<'a> {
    /// Its lower bound.
    bound: Box<[u8]>,
    leaf: u64,
    /// Its live slots in the next version.
    bits: u64,
    /// For a new leaf, its entries (key, record) in slot order.
    new: Option<Vec<(&'a [u8], u64)>>,
}

/// What the merge's passes have planned and written so far.
struct Plan<'a> {
    out: Vec<Out<'a>>,
    /// Blocks to free once the flip is durable.
    free_after: Vec<u64>,
    /// New leaves reserved (given back if the merge fails).
    reserved: Vec<u64>,
    /// Lines written in place, to flush: (offset, bytes).
    dirty: Vec<(u64, u64)>,
    /// Keys in the next version's base tree.
    keys: u64,
}

impl DpTree {
    /// Algorithm 1 (see the module doc). On an error before the flip
    /// nothing the active version uses has changed: the new leaves go back
    /// and the buffer stays, to be merged later.
    pub(super) fn merge(&mut self) -> Result<()> {
        let pool = Arc::clone(&self.pool);
        let buffer = std::mem::take(&mut self.buffer);
        let writes: Vec<(&[u8], Pending)> = buffer.iter().collect();
        let leaves: Vec<(Box<[u8]>, u64)> =
            self.leaves.iter().map(|(b, l)| (b.into(), l)).collect();
        let mut plan = Plan {
            out: Vec::new(),
            free_after: Vec::new(),
            reserved: Vec::new(),
            dirty: Vec::new(),
            keys: 0,
        };
        let r = self
            .plan(&pool, &writes, &leaves, &mut plan)
            .and_then(|()| self.link(&pool, &mut plan));
        let cut = match r.and_then(|()| self.log.seal(&pool, self.gv & 1)) {
            Ok(cut) => cut,
            Err(e) => {
                for &b in &plan.reserved {
                    let _ = self.heap.release(&pool, b);
                }
                drop(plan);
                drop(writes);
                self.buffer = buffer;
                return Err(e);
            }
        };
        // Phase 6: the flip.
        if !pool.fault(Fault::DptreeFlipUnfenced) {
            pool.fence();
        }
        let gv_at = self.sb + superblock::GV;
        let gv = self
            .gv
            .checked_add(1)
            .ok_or_else(|| Error::corrupt(gv_at, "dptree: the global version is at its largest"))?;
        pool.store_u64(gv_at, gv)?;
        pool.flush(gv_at, 8);
        pool.fence();
        self.gv = gv;
        // Phase 5 (DRAM only): the inner nodes of the new version.
        let mut inner = Inner::default();
        for (i, o) in plan.out.iter().enumerate() {
            let bound = if i == 0 {
                Box::default()
            } else {
                o.bound.clone()
            };
            inner.insert(bound, o.leaf);
        }
        self.leaves = inner;
        self.base_keys = plan.keys;
        // Phase 7.
        let mut first_err = Ok(());
        let superseded = std::mem::take(&mut self.superseded);
        let emptied = std::mem::take(&mut self.empty_leaves);
        for b in plan
            .free_after
            .into_iter()
            .chain(superseded)
            .chain(emptied)
            .chain(cut)
        {
            let r = self.heap.release(&pool, b);
            if first_err.is_ok() {
                first_err = r;
            }
        }
        self.log.restart();
        drop(plan.out);
        drop(writes);
        drop(buffer);
        self.merges += 1;
        self.new_epoch();
        first_err
    }

    /// Phases 1 to 3 over the active leaves `leaves` (bound, leaf), in
    /// order: slots of in-place leaves written (not flushed), new leaves
    /// reserved and their entries listed.
    fn plan<'a>(
        &mut self,
        pool: &'a Pool,
        writes: &[(&'a [u8], Pending)],
        leaves: &[(Box<[u8]>, u64)],
        plan: &mut Plan<'a>,
    ) -> Result<()> {
        let cv = self.cv();
        let slots = self.slots;
        let low = (f64::from(slots) * CONSOLIDATE) as usize;
        let mut wi = 0;
        // Keys an underfull leaf hands to the next, and its bound.
        let mut carry: Vec<(&'a [u8], u64)> = Vec::new();
        let mut carry_bound: Option<Box<[u8]>> = None;
        for (i, (bound, l)) in leaves.iter().enumerate() {
            let l = *l;
            let upper = leaves.get(i + 1).map(|(b, _)| &b[..]);
            let from = wi;
            while wi < writes.len() && upper.is_none_or(|u| writes[wi].0 < u) {
                wi += 1;
            }
            let m = Meta::read(pool, l, cv, slots)?;
            let last = i + 1 == leaves.len();
            let n = m.bitmap.count_ones() as usize;
            if from == wi && carry.is_empty() && (n >= low || last) && n > 0 {
                // No write, nothing handed on, full enough: its keys are
                // not read.
                plan.keys += n as u64;
                plan.out.push(Out {
                    bound: bound.clone(),
                    leaf: l,
                    bits: m.bitmap,
                    new: None,
                });
                continue;
            }
            // A write finds its key's slot by fingerprint, reading only
            // the records whose fingerprint matches (about one in 256 of
            // the others).
            let mut nbits = m.bitmap;
            let mut adds = std::mem::take(&mut carry);
            for &(k, p) in &writes[from..wi] {
                let fp = fingerprint(k);
                for j in m.live().filter(|&j| m.fps[j as usize] == fp) {
                    let rec = pool.load_u64(leaf::slot(l, j))?;
                    if self.key_of(pool, rec)? == k {
                        nbits &= !(1 << j);
                        plan.free_after.push(rec);
                        break;
                    }
                }
                // A delete's record is its put's, freed as superseded.
                if !p.tomb {
                    adds.push((k, p.rec));
                }
            }
            let kept = nbits.count_ones() as usize + adds.len();
            let bound = carry_bound.take().unwrap_or_else(|| bound.clone());
            if kept == 0 {
                plan.free_after.push(l);
                continue;
            }
            // The keys that stay, read only where they move (a leaf that
            // hands them on, or one rewritten).
            let staying = |t: &Self| -> Result<Vec<(&'a [u8], u64)>> {
                let mut v = Vec::with_capacity(slots as usize);
                for j in leaf::bits(nbits) {
                    let rec = pool.load_u64(leaf::slot(l, j))?;
                    v.push((t.key_of(pool, rec)?, rec));
                }
                Ok(v)
            };
            if kept < low && !last {
                carry = staying(self)?;
                carry.extend(adds);
                carry_bound = Some(bound);
                plan.free_after.push(l);
                continue;
            }
            plan.keys += kept as u64;
            let mut free = !(m.bitmap | nbits) & leaf::all(slots);
            if adds.len() <= free.count_ones() as usize {
                let mut fps_touched = false;
                for (k, rec) in adds {
                    let f = free.trailing_zeros();
                    free &= free - 1;
                    let at = leaf::slot(l, f);
                    pool.store_u64(at, rec)?;
                    plan.dirty.push((at, 8));
                    // SAFETY: slot `f` is free in both versions: no reader
                    // of the active one reads its fingerprint.
                    unsafe { pool.write_bytes(l + leaf::FPS + u64::from(f), &[fingerprint(k)])? };
                    fps_touched = true;
                    nbits |= 1 << f;
                }
                if fps_touched {
                    plan.dirty.push((l + leaf::FPS, u64::from(slots)));
                }
                plan.out.push(Out {
                    bound,
                    leaf: l,
                    bits: nbits,
                    new: None,
                });
            } else {
                let mut all = staying(self)?;
                all.extend(adds);
                all.sort_unstable_by(|a, b| a.0.cmp(b.0));
                self.rewrite(all, bound, plan)?;
                plan.free_after.push(l);
            }
        }
        if leaves.is_empty() {
            let mut all = Vec::new();
            for &(k, p) in writes {
                if !p.tomb {
                    all.push((k, p.rec));
                }
            }
            plan.keys += all.len() as u64;
            if !all.is_empty() {
                self.rewrite(all, Box::default(), plan)?;
            }
        }
        debug_assert!(carry.is_empty());
        Ok(())
    }

    /// The key of the record `rec`, reached from the active version.
    fn key_of<'a>(&self, pool: &'a Pool, rec: u64) -> Result<&'a [u8]> {
        let (k, _) = record::lens_of(pool, rec, self.heap.block_size(rec)?)?;
        pool.touch(rec, record::size(k, 0));
        // SAFETY: records reachable from the active version are never
        // written; the merge holds the tree exclusively.
        unsafe { record::key(pool, rec, k) }
    }

    /// New leaves for `all` (in key order), [`FILL`] of their slots each;
    /// the first takes `bound`.
    fn rewrite<'a>(
        &mut self,
        all: Vec<(&'a [u8], u64)>,
        bound: Box<[u8]>,
        plan: &mut Plan<'a>,
    ) -> Result<()> {
        let fill = ((f64::from(self.slots) * FILL) as usize).max(1);
        let groups = all.len().div_ceil(fill);
        // Even groups: no leaf left far below the others.
        let per = all.len().div_ceil(groups);
        for (g, chunk) in all.chunks(per).enumerate() {
            let b = self.heap.reserve(&self.pool, leaf::size(self.slots))?;
            plan.reserved.push(b.offset());
            plan.out.push(Out {
                bound: if g == 0 {
                    bound.clone()
                } else {
                    chunk[0].0.into()
                },
                leaf: b.offset(),
                bits: leaf::all(chunk.len() as u32),
                new: Some(chunk.to_vec()),
            });
        }
        Ok(())
    }

    /// Phase 4 with the links: each leaf of the next version's list gets
    /// its `nv` metadata (new leaves their whole image), `head[nv]` its
    /// first leaf, and everything written is flushed, not fenced.
    fn link(&mut self, pool: &Pool, plan: &mut Plan<'_>) -> Result<()> {
        let nv = self.cv() ^ 1;
        let size = leaf::size(self.slots);
        for i in 0..plan.out.len() {
            let next = plan.out.get(i + 1).map_or(0, |o| o.leaf);
            let o = &plan.out[i];
            match &o.new {
                Some(entries) => {
                    let mut img = vec![0u8; size as usize];
                    let meta = 16 * nv;
                    img[meta..meta + 8].copy_from_slice(&o.bits.to_le_bytes());
                    img[meta + 8..meta + 16].copy_from_slice(&next.to_le_bytes());
                    for (j, &(k, rec)) in entries.iter().enumerate() {
                        img[leaf::FPS as usize + j] = fingerprint(k);
                        let s = (leaf::SLOT0 + 8 * j as u64) as usize;
                        img[s..s + 8].copy_from_slice(&rec.to_le_bytes());
                    }
                    // SAFETY: reserved by this merge and unreachable until
                    // the flip.
                    unsafe { pool.write_bytes(o.leaf, &img)? };
                    pool.flush(o.leaf, size);
                }
                None => {
                    let (b, n) = (leaf::bitmap_at(o.leaf, nv), leaf::next_at(o.leaf, nv));
                    let changed = pool.load_u64(b)? != o.bits || pool.load_u64(n)? != next;
                    if changed {
                        pool.store_u64(b, o.bits)?;
                        pool.store_u64(n, next)?;
                        pool.flush(b, 16);
                    }
                }
            }
        }
        // Each line once, however many of its slots were written.
        let mut lines: Vec<u64> = plan
            .dirty
            .iter()
            .flat_map(|&(at, len)| (at / 64..(at + len).div_ceil(64)).map(|l| l * 64))
            .collect();
        lines.sort_unstable();
        lines.dedup();
        for at in lines {
            pool.flush(at, 64);
        }
        let head = superblock::head(self.sb, nv);
        let first = plan.out.first().map_or(0, |o| o.leaf);
        if pool.load_u64(head)? != first {
            pool.store_u64(head, first)?;
            pool.flush(head, 8);
        }
        Ok(())
    }
}
