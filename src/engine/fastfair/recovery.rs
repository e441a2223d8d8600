//! Recovery at open, and the structural check: one walk of every level.
//!
//! FAST&FAIR needs no recovery for its readers: they skip the trace of a
//! shift in flight and follow a sibling pointer past a split whose parent
//! entry is missing (the paper's "tolerating read inconsistency"). Here
//! the heap's map of blocks in use is rebuilt by reachability
//! ([`crate::engine::radix::chunks`]), which needs a walk of the tree at
//! each open anyway; the walk repairs what a crash left, so that nothing
//! between operations has to tolerate it. Without `fix` (the check) the
//! repairs are errors, because between operations none of these exists.
//!
//! | found | left by a crash in | fix | persist order |
//! |---|---|---|---|
//! | an entry whose pointer is the one before it (a trace) | a FAST shift (insert, delete) or this repair | [`node::shift_left`] over it | stores in order, a fence per line |
//! | a node whose entries reach its sibling's lower bound, and are exactly the sibling's (an inner node's first of them its `leftmost`) | a split, after `N.sibling = S` and before `N`'s upper half was cut | null the pointer of the first such entry (the split's own cut) | store, flush, after the shifts are finished; one fence after all the cuts |
//! | a node in a level's sibling chain that no entry of the level above points to | a split, before its separator reached the parent | the separator inserted into the parent, as the split would have (a FAST insert, which may split the parent; a new root for the top level) | as an insert's, after the heap is rebuilt |
//!
//! A merge ([`FastFair::merge`]) passes through the same two states on its
//! way (its append leaves the left node as an uncut split, its parent's
//! delete the right node out of its parent), so the same repairs undo a
//! merge a crash cut short before its commit.
//!
//! Only one operation is in flight at a crash, so a node holds at most one
//! trace; a cascade of splits can leave one orphan per level, right after
//! the node it split from, linked from the top level down. More is
//! damage. The blocks those repairs take were reserved by the
//! split the crash cut short and are free again after it, so a full pool
//! has them.
//!
//! Anything else is damage, refused with nothing written: a pointer to no
//! node-sized block, a block reached twice (a cycle), a level out of
//! place, a node without a terminating null pointer, an entry whose head
//! is not its key's, keys out of order in a node or across a level, a
//! lower bound that does not fit, an inner node whose leftmost child does
//! not share its lower bound, a child missing from its level.

use std::sync::Arc;

use super::node::{self, Header, Raw};
use super::{record, superblock, FastFair};
use crate::engine::fptree::inner::head;
use crate::engine::radix::chunks::Chunks;
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};
use crate::pm::Pool;

/// What the walk found.
#[derive(Default)]
struct Walked {
    keys: u64,
    /// Shifts to finish: the node, its entries as found, the trace.
    shifts: Vec<(u64, Raw, u32)>,
    /// Upper halves to cut: the node, the first entry to drop.
    cuts: Vec<(u64, u32)>,
    /// Nodes missing from their parent: level, node; from the top level
    /// down, in chain order.
    orphans: Vec<(u64, u64)>,
}

/// The key of the record `rec` (a bound's if `bound`: no value), checked
/// against its block.
fn checked_key<'p>(pool: &'p Pool, heap: &Chunks, rec: u64, bound: bool) -> Result<&'p [u8]> {
    let block = heap.block_size(rec)?;
    let (k, v) = record::read_lens(pool, rec, block)?;
    if bound && v != 0 {
        return Err(Error::corrupt(
            rec,
            "fastfair: a lower bound's record has a value",
        ));
    }
    // SAFETY: recovery and the check run with the tree held exclusively
    // (or before it is shared).
    unsafe { record::key(pool, rec, k) }
}

/// Walks the tree whose superblock is `sb`, marking what it reaches in
/// `heap`; collects the repairs (see the module doc) if `fix`, else
/// refuses them.
fn walk(pool: &Pool, heap: &mut Chunks, sb: u64, slots: u32, fix: bool) -> Result<Walked> {
    let size = node::size(slots);
    let bad = |off: u64, what: &str| -> Error {
        if fix {
            Error::corrupt(off, format!("fastfair: {what}"))
        } else {
            Error::CheckFailed(format!("fastfair: {what} (at {off:#x})"))
        }
    };
    let mut w = Walked::default();
    let root = pool.load_u64(sb + superblock::ROOT)?;
    if root == 0 {
        return Ok(w);
    }
    let is_node = |heap: &Chunks, n: u64| heap.block_size(n).is_ok_and(|s| s >= size);
    if !is_node(heap, root) {
        return Err(bad(root, "the root is not a node"));
    }
    let top = Header::read(pool, root)?.level;
    if top > node::MAX_LEVEL {
        return Err(bad(root, "the root's level is past any tree's"));
    }
    // The children that the level above points to, in order.
    let mut expected: Vec<u64> = vec![root];
    for level in (0..=top).rev() {
        let mut next_expected = Vec::new();
        let mut matched = 0usize;
        // Whether the node before was one its parent points to, and
        // whether this level has an orphan already: a crash leaves at most
        // one per level, right after the node it split from.
        let mut prev_matched = false;
        let mut orphaned = false;
        let mut prev_last: Option<&[u8]> = None;
        let mut prev_low: Option<&[u8]> = None;
        let mut at = expected[0];
        let mut nth = 0usize;
        while at != 0 {
            if !is_node(heap, at) {
                return Err(bad(at, "a level's chain names a block that is not a node"));
            }
            heap.mark(at)
                .map_err(|_| bad(at, "a node is reached twice"))?;
            let h = Header::read(pool, at)?;
            if h.level != level {
                return Err(bad(at, "a node's level does not fit its place"));
            }
            if (level == 0) != (h.leftmost == 0) {
                return Err(bad(at, "a node's leftmost child does not fit its level"));
            }
            let low = if nth == 0 {
                if h.low != 0 {
                    return Err(bad(at, "the first node of a level has a lower bound"));
                }
                None
            } else {
                if h.low == 0 {
                    return Err(bad(
                        at,
                        "a node after the first of its level has no lower bound",
                    ));
                }
                heap.mark(h.low)
                    .map_err(|_| bad(h.low, "a lower bound is reached twice"))?;
                let k =
                    checked_key(pool, heap, h.low, true).map_err(|e| bad(h.low, &e.to_string()))?;
                if prev_low.is_some_and(|p| k <= p) || prev_last.is_some_and(|p| k <= p) {
                    return Err(bad(
                        at,
                        "a node's lower bound is not above the node before it",
                    ));
                }
                Some(k)
            };
            let was_matched = prev_matched;
            prev_matched = matched < expected.len() && expected[matched] == at;
            if prev_matched {
                matched += 1;
            } else if nth == 0 {
                return Err(bad(
                    at,
                    "a level does not start at the first child of the level above",
                ));
            } else if !fix {
                return Err(bad(
                    at,
                    "a node is in its level's chain but not in its parent",
                ));
            } else if orphaned || !was_matched {
                return Err(bad(
                    at,
                    "nodes are in their level's chain but not in their parent, more than one \
                     split can leave",
                ));
            } else {
                orphaned = true;
                w.orphans.push((level, at));
            }
            let raw = Raw::read(pool, at, slots)?;
            if raw.len() >= slots {
                return Err(bad(at, "a node's entries have no terminating null pointer"));
            }
            let before = h.before_first();
            let mut view = raw.clone();
            if let Some(t) = raw.first_trace(before) {
                if !fix {
                    return Err(bad(at, "a node holds the trace of a shift"));
                }
                view.heads.remove(t as usize);
                view.ptrs.remove(t as usize);
                if view.first_trace(before).is_some() {
                    return Err(bad(at, "a node holds more than one trace of a shift"));
                }
                w.shifts.push((at, raw, t));
            }
            // The records (or children) at once, and the next node: the
            // walk waits for one batch of misses per node.
            pool.words().prefetch(h.sibling);
            for &p in &view.ptrs {
                pool.words().prefetch(p);
            }
            let mut keys: Vec<&[u8]> = Vec::with_capacity(view.ptrs.len());
            for (&eh, &p) in view.heads.iter().zip(&view.ptrs) {
                // (A leaf's records are marked once the upper half of a
                // torn split, which the next leaf holds too, is cut off.)
                let k = if level == 0 {
                    checked_key(pool, heap, p, false).map_err(|e| bad(p, &e.to_string()))?
                } else {
                    if !is_node(heap, p) {
                        return Err(bad(p, "an inner entry names a block that is not a node"));
                    }
                    let low = pool.load_u64(p + node::LOW)?;
                    if low == 0 {
                        return Err(bad(p, "an inner entry's child has no lower bound"));
                    }
                    checked_key(pool, heap, low, true).map_err(|e| bad(low, &e.to_string()))?
                };
                if eh != head(k) {
                    return Err(bad(at, "an entry's head is not its key's"));
                }
                if keys.last().is_some_and(|&l| l >= k) {
                    return Err(bad(at, "a node's keys are out of order"));
                }
                keys.push(k);
            }
            if level > 0 {
                if !is_node(heap, h.leftmost) {
                    return Err(bad(at, "an inner node's leftmost child is not a node"));
                }
                let lm = pool.load_u64(h.leftmost + node::LOW)?;
                let lm_key = if lm == 0 {
                    None
                } else {
                    Some(checked_key(pool, heap, lm, true).map_err(|e| bad(lm, &e.to_string()))?)
                };
                if lm_key != low {
                    return Err(bad(
                        at,
                        "an inner node's leftmost child does not share its lower bound",
                    ));
                }
            }
            // A split's upper half not yet cut: entries at or above the
            // sibling's lower bound, all copied there. The sibling is then
            // as the split wrote it (the inserts into a half come after
            // the cut): exactly those entries, an inner node's first of
            // them as its leftmost. Anything else is damage, and cutting
            // it would drop keys.
            if h.sibling != 0 && is_node(heap, h.sibling) {
                let sl = pool.load_u64(h.sibling + node::LOW)?;
                if let Ok(sk) = checked_key(pool, heap, sl, true) {
                    if let Some(cut) = keys.iter().position(|&k| k >= sk) {
                        if !fix {
                            return Err(bad(
                                at,
                                "a node's entries reach its sibling's lower bound",
                            ));
                        }
                        let s = Raw::read(pool, h.sibling, slots)?;
                        let sh = Header::read(pool, h.sibling)?;
                        let upper = if level == 0 {
                            cut
                        } else {
                            if view.ptrs[cut] != sh.leftmost {
                                return Err(bad(
                                    at,
                                    "a node's entries reach its sibling's lower bound, but the \
                                     sibling does not start with them",
                                ));
                            }
                            cut + 1
                        };
                        if s.ptrs[..] != view.ptrs[upper..] || s.heads[..] != view.heads[upper..] {
                            return Err(bad(
                                at,
                                "a node's entries reach its sibling's lower bound, but are not \
                                 the sibling's (not a torn split)",
                            ));
                        }
                        w.cuts.push((at, cut as u32));
                        keys.truncate(cut);
                        view.heads.truncate(cut);
                        view.ptrs.truncate(cut);
                    }
                }
            }
            if let (Some(&first), Some(l)) = (keys.first(), low) {
                if first < l || (level > 0 && first == l) {
                    return Err(bad(at, "a node's keys are below its lower bound"));
                }
            }
            if let (Some(&first), Some(p)) = (keys.first(), prev_last) {
                if first <= p {
                    return Err(bad(at, "a level's keys are out of order across nodes"));
                }
            }
            if level == 0 {
                for &p in &view.ptrs {
                    heap.mark(p)
                        .map_err(|_| bad(p, "a record is reached twice"))?;
                }
                w.keys += keys.len() as u64;
            } else {
                next_expected.push(h.leftmost);
                next_expected.extend_from_slice(&view.ptrs);
            }
            if let Some(&l) = keys.last() {
                prev_last = Some(l);
            }
            prev_low = low.or(prev_low);
            at = h.sibling;
            nth += 1;
        }
        if matched != expected.len() {
            return Err(bad(
                expected[matched.min(expected.len() - 1)],
                "a child is not in its level's chain",
            ));
        }
        expected = next_expected;
    }
    Ok(w)
}

/// Recovery (see the module doc).
pub(super) fn open(pool: Arc<Pool>, want: Option<u32>) -> Result<FastFair> {
    let (sb, slots) = superblock::open(&pool, want.unwrap_or(node::DEFAULT_SLOTS))?;
    if let Some(w) = want.filter(|&w| w != slots) {
        return Err(Error::InvalidArgument(format!(
            "fastfair.node_bytes={}, but this pool was created with {}; it is fixed at creation",
            node::size(w),
            node::size(slots)
        )));
    }
    let mut heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
    let w = walk(&pool, &mut heap, sb, slots, true)?;
    for (n, raw, t) in &w.shifts {
        let mut o = node::Ordered::new(&pool);
        node::shift_left(&mut o, *n, raw, *t)?;
        o.finish();
        cases::record(Case::FastfairShiftFinished);
    }
    for &(n, cut) in &w.cuts {
        pool.store_u64(node::ptr_at(n, cut), 0)?;
        pool.flush(node::ptr_at(n, cut), 8);
        cases::record(Case::FastfairSplitCut);
    }
    if !w.cuts.is_empty() {
        pool.fence();
    }
    heap.settle(&pool)?;
    let root = pool.load_u64(sb + superblock::ROOT)?;
    let mut t = FastFair {
        pool,
        sb,
        slots,
        heap,
        root,
        count: w.keys,
    };
    for &(level, n) in &w.orphans {
        t.link_orphan(n, level)?;
        cases::record(Case::FastfairSeparatorLinked);
    }
    if t.root != 0 {
        t.collapse_root()?;
    }
    Ok(t)
}

impl FastFair {
    /// The structural check: the walk without repairs, then the key count
    /// and the heap's blocks in use against the blocks reached.
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        let mut fresh = self.heap.unmarked();
        let w = walk(&self.pool, &mut fresh, self.sb, self.slots, false)?;
        let fail = |what: String| Err(Error::CheckFailed(format!("fastfair: {what}")));
        if w.keys != self.count {
            return fail(format!(
                "{} keys in the leaves, {} counted",
                w.keys, self.count
            ));
        }
        if self.pool.load_u64(self.sb + superblock::ROOT)? != self.root {
            return fail("the root in DRAM is not the superblock's".into());
        }
        self.heap
            .check_report(&fresh, "fastfair", "the tree", self.sb, w.keys)
    }
}
