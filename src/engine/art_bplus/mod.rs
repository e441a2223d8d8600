//! `art-bplus`: the heterogeneous index of Liu, Zhang, Luo and Jin
//! ("面向非易失内存的异构索引", Journal of Software 2022; the paper calls
//! it HART): an adaptive radix tree over the key's leading bytes, and under
//! each radix pointer a small B+-tree of 256-byte **NVNodes** that
//! partitions the key's last byte (§2.2, Fig. 3). The paper's reading,
//! with its open questions, is `docs/art-bplus-reading.md`; the decisions
//! are in docs/design.md §16.
//!
//! - **NVNodes in PM** ([`super::fptree::leaf`]'s layout with 24 slots, the
//!   paper's 256 bytes, Fig. 6): a bitmap of live slots as the commit word,
//!   the pointer to the next NVNode (the leaf list), 24 one-byte key
//!   fragments in the header's line, unsorted, and 24 eight-byte slots. A
//!   key's fragment is its last byte; every key of an NVNode has the same
//!   prefix (all bytes but the last), so a fragment that matches in the
//!   right NVNode *is* the key: a search reads no key from PM, only the
//!   record of the value.
//! - **Records** ([`super::fptree::record`]): key and value out of line, behind
//!   the slot (the paper's 8-byte values sit in the slot; values of any
//!   size need a pointer, §3.2 Fig. 14's 256-byte values included). A
//!   record holds the whole key, from which recovery takes each NVNode's
//!   prefix (the paper's `cmp_path`).
//! - **The upper layer in DRAM** ([`upper`]): the ART over prefixes and
//!   each subtree's list of leaves by low fragment (the paper's inner
//!   NVNodes), rebuilt from the leaf list at every open. This is the
//!   paper's "selective persistence" (§2.2(2): the ART's updates are not
//!   made atomic, and recovery checks and repairs the ART from the data
//!   layer) taken to its end: nothing above the leaves is persisted, so
//!   nothing above them can be torn (docs/design.md §16).
//! - **Blocks** come from the radix trees' heap ([`Chunks`]): a block is in
//!   use exactly when the leaf list reaches it, so a block written but not
//!   yet linked when a crash strikes is free after it.
//! - **Concurrency**: one reader-writer lock over the tree ([`Locked`]).
//!
//! # Persist order
//! - **Insert** into an NVNode with a free slot `j` (Algorithm 1): write the
//!   record, flush it; store its offset in slot `j`, flush that line;
//!   **fence**; store the fragment in `frag[j]` and then `bitmap | 1 << j`
//!   (one line, in that order); flush the line; **fence**. The bitmap store
//!   is the commit point. 2 fences.
//! - **Insert of a new prefix**: write the record and an NVNode holding it
//!   (bitmap `1`, `next` = the first NVNode of the next subtree in prefix
//!   order, or null), flush both; **fence**; store the NVNode in its list
//!   predecessor's `next` (the last NVNode of the subtree before, or the
//!   superblock's `head`), the commit point; flush; **fence**. 2 fences.
//! - **Update**: write a new record, flush it; **fence**; store its offset
//!   in the key's slot (the commit point); flush; **fence**; the old record
//!   goes back to the heap. 2 fences (the paper stores an 8-byte value in
//!   place and does not flush it).
//! - **Delete** of a key whose NVNode holds others: store `bitmap & !(1 <<
//!   j)` (the commit point), flush, **fence**. Of an NVNode's last key:
//!   store the NVNode's `next` in its list predecessor's `next` (or
//!   `head`), the commit point, flush, **fence**: the key goes with its
//!   NVNode, and no empty NVNode is ever left in the list. Then the record
//!   (and the NVNode) go back to the heap. 1 fence.
//! - **Split** of a full NVNode `L` (§2.6, Fig. 8): its fragments sorted
//!   (in DRAM, as the paper's heaps do), the upper 12 go to a new NVNode
//!   `N`, a copy of `L` with the upper half's bitmap and `next = L.next`;
//!   flush `N`; **fence**. Then, in `L`'s header line, store `next = N`
//!   *and then* `bitmap = ` the lower half (one line: they reach PM in that
//!   order, docs/design.md §1 item 4); flush; **fence**. The paper stores
//!   the sibling pointer, the separator and the bitmap with a fence after
//!   each; one line needs none between. A crash leaves `N` unlinked (free
//!   after recovery), or `L` and `N` both holding the upper half, which
//!   recovery finishes ([`recovery`]), or the split done. 2 fences, then the
//!   insert's own.
//!
//! # Recovery ([`recovery`])
//! Walk the leaf list: finish a torn split, mark every NVNode and live
//! record in the heap, check each record against its fragment, the prefix
//! shared by each NVNode's keys and the order across NVNodes; give the
//! unreached blocks back; rebuild the upper layer.

pub(crate) mod recovery;
pub(crate) mod superblock;
#[cfg(test)]
mod tests;
pub(crate) mod upper;

use std::ops::Bound;
use std::sync::Arc;

use super::fptree::leaf::{self, Header};
use super::fptree::record;
use super::radix::chunks::Chunks;
use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};
use upper::{Upper, NONE};

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "art-bplus",
    paper: "Liu et al., heterogeneous index (J. Software 2022): an ART over B+-trees of 256-byte NVNodes",
    create,
    open,
};

/// Slots of an NVNode (§2.3(5): 24 fragments in the header's line).
pub const SLOTS: u32 = 24;
/// Bytes of an NVNode: one header line and three lines of slots.
pub const NODE: u64 = leaf::size(SLOTS);
const _: () = assert!(NODE == 256, "the paper's NVNode is 256 bytes");
/// The bitmap of a full NVNode.
const FULL: u64 = (1 << SLOTS) - 1;

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    super::settings(config, INFO.name, &[])?;
    let tree = ArtBplus::create(Arc::clone(&pool))?;
    Ok(Box::new(Locked::new(pool, tree)))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    super::settings(config, INFO.name, &[])?;
    let tree = ArtBplus::open(Arc::clone(&pool))?;
    Ok(Box::new(Locked::new(pool, tree)))
}

/// A key's prefix (what the radix layer resolves) and fragment (its last
/// byte, what an NVNode holds). Keys are never empty ([`super::check_item`]).
fn split_key(key: &[u8]) -> (&[u8], u8) {
    let (prefix, last) = key.split_at(key.len() - 1);
    (prefix, last[0])
}

/// The live slot of NVNode header `h` whose fragment is `frag`, if any (at
/// most one: an NVNode holds a fragment once).
fn slot_of(h: &Header, frag: u8) -> Option<u32> {
    let low: &[u8; 16] = h.fps[..16].try_into().expect("16 bytes");
    let high = u64::from_le_bytes(h.fps[16..24].try_into().expect("8 bytes"));
    let hits = u64::from(crate::swar::equal16(low, frag))
        | crate::swar::byte_mask(crate::swar::bytes_equal(high, frag)) << 16;
    let live = hits & h.bitmap;
    (live != 0).then(|| live.trailing_zeros())
}

/// Refuses a record lengths word `w` (of the record at `rec`) that no
/// record has ([`record::read_lens`] checks it against its block too, at
/// recovery; a search does not look the block up).
fn check_lens(rec: u64, w: u64) -> Result<()> {
    let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
    if w >> 48 != 0 || k == 0 || k > MAX_KEY_LEN || v > MAX_VALUE_LEN {
        return Err(Error::corrupt(
            rec,
            format!("art-bplus: a record has the lengths word {w:#x}"),
        ));
    }
    Ok(())
}

/// The art-bplus engine (serial; wrapped in [`Locked`]).
pub struct ArtBplus {
    pool: Arc<Pool>,
    sb: u64,
    heap: Chunks,
    upper: Upper,
    count: u64,
}

/// Where a key's search ended: its subtree, the leaf's index there, the
/// leaf, the leaf's header line.
struct Place {
    sub: u32,
    i: usize,
    leaf: u64,
    h: Header,
}

impl ArtBplus {
    /// Makes an empty tree in a new pool.
    pub fn create(pool: Arc<Pool>) -> Result<ArtBplus> {
        let sb = superblock::create(&pool)?;
        let heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
        Ok(ArtBplus {
            pool,
            sb,
            heap,
            upper: Upper::new(),
            count: 0,
        })
    }

    /// Recovers the tree of a pool (see [`recovery`]).
    pub fn open(pool: Arc<Pool>) -> Result<ArtBplus> {
        recovery::open(pool)
    }

    /// The NVNode that `key` belongs to, if its prefix has a subtree.
    fn place(&self, prefix: &[u8], frag: u8) -> Result<Option<Place>> {
        let Some(sub) = self.upper.find(prefix) else {
            return Ok(None);
        };
        let (i, leaf) = self.upper.sub(sub).leaf_for(frag);
        let h = Header::read(&self.pool, leaf, SLOTS)?;
        Ok(Some(Place { sub, i, leaf, h }))
    }

    /// The value of the record in slot `j` of `leaf`, if that record's key
    /// is `key` (it is unless a search's [`Upper::probe`] led to another
    /// prefix's subtree).
    fn value_of(&self, leaf: u64, j: u32, key: &[u8]) -> Result<Option<&[u8]>> {
        let rec = self.pool.load_u64(leaf::slot(leaf, j))?;
        let w = self.pool.load_u64(rec)?;
        let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
        check_lens(rec, w)?;
        self.pool.touch(rec, record::size(k, v));
        // SAFETY: a reachable record is never written again; writers hold
        // the tree exclusively.
        if k != key.len() || unsafe { record::key(&self.pool, rec, k)? } != key {
            return Ok(None);
        }
        // SAFETY: as above.
        unsafe { self.pool.bytes(rec + record::HEADER + k as u64, v as u64) }.map(Some)
    }

    /// [`record::write`] into this tree's heap.
    fn write_record(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        record::write(&self.pool, &mut self.heap, key, value)
    }

    /// Gives back a block that a durable store made unreachable.
    fn release(&mut self, off: u64) -> Result<()> {
        self.heap.release(&self.pool, off)
    }

    /// `r`, after giving back the reserved, unlinked `blocks` if it is an
    /// error (a store into a block of the pool fails only on a bug, but a
    /// failed step must not keep a block reserved for good).
    fn or_release<T>(&mut self, r: Result<T>, blocks: &[u64]) -> Result<T> {
        if r.is_err() {
            for &b in blocks {
                let _ = self.release(b);
            }
        }
        r
    }

    /// Where the `next` word that points to leaf `i` of subtree `s` is.
    fn link_word(&self, s: u32, i: usize) -> u64 {
        match self.upper.list_pred(s, i) {
            Some(p) => p + leaf::NEXT,
            None => self.sb + superblock::HEAD,
        }
    }

    /// Update: see the module doc, "Persist order".
    fn update(&mut self, leaf: u64, j: u32, key: &[u8], value: &[u8]) -> Result<()> {
        let slot = leaf::slot(leaf, j);
        let old = self.pool.load_u64(slot)?;
        let rec = self.write_record(key, value)?;
        self.pool.fence();
        let stored = self.pool.store_u64(slot, rec);
        self.or_release(stored, &[rec])?;
        self.pool.flush(slot, 8);
        self.pool.fence();
        self.release(old)
    }

    /// Insert into `leaf` (header `h`), which has a free slot (Algorithm
    /// 1): see the module doc.
    fn insert_into(
        &mut self,
        leaf: u64,
        h: &Header,
        key: &[u8],
        frag: u8,
        value: &[u8],
    ) -> Result<()> {
        let j = h
            .free_slot(SLOTS)
            .expect("a full NVNode is split before an insert");
        let rec = self.write_record(key, value)?;
        let slot = leaf::slot(leaf, j);
        let stored = self.pool.store_u64(slot, rec);
        self.or_release(stored, &[rec])?;
        self.pool.flush(slot, 8);
        self.pool.fence();
        // SAFETY: `frag[j]` belongs to a free slot; writers hold the tree
        // exclusively, and readers do not read a free slot's fragment.
        let stored = unsafe {
            self.pool
                .write_bytes(leaf + leaf::FPS + u64::from(j), &[frag])
        }
        .and_then(|()| self.pool.store_u64(leaf + leaf::BITMAP, h.bitmap | 1 << j));
        self.or_release(stored, &[rec])?;
        self.pool.flush(leaf, 64);
        self.pool.fence();
        self.count += 1;
        Ok(())
    }

    /// The first key of a prefix: a new subtree of one NVNode (see the
    /// module doc).
    fn insert_prefix(&mut self, key: &[u8], prefix: &[u8], frag: u8, value: &[u8]) -> Result<()> {
        let (prev, next) = self.upper.neighbours(prefix);
        let succ = self.upper.list_succ_of_sub(next);
        let link = match prev {
            NONE => self.sb + superblock::HEAD,
            p => self.upper.sub(p).last_leaf() + leaf::NEXT,
        };
        let rec = self.write_record(key, value)?;
        let b = match self.heap.reserve(&self.pool, NODE) {
            Ok(b) => b,
            Err(e) => {
                self.release(rec)?;
                return Err(e);
            }
        };
        let l = b.offset();
        // The header line and the first slot's line; the other slots are
        // free, and nothing reads a free slot.
        let mut img = [0u8; 128];
        img[leaf::BITMAP as usize..][..8].copy_from_slice(&1u64.to_le_bytes());
        img[leaf::NEXT as usize..][..8].copy_from_slice(&succ.to_le_bytes());
        img[leaf::FPS as usize] = frag;
        img[leaf::SLOT0 as usize..][..8].copy_from_slice(&rec.to_le_bytes());
        // SAFETY: reserved by us and unreachable.
        let written = unsafe { self.pool.write_bytes(l, &img) };
        self.or_release(written, &[rec, l])?;
        self.pool.flush(l, img.len() as u64);
        if !self.pool.fault(Fault::ArtBplusLinkUnfenced) {
            self.pool.fence();
        }
        let stored = self.pool.store_u64(link, l);
        self.or_release(stored, &[rec, l])?;
        self.pool.flush(link, 8);
        self.pool.fence();
        self.upper.add_sub(prefix, l, prev, next);
        self.count += 1;
        Ok(())
    }

    /// Splits the full NVNode of `at` (§2.6; persist order in the module
    /// doc). Returns the NVNode that `frag` now belongs to, and its header.
    fn split(&mut self, at: &Place, frag: u8) -> Result<(u64, Header)> {
        let (l, h) = (at.leaf, &at.h);
        let mut order: Vec<(u8, u32)> = h.live().map(|j| (h.fps[j as usize], j)).collect();
        order.sort_unstable();
        let upper = &order[order.len() / 2..];
        let bits = upper.iter().fold(0u64, |b, &(_, j)| b | 1 << j);
        let low = upper[0].0;
        // SAFETY: `l` is an NVNode, read under the exclusive hold of the tree.
        let mut img = unsafe { self.pool.bytes(l, NODE)? }.to_vec();
        img[leaf::BITMAP as usize..][..8].copy_from_slice(&bits.to_le_bytes());
        img[leaf::NEXT as usize..][..8].copy_from_slice(&h.next.to_le_bytes());
        let b = self.heap.reserve(&self.pool, NODE)?;
        let n = b.offset();
        // SAFETY: reserved by us and unreachable.
        let written = unsafe { self.pool.write_bytes(n, &img) };
        self.or_release(written, &[n])?;
        self.pool.flush(n, NODE);
        self.pool.fence();
        let lower = h.bitmap & !bits;
        if self.pool.fault(Fault::ArtBplusSplitBitmapFirst) {
            self.pool.store_u64(l + leaf::BITMAP, lower)?;
            self.pool.store_u64(l + leaf::NEXT, n)?;
        } else {
            let linked = self.pool.store_u64(l + leaf::NEXT, n);
            self.or_release(linked, &[n])?;
            // (Once linked, `n` is reachable. This store, into the block
            // whose header was just read, does not fail; were it to, `n`
            // would stay reserved and the next open would finish the
            // split, provided no other split of `l` ran before.)
            self.pool.store_u64(l + leaf::BITMAP, lower)?;
        }
        self.pool.flush(l, 64);
        self.pool.fence();
        self.upper.add_leaf(at.sub, low, n);
        let to = if frag >= low { n } else { l };
        Ok((to, Header::read(&self.pool, to, SLOTS)?))
    }

    /// The sorted live (fragment, record) pairs of `leaf` from fragment
    /// `from` on, into `out`.
    fn leaf_items(&self, leaf: u64, from: u8, out: &mut Vec<(u8, u64)>) -> Result<()> {
        let h = Header::read(&self.pool, leaf, SLOTS)?;
        // The next NVNode's first line and this one's records at once.
        self.pool.words().prefetch(h.next);
        h.prefetch_records(&self.pool, leaf);
        out.clear();
        for j in h.live() {
            let frag = h.fps[j as usize];
            if frag >= from {
                out.push((frag, self.pool.load_u64(leaf::slot(leaf, j))?));
            }
        }
        out.sort_unstable_by_key(|&(f, _)| f);
        Ok(())
    }
}

/// A scan's place in one subtree: its leaves from `i` on, the current
/// leaf's pairs from `pos` on.
struct Cursor {
    sub: u32,
    i: usize,
    items: Vec<(u8, u64)>,
    pos: usize,
}

impl Cursor {
    /// At the first key of subtree `sub` whose fragment is at least `from`,
    /// its pairs kept in `items` (a buffer a closed cursor left, so that a
    /// scan over many one-key subtrees allocates none).
    fn new(t: &ArtBplus, sub: u32, from: u8, mut items: Vec<(u8, u64)>) -> Result<Cursor> {
        let (i, leaf) = t.upper.sub(sub).leaf_for(from);
        t.leaf_items(leaf, from, &mut items)?;
        let mut c = Cursor {
            sub,
            i,
            items,
            pos: 0,
        };
        c.settle(t)?;
        Ok(c)
    }

    /// Moves on to the next leaf with a pair while this one has none left.
    fn settle(&mut self, t: &ArtBplus) -> Result<()> {
        while self.pos == self.items.len() && self.i + 1 < t.upper.sub(self.sub).leaf_count() {
            self.i += 1;
            self.pos = 0;
            let leaf = t.upper.sub(self.sub).leaf(self.i);
            t.leaf_items(leaf, 0, &mut self.items)?;
        }
        Ok(())
    }

    /// The next pair, if any.
    fn peek(&self) -> Option<(u8, u64)> {
        self.items.get(self.pos).copied()
    }

    fn advance(&mut self, t: &ArtBplus) -> Result<()> {
        self.pos += 1;
        self.settle(t)
    }
}

/// A scan's bounds, and what it calls.
struct Visit<'a, 'f, 'g> {
    lo: Bound<&'a [u8]>,
    hi: Bound<&'a [u8]>,
    f: &'f mut ScanFn<'g>,
}

impl ArtBplus {
    /// Passes the pairs of `c` whose fragment is at most `upto` to `v` (in
    /// order, those inside the bounds); `Ok(false)` once the scan is done.
    fn emit(&self, c: &mut Cursor, upto: u8, v: &mut Visit<'_, '_, '_>) -> Result<bool> {
        while let Some((frag, rec)) = c.peek() {
            if frag > upto {
                break;
            }
            let w = self.pool.load_u64(rec)?;
            check_lens(rec, w)?;
            let (k, n) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
            self.pool.touch(rec, record::size(k, n));
            // SAFETY: as in `value_of`.
            let key = unsafe { record::key(&self.pool, rec, k)? };
            if !super::below_hi(key, v.hi) {
                return Ok(false);
            }
            if super::above_lo(key, v.lo) {
                // SAFETY: as in `value_of`.
                let value = unsafe { self.pool.bytes(rec + record::HEADER + k as u64, n as u64)? };
                if !(v.f)(key, value) {
                    return Ok(false);
                }
            }
            c.advance(self)?;
        }
        Ok(true)
    }

    /// The ordered scan. Subtrees come in prefix order, but their keys
    /// interleave where one prefix extends another's key (`"ab"` of
    /// subtree `"a"` comes before `"abc"` of subtree `"ab"`, which comes
    /// before `"ac"`), so the scan keeps a stack of the subtrees whose
    /// prefix is a prefix of the current one, and before it enters subtree
    /// `q` passes the keys of the subtree `p` below it up to fragment
    /// `q[p.len()]` (docs/design.md §16, "Ordered scans").
    fn scan_impl(&self, v: &mut Visit<'_, '_, '_>) -> Result<()> {
        let mut stack: Vec<Cursor> = Vec::new();
        let mut spare: Vec<Vec<(u8, u64)>> = Vec::new();
        let buffer = |spare: &mut Vec<Vec<(u8, u64)>>| {
            spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(SLOTS as usize))
        };
        let mut next = match v.lo {
            Bound::Included(k) | Bound::Excluded(k) => {
                for a in self.upper.ancestors(k) {
                    let n = self.upper.sub(a).prefix.len();
                    stack.push(Cursor::new(self, a, k[n], buffer(&mut spare))?);
                }
                self.upper.at_or_after(Bound::Included(k))
            }
            Bound::Unbounded => self.upper.first(),
        };
        loop {
            let q = (next != NONE).then(|| &self.upper.sub(next).prefix[..]);
            while let Some(top) = stack.last_mut() {
                let p = &self.upper.sub(top.sub).prefix[..];
                match q {
                    Some(q) if q.starts_with(p) => {
                        if !self.emit(top, q[p.len()], v)? {
                            return Ok(());
                        }
                        break;
                    }
                    _ => {
                        if !self.emit(top, u8::MAX, v)? {
                            return Ok(());
                        }
                        spare.extend(stack.pop().map(|c| c.items));
                    }
                }
            }
            if next == NONE {
                return Ok(());
            }
            stack.push(Cursor::new(self, next, 0, buffer(&mut spare))?);
            next = self.upper.sub(next).next;
        }
    }
}

impl SerialEngine for ArtBplus {
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

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if key.is_empty() {
            return Ok(false);
        }
        let (prefix, frag) = split_key(key);
        let Some(s) = self.upper.probe(prefix) else {
            return Ok(false);
        };
        let (_, leaf) = self.upper.sub(s).leaf_for(frag);
        let h = Header::read(&self.pool, leaf, SLOTS)?;
        let Some(j) = slot_of(&h, frag) else {
            return Ok(false);
        };
        match self.value_of(leaf, j, key)? {
            Some(v) => {
                f(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        super::check_item(key, value)?;
        let (prefix, frag) = split_key(key);
        let Some(at) = self.place(prefix, frag)? else {
            if mode == PutMode::Update {
                return Ok(PutOutcome::Unchanged);
            }
            self.insert_prefix(key, prefix, frag, value)?;
            return Ok(PutOutcome::Inserted);
        };
        match (slot_of(&at.h, frag), mode) {
            (Some(_), PutMode::Insert) | (None, PutMode::Update) => Ok(PutOutcome::Unchanged),
            (Some(j), _) => {
                self.update(at.leaf, j, key, value)?;
                Ok(PutOutcome::Replaced)
            }
            (None, _) => {
                let (l, h) = if at.h.bitmap == FULL {
                    self.split(&at, frag)?
                } else {
                    (at.leaf, at.h)
                };
                self.insert_into(l, &h, key, frag, value)?;
                Ok(PutOutcome::Inserted)
            }
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if key.is_empty() {
            return Ok(false);
        }
        let (prefix, frag) = split_key(key);
        let Some(at) = self.place(prefix, frag)? else {
            return Ok(false);
        };
        let Some(j) = slot_of(&at.h, frag) else {
            return Ok(false);
        };
        let rec = self.pool.load_u64(leaf::slot(at.leaf, j))?;
        let left = at.h.bitmap & !(1 << j);
        if left == 0 {
            let link = self.link_word(at.sub, at.i);
            self.pool.store_u64(link, at.h.next)?;
            self.pool.flush(link, 8);
            self.pool.fence();
            self.upper.remove_leaf(at.sub, at.i);
        } else {
            self.pool.store_u64(at.leaf + leaf::BITMAP, left)?;
            self.pool.flush(at.leaf, 64);
            self.pool.fence();
        }
        self.count -= 1;
        self.release(rec)?;
        if left == 0 {
            self.release(at.leaf)?;
        }
        Ok(true)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        self.scan_impl(&mut Visit { lo, hi, f })
    }

    fn len(&self) -> u64 {
        self.count
    }

    fn check(&self) -> Result<CheckReport> {
        self.check_impl()
    }

    fn dram_bytes(&self) -> u64 {
        self.upper.dram_bytes() + self.heap.dram_bytes()
    }
}
