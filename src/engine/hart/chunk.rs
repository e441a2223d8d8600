//! EPallocator memory chunks (§III-A.4, Fig. 2 and Fig. 3): 56 objects of
//! one size, in a persistent singly linked list per object size.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header: used bitmap (bits 0..56), next free index (bits 56..62), full indicator (bits 62..64: `00` has room, `01` full) |
//! | 8 | 8 | `PNext`: the next chunk of the list, or 0 |
//! | 16 | 48 | zero |
//! | 64 + i × size | size | object `i` (leaf or value object) |
//!
//! Objects start on a cache line, so a 64-byte leaf is exactly one line.
//!
//! A chunk is one allocator block. It joins its list at the head: its
//! `PNext` is set to the current head and flushed, then the block is
//! activated into the list's head slot (one failure-atomic step). It leaves
//! the list (EPRecycle, Algorithm 6) when it holds no used object: the
//! allocator frees it and stores its `PNext` into the slot that pointed to it
//! (the head slot or the previous chunk's `PNext`), again in one
//! failure-atomic step, so the paper's two-pointer recycle log is the
//! allocator's lane record.
//!
//! In the `tight` persist order the header is not kept current at run time
//! (a store to it would only dirty one more PM line per operation): whether
//! an object is used is decided at recovery from the leaves' commit words
//! (see [`super::leaf`]), and recovery rewrites the headers from that
//! (not in a read-only open, which has no use for them). In
//! the `paper` order every allocation and release stores the header, and the
//! engine persists it (the paper's leaf and value bits).

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::pm::{Pool, CACHE_LINE};

/// Objects per chunk.
pub const OBJECTS: u64 = 56;
/// Bytes before object 0.
pub const CHUNK_HEADER: u64 = 64;
/// Where a chunk's persistent next pointer is (Fig. 2's `PNext`).
const NEXT: u64 = 8;
const ALL: u64 = (1 << OBJECTS) - 1;

/// Bytes of a chunk of objects of `size` bytes.
pub fn chunk_size(size: u64) -> u64 {
    CHUNK_HEADER + OBJECTS * size
}

/// The header word for a used bitmap.
pub fn header_word(used: u64) -> u64 {
    let next_free = u64::from((!used & ALL).trailing_zeros().min(63));
    let full = u64::from(used == ALL);
    used | (next_free << 56) | (full << 62)
}

#[derive(Debug, Clone, Copy)]
struct ChunkState {
    /// The chunk's offset (its allocator block).
    offset: u64,
    /// Objects in use or reserved.
    taken: u64,
    prev: u64,
    next: u64,
    /// Whether the chunk is on the `open` stack.
    in_open: bool,
    /// Whether a compaction is emptying the chunk: allocation skips it
    /// ([`ChunkList::begin_drain`]).
    draining: bool,
}

/// The DRAM view of one chunk list: which objects are taken, and the list
/// order (to find a chunk's predecessor when it is recycled).
///
/// The chunks' states live in a slab, so the allocation path indexes its
/// chunk directly; `index` (offset to slab entry) serves the paths that start
/// from an offset: release, recovery and recycling.
#[derive(Debug)]
pub struct ChunkList {
    obj_size: u64,
    /// Bytes zeroed at the start of each object of a new chunk (40 for
    /// leaves: commit word and slots; 0 for value objects).
    zero_prefix: u64,
    head_slot: u64,
    head: u64,
    /// Chunk offset to its entry in `slab`.
    index: BTreeMap<u64, u32>,
    /// Chunk states; an entry of a recycled chunk waits in `vacant`.
    slab: Vec<ChunkState>,
    vacant: Vec<u32>,
    /// Chunks that may have a free object: slab entry and chunk offset (an
    /// entry whose offset no longer matches was recycled, and is skipped).
    open: Vec<(u32, u64)>,
    /// Whether allocation and release store the chunk header (`paper`
    /// order).
    keep_header: bool,
    /// The chunks [`Self::begin_drain`] chose, until [`Self::end_drain`].
    drained: Vec<u64>,
    /// Chunks recycled since the list was made (EPRecycle).
    recycled: u64,
}

impl ChunkList {
    /// An empty list whose head lives at `head_slot`; new chunks get the
    /// first `zero_prefix` bytes of every object zeroed.
    pub fn new(obj_size: u64, head_slot: u64, zero_prefix: u64) -> Self {
        assert!(zero_prefix <= obj_size, "zeroing stays inside each object");
        ChunkList {
            obj_size,
            zero_prefix,
            head_slot,
            head: 0,
            index: BTreeMap::new(),
            slab: Vec::new(),
            vacant: Vec::new(),
            open: Vec::new(),
            keep_header: false,
            drained: Vec::new(),
            recycled: 0,
        }
    }

    /// Whether allocation and release store the chunk header.
    pub fn set_keep_header(&mut self, keep: bool) {
        self.keep_header = keep;
    }

    /// Walks the persistent list (recovery), checking that every chunk is an
    /// allocated block of the right size and that the list has no cycle.
    /// Every object starts out free; recovery marks the used ones.
    pub fn load(pool: &Pool, obj_size: u64, head_slot: u64, zero_prefix: u64) -> Result<Self> {
        let mut l = ChunkList::new(obj_size, head_slot, zero_prefix);
        let mut seen = HashSet::new();
        let mut prev = 0;
        let mut cur = pool.load_u64(head_slot)?;
        l.head = cur;
        while cur != 0 {
            // Where `cur` was read from: the list's head slot, or the
            // previous chunk's next pointer. A damaged pointer may be no
            // offset at all, so errors name the word that holds it.
            let at = if prev == 0 { head_slot } else { prev + NEXT };
            if !seen.insert(cur) {
                return Err(Error::corrupt(at, "hart: chunk list has a cycle"));
            }
            let size = pool.block_size(cur).map_err(|_| {
                Error::corrupt(
                    at,
                    format!("hart: chunk list points to {cur:#x}, which is no allocated block"),
                )
            })?;
            if size < chunk_size(obj_size) {
                return Err(Error::corrupt(
                    cur,
                    "hart: chunk block too small for its list",
                ));
            }
            let next = pool.load_u64(cur + NEXT)?;
            l.insert(ChunkState {
                offset: cur,
                taken: 0,
                prev,
                next,
                in_open: false,
                draining: false,
            });
            prev = cur;
            cur = next;
        }
        Ok(l)
    }

    /// The objects of chunk `c`, for recovery.
    pub fn chunk_objects(&self, c: u64) -> impl Iterator<Item = u64> {
        let size = self.obj_size;
        (0..OBJECTS).map(move |i| c + CHUNK_HEADER + i * size)
    }

    /// Chunk offsets (for the leak check).
    pub fn chunk_offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// Adds a chunk's state; returns its slab entry.
    fn insert(&mut self, st: ChunkState) -> u32 {
        let id = match self.vacant.pop() {
            Some(id) => {
                self.slab[id as usize] = st;
                id
            }
            None => {
                self.slab.push(st);
                u32::try_from(self.slab.len() - 1).expect("fewer than 2^32 chunks per list")
            }
        };
        self.index.insert(st.offset, id);
        id
    }

    /// The state of chunk `c`, if it is a chunk of this list.
    fn state_mut(&mut self, c: u64) -> Option<&mut ChunkState> {
        let id = *self.index.get(&c)?;
        Some(&mut self.slab[id as usize])
    }

    /// The slab entry of the chunk that holds `obj` and the object's index
    /// in it, if `obj` is an object of this list.
    fn find(&self, obj: u64) -> Option<(u32, u64)> {
        let (&c, &id) = self.index.range(..=obj).next_back()?;
        let rel = obj.checked_sub(c + CHUNK_HEADER)?;
        let i = rel / self.obj_size;
        (rel % self.obj_size == 0 && i < OBJECTS).then_some((id, i))
    }

    /// Whether `off` lies inside one of the list's chunks, header included
    /// (recovery: a large value's block must not).
    pub fn covers(&self, off: u64) -> bool {
        self.index
            .range(..=off)
            .next_back()
            .is_some_and(|(&c, _)| off < c + chunk_size(self.obj_size))
    }

    /// The chunk and index of an object, if `obj` is an object of this list.
    pub fn locate(&self, obj: u64) -> Option<(u64, u64)> {
        self.find(obj)
            .map(|(id, i)| (self.slab[id as usize].offset, i))
    }

    /// Marks the objects of chunk `c` in `mask` used (recovery). Fails if
    /// `c` is not a chunk of this list or one of them already was.
    pub fn set_taken(&mut self, c: u64, mask: u64) -> Result<()> {
        let st = self
            .state_mut(c)
            .ok_or_else(|| Error::corrupt(c, "hart: object is not in its chunk list"))?;
        if st.taken & mask != 0 {
            return Err(Error::corrupt(c, "hart: object referenced twice"));
        }
        st.taken |= mask & ALL;
        Ok(())
    }

    /// Takes a free object (DRAM only), adding a chunk if every chunk is full.
    pub fn alloc(&mut self, pool: &Pool) -> Result<u64> {
        loop {
            if let Some(obj) = self.take_free(pool)? {
                return Ok(obj);
            }
            self.add_chunk(pool)?;
        }
    }

    /// Takes a free object of the list's chunks (DRAM only), if one has
    /// room; adds no chunk.
    pub fn take_free(&mut self, pool: &Pool) -> Result<Option<u64>> {
        loop {
            match self.open.last().copied() {
                Some((id, c)) => {
                    let st = &mut self.slab[id as usize];
                    if st.offset != c {
                        self.open.pop(); // recycled meanwhile
                        continue;
                    }
                    if st.taken == ALL || st.draining {
                        st.in_open = false;
                        self.open.pop();
                        continue;
                    }
                    let i = u64::from((!st.taken & ALL).trailing_zeros());
                    st.taken |= 1 << i;
                    let taken = st.taken;
                    if self.keep_header {
                        // The caller persists it (`paper` order).
                        pool.store_u64(c, header_word(taken))?;
                    }
                    return Ok(Some(c + CHUNK_HEADER + i * self.obj_size));
                }
                None => return Ok(None),
            }
        }
    }

    /// The object the next [`Self::alloc`] takes, if its chunk has room (a
    /// hint for prefetching: nothing is taken).
    pub fn next_free(&self) -> Option<u64> {
        let &(id, c) = self.open.last()?;
        let st = &self.slab[id as usize];
        if st.offset != c || st.taken == ALL {
            return None;
        }
        let i = u64::from((!st.taken & ALL).trailing_zeros());
        Some(c + CHUNK_HEADER + i * self.obj_size)
    }

    /// Persist order: zero the header line and the first `zero_prefix`
    /// bytes of every object (a leaf's commit word and slots: stale leaves
    /// from an earlier use of the memory must not look valid; skipped when
    /// the block was never written, so is zero in PM already), set `PNext`
    /// to the current head, flush; then `activate` the block into the head
    /// slot (whose first fence orders those flushes).
    fn add_chunk(&mut self, pool: &Pool) -> Result<()> {
        let size = chunk_size(self.obj_size);
        let r = pool.reserve(size)?;
        let c = r.offset();
        debug_assert!(r.size() >= size);
        let mut line = [0u8; 64];
        line[8..16].copy_from_slice(&self.head.to_le_bytes());
        let zeros = [0u8; 64];
        // Objects whose first `zero_prefix` bytes are zeroed: all or none;
        // none in a block that was never written (zero already, in PM too:
        // `Reservation::zeroed`).
        let zeroed = if self.zero_prefix > 0 && !r.zeroed() {
            OBJECTS
        } else {
            0
        };
        // SAFETY: the block is reserved by us and not yet published; every
        // write stays inside it (object i ends at 64 + (i + 1) × size).
        unsafe {
            pool.write_bytes(c, &line)?;
            for i in 0..zeroed {
                let o = c + CHUNK_HEADER + i * self.obj_size;
                pool.write_bytes(o, &zeros[..self.zero_prefix as usize])?;
            }
        }
        if zeroed > 0 && self.obj_size == CACHE_LINE {
            // One object per line: every line of the chunk was written, and
            // one call flushes them all.
            pool.flush(c, size);
        } else {
            for i in 0..zeroed {
                pool.flush(c + CHUNK_HEADER + i * self.obj_size, self.zero_prefix);
            }
            pool.flush(c, CHUNK_HEADER);
        }
        pool.activate(r, self.head_slot)?;
        let head = self.head;
        if let Some(h) = self.state_mut(head) {
            h.prev = c;
        }
        let id = self.insert(ChunkState {
            offset: c,
            taken: 0,
            prev: 0,
            next: head,
            in_open: true,
            draining: false,
        });
        self.head = c;
        self.open.push((id, c));
        Ok(())
    }

    /// Returns an object to the free pool (its removal is durable already).
    /// A chunk left with no object in use is recycled if another chunk of
    /// the list has room.
    pub fn release(&mut self, pool: &Pool, obj: u64) -> Result<()> {
        self.try_release(pool, obj).unwrap_or_else(|| {
            Err(Error::corrupt(
                obj,
                "hart: released object is not in its chunk list",
            ))
        })
    }

    /// [`Self::release`], or `None` (and nothing changed) if `obj` is not
    /// an object of this list.
    pub fn try_release(&mut self, pool: &Pool, obj: u64) -> Option<Result<()>> {
        let (id, i) = self.find(obj)?;
        Some(self.release_at(pool, id, i))
    }

    fn release_at(&mut self, pool: &Pool, id: u32, i: u64) -> Result<()> {
        let st = &mut self.slab[id as usize];
        if st.taken & (1 << i) == 0 {
            // Released twice, or a damaged pointer read from PM that names
            // another free object (of this class or, in format 6, of a
            // larger one): nothing changes.
            return Err(Error::corrupt(
                st.offset + CHUNK_HEADER + i * self.obj_size,
                "hart: released object is free already",
            ));
        }
        st.taken &= !(1 << i);
        let (c, taken) = (st.offset, st.taken);
        if taken == 0 && self.index.len() > 1 {
            return self.recycle(pool, c);
        }
        if self.keep_header {
            pool.store_u64(c, header_word(taken))?;
        }
        let st = &mut self.slab[id as usize];
        if !st.in_open && !st.draining {
            st.in_open = true;
            self.open.push((id, c));
        }
        Ok(())
    }

    /// EPRecycle (Algorithm 6): unlink and free an empty chunk in one
    /// failure-atomic allocator step.
    ///
    /// The allocator frees whatever block the slot holds, so the slot must
    /// hold `c`: in a damaged list (a `PNext` or the head rewritten) it
    /// would free another chunk, with live objects in it. And its `PNext`
    /// must be the chunk that follows in DRAM. Otherwise it is an error,
    /// and the chunk stays allocated, empty (the next open recycles it if
    /// the list still reaches it; else `check` reports it as a leak).
    fn recycle(&mut self, pool: &Pool, c: u64) -> Result<()> {
        let id = self.index[&c];
        let st = self.slab[id as usize];
        let slot = if st.prev == 0 {
            self.head_slot
        } else {
            st.prev + NEXT
        };
        if pool.load_u64(slot)? != c {
            return Err(Error::corrupt(
                slot,
                "hart: chunk list slot does not hold the chunk to recycle",
            ));
        }
        if pool.load_u64(c + NEXT)? != st.next {
            return Err(Error::corrupt(
                c + NEXT,
                "hart: chunk's PNext is not the chunk that follows",
            ));
        }
        pool.free_and_store(slot, st.next)?;
        if st.prev == 0 {
            self.head = st.next;
        } else if let Some(p) = self.state_mut(st.prev) {
            p.next = st.next;
        }
        if let Some(n) = self.state_mut(st.next) {
            n.prev = st.prev;
        }
        // A stale entry on `open` is skipped by `alloc`: the entry's offset
        // is 0 until it is reused, and then differs unless the very same
        // chunk came back (a duplicate on `open`, which is harmless).
        self.index.remove(&c);
        self.slab[id as usize].offset = 0;
        self.vacant.push(id);
        self.recycled += 1;
        Ok(())
    }

    /// Recycles the list's only chunk if it holds no object in use, and
    /// returns whether it did: a compaction's step. [`Self::release`]
    /// keeps a list's last chunk, so that a list at the edge of one chunk
    /// does not give it back and take a new one time after time; in a full
    /// pool its room serves the other lists better.
    pub fn recycle_if_empty(&mut self, pool: &Pool) -> Result<bool> {
        let Some((&c, &id)) = self.index.iter().next() else {
            return Ok(false);
        };
        let st = &self.slab[id as usize];
        if self.index.len() > 1 || st.taken != 0 || st.draining {
            return Ok(false);
        }
        self.recycle(pool, c)?;
        Ok(true)
    }

    /// Chooses chunks for a compaction to empty (docs/design.md §7, "A
    /// full pool: values moved out of sparse chunks") and stops allocation
    /// from them until [`Self::end_drain`]: in offset order, each chunk
    /// whose objects, with those of the chunks chosen before it, the free
    /// objects of the chunks not chosen can take. Low offsets first in
    /// every list, so that the chunks given back by all the lists lie side
    /// by side in the pool (a chunk larger than 32 KiB needs whole 64 KiB
    /// allocator chunks in a row, and one of 32 KiB or less shares one with
    /// another list's). Returns them with their sizes; none if no chunk
    /// can be emptied so.
    pub fn begin_drain(&mut self) -> Vec<(u64, u64)> {
        debug_assert!(self.drained.is_empty(), "one compaction at a time");
        // In offset order (`index` is a map by offset).
        let cs: Vec<(u32, u64)> = self
            .index
            .iter()
            .map(|(&c, &id)| (self.slab[id as usize].taken.count_ones(), c))
            .filter(|&(taken, _)| taken > 0)
            .collect();
        let mut free_kept: u64 = self
            .index
            .values()
            .map(|&id| OBJECTS - u64::from(self.slab[id as usize].taken.count_ones()))
            .sum();
        let mut moved = 0u64;
        for &(taken, c) in &cs {
            let taken = u64::from(taken);
            let free = OBJECTS - taken;
            if moved + taken > free_kept - free {
                continue;
            }
            moved += taken;
            free_kept -= free;
            self.drained.push(c);
        }
        let size = chunk_size(self.obj_size);
        for i in 0..self.drained.len() {
            let c = self.drained[i];
            if let Some(st) = self.state_mut(c) {
                st.draining = true;
            }
        }
        self.drained.iter().map(|&c| (c, size)).collect()
    }

    /// Ends [`Self::begin_drain`]: the chunks it chose that are still in
    /// the list serve allocations again.
    pub fn end_drain(&mut self) {
        for c in std::mem::take(&mut self.drained) {
            let Some(&id) = self.index.get(&c) else {
                continue; // emptied and recycled
            };
            let st = &mut self.slab[id as usize];
            st.draining = false;
            if !st.in_open && st.taken != ALL {
                st.in_open = true;
                self.open.push((id, c));
            }
        }
    }

    /// Whether `obj` is an object of a chunk of this list that
    /// [`Self::begin_drain`] chose (and that was not recycled since).
    pub fn draining_at(&self, obj: u64) -> bool {
        self.find(obj)
            .is_some_and(|(id, _)| self.slab[id as usize].draining)
    }

    /// Chunks recycled since the list was made.
    pub fn recycled(&self) -> u64 {
        self.recycled
    }

    /// After recovery: rewrite the headers and recycle empty chunks, as
    /// [`Self::release`] would have (an empty chunk goes unless it is the
    /// list's last). Returns how many chunks were recycled.
    pub fn settle(&mut self, pool: &Pool) -> Result<usize> {
        let cs: Vec<(u64, u32)> = self.index.iter().map(|(&c, &id)| (c, id)).collect();
        let mut recycled = 0;
        for (c, id) in cs {
            let taken = self.slab[id as usize].taken;
            if taken == 0 && self.index.len() > 1 {
                self.recycle(pool, c)?;
                recycled += 1;
                continue;
            }
            // Recovery reads no header (the used bits come from the leaves'
            // commit words): the stores make the headers current for the
            // `paper` order, which keeps them so. A read-only open has no
            // use for them, and its private mapping would copy a page per
            // chunk (one per 56 leaves: about every leaf page); an
            // unchanged header needs no store either.
            if !pool.is_read_only() && pool.load_u64(c)? != header_word(taken) {
                pool.store_u64(c, header_word(taken))?;
            }
        }
        self.open.clear();
        for (&c, &id) in &self.index {
            let st = &mut self.slab[id as usize];
            st.in_open = st.taken != ALL;
            if st.in_open {
                self.open.push((id, c));
            }
        }
        Ok(recycled)
    }

    /// How many objects the list's live chunks have taken (tests).
    #[cfg(test)]
    pub fn taken_objects(&self) -> u32 {
        self.index
            .values()
            .map(|&id| self.slab[id as usize].taken.count_ones())
            .sum()
    }

    /// DRAM bytes of this view.
    pub fn dram_bytes(&self) -> u64 {
        (self.index.len() * (8 + 4 + 16)
            + self.slab.capacity() * std::mem::size_of::<ChunkState>()
            + self.vacant.capacity() * 4
            + self.open.capacity() * std::mem::size_of::<(u32, u64)>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// A small deterministic generator (splitmix64).
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A list of three chunks of 64-byte objects, all taken but one of the
    /// newest: the pool, the list, the middle chunk's objects, the oldest
    /// chunk, the middle one, and the slot that holds the middle one.
    fn three_chunks() -> (Pool, ChunkList, Vec<u64>, u64, u64, u64) {
        let pool = Pool::create_anonymous(16 << 20, "hart", &Default::default()).unwrap();
        let head_slot = pool.root_slot(0).unwrap();
        let mut list = ChunkList::new(64, head_slot, 40);
        let objs: Vec<u64> = (0..2 * OBJECTS + 1)
            .map(|_| list.alloc(&pool).unwrap())
            .collect();
        let chunk = |o: u64| list.locate(o).unwrap().0;
        let (old, mid) = (chunk(objs[0]), chunk(objs[OBJECTS as usize]));
        let mid_objs = objs.iter().copied().filter(|&o| chunk(o) == mid).collect();
        let mut slot = head_slot;
        while pool.load_u64(slot).unwrap() != mid {
            slot = pool.load_u64(slot).unwrap() + 8;
        }
        (pool, list, mid_objs, old, mid, slot)
    }

    /// Releases every object of `objs`: the last one's result.
    fn release_all(pool: &Pool, list: &mut ChunkList, objs: &[u64]) -> Result<()> {
        let (last, rest) = objs.split_last().unwrap();
        for &o in rest {
            list.release(pool, o).unwrap();
        }
        list.release(pool, *last)
    }

    /// A list of chunks of 64-byte objects, chunk `i` keeping `keep[i]`
    /// of its objects: the pool, the list, the chunks (oldest first) and
    /// each one's objects kept.
    fn chunks_keeping(keep: &[usize]) -> (Pool, ChunkList, Vec<u64>, Vec<Vec<u64>>) {
        let pool = Pool::create_anonymous(16 << 20, "hart", &Default::default()).unwrap();
        let mut list = ChunkList::new(64, pool.root_slot(0).unwrap(), 40);
        let objs: Vec<u64> = (0..keep.len() as u64 * OBJECTS)
            .map(|_| list.alloc(&pool).unwrap())
            .collect();
        let mut chunks: Vec<u64> = objs.iter().map(|&o| list.locate(o).unwrap().0).collect();
        chunks.dedup();
        assert_eq!(chunks.len(), keep.len());
        let kept = objs
            .chunks(OBJECTS as usize)
            .zip(keep)
            .map(|(mine, &k)| {
                for &o in &mine[k..] {
                    list.release(&pool, o).unwrap();
                }
                mine[..k].to_vec()
            })
            .collect();
        (pool, list, chunks, kept)
    }

    /// A compaction drains chunks in offset order, each one whose objects
    /// (with those of the chunks before it) the others' free objects can
    /// take, and allocation skips them
    /// until the drain ends; releasing a drained chunk's last object
    /// recycles it.
    #[test]
    fn a_drain_takes_the_chunks_that_the_others_can_hold() {
        // 46 + 36 + 6 free objects: the 10 of the first chunk fit in the
        // others' 42; 10 + 20 do not fit in the 6 beside the last two.
        let (pool, mut list, chunks, kept) = chunks_keeping(&[10, 20, 50, 56]);
        let chunk = |l: &ChunkList, o: u64| l.locate(o).unwrap().0;
        assert_eq!(list.begin_drain(), vec![(chunks[0], chunk_size(64))]);
        for _ in 0..42 {
            let o = list.take_free(&pool).unwrap().expect("a free object");
            assert_ne!(
                chunk(&list, o),
                chunks[0],
                "a drained chunk serves no allocation"
            );
        }
        assert_eq!(list.take_free(&pool).unwrap(), None);
        let recycled = list.recycled();
        for &o in &kept[0] {
            list.release(&pool, o).unwrap();
        }
        assert_eq!(list.recycled(), recycled + 1);
        assert!(list.locate(chunks[0] + CHUNK_HEADER).is_none());
        list.end_drain();
        assert_eq!(
            list.take_free(&pool).unwrap(),
            None,
            "every chunk left is full"
        );
    }

    /// A drained chunk that keeps objects serves allocations again once
    /// the drain ends, and a list whose chunks the others cannot take
    /// drains none.
    #[test]
    fn a_drain_that_ends_gives_its_chunks_back_to_allocation() {
        let (pool, mut list, chunks, _) = chunks_keeping(&[26, 26]);
        assert_eq!(list.begin_drain(), vec![(chunks[0], chunk_size(64))]);
        for _ in 0..30 {
            let o = list.take_free(&pool).unwrap().expect("a free object");
            assert_eq!(list.locate(o).unwrap().0, chunks[1]);
        }
        assert_eq!(list.take_free(&pool).unwrap(), None);
        list.end_drain();
        let o = list
            .take_free(&pool)
            .unwrap()
            .expect("the drained chunk's room");
        assert_eq!(list.locate(o).unwrap().0, chunks[0]);
        let (_pool, mut full, _, _) = chunks_keeping(&[30, 56, 56]);
        assert!(full.begin_drain().is_empty());
        full.end_drain();
    }

    /// EPRecycle frees the block that the slot before the chunk holds. In
    /// a damaged list where that slot holds the next chunk instead, the
    /// next chunk, with live objects, was freed. Now the recycle refuses
    /// and nothing is freed.
    #[test]
    fn a_chunk_that_its_list_slot_does_not_hold_is_not_recycled() {
        let (pool, mut list, mid_objs, old, _, slot) = three_chunks();
        // Damage: the slot that holds the middle chunk skips it.
        pool.store_u64(slot, old).unwrap();
        let r = release_all(&pool, &mut list, &mid_objs);
        assert!(
            pool.block_size(old).is_ok(),
            "the live chunk is still allocated"
        );
        let e = r.unwrap_err().to_string();
        assert!(e.contains("does not hold"), "{e}");
    }

    /// The same with the chunk's own `PNext` rewritten (to null): the
    /// recycle compares it with the DRAM successor and refuses, changing
    /// nothing in PM.
    #[test]
    fn a_chunk_whose_pnext_was_rewritten_is_not_recycled() {
        let (pool, mut list, mid_objs, old, mid, slot) = three_chunks();
        assert_eq!(pool.load_u64(mid + 8).unwrap(), old);
        pool.store_u64(mid + 8, 0).unwrap();
        let e = release_all(&pool, &mut list, &mid_objs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PNext"), "{e}");
        assert_eq!(pool.load_u64(slot).unwrap(), mid, "the list is as it was");
        assert!(pool.block_size(mid).is_ok(), "the chunk is not freed");
    }

    /// Random allocations and releases against a model: every object
    /// handed out is free (never handed out twice), in a chunk of the list,
    /// on an object boundary, and the one `next_free` named when it named
    /// one; empty chunks are recycled (slab entries and stale `open` entries
    /// reused) and the persistent list matches the DRAM view.
    /// A second release of an object is refused and changes nothing (a
    /// damaged value pointer can name a free object, and in format 6 in
    /// any of several lists); `take_free` adds no chunk.
    #[test]
    fn a_second_release_is_refused_and_take_free_adds_no_chunk() {
        let pool = Pool::create_anonymous(16 << 20, "hart", &Default::default()).unwrap();
        let head_slot = pool.root_slot(0).unwrap();
        let mut list = ChunkList::new(64, head_slot, 40);
        assert_eq!(
            list.take_free(&pool).unwrap(),
            None,
            "an empty list adds no chunk"
        );
        assert_eq!(pool.load_u64(head_slot).unwrap(), 0);
        let a = list.alloc(&pool).unwrap();
        let b = list.alloc(&pool).unwrap();
        list.release(&pool, a).unwrap();
        let e = list.release(&pool, a).unwrap_err().to_string();
        assert!(e.contains("free already"), "{e}");
        assert!(
            list.try_release(&pool, a + 1).is_none(),
            "not an object of the list"
        );
        // The first release stands and the list is whole: `a` is taken
        // again, next to `b`, from the same chunk.
        assert_eq!(list.take_free(&pool).unwrap(), Some(a));
        assert_eq!(list.locate(a).unwrap().0, list.locate(b).unwrap().0);
    }

    #[test]
    fn alloc_and_release_agree_with_a_model_through_recycling() {
        let pool = Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap();
        let head_slot = pool.root_slot(0).unwrap();
        let mut list = ChunkList::new(128, head_slot, 40);
        let mut live: BTreeSet<u64> = BTreeSet::new();
        let mut added = 0;
        let mut rng = 7;
        for step in 0..20_000 {
            // Phases of growth and of shrinking, so chunks empty out and
            // their slab entries are reused.
            let grow = (step / 2_000) % 2 == 0;
            let r = next(&mut rng) % 10;
            if live.is_empty() || (grow && r < 7) || (!grow && r < 3) {
                let chunks = list.index.len();
                let hint = list.next_free();
                let o = list.alloc(&pool).unwrap();
                if let Some(h) = hint {
                    assert_eq!(h, o, "next_free names the object alloc takes");
                }
                added += list.index.len() - chunks;
                assert!(live.insert(o), "object {o} handed out twice");
                let (c, i) = list.locate(o).expect("an object of the list");
                assert_eq!(o, c + CHUNK_HEADER + i * 128);
            } else {
                let nth = next(&mut rng) as usize % live.len();
                let o = *live.iter().nth(nth).unwrap();
                live.remove(&o);
                list.release(&pool, o).unwrap();
            }
            if step % 500 == 0 {
                // The persistent list holds exactly the DRAM view's chunks.
                let loaded = ChunkList::load(&pool, 128, head_slot, 40).unwrap();
                let a: Vec<u64> = loaded.chunk_offsets().collect();
                let b: Vec<u64> = list.chunk_offsets().collect();
                assert_eq!(a, b, "step {step}");
                // Every chunk with a live object is in the list; at most one
                // chunk is empty (an empty one is recycled unless it is last).
                let used: BTreeSet<u64> = live.iter().map(|&o| list.locate(o).unwrap().0).collect();
                assert!(b.len() <= used.len() + 1, "step {step}: empty chunks kept");
            }
        }
        // Chunks were recycled and their slab entries reused.
        assert!(
            added > list.slab.len(),
            "{added} chunks added, {} slab entries",
            list.slab.len()
        );
        assert!(
            list.release(&pool, 8).is_err(),
            "an offset outside every chunk"
        );
    }

    /// A new chunk in a block never written flushes its header line only;
    /// in a block used before, it zeroes and flushes every object's first
    /// bytes too, so that stale leaves cannot look valid.
    #[test]
    fn a_new_chunk_zeroes_its_objects_only_in_a_used_block() {
        let pool = Pool::create_anonymous(16 << 20, "hart", &Default::default()).unwrap();
        let size = chunk_size(CACHE_LINE);
        // A block used before: written with garbage, given back.
        let r = pool.reserve(size).unwrap();
        let used = r.offset();
        // SAFETY: the block is reserved by us and never published.
        unsafe { pool.write_bytes(used, &vec![0xAB; size as usize]).unwrap() };
        pool.flush(used, size);
        pool.cancel(r).unwrap();
        let mut list = ChunkList::new(CACHE_LINE, pool.root_slot(0).unwrap(), 40);
        let c0 = crate::pm::thread_counters();
        list.add_chunk(&pool).unwrap();
        let reused = crate::pm::thread_counters() - c0;
        assert_eq!(list.head, used, "the used block is taken again");
        for i in 0..OBJECTS {
            let o = used + CHUNK_HEADER + i * CACHE_LINE;
            for w in 0..5 {
                assert_eq!(pool.load_u64(o + 8 * w).unwrap(), 0, "object {i}");
            }
        }
        let c1 = crate::pm::thread_counters();
        list.add_chunk(&pool).unwrap();
        let fresh = crate::pm::thread_counters() - c1;
        assert_ne!(list.head, used);
        // The same activate in both; the 56 objects' lines are the difference.
        assert_eq!(reused.flushes - fresh.flushes, OBJECTS);
        assert_eq!(reused.fences, fresh.fences);
    }
}
