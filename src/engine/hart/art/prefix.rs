//! Compressed paths, stored in full ("pessimistic" path compression).
//!
//! Every inner node carries the bytes its single-child chain collapsed into.
//! They are kept in DRAM in full, so a lookup compares them directly and the
//! only key it loads from the caller's storage is the one at the leaf.
//!
//! | variant | bytes | holds |
//! |---|---:|---|
//! | `Inline` | 16 | tag (1), `len` (1), up to [`INLINE_CAP`] bytes |
//! | `Spilled` | 16 | tag (8 with padding), a thin `Box` (8) of the `Box<[u8]>` with all the bytes |
//!
//! The spill is boxed twice so that a prefix is 16 bytes and a node header
//! 32 (a fat `Box<[u8]>` would make both 8 bytes longer in every node, for
//! the few paths longer than 14 bytes). A spilled prefix costs its length
//! plus the 16-byte inner box in heap bytes ([`Prefix::heap_bytes`]), which
//! [`super::Art::dram_bytes`] adds to the node sizes.

#![forbid(unsafe_code)]

use std::mem::size_of;

/// Longest prefix kept inside the node.
pub(super) const INLINE_CAP: usize = 14;

/// The compressed path of one inner node.
pub(super) enum Prefix {
    /// Short prefixes: no allocation.
    Inline {
        /// Bytes in use, at most [`INLINE_CAP`].
        len: u8,
        /// The bytes; those past `len` are zero.
        bytes: [u8; INLINE_CAP],
    },
    /// Prefixes longer than [`INLINE_CAP`].
    Spilled(Box<Box<[u8]>>),
}

const _: () = assert!(size_of::<Prefix>() == 16);
const _: () = assert!(INLINE_CAP <= u8::MAX as usize);

impl Default for Prefix {
    fn default() -> Self {
        Prefix::Inline {
            len: 0,
            bytes: [0; INLINE_CAP],
        }
    }
}

impl Prefix {
    /// A prefix holding `bytes`.
    pub(super) fn new(bytes: &[u8]) -> Self {
        Self::joined(bytes, None, &[])
    }

    /// A prefix holding `head ‖ mid ‖ tail` (`mid` is the child byte between
    /// two prefixes when a path-compression merge joins them).
    pub(super) fn joined(head: &[u8], mid: Option<u8>, tail: &[u8]) -> Self {
        let mid_len = usize::from(mid.is_some());
        let len = head.len() + mid_len + tail.len();
        if len <= INLINE_CAP {
            let mut bytes = [0; INLINE_CAP];
            bytes[..head.len()].copy_from_slice(head);
            if let Some(m) = mid {
                bytes[head.len()] = m;
            }
            bytes[head.len() + mid_len..len].copy_from_slice(tail);
            Prefix::Inline {
                len: len as u8,
                bytes,
            }
        } else {
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(head);
            v.extend(mid);
            v.extend_from_slice(tail);
            Prefix::Spilled(Box::new(v.into_boxed_slice()))
        }
    }

    /// The bytes.
    #[inline]
    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            Prefix::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Prefix::Spilled(b) => &b[..],
        }
    }

    /// Whether the node has no compressed path (inline and empty). Reads
    /// only the variant and `len`, so that a search can branch on it.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        matches!(self, Prefix::Inline { len: 0, .. })
    }

    /// Heap bytes held outside the node (0 when inline).
    pub(super) fn heap_bytes(&self) -> usize {
        match self {
            Prefix::Inline { .. } => 0,
            Prefix::Spilled(b) => b.len() + size_of::<Box<[u8]>>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_prefixes_stay_inline_and_long_ones_spill() {
        let p = Prefix::new(b"");
        assert_eq!((p.as_slice(), p.heap_bytes()), (&b""[..], 0));
        assert!(p.is_empty() && Prefix::default().is_empty());
        let p = Prefix::new(&[0]);
        assert!(!p.is_empty(), "a one-byte path of a zero byte is a path");
        let p = Prefix::new(&[7; INLINE_CAP]);
        assert_eq!((p.as_slice(), p.heap_bytes()), (&[7; INLINE_CAP][..], 0));
        assert!(!p.is_empty());
        let p = Prefix::new(&[7; INLINE_CAP + 1]);
        assert_eq!(p.as_slice(), &[7; INLINE_CAP + 1][..]);
        assert!(!p.is_empty());
        assert_eq!(p.heap_bytes(), INLINE_CAP + 1 + 16);
    }

    #[test]
    fn joined_concatenates_around_the_child_byte() {
        let p = Prefix::joined(b"ab", Some(b'c'), b"de");
        assert_eq!(p.as_slice(), b"abcde");
        let p = Prefix::joined(b"", None, b"");
        assert_eq!(p.as_slice(), b"");
        let long = [1u8; 30];
        let p = Prefix::joined(&long, Some(2), b"xyz");
        assert_eq!(p.as_slice().len(), 34);
        assert_eq!(&p.as_slice()[29..], &[1, 2, b'x', b'y', b'z']);
        assert_eq!(p.heap_bytes(), 34 + 16);
    }
}
