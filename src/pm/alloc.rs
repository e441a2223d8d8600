//! The crash-consistent allocator: reserve, activate, free (the protocol of
//! nvm_malloc that the DPTree paper assumes, §4.4 "PM allocation").
//!
//! # Heap layout
//! The heap is an array of 64 KiB chunks. Each chunk has an 8-byte
//! *descriptor* and a 128-byte *bitmap* in the metadata area before the heap:
//!
//! | descriptor (u64) | meaning |
//! |---|---|
//! | `0` | free chunk; its bitmap is all zero |
//! | `1 << 56 \| c` | slab of class `c`: blocks of `64 << c` bytes (64 B .. 32 KiB); bit `i` of the bitmap = block `i` allocated |
//! | `2 << 56 \| n` | head of a large block of `n` chunks (`n × 64 KiB` bytes) |
//! | `3 << 56 \| h` | continuation of the large block whose head is chunk `h` |
//!
//! Blocks of a slab class are aligned to their size (at least a cache line).
//!
//! # Lane records (undo log)
//! Each of the 64 lanes is one cache line:
//!
//! | offset | field |
//! |---:|---|
//! | 0 | `hdr`: `kind << 56 \| crc32(kind, bytes 8..48)`; 0 = empty |
//! | 8 | `block`: the block being activated or freed |
//! | 16 | `slot`: the caller's persistent pointer |
//! | 24 | `old`: the value `slot` held before (for `replace`, the block it frees) |
//! | 32 | `chunks`: `block`'s chunk count (low 32 bits; 0 = slab), `old`'s (high 32) |
//! | 40 | `new`: for `free`, what `slot` receives (null, or the next element of a list being unlinked) |
//!
//! # Persist order (activate, replace, free)
//! Under the thread's lane lock:
//! 1. store `block`, `slot`, `old` (the value `slot` holds now), `chunks`,
//!    then `hdr` last; flush the lane line; **fence F1**. `hdr` is in the same
//!    line as the fields and stored after them, so a durable `hdr` implies
//!    durable fields. F1 also makes the caller's earlier flushes of the
//!    block's contents durable.
//! 2. apply: set the block's bit (or write its descriptors), clear the old
//!    block's, store `slot`; flush those lines; **fence F2**.
//! 3. store `hdr = 0`; flush; **fence F3**. This is the commit point: the
//!    operation has happened once `hdr = 0` is durable.
//!
//! The record is an **undo** record: recovery rolls back every operation whose
//! record is still non-empty (restore `slot` to `old`, restore both blocks'
//! bits). Rolling forward instead would be wrong: a record can reach PM by
//! eviction before F1 completes, that is before the block's contents are
//! durable, and replaying it would publish a block with garbage in it (the
//! crash simulator found exactly that). Undo is idempotent (it sets bits,
//! clears bits and stores `slot`). A reserved block lives only in DRAM until
//! F1: a crash before that loses the reservation and leaks nothing. A freed
//! block returns to the DRAM free lists only after F3, so it cannot be handed
//! out while its record could still roll the free back.
//!
//! # Heap frontier: blocks known to be zero
//! A pool is created zeroed (a new file sized by `posix_fallocate`, or
//! anonymous memory), and a chunk that was never handed out still holds
//! those zeros, in PM as in the mapping. The header's `heap_frontier` (format version 2) is a chunk index
//! below which every chunk ever handed out lies: chunks from it on are
//! untouched. A reservation says whether its block is untouched
//! ([`Reservation::zeroed`]): a large block none of whose chunks was
//! handed out before, or a slab block never handed out before in a slab
//! formatted from such a chunk (the slab keeps, in DRAM, the first slot not
//! yet handed out). An engine may then write only the lines of the block
//! that are not zero, and flush only those: the others are zero after any
//! crash.
//!
//! **Persist order.** Before a chunk at or past the frontier is handed out,
//! the frontier is raised past it (by at least [`FRONTIER_STEP`] chunks, so
//! this happens once per MiB of fresh heap): store, flush, **fence**. Only
//! then can anything be written into the chunk, so a chunk past the durable
//! frontier is zero in every crash image. Recovery treats every chunk below
//! the frontier as written (a slab rebuilt at open has no untouched slot),
//! and refuses a pool whose descriptors show a chunk in use past it. A
//! version-1 pool has no frontier: nothing in it counts as untouched, and it
//! stays version 1. `Db::check` reads every chunk not handed out and fails
//! on a byte that is not zero ([`Heap::check_untouched`]).
//!
//! # Recovery
//! [`Heap::recover`] rolls back the unfinished lane records, then reads every descriptor and
//! bitmap, verifies them (unknown tags, bits past a slab's end, broken
//! large-block runs and a non-zero bitmap on a free chunk are
//! [`Error::Corrupt`]) and rebuilds the DRAM free lists. Empty slabs become
//! free chunks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::faults::Fault;
use super::header::{FRONTIER_OFFSET, ROOTS_OFFSET, ROOT_SLOTS};
use super::pool::{Geometry, Pool, BITMAP_BYTES, CHUNK_SIZE, LANE_COUNT, LANE_SIZE};
use crate::error::{Error, Result};

/// Number of slab classes: 64 B, 128 B, ... 32 KiB.
pub const SLAB_CLASSES: usize = 10;
/// Smallest block.
pub const MIN_BLOCK: u64 = 64;
/// Largest slab block; larger requests take whole chunks.
pub const MAX_SLAB_BLOCK: u64 = MIN_BLOCK << (SLAB_CLASSES - 1);

const TAG_SHIFT: u32 = 56;
const TAG_SLAB: u64 = 1;
const TAG_LARGE: u64 = 2;
const TAG_CONT: u64 = 3;
const LOW_MASK: u64 = (1 << 32) - 1;

const KIND_ACTIVATE: u64 = 1;
const KIND_REPLACE: u64 = 2;
const KIND_FREE: u64 = 3;

/// The heap frontier is raised by at least this many chunks (1 MiB) at a
/// time, so that its flush and fence come once per MiB of fresh heap.
pub const FRONTIER_STEP: u32 = 16;

const BITMAP_WORDS: usize = (BITMAP_BYTES / 8) as usize;
const _: () = assert!(CHUNK_SIZE / MIN_BLOCK <= BITMAP_BYTES * 8);
const _: () = assert!(LANE_SIZE == 64);

fn class_size(c: usize) -> u64 {
    MIN_BLOCK << c
}

fn slots_per_chunk(c: usize) -> u64 {
    CHUNK_SIZE / class_size(c)
}

/// A block reserved in DRAM, not yet durable. Give it to [`Pool::activate`]
/// or [`Pool::replace`], or back with [`Pool::cancel`]. Dropping it instead
/// keeps the block out of use until the pool is reopened (no PM leak).
#[must_use = "a reservation must be activated or cancelled"]
#[derive(Debug)]
pub struct Reservation {
    off: u64,
    size: u64,
    chunks: u32,
    zeroed: bool,
}

impl Reservation {
    /// Offset of the block.
    pub fn offset(&self) -> u64 {
        self.off
    }
    /// Usable bytes (the class size, at least what was asked).
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Every byte of the block is zero, in PM and in the mapping, and has not
    /// been written since the pool was created (see the module doc, "Heap
    /// frontier"). A line the caller leaves unwritten stays zero after any
    /// crash, so it need not be written or flushed. `false` promises nothing.
    pub fn zeroed(&self) -> bool {
        self.zeroed
    }
}

/// Bytes in use, per class.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// One entry per slab class.
    pub classes: Vec<ClassUsage>,
    /// Large blocks (whole chunks) in use.
    pub large_blocks: u64,
    /// Bytes of large blocks in use.
    pub large_bytes: u64,
    /// Chunks that are free.
    pub free_chunks: u64,
    /// All heap chunks.
    pub total_chunks: u64,
    /// Bytes of heap.
    pub heap_bytes: u64,
}

/// Use of one slab class.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassUsage {
    /// Block size.
    pub block_size: u64,
    /// Blocks allocated (activated).
    pub blocks: u64,
    /// `blocks × block_size`.
    pub bytes: u64,
    /// Chunks formatted for this class.
    pub chunks: u64,
}

impl Usage {
    /// Total bytes in allocated blocks.
    pub fn bytes_in_use(&self) -> u64 {
        self.classes.iter().map(|c| c.bytes).sum::<u64>() + self.large_bytes
    }
}

#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "one entry per 64 KiB chunk, most of them slabs in a used pool; boxing would add an allocation and an indirection per slab for little saving"
)]
enum Chunk {
    Free,
    Slab {
        class: u8,
        /// Allocated or reserved.
        taken: [u64; BITMAP_WORDS],
        taken_count: u32,
        /// Allocated (activated) only: the DRAM copy of the PM bitmap.
        alloc: [u64; BITMAP_WORDS],
        allocated: u32,
        /// Slots from this one on were never handed out since the slab was
        /// formatted from an untouched chunk (the slot count otherwise).
        zero_from: u32,
    },
    LargeHead {
        n: u32,
        allocated: bool,
    },
    Cont,
}

#[derive(Debug)]
struct State {
    chunks: Vec<Chunk>,
    /// Free runs: start chunk -> length.
    free_runs: BTreeMap<u32, u32>,
    /// Per class, slab chunks that may have a free slot.
    open: Vec<Vec<u32>>,
    /// The durable heap frontier: chunks from this index on are untouched
    /// (the chunk count in a version-1 pool, where it is never raised).
    frontier: u32,
    /// Chunks from this index on have not been handed out: the frontier at
    /// open, then one past the highest chunk handed out (at most `frontier`).
    handed: u32,
    /// The stretch of heap the last raise of the frontier opened, for
    /// [`Heap::reserve`] to map once it has let go of the state lock.
    unmapped: Option<(u64, u64)>,
}

/// The allocator's DRAM state and lane locks; the persistent state is in the pool.
#[derive(Debug)]
pub(crate) struct Heap {
    state: Mutex<State>,
    lanes: Vec<Mutex<()>>,
    geometry: Geometry,
}

fn lane_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static LANE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % LANE_COUNT as usize;
    }
    LANE.with(|l| *l)
}

impl State {
    fn fresh(n: u64) -> State {
        let mut free_runs = BTreeMap::new();
        free_runs.insert(0, n as u32);
        State {
            chunks: vec![Chunk::Free; n as usize],
            free_runs,
            open: vec![Vec::new(); SLAB_CLASSES],
            frontier: 0,
            handed: 0,
            unmapped: None,
        }
    }

    /// First fit: takes `n` contiguous free chunks.
    fn take_run(&mut self, n: u32) -> Option<u32> {
        let (&start, &len) = self.free_runs.iter().find(|(_, &len)| len >= n)?;
        self.free_runs.remove(&start);
        if len > n {
            self.free_runs.insert(start + n, len - n);
        }
        Some(start)
    }

    /// Returns `n` chunks at `start` to the free runs, merging neighbours.
    fn give_run(&mut self, start: u32, n: u32) {
        for i in start..start + n {
            self.chunks[i as usize] = Chunk::Free;
        }
        let mut s = start;
        let mut len = n;
        if let Some((&ps, &pl)) = self.free_runs.range(..start).next_back() {
            if ps + pl == start {
                self.free_runs.remove(&ps);
                s = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free_runs.get(&(start + n)) {
            self.free_runs.remove(&(start + n));
            len += nl;
        }
        self.free_runs.insert(s, len);
    }
}

impl Heap {
    pub(crate) fn empty(g: &Geometry) -> Heap {
        Heap {
            state: Mutex::new(State::fresh(g.chunk_count)),
            lanes: (0..LANE_COUNT).map(|_| Mutex::new(())).collect(),
            geometry: *g,
        }
    }

    fn desc_off(&self, chunk: u32) -> u64 {
        self.geometry.desc_offset + 8 * u64::from(chunk)
    }
    fn bitmap_off(&self, chunk: u32) -> u64 {
        self.geometry.bitmap_offset + BITMAP_BYTES * u64::from(chunk)
    }
    fn chunk_base(&self, chunk: u32) -> u64 {
        self.geometry.heap_offset + CHUNK_SIZE * u64::from(chunk)
    }
    fn lane_off(&self, lane: usize) -> u64 {
        self.geometry.lanes_offset + LANE_SIZE * lane as u64
    }
    fn chunk_of(&self, off: u64) -> Option<u32> {
        let g = &self.geometry;
        if off < g.heap_offset {
            return None;
        }
        let c = (off - g.heap_offset) / CHUNK_SIZE;
        (c < g.chunk_count).then_some(c as u32)
    }

    // ----- recovery ------------------------------------------------------

    /// Rolls back unfinished lane records, verifies the metadata and rebuilds
    /// the DRAM state.
    ///
    /// Nothing is written until everything checks out: the records are rolled
    /// back first on a DRAM copy of the descriptors and bitmaps, which is then
    /// verified; only then are the same roll-backs and the release of empty
    /// slabs written to the pool. A damaged pool is refused unchanged.
    pub(crate) fn recover(&self, pool: &Pool) -> Result<()> {
        let mut records = Vec::new();
        for lane in 0..LANE_COUNT as usize {
            let base = self.lane_off(lane);
            let hdr = pool.load_u64(base)?;
            if hdr == 0 {
                continue;
            }
            let rec = Record::read(pool, base)?;
            if rec.hdr() != hdr {
                return Err(Error::corrupt(
                    base,
                    format!("allocator lane {lane} record checksum mismatch"),
                ));
            }
            check_slot(pool, rec.slot)
                .map_err(|e| Error::corrupt(base, format!("allocator lane {lane}: {e}")))?;
            records.push((base, rec));
        }
        let n = self.geometry.chunk_count as u32;
        let mut image = ImageMeta {
            desc: Vec::with_capacity(n as usize),
            bits: Vec::with_capacity(n as usize),
        };
        for i in 0..n {
            image.desc.push(pool.load_u64(self.desc_off(i))?);
            let mut b = [0u64; BITMAP_WORDS];
            for (w, x) in b.iter_mut().enumerate() {
                *x = pool.load_u64(self.bitmap_off(i) + 8 * w as u64)?;
            }
            image.bits.push(b);
        }
        for (base, rec) in &records {
            self.undo_marks(&mut image, rec).map_err(|e| {
                Error::corrupt(
                    *base,
                    format!("allocator lane record cannot be rolled back: {e}"),
                )
            })?;
        }
        let frontier = if pool.header().version < 2 {
            n
        } else {
            let f = pool.load_u64(FRONTIER_OFFSET)?;
            u32::try_from(f).ok().filter(|&f| f <= n).ok_or_else(|| {
                Error::corrupt(
                    FRONTIER_OFFSET,
                    format!("heap frontier {f} is past the heap's {n} chunks"),
                )
            })?
        };
        let (mut state, empty) = self.build_state(&image)?;
        if let Some(c) = (frontier..n).find(|&c| image.desc[c as usize] != 0) {
            return Err(Error::corrupt(
                self.desc_off(c),
                format!("chunk {c} is in use but lies past the heap frontier (chunk {frontier}), where nothing was ever handed out"),
            ));
        }
        // Each root slot (as the roll-backs leave it) names a block the
        // metadata holds allocated: else the metadata lost an engine's root
        // (damage, such as a zeroed bitmap), and releasing the "empty" slab
        // below would free that root for good.
        for i in 0..ROOT_SLOTS {
            let slot = ROOTS_OFFSET + 8 * i as u64;
            let v = match records.iter().find(|(_, r)| r.slot == slot) {
                Some((_, r)) => r.old,
                None => pool.load_u64(slot)?,
            };
            if v != 0 && !self.allocated_in(&image, v) {
                return Err(Error::corrupt(
                    slot,
                    format!("root slot {i} names {v:#x}, which the allocator's metadata does not hold allocated"),
                ));
            }
        }
        state.frontier = frontier;
        state.handed = frontier;
        // Everything checks out: write.
        for (base, rec) in &records {
            super::cases::record(match rec.kind {
                KIND_ACTIVATE => super::cases::Case::AllocActivateRolledBack,
                KIND_REPLACE => super::cases::Case::AllocReplaceRolledBack,
                _ => super::cases::Case::AllocFreeRolledBack,
            });
            self.undo_marks(&mut PoolMeta { heap: self, pool }, rec)?;
            self.store_slot(pool, rec.slot, rec.old)?;
            pool.fence();
            pool.store_u64(*base, 0)?;
            pool.persist(*base, 8);
        }
        for &c in &empty {
            // An empty slab (left by a crash or by frees): release it. Its
            // bitmap is all zero, so one 8-byte store makes it a free chunk.
            pool.store_u64(self.desc_off(c), 0)?;
            pool.flush(self.desc_off(c), 8);
        }
        if !empty.is_empty() {
            pool.fence();
        }
        *self.state.lock() = state;
        Ok(())
    }

    /// Whether `off` starts a block that the verified image `m` holds
    /// allocated (recovery, before the DRAM state exists).
    fn allocated_in(&self, m: &ImageMeta, off: u64) -> bool {
        let Some(c) = self.chunk_of(off) else {
            return false;
        };
        let d = m.desc[c as usize];
        let rel = off - self.chunk_base(c);
        match d >> TAG_SHIFT {
            TAG_SLAB => {
                let size = class_size((d & LOW_MASK) as usize);
                let b = rel / size;
                rel.is_multiple_of(size)
                    && m.bits[c as usize]
                        .get((b / 64) as usize)
                        .is_some_and(|w| w & (1 << (b % 64)) != 0)
            }
            TAG_LARGE => rel == 0,
            _ => false,
        }
    }

    /// Verifies descriptors and bitmaps and builds the DRAM state from them.
    /// Also returns the empty slabs, which the state already counts as free.
    fn build_state(&self, m: &ImageMeta) -> Result<(State, Vec<u32>)> {
        let n = self.geometry.chunk_count as u32;
        let mut st = State {
            chunks: vec![Chunk::Free; n as usize],
            free_runs: BTreeMap::new(),
            open: vec![Vec::new(); SLAB_CLASSES],
            frontier: n,
            handed: n,
            unmapped: None,
        };
        let mut empty = Vec::new();
        let mut free_start: Option<u32> = None;
        let mut i = 0u32;
        while i < n {
            let d = m.desc[i as usize];
            let bits = &m.bits[i as usize];
            let tag = d >> TAG_SHIFT;
            let low = d & LOW_MASK;
            let bad = |why: String| Err(Error::corrupt(self.desc_off(i), why));
            let bad_bits = |why: String| Err(Error::corrupt(self.bitmap_off(i), why));
            if d != 0 && (d >> 32) & ((1 << 24) - 1) != 0 {
                return bad(format!(
                    "chunk {i}: descriptor {d:#x} has reserved bits set"
                ));
            }
            let step;
            match (d, tag) {
                (0, _) => {
                    if bits.iter().any(|&b| b != 0) {
                        return bad_bits(format!("chunk {i} is free but its bitmap is not empty"));
                    }
                    step = 1;
                }
                (_, TAG_SLAB) => {
                    if low as usize >= SLAB_CLASSES {
                        return bad(format!("chunk {i}: slab class {low} does not exist"));
                    }
                    let c = low as usize;
                    let slots = slots_per_chunk(c) as usize;
                    for (w, &b) in bits.iter().enumerate() {
                        let valid = if (w + 1) * 64 <= slots {
                            u64::MAX
                        } else if w * 64 >= slots {
                            0
                        } else {
                            (1u64 << (slots - w * 64)) - 1
                        };
                        if b & !valid != 0 {
                            return bad_bits(format!(
                                "chunk {i}: bitmap marks blocks past the end of a {}-byte slab",
                                class_size(c)
                            ));
                        }
                    }
                    let count: u32 = bits.iter().map(|b| b.count_ones()).sum();
                    if count == 0 {
                        empty.push(i);
                    } else {
                        st.chunks[i as usize] = Chunk::Slab {
                            class: c as u8,
                            taken: *bits,
                            taken_count: count,
                            alloc: *bits,
                            allocated: count,
                            zero_from: slots as u32,
                        };
                        if (count as usize) < slots {
                            st.open[c].push(i);
                        }
                    }
                    step = 1;
                }
                (_, TAG_LARGE) => {
                    let len = low as u32;
                    if len == 0 || u64::from(i) + u64::from(len) > u64::from(n) {
                        return bad(format!(
                            "chunk {i}: large block of {len} chunks overruns the heap"
                        ));
                    }
                    for j in i..i + len {
                        if m.bits[j as usize].iter().any(|&b| b != 0) {
                            return Err(Error::corrupt(
                                self.bitmap_off(j),
                                format!(
                                    "chunk {j}: part of a large block but its bitmap is not empty"
                                ),
                            ));
                        }
                    }
                    for j in i + 1..i + len {
                        let dj = m.desc[j as usize];
                        if dj != (TAG_CONT << TAG_SHIFT) | u64::from(i) {
                            return Err(Error::corrupt(
                                self.desc_off(j),
                                format!("chunk {j}: expected continuation of the large block at chunk {i}, found {dj:#x}"),
                            ));
                        }
                    }
                    st.chunks[i as usize] = Chunk::LargeHead {
                        n: len,
                        allocated: true,
                    };
                    for j in i + 1..i + len {
                        st.chunks[j as usize] = Chunk::Cont;
                    }
                    step = len;
                }
                (_, TAG_CONT) => {
                    return bad(format!(
                        "chunk {i}: continuation descriptor without its head"
                    ));
                }
                _ => return bad(format!("chunk {i}: unknown descriptor {d:#x}")),
            }
            let is_free = matches!(st.chunks[i as usize], Chunk::Free);
            match (is_free, free_start) {
                (true, None) => free_start = Some(i),
                (false, Some(s)) => {
                    st.free_runs.insert(s, i - s);
                    free_start = None;
                }
                _ => {}
            }
            i += step;
        }
        if let Some(s) = free_start {
            st.free_runs.insert(s, n - s);
        }
        Ok((st, empty))
    }

    /// Applies a record's effects (idempotent). Does not fence.
    fn apply(&self, pool: &Pool, rec: &Record) -> Result<()> {
        let mut meta = PoolMeta { heap: self, pool };
        match rec.kind {
            KIND_ACTIVATE => self.mark(&mut meta, rec.block, rec.block_chunks, true)?,
            KIND_REPLACE => {
                self.mark(&mut meta, rec.block, rec.block_chunks, true)?;
                if rec.old != 0 {
                    self.mark(&mut meta, rec.old, rec.old_chunks, false)?;
                }
            }
            KIND_FREE => self.mark(&mut meta, rec.block, rec.block_chunks, false)?,
            k => {
                return Err(Error::corrupt(
                    0,
                    format!("unknown allocator record kind {k}"),
                ))
            }
        }
        let value = if rec.kind == KIND_FREE {
            rec.new
        } else {
            rec.block
        };
        self.store_slot(pool, rec.slot, value)
    }

    /// Rolls back a record's effects on the metadata (idempotent); the caller
    /// restores the slot to `rec.old`. Does not fence.
    fn undo_marks<M: Meta>(&self, meta: &mut M, rec: &Record) -> Result<()> {
        match rec.kind {
            KIND_ACTIVATE => self.mark(meta, rec.block, rec.block_chunks, false),
            KIND_REPLACE => {
                self.mark(meta, rec.block, rec.block_chunks, false)?;
                if rec.old != 0 {
                    self.mark(meta, rec.old, rec.old_chunks, true)?;
                }
                Ok(())
            }
            KIND_FREE => self.mark(meta, rec.block, rec.block_chunks, true),
            k => Err(Error::corrupt(
                0,
                format!("unknown allocator record kind {k}"),
            )),
        }
    }

    fn store_slot(&self, pool: &Pool, slot: u64, value: u64) -> Result<()> {
        pool.store_u64(slot, value)?;
        pool.flush(slot, 8);
        Ok(())
    }

    /// Sets (or clears) the persistent allocated state of a block.
    fn mark<M: Meta>(&self, meta: &mut M, off: u64, chunks: u32, allocated: bool) -> Result<()> {
        let c = self
            .chunk_of(off)
            .ok_or_else(|| Error::corrupt(off, "block offset outside the heap"))?;
        if chunks == 0 {
            let d = meta.desc(c)?;
            if d >> TAG_SHIFT != TAG_SLAB || (d & LOW_MASK) as usize >= SLAB_CLASSES {
                return Err(Error::corrupt(
                    off,
                    format!("block is not in a slab chunk (descriptor {d:#x})"),
                ));
            }
            let size = class_size((d & LOW_MASK) as usize);
            let rel = off - self.chunk_base(c);
            if !rel.is_multiple_of(size) {
                return Err(Error::corrupt(
                    off,
                    "block offset is not aligned to its slab class",
                ));
            }
            meta.set_bit(c, rel / size, allocated)
        } else {
            if off != self.chunk_base(c)
                || u64::from(c) + u64::from(chunks) > self.geometry.chunk_count
            {
                return Err(Error::corrupt(off, "large block is not a valid chunk run"));
            }
            let (head, cont) = if allocated {
                (
                    (TAG_LARGE << TAG_SHIFT) | u64::from(chunks),
                    (TAG_CONT << TAG_SHIFT) | u64::from(c),
                )
            } else {
                (0, 0)
            };
            for j in c + 1..c + chunks {
                meta.set_desc(j, cont)?;
            }
            meta.set_desc(c, head)?;
            meta.flush_descs(c, chunks);
            Ok(())
        }
    }

    /// Releases every slab with no allocated or reserved block (when the
    /// pool looks full, so that its chunks can serve other classes).
    fn release_empty_slabs(&self, pool: &Pool, st: &mut State) -> Result<bool> {
        let empty: Vec<u32> = st
            .chunks
            .iter()
            .enumerate()
            .filter(|(_, ch)| matches!(ch, Chunk::Slab { taken_count: 0, .. }))
            .map(|(i, _)| i as u32)
            .collect();
        for &c in &empty {
            pool.store_u64(self.desc_off(c), 0)?;
            pool.flush(self.desc_off(c), 8);
        }
        if empty.is_empty() {
            return Ok(false);
        }
        pool.fence();
        for &c in &empty {
            for open in &mut st.open {
                open.retain(|&i| i != c);
            }
            st.give_run(c, 1);
        }
        Ok(true)
    }

    // ----- reserve -------------------------------------------------------

    /// Takes a block of at least `size` bytes (see [`Heap::reserve_in`]).
    /// When that opened fresh heap, its pages are mapped after the state
    /// lock is let go (`Pool::prefault`: populating writes nothing, so a
    /// thread already writing there is not disturbed), so that other
    /// threads' reservations do not wait for it.
    pub(crate) fn reserve(&self, pool: &Pool, size: u64) -> Result<Reservation> {
        let mut st = self.state.lock();
        let r = self.reserve_in(pool, &mut st, size);
        let unmapped = st.unmapped.take();
        drop(st);
        if let Some((off, len)) = unmapped {
            pool.prefault(off, len);
        }
        r
    }

    /// [`Heap::reserve`] under the state lock.
    fn reserve_in(&self, pool: &Pool, st: &mut State, size: u64) -> Result<Reservation> {
        if size == 0 {
            return Err(Error::InvalidArgument("cannot reserve 0 bytes".into()));
        }
        if size > MAX_SLAB_BLOCK {
            let n64 = size.div_ceil(CHUNK_SIZE);
            let n = u32::try_from(n64).map_err(|_| Error::PoolFull { requested: size })?;
            let start = match st.take_run(n) {
                Some(start) => start,
                None if self.release_empty_slabs(pool, st)? => {
                    st.take_run(n).ok_or(Error::PoolFull { requested: size })?
                }
                None => return Err(Error::PoolFull { requested: size }),
            };
            let zeroed = match self.claim(pool, st, start, n) {
                Ok(z) => z,
                Err(e) => {
                    st.give_run(start, n);
                    return Err(e);
                }
            };
            st.chunks[start as usize] = Chunk::LargeHead {
                n,
                allocated: false,
            };
            for j in start + 1..start + n {
                st.chunks[j as usize] = Chunk::Cont;
            }
            return Ok(Reservation {
                off: self.chunk_base(start),
                size: n64 * CHUNK_SIZE,
                chunks: n,
                zeroed,
            });
        }
        let c = (size.max(MIN_BLOCK).next_power_of_two().trailing_zeros()
            - MIN_BLOCK.trailing_zeros()) as usize;
        let slots = slots_per_chunk(c) as u32;
        // Find an open slab of the class, dropping full ones from the list.
        let chunk = loop {
            match st.open[c].last().copied() {
                Some(i) => match &st.chunks[i as usize] {
                    Chunk::Slab {
                        taken_count, class, ..
                    } if *class as usize == c && *taken_count < slots => break i,
                    _ => {
                        st.open[c].pop();
                    }
                },
                None => {
                    let i = match st.take_run(1) {
                        Some(i) => i,
                        None if self.release_empty_slabs(pool, st)? => {
                            st.take_run(1).ok_or(Error::PoolFull { requested: size })?
                        }
                        None => return Err(Error::PoolFull { requested: size }),
                    };
                    // Format the chunk: its bitmap is zero (free-chunk
                    // invariant); the descriptor is one 8-byte store, made
                    // durable before any block in it can be activated, and
                    // after the frontier is past the chunk.
                    let untouched = match self.claim(pool, st, i, 1).and_then(|z| {
                        pool.store_u64(self.desc_off(i), (TAG_SLAB << TAG_SHIFT) | c as u64)?;
                        Ok(z)
                    }) {
                        Ok(z) => z,
                        Err(e) => {
                            st.give_run(i, 1);
                            return Err(e);
                        }
                    };
                    pool.persist(self.desc_off(i), 8);
                    st.chunks[i as usize] = Chunk::Slab {
                        class: c as u8,
                        taken: [0; BITMAP_WORDS],
                        taken_count: 0,
                        alloc: [0; BITMAP_WORDS],
                        allocated: 0,
                        zero_from: if untouched { 0 } else { slots },
                    };
                    st.open[c].push(i);
                    break i;
                }
            }
        };
        let Chunk::Slab {
            taken,
            taken_count,
            zero_from,
            ..
        } = &mut st.chunks[chunk as usize]
        else {
            unreachable!("chosen chunk is a slab of the class");
        };
        let (w, word) = taken
            .iter()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)
            .expect("slab with taken_count < slots has a clear bit");
        let slot = w as u32 * 64 + (!word).trailing_zeros();
        debug_assert!(slot < slots);
        taken[w] |= 1 << (slot % 64);
        *taken_count += 1;
        let zeroed = slot >= *zero_from;
        if zeroed {
            *zero_from = slot + 1;
        }
        Ok(Reservation {
            off: self.chunk_base(chunk) + u64::from(slot) * class_size(c),
            size: class_size(c),
            chunks: 0,
            zeroed,
        })
    }

    /// Before chunks `start..start + n` (just taken from the free runs) are
    /// handed out: whether all of them are untouched, and, when the run
    /// reaches the frontier, the frontier raised past it. Persist order:
    /// store the new frontier, flush, **fence**, so that it is durable before
    /// anything can be written into the chunks (see the module doc).
    fn claim(&self, pool: &Pool, st: &mut State, start: u32, n: u32) -> Result<bool> {
        let untouched = start >= st.handed;
        let end = start + n;
        if end > st.frontier {
            let count = self.geometry.chunk_count as u32;
            let new = end.max(st.frontier.saturating_add(FRONTIER_STEP).min(count));
            pool.store_u64(FRONTIER_OFFSET, u64::from(new))?;
            if !pool.fault(Fault::AllocFrontierUnflushed) {
                pool.persist(FRONTIER_OFFSET, 8);
            }
            // The pages of the stretch just opened are mapped in one call
            // (by `reserve`, after the lock) rather than by a fault at each
            // one's first store.
            let (from, to) = (self.chunk_base(st.frontier), self.chunk_base(new));
            st.unmapped = Some((from, to - from));
            st.frontier = new;
        }
        st.handed = st.handed.max(end);
        Ok(untouched)
    }

    /// `Db::check`'s test of the frontier: every byte of every chunk not yet
    /// handed out (those past the frontier, and those below it not handed
    /// out since it was raised) is zero. Each chunk is read under the state
    /// lock, taken per chunk, so nothing can hand it out meanwhile and
    /// reservations wait for one chunk's scan at most. Reads all of the
    /// untouched heap (on a file pool, through the page cache).
    pub(crate) fn check_untouched(&self, pool: &Pool) -> Result<()> {
        let n = self.geometry.chunk_count as u32;
        let mut c = 0;
        loop {
            let st = self.state.lock();
            c = c.max(st.handed);
            if c >= n {
                return Ok(());
            }
            // SAFETY: chunk `c` was never handed out, and cannot be while we
            // hold the state lock, so nothing writes it.
            if let Some(at) = unsafe { pool.first_nonzero(self.chunk_base(c), CHUNK_SIZE)? } {
                return Err(Error::CheckFailed(format!(
                    "chunk {c} was never handed out (heap frontier: chunk {}, handed out below chunk {}) but holds data at {at:#x}",
                    st.frontier, st.handed
                )));
            }
            drop(st);
            c += 1;
        }
    }

    /// Returns a reserved (never activated) block to the free lists.
    pub(crate) fn cancel(&self, pool: &Pool, r: Reservation) -> Result<()> {
        self.release(pool, r.off, r.chunks, false)
    }

    /// DRAM: the block at `off` is free again. `was_allocated`: it had been
    /// activated (so the allocated counts drop).
    fn release(&self, pool: &Pool, off: u64, chunks: u32, was_allocated: bool) -> Result<()> {
        let Some(c) = self.chunk_of(off) else {
            return Ok(());
        };
        let mut st = self.state.lock();
        if chunks > 0 {
            st.give_run(c, chunks);
            return Ok(());
        }
        let base = self.chunk_base(c);
        let (class, now_empty) = match &mut st.chunks[c as usize] {
            Chunk::Slab {
                class,
                taken,
                taken_count,
                alloc,
                allocated,
                ..
            } => {
                let slot = (off - base) / class_size(*class as usize);
                taken[(slot / 64) as usize] &= !(1 << (slot % 64));
                *taken_count -= 1;
                if was_allocated {
                    alloc[(slot / 64) as usize] &= !(1 << (slot % 64));
                    *allocated -= 1;
                }
                (*class as usize, *taken_count == 0)
            }
            _ => return Ok(()),
        };
        let open_others = st.open[class].iter().filter(|&&i| i != c).count();
        if now_empty && open_others > 0 {
            // Release the empty slab. Its bitmap is all zero and durable (F2
            // of the last free), so one 8-byte store makes it a free chunk; a
            // crash before that store is durable leaves an empty slab, which
            // recovery releases too. No reservation can point into it: its
            // taken count is zero and we hold the state lock.
            pool.store_u64(self.desc_off(c), 0)?;
            pool.persist(self.desc_off(c), 8);
            st.open[class].retain(|&i| i != c);
            st.give_run(c, 1);
        } else if !st.open[class].contains(&c) {
            st.open[class].push(c);
        }
        Ok(())
    }

    // ----- activate / replace / free --------------------------------------

    pub(crate) fn activate(
        &self,
        pool: &Pool,
        r: Reservation,
        slot: u64,
        replace: bool,
    ) -> Result<()> {
        check_slot(pool, slot)?;
        let old = pool.load_u64(slot)?;
        let (kind, old_chunks) = if replace {
            let old_chunks = if old == 0 {
                0
            } else {
                self.allocated_chunks(old)?
            };
            (KIND_REPLACE, old_chunks)
        } else {
            (KIND_ACTIVATE, 0)
        };
        let rec = Record {
            kind,
            block: r.off,
            slot,
            old,
            block_chunks: r.chunks,
            old_chunks,
            new: r.off,
        };
        self.run(pool, &rec)?;
        {
            let mut st = self.state.lock();
            let c = self.chunk_of(r.off).expect("reserved in heap");
            let base = self.chunk_base(c);
            match &mut st.chunks[c as usize] {
                Chunk::Slab {
                    class,
                    alloc,
                    allocated,
                    ..
                } => {
                    let slot = (r.off - base) / class_size(*class as usize);
                    alloc[(slot / 64) as usize] |= 1 << (slot % 64);
                    *allocated += 1;
                }
                Chunk::LargeHead { allocated, .. } => *allocated = true,
                _ => {}
            }
        }
        if replace && old != 0 {
            self.release(pool, old, old_chunks, true)?;
        }
        Ok(())
    }

    pub(crate) fn free(&self, pool: &Pool, slot: u64, new: u64) -> Result<()> {
        check_slot(pool, slot)?;
        let block = pool.load_u64(slot)?;
        if block == 0 {
            return Err(Error::InvalidArgument(format!(
                "free: slot {slot:#x} holds a null pointer"
            )));
        }
        let chunks = self.allocated_chunks(block)?;
        let rec = Record {
            kind: KIND_FREE,
            block,
            slot,
            old: block,
            block_chunks: chunks,
            old_chunks: 0,
            new,
        };
        self.run(pool, &rec)?;
        self.release(pool, block, chunks, true)
    }

    /// The three-fence protocol of the module doc.
    fn run(&self, pool: &Pool, rec: &Record) -> Result<()> {
        let lane = lane_index();
        let _guard = self.lanes[lane].lock();
        let base = self.lane_off(lane);
        rec.write(pool, base)?;
        pool.flush(base, LANE_SIZE);
        if !pool.fault(Fault::AllocSkipRecordFence) {
            pool.fence(); // F1: the record (the commit point) is durable.
        }
        self.apply(pool, rec)?;
        pool.fence(); // F2: the effects are durable.
        pool.store_u64(base, 0)?;
        pool.persist(base, 8); // F3: commit; the record can no longer roll back.
        Ok(())
    }

    /// Chunk count (0 for a slab block) of an allocated block at `off`, from
    /// the DRAM state; an error if `off` is not an allocated block's start.
    fn allocated_chunks(&self, off: u64) -> Result<u32> {
        let c = self
            .chunk_of(off)
            .ok_or_else(|| Error::corrupt(off, "pointer outside the heap"))?;
        let st = self.state.lock();
        let base = self.chunk_base(c);
        match &st.chunks[c as usize] {
            Chunk::Slab { class, alloc, .. } => {
                let size = class_size(*class as usize);
                let rel = off - base;
                let slot = rel / size;
                if !rel.is_multiple_of(size)
                    || alloc[(slot / 64) as usize] & (1 << (slot % 64)) == 0
                {
                    return Err(Error::corrupt(off, "pointer is not an allocated block"));
                }
                Ok(0)
            }
            Chunk::LargeHead { n, allocated: true } if off == base => Ok(*n),
            _ => Err(Error::corrupt(off, "pointer is not an allocated block")),
        }
    }

    /// Size of the allocated block that starts at `off`.
    pub(crate) fn block_size(&self, off: u64) -> Result<u64> {
        let chunks = self.allocated_chunks(off)?;
        if chunks > 0 {
            return Ok(u64::from(chunks) * CHUNK_SIZE);
        }
        let c = self.chunk_of(off).expect("checked by allocated_chunks");
        match &self.state.lock().chunks[c as usize] {
            Chunk::Slab { class, .. } => Ok(class_size(*class as usize)),
            _ => Err(Error::corrupt(off, "pointer is not an allocated block")),
        }
    }

    /// Every allocated block `(offset, size)`, read from PM.
    pub(crate) fn allocated_blocks(&self, pool: &Pool) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let n = self.geometry.chunk_count as u32;
        for i in 0..n {
            let d = pool.load_u64(self.desc_off(i))?;
            match d >> TAG_SHIFT {
                TAG_SLAB if d != 0 => {
                    let c = (d & LOW_MASK) as usize;
                    for w in 0..BITMAP_WORDS {
                        let mut b = pool.load_u64(self.bitmap_off(i) + 8 * w as u64)?;
                        while b != 0 {
                            let s = w as u64 * 64 + u64::from(b.trailing_zeros());
                            b &= b - 1;
                            out.push((self.chunk_base(i) + s * class_size(c), class_size(c)));
                        }
                    }
                }
                TAG_LARGE => out.push((self.chunk_base(i), (d & LOW_MASK) * CHUNK_SIZE)),
                _ => {}
            }
        }
        Ok(out)
    }

    /// `(free, heap)`: chunks in free runs, and all heap chunks. O(free
    /// runs), as a reservation's search is; [`Heap::usage`] walks every
    /// chunk.
    pub(crate) fn free_chunks(&self) -> (u64, u64) {
        let st = self.state.lock();
        let free = st.free_runs.values().map(|&n| u64::from(n)).sum();
        (free, self.geometry.chunk_count)
    }

    pub(crate) fn usage(&self) -> Usage {
        let st = self.state.lock();
        let mut u = Usage {
            classes: (0..SLAB_CLASSES)
                .map(|c| ClassUsage {
                    block_size: class_size(c),
                    ..Default::default()
                })
                .collect(),
            total_chunks: self.geometry.chunk_count,
            heap_bytes: self.geometry.chunk_count * CHUNK_SIZE,
            ..Default::default()
        };
        for ch in &st.chunks {
            match ch {
                Chunk::Free => u.free_chunks += 1,
                Chunk::Slab {
                    class, allocated, ..
                } => {
                    let cu = &mut u.classes[*class as usize];
                    cu.chunks += 1;
                    cu.blocks += u64::from(*allocated);
                    cu.bytes += u64::from(*allocated) * cu.block_size;
                }
                Chunk::LargeHead { n, allocated: true } => {
                    u.large_blocks += 1;
                    u.large_bytes += u64::from(*n) * CHUNK_SIZE;
                }
                Chunk::LargeHead { .. } | Chunk::Cont => {}
            }
        }
        u
    }
}

/// Where [`Heap::mark`] reads and writes the allocator metadata: the pool
/// itself, or the DRAM copy that recovery verifies before writing anything.
trait Meta {
    fn desc(&self, c: u32) -> Result<u64>;
    fn set_desc(&mut self, c: u32, v: u64) -> Result<()>;
    /// Sets or clears the bit of block `slot` of chunk `c`, and flushes it.
    fn set_bit(&mut self, c: u32, slot: u64, on: bool) -> Result<()>;
    /// Flushes the descriptors of chunks `c .. c + n`.
    fn flush_descs(&mut self, c: u32, n: u32);
}

struct PoolMeta<'a> {
    heap: &'a Heap,
    pool: &'a Pool,
}

impl Meta for PoolMeta<'_> {
    fn desc(&self, c: u32) -> Result<u64> {
        self.pool.load_u64(self.heap.desc_off(c))
    }
    fn set_desc(&mut self, c: u32, v: u64) -> Result<()> {
        self.pool.store_u64(self.heap.desc_off(c), v)
    }
    fn set_bit(&mut self, c: u32, slot: u64, on: bool) -> Result<()> {
        let word = self.heap.bitmap_off(c) + 8 * (slot / 64);
        let bit = 1u64 << (slot % 64);
        if on {
            self.pool.fetch_or_u64(word, bit)?;
        } else {
            self.pool.fetch_and_u64(word, !bit)?;
        }
        if !self.pool.fault(Fault::AllocSkipMarkFlush) {
            self.pool.flush(word, 8);
        }
        Ok(())
    }
    fn flush_descs(&mut self, c: u32, n: u32) {
        if !self.pool.fault(Fault::AllocSkipMarkFlush) {
            self.pool.flush(self.heap.desc_off(c), 8 * u64::from(n));
        }
    }
}

/// The descriptors and bitmaps, read into DRAM.
struct ImageMeta {
    desc: Vec<u64>,
    bits: Vec<[u64; BITMAP_WORDS]>,
}

impl Meta for ImageMeta {
    fn desc(&self, c: u32) -> Result<u64> {
        Ok(self.desc[c as usize])
    }
    fn set_desc(&mut self, c: u32, v: u64) -> Result<()> {
        self.desc[c as usize] = v;
        Ok(())
    }
    fn set_bit(&mut self, c: u32, slot: u64, on: bool) -> Result<()> {
        let w = &mut self.bits[c as usize][(slot / 64) as usize];
        if on {
            *w |= 1 << (slot % 64);
        } else {
            *w &= !(1 << (slot % 64));
        }
        Ok(())
    }
    fn flush_descs(&mut self, _c: u32, _n: u32) {}
}

/// A slot must be a root slot of the header or a word in the heap: never the
/// allocator's own metadata.
fn check_slot(pool: &Pool, slot: u64) -> Result<()> {
    let roots = ROOTS_OFFSET..ROOTS_OFFSET + 8 * ROOT_SLOTS as u64;
    let in_heap =
        slot >= pool.header().heap_offset && slot.checked_add(8).is_some_and(|e| e <= pool.size());
    if !slot.is_multiple_of(8) || !(roots.contains(&slot) || in_heap) {
        return Err(Error::InvalidArgument(format!(
            "slot {slot:#x} is not an 8-byte aligned root slot or heap word"
        )));
    }
    Ok(())
}

/// A lane record, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    kind: u64,
    block: u64,
    slot: u64,
    old: u64,
    block_chunks: u32,
    old_chunks: u32,
    /// What `free` stores into the slot (usually null).
    new: u64,
}

impl Record {
    fn chunks_word(&self) -> u64 {
        u64::from(self.block_chunks) | (u64::from(self.old_chunks) << 32)
    }

    fn hdr(&self) -> u64 {
        let mut h = crc32fast::Hasher::new();
        h.update(&[self.kind as u8]);
        for w in [
            self.block,
            self.slot,
            self.old,
            self.chunks_word(),
            self.new,
        ] {
            h.update(&w.to_le_bytes());
        }
        (self.kind << TAG_SHIFT) | u64::from(h.finalize())
    }

    /// Stores the fields, then `hdr` last (same cache line: durable `hdr`
    /// implies durable fields). Does not flush.
    fn write(&self, pool: &Pool, base: u64) -> Result<()> {
        pool.store_u64(base + 8, self.block)?;
        pool.store_u64(base + 16, self.slot)?;
        pool.store_u64(base + 24, self.old)?;
        pool.store_u64(base + 32, self.chunks_word())?;
        pool.store_u64(base + 40, self.new)?;
        pool.store_u64(base, self.hdr())
    }

    fn read(pool: &Pool, base: u64) -> Result<Record> {
        let hdr = pool.load_u64(base)?;
        let chunks = pool.load_u64(base + 32)?;
        Ok(Record {
            kind: hdr >> TAG_SHIFT,
            block: pool.load_u64(base + 8)?,
            slot: pool.load_u64(base + 16)?,
            old: pool.load_u64(base + 24)?,
            block_chunks: (chunks & LOW_MASK) as u32,
            old_chunks: (chunks >> 32) as u32,
            new: pool.load_u64(base + 40)?,
        })
    }
}
