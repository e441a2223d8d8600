//! Insert, update and delete, with the persist order of each step.
//!
//! Every put writes and flushes its new leaf before the walk (see
//! [`RadixTree::put_impl`]); the table gives each step's PM stores in the
//! order they reach PM, which that does not change.
//!
//! `publish(slot, p)` is: fence; store `p` into `slot` (the commit point);
//! flush; fence. `retract(slot, p)` is the same without the first fence
//! (nothing new to make durable first). Blocks unlinked by a commit are
//! released to the DRAM free map after it (see [`super::chunks`]). In a
//! batch of puts (`put_many`) the fences differ, not the stores: see
//! [`RadixTree::put_many_impl`].
//!
//! | step | stores, in order | commit point | fences |
//! |---|---|---|---|
//! | insert into an empty pointer slot (WORT child, NODE256 child, `end`, root) | leaf written, flushed; `publish(slot, leaf)` | the slot store | 2 |
//! | insert into a WOART NODE4 (Alg. 3) | leaf flushed; fence; `ptr[idx]` stored; the packed word stored; the node's line flushed; fence | the packed word (same line as `ptr[idx]`, stored after it) | 2 |
//! | insert into a WOART NODE16 (Alg. 4) / NODE48 | leaf flushed; key byte (NODE16) and `ptr[i]` stored, flushed; fence; bitmap / index byte stored, flushed, fenced | the bitmap / index byte | 2 |
//! | insert into a full ART node (growth) | leaf flushed; a node of the next kind holding the children and the leaf, flushed; `publish(slot, copy)` | the slot store | 2 |
//! | insert into an ART+CoW NODE4 / NODE16 | leaf flushed; copy holding it (grown if full) flushed; `publish(slot, copy)` | the slot store | 2 |
//! | update (any tree) | new leaf flushed; `publish(slot, new)` | the slot store | 2 |
//! | insert that meets a leaf (lazy expansion) | new leaf and a node holding both leaves flushed; `publish(slot, node)` | the slot store | 2 |
//! | insert that leaves a compressed path (Algorithm 1; WORT, WOART) | new leaf and a new parent holding the node and the leaf flushed; the node's header stored (one 8-byte store), flushed; `publish(slot, parent)` | the slot store | 2 |
//! | the same in ART+CoW | new leaf, a copy of the node with its new header, and a parent holding both, flushed; `publish(slot, parent)` | the slot store | 2 |
//! | delete from a pointer slot (WORT, NODE256, `end`, root) | `retract(slot, null)` | the null store | 1 |
//! | delete from a WOART NODE4 / NODE16 / NODE48 (and an ART+CoW NODE48, or its NODE4 / NODE16 in a full pool) | packed word / bitmap / index byte stored, flushed, fenced; the pointer nulled (not flushed: an orphan pointer is cleared at open) | the commit word | 1 |
//! | delete from an ART+CoW NODE4 / NODE16 | a copy without it (of the smaller kind if it shrinks) flushed; `publish(node's slot, copy)` | the slot store | 2 |
//! | shrink (ART) | copy flushed; `publish(slot, copy)` | the slot store | 2 |
//! | merge of a node left with one leaf | `retract(node's slot, leaf)` | the slot store | 1 |
//! | merge of a node left with one node (WORT, WOART) | the child's header stored with the merged path, flushed; `publish(node's slot, child)` | the slot store | 2 |
//! | the same in ART+CoW | a copy of the child with the merged header flushed; `publish(node's slot, copy)` | the slot store | 2 |
//!
//! A crash inside a split after the header store and before the parent's
//! slot store leaves the old node reached at a smaller depth than its header
//! says; a crash inside a merge, at a larger one. Both are repaired at open
//! (Algorithm 2), and readers meanwhile use the branch position, which
//! neither changes.

use std::sync::atomic::Ordering;

use super::batch::Reach;
use super::chunks::Block;
use super::header::Header;
use super::nodes::{self, n16, n4, n48, Kind, END};
use super::{leaf, whole_tree_refused, Flavor, RadixTree, Scope};
use crate::engine::{PutMode, PutOutcome};
use crate::error::{Error, Result};
use crate::pm::{Fault, CACHE_LINE};

/// Largest node image [`RadixTree::new_node`] builds on the stack (WORT's
/// node, NODE4 and NODE16; NODE48 and NODE256 images are on the heap).
const SMALL_IMAGE: usize = 256;
const _: () = {
    assert!(SMALL_IMAGE as u64 >= nodes::w16::SIZE);
    assert!(SMALL_IMAGE as u64 >= nodes::n4::SIZE);
    assert!(SMALL_IMAGE as u64 >= nodes::n16::SIZE);
};

/// The block size a leaf of `key` and `value` needs.
fn leaf_size(key: &[u8], value: &[u8]) -> u64 {
    leaf::LeafWord {
        key_len: key.len(),
        value_len: value.len(),
    }
    .size()
}

/// Where a key goes in a node that branches at unit position `b`: the `end`
/// slot if it has exactly `b` units, else the child for its unit `b`.
fn place(span: super::Span, key: &[u8], b: usize) -> Option<u8> {
    (span.len(key) > b).then(|| span.unit(key, b))
}

impl RadixTree {
    /// Reserves and writes a leaf, flushed (not fenced).
    fn new_leaf(&self, key: &[u8], value: &[u8]) -> Result<Block> {
        let b = self.reserve(leaf_size(key, value))?;
        self.write_leaf(b, key, value)
    }

    /// Writes and flushes a leaf into the reserved block `b` (not fenced);
    /// gives `b` back if that fails.
    fn write_leaf(&self, b: Block, key: &[u8], value: &[u8]) -> Result<Block> {
        let skip = self.pool.fault(Fault::WortSkipLeafFlush) && self.flavor == Flavor::Wort;
        // SAFETY: the block is reserved by us and not yet published.
        match unsafe { leaf::write(&self.pool, b.offset(), key, value, skip) } {
            Ok(()) => {
                self.flushed_new();
                Ok(b.tagged(self.leaf_tag))
            }
            Err(e) => {
                self.cancel(b)?;
                Err(e)
            }
        }
    }

    /// Reserves and writes a fresh node, flushed (not fenced). `end` and
    /// `children` (in unit order) are its visible pointers.
    pub(super) fn new_node(
        &self,
        kind: Kind,
        h: &Header,
        end: u64,
        children: &[(u8, u64)],
    ) -> Result<Block> {
        let hdr = Header {
            kind: kind as u8,
            ..*h
        };
        // The image is built in DRAM and copied in one write: on the stack
        // for the kinds of a WORT insert and ART's small nodes.
        let size = kind.size() as usize;
        let mut small = [0u8; SMALL_IMAGE];
        let mut large = Vec::new();
        let img = if size <= SMALL_IMAGE {
            &mut small[..size]
        } else {
            large.resize(size, 0);
            &mut large[..]
        };
        // Format 4: a WORT node's slot map, chosen to put its children in
        // the header's line (`w16::map_for`); pointers to it carry it.
        let map = if kind == Kind::W16 && self.leaf_tag != 0 {
            let mut units = [0u8; 16];
            for (u, c) in units.iter_mut().zip(children) {
                *u = c.0;
            }
            nodes::w16::map_for(&units[..children.len().min(16)])
        } else {
            0
        };
        nodes::image(img, kind, hdr.encode(), end, children, map);
        let b = self.reserve(kind.size())?.tagged(map);
        let flush = !(self.pool.fault(Fault::ArtCowSkipCopyFlush) && self.flavor == Flavor::ArtCow);
        if let Err(e) = self.write_image(&b, img, flush) {
            self.cancel(b)?;
            return Err(e);
        }
        Ok(b)
    }

    /// Writes a node image into the reserved block `b` and flushes it when
    /// `flush` (no fence). In a block that was never written
    /// ([`Block::zeroed`]) only the image's lines that hold a non-zero byte
    /// are written and flushed: the others are zero in PM already and stay
    /// zero after any crash, so a new node flushes the lines it uses (a
    /// NODE256 grown from a NODE48 of dense keys: 7 lines of its 33).
    fn write_image(&self, b: &Block, img: &[u8], flush: bool) -> Result<()> {
        let off = b.offset();
        self.flushed_new();
        debug_assert_eq!(off % CACHE_LINE, 0, "blocks start on a line");
        if !b.zeroed() {
            // SAFETY: the block is reserved by us and not yet published.
            unsafe { self.pool.write_bytes(off, img)? };
            if flush {
                self.pool.flush(off, img.len() as u64);
            }
            return Ok(());
        }
        for (i, line) in img.chunks(CACHE_LINE as usize).enumerate() {
            if crate::swar::all_zero(line) {
                continue;
            }
            let at = off + i as u64 * CACHE_LINE;
            // SAFETY: as above; the line lies inside the block.
            unsafe { self.pool.write_bytes(at, line)? };
            if flush {
                self.pool.flush(at, line.len() as u64);
            }
        }
        Ok(())
    }

    /// A new node holding `end` and `children` plus the leaf `leaf` at
    /// `at` (None: in `end`); the kind is `kind`, or the ART kind that fits
    /// when `kind` is an ART kind too small for them.
    fn node_with(
        &self,
        kind: Kind,
        h: &Header,
        mut end: u64,
        mut children: Vec<(u8, u64)>,
        at: Option<u8>,
        leaf: u64,
    ) -> Result<Block> {
        match at {
            None => end = leaf,
            Some(u) => {
                let pos = children.partition_point(|c| c.0 < u);
                children.insert(pos, (u, leaf));
            }
        }
        let kind = if kind != Kind::W16 && children.len() > kind.capacity() {
            Kind::art_for(children.len())
        } else {
            kind
        };
        self.new_node(kind, h, end, &children)
    }

    /// What a copy of `node` holds: its `end` slot and its children (see
    /// [`Self::children`]), with the batch's held commits into it stored
    /// first.
    fn contents(&self, node: u64, kind: Kind) -> Result<(u64, Vec<(u8, u64)>)> {
        self.settle(Reach::Copy(nodes::block_of(node), kind))?;
        Ok((
            self.pool.load_u64(nodes::block_of(node) + END)?,
            self.children(node, kind)?,
        ))
    }

    /// Non-null visible children as (unit, pointer). In a batch of puts,
    /// a copy reads them through [`Self::contents`].
    pub(super) fn children(&self, node: u64, kind: Kind) -> Result<Vec<(u8, u64)>> {
        Ok(nodes::entries(&self.pool, node, kind)?
            .into_iter()
            .filter(|e| e.ptr != 0)
            .map(|e| (e.unit, e.ptr))
            .collect())
    }

    /// Publishes the new block `top` into `slot` (see
    /// [`RadixTree::publish`]) and returns what `slot` held. `inner` are the
    /// other new blocks that only `top` reaches. An error means nothing was
    /// committed: `top` and `inner` are given back.
    fn publish_new(&self, slot: u64, top: Block, inner: &[u64]) -> Result<u64> {
        match self.publish(slot, top.word()) {
            Ok(old) => Ok(old),
            Err(e) => {
                self.cancel(top)?;
                for &b in inner {
                    self.release(b)?;
                }
                Err(e)
            }
        }
    }

    /// [`RadixTree::publish_new`], then releases what `slot` held (after
    /// the commit: [`RadixTree::release_unlinked`]).
    fn publish_block(&self, slot: u64, top: Block, inner: &[u64]) -> Result<()> {
        let old = self.publish_new(slot, top, inner)?;
        if old != 0 {
            self.release_unlinked(old);
        }
        Ok(())
    }

    /// Insert, update or upsert. The new leaf is written and flushed
    /// **before** the walk (see "Leaf first" in docs/design.md §11): its
    /// write-back then runs while the walk waits for its misses, instead of
    /// after them, where the commit's first fence would wait for it. The
    /// leaf is unreachable until a commit publishes it, so a crash at any
    /// point leaves it free, as a leaf written after the walk would be. A
    /// leaf the walk does not use (the key is present for an insert, or
    /// absent for an update) is given back. If it cannot be reserved or
    /// written here, the walk goes on without one and makes it where it is
    /// needed, as before: a full pool still answers "unchanged" where
    /// nothing would be written.
    ///
    /// With [`Scope::Below`] (the caller holds the key's stripe only), a put
    /// that would change the root slot or the root node other than at the
    /// key's own slot changes nothing and returns `Ok(None)`: the caller
    /// runs it again holding the whole tree. With [`Scope::Tree`] it never
    /// returns `None`.
    pub(super) fn put_impl(
        &self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
        scope: Scope,
    ) -> Result<Option<PutOutcome>> {
        // The error, if any, comes again from `take_leaf` where a leaf is
        // needed.
        let mut pre = self.new_leaf(key, value).ok();
        let r = self.put_walk(key, value, mode, &mut pre, scope);
        if let Ok(Some(PutOutcome::Inserted)) = r {
            self.caches.count_add(1);
        }
        let r = self.late_error(r);
        match pre {
            Some(l) => {
                let c = self.cancel(l);
                r.and_then(|o| c.map(|()| o))
            }
            None => r,
        }
    }

    /// Upserts `items` in order with one write-lock hold (the caller's) and
    /// few fences (docs/design.md §11, "Batched puts"):
    ///
    /// 1. the searches of up to [`crate::engine::BATCH`] keys run side by side
    ///    ([`super::search::Search::lookup_many`]), so the walks below find their lines in
    ///    cache; their answers are not used;
    /// 2. every item's leaf is written and flushed, then **one fence**;
    /// 3. each item's walk and commit run as in a single put (the leaf
    ///    first, [`Self::put_walk`]), except that a commit whose
    ///    publication is durable already (nothing new flushed since the last
    ///    fence) is stored and flushed without a fence, and any other commit
    ///    (after a new node, a split's header, a WOART NODE16/NODE48
    ///    pointer in another line) is held back ([`Self::hold`]) instead of
    ///    fencing; a later item that reaches a slot or node a held commit
    ///    changes stores the held commits first ([`Self::settle`]);
    /// 4. the held commits: **one fence**, then their stores and flushes;
    /// 5. **one fence**; then the blocks the commits unlinked go back to the
    ///    DRAM free map ([`Self::release`] defers them meanwhile).
    ///
    /// A commit's store can then become durable before or after another
    /// item's, but every block a store publishes is durable before it, and
    /// no block a commit unlinks is reused before the commit is: so a crash
    /// leaves each key old or with a value the call gave it. A key given
    /// twice is two puts in a row. An error (a full pool) ends the batch
    /// after the items before the failing one, which are fenced and
    /// counted; the failing item and the later ones change nothing. The
    /// exception is a block that a commit unlinked and that cannot be given
    /// back (only in a damaged pool): every item is applied, and that
    /// error is returned at the end.
    ///
    /// `applied` counts the items applied: on an error, `items[..applied]`
    /// stand (a batch retried after a compaction goes on from there).
    pub(super) fn put_many_impl(
        &mut self,
        items: &[(&[u8], &[u8])],
        applied: &mut usize,
    ) -> Result<()> {
        let r = self.put_batches(items, applied);
        self.late_error(r)
    }

    fn put_batches(&mut self, items: &[(&[u8], &[u8])], applied: &mut usize) -> Result<()> {
        for batch in items.chunks(crate::engine::BATCH) {
            let keys: Vec<&[u8]> = batch.iter().map(|(k, _)| *k).collect();
            self.search().lookup_many(&keys, |_, _| {});
            // The blocks from the heap itself, without a lock (the whole
            // tree is held): a locked instruction waits for the write-backs
            // before it, as a fence does, so one per leaf would make the
            // leaves' write-backs run one after another.
            let mut failed = None;
            let mut blocks = Vec::with_capacity(batch.len());
            {
                for (key, value) in batch {
                    match self.reserve_whole(leaf_size(key, value)) {
                        Ok(b) => blocks.push(b),
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
            }
            // The items before a failed reservation have their blocks and
            // go on; after a failed write, the rest go back. (Before,
            // every block went back once any reservation had failed, so a
            // full pool applied none of the batch's items.)
            let mut leaves: Vec<Option<Block>> = Vec::with_capacity(blocks.len());
            let mut write_failed = false;
            // A block that cannot be given back (a damaged DRAM map) does
            // not stop the others from going back; the first error is
            // returned once the batch is done.
            let mut cancelled = Ok(());
            for (i, b) in blocks.into_iter().enumerate() {
                if write_failed {
                    cancelled = cancelled.and(self.cancel(b));
                    continue;
                }
                match self.write_leaf(b, batch[i].0, batch[i].1) {
                    Ok(b) => leaves.push(Some(b)),
                    Err(e) => {
                        failed = Some(e);
                        write_failed = true;
                    }
                }
            }
            self.pool.fence();
            self.batch.unfenced.store(false, Ordering::Relaxed);
            self.batch.on.store(true, Ordering::Relaxed);
            let mut walked = Ok(());
            for (i, (key, value)) in batch.iter().enumerate().take(leaves.len()) {
                let r = self.put_walk(key, value, PutMode::Upsert, &mut leaves[i], Scope::Tree);
                match r {
                    Ok(None) => {
                        walked = Err(whole_tree_refused());
                        break;
                    }
                    Ok(Some(PutOutcome::Inserted)) => {
                        self.caches.count_add(1);
                        *applied += 1;
                    }
                    Ok(_) => *applied += 1,
                    Err(e) => {
                        walked = Err(e);
                        break;
                    }
                }
            }
            // The commits held back, then the batch's last fence.
            if let Err(e) = self.drain_held() {
                walked = walked.and(Err(e));
            }
            self.pool.fence();
            self.batch.on.store(false, Ordering::Relaxed);
            let released = self.release_deferred();
            // Leaves not published (the items after a failure) go back.
            for l in leaves.into_iter().flatten() {
                cancelled = cancelled.and(self.cancel(l));
            }
            walked?;
            // A block a commit unlinked that cannot be given back (damage)
            // does not undo or end anything: the batch's items stand, and
            // the later batches run (as `release_unlinked` outside a batch).
            if let Err(e) = released {
                super::keep_late(e);
            }
            cancelled?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The leaf written ahead (`pre`), or a new one if there is none. The
    /// caller owns the block from here: it publishes or cancels it.
    fn take_leaf(&self, pre: &mut Option<Block>, key: &[u8], value: &[u8]) -> Result<Block> {
        match pre.take() {
            Some(l) => Ok(l),
            None => self.new_leaf(key, value),
        }
    }

    /// [`Self::put_impl`]'s walk; takes the leaf from `pre` where it
    /// publishes one and leaves it there otherwise.
    /// `Ok(None)`: as [`Self::put_impl`] says for [`Scope::Below`].
    fn put_walk(
        &self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
        pre: &mut Option<Block>,
        scope: Scope,
    ) -> Result<Option<PutOutcome>> {
        let span = self.span;
        let klen = span.len(key);
        let root = self.root_slot();
        let mut slot = root;
        let mut d = 0;
        // After a step into an end slot only a leaf is accepted, as in the
        // search (`Search::step`): a damaged end slot that points at a node
        // (its own, say) would otherwise be walked forever.
        let mut at_end = false;
        // In a batch, the commits held back that change a slot before it is
        // loaded, or the node reached, are stored first (`settle`); a child
        // slot is settled where its emptiness is tested, below.
        let mut settled = false;
        loop {
            if !settled {
                self.settle(Reach::Slot(slot))?;
            }
            // The word in the slot (a leaf's may carry its tag), and the
            // block it names.
            let pw = self.pool.load_u64(slot)?;
            let p = nodes::block_of(pw);
            // Whether this step's change would be the root slot's or the
            // root node's: not the key's stripe alone.
            let whole = matches!(scope, Scope::Below { .. }) && slot == root;
            if p == 0 {
                if mode == PutMode::Update {
                    return Ok(Some(PutOutcome::Unchanged));
                }
                if whole {
                    return Ok(None);
                }
                // Persist order: leaf flushed; publish (commit: slot = leaf).
                let l = self.take_leaf(pre, key, value)?;
                self.publish_block(slot, l, &[])?;
                return Ok(Some(PutOutcome::Inserted));
            }
            let w = self.pool.load_u64(p)?;
            let kind = Kind::of(p, w)?;
            if kind == Kind::Leaf {
                let lw = leaf::word(&self.pool, p)?;
                // SAFETY: the caller holds the tree for writing, or the
                // stripe of the key (`Scope::Below`), which owns every leaf
                // it reaches below the root node (a leaf at the root is
                // refused before this in that scope). So no other writer
                // changes or frees the leaf while `lkey` lives, nor does
                // this one: an update releases it after the last use, an
                // expansion keeps it.
                let lkey = unsafe { leaf::key(&self.pool, p, lw)? };
                if lkey == key {
                    if mode == PutMode::Insert {
                        return Ok(Some(PutOutcome::Unchanged));
                    }
                    if whole {
                        return Ok(None);
                    }
                    // Persist order: new leaf flushed; publish (commit:
                    // slot = new leaf); the old leaf is released.
                    let l = self.take_leaf(pre, key, value)?;
                    self.publish_block(slot, l, &[])?;
                    return Ok(Some(PutOutcome::Replaced));
                }
                if mode == PutMode::Update {
                    return Ok(Some(PutOutcome::Unchanged));
                }
                if whole {
                    return Ok(None);
                }
                let l = self.take_leaf(pre, key, value)?;
                self.expand_leaf(slot, pw, lkey, key, l, d)?;
                return Ok(Some(PutOutcome::Inserted));
            }
            if at_end {
                return Err(Error::corrupt(p, "radix: node in an end slot"));
            }
            self.settle(Reach::Node(p, kind))?;
            // As in `lookup_in`: a node at its own depth without a path
            // takes the branch, so the next slot's address does not wait
            // for the header's decoding.
            let b = if Header::plain_at(w, d) {
                d
            } else {
                let h = Header::decode(w);
                let owned;
                let prefix: &[u8] = match scope {
                    // The root's path as the whole tree's holder left it:
                    // reading it from a leaf could read another stripe's.
                    Scope::Below { root_path } if slot == root => {
                        if root_path.len() != h.branch() {
                            return Ok(None);
                        }
                        root_path
                    }
                    _ => {
                        owned = self.path_units(pw, &h, d)?;
                        &owned
                    }
                };
                let mismatch = (0..prefix.len())
                    .find(|&i| d + i >= klen || span.unit(key, d + i) != prefix[i]);
                if let Some(i) = mismatch {
                    if mode == PutMode::Update {
                        return Ok(Some(PutOutcome::Unchanged));
                    }
                    if whole {
                        return Ok(None);
                    }
                    let l = self.take_leaf(pre, key, value)?;
                    self.split(slot, pw, kind, &h, d, i, prefix, key, l)?;
                    return Ok(Some(PutOutcome::Inserted));
                }
                h.branch()
            };
            if klen == b {
                slot = p + END;
                at_end = true;
                settled = false;
                continue;
            }
            let u = span.unit(key, b);
            if let Some(s) = nodes::find(&self.pool, pw, kind, u)? {
                self.settle(Reach::Slot(s))?;
                if self.pool.load_u64(s)? != 0 {
                    slot = s;
                    d = b + 1;
                    settled = true;
                    continue;
                }
            }
            if mode == PutMode::Update {
                return Ok(Some(PutOutcome::Unchanged));
            }
            // A WORT node or a NODE256 takes a child with one store into
            // the child's own slot, which is the key's stripe's; any other
            // root node changes words that other stripes' keys share.
            if whole && !matches!(kind, Kind::W16 | Kind::N256) {
                return Ok(None);
            }
            let l = self.take_leaf(pre, key, value)?;
            self.add_child(slot, pw, kind, u, l)?;
            return Ok(Some(PutOutcome::Inserted));
        }
    }

    /// Lazy expansion: the leaf `p` in `slot` (reached at depth `d`; `p` is
    /// the slot's word, moved as it is) and the
    /// new key's leaf `l` (written and flushed) go under a new node whose
    /// path is the units the two keys share. Persist order: node holding
    /// both flushed; `publish(slot, node)` (commit). `l` is given back if
    /// nothing was committed.
    fn expand_leaf(
        &self,
        slot: u64,
        p: u64,
        lkey: &[u8],
        key: &[u8],
        l: Block,
        d: usize,
    ) -> Result<()> {
        let span = self.span;
        let b = d + span.common(lkey, key, d);
        let h = Header::of_key(0, span, d, key, b);
        // The two leaves, on the stack: in the end slot where a key ends at
        // `b` (one at most: the keys differ), else in unit order. Every
        // kind holds two.
        let mut end = 0;
        let mut children = [(0u8, 0u64); 2];
        let mut n = 0;
        for (k, w) in [(lkey, p), (key, l.word())] {
            match place(span, k, b) {
                None => end = w,
                Some(u) => {
                    children[n] = (u, w);
                    n += 1;
                }
            }
        }
        debug_assert!(
            n == 2 || (n == 1 && end != 0),
            "one key at most ends at the branch"
        );
        if n == 2 && children[0].0 > children[1].0 {
            children.swap(0, 1);
        }
        let kind = self.flavor.small_kind();
        let node = match self.new_node(kind, &h, end, &children[..n]) {
            Ok(n) => n,
            Err(e) => {
                self.cancel(l)?;
                return Err(e);
            }
        };
        // The old leaf moves under the node: nothing to release.
        self.publish_new(slot, node, &[l.offset()])?;
        Ok(())
    }

    /// Algorithm 1 (SplitCmp) with the insert folded in: the node `p` in
    /// `slot`, reached at depth `d`, has a path `prefix` that `key` leaves
    /// at index `i`. A new parent takes the first `i` units and holds the
    /// node (which keeps the units after `i`) and the new leaf `l` (written
    /// and flushed; given back if nothing was committed).
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
        key: &[u8],
        l: Block,
    ) -> Result<()> {
        let span = self.span;
        let parent_h = Header::new(0, span, d, &prefix[..i]);
        let node_h = Header::new(h.kind, span, d + i + 1, &prefix[i + 1..]);
        let small = self.flavor.small_kind();
        let at = place(span, key, d + i);
        if self.flavor == Flavor::ArtCow {
            // Persist order: new leaf, copy of the node with the new header,
            // parent holding both, flushed; publish the parent into `slot`
            // (commit); the old node is released.
            let made = (|| {
                let (end, ch) = self.contents(p, kind)?;
                let copy = self.new_node(kind, &node_h, end, &ch)?;
                match self.node_with(
                    small,
                    &parent_h,
                    0,
                    vec![(prefix[i], copy.word())],
                    at,
                    l.word(),
                ) {
                    Ok(parent) => Ok((copy, parent)),
                    Err(e) => {
                        self.cancel(copy)?;
                        Err(e)
                    }
                }
            })();
            let (copy, parent) = match made {
                Ok(x) => x,
                Err(e) => {
                    self.cancel(l)?;
                    return Err(e);
                }
            };
            return self.publish_block(slot, parent, &[copy.offset(), l.offset()]);
        }
        // Persist order (Algorithm 1): new leaf and new parent (holding the
        // node and the leaf) flushed; the node's header stored with one
        // 8-byte store and flushed; publish the parent into `slot`: its first
        // fence makes all of them durable (lines 8-12), its store swaps the
        // old parent's pointer (lines 14-17, the commit).
        let parent = match self.node_with(small, &parent_h, 0, vec![(prefix[i], p)], at, l.word()) {
            Ok(x) => x,
            Err(e) => {
                self.cancel(l)?;
                return Err(e);
            }
        };
        let word = node_h.encode();
        // The node's block (`p` is its pointer word, moved whole above).
        let p = nodes::block_of(p);
        if self.pool.fault(Fault::WortTornHeader) && self.flavor == Flavor::Wort {
            // Injected bug: the header written as two 4-byte halves.
            // SAFETY: only a writer that holds the node's stripe or the
            // whole tree splits it, so no other writer touches the node;
            // lock-free readers load its words atomically and discard what
            // their version check refutes.
            unsafe {
                self.pool.write_bytes(p + 4, &word.to_le_bytes()[4..])?;
                self.pool.write_bytes(p, &word.to_le_bytes()[..4])?;
            }
        } else {
            self.pool.store_u64(p, word)?;
        }
        self.pool.flush(p, 8);
        self.flushed_new();
        // The node moves under the parent: nothing to release.
        self.publish_new(slot, parent, &[l.offset()])?;
        Ok(())
    }

    /// Adds the leaf `l` (written and flushed) as child `u` of node `p` (in
    /// `slot`), which does not list it; a full node is replaced by a grown
    /// copy holding it. `l` is given back if nothing was committed.
    fn add_child(&self, slot: u64, p: u64, kind: Kind, u: u8, l: Block) -> Result<()> {
        let c = l.word();
        let r = match (self.flavor, kind) {
            // Persist order: leaf flushed; publish (commit: the slot).
            (_, Kind::W16) | (_, Kind::N256) => match nodes::find(&self.pool, p, kind, u) {
                Ok(Some(s)) => self.publish(s, c).map(drop),
                Ok(None) => Err(Error::corrupt(p, "radix: direct node without a slot")),
                Err(e) => Err(e),
            },
            (Flavor::ArtCow, Kind::N4 | Kind::N16) => return self.copy_with(slot, p, kind, u, l),
            (_, Kind::N4 | Kind::N16 | Kind::N48) => match nodes::listed(&self.pool, p, kind) {
                Ok(n) if n >= kind.capacity() => return self.copy_with(slot, p, kind, u, l),
                Ok(_) => {
                    // Persist order: the node's `add` up to its commit
                    // word (see each module), then `commit`.
                    let prepared = match kind {
                        Kind::N4 => n4::add(
                            &self.pool,
                            p,
                            u,
                            c,
                            self.pool.fault(Fault::WoartNode4CommitFirst),
                        ),
                        Kind::N16 => n16::add(
                            &self.pool,
                            p,
                            u,
                            c,
                            self.pool.fault(Fault::WoartNode16BitmapFirst),
                        ),
                        _ => n48::add(&self.pool, p, u, c),
                    };
                    prepared.and_then(|commit| self.commit(commit))
                }
                Err(e) => Err(e),
            },
            (_, Kind::Leaf) => Err(Error::corrupt(p, "radix: leaf used as a node")),
        };
        if r.is_err() {
            self.cancel(l)?;
        }
        r
    }

    /// Replaces node `p` (in `slot`) by a copy that also holds the leaf `l`
    /// as child `u` (of the next kind if `p` is full): ART+CoW's insert into
    /// NODE4/NODE16, and growth. Persist order: leaf and copy flushed;
    /// `publish(slot, copy)` (commit); the old node is released. The leaf is
    /// given back if nothing was committed.
    fn copy_with(&self, slot: u64, p: u64, kind: Kind, u: u8, l: Block) -> Result<()> {
        let built = (|| {
            let h = Header::decode(self.pool.load_u64(nodes::block_of(p))?);
            let (end, ch) = self.contents(p, kind)?;
            self.node_with(kind, &h, end, ch, Some(u), l.word())
        })();
        match built {
            Ok(copy) => self.publish_block(slot, copy, &[l.offset()]),
            Err(e) => {
                self.cancel(l)?;
                Err(e)
            }
        }
    }

    /// Copies node `p` (in `slot`) into a node of kind `to` and swaps it in.
    /// Persist order: copy flushed; `publish(slot, copy)` (commit); the old
    /// node is released.
    pub(super) fn resize(&self, slot: u64, p: u64, kind: Kind, to: Kind) -> Result<()> {
        let h = Header::decode(self.pool.load_u64(nodes::block_of(p))?);
        let (end, ch) = self.contents(p, kind)?;
        let copy = self.new_node(to, &h, end, &ch)?;
        self.publish_block(slot, copy, &[])
    }

    /// Deletes `key`; whether it was there. A block that the delete's
    /// commit unlinked and that cannot be given back (damage) fails the
    /// call after the delete is done and counted.
    ///
    /// With [`Scope::Below`], a delete that would change the root slot or
    /// the root node changes nothing and returns `Ok(None)`, as
    /// [`Self::put_impl`] does.
    pub(super) fn delete_impl(&self, key: &[u8], scope: Scope) -> Result<Option<bool>> {
        let r = self.delete_walk(key, scope);
        self.late_error(r)
    }

    fn delete_walk(&self, key: &[u8], scope: Scope) -> Result<Option<bool>> {
        let span = self.span;
        let klen = span.len(key);
        let root = self.root_slot();
        let mut slot = root;
        let mut d = 0;
        // (slot of the node, node, kind, child unit or None for `end`, depth)
        let mut parent: Option<(u64, u64, Kind, Option<u8>, usize)> = None;
        // As in `put_walk`: only a leaf after a step into an end slot.
        let mut at_end = false;
        loop {
            // The slot's word (moved whole, and a WORT node's map), and the
            // block it names.
            let pw = self.pool.load_u64(slot)?;
            let p = nodes::block_of(pw);
            if p == 0 {
                return Ok(Some(false));
            }
            let w = self.pool.load_u64(p)?;
            let kind = Kind::of(p, w)?;
            if kind == Kind::Leaf {
                if !leaf::holds(&self.pool, p, key)? {
                    return Ok(Some(false));
                }
                break;
            }
            if at_end {
                return Err(Error::corrupt(p, "radix: node in an end slot"));
            }
            let h = Header::decode(w);
            let b = h.branch();
            // A node branches at or below the depth it is reached at (a
            // crashed split leaves its depth stale, never its branch), so
            // `d` grows each step and a cycle (damage) ends here.
            if b < d {
                return Err(Error::corrupt(p, "radix: node branches above its depth"));
            }
            if klen < b {
                return Ok(Some(false));
            }
            if klen == b {
                parent = Some((slot, pw, kind, None, d));
                slot = p + END;
                at_end = true;
                continue;
            }
            let u = span.unit(key, b);
            match nodes::find(&self.pool, pw, kind, u)? {
                Some(s) if self.pool.load_u64(s)? != 0 => {
                    parent = Some((slot, pw, kind, Some(u), d));
                    slot = s;
                    d = b + 1;
                }
                _ => return Ok(Some(false)),
            }
        }
        // A delete at the root slot or in the root node (which may shrink
        // or merge) is not the key's stripe's alone.
        let whole =
            matches!(scope, Scope::Below { .. }) && parent.is_none_or(|(nslot, ..)| nslot == root);
        if whole {
            return Ok(None);
        }
        let Some((nslot, n, nkind, pos, nd)) = parent else {
            // The root is the leaf. Persist order: retract (commit: root =
            // null); the leaf is released.
            let old = self.retract(slot, 0)?;
            // Counted at the commit: a failing release (damage) comes after.
            self.caches.count_add(u64::MAX);
            self.release_unlinked(old);
            return Ok(Some(true));
        };
        let leaf = self.pool.load_u64(slot)?;
        let end = self.pool.load_u64(nodes::block_of(n) + END)?;
        let rest_end = if pos.is_none() { 0 } else { end };
        // The node's other children, counted as far as the choices below
        // need (merge at one left, shrink at the kind's threshold), and
        // listed only where a merge or a copy needs them: a WORT node or a
        // NODE256 is not read whole on every delete.
        let limit = nkind.shrinks_at().max(1);
        let n_rest = nodes::count_other(&self.pool, n, nkind, pos, limit)?;
        let others = n_rest + usize::from(rest_end != 0);
        let copied =
            self.flavor == Flavor::ArtCow && matches!(nkind, Kind::N4 | Kind::N16) && pos.is_some();
        let mut rest: Vec<(u8, u64)> = Vec::new();
        if others <= 1 || copied {
            rest = self.children(n, nkind)?;
            if let Some(u) = pos {
                rest.retain(|c| c.0 != u);
            }
        }
        if others <= 1 {
            // The node would keep one child (or none): it goes, and the
            // child takes its place, in one commit (see `merge`).
            let q = if rest_end != 0 {
                rest_end
            } else {
                rest.first().map_or(0, |c| c.1)
            };
            self.merge(nslot, n, q, nd)?;
            self.caches.count_add(u64::MAX);
            self.release_unlinked(leaf);
            return Ok(Some(true));
        }
        let in_place = self.remove_child(nslot, n, nkind, pos, slot, &rest, rest_end)?;
        self.caches.count_add(u64::MAX);
        self.release_unlinked(leaf);
        if in_place && self.flavor != Flavor::Wort {
            if let Some(to) = nkind.shrunk(n_rest) {
                // Persist order: as `resize`. In a full pool the node keeps
                // its kind (deletes must work there); it shrinks on a later
                // delete.
                match self.resize(nslot, n, nkind, to) {
                    Err(Error::PoolFull { .. }) | Ok(()) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Some(true))
    }

    /// Removes the child in `slot` (unit `pos`, or `end`) from node `n` (in
    /// `nslot`), which keeps at least two children: `rest` and `rest_end`
    /// (`rest` is listed only where ART+CoW copies a NODE4 or NODE16 without
    /// the child, and empty otherwise).
    /// The child's block is released by the caller. Returns whether `n` is
    /// still the node in `nslot` (false: a copy replaced it).
    #[allow(clippy::too_many_arguments)]
    fn remove_child(
        &self,
        nslot: u64,
        n: u64,
        nkind: Kind,
        pos: Option<u8>,
        slot: u64,
        rest: &[(u8, u64)],
        rest_end: u64,
    ) -> Result<bool> {
        let in_place = |u: u8| -> Result<()> {
            // WOART (and ART+CoW's fallback in a full pool): the commit word
            // hides the entry (stored, flushed, fenced); then the pointer is
            // nulled without a flush (an orphan pointer left by a crash is
            // cleared at open).
            let s = match nkind {
                Kind::N4 => n4::remove(&self.pool, n, u)?,
                Kind::N16 => n16::remove(&self.pool, n, u)?,
                _ => n48::remove(&self.pool, n, u)?,
            };
            self.pool.store_u64(s, 0)
        };
        match (self.flavor, nkind, pos) {
            // Persist order: retract (commit: the slot's null store).
            (_, _, None) | (_, Kind::W16 | Kind::N256, _) => {
                self.retract(slot, 0)?;
            }
            (Flavor::ArtCow, Kind::N4 | Kind::N16, Some(u)) => {
                // Persist order: a copy without the entry (of the smaller
                // kind if it shrinks) flushed; publish (commit); the node is
                // released. A full pool removes in place, as WOART does.
                let h = Header::decode(self.pool.load_u64(nodes::block_of(n))?);
                let to = nkind.shrunk(rest.len()).unwrap_or(nkind);
                return match self.new_node(to, &h, rest_end, rest) {
                    Ok(copy) => self.publish_block(nslot, copy, &[]).map(|()| false),
                    Err(Error::PoolFull { .. }) => in_place(u).map(|()| true),
                    Err(e) => Err(e),
                };
            }
            (_, Kind::N4 | Kind::N16 | Kind::N48, Some(u)) => in_place(u)?,
            (_, Kind::Leaf, _) => return Err(Error::corrupt(n, "radix: leaf used as a node")),
        }
        Ok(true)
    }

    /// Node `n` (in `nslot`, reached at depth `nd`) is left with the one
    /// child `q` (or none: `q` = 0, only in a damaged tree): `q` takes its
    /// place, and the node is released.
    ///
    /// Persist order: a leaf (or null): `retract(nslot, q)` (commit). A node:
    /// its header stored with the merged path (the node's path, the unit,
    /// its own path; one 8-byte store), flushed; `publish(nslot, q)` (its
    /// first fence makes the header durable first; commit). ART+CoW instead
    /// publishes a copy of `q` with the merged header and releases `q` too
    /// (in a full pool it merges in place as above).
    fn merge(&self, nslot: u64, n: u64, q: u64, nd: usize) -> Result<()> {
        let qkind = if q == 0 {
            Kind::Leaf
        } else {
            nodes::kind(&self.pool, q)?
        };
        if qkind == Kind::Leaf {
            self.retract(nslot, q)?;
            self.release_unlinked(n);
            return Ok(());
        }
        let qb = nodes::block_of(q);
        let ch = Header::decode(self.pool.load_u64(qb)?);
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
        if self.flavor == Flavor::ArtCow {
            let cend = self.pool.load_u64(qb + END)?;
            let cch = self.children(q, qkind)?;
            match self.new_node(qkind, &merged, cend, &cch) {
                Ok(copy) => {
                    self.publish_new(nslot, copy, &[])?;
                    self.release_unlinked(n);
                    self.release_unlinked(q);
                    return Ok(());
                }
                Err(Error::PoolFull { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        self.pool.store_u64(qb, merged.encode())?;
        self.pool.flush(qb, 8);
        self.publish(nslot, q)?;
        self.release_unlinked(n);
        Ok(())
    }
}
