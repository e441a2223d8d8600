//! The write-optimal radix trees of Lee et al., "WORT: Write Optimal Radix
//! Tree for Persistent Memory Storage Systems", FAST'17, §3
//! (`papers/wort-woart-artcow.txt`): three engines over one tree walk.
//!
//! | engine | span | nodes | how a change commits |
//! |---|---|---|---|
//! | `wort` | 4 bits | [`nodes::w16`] | one 8-byte pointer store (§3.2); splits by Algorithm 1 with the depth header, repaired by Algorithm 2 |
//! | `woart` | 8 bits | NODE4 (packed word, Alg. 3), NODE16 (bitmap, Alg. 4), NODE48 (index byte), NODE256 (pointer) | the node's 8-byte commit word; growth by copy and one parent swap |
//! | `art-cow` | 8 bits | NODE4 and NODE16 by copy-on-write; NODE48 as WOART; NODE256 as WORT | the parent's pointer swap to the copy |
//!
//! Every node and leaf is in PM; there is no DRAM index. Keys are variable
//! length: a key that ends where a node branches lives in that node's `end`
//! slot (see [`nodes`]). Leaves hold the key and the value in one block
//! (see [`leaf`] for why).
//!
//! # Allocation
//! Blocks are carved from chunks of the pool ([`chunks`]); a block is in
//! use exactly when the tree reaches it, which open rebuilds from its walk.
//! So publishing a block is the paper's protocol and nothing more: write
//! it, flush it, fence, store its offset with one 8-byte store, flush,
//! fence ([`RadixTree::publish`]). Every change, including a split, a leaf
//! expansion, a node growth and an ART+CoW copy, writes its new blocks
//! (the new leaf included) and publishes them with that one store; the
//! blocks it unlinks go back to the DRAM free map after the store is
//! durable. A crash leaves either the old tree or the new one, and any
//! block written but not reached is free after it.
//!
//! # Recovery
//! [`RadixTree::open`] walks the tree twice (see `recovery.rs`): once to
//! mark the blocks it reaches (the rest is free; empty chunks go back to the
//! substrate), once to repair and count the keys:
//! - a node whose depth is not the depth it is reached at was left by a
//!   crash inside a split or a merge: its header is rebuilt from two leaves
//!   under two different children (Algorithm 2) and stored with one 8-byte
//!   store (the published WORT code printed and exited here);
//! - orphan pointers (non-null pointers a node does not list) are cleared
//!   (their blocks are free, being unreachable, or in use elsewhere).
//!
//! Each case is counted in [`crate::pm::cases`].

mod batch;
pub mod chunks;
pub mod header;
pub mod leaf;
pub mod nodes;
mod recovery;
mod search;
pub mod span;
pub mod superblock;
mod write;

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    Reads, ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::Pool;
use batch::{Batch, DEFERRED};
use chunks::{Block, Chunks};
use header::Header;
use nodes::{Kind, END};
use parking_lot::Mutex;
use search::Search;
use span::Span;

/// Which of the paper's three trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// WORT (§3.4).
    Wort = 1,
    /// WOART (§3.5).
    Woart = 2,
    /// ART+CoW (§3.6).
    ArtCow = 3,
}

impl Flavor {
    /// The engine id.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Wort => "wort",
            Flavor::Woart => "woart",
            Flavor::ArtCow => "art-cow",
        }
    }

    /// Bits per level.
    pub fn span(self) -> Span {
        match self {
            Flavor::Wort => Span::Nibble,
            _ => Span::Byte,
        }
    }

    /// The kind of a new node with few children.
    pub fn small_kind(self) -> Kind {
        match self {
            Flavor::Wort => Kind::W16,
            _ => Kind::N4,
        }
    }
}

/// `wort` in [`super::ENGINES`].
pub const WORT_INFO: EngineInfo = EngineInfo {
    name: "wort",
    paper: "Lee et al., WORT, FAST'17, §3.4 (4-bit radix tree, depth header, Algorithms 1-2)",
    create: |p, c| make(Flavor::Wort, p, c, true),
    open: |p, c| make(Flavor::Wort, p, c, false),
};
/// `woart` in [`super::ENGINES`].
pub const WOART_INFO: EngineInfo = EngineInfo {
    name: "woart",
    paper: "Lee et al., WORT, FAST'17, §3.5 (write-optimal ART, Algorithms 3-4)",
    create: |p, c| make(Flavor::Woart, p, c, true),
    open: |p, c| make(Flavor::Woart, p, c, false),
};
/// `art-cow` in [`super::ENGINES`].
pub const ART_COW_INFO: EngineInfo = EngineInfo {
    name: "art-cow",
    paper: "Lee et al., WORT, FAST'17, §3.6 (ART with copy-on-write NODE4/NODE16)",
    create: |p, c| make(Flavor::ArtCow, p, c, true),
    open: |p, c| make(Flavor::ArtCow, p, c, false),
};

fn make(
    flavor: Flavor,
    pool: Arc<Pool>,
    config: &EngineConfig,
    create: bool,
) -> Result<Box<dyn Engine>> {
    let mut reads = Reads::Optimistic;
    let mut asked = None;
    for (k, v) in super::settings(config, flavor.name(), &["reads", "format"])? {
        if k == "reads" {
            reads = Reads::parse(&format!("{}.reads", flavor.name()), v)?;
        } else {
            asked = match v {
                "2" => Some(2),
                "3" => Some(3),
                "4" => Some(4),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{}.format `{v}`: expected 2 (block sizes powers of two), 3 (sizes \
                         between them too; both read by older builds) or 4 (leaf-tagged \
                         pointers)",
                        flavor.name()
                    )))
                }
            };
        }
    }
    // `format` applies when the pool is made (also again, at open, after a
    // creation that crashed before its superblock was published); at the
    // open of a tree of another format it is refused, as `hart.hash_key_len`.
    let version = asked.unwrap_or(superblock::VERSION);
    let tree = if create {
        RadixTree::create_format(Arc::clone(&pool), flavor, version)?
    } else {
        RadixTree::open_format(Arc::clone(&pool), flavor, version)?
    };
    if let Some(v) = asked.filter(|&v| v != tree.version) {
        return Err(Error::InvalidArgument(format!(
            "{}.format={v}, but this pool has format {}; it is fixed at creation",
            flavor.name(),
            tree.version
        )));
    }
    Ok(Box::new(Locked::with_reads(pool, tree, reads)))
}

/// One of the three radix trees (serial; wrapped in [`Locked`], the
/// tree-wide reader-writer lock the paper used inside Memcached).
pub struct RadixTree {
    pool: Arc<Pool>,
    flavor: Flavor,
    span: Span,
    /// The superblock.
    sb: u64,
    /// Keys in the tree (counted at open, kept in DRAM).
    count: u64,
    /// Which blocks of the tree's chunks are in use (DRAM only). Writers
    /// hold the tree lock already; the mutex only makes it `Sync`.
    heap: Mutex<Chunks>,
    /// The state of a batch of puts ([`RadixTree::put_many_impl`]).
    batch: Batch,
    /// The superblock's format version (2, 3 or 4).
    version: u64,
    /// What a pointer to a leaf carries: [`nodes::LEAF_TAG`] in format 4,
    /// else 0.
    leaf_tag: u64,
    /// The first error of a block that a durable commit unlinked and that
    /// could not be given back ([`RadixTree::release_unlinked`]); the
    /// operation returns it once its DRAM state follows the commit.
    late: Mutex<Option<Error>>,
}

/// Substrate allocator steps (a chunk's `activate`, or its release) the
/// radix trees have taken in this process: the `radix_shape` example uses
/// it to split flushes per insert between the tree and the allocator.
static ALLOC_STEPS: AtomicU64 = AtomicU64::new(0);

/// Allocator steps taken by the radix trees so far (process-wide).
pub fn allocator_steps() -> u64 {
    ALLOC_STEPS.load(Ordering::Relaxed)
}

pub(crate) fn count_step() {
    ALLOC_STEPS.fetch_add(1, Ordering::Relaxed);
}

impl RadixTree {
    /// Makes an empty tree in a new pool.
    pub fn create(pool: Arc<Pool>, flavor: Flavor) -> Result<RadixTree> {
        RadixTree::create_format(pool, flavor, superblock::VERSION)
    }

    /// Makes an empty tree of format `version` (2: block sizes powers of
    /// two only; 3: sizes between them too; both read by older builds; 4:
    /// leaf-tagged pointers) in a new pool.
    pub fn create_format(pool: Arc<Pool>, flavor: Flavor, version: u64) -> Result<RadixTree> {
        let sb = superblock::create(&pool, flavor as u8, version)?;
        RadixTree::at(pool, flavor, sb, version)
    }

    /// Opens the tree and runs recovery (see the module doc).
    pub fn open(pool: Arc<Pool>, flavor: Flavor) -> Result<RadixTree> {
        RadixTree::open_format(pool, flavor, superblock::VERSION)
    }

    /// [`RadixTree::open`], making an empty tree of format `remake` if the
    /// pool's creation crashed before its superblock was published.
    pub fn open_format(pool: Arc<Pool>, flavor: Flavor, remake: u64) -> Result<RadixTree> {
        let (sb, version) = superblock::open(&pool, flavor as u8, flavor.name(), remake)?;
        let mut t = RadixTree::at(pool, flavor, sb, version)?;
        t.recover()?;
        Ok(t)
    }

    /// The tree whose superblock, of format `version`, is `sb`, with its
    /// chunk list loaded and no block marked in use yet (recovery marks
    /// them).
    fn at(pool: Arc<Pool>, flavor: Flavor, sb: u64, version: u64) -> Result<RadixTree> {
        let heap = Chunks::load(&pool, sb + superblock::CHUNKS, version >= 3)?;
        Ok(RadixTree {
            span: flavor.span(),
            pool,
            flavor,
            sb,
            count: 0,
            heap: Mutex::new(heap),
            batch: Batch::default(),
            version,
            leaf_tag: if version >= 4 { nodes::LEAF_TAG } else { 0 },
            late: Mutex::new(None),
        })
    }

    /// Reserves a block of at least `size` bytes (DRAM only, unless a new
    /// chunk is taken: see [`chunks`]).
    fn reserve(&self, size: u64) -> Result<Block> {
        self.heap.lock().reserve(&self.pool, size)
    }

    /// Gives back a reserved block that will not be published.
    fn cancel(&self, b: Block) -> Result<()> {
        self.heap.lock().cancel(&self.pool, b)
    }

    /// Gives back a block the tree no longer reaches; the store that
    /// unlinked it is durable, or, in a batch of puts, will be at the
    /// batch's last fence, after which the block is given back.
    fn release(&self, off: u64) -> Result<()> {
        // What a slot held: a leaf's pointer may carry its tag.
        let off = nodes::block_of(off);
        if self.batch.on.load(Ordering::Relaxed)
            && !self.pool.fault(crate::pm::Fault::RadixBatchReleaseEarly)
        {
            let n = self.batch.deferred_len.load(Ordering::Relaxed);
            if n == DEFERRED {
                // Full: make the unlinking commits durable now (the held
                // ones stored first).
                self.drain_held()?;
                self.pool.fence();
                let r = self.release_deferred();
                self.release(off)?;
                return r;
            }
            self.batch.deferred[n].store(off, Ordering::Relaxed);
            self.batch.deferred_len.store(n + 1, Ordering::Relaxed);
            return Ok(());
        }
        self.heap.lock().release(&self.pool, off)
    }

    /// [`RadixTree::release`] of a block that a commit unlinked: the change
    /// stands whatever happens here, so a failure (only in a damaged pool:
    /// the pointer was not a block's) must not end the operation before
    /// its key count and the rest of its work follow the commit. It is kept
    /// instead, and the operation returns it at its end
    /// ([`RadixTree::late_error`]). What was not given back is not handed
    /// out again in this process; the next open's recovery frees it if it
    /// is a block the tree no longer reaches.
    fn release_unlinked(&self, off: u64) {
        if let Err(e) = self.release(off) {
            self.late.lock().get_or_insert(e);
        }
    }

    /// `r`, or the error kept by [`RadixTree::release_unlinked`] during the
    /// operation that gave `r` (which then did change the tree).
    fn late_error<T>(&mut self, r: Result<T>) -> Result<T> {
        match self.late.get_mut().take() {
            Some(e) if r.is_ok() => Err(e),
            _ => r,
        }
    }

    /// Notes a flush that a later commit must not overtake (a new leaf or
    /// node, a split's header): the next [`Self::publish`] fences first.
    fn flushed_new(&self) {
        self.batch.unfenced.store(true, Ordering::Relaxed);
    }

    /// The commit of a change that publishes new blocks. Persist order:
    /// **fence** (every flush issued before, the new blocks' contents among
    /// them, is durable first); store `value` into `slot` (one 8-byte
    /// store: the commit point); flush; **fence**. Returns what `slot` held.
    ///
    /// In a batch of puts, the first fence is left out when nothing but
    /// earlier commits of the batch was flushed since the last fence (what
    /// the store publishes is durable already), else the commit is held
    /// back to share one fence with others; the last fence is the batch's
    /// (see [`RadixTree::put_many_impl`] and [`Self::commit`]).
    fn publish(&self, slot: u64, value: u64) -> Result<u64> {
        let old = self.pool.load_u64(slot)?;
        self.commit(nodes::Commit::slot(slot, value))?;
        Ok(old)
    }

    /// The commit of a change that publishes nothing new (a delete, or a
    /// merge into a leaf). Persist order: store `value` into `slot` (the
    /// commit point); flush; **fence**. Returns what `slot` held.
    fn retract(&self, slot: u64, value: u64) -> Result<u64> {
        let old = self.pool.load_u64(slot)?;
        self.pool.store_u64(slot, value)?;
        self.pool.persist(slot, 8);
        Ok(old)
    }

    /// Usable bytes of the block at `off` (an error if it is not a block).
    fn block_size(&self, off: u64) -> Result<u64> {
        self.heap.lock().block_size(nodes::block_of(off))
    }

    /// Average depth of the leaves (inner nodes above each leaf), and the
    /// number of leaves: Table 1(d) of the paper.
    pub fn leaf_depth(&self) -> Result<(f64, u64)> {
        fn walk(t: &RadixTree, p: u64, depth: u64, acc: &mut (u64, u64)) -> Result<()> {
            if p == 0 {
                return Ok(());
            }
            let kind = nodes::kind(&t.pool, p)?;
            if kind == Kind::Leaf {
                acc.0 += depth;
                acc.1 += 1;
                return Ok(());
            }
            walk(
                t,
                t.pool.load_u64(nodes::block_of(p) + END)?,
                depth + 1,
                acc,
            )?;
            for e in nodes::entries(&t.pool, p, kind)? {
                walk(t, e.ptr, depth + 1, acc)?;
            }
            Ok(())
        }
        let mut acc = (0, 0);
        walk(self, self.pool.load_u64(self.root_slot())?, 0, &mut acc)?;
        Ok((acc.0 as f64 / acc.1.max(1) as f64, acc.1))
    }

    fn root_slot(&self) -> u64 {
        self.sb + superblock::ROOT
    }

    /// The tree's point search (`search.rs`).
    fn search(&self) -> Search<'_> {
        Search {
            pool: &self.pool,
            flavor: self.flavor,
            root: self.root_slot(),
        }
    }

    /// The units of `node`'s compressed path (positions `d .. branch`):
    /// from the header when it is reached at its own depth and the path fits
    /// in it, else from a leaf under the node (optimistic compression).
    fn path_units(&self, node: u64, h: &Header, d: usize) -> Result<Vec<u8>> {
        let b = h.branch();
        if b < d {
            return Err(Error::corrupt(node, "radix: node branches above its depth"));
        }
        if h.depth == d && h.plen <= Header::cap(self.span) {
            return Ok((0..h.plen).map(|i| h.unit(self.span, i)).collect());
        }
        let key = leaf::key_vec(&self.pool, self.any_leaf(node)?)?;
        if self.span.len(&key) < b {
            return Err(Error::corrupt(
                node,
                "radix: leaf shorter than its node's path",
            ));
        }
        Ok(self.span.units(&key, d, b))
    }

    /// Some leaf under `ptr` (the leftmost).
    fn any_leaf(&self, mut ptr: u64) -> Result<u64> {
        for _ in 0..=header::MAX_POS {
            let k = nodes::kind(&self.pool, ptr)?;
            if k == Kind::Leaf {
                return Ok(ptr);
            }
            let end = self.pool.load_u64(nodes::block_of(ptr) + END)?;
            ptr = if end != 0 {
                end
            } else {
                nodes::entries(&self.pool, ptr, k)?
                    .into_iter()
                    .find(|e| e.ptr != 0)
                    .ok_or_else(|| Error::corrupt(ptr, "radix: node without children"))?
                    .ptr
            };
        }
        Err(Error::corrupt(ptr, "radix: tree deeper than any key"))
    }

    /// In-order walk of the subtree at `ptr` (reached at depth `d`, with
    /// `path` the units above it), pruned by the bounds; returns false once
    /// the scan should stop.
    fn scan_rec(
        &self,
        ptr: u64,
        d: usize,
        path: &mut Vec<u8>,
        b: &ScanBounds<'_>,
        f: &mut ScanFn<'_>,
    ) -> Result<bool> {
        let kind = nodes::kind(&self.pool, ptr)?;
        if kind == Kind::Leaf {
            let lw = leaf::word(&self.pool, ptr)?;
            // SAFETY: `&self` is held under the tree lock: no writer runs.
            let k = unsafe { leaf::key(&self.pool, ptr, lw)? };
            if !b.above_lo(k) {
                return Ok(true);
            }
            if !b.below_hi(k) {
                return Ok(false);
            }
            // SAFETY: as above.
            let v = unsafe { leaf::value(&self.pool, ptr, lw)? };
            return Ok(f(k, v));
        }
        let h = Header::decode(self.pool.load_u64(nodes::block_of(ptr))?);
        let units = self.path_units(ptr, &h, d)?;
        path.truncate(d);
        path.extend_from_slice(&units);
        if b.subtree_below_lo(path) {
            return Ok(true);
        }
        if b.subtree_above_hi(path) {
            return Ok(false);
        }
        let br = h.branch();
        let end = self.pool.load_u64(nodes::block_of(ptr) + END)?;
        if end != 0 {
            // Only a leaf ends a key here; a node in an end slot (damage)
            // would be walked at the same depth again, without end.
            if nodes::kind(&self.pool, end)? != Kind::Leaf {
                return Err(Error::corrupt(end, "radix: node in an end slot"));
            }
            if !self.scan_rec(end, br, path, b, f)? {
                return Ok(false);
            }
        }
        let entries = nodes::entries(&self.pool, ptr, kind)?;
        // From the first child in bounds on, the children's first lines
        // start loading `SCAN_AHEAD` entries before the walk reaches them,
        // so that the misses of siblings (in the bottom nodes, a leaf each)
        // overlap instead of coming one after another (docs/design.md §11,
        // "Ordered scans").
        let pm = self.pool.words();
        // Entries before this one have been asked for.
        let mut prefetched = 0;
        for (i, e) in entries.iter().enumerate() {
            if e.ptr == 0 {
                continue;
            }
            path.truncate(br);
            path.push(e.unit);
            if b.subtree_below_lo(path) {
                continue;
            }
            if b.subtree_above_hi(path) {
                return Ok(false);
            }
            let end = (i + 1 + SCAN_AHEAD).min(entries.len());
            for ahead in &entries[prefetched.max(i + 1)..end] {
                if ahead.ptr != 0 {
                    pm.prefetch(ahead.ptr);
                }
            }
            prefetched = end;
            if !self.scan_rec(e.ptr, br + 1, path, b, f)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Children of a node whose first lines a scan asks for before it walks
/// them.
const SCAN_AHEAD: usize = 8;

/// Scan bounds, as keys and as unit sequences (for pruning subtrees).
struct ScanBounds<'a> {
    lo: Bound<&'a [u8]>,
    hi: Bound<&'a [u8]>,
    lo_units: Option<Vec<u8>>,
    hi_units: Option<Vec<u8>>,
}

/// Compares the first `min(len)` units: Less means every key extending `p`
/// sorts before `k`, Greater after it.
fn cmp_prefix(p: &[u8], k: &[u8]) -> std::cmp::Ordering {
    let m = p.len().min(k.len());
    p[..m].cmp(&k[..m])
}

impl ScanBounds<'_> {
    fn above_lo(&self, k: &[u8]) -> bool {
        match self.lo {
            Bound::Included(l) => k >= l,
            Bound::Excluded(l) => k > l,
            Bound::Unbounded => true,
        }
    }
    fn below_hi(&self, k: &[u8]) -> bool {
        match self.hi {
            Bound::Included(h) => k <= h,
            Bound::Excluded(h) => k < h,
            Bound::Unbounded => true,
        }
    }
    fn subtree_below_lo(&self, p: &[u8]) -> bool {
        self.lo_units
            .as_ref()
            .is_some_and(|l| cmp_prefix(p, l).is_lt())
    }
    fn subtree_above_hi(&self, p: &[u8]) -> bool {
        self.hi_units
            .as_ref()
            .is_some_and(|h| cmp_prefix(p, h).is_gt())
    }
}

impl SerialEngine for RadixTree {
    fn name(&self) -> &'static str {
        self.flavor.name()
    }

    /// The format (`<engine>.reads` is [`Locked`]'s).
    fn settings(&self) -> EngineConfig {
        EngineConfig::from([(
            format!("{}.format", self.flavor.name()),
            self.version.to_string(),
        )])
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ordered_scan: true,
            concurrent: false,
            max_key_len: MAX_KEY_LEN,
            max_value_len: MAX_VALUE_LEN,
        }
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.search().lookup(key)? {
            Some((p, lw)) => {
                // `lookup` counted the value's lines.
                let off = p + leaf::HEADER + lw.key_len as u64;
                // SAFETY: `&self` is held under the tree lock: no writer runs.
                f(unsafe { self.pool.bytes(off, lw.value_len as u64)? });
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        self.put_impl(key, value, mode)
    }

    fn put_many(&mut self, items: &[(&[u8], &[u8])]) -> Result<()> {
        self.put_many_impl(items)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.delete_impl(key)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        let root = self.pool.load_u64(self.root_slot())?;
        if root == 0 {
            return Ok(());
        }
        let units = |b: Bound<&[u8]>| match b {
            Bound::Included(k) | Bound::Excluded(k) => Some(self.span.all(k)),
            Bound::Unbounded => None,
        };
        let b = ScanBounds {
            lo,
            hi,
            lo_units: units(lo),
            hi_units: units(hi),
        };
        self.scan_rec(root, 0, &mut Vec::new(), &b, f)?;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.count
    }

    fn check(&self) -> Result<CheckReport> {
        self.check_impl()
    }

    fn dram_bytes(&self) -> u64 {
        std::mem::size_of::<Self>() as u64 + self.heap.lock().dram_bytes()
    }

    fn optimistic_reader(&self) -> Option<Box<dyn super::OptimisticRead>> {
        Some(Box::new(search::Reader {
            pool: Arc::clone(&self.pool),
            flavor: self.flavor,
            root: self.root_slot(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_counts_the_distinct_lines_it_reads() {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
        // Three keys that differ in their first nibble: one root NODE16 at
        // depth 0 with slots 0 and 1 in its header line, slot 14 two lines on.
        t.put(&[0x00, 1], b"v", PutMode::Upsert).unwrap();
        t.put(&[0x10, 2], &[7; 200], PutMode::Upsert).unwrap();
        t.put(&[0xE0, 3], b"v", PutMode::Upsert).unwrap();
        let lines = |k: &[u8]| t.search().lookup_counted(k).unwrap();
        // Root slot, node header (slot 0 in the same line), one-line leaf.
        let (found, n) = lines(&[0x00, 1]);
        assert!(found.is_some());
        assert_eq!(n, 3);
        // The slot in another line than the header: one more.
        assert_eq!(lines(&[0xE0, 3]).1, 4);
        // A leaf of 8 + 2 + 200 bytes spans four lines; all are counted when
        // found (the caller reads the value) ...
        assert_eq!(lines(&[0x10, 2]).1, 2 + 4);
        // ... and only the line with its key when the key differs.
        let (found, n) = lines(&[0x10, 9]);
        assert!(found.is_none());
        assert_eq!(n, 3);
        // An empty slot: no leaf read.
        assert_eq!(lines(&[0x50, 0]), (None, 2));
    }

    /// A value too long for the lock-free reader's buffer goes to the lock:
    /// its lines are counted once, as a read under the lock counts them
    /// (the lock-free try counted them too, before). Also for a batch.
    #[test]
    fn a_read_that_falls_back_to_the_lock_counts_its_lines_once() {
        use crate::engine::{Engine, Reads};
        use crate::pm::counters::this_thread;
        let long = vec![5u8; 2 * crate::engine::VALUE_BUF];
        // Two trees of the same puts in fresh pools (so the same layout),
        // one read lock-free (falling back for long values), one locked.
        let tree = |flavor, reads| {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
            let t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            let db = Locked::with_reads(pool, t, reads);
            for i in 0..50u8 {
                let v: &[u8] = if i % 2 == 0 { &long } else { b"short" };
                db.put(&[b'k', i], v, PutMode::Upsert).unwrap();
            }
            db
        };
        let lines = |f: &mut dyn FnMut()| {
            let r0 = this_thread().lines_read;
            f();
            this_thread().lines_read - r0
        };
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let fast = tree(flavor, Reads::Optimistic);
            let slow = tree(flavor, Reads::Locked);
            for i in [0u8, 1, 2] {
                let key = [b'k', i];
                let count = |db: &Locked<RadixTree>| {
                    let mut n = 0;
                    let l = lines(&mut || {
                        assert!(db.get_with(&key, &mut |v| n = v.len()).unwrap());
                    });
                    assert_eq!(n, if i % 2 == 0 { long.len() } else { 5 });
                    l
                };
                let (optimistic, locked) = (count(&fast), count(&slow));
                assert!(locked > 0);
                assert_eq!(optimistic, locked, "{flavor:?}, key {i}");
                // A batch of this key and a short value's.
                let batch = |db: &Locked<RadixTree>| {
                    lines(&mut || {
                        db.get_many(&[&key, &[b'k', 1]], &mut |_, v| assert!(v.is_some()))
                            .unwrap();
                    })
                };
                assert_eq!(batch(&fast), batch(&slow), "{flavor:?}, batch with key {i}");
            }
        }
    }

    /// A leaf word whose value length is over the API's limit is damage:
    /// so a search of a damaged or torn word counts (and, with emulated
    /// latency, waits for) at most a limit's worth of lines.
    #[test]
    fn a_leaf_word_with_a_value_over_the_limit_is_refused() {
        let w = |value_len| {
            leaf::LeafWord {
                key_len: 8,
                value_len,
            }
            .encode()
        };
        assert!(leaf::LeafWord::decode(64, w(MAX_VALUE_LEN)).is_ok());
        let e = leaf::LeafWord::decode(64, w(MAX_VALUE_LEN + 1)).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    }

    /// The engine itself refuses a key or value its leaf word cannot hold
    /// (`Db` checks first; a caller of the engine may not): an error, and
    /// nothing written. In a batch, the items before it stand.
    #[test]
    fn the_engine_refuses_what_a_leaf_word_cannot_hold() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            t.put(b"kept", b"v", PutMode::Upsert).unwrap();
            let long_key = vec![b'x'; MAX_KEY_LEN + 1];
            let long_value = vec![1u8; MAX_VALUE_LEN + 1];
            let e = t.put(&long_key, b"v", PutMode::Upsert).unwrap_err();
            assert!(matches!(e, Error::KeyTooLong { .. }), "{flavor:?}: {e}");
            let e = t.put(b"big", &long_value, PutMode::Upsert).unwrap_err();
            assert!(matches!(e, Error::ValueTooLong { .. }), "{flavor:?}: {e}");
            let e = t.put(b"", b"v", PutMode::Upsert).unwrap_err();
            assert!(matches!(e, Error::EmptyKey { .. }), "{flavor:?}: {e}");
            let items: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"), (&long_key, b"2"), (b"c", b"3")];
            assert!(t.put_many(&items).is_err(), "{flavor:?}");
            let mut got = Vec::new();
            t.scan(
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                &mut |k, _| {
                    got.push(k.to_vec());
                    true
                },
            )
            .unwrap();
            assert_eq!(got, vec![b"a".to_vec(), b"kept".to_vec()], "{flavor:?}");
            assert_eq!(t.len(), 2, "{flavor:?}");
            t.check().unwrap();
        }
    }

    /// A tree of `flavor` with 3,000 keys of 1 to 46 bytes: a shared 6-byte
    /// prefix on a third of them (compressed paths), a 150-byte value on a
    /// tenth (leaves of several lines). Returns it with its keys.
    fn mixed_tree(flavor: Flavor) -> (RadixTree, Vec<Vec<u8>>) {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(pool, flavor).unwrap();
        let mut x = 7u64;
        let mut keys = Vec::new();
        for i in 0..3000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = x;
            let len = 1 + (r % 40) as usize;
            let mut k: Vec<u8> = (0..len)
                .map(|j| (r >> (j % 8 * 8)) as u8 ^ j as u8)
                .collect();
            if i % 3 == 0 {
                k.splice(0..0, *b"prefix");
            }
            let vlen = if i % 10 == 0 {
                150
            } else {
                (r >> 40) as usize % 20
            };
            t.put(&k, &vec![i as u8; vlen], PutMode::Upsert).unwrap();
            keys.push(k);
        }
        (t, keys)
    }

    /// Searches around a present key `k`: itself, its prefix one byte
    /// shorter, a longer key, and `k` with its last byte changed (non-empty
    /// ones only).
    fn probes_around(k: &[u8]) -> Vec<Vec<u8>> {
        let mut longer = k.to_vec();
        longer.push(0x5A);
        let mut other = k.to_vec();
        *other.last_mut().unwrap() ^= 0x80;
        let mut probes = vec![k.to_vec(), k[..k.len() - 1].to_vec(), longer, other];
        probes.retain(|q| !q.is_empty());
        probes
    }

    /// `mixed_tree` with keys that fill NODE48s and NODE256s too: under
    /// "n" one more byte of 0 to 29 (a NODE48), under "N" of 0 to 99 (a
    /// NODE256), and under "N" + 7 a third byte of 0 to 39 (a NODE48 below
    /// a NODE256).
    fn every_kind_tree(flavor: Flavor) -> (RadixTree, Vec<Vec<u8>>) {
        let (mut t, mut keys) = mixed_tree(flavor);
        let mut more: Vec<Vec<u8>> = (0..30u8).map(|i| vec![b'n', i]).collect();
        more.extend((0..100u8).map(|i| vec![b'N', i]));
        more.extend((0..40u8).map(|i| vec![b'N', 7, i]));
        for k in &more {
            t.put(k, k, PutMode::Upsert).unwrap();
        }
        keys.extend(more);
        (t, keys)
    }

    /// Each tree's search takes a loop of its own in the common case
    /// (`Search::walk_w16`, `Search::walk_bytes`) and a one-line leaf check,
    /// and the general walk otherwise; both must give what the general walk
    /// alone gives, lines included, for present and absent keys of every
    /// length, short and long leaves, compressed paths and every node kind.
    #[test]
    fn fast_searches_agree_with_the_general_walk() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (t, keys) = every_kind_tree(flavor);
            let s = t.search();
            let general = |q: &[u8]| match flavor {
                Flavor::Wort => s.lookup_in::<true>(q, s.root, 0, 1),
                _ => s.lookup_in::<false>(q, s.root, 0, 1),
            };
            let mut absent = 0;
            for k in &keys {
                for q in probes_around(k) {
                    let fast = s.lookup_counted(&q).unwrap();
                    assert_eq!(fast, general(&q).unwrap(), "{flavor:?} key {q:?}");
                    absent += usize::from(fast.0.is_none());
                }
                assert!(s.lookup_counted(k).unwrap().0.is_some());
            }
            assert!(absent > 1000, "absent keys are probed too ({absent})");
        }
    }

    /// The lock-free reader's one-key search (`Reader::get_into`, whose
    /// WORT path reads a one-line leaf's value from the line its key was
    /// compared in) answers as the search under the lock, value and PM
    /// lines counted included, for the keys of `mixed_tree` (one-line and
    /// longer leaves, compressed paths) and the probes around them, in all
    /// three trees.
    #[test]
    fn the_lock_free_reader_agrees_with_the_locked_search() {
        use crate::engine::{Probe, ValueBuf};
        use crate::pm::counters::this_thread;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (t, keys) = every_kind_tree(flavor);
            let reader = t.optimistic_reader().expect("a reader");
            let (mut found, mut absent) = (0, 0);
            for k in &keys {
                for q in probes_around(k).into_iter().chain([k.clone()]) {
                    let mut buf = ValueBuf::new();
                    let r0 = this_thread().lines_read;
                    let probe = reader.get_into(&q, &mut buf).unwrap();
                    let lines = this_thread().lines_read - r0;
                    let mut want = None;
                    let r0 = this_thread().lines_read;
                    t.get_with(&q, &mut |v| want = Some(v.to_vec())).unwrap();
                    let want_lines = this_thread().lines_read - r0;
                    match probe {
                        Probe::Absent => {
                            assert_eq!(want, None, "{flavor:?} {q:?}");
                            absent += 1;
                        }
                        Probe::Found(r) => {
                            assert_eq!(Some(&buf.bytes()[r]), want.as_deref(), "{flavor:?} {q:?}");
                            found += 1;
                        }
                        Probe::TooLong => panic!("{flavor:?} {q:?}: no value here is too long"),
                    }
                    assert_eq!(lines, want_lines, "{flavor:?} {q:?}: lines");
                }
            }
            assert!(
                found >= keys.len() && absent > 1000,
                "{flavor:?}: {found} found, {absent} absent"
            );
        }
    }

    /// The batched search (`Search::lookup_many`) gives each key what
    /// `lookup_counted` gives it alone, lines included, in all three trees,
    /// for batches of every size up to `BATCH`: the keys of `mixed_tree`,
    /// the probes around them, and random 8-byte keys.
    #[test]
    fn batched_searches_agree_with_single_searches() {
        use crate::engine::BATCH;
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let (t, keys) = mixed_tree(flavor);
            let mut probes = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                probes.extend(probes_around(k));
                probes.push(
                    (i as u64)
                        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                        .to_be_bytes()
                        .to_vec(),
                );
            }
            let s = t.search();
            let (mut at, mut size, mut found) = (0, 1, 0);
            while at < probes.len() {
                let batch: Vec<&[u8]> = probes[at..(at + size).min(probes.len())]
                    .iter()
                    .map(Vec::as_slice)
                    .collect();
                let mut seen = vec![false; batch.len()];
                s.lookup_many(&batch, |i, got| {
                    assert!(!seen[i], "{flavor:?}: key {i} answered twice");
                    seen[i] = true;
                    let want = s.lookup_counted(batch[i]).unwrap();
                    assert_eq!(got.unwrap(), want, "{flavor:?}: key {:?}", batch[i]);
                    found += usize::from(want.0.is_some());
                });
                assert!(seen.iter().all(|&s| s), "{flavor:?}: every key answered");
                at += batch.len();
                size = size % BATCH + 1;
            }
            assert!(found >= keys.len(), "{flavor:?}: {found} found");
            assert!(found < probes.len() / 2, "{flavor:?}: absent keys probed");
        }
    }

    /// Regression (review of the batched search): a WORT slot holding a
    /// word near `u64::MAX` (a torn read of a reused block, or a damaged
    /// pool) made the batch's prefetch address overflow, a panic in builds
    /// with overflow checks. It is an error, as in the single search.
    #[test]
    fn a_huge_child_word_is_an_error_in_a_batch_too() {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
        t.put(&[0x10], b"a", PutMode::Upsert).unwrap();
        t.put(&[0x20], b"b", PutMode::Upsert).unwrap();
        let n = pool.load_u64(t.root_slot()).unwrap();
        assert_eq!(nodes::kind(&pool, n).unwrap(), Kind::W16);
        pool.store_u64(nodes::w16::slot(n, 1), u64::MAX - 7)
            .unwrap();
        assert!(t.search().lookup(&[0x10]).is_err());
        let mut answers = Vec::new();
        t.search()
            .lookup_many(&[&[0x10], &[0x20]], |i, r| answers.push((i, r)));
        answers.sort_by_key(|(i, _)| *i);
        assert!(answers[0].1.is_err(), "{:?}", answers[0].1);
        assert!(answers[1].1.as_ref().unwrap().0.is_some());
    }

    /// `put_many` in a pool too full for one item's leaf applies the items
    /// before it (`Db::put_many`'s contract). Before, a failed reservation
    /// sent every block of the batch back: none of its items was applied.
    #[test]
    fn a_batch_whose_leaf_cannot_be_reserved_applies_the_items_before() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let pool =
                Arc::new(Pool::create_anonymous(8 << 20, "wort", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            let mut i = 0u64;
            while t.put(&i.to_be_bytes(), b"v", PutMode::Upsert).is_ok() {
                i += 1;
            }
            for j in 0..20u64 {
                assert!(t.delete(&(j * 7).to_be_bytes()).unwrap());
            }
            let (k0, k1, big) = (
                0u64.to_be_bytes(),
                u64::MAX.to_be_bytes(),
                vec![1u8; 20_000],
            );
            let e = t
                .put_many_impl(&[(&k0[..], &b"w"[..]), (&k1[..], &big[..])])
                .unwrap_err();
            assert!(matches!(e, Error::PoolFull { .. }), "{flavor:?}: {e}");
            assert!(t.search().lookup(&k0).unwrap().is_some(), "{flavor:?}");
            assert!(t.search().lookup(&k1).unwrap().is_none(), "{flavor:?}");
            t.check().unwrap();
        }
    }

    /// A WORT tree of keys [0x10], [0x20], [0x30] and [0x40], where the
    /// slot of [0x10] points 64 bytes into the leaf of [0x40], at a leaf of
    /// [0x10] inside its 200-byte value: a leaf that is not a block
    /// (damage), which no release accepts.
    fn wort_with_a_fake_leaf() -> RadixTree {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
        for (k, v) in [(0x10u8, b"a"), (0x20, b"b"), (0x30, b"c")] {
            t.put(&[k], v, PutMode::Upsert).unwrap();
        }
        let mut v = vec![0u8; 200];
        let word: u64 = 1 | (1 << 8) | (1u64 << 32);
        v[55..63].copy_from_slice(&word.to_le_bytes());
        v[63] = 0x10;
        v[64] = b'X';
        t.put(&[0x40], &v, PutMode::Upsert).unwrap();
        let (big, _) = t.search().lookup(&[0x40]).unwrap().unwrap();
        let n = pool.load_u64(t.root_slot()).unwrap();
        // A leaf's pointer, tagged as one (format 4).
        pool.store_u64(nodes::w16::slot(n, 1), (big + 64) | nodes::LEAF_TAG)
            .unwrap();
        t
    }

    /// A delete whose leaf cannot be released after its commit (damage: the
    /// slot points into a large leaf's value, where a fake leaf of the key
    /// lies, not at a block): the delete is durable and the error returned,
    /// and the key count follows PM. Before, `len` stayed one too high and
    /// `check` reported the mismatch.
    #[test]
    fn a_delete_whose_release_fails_after_its_commit_is_counted() {
        let mut t = wort_with_a_fake_leaf();
        assert!(t.search().lookup(&[0x10]).unwrap().is_some());
        let e = t.delete(&[0x10]).unwrap_err().to_string();
        assert!(e.contains("no block"), "{e}");
        assert!(t.search().lookup(&[0x10]).unwrap().is_none(), "durable");
        let mut scanned = 0;
        t.scan(Bound::Unbounded, Bound::Unbounded, &mut |_, _| {
            scanned += 1;
            true
        })
        .unwrap();
        assert_eq!(t.len(), scanned);
    }

    /// A batch of puts whose replaced leaf cannot be given back at the
    /// batch's end (damage: the slot points at a fake leaf inside a value):
    /// every item of the call is applied, the later batches too, and the
    /// error comes at the end. Before, the call returned after the first
    /// batch of 32, with the rest of the items not applied.
    #[test]
    fn a_batch_whose_replaced_leaf_cannot_be_released_applies_every_item() {
        let mut t = wort_with_a_fake_leaf();
        let mut keys: Vec<Vec<u8>> = vec![vec![0x10]];
        keys.extend((0..40u8).map(|i| vec![0x50, i]));
        let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"new"[..])).collect();
        let e = t.put_many_impl(&items).unwrap_err().to_string();
        assert!(e.contains("no block"), "{e}");
        for k in &keys {
            let mut got = Vec::new();
            t.get_with(k, &mut |v| got = v.to_vec()).unwrap();
            assert_eq!(got, b"new", "{k:?}");
        }
        assert_eq!(t.len(), 44);
    }

    /// A copy of node `n`'s block, 128 bytes into the value of a new large
    /// leaf of key `[0x40]` (the leaf's value starts 9 bytes in): a node
    /// that is not a block, for the damage tests below. `n` is the node's
    /// pointer word; returns the copy's, with the same tags (a WORT node's
    /// slot map).
    fn fake_node(t: &mut RadixTree, n: u64) -> u64 {
        let size = t.block_size(n).unwrap();
        let mut v = vec![0u8; 119];
        for w in 0..size / 8 {
            let word = t.pool.load_u64(nodes::block_of(n) + 8 * w).unwrap();
            v.extend_from_slice(&word.to_le_bytes());
        }
        t.put(&[0x40], &v, PutMode::Upsert).unwrap();
        let (big, _) = t.search().lookup(&[0x40]).unwrap().unwrap();
        (big + 128) | (n & nodes::TAGS)
    }

    /// A delete that leaves a node with one child merges it away; if the
    /// node cannot be released after that commit (damage: the root slot
    /// points at a copy of the node inside a value, not at a block), the
    /// delete is durable, its error returned, and the key count follows
    /// PM. Before, `merge` returned the error before the count changed.
    ///
    /// Both of `merge`'s cases: the child left is a leaf (`retract`), or a
    /// node (its header merged and published; ART+CoW publishes a copy and
    /// releases two blocks).
    #[test]
    fn a_delete_whose_merge_cannot_release_the_node_is_counted() {
        let leaf_child: &[&[u8]] = &[&[0x20]];
        let node_child: &[&[u8]] = &[&[0x20, 1], &[0x20, 2]];
        for others in [leaf_child, node_child] {
            for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
                let pool = Arc::new(
                    Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap(),
                );
                let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
                t.put(&[0x10], b"a", PutMode::Upsert).unwrap();
                for k in others {
                    t.put(k, b"b", PutMode::Upsert).unwrap();
                }
                let n = pool.load_u64(t.root_slot()).unwrap();
                assert_ne!(nodes::kind(&pool, n).unwrap(), Kind::Leaf);
                let fake = fake_node(&mut t, n);
                pool.store_u64(t.root_slot(), fake).unwrap();
                assert!(t.search().lookup(&[0x10]).unwrap().is_some());
                let before = t.len();
                let e = t.delete(&[0x10]).unwrap_err().to_string();
                assert!(e.contains("no block"), "{flavor:?} {others:?}: {e}");
                assert!(t.search().lookup(&[0x10]).unwrap().is_none(), "{flavor:?}");
                for k in others {
                    assert!(t.search().lookup(k).unwrap().is_some(), "{flavor:?} {k:?}");
                }
                assert_eq!(t.len(), before - 1, "{flavor:?} {others:?}");
            }
        }
    }

    /// An insert that grows (WOART) or copies (ART+CoW) a full NODE4
    /// releases the old node after its commit; if that fails (the node is
    /// a copy inside a value), the insert is durable and counted, and the
    /// error returned. Before, `len` missed the key.
    #[test]
    fn an_insert_whose_old_node_cannot_be_released_is_counted() {
        for flavor in [Flavor::Woart, Flavor::ArtCow] {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "woart", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            for k in [0x10u8, 0x20, 0x30, 0x50] {
                t.put(&[k], b"a", PutMode::Upsert).unwrap();
            }
            let n = pool.load_u64(t.root_slot()).unwrap();
            assert_eq!(nodes::kind(&pool, n).unwrap(), Kind::N4, "{flavor:?}");
            let fake = fake_node(&mut t, n);
            pool.store_u64(t.root_slot(), fake).unwrap();
            let before = t.len();
            let e = t
                .put(&[0x60], b"z", PutMode::Upsert)
                .unwrap_err()
                .to_string();
            assert!(e.contains("no block"), "{flavor:?}: {e}");
            assert!(t.search().lookup(&[0x60]).unwrap().is_some(), "{flavor:?}");
            assert_eq!(t.len(), before + 1, "{flavor:?}");
        }
    }

    /// A large leaf's chunk is unlinked from the chunk list when the leaf
    /// is released, by the substrate's `free_and_store` on the slot before
    /// it, which frees whatever that slot holds. In a damaged list whose
    /// slot holds another chunk, that was a live chunk: freed, with a key's
    /// leaf in it. Now the unlink refuses, and nothing is freed.
    #[test]
    fn a_chunk_that_its_list_slot_does_not_hold_is_not_unlinked() {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
        let (v1, v2) = (vec![1u8; 40 << 10], vec![2u8; 40 << 10]);
        t.put(&[1], &v1, PutMode::Upsert).unwrap();
        t.put(&[2], &v2, PutMode::Upsert).unwrap();
        // A large leaf is its chunk's one block, at `FIRST`.
        let chunk =
            |t: &RadixTree, k: u8| t.search().lookup(&[k]).unwrap().unwrap().0 - chunks::FIRST;
        let (a, b) = (chunk(&t, 1), chunk(&t, 2));
        // Damage: the slot that holds `b` skips it.
        let mut slot = t.sb + superblock::CHUNKS;
        while pool.load_u64(slot).unwrap() != b {
            slot = pool.load_u64(slot).unwrap() + chunks::NEXT;
        }
        pool.store_u64(slot, pool.load_u64(b + chunks::NEXT).unwrap())
            .unwrap();
        assert_eq!(pool.load_u64(slot).unwrap(), a, "b's next is a");
        let r = t.delete(&[2]);
        assert!(
            pool.block_size(a).is_ok(),
            "the live chunk is still allocated"
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("does not hold"), "{e}");
        assert!(
            t.search().lookup(&[2]).unwrap().is_none(),
            "the delete stands"
        );
        assert_eq!(t.len(), 1);
        let mut got = Vec::new();
        t.get_with(&[1], &mut |v| got = v.to_vec()).unwrap();
        assert_eq!(got, v1);
    }

    /// The same unlink with the chunk's own `next` rewritten (to null, so
    /// that this damage alone cuts nothing the walk below needs): the
    /// unlink compares `next` with the DRAM map's successor and refuses,
    /// changing nothing in PM. Before, a null `next` passed the check and
    /// the chunk was freed and the list rewritten on the damaged word.
    #[test]
    fn a_chunk_whose_next_was_rewritten_is_not_unlinked() {
        let pool = Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Wort).unwrap();
        t.put(&[1], &vec![1u8; 40 << 10], PutMode::Upsert).unwrap();
        t.put(&[2], &vec![2u8; 40 << 10], PutMode::Upsert).unwrap();
        let chunk =
            |t: &RadixTree, k: u8| t.search().lookup(&[k]).unwrap().unwrap().0 - chunks::FIRST;
        let (a, b) = (chunk(&t, 1), chunk(&t, 2));
        assert_eq!(pool.load_u64(b + chunks::NEXT).unwrap(), a);
        let mut slot = t.sb + superblock::CHUNKS;
        while pool.load_u64(slot).unwrap() != b {
            slot = pool.load_u64(slot).unwrap() + chunks::NEXT;
        }
        pool.store_u64(b + chunks::NEXT, 0).unwrap();
        let e = t.delete(&[2]).unwrap_err().to_string();
        assert!(e.contains("next is not"), "{e}");
        assert_eq!(pool.load_u64(slot).unwrap(), b, "the list is as it was");
        assert!(pool.block_size(b).is_ok(), "the chunk is not freed");
        assert!(
            t.search().lookup(&[2]).unwrap().is_none(),
            "the delete stands"
        );
    }

    #[test]
    fn a_node_in_an_end_slot_is_an_error_not_an_endless_walk() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let pool =
                Arc::new(Pool::create_anonymous(16 << 20, "wort", &Default::default()).unwrap());
            let mut t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            // One node, branching where key [1] ends: [1] in its end slot.
            t.put(&[1], b"a", PutMode::Upsert).unwrap();
            t.put(&[1, 5], b"b", PutMode::Upsert).unwrap();
            let n = pool.load_u64(t.root_slot()).unwrap();
            assert_ne!(nodes::kind(&pool, n).unwrap(), Kind::Leaf);
            let end = nodes::block_of(n) + END;
            assert_ne!(pool.load_u64(end).unwrap(), 0);
            // Damage: the end slot points back at its node, a cycle that
            // a walk would follow for ever without the end-slot check.
            pool.store_u64(end, n).unwrap();
            let e = t.search().lookup(&[1]).unwrap_err().to_string();
            assert!(e.contains("end slot"), "{flavor:?}: {e}");
            // The batched search too, beside a key it still finds.
            let mut answers = Vec::new();
            t.search()
                .lookup_many(&[&[1], &[1, 5]], |i, r| answers.push((i, r)));
            answers.sort_by_key(|(i, _)| *i);
            assert!(answers[0]
                .1
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("end slot"));
            assert!(answers[1].1.as_ref().unwrap().0.is_some());
            assert!(t.search().lookup(&[1, 5]).unwrap().is_some());
            // Writes and scans too: before, a put or delete of [1] walked
            // the cycle for ever (holding the write lock), and a scan
            // recursed until the stack overflowed.
            for r in [
                t.put(&[1], b"z", PutMode::Upsert).map(|_| ()),
                t.put(&[1], b"z", PutMode::Update).map(|_| ()),
                t.delete(&[1]).map(|_| ()),
                t.scan(Bound::Unbounded, Bound::Unbounded, &mut |_, _| true),
            ] {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("end slot"), "{flavor:?}: {e}");
            }
        }
    }

    #[test]
    fn check_finds_a_dram_map_that_differs_from_the_tree() {
        let pool =
            Arc::new(Pool::create_anonymous(16 << 20, "woart", &Default::default()).unwrap());
        let mut t = RadixTree::create(Arc::clone(&pool), Flavor::Woart).unwrap();
        for i in 0..100u32 {
            t.put(&i.to_be_bytes(), b"v", PutMode::Upsert).unwrap();
        }
        t.check_impl().unwrap();
        // In use in DRAM, never published: a leak until reopen.
        let b = t.reserve(64).unwrap();
        let e = t.check_impl().unwrap_err().to_string();
        assert!(e.contains("leak"), "{e}");
        t.cancel(b).unwrap();
        t.check_impl().unwrap();
        // Reached, but free in DRAM: it would be handed out twice.
        let (leaf, _) = t.search().lookup(&5u32.to_be_bytes()).unwrap().unwrap();
        t.release(leaf).unwrap();
        let e = t.check_impl().unwrap_err().to_string();
        assert!(e.contains("free in the DRAM map"), "{e}");
    }

    /// Every pointer word of a tree (root, `end` slots, children), with
    /// the kind of the block it names.
    fn pointer_words(t: &RadixTree) -> Vec<(u64, u64, Kind)> {
        fn walk(t: &RadixTree, slot: u64, out: &mut Vec<(u64, u64, Kind)>) {
            let w = t.pool.load_u64(slot).unwrap();
            if w == 0 {
                return;
            }
            let kind = nodes::kind(&t.pool, w).unwrap();
            out.push((slot, w, kind));
            if kind != Kind::Leaf {
                walk(t, nodes::block_of(w) + END, out);
                for e in nodes::entries(&t.pool, w, kind).unwrap() {
                    walk(t, e.slot, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(t, t.root_slot(), &mut out);
        out
    }

    /// Format 4 tags every pointer to a leaf, and no pointer to a node but
    /// a WORT node's slot map (some nonzero), in every place a pointer is
    /// stored or moved: an insert into an empty slot and into each ART
    /// kind (in place and by copy), a leaf expansion, a split, growth, an
    /// update, an `end` slot, a shrink, and a merge that moves a leaf or a
    /// node up (a leaf to the root too). Formats 2 and 3 tag nothing.
    /// Searches, `check` and a reopen agree with a model.
    #[test]
    fn leaf_pointers_are_tagged_in_format_4_only() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            for version in [2, 3, 4] {
                let pool = Arc::new(
                    Pool::create_anonymous(32 << 20, flavor.name(), &Default::default()).unwrap(),
                );
                let mut t = RadixTree::create_format(Arc::clone(&pool), flavor, version).unwrap();
                let mut model = std::collections::BTreeMap::new();
                let maps = std::cell::Cell::new(0);
                let tags = |t: &RadixTree| {
                    let words = pointer_words(t);
                    assert!(!words.is_empty());
                    for (slot, w, kind) in words {
                        let what = format!(
                            "{flavor:?} format {version}: slot {slot:#x} holds {w:#x} ({kind:?})"
                        );
                        match kind {
                            _ if version < 4 => assert_eq!(w & nodes::TAGS, 0, "{what}"),
                            Kind::Leaf => assert_eq!(w & nodes::TAGS, nodes::LEAF_TAG, "{what}"),
                            Kind::W16 => {
                                assert_eq!(w & nodes::LEAF_TAG, 0, "{what}");
                                maps.set(maps.get() + usize::from(w & nodes::w16::MAP != 0));
                            }
                            _ => assert_eq!(w & nodes::TAGS, 0, "{what}"),
                        }
                    }
                };
                // One leaf at the root.
                t.put(b"root", b"r", PutMode::Upsert).unwrap();
                model.insert(b"root".to_vec(), b"r".to_vec());
                tags(&t);
                // Growth through every ART kind, a prefix key (`end`),
                // a split (a key leaving `pre/`'s path), updates.
                for i in 0..300u32 {
                    let k = format!("pre/{:03}", i * 7 % 300).into_bytes();
                    t.put(&k, &i.to_le_bytes(), PutMode::Upsert).unwrap();
                    model.insert(k, i.to_le_bytes().to_vec());
                }
                for (k, v) in [
                    (&b"pre"[..], &b"end"[..]),
                    (b"pr", b"split"),
                    (b"pre/007", b"upd"),
                ] {
                    t.put(k, v, PutMode::Upsert).unwrap();
                    model.insert(k.to_vec(), v.to_vec());
                }
                tags(&t);
                // Shrinks and merges, down to one leaf at the root.
                let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
                for (n, k) in keys.iter().enumerate() {
                    if k.as_slice() == b"pre/123" {
                        continue;
                    }
                    assert!(t.delete(k).unwrap());
                    model.remove(k);
                    if n % 37 == 0 {
                        tags(&t);
                    }
                }
                assert_eq!(model.len(), 1);
                tags(&t);
                let (slot, w, kind) = pointer_words(&t)[0];
                assert_eq!((slot, kind), (t.root_slot(), Kind::Leaf), "{flavor:?}");
                assert_eq!(w & nodes::LEAF_TAG, u64::from(version >= 4));
                let maps = maps.get();
                assert_eq!(
                    maps > 0,
                    flavor == Flavor::Wort && version >= 4,
                    "{flavor:?} format {version}: {maps} WORT nodes with a map"
                );
                for k in ["pre/123", "pre/12", "x"] {
                    let mut got = None;
                    t.get_with(k.as_bytes(), &mut |v| got = Some(v.to_vec()))
                        .unwrap();
                    assert_eq!(got.as_ref(), model.get(k.as_bytes()), "{flavor:?} {k}");
                }
                t.check().unwrap();
                drop(t);
                let t = RadixTree::open(Arc::clone(&pool), flavor).unwrap();
                assert_eq!(t.version, version);
                assert_eq!(t.len(), 1);
                tags(&t);
            }
        }
    }

    /// A pointer whose tags do not match its block is damage (no crash
    /// leaves one: a pointer is stored whole): `check` and open refuse a
    /// format 4 leaf pointer without its tag or with map bits, a node
    /// pointer with the leaf tag, an ART node pointer with map bits, and
    /// in format 3 a leaf pointer with its tag and a WORT node pointer with
    /// a map.
    #[test]
    fn a_wrong_leaf_tag_is_damage() {
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            for (version, damage, bits) in [
                (4, "untag a leaf", nodes::LEAF_TAG),
                (4, "tag a node", nodes::LEAF_TAG),
                (4, "map bits on a leaf", 0x8),
                (4, "map bits on a node", 0x8),
                (3, "tag a leaf", nodes::LEAF_TAG),
                (3, "map bits on a node", 0x8),
            ] {
                if flavor == Flavor::Wort && version == 4 && damage == "map bits on a node" {
                    // Any map is a WORT node's own (changing it misplaces
                    // its children, which `check` finds by their keys).
                    continue;
                }
                let pool = Arc::new(
                    Pool::create_anonymous(16 << 20, flavor.name(), &Default::default()).unwrap(),
                );
                let mut t = RadixTree::create_format(Arc::clone(&pool), flavor, version).unwrap();
                for k in [&b"ab"[..], b"ac", b"b", b"bcd", b"bce"] {
                    t.put(k, b"v", PutMode::Upsert).unwrap();
                }
                t.check().unwrap();
                let words = pointer_words(&t);
                let want_leaf = damage.ends_with("leaf");
                let &(slot, w, _) = words
                    .iter()
                    .rfind(|&&(_, _, k)| (k == Kind::Leaf) == want_leaf)
                    .unwrap();
                pool.store_u64(slot, w ^ bits).unwrap();
                let e = t.check().unwrap_err().to_string();
                assert!(e.contains("leaf tag"), "{flavor:?} {damage}: {e}");
                drop(t);
                let e = RadixTree::open(Arc::clone(&pool), flavor)
                    .err()
                    .unwrap_or_else(|| panic!("{flavor:?} {damage}: opened"));
                assert!(
                    matches!(e, Error::Corrupt { .. }),
                    "{flavor:?} {damage}: {e}"
                );
                assert!(
                    e.to_string().contains("leaf tag"),
                    "{flavor:?} {damage}: {e}"
                );
            }
        }
    }
}
