//! Key tags: what a leaf's child slot knows of the leaf's key, so that an
//! insert that meets a leaf can often split it without loading the key
//! (beyond the paper, docs/design.md §7, "Key tags in the child slot").
//!
//! # Meaning
//! A leaf sits in a child slot at some depth `d` (the bytes of the key
//! consumed on the way to the slot, its child byte included). Its tag holds
//! `len` ≤ 2 bytes and promises that the leaf's key is at least `d + len`
//! bytes long and that `key[d..d + len]` are those bytes. `len` 0 promises
//! nothing. A tag is made from the full key when the leaf is put in a slot
//! ([`KeyTag::of`]) and re-derived without the key when the leaf moves to
//! another depth: down, when a split puts a node above it ([`KeyTag::after`]),
//! and up, when a merge takes the node above it away ([`KeyTag::under`]).
//! Moving down may shorten what it knows; a later insert that meets such a
//! leaf loads its key and gives it a fresh tag.
//!
//! # Encoding (17 bits, bits 47..=63 of a leaf word, `child.rs`)
//!
//! | bits | meaning |
//! |---|---|
//! | `0` | nothing known |
//! | `b0 << 8 \| 1` | one byte `b0` |
//! | `1 << 16 \| b0 << 8 \| b1` | two bytes `b0`, `b1` |

#![deny(unsafe_code)]

/// What a child slot knows of its leaf's key past the slot's depth (see the
/// module docs).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(super) struct KeyTag {
    len: u8,
    bytes: [u8; 2],
}

/// Width of an encoded tag.
pub(super) const TAG_BITS: u32 = 17;

impl KeyTag {
    /// The tag that promises nothing.
    pub(super) const NONE: KeyTag = KeyTag {
        len: 0,
        bytes: [0; 2],
    };

    /// The tag of a leaf whose key is `key` in a slot at `depth`: the
    /// first two bytes of `key[depth..]`, or as many as there are.
    #[inline]
    pub(super) fn of(key: &[u8], depth: usize) -> KeyTag {
        let rest = key.get(depth..).unwrap_or(&[]);
        KeyTag::from_slice(rest)
    }

    /// The tag knowing the first (at most two) bytes of `bytes`.
    #[inline]
    fn from_slice(bytes: &[u8]) -> KeyTag {
        match *bytes {
            [] => KeyTag::NONE,
            [b0] => KeyTag {
                len: 1,
                bytes: [b0, 0],
            },
            [b0, b1, ..] => KeyTag {
                len: 2,
                bytes: [b0, b1],
            },
        }
    }

    /// The key bytes the tag knows.
    #[inline]
    pub(super) fn known(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Where a key whose bytes past the slot's depth are `rest` parts from
    /// the leaf's key, if the tag can tell: the first `i` below `len` where
    /// `rest[i]` differs from the known byte or `rest` has ended. The leaf's
    /// key then has `i` bytes in common with it past the depth and goes on
    /// with `known()[i]`. `None` when `rest` agrees with every known byte
    /// (the keys may be equal, or part later).
    #[inline]
    pub(super) fn first_difference(&self, rest: &[u8]) -> Option<usize> {
        (0..usize::from(self.len)).find(|&i| rest.get(i) != Some(&self.bytes[i]))
    }

    /// The tag of the same leaf `skip` bytes deeper (a split put a node
    /// above it whose path and child byte take `skip` of the known bytes):
    /// what is left of them.
    #[inline]
    pub(super) fn after(&self, skip: usize) -> KeyTag {
        KeyTag::from_slice(self.known().get(skip..).unwrap_or(&[]))
    }

    /// The tag of a leaf moved up into the slot of the node above it (a
    /// merge): the node's path `prefix`, the leaf's child byte `byte` (if it
    /// was under one; `None` for the node's value slot, whose key ends after
    /// the path), then what the leaf's old slot knew.
    pub(super) fn under(prefix: &[u8], byte: Option<u8>, below: KeyTag) -> KeyTag {
        let mut joined = [0u8; 2];
        let mut n = 0;
        for &b in prefix
            .iter()
            .chain(byte.as_ref())
            .chain(below.known())
            .take(2)
        {
            joined[n] = b;
            n += 1;
        }
        KeyTag::from_slice(&joined[..n])
    }

    /// The tag as [`TAG_BITS`] bits (module docs, "Encoding").
    #[inline]
    pub(super) fn to_bits(self) -> u64 {
        let [b0, b1] = self.bytes.map(u64::from);
        match self.len {
            0 => 0,
            1 => b0 << 8 | 1,
            _ => 1 << 16 | b0 << 8 | b1,
        }
    }

    /// The tag of [`Self::to_bits`]'s result (other bits ignored).
    #[inline]
    pub(super) fn from_bits(bits: u64) -> KeyTag {
        let b0 = (bits >> 8) as u8;
        if bits & 1 << 16 != 0 {
            KeyTag {
                len: 2,
                bytes: [b0, bits as u8],
            }
        } else if bits & 0xff == 1 {
            KeyTag {
                len: 1,
                bytes: [b0, 0],
            }
        } else {
            KeyTag::NONE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_tags() -> Vec<KeyTag> {
        let mut tags = vec![KeyTag::NONE];
        for b0 in 0..=255u8 {
            tags.push(KeyTag::from_slice(&[b0]));
            for b1 in [0u8, 1, 7, 0x80, 0xff] {
                tags.push(KeyTag::from_slice(&[b0, b1]));
            }
        }
        tags
    }

    #[test]
    fn tags_round_trip_through_seventeen_bits() {
        for t in all_tags() {
            let bits = t.to_bits();
            assert!(bits < 1 << TAG_BITS, "{t:?} fits");
            assert_eq!(KeyTag::from_bits(bits), t);
        }
    }

    #[test]
    fn a_tag_knows_the_bytes_past_its_depth() {
        assert_eq!(KeyTag::of(b"abcd", 1).known(), b"bc");
        assert_eq!(KeyTag::of(b"abcd", 3).known(), b"d");
        assert_eq!(KeyTag::of(b"abcd", 4).known(), b"");
        assert_eq!(KeyTag::of(b"abcd", 9).known(), b"");
        assert_eq!(KeyTag::of(b"", 0), KeyTag::NONE);
    }

    #[test]
    fn the_first_difference_is_found_only_among_known_bytes() {
        let t = KeyTag::of(b"xbc", 1);
        assert_eq!(t.first_difference(b"bc"), None);
        assert_eq!(t.first_difference(b"bcde"), None);
        assert_eq!(t.first_difference(b"bd"), Some(1));
        assert_eq!(t.first_difference(b"a"), Some(0));
        assert_eq!(t.first_difference(b"b"), Some(1), "a key that ends");
        assert_eq!(t.first_difference(b""), Some(0));
        assert_eq!(KeyTag::NONE.first_difference(b""), None);
        assert_eq!(KeyTag::of(b"q", 0).first_difference(b"qq"), None);
    }

    #[test]
    fn tags_follow_a_leaf_down_and_up() {
        let key = b"abcdefg";
        // Down: a node at depth 2 with path "c" and child byte 'd' puts the
        // leaf at depth 4.
        let t = KeyTag::of(key, 2);
        assert_eq!(t.after(2), KeyTag::of(key, 4).after(2), "nothing left");
        assert_eq!(t.after(1), KeyTag::from_slice(b"d"));
        // Up: from depth 4 back to 2 over the path "c" and byte 'd'; from
        // depth 6 to 2 over "cde" and 'f'.
        assert_eq!(KeyTag::under(b"c", Some(b'd'), KeyTag::of(key, 4)), t);
        assert_eq!(KeyTag::under(b"", Some(b'c'), KeyTag::of(key, 3)), t);
        assert_eq!(KeyTag::under(b"", Some(b'c'), KeyTag::NONE).known(), b"c");
        assert_eq!(KeyTag::under(b"cde", Some(b'f'), KeyTag::NONE), t);
        // A value slot's key ends after the path.
        assert_eq!(KeyTag::under(b"c", None, KeyTag::NONE).known(), b"c");
        assert_eq!(KeyTag::under(b"", None, KeyTag::NONE), KeyTag::NONE);
        for d in 0..=key.len() {
            for up in 0..=d {
                // Every way of moving up from `d` to `up` (path, byte).
                if up < d {
                    let moved =
                        KeyTag::under(&key[up..d - 1], Some(key[d - 1]), KeyTag::of(key, d));
                    assert_eq!(moved, KeyTag::of(key, up), "{d} -> {up}");
                }
            }
        }
    }
}
