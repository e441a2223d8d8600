//! A pmlog record: one key-value pair appended to a segment.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `seq`: bits 0..63 sequence number (non-zero), bit 63 `DEAD` |
//! | 8 | 8 | `lens`: key length (bits 0..16), value length (bits 16..48) |
//! | 16 | 8 | `check`: CRC-32 (low 32 bits), [`RECORD_MAGIC`] (high 32 bits) |
//! | 24 | key length | key |
//! | 24 + key length | value length | value |
//!
//! The record is padded to a multiple of 8 bytes. The CRC covers the
//! segment's nonce, `seq` without the `DEAD` bit, `lens`, the key and the
//! value: a torn record, or a record left over from an earlier use of the
//! memory, fails it. `DEAD` is set by one 8-byte store when the record is
//! deleted or superseded; it is outside the CRC.

use crate::engine::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::Result;
use crate::pm::Pool;

/// High half of `check`: "PMLG".
pub const RECORD_MAGIC: u32 = 0x504D_4C47;
/// Bytes before the key.
pub const RECORD_HEADER: u64 = 24;
/// The `DEAD` bit of `seq`.
pub const DEAD: u64 = 1 << 63;

/// Bytes a record of this key and value occupies.
pub fn record_size(key_len: usize, value_len: usize) -> u64 {
    (RECORD_HEADER + key_len as u64 + value_len as u64).div_ceil(8) * 8
}

fn lens_word(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 | ((value_len as u64) << 16)
}

fn crc(nonce: u64, seq: u64, lens: u64, key: &[u8], value: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&nonce.to_le_bytes());
    h.update(&(seq & !DEAD).to_le_bytes());
    h.update(&lens.to_le_bytes());
    h.update(key);
    h.update(value);
    h.finalize()
}

/// Encodes a record (without padding).
pub fn encode(nonce: u64, seq: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let lens = lens_word(key.len(), value.len());
    let check = u64::from(crc(nonce, seq, lens, key, value)) | (u64::from(RECORD_MAGIC) << 32);
    let mut b = Vec::with_capacity(record_size(key.len(), value.len()) as usize);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&lens.to_le_bytes());
    b.extend_from_slice(&check.to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

/// A record read back from PM and found valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordInfo {
    /// Sequence number (without `DEAD`).
    pub seq: u64,
    /// Whether `DEAD` is set.
    pub dead: bool,
    /// Key length.
    pub key_len: usize,
    /// Value length.
    pub value_len: usize,
}

impl RecordInfo {
    /// Offset of the key relative to the record.
    pub fn key_offset(&self) -> u64 {
        RECORD_HEADER
    }
    /// Offset of the value relative to the record.
    pub fn value_offset(&self) -> u64 {
        RECORD_HEADER + self.key_len as u64
    }
    /// Padded size.
    pub fn size(&self) -> u64 {
        record_size(self.key_len, self.value_len)
    }
}

/// Reads and validates the record at `off` in a segment that ends at `end`
/// and has `nonce`. `Ok(None)` if there is no valid record there (the end of
/// the segment's log).
///
/// # Safety
/// No other thread may write the record's bytes while this runs.
pub unsafe fn read(pool: &Pool, off: u64, end: u64, nonce: u64) -> Result<Option<RecordInfo>> {
    if off + RECORD_HEADER > end {
        return Ok(None);
    }
    let check = pool.load_u64(off + 16)?;
    if (check >> 32) as u32 != RECORD_MAGIC {
        return Ok(None);
    }
    let seq = pool.load_u64(off)?;
    let lens = pool.load_u64(off + 8)?;
    let key_len = (lens & 0xFFFF) as usize;
    let value_len = ((lens >> 16) & 0xFFFF_FFFF) as usize;
    if lens >> 48 != 0
        || key_len == 0
        || key_len > MAX_KEY_LEN
        || value_len > MAX_VALUE_LEN
        || seq & !DEAD == 0
        || off + record_size(key_len, value_len) > end
    {
        return Ok(None);
    }
    // SAFETY: inside the segment (checked above); the caller guarantees no
    // concurrent writer.
    let body = unsafe { pool.bytes(off + RECORD_HEADER, (key_len + value_len) as u64)? };
    let (key, value) = body.split_at(key_len);
    if crc(nonce, seq, lens, key, value) != check as u32 {
        return Ok(None);
    }
    Ok(Some(RecordInfo {
        seq: seq & !DEAD,
        dead: seq & DEAD != 0,
        key_len,
        value_len,
    }))
}
