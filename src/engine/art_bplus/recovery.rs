//! Recovery at open, and the structural check: one walk of the leaf list.
//!
//! The paper rebuilds nothing: its ART is in PM, "checked and repaired"
//! from the data layer at recovery (§2.2(2)), with no algorithm given.
//! Here the upper layer is DRAM only, so recovery rebuilds it from the leaf
//! list at every open; the same walk marks every block it reaches in the
//! heap (a block is in use exactly when reached), repairs what a crash can
//! leave, and checks the rest. Without `fix` (the check) the repair is an
//! error, because between operations its case does not exist.
//!
//! | found | left by a crash in | fix | persist order |
//! |---|---|---|---|
//! | an NVNode whose live slots hold records the next NVNode's live slots also hold, at the same slots | a split, after `L.next = N` and before `L`'s new bitmap | store `L.bitmap & !N.bitmap` (the split's own last store) | store, flush; one fence after the walk |
//!
//! The repairs are stored only after the whole walk found no damage, and
//! fenced before the heap is settled: a chunk whose blocks are all
//! unreached goes back to the substrate then, and a repair not yet durable
//! could, after another crash, lead the walk into it.
//!
//! Anything else is damage, refused with nothing written: a leaf list with
//! a cycle, a pointer to no block or to a block reached twice, bits past an
//! NVNode's 24 slots, an empty NVNode (no operation leaves one in the list:
//! a delete of an NVNode's last key unlinks it), a record whose lengths do
//! not fit its block or whose last byte is not its slot's fragment, keys of
//! one NVNode with different prefixes, one fragment twice, NVNodes out of
//! order (prefixes in byte order, and the fragments of one prefix's
//! NVNodes ascending across them).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::upper::{Upper, NONE};
use super::{superblock, ArtBplus, SLOTS};
use crate::engine::fptree::leaf;
use crate::engine::fptree::record;
use crate::engine::fptree::recovery::Reach;
use crate::engine::radix::chunks::Chunks;
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};
use crate::pm::Pool;

/// An NVNode the walk reached.
pub(crate) struct Reached {
    pub leaf: u64,
    /// The prefix of its keys.
    pub prefix: Box<[u8]>,
    /// Its least and greatest fragments.
    pub least: u8,
    pub most: u8,
}

/// What the walk found.
struct Walked {
    /// The NVNodes, in list order.
    leaves: Vec<Reached>,
    keys: u64,
}

/// Walks the leaf list of the tree whose superblock is `sb`, marking what
/// it reaches in `heap`; repairs (see the module doc) if `fix`.
fn walk(pool: &Pool, heap: &mut Chunks, sb: u64, fix: bool) -> Result<Walked> {
    let bad = |off: u64, what: String| -> Error {
        if fix {
            Error::corrupt(off, format!("art-bplus: {what}"))
        } else {
            Error::CheckFailed(format!("art-bplus: {what} (at {off:#x})"))
        }
    };
    let mut w = Walked {
        leaves: Vec::new(),
        keys: 0,
    };
    let mut at = pool.load_u64(sb + superblock::HEAD)?;
    let mut visited = HashSet::new();
    // The repairs, as the words to store, made only once the whole walk
    // has found no damage: a damaged pool is refused with nothing written.
    let mut repairs: BTreeMap<u64, u64> = BTreeMap::new();
    let mut found: Vec<Case> = Vec::new();
    let mut keys: Vec<(u8, &[u8])> = Vec::with_capacity(SLOTS as usize);
    let reach = Reach {
        slots: SLOTS,
        node: "NVNode",
        fix,
        case: Case::ArtBplusSplitFinished,
    };
    while at != 0 {
        let h = reach.read(pool, heap, at, &mut visited, &mut repairs, &mut found, &bad)?;
        if h.bitmap == 0 {
            return Err(bad(
                at,
                "an empty NVNode is in the leaf list (no operation leaves one)".into(),
            ));
        }
        heap.mark(at).map_err(|e| bad(at, e.to_string()))?;
        // The next NVNode's first line and this one's records, all at once.
        pool.words().prefetch(h.next);
        h.prefetch_records(pool, at);
        keys.clear();
        for j in h.live() {
            let rec = pool.load_u64(leaf::slot(at, j))?;
            heap.mark(rec).map_err(|e| bad(rec, e.to_string()))?;
            let block = heap.block_size(rec)?;
            let (k, _) =
                record::read_lens(pool, rec, block).map_err(|e| bad(rec, e.to_string()))?;
            // SAFETY: recovery and the check run with the tree held
            // exclusively (or before it is shared).
            let key = unsafe { record::key(pool, rec, k)? };
            if key[k - 1] != h.fps[j as usize] {
                return Err(bad(
                    rec,
                    format!("slot {j}'s fragment is not its key's last byte"),
                ));
            }
            keys.push((key[k - 1], &key[..k - 1]));
        }
        keys.sort_unstable();
        let prefix = keys[0].1;
        if keys.iter().any(|&(_, p)| p != prefix) {
            return Err(bad(at, "an NVNode holds keys of different prefixes".into()));
        }
        if keys.windows(2).any(|p| p[0].0 == p[1].0) {
            return Err(bad(at, "an NVNode holds one key twice".into()));
        }
        let (least, most) = (keys[0].0, keys[keys.len() - 1].0);
        if let Some(prev) = w.leaves.last() {
            let after = match (*prev.prefix).cmp(prefix) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => prev.most < least,
                std::cmp::Ordering::Greater => false,
            };
            if !after {
                return Err(bad(
                    at,
                    "an NVNode's keys do not all follow the previous NVNode's".into(),
                ));
            }
        }
        w.keys += keys.len() as u64;
        w.leaves.push(Reached {
            leaf: at,
            prefix: prefix.into(),
            least,
            most,
        });
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

/// Recovery (see the module doc).
pub(super) fn open(pool: Arc<Pool>) -> Result<ArtBplus> {
    let sb = superblock::open(&pool)?;
    let mut heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
    let walked = walk(&pool, &mut heap, sb, true)?;
    heap.settle(&pool)?;
    let mut upper = Upper::new();
    let mut last = NONE;
    for r in walked.leaves {
        if last != NONE && upper.sub(last).prefix == r.prefix {
            upper.add_leaf(last, r.least, r.leaf);
        } else {
            last = upper.add_sub(&r.prefix, r.leaf, last, NONE);
        }
    }
    Ok(ArtBplus {
        pool,
        sb,
        heap,
        upper,
        count: walked.keys,
    })
}

/// The upper layer against the NVNodes a walk reached, in list order: the
/// same NVNodes in the same order, grouped by prefix into subtrees, each
/// low fragment at or below its NVNode's least fragment and above the
/// previous NVNode's greatest. What differs, if anything.
fn same_leaves(reached: &[Reached], upper: &Upper) -> std::result::Result<(), String> {
    let mut r = reached.iter();
    let mut subs = 0;
    for sub in upper.iter() {
        subs += 1;
        let mut prev_most = None;
        for (i, (low, l)) in sub.leaves().enumerate() {
            let Some(n) = r.next() else {
                return Err("the upper layer has more NVNodes than the leaf list".into());
            };
            if n.leaf != l || n.prefix != sub.prefix {
                return Err(format!(
                    "NVNode {l:#x} (leaf {i} of a subtree) is not where the leaf list has it"
                ));
            }
            if low > n.least || prev_most.is_some_and(|m| low <= m) {
                return Err(format!(
                    "NVNode {l:#x}'s low fragment does not fit its keys"
                ));
            }
            prev_most = Some(n.most);
        }
        // The leaf list's next NVNode must start another prefix.
        if r.as_slice().first().is_some_and(|n| n.prefix == sub.prefix) {
            return Err("a subtree of the upper layer lacks an NVNode of its prefix".into());
        }
    }
    if r.next().is_some() {
        return Err("the leaf list has NVNodes that the upper layer lacks".into());
    }
    if subs != upper.sub_count() {
        return Err(format!(
            "{subs} subtrees in prefix order, {} in the ART",
            upper.sub_count()
        ));
    }
    if reached.len() != upper.leaf_count() {
        return Err(format!(
            "{} NVNodes in the list, {} counted",
            reached.len(),
            upper.leaf_count()
        ));
    }
    Ok(())
}

impl ArtBplus {
    /// The structural check: the walk without repairs, then the upper layer
    /// against it, the key count, and the heap's blocks in use against the
    /// blocks reached.
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        let mut fresh = self.heap.unmarked();
        let w = walk(&self.pool, &mut fresh, self.sb, false)?;
        let fail = |what: String| Err(Error::CheckFailed(format!("art-bplus: {what}")));
        if let Err(what) = same_leaves(&w.leaves, &self.upper) {
            return fail(what);
        }
        for sub in self.upper.iter() {
            if self
                .upper
                .find(&sub.prefix)
                .map(|s| self.upper.sub(s).leaf0)
                != Some(sub.leaf0)
            {
                return fail("a subtree is not in the ART under its prefix".into());
            }
        }
        if self.upper.is_empty() != (self.count == 0) {
            return fail(format!(
                "{} keys counted in {} NVNodes",
                self.count,
                self.upper.leaf_count()
            ));
        }
        if w.keys != self.count {
            return fail(format!(
                "{} keys in the NVNodes, {} counted",
                w.keys, self.count
            ));
        }
        self.heap
            .check_report(&fresh, "art-bplus", "the leaf list", self.sb, w.keys)
    }
}
