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
use crate::engine::{OptimisticRead, Probe, ValueBuf, BATCH};
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
            Span::Byte => match self.walk_bytes(key)? {
                Walked::Absent(lines) => Ok((None, lines)),
                Walked::To(w) => {
                    if let Some(found) = leaf::find_in_line(self.pool.words(), w.p, key)? {
                        return Ok((found.map(|lw| (w.p, lw)), w.lines + 1));
                    }
                    self.lookup_in::<false>(key, w.slot, w.d, w.lines)
                }
            },
        }
    }

    /// WORT's search: the common step (a node of WORT's one kind, reached
    /// at its own depth, with no compressed path, and the key not yet at
    /// its end) in a loop of its own, with one bounds check per node and
    /// one compare of the header word for all of those conditions; then a
    /// leaf of one line, read after one bounds check for the line
    /// ([`leaf::find_in_line`]; each word's offset is still compared with
    /// the line's end).
    /// Anything else (a null slot, a longer leaf, a compressed path, a
    /// node left by a crashed split, the key's end) goes on in
    /// [`Self::lookup_in`] from the slot that led there, which gives the
    /// same answer and line count (tested). Fewer instructions per level
    /// let the CPU overlap the misses of successive searches further; how
    /// far that went is measured in docs/design.md §11.
    #[inline(always)]
    fn lookup_w16(self, key: &[u8]) -> Result<(Option<(u64, LeafWord)>, u64)> {
        let w = self.walk_w16(key)?;
        // The common end, a leaf in one line (an 8-byte key and value take
        // 24 bytes), is read after one bounds check for the line; the rest
        // goes on below.
        if let Some(found) = leaf::find_in_line(self.pool.words(), w.p, key)? {
            return Ok((found.map(|lw| (w.p, lw)), w.lines + 1));
        }
        self.lookup_in::<true>(key, w.slot, w.d, w.lines)
    }

    /// [`Self::lookup_w16`]'s loop: where it left the plain WORT nodes.
    #[inline(always)]
    fn walk_w16(self, key: &[u8]) -> Result<Walk> {
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
                // One test for null, alignment and the pool's bounds, of
                // the word without its slot map (format 4). A leaf's
                // tagged pointer is odd, so it fails this test too: the
                // loop ends as soon as the slot's word arrives, not after
                // the leaf's line (docs/design.md §11, "Leaf-tagged
                // pointers and slot maps").
                let base = p & !nodes::w16::MAP;
                let Some(n) = pm.block::<{ nodes::w16::SIZE }>(base) else {
                    break;
                };
                if n.load(0) & Header::PLAIN_MASK != plain {
                    break;
                }
                let u: u8 = $unit;
                // The slot, from the pointer's map and the unit: its load
                // does not wait for the header's, and its line is counted
                // without a load.
                let (at, l) = nodes::w16::slot_at(p, u);
                later += l;
                slot = base + at;
                p = n.load(at);
                d += 1;
                plain += 1 << 4;
            }};
        }
        // Two units per key byte, high nibble first (`Span::unit`).
        for &b in key {
            step!(b >> 4);
            step!(b & 0x0F);
        }
        Ok(Walk {
            p: nodes::block_of(p),
            slot,
            d,
            lines: 1 + d as u64 + later,
        })
    }

    /// WOART's and ART+CoW's search, as [`Self::walk_w16`] is WORT's: the
    /// common step (a node of one of the four kinds, reached at its own
    /// depth with no compressed path, the key not at its end) in a loop of
    /// its own, each node's first line checked once and NODE4's and
    /// NODE16's keys read from it; NODE48's index and NODE256's slot by
    /// checked loads. Same answers and lines as [`Self::step`] (tested):
    /// the node's header line, NODE16's slot line, NODE48's index line and
    /// slot line, NODE256's slot line. Anything else (a leaf, a null or
    /// bad pointer, a compressed path, a node above its depth, an unknown
    /// kind, the key's end) leaves the loop for [`Self::lookup_in`] at the
    /// slot that led there. Every round consumes a byte of the key.
    #[inline(always)]
    fn walk_bytes(self, key: &[u8]) -> Result<Walked> {
        let pm = self.pool.words();
        let mut slot = self.root;
        let mut p = pm.load(slot)?;
        let mut d = 0;
        let mut lines = 1;
        for &u in key {
            // As in `walk_w16`: a tagged leaf pointer fails this test.
            let Some(n) = pm.block::<CACHE_LINE>(p) else {
                break;
            };
            let w = n.load(0);
            if !Header::plain_at(w, d) {
                break;
            }
            let found = match w & 0xF {
                k if k == Kind::N4 as u64 => nodes::n4::find_in_line(n, p, u).map(|s| (s, p)),
                k if k == Kind::N16 as u64 => nodes::n16::find_in_line(n, p, u).map(|s| (s, p)),
                k if k == Kind::N48 as u64 => {
                    let index = p + nodes::n48::INDEX + u64::from(u);
                    lines += new_line(p, index);
                    nodes::n48::find(self.pool, p, u)?.map(|s| (s, index))
                }
                k if k == Kind::N256 as u64 => Some((nodes::n256::slot(p, u), p)),
                _ => break,
            };
            lines += 1;
            let Some((s, before)) = found else {
                return Ok(Walked::Absent(lines));
            };
            lines += new_line(before, s);
            slot = s;
            p = pm.load(s)?;
            d += 1;
        }
        Ok(Walked::To(Walk {
            p: nodes::block_of(p),
            slot,
            d,
            lines,
        }))
    }

    /// [`Self::lookup_counted`] for several keys at once (at most
    /// [`BATCH`]): calls `f(i, lookup_counted(keys[i]))` for each key, in
    /// the order the searches end. Same answers and line counts (tested).
    ///
    /// WORT's keys walk their plain nodes in rounds, one step per key per
    /// round, and each step prefetches the next node's header line and the
    /// line of the slot the key will read there ([`Words::prefetch`]): the
    /// misses of all the keys in flight overlap, where one search's chain
    /// of misses is one after the other (docs/design.md §11, "Batched
    /// searches"). A key leaves the rounds where `lookup_w16` leaves its
    /// loop, and ends as it does. The other trees take
    /// [`Self::lookup_many_bytes`].
    ///
    /// [`Words::prefetch`]: crate::pm::Words::prefetch
    pub fn lookup_many(
        self,
        keys: &[&[u8]],
        mut f: impl FnMut(usize, Result<(Option<(u64, LeafWord)>, u64)>),
    ) {
        assert!(keys.len() <= BATCH, "at most {BATCH} keys per batch");
        crate::hint::prefetch_keys(keys.iter().copied());
        let pm = self.pool.words();
        if self.flavor.span() == Span::Byte {
            return self.lookup_many_bytes(keys, &mut f);
        }
        let root = match pm.load(self.root) {
            Ok(root) => root,
            Err(_) => {
                // Each key then reports the error itself.
                for (i, key) in keys.iter().enumerate() {
                    f(i, self.lookup_counted(key));
                }
                return;
            }
        };
        /// One key's place: as `lookup_w16`'s locals.
        #[derive(Clone, Copy)]
        struct Walk {
            p: u64,
            slot: u64,
            d: usize,
            later: u64,
        }
        let mut walks = [Walk {
            p: root,
            slot: self.root,
            d: 0,
            later: 0,
        }; BATCH];
        // The keys still walking, compacted as they leave.
        let mut live: [usize; BATCH] = std::array::from_fn(|i| i);
        let mut n = keys.len();
        let plain = Header::plain(Kind::W16 as u8, 0);
        while n > 0 {
            let mut j = 0;
            while j < n {
                let i = live[j];
                let key = keys[i];
                let w = &mut walks[i];
                // One step of `lookup_w16`'s loop; `false` where it breaks.
                let stepped = w.d < 2 * key.len()
                    && match pm.block::<{ nodes::w16::SIZE }>(w.p & !nodes::w16::MAP) {
                        Some(n)
                            if n.load(0) & Header::PLAIN_MASK == plain + ((w.d as u64) << 4) =>
                        {
                            let u = Span::Nibble.unit(key, w.d);
                            let (at, l) = nodes::w16::slot_at(w.p, u);
                            w.later += l;
                            w.slot = nodes::block_of(w.p) + at;
                            w.p = n.load(at);
                            w.d += 1;
                            // The next node's header and slot lines, or the
                            // leaf's line, needed next round.
                            pm.prefetch(nodes::block_of(w.p));
                            // `w.p` is not checked yet: `slot` wraps, so
                            // that a torn or damaged word cannot overflow.
                            if w.d < 2 * key.len() {
                                let u = Span::Nibble.unit(key, w.d);
                                pm.prefetch(nodes::w16::slot(w.p, u));
                            }
                            true
                        }
                        _ => false,
                    };
                if stepped {
                    j += 1;
                    continue;
                }
                n -= 1;
                live[j] = live[n];
                let Walk { p, slot, d, later } = *w;
                let p = nodes::block_of(p);
                let lines = 1 + d as u64 + later;
                f(
                    i,
                    match leaf::find_in_line(pm, p, key) {
                        Ok(Some(found)) => Ok((found.map(|lw| (p, lw)), lines + 1)),
                        Ok(None) => self.lookup_in::<true>(key, slot, d, lines),
                        Err(e) => Err(e),
                    },
                );
            }
        }
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
        slot: u64,
        d: usize,
        lines: u64,
    ) -> Result<(Option<(u64, LeafWord)>, u64)> {
        let pm = self.pool.words();
        let mut at = At {
            slot,
            d,
            lines,
            at_end: false,
        };
        loop {
            let p = pm.load(at.slot)?;
            match self.step::<NIBBLE>(key, p, at)? {
                Step::Next(next) => at = next,
                Step::Done(found, lines) => return Ok((found, lines)),
            }
        }
    }

    /// One step of [`Self::lookup_in`]: `p` is the word read from
    /// `at.slot` (null, a leaf, tagged or not, or a node). Every step consumes at least one
    /// unit of the key, except the step into an end slot (`at_end`), after
    /// which only a leaf is accepted: so a walk ends within `klen + 2`
    /// steps even on a torn or damaged tree. Lines: the root slot's, then
    /// per node as in `new_line`.
    #[inline(always)]
    fn step<const NIBBLE: bool>(self, key: &[u8], p: u64, at: At) -> Result<Step> {
        let span = if NIBBLE { Span::Nibble } else { Span::Byte };
        let pm = self.pool.words();
        let klen = span.len(key);
        let At {
            mut d,
            mut lines,
            at_end,
            ..
        } = at;
        // The word (a WORT node's slot map is in it) and the block.
        let (pw, p) = (p, nodes::block_of(p));
        if p == 0 {
            return Ok(Step::Done(None, lines));
        }
        lines += 1;
        let w = pm.load(p)?;
        if w & 0xF == u64::from(leaf::LEAF_KIND) {
            let lw = LeafWord::decode(p, w)?;
            if !leaf::key_matches(pm, p, lw, key)? {
                lines += new_line(p, p + leaf::HEADER + lw.key_len as u64 - 1);
                return Ok(Step::Done(None, lines));
            }
            // The caller reads the value: count the leaf's lines to its end.
            lines += crate::pm::lines_spanned(p, lw.size()) - 1;
            return Ok(Step::Done(Some((p, lw)), lines));
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
                        return Ok(Step::Done(None, lines));
                    }
                }
            }
            d = b;
        }
        if klen <= d {
            if klen < d {
                return Ok(Step::Done(None, lines));
            }
            // Only a leaf lives in an end slot: see the check above.
            return Ok(Step::Next(At {
                slot: p + END,
                d,
                lines,
                at_end: true,
            }));
        }
        let u = span.unit(key, d);
        d += 1;
        let next = |slot: u64, lines: u64| {
            Step::Next(At {
                slot,
                d,
                lines,
                at_end: false,
            })
        };
        if NIBBLE {
            // WORT has one node kind: test for it alone.
            if w & 0xF != Kind::W16 as u64 {
                return Err(Error::corrupt(p, "radix: not a WORT node"));
            }
            let s = nodes::w16::slot(pw, u);
            return Ok(next(s, lines + new_line(p, s)));
        }
        let (found, before) = match Kind::of(p, w)? {
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
        Ok(match found {
            Some(s) => next(s, lines + new_line(before, s)),
            None => Step::Done(None, lines),
        })
    }

    /// [`Self::lookup_many`] for the byte-span trees (WOART, ART+CoW):
    /// each key alternates between reading a slot (and prefetching the
    /// node it points to) and taking [`Self::step`] on that node (and
    /// prefetching the next slot), one of the two per key per round.
    fn lookup_many_bytes(
        self,
        keys: &[&[u8]],
        f: &mut impl FnMut(usize, Result<(Option<(u64, LeafWord)>, u64)>),
    ) {
        let pm = self.pool.words();
        /// One key's place: the slot to read next, and the word read from
        /// it once read (its line then on its way).
        #[derive(Clone, Copy)]
        struct Walk {
            at: At,
            p: Option<u64>,
        }
        let mut walks = [Walk {
            at: At {
                slot: self.root,
                d: 0,
                lines: 1,
                at_end: false,
            },
            p: None,
        }; BATCH];
        let mut live: [usize; BATCH] = std::array::from_fn(|i| i);
        let mut n = keys.len();
        while n > 0 {
            let mut j = 0;
            while j < n {
                let i = live[j];
                let w = &mut walks[i];
                let done = match w.p.take() {
                    None => match pm.load(w.at.slot) {
                        Ok(p) => {
                            pm.prefetch(p);
                            w.p = Some(p);
                            None
                        }
                        Err(e) => Some(Err(e)),
                    },
                    Some(p) => match self.step::<false>(keys[i], p, w.at) {
                        Ok(Step::Next(at)) => {
                            pm.prefetch(at.slot);
                            w.at = at;
                            None
                        }
                        Ok(Step::Done(found, lines)) => Some(Ok((found, lines))),
                        Err(e) => Some(Err(e)),
                    },
                };
                match done {
                    None => j += 1,
                    Some(r) => {
                        n -= 1;
                        live[j] = live[n];
                        f(i, r);
                    }
                }
            }
        }
    }
}

/// Where a search stands between two nodes: the slot it reads next, the
/// units consumed, the lines read, and whether the slot is an end slot.
#[derive(Clone, Copy)]
struct At {
    slot: u64,
    d: usize,
    lines: u64,
    at_end: bool,
}

/// Where [`Search::walk_w16`] or [`Search::walk_bytes`] left the plain
/// nodes: the block `p` that the word read from `slot` names (its leaf
/// tag cleared), after `d` nodes, and the lines read so far.
struct Walk {
    p: u64,
    slot: u64,
    d: usize,
    lines: u64,
}

/// What [`Search::walk_bytes`] found.
enum Walked {
    /// Go on from here.
    To(Walk),
    /// A node without the key's next byte: absent, after these lines.
    Absent(u64),
}

/// Where one step of a search leads.
enum Step {
    /// On to this slot.
    Next(At),
    /// The answer, and the lines read.
    Done(Option<(u64, LeafWord)>, u64),
}

/// The tree's lock-free reader (see the module doc).
pub(super) struct Reader {
    pub pool: Arc<Pool>,
    pub flavor: Flavor,
    pub root: u64,
}

impl OptimisticRead for Reader {
    /// Counts the PM lines read only for an answer (`Absent` or `Found`):
    /// a key that falls back to the lock (`TooLong`, an error) is searched
    /// and counted there again, and would otherwise count twice.
    fn get_into(&self, key: &[u8], buf: &mut ValueBuf) -> Result<Probe> {
        let s = Search {
            pool: &self.pool,
            flavor: self.flavor,
            root: self.root,
        };
        // The tree's loop inlined here rather than behind `lookup_counted`'s
        // call: fewer instructions per search, so more of the next search
        // fits in the CPU's window (docs/design.md §11, "Lean one-key reads").
        let nibble = self.flavor.span() == Span::Nibble;
        let w = if nibble {
            s.walk_w16(key)?
        } else {
            match s.walk_bytes(key)? {
                Walked::To(w) => w,
                Walked::Absent(lines) => {
                    self.pool.touch_lines(lines);
                    return Ok(Probe::Absent);
                }
            }
        };
        // `lookup_counted`'s end, with the value of a one-line leaf read
        // from the line the key was compared in.
        let (found, lines) = match leaf::find_line(self.pool.words(), w.p, key)? {
            Some(Some((lw, l))) => {
                let r = leaf::copy_from_line(l, lw, buf);
                self.pool.touch_lines(w.lines + 1);
                return Ok(Probe::Found(r));
            }
            Some(None) => (None, w.lines + 1),
            None if nibble => s.lookup_in::<true>(key, w.slot, w.d, w.lines)?,
            None => s.lookup_in::<false>(key, w.slot, w.d, w.lines)?,
        };
        let probe = match found {
            None => Probe::Absent,
            Some((p, lw)) => match leaf::copy_value(self.pool.words(), p, lw, buf)? {
                Some(r) => Probe::Found(r),
                None => return Ok(Probe::TooLong),
            },
        };
        self.pool.touch_lines(lines);
        Ok(probe)
    }

    fn get_many_into(&self, keys: &[&[u8]], bufs: &mut [ValueBuf], out: &mut [Result<Probe>]) {
        let s = Search {
            pool: &self.pool,
            flavor: self.flavor,
            root: self.root,
        };
        let pm = self.pool.words();
        let mut lines = 0;
        s.lookup_many(keys, |i, found| {
            out[i] = found.and_then(|(found, l)| {
                let Some((p, lw)) = found else {
                    lines += l;
                    return Ok(Probe::Absent);
                };
                // As `get_into`: a fall-back counts nothing here.
                Ok(match leaf::copy_value(pm, p, lw, &mut bufs[i])? {
                    Some(r) => {
                        lines += l;
                        Probe::Found(r)
                    }
                    None => Probe::TooLong,
                })
            });
        });
        self.pool.touch_lines(lines);
    }
}
