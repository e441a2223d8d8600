//! The HART superblock: root slot 0 points to it (one 4 KiB block).
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | [`MAGIC`] |
//! | 8 | 8 | hash key length `k_h` (§III-A.1) |
//! | 16 | 8 | persist order (0 = `tight`) |
//! | 24 | 8 | allocation stripes ([`STRIPES`]) |
//! | 1024 + 64 j | 24 | update log line `j` (`paper` order only): `PLeaf`, `POldV`, `PNewV` |
//! | 2048 + 128 s + 8 i | 8 | stripe `s`: head of leaf chunk list `i` ([`super::leaf::LEAF_SIZES`]) |
//! | 2048 + 128 s + 32 + 8 i | 8 | stripe `s`: head of value chunk list `i` ([`VALUE_SIZES`]) |
//!
//! The list heads are the activation slots of the first chunk of each list.
//!
//! # Stripes
//! The EPallocator's chunk lists are kept [`STRIPES`] times over (the paper
//! has one list per object type). A leaf's value objects come from the
//! leaf's own stripe, so recovery can rebuild the stripes' free state in
//! parallel: a stripe's leaves only ever point to its own value objects.
//! - **Formats 5 and 6:** a new leaf comes from the inserting thread's stripe
//!   (threads take stripes in turn), so up to [`STRIPES`] inserting threads
//!   never share a list's lock, its DRAM state or its counters: when the
//!   stripe was the hash key's, two threads met on every stripe and its
//!   lines moved between their cores on every insert (docs/design.md §7,
//!   "Stripes by thread"). The ART entry of a leaf carries its stripe
//!   ([`super::LeafRef`]); updates and deletes use that one.
//! - **Formats 3 and 4:** every leaf of one hash key (one ART) comes from
//!   the stripe its hash chooses, and recovery refuses a leaf found in
//!   another. This version keeps that rule in such pools, so the versions
//!   that wrote them still read them.
//!
//! # Value objects of a larger class (format 6)
//! A value object normally comes from the list of its value's class
//! ([`value_class`]). In format 6, when that list has no free object and
//! the pool gives no new chunk, it may come from a larger class's list of
//! the same stripe, so that the room that deletes of large values make in
//! a full pool serves smaller values (docs/design.md §7, "A full pool").
//! Recovery then accepts a slot whose object is in the list of its class
//! or of any larger class; format 5 and older accept only the value's own
//! class, and a version that reads only those refuses a format 6 pool
//! rather than drop such values as torn.
//!
//! Version history: format 1 (magic `...\x01`) had one list per object type
//! at offsets 64 and 128; format 2 kept values of 1..=8 bytes in value
//! objects (format 3 keeps them inline in the leaf's slot). Both are refused
//! with a clear error. Format 3 differs from format 4 only in the slot
//! checksum (CRC-32 instead of CRC-32C, [`super::leaf::Checksum`]); format 5
//! differs from format 4 only in where new leaves come from (above), and
//! format 6 from format 5 only in where value objects may come from
//! (above). Each is read and written as it is, never converted.

/// "HARTSB\0\x06": format 6, what new pools get.
pub const MAGIC: u64 = u64::from_le_bytes(*b"HARTSB\x00\x06");
/// The format new pools get ([`MAGIC`]).
pub const FORMAT: u8 = 6;
const _: () = assert!(MAGIC >> 56 == FORMAT as u64);
/// Format 5: as format 6, but every value object in its value's class.
pub const MAGIC_5: u64 = u64::from_le_bytes(*b"HARTSB\x00\x05");
/// Format 4: CRC-32C slots, every leaf in its hash key's stripe.
pub const MAGIC_4: u64 = u64::from_le_bytes(*b"HARTSB\x00\x04");
/// Format 3: slots carry CRC-32 (IEEE), every leaf in its hash key's stripe.
pub const MAGIC_3: u64 = u64::from_le_bytes(*b"HARTSB\x00\x03");

/// How a format this version reads keeps its leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// The slots' checksum.
    pub checksum: super::leaf::Checksum,
    /// Whether a leaf may be in any stripe (format 5 and later), not only
    /// its hash key's.
    pub any_stripe: bool,
    /// Whether a value object may be of a larger class than its value's
    /// (format 6).
    pub any_class: bool,
}

/// The format of a superblock with this magic, if this version reads it.
pub fn format_of(magic: u64) -> Option<Format> {
    use super::leaf::Checksum;
    let (checksum, any_stripe, any_class) = match magic {
        MAGIC => (Checksum::Crc32c, true, true),
        MAGIC_5 => (Checksum::Crc32c, true, false),
        MAGIC_4 => (Checksum::Crc32c, false, false),
        MAGIC_3 => (Checksum::Crc32, false, false),
        _ => return None,
    };
    Some(Format {
        checksum,
        any_stripe,
        any_class,
    })
}
/// The magics of the formats this version no longer reads: 1 (one chunk
/// list per object type) and 2 (values of 1..=8 bytes in value objects
/// instead of inline).
pub const OLD_MAGICS: [u64; 2] = [
    u64::from_le_bytes(*b"HARTSB\x00\x01"),
    u64::from_le_bytes(*b"HARTSB\x00\x02"),
];
/// Size of the superblock block.
pub const SIZE: u64 = 4096;
/// Offset of the `k_h` field.
pub const K_H: u64 = 8;
/// Offset of the persist-order field.
pub const ORDER: u64 = 16;
/// Offset of the stripe count.
pub const STRIPE_COUNT: u64 = 24;
/// Allocation stripes.
pub const STRIPES: usize = 16;
/// Offset of stripe 0's list heads.
pub const STRIPE_HEADS: u64 = 2048;
/// Bytes of list heads per stripe.
pub const STRIPE_STRIDE: u64 = 128;
/// Offset of the leaf list heads within a stripe's heads.
const LEAF_HEADS: u64 = 0;
/// Offset of the value list heads within a stripe's heads.
const VALUE_HEADS: u64 = 32;
/// Offset of the update-log lines (`paper` persist order only; Algorithm 3's
/// `PLeaf`, `POldV`, `PNewV` at +0, +8, +16 of a line).
pub const UPDATE_LOGS: u64 = 1024;
/// Number of update-log lines.
pub const UPDATE_LOG_LANES: u64 = 16;
/// Value object sizes, one chunk list each (Fig. 3; the paper has 8 and 16).
pub const VALUE_SIZES: [u64; 10] = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

const _: () = assert!(LEAF_HEADS + 8 * super::leaf::LEAF_SIZES.len() as u64 <= VALUE_HEADS);
const _: () = assert!(VALUE_HEADS + 8 * VALUE_SIZES.len() as u64 <= STRIPE_STRIDE);
const _: () = assert!(UPDATE_LOGS + 64 * UPDATE_LOG_LANES <= STRIPE_HEADS);
const _: () = assert!(STRIPE_HEADS + STRIPE_STRIDE * STRIPES as u64 <= SIZE);

/// The head slot of leaf list `lc` of stripe `s` (offset in the superblock).
pub fn leaf_head(s: usize, lc: usize) -> u64 {
    STRIPE_HEADS + STRIPE_STRIDE * s as u64 + LEAF_HEADS + 8 * lc as u64
}

/// The head slot of value list `vc` of stripe `s` (offset in the superblock).
pub fn value_head(s: usize, vc: usize) -> u64 {
    STRIPE_HEADS + STRIPE_STRIDE * s as u64 + VALUE_HEADS + 8 * vc as u64
}
const _: () = assert!(VALUE_SIZES[VALUE_SIZES.len() - 1] as usize == super::leaf::MAX_OBJECT);

/// The value list for a value of `len` bytes (1..=MAX_OBJECT).
pub fn value_class(len: usize) -> usize {
    VALUE_SIZES
        .iter()
        .position(|&s| len as u64 <= s)
        .expect("small values fit a class")
}

/// The value lists whose objects may hold a value of `len` bytes
/// (1..=MAX_OBJECT), its own class's first: only that one, or, where
/// `any_class` (format 6), every larger class's too.
pub fn value_classes(len: usize, any_class: bool) -> std::ops::Range<usize> {
    let vc = value_class(len);
    vc..if any_class { VALUE_SIZES.len() } else { vc + 1 }
}
