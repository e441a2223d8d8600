//! `Node4`: up to 4 children, keys sorted, searched by a branch-free
//! compare of its 4 key bytes (`crate::swar`).
//!
//! Layout (`#[repr(C)]`, 72 bytes; child slots are 8-byte words, see `child.rs`):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 32 | [`Header`]: prefix (16), value slot (8), `count` (2), `no_path` (1), padding (5) |
//! | 32 | 4 | `keys`: child bytes, ascending; `keys[..count]` in use |
//! | 36 | 4 | padding |
//! | 40 | 32 | `children`: `children[i]` belongs to `keys[i]`; `None` past `count` |
//!
//! A `Node4` is the only node that may hold a single child, and then only
//! next to a value slot: with one entry left it is replaced by that entry
//! (see `Art::remove`), which is ART's path-compression merge.

#![forbid(unsafe_code)]

use std::mem::size_of;

use crate::swar::bytes_equal;

use super::node16::Node16;
use super::{Child, Header, InnerNode, LeafValue};

/// An inner node with up to 4 children.
#[repr(C)]
pub(super) struct Node4<V> {
    pub(super) header: Header<V>,
    keys: [u8; 4],
    children: [Option<Child<V>>; 4],
}

const _: () = assert!(size_of::<Node4<u64>>() == 72);

impl<V: LeafValue> Node4<V> {
    /// An empty node with `header` (count 0).
    pub(super) fn new(header: Header<V>) -> Self {
        debug_assert_eq!(header.count, 0);
        Node4 {
            header,
            keys: [0; 4],
            children: [const { None }; 4],
        }
    }

    /// Moves the contents of a `Node16` with at most 4 children into a new
    /// `Node4`, leaving `from` empty.
    pub(super) fn shrunk(from: &mut Node16<V>) -> Self {
        debug_assert!(from.header.count <= 4);
        let mut n = Node4::new(Header::default());
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

    /// Removes and returns the single child of a node that has one.
    pub(super) fn take_only_child(&mut self) -> Option<(u8, Child<V>)> {
        if self.header.count != 1 {
            return None;
        }
        self.header.count = 0;
        self.children[0].take().map(|c| (self.keys[0], c))
    }

    fn count(&self) -> usize {
        usize::from(self.header.count)
    }
}

impl<V> Node4<V> {
    /// Starts loading the lines of a `Node4` at `at` without reading it
    /// (`child::prefetch_word`): its 72 bytes span two lines wherever an
    /// 8-aligned allocation puts them, the first and the last byte's.
    #[inline(always)]
    pub(super) fn prefetch_at(at: *const u8) {
        crate::hint::prefetch_ptr(at);
        crate::hint::prefetch_ptr(at.wrapping_add(size_of::<Self>() - 1));
    }
}

impl<V: LeafValue> InnerNode<V> for Node4<V> {
    const MIN_CHILDREN: usize = 1;
    const MAX_CHILDREN: usize = 4;

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
        // The 32 bytes of slots span one or two lines wherever the node is
        // (8-aligned): slots 0 and 3 are in each of them.
        crate::hint::prefetch(&self.children[0]);
        crate::hint::prefetch(&self.children[3]);
    }

    /// All four keys compared at once (`crate::swar`), the bytes past
    /// `count` masked off: no branch per key, as in `Node16`.
    #[inline]
    fn find_pos(&self, byte: u8) -> Option<usize> {
        debug_assert!(self.count() <= 4);
        let keys = u64::from(u32::from_le_bytes(self.keys));
        let hits = bytes_equal(keys, byte) & ((1u64 << (8 * self.count())) - 1);
        (hits != 0).then(|| hits.trailing_zeros() as usize / 8)
    }

    /// The search's lookup: [`Self::find_pos`] without its mask of `count`
    /// (docs/design.md §7, "Node lookups without the count"). A stale byte
    /// past `count` may match, but its slot is `None` (the layout's
    /// invariant), and every live key lies before every stale one, so the
    /// first match gives the answer.
    #[inline]
    fn find(&self, byte: u8) -> Option<&Child<V>> {
        let keys = u64::from(u32::from_le_bytes(self.keys));
        // The four key bytes only: the zero bytes above them match 0.
        let hits = bytes_equal(keys, byte) & 0x8080_8080;
        if hits == 0 {
            return None;
        }
        // `& 3`: a position below 4 (it is), without a bounds test.
        self.children[(hits.trailing_zeros() as usize / 8) & 3].as_ref()
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

    /// Every set of up to 4 keys from bytes at the edges of the lane-wise
    /// compare (0, 0x7F, 0x80, 0xFF among them), each key looked up, and
    /// bytes past `count` left stale by a removal (of the largest key, then
    /// of the smallest, which shifts the rest down and leaves a copy of the
    /// last): `find_pos` agrees with a scan of `keys[..count]`, and `find`
    /// (no count mask) gives each live key's child and nothing else.
    #[test]
    fn find_pos_agrees_with_a_scan_and_ignores_stale_bytes() {
        const BYTES: [u8; 6] = [0, 1, 0x7F, 0x80, 0xFE, 0xFF];
        for set in 0u32..64 {
            let chosen: Vec<u8> = (0..6)
                .filter(|i| set & (1 << i) != 0)
                .map(|i| BYTES[i])
                .collect();
            if chosen.len() > 4 {
                continue;
            }
            let mut n = Node4::<u32>::new(Header::default());
            for &b in &chosen {
                n.add(b, Child::leaf(u32::from(b)));
            }
            // Between lookups, remove the largest (left stale past `count`),
            // then the smallest (the rest shift down over it).
            let mut live = chosen.clone();
            for round in 0..3 {
                for b in BYTES.into_iter().chain([2, 0x40]) {
                    let want = n.keys[..n.count()].iter().position(|&k| k == b);
                    assert_eq!(n.find_pos(b), want, "{chosen:?} round {round} byte {b:#x}");
                    assert_eq!(want.is_some(), live.contains(&b));
                    let found = n.find(b).map(|c| match c.view() {
                        View::Leaf(v) => v,
                        View::Inner(_) => unreachable!("the test holds leaves only"),
                    });
                    assert_eq!(
                        found,
                        want.map(|_| u32::from(b)),
                        "{chosen:?} round {round} byte {b:#x}: find"
                    );
                }
                let gone = if round == 0 {
                    live.pop()
                } else if live.is_empty() {
                    None
                } else {
                    Some(live.remove(0))
                };
                if let Some(gone) = gone {
                    n.take(gone);
                }
            }
        }
    }
}
