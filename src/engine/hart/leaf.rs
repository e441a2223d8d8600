//! A HART leaf in PM (§III-A "Selective consistency": the leaf holds the
//! complete key, so that everything else can be rebuilt from leaves).
//!
//! Cache line 0 of a leaf:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `commit`: 0 = free; else [`COMMIT_TAG`] (bits 48..64), key length (bits 8..16), active slot (bit 0) |
//! | 8 | 8 | slot 0 `p_value`: offset of the value object or large block (0 for an empty value), or the value itself if it has 1 to [`INLINE_MAX`] bytes |
//! | 16 | 8 | slot 0 `meta`: checksum of key ‖ value ([`Checksum`], bits 0..32), value length (bits 32..53), [`WRITTEN`] (bit 61), [`LARGE`] (bit 62) |
//! | 24 | 8 | slot 1 `p_value` |
//! | 32 | 8 | slot 1 `meta` |
//! | 40 | key length | the complete key |
//!
//! The leaf is 64, 128, 256 or 320 bytes, by key length ([`LEAF_SIZES`]).
//!
//! # Commit protocol (`tight` persist order)
//! `commit` is the leaf's commit word. It is stored *last*, in the same
//! cache line as both slots, so (same-line persist order) a durable `commit`
//! implies that the slot it names is durable too. The value object (another
//! line) and long keys (lines after the first) are covered by the slot's
//! CRC instead of a fence: a leaf whose active slot fails its CRC was torn by
//! a crash before its fence, and recovery falls back to the other slot (an
//! update in flight) or drops the leaf (an insert in flight). An update
//! writes the *inactive* slot and then flips `commit`; the old value stays
//! intact until the flip is durable. So insert, update and delete each need
//! one fence (values above [`MAX_OBJECT`] bytes add the allocator's).

use crate::error::{Error, Result};
use crate::pm::Pool;

/// Tag in the high 16 bits of a valid `commit` word.
pub const COMMIT_TAG: u64 = 0xC0DE;
/// `meta` bit: `p_value` is a whole allocator block (a value above
/// [`MAX_OBJECT`] bytes), activated into this slot.
pub const LARGE: u64 = 1 << 62;
/// `meta` bit: the slot was written (a zeroed slot is never valid, whatever
/// the CRC of its key).
pub const WRITTEN: u64 = 1 << 61;
/// Bytes before the key.
pub const HEADER: u64 = 40;
/// Leaf sizes, one chunk list each.
pub const LEAF_SIZES: [u64; 4] = [64, 128, 256, 320];
/// Largest value kept in value-object chunks; larger values get a block.
pub const MAX_OBJECT: usize = 4096;
/// Largest value kept in the slot itself (`p_value` holds its bytes, zero
/// padded): no value object, no second line to flush or read. The paper's
/// workloads use 8-byte values.
pub const INLINE_MAX: usize = 8;

const _: () = assert!(HEADER + 250 <= LEAF_SIZES[3]);

/// Longest key that ends in a leaf's first line (leaves are line-aligned:
/// chunks are, and their headers are a line).
pub const LINE_KEY_MAX: usize = 64 - HEADER as usize;

/// The leaf class for a key of `len` bytes.
pub fn class_for_key(len: usize) -> usize {
    leaf_class(len).expect("keys are at most 250 bytes")
}

/// The leaf class for a key of `len` bytes; `None` for a key too long for
/// every leaf.
pub fn leaf_class(len: usize) -> Option<usize> {
    LEAF_SIZES.iter().position(|&s| HEADER + len as u64 <= s)
}

/// Offset of slot `i`'s `p_value`.
pub fn slot_off(leaf: u64, i: u64) -> u64 {
    leaf + 8 + 16 * i
}

/// A decoded `commit` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Key length.
    pub key_len: usize,
    /// The slot holding the current value.
    pub active: u64,
}

impl Commit {
    /// Whether `w` has a commit word's tag, and zeros where one has them:
    /// [`Commit::decode`] without its test of the key length.
    #[inline(always)]
    pub fn tagged(w: u64) -> bool {
        w & !0xFF01 == COMMIT_TAG << 48
    }

    /// Encodes the word.
    pub fn encode(self) -> u64 {
        (COMMIT_TAG << 48) | ((self.key_len as u64) << 8) | self.active
    }

    /// Decodes a word; `None` for a free leaf or garbage.
    pub fn decode(w: u64) -> Option<Commit> {
        if !Self::tagged(w) {
            return None;
        }
        let key_len = ((w >> 8) & 0xFF) as usize;
        (key_len <= 250).then_some(Commit {
            key_len,
            active: w & 1,
        })
    }
}

/// A decoded slot `meta` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// CRC-32 of key ‖ value.
    pub crc: u32,
    /// Value length.
    pub value_len: usize,
    /// The value is a whole allocator block.
    pub large: bool,
}

impl Meta {
    /// Encodes the word.
    pub fn encode(self) -> u64 {
        u64::from(self.crc)
            | ((self.value_len as u64) << 32)
            | WRITTEN
            | if self.large { LARGE } else { 0 }
    }

    /// Whether the value is in the slot's `p_value` word itself.
    pub fn inline(&self) -> bool {
        Self::inline_len(self.value_len as u64, self.large)
    }

    fn inline_len(len: u64, large: bool) -> bool {
        !large && len > 0 && len <= INLINE_MAX as u64
    }

    /// The value length field of a word, whether or not it was written.
    fn len_field(w: u64) -> u64 {
        (w >> 32) & ((1 << 21) - 1)
    }

    /// The value length in a `meta` word, 0 if the slot was never written
    /// (what [`Meta::decode`] gives, without building a `Meta`).
    #[inline(always)]
    pub fn value_len_of(w: u64) -> u64 {
        if w & WRITTEN == 0 {
            return 0;
        }
        Self::len_field(w)
    }

    /// The length of a value held in the slot itself, `None` for a value
    /// object or block: an inline value ([`Meta::inline_word`]) or an
    /// empty one (also a never-written slot, as [`Meta::value_len_of`]).
    #[inline(always)]
    pub fn in_slot_len(w: u64) -> Option<u64> {
        let len = Self::value_len_of(w);
        (len <= INLINE_MAX as u64 && (w & LARGE == 0 || len == 0)).then_some(len)
    }

    /// Whether a `meta` word holds an inline value: [`Meta::inline`] of
    /// its decoding, `false` for a never-written slot.
    #[inline(always)]
    pub fn inline_word(w: u64) -> bool {
        Self::inline_len(Self::value_len_of(w), w & LARGE != 0)
    }

    /// Decodes a word; `None` for a slot that was never written.
    pub fn decode(w: u64) -> Option<Meta> {
        (w & WRITTEN != 0).then_some(Meta {
            crc: w as u32,
            value_len: Self::len_field(w) as usize,
            large: w & LARGE != 0,
        })
    }
}

/// The checksum a pool's slots carry over key ‖ value: CRC-32C from HART
/// format 4, CRC-32 (IEEE) in pools of format 3, which this version still
/// reads and writes in their own checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    /// Format 3.
    Crc32,
    /// Format 4 ([`crate::checksum::crc32c`]: one instruction per 8 bytes).
    Crc32c,
}

impl Checksum {
    /// The checksum of key ‖ value.
    #[inline]
    pub fn of(self, key: &[u8], value: &[u8]) -> u32 {
        match self {
            Checksum::Crc32c => crate::checksum::crc32c(&[key, value]),
            Checksum::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                h.update(key);
                h.update(value);
                h.finalize()
            }
        }
    }
}

/// The key of the leaf at `leaf` (whose commit word decodes to `c`).
///
/// # Safety
/// No thread may write the leaf's key while the slice lives (the leaf is
/// live and reachable only under its ART's lock, or recovery is running
/// alone).
pub unsafe fn key(pool: &Pool, leaf: u64, c: Commit) -> Result<&[u8]> {
    // SAFETY: forwarded from the caller.
    unsafe { pool.bytes(leaf + HEADER, c.key_len as u64) }
}

/// Reads the commit word of the leaf at `leaf`.
pub fn commit(pool: &Pool, leaf: u64) -> Result<Option<Commit>> {
    Ok(Commit::decode(pool.load_u64(leaf)?))
}

/// The corrupt-leaf error.
pub fn corrupt(leaf: u64, why: &str) -> Error {
    Error::corrupt(leaf, format!("hart leaf: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        let c = Commit {
            key_len: 250,
            active: 1,
        };
        assert_eq!(Commit::decode(c.encode()), Some(c));
        assert_eq!(Commit::decode(0), None);
        assert_eq!(Commit::decode(u64::MAX), None);
        // Every bit that `tagged` tests, flipped alone, makes a word
        // invalid; the key length's and the slot's bits do not.
        for bit in 0..64 {
            let w = c.encode() ^ (1 << bit);
            let free = bit == 0 || (8..16).contains(&bit);
            assert_eq!(Commit::tagged(w), free, "bit {bit}");
        }
        let m = Meta {
            crc: 0xDEAD_BEEF,
            value_len: 1 << 20,
            large: true,
        };
        assert_eq!(Meta::decode(m.encode()), Some(m));
        assert_eq!(Meta::decode(0), None);
    }

    #[test]
    fn meta_shortcuts_agree_with_decode() {
        let mut words = vec![0, u64::MAX, WRITTEN, LARGE, LARGE | 8 << 32];
        for value_len in [0, 1, 7, 8, 9, 4096, 1 << 20] {
            for large in [false, true] {
                let m = Meta {
                    crc: 0x1234_5678,
                    value_len,
                    large,
                };
                words.push(m.encode());
            }
        }
        for w in words {
            let m = Meta::decode(w);
            let len = m.map_or(0, |m| m.value_len as u64);
            assert_eq!(Meta::value_len_of(w), len, "{w:#x}");
            assert_eq!(
                Meta::inline_word(w),
                m.is_some_and(|m| m.inline()),
                "{w:#x}"
            );
            let in_slot = m.is_none_or(|m| m.value_len == 0 || m.inline());
            assert_eq!(Meta::in_slot_len(w), in_slot.then_some(len), "{w:#x}");
        }
    }

    #[test]
    fn classes_fit_keys() {
        assert_eq!(class_for_key(1), 0);
        assert_eq!(class_for_key(24), 0);
        assert_eq!(class_for_key(25), 1);
        assert_eq!(class_for_key(250), 3);
    }
}
