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
//! (see [`super::leaf`]), and recovery rewrites the headers from that. In
//! the `paper` order every allocation and release stores the header, and the
//! engine persists it (the paper's leaf and value bits).

use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::pm::Pool;

/// Objects per chunk.
pub const OBJECTS: u64 = 56;
/// Bytes before object 0.
pub const CHUNK_HEADER: u64 = 64;
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
    /// Objects in use or reserved.
    taken: u64,
    prev: u64,
    next: u64,
    /// Whether the chunk is on the `open` stack.
    in_open: bool,
}

/// The DRAM view of one chunk list: which objects are taken, and the list
/// order (to find a chunk's predecessor when it is recycled).
#[derive(Debug)]
pub struct ChunkList {
    obj_size: u64,
    /// Bytes zeroed at the start of each object of a new chunk (40 for
    /// leaves: commit word and slots; 0 for value objects).
    zero_prefix: u64,
    head_slot: u64,
    head: u64,
    chunks: BTreeMap<u64, ChunkState>,
    /// Chunks that may have a free object.
    open: Vec<u64>,
    /// Whether allocation and release store the chunk header (`paper`
    /// order).
    keep_header: bool,
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
            chunks: BTreeMap::new(),
            open: Vec::new(),
            keep_header: false,
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
            if !seen.insert(cur) {
                return Err(Error::corrupt(cur, "hart: chunk list has a cycle"));
            }
            let size = pool.block_size(cur).map_err(|_| {
                Error::corrupt(cur, "hart: chunk list points to no allocated block")
            })?;
            if size < chunk_size(obj_size) {
                return Err(Error::corrupt(
                    cur,
                    "hart: chunk block too small for its list",
                ));
            }
            let next = pool.load_u64(cur + 8)?;
            l.chunks.insert(
                cur,
                ChunkState {
                    taken: 0,
                    prev,
                    next,
                    in_open: false,
                },
            );
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
        self.chunks.keys().copied()
    }

    /// The chunk and index of an object, if `obj` is an object of this list.
    pub fn locate(&self, obj: u64) -> Option<(u64, u64)> {
        let (&c, _) = self.chunks.range(..=obj).next_back()?;
        let rel = obj.checked_sub(c + CHUNK_HEADER)?;
        let i = rel / self.obj_size;
        (rel % self.obj_size == 0 && i < OBJECTS).then_some((c, i))
    }

    /// Marks the objects of chunk `c` in `mask` used (recovery). Fails if
    /// `c` is not a chunk of this list or one of them already was.
    pub fn set_taken(&mut self, c: u64, mask: u64) -> Result<()> {
        let st = self
            .chunks
            .get_mut(&c)
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
            match self.open.last().copied() {
                Some(c) => {
                    let Some(st) = self.chunks.get_mut(&c) else {
                        self.open.pop(); // recycled meanwhile
                        continue;
                    };
                    if st.taken == ALL {
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
                    return Ok(c + CHUNK_HEADER + i * self.obj_size);
                }
                None => self.add_chunk(pool)?,
            }
        }
    }

    /// Persist order: zero the header line and the first `zero_prefix`
    /// bytes of every object (a leaf's commit word and slots: stale leaves
    /// from an earlier use of the memory must not look valid), set `PNext`
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
        // SAFETY: the block is reserved by us and not yet published; every
        // write stays inside it (object i ends at 64 + (i + 1) × size).
        unsafe {
            pool.write_bytes(c, &line)?;
            if self.zero_prefix > 0 {
                for i in 0..OBJECTS {
                    let o = c + CHUNK_HEADER + i * self.obj_size;
                    pool.write_bytes(o, &zeros[..self.zero_prefix as usize])?;
                    pool.flush(o, self.zero_prefix);
                }
            }
        }
        pool.flush(c, CHUNK_HEADER);
        pool.activate(r, self.head_slot)?;
        if let Some(h) = self.chunks.get_mut(&self.head) {
            h.prev = c;
        }
        self.chunks.insert(
            c,
            ChunkState {
                taken: 0,
                prev: 0,
                next: self.head,
                in_open: true,
            },
        );
        self.head = c;
        self.open.push(c);
        Ok(())
    }

    /// Returns an object to the free pool (its removal is durable already).
    /// A chunk left with no object in use is recycled if another chunk of
    /// the list has room.
    pub fn release(&mut self, pool: &Pool, obj: u64) -> Result<()> {
        let Some((c, i)) = self.locate(obj) else {
            return Err(Error::corrupt(
                obj,
                "hart: released object is not in its chunk list",
            ));
        };
        let st = self.chunks.get_mut(&c).expect("located");
        st.taken &= !(1 << i);
        let taken = st.taken;
        if taken == 0 && self.chunks.len() > 1 {
            return self.recycle(pool, c);
        }
        if self.keep_header {
            pool.store_u64(c, header_word(taken))?;
        }
        let st = self.chunks.get_mut(&c).expect("located");
        if !st.in_open {
            st.in_open = true;
            self.open.push(c);
        }
        Ok(())
    }

    /// EPRecycle (Algorithm 6): unlink and free an empty chunk in one
    /// failure-atomic allocator step.
    fn recycle(&mut self, pool: &Pool, c: u64) -> Result<()> {
        let st = self.chunks[&c];
        let slot = if st.prev == 0 {
            self.head_slot
        } else {
            st.prev + 8
        };
        pool.free_and_store(slot, st.next)?;
        if st.prev == 0 {
            self.head = st.next;
        } else if let Some(p) = self.chunks.get_mut(&st.prev) {
            p.next = st.next;
        }
        if let Some(n) = self.chunks.get_mut(&st.next) {
            n.prev = st.prev;
        }
        // A stale entry on `open` is skipped by `alloc`.
        self.chunks.remove(&c);
        Ok(())
    }

    /// After recovery: rewrite the headers and recycle empty chunks, as
    /// [`Self::release`] would have (an empty chunk goes unless it is the
    /// list's last). Returns how many chunks were recycled.
    pub fn settle(&mut self, pool: &Pool) -> Result<usize> {
        let cs: Vec<u64> = self.chunks.keys().copied().collect();
        let mut recycled = 0;
        for c in cs {
            let taken = self.chunks[&c].taken;
            if taken == 0 && self.chunks.len() > 1 {
                self.recycle(pool, c)?;
                recycled += 1;
                continue;
            }
            pool.store_u64(c, header_word(taken))?;
        }
        self.open.clear();
        for (&c, st) in self.chunks.iter_mut() {
            st.in_open = st.taken != ALL;
            if st.in_open {
                self.open.push(c);
            }
        }
        Ok(recycled)
    }

    /// DRAM bytes of this view.
    pub fn dram_bytes(&self) -> u64 {
        (self.chunks.len() * (std::mem::size_of::<ChunkState>() + 8 + 16)
            + self.open.capacity() * 8) as u64
    }
}
