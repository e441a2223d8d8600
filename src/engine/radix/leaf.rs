//! A leaf: the whole key and its value, in one allocator block.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `word`: kind [`LEAF_KIND`] (bits 0..4), key length (bits 8..16), value length (bits 32..64) |
//! | 8 | key length | the key |
//! | 8 + key length | value length | the value |
//!
//! A leaf is written whole into a reserved block, flushed, and published by
//! the allocator's `activate` (or `replace`) into the slot that points to
//! it; it is never changed in place afterwards. An update writes a new leaf
//! and `replace`s the old one in the same slot (one failure-atomic step).
//!
//! **Decision: the value lives in the leaf's block**, not behind a pointer
//! to a separate block as in the paper. With reserve/activate, one block is
//! published failure-atomically with one slot store. A leaf and a separate
//! value block would be two activations: a crash between them leaks the
//! value (activated into a leaf that is still only reserved) or publishes a
//! leaf without its value. With one block, an insert commits with the one
//! 8-byte store of the leaf's offset (inside `activate`), and an 8-byte key
//! with an 8-byte value is one 64-byte line.

use crate::error::{Error, Result};
use crate::pm::{Pool, Reservation};

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

/// Reserves a block and writes a leaf into it, then flushes it (no fence:
/// the `activate` that publishes it fences first). With `skip_flush` (a
/// fault-injection switch) the flush is left out.
pub fn write(pool: &Pool, key: &[u8], value: &[u8], skip_flush: bool) -> Result<Reservation> {
    let w = LeafWord {
        key_len: key.len(),
        value_len: value.len(),
    };
    let r = pool.reserve(w.size())?;
    let mut buf = Vec::with_capacity(w.size() as usize);
    buf.extend_from_slice(&w.encode().to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
    // SAFETY: the block is reserved by us and not yet published; no other
    // thread can reach it.
    unsafe { pool.write_bytes(r.offset(), &buf)? };
    if !skip_flush {
        pool.flush(r.offset(), w.size());
    }
    Ok(r)
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
