//! Recovery at open, and the structural check: one walk of the tree.
//!
//! With `fix`, the walk repairs what a crash can leave (see the module doc
//! of [`super`]); without, it reports the same things as errors, because
//! between operations none of them exists.
//!
//! | found at a node reached at depth `d` | left by a crash in | fix | persist order |
//! |---|---|---|---|
//! | header depth ≠ `d` | a split (depth > `d`) or a merge (depth < `d`) | Algorithm 2: rebuild the header from two leaves under two children | one 8-byte store, flush, fence |
//! | non-null pointer the node does not list | a WOART insert or delete | `free` it | allocator (3 fences) |
//! | listed entry with a null pointer | an ART+CoW delete | copy without it, `replace` | 3 fences |
//! | fewer than two children (`end` counts) | a split, an expansion, a delete before its merge | merge into the parent's slot, or free | as for a delete |
//!
//! ART+CoW's `pending` slot is settled first: cleared if the tree reaches
//! its block, freed otherwise.

use super::header::Header;
use super::nodes::{self, Kind, END};
use super::{leaf, Flavor, RadixTree};
use crate::engine::CheckReport;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};

struct Walk {
    fix: bool,
    keys: u64,
    blocks: Vec<u64>,
}

impl RadixTree {
    /// Recovery (see the module doc).
    pub(super) fn recover(&mut self) -> Result<()> {
        let pending = self.pool.load_u64(self.pending_slot())?;
        if pending != 0 {
            if self.flavor != Flavor::ArtCow {
                return Err(Error::corrupt(
                    self.pending_slot(),
                    "radix: pending block in a tree that does not use it",
                ));
            }
            if self.reachable(pending)? {
                cases::record(Case::RadixPendingKept);
                self.clear_pending_at_open()?;
            } else {
                cases::record(Case::RadixPendingFreed);
                self.free(self.pending_slot())?;
            }
        }
        let mut w = Walk {
            fix: true,
            keys: 0,
            blocks: Vec::new(),
        };
        self.visit(self.root_slot(), 0, &mut Vec::new(), false, &mut w)?;
        self.count = w.keys;
        Ok(())
    }

    fn clear_pending_at_open(&self) -> Result<()> {
        self.pool.store_u64(self.pending_slot(), 0)?;
        self.pool.persist(self.pending_slot(), 8);
        Ok(())
    }

    /// Whether the search path of some key under `block` passes through it.
    fn reachable(&self, block: u64) -> Result<bool> {
        let key = leaf::key_vec(&self.pool, self.any_leaf(block)?)?;
        let span = self.span;
        let mut slot = self.root_slot();
        loop {
            let p = self.pool.load_u64(slot)?;
            if p == block {
                return Ok(true);
            }
            if p == 0 {
                return Ok(false);
            }
            let kind = nodes::kind(&self.pool, p)?;
            if kind == Kind::Leaf {
                return Ok(false);
            }
            let b = Header::decode(self.pool.load_u64(p)?).branch();
            if span.len(&key) == b {
                slot = p + END;
                continue;
            }
            if span.len(&key) < b {
                return Ok(false);
            }
            match nodes::find(&self.pool, p, kind, span.unit(&key, b))? {
                Some(s) => slot = s,
                None => return Ok(false),
            }
        }
    }

    /// The structural check.
    pub(super) fn check_impl(&self) -> Result<CheckReport> {
        if self.pool.load_u64(self.pending_slot())? != 0 {
            return Err(Error::CheckFailed("radix: pending slot is not null".into()));
        }
        let mut w = Walk {
            fix: false,
            keys: 0,
            blocks: vec![self.sb],
        };
        self.visit(self.root_slot(), 0, &mut Vec::new(), false, &mut w)?;
        Ok(CheckReport {
            keys: w.keys,
            referenced_blocks: w.blocks,
        })
    }

    fn bad(&self, off: u64, what: &str) -> Result<()> {
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
        // A fix can change what `slot` holds; visit it again then.
        'again: loop {
            let p = self.pool.load_u64(slot)?;
            if p == 0 {
                return Ok(());
            }
            let word = self.pool.load_u64(p)?;
            let kind = Kind::of(p, word)?;
            if kind == Kind::Leaf {
                let lw = leaf::LeafWord::decode(p, word)?;
                let size = self.pool.block_size(p)?;
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
                w.blocks.push(p);
                return Ok(());
            }
            if self.pool.block_size(p)? < kind.size() {
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
                    return self.bad(p, "node depth differs from the depth it is reached at");
                }
                self.repair_header(p, kind, &h, d)?;
                h = Header::decode(self.pool.load_u64(p)?);
            }
            let orphans = nodes::orphans(&self.pool, p, kind)?;
            if !orphans.is_empty() {
                if !w.fix {
                    return self.bad(p, "node holds a pointer it does not list");
                }
                for s in orphans {
                    cases::record(Case::RadixOrphanFreed);
                    self.free(s)?;
                }
            }
            let entries = nodes::entries(&self.pool, p, kind)?;
            let nulls = entries.iter().filter(|e| e.ptr == 0).count();
            if nulls > 0 {
                if !w.fix || self.flavor != Flavor::ArtCow || !matches!(kind, Kind::N4 | Kind::N16)
                {
                    return self.bad(p, "node lists a child with a null pointer");
                }
                cases::record(Case::RadixNullEntryCompacted);
                if self.after_remove(slot, p, kind, d)? {
                    continue 'again;
                }
                self.resize(slot, p, kind, kind)?;
                continue 'again;
            }
            let end = self.pool.load_u64(p + END)?;
            let total = entries.len() + usize::from(end != 0);
            if total < 2 {
                if !w.fix {
                    return self.bad(p, "node with fewer than two children");
                }
                cases::record(Case::RadixNodeMerged);
                self.after_remove(slot, p, kind, d)?;
                continue 'again;
            }
            if !w.fix && self.flavor != Flavor::Wort && kind.capacity() < entries.len() {
                return self.bad(p, "node over its capacity");
            }
            w.blocks.push(p);
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
            return Ok(());
        }
    }

    /// Algorithm 2 (RecoverHeader): node `p`, reached at depth `d`, has a
    /// header left by a crash inside a split or a merge. Its branch position
    /// is the length of the common prefix of two leaves under two different
    /// children (one leaf if it has one child: then the branch position in
    /// the header, which splits and merges do not change). Persist order:
    /// the rebuilt header with one 8-byte store; flush; fence.
    fn repair_header(&self, p: u64, kind: Kind, h: &Header, d: usize) -> Result<()> {
        let span = self.span;
        let mut subtrees: Vec<u64> = Vec::new();
        let end = self.pool.load_u64(p + END)?;
        if end != 0 {
            subtrees.push(end);
        }
        subtrees.extend(self.children(p, kind)?.into_iter().map(|c| c.1));
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
