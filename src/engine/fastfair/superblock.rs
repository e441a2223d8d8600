//! The superblock: one 64-byte block that root slot 0 of the pool points to.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | format version (bits 0..8), entry slots per node (bits 8..16) |
//! | 16 | 8 | `root`: the root node, or null (a tree never written) |
//! | 24 | 8 | `chunks`: the first chunk of the block heap ([`crate::engine::radix::chunks`]), or null; an activation slot |

use crate::engine::fptree;
use crate::error::Result;
use crate::pm::Pool;

/// `"PMFSFAIR"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMFSFAIR");
/// Format version of new pools.
pub const VERSION: u64 = 1;
/// Block size.
pub const SIZE: u64 = 64;
/// Offset of the format word.
pub const FORMAT: u64 = 8;
/// Offset of the root.
pub const ROOT: u64 = 16;
/// Offset of the chunk list's head.
pub const CHUNKS: u64 = 24;

const _: () = assert!(CHUNKS + 8 <= SIZE);

/// Makes the superblock of a tree whose nodes have `slots` entry slots and
/// publishes it in root slot 0. Persist order: write magic, format, null
/// root and chunk list; flush; `activate` into root slot 0 (its first
/// fence orders the flush).
pub fn create(pool: &Pool, slots: u32) -> Result<u64> {
    fptree::superblock::publish(pool, MAGIC, VERSION | u64::from(slots) << 8, &[])
}

/// Finds the superblock and checks it; returns it and the entry slots per
/// node. If creation crashed before publishing it, makes it again with
/// `remake` slots.
pub fn open(pool: &Pool, remake: u32) -> Result<(u64, u32)> {
    let Some(sb) = fptree::superblock::published(pool, MAGIC, "fastfair")? else {
        return Ok((create(pool, remake)?, remake));
    };
    let slots = fptree::superblock::slots_of_format(
        pool,
        sb + FORMAT,
        "fastfair",
        VERSION,
        super::node::SLOTS,
    )?;
    Ok((sb, slots))
}
