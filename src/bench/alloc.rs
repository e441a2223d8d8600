//! A counting global allocator, to measure the DRAM an index holds.
//!
//! The benchmark reports DRAM bytes per record as the growth of the live
//! heap between two points (before the pool is created, after the records
//! are loaded). Only an allocator that sees every allocation can tell that,
//! so a program that wants the figure installs [`CountingAlloc`] as its
//! global allocator:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: pmindex::bench::alloc::CountingAlloc = pmindex::bench::alloc::CountingAlloc::new();
//! ```
//!
//! The `pmindex` binary does. A program that does not (a test, another
//! binary using the library) still runs every benchmark: [`dram_in_use`]
//! returns `None` and the reports say the DRAM figure is unavailable.
//! (`tests/bench_dram.rs` installs it and checks the figure.)
//!
//! # What is counted
//! The bytes *requested* (`Layout::size`), not what the system allocator
//! rounds them up to, and only heap allocations: memory mappings (the pool
//! itself, thread stacks) are not counted. The count is one process-wide
//! relaxed atomic, so it costs one uncontended `lock xadd` per allocation in
//! a single thread, somewhat more when several threads allocate at once; the
//! cost is the same for every engine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

/// Net bytes allocated through [`CountingAlloc`], in shards on separate cache
/// lines: one global counter was a shared line that every allocation of
/// every thread wrote, which skewed the thread-scaling figures. A thread
/// always uses the same shard; the sum over shards is the live total (a
/// shard alone may go negative when a block is freed by another thread).
#[repr(align(128))]
struct Shard(AtomicI64);
const SHARDS: usize = 32;
static LIVE: [Shard; SHARDS] = [const { Shard(AtomicI64::new(0)) }; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    // `const` and without a destructor: reading it never allocates.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn shard() -> &'static AtomicI64 {
    let i = SHARD
        .try_with(|c| {
            if c.get() == usize::MAX {
                c.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            c.get()
        })
        .unwrap_or(0);
    &LIVE[i].0
}
/// Set by the first allocation that goes through [`CountingAlloc`].
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes it hands out. Install it with
/// `#[global_allocator]` (see the [module docs](self)).
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAlloc;

impl CountingAlloc {
    /// The allocator (a unit struct; `const` so that it can be a `static`).
    pub const fn new() -> Self {
        CountingAlloc
    }
}

#[inline]
fn grew(bytes: usize) {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    shard().fetch_add(bytes as i64, Ordering::Relaxed);
}

#[inline]
fn shrank(bytes: usize) {
    shard().fetch_sub(bytes as i64, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the arguments it was given,
// so the blocks returned, their alignment and their lifetime are the system
// allocator's; the counting only reads sizes, a `const` thread-local and
// atomics (none of which allocates).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller meets `GlobalAlloc::alloc`'s contract for
        // `layout` (non-zero size), which is `System.alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a block this allocator (that is,
        // `System`) returned, with the layout it was allocated with.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller meets `GlobalAlloc::realloc`'s contract (a
        // block from this allocator, its layout, a valid new size).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // On failure the old block is untouched and still counted.
            grew(new_size);
            shrank(layout.size());
        }
        p
    }
}

/// Heap bytes live now, if [`CountingAlloc`] is the global allocator;
/// `None` if it is not (the figure is then unavailable).
pub fn dram_in_use() -> Option<u64> {
    INSTALLED.load(Ordering::Relaxed).then(|| {
        let total: i64 = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        total.max(0) as u64
    })
}

/// Whether [`CountingAlloc`] is the global allocator of this process.
pub fn is_installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}
