//! Per-thread shards of a radix tree's DRAM state: blocks reserved ahead
//! from the block heap, and the key count.
//!
//! Writers of different stripes run at once ([`super::striped`]). Every
//! put reserved its leaf (and a split or growth its node) under the heap's
//! one mutex, and every insert and delete changed one shared key count; at
//! two threads on 1M sparse keys, about a fifth of the heap's acquisitions
//! found it taken, and two threads inserted at 1.3-1.4x one thread's rate
//! (docs/design.md §11, "Reservations ahead, per thread"). So a thread
//! works through a shard of its own (threads take shards in turn,
//! [`crate::engine::thread_number`]):
//!
//! - **`ready`**: per block class, blocks the thread reserved from the heap
//!   in a group (up to [`refill`] of them under one hold) and hands out one
//!   by one, the last one put there first. A reserved block that is not
//!   published goes back there, as a block that may have been written
//!   ([`Block::kept`]); so does a block the tree unlinked, once the heap
//!   has checked it ([`Caches::release`]), up to twice a group.
//! - **`count`**: keys this shard's threads added minus those they removed
//!   (wrapping); the tree's count is the one counted at open plus every
//!   shard's.
//!
//! A block the tree unlinks is checked against the heap's map (a pointer
//! that is not a block, or a block already free, is an error of the
//! operation that unlinked it) under the heap's *read* lock, so threads
//! check theirs at once; a block the thread does not keep is freed under
//! that same read lock ([`Chunks::free_shared`]: an atomic clear of its
//! bit); only a large block takes the write lock. Under the heap's mutex,
//! every update and delete took it in turn: on 16 cores, 16 threads
//! updated at 0.56-1.11x one thread's rate, 2.5-4.0x with the check under
//! the read lock (docs/design.md §11, "Sixteen threads, and releases
//! under the heap's read lock"); and deleted at 0.48-0.89x while frees
//! still took the write lock, 2.3-4.8x since ("Frees under the heap's
//! read lock").
//! Gathering released blocks and giving them back 32 at a time was
//! tried: a thread that held the heap for 32 releases made the other wait
//! long enough to sleep, and updates at two threads ran at 0.95-2.0x one
//! thread's rate from run to run.
//!
//! Nothing here is in PM. For a crash, a block in a cache is a block the
//! tree does not reach, hence free after it, as a reserved block always
//! was; the heap still hands out a block once, and takes back only what a
//! durable store unlinked. `check` counts the cached blocks as in use and
//! not reached (a cached block that the tree reaches is an error). When
//! the heap is out of space, every shard's blocks go back to it before the
//! pool is called full ([`Caches::reserve`]).
//!
//! Lock order: a shard, then the heap (read or write); never two shards
//! at once.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::chunks::{class_of, Block, Chunks, LARGE, SIZES};
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Shards per tree: threads beyond this many share them.
pub const SHARDS: usize = 16;

/// Blocks of `size` bytes reserved per hold of the heap: 16 of the small
/// ones (leaves, WORT nodes, NODE4 and NODE16), fewer of the large ones,
/// so that a thread keeps at most about 8 KiB of a class aside.
pub const fn refill(size: u64) -> usize {
    let n = 8192 / size;
    (if n < 1 {
        1
    } else if n > 16 {
        16
    } else {
        n
    }) as usize
}

/// Released blocks a thread keeps per class: twice a group
/// ([`Caches::release`]).
const KEEP: [usize; SIZES.len()] = {
    let mut keep = [0; SIZES.len()];
    let mut k = 0;
    while k < SIZES.len() {
        keep[k] = 2 * refill(SIZES[k]);
        k += 1;
    }
    keep
};

/// The reserved blocks of one class, handed out from the end, each as one
/// word ([`Block::ready_word`]).
///
/// A release looks for its block here (a second release of a block kept
/// for this thread). Scanning the list each time, up to twice a group,
/// cost a WORT delete about 240 instructions once the list was full
/// (docs/design.md §11, "Reservations ahead, per thread"), so a 256-bit
/// filter answers most releases first: a bit per hash of the offsets put
/// here. A pop leaves its bit set; a scan that then finds nothing
/// rebuilds the filter from the list.
#[derive(Default)]
struct Ready {
    words: Vec<u64>,
    seen: [u64; 4],
}

/// The filter word and bit of the block at `off` (line-aligned).
fn filter_bit(off: u64) -> (usize, u64) {
    let h = ((off >> 6) ^ (off >> 14)) as usize & 255;
    (h >> 6, 1 << (h & 63))
}

impl Ready {
    fn len(&self) -> usize {
        self.words.len()
    }

    fn push(&mut self, b: &Block) {
        let w = b.ready_word();
        let (i, m) = filter_bit(w);
        self.seen[i] |= m;
        self.words.push(w);
    }

    fn pop(&mut self, class: u8) -> Option<Block> {
        self.words.pop().map(|w| Block::from_ready_word(w, class))
    }

    /// Whether the block at `off` is here.
    fn holds(&mut self, off: u64) -> bool {
        let (i, m) = filter_bit(off);
        if self.seen[i] & m == 0 {
            return false;
        }
        if self.words.iter().any(|&w| w & !1 == off) {
            return true;
        }
        self.seen = [0; 4];
        for &w in &self.words {
            let (i, m) = filter_bit(w);
            self.seen[i] |= m;
        }
        false
    }

    fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().map(|&w| w & !1)
    }

    /// Reverses the list (a group just reserved: lowest offsets out first).
    fn reverse(&mut self) {
        self.words.reverse();
    }
}

#[derive(Default)]
struct Cache {
    /// Reserved blocks by class ([`SIZES`] index).
    ready: Vec<Ready>,
}

impl Cache {
    fn ready_mut(&mut self, class: u8) -> &mut Ready {
        let k = usize::from(class);
        if self.ready.len() <= k {
            self.ready.resize_with(SIZES.len(), Ready::default);
        }
        &mut self.ready[k]
    }

    /// Gives every block back to `heap`; the first error, after trying
    /// all.
    fn give_back(&mut self, heap: &mut Chunks, pool: &Pool) -> Result<()> {
        let mut r = Ok(());
        for (k, ready) in self.ready.iter_mut().enumerate() {
            let class = u8::try_from(k).expect("fewer than 256 classes");
            while let Some(b) = ready.pop(class) {
                r = r.and(heap.cancel(pool, b));
            }
        }
        r
    }

    /// Whether this thread keeps `b`, a block just released and checked
    /// against the heap's map: a small block while its class's list has
    /// fewer than twice a group. An error if the list holds it already.
    fn keeps(&mut self, b: &Block, off: u64) -> Result<bool> {
        if b.class() == LARGE {
            return Ok(false);
        }
        let ready = self.ready_mut(b.class());
        // Still in use in the heap's map while it is kept, so the heap
        // cannot see a second release of it; this thread's cache can (a
        // damaged tree that reaches a block twice; one kept by another
        // thread is found by `check`, and at open).
        if ready.holds(off) {
            return Err(Error::corrupt(off, "radix: release of a free block"));
        }
        Ok(ready.len() < KEEP[usize::from(b.class())])
    }
}

/// One thread's share; a line pair of its own, so that two threads'
/// shards never share a line.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    cache: Mutex<Cache>,
    /// Keys added minus keys removed by this shard's threads (wrapping).
    count: AtomicU64,
}

/// The shards of one tree.
pub struct Caches {
    shards: Box<[Shard]>,
    /// Keys counted at open.
    base: AtomicU64,
    /// The heap carves the sizes between powers of two (format 3 on).
    between: bool,
}

impl Caches {
    pub fn new(between: bool) -> Caches {
        Caches {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            base: AtomicU64::new(0),
            between,
        }
    }

    fn mine(&self) -> &Shard {
        &self.shards[crate::engine::thread_number() % SHARDS]
    }

    /// A block of at least `size` bytes: from this thread's cache, or a
    /// group from `heap` (one hold). If the heap is out of space, every
    /// cache is given back to it first, then it is asked once more, so
    /// that "pool full" means what it says.
    pub fn reserve(&self, heap: &RwLock<Chunks>, pool: &Pool, size: u64) -> Result<Block> {
        let class = class_of(size, self.between);
        let first = if class == LARGE {
            heap.write().reserve(pool, size)
        } else {
            let mut c = self.mine().cache.lock();
            let ready = c.ready_mut(class);
            if let Some(b) = ready.pop(class) {
                return Ok(b);
            }
            let mut h = heap.write();
            let first = h.reserve(pool, size);
            if first.is_ok() {
                for _ in 1..refill(size) {
                    match h.reserve(pool, size) {
                        Ok(b) => ready.push(&b),
                        // A later reservation's failure is the next
                        // caller's, when it meets it.
                        Err(_) => break,
                    }
                }
                // Handed out from the end: lowest offsets first, as the
                // heap would.
                ready.reverse();
            }
            first
        };
        match first {
            Err(Error::PoolFull { .. }) => {
                self.give_all_back(heap, pool)?;
                heap.write().reserve(pool, size)
            }
            r => r,
        }
    }

    /// Takes back a reserved block that will not be published.
    pub fn cancel(&self, heap: &RwLock<Chunks>, pool: &Pool, b: Block) -> Result<()> {
        if b.class() == LARGE {
            return heap.write().cancel(pool, b);
        }
        // It may have been written: the next user must not take its
        // lines for zero (a node's child slots would hold whatever the
        // leaf written there left).
        self.mine()
            .cache
            .lock()
            .ready_mut(b.class())
            .push(&b.kept());
        Ok(())
    }

    /// Takes a block the tree no longer reaches (the store that unlinked it
    /// is durable). The heap checks it under its read lock
    /// ([`Chunks::in_use_at`]) and, while this thread has fewer than twice
    /// a group of its class ready, this thread keeps it reserved for its
    /// next reservation: a block just read is in the CPU's cache, as the
    /// heap's lowest free block was (an update writes its new leaf where
    /// the last one's old leaf was). Otherwise the heap frees it under the
    /// same read lock ([`Chunks::free_shared`]), so threads that delete
    /// free at once; only a large block, whose chunk goes back to the
    /// substrate, takes the write lock ([`Chunks::release`], which checks
    /// it again).
    ///
    /// Between the two locks of a large block nothing can change its
    /// state in the map: the tree no longer reaches it, so only a second
    /// release of it could, which a sound tree never makes (one that a
    /// damaged tree makes from two threads is found by `check`, and at
    /// open).
    pub fn release(&self, heap: &RwLock<Chunks>, pool: &Pool, off: u64) -> Result<()> {
        let mut c = self.mine().cache.lock();
        {
            let h = heap.read();
            let (b, at) = h.in_use_at(off)?;
            if c.keeps(&b, off)? {
                c.ready_mut(b.class()).push(&b);
                return Ok(());
            }
            if b.class() != LARGE {
                return h.free_shared(at, off);
            }
        }
        heap.write().release(pool, off)
    }

    /// Gives every shard's blocks back to `heap` (one shard at a time);
    /// the first error, after trying all.
    pub fn give_all_back(&self, heap: &RwLock<Chunks>, pool: &Pool) -> Result<()> {
        let mut r = Ok(());
        for s in self.shards.iter() {
            let mut c = s.cache.lock();
            r = r.and(c.give_back(&mut heap.write(), pool));
        }
        r
    }

    /// Offsets of every cached block: in use in the heap's map, not
    /// reached by the tree.
    pub fn cached(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let c = s.cache.lock();
            out.extend(c.ready.iter().flat_map(Ready::offsets));
        }
        out
    }

    /// DRAM bytes of the caches.
    pub fn dram_bytes(&self) -> u64 {
        let mut n = std::mem::size_of_val(&*self.shards) as u64;
        for s in self.shards.iter() {
            let c = s.cache.lock();
            let lists = c.ready.iter();
            n += lists
                .map(|r| std::mem::size_of::<Ready>() as u64 + r.words.capacity() as u64 * 8)
                .sum::<u64>();
        }
        n
    }

    /// One key more (`1`) or fewer (`u64::MAX`, that is -1).
    pub fn count_add(&self, n: u64) {
        self.mine().count.fetch_add(n, Ordering::Relaxed);
    }

    /// Keys in the tree: exact when no writer is inside.
    pub fn count(&self) -> u64 {
        let shards = self.shards.iter().map(|s| s.count.load(Ordering::Relaxed));
        shards.fold(self.base.load(Ordering::Relaxed), u64::wrapping_add)
    }

    /// Sets the count (at open, with no writer inside).
    pub fn set_count(&self, n: u64) {
        self.base.store(n, Ordering::Relaxed);
        for s in self.shards.iter() {
            s.count.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(bytes: u64) -> (Pool, RwLock<Chunks>, Caches) {
        let pool = Pool::create_anonymous(bytes, "test", &Default::default()).unwrap();
        let head = pool.root_slot(1).unwrap();
        let heap = Chunks::load(&pool, head, true).unwrap();
        (pool, RwLock::new(heap), Caches::new(true))
    }

    /// A thread takes a group under one hold and hands it out lowest
    /// first; the group's blocks are distinct and in use in the heap.
    #[test]
    fn a_thread_reserves_a_group_and_hands_it_out_in_order() {
        let (pool, heap, c) = fresh(8 << 20);
        let a = c.reserve(&heap, &pool, 40).unwrap();
        assert_eq!(c.cached().len(), refill(64) - 1);
        let mut offs = vec![a.offset()];
        for _ in 1..refill(64) {
            offs.push(c.reserve(&heap, &pool, 64).unwrap().offset());
        }
        assert!(offs.windows(2).all(|w| w[0] < w[1]), "{offs:?}");
        assert!(c.cached().is_empty());
        // The heap has them all in use: its next block is the one after.
        let next = heap.write().reserve(&pool, 64).unwrap();
        assert!(next.offset() > *offs.last().unwrap());
        assert_eq!(refill(3072), 2);
        assert_eq!(refill(32768), 1);
    }

    /// A cancelled block is handed out next, and no longer as never
    /// written: it may hold a leaf written before the cancel, and a node
    /// that took its lines for zero would list that leaf's bytes as
    /// children. (The conformance suite's random runs found this: a scan
    /// met "access past the end of the pool".)
    #[test]
    fn a_cancelled_block_comes_back_first_and_not_as_zeroed() {
        let (pool, heap, c) = fresh(8 << 20);
        let b = c.reserve(&heap, &pool, 64).unwrap();
        assert!(b.zeroed(), "a new pool's first block was never written");
        let off = b.offset();
        c.cancel(&heap, &pool, b).unwrap();
        let again = c.reserve(&heap, &pool, 64).unwrap();
        assert_eq!(again.offset(), off);
        assert!(!again.zeroed());
        assert_eq!(again.word(), off, "no tag kept");
    }

    /// A released block is checked at once (an error for a pointer that
    /// is not a block, or a block already free) and kept ready for this
    /// thread, up to twice a group; the rest go back to the heap.
    #[test]
    fn a_released_block_is_checked_and_kept_for_the_next_reservation() {
        let (pool, heap, c) = fresh(8 << 20);
        let blocks: Vec<u64> = (0..40)
            .map(|_| c.reserve(&heap, &pool, 64).unwrap().offset())
            .collect();
        assert!(c.cached().len() < refill(64));
        c.release(&heap, &pool, blocks[3]).unwrap();
        let again = c.reserve(&heap, &pool, 64).unwrap();
        assert_eq!(again.offset(), blocks[3], "the block just released first");
        assert!(!again.zeroed());
        let e = c.release(&heap, &pool, blocks[4] + 8).unwrap_err();
        assert!(e.to_string().contains("no block"), "{e}");
        // Drain what is ready, then release 40: 32 kept, 8 free in the heap.
        while !c.cached().is_empty() {
            let _ = c.reserve(&heap, &pool, 64).unwrap();
        }
        for &o in &blocks {
            if o != blocks[3] {
                c.release(&heap, &pool, o).unwrap();
            }
        }
        c.release(&heap, &pool, again.offset()).unwrap();
        assert_eq!(c.cached().len(), 2 * refill(64));
        let e = c.release(&heap, &pool, blocks[0]).unwrap_err();
        assert!(e.to_string().contains("free block"), "{e}");
        let from_heap = heap.write().reserve(&pool, 64).unwrap().offset();
        assert!(blocks.contains(&from_heap), "a block past the cap is free");
    }

    /// A release needs only the heap's read lock, whether the thread keeps
    /// its block or the heap frees it: both complete while another thread
    /// holds the heap for reading (as every other releasing thread may),
    /// where a write lock would wait for it. Only a large block, whose
    /// chunk goes back to the substrate, waits for the write lock. (Under
    /// the write lock, a freed release waited: "a freed release waited
    /// for the reader".)
    #[test]
    fn a_release_needs_only_the_heaps_read_lock() {
        use std::sync::mpsc;
        use std::time::Duration;

        let (pool, heap, c) = fresh(8 << 20);
        let cap = 2 * refill(64);
        let blocks: Vec<u64> = (0..cap + 4)
            .map(|_| heap.write().reserve(&pool, 64).unwrap().offset())
            .collect();
        let large = heap.write().reserve(&pool, 40_000).unwrap().offset();
        let quick = Duration::from_secs(10);
        let wait = Duration::from_millis(200);
        // One worker thread, since a thread's releases go to its own
        // shard; it answers with the offset when done.
        let (cmd_tx, cmd_rx) = mpsc::channel::<u64>();
        let (done_tx, done_rx) = mpsc::channel::<u64>();
        std::thread::scope(|s| {
            let (heap, pool, c) = (&heap, &pool, &c);
            s.spawn(move || {
                for off in cmd_rx {
                    c.release(heap, pool, off).unwrap();
                    done_tx.send(off).unwrap();
                }
            });
            let reader = heap.read();
            for &o in &blocks[..cap] {
                cmd_tx.send(o).unwrap();
                let got = done_rx.recv_timeout(quick);
                assert_eq!(got, Ok(o), "a kept release waited for the reader");
            }
            for &o in &blocks[cap..] {
                cmd_tx.send(o).unwrap();
                let got = done_rx.recv_timeout(quick);
                assert_eq!(got, Ok(o), "a freed release waited for the reader");
            }
            cmd_tx.send(large).unwrap();
            assert!(
                done_rx.recv_timeout(wait).is_err(),
                "a large block's release freed its chunk beside a reader"
            );
            drop(reader);
            assert_eq!(done_rx.recv_timeout(quick), Ok(large));
            drop(cmd_tx);
        });
        assert_eq!(c.cached().len(), cap);
        // The four freed are free in the heap: its next four reservations.
        let mut again: Vec<u64> = (0..4)
            .map(|_| heap.write().reserve(&pool, 64).unwrap().offset())
            .collect();
        again.sort_unstable();
        assert_eq!(again, blocks[cap..]);
    }

    /// A release that the heap frees is checked as a kept one is: a second
    /// release of a freed block and a pointer to no block are refused, and
    /// change nothing.
    #[test]
    fn a_freed_release_is_checked_too() {
        let (pool, heap, c) = fresh(8 << 20);
        let cap = 2 * refill(64);
        let blocks: Vec<u64> = (0..cap + 2)
            .map(|_| heap.write().reserve(&pool, 64).unwrap().offset())
            .collect();
        for &o in &blocks[..=cap] {
            c.release(&heap, &pool, o).unwrap();
        }
        assert_eq!(c.cached().len(), cap, "the last one freed");
        let before = heap.read().used_blocks();
        let e = c.release(&heap, &pool, blocks[cap]).unwrap_err();
        assert!(e.to_string().contains("free block"), "{e}");
        let e = c.release(&heap, &pool, blocks[cap + 1] + 8).unwrap_err();
        assert!(e.to_string().contains("no block"), "{e}");
        assert_eq!(heap.read().used_blocks(), before);
        assert_eq!(c.cached().len(), cap);
        c.release(&heap, &pool, blocks[cap + 1]).unwrap();
        assert_ne!(heap.read().used_blocks(), before, "a block in use freed");
    }

    /// A list's filter never hides a block the list holds, through pushes,
    /// pops (which leave their bits set) and the rebuilds that stale bits
    /// bring; and it answers most offsets it does not hold without a scan.
    #[test]
    fn a_ready_list_finds_exactly_the_blocks_it_holds() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut r = Ready::default();
        let mut model: Vec<u64> = Vec::new();
        let (mut absent, mut filtered) = (0, 0);
        for step in 0..20_000 {
            let off = 64 * rng.gen_range(1..4096u64);
            if rng.gen_bool(0.5) && model.len() < 40 && !model.contains(&off) {
                let b = Block::from_ready_word(off | u64::from(step % 3 == 0), 2);
                r.push(&b);
                model.push(off);
            } else if rng.gen_bool(0.3) {
                let b = r.pop(2);
                assert_eq!(b.map(|b| b.offset()), model.pop());
            }
            let probe = if rng.gen_bool(0.5) && !model.is_empty() {
                model[rng.gen_range(0..model.len())]
            } else {
                off
            };
            let (i, m) = filter_bit(probe);
            let unfiltered = r.seen[i] & m != 0;
            let held = model.contains(&probe);
            assert_eq!(r.holds(probe), held, "step {step}: {probe:#x}");
            if !held {
                absent += 1;
                filtered += usize::from(!unfiltered);
            }
        }
        assert_eq!(r.offsets().collect::<Vec<_>>(), model);
        assert!(
            filtered * 2 > absent,
            "{filtered} of {absent} without a scan"
        );
    }

    /// The pool is full only when the heap is, with every thread's cache
    /// given back to it: a block another thread holds ready is used.
    #[test]
    fn pool_full_means_no_thread_holds_a_ready_block() {
        let (pool, heap, c) = fresh(1 << 20);
        std::thread::scope(|s| {
            s.spawn(|| {
                let b = c.reserve(&heap, &pool, 64).unwrap();
                heap.write().cancel(&pool, b).unwrap();
            });
        });
        assert_eq!(c.cached().len(), refill(64) - 1, "the other thread's");
        let mut mine = Vec::new();
        let e = loop {
            match c.reserve(&heap, &pool, 64) {
                Ok(b) => mine.push(b.offset()),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, Error::PoolFull { .. }), "{e}");
        assert!(c.cached().is_empty(), "{:?}", c.cached());
        mine.sort_unstable();
        mine.dedup();
        // Every block of every chunk: the other thread's 15 among them.
        let chunks = heap.write().offsets().count();
        let per_chunk = ((crate::pm::CHUNK_SIZE - super::super::chunks::FIRST) / 64) as usize;
        assert_eq!(mine.len(), chunks * per_chunk);
    }

    #[test]
    fn the_count_adds_every_shard_to_the_base() {
        let (_pool, _heap, c) = fresh(1 << 20);
        c.set_count(10);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..5 {
                        c.count_add(1);
                    }
                    c.count_add(u64::MAX);
                });
            }
        });
        c.count_add(u64::MAX);
        assert_eq!(c.count(), 10 + 3 * 4 - 1);
        c.set_count(3);
        assert_eq!(c.count(), 3);
    }

    /// Random reserve / cancel / release / give-back: a second release of
    /// any block this thread keeps is always refused, and no block is ever
    /// handed out twice.
    #[test]
    fn a_kept_block_is_never_released_twice_or_handed_out_twice() {
        let pool = Pool::create_anonymous(4 << 20, "test", &Default::default()).unwrap();
        let head = pool.root_slot(1).unwrap();
        let heap = RwLock::new(Chunks::load(&pool, head, true).unwrap());
        let c = Caches::new(true);
        let mut live: Vec<u64> = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let sizes = [64u64, 150, 200, 700, 3000];
        for step in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = x % 100;
            if r < 50 || live.is_empty() {
                let b = c
                    .reserve(&heap, &pool, sizes[(x >> 20) as usize % sizes.len()])
                    .unwrap();
                assert!(
                    !c.cached().contains(&b.offset()),
                    "step {step}: handed out and still kept"
                );
                assert!(!live.contains(&b.offset()), "step {step}: handed out twice");
                if (x >> 40).is_multiple_of(4) {
                    c.cancel(&heap, &pool, b).unwrap();
                } else {
                    live.push(b.offset());
                }
            } else if r < 97 {
                let i = (x >> 8) as usize % live.len();
                let b = live.swap_remove(i);
                c.release(&heap, &pool, b).unwrap();
            } else if r < 99 {
                c.give_all_back(&heap, &pool).unwrap();
            }
            // Every kept block: a second release is refused.
            if step % 7 == 0 {
                for o in c.cached() {
                    let e = c.release(&heap, &pool, o).unwrap_err();
                    assert!(e.to_string().contains("free block"), "step {step}: {e}");
                }
            }
        }
    }
}
