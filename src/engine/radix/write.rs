//! Insert, update and delete, with the persist order of each step.
//!
//! | step | stores, in order | commit point | fences |
//! |---|---|---|---|
//! | insert into an empty slot (WORT child, NODE256 child, `end`, root) | leaf written, flushed; `activate(leaf, slot)` | the slot store inside `activate` | 3 |
//! | insert into a WOART NODE4 / NODE16 / NODE48 | leaf flushed; `activate` into a free pointer; commit word / bitmap / index byte stored, flushed, fenced | the commit word | 4 |
//! | insert into an ART+CoW NODE4 / NODE16 | leaf flushed; `activate(leaf, pending)`; copy with the leaf flushed; `replace(copy, parent slot)`; `pending = 0`, flushed, fenced | the parent slot store inside `replace` | 7 |
//! | update (any tree) | new leaf flushed; `replace(new, slot of the old leaf)` | the slot store inside `replace` | 3 |
//! | delete from a pointer slot (WORT, NODE256, `end`, root, ART+CoW NODE4/16) | `free(slot)` | the null store inside `free` | 3 |
//! | delete from a WOART NODE4 / NODE16 / NODE48 | commit word / bitmap / index byte stored, flushed, fenced; `free(pointer)` | the commit word | 4 |
//! | expansion of a leaf into a node | node (holding the old leaf) flushed; `activate(node, slot)`; then an insert into it | the slot store | 3 + insert |
//! | split (Algorithm 1; WORT, WOART) | new parent (holding the old node) flushed; old node's header stored (one 8-byte store), flushed; `activate(parent, slot)`; then an insert into it | the slot store | 3 + insert |
//! | split (ART+CoW) | copy of the node with the new header flushed; `activate(copy, pending)`; parent (holding the copy) flushed; `replace(parent, slot)`; `pending = 0`, fenced | the slot store inside `replace` | 7 + insert |
//! | growth / shrink (ART) | copy into the new kind, flushed; `replace(copy, slot)` | the slot store | 3 |
//! | merge of a node with one child left (delete) | child's header stored with the merged path, flushed (ART+CoW: a copy with it, `replace`d into the node); `free_and_store(slot, child)` | the slot store inside `free_and_store` | 3 (6) |
//!
//! A crash inside a split after the header store and before the parent's
//! slot store leaves the old node reached at a smaller depth than its header
//! says; a crash inside a merge, at a larger one. Both are repaired at open
//! (Algorithm 2), and readers meanwhile use the branch position, which
//! neither changes.

use super::header::Header;
use super::nodes::{self, n16, n4, n48, Entry, Kind, END};
use super::{leaf, Flavor, RadixTree};
use crate::engine::{PutMode, PutOutcome};
use crate::error::{Error, Result};
use crate::pm::{Fault, Reservation};

impl RadixTree {
    /// Reserves and writes a leaf, flushed (not fenced).
    fn new_leaf(&self, key: &[u8], value: &[u8]) -> Result<Reservation> {
        let skip = self.pool.fault(Fault::WortSkipLeafFlush) && self.flavor == Flavor::Wort;
        leaf::write(&self.pool, key, value, skip)
    }

    /// Reserves and writes a fresh node, flushed (not fenced).
    pub(super) fn new_node(
        &self,
        kind: Kind,
        h: &Header,
        end: u64,
        children: &[(u8, u64)],
    ) -> Result<Reservation> {
        let hdr = Header {
            kind: kind as u8,
            ..*h
        };
        let img = nodes::image(kind, hdr.encode(), end, children);
        let r = self.pool.reserve(kind.size())?;
        // SAFETY: the block is reserved by us and not yet published.
        unsafe { self.pool.write_bytes(r.offset(), &img)? };
        if !(self.pool.fault(Fault::ArtCowSkipCopyFlush) && self.flavor == Flavor::ArtCow) {
            self.pool.flush(r.offset(), kind.size());
        }
        Ok(r)
    }

    /// Non-null visible children as (unit, pointer).
    pub(super) fn children(&self, node: u64, kind: Kind) -> Result<Vec<(u8, u64)>> {
        Ok(nodes::entries(&self.pool, node, kind)?
            .into_iter()
            .filter(|e| e.ptr != 0)
            .map(|e| (e.unit, e.ptr))
            .collect())
    }

    pub(super) fn put_impl(
        &mut self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
    ) -> Result<PutOutcome> {
        // An insert that takes two steps (a split or an expansion, then the
        // insert) reserves its leaf before the first, so that running out of
        // space cannot stop it half way; a reservation left over after an
        // error is given back.
        let mut leaf = None;
        let r = self.put_steps(key, value, mode, &mut leaf);
        if let Some(l) = leaf.take() {
            self.pool.cancel(l)?;
        }
        r
    }

    /// The leaf reserved in `leaf`, or a new one.
    fn take_leaf(
        &self,
        leaf: &mut Option<Reservation>,
        key: &[u8],
        value: &[u8],
    ) -> Result<Reservation> {
        match leaf.take() {
            Some(r) => Ok(r),
            None => self.new_leaf(key, value),
        }
    }

    fn put_steps(
        &mut self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
        leaf: &mut Option<Reservation>,
    ) -> Result<PutOutcome> {
        let span = self.span;
        let klen = span.len(key);
        let mut slot = self.root_slot();
        let mut d = 0;
        loop {
            let p = self.pool.load_u64(slot)?;
            if p == 0 {
                if mode == PutMode::Update {
                    return Ok(PutOutcome::Unchanged);
                }
                // Persist order: leaf flushed; activate (commit: slot = leaf).
                let r = self.take_leaf(leaf, key, value)?;
                self.activate(r, slot)?;
                self.count += 1;
                return Ok(PutOutcome::Inserted);
            }
            let w = self.pool.load_u64(p)?;
            let kind = Kind::of(p, w)?;
            if kind == Kind::Leaf {
                let lkey = leaf::key_vec(&self.pool, p)?;
                if lkey == key {
                    if mode == PutMode::Insert {
                        return Ok(PutOutcome::Unchanged);
                    }
                    // Persist order: new leaf flushed; replace (commit:
                    // slot = new leaf; the old leaf is freed with it).
                    let r = self.new_leaf(key, value)?;
                    self.replace(r, slot)?;
                    return Ok(PutOutcome::Replaced);
                }
                if mode == PutMode::Update {
                    return Ok(PutOutcome::Unchanged);
                }
                if leaf.is_none() {
                    *leaf = Some(self.new_leaf(key, value)?);
                }
                self.expand_leaf(slot, p, &lkey, key, d)?;
                continue;
            }
            let h = Header::decode(w);
            let b = h.branch();
            let prefix = self.path_units(p, &h, d)?;
            let mismatch =
                (0..prefix.len()).find(|&i| d + i >= klen || span.unit(key, d + i) != prefix[i]);
            if let Some(i) = mismatch {
                if mode == PutMode::Update {
                    return Ok(PutOutcome::Unchanged);
                }
                if leaf.is_none() {
                    *leaf = Some(self.new_leaf(key, value)?);
                }
                self.split(slot, p, kind, &h, d, i, &prefix)?;
                continue;
            }
            if klen == b {
                slot = p + END;
                continue;
            }
            let u = span.unit(key, b);
            if let Some(s) = nodes::find(&self.pool, p, kind, u)? {
                if self.pool.load_u64(s)? != 0 {
                    slot = s;
                    d = b + 1;
                    continue;
                }
            }
            if mode == PutMode::Update {
                return Ok(PutOutcome::Unchanged);
            }
            self.add_child(slot, p, kind, u, key, value, leaf)?;
            self.count += 1;
            return Ok(PutOutcome::Inserted);
        }
    }

    /// Lazy expansion: the leaf `p` in `slot` (reached at depth `d`) gets a
    /// node above it whose path is the units `key` shares with the leaf's
    /// key. Persist order: node (holding the leaf) flushed; `activate(node,
    /// slot)` (commit). The caller then inserts `key` into the node.
    fn expand_leaf(&self, slot: u64, p: u64, lkey: &[u8], key: &[u8], d: usize) -> Result<()> {
        let span = self.span;
        let b = d + span.common(lkey, key, d);
        let h = Header::new(0, span, d, &span.units(key, d, b));
        let kind = self.flavor.small_kind();
        let r = if span.len(lkey) == b {
            self.new_node(kind, &h, p, &[])?
        } else {
            self.new_node(kind, &h, 0, &[(span.unit(lkey, b), p)])?
        };
        self.activate(r, slot)
    }

    /// Algorithm 1 (SplitCmp): the node `p` in `slot`, reached at depth `d`,
    /// has a path `prefix` that the key leaves at index `i`. A new parent
    /// takes the first `i` units; the node keeps the units after `i`. The
    /// caller then inserts the key into the new parent.
    #[allow(clippy::too_many_arguments)]
    fn split(
        &self,
        slot: u64,
        p: u64,
        kind: Kind,
        h: &Header,
        d: usize,
        i: usize,
        prefix: &[u8],
    ) -> Result<()> {
        let span = self.span;
        let parent_h = Header::new(0, span, d, &prefix[..i]);
        let node_h = Header::new(h.kind, span, d + i + 1, &prefix[i + 1..]);
        let small = self.flavor.small_kind();
        if self.flavor == Flavor::ArtCow {
            // Persist order: copy with the new header flushed, parent
            // (holding the copy) flushed; activate the copy into `pending`;
            // replace
            // into `slot` (commit; frees the old node); pending = 0, fence.
            let end = self.pool.load_u64(p + END)?;
            let ch = self.children(p, kind)?;
            let copy = self.new_node(kind, &node_h, end, &ch)?;
            let copy_off = copy.offset();
            let parent = match self.new_node(small, &parent_h, 0, &[(prefix[i], copy_off)]) {
                Ok(r) => r,
                Err(e) => {
                    self.pool.cancel(copy)?;
                    return Err(e);
                }
            };
            self.activate(copy, self.pending_slot())?;
            self.replace(parent, slot)?;
            return self.clear_pending();
        }
        // Persist order (Algorithm 1): new parent (holding the node) flushed;
        // the node's header stored with one 8-byte store and flushed;
        // activate the parent into `slot`: its first fence makes both
        // durable (lines 8-12), its slot store swaps the old parent's
        // pointer (lines 14-17, the commit).
        let parent = self.new_node(small, &parent_h, 0, &[(prefix[i], p)])?;
        let word = node_h.encode();
        if self.pool.fault(Fault::WortTornHeader) && self.flavor == Flavor::Wort {
            // Injected bug: the header written as two 4-byte halves.
            // SAFETY: only `put` (under `&mut self`, the tree lock held for
            // writing) splits, so no reader or writer can touch the node.
            unsafe {
                self.pool.write_bytes(p + 4, &word.to_le_bytes()[4..])?;
                self.pool.write_bytes(p, &word.to_le_bytes()[..4])?;
            }
        } else {
            self.pool.store_u64(p, word)?;
        }
        self.pool.flush(p, 8);
        self.activate(parent, slot)
    }

    /// Stores null into `pending` and makes it durable (before anything can
    /// free the block it named).
    fn clear_pending(&self) -> Result<()> {
        self.pool.store_u64(self.pending_slot(), 0)?;
        self.pool.persist(self.pending_slot(), 8);
        Ok(())
    }

    /// Adds a leaf for `key` as child `u` of node `p` (in `slot`), which
    /// does not have it; grows the node first if it is full.
    #[allow(clippy::too_many_arguments)]
    fn add_child(
        &self,
        slot: u64,
        mut p: u64,
        mut kind: Kind,
        u: u8,
        key: &[u8],
        value: &[u8],
        leaf: &mut Option<Reservation>,
    ) -> Result<()> {
        loop {
            let full = || -> Result<bool> { Ok(self.children(p, kind)?.len() >= kind.capacity()) };
            match (self.flavor, kind) {
                (_, Kind::W16) | (_, Kind::N256) => {
                    let s = nodes::find(&self.pool, p, kind, u)?.expect("direct slot");
                    let r = self.take_leaf(leaf, key, value)?;
                    return self.activate(r, s);
                }
                (Flavor::ArtCow, Kind::N4 | Kind::N16) => {
                    let r = self.take_leaf(leaf, key, value)?;
                    return self.cow_add(slot, p, kind, u, r);
                }
                (_, Kind::N4 | Kind::N16 | Kind::N48) if !full()? => {
                    let r = self.take_leaf(leaf, key, value)?;
                    return match kind {
                        Kind::N4 => n4::add(
                            &self.pool,
                            p,
                            u,
                            r,
                            self.pool.fault(Fault::WoartNode4CommitFirst),
                        ),
                        Kind::N16 => n16::add(&self.pool, p, u, r),
                        _ => n48::add(&self.pool, p, u, r),
                    };
                }
                (_, Kind::N4 | Kind::N16 | Kind::N48) => {
                    if leaf.is_none() {
                        *leaf = Some(self.new_leaf(key, value)?);
                    }
                    self.resize(slot, p, kind, kind.grown())?;
                    p = self.pool.load_u64(slot)?;
                    kind = nodes::kind(&self.pool, p)?;
                }
                (_, Kind::Leaf) => return Err(Error::corrupt(p, "radix: leaf used as a node")),
            }
        }
    }

    /// ART+CoW insert into NODE4/NODE16 (a full one becomes the next kind).
    /// Persist order: leaf flushed, copy holding the leaf flushed;
    /// `activate(leaf, pending)`; `replace(copy, slot)` (commit; frees the old node);
    /// `pending = 0`, flushed, fenced.
    fn cow_add(&self, slot: u64, p: u64, kind: Kind, u: u8, leaf: Reservation) -> Result<()> {
        let mut ch = self.children(p, kind)?;
        let pos = ch.partition_point(|c| c.0 < u);
        ch.insert(pos, (u, leaf.offset()));
        let new_kind = if ch.len() > kind.capacity() {
            kind.grown()
        } else {
            kind
        };
        let h = Header::decode(self.pool.load_u64(p)?);
        let end = self.pool.load_u64(p + END)?;
        let copy = match self.new_node(new_kind, &h, end, &ch) {
            Ok(r) => r,
            Err(e) => {
                self.pool.cancel(leaf)?;
                return Err(e);
            }
        };
        self.activate(leaf, self.pending_slot())?;
        self.replace(copy, slot)?;
        self.clear_pending()
    }

    /// Copies node `p` (in `slot`) into a node of kind `to` and swaps it in.
    /// Persist order: copy flushed; `replace(copy, slot)` (commit; frees the
    /// old node).
    pub(super) fn resize(&self, slot: u64, p: u64, kind: Kind, to: Kind) -> Result<()> {
        let h = Header::decode(self.pool.load_u64(p)?);
        let end = self.pool.load_u64(p + END)?;
        let ch = self.children(p, kind)?;
        let copy = self.new_node(to, &h, end, &ch)?;
        self.replace(copy, slot)
    }

    pub(super) fn delete_impl(&mut self, key: &[u8]) -> Result<bool> {
        let span = self.span;
        let klen = span.len(key);
        let mut slot = self.root_slot();
        let mut d = 0;
        // (slot of the node, node, kind, child unit or None for `end`, depth)
        let mut parent: Option<(u64, u64, Kind, Option<u8>, usize)> = None;
        loop {
            let p = self.pool.load_u64(slot)?;
            if p == 0 {
                return Ok(false);
            }
            let w = self.pool.load_u64(p)?;
            let kind = Kind::of(p, w)?;
            if kind == Kind::Leaf {
                if leaf::key_vec(&self.pool, p)? != key {
                    return Ok(false);
                }
                break;
            }
            let h = Header::decode(w);
            let b = h.branch();
            if klen < b {
                return Ok(false);
            }
            if klen == b {
                parent = Some((slot, p, kind, None, d));
                slot = p + END;
                continue;
            }
            let u = span.unit(key, b);
            match nodes::find(&self.pool, p, kind, u)? {
                Some(s) if self.pool.load_u64(s)? != 0 => {
                    parent = Some((slot, p, kind, Some(u), d));
                    slot = s;
                    d = b + 1;
                }
                _ => return Ok(false),
            }
        }
        let Some((nslot, n, nkind, pos, nd)) = parent else {
            // The root is the leaf. Persist order: free (commit: root = null).
            self.free(slot)?;
            self.count -= 1;
            return Ok(true);
        };
        match (self.flavor, nkind, pos) {
            // Persist order: free (commit: the slot's null store).
            (_, _, None) | (_, Kind::W16 | Kind::N256, _) => self.free(slot)?,
            // ART+CoW: the entry stays listed with a null pointer (absent)
            // until the copy below drops it.
            (Flavor::ArtCow, Kind::N4 | Kind::N16, _) => self.free(slot)?,
            (_, Kind::N4, Some(u)) => n4::remove(&self.pool, n, u)?,
            (_, Kind::N16, Some(u)) => n16::remove(&self.pool, n, u)?,
            (_, Kind::N48, Some(u)) => n48::remove(&self.pool, n, u)?,
            (_, Kind::Leaf, _) => return Err(Error::corrupt(n, "radix: leaf used as a node")),
        }
        self.count -= 1;
        self.after_remove(nslot, n, nkind, nd)?;
        Ok(true)
    }

    /// After a child of `n` (in `nslot`, reached at depth `nd`) went away:
    /// merge a node left with one child, free one left with none, shrink an
    /// ART node below its kind's threshold, compact an ART+CoW node.
    /// Returns whether it changed anything.
    pub(super) fn after_remove(&self, nslot: u64, n: u64, nkind: Kind, nd: usize) -> Result<bool> {
        let entries: Vec<Entry> = nodes::entries(&self.pool, n, nkind)?;
        let live: Vec<&Entry> = entries.iter().filter(|e| e.ptr != 0).collect();
        let end = self.pool.load_u64(n + END)?;
        let total = live.len() + usize::from(end != 0);
        if total == 0 {
            // Persist order: free (commit: the slot's null store).
            self.free(nslot)?;
            return Ok(true);
        }
        if total == 1 {
            let (q, qslot) = if end != 0 {
                (end, n + END)
            } else {
                (live[0].ptr, live[0].slot)
            };
            let qkind = nodes::kind(&self.pool, q)?;
            if qkind == Kind::Leaf {
                // Persist order: free_and_store (commit: the node's slot
                // holds the leaf; the node is freed with it).
                self.free_and_store(nslot, q)?;
                return Ok(true);
            }
            // Merge paths: the child takes the node's path, its unit and
            // its own path, starting at the node's depth.
            let ch = Header::decode(self.pool.load_u64(q)?);
            let lk = leaf::key_vec(&self.pool, self.any_leaf(q)?)?;
            if self.span.len(&lk) < ch.branch() {
                return Err(Error::corrupt(
                    q,
                    "radix: leaf shorter than its node's path",
                ));
            }
            let merged = Header::new(
                ch.kind,
                self.span,
                nd,
                &self.span.units(&lk, nd, ch.branch()),
            );
            let target = if self.flavor == Flavor::ArtCow {
                // Persist order: copy with the merged header flushed;
                // replace it into the node's slot for the child (frees the
                // child); then unlink the node as below.
                let cend = self.pool.load_u64(q + END)?;
                let cch = self.children(q, qkind)?;
                let copy = self.new_node(qkind, &merged, cend, &cch)?;
                let off = copy.offset();
                self.replace(copy, qslot)?;
                off
            } else {
                // Persist order: the child's header, one 8-byte store,
                // flushed (ordered by free_and_store's first fence).
                self.pool.store_u64(q, merged.encode())?;
                self.pool.flush(q, 8);
                q
            };
            // Commit: the node's slot holds the child; the node is freed.
            self.free_and_store(nslot, target)?;
            return Ok(true);
        }
        if self.flavor != Flavor::Wort {
            if let Some(to) = nkind.shrunk(live.len()) {
                // In a full pool the node keeps its kind (deletes must work
                // there); it shrinks on a later delete.
                return match self.resize(nslot, n, nkind, to) {
                    Err(Error::PoolFull { .. }) => Ok(false),
                    r => r.map(|()| true),
                };
            }
            if live.len() != entries.len() && matches!(nkind, Kind::N4 | Kind::N16) {
                // ART+CoW: drop the deleted entry by copy-on-write.
                self.resize(nslot, n, nkind, nkind)?;
                return Ok(true);
            }
        }
        Ok(false)
    }
}
