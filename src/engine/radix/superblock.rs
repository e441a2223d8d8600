//! The superblock: one 64-byte block that root slot 0 of the pool points to.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | `flavor` (bits 0..8: 1 wort, 2 woart, 3 art-cow), format version (bits 8..16) |
//! | 16 | 8 | `root`: the tree's root (a leaf, a node or null) |
//! | 24 | 8 | `chunks`: the first chunk of the tree's block heap ([`super::chunks`]), or null; an activation slot |
//!
//! Each pool holds one engine (its id is in the pool header), so the radix
//! engines use root slot 0 as the other engines do.

use crate::error::{Error, Result};
use crate::pm::Pool;

/// `"PMRADIX\0"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMRADIX\0");
/// Format version of the radix trees' layout that new pools get: 4 since
/// pointers to leaves carry [`super::nodes::LEAF_TAG`] and pointers to
/// WORT nodes their slot map ([`super::nodes::w16::MAP`]). Version 3 (block
/// sizes between powers of two too, [`super::chunks::SIZES`], and no tag)
/// and version 2 (blocks carved from chunks, [`super::chunks`], in powers
/// of two only) are read and written as they are, so that older builds
/// still open them; version 1 published every block through the substrate
/// allocator and is not read.
pub const VERSION: u64 = 4;
/// The oldest version read.
pub const OLDEST: u64 = 2;
/// Block size.
pub const SIZE: u64 = 64;
/// Offset of the root slot.
pub const ROOT: u64 = 16;
/// Offset of the chunk list's head.
pub const CHUNKS: u64 = 24;

const _: () = assert!(CHUNKS + 8 <= SIZE);

/// Makes the superblock, of format `version` ([`OLDEST`]..=[`VERSION`]),
/// and publishes it in root slot 0. Persist order: write magic, flavor,
/// null root and chunk list; flush; `activate` into root slot 0 (its first
/// fence orders the flush).
pub fn create(pool: &Pool, flavor: u8, version: u64) -> Result<u64> {
    debug_assert!((OLDEST..=VERSION).contains(&version));
    let r = pool.reserve(SIZE)?;
    let sb = r.offset();
    let mut buf = [0u8; SIZE as usize];
    buf[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    buf[8..16].copy_from_slice(&(u64::from(flavor) | version << 8).to_le_bytes());
    // SAFETY: reserved by us and not yet published.
    unsafe { pool.write_bytes(sb, &buf)? };
    pool.flush(sb, SIZE);
    pool.activate(r, pool.root_slot(0)?)?;
    Ok(sb)
}

/// Finds the superblock and checks it; returns it and its format version.
/// If creation crashed before publishing it, makes it again, of format
/// `remake` (the format the creation asked for, when the caller knows it).
pub fn open(pool: &Pool, flavor: u8, name: &str, remake: u64) -> Result<(u64, u64)> {
    let slot = pool.root_slot(0)?;
    let sb = pool.load_u64(slot)?;
    if sb == 0 {
        pool.check_unpublished_root(slot, name)?;
        return Ok((create(pool, flavor, remake)?, remake));
    }
    if pool.block_size(sb).ok() != Some(SIZE) || pool.load_u64(sb)? != MAGIC {
        return Err(Error::corrupt(
            sb,
            format!("{name}: root slot 0 does not point to a radix superblock"),
        ));
    }
    let f = pool.load_u64(sb + 8)?;
    if f & 0xFF == u64::from(flavor) && f >> 8 > VERSION && f >> 8 < 256 {
        return Err(Error::corrupt(
            sb + 8,
            format!(
                "{name}: this pool has format {}, newer than this build reads (formats \
                 {OLDEST} to {VERSION}); open it with a newer pmindex",
                f >> 8
            ),
        ));
    }
    if f & 0xFF != u64::from(flavor) || !(OLDEST..=VERSION).contains(&(f >> 8)) {
        return Err(Error::corrupt(
            sb + 8,
            format!(
                "{name}: superblock says flavor {} version {}, expected {flavor} version {OLDEST} to {VERSION}",
                f & 0xFF,
                f >> 8
            ),
        ));
    }
    Ok((sb, f >> 8))
}
