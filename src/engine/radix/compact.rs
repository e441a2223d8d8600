//! Compaction of a full heap: blocks moved out of sparse chunks so that
//! those chunks go back to the substrate, for blocks of another class
//! (docs/design.md §11, "A full heap moves blocks to empty chunks").
//!
//! A chunk carves blocks of one class and goes back to the substrate only
//! when none of them is in use. So a pool filled with small leaves, half
//! of them then deleted, keeps every chunk half full: the room is there,
//! but only for blocks of those classes, and a new key whose leaf or nodes
//! need a larger class finds none (0 new keys with 1,000-byte values in a
//! full 8 MiB pool with every other 100-byte key deleted, before this). When a put finds the pool
//! full, [`RadixTree::compact`] chooses the chunks with the fewest blocks
//! in use whose blocks fit in the free blocks of their class's other
//! chunks ([`Chunks::begin_evacuation`]), walks the tree, copies each
//! block it reaches in one of them into a block elsewhere and swings the
//! pointer to it, then gives the emptied chunks back. The caller holds the
//! whole tree (every stripe, or the tree-wide lock), with the versions
//! that optimistic readers check odd, so no reader validates a read that
//! ran across a move.
//!
//! # Persist order (a group of up to [`GROUP`] moves)
//! Each copy written and flushed, in the walk's order; **fence**; each
//! 8-byte pointer store (with the pointer's tags: a leaf's, a WORT node's
//! slot map) and its flush; **fence**; then the old blocks go back to the
//! DRAM free map. One move alone is an update's order: before the store's
//! fence a crash leaves the old block reached and the copy unreachable,
//! hence free; after it, the copy reached and the old block free. In a
//! group every copy is durable before any pointer to it is stored, and no
//! old block is written or handed out before the second fence, so any
//! subset of the group's stores that a crash keeps names whole blocks: a
//! store into a copy (a moved node's child, moved after it) is reached
//! only if the store of the copy's own pointer was kept, and otherwise
//! the old node, untouched, still reaches the old child. The block is in
//! use because the tree reaches it (`chunks.rs`), so nothing else is
//! written. An emptied chunk goes back with the substrate's failure-atomic
//! `free_and_store` (`Chunks::unlink`), as an empty chunk always has. A
//! compaction that moves `n` blocks costs `2 * ceil(n / GROUP)` fences
//! (two a move before 2026-12-03).
//!
//! # A futile compaction
//! A compaction that gives no chunk back (nothing chosen, or no chosen
//! chunk emptied) marks the tree (`RadixTree::futile`, with the heap's
//! count of chunks taken). Until a block is released or a chunk taken,
//! another compaction would choose the same chunks and move the same
//! blocks nowhere, so a put that finds the pool full returns `PoolFull`
//! at once: it neither compacts nor, under striped writers, takes the
//! whole tree to try (which made refused puts wait for one another and
//! sent optimistic readers to the locks: docs/design.md §11, "Moves share
//! their fences; a futile compaction is not run again"). The release clears the mark before the block goes back,
//! so a put that finds it set found the pool full before that release.

use std::sync::atomic::{AtomicU64, Ordering};

use super::chunks::{Block, Chunks};
use super::header;
use super::nodes::{self, Kind, END};
use super::{leaf, RadixTree};
use crate::error::{Error, Result};
use crate::pm::Fault;

/// At most this many bytes of blocks in use are moved by one compaction,
/// so that one put in a large full pool waits for a bounded copy (the walk
/// of the tree it also waits for reads every node and leaf pointer).
pub const MOVE_MAX: u64 = 64 << 20;

/// Compactions that gave a chunk back, and blocks moved, in this process.
static COMPACTIONS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// How many compactions of the radix trees in this process gave back a
/// chunk, and how many blocks they moved (for tests and measurements).
pub fn compactions() -> (u64, u64) {
    (
        COMPACTIONS[0].load(Ordering::Relaxed),
        COMPACTIONS[1].load(Ordering::Relaxed),
    )
}

impl RadixTree {
    /// Makes room in a full heap by moving blocks out of sparse chunks
    /// (see the module doc). The caller holds the whole tree. Returns
    /// whether a chunk went back to the substrate: then a put that failed
    /// with `PoolFull` may fit.
    pub(super) fn compact(&mut self) -> Result<bool> {
        self.compactions_tried += 1;
        self.caches.give_all_back(&self.heap, &self.pool)?;
        let (chosen, to_move) = self.heap.get_mut().begin_evacuation(MOVE_MAX);
        if chosen.is_empty() {
            self.mark_futile();
            return Ok(false);
        }
        // Only empty chunks chosen: nothing to find in the tree.
        let walked = if to_move > 0 {
            let mut moves = Vec::with_capacity(GROUP);
            let walked = self.evacuate(self.root_slot(), 0, &mut moves);
            // The moves of the last group are published (or their copies
            // given back) whatever the walk met.
            walked.and(self.publish_moves(&mut moves))
        } else {
            Ok(())
        };
        let released = self.heap.get_mut().end_evacuation(&self.pool, &chosen);
        walked?;
        let gave_back = released? > 0;
        COMPACTIONS[0].fetch_add(u64::from(gave_back), Ordering::Relaxed);
        if !gave_back {
            self.mark_futile();
        }
        Ok(gave_back)
    }

    /// Records that a compaction gave nothing back (the caller holds the
    /// whole tree).
    pub(super) fn mark_futile(&mut self) {
        let taken = self.heap.get_mut().taken();
        *self.futile.get_mut() = taken + 1;
    }

    /// Whether a compaction now would give nothing back, because the last
    /// one did and the tree has since released no block and taken no
    /// chunk (module doc, "A futile compaction"). Takes the heap's read
    /// lock: not under a shard's lock or the heap's.
    pub(super) fn compaction_futile(&self) -> bool {
        let f = self.futile.load(Ordering::SeqCst);
        f != 0 && f - 1 == self.heap.read().taken()
    }

    /// Moves the block that `slot` (at tree level `level`) points to if
    /// its chunk is being emptied, then does the same below it: below the
    /// copy, whose pointer is stored with its group's (`moves`).
    fn evacuate(&mut self, slot: u64, level: usize, moves: &mut Vec<Move>) -> Result<()> {
        let mut pw = self.pool.load_u64(slot)?;
        let mut p = nodes::block_of(pw);
        if p == 0 {
            return Ok(());
        }
        if level > header::MAX_POS + 1 {
            return Err(Error::corrupt(p, "radix: tree deeper than any key"));
        }
        let word = self.pool.load_u64(p)?;
        let kind = Kind::of(p, word)?;
        if self.heap.get_mut().draining(p) {
            let size = match kind {
                Kind::Leaf => leaf::LeafWord::decode(p, word)?.size(),
                _ => kind.size(),
            };
            if let Some(m) = self.copy_block(slot, pw, size)? {
                pw = m.word;
                p = nodes::block_of(pw);
                moves.push(m);
                if moves.len() == GROUP {
                    self.publish_moves(moves)?;
                }
            }
        }
        if kind == Kind::Leaf {
            return Ok(());
        }
        self.evacuate(p + END, level + 1, moves)?;
        for e in nodes::entries(&self.pool, pw, kind)? {
            if e.ptr != 0 {
                self.evacuate(e.slot, level + 1, moves)?;
            }
        }
        Ok(())
    }

    /// Copies the first `size` bytes of the block `pw` (the pointer word
    /// in `slot`) into a new block, flushed, for [`Self::publish_moves`];
    /// `None` when the heap has no block for it (it stays; its chunk is
    /// not emptied).
    fn copy_block(&mut self, slot: u64, pw: u64, size: u64) -> Result<Option<Move>> {
        let p = nodes::block_of(pw);
        let heap: &mut Chunks = self.heap.get_mut();
        // A block of the old one's size, so that the room counted for the
        // move (`Chunks::begin_evacuation`) is the room it takes (a block
        // that a full heap served from a larger class stays in it).
        let block = heap.block_size(p)?;
        let b = match heap.reserve(&self.pool, block) {
            Ok(b) => b,
            Err(Error::PoolFull { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        // SAFETY: `p` is a block the tree reaches and the caller holds the
        // whole tree, so no writer changes it meanwhile; the bytes are
        // copied out before anything is written.
        let image = unsafe { self.pool.bytes(p, size) }.map(<[u8]>::to_vec);
        let written = image.and_then(|image| {
            // SAFETY: `b` is reserved by us and not yet published.
            unsafe { self.pool.write_bytes(b.offset(), &image) }
        });
        if let Err(e) = written {
            self.heap.get_mut().cancel(&self.pool, b)?;
            return Err(e);
        }
        if !self.pool.fault(Fault::RadixCompactSkipCopyFlush) {
            self.pool.flush(b.offset(), size);
        }
        Ok(Some(Move {
            slot,
            word: b.offset() + (pw - p),
            copy: b,
            old: p,
        }))
    }

    /// Publishes a group of moves (persist order: the module doc): one
    /// **fence** for every copy, each pointer stored and flushed, one
    /// **fence**; then the old blocks go back to the DRAM map. A store
    /// that fails (a damaged pool) ends the group: the copies of the moves
    /// not stored go back instead. Empties `moves`.
    fn publish_moves(&mut self, moves: &mut Vec<Move>) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        if !self.pool.fault(Fault::RadixCompactGroupUnfenced) {
            self.pool.fence();
        }
        let mut stored = 0;
        let mut r = Ok(());
        for m in moves.iter() {
            if let Err(e) = nodes::Commit::slot(m.slot, m.word).store(&self.pool) {
                r = Err(e);
                break;
            }
            stored += 1;
        }
        self.pool.fence();
        let heap: &mut Chunks = self.heap.get_mut();
        for (i, m) in moves.drain(..).enumerate() {
            r = r.and(if i < stored {
                heap.release(&self.pool, m.old)
            } else {
                heap.cancel(&self.pool, m.copy)
            });
        }
        COMPACTIONS[1].fetch_add(stored as u64, Ordering::Relaxed);
        r
    }
}

/// Moves published with one pair of fences ([`RadixTree::publish_moves`]).
const GROUP: usize = 64;

/// A block copied and flushed, its pointer not yet stored.
struct Move {
    /// Where the pointer to the block is.
    slot: u64,
    /// The pointer to the copy (with the old pointer's tags).
    word: u64,
    /// The copy's block.
    copy: Block,
    /// The old block.
    old: u64,
}

/// Compactions one write may run before it gives up with `PoolFull`
/// (each walks the whole tree; one gives back at least a chunk).
const TRIES: usize = 8;

impl RadixTree {
    /// `first`, the result of a write; if that is `PoolFull`, a
    /// compaction and `op` (the same write, or what is left of it) again,
    /// for as long as the write finds the pool full and a compaction gives
    /// a chunk back (at most [`TRIES`] times). The caller holds the whole
    /// tree; a put that failed with `PoolFull` changed nothing.
    pub(super) fn with_compaction<T>(
        &mut self,
        first: Result<T>,
        mut op: impl FnMut(&mut RadixTree) -> Result<T>,
    ) -> Result<T> {
        let mut r = first;
        if !self.compact || !matches!(r, Err(Error::PoolFull { .. })) || self.compaction_futile() {
            return r;
        }
        for _ in 0..TRIES {
            if !matches!(r, Err(Error::PoolFull { .. })) || !self.compact()? {
                break;
            }
            r = op(self);
        }
        r
    }
}

impl RadixTree {
    /// [`Self::put_many_impl`], and after a compaction the items from the
    /// first one not applied on (those before it stand: run again, a key
    /// given twice could end with its earlier value).
    pub(super) fn put_many_compacting(&mut self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut applied = 0;
        let r = self.put_many_impl(items, &mut applied);
        self.with_compaction(r, |t| {
            let mut more = 0;
            let r = t.put_many_impl(&items[applied..], &mut more);
            applied += more;
            r
        })
    }

    /// Whether a put that finds the pool full compacts (`<engine>.compact`).
    pub(super) fn compacts(&self) -> bool {
        self.compact
    }
}
