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
mod caches;
pub mod chunks;
mod compact;
pub use compact::{compactions, MOVE_MAX};
pub mod header;
pub mod leaf;
pub mod nodes;
mod recovery;
mod search;
pub mod span;
pub mod striped;
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
use caches::Caches;
use chunks::{Block, Chunks};
use header::Header;
use nodes::{Kind, END};
use parking_lot::RwLock;
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
    // Striped writers by default since 2026-11-27 (docs/design.md §11,
    // "Writers of different root children at once").
    let mut striped = true;
    let mut asked = None;
    let mut compact = true;
    for (k, v) in super::settings(
        config,
        flavor.name(),
        &["reads", "format", "writers", "compact"],
    )? {
        if k == "reads" {
            reads = Reads::parse(&format!("{}.reads", flavor.name()), v)?;
        } else if k == "compact" {
            compact = match v {
                "on" => true,
                "off" => false,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{}.compact `{v}`: expected on (a put that finds the pool full \
                         moves blocks to empty chunks for it, the default) or off",
                        flavor.name()
                    )))
                }
            };
        } else if k == "writers" {
            striped = match v {
                "striped" => true,
                "locked" => false,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{}.writers `{v}`: expected striped (writers of different root \
                         children at once, the default) or locked (one writer at a time)",
                        flavor.name()
                    )))
                }
            };
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
    let mut tree = if create {
        RadixTree::create_format(Arc::clone(&pool), flavor, version)?
    } else {
        RadixTree::open_format(Arc::clone(&pool), flavor, version)?
    };
    tree.compact = compact;
    if let Some(v) = asked.filter(|&v| v != tree.version) {
        return Err(Error::InvalidArgument(format!(
            "{}.format={v}, but this pool has format {}; it is fixed at creation",
            flavor.name(),
            tree.version
        )));
    }
    if striped {
        return Ok(Box::new(striped::Striped::new(pool, tree, reads)));
    }
    let writers = format!("{}.writers", flavor.name());
    Ok(Box::new(
        Locked::with_reads(pool, tree, reads).with_setting(writers, "locked".into()),
    ))
}

/// One of the three radix trees (serial; wrapped in
/// [`striped::Striped`], whose writers of different root children run at
/// once, the default, or in [`Locked`], the tree-wide reader-writer lock
/// the paper used inside Memcached: `<engine>.writers`).
pub struct RadixTree {
    pool: Arc<Pool>,
    flavor: Flavor,
    span: Span,
    /// The superblock.
    sb: u64,
    /// Which blocks of the tree's chunks are in use (DRAM only). Under the
    /// tree-wide lock (`writers=locked`) it only makes the tree `Sync`;
    /// striped writers of different stripes take it in turn, through
    /// `caches`.
    heap: RwLock<Chunks>,
    /// Per-thread blocks reserved ahead of use (from `heap` in groups, or
    /// kept when released), and the key count (counted at open, kept in
    /// DRAM; writers of different stripes change it at once, see
    /// [`striped`]).
    caches: Caches,
    /// The state of a batch of puts ([`RadixTree::put_many_impl`]).
    batch: Batch,
    /// The superblock's format version (2, 3 or 4).
    version: u64,
    /// What a pointer to a leaf carries: [`nodes::LEAF_TAG`] in format 4,
    /// else 0.
    leaf_tag: u64,
    /// A put that finds the pool full compacts the heap and tries again
    /// (`<engine>.compact`, on by default: `compact.rs`).
    compact: bool,
    /// 0, or 1 + the heap's [`Chunks::taken`] when the last compaction
    /// gave nothing back, cleared by the next release of a block: while
    /// it holds (no block released and no chunk taken since), another
    /// compaction would find the same chunks, so a put that finds the pool
    /// full neither compacts nor, under striped writers, takes the whole
    /// tree to (`compact.rs`, "A futile compaction").
    futile: AtomicU64,
    /// Compactions this tree began since it was opened (whatever they gave
    /// back; under the whole tree).
    compactions_tried: u64,
}

thread_local! {
    /// The first error of a block that a durable commit unlinked and that
    /// could not be given back ([`RadixTree::release_unlinked`]); the
    /// operation returns it once its DRAM state follows the commit. Kept
    /// per thread: writers of different stripes run at once ([`striped`]),
    /// and each operation must return its own.
    static LATE: std::cell::Cell<Option<Error>> = const { std::cell::Cell::new(None) };
}

/// What a writer holds of the tree while it walks (see [`striped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// The whole tree: no other writer or locked reader runs.
    Tree,
    /// The stripe of the key's unit at the root node's branch: the writer
    /// may change the blocks below the root node and the root node's slot
    /// for that unit (or its `end` slot, for a key that ends there), and
    /// nothing else; nor may it read what other stripes own. Other
    /// stripes' writers run at once.
    Below {
        /// The root node's compressed path (its units from 0 to its
        /// branch), kept by the holders of the whole tree: a path longer
        /// than the header holds is otherwise read from a leaf under the
        /// root, which another stripe's writer may be freeing.
        root_path: &'a [u8],
    },
}

/// The error of a walk that asked for the whole tree while holding it
/// ([`Scope::Tree`] never asks; this is a bug, reported rather than
/// panicked on).
fn whole_tree_refused() -> Error {
    Error::InvalidArgument("radix: a walk holding the whole tree asked for it (a bug)".into())
}

/// Keeps `e` as the calling thread's late error unless one is kept
/// already ([`RadixTree::late_error`] returns it).
fn keep_late(e: Error) {
    let first = LATE.take();
    LATE.set(Some(first.unwrap_or(e)));
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
            caches: Caches::new(heap.between()),
            heap: RwLock::new(heap),
            batch: Batch::default(),
            version,
            leaf_tag: if version >= 4 { nodes::LEAF_TAG } else { 0 },
            compact: true,
            futile: AtomicU64::new(0),
            compactions_tried: 0,
        })
    }

    /// Reserves a block of at least `size` bytes (DRAM only, unless a new
    /// chunk is taken: see [`chunks`]), through this thread's cache.
    fn reserve(&self, size: u64) -> Result<Block> {
        self.caches.reserve(&self.heap, &self.pool, size)
    }

    /// [`Self::reserve`] with the whole tree held: from the heap itself,
    /// no lock taken; if it is out of space, the threads' caches go back
    /// to it first.
    fn reserve_whole(&mut self, size: u64) -> Result<Block> {
        match self.heap.get_mut().reserve(&self.pool, size) {
            Err(Error::PoolFull { .. }) => {
                self.caches.give_all_back(&self.heap, &self.pool)?;
                self.heap.get_mut().reserve(&self.pool, size)
            }
            r => r,
        }
    }

    /// Gives back a reserved block that will not be published.
    fn cancel(&self, b: Block) -> Result<()> {
        self.caches.cancel(&self.heap, &self.pool, b)
    }

    /// Gives back a block the tree no longer reaches; the store that
    /// unlinked it is durable, or, in a batch of puts, will be at the
    /// batch's last fence, after which the block is given back.
    fn release(&self, off: u64) -> Result<()> {
        // Room again, perhaps, for a compaction: cleared before the block
        // goes back, so that a put which then finds the flag set found the
        // pool full before this release.
        if self.futile.load(Ordering::SeqCst) != 0 {
            self.futile.store(0, Ordering::SeqCst);
        }
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
        self.caches.release(&self.heap, &self.pool, off)
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
            keep_late(e);
        }
    }

    /// `r`, or the error kept by [`RadixTree::release_unlinked`] during the
    /// operation that gave `r` (which then did change the tree).
    fn late_error<T>(&self, r: Result<T>) -> Result<T> {
        match LATE.take() {
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
        self.heap.read().block_size(nodes::block_of(off))
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

    /// The root node's branch position (the unit its children are
    /// chosen by) and its compressed path (the units before it), or `None`
    /// if the root is empty, a leaf, or unreadable (then
    /// [`striped::Striped`] writers hold the whole tree). The caller holds
    /// the whole tree (the path may be read from a leaf).
    fn root_shape(&self) -> Option<(usize, Vec<u8>)> {
        let pw = self.pool.load_u64(self.root_slot()).ok()?;
        let p = nodes::block_of(pw);
        if p == 0 {
            return None;
        }
        let w = self.pool.load_u64(p).ok()?;
        match Kind::of(p, w).ok()? {
            Kind::Leaf => None,
            _ => {
                let h = Header::decode(w);
                let path = self.path_units(pw, &h, 0).ok()?;
                (path.len() == h.branch()).then_some((h.branch(), path))
            }
        }
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
        Ok(
            match self.scan_children(&entries, br, path, b, f, |_| true)? {
                Children::Walked => true,
                Children::Stopped => false,
                // Not reached: every child is this walk's.
                Children::NotMine(_) => true,
            },
        )
    }

    /// Walks the children `entries` of a node that branches at `br` in
    /// order (`path[..br]` the units above them), pruned by the bounds, up
    /// to the first child in bounds whose unit `mine` refuses, which it
    /// does not read. From the first child in bounds on, the children's
    /// first lines start loading `SCAN_AHEAD` entries before the walk
    /// reaches them, so that the misses of siblings (in the bottom nodes,
    /// a leaf each) overlap instead of coming one after another
    /// (docs/design.md §11, "Ordered scans"); one of a child that is not
    /// `mine` is a hint (a load at most). Inlined into both callers: a
    /// call per node cost scans 2-3% (1M sparse keys, 100-key scans).
    #[inline(always)]
    fn scan_children(
        &self,
        entries: &[nodes::Entry],
        br: usize,
        path: &mut Vec<u8>,
        b: &ScanBounds<'_>,
        f: &mut ScanFn<'_>,
        mine: impl Fn(u8) -> bool,
    ) -> Result<Children> {
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
                return Ok(Children::Stopped);
            }
            if !mine(e.unit) {
                return Ok(Children::NotMine(e.unit));
            }
            let end = (i + 1 + SCAN_AHEAD).min(entries.len());
            for ahead in &entries[prefetched.max(i + 1)..end] {
                if ahead.ptr != 0 {
                    pm.prefetch(ahead.ptr);
                }
            }
            prefetched = end;
            if !self.scan_rec(e.ptr, br + 1, path, b, f)? {
                return Ok(Children::Stopped);
            }
        }
        Ok(Children::Walked)
    }
}

/// Where [`RadixTree::scan_children`] left a node's children.
enum Children {
    /// All of them in bounds were walked; the scan goes on after them.
    Walked,
    /// The bounds ended, or `f` said stop.
    Stopped,
    /// The child of this unit, in bounds, is not the caller's to walk.
    NotMine(u8),
}

/// Where [`RadixTree::scan_one_stripe`] left a scan.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StripeScan {
    /// The scan is over: its bounds ended, or `f` said stop.
    Done,
    /// The next keys in bounds lie under the root node's child of this
    /// unit (`Some`), or in its end slot (`None`), which the stripe held
    /// does not own; nothing of it was read.
    Next(Option<u8>),
    /// The root is not the node the caller's root path describes (not
    /// reached while a stripe is held, short of damage): scan holding every
    /// stripe.
    Whole,
}

impl RadixTree {
    /// [`SerialEngine::scan`] of what one stripe owns (`striped.rs`): the
    /// root node, with its path from `root_path` (as `Scope::Below`: a
    /// long path is otherwise read from a leaf that another stripe may be
    /// freeing), its end slot if `mine(None)`, and its children `u` with
    /// `mine(Some(u))`, in key order, until the bounds end, `f` stops, or
    /// the next key in bounds lies under a child (or in the end slot) that
    /// `mine` refuses. The caller holds that stripe, for reading at least,
    /// so no whole-tree writer and no writer of those children runs; other
    /// stripes' writers may store into the root node's other slots
    /// meanwhile, which this loads (whole words) but does not follow.
    pub(super) fn scan_one_stripe(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut ScanFn<'_>,
        root_path: &[u8],
        mine: &dyn Fn(Option<u8>) -> bool,
    ) -> Result<StripeScan> {
        let pw = self.pool.load_u64(self.root_slot())?;
        if pw == 0 {
            return Ok(StripeScan::Whole);
        }
        let kind = nodes::kind(&self.pool, pw)?;
        if kind == Kind::Leaf {
            return Ok(StripeScan::Whole);
        }
        let h = Header::decode(self.pool.load_u64(nodes::block_of(pw))?);
        let br = root_path.len();
        if h.depth != 0 || h.branch() != br {
            return Ok(StripeScan::Whole);
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
        let mut path = root_path.to_vec();
        if b.subtree_below_lo(&path) || b.subtree_above_hi(&path) {
            return Ok(StripeScan::Done);
        }
        // The end slot's key is the root's path itself: placed against the
        // bounds without reading its leaf, which another stripe may own.
        let end = self.pool.load_u64(nodes::block_of(pw) + END)?;
        if end != 0 && !b.key_below_lo(&path) {
            if b.key_above_hi(&path) {
                return Ok(StripeScan::Done);
            }
            if !mine(None) {
                return Ok(StripeScan::Next(None));
            }
            if nodes::kind(&self.pool, end)? != Kind::Leaf {
                return Err(Error::corrupt(end, "radix: node in an end slot"));
            }
            if !self.scan_rec(end, br, &mut path, &b, f)? {
                return Ok(StripeScan::Done);
            }
        }
        let entries = nodes::entries(&self.pool, pw, kind)?;
        let mine_unit = |u: u8| mine(Some(u));
        Ok(
            match self.scan_children(&entries, br, &mut path, &b, f, mine_unit)? {
                Children::Walked | Children::Stopped => StripeScan::Done,
                Children::NotMine(u) => StripeScan::Next(Some(u)),
            },
        )
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
        super::above_lo(k, self.lo)
    }
    fn below_hi(&self, k: &[u8]) -> bool {
        super::below_hi(k, self.hi)
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
    /// Whether the key of units `p` (whole: units in order compare as the
    /// key's bytes do) lies below the lower bound.
    fn key_below_lo(&self, p: &[u8]) -> bool {
        match (self.lo, &self.lo_units) {
            (Bound::Included(_), Some(l)) => p < l.as_slice(),
            (Bound::Excluded(_), Some(l)) => p <= l.as_slice(),
            _ => false,
        }
    }
    /// Whether the key of units `p` lies above the upper bound.
    fn key_above_hi(&self, p: &[u8]) -> bool {
        match (self.hi, &self.hi_units) {
            (Bound::Included(_), Some(h)) => p > h.as_slice(),
            (Bound::Excluded(_), Some(h)) => p >= h.as_slice(),
            _ => false,
        }
    }
}

impl SerialEngine for RadixTree {
    fn name(&self) -> &'static str {
        self.flavor.name()
    }

    /// The format (`<engine>.reads` is [`Locked`]'s).
    fn settings(&self) -> EngineConfig {
        let name = self.flavor.name();
        EngineConfig::from([
            (format!("{name}.format"), self.version.to_string()),
            (
                format!("{name}.compact"),
                if self.compact { "on" } else { "off" }.to_string(),
            ),
        ])
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
                // SAFETY: `&self` is held under the tree lock, or under the
                // key's stripe ([`striped`]): no writer of this leaf runs.
                f(unsafe { self.pool.bytes(off, lw.value_len as u64)? });
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        let op = |t: &mut RadixTree| {
            t.put_impl(key, value, mode, Scope::Tree)?
                .ok_or_else(whole_tree_refused)
        };
        let r = op(self);
        self.with_compaction(r, op)
    }

    fn put_many(&mut self, items: &[(&[u8], &[u8])]) -> Result<()> {
        self.put_many_compacting(items)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.delete_impl(key, Scope::Tree)?
            .ok_or_else(whole_tree_refused)
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
        self.caches.count()
    }

    fn check(&self) -> Result<CheckReport> {
        self.check_impl()
    }

    fn dram_bytes(&self) -> u64 {
        // The heap's guard ends with its statement: a shard is never taken
        // while the heap is held (`caches`' lock order).
        let heap = self.heap.read().dram_bytes();
        std::mem::size_of::<Self>() as u64 + heap + self.caches.dram_bytes()
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
mod tests;
