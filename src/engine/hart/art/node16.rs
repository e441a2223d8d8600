//! `Node16`: 5 to 16 children, keys sorted, searched by a branch-free
//! compare of all 16 key bytes.
//!
//! Layout (`#[repr(C)]`, 176 bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 32 | [`Header`]: prefix (16), value slot (8), `count` (2), `no_path` (1), padding (5) |
//! | 32 | 16 | `keys`: child bytes, ascending; `keys[..count]` in use |
//! | 48 | 128 | `children`: `children[i]` belongs to `keys[i]`; `None` past `count` |
//!
//! # Search
//! `find_pos` compares all 16 key bytes at once (`crate::swar::equal16`:
//! one SSE2 compare on x86-64, two words of lane-wise arithmetic
//! elsewhere) into a 16-bit mask. The first marked lane is the child, if
//! it lies below `count`. No branch depends on where the match is, where a
//! byte-by-byte loop had up to 16. The search's `find` skips the `count`
//! mask: slots past `count` are `None`.
//!
//! # Growth and shrink
//! A `Node4` receiving its 5th child becomes a `Node16`; a `Node16` falling
//! to 3 children becomes a `Node4` again; a full `Node16` receiving a 17th
//! child becomes a `Node48`.

#![forbid(unsafe_code)]

use std::mem::size_of;

use crate::swar::equal16;

use super::node4::Node4;
use super::node48::Node48;
use super::{Child, Header, InnerNode, LeafValue};

/// An inner node with up to 16 children.
#[repr(C)]
pub(super) struct Node16<V> {
    pub(super) header: Header<V>,
    keys: [u8; 16],
    children: [Option<Child<V>>; 16],
}

const _: () = assert!(size_of::<Node16<u64>>() == 176);

/// A `Node16` with this many children or fewer becomes a `Node4`.
const SHRINK_AT: usize = 3;

impl<V: LeafValue> Node16<V> {
    pub(super) fn empty() -> Self {
        Node16 {
            header: Header::default(),
            keys: [0; 16],
            children: [const { None }; 16],
        }
    }

    /// Moves the contents of a full `Node4` into a new `Node16`.
    pub(super) fn grown(from: &mut Node4<V>) -> Self {
        let mut n = Self::empty();
        let mut count = 0;
        for (byte, child) in from.drain() {
            n.keys[count] = byte;
            n.children[count] = Some(child);
            count += 1;
        }
        n.header = std::mem::take(&mut from.header);
        debug_assert_eq!(usize::from(n.header.count), count);
        n
    }

    /// Moves the contents of a `Node48` with at most 16 children into a new
    /// `Node16`.
    pub(super) fn shrunk(from: &mut Node48<V>) -> Self {
        debug_assert!(from.header.count <= 16);
        let mut n = Self::empty();
        let mut count = 0;
        for (byte, child) in from.drain() {
            n.keys[count] = byte;
            n.children[count] = Some(child);
            count += 1;
        }
        n.header = std::mem::take(&mut from.header);
        debug_assert_eq!(usize::from(n.header.count), count);
        n
    }

    /// Removes every child, in key order. The header, count included, is
    /// left for the caller to take.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (u8, Child<V>)> + '_ {
        let count = self.count();
        self.keys[..count]
            .iter()
            .copied()
            .zip(self.children[..count].iter_mut().filter_map(Option::take))
    }

    fn count(&self) -> usize {
        usize::from(self.header.count)
    }
}

impl<V> Node16<V> {
    /// Starts loading the lines of a `Node16` at `at` without reading it
    /// (`child::prefetch_word`): its 176 bytes span three or four lines.
    #[inline(always)]
    pub(super) fn prefetch_at(at: *const u8) {
        for off in [0, 64, 128, size_of::<Self>() - 1] {
            crate::hint::prefetch_ptr(at.wrapping_add(off));
        }
    }
}

impl<V: LeafValue> InnerNode<V> for Node16<V> {
    const MIN_CHILDREN: usize = SHRINK_AT + 1;
    const MAX_CHILDREN: usize = 16;

    #[inline]
    fn header(&self) -> &Header<V> {
        &self.header
    }

    #[inline]
    fn header_mut(&mut self) -> &mut Header<V> {
        &mut self.header
    }

    #[inline]
    fn prefetch_children(&self) {
        // The 128 bytes of slots span two or three lines wherever the node
        // is (8-aligned): slots 0, 8 and 15 are in each of them.
        for i in [0, 8, 15] {
            crate::hint::prefetch(&self.children[i]);
        }
    }

    /// All 16 keys compared at once (`crate::swar::equal16`), the match
    /// counted only below `count`: bytes past it are stale.
    #[inline]
    fn find_pos(&self, byte: u8) -> Option<usize> {
        let hits = equal16(&self.keys, byte) & ((1 << self.count()) - 1);
        (hits != 0).then(|| hits.trailing_zeros() as usize)
    }

    /// The search's lookup: [`Self::find_pos`] without its mask of `count`
    /// (docs/design.md §7, "Node lookups without the count"). A stale byte
    /// past `count` may match, but its slot is `None` (the layout's
    /// invariant), and every live key lies before every stale one, so the
    /// first match gives the answer.
    #[inline]
    fn find(&self, byte: u8) -> Option<&Child<V>> {
        let hits = equal16(&self.keys, byte);
        if hits == 0 {
            return None;
        }
        // `& 15`: a position below 16 (it is), without a bounds test.
        self.children[(hits.trailing_zeros() as usize) & 15].as_ref()
    }

    #[inline]
    fn child_at(&self, pos: usize) -> Option<&Child<V>> {
        self.children.get(pos)?.as_ref()
    }

    fn child_at_mut(&mut self, pos: usize) -> &mut Child<V> {
        self.children[pos]
            .as_mut()
            .expect("positions below count hold a child")
    }

    fn add(&mut self, byte: u8, child: Child<V>) {
        let count = self.count();
        super::sorted::insert(&mut self.keys, &mut self.children, count, byte, child);
        self.header.count += 1;
    }

    fn take(&mut self, byte: u8) -> Option<Child<V>> {
        let at = self.find_pos(byte)?;
        let count = self.count();
        let child = super::sorted::remove(&mut self.keys, &mut self.children, count, at);
        self.header.count -= 1;
        child
    }

    fn first_child(&self) -> Option<&Child<V>> {
        self.children[0].as_ref()
    }

    fn last_child(&self) -> Option<&Child<V>> {
        self.children[..self.count()].last()?.as_ref()
    }

    fn children<'a>(&'a self) -> impl Iterator<Item = (u8, &'a Child<V>)>
    where
        V: 'a,
    {
        let count = self.count();
        self.keys[..count]
            .iter()
            .copied()
            .zip(self.children[..count].iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::super::View;
    use super::*;

    /// `find` (no test of `count`) against `find_pos` for every byte, with
    /// stale bytes past `count` left by removals from the end, the middle
    /// and the front.
    #[test]
    fn find_gives_the_children_of_live_keys_only() {
        let mut n = Node16::<u32>::empty();
        let mut live: Vec<u8> = vec![0, 1, 3, 0x7F, 0x80, 0x81, 0xC0, 0xFE, 0xFF];
        for &b in &live {
            n.add(b, Child::leaf(u32::from(b)));
        }
        for gone in [0xFF, 0x80, 0, 3, 1, 0x7F, 0xC0, 0x81, 0xFE] {
            for b in 0..=255u8 {
                let found = n.find(b).map(|c| match c.view() {
                    View::Leaf(v) => v,
                    View::Inner(_) => unreachable!("the test holds leaves only"),
                });
                let want = live.contains(&b).then_some(u32::from(b));
                assert_eq!(found, want, "byte {b:#x} with {live:?}");
                assert_eq!(n.find_pos(b).is_some(), want.is_some());
            }
            n.take(gone);
            live.retain(|&l| l != gone);
        }
    }

    #[test]
    fn find_pos_ignores_stale_bytes_past_count() {
        let mut n = Node16::<u32>::empty();
        for b in [1u8, 3, 5, 7, 9, 11] {
            n.add(b, Child::leaf(u32::from(b)));
        }
        assert_eq!(n.find_pos(1), Some(0));
        assert_eq!(n.find_pos(11), Some(5));
        assert_eq!(n.find_pos(4), None);
        // Leave a stale 11 in keys[5]: it must not be found.
        n.take(11);
        assert_eq!(n.find_pos(11), None);
        for b in 20..30 {
            n.add(b, Child::leaf(u32::from(b)));
        }
        assert_eq!(n.find_pos(29), Some(14));
        assert_eq!(n.find_pos(0), None);
        n.add(0, Child::leaf(0));
        assert_eq!(n.find_pos(0), Some(0));
        assert_eq!(n.find_pos(29), Some(15));
    }
}
