//! Leaf frees a thread gathers and hands to each leaf list in groups (the
//! `tight` order only). DRAM only: nothing here is in PM.
//!
//! A delete frees its leaf into the leaf list of the stripe that
//! *inserted* the leaf ([`super::LeafRef`]). With two threads, half of
//! those frees land in the other thread's stripe, so each took a list
//! mutex that the other thread had just written: on the 16-core device,
//! two threads deleting keys that both had inserted ran at 0.70-0.89 of
//! the rate of two threads each deleting its own (docs/design.md §7,
//! "Leaf frees handed over in groups"). So in the `tight` order a thread
//! puts each freed leaf in a shard of its own
//! ([`crate::engine::thread_number`]) and, once [`BATCH`] are there,
//! releases each list's under one hold of its mutex.
//!
//! **Why it is crash-safe.** In the `tight` order a free is DRAM-only
//! ([`ChunkList::release`] clears the leaf's `taken` bit), except that a
//! chunk left empty is recycled (EPRecycle), a failure-atomic allocator
//! step. A leaf comes here only once the cleared commit word that deleted
//! it is durable, the point at which it was released before; it is
//! released later, not earlier, and stays taken meanwhile, so no insert
//! reuses it sooner than before. Recovery never sees this state: it
//! rebuilds every `taken` bit from the commit words, and recycles the
//! chunks left empty. The `paper` order keeps the chunk header (the
//! paper's leaf bits) current at every free, so it releases at once, as
//! Algorithm 5 does.
//!
//! **Only leaves.** A leaf comes from the ART, in DRAM, so its list holds
//! it. A value object's pointer is read from PM: a damaged one must be an
//! error of the delete or update that read it (`a_delete_that_fails_after_
//! its_commit_stands`), so value objects are released at once, under their
//! list's mutex. Values of up to 8 bytes (the bench's) are inline and free
//! nothing.
//!
//! **What a user sees.** Up to [`BATCH`] leaves per thread stay taken
//! after their keys are deleted, so their chunks are recycled later: at
//! the shard's next group, at [`Hart::settle_frees`] (which `check` calls
//! first), or at the next open. An allocation that finds the pool full
//! hands every shard's leaves to their lists and tries again before it
//! reports the pool full ([`Hart::retry_when_full`]). A leaf that its list
//! does not hold (a bug upstream) is an error of the operation that hands
//! its group over, which may be another key's delete, or is kept for
//! `check` when the hand-over was a full pool's.
//!
//! Lock order: an ART, then a shard, then a chunk list; never two shards
//! or two lists at once. A delete hands its group over after it lets go
//! of its ART.

use parking_lot::Mutex;

use super::chunk::ChunkList;
use super::Hart;
use crate::error::{Error, Result};

/// Shards: threads beyond this many share them.
pub const SHARDS: usize = 16;

/// Frees a shard gathers before it hands them over.
pub const BATCH: usize = 32;

/// The leaf list a leaf goes back to: its stripe and size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListId {
    stripe: u8,
    class: u8,
}

/// One shard's frees, on a cache line pair of its own.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    frees: Mutex<Vec<(ListId, u64)>>,
}

/// Every shard's gathered frees.
pub struct Frees {
    shards: Box<[Shard]>,
    /// The first error of a hand-over that no operation returned (one run
    /// for a full pool, whose allocation then succeeded): `check` reports
    /// it.
    late: Mutex<Option<Error>>,
}

impl Default for Frees {
    fn default() -> Self {
        Frees {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            late: Mutex::new(None),
        }
    }
}

impl Frees {
    /// DRAM bytes of the shards.
    pub fn dram_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                (std::mem::size_of::<Shard>()
                    + s.frees.lock().capacity() * std::mem::size_of::<(ListId, u64)>())
                    as u64
            })
            .sum()
    }

    /// How many frees the shards hold now.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.shards.iter().map(|s| s.frees.lock().len()).sum()
    }
}

impl Hart {
    /// The leaf list `id` names.
    fn list(&self, id: ListId) -> &Mutex<ChunkList> {
        self.leaves(id.stripe.into(), id.class.into())
    }

    /// Frees `leaf`, of leaf list `class` of stripe `st`, whose removal is
    /// durable already: at once in the `paper` order, else into this
    /// thread's shard. Returns whether the shard now holds a group: the
    /// caller hands it over ([`Hart::hand_over_mine`]) once it holds no
    /// ART, so that one delete in [`BATCH`] does not release a group (and
    /// recycle the chunks it empties) with its ART locked.
    pub(super) fn free_leaf(&self, st: usize, class: usize, leaf: u64) -> Result<bool> {
        if !self.batch_frees() {
            self.leaves(st, class).lock().release(&self.pool, leaf)?;
            return Ok(false);
        }
        let id = ListId {
            stripe: st as u8,
            class: class as u8,
        };
        let mut frees = self.my_shard().frees.lock();
        frees.push((id, leaf));
        Ok(frees.len() >= BATCH)
    }

    /// This thread's shard.
    fn my_shard(&self) -> &Shard {
        &self.frees.shards[crate::engine::thread_number() % SHARDS]
    }

    /// Hands this thread's shard over if it holds a group (another thread
    /// sharing it may have done so already). The caller holds no ART.
    pub(super) fn hand_over_mine(&self) -> Result<()> {
        let mut frees = self.my_shard().frees.lock();
        if frees.len() < BATCH {
            return Ok(());
        }
        self.hand_over(&mut frees)
    }

    /// Whether frees go through the shards (the `tight` order).
    fn batch_frees(&self) -> bool {
        self.order == super::PersistOrder::Tight
    }

    /// Releases `frees` into their lists, one hold of each list's mutex,
    /// and empties it. Every free is tried; the first error is returned.
    /// (One pass per list rather than a sort: a shard's group names one
    /// or two lists, and sorting 32 frees cost about 1,000 instructions.)
    fn hand_over(&self, frees: &mut Vec<(ListId, u64)>) -> Result<()> {
        if !frees.is_empty() {
            // Leaves freed: a chunk may empty, and its room serve values.
            self.note_room();
        }
        let mut first_err = None;
        while let Some(&(id, _)) = frees.first() {
            let mut list = self.list(id).lock();
            frees.retain(|&(of, leaf)| {
                if of != id {
                    return true;
                }
                if let Err(e) = list.release(&self.pool, leaf) {
                    first_err.get_or_insert(e);
                }
                false
            });
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Hands every shard's frees to their lists: the chunks they empty
    /// are recycled, and the objects can be taken again.
    pub fn settle_frees(&self) -> Result<()> {
        let mut first_err = None;
        for shard in self.frees.shards.iter() {
            if let Err(e) = self.hand_over(&mut shard.frees.lock()) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Runs `alloc`; if it finds the pool full while frees wait in the
    /// shards, hands them over and runs it once more, whether or not a
    /// hand-over failed (that error, of a leaf no list holds, is another
    /// operation's: kept for `check`, [`Hart::take_late_free_error`]). The
    /// caller must hold no shard and no chunk list.
    pub(super) fn retry_when_full<T>(&self, alloc: impl Fn() -> Result<T>) -> Result<T> {
        match alloc() {
            Err(Error::PoolFull { .. }) if self.batch_frees() => {
                self.hand_over_frees();
                alloc()
            }
            r => r,
        }
    }

    /// Hands the frees gathered in the shards to their lists, keeping a
    /// hand-over error for `check` ([`Self::retry_when_full`]). The caller
    /// must hold no shard and no chunk list.
    pub(super) fn hand_over_frees(&self) {
        if let Err(e) = self.settle_frees() {
            self.frees.late.lock().get_or_insert(e);
        }
    }

    /// The first hand-over error that no operation returned, once.
    pub(super) fn take_late_free_error(&self) -> Option<Error> {
        self.frees.late.lock().take()
    }
}
