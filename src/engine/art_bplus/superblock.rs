//! The superblock: one 64-byte block that root slot 0 of the pool points to.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | format version (bits 0..8), slots per NVNode (bits 8..16, always [`super::SLOTS`]) |
//! | 16 | 8 | `head`: the first NVNode of the leaf list, or null (empty tree) |
//! | 24 | 8 | `chunks`: the first chunk of the block heap ([`crate::engine::radix::chunks`]), or null; an activation slot |
//!
//! `fptree`'s superblock has the same fields; its code publishes and finds
//! this one too.

use super::SLOTS;
use crate::engine::fptree::superblock::{publish, published, slots_of_format};
use crate::error::Result;
use crate::pm::Pool;

/// `"PMARTBPL"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMARTBPL");
/// Format version of new pools.
pub const VERSION: u64 = 1;
/// Offset of the format word.
pub const FORMAT: u64 = 8;
/// Offset of the leaf list's head.
pub const HEAD: u64 = 16;
/// Offset of the chunk list's head.
pub const CHUNKS: u64 = 24;

/// Makes the superblock and publishes it in root slot 0 (persist order:
/// [`publish`]'s).
pub fn create(pool: &Pool) -> Result<u64> {
    publish(pool, MAGIC, VERSION | u64::from(SLOTS) << 8, &[])
}

/// Finds the superblock and checks it; makes it again if creation crashed
/// before publishing it.
pub fn open(pool: &Pool) -> Result<u64> {
    let Some(sb) = published(pool, MAGIC, "art-bplus")? else {
        return create(pool);
    };
    slots_of_format(pool, sb + FORMAT, "art-bplus", VERSION, SLOTS..=SLOTS)?;
    Ok(sb)
}
