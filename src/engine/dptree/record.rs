//! A record: one key and its value, in a heap block of its own. The buffer tree's log entries point to records, and a
//! merge moves those pointers into the base tree's leaf slots, so a key's
//! bytes are written to PM once (DPTree §2.1 logs the key-value entry
//! itself; here entries are one 8-byte word, docs/design.md §14 "Log
//! entries that point").
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `lens`: key length (bits 0..16), value length (bits 16..48) |
//! | 8 | 8 | `check`: CRC-32C of the global version the record was logged in, the open it was written in (the superblock's `opens`), `lens`, the key and the value (bits 0..32); that open (bits 32..64) |
//! | 16 | key length | key |
//! | 16 + key length | value length | value |
//!
//! A record is written whole and flushed before the log entry that names
//! it, under the same single fence: so an entry can reach PM before its
//! record. Recovery tells such a record by its `check` and ends the log
//! there (the put had not returned). A record is never written again once
//! its entry is durable.
//!
//! The block can hold an older whole record: one whose put a crash cut
//! short before its entry was durable, freed by that recovery and reserved
//! again by the next put in the same global version, even at the same
//! place in the log. So the entry carries the low bits of the open it was
//! written in ([`super::log`]), and the record must have been written in
//! that open too: a record is freed between two puts of one open only at a
//! merge's flip, which changes the global version.

use crate::checksum::crc32c;
use crate::engine::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Bytes before the key.
pub const HEADER: u64 = 16;

/// Bytes a record of this key and value takes.
pub fn size(key_len: usize, value_len: usize) -> u64 {
    HEADER + key_len as u64 + value_len as u64
}

/// The `lens` word.
pub fn lens(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 | (value_len as u64) << 16
}

/// The `check` word of a record logged under global version `gv` in open
/// `opens` (its low 32 bits).
pub fn check(gv: u64, opens: u64, key: &[u8], value: &[u8]) -> u64 {
    let opens = opens & 0xFFFF_FFFF;
    let head = [
        gv.to_le_bytes(),
        opens.to_le_bytes(),
        lens(key.len(), value.len()).to_le_bytes(),
    ]
    .concat();
    u64::from(crc32c(&[&head, key, value])) | opens << 32
}

/// The header of a record of `key` and `value` logged under `gv` in open
/// `opens`.
pub fn header(gv: u64, opens: u64, key: &[u8], value: &[u8]) -> [u8; HEADER as usize] {
    let mut h = [0u8; HEADER as usize];
    h[..8].copy_from_slice(&lens(key.len(), value.len()).to_le_bytes());
    h[8..].copy_from_slice(&check(gv, opens, key, value).to_le_bytes());
    h
}

/// The key and value lengths of the record at `rec`, checked against what
/// a record can hold and against `block` (the bytes of its block). `None`
/// if they do not fit (a record an entry reached PM before).
pub fn read_lens(pool: &Pool, rec: u64, block: u64) -> Result<Option<(usize, usize)>> {
    let w = pool.load_u64(rec)?;
    let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as usize);
    let fits = w >> 48 == 0 && k != 0 && k <= MAX_KEY_LEN && v <= MAX_VALUE_LEN;
    Ok((fits && size(k, v) <= block).then_some((k, v)))
}

/// [`read_lens`], with lengths that do not fit an error.
pub fn lens_of(pool: &Pool, rec: u64, block: u64) -> Result<(usize, usize)> {
    read_lens(pool, rec, block)?.ok_or_else(|| {
        Error::corrupt(
            rec,
            format!("dptree: a record's lengths do not fit its {block}-byte block"),
        )
    })
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

/// The value of the record at `rec`.
///
/// # Safety
/// As [`key`].
pub unsafe fn value(pool: &Pool, rec: u64, key_len: usize, value_len: usize) -> Result<&[u8]> {
    // SAFETY: the caller's guarantee.
    unsafe { pool.bytes(rec + HEADER + key_len as u64, value_len as u64) }
}

/// Whether the record at `rec` (in a block of `block` bytes) is the one a
/// log entry stamped `stamp` names, whole: its lengths fit, it was written
/// in an open whose low bits are `stamp` ([`super::log::STAMP_MASK`]), and
/// its `check` is that of its contents under `gv` and that open.
pub fn is_whole(pool: &Pool, rec: u64, block: u64, gv: u64, stamp: u64) -> Result<bool> {
    let Some((k, v)) = read_lens(pool, rec, block)? else {
        return Ok(false);
    };
    let word = pool.load_u64(rec + 8)?;
    let opens = word >> 32;
    if opens & super::log::STAMP_MASK != stamp {
        return Ok(false);
    }
    // SAFETY: recovery and the check run with the tree held exclusively.
    let (key, value) = unsafe { (key(pool, rec, k)?, value(pool, rec, k, v)?) };
    Ok(word == check(gv, opens, key, value))
}
