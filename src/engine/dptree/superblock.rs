//! The superblock: one 64-byte block that root slot 0 of the pool points to.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | format version (bits 0..8), slots per leaf (bits 8..16) |
//! | 16 | 8 | `gv`: the global version, the number of merges done plus one (never 0). Its low bit picks the active metadata of every leaf and the validity bit of the log's entries (DPTree §2.2) |
//! | 24 | 8 | `head[0]`: the first leaf of version 0's leaf list, or null |
//! | 32 | 8 | `head[1]`: the same for version 1 |
//! | 40 | 8 | `chunks`: the first chunk of the block heap ([`crate::engine::radix::chunks`]), or null; an activation slot |
//! | 48 | 8 | `log`: the first page of the buffer tree's log ([`super::log`]), or null |
//! | 56 | 8 | `opens`: how many times the pool was opened, stored before an open's first write. Records and log entries carry it, so that a record left whole by a put a crash cut short is not taken for a later put's ([`super::record`]) |
//!
//! `gv` is the commit word of a merge: one 8-byte store, flushed and
//! fenced after everything the merge wrote (Algorithm 1, line 25).

use crate::error::{Error, Result};
use crate::pm::Pool;

/// `"PMDPTREE"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMDPTREE");
/// Format version of new pools.
pub const VERSION: u64 = 1;
/// Block size.
pub const SIZE: u64 = 64;
/// Offset of the format word.
pub const FORMAT: u64 = 8;
/// Offset of the global version.
pub const GV: u64 = 16;
/// Offset of `head[0]`; `head[v]` is at `HEAD + 8 v`.
pub const HEAD: u64 = 24;
/// Offset of the chunk list's head.
pub const CHUNKS: u64 = 40;
/// Offset of the log's first page.
pub const LOG: u64 = 48;
/// Offset of the count of opens.
pub const OPENS: u64 = 56;

const _: () = assert!(OPENS + 8 <= SIZE);

/// Offset of `head[v]` in the superblock `sb`.
pub fn head(sb: u64, v: usize) -> u64 {
    sb + HEAD + 8 * v as u64
}

/// Makes the superblock of a tree whose leaves have `slots` slots and
/// publishes it in root slot 0. Persist order: write magic, format,
/// `gv = 1`, null heads, chunk list and log; flush; `activate` into root
/// slot 0 (its first fence orders the flush).
pub fn create(pool: &Pool, slots: u32) -> Result<u64> {
    crate::engine::fptree::superblock::publish(
        pool,
        MAGIC,
        VERSION | u64::from(slots) << 8,
        &[(GV, 1)],
    )
}

/// Finds the superblock and checks it; returns it and the slots per leaf.
/// If creation crashed before publishing it, makes it again with `remake`
/// slots per leaf.
pub fn open(pool: &Pool, remake: u32) -> Result<(u64, u32)> {
    let Some(sb) = crate::engine::fptree::superblock::published(pool, MAGIC, "dptree")? else {
        return Ok((create(pool, remake)?, remake));
    };
    let slots = crate::engine::fptree::superblock::slots_of_format(
        pool,
        sb + FORMAT,
        "dptree",
        VERSION,
        super::leaf::SLOTS,
    )?;
    if pool.load_u64(sb + GV)? == 0 {
        return Err(Error::corrupt(sb + GV, "dptree: the global version is 0"));
    }
    Ok((sb, slots))
}
