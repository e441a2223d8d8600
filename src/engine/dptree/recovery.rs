//! Recovery at open, and the structural check: one walk of the active
//! version's leaf list and one of the log ([`super::log::walk`]).
//!
//! DPTree rebuilds its volatile parts at restart (§2.4): the base tree's
//! inner nodes from the leaf list and the buffer tree from the log. The
//! walks mark every block they reach in the heap; every other block is
//! free afterwards, which is all the cleaning a crash needs:
//!
//! | a crash | leaves | after recovery |
//! |---|---|---|
//! | in a put, before its fence | a record, and maybe its entry | the log ends before the entry, or at it if its record is not whole; the record is free |
//! | in a merge, before the flip | new leaves, slots and `nv` metadata written | `gv` names the old version, whose leaves and slots the merge did not write; the new leaves are free; the buffer is replayed from the log |
//! | in a merge, after the flip | the old version's leaves, records and log records not yet freed | the log is invalid in the new version; what only the old version reached is free |
//!
//! Anything else is damage, refused with nothing written: a leaf list
//! with a cycle, a pointer to no block or to a block reached twice, bits
//! past a leaf's slots, a record whose lengths do not fit
//! its block or whose key does not match its fingerprint, a key twice,
//! keys out of order across leaves.

use std::collections::HashSet;
use std::sync::Arc;

use super::buffer::Buffer;
use super::leaf::{self, fingerprint, Meta};
use super::log;
use super::{record, superblock, Bloom, DpTree, Pending, Settings};
use crate::engine::fptree::inner::Inner;
use crate::engine::fptree::recovery::{key_range, same_leaves, Reached};
use crate::engine::radix::chunks::Chunks;
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};

/// The buffer tree, and the records its writes superseded.
type Replayed = (Buffer, Vec<u64>);

/// What the walk of the leaf list found.
struct Walked {
    /// The non-empty leaves, in list order.
    leaves: Vec<Reached>,
    /// The empty leaves, in list order.
    empty: Vec<u64>,
    keys: u64,
}

/// Walks the leaf list of version `gv & 1`, marking what it reaches in
/// `heap`. Damage is `Corrupt` at open, `CheckFailed` for the check.
fn walk(
    pool: &Pool,
    heap: &mut Chunks,
    sb: u64,
    gv: u64,
    slots: u32,
    check: bool,
) -> Result<Walked> {
    let v = (gv & 1) as usize;
    let size = leaf::size(slots);
    let bad = |off: u64, what: String| -> Error {
        if check {
            Error::CheckFailed(format!("dptree: {what} (at {off:#x})"))
        } else {
            Error::corrupt(off, format!("dptree: {what}"))
        }
    };
    let mut w = Walked {
        leaves: Vec::new(),
        empty: Vec::new(),
        keys: 0,
    };
    let mut at = pool.load_u64(superblock::head(sb, v))?;
    let mut visited = HashSet::new();
    while at != 0 {
        if !visited.insert(at) {
            return Err(bad(at, "the leaf list has a cycle".into()));
        }
        if heap.block_size(at).map_err(|e| bad(at, e.to_string()))? < size {
            return Err(bad(
                at,
                "the leaf list names a block smaller than a leaf".into(),
            ));
        }
        let m = Meta::read(pool, at, v, slots)?;
        if m.bitmap & !leaf::all(slots) != 0 {
            return Err(bad(
                at,
                format!(
                    "a leaf's bitmap {:#x} has bits past its {slots} slots",
                    m.bitmap
                ),
            ));
        }
        heap.mark(at).map_err(|e| bad(at, e.to_string()))?;
        if m.bitmap == 0 {
            // Emptied by deletes since the last merge, which drops it.
            w.empty.push(at);
            at = m.next;
            continue;
        }
        let mut keys: Vec<&[u8]> = Vec::with_capacity(slots as usize);
        for j in m.live() {
            let rec = pool.load_u64(leaf::slot(at, j))?;
            heap.mark(rec).map_err(|e| bad(rec, e.to_string()))?;
            let block = heap.block_size(rec)?;
            let (k, _) = record::lens_of(pool, rec, block).map_err(|e| bad(rec, e.to_string()))?;
            // SAFETY: recovery and the check run with the tree held
            // exclusively (or before it is shared).
            let key = unsafe { record::key(pool, rec, k)? };
            if m.fps[j as usize] != fingerprint(key) {
                return Err(bad(
                    rec,
                    format!("slot {j}'s fingerprint does not match its key"),
                ));
            }
            keys.push(key);
        }
        let prev_most = w.leaves.last().map(|(_, m, _)| &m[..]);
        let (least, most) = key_range(&mut keys, prev_most).map_err(|e| bad(at, e.into()))?;
        w.keys += keys.len() as u64;
        w.leaves.push((least.into(), most.into(), at));
        at = m.next;
    }
    Ok(w)
}

/// The buffer tree the log's entries make, with the records they
/// superseded.
fn replay(pool: &Pool, heap: &Chunks, entries: &[log::Entry]) -> Result<Replayed> {
    let mut buffer = Buffer::default();
    let mut superseded = Vec::new();
    for e in entries {
        let (k, v) = record::lens_of(pool, e.rec, heap.block_size(e.rec)?)?;
        // SAFETY: as in `walk`.
        let key = unsafe { record::key(pool, e.rec, k)? };
        // A delete names the record of the key's buffered put.
        if e.tomb && !buffer.get(key).is_some_and(|p| !p.tomb && p.rec == e.rec) {
            return Err(Error::corrupt(
                e.rec,
                "dptree: a delete in the log names no put of its key before it",
            ));
        }
        let p = Pending {
            rec: e.rec,
            tomb: e.tomb,
            value_len: if e.tomb { 0 } else { v as u32 },
        };
        if let Some(old) = buffer.insert(key, p).filter(|o: &Pending| !o.tomb) {
            superseded.push(old.rec);
        }
    }
    Ok((buffer, superseded))
}

/// Recovery (see the module doc).
pub(super) fn open(pool: Arc<Pool>, s: Settings) -> Result<DpTree> {
    let (sb, slots) = superblock::open(&pool, s.leaf_slots.unwrap_or(leaf::DEFAULT_SLOTS))?;
    if let Some(w) = s.leaf_slots.filter(|&w| w != slots) {
        return Err(Error::InvalidArgument(format!(
            "dptree.leaf_slots={w}, but this pool was created with {slots}; it is fixed at creation"
        )));
    }
    let mut heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
    let gv = pool.load_u64(sb + superblock::GV)?;
    let walked = walk(&pool, &mut heap, sb, gv, slots, false)?;
    let checked = !pool.fault(Fault::DptreeLogUnchecked);
    let logged = log::walk(&pool, &mut heap, sb, gv, checked)?;
    let (buffer, superseded) = replay(&pool, &heap, &logged.entries)?;
    if logged.torn {
        // The entry whose record is not whole: made invalid, so that the
        // log in PM ends where the walk ended it.
        logged.log.clear_end(&pool, gv & 1)?;
        pool.fence();
    }
    heap.settle(&pool)?;
    let mut leaves = Inner::default();
    for (i, (least, _, l)) in walked.leaves.iter().cloned().enumerate() {
        let bound = if i == 0 { Box::default() } else { least };
        leaves.insert(bound, l);
    }
    let mut t = DpTree {
        pool,
        sb,
        slots,
        heap,
        gv,
        opens: 0,
        leaves,
        base_keys: walked.keys,
        buffer: Buffer::default(),
        bloom: Bloom::new(0),
        log: logged.log,
        superseded,
        empty_leaves: walked.empty,
        count: 0,
        merge_ratio: s.merge_ratio,
        merge_min: s.merge_min,
        threshold: 0,
        merges: 0,
    };
    t.count = t.count_with(&buffer)?;
    t.buffer = buffer;
    t.new_epoch();
    // This open's number, durable before its first record.
    let opens_at = t.sb + superblock::OPENS;
    t.opens = t.pool.load_u64(opens_at)?.wrapping_add(1);
    t.pool.store_u64(opens_at, t.opens)?;
    t.pool.flush(opens_at, 8);
    t.pool.fence();
    // Room for a delete of every buffered put, which a crash in a merge's
    // flip can have cut (see `DpTree::delete`), where the pool has it.
    let puts = t.buffer.iter().filter(|(_, p)| !p.tomb).count() as u64;
    match t.log_room(puts) {
        Ok(()) | Err(Error::PoolFull { .. }) => {}
        Err(e) => return Err(e),
    }
    // The links of the pages taken, durable before open returns.
    t.pool.fence();
    Ok(t)
}

impl DpTree {
    /// Keys in the tree: the base tree's, with `buffer`'s writes applied.
    fn count_with(&self, buffer: &Buffer) -> Result<u64> {
        let mut n = self.base_keys as i64;
        for (k, p) in buffer.iter() {
            let in_base = self.base_find(k)?.is_some();
            n += i64::from(!p.tomb) - i64::from(in_base);
        }
        u64::try_from(n).map_err(|_| Error::CheckFailed("dptree: fewer than 0 keys".into()))
    }

    /// The structural check: both walks without repairs, then the DRAM
    /// state against them (the same leaves in the same order, each bound
    /// at or below its leaf's least key and above the previous leaf's
    /// keys; the buffer tree the log replays to; the key count) and the
    /// heap's blocks in use against the blocks reached.
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        let fail = |what: String| Err(Error::CheckFailed(format!("dptree: {what}")));
        let stored_gv = self.pool.load_u64(self.sb + superblock::GV)?;
        if stored_gv != self.gv {
            return fail(format!("gv is {stored_gv} in PM, {} in DRAM", self.gv));
        }
        let mut fresh = self.heap.unmarked();
        let w = walk(&self.pool, &mut fresh, self.sb, self.gv, self.slots, true)?;
        let logged = log::walk(&self.pool, &mut fresh, self.sb, self.gv, true)?;
        if logged.torn {
            return fail("the log ends at an entry whose record is not whole".into());
        }
        if let Err(what) = same_leaves(&w.leaves, &self.leaves) {
            return fail(what);
        }
        let mut emptied = self.empty_leaves.clone();
        emptied.sort_unstable();
        let mut empty = w.empty.clone();
        empty.sort_unstable();
        if empty != emptied {
            return fail(format!(
                "{} empty leaves in the list, {} kept in DRAM",
                w.empty.len(),
                self.empty_leaves.len()
            ));
        }
        if w.keys != self.base_keys {
            return fail(format!(
                "{} keys in the leaves, {} counted in the base tree",
                w.keys, self.base_keys
            ));
        }
        let (buffer, superseded) = replay(&self.pool, &fresh, &logged.entries)?;
        if buffer != self.buffer {
            return fail(format!(
                "the log replays to {} buffered writes, not the {} in DRAM",
                buffer.len(),
                self.buffer.len()
            ));
        }
        let mut a = superseded;
        let mut b = self.superseded.clone();
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            return fail("the superseded records differ from the log's".into());
        }
        if self.log.pages() != logged.log.pages() {
            return fail("the log's pages differ from the list in PM".into());
        }
        let count = self.count_with(&self.buffer)?;
        if count != self.count {
            return fail(format!("{count} keys in the tree, {} counted", self.count));
        }
        self.heap.check_report(
            &fresh,
            "dptree",
            "the leaf list or the log",
            self.sb,
            self.count,
        )
    }
}

#[cfg(test)]
pub(super) fn log_of(t: &DpTree) -> &log::Log {
    &t.log
}
