//! pmlog's directory and segment headers.
//!
//! Root slot 0 of the pool points to the **directory**, one 64 KiB block:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | [`DIR_MAGIC`] |
//! | 8 + 8 i | 8 | slot `i` (0 .. [`DIR_SLOTS`]): offset of segment `i`, or 0 |
//!
//! Each directory slot is the persistent pointer through which a segment is
//! activated and freed (so allocating and freeing a segment are
//! failure-atomic with publishing or clearing it).
//!
//! A **segment** is one allocator block; its first 64 bytes are a header and
//! the rest is a sequence of records ([`super::record`]):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | [`SEG_MAGIC`] |
//! | 8 | 8 | `nonce`: random, non-zero; part of every record's CRC |
//! | 16 | 48 | zero |

/// "PMLGDIR\0".
pub const DIR_MAGIC: u64 = u64::from_le_bytes(*b"PMLGDIR\0");
/// "PMLGSEG\0".
pub const SEG_MAGIC: u64 = u64::from_le_bytes(*b"PMLGSEG\0");
/// Size of the directory block.
pub const DIR_SIZE: u64 = 64 * 1024;
/// Number of segment slots.
pub const DIR_SLOTS: usize = (DIR_SIZE / 8 - 1) as usize;
/// Bytes of segment header; records start here.
pub const SEG_HEADER: u64 = 64;
/// Default segment size.
pub const SEG_SIZE: u64 = 256 * 1024;

/// Offset of directory slot `i`.
pub fn dir_slot(dir: u64, i: usize) -> u64 {
    dir + 8 + 8 * i as u64
}
