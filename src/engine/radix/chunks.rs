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
//! of 64 B to 4 KiB, 16 blocks' worth rounded up to 64 KiB for larger ones
//! (so that each chunk holds at least 15 of them), or whole 64 KiB
//! multiples for one leaf over 32 KiB. Its first line:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | `class`: log2 of the block size (6 ..= 15: 64 B .. 32 KiB); or the block size in bytes for the sizes between two powers of two (192, 384, .. 24,576: three lines times a power of two; format 3 heaps only); or 0: one large block |
//! | 16 | 8 | `next`: the next chunk, or null; an activation slot |
//!
//! **Block sizes** ([`SIZES`]). Format 2 heaps carve powers of two only, so
//! a WORT node (144 bytes) took 256, a NODE16 (168) 256, a leaf of a
//! 256-byte value (272) 512. Format 3 heaps also carve the sizes halfway
//! between (192, 384, 768, ..): the most a block wastes falls from half to
//! a third of it, and every size stays a multiple of the line, so blocks
//! stay line-aligned (docs/design.md §11, "Block sizes between powers of
//! two").
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
//! - **A block never written before** ([`Block::zeroed`]: carved from a
//!   chunk the substrate handed out untouched, at or past the first block
//!   not yet handed out; kept in DRAM, so no chunk loaded at open counts):
//!   its zero lines need no store and no flush, since they are zero in PM
//!   after any crash (the substrate's heap frontier, `pm::alloc`).
//! - **Unlink a block**: the store that makes it unreachable is made
//!   durable (flush, fence) before the block goes back to the DRAM free map,
//!   so it is never handed out while a crash could still bring back the
//!   pointer to it. A small block goes back under the heap's read lock
//!   ([`Chunks::free_shared`]), which changes DRAM only.
//! - **Move a block** (a compaction, `super::compact`): the copy written
//!   and flushed; with up to 63 other moves, **fence**, the pointer stored
//!   and flushed, **fence**; then the old block back to the DRAM map. The chunks being emptied are marked draining
//!   ([`Chunks::begin_evacuation`]) and given back when empty
//!   ([`Chunks::end_evacuation`]).
//! - **Release a large block, an empty chunk at open, the empty chunks
//!   when the pool is full, or the chunks a compaction emptied**:
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use parking_lot::Mutex;

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
/// The small block sizes, smallest first: the powers of two from 64 B to
/// 32 KiB and the sizes halfway between (3 × 2^k, from 192 B), which only
/// format 3 heaps carve. A class is an index into this table.
pub const SIZES: [u64; 18] = [
    64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
    24576, 32768,
];
/// The class of a chunk holding one large block (PM `class` 0).
pub const LARGE: u8 = u8::MAX;
/// Largest small block: larger leaves get a chunk each.
pub const MAX_SMALL: u64 = SIZES[CLASSES - 1];
const CLASSES: usize = SIZES.len();
/// [`Chunks`]' positional map covers chunks within the first this many
/// `CHUNK_SIZE` pieces of the pool (1 TiB; at most 64 MiB of DRAM, and
/// only as far as the last chunk); chunks beyond are found through the
/// ordered map alone.
const BY_PIECE_MAX: u64 = 1 << 24;

const _: () = assert!(NEXT + 8 <= FIRST);
const _: () = {
    let mut i = 0;
    while i < CLASSES {
        assert!(SIZES[i].is_multiple_of(64), "blocks stay line-aligned");
        assert!(i == 0 || SIZES[i] > SIZES[i - 1]);
        i += 1;
    }
};

/// Bytes of a chunk of small blocks of `size`: 64 KiB, or 16 blocks' worth
/// rounded up to 64 KiB when that is more (the header line takes one
/// block's room).
pub const fn chunk_len(size: u64) -> u64 {
    let sixteen = (16 * size).div_ceil(CHUNK_SIZE) * CHUNK_SIZE;
    if sixteen > CHUNK_SIZE {
        sixteen
    } else {
        CHUNK_SIZE
    }
}

/// The `class` word a chunk of `class` has in PM.
fn encode(class: u8) -> u64 {
    if class == LARGE {
        return 0;
    }
    let size = SIZES[usize::from(class)];
    if size.is_power_of_two() {
        u64::from(size.trailing_zeros())
    } else {
        size
    }
}

/// The class of a PM `class` word, if it is one a heap of this format
/// (`between`: format 3) can hold.
fn decode(word: u64, between: bool) -> Option<u8> {
    if word == 0 {
        return Some(LARGE);
    }
    let size = match word {
        6..=15 => 1 << word,
        w if between && !w.is_power_of_two() => w,
        _ => return None,
    };
    SIZES.iter().position(|&s| s == size).map(|i| i as u8)
}

/// A block carved from a chunk and not yet published (DRAM only). Give it
/// back with [`Chunks::cancel`] if it will not be published.
#[derive(Debug)]
#[must_use = "a reserved block is published or cancelled"]
pub struct Block {
    off: u64,
    zeroed: bool,
    /// Its class: an index into [`SIZES`], or [`LARGE`].
    class: u8,
    /// What a pointer to it carries ([`super::nodes::TAGS`]): the leaf tag
    /// for a leaf, or a WORT node's slot map, in a tree of format 4; else 0
    /// ([`Block::tagged`]).
    tag: u64,
}

impl Block {
    /// Its offset in the pool.
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Its class: an index into [`SIZES`], or [`LARGE`].
    pub fn class(&self) -> u8 {
        self.class
    }

    /// The pointer word that publishes it: its offset and its tag.
    pub fn word(&self) -> u64 {
        self.off | self.tag
    }

    /// The block, whose pointers carry `tag` (bits of
    /// [`super::nodes::TAGS`]).
    pub fn tagged(self, tag: u64) -> Block {
        debug_assert_eq!(tag & !super::nodes::TAGS, 0);
        Block { tag, ..self }
    }

    /// The block, untagged and no longer counted as never written (it may
    /// have been written since it was reserved): how a block that was
    /// reserved and not published is kept for the next reservation.
    pub fn kept(self) -> Block {
        Block {
            zeroed: false,
            tag: 0,
            ..self
        }
    }

    /// The block as one word for a thread's cache ([`super::caches`]): its
    /// offset (line-aligned), with bit 0 set if it was never written. Its
    /// class is the cache's list; its tag is 0 (set at publication).
    pub fn ready_word(&self) -> u64 {
        debug_assert_eq!(self.off & 63, 0, "blocks are line-aligned");
        debug_assert_eq!(self.tag, 0, "a reserved block is untagged");
        self.off | u64::from(self.zeroed)
    }

    /// The block that [`Block::ready_word`] gave `w`, of class `class`.
    pub fn from_ready_word(w: u64, class: u8) -> Block {
        Block {
            off: w & !1,
            zeroed: w & 1 == 1,
            class,
            tag: 0,
        }
    }

    /// The block has not been written since the pool was created: it is
    /// zero in PM and in the mapping, and its lines that are left unwritten
    /// stay zero after any crash ([`crate::pm::Reservation::zeroed`]).
    pub fn zeroed(&self) -> bool {
        self.zeroed
    }
}

struct Chunk {
    /// Offset of the chunk (its substrate block).
    start: u64,
    /// Index in [`SIZES`], or [`LARGE`].
    class: u8,
    /// Substrate block size.
    len: u64,
    /// The chunk before it in the list (0: it is the head).
    prev: u64,
    /// The chunk after it in the list (0: it is the last), as its `next`
    /// field in PM says.
    next: u64,
    /// Small chunks: bit `i` = block `i` in use (reached, or reserved).
    /// Atomic, as are `low` and `free`, because a release under the
    /// heap's read lock clears its bit ([`Chunks::free_shared`]); under
    /// the write lock they are read and written plainly (`get_mut`).
    used: Box<[AtomicU64]>,
    /// Small chunks: no word of `used` before this one has a clear bit
    /// (where [`Chunks::reserve`] starts looking).
    low: AtomicUsize,
    /// Small chunks: blocks not in use. Exact only under the write lock:
    /// under the read lock a free clears its bit and then counts it, two
    /// steps, so nothing reads it there.
    free: AtomicU32,
    /// Blocks from this one on were never handed out since the substrate
    /// gave the chunk untouched (DRAM only: the capacity for a chunk loaded
    /// at open, whose blocks may all have been written before).
    zero_from: u32,
    /// Being emptied by a compaction ([`Chunks::begin_evacuation`]): out
    /// of `partial`, so that no block of it is handed out, and kept out
    /// when a block of it is freed.
    draining: bool,
}

impl Chunk {
    fn new(start: u64, class: u8, len: u64, prev: u64, next: u64) -> Chunk {
        let mut ch = Chunk {
            start,
            class,
            len,
            prev,
            next,
            used: Box::new([]),
            low: AtomicUsize::new(0),
            free: AtomicU32::new(0),
            zero_from: 0,
            draining: false,
        };
        ch.used = (0..ch.capacity().div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        ch.zero_from = ch.capacity();
        ch
    }

    fn capacity(&self) -> u32 {
        if self.class == LARGE {
            1
        } else {
            ((self.len - FIRST) / self.size()) as u32
        }
    }

    /// Block size of a small chunk.
    fn size(&self) -> u64 {
        SIZES[usize::from(self.class)]
    }
}

/// Where a block in use is: its chunk's index in the slab and its index
/// in the chunk ([`Chunks::in_use_at`]); valid only while the heap is held
/// as it was when found.
#[derive(Clone, Copy, Debug)]
pub struct At(usize, u32);

/// The DRAM side of the heap: every chunk, and which blocks are in use.
///
/// The chunks live in a slab, so that [`Chunks::reserve`], the hot path,
/// reaches the chunk it carves from by its index (from `partial`) without a
/// search by offset; `index` maps offsets to slab indices for the rest
/// (release, marking, unlinking).
pub struct Chunks {
    head_slot: u64,
    /// Chunk offset → its index in `slab`.
    index: BTreeMap<u64, usize>,
    /// The same map by position, for [`Chunks::locate`]: entry `p` is 1 +
    /// the slab index of the chunk covering offset `p * CHUNK_SIZE`, or 0.
    /// Chunks are substrate blocks of whole `CHUNK_SIZE` pieces, which
    /// start on `CHUNK_SIZE` boundaries, so a block's chunk is one load
    /// here instead of a walk of `index`, which dominated recovery walks
    /// (three lookups per leaf or record; docs/design.md §13, "Recovery").
    /// `index` stays the source of truth: where an entry is 0 (a gap, or a
    /// chunk past [`BY_PIECE_MAX`] pieces) `locate` asks it.
    by_piece: Vec<u32>,
    /// The chunks; `None` where a chunk was unlinked (reused first).
    slab: Vec<Option<Chunk>>,
    /// Indices of the `None`s in `slab`.
    vacant: Vec<usize>,
    /// Per small class, the chunks with a free block, as (offset, slab
    /// index): blocks are carved from the lowest offset first.
    partial: [BTreeSet<(u64, usize)>; CLASSES],
    /// The heap carves the sizes between powers of two too (format 3).
    between: bool,
    /// Small chunks that gained their first free block under the heap's
    /// read lock ([`Chunks::free_shared`]), which cannot change
    /// `partial`: put there by the next reservation, under the write lock
    /// ([`Chunks::absorb_refilled`]).
    refilled: Mutex<Vec<(u64, usize)>>,
    /// A small chunk may have no block in use: one became so (a free, or
    /// a chunk taken) since [`Chunks::release_empty`] last gave every such
    /// chunk back. Only then does it look: a put refused in a full pool
    /// calls it on every try, and its walk over every chunk was most of a
    /// refused put's time (docs/design.md §11, "Moves share their
    /// fences; a futile compaction is not run again; refused puts are
    /// cheap").
    maybe_empty: AtomicBool,
    /// Chunks taken from the substrate since the heap was loaded: a new
    /// chunk's free blocks may take blocks a compaction could not place
    /// before (`super::compact`, "A futile compaction").
    taken: u64,
}

/// The class of a request of `size` bytes: the smallest block that holds
/// it (a power of two unless `between`), or [`LARGE`].
pub fn class_of(size: u64, between: bool) -> u8 {
    if size > MAX_SMALL {
        return LARGE;
    }
    SIZES
        .iter()
        .position(|&s| s >= size && (between || s.is_power_of_two()))
        .expect("MAX_SMALL is a power of two") as u8
}

impl Chunks {
    fn empty(head_slot: u64, between: bool) -> Chunks {
        Chunks {
            head_slot,
            index: BTreeMap::new(),
            by_piece: Vec::new(),
            slab: Vec::new(),
            vacant: Vec::new(),
            partial: Default::default(),
            between,
            refilled: Mutex::new(Vec::new()),
            maybe_empty: AtomicBool::new(true),
            taken: 0,
        }
    }

    /// Reads the chunk list whose head is in `head_slot`, of a heap that
    /// carves the sizes between powers of two too if `between` (format 3).
    /// Every block starts unused; the tree walk marks what it reaches, then
    /// call [`Chunks::settle`].
    pub fn load(pool: &Pool, head_slot: u64, between: bool) -> Result<Chunks> {
        let mut c = Chunks::empty(head_slot, between);
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
            let word = pool.load_u64(at + CLASS)?;
            let Some(class) = decode(word, between) else {
                return Err(Error::corrupt(
                    at + CLASS,
                    format!("radix: bad chunk class {word}"),
                ));
            };
            if c.index.contains_key(&at) {
                return Err(Error::corrupt(at, "radix: chunk list has a cycle"));
            }
            let next = pool.load_u64(at + NEXT)?;
            c.add(Chunk::new(at, class, len, prev, next));
            prev = at;
            at = next;
        }
        Ok(c)
    }

    /// Puts `ch` in the slab and the index; returns its slab index.
    fn add(&mut self, ch: Chunk) -> usize {
        let start = ch.start;
        let i = match self.vacant.pop() {
            Some(i) => {
                self.slab[i] = Some(ch);
                i
            }
            None => {
                self.slab.push(Some(ch));
                self.slab.len() - 1
            }
        };
        self.index.insert(start, i);
        self.cover(i, i as u32 + 1);
        i
    }

    /// Sets the [`Self::by_piece`] entries of the pieces slab chunk `i`
    /// covers to `v`, where it starts on a piece's boundary and ends
    /// within [`BY_PIECE_MAX`] pieces.
    fn cover(&mut self, i: usize, v: u32) {
        let (start, len) = {
            let ch = self.chunk(i);
            (ch.start, ch.len)
        };
        let first = start / CHUNK_SIZE;
        let end = (start + len).div_ceil(CHUNK_SIZE);
        if !start.is_multiple_of(CHUNK_SIZE) || end > BY_PIECE_MAX {
            return;
        }
        let (first, end) = (first as usize, end as usize);
        if self.by_piece.len() < end {
            self.by_piece.resize(end, 0);
        }
        self.by_piece[first..end].fill(v);
    }

    fn chunk(&self, i: usize) -> &Chunk {
        self.slab[i]
            .as_ref()
            .expect("an indexed chunk is in the slab")
    }

    fn chunk_mut(&mut self, i: usize) -> &mut Chunk {
        self.slab[i]
            .as_mut()
            .expect("an indexed chunk is in the slab")
    }

    /// Every chunk, in offset order.
    fn all(&self) -> impl Iterator<Item = &Chunk> + '_ {
        self.index.values().map(|&i| self.chunk(i))
    }

    /// The slab index of the chunk holding `off` and the block index of
    /// `off` in it, if `off` is the start of a block.
    fn locate(&self, off: u64) -> Option<(usize, u32)> {
        match self.by_piece.get((off / CHUNK_SIZE) as usize) {
            Some(&v) if v != 0 => self.block_in(v as usize - 1, off),
            _ => self.locate_in_map(off),
        }
    }

    /// [`Self::locate`] through the ordered map alone: the chunk with the
    /// greatest start at or below `off`.
    fn locate_in_map(&self, off: u64) -> Option<(usize, u32)> {
        let (_, &c) = self.index.range(..=off).next_back()?;
        self.block_in(c, off)
    }

    /// The block index of `off` in slab chunk `c`, if `off` is the start
    /// of one of its blocks.
    fn block_in(&self, c: usize, off: u64) -> Option<(usize, u32)> {
        let ch = self.chunk(c);
        let rel = off.checked_sub(ch.start + FIRST)?;
        if ch.class == LARGE {
            return (rel == 0).then_some((c, 0));
        }
        let i = rel / ch.size();
        (rel % ch.size() == 0 && i < u64::from(ch.capacity())).then_some((c, i as u32))
    }

    /// Usable bytes of the block at `off`; an error if `off` is not the
    /// start of a block.
    pub fn block_size(&self, off: u64) -> Result<u64> {
        let (c, _) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: pointer to no block"))?;
        let ch = self.chunk(c);
        Ok(if ch.class == LARGE {
            ch.len - FIRST
        } else {
            ch.size()
        })
    }

    /// Marks the block at `off` as reached by the tree walk; an error if it
    /// is not a block or was reached before.
    pub fn mark(&mut self, off: u64) -> Result<()> {
        let (c, i) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: pointer to no block"))?;
        let ch = self.chunk_mut(c);
        let (w, b) = ((i / 64) as usize, i % 64);
        let word = ch.used[w].get_mut();
        if *word & 1 << b != 0 {
            return Err(Error::corrupt(off, "radix: block reached twice"));
        }
        *word |= 1 << b;
        Ok(())
    }

    /// After the marking walk: unmarked blocks become free; chunks with no
    /// marked block go back to the substrate.
    pub fn settle(&mut self, pool: &Pool) -> Result<()> {
        let empty: Vec<u64> = self
            .all()
            .filter(|ch| ch.used.iter().all(|w| w.load(Relaxed) == 0))
            .map(|ch| ch.start)
            .collect();
        for o in empty {
            crate::pm::cases::record(crate::pm::cases::Case::RadixChunkReleasedAtOpen);
            self.unlink(pool, o)?;
        }
        for (&o, &c) in &self.index {
            let ch = self.slab[c]
                .as_mut()
                .expect("an indexed chunk is in the slab");
            let used: u32 = ch.used.iter_mut().map(|w| w.get_mut().count_ones()).sum();
            *ch.free.get_mut() = ch.capacity() - used;
            *ch.low.get_mut() = 0;
            if ch.class != LARGE && *ch.free.get_mut() > 0 {
                self.partial[usize::from(ch.class)].insert((o, c));
            }
        }
        Ok(())
    }

    /// Reserves a block of at least `size` bytes. Persist order when a new
    /// chunk is needed: see the module doc (one substrate `activate`).
    pub fn reserve(&mut self, pool: &Pool, size: u64) -> Result<Block> {
        let class = class_of(size, self.between);
        if class == LARGE {
            let len = (FIRST + size).div_ceil(CHUNK_SIZE) * CHUNK_SIZE;
            let c = self.new_chunk_or_reclaim(pool, LARGE, len)?;
            let ch = self.chunk_mut(c);
            *ch.used[0].get_mut() = 1;
            *ch.free.get_mut() = 0;
            // (Leaves are written whole, so no caller uses this yet; kept
            // so that `zeroed` means the same for every block.)
            let zeroed = ch.zero_from == 0;
            ch.zero_from = 1;
            return Ok(Block {
                off: ch.start + FIRST,
                zeroed,
                class: LARGE,
                tag: 0,
            });
        }
        let mut k = usize::from(class);
        self.absorb_refilled();
        let (start, c) = match self.partial[k].first() {
            Some(&s) => s,
            None => match self.new_chunk_or_reclaim(pool, class, chunk_len(SIZES[k])) {
                Ok(c) => {
                    let s = (self.chunk(c).start, c);
                    self.partial[k].insert(s);
                    s
                }
                // No chunk for this class, and none to be had: a free
                // block of the next larger class that has one. Deletes
                // free blocks in the classes of what they unlink (leaves,
                // mostly); without this, a full tree with half its keys
                // deleted took almost no new key (21 of 27,594 in an
                // 8 MiB WORT pool): their new nodes' classes had no room.
                // The block keeps its class (its chunk's): it is freed
                // there, and recovery takes a node in a larger block.
                Err(e @ Error::PoolFull { .. }) => {
                    let Some(j) = (k + 1..CLASSES).find(|&j| !self.partial[j].is_empty()) else {
                        return Err(e);
                    };
                    k = j;
                    *self.partial[j].first().expect("not empty")
                }
                Err(e) => return Err(e),
            },
        };
        let class = u8::try_from(k).expect("fewer than 256 classes");
        let ch = self.chunk_mut(c);
        let low = *ch.low.get_mut();
        let w = low
            + ch.used[low..]
                .iter_mut()
                .position(|w| *w.get_mut() != u64::MAX)
                .expect("a partial chunk has a clear bit");
        *ch.low.get_mut() = w;
        let capacity = ch.capacity();
        let word = ch.used[w].get_mut();
        let i = w as u32 * 64 + (!*word).trailing_zeros();
        debug_assert!(i < capacity);
        *word |= 1 << (i % 64);
        let free = ch.free.get_mut();
        *free -= 1;
        let now_full = *free == 0;
        let zeroed = i >= ch.zero_from;
        if zeroed {
            ch.zero_from = i + 1;
        }
        if now_full {
            self.partial[k].remove(&(start, c));
        }
        Ok(Block {
            off: start + FIRST + u64::from(i) * SIZES[k],
            zeroed,
            class,
            tag: 0,
        })
    }

    /// Gives back a reserved block that was never published.
    pub fn cancel(&mut self, pool: &Pool, b: Block) -> Result<()> {
        self.release(pool, b.off)
    }

    /// Gives back a block the tree no longer reaches. The store that
    /// unlinked it must be durable already (see the module doc). If `off`
    /// is not the start of a block in use: an error, and nothing changes.
    /// A large block's chunk goes back to the substrate (if that fails,
    /// the block is free in DRAM all the same: [`Chunks::unlink`]).
    pub fn release(&mut self, pool: &Pool, off: u64) -> Result<()> {
        let (_, at) = self.in_use_at(off)?;
        self.free(pool, at)
    }

    /// Frees the block at `at`, found in use by [`Chunks::in_use_at`] under
    /// the same hold of the heap (so `at` still names it).
    fn free(&mut self, pool: &Pool, at: At) -> Result<()> {
        let At(c, i) = at;
        let ch = self.chunk_mut(c);
        let (w, b) = ((i / 64) as usize, i % 64);
        let word = ch.used[w].get_mut();
        debug_assert_ne!(*word & 1 << b, 0, "checked by in_use_at");
        *word &= !(1 << b);
        let (start, class, draining) = (ch.start, ch.class, ch.draining);
        let low = ch.low.get_mut();
        *low = (*low).min(w);
        let capacity = ch.capacity();
        let free = ch.free.get_mut();
        *free += 1;
        let first_free = *free == 1;
        if class == LARGE {
            return self.unlink(pool, start);
        }
        if *free == capacity {
            *self.maybe_empty.get_mut() = true;
        }
        // A small chunk is in `partial` exactly while it has a free block
        // (`reserve` takes it out at its last one, and puts a new chunk
        // in), so only its first free block puts it back: no search of the
        // set on every release. (One freed under the read lock is listed in
        // `refilled` first: `absorb_refilled`.)
        if first_free && !draining {
            self.partial[usize::from(class)].insert((start, c));
        }
        Ok(())
    }

    /// The block at `off`, checked as [`Chunks::release`] checks it (the
    /// start of a block, and in use), without changing anything, and where
    /// it is: for a thread that keeps it as a reserved block that may have
    /// been written, or for [`Chunks::free_shared`] under the same hold of
    /// the read lock ([`super::caches::Caches::release`]). A large block is
    /// returned too; only the write lock frees those.
    pub fn in_use_at(&self, off: u64) -> Result<(Block, At)> {
        let (c, i) = self
            .locate(off)
            .ok_or_else(|| Error::corrupt(off, "radix: release of no block"))?;
        let ch = self.chunk(c);
        let (w, b) = ((i / 64) as usize, i % 64);
        if ch.used[w].load(Relaxed) & 1 << b == 0 {
            return Err(Error::corrupt(off, "radix: release of a free block"));
        }
        let block = Block {
            off,
            zeroed: false,
            class: ch.class,
            tag: 0,
        };
        Ok((block, At(c, i)))
    }

    /// Frees the small block at `at`, found in use by [`Chunks::in_use_at`]
    /// under the same hold of the heap's *read* lock, so that threads free
    /// at once (a run of deletes frees nearly every block it unlinks; under
    /// the write lock, 16 threads deleted at 0.5-0.7x one thread's rate:
    /// docs/design.md §11, "Frees under the heap's read lock"). Its bit is
    /// cleared with one atomic step, which also finds a second release of
    /// it exactly (an error, and nothing changes); a chunk whose first
    /// free block this is goes to `refilled`, for the next reservation to
    /// put in `partial`. A large block is the caller's to free under the
    /// write lock ([`Chunks::release`]), since freeing it unlinks its chunk.
    pub fn free_shared(&self, at: At, off: u64) -> Result<()> {
        let At(c, i) = at;
        let ch = self.chunk(c);
        if ch.class == LARGE {
            return Err(Error::InvalidArgument(
                "radix: a large block is freed under the heap's write lock (a bug)".into(),
            ));
        }
        let (w, b) = ((i / 64) as usize, i % 64);
        let was = ch.used[w].fetch_and(!(1 << b), Relaxed);
        if was & 1 << b == 0 {
            return Err(Error::corrupt(off, "radix: release of a free block"));
        }
        ch.low.fetch_min(w, Relaxed);
        let was_free = ch.free.fetch_add(1, Relaxed);
        if was_free == 0 {
            self.refilled.lock().push((ch.start, c));
        }
        if was_free + 1 == ch.capacity() {
            // Read under the write lock, which orders it after this hold.
            self.maybe_empty.store(true, Relaxed);
        }
        Ok(())
    }

    /// Puts the chunks that [`Chunks::free_shared`] refilled in `partial`
    /// (those still in the map with a free block: one unlinked since, or
    /// whose block was taken again, is skipped).
    fn absorb_refilled(&mut self) {
        let refilled = std::mem::take(self.refilled.get_mut());
        for (start, c) in refilled {
            if self.index.get(&start) != Some(&c) {
                continue;
            }
            let ch = self.chunk_mut(c);
            if *ch.free.get_mut() > 0 && !ch.draining {
                let class = usize::from(ch.class);
                self.partial[class].insert((start, c));
            }
        }
    }

    /// [`Chunks::new_chunk`]; when the pool is full, first gives the chunks
    /// with no block in use back to the substrate (so that space freed in one
    /// class can serve another) and tries once more.
    fn new_chunk_or_reclaim(&mut self, pool: &Pool, class: u8, len: u64) -> Result<usize> {
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
        self.absorb_refilled();
        if !*self.maybe_empty.get_mut() {
            return Ok(0);
        }
        let empty: Vec<u64> = self
            .all()
            .filter(|ch| ch.class != LARGE && ch.free.load(Relaxed) == ch.capacity())
            .map(|ch| ch.start)
            .collect();
        for &o in &empty {
            self.unlink(pool, o)?;
        }
        // (If an unlink failed, its chunk is still empty and the mark
        // stays.)
        *self.maybe_empty.get_mut() = false;
        Ok(empty.len())
    }

    /// Takes a new chunk from the substrate and puts it at the head of the
    /// list; returns its slab index. Persist order: header (next = old
    /// head) flushed; `activate`.
    fn new_chunk(&mut self, pool: &Pool, class: u8, len: u64) -> Result<usize> {
        let r = pool.reserve(len)?;
        let start = r.offset();
        let untouched = r.zeroed();
        let head = pool.load_u64(self.head_slot)?;
        let mut hdr = [0u8; 24];
        hdr[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        hdr[8..16].copy_from_slice(&encode(class).to_le_bytes());
        hdr[16..24].copy_from_slice(&head.to_le_bytes());
        // SAFETY: the block is reserved by us and not yet published; no
        // other thread can reach it.
        unsafe { pool.write_bytes(start, &hdr)? };
        pool.flush(start, 24);
        super::count_step();
        pool.activate(r, self.head_slot)?;
        if let Some(&h) = self.index.get(&head) {
            self.chunk_mut(h).prev = start;
        }
        let mut ch = Chunk::new(start, class, pool.block_size(start)?, 0, head);
        *ch.free.get_mut() = ch.capacity();
        if untouched {
            ch.zero_from = 0;
        }
        self.taken += 1;
        // Empty until its reservation takes a block (always at once).
        *self.maybe_empty.get_mut() = true;
        Ok(self.add(ch))
    }

    /// How many chunks the heap has taken from the substrate since it was
    /// loaded.
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// Unlinks chunk `start` (none of whose blocks is in use) and frees it.
    /// Persist order: `free_and_store(previous next slot, next)`.
    ///
    /// The slot must hold `start`: the substrate frees whatever block the
    /// slot holds, so in a damaged list (a `next` or the head rewritten)
    /// it would free another, live chunk; and `next` must be the chunk that
    /// follows in the DRAM map. Such a list is an error, and the chunk
    /// stays in the DRAM map (empty), as it does when the substrate's step
    /// fails; the DRAM map forgets it only once PM has.
    fn unlink(&mut self, pool: &Pool, start: u64) -> Result<()> {
        self.absorb_refilled();
        let c = *self
            .index
            .get(&start)
            .ok_or_else(|| Error::corrupt(start, "radix: unlink of no chunk"))?;
        let (prev, expected_next) = {
            let ch = self.chunk(c);
            (ch.prev, ch.next)
        };
        let slot = if prev == 0 {
            self.head_slot
        } else {
            prev + NEXT
        };
        if pool.load_u64(slot)? != start {
            return Err(Error::corrupt(
                slot,
                "radix: chunk list slot does not hold the chunk to unlink",
            ));
        }
        let next = pool.load_u64(start + NEXT)?;
        // The successor must be the one the DRAM map has: a damaged `next`
        // would splice a stranger into the list, or cut the list short.
        if next != expected_next {
            return Err(Error::corrupt(
                start + NEXT,
                "radix: chunk list's next is not the chunk that follows",
            ));
        }
        super::count_step();
        pool.free_and_store(slot, next)?;
        self.cover(c, 0);
        self.index.remove(&start);
        if let Some(ch) = self.slab[c].take() {
            self.vacant.push(c);
            if ch.class != LARGE {
                self.partial[usize::from(ch.class)].remove(&(start, c));
            }
        }
        if let Some(&n) = self.index.get(&next) {
            self.chunk_mut(n).prev = prev;
        }
        if let Some(&p) = self.index.get(&prev) {
            self.chunk_mut(p).next = next;
        }
        Ok(())
    }

    /// Chooses chunks for a compaction to empty (docs/design.md §11, "A
    /// full heap moves blocks to empty chunks"): per small class, the
    /// chunks with the fewest blocks in use, fewest first, as long as the
    /// blocks in use of those chosen fit in the free blocks of the class's
    /// other chunks and all of them come to at most `max_move` bytes.
    /// Chunks with nothing in use are taken too. The chosen ones leave
    /// `partial` and are marked draining until [`Self::end_evacuation`];
    /// returns their offsets (none: nothing to gain, as in a pool whose
    /// chunks are all full) and how many blocks in use they hold.
    pub fn begin_evacuation(&mut self, max_move: u64) -> (Vec<u64>, u64) {
        self.absorb_refilled();
        let mut by_class: Vec<Vec<(u32, u32, u64, usize)>> = vec![Vec::new(); CLASSES];
        for (&start, &c) in &self.index {
            let ch = self.chunk(c);
            if ch.class == LARGE || ch.draining {
                continue;
            }
            let free = ch.free.load(Relaxed);
            by_class[usize::from(ch.class)].push((ch.capacity() - free, free, start, c));
        }
        let mut chosen = Vec::new();
        let (mut moved, mut blocks) = (0u64, 0u64);
        for (k, mut chunks) in by_class.into_iter().enumerate() {
            let mut available: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
            let mut required = 0u64;
            chunks.sort_unstable();
            for (live, free, start, c) in chunks {
                let (live, free) = (u64::from(live), u64::from(free));
                let bytes = live * SIZES[k];
                if free == 0
                    || required + live > available - free
                    || (live > 0 && moved + bytes > max_move)
                {
                    break;
                }
                required += live;
                available -= free;
                moved += bytes;
                blocks += live;
                self.partial[k].remove(&(start, c));
                self.chunk_mut(c).draining = true;
                chosen.push(start);
            }
        }
        (chosen, blocks)
    }

    /// Whether the block at `off` is in a chunk being emptied.
    pub fn draining(&self, off: u64) -> bool {
        self.locate(off)
            .is_some_and(|(c, _)| self.chunk(c).draining)
    }

    /// Ends a compaction: each chunk of `chosen` (from
    /// [`Self::begin_evacuation`]) with no block in use goes back to the
    /// substrate (persist order: [`Self::unlink`]); one that still has
    /// some (a block the walk could not move: the pool gave no block for
    /// it) stops draining and takes blocks again. Returns how many went
    /// back.
    pub fn end_evacuation(&mut self, pool: &Pool, chosen: &[u64]) -> Result<usize> {
        let mut released = 0;
        let mut first_error = None;
        for &start in chosen {
            // `reserve` may have given an emptied one back already
            // (`release_empty`), and even taken its room again for a new
            // chunk, which is not draining.
            let Some(&c) = self.index.get(&start).filter(|&&c| self.chunk(c).draining) else {
                released += 1;
                continue;
            };
            let ch = self.chunk_mut(c);
            ch.draining = false;
            let free = *ch.free.get_mut();
            if free == ch.capacity() {
                match self.unlink(pool, start) {
                    Ok(()) => released += 1,
                    Err(e) => {
                        first_error.get_or_insert(e);
                        self.partial[usize::from(self.chunk(c).class)].insert((start, c));
                    }
                }
            } else if free > 0 {
                let class = usize::from(ch.class);
                self.partial[class].insert((start, c));
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }

    /// The heap carves the sizes between powers of two too (format 3).
    pub fn between(&self) -> bool {
        self.between
    }

    /// Every chunk's offset (the substrate blocks the tree owns).
    pub fn offsets(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// Blocks in use per chunk, to compare with a fresh marking walk.
    pub fn used_blocks(&self) -> Vec<(u64, Vec<u64>)> {
        self.all()
            .map(|ch| (ch.start, ch.used.iter().map(|w| w.load(Relaxed)).collect()))
            .collect()
    }

    /// The first chunk whose blocks in use differ from those of `reached`
    /// (a copy from [`Chunks::unmarked`] that a check's walk marked), and
    /// whether some block in use there was not reached (a leak) rather than
    /// a reached block free.
    pub fn first_difference(&self, reached: &Chunks) -> Option<(u64, bool)> {
        self.used_blocks()
            .into_iter()
            .zip(reached.used_blocks())
            .find(|((_, have), (_, r))| have != r)
            .map(|((o, have), (_, r))| (o, have.iter().zip(&r).any(|(a, b)| a & !b != 0)))
    }

    /// The last step of the check of `engine`'s tree, whose blocks are its
    /// superblock `sb` and this heap's: the blocks in use against those
    /// the check's walk marked in `reached` (what `by` reaches: "the leaf
    /// list", "the tree"), then the report of `keys` keys. `fptree`'s,
    /// `dptree`'s, `fastfair`'s and `art-bplus`'s.
    pub fn check_report(
        &self,
        reached: &Chunks,
        engine: &str,
        by: &str,
        sb: u64,
        keys: u64,
    ) -> Result<crate::engine::CheckReport> {
        if let Some((o, leak)) = self.first_difference(reached) {
            return Err(Error::CheckFailed(format!(
                "{engine}: chunk {o:#x}: {}",
                if leak {
                    format!("a block in use is not reached by {by} (leak)")
                } else {
                    format!("a block {by} reaches is free in the DRAM map")
                }
            )));
        }
        let mut blocks = vec![sb];
        blocks.extend(self.offsets());
        Ok(crate::engine::CheckReport {
            keys,
            referenced_blocks: blocks,
        })
    }

    /// A copy with every block unused (for `check`'s marking walk).
    pub fn unmarked(&self) -> Chunks {
        let mut c = Chunks::empty(self.head_slot, self.between);
        for ch in self.all() {
            c.add(Chunk::new(ch.start, ch.class, ch.len, ch.prev, ch.next));
        }
        c
    }

    /// DRAM bytes of this map (approximate: the bitmaps and tree nodes).
    pub fn dram_bytes(&self) -> u64 {
        let per_chunk = std::mem::size_of::<Option<Chunk>>() as u64 + 16 + 32;
        self.all()
            .map(|ch| per_chunk + 8 * ch.used.len() as u64)
            .sum::<u64>()
            + 16 * self.refilled.lock().capacity() as u64
            + 4 * self.by_piece.capacity() as u64
            + self
                .partial
                .iter()
                .map(|p| 48 * p.len() as u64)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests;
