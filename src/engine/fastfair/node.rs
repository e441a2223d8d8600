//! A node: FAST&FAIR's page (Hwang, Kim, Won and Nam, FAST'18), a sorted
//! array of `(key, pointer)` entries in PM, for leaves and inner nodes
//! alike. `S` entry slots ([`SLOTS`]; [`DEFAULT_SLOTS`], a 512-byte node as
//! the authors' `PAGESIZE`, unless `fastfair.node_bytes` says otherwise when
//! the pool is made).
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `leftmost`: an inner node's first child (the child of the keys below entry 0's); 0 in a leaf |
//! | 8 | 8 | `sibling`: the next node of the same level, in key order, or null |
//! | 16 | 8 | `level`: 0 for a leaf, one more than its children's for an inner node |
//! | 24 | 8 | `low`: the key block of the node's lower bound ([`super::record`] with no value), or null for the first node of its level |
//! | 64 + 16 `i` | 8 | entry `i`'s `head`: the first 8 bytes of its key, big-endian, zero-padded |
//! | 72 + 16 `i` | 8 | entry `i`'s `ptr`: a leaf's record, an inner node's child; 0 ends the array |
//!
//! **Keys.** The authors' entries hold 8-byte integer keys. Here an entry
//! holds the key's head, so that a search compares integers, and the whole
//! key is one pointer away: a leaf entry's in its record, an inner entry's
//! in its child's `low` (a separator is always the lower bound of the child
//! it leads to). Only keys that share their first 8 bytes read further.
//!
//! **Validity** (FAST's invariant, §4.1 of the FAST&FAIR paper): the
//! entries run from 0 to the first null `ptr`, and an entry whose `ptr`
//! equals the one before it (for entry 0: `leftmost` in an inner node,
//! [`SKIP`] in a leaf) is not an entry but the trace of a shift in flight.
//! Between operations no node has such a trace; after a crash, recovery
//! removes the one a shift left ([`super::recovery`]).
//!
//! **Stores in order.** A shift's 8-byte stores must reach PM in the order
//! they are made. Stores to one line do (docs/design.md §1, item 4); before
//! a store to another line, the line written last is flushed and fenced
//! ([`Ordered`]), as the authors' `clflush` with its `mfence` does. This is
//! FAST&FAIR's cost: one fence per line a shift moves.

use std::ops::RangeInclusive;

use crate::error::Result;
use crate::pm::{Fault, Pool};

/// Offset of `leftmost`.
pub const LEFTMOST: u64 = 0;
/// Offset of `sibling`.
pub const SIBLING: u64 = 8;
/// Offset of `level`.
pub const LEVEL: u64 = 16;
/// Offset of `low`.
pub const LOW: u64 = 24;
/// Offset of entry 0.
pub const ENTRY0: u64 = 64;
/// Bytes of an entry.
pub const ENTRY: u64 = 16;
/// Entry slots a node may have: 128 bytes to 4 KiB.
pub const SLOTS: RangeInclusive<u32> = 4..=252;
/// Entry slots of a new pool's nodes: 512 bytes, the authors' page.
pub const DEFAULT_SLOTS: u32 = 28;
/// The pointer that entry 0 of a leaf takes while a shift moves it: no
/// block starts at offset 1.
pub const SKIP: u64 = 1;
/// Levels a tree may have (a level byte; far more than any pool holds).
pub const MAX_LEVEL: u64 = 63;

const _: () = assert!(LOW + 8 <= ENTRY0 && ENTRY0 == 64, "the header is one line");
const _: () = assert!(64 % ENTRY == 0, "entries never straddle a line");

/// Bytes of a node with `slots` entry slots.
pub const fn size(slots: u32) -> u64 {
    ENTRY0 + ENTRY * slots as u64
}

/// The slots of a node of `bytes` bytes, if that is a size a node may have.
pub fn slots_of_bytes(bytes: u64) -> Option<u32> {
    let slots = bytes.checked_sub(ENTRY0)? / ENTRY;
    let slots = u32::try_from(slots).ok()?;
    (size(slots) == bytes && SLOTS.contains(&slots)).then_some(slots)
}

/// Offset of entry `i`'s head in `node`.
pub fn head_at(node: u64, i: u32) -> u64 {
    node + ENTRY0 + ENTRY * u64::from(i)
}

/// Offset of entry `i`'s pointer in `node`.
pub fn ptr_at(node: u64, i: u32) -> u64 {
    head_at(node, i) + 8
}

/// A node's first line.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub leftmost: u64,
    pub sibling: u64,
    pub level: u64,
    pub low: u64,
}

impl Header {
    /// Reads the first line of `node` (and counts it read).
    pub fn read(pool: &Pool, node: u64) -> Result<Header> {
        let w = pool.words();
        let h = Header {
            leftmost: w.load(node + LEFTMOST)?,
            sibling: w.load(node + SIBLING)?,
            level: w.load(node + LEVEL)?,
            low: w.load(node + LOW)?,
        };
        pool.touch(node, 64);
        Ok(h)
    }

    /// The pointer that entry 0 is compared with to tell a shift's trace.
    pub fn before_first(&self) -> u64 {
        if self.level == 0 {
            SKIP
        } else {
            self.leftmost
        }
    }
}

/// The entries of a node as PM holds them, up to the first null pointer
/// (at most `slots`), traces of a shift included.
#[derive(Clone, Debug, Default)]
pub struct Raw {
    pub heads: Vec<u64>,
    pub ptrs: Vec<u64>,
}

impl Raw {
    /// Reads the entries of `node` (and counts the lines read).
    pub fn read(pool: &Pool, node: u64, slots: u32) -> Result<Raw> {
        let w = pool.words();
        let cap = slots as usize;
        let mut r = Raw {
            heads: Vec::with_capacity(cap),
            ptrs: Vec::with_capacity(cap),
        };
        for i in 0..slots {
            let p = w.load(ptr_at(node, i))?;
            if p == 0 {
                break;
            }
            r.heads.push(w.load(head_at(node, i))?);
            r.ptrs.push(p);
        }
        pool.touch(
            node + ENTRY0,
            ENTRY * (r.ptrs.len() as u64 + 1).min(u64::from(slots)),
        );
        Ok(r)
    }

    /// Entries in the array, traces included.
    pub fn len(&self) -> u32 {
        self.ptrs.len() as u32
    }

    /// The index of the first trace of a shift, if any (`before`: the
    /// header's [`Header::before_first`]).
    pub fn first_trace(&self, before: u64) -> Option<u32> {
        (0..self.ptrs.len())
            .find(|&i| self.ptrs[i] == if i == 0 { before } else { self.ptrs[i - 1] })
            .map(|i| i as u32)
    }
}

/// 8-byte stores into one node that reach PM in the order they are made:
/// before a store to another line than the last one stored to, that line
/// is flushed and fenced. [`Ordered::finish`] flushes and fences the last.
pub struct Ordered<'p> {
    pool: &'p Pool,
    line: Option<u64>,
    /// Fences issued so far.
    pub fences: u32,
}

impl<'p> Ordered<'p> {
    pub fn new(pool: &'p Pool) -> Ordered<'p> {
        Ordered {
            pool,
            line: None,
            fences: 0,
        }
    }

    /// Stores `value` at `off`, after the fence that orders it if it is in
    /// another line than the last store.
    pub fn store(&mut self, off: u64, value: u64) -> Result<()> {
        let line = off & !63;
        if let Some(last) = self.line.filter(|&l| l != line) {
            self.pool.flush(last, 64);
            if !self.pool.fault(Fault::FastfairShiftUnfenced) {
                self.fence();
            }
        }
        self.line = Some(line);
        self.pool.store_u64(off, value)
    }

    /// A fence, unless one was issued since this writer began: what a
    /// store that must follow an earlier flush needs.
    pub fn fenced_once(&mut self) {
        if self.fences == 0 {
            self.fence();
        }
    }

    fn fence(&mut self) {
        self.pool.fence();
        self.fences += 1;
    }

    /// Flushes and fences the last line stored to.
    pub fn finish(mut self) {
        if let Some(last) = self.line.take() {
            self.pool.flush(last, 64);
            self.fence();
        }
    }
}

/// FAST insert (the authors' `insert_key`): puts `(head, ptr)` at entry
/// `pos` of a node whose `n` entries (no trace; `n + 2 <= slots`) are
/// `raw`, shifting entries `pos..n` one slot right.
///
/// Persist order, every store in order through [`Ordered`] (a fence per
/// line moved): the slot past the new end nulled if it is not already;
/// for `i` from `n - 1` down to `pos`, entry `i + 1`'s pointer, then its
/// head, copied from entry `i` (each copy is a trace until the entry
/// before it changes); entry `pos`'s pointer set to the one before it (a
/// trace; not for an append, `pos == n`, whose slot's pointer is the null
/// that ends the array), its head stored; a fence, if none was yet (the
/// caller's record or node was flushed before the call); then its
/// pointer: **the commit point**. Flush, fence. A crash before the commit leaves the old entries
/// and one trace; after it, the new entries.
pub fn insert(
    pool: &Pool,
    node: u64,
    before: u64,
    raw: &Raw,
    pos: u32,
    head: u64,
    ptr: u64,
) -> Result<()> {
    let n = raw.len();
    debug_assert!(pos <= n && raw.first_trace(before).is_none());
    let mut w = Ordered::new(pool);
    if pool.words().load(ptr_at(node, n + 1))? != 0 {
        w.store(ptr_at(node, n + 1), 0)?;
    }
    for i in (pos..n).rev() {
        w.store(ptr_at(node, i + 1), raw.ptrs[i as usize])?;
        w.store(head_at(node, i + 1), raw.heads[i as usize])?;
    }
    if pos < n {
        let prev = if pos == 0 {
            before
        } else {
            raw.ptrs[pos as usize - 1]
        };
        w.store(ptr_at(node, pos), prev)?;
    }
    w.store(head_at(node, pos), head)?;
    w.fenced_once();
    w.store(ptr_at(node, pos), ptr)?;
    w.finish();
    Ok(())
}

/// FAST delete (the authors' `remove_key`): removes entry `pos` of a node
/// whose `n` entries are `raw` (no trace).
///
/// Persist order, every store in order through [`Ordered`]: entry `pos`'s
/// pointer set to the one before it (**the commit point**: the entry is a
/// trace from then on); then [`shift_left`]. A crash after the commit
/// leaves the entries without `pos`, and at most one trace.
pub fn remove(pool: &Pool, node: u64, before: u64, raw: &Raw, pos: u32) -> Result<()> {
    let mut w = Ordered::new(pool);
    let prev = if pos == 0 {
        before
    } else {
        raw.ptrs[pos as usize - 1]
    };
    w.store(ptr_at(node, pos), prev)?;
    shift_left(&mut w, node, raw, pos)?;
    w.finish();
    Ok(())
}

/// Moves entries `pos + 1..` of `raw` one slot left over entry `pos`, a
/// trace: for `i` from `pos`, entry `i`'s head and then its pointer copied
/// from entry `i + 1` (the copy of entry `i + 1` makes that one a trace of
/// it), the last entry's pointer nulled. Every state it passes through
/// holds the same entries and at most one trace, so a crash anywhere in it
/// loses nothing, and running it again finishes it (recovery does).
pub fn shift_left(w: &mut Ordered<'_>, node: u64, raw: &Raw, pos: u32) -> Result<()> {
    let n = raw.len();
    for i in pos..n {
        if i + 1 < n {
            w.store(head_at(node, i), raw.heads[i as usize + 1])?;
            w.store(ptr_at(node, i), raw.ptrs[i as usize + 1])?;
        } else {
            w.store(ptr_at(node, i), 0)?;
        }
    }
    Ok(())
}

/// Appends the entries `heads`/`ptrs` (at least one) after the `n` of a
/// node (no trace; `n + heads.len() + 1 <= slots`), all at once: FAIR's
/// merge into the left node of a pair.
///
/// Persist order: the slot past the new end nulled if it is not already;
/// entries `n + 1..` written whole, and entry `n`'s head (all past the
/// array's end, which entry `n`'s null pointer still marks); flushed;
/// **fence**; entry `n`'s pointer: **the commit point**, which makes them
/// all entries at once; flush, **fence**. 2 fences.
pub fn append(pool: &Pool, node: u64, n: u32, heads: &[u64], ptrs: &[u64]) -> Result<()> {
    let k = heads.len() as u32;
    debug_assert!(k >= 1 && heads.len() == ptrs.len());
    let end = n + k;
    if pool.words().load(ptr_at(node, end))? != 0 {
        pool.store_u64(ptr_at(node, end), 0)?;
    }
    for i in 1..k {
        pool.store_u64(head_at(node, n + i), heads[i as usize])?;
        pool.store_u64(ptr_at(node, n + i), ptrs[i as usize])?;
    }
    pool.store_u64(head_at(node, n), heads[0])?;
    pool.flush(head_at(node, n), ENTRY * u64::from(k + 1));
    pool.fence();
    pool.store_u64(ptr_at(node, n), ptrs[0])?;
    pool.flush(ptr_at(node, n), 8);
    pool.fence();
    Ok(())
}
