//! The HART superblock: root slot 0 points to it (one 4 KiB block).
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | [`MAGIC`] |
//! | 8 | 8 | hash key length `k_h` (§III-A.1) |
//! | 16 | 8 | persist order (0 = `tight`) |
//! | 64 + 8 i | 8 | head of leaf chunk list `i` ([`super::leaf::LEAF_SIZES`]) |
//! | 128 + 8 i | 8 | head of value chunk list `i` ([`VALUE_SIZES`]) |
//! | 1024 + 64 j | 24 | update log line `j` (`paper` order only): `PLeaf`, `POldV`, `PNewV` |
//!
//! The list heads are the activation slots of the first chunk of each list.

/// "HARTSB\0\x01".
pub const MAGIC: u64 = u64::from_le_bytes(*b"HARTSB\x00\x01");
/// Size of the superblock block.
pub const SIZE: u64 = 4096;
/// Offset of the `k_h` field.
pub const K_H: u64 = 8;
/// Offset of the persist-order field.
pub const ORDER: u64 = 16;
/// Offset of the leaf list heads.
pub const LEAF_HEADS: u64 = 64;
/// Offset of the value list heads.
pub const VALUE_HEADS: u64 = 128;
/// Offset of the update-log lines (`paper` persist order only; Algorithm 3's
/// `PLeaf`, `POldV`, `PNewV` at +0, +8, +16 of a line).
pub const UPDATE_LOGS: u64 = 1024;
/// Number of update-log lines.
pub const UPDATE_LOG_LANES: u64 = 16;
/// Value object sizes, one chunk list each (Fig. 3; the paper has 8 and 16).
pub const VALUE_SIZES: [u64; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

const _: () = assert!(LEAF_HEADS + 8 * super::leaf::LEAF_SIZES.len() as u64 <= VALUE_HEADS);
const _: () = assert!(VALUE_HEADS + 8 * VALUE_SIZES.len() as u64 <= UPDATE_LOGS);
const _: () = assert!(UPDATE_LOGS + 64 * UPDATE_LOG_LANES <= SIZE);
const _: () = assert!(VALUE_SIZES[VALUE_SIZES.len() - 1] as usize == super::leaf::MAX_OBJECT);

/// The value list for a value of `len` bytes (1..=MAX_OBJECT).
pub fn value_class(len: usize) -> usize {
    VALUE_SIZES
        .iter()
        .position(|&s| len as u64 <= s)
        .expect("small values fit a class")
}
