//! Recovery at open, and the structural check: one walk of the tree.
//!
//! Open first marks every block the tree reaches ([`super::chunks`]: a block
//! is in use exactly when it is reached), gives the rest back to the DRAM
//! free map and empty chunks back to the substrate, then walks the tree
//! again to repair what a crash can leave. Without `fix`, the walk reports
//! the same things as errors, because between operations none of them
//! exists.
//!
//! | found at a node reached at depth `d` | left by a crash in | fix | persist order |
//! |---|---|---|---|
//! | header depth ≠ `d` | a split (depth > `d`) or a merge (depth < `d`) | Algorithm 2: rebuild the header from two leaves under two children | one 8-byte store, flush, fence |
//! | non-null pointer the node does not list | an insert into or delete from a NODE4/16/48 in place (WOART; ART+CoW's NODE48, and its NODE4/16 in a full pool) | store null in it (its block is free, being unreachable, or is in use elsewhere) | stores, flush, fence |
//!
//! Every change commits with one store (see `write.rs`), so a crash never
//! leaves a node with fewer than two children or a listed null pointer:
//! both are corruption here.

use super::chunks::Chunks;
use super::header::{self, Header};
use super::nodes::{self, Kind, END};
use super::{leaf, Flavor, RadixTree};
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};

struct Walk {
    fix: bool,
    keys: u64,
}

impl RadixTree {
    /// Recovery (see the module doc).
    pub(super) fn recover(&mut self) -> Result<()> {
        {
            let mut heap = self.heap.write();
            self.mark(&mut heap, self.root_slot(), 0)?;
            heap.settle(&self.pool)?;
        }
        let mut w = Walk { fix: true, keys: 0 };
        self.visit(self.root_slot(), 0, &mut Vec::new(), false, &mut w)?;
        self.caches.set_count(w.keys);
        Ok(())
    }

    /// Marks the blocks reached from `slot` (at tree level `level`) in
    /// `heap`: the listed children and `end` of every node, not orphans.
    fn mark(&self, heap: &mut Chunks, slot: u64, level: usize) -> Result<()> {
        let pw = self.pool.load_u64(slot)?;
        let p = nodes::block_of(pw);
        if p == 0 {
            return Ok(());
        }
        if level > header::MAX_POS + 1 {
            return Err(Error::corrupt(p, "radix: tree deeper than any key"));
        }
        heap.mark(p)?;
        let kind = nodes::kind(&self.pool, p)?;
        if kind == Kind::Leaf {
            return Ok(());
        }
        self.mark(heap, p + END, level + 1)?;
        for e in nodes::entries(&self.pool, pw, kind)? {
            if e.ptr != 0 {
                self.mark(heap, e.slot, level + 1)?;
            }
        }
        Ok(())
    }

    /// The structural check, and a check that the DRAM free map is exactly
    /// what the tree does not reach (a block free in DRAM but reached would
    /// be handed out twice; one in use but unreached is a leak).
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        let mut w = Walk {
            fix: false,
            keys: 0,
        };
        self.visit(self.root_slot(), 0, &mut Vec::new(), false, &mut w)?;
        // The blocks the threads' caches hold are in use in the map and
        // must not be reached (`caches`). Read before the heap is locked:
        // a shard is always taken before the heap.
        let cached = self.caches.cached();
        let heap = self.heap.read();
        let mut fresh = heap.unmarked();
        self.mark(&mut fresh, self.root_slot(), 0)
            .map_err(|e| Error::CheckFailed(format!("{}: {e}", self.flavor.name())))?;
        for off in cached {
            fresh.mark(off).map_err(|e| {
                Error::CheckFailed(format!(
                    "{}: a block in a thread's cache: {e}",
                    self.flavor.name()
                ))
            })?;
        }
        for ((o, have), (_, reached)) in heap.used_blocks().into_iter().zip(fresh.used_blocks()) {
            if have != reached {
                let i = have
                    .iter()
                    .zip(&reached)
                    .position(|(a, b)| a != b)
                    .expect("the bitmaps differ in some word");
                let what = if have[i] & !reached[i] != 0 {
                    "a block in use is not reached by the tree (leak)"
                } else {
                    "a block the tree reaches is free in the DRAM map"
                };
                return self
                    .bad(false, o, &format!("chunk: {what}"))
                    .map(|()| unreachable!());
            }
        }
        let mut blocks = vec![self.sb];
        blocks.extend(heap.offsets());
        Ok(CheckReport {
            keys: w.keys,
            referenced_blocks: blocks,
        })
    }

    /// A finding of the walk: corruption at open (`fix`), a failed check
    /// otherwise.
    fn bad(&self, fix: bool, off: u64, what: &str) -> Result<()> {
        if fix {
            return Err(Error::corrupt(
                off,
                format!("{}: {what}", self.flavor.name()),
            ));
        }
        Err(Error::CheckFailed(format!(
            "{}: {what} at {off:#x}",
            self.flavor.name()
        )))
    }

    /// Visits the pointer in `slot`, reached at depth `d`; `path` holds the
    /// known units above (None: a path unit not stored in a header); `at_end`:
    /// `slot` is an `end` slot, so a leaf there has exactly `d` units.
    fn visit(
        &self,
        slot: u64,
        d: usize,
        path: &mut Vec<Option<u8>>,
        at_end: bool,
        w: &mut Walk,
    ) -> Result<()> {
        let span = self.span;
        let pw = self.pool.load_u64(slot)?;
        let p = nodes::block_of(pw);
        if p == 0 {
            return Ok(());
        }
        let word = self.pool.load_u64(p)?;
        let kind = Kind::of(p, word)?;
        // The pointer's tags say what the block is: a leaf's pointer
        // carries `leaf_tag` (format 4), a WORT node's its slot map (any
        // map, in format 4), an ART node's nothing. Every pointer is
        // stored whole with one store and a block is reused only after the
        // store that unlinked it is durable, so no crash leaves a wrong
        // tag: it is damage, found here and by `check`.
        let tags_ok = match kind {
            Kind::Leaf => pw - p == self.leaf_tag,
            Kind::W16 if self.leaf_tag != 0 => (pw - p) & nodes::LEAF_TAG == 0,
            _ => pw == p,
        };
        if !tags_ok {
            return self.bad(
                w.fix,
                p,
                &format!(
                    "pointer {pw:#x} in slot {slot:#x}: its leaf tag does not match its {kind:?} block (format {})",
                    self.version
                ),
            );
        }
        if kind == Kind::Leaf {
            let lw = leaf::LeafWord::decode(p, word)?;
            let size = self.block_size(p)?;
            if size < lw.size() {
                return Err(Error::corrupt(p, "radix: leaf larger than its block"));
            }
            let key = leaf::key_vec(&self.pool, p)?;
            let n = span.len(&key);
            let fits = if at_end { n == d } else { n >= d } && path.len() <= n;
            if !fits
                || path
                    .iter()
                    .enumerate()
                    .any(|(i, u)| u.is_some_and(|u| span.unit(&key, i) != u))
            {
                return Err(Error::corrupt(p, "radix: leaf key does not match its path"));
            }
            w.keys += 1;
            return Ok(());
        }
        if self.block_size(p)? < kind.size() {
            return Err(Error::corrupt(p, "radix: node larger than its block"));
        }
        let allowed = match self.flavor {
            Flavor::Wort => kind == Kind::W16,
            _ => kind != Kind::W16,
        };
        if !allowed || at_end {
            return Err(Error::corrupt(p, "radix: wrong node kind here"));
        }
        let mut h = Header::decode(word);
        if h.branch() < d {
            return Err(Error::corrupt(p, "radix: node branches above its depth"));
        }
        if h.depth != d {
            if !w.fix {
                return self.bad(
                    false,
                    p,
                    "node depth differs from the depth it is reached at",
                );
            }
            self.repair_header(pw, kind, &h, d)?;
            h = Header::decode(self.pool.load_u64(p)?);
        }
        let orphans = nodes::orphans(&self.pool, p, kind)?;
        if !orphans.is_empty() {
            if !w.fix {
                return self.bad(false, p, "node holds a pointer it does not list");
            }
            // Persist order: null stores; flush each; fence.
            for &s in &orphans {
                cases::record(Case::RadixOrphanCleared);
                self.pool.store_u64(s, 0)?;
                self.pool.flush(s, 8);
            }
            self.pool.fence();
        }
        let entries = nodes::entries(&self.pool, pw, kind)?;
        if entries.iter().any(|e| e.ptr == 0) {
            return self.bad(w.fix, p, "node lists a child with a null pointer");
        }
        let end = self.pool.load_u64(p + END)?;
        if entries.len() + usize::from(end != 0) < 2 {
            return self.bad(w.fix, p, "node with fewer than two children");
        }
        if !w.fix && self.flavor != Flavor::Wort && kind.capacity() < entries.len() {
            return self.bad(false, p, "node over its capacity");
        }
        let b = h.branch();
        path.truncate(d);
        for i in 0..h.plen {
            path.push((i < h.stored(span)).then(|| h.unit(span, i)));
        }
        self.visit(p + END, b, path, true, w)?;
        for e in entries {
            path.truncate(b);
            path.push(Some(e.unit));
            self.visit(e.slot, b + 1, path, false, w)?;
        }
        path.truncate(d);
        Ok(())
    }

    /// Algorithm 2 (RecoverHeader): node `pw` (its pointer word), reached at depth `d`, has a
    /// header left by a crash inside a split or a merge. Its branch position
    /// is the length of the common prefix of two leaves under two different
    /// children (one leaf if it has one child: then the branch position in
    /// the header, which splits and merges do not change). Persist order:
    /// the rebuilt header with one 8-byte store; flush; fence.
    fn repair_header(&self, pw: u64, kind: Kind, h: &Header, d: usize) -> Result<()> {
        let span = self.span;
        // The pointer word lists the children; the block holds the header.
        let p = nodes::block_of(pw);
        let mut subtrees: Vec<u64> = Vec::new();
        let end = self.pool.load_u64(p + END)?;
        if end != 0 {
            subtrees.push(end);
        }
        subtrees.extend(self.children(pw, kind)?.into_iter().map(|c| c.1));
        let first = *subtrees
            .first()
            .ok_or_else(|| Error::corrupt(p, "radix: node without children"))?;
        let k1 = leaf::key_vec(&self.pool, self.any_leaf(first)?)?;
        let b = match subtrees.get(1) {
            Some(&second) => {
                let k2 = leaf::key_vec(&self.pool, self.any_leaf(second)?)?;
                d + span.common(&k1, &k2, d)
            }
            None => h.branch(),
        };
        if b != h.branch() || span.len(&k1) < b {
            return Err(Error::corrupt(
                p,
                format!(
                    "radix: cannot rebuild the header (leaves branch at {b}, header at {})",
                    h.branch()
                ),
            ));
        }
        cases::record(Case::RadixHeaderRepaired);
        let fixed = Header::new(h.kind, span, d, &span.units(&k1, d, b));
        self.pool.store_u64(p, fixed.encode())?;
        self.pool.persist(p, 8);
        Ok(())
    }
}
