//! A leaf: the whole key and its value, in one allocator block.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `word`: kind [`LEAF_KIND`] (bits 0..4), key length (bits 8..16), value length (bits 32..64) |
//! | 8 | key length | the key |
//! | 8 + key length | value length | the value |
//!
//! A leaf is written whole into a reserved block, flushed, and published by
//! the 8-byte store of its offset into the slot that points to it (after a
//! fence); it is never changed in place afterwards. An update writes a new
//! leaf and stores it over the old one in the same slot.
//!
//! **Decision: the value lives in the leaf's block**, not behind a pointer
//! to a separate block as in the paper: one block to write, flush and
//! publish, and an 8-byte key with an 8-byte value is one 64-byte line (one
//! flush where the paper's layout needs two).

use crate::error::{Error, Result};
use crate::pm::Pool;

/// Kind of a leaf (low 4 bits of its first word).
pub const LEAF_KIND: u8 = 1;
/// Bytes before the key.
pub const HEADER: u64 = 8;

/// A decoded leaf word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafWord {
    /// Key length.
    pub key_len: usize,
    /// Value length.
    pub value_len: usize,
}

impl LeafWord {
    /// Encodes the word.
    pub fn encode(self) -> u64 {
        u64::from(LEAF_KIND) | (self.key_len as u64) << 8 | (self.value_len as u64) << 32
    }

    /// Decodes a leaf word; an error if it is not one.
    pub fn decode(off: u64, w: u64) -> Result<LeafWord> {
        let key_len = ((w >> 8) & 0xFF) as usize;
        if w & 0xF != u64::from(LEAF_KIND) || key_len == 0 || w & 0xFFFF_00F0 != 0 {
            return Err(Error::corrupt(off, format!("radix: bad leaf word {w:#x}")));
        }
        Ok(LeafWord {
            key_len,
            value_len: (w >> 32) as usize,
        })
    }

    /// Block bytes the leaf needs.
    pub fn size(self) -> u64 {
        HEADER + self.key_len as u64 + self.value_len as u64
    }
}

/// Writes a leaf into the reserved block at `off` (of at least
/// [`LeafWord::size`] bytes), then flushes it (no fence: the store that
/// publishes it fences first). With `skip_flush` (a fault-injection switch)
/// the flush is left out.
///
/// # Safety
/// The block is reserved by the caller and not yet published: nothing else
/// reads or writes it.
pub unsafe fn write(
    pool: &Pool,
    off: u64,
    key: &[u8],
    value: &[u8],
    skip_flush: bool,
) -> Result<()> {
    let w = LeafWord {
        key_len: key.len(),
        value_len: value.len(),
    };
    // Written in place, part by part: the block is not published yet, so
    // the order of these stores does not matter (the flush below makes all
    // of them durable before the publishing store).
    // SAFETY: forwarded from the caller (the block is ours alone).
    unsafe {
        pool.write_bytes(off, &w.encode().to_le_bytes())?;
        pool.write_bytes(off + HEADER, key)?;
        pool.write_bytes(off + HEADER + key.len() as u64, value)?;
    }
    if !skip_flush {
        pool.flush(off, w.size());
    }
    Ok(())
}

/// Reads a leaf's word (and counts the line read).
pub fn word(pool: &Pool, leaf: u64) -> Result<LeafWord> {
    pool.touch(leaf, 8);
    LeafWord::decode(leaf, pool.load_u64(leaf)?)
}

/// Borrows a leaf's key.
///
/// # Safety
/// No writer may change or free the leaf while the slice lives (the tree's
/// lock guarantees it; leaves are never written after publication).
pub unsafe fn key(pool: &Pool, leaf: u64, w: LeafWord) -> Result<&[u8]> {
    pool.touch(leaf + HEADER, w.key_len as u64);
    // SAFETY: forwarded from the caller.
    unsafe { pool.bytes(leaf + HEADER, w.key_len as u64) }
}

/// Borrows a leaf's value.
///
/// # Safety
/// As for [`key`].
pub unsafe fn value(pool: &Pool, leaf: u64, w: LeafWord) -> Result<&[u8]> {
    let off = leaf + HEADER + w.key_len as u64;
    pool.touch(off, w.value_len as u64);
    // SAFETY: forwarded from the caller.
    unsafe { pool.bytes(off, w.value_len as u64) }
}

/// The leaf's key, copied.
pub(super) fn key_vec(pool: &Pool, leaf: u64) -> Result<Vec<u8>> {
    let w = word(pool, leaf)?;
    // SAFETY: the caller holds the tree (every caller is a tree method under
    // its lock), so the leaf is not freed while we copy.
    Ok(unsafe { key(pool, leaf, w)? }.to_vec())
}
