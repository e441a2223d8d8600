//! The radix trees' block heap: pool chunks carved into blocks, whose
//! liveness is the tree's reachability.
//!
//! The paper's trees publish a new leaf or node with one 8-byte pointer
//! store and count 2.2 to 3.9 flushes per insert (Table 1(b)) because their
//! allocator is volatile. Publishing every block through the substrate's
//! failure-atomic `activate` costs a lane record and a bitmap line on top of
//! each store (4 lines, 3 fences). Here, as HART does for its leaves, the
//! trees take whole chunks from the substrate (through `activate`, once per
//! chunk) and carve them themselves; which blocks of a chunk are in use is
//! kept in DRAM only and rebuilt at open from the one walk of the tree that
//! recovery already makes: a block is allocated exactly when the tree reaches
//! it. A block that a crash left written but unpublished, or published and
//! then unlinked, is unreachable, so it is free after the crash: no leak, no
//! log, and an insert is the paper's "flush the leaf, fence, store the
//! pointer, flush, fence".
//!
//! # Layout
//! A chunk is one substrate block: [`CHUNK_SIZE`] bytes (64 KiB) for blocks
//! of 64 B to 4 KiB, 16 blocks' worth for 8 KiB to 32 KiB blocks (so that
//! each chunk holds 15 of them), or whole 64 KiB multiples for one leaf over
//! 32 KiB. Its first line:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | `class`: log2 of the block size (6 ..= 15: 64 B .. 32 KiB), or 0: one large block |
//! | 16 | 8 | `next`: the next chunk, or null; an activation slot |
//!
//! Blocks start at offset [`FIRST`] (64): block `i` of a small chunk is at
//! `64 + i * size` (line-aligned, not size-aligned), and a large chunk's one
//! block is at 64. The chunks form a list from the superblock's `chunks`
//! slot; new chunks go at its head.
//!
//! # Persist order
//! - **New chunk**: header written (`next` = the current head), flushed;
//!   `activate(chunk, head slot)` (the substrate's failure-atomic step; a
//!   crash before it leaves the chunk free in the substrate).
//! - **Publish a block** ([`super::RadixTree::publish`]): the block written
//!   and flushed; **fence**; the 8-byte pointer store; flush; **fence**. The
//!   store is the commit point. Nothing is written for the allocation: the
//!   block is in use because the tree reaches it.
//! - **Unlink a block**: the store that makes it unreachable is made
//!   durable (flush, fence) before the block goes back to the DRAM free map,
//!   so it is never handed out while a crash could still bring back the
//!   pointer to it.
//! - **Release a large block, an empty chunk at open, or the empty chunks
//!   when the pool is full**:
//!   `free_and_store(previous chunk's next (or the head slot), next)`, the
//!   substrate's failure-atomic unlink.
//!
//! # Recovery
//! [`Chunks::load`] walks the list (checking each header); the tree walk
//! marks every block it reaches ([`Chunks::mark`]: a pointer that is not the
//! start of a block, or a block reached twice, is corruption); then
//! [`Chunks::settle`] turns what is unmarked into free space and gives
//! chunks with nothing marked back to the substrate. Between operations the
//! DRAM map equals the reachable set, which `check` verifies.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};
use crate::pm::{Pool, CHUNK_SIZE};

/// `"PMRXCHNK"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMRXCHNK");
/// Offset of `class`.
pub const CLASS: u64 = 8;
/// Offset of `next`.
pub const NEXT: u64 = 16;
/// Offset of the first block (the header takes one line).
pub const FIRST: u64 = 64;
/// Smallest block size (log2).
pub const MIN_CLASS: u8 = 6;
/// Largest carved block size (log2): larger leaves get a chunk each.
pub const MAX_CLASS: u8 = 15;
/// `class` of a chunk holding one large block.
pub const LARGE: u8 = 0;
/// Largest small block.
pub const MAX_SMALL: u64 = 1 << MAX_CLASS;
const CLASSES: usize = (MAX_CLASS - MIN_CLASS + 1) as usize;

const _: () = assert!(NEXT + 8 <= FIRST);
const _: () = assert!(chunk_len(MAX_CLASS).is_multiple_of(CHUNK_SIZE));

/// Bytes of a chunk of small blocks of `class`: 64 KiB, or 16 blocks'
/// worth when that is more (the header line takes one block's room).
pub const fn chunk_len(class: u8) -> u64 {
    let sixteen = 16 << class;
    if sixteen > CHUNK_SIZE {
        sixteen
    } else {
        CHUNK_SIZE
    }
}

/// A block carved from a chunk and not yet published (DRAM only). Give it
/// back with [`Chunks::cancel`] if it will not be published.
#[derive(Debug)]
#[must_use = "a reserved block is published or cancelled"]
pub struct Block {
    off: u64,
}

impl Block {
    /// Its offset in the pool.
    pub fn offset(&self) -> u64 {
        self.off
    }
}

struct Chunk {
    /// `class` field.
    class: u8,
    /// Substrate block size.
    len: u64,
    /// The chunk before it in the list (0: it is the head).
    prev: u64,
    /// Small chunks: bit `i` = block `i` in use (reached, or reserved).
    used: Vec<u64>,
    /// Small chunks: blocks not in use.
    free: u32,
}

impl Chunk {
    fn capacity(&self) -> u32 {
        if self.class == LARGE {
            1
        } else {
            ((self.len - FIRST) >> self.class) as u32
        }
    }
}

/// The DRAM side of the heap: every chunk, and which blocks are in use.
pub struct Chunks {
    head_slot: u64,
    chunks: BTreeMap<u64, Chunk>,
    /// Per small class, the chunks with a free block.
    partial: [BTreeSet<u64>; CLASSES],
}

/// The class (log2 block size) of a request, or [`LARGE`].
pub fn class_of(size: u64) -> u8 {
    if size > MAX_SMALL {
        LARGE
    } else {
        (size
            .max(1 << MIN_CLASS)
            .next_power_of_two()
            .trailing_zeros()) as u8
    }
}

impl Chunks {
    /// Reads the chunk list whose head is in `head_slot`. Every block starts
    /// unused; the tree walk marks what it reaches, then call [`Chunks::settle`].
    pub fn load(pool: &Pool, head_slot: u64) -> Result<Chunks> {
        let mut c = Chunks {
            head_slot,
            chunks: BTreeMap::new(),
            partial: Default::default(),
        };
        let mut prev = 0;
        let mut at = pool.load_u64(head_slot)?;
        while at != 0 {
            let len = pool.block_size(at).map_err(|_| {
                Error::corrupt(at, "radix: chunk list names a block that is not allocated")
            })?;
            if len < CHUNK_SIZE || pool.load_u64(at)? != MAGIC {
                return Err(Error::corrupt(
                    at,
                    "radix: chunk list names a block that is not a chunk",
                ));
            }
            let class = pool.load_u64(at + CLASS)?;
            let class = match u8::try_from(class) {
                Ok(k) if k == LARGE || (MIN_CLASS..=MAX_CLASS).contains(&k) => k,
                _ => {
                    return Err(Error::corrupt(
                        at + CLASS,
                        format!("radix: bad chunk class {class}"),
                    ))
                }
            };
            if c.chunks.contains_key(&at) {
                return Err(Error::corrupt(at, "radix: chunk list has a cycle"));
            }
            let mut ch = Chunk {
                class,
                len,
                prev,
                used: Vec::new(),
                free: 0,
            };
            ch.used = vec![0; ch.capacity().div_ceil(64) as usize];
            c.chunks.insert(at, ch);
            prev = at;
            at = pool.load_u64(at + NEXT)?;
        }
        Ok(c)
    }

    /// The chunk holding `off` and the block index of `off` in it, if `off`
    /// is the start of a block.
    fn locate(&self, off: u64) -> Option<(u64, u32)> {
        let (&start, ch) = self.chunks.range(..=off).next_back()?;
        let rel = off.checked_sub(start + FIRST)?;
        if ch.class == LARGE {
            return (rel == 0).then_some((start, 0));
        }
        let i = rel >> ch.class;
        (rel & ((1 << ch.class) - 1) == 0 && i < u64::from(ch.capacity()))
            .then_some((start, i as u32))
    }

    /// Usable bytes of the block at `off`; an error if `off` is not the
    /// start of a block.
    pub fn block_size(&self, off: u64) -> Result<u64> {
        let (start, _) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: pointer to no block"))?;
        let ch = &self.chunks[&start];
        Ok(if ch.class == LARGE {
            ch.len - FIRST
        } else {
            1 << ch.class
        })
    }

    /// Marks the block at `off` as reached by the tree walk; an error if it
    /// is not a block or was reached before.
    pub fn mark(&mut self, off: u64) -> Result<()> {
        let (start, i) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: pointer to no block"))?;
        let ch = self.chunks.get_mut(&start).expect("located chunk exists");
        let (w, b) = ((i / 64) as usize, i % 64);
        if ch.used[w] & 1 << b != 0 {
            return Err(Error::corrupt(off, "radix: block reached twice"));
        }
        ch.used[w] |= 1 << b;
        Ok(())
    }

    /// After the marking walk: unmarked blocks become free; chunks with no
    /// marked block go back to the substrate.
    pub fn settle(&mut self, pool: &Pool) -> Result<()> {
        let empty: Vec<u64> = self
            .chunks
            .iter()
            .filter(|(_, ch)| ch.used.iter().all(|&w| w == 0))
            .map(|(&o, _)| o)
            .collect();
        for o in empty {
            crate::pm::cases::record(crate::pm::cases::Case::RadixChunkReleasedAtOpen);
            self.unlink(pool, o)?;
        }
        for (&o, ch) in self.chunks.iter_mut() {
            let used: u32 = ch.used.iter().map(|w| w.count_ones()).sum();
            ch.free = ch.capacity() - used;
            if ch.class != LARGE && ch.free > 0 {
                self.partial[usize::from(ch.class - MIN_CLASS)].insert(o);
            }
        }
        Ok(())
    }

    /// Reserves a block of at least `size` bytes. Persist order when a new
    /// chunk is needed: see the module doc (one substrate `activate`).
    pub fn reserve(&mut self, pool: &Pool, size: u64) -> Result<Block> {
        let class = class_of(size);
        if class == LARGE {
            let len = (FIRST + size).div_ceil(CHUNK_SIZE) * CHUNK_SIZE;
            let start = self.new_chunk_or_reclaim(pool, LARGE, len)?;
            let ch = self.chunks.get_mut(&start).expect("new chunk");
            ch.used[0] = 1;
            ch.free = 0;
            return Ok(Block { off: start + FIRST });
        }
        let k = usize::from(class - MIN_CLASS);
        let start = match self.partial[k].first() {
            Some(&s) => s,
            None => {
                let s = self.new_chunk_or_reclaim(pool, class, chunk_len(class))?;
                self.partial[k].insert(s);
                s
            }
        };
        let ch = self.chunks.get_mut(&start).expect("partial chunk exists");
        let (w, word) = ch
            .used
            .iter()
            .enumerate()
            .find(|(_, &w)| w != u64::MAX)
            .expect("a partial chunk has a clear bit");
        let i = w as u32 * 64 + (!word).trailing_zeros();
        debug_assert!(i < ch.capacity());
        ch.used[w] |= 1 << (i % 64);
        ch.free -= 1;
        if ch.free == 0 {
            self.partial[k].remove(&start);
        }
        Ok(Block {
            off: start + FIRST + (u64::from(i) << class),
        })
    }

    /// Gives back a reserved block that was never published.
    pub fn cancel(&mut self, pool: &Pool, b: Block) -> Result<()> {
        self.release(pool, b.off)
    }

    /// Gives back a block the tree no longer reaches. The store that
    /// unlinked it must be durable already (see the module doc).
    pub fn release(&mut self, pool: &Pool, off: u64) -> Result<()> {
        let (start, i) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: release of no block"))?;
        let ch = self.chunks.get_mut(&start).expect("located chunk exists");
        let (w, b) = ((i / 64) as usize, i % 64);
        if ch.used[w] & 1 << b == 0 {
            return Err(Error::corrupt(off, "radix: release of a free block"));
        }
        ch.used[w] &= !(1 << b);
        ch.free += 1;
        if ch.class == LARGE {
            return self.unlink(pool, start);
        }
        self.partial[usize::from(ch.class - MIN_CLASS)].insert(start);
        Ok(())
    }

    /// [`Chunks::new_chunk`]; when the pool is full, first gives the chunks
    /// with no block in use back to the substrate (so that space freed in one
    /// class can serve another) and tries once more.
    fn new_chunk_or_reclaim(&mut self, pool: &Pool, class: u8, len: u64) -> Result<u64> {
        match self.new_chunk(pool, class, len) {
            Err(Error::PoolFull { .. }) if self.release_empty(pool)? > 0 => {
                self.new_chunk(pool, class, len)
            }
            r => r,
        }
    }

    /// Gives every small chunk with no block in use (none reached, none
    /// reserved) back to the substrate; returns how many.
    fn release_empty(&mut self, pool: &Pool) -> Result<usize> {
        let empty: Vec<u64> = self
            .chunks
            .iter()
            .filter(|(_, ch)| ch.class != LARGE && ch.free == ch.capacity())
            .map(|(&o, _)| o)
            .collect();
        for &o in &empty {
            self.unlink(pool, o)?;
        }
        Ok(empty.len())
    }

    /// Takes a new chunk from the substrate and puts it at the head of the
    /// list. Persist order: header (next = old head) flushed; `activate`.
    fn new_chunk(&mut self, pool: &Pool, class: u8, len: u64) -> Result<u64> {
        let r = pool.reserve(len)?;
        let start = r.offset();
        let head = pool.load_u64(self.head_slot)?;
        let mut hdr = [0u8; 24];
        hdr[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        hdr[8..16].copy_from_slice(&u64::from(class).to_le_bytes());
        hdr[16..24].copy_from_slice(&head.to_le_bytes());
        // SAFETY: the block is reserved by us and not yet published; no
        // other thread can reach it.
        unsafe { pool.write_bytes(start, &hdr)? };
        pool.flush(start, 24);
        super::count_step();
        pool.activate(r, self.head_slot)?;
        if let Some(old) = self.chunks.get_mut(&head) {
            old.prev = start;
        }
        let mut ch = Chunk {
            class,
            len: pool.block_size(start)?,
            prev: 0,
            used: Vec::new(),
            free: 0,
        };
        ch.used = vec![0; ch.capacity().div_ceil(64) as usize];
        ch.free = ch.capacity();
        self.chunks.insert(start, ch);
        Ok(start)
    }

    /// Unlinks chunk `start` (none of whose blocks is in use) and frees it.
    /// Persist order: `free_and_store(previous next slot, next)`.
    fn unlink(&mut self, pool: &Pool, start: u64) -> Result<()> {
        let ch = self.chunks.remove(&start).expect("chunk to unlink exists");
        if ch.class != LARGE {
            self.partial[usize::from(ch.class - MIN_CLASS)].remove(&start);
        }
        let next = pool.load_u64(start + NEXT)?;
        let slot = if ch.prev == 0 {
            self.head_slot
        } else {
            ch.prev + NEXT
        };
        super::count_step();
        pool.free_and_store(slot, next)?;
        if let Some(n) = self.chunks.get_mut(&next) {
            n.prev = ch.prev;
        }
        Ok(())
    }

    /// Every chunk's offset (the substrate blocks the tree owns).
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.keys().copied()
    }

    /// Blocks in use per chunk, to compare with a fresh marking walk.
    pub fn used_blocks(&self) -> Vec<(u64, Vec<u64>)> {
        self.chunks
            .iter()
            .map(|(&o, ch)| (o, ch.used.clone()))
            .collect()
    }

    /// A copy with every block unused (for `check`'s marking walk).
    pub fn unmarked(&self) -> Chunks {
        Chunks {
            head_slot: self.head_slot,
            chunks: self
                .chunks
                .iter()
                .map(|(&o, ch)| {
                    (
                        o,
                        Chunk {
                            class: ch.class,
                            len: ch.len,
                            prev: ch.prev,
                            used: vec![0; ch.used.len()],
                            free: 0,
                        },
                    )
                })
                .collect(),
            partial: Default::default(),
        }
    }

    /// DRAM bytes of this map (approximate: the bitmaps and tree nodes).
    pub fn dram_bytes(&self) -> u64 {
        let per_chunk = std::mem::size_of::<Chunk>() as u64 + 8 + 32;
        self.chunks
            .values()
            .map(|ch| per_chunk + 8 * ch.used.len() as u64)
            .sum::<u64>()
            + self
                .partial
                .iter()
                .map(|p| 40 * p.len() as u64)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class_of(1), 6);
        assert_eq!(class_of(64), 6);
        assert_eq!(class_of(65), 7);
        assert_eq!(class_of(4096), 12);
        assert_eq!(class_of(4097), 13);
        assert_eq!(class_of(32768), 15);
        assert_eq!(class_of(32769), LARGE);
        assert_eq!(chunk_len(6), CHUNK_SIZE);
        assert_eq!(chunk_len(12), CHUNK_SIZE);
        assert_eq!(chunk_len(15), 8 * CHUNK_SIZE);
    }

    fn fresh() -> (Pool, Chunks) {
        let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
        let head = pool.root_slot(1).unwrap();
        let c = Chunks::load(&pool, head).unwrap();
        (pool, c)
    }

    #[test]
    fn blocks_are_distinct_line_aligned_and_reused_after_release() {
        let (pool, mut c) = fresh();
        let mut seen = BTreeSet::new();
        let blocks: Vec<Block> = (0..2100).map(|_| c.reserve(&pool, 40).unwrap()).collect();
        for b in &blocks {
            assert_eq!(b.offset() % 64, 0);
            assert!(seen.insert(b.offset()), "block handed out twice");
            assert_eq!(c.block_size(b.offset()).unwrap(), 64);
        }
        // 1023 blocks of 64 B per chunk: three chunks.
        assert_eq!(c.offsets().count(), 3);
        let off = blocks[5].offset();
        c.release(&pool, off).unwrap();
        assert!(c.release(&pool, off).is_err(), "double release is refused");
        assert_eq!(c.reserve(&pool, 64).unwrap().offset(), off);
        assert!(c.block_size(off + 8).is_err());
    }

    #[test]
    fn large_blocks_take_a_chunk_each_and_give_it_back() {
        let (pool, mut c) = fresh();
        let before = pool.usage().bytes_in_use();
        let b = c.reserve(&pool, 100_000).unwrap();
        assert!(c.block_size(b.offset()).unwrap() >= 100_000);
        let small = c.reserve(&pool, 100).unwrap();
        assert_eq!(c.offsets().count(), 2);
        c.cancel(&pool, b).unwrap();
        assert_eq!(c.offsets().count(), 1);
        // The list in PM is the list in DRAM: a reload sees the one chunk.
        let mut again = Chunks::load(&pool, c.head_slot).unwrap();
        assert_eq!(
            again.offsets().collect::<Vec<_>>(),
            c.offsets().collect::<Vec<_>>()
        );
        again.mark(small.offset()).unwrap();
        assert!(
            again.mark(small.offset()).is_err(),
            "a block reached twice is corrupt"
        );
        again.settle(&pool).unwrap();
        assert_eq!(again.offsets().count(), 1);
        // Nothing marked: the chunk goes back to the substrate.
        let mut empty = Chunks::load(&pool, c.head_slot).unwrap();
        empty.settle(&pool).unwrap();
        assert_eq!(empty.offsets().count(), 0);
        assert_eq!(pool.load_u64(c.head_slot).unwrap(), 0);
        assert_eq!(pool.usage().bytes_in_use(), before);
    }
}
