//! A record: one key and its value, in a heap block of its own, which a
//! leaf slot points to (FPTree's leaves hold pointers to variable-size
//! keys, Oukid et al. §4.2; the value sits beside its key here).
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `lens`: key length (bits 0..16), value length (bits 16..48) |
//! | 8 | key length | key |
//! | 8 + key length | value length | value |
//!
//! A record is written whole and flushed before the store that makes it
//! reachable, and never written again: an update writes a new record.

use crate::engine::radix::chunks::Chunks;
use crate::engine::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Bytes before the key.
pub const HEADER: u64 = 8;

/// Bytes a record of this key and value takes.
pub fn size(key_len: usize, value_len: usize) -> u64 {
    HEADER + key_len as u64 + value_len as u64
}

/// The `lens` word.
pub fn lens(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 | (value_len as u64) << 16
}

/// Writes a record of `key` and `value` into a new block of `heap` and
/// flushes it (not fenced: the caller's next fence orders it before the
/// store that makes it reachable); returns its offset. A failed write
/// gives the block back.
pub fn write(pool: &Pool, heap: &mut Chunks, key: &[u8], value: &[u8]) -> Result<u64> {
    let b = heap.reserve(pool, size(key.len(), value.len()))?;
    let rec = b.offset();
    // SAFETY: the block is reserved by us and unreachable; writers hold
    // the tree exclusively.
    let written = unsafe {
        pool.write_bytes(rec, &lens(key.len(), value.len()).to_le_bytes())
            .and_then(|()| pool.write_bytes(rec + HEADER, key))
            .and_then(|()| pool.write_bytes(rec + HEADER + key.len() as u64, value))
    };
    if let Err(e) = written {
        heap.cancel(pool, b)?;
        return Err(e);
    }
    pool.flush(rec, size(key.len(), value.len()));
    Ok(rec)
}

/// The key and value lengths of the record at `rec`, checked against what
/// a record can hold and against `block` (the bytes of its block).
pub fn read_lens(pool: &Pool, rec: u64, block: u64) -> Result<(usize, usize)> {
    let w = pool.load_u64(rec)?;
    let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
    if w >> 48 != 0 || k == 0 || k > MAX_KEY_LEN || v > MAX_VALUE_LEN || size(k, v) > block {
        return Err(Error::corrupt(
            rec,
            format!("fptree: record lengths word {w:#x} does not fit its {block}-byte block"),
        ));
    }
    Ok((k, v))
}

/// The key of the record at `rec`, of `key_len` bytes.
///
/// # Safety
/// No thread writes the record while the slice lives (records are never
/// written once reachable; writers hold the tree exclusively).
pub unsafe fn key(pool: &Pool, rec: u64, key_len: usize) -> Result<&[u8]> {
    // SAFETY: the caller's guarantee.
    unsafe { pool.bytes(rec + HEADER, key_len as u64) }
}
