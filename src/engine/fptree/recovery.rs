//! Recovery at open, and the structural check: one walk of the leaf list.
//!
//! FPTree rebuilds its DRAM inner nodes from the leaf list at every open
//! (Oukid et al. §4.5); so does this one, and the same walk marks every
//! block it reaches in the heap (a block is in use exactly when reached),
//! repairs what a crash can leave, and checks the rest. Without `fix` (the
//! check) the repairs are errors, because between operations neither case
//! exists.
//!
//! | found | left by a crash in | fix | persist order |
//! |---|---|---|---|
//! | a leaf whose live slots hold records the next leaf's live slots also hold, at the same slots | a split, after `L.next = N` and before `L`'s new bitmap | store `L.bitmap & !N.bitmap` (the split's own last store) | store, flush; one fence after the walk |
//! | an empty leaf | a delete, after its commit and before the leaf's unlinking | store its `next` in its predecessor's `next` (or `head`) | store, flush; one fence after the walk |
//!
//! The repairs are stored only after the whole walk found no damage, and
//! fenced before the heap is settled: a chunk whose blocks are all
//! unreached goes back to the substrate then, and a repair not yet
//! durable could, after another crash, lead the walk into it.
//!
//! Anything else is damage, refused with nothing written: a leaf list with
//! a cycle, a pointer to no block or to a block reached twice, bits past a
//! leaf's slots, a record whose lengths do not fit its block or whose key
//! does not match its fingerprint, a key twice, keys out of order across
//! leaves, an empty "leaf" with no trace of the delete that emptied it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::inner::Inner;
use super::leaf::{self, fingerprint, Header};
use super::{record, superblock, FpTree};
use crate::engine::radix::chunks::Chunks;
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};
use crate::pm::Pool;

/// A leaf the walk reached: its least key, its greatest key, its offset.
pub(crate) type Reached = (Box<[u8]>, Box<[u8]>, u64);

/// What the walk found.
struct Walked {
    /// The leaves, in list order.
    leaves: Vec<Reached>,
    keys: u64,
}

/// Walks the leaf list of the tree whose superblock is `sb`, marking what
/// it reaches in `heap`; repairs (see the module doc) if `fix`.
fn walk(pool: &Pool, heap: &mut Chunks, sb: u64, slots: u32, fix: bool) -> Result<Walked> {
    let bad = |off: u64, what: String| -> Error {
        if fix {
            Error::corrupt(off, format!("fptree: {what}"))
        } else {
            Error::CheckFailed(format!("fptree: {what} (at {off:#x})"))
        }
    };
    let mut w = Walked {
        leaves: Vec::new(),
        keys: 0,
    };
    let mut pred = sb + superblock::HEAD;
    let mut at = pool.load_u64(pred)?;
    let mut visited = HashSet::new();
    // The repairs, as the words to store (a later store to one word
    // replaces an earlier one), made only once the whole walk has found
    // no damage: a damaged pool is refused with nothing written.
    let mut repairs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut found: Vec<Case> = Vec::new();
    let reach = Reach {
        slots,
        node: "leaf",
        fix,
        case: Case::FptreeSplitFinished,
    };
    while at != 0 {
        let h = reach.read(pool, heap, at, &mut visited, &mut repairs, &mut found, &bad)?;
        if h.bitmap == 0 {
            if !fix {
                return Err(bad(at, "an empty leaf is in the leaf list".into()));
            }
            if !deleted_key_left(pool, heap, at, &h, slots) {
                return Err(bad(
                    at,
                    "the leaf list names a block with no live slot and no trace of a \
                     deleted key (not a leaf that a crash left empty)"
                        .into(),
                ));
            }
            found.push(Case::FptreeEmptyLeafUnlinked);
            repairs.insert(pred, h.next);
            at = h.next;
            continue;
        }
        heap.mark(at).map_err(|e| bad(at, e.to_string()))?;
        // The next leaf's first line and this leaf's records, all at once:
        // the walk then waits for one miss per leaf and per batch of
        // records, not one per record (docs/design.md §13, "Recovery").
        pool.words().prefetch(h.next);
        h.prefetch_records(pool, at);
        let mut keys: Vec<&[u8]> = Vec::with_capacity(slots as usize);
        for j in h.live() {
            let rec = pool.load_u64(leaf::slot(at, j))?;
            heap.mark(rec).map_err(|e| bad(rec, e.to_string()))?;
            let block = heap.block_size(rec)?;
            let (k, _) =
                record::read_lens(pool, rec, block).map_err(|e| bad(rec, e.to_string()))?;
            // SAFETY: recovery and the check run with the tree held
            // exclusively (or before it is shared).
            let key = unsafe { record::key(pool, rec, k)? };
            if h.fps[j as usize] != fingerprint(key) {
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
        pred = at + leaf::NEXT;
        at = h.next;
    }
    for (&off, &value) in &repairs {
        pool.store_u64(off, value)?;
        pool.flush(off, 8);
    }
    if !repairs.is_empty() {
        pool.fence();
    }
    for c in found {
        cases::record(c);
    }
    Ok(w)
}

/// The DRAM map against the leaves a walk reached (least key, greatest
/// key, offset, in list order): the same leaves in the same order, each
/// bound at or below its leaf's least key and above the previous leaf's
/// keys, the first bound empty. What differs, if anything.
pub(crate) fn same_leaves(reached: &[Reached], map: &Inner) -> std::result::Result<(), String> {
    if reached.len() != map.len() {
        return Err(format!(
            "{} leaves in the list, {} in the DRAM map",
            reached.len(),
            map.len()
        ));
    }
    for (i, ((least, _, l), (bound, m))) in reached.iter().zip(map.iter()).enumerate() {
        if *l != m {
            return Err(format!(
                "leaf {i} is {l:#x} in the list, {m:#x} in the DRAM map"
            ));
        }
        let above_prev = i == 0 || &reached[i - 1].1[..] < bound;
        if (i == 0) != bound.is_empty() || !above_prev || bound > &least[..] {
            return Err(format!(
                "leaf {i}'s bound in the DRAM map does not fit its keys"
            ));
        }
    }
    Ok(())
}

/// Sorts the keys of a leaf (at least one) and checks them: no key twice,
/// and all above `prev_most`, the greatest key of the leaf before, if any.
/// Returns the least and the greatest key, or what is wrong.
pub(crate) fn key_range<'k>(
    keys: &mut [&'k [u8]],
    prev_most: Option<&[u8]>,
) -> std::result::Result<(&'k [u8], &'k [u8]), &'static str> {
    keys.sort_unstable();
    if keys.windows(2).any(|p| p[0] == p[1]) {
        return Err("a leaf holds one key twice");
    }
    let (least, most) = (keys[0], keys[keys.len() - 1]);
    if prev_most.is_some_and(|p| least <= p) {
        return Err("a leaf's keys do not all follow the previous leaf's");
    }
    Ok((least, most))
}

/// How a leaf-list walk reads each leaf ([`Reach::read`]): `fptree`'s and
/// `art-bplus`'s, whose NVNodes have `fptree`'s leaf layout.
pub(crate) struct Reach {
    /// Slots per leaf.
    pub slots: u32,
    /// What the engine calls a leaf, for messages.
    pub node: &'static str,
    /// Repair (recovery) rather than report (the check).
    pub fix: bool,
    /// The case a finished torn split counts as.
    pub case: Case,
}

impl Reach {
    /// Reads the header of leaf `at`, which the list reached, after the
    /// checks every walk makes (no cycle, a block large enough, no bit
    /// past the slots) and finishes a torn split with the next leaf: the
    /// bitmap returned is the split's last store, which goes into
    /// `repairs` (with the case into `found`); without `fix` a torn split
    /// is an error.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &self,
        pool: &Pool,
        heap: &Chunks,
        at: u64,
        visited: &mut HashSet<u64>,
        repairs: &mut BTreeMap<u64, u64>,
        found: &mut Vec<Case>,
        bad: &dyn Fn(u64, String) -> Error,
    ) -> Result<Header> {
        let (slots, node) = (self.slots, self.node);
        if !visited.insert(at) {
            return Err(bad(at, "the leaf list has a cycle".into()));
        }
        if heap.block_size(at).map_err(|e| bad(at, e.to_string()))? < leaf::size(slots) {
            return Err(bad(
                at,
                format!("the leaf list names a block smaller than a {node}"),
            ));
        }
        let mut h = Header::read(pool, at, slots)?;
        if h.bitmap >> slots != 0 {
            return Err(bad(
                at,
                format!(
                    "a {node}'s bitmap {:#x} has bits past its {slots} slots",
                    h.bitmap
                ),
            ));
        }
        if visited.contains(&h.next) {
            return Err(bad(at, "the leaf list has a cycle".into()));
        }
        if h.next != 0 {
            if let Some(next_bits) = torn_split(pool, heap, at, &h, slots, bad)? {
                if !self.fix {
                    return Err(bad(
                        at,
                        format!("a {node} shares its records with the next one (a torn split)"),
                    ));
                }
                found.push(self.case);
                h.bitmap &= !next_bits;
                repairs.insert(at + leaf::BITMAP, h.bitmap);
            }
        }
        Ok(h)
    }
}

/// If leaf `l` (first line `h`) and the next one are the two halves of a
/// torn split, the next leaf's bitmap; `None` if they share no record.
fn torn_split(
    pool: &Pool,
    heap: &Chunks,
    l: u64,
    h: &Header,
    slots: u32,
    bad: &dyn Fn(u64, String) -> Error,
) -> Result<Option<u64>> {
    let n = h.next;
    if !heap.block_size(n).is_ok_and(|s| s >= leaf::size(slots)) {
        return Ok(None); // The walk reports it when it gets there.
    }
    let next_bits = pool.load_u64(n + leaf::BITMAP)?;
    let mut shared = 0u64;
    let mut b = h.bitmap & next_bits;
    while b != 0 {
        let j = b.trailing_zeros();
        b &= b - 1;
        if pool.load_u64(leaf::slot(l, j))? == pool.load_u64(leaf::slot(n, j))? {
            shared |= 1 << j;
        }
    }
    if shared == 0 {
        return Ok(None);
    }
    // A split runs on a full leaf and moves `slots - slots / 2` keys: in
    // its torn state the old leaf is still full and the new one holds
    // exactly those, all shared. Anything else (a stale copy of a leaf
    // written over its successor, say) is damage, and would otherwise
    // empty the leaf and drop the successor's own keys.
    let full = (1u64 << slots) - 1;
    if shared != next_bits || h.bitmap != full || next_bits.count_ones() != slots - slots / 2 {
        return Err(bad(
            l,
            "a leaf shares records with the next one, but not as a split leaves them".into(),
        ));
    }
    Ok(Some(next_bits))
}

/// Whether the empty leaf `l` (first line `h`) shows the trace of the
/// delete that emptied it: a slot that still points to a record whose
/// key matches the slot's fingerprint. A delete clears its bit, unlinks
/// the leaf, and only then gives the record back to the heap, so when a
/// crash leaves the leaf in the list the record is still there as it
/// was. A block that never was a leaf, such as a zero block a damaged
/// `next` points to, has none, and is refused instead of ending the list
/// there. (A leaf unlinked and freed before keeps its old slots: a
/// damaged `next` that names one is not told apart, docs/design.md §13.)
fn deleted_key_left(pool: &Pool, heap: &Chunks, l: u64, h: &Header, slots: u32) -> bool {
    (0..slots).any(|j| {
        let Ok(rec) = pool.load_u64(leaf::slot(l, j)) else {
            return false;
        };
        let Ok(block) = heap.block_size(rec) else {
            return false;
        };
        let Ok((k, _)) = record::read_lens(pool, rec, block) else {
            return false;
        };
        // SAFETY: recovery runs before the tree is shared.
        unsafe { record::key(pool, rec, k) }.is_ok_and(|key| fingerprint(key) == h.fps[j as usize])
    })
}

/// Recovery (see the module doc).
pub(super) fn open(pool: Arc<Pool>, want: Option<u32>) -> Result<FpTree> {
    let (sb, slots) = superblock::open(&pool, want.unwrap_or(leaf::DEFAULT_SLOTS))?;
    if let Some(w) = want.filter(|&w| w != slots) {
        return Err(Error::InvalidArgument(format!(
            "fptree.leaf_slots={w}, but this pool was created with {slots}; it is fixed at creation"
        )));
    }
    let mut heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
    let walked = walk(&pool, &mut heap, sb, slots, true)?;
    heap.settle(&pool)?;
    let mut leaves = Inner::default();
    for (i, (least, _, l)) in walked.leaves.into_iter().enumerate() {
        let bound = if i == 0 { Box::default() } else { least };
        leaves.insert(bound, l);
    }
    Ok(FpTree {
        pool,
        sb,
        slots,
        heap,
        leaves,
        count: walked.keys,
    })
}

impl FpTree {
    /// The structural check: the walk without repairs, then the DRAM map
    /// against it (the same leaves in the same order, each bound at or
    /// below its leaf's least key and above the previous leaf's keys), the
    /// key count, and the heap's blocks in use against the blocks reached.
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        let mut fresh = self.heap.unmarked();
        let w = walk(&self.pool, &mut fresh, self.sb, self.slots, false)?;
        let fail = |what: String| Err(Error::CheckFailed(format!("fptree: {what}")));
        if let Err(what) = same_leaves(&w.leaves, &self.leaves) {
            return fail(what);
        }
        if self.leaves.is_empty() != (self.count == 0) {
            return fail(format!(
                "{} keys counted in {} leaves",
                self.count,
                self.leaves.len()
            ));
        }
        if w.keys != self.count {
            return fail(format!(
                "{} keys in the leaves, {} counted",
                w.keys, self.count
            ));
        }
        self.heap
            .check_report(&fresh, "fptree", "the leaf list", self.sb, w.keys)
    }
}
