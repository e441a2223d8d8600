//! The superblock: one 64-byte block that root slot 0 of the pool points to.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `magic`: [`MAGIC`] |
//! | 8 | 8 | format version (bits 0..8), slots per leaf (bits 8..16) |
//! | 16 | 8 | `head`: the first leaf of the leaf list, or null (empty tree) |
//! | 24 | 8 | `chunks`: the first chunk of the block heap ([`crate::engine::radix::chunks`]), or null; an activation slot |

use crate::error::{Error, Result};
use crate::pm::Pool;

/// `"PMFPTREE"`, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMFPTREE");
/// Format version of new pools.
pub const VERSION: u64 = 1;
/// Block size.
pub const SIZE: u64 = 64;
/// Offset of the format word.
pub const FORMAT: u64 = 8;
/// Offset of the leaf list's head.
pub const HEAD: u64 = 16;
/// Offset of the chunk list's head.
pub const CHUNKS: u64 = 24;

const _: () = assert!(CHUNKS + 8 <= SIZE);

/// Makes the superblock of a tree whose leaves have `slots` slots and
/// publishes it in root slot 0. Persist order: write magic, format, null
/// head and chunk list; flush; `activate` into root slot 0 (its first
/// fence orders the flush).
pub fn create(pool: &Pool, slots: u32) -> Result<u64> {
    publish(pool, MAGIC, VERSION | u64::from(slots) << 8, &[])
}

/// Makes a 64-byte superblock of `magic`, the format word `format` and
/// the words `more` (offset, value), zeros elsewhere, and publishes it in
/// root slot 0 (`fptree`'s, `dptree`'s and `fastfair`'s). Persist order:
/// written, flushed; `activate` into root slot 0 (its first fence orders
/// the flush).
pub(crate) fn publish(pool: &Pool, magic: u64, format: u64, more: &[(u64, u64)]) -> Result<u64> {
    let r = pool.reserve(SIZE)?;
    let sb = r.offset();
    let mut buf = [0u8; SIZE as usize];
    buf[0..8].copy_from_slice(&magic.to_le_bytes());
    buf[FORMAT as usize..][..8].copy_from_slice(&format.to_le_bytes());
    for &(at, v) in more {
        buf[at as usize..][..8].copy_from_slice(&v.to_le_bytes());
    }
    // SAFETY: reserved by us and not yet published.
    unsafe { pool.write_bytes(sb, &buf)? };
    pool.flush(sb, SIZE);
    pool.activate(r, pool.root_slot(0)?)?;
    Ok(sb)
}

/// The superblock that root slot 0 names, checked to be a 64-byte block of
/// `magic` (an `engine` pool's); `None` if creation crashed before it was
/// published (the caller makes it again).
pub(crate) fn published(pool: &Pool, magic: u64, engine: &str) -> Result<Option<u64>> {
    let slot = pool.root_slot(0)?;
    let sb = pool.load_u64(slot)?;
    if sb == 0 {
        pool.check_unpublished_root(slot, engine)?;
        return Ok(None);
    }
    if pool.block_size(sb).ok() != Some(SIZE) || pool.load_u64(sb)? != magic {
        return Err(Error::corrupt(
            sb,
            format!("{engine}: root slot 0 does not point to a {engine} superblock"),
        ));
    }
    Ok(Some(sb))
}

/// Finds the superblock and checks it; returns it and the slots per leaf.
/// If creation crashed before publishing it, makes it again with `remake`
/// slots per leaf.
pub fn open(pool: &Pool, remake: u32) -> Result<(u64, u32)> {
    let Some(sb) = published(pool, MAGIC, "fptree")? else {
        return Ok((create(pool, remake)?, remake));
    };
    let slots = slots_of_format(pool, sb + FORMAT, "fptree", VERSION, super::leaf::SLOTS)?;
    Ok((sb, slots))
}

/// The slots per leaf that the format word at `at` (version in bits 0..8,
/// slots in bits 8..16, the rest zero) of an `engine` pool gives, checked
/// against the build's `version` and the `slots` a leaf may have. A newer
/// version is named as such (`fptree`'s and `dptree`'s superblocks).
pub(crate) fn slots_of_format(
    pool: &Pool,
    at: u64,
    engine: &str,
    version: u64,
    slots: std::ops::RangeInclusive<u32>,
) -> Result<u32> {
    let f = pool.load_u64(at)?;
    let (v, n) = (f & 0xFF, ((f >> 8) & 0xFF) as u32);
    if v > version && f >> 16 == 0 {
        return Err(Error::corrupt(
            at,
            format!(
                "{engine}: this pool has format {v}, newer than this build reads \
                 (format {version}); open it with a newer pmindex"
            ),
        ));
    }
    if v != version || f >> 16 != 0 || !slots.contains(&n) {
        return Err(Error::corrupt(
            at,
            format!(
                "{engine}: bad format word {f:#x} (version {version}, {} to {} slots expected)",
                slots.start(),
                slots.end()
            ),
        ));
    }
    Ok(n)
}
