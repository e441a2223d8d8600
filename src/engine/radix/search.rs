//! The point search of §3, shared by the three trees, and the lock-free
//! reader built on it.
//!
//! # Reading without the lock
//! [`Locked`](crate::engine::Locked) runs this search first without the
//! tree's lock, and trusts its answer only if no writer ran meanwhile (a
//! sequence lock; see `engine/locked.rs`). So the search must be safe on a
//! tree that a writer is changing under it, which it is:
//! - **Every PM read is an atomic word load** through
//!   [`Words::load`](crate::pm::Words::load), which refuses an offset
//!   outside the pool or unaligned, or within a block checked whole by
//!   [`Words::block`](crate::pm::Words::block): a stale or torn pointer
//!   gives a wrong word or an error, never a fault. The mapping lives as long as the
//!   reader's `Arc<Pool>`. The key comparison and the value copy read
//!   words too ([`leaf::key_matches`], [`leaf::copy_value`]): no `&[u8]`
//!   points into a block that a writer may be reusing.
//! - **The walk ends.** Every step consumes at least one unit of the key,
//!   except the step into a node's end slot, after which only a leaf is
//!   accepted; so a search takes at most `klen + 2` steps whatever it reads.
//! - **Nothing is acted on before the check.** The value is copied into
//!   the reader's buffer; the caller's closure runs on the buffer after the
//!   version is checked.
//!
//! The search reads nothing of the tree's DRAM state: the pool, the
//! flavor and the root slot's offset, none of which changes after open.
//! Under the lock, the same code answers `get_with` (the value is then
//! read in place).
//!
//! Writers write new blocks with plain copies ([`Pool::write_bytes`]), so a
//! reader that races with one reads bytes being written by a non-atomic
//! store through an atomic load. The Rust memory model leaves that race
//! undefined; x86-TSO (the only target with the flush instructions this
//! crate uses) defines it as a load of some mix of old and new bytes,
//! which the version check then discards. Sequence locks in Rust make the
//! same compromise (crossbeam's `AtomicCell` reads with volatile loads);
//! the pool is a shared file mapping, which another process may write
//! anyway.

use std::sync::Arc;

use super::header::Header;
use super::leaf::{self, LeafWord};
use super::nodes::{self, Kind, END};
use super::span::Span;
use super::Flavor;
use crate::engine::{OptimisticRead, Probe, ValueBuf};
use crate::error::{Error, Result};
use crate::pm::{Pool, CACHE_LINE};

/// Whether `off` lies in another cache line than `prev`, as 0 or 1.
///
/// A search counts the PM lines it reads without a history of lines:
/// blocks are line-aligned and never share a line, a search never returns
/// to a node, and within a node it reads words at rising offsets (header,
/// then keys or index, then the slot). So a node costs its header line plus
/// one for each later word that starts a new line. Branch-free, a few
/// instructions: see the shape note on `lookup_in`.
#[inline(always)]
fn new_line(prev: u64, off: u64) -> u64 {
    // NODE4 and NODE16 keep their keys in the header line (`lookup_in`
    // counts no line for them).
    const _: () = assert!(nodes::n4::SIZE <= CACHE_LINE);
    const _: () = assert!(nodes::n16::KEYS + 16 <= CACHE_LINE);
    u64::from(prev / CACHE_LINE != off / CACHE_LINE)
}

/// What a search needs of a tree: nothing that changes after open.
#[derive(Clone, Copy)]
pub(super) struct Search<'a> {
    pub pool: &'a Pool,
    pub flavor: Flavor,
    /// The root slot's offset.
    pub root: u64,
}

impl Search<'_> {
    /// The leaf holding `key`, if any. Reports the PM lines it reads
    /// (including the value's, which the caller reads).
    #[inline(always)]
    pub fn lookup(self, key: &[u8]) -> Result<Option<(u64, LeafWord)>> {
        let (found, lines) = self.lookup_counted(key)?;
        self.pool.touch_lines(lines);
        Ok(found)
    }

    /// [`Self::lookup`], returning the count of PM lines instead of
    /// reporting it.
    pub fn lookup_counted(self, key: &[u8]) -> Result<(Option<(u64, LeafWord)>, u64)> {
        // One copy of the loop per span, so that unit arithmetic is
        // compiled for a known span instead of matching on it per unit.
        match self.flavor.span() {
            Span::Nibble => self.lookup_w16(key),
            Span::Byte => self.lookup_in::<false>(key, self.root, 0, 1),
        }
    }

    /// WORT's search: the common step (a node of WORT's one kind, reached
    /// at its own depth, with no compressed path, and the key not yet at
    /// its end) in a loop of its own, with one bounds check per node and
    /// one compare of the header word for all of those conditions; then a
    /// leaf of one line, read with one check ([`leaf::find_in_line`]).
    /// Anything else (a null slot, a longer leaf, a compressed path, a
    /// node left by a crashed split, the key's end) goes on in
    /// [`Self::lookup_in`] from the slot that led there, which gives the
    /// same answer and line count (tested). Fewer instructions per level
    /// let the CPU overlap the misses of successive searches further; how
    /// far that went is measured in docs/design.md §11.
    #[inline(always)]
    fn lookup_w16(self, key: &[u8]) -> Result<(Option<(u64, LeafWord)>, u64)> {
        let pm = self.pool.words();
        let mut slot = self.root;
        let mut p = pm.load(slot)?;
        // Nodes passed, and how many of their slots lay in a later line
        // than their header: the lines read are `1 + d + later`.
        let mut d = 0;
        let mut later = 0;
        let mut plain = Header::plain(Kind::W16 as u8, 0);
        // One step: the node at `p`, reached at depth `d`, if it is a
        // plain WORT node, gives the slot of `unit`; anything else (a null
        // or bad pointer, a leaf, a compressed path) leaves the loop.
        macro_rules! step {
            ($unit:expr) => {{
                // One test for null, alignment and the pool's bounds.
                let Some(n) = pm.block::<{ nodes::w16::SIZE }>(p) else {
                    break;
                };
                if n.load(0) & Header::PLAIN_MASK != plain {
                    break;
                }
                let u: u8 = $unit;
                // Nodes are line-aligned: the slot's line is known from
                // the unit, so the count waits for no load.
                later += nodes::w16::slot_in_later_line(u);
                slot = nodes::w16::slot(p, u);
                p = n.load(slot - p);
                d += 1;
                plain += 1 << 4;
            }};
        }
        // Two units per key byte, high nibble first (`Span::unit`).
        for &b in key {
            step!(b >> 4);
            step!(b & 0x0F);
        }
        let lines = 1 + d as u64 + later;
        // The common end, a leaf in one line (an 8-byte key and value take
        // 24 bytes), is read with one check; the rest goes on below.
        if let Some(found) = leaf::find_in_line(pm, p, key)? {
            return Ok((found.map(|lw| (p, lw)), lines + 1));
        }
        self.lookup_in::<true>(key, slot, d, lines)
    }

    /// The search loop of §3 for one span.
    ///
    /// **Shape of the loop (measured, docs/design.md §11).** A search is a
    /// chain of cache misses: the slot, then the node it points to, then
    /// the node's slot for the next unit. In the common case (the node is
    /// reached at its own depth and has no compressed path) the next slot's
    /// address is computed from `p` and the key alone; the header only
    /// decides *whether* that case holds, through a branch. The CPU
    /// predicts the branch and loads the next slot while the header is
    /// still on its way, as the authors' C code gets for free. Computing the
    /// address from the decoded header instead (one expression for both
    /// cases) makes every slot load wait for its header: 1.5–2.5x slower
    /// searches on 1M keys.
    ///
    /// It starts at `slot`, reached at depth `d`, with `lines` PM lines
    /// read so far (the root slot's line: 1, at the root).
    #[inline(always)]
    pub(super) fn lookup_in<const NIBBLE: bool>(
        self,
        key: &[u8],
        mut slot: u64,
        mut d: usize,
        mut lines: u64,
    ) -> Result<(Option<(u64, LeafWord)>, u64)> {
        let span = if NIBBLE { Span::Nibble } else { Span::Byte };
        let pm = self.pool.words();
        let klen = span.len(key);
        // Set on the step into an end slot: the one step that consumes no
        // unit, so the walk ends within `klen + 2` steps even on a torn or
        // damaged tree.
        let mut at_end = false;
        // Lines: the root slot's, then per node as in `new_line`.
        let found = loop {
            let p = pm.load(slot)?;
            if p == 0 {
                break None;
            }
            lines += 1;
            let w = pm.load(p)?;
            if w & 0xF == u64::from(leaf::LEAF_KIND) {
                let lw = LeafWord::decode(p, w)?;
                if !leaf::key_matches(pm, p, lw, key)? {
                    lines += new_line(p, p + leaf::HEADER + lw.key_len as u64 - 1);
                    break None;
                }
                // The caller reads the value: count the leaf's lines to its end.
                lines += crate::pm::lines_spanned(p, lw.size()) - 1;
                break Some((p, lw));
            }
            if at_end {
                return Err(Error::corrupt(p, "radix: node in an end slot"));
            }
            if !Header::plain_at(w, d) {
                // Rare: a compressed path, or a node left above its depth
                // by a crashed split (the leaf comparison decides then).
                let h = Header::decode(w);
                let b = h.branch();
                if b < d {
                    return Err(Error::corrupt(p, "radix: node branches above its depth"));
                }
                if h.depth == d {
                    for i in 0..h.stored(span) {
                        if d + i >= klen || span.unit(key, d + i) != h.unit(span, i) {
                            return Ok((None, lines));
                        }
                    }
                }
                d = b;
            }
            if klen <= d {
                if klen < d {
                    break None;
                }
                // Only a leaf lives in an end slot: see the check above.
                slot = p + END;
                at_end = true;
                continue;
            }
            let u = span.unit(key, d);
            d += 1;
            if NIBBLE {
                // WORT has one node kind: test for it alone.
                if w & 0xF != Kind::W16 as u64 {
                    return Err(Error::corrupt(p, "radix: not a WORT node"));
                }
                let s = nodes::w16::slot(p, u);
                lines += new_line(p, s);
                slot = s;
                continue;
            }
            let (next, before) = match Kind::of(p, w)? {
                Kind::N256 if !NIBBLE => (Some(nodes::n256::slot(p, u)), p),
                // Keys in the header line.
                Kind::N4 if !NIBBLE => (nodes::n4::find(self.pool, p, u)?, p),
                Kind::N16 if !NIBBLE => (nodes::n16::find(self.pool, p, u)?, p),
                Kind::N48 if !NIBBLE => {
                    let index = p + nodes::n48::INDEX + u64::from(u);
                    lines += new_line(p, index);
                    (nodes::n48::find(self.pool, p, u)?, index)
                }
                k => {
                    return Err(Error::corrupt(
                        p,
                        format!("radix: {k:?} node in a {} tree", self.flavor.name()),
                    ))
                }
            };
            match next {
                Some(s) => {
                    lines += new_line(before, s);
                    slot = s;
                }
                None => break None,
            }
        };
        Ok((found, lines))
    }
}

/// The tree's lock-free reader (see the module doc).
pub(super) struct Reader {
    pub pool: Arc<Pool>,
    pub flavor: Flavor,
    pub root: u64,
}

impl OptimisticRead for Reader {
    fn get_into(&self, key: &[u8], buf: &mut ValueBuf) -> Result<Probe> {
        let s = Search {
            pool: &self.pool,
            flavor: self.flavor,
            root: self.root,
        };
        let Some((p, lw)) = s.lookup(key)? else {
            return Ok(Probe::Absent);
        };
        Ok(match leaf::copy_value(self.pool.words(), p, lw, buf)? {
            Some(r) => Probe::Found(r),
            None => Probe::TooLong,
        })
    }
}
