//! The PM substrate shared by every engine: the pool file and its mapping,
//! the store / flush / fence API, the crash-consistent allocator, per-thread
//! counters and PM latency emulation.
//!
//! Nothing outside this module issues a flush or a fence or writes PM memory
//! directly: engines call [`Pool`]'s methods, which is what lets the crash
//! simulator observe every store.

mod alloc;
pub mod cases;
pub mod counters;
pub mod faults;
mod file;
pub mod header;
pub mod persist;
mod pool;
pub mod signal;

pub use alloc::{
    ClassUsage, Reservation, Usage, FRONTIER_STEP, MAX_SLAB_BLOCK, MIN_BLOCK, SLAB_CLASSES,
};
pub use counters::{snapshot as counters, this_thread as thread_counters, PmCounters};
pub use faults::Fault;
pub use persist::{lines_spanned, FlushKind, PersistConfig, PmLatency, CACHE_LINE};
pub use pool::{
    MappingMode, PmObserver, Pool, PoolConfig, WordBlock, Words, CHUNK_SIZE, LANE_COUNT,
    MAX_POOL_SIZE, MIN_POOL_SIZE,
};

use crate::error::Result;

impl Pool {
    /// Reserves a block of at least `size` bytes (rounded up to a class:
    /// 64 B .. 32 KiB in powers of two, then whole 64 KiB chunks). The block
    /// is reserved in DRAM only; fill it, `flush` it, then publish it with
    /// [`Pool::activate`]. Fails with [`crate::Error::PoolFull`].
    pub fn reserve(&self, size: u64) -> Result<Reservation> {
        self.heap().reserve(self, size)
    }

    /// Gives back a reservation that will not be activated.
    pub fn cancel(&self, r: Reservation) -> Result<()> {
        self.heap().cancel(self, r)
    }

    /// Makes the reserved block allocated and stores its offset into the
    /// 8-byte persistent `slot`, failure-atomically: after a crash either
    /// both happened or neither. Durable on return. Costs three fences (see
    /// the allocator's persist order); the first also makes the caller's
    /// earlier `flush`es of the block's contents durable, so fill the block
    /// and `flush` it (no fence needed) before activating.
    pub fn activate(&self, r: Reservation, slot: u64) -> Result<()> {
        self.heap().activate(self, r, slot, false)
    }

    /// Like [`Pool::activate`], and frees the block that `slot` held before
    /// (if it was not null), all failure-atomically: for copy-on-write and
    /// node growth.
    pub fn replace(&self, r: Reservation, slot: u64) -> Result<()> {
        self.heap().activate(self, r, slot, true)
    }

    /// Frees the block whose offset `slot` holds and sets `slot` to null,
    /// failure-atomically. Durable on return.
    pub fn free(&self, slot: u64) -> Result<()> {
        self.heap().free(self, slot, 0)
    }

    /// Frees the block whose offset `slot` holds and stores `value` into
    /// `slot`, failure-atomically: for unlinking a block from a persistent
    /// list (`value` is the next element). Durable on return.
    pub fn free_and_store(&self, slot: u64, value: u64) -> Result<()> {
        self.heap().free(self, slot, value)
    }

    /// Usable size of the allocated block at `off`; an error if `off` is not
    /// the start of an allocated block (engines use it to validate pointers).
    pub fn block_size(&self, off: u64) -> Result<u64> {
        self.heap().block_size(off)
    }

    /// Every allocated block as `(offset, size)`, read from the persistent
    /// metadata (for leak checks).
    pub fn allocated_blocks(&self) -> Result<Vec<(u64, u64)>> {
        self.heap().allocated_blocks(self)
    }

    /// Bytes in use per class.
    pub fn usage(&self) -> Usage {
        self.heap().usage()
    }

    /// `(free, heap)` bytes: in whole free chunks, and of the whole heap.
    /// Cheaper than [`Pool::usage`] (which walks every chunk) for a caller
    /// that asks often.
    pub fn free_heap_bytes(&self) -> (u64, u64) {
        let (free, all) = self.heap().free_chunks();
        (free * CHUNK_SIZE, all * CHUNK_SIZE)
    }

    /// For an engine whose open finds its root slot `slot` null, before it
    /// creates the index again: creation crashed before it published its
    /// root, and every engine allocates that root first (activated into
    /// the slot), so no block can be allocated yet. If some are, the root
    /// was lost (damage): an error, rather than a new empty index written
    /// over the old one's blocks, which would orphan them for good.
    pub fn check_unpublished_root(&self, slot: u64, engine: &str) -> crate::Result<()> {
        let used = self.usage().bytes_in_use();
        if used != 0 {
            return Err(crate::Error::corrupt(
                slot,
                format!(
                    "{engine}: root slot 0 is null, but {used} bytes of blocks are allocated: \
                     the index's root was lost"
                ),
            ));
        }
        Ok(())
    }

    /// Checks that every chunk past the heap frontier (never handed out, see
    /// [`Reservation::zeroed`]) is still all zero; [`crate::Error::CheckFailed`]
    /// names the first byte that is not. Reads the whole untouched part of
    /// the heap.
    pub fn check_untouched(&self) -> Result<()> {
        self.heap().check_untouched(self)
    }
}
