//! `fastfair`: the FAST&FAIR B+-tree of Hwang, Kim, Won and Nam (FAST'18),
//! the PM-only B+-tree that the DPTree paper (§4, Fig. 8 and 12, Table 1)
//! and the art-bplus paper (§5, Fig. 11-14, Table 2) compare with. No copy
//! of its paper is in `../shared/papers/`; the design is the paper's as
//! those two papers describe it ("FAST (Failure-Atomic ShifT) and FAIR
//! (Failure-Atomic In-place Rebalance) to keep node sorted by exploiting
//! properties of modern CPUs", DPTree §5; "tolerating read inconsistency",
//! art-bplus §1) and as the authors' published single-threaded code does
//! it. Decisions of this build are in docs/design.md §15.
//!
//! - **Every node in PM** ([`node`]), leaves and inner nodes alike: sorted
//!   arrays of `(head, pointer)` entries, a sibling pointer on every level
//!   (the B-link structure FAIR relies on), nothing in DRAM but the heap's
//!   map. Searches scan a node's entries in order, as the authors' do.
//! - **Records** ([`record`], `fptree`'s format): a key and its value in
//!   a heap block of their own, which a leaf entry points to (the authors'
//!   entries hold 8-byte keys and value pointers; the keys here are 1 to
//!   250 bytes). A node's lower bound is a record without a value.
//! - **Blocks** come from the radix trees' heap ([`Chunks`]): a block is in
//!   use exactly when the tree reaches it, so an operation a crash cut
//!   short leaks nothing and needs no allocation log.
//! - **Concurrency**: one reader-writer lock over the tree ([`Locked`])
//!   for writers and scans. Point reads take no lock, as the authors' do
//!   ([`reader`], `fastfair.reads=optimistic`, the default): they run
//!   under [`Locked`]'s sequence count, which discards a read that a
//!   writer overlapped, instead of the authors' tolerance of a shift in
//!   flight. That tolerance is what recovery relies on instead.
//!
//! # Persist order
//! - **Insert** into a node with room (FAST, [`node::insert`]): the record
//!   written and flushed; the entries after the new one shifted one slot
//!   right, last first, each line flushed and fenced before the next one
//!   is written; the new entry's pointer stored last: **the commit point**;
//!   flush, **fence**. About one fence per line moved, and one more.
//! - **Split** of a full node `N` (FAIR, the authors' `store`): a new node
//!   `S` and its lower bound's record written with the upper half of `N`'s
//!   entries (an inner node's middle entry becomes `S`'s `leftmost`) and
//!   `S.sibling = N.sibling`, flushed; **fence**; `N.sibling = S`, flush,
//!   **fence** (the split's commit point: `S` is in the tree, and `N`'s
//!   upper half is a copy of it); `N`'s middle entry's pointer nulled
//!   (the upper half cut off), flush, **fence**. Then the entry goes into
//!   `N` or `S`, and `S`'s separator into the parent, a FAST insert that
//!   may split the parent in turn; a full root gets a new root, written,
//!   flushed, **fenced**, and published in the superblock (flush, **fence**).
//!   Every block a cascade of splits needs is reserved before its first
//!   store, so a full pool refuses the insert with nothing changed.
//! - **Update**: a new record written, flushed; **fence**; its offset
//!   stored in the entry (one 8-byte store, the commit point); flush;
//!   **fence**; the old record back to the heap. 2 fences.
//! - **Delete** (FAST, [`node::remove`]): the entry's pointer set to the
//!   one before it (the commit point: it is a trace from then on), then the
//!   entries after it shifted one slot left, a fence per line; the record
//!   back to the heap. Then FAIR's rebalance ([`FastFair::merge`]): a node
//!   left under half full merges with its neighbour under the same parent
//!   when both fit in one node (the authors' redistribution between two
//!   nodes that do not fit is not built), and a root left with no entry
//!   gives way to its child.
//! - **First insert**: the record and a leaf holding it written, flushed;
//!   **fence**; the leaf stored as the root; flush; **fence**.
//!
//! # Recovery ([`recovery`])
//! One walk of every level, marking what it reaches in the heap: a shift a
//! crash cut short is finished, a split's upper half cut off where the
//! crash came before the cut, and a split node missing from its parent
//! gets its separator there, as the split would have stored it.

pub(crate) mod node;
mod reader;
mod recovery;
pub(crate) mod superblock;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::ops::Bound;
use std::sync::Arc;

use super::fptree::inner::head;
use super::fptree::record;
use super::radix::chunks::{Block, Chunks};
use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    Reads, ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};
use node::{Header, Raw};

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "fastfair",
    paper:
        "Hwang et al., FAST&FAIR (FAST'18): a B+-tree wholly in PM, sorted by failure-atomic shifts",
    create,
    open,
};

/// The settings: `fastfair.node_bytes` (when the pool is made), as entry
/// slots, and `fastfair.reads` ([`Locked`]'s, each open).
fn parse_settings(config: &EngineConfig) -> Result<(Option<u32>, Reads)> {
    let mut slots = None;
    let mut reads = Reads::Optimistic;
    for (k, v) in super::settings(config, INFO.name, &["node_bytes", "reads"])? {
        if k == "reads" {
            reads = Reads::parse("fastfair.reads", v)?;
            continue;
        }
        slots = Some(
            v.parse::<u64>()
                .ok()
                .and_then(node::slots_of_bytes)
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "fastfair.node_bytes `{v}`: expected {} to {} bytes, 64 plus a multiple of 16",
                        node::size(*node::SLOTS.start()),
                        node::size(*node::SLOTS.end())
                    ))
                })?,
        );
    }
    Ok((slots, reads))
}

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let (slots, reads) = parse_settings(config)?;
    let tree = FastFair::create(Arc::clone(&pool), slots.unwrap_or(node::DEFAULT_SLOTS))?;
    Ok(Box::new(Locked::with_reads(pool, tree, reads)))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let (slots, reads) = parse_settings(config)?;
    let tree = FastFair::open(Arc::clone(&pool), slots)?;
    Ok(Box::new(Locked::with_reads(pool, tree, reads)))
}

/// The fastfair engine (serial; wrapped in [`Locked`]).
pub struct FastFair {
    pool: Arc<Pool>,
    sb: u64,
    /// Entry slots per node.
    slots: u32,
    heap: Chunks,
    /// The root node (the superblock's `root`), or 0.
    root: u64,
    count: u64,
}

/// An entry on its way into a node: its head, its pointer, its whole key
/// (borrowed for a put's own key, owned for a separator).
struct Pending<'k> {
    head: u64,
    ptr: u64,
    key: Cow<'k, [u8]>,
}

/// What a cascade of splits needs, reserved before its first store.
struct Reserved {
    /// Per split, from the lowest level up: the new node and its lower
    /// bound's record.
    splits: Vec<(Block, Block)>,
    /// The new root, if the root splits too.
    root: Option<Block>,
}

impl FastFair {
    /// Makes an empty tree whose nodes have `slots` entry slots in a new
    /// pool.
    pub fn create(pool: Arc<Pool>, slots: u32) -> Result<FastFair> {
        if !node::SLOTS.contains(&slots) {
            return Err(Error::InvalidArgument(format!(
                "fastfair: {slots} entry slots per node; expected {} to {}",
                node::SLOTS.start(),
                node::SLOTS.end()
            )));
        }
        let sb = superblock::create(&pool, slots)?;
        let heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
        Ok(FastFair {
            pool,
            sb,
            slots,
            heap,
            root: 0,
            count: 0,
        })
    }

    /// Recovers the tree of a pool (see [`recovery`]). `slots`, if given,
    /// must be what the pool was made with; it is checked before recovery
    /// writes anything.
    pub fn open(pool: Arc<Pool>, slots: Option<u32>) -> Result<FastFair> {
        recovery::open(pool, slots)
    }

    fn node_size(&self) -> u64 {
        node::size(self.slots)
    }

    /// The key of the record at `rec`.
    fn rec_key(&self, rec: u64) -> Result<&[u8]> {
        let w = self.pool.words().load(rec)?;
        let k = (w & 0xFFFF) as usize;
        self.pool.touch(rec, record::size(k, 0));
        // SAFETY: a reachable record is never written again; writers hold
        // the tree exclusively.
        unsafe { record::key(&self.pool, rec, k) }
    }

    /// The lower bound of `node` (empty for the first node of a level).
    fn low_key(&self, node: u64) -> Result<&[u8]> {
        let low = self.pool.words().load(node + node::LOW)?;
        self.pool.touch(node, 8);
        if low == 0 {
            return Ok(&[]);
        }
        self.rec_key(low)
    }

    /// The key entry `ptr` of a node at `level` stands for: a leaf's
    /// record's key, an inner node's child's lower bound.
    fn entry_key(&self, level: u64, ptr: u64) -> Result<&[u8]> {
        if level == 0 {
            self.rec_key(ptr)
        } else {
            self.low_key(ptr)
        }
    }

    /// The child of inner node `n` (header `h`) whose keys hold `key`:
    /// the last entry at or below it, or `leftmost`.
    fn child_for(&self, n: u64, h: &Header, key: &[u8], kh: u64) -> Result<u64> {
        let w = self.pool.words();
        let mut child = h.leftmost;
        let mut i = 0;
        while i < self.slots {
            let p = w.load(node::ptr_at(n, i))?;
            if p == 0 {
                break;
            }
            let eh = w.load(node::head_at(n, i))?;
            if eh > kh || (eh == kh && self.low_key(p)? > key) {
                break;
            }
            child = p;
            i += 1;
        }
        self.pool.touch(
            n + node::ENTRY0,
            node::ENTRY * u64::from((i + 1).min(self.slots)),
        );
        Ok(child)
    }

    /// The nodes from the root down to the one at `level` whose keys hold
    /// `key`, with their headers. The tree must have a root.
    fn path_to(&self, key: &[u8], kh: u64, level: u64) -> Result<Vec<(u64, Header)>> {
        let mut path = Vec::with_capacity(8);
        let mut n = self.root;
        loop {
            let h = Header::read(&self.pool, n)?;
            if h.level == level {
                path.push((n, h));
                return Ok(path);
            }
            if h.level < level || h.level > node::MAX_LEVEL || path.len() > node::MAX_LEVEL as usize
            {
                return Err(Error::corrupt(
                    n,
                    "fastfair: a node's level does not fit its path",
                ));
            }
            let c = self.child_for(n, &h, key, kh)?;
            path.push((n, h));
            n = c;
        }
    }

    /// The leaf whose keys hold `key`.
    fn leaf_for(&self, key: &[u8], kh: u64) -> Result<u64> {
        let mut n = self.root;
        for _ in 0..=node::MAX_LEVEL {
            let h = Header::read(&self.pool, n)?;
            if h.level == 0 {
                return Ok(n);
            }
            n = self.child_for(n, &h, key, kh)?;
        }
        Err(Error::corrupt(n, "fastfair: a path deeper than any tree"))
    }

    /// Where `key` is or would go in `leaf`: the first entry at or above
    /// it, and that entry's record if it is `key`'s.
    fn leaf_find(&self, leaf: u64, key: &[u8], kh: u64) -> Result<(u32, Option<u64>)> {
        let w = self.pool.words();
        let mut i = 0;
        let mut found = None;
        while i < self.slots {
            let p = w.load(node::ptr_at(leaf, i))?;
            if p == 0 {
                break;
            }
            let eh = w.load(node::head_at(leaf, i))?;
            if eh > kh {
                break;
            }
            if eh == kh {
                match self.rec_key(p)?.cmp(key) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => {
                        found = Some(p);
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            i += 1;
        }
        self.pool.touch(
            leaf + node::ENTRY0,
            node::ENTRY * u64::from((i + 1).min(self.slots)),
        );
        Ok((i, found))
    }

    /// Where an entry of `key` goes among the entries `raw` of a node at
    /// `level` (the key is not there): the first entry above it.
    fn position(&self, raw: &Raw, level: u64, key: &[u8], kh: u64) -> Result<u32> {
        for i in 0..raw.len() as usize {
            let eh = raw.heads[i];
            if eh > kh || (eh == kh && self.entry_key(level, raw.ptrs[i])? > key) {
                return Ok(i as u32);
            }
        }
        Ok(raw.len())
    }

    /// The value of the record at `rec`.
    fn value(&self, rec: u64) -> Result<&[u8]> {
        let w = self.pool.words().load(rec)?;
        let (k, v) = (w & 0xFFFF, (w >> 16) & 0xFFFF_FFFF);
        let at = rec + record::HEADER + k;
        self.pool.touch(at, v);
        // SAFETY: as in `rec_key`.
        unsafe { self.pool.bytes(at, v) }
    }

    /// Writes a record of `key` and `value` into the reserved block `b`
    /// and flushes it (not fenced: the caller's next fence orders it).
    fn write_record(&self, b: &Block, key: &[u8], value: &[u8]) -> Result<u64> {
        let rec = b.offset();
        // SAFETY: the block is reserved by us and unreachable; writers hold
        // the tree exclusively.
        unsafe {
            self.pool
                .write_bytes(rec, &record::lens(key.len(), value.len()).to_le_bytes())?;
            self.pool.write_bytes(rec + record::HEADER, key)?;
            self.pool
                .write_bytes(rec + record::HEADER + key.len() as u64, value)?;
        }
        self.pool.flush(rec, record::size(key.len(), value.len()));
        Ok(rec)
    }

    /// Reserves a block for a record of `key` and `value`.
    fn reserve_record(&mut self, key: &[u8], value: &[u8]) -> Result<Block> {
        self.heap
            .reserve(&self.pool, record::size(key.len(), value.len()))
    }

    /// Gives back reserved blocks that will not be published.
    fn cancel(&mut self, blocks: impl IntoIterator<Item = Block>) {
        for b in blocks {
            // A block whose cancel fails stays reserved until the next open.
            let _ = self.heap.cancel(&self.pool, b);
        }
    }

    /// Writes a whole node image into the reserved block `b` and flushes it.
    fn write_node(&self, b: &Block, img: &[u8]) -> Result<u64> {
        let n = b.offset();
        // SAFETY: reserved by us and unreachable.
        unsafe { self.pool.write_bytes(n, img)? };
        self.pool.flush(n, img.len() as u64);
        Ok(n)
    }

    /// A node image: header, entries, the rest zero.
    fn image(&self, h: &Header, heads: &[u64], ptrs: &[u64]) -> Vec<u8> {
        let mut img = vec![0u8; self.node_size() as usize];
        for (at, v) in [
            (node::LEFTMOST, h.leftmost),
            (node::SIBLING, h.sibling),
            (node::LEVEL, h.level),
            (node::LOW, h.low),
        ] {
            img[at as usize..][..8].copy_from_slice(&v.to_le_bytes());
        }
        for (i, (&eh, &p)) in heads.iter().zip(ptrs).enumerate() {
            let at = (node::ENTRY0 + node::ENTRY * i as u64) as usize;
            img[at..][..8].copy_from_slice(&eh.to_le_bytes());
            img[at + 8..][..8].copy_from_slice(&p.to_le_bytes());
        }
        img
    }

    /// The first insert: see the module doc.
    fn first_leaf(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let rb = self.reserve_record(key, value)?;
        let lb = match self.heap.reserve(&self.pool, self.node_size()) {
            Ok(b) => b,
            Err(e) => {
                self.cancel([rb]);
                return Err(e);
            }
        };
        let rec = self.write_record(&rb, key, value)?;
        let h = Header {
            leftmost: 0,
            sibling: 0,
            level: 0,
            low: 0,
        };
        let img = self.image(&h, &[head(key)], &[rec]);
        let leaf = self.write_node(&lb, &img)?;
        self.pool.fence();
        self.pool.store_u64(self.sb + superblock::ROOT, leaf)?;
        self.pool.flush(self.sb + superblock::ROOT, 8);
        self.pool.fence();
        self.root = leaf;
        self.count = 1;
        Ok(())
    }

    /// The key a split of the full node `n` (at `level`, entries `raw`)
    /// moves up: its middle entry's.
    fn split_key(&self, level: u64, raw: &Raw) -> Result<Vec<u8>> {
        Ok(self
            .entry_key(level, raw.ptrs[raw.len() as usize / 2])?
            .to_vec())
    }

    /// Reserves what inserting into `path`'s last node takes: a new node
    /// and a bound record per full node from there up, and a root if the
    /// root is full too. Returns the entries of each node of the path read
    /// on the way, from the last node up.
    fn plan(&mut self, path: &[(u64, Header)]) -> Result<(Reserved, Vec<Raw>)> {
        let mut r = Reserved {
            splits: Vec::new(),
            root: None,
        };
        let mut raws = Vec::new();
        let full = self.slots - 1;
        for (i, (n, h)) in path.iter().enumerate().rev() {
            let raw = Raw::read(&self.pool, *n, self.slots)?;
            let is_full = raw.len() >= full;
            raws.push(raw);
            if !is_full {
                break;
            }
            let klen = self.split_key(h.level, raws.last().expect("pushed"))?.len();
            let got = self
                .heap
                .reserve(&self.pool, self.node_size())
                .and_then(
                    |nb| match self.heap.reserve(&self.pool, record::size(klen, 0)) {
                        Ok(kb) => Ok((nb, kb)),
                        Err(e) => {
                            let _ = self.heap.cancel(&self.pool, nb);
                            Err(e)
                        }
                    },
                );
            match got {
                Ok(s) => r.splits.push(s),
                Err(e) => {
                    self.cancel_reserved(r);
                    return Err(e);
                }
            }
            if i == 0 {
                match self.heap.reserve(&self.pool, self.node_size()) {
                    Ok(b) => r.root = Some(b),
                    Err(e) => {
                        self.cancel_reserved(r);
                        return Err(e);
                    }
                }
            }
        }
        Ok((r, raws))
    }

    fn cancel_reserved(&mut self, r: Reserved) {
        let blocks: Vec<Block> = r
            .splits
            .into_iter()
            .flat_map(|(a, b)| [a, b])
            .chain(r.root)
            .collect();
        self.cancel(blocks);
    }

    /// Puts `e` into the last node of `path` (at `path.len() - 1`'s level),
    /// splitting it and its ancestors as needed, with what [`Self::plan`]
    /// reserved and read. `pos` is `e`'s position if the caller knows it.
    fn cascade(
        &mut self,
        path: &[(u64, Header)],
        mut raws: Vec<Raw>,
        reserved: Reserved,
        mut e: Pending<'_>,
        mut pos: Option<u32>,
    ) -> Result<()> {
        let mut splits = reserved.splits.into_iter();
        let mut new_root = reserved.root;
        for (i, (n, h)) in path.iter().enumerate().rev() {
            let raw = raws.remove(0);
            let p = match pos.take() {
                Some(p) => p,
                None => self.position(&raw, h.level, &e.key, e.head)?,
            };
            if raw.len() + 1 < self.slots {
                return node::insert(&self.pool, *n, h.before_first(), &raw, p, e.head, e.ptr);
            }
            let (sb, kb) = splits.next().expect("plan reserved a split per full node");
            let (s, key, left, right) = self.split(*n, h, &raw, sb, kb)?;
            let m = left.len() as usize;
            // The entry's place in the half it belongs to.
            // (`p` is past the middle entry exactly when the key is above
            // it; the right half starts after the entries it does not hold.)
            let (target, half, hp, before) = if p as usize <= m {
                (*n, left, p, h.before_first())
            } else {
                let skip = raw.len() - right.len();
                let before = if h.level == 0 {
                    node::SKIP
                } else {
                    raw.ptrs[m]
                };
                (s, right, p.saturating_sub(skip), before)
            };
            node::insert(&self.pool, target, before, &half, hp, e.head, e.ptr)?;
            e = Pending {
                head: head(&key),
                ptr: s,
                key: Cow::Owned(key),
            };
            if i == 0 {
                let rb = new_root.take().expect("plan reserved a root");
                return self.grow(rb, *n, h.level + 1, &e);
            }
        }
        unreachable!("the root either has room or grows")
    }

    /// Splits the full node `n` (FAIR; persist order in the module doc)
    /// into itself and a new node in `sb`, whose lower bound goes into
    /// `kb`. Returns the new node, its lower bound, and the entries each
    /// half keeps.
    fn split(
        &mut self,
        n: u64,
        h: &Header,
        raw: &Raw,
        sb: Block,
        kb: Block,
    ) -> Result<(u64, Vec<u8>, Raw, Raw)> {
        let len = raw.len() as usize;
        let m = len / 2;
        let key = self.split_key(h.level, raw)?;
        let low = self.write_record(&kb, &key, &[])?;
        let (leftmost, from) = if h.level == 0 {
            (0, m)
        } else {
            (raw.ptrs[m], m + 1)
        };
        let right = Raw {
            heads: raw.heads[from..].to_vec(),
            ptrs: raw.ptrs[from..].to_vec(),
        };
        let sh = Header {
            leftmost,
            sibling: h.sibling,
            level: h.level,
            low,
        };
        let img = self.image(&sh, &right.heads, &right.ptrs);
        let s = self.write_node(&sb, &img)?;
        self.pool.fence();
        let truncate = |pool: &Pool| -> Result<()> {
            pool.store_u64(node::ptr_at(n, m as u32), 0)?;
            pool.flush(node::ptr_at(n, m as u32), 8);
            pool.fence();
            Ok(())
        };
        if self.pool.fault(Fault::FastfairSplitCutFirst) {
            truncate(&self.pool)?;
        }
        self.pool.store_u64(n + node::SIBLING, s)?;
        self.pool.flush(n + node::SIBLING, 8);
        self.pool.fence();
        if !self.pool.fault(Fault::FastfairSplitCutFirst) {
            truncate(&self.pool)?;
        }
        let left = Raw {
            heads: raw.heads[..m].to_vec(),
            ptrs: raw.ptrs[..m].to_vec(),
        };
        Ok((s, key, left, right))
    }

    /// A new root over `left` and the pending entry `e` (the separator of
    /// `left`'s new sibling), in the reserved block `rb`: written, flushed,
    /// **fence**, stored in the superblock, flushed, **fence**.
    fn grow(&mut self, rb: Block, left: u64, level: u64, e: &Pending<'_>) -> Result<()> {
        if level > node::MAX_LEVEL {
            self.cancel([rb]);
            return Err(Error::corrupt(left, "fastfair: the tree would be too tall"));
        }
        let h = Header {
            leftmost: left,
            sibling: 0,
            level,
            low: 0,
        };
        let img = self.image(&h, &[e.head], &[e.ptr]);
        let r = self.write_node(&rb, &img)?;
        self.pool.fence();
        self.pool.store_u64(self.sb + superblock::ROOT, r)?;
        self.pool.flush(self.sb + superblock::ROOT, 8);
        self.pool.fence();
        self.root = r;
        Ok(())
    }

    /// Inserts `key` (absent; its leaf is `path`'s last node, where it goes
    /// at `pos`).
    fn insert(&mut self, path: &[(u64, Header)], pos: u32, key: &[u8], value: &[u8]) -> Result<()> {
        let rb = self.reserve_record(key, value)?;
        let (reserved, raws) = match self.plan(path) {
            Ok(p) => p,
            Err(e) => {
                self.cancel([rb]);
                return Err(e);
            }
        };
        let rec = self.write_record(&rb, key, value)?;
        let e = Pending {
            head: head(key),
            ptr: rec,
            key: Cow::Borrowed(key),
        };
        self.cascade(path, raws, reserved, e, Some(pos))?;
        self.count += 1;
        Ok(())
    }

    /// Puts the separator of `s`, a node at `level` that a split linked
    /// into its level but not into its parent (recovery's repair), into
    /// the level above: the rest of the split that a crash cut short.
    fn link_orphan(&mut self, s: u64, level: u64) -> Result<()> {
        let key = self.low_key(s)?.to_vec();
        let kh = head(&key);
        let top = Header::read(&self.pool, self.root)?.level;
        let e = Pending {
            head: kh,
            ptr: s,
            key: Cow::Owned(key),
        };
        if level == top {
            let rb = self.heap.reserve(&self.pool, self.node_size())?;
            return self.grow(rb, self.root, level + 1, &e);
        }
        let path = self.path_to(&e.key, kh, level + 1)?;
        let (reserved, raws) = self.plan(&path)?;
        self.cascade(&path, raws, reserved, e, None)
    }

    /// FAIR's rebalance after a delete (the authors' `remove`, merges only):
    /// a node left under half full is merged with its neighbour under the
    /// same parent when both fit in one node, and so on up the `path`; a
    /// root left with no entry gives way to its only child.
    fn rebalance(&mut self, path: &[(u64, Header)]) -> Result<()> {
        let mut idx = path.len() - 1;
        while idx > 0 {
            let (x, xh) = path[idx];
            let xraw = Raw::read(&self.pool, x, self.slots)?;
            if xraw.len() >= (self.slots - 1) / 2 {
                break;
            }
            let (p, ph) = path[idx - 1];
            let praw = Raw::read(&self.pool, p, self.slots)?;
            // `x`'s place among the parent's children: -1 for `leftmost`.
            let j = if ph.leftmost == x {
                -1
            } else {
                match praw.ptrs.iter().position(|&c| c == x) {
                    Some(j) => j as i64,
                    None => return Err(Error::corrupt(p, "fastfair: a node is not in its parent")),
                }
            };
            let child = |j: i64| {
                if j < 0 {
                    ph.leftmost
                } else {
                    praw.ptrs[j as usize]
                }
            };
            // With the right neighbour first, then the left: a node emptied
            // beside a full one merges later, when that one shrinks.
            let mut merged = false;
            for (l, r) in [(j, j + 1), (j - 1, j)] {
                // `r` is the right one's entry in the parent; it needs one.
                if r < 0 || r as usize >= praw.ptrs.len() {
                    continue;
                }
                if self.merge(child(l), child(r), xh.level, p, &ph, &praw, r as u32)? {
                    merged = true;
                    break;
                }
            }
            if !merged {
                break;
            }
            idx -= 1;
        }
        self.collapse_root()
    }

    /// Merges `right` into `left`, neighbours at `level` under the parent
    /// `p` (entries `praw`, `right`'s at `rj`), if they fit in one node;
    /// whether it did.
    ///
    /// Persist order: `right`'s entries appended to `left` at once
    /// ([`node::append`]; an inner node's first of them is `right`'s
    /// `leftmost` under `right`'s lower bound), 2 fences, which leaves
    /// `left` as a torn split leaves a node; `right`'s entry removed from
    /// the parent (FAST delete, a fence per line), which leaves `right` as
    /// a split that had not reached its parent; `left.sibling =
    /// right.sibling`, flush, **fence**: the merge's commit point, after
    /// which nothing reaches `right`; `right` and its bound record back to
    /// the heap. A crash before the commit leaves states recovery undoes
    /// (the cut, the separator linked again), so the merge is as if never
    /// begun; after it, done. The other order (unlink first) leaves a
    /// parent pointing to a node its level's chain lacks:
    /// `Fault::FastfairMergeUnlinkFirst`.
    #[allow(clippy::too_many_arguments)]
    fn merge(
        &mut self,
        left: u64,
        right: u64,
        level: u64,
        p: u64,
        ph: &Header,
        praw: &Raw,
        rj: u32,
    ) -> Result<bool> {
        let lraw = Raw::read(&self.pool, left, self.slots)?;
        let rraw = Raw::read(&self.pool, right, self.slots)?;
        let rh = Header::read(&self.pool, right)?;
        let (mut heads, mut ptrs) = (Vec::with_capacity(rraw.ptrs.len() + 1), Vec::new());
        if level > 0 {
            heads.push(head(self.low_key(right)?));
            ptrs.push(rh.leftmost);
        }
        heads.extend_from_slice(&rraw.heads);
        ptrs.extend_from_slice(&rraw.ptrs);
        if lraw.len() as usize + ptrs.len() + 1 > self.slots as usize {
            return Ok(false);
        }
        if !ptrs.is_empty() {
            node::append(&self.pool, left, lraw.len(), &heads, &ptrs)?;
        }
        let unlink = |pool: &Pool| -> Result<()> {
            pool.store_u64(left + node::SIBLING, rh.sibling)?;
            pool.flush(left + node::SIBLING, 8);
            pool.fence();
            Ok(())
        };
        let unlink_first = self.pool.fault(Fault::FastfairMergeUnlinkFirst);
        if unlink_first {
            unlink(&self.pool)?;
        }
        node::remove(&self.pool, p, ph.before_first(), praw, rj)?;
        if !unlink_first {
            unlink(&self.pool)?;
        }
        self.heap.release(&self.pool, right)?;
        if rh.low != 0 {
            self.heap.release(&self.pool, rh.low)?;
        }
        Ok(true)
    }

    /// While the root is an inner node with no entry, its only child
    /// becomes the root (after every delete, and at open: a crash after a
    /// merge's commit and before this leaves such a root, found by a
    /// review): stored in the superblock, flushed, **fence**; the
    /// old root back to the heap (a root with no entry is a tree all the
    /// same, so a crash before the store loses nothing).
    fn collapse_root(&mut self) -> Result<()> {
        loop {
            let h = Header::read(&self.pool, self.root)?;
            if h.level == 0 || Raw::read(&self.pool, self.root, self.slots)?.len() > 0 {
                return Ok(());
            }
            self.pool
                .store_u64(self.sb + superblock::ROOT, h.leftmost)?;
            self.pool.flush(self.sb + superblock::ROOT, 8);
            self.pool.fence();
            let old = std::mem::replace(&mut self.root, h.leftmost);
            self.heap.release(&self.pool, old)?;
        }
    }

    /// Update (the key's record is `old`, at entry `pos` of `leaf`): see
    /// the module doc.
    fn update(&mut self, leaf: u64, pos: u32, old: u64, key: &[u8], value: &[u8]) -> Result<()> {
        let rb = self.reserve_record(key, value)?;
        let rec = self.write_record(&rb, key, value)?;
        self.pool.fence();
        self.pool.store_u64(node::ptr_at(leaf, pos), rec)?;
        self.pool.flush(node::ptr_at(leaf, pos), 8);
        self.pool.fence();
        self.heap.release(&self.pool, old)
    }
}

impl SerialEngine for FastFair {
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
        EngineConfig::from([(
            "fastfair.node_bytes".to_string(),
            self.node_size().to_string(),
        )])
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let kh = head(key);
        let leaf = self.leaf_for(key, kh)?;
        match self.leaf_find(leaf, key, kh)? {
            (_, Some(rec)) => {
                f(self.value(rec)?);
                Ok(true)
            }
            (_, None) => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        super::check_item(key, value)?;
        if self.root == 0 {
            if mode == PutMode::Update {
                return Ok(PutOutcome::Unchanged);
            }
            self.first_leaf(key, value)?;
            return Ok(PutOutcome::Inserted);
        }
        let kh = head(key);
        let path = self.path_to(key, kh, 0)?;
        let leaf = path.last().expect("a path ends at a leaf").0;
        match (self.leaf_find(leaf, key, kh)?, mode) {
            ((_, Some(_)), PutMode::Insert) | ((_, None), PutMode::Update) => {
                Ok(PutOutcome::Unchanged)
            }
            ((pos, Some(old)), _) => {
                self.update(leaf, pos, old, key, value)?;
                Ok(PutOutcome::Replaced)
            }
            ((pos, None), _) => {
                self.insert(&path, pos, key, value)?;
                Ok(PutOutcome::Inserted)
            }
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if self.root == 0 {
            return Ok(false);
        }
        let kh = head(key);
        let path = self.path_to(key, kh, 0)?;
        let leaf = path.last().expect("a path ends at a leaf").0;
        let (pos, Some(rec)) = self.leaf_find(leaf, key, kh)? else {
            return Ok(false);
        };
        let raw = Raw::read(&self.pool, leaf, self.slots)?;
        node::remove(&self.pool, leaf, node::SKIP, &raw, pos)?;
        self.count -= 1;
        self.heap.release(&self.pool, rec)?;
        self.rebalance(&path)?;
        Ok(true)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        if self.root == 0 {
            return Ok(());
        }
        let start: &[u8] = match lo {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let below_hi = |k: &[u8]| super::below_hi(k, hi);
        let above_lo = |k: &[u8]| super::above_lo(k, lo);
        let mut leaf = self.leaf_for(start, head(start))?;
        let mut first = true;
        let mut seen = 0u64;
        while leaf != 0 {
            seen += 1;
            if seen > self.pool.size() / self.node_size() {
                return Err(Error::corrupt(leaf, "fastfair: the leaf chain has a cycle"));
            }
            let sibling = self.pool.words().load(leaf + node::SIBLING)?;
            self.pool.words().prefetch(sibling);
            let raw = Raw::read(&self.pool, leaf, self.slots)?;
            // The leaf's records at once: the scan then waits for one
            // batch of misses per leaf, not one miss per record.
            for &rec in &raw.ptrs {
                self.pool.words().prefetch(rec);
            }
            for &rec in &raw.ptrs {
                let k = self.rec_key(rec)?;
                if first && !above_lo(k) {
                    continue;
                }
                first = false;
                if !below_hi(k) {
                    return Ok(());
                }
                if !f(k, self.value(rec)?) {
                    return Ok(());
                }
            }
            leaf = sibling;
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
        self.heap.dram_bytes()
    }

    fn optimistic_reader(&self) -> Option<Box<dyn super::OptimisticRead>> {
        Some(Box::new(reader::Reader {
            pool: Arc::clone(&self.pool),
            sb: self.sb,
            slots: self.slots,
        }))
    }
}
