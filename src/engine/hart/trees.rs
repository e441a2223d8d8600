//! The DRAM index from hash keys to ARTs (§III-A.1: "a hash table in DRAM
//! points to one ART per hash key"), in two forms.
//!
//! - **Direct** (`k_h` ≤ 2, the paper's default of 2): one slot per possible
//!   hash key, in the keys' lexicographic order (65,793 slots of one cache
//!   line for `k_h = 2`: the empty key, 256 one-byte keys, 65,536 two-byte
//!   keys), each holding its ART behind its own reader-writer lock, and a
//!   bitmap of the non-empty slots for ordered scans. A lookup is an index
//!   computation and one cache line: no hashing, no shard lock, no
//!   reference count, and no lock shared between ARTs. The paper's hash
//!   table with `k_h = 2` is, in effect, this array. Slots are allocated
//!   in pages of 256 on first use, so a small index costs a few KiB, not
//!   4 MiB (and the crash simulator, which opens thousands of pools, does
//!   not pay for 65,793 slots each time).
//! - **Hashed** (`k_h` 3..=8): a sharded hash table of reference-counted
//!   ARTs, plus an ordered set of the hash keys for scans. An emptied ART is
//!   removed (Algorithm 5, lines 15-16) and marked dead, so that a writer
//!   that found it before the removal looks again.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::ops::{Bound, Deref};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::art::Art;
use super::points::{Points, Tables};
use super::superblock::STRIPES;
use super::LeafRef;

/// Shards of the hashed form.
const SHARDS: usize = 64;
const _: () = assert!(
    SHARDS.is_multiple_of(STRIPES),
    "a shard's hash keys share a stripe"
);

/// A hash key (the first `k_h` ≤ 8 bytes of a key, or the whole key if it
/// is shorter) inline, so that the index compares words instead of following
/// boxed slices. The derived order is the bytes' lexicographic order:
/// zero-padded bytes first, then the length (`"a" < "a\0" < "b"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct HashKey {
    bytes: [u8; 8],
    len: u8,
}

impl HashKey {
    pub(super) fn new(hk: &[u8]) -> Self {
        assert!(hk.len() <= 8, "hash keys are at most 8 bytes");
        // Shifts instead of `copy_from_slice`: a variable-length copy is a
        // `memcpy` call, the largest cost of a search's index step.
        let mut w = 0u64;
        for (i, &b) in hk.iter().take(8).enumerate() {
            w |= u64::from(b) << (8 * i);
        }
        HashKey {
            bytes: w.to_le_bytes(),
            len: hk.len() as u8,
        }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The hash. It must be stable across builds and machines, because in
    /// formats 3 and 4 (and with `hart.stripes=hash_key`) the stripe a key's
    /// leaves are in follows from it and is persistent (so not `DefaultHasher`,
    /// whose algorithm may change): the padded bytes and the length, mixed
    /// by splitmix64's finalizer.
    fn mixed(&self) -> u64 {
        let mut x = u64::from_le_bytes(self.bytes) ^ (u64::from(self.len) << 59);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Where the hash key's state lives.
    pub(super) fn route(&self) -> Route {
        let shard = (self.mixed() % SHARDS as u64) as usize;
        Route {
            shard,
            stripe: shard % STRIPES,
        }
    }
}

impl std::hash::Hash for HashKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.mixed());
    }
}

/// The hash table's hasher: a [`HashKey`] hashes itself
/// ([`HashKey::mixed`]), so this only passes the word on.
#[derive(Default)]
pub(super) struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `HashKey`; folds anything else in (FNV-1a).
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 ^= x;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where a hash key's state lives: its hash-table shard (hashed form) and
/// its stripe: the allocation stripe of its leaves in formats 3 and 4 (and
/// with `hart.stripes=hash_key`; persistent, see [`super::superblock`]), and
/// in every format the recovery worker that rebuilds its ART.
#[derive(Debug, Clone, Copy)]
pub(super) struct Route {
    shard: usize,
    pub(super) stripe: usize,
}

/// One ART and whether it has been removed from the hashed index.
#[derive(Default)]
pub(super) struct Tree {
    pub(super) art: Art<LeafRef>,
    /// The point index of the ART's leaves (empty with
    /// `hart.point_index=off`).
    pub(super) points: Points,
    pub(super) dead: bool,
}

type TreeCell = Arc<RwLock<Tree>>;

/// An ART found in the index.
pub(super) enum TreeRef<'a> {
    Slot(&'a RwLock<Tree>),
    Cell(TreeCell),
}

impl Deref for TreeRef<'_> {
    type Target = RwLock<Tree>;

    fn deref(&self) -> &RwLock<Tree> {
        match self {
            TreeRef::Slot(t) => t,
            TreeRef::Cell(t) => t,
        }
    }
}

/// A direct slot, alone in its cache line.
#[repr(align(64))]
#[derive(Default)]
struct Slot(RwLock<Tree>);

const _: () = assert!(
    std::mem::size_of::<Slot>() == 64,
    "a slot is one cache line"
);

/// Slots per page of the direct form.
const PAGE: usize = 256;

/// Hash keys of at most `k_h` ≤ 2 bytes.
pub(super) struct Direct {
    k_h: usize,
    /// `stride[d]`: slots taken by the hash keys that extend a given key of
    /// `d + 1` bytes, itself included (`strings_up_to(k_h - d - 1)`).
    stride: [usize; 2],
    /// Slot count.
    n: usize,
    /// Slot `i` and its root hint are in `pages[i / PAGE]`, at `i % PAGE`;
    /// a page is allocated when one of its hash keys first gets an ART.
    pages: Box<[OnceLock<Page>]>,
    /// Bit `i`: slot `i`'s ART is not empty (set and cleared under the
    /// slot's write lock; read without it by scans, which then lock).
    used: Box<[AtomicU64]>,
    /// The point indexes' tables (kept once retired where readers go
    /// without the lock, `hart.reads=optimistic`: [`Trees::read_unlocked`]).
    tables: Tables,
}

/// `PAGE` slots of the direct index and their root hints.
struct Page {
    slots: Box<[Slot; PAGE]>,
    /// `hints[j]`: slot `j`'s hints ([`SlotHints`]), stored under the
    /// slot's write lock, read without any lock by searches, which prefetch
    /// from them before they lock the slot. 16 bytes a slot (4 KiB a page,
    /// 1 MiB for all 65,793 slots of `k_h` = 2) stay cached where 64-byte
    /// slots (4.2 MiB) do not, so the slot line's miss and the root's (or
    /// the point index's) overlap instead of following one another
    /// (docs/design.md §7, "Root hints").
    hints: Box<[SlotHints; PAGE]>,
    /// `seqs[j]`: slot `j`'s sequence count for readers without its lock
    /// ([`PointCell`]).
    seqs: Box<[AtomicU64; PAGE]>,
}

/// The hints of one slot, in one aligned pair of words (never split over
/// two lines).
#[repr(align(16))]
#[derive(Default)]
struct SlotHints {
    /// The ART's [`Art::root_hint`], stored by every change that can move
    /// the root ([`Trees::note_root`]).
    root: AtomicU64,
    /// The point index's [`Points::word`], stored by every change that
    /// moves its table ([`Trees::note_points`]).
    table: AtomicU64,
}

/// What a reader of an ART's point index uses without the ART's lock
/// (docs/design.md §7, "Searches without the lock"): the index's table and
/// a sequence count. A writer that changes the index, or a leaf or value
/// that the index leads to, holds the ART's write lock and makes `seq` odd
/// for the change (`Writing`); a reader checks that `seq` was even and the
/// same before and after its probe, or takes the lock.
#[derive(Clone, Copy)]
pub(super) struct PointCell<'a> {
    pub(super) seq: &'a AtomicU64,
    /// The table's [`Points::word`], stored under the write lock by every
    /// change that moves the table ([`Trees::note_points`]); also what a
    /// writer prefetches its first entry from before it locks the ART.
    pub(super) table: &'a AtomicU64,
    /// The ART's root hint ([`Art::root_hint`]), for searches of an ART
    /// without a built point index.
    pub(super) root: &'a AtomicU64,
}

impl Page {
    /// The point index cell of slot `j` of this page.
    #[inline(always)]
    fn cell(&self, j: usize) -> PointCell<'_> {
        PointCell {
            seq: &self.seqs[j],
            table: &self.hints[j].table,
            root: &self.hints[j].root,
        }
    }
}

/// Hash keys of 3..=8 bytes.
pub(super) struct Hashed {
    shards: Vec<Shard>,
    prefixes: RwLock<BTreeSet<HashKey>>,
    /// The point indexes' tables (read under the ARTs' locks only).
    tables: Tables,
}

/// One shard of [`Hashed`].
type Shard = RwLock<HashMap<HashKey, TreeCell, BuildHasherDefault<WordHasher>>>;

impl Hashed {
    /// A shard's entries and its table's capacity, copied under its read
    /// lock, for walks that lock the ARTs: they must lock them after the
    /// shard is released, because a delete holds its ART's write lock while
    /// it takes the shard's (`Trees::retire`; the other order deadlocks).
    fn entries(shard: &Shard) -> (Vec<(HashKey, TreeCell)>, usize) {
        let shard = shard.read();
        let trees = shard.iter().map(|(hk, t)| (*hk, Arc::clone(t))).collect();
        (trees, shard.capacity())
    }
}

/// The index from hash keys to ARTs.
pub(super) enum Trees {
    Direct(Direct),
    Hashed(Hashed),
}

/// Keys of at most `d` bytes.
fn strings_up_to(d: usize) -> usize {
    (0..=d).map(|i| 1usize << (8 * i)).sum()
}

impl Direct {
    /// The slot of a hash key: its rank in lexicographic order among all
    /// strings of at most `k_h` bytes.
    fn index(&self, hk: &HashKey) -> usize {
        self.index_of(hk.as_slice())
    }

    /// [`Self::index`] of the hash key `hk` (at most `k_h` bytes) as bytes,
    /// without building a [`HashKey`] (a search's first step).
    #[inline]
    fn index_of(&self, hk: &[u8]) -> usize {
        match *hk {
            [] => 0,
            [a] => 1 + usize::from(a) * self.stride[0],
            [a, b, ..] => 2 + usize::from(a) * self.stride[0] + usize::from(b) * self.stride[1],
        }
    }

    /// The hash key of a slot (inverse of [`Self::index`]).
    fn key(&self, mut idx: usize) -> HashKey {
        let mut bytes = Vec::with_capacity(self.k_h);
        let mut depth = 0;
        while idx > 0 {
            idx -= 1;
            let sub = strings_up_to(self.k_h - depth - 1);
            bytes.push((idx / sub) as u8);
            idx %= sub;
            depth += 1;
        }
        HashKey::new(&bytes)
    }

    /// The page of slot `i`, if one of its hash keys ever had an ART.
    #[inline(always)]
    fn page(&self, i: usize) -> Option<&Page> {
        self.pages[i / PAGE].get()
    }

    /// Slot `i`, if its page exists.
    fn slot(&self, i: usize) -> Option<&RwLock<Tree>> {
        self.page(i).map(|p| &p.slots[i % PAGE].0)
    }

    /// Slot `i`, its page allocated if need be.
    fn slot_for_insert(&self, i: usize) -> &RwLock<Tree> {
        let page = self.pages[i / PAGE].get_or_init(|| Page {
            slots: Box::new(std::array::from_fn(|_| Slot::default())),
            hints: Box::new(std::array::from_fn(|_| SlotHints::default())),
            seqs: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
        });
        &page.slots[i % PAGE].0
    }

    /// Slot `i`'s root hint, if its page exists (else it has no ART).
    #[inline(always)]
    fn hint(&self, i: usize) -> Option<&AtomicU64> {
        self.page(i).map(|p| &p.hints[i % PAGE].root)
    }

    fn set_used(&self, i: usize, used: bool) {
        let bit = 1u64 << (i % 64);
        if used {
            self.used[i / 64].fetch_or(bit, Ordering::Relaxed);
        } else {
            self.used[i / 64].fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// The first used slot at or after `i`.
    fn next_used(&self, mut i: usize) -> Option<usize> {
        while i < self.n {
            let w = self.used[i / 64].load(Ordering::Relaxed) >> (i % 64);
            if w != 0 {
                let j = i + w.trailing_zeros() as usize;
                return (j < self.n).then_some(j);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }
}

impl Trees {
    /// An empty index for hash keys of `k_h` bytes.
    pub(super) fn new(k_h: usize) -> Trees {
        if k_h <= 2 {
            let n = strings_up_to(k_h);
            Trees::Direct(Direct {
                k_h,
                stride: [
                    strings_up_to(k_h.saturating_sub(1)),
                    strings_up_to(k_h.saturating_sub(2)),
                ],
                n,
                pages: (0..n.div_ceil(PAGE)).map(|_| OnceLock::new()).collect(),
                used: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
                tables: Tables::new(false),
            })
        } else {
            Trees::Hashed(Hashed {
                shards: (0..SHARDS)
                    .map(|_| RwLock::new(HashMap::default()))
                    .collect(),
                prefixes: RwLock::new(BTreeSet::new()),
                tables: Tables::new(false),
            })
        }
    }

    /// The ART of `hk`, if there may be one (the direct form always has a
    /// slot, possibly empty). The direct form does not hash `hk`.
    pub(super) fn find(&self, hk: &HashKey) -> Option<TreeRef<'_>> {
        match self {
            Trees::Direct(d) => d.slot(d.index(hk)).map(TreeRef::Slot),
            Trees::Hashed(h) => {
                let shard = hk.route().shard;
                h.shards[shard].read().get(hk).cloned().map(TreeRef::Cell)
            }
        }
    }

    /// [`Self::find`] of the hash key `hk` as bytes (at most `k_h` of
    /// them): the direct form computes the slot from the bytes alone.
    #[inline]
    pub(super) fn find_bytes(&self, hk: &[u8]) -> Option<TreeRef<'_>> {
        match self {
            Trees::Direct(d) => d.slot(d.index_of(hk)).map(TreeRef::Slot),
            Trees::Hashed(_) => self.find(&HashKey::new(hk)),
        }
    }

    /// [`Self::find_bytes`] and [`Self::root_hint`] together, the direct
    /// index's slot computed once (a one-key search: fewer instructions
    /// between two searches).
    #[inline(always)]
    pub(super) fn find_bytes_hinted(&self, hk: &[u8]) -> (Option<TreeRef<'_>>, u64) {
        let (tree, cell) = self.find_bytes_with_cell(hk);
        (tree, cell.map_or(0, |c| c.root.load(Ordering::Relaxed)))
    }

    /// The ART of hash key bytes `hk` and, on the direct index, the cell
    /// of its point index ([`PointCell`]; `None` on the hashed index).
    #[inline(always)]
    pub(super) fn find_bytes_with_cell(
        &self,
        hk: &[u8],
    ) -> (Option<TreeRef<'_>>, Option<PointCell<'_>>) {
        match self {
            Trees::Direct(d) => {
                // One page lookup for both (arrays of `PAGE`: no bounds
                // test either).
                let i = d.index_of(hk);
                match d.page(i) {
                    Some(p) => (
                        Some(TreeRef::Slot(&p.slots[i % PAGE].0)),
                        Some(p.cell(i % PAGE)),
                    ),
                    None => (None, None),
                }
            }
            Trees::Hashed(_) => (self.find(&HashKey::new(hk)), None),
        }
    }

    /// The point index cell of hash key bytes `hk` on the direct index, if
    /// its page exists.
    #[inline(always)]
    pub(super) fn point_cell(&self, hk: &[u8]) -> Option<PointCell<'_>> {
        match self {
            Trees::Direct(d) => {
                let i = d.index_of(hk);
                d.page(i).map(|p| p.cell(i % PAGE))
            }
            Trees::Hashed(_) => None,
        }
    }

    /// The root hint and the point index's published table word of hash
    /// key bytes `hk` (either may be stale), for prefetches, in one lookup;
    /// zeros on the hashed index.
    #[inline(always)]
    pub(super) fn hints(&self, hk: &[u8]) -> (u64, u64) {
        match self {
            Trees::Direct(d) => {
                let i = d.index_of(hk);
                d.page(i).map_or((0, 0), |p| {
                    let h = &p.hints[i % PAGE];
                    (
                        h.root.load(Ordering::Relaxed),
                        h.table.load(Ordering::Relaxed),
                    )
                })
            }
            Trees::Hashed(_) => (0, 0),
        }
    }

    /// The published table word of the point index of `hk` (which may be
    /// stale), for prefetches; 0 on the hashed index.
    #[inline(always)]
    pub(super) fn point_word(&self, hk: &[u8]) -> u64 {
        self.point_cell(hk)
            .map_or(0, |c| c.table.load(Ordering::Relaxed))
    }

    /// Publishes the table of `points`, the point index of `hk`, after a
    /// change; the caller holds the ART's write lock (and has made the
    /// cell's `seq` odd). Stores only when the table moved (it grew,
    /// shrank or went).
    #[inline]
    pub(super) fn note_points(&self, hk: &[u8], points: &Points) {
        if let Some(cell) = self.point_cell(hk) {
            let word = points.word();
            if cell.table.load(Ordering::Relaxed) != word {
                cell.table.store(word, Ordering::Relaxed);
            }
        }
    }

    /// Lets searches read the point indexes without the ARTs' locks from
    /// now on, where they can (the direct index): retired tables are kept
    /// ([`Tables::view`]). Returns whether they can. The caller holds the
    /// engine alone.
    pub(super) fn read_unlocked(&mut self, on: bool) -> bool {
        match self {
            Trees::Direct(d) => {
                d.tables.set_recycle(on);
                on
            }
            Trees::Hashed(_) => false,
        }
    }

    /// Where the point indexes' tables come from and go back to.
    pub(super) fn tables(&self) -> &Tables {
        match self {
            Trees::Direct(d) => &d.tables,
            Trees::Hashed(h) => &h.tables,
        }
    }

    /// The root hint cell of hash key bytes `hk` on the direct index, if its
    /// page exists.
    fn direct_hint(&self, hk: &[u8]) -> Option<&AtomicU64> {
        match self {
            Trees::Direct(d) => d.hint(d.index_of(hk)),
            Trees::Hashed(_) => None,
        }
    }

    /// The root hint of the hash key bytes `hk` (at most `k_h` of them):
    /// a copy of its ART's root word that may be stale, for
    /// [`Art::prefetch_hinted`] only; 0 on the hashed index.
    #[inline(always)]
    pub(super) fn root_hint(&self, hk: &[u8]) -> u64 {
        self.direct_hint(hk)
            .map_or(0, |h| h.load(Ordering::Relaxed))
    }

    /// Keeps the root hint of `hk` equal to `art`'s root after a change;
    /// the caller holds the ART's write lock. Stores only when the root
    /// moved (a root node grown, shrunk or split, a tree emptied), so the
    /// hints' lines stay shared between cores.
    #[inline]
    pub(super) fn note_root(&self, hk: &[u8], art: &Art<LeafRef>) {
        // The page exists: the caller holds a lock that lives in it.
        if let Some(hint) = self.direct_hint(hk) {
            let root = art.root_hint();
            if hint.load(Ordering::Relaxed) != root {
                hint.store(root, Ordering::Relaxed);
            }
        }
    }

    /// The ART of `hk`, created if there is none.
    pub(super) fn for_insert(&self, hk: &HashKey, r: Route) -> TreeRef<'_> {
        match self {
            Trees::Direct(d) => TreeRef::Slot(d.slot_for_insert(d.index(hk))),
            Trees::Hashed(h) => {
                if let Some(t) = h.shards[r.shard].read().get(hk) {
                    return TreeRef::Cell(Arc::clone(t));
                }
                let mut shard = h.shards[r.shard].write();
                if let Some(t) = shard.get(hk) {
                    return TreeRef::Cell(Arc::clone(t));
                }
                let t = TreeCell::default();
                shard.insert(*hk, Arc::clone(&t));
                h.prefixes.write().insert(*hk);
                TreeRef::Cell(t)
            }
        }
    }

    /// Notes that the ART of `hk` got its first key; the caller holds its
    /// write lock.
    pub(super) fn filled(&self, hk: &HashKey) {
        if let Trees::Direct(d) = self {
            d.set_used(d.index(hk), true);
        }
    }

    /// Removes an emptied ART; the caller holds its write lock.
    ///
    /// The hashed form removes the hash key from its shard and from the
    /// ordered set under the shard's write lock, as [`Self::for_insert`]
    /// adds it to both (lock order: ART, shard, ordered set). With the shard
    /// released in between, another thread's insert could make a new ART
    /// for the same hash key and list it (already listed: no change), and
    /// this removal would then unlist it: its keys found by `get` and
    /// missed by every scan (`tests/hart_stress.rs` found it:
    /// 3,581 keys scanned of 3,582).
    pub(super) fn retire(&self, hk: &HashKey, r: Route, tree: &mut Tree) {
        match self {
            Trees::Direct(d) => d.set_used(d.index(hk), false),
            Trees::Hashed(h) => {
                tree.dead = true;
                let mut shard = h.shards[r.shard].write();
                shard.remove(hk);
                #[cfg(test)]
                if let Some(f) = tests::IN_RETIRE.with(|hook| hook.borrow_mut().take()) {
                    f();
                }
                h.prefixes.write().remove(hk);
            }
        }
    }

    /// Appends to `out` up to `n` hash keys with (possibly) non-empty ARTs
    /// that lie after `from`, in order.
    pub(super) fn keys_after(&self, from: Bound<HashKey>, n: usize, out: &mut Vec<HashKey>) {
        match self {
            Trees::Direct(d) => {
                let mut i = match from {
                    Bound::Included(k) => d.index(&k),
                    Bound::Excluded(k) => d.index(&k) + 1,
                    Bound::Unbounded => 0,
                };
                while out.len() < n {
                    let Some(j) = d.next_used(i) else {
                        break;
                    };
                    out.push(d.key(j));
                    i = j + 1;
                }
            }
            Trees::Hashed(h) => out.extend(
                h.prefixes
                    .read()
                    .range((from, Bound::Unbounded))
                    .take(n)
                    .copied(),
            ),
        }
    }

    /// Puts a rebuilt ART and its point index into the index (recovery;
    /// `art` is not empty).
    pub(super) fn install(&mut self, hk: HashKey, art: Art<LeafRef>, points: Points) {
        match self {
            Trees::Direct(d) => {
                let i = d.index(&hk);
                let hint = art.root_hint();
                let word = points.word();
                {
                    let mut t = d.slot_for_insert(i).write();
                    t.art = art;
                    t.points = points;
                }
                if let Some(p) = d.page(i) {
                    p.hints[i % PAGE].root.store(hint, Ordering::Relaxed);
                    p.hints[i % PAGE].table.store(word, Ordering::Relaxed);
                }
                d.set_used(i, true);
            }
            Trees::Hashed(h) => {
                h.prefixes.get_mut().insert(hk);
                let tree = Arc::new(RwLock::new(Tree {
                    art,
                    points,
                    dead: false,
                }));
                h.shards[hk.route().shard].get_mut().insert(hk, tree);
            }
        }
    }

    /// Checks that the ordered keys and the ARTs agree: every listed hash
    /// key has a non-empty ART and every non-empty ART is listed.
    pub(super) fn check(&self) -> Result<(), String> {
        match self {
            Trees::Direct(d) => {
                for i in 0..d.n {
                    let listed = d.used[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0;
                    let (empty, root) = d.slot(i).map_or((true, 0), |s| {
                        let t = s.read();
                        (t.art.is_empty(), t.art.root_hint())
                    });
                    if d.hint(i).map_or(0, |h| h.load(Ordering::Relaxed)) != root {
                        return Err(format!(
                            "hash key {:?}: the root hint is not the ART's root",
                            d.key(i).as_slice()
                        ));
                    }
                    if listed == empty {
                        return Err(format!(
                            "hash key {:?}: ART {}, but {} in the used bitmap",
                            d.key(i).as_slice(),
                            if empty { "empty" } else { "not empty" },
                            if listed { "set" } else { "clear" }
                        ));
                    }
                }
                Ok(())
            }
            Trees::Hashed(h) => {
                let listed = h.prefixes.read().clone();
                let mut in_table = 0;
                for shard in &h.shards {
                    for (hk, t) in &Hashed::entries(shard).0 {
                        in_table += 1;
                        if !listed.contains(hk) {
                            return Err(format!("hash key {:?} is not ordered", hk.as_slice()));
                        }
                        if t.read().art.is_empty() {
                            return Err(format!(
                                "the ART of hash key {:?} is empty",
                                hk.as_slice()
                            ));
                        }
                    }
                }
                if in_table != listed.len() {
                    return Err(format!(
                        "{} hash keys ordered, {in_table} in the hash table",
                        listed.len()
                    ));
                }
                Ok(())
            }
        }
    }

    /// DRAM bytes, ARTs included.
    pub(super) fn dram_bytes(&self) -> u64 {
        match self {
            Trees::Direct(d) => {
                let mut b = std::mem::size_of_val(&*d.pages) + std::mem::size_of_val(&*d.used);
                for page in d.pages.iter().filter_map(OnceLock::get) {
                    b += std::mem::size_of_val(&*page.slots)
                        + std::mem::size_of_val(&*page.hints)
                        + std::mem::size_of_val(&*page.seqs);
                    for s in page.slots.iter() {
                        let t = s.0.read();
                        b += t.art.dram_bytes() + t.points.dram_bytes();
                    }
                }
                (b + d.tables.dram_bytes()) as u64
            }
            Trees::Hashed(h) => {
                let mut b = 0;
                for shard in &h.shards {
                    let (trees, capacity) = Hashed::entries(shard);
                    // Per entry: the key and the `Arc` pointer, a control
                    // byte, and the `Arc`'s block (counts, lock, tree).
                    let entry = std::mem::size_of::<(HashKey, TreeCell)>() + 1;
                    let cell = 16 + std::mem::size_of::<RwLock<Tree>>();
                    b += capacity * entry;
                    for (_, t) in &trees {
                        let t = t.read();
                        b += cell + t.art.dram_bytes() + t.points.dram_bytes();
                    }
                }
                // The ordered set: the key plus about half a node's overhead.
                b += h.prefixes.read().len() * (std::mem::size_of::<HashKey>() + 8);
                (b + h.tables.dram_bytes()) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// Taken and run once by `retire` on the hashed index, between
        /// removing the ART from its shard and unlisting its hash key.
        pub(super) static IN_RETIRE: RefCell<Option<Box<dyn FnOnce()>>> =
            const { RefCell::new(None) };
    }

    /// A delete that retires an ART and an insert that makes a new one for
    /// the same hash key, the insert run while the retire is under way:
    /// the new ART must stay listed for scans. Without the shard lock held
    /// across both removals, the insert completes inside the hook and the
    /// retire then unlists the new ART: the scan misses its key and
    /// `check` fails ("is not ordered").
    #[test]
    fn an_art_made_while_its_predecessor_is_retired_stays_listed() {
        use crate::engine::{Engine, PutMode};
        use crate::pm::Pool;
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;
        use std::time::Duration;

        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Arc::new(super::super::Hart::create(pool, 8).unwrap());
        h.put(b"abcdefgh-1", b"old", PutMode::Upsert).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let (h2, ran2) = (Arc::clone(&h), Arc::clone(&ran));
        let inserter = Arc::new(std::sync::Mutex::new(None));
        let inserter2 = Arc::clone(&inserter);
        IN_RETIRE.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                // Another thread inserts under the same hash key. It waits
                // for the shard lock this retire holds (the fix), or, if
                // the shard were free, makes its ART and returns at once:
                // give it that chance, then let the retire go on.
                let (tx, rx) = mpsc::channel();
                let t = std::thread::spawn(move || {
                    h2.put(b"abcdefgh-2", b"new", PutMode::Upsert).unwrap();
                    let _ = tx.send(());
                });
                let _ = rx.recv_timeout(Duration::from_millis(200));
                *inserter2.lock().unwrap() = Some(t);
                ran2.store(true, Ordering::Relaxed);
            }));
        });
        assert!(h.delete(b"abcdefgh-1").unwrap());
        assert!(ran.load(Ordering::Relaxed), "the hook ran");
        let t = inserter
            .lock()
            .unwrap()
            .take()
            .expect("the inserter started");
        t.join().unwrap();
        let mut scanned = Vec::new();
        h.scan(
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            &mut |k, _| {
                scanned.push(k.to_vec());
                true
            },
        )
        .unwrap();
        assert_eq!(scanned, vec![b"abcdefgh-2".to_vec()]);
        h.check().unwrap();
    }

    /// `dram_bytes` (`Db::stats`), run while deletes retire ARTs, must not
    /// deadlock: a delete holds its ART's write lock while it takes the
    /// shard's, so a reader that holds a shard's lock while it locks an
    /// ART of that shard waits for the delete, which waits for it. Both
    /// ARTs here share one shard. A watchdog fails the test if the two
    /// threads stop making progress.
    #[test]
    fn reports_run_beside_deletes_that_retire_arts() {
        use crate::engine::{Engine, PutMode};
        use crate::pm::Pool;
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::time::{Duration, Instant};

        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = super::super::Hart::create(pool, 8).unwrap();
        // Two hash keys of one shard, one of them kept filled.
        let shard = HashKey::new(b"aaaaaaaa").route().shard;
        let other = (0u32..)
            .map(|i| format!("b{i:07}").into_bytes())
            .find(|k| HashKey::new(k).route().shard == shard)
            .unwrap();
        let mut kept = other.clone();
        kept.extend_from_slice(b"-kept");
        h.put(&kept, b"v", PutMode::Upsert).unwrap();
        let stop = AtomicBool::new(false);
        let (reports, cycles) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    assert!(h.dram_bytes() > 0);
                    reports.fetch_add(1, Ordering::Relaxed);
                }
            });
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    // Each delete empties and retires the ART.
                    h.put(b"aaaaaaaa-1", b"v", PutMode::Upsert).unwrap();
                    assert!(h.delete(b"aaaaaaaa-1").unwrap());
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            });
            std::thread::sleep(Duration::from_secs(1));
            // Both must still get past a step within 5 s; deadlocked, they
            // never would, and the scope could not end: end the process.
            let progress = || {
                (
                    reports.load(Ordering::Relaxed),
                    cycles.load(Ordering::Relaxed),
                )
            };
            let (at, deadline) = (progress(), Instant::now() + Duration::from_secs(5));
            while progress().0 == at.0 || progress().1 == at.1 {
                if Instant::now() > deadline {
                    eprintln!("no progress for 5 s: reports and deletes deadlocked");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(reports.load(Ordering::Relaxed) > 0 && cycles.load(Ordering::Relaxed) > 0);
    }

    /// The stripe of a hash key is persistent in formats 3 and 4 (a leaf
    /// must be found in its key's stripe at recovery), so the routing hash
    /// must never change.
    #[test]
    fn routing_is_stable() {
        let got: Vec<usize> = [&b""[..], b"a", b"ab", b"\x00\x00", b"\xff\xff", b"abcdefgh"]
            .iter()
            .map(|hk| HashKey::new(hk).route().shard)
            .collect();
        assert_eq!(got, vec![0, 50, 32, 1, 48, 9]);
    }

    /// Hash keys spread over the stripes.
    #[test]
    fn routing_spreads_two_byte_keys() {
        let mut per_stripe = [0u32; STRIPES];
        for i in 0..=u16::MAX {
            per_stripe[HashKey::new(&i.to_be_bytes()).route().stripe] += 1;
        }
        let even = 65536 / STRIPES as u32;
        for n in per_stripe {
            assert!(n > even * 9 / 10 && n < even * 11 / 10, "{per_stripe:?}");
        }
    }

    /// Direct slots are in the hash keys' order, and `key` inverts `index`.
    #[test]
    fn direct_slots_are_in_key_order() {
        for k_h in 1..=2 {
            let Trees::Direct(d) = Trees::new(k_h) else {
                panic!("k_h {k_h} is direct");
            };
            let mut all = vec![HashKey::new(&[])];
            for a in 0..=255u8 {
                all.push(HashKey::new(&[a]));
                if k_h == 2 {
                    for b in 0..=255u8 {
                        all.push(HashKey::new(&[a, b]));
                    }
                }
            }
            assert!(all.windows(2).all(|w| w[0] < w[1]), "lexicographic");
            assert_eq!(all.len(), d.n);
            for (i, k) in all.iter().enumerate() {
                assert_eq!(d.index(k), i, "{:?}", k.as_slice());
                assert_eq!(d.key(i), *k);
            }
        }
    }

    #[test]
    fn direct_used_bitmap_walks_in_order() {
        let Trees::Direct(d) = Trees::new(2) else {
            panic!("direct");
        };
        for k in [&b"\xff\xff"[..], b"", b"a", b"ab", b"\x00\x07"] {
            d.set_used(d.index(&HashKey::new(k)), true);
        }
        let t = Trees::Direct(d);
        let mut out = Vec::new();
        t.keys_after(Bound::Unbounded, 100, &mut out);
        let got: Vec<&[u8]> = out.iter().map(HashKey::as_slice).collect();
        assert_eq!(got, vec![&b""[..], b"\x00\x07", b"a", b"ab", b"\xff\xff"]);
        out.clear();
        t.keys_after(Bound::Excluded(HashKey::new(b"a")), 1, &mut out);
        assert_eq!(out, vec![HashKey::new(b"ab")]);
    }
}
