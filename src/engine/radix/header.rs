//! The 8-byte node header (WORT §3.3–3.4, Fig. 2), written with one
//! failure-atomic store.
//!
//! ```text
//! bit 0      4            14            24                                64
//!     | kind | depth (10)  | prefix len (10) | prefix units (40 bits)       |
//! ```
//!
//! - `kind`: [`super::nodes::Kind`] (the same 4 bits start every leaf too).
//! - `depth`: the unit position where this node's compressed path starts.
//!   The root is at depth 0; a child reached through the unit at position
//!   `b` of its parent is at depth `b + 1`.
//! - `prefix len`: units in the compressed path. The node *branches* at
//!   position `depth + prefix len` (its branch position).
//! - `prefix units`: the first [`Header::cap`] units of the compressed path
//!   (10 nibbles or 5 bytes). Longer paths are compared optimistically: the
//!   rest is read from a leaf when needed (the "hybrid" scheme of §3.3).
//!
//! **Why depth is stored.** A split (Algorithm 1) rewrites this word
//! (depth grows, the prefix shrinks) before the parent's pointer is swapped
//! to the new parent node. A crash between the two leaves a node whose depth
//! is larger than the depth at which it is reached: the mismatch is visible,
//! and recovery rebuilds the header from its leaves (Algorithm 2). The branch
//! position `depth + prefix len` is the same before and after a split or a
//! merge; only the start of the path moves. Readers use that: a node reached
//! at depth `d` whose header says otherwise branches at the stored branch
//! position, and its path units are read from a leaf.

use super::span::Span;

/// Bits of the kind field.
pub const KIND_BITS: u32 = 4;
/// Largest depth or prefix length (10 bits; keys have at most 500 nibbles).
pub const MAX_POS: usize = (1 << 10) - 1;
const DEPTH_SHIFT: u32 = 4;
const PLEN_SHIFT: u32 = 14;
const PREFIX_SHIFT: u32 = 24;
const PREFIX_BITS: u32 = 40;

const _: () = assert!(PREFIX_SHIFT + PREFIX_BITS == 64);
const _: () = assert!(MAX_POS > 2 * crate::engine::MAX_KEY_LEN);

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Node kind (low 4 bits of the word).
    pub kind: u8,
    /// Where the compressed path starts.
    pub depth: usize,
    /// Units in the compressed path.
    pub plen: usize,
    /// The stored prefix units, packed (unit `i` at bits `i * span bits`).
    pub prefix: u64,
}

impl Header {
    /// How many prefix units fit in the word.
    pub const fn cap(span: Span) -> usize {
        (PREFIX_BITS / span.bits()) as usize
    }

    /// A header for a path of `units` starting at `depth`.
    pub fn new(kind: u8, span: Span, depth: usize, units: &[u8]) -> Header {
        let mut prefix = 0u64;
        for (i, &u) in units.iter().take(Self::cap(span)).enumerate() {
            prefix |= u64::from(u) << (i as u32 * span.bits());
        }
        Header {
            kind,
            depth,
            plen: units.len(),
            prefix,
        }
    }

    /// [`Self::new`] for the path of `key`'s units `depth..to`, read from
    /// the key (`to` at most the key's unit count): no list of units made
    /// first, on an insert's path.
    pub fn of_key(kind: u8, span: Span, depth: usize, key: &[u8], to: usize) -> Header {
        let plen = to - depth;
        let mut prefix = 0u64;
        for i in 0..plen.min(Self::cap(span)) {
            prefix |= u64::from(span.unit(key, depth + i)) << (i as u32 * span.bits());
        }
        Header {
            kind,
            depth,
            plen,
            prefix,
        }
    }

    /// The branch position (`depth + prefix len`).
    #[inline]
    pub fn branch(&self) -> usize {
        self.depth + self.plen
    }

    /// Stored prefix unit `i` (`i < min(plen, cap)`).
    #[inline]
    pub fn unit(&self, span: Span, i: usize) -> u8 {
        let mask = (1u64 << span.bits()) - 1;
        ((self.prefix >> (i as u32 * span.bits())) & mask) as u8
    }

    /// How many prefix units are stored (the rest are optimistic).
    #[inline]
    pub fn stored(&self, span: Span) -> usize {
        self.plen.min(Self::cap(span))
    }

    /// Encodes the word.
    pub fn encode(&self) -> u64 {
        debug_assert!(self.depth <= MAX_POS && self.plen <= MAX_POS);
        u64::from(self.kind)
            | (self.depth as u64) << DEPTH_SHIFT
            | (self.plen as u64) << PLEN_SHIFT
            | self.prefix << PREFIX_SHIFT
    }

    /// Decodes a word.
    /// Whether the header word `w` is that of a node at depth `d` with no
    /// compressed path (its branch position is `d`), without decoding it.
    #[inline(always)]
    pub fn plain_at(w: u64, d: usize) -> bool {
        (w & Self::PLAIN_MASK) >> DEPTH_SHIFT == d as u64
    }

    /// The bits of a header word that [`Header::plain`] fixes: kind, depth
    /// and prefix length.
    pub const PLAIN_MASK: u64 = (1 << PREFIX_SHIFT) - 1;

    /// The masked word (`w & PLAIN_MASK`) of a node of `kind` at depth `d`
    /// with no compressed path: one compare tests the kind and
    /// [`Header::plain_at`] together.
    #[inline(always)]
    pub fn plain(kind: u8, d: usize) -> u64 {
        u64::from(kind) | (d as u64) << DEPTH_SHIFT
    }

    #[inline]
    pub fn decode(w: u64) -> Header {
        Header {
            kind: (w & ((1 << KIND_BITS) - 1)) as u8,
            depth: ((w >> DEPTH_SHIFT) & MAX_POS as u64) as usize,
            plen: ((w >> PLEN_SHIFT) & MAX_POS as u64) as usize,
            prefix: w >> PREFIX_SHIFT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `of_key` gives what `new` gives for the units listed.
    #[test]
    fn of_key_agrees_with_new_over_listed_units() {
        let key: Vec<u8> = (0..20u8).map(|i| i.wrapping_mul(37) ^ 0xA5).collect();
        for span in [Span::Nibble, Span::Byte] {
            let n = span.len(&key);
            for depth in 0..n {
                for to in depth..=n {
                    assert_eq!(
                        Header::of_key(3, span, depth, &key, to),
                        Header::new(3, span, depth, &span.units(&key, depth, to)),
                        "{span:?} {depth}..{to}"
                    );
                }
            }
        }
    }

    #[test]
    fn round_trip() {
        for span in [Span::Nibble, Span::Byte] {
            let units: Vec<u8> = (0..12).map(|i| (i * 7 % 16) as u8).collect();
            let h = Header::new(3, span, 17, &units);
            let d = Header::decode(h.encode());
            assert_eq!(d, h);
            assert_eq!(d.branch(), 29);
            for (i, &u) in units.iter().enumerate().take(d.stored(span)) {
                assert_eq!(d.unit(span, i), u);
            }
        }
        assert_eq!(Header::cap(Span::Nibble), 10);
        let plain = Header::new(2, Span::Nibble, 7, &[]).encode();
        assert!(Header::plain_at(plain, 7));
        assert!(!Header::plain_at(plain, 6));
        let compressed = Header::new(2, Span::Nibble, 7, &[3]).encode();
        assert!(!Header::plain_at(compressed, 7));
        assert!(!Header::plain_at(
            Header::new(2, Span::Byte, MAX_POS, &[]).encode(),
            0
        ));
        // `plain` is `plain_at` with the kind in the same compare.
        assert_eq!(plain & Header::PLAIN_MASK, Header::plain(2, 7));
        assert_ne!(plain & Header::PLAIN_MASK, Header::plain(3, 7));
        assert_ne!(plain & Header::PLAIN_MASK, Header::plain(2, 6));
        assert_ne!(compressed & Header::PLAIN_MASK, Header::plain(2, 7));
        assert_eq!(Header::cap(Span::Byte), 5);
    }
}
