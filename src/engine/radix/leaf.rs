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

use std::ops::Range;

use crate::engine::ValueBuf;
use crate::error::{Error, Result};
use crate::pm::{Pool, Words};

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

/// Whether the leaf at `leaf` (its word decoded as `w`) holds `key`.
///
/// Compares a word at a time through atomic loads, not through a slice:
/// leaves are line-aligned, so the key's words start at an aligned offset,
/// and the last one ends inside the block (blocks are whole words); its
/// bytes past the key are masked off. So it is also safe on a leaf that a
/// writer is reusing (the optimistic search, `search.rs`).
#[inline(always)]
pub fn key_matches(pm: Words<'_>, leaf: u64, w: LeafWord, key: &[u8]) -> Result<bool> {
    if w.key_len != key.len() {
        return Ok(false);
    }
    let mut at = leaf + HEADER;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        if pm.load(at)? != u64::from_ne_bytes(c.try_into().expect("chunks of 8 bytes")) {
            return Ok(false);
        }
        at += 8;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let (mut bytes, mut mask) = ([0u8; 8], [0u8; 8]);
        bytes[..tail.len()].copy_from_slice(tail);
        mask[..tail.len()].fill(0xFF);
        let mask = u64::from_ne_bytes(mask);
        if pm.load(at)? & mask != u64::from_ne_bytes(bytes) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copies the leaf's value into `buf` a word at a time (as
/// [`key_matches`] reads, so also safe on a leaf being reused); returns
/// where in [`ValueBuf::bytes`] the value lies, or `None` when its words
/// do not fit.
#[inline(always)]
pub fn copy_value(
    pm: Words<'_>,
    leaf: u64,
    w: LeafWord,
    buf: &mut ValueBuf,
) -> Result<Option<Range<usize>>> {
    let start = leaf + HEADER + w.key_len as u64;
    let mut at = start & !7;
    let end = start + w.value_len as u64;
    if !buf.fits((end - at).div_ceil(8)) {
        return Ok(None);
    }
    buf.clear();
    if w.value_len == 0 {
        return Ok(Some(0..0));
    }
    let skip = (start - at) as usize;
    while at < end {
        buf.push(pm.load(at)?);
        at += 8;
    }
    Ok(Some(skip..skip + w.value_len))
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
