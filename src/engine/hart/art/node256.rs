//! `Node256`: 38 to 256 children, one slot per byte.
//!
//! Layout (`#[repr(C)]`, 2080 bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 32 | [`Header`]: prefix (16), value slot (8), `count` (2), `no_path` (1), padding (5) |
//! | 32 | 2048 | `children`: `children[b]` is the child of byte `b`, or `None` |
//!
//! # Growth and shrink
//! A full `Node48` receiving a 49th child becomes a `Node256`; a `Node256`
//! falling to 37 children becomes a `Node48`. The gap between 37 and 49 is
//! hysteresis: a node near the boundary does not flip type on every
//! insert/remove pair.

#![forbid(unsafe_code)]

use std::mem::{offset_of, size_of};

use super::node48::Node48;
use super::{Child, Header, InnerNode, LeafValue};

/// An inner node with a slot for every byte.
#[repr(C)]
pub(super) struct Node256<V> {
    pub(super) header: Header<V>,
    children: [Option<Child<V>>; 256],
}

const _: () = assert!(size_of::<Node256<u64>>() == 2080);

/// A `Node256` with this many children or fewer becomes a `Node48`.
const SHRINK_AT: usize = 37;

impl<V: LeafValue> Node256<V> {
    /// A node without children.
    pub(super) fn empty() -> Self {
        Node256 {
            header: Header::default(),
            children: [const { None }; 256],
        }
    }

    /// Moves the contents of a full `Node48` into a new `Node256`.
    pub(super) fn grown(from: &mut Node48<V>) -> Self {
        let mut n = Self::empty();
        for (byte, child) in from.drain() {
            n.children[usize::from(byte)] = Some(child);
        }
        n.header = std::mem::take(&mut from.header);
        n
    }

    /// Removes every child, in key order. The header, count included, is
    /// left for the caller to take.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (u8, Child<V>)> + '_ {
        (0..=u8::MAX)
            .zip(self.children.iter_mut())
            .filter_map(|(byte, c)| c.take().map(|c| (byte, c)))
    }
}

impl<V> Node256<V> {
    /// Starts loading, without reading it (`child::prefetch_word`), the
    /// header line of a `Node256` at `at` and the line of `byte`'s slot
    /// (right when the node has no compressed path).
    #[inline(always)]
    pub(super) fn prefetch_at(at: *const u8, byte: Option<u8>) {
        crate::hint::prefetch_ptr(at);
        if let Some(b) = byte {
            let slot = offset_of!(Self, children) + usize::from(b) * size_of::<Option<Child<V>>>();
            crate::hint::prefetch_ptr(at.wrapping_add(slot));
        }
    }
}

impl<V: LeafValue> InnerNode<V> for Node256<V> {
    const MIN_CHILDREN: usize = SHRINK_AT + 1;
    const MAX_CHILDREN: usize = 256;

    #[inline]
    fn header(&self) -> &Header<V> {
        &self.header
    }

    #[inline]
    fn header_mut(&mut self) -> &mut Header<V> {
        &mut self.header
    }

    #[inline(always)]
    fn prefetch_search(&self, byte: Option<u8>) {
        crate::hint::prefetch(&self.header);
        if let Some(b) = byte {
            crate::hint::prefetch(&self.children[usize::from(b)]);
        }
    }

    #[inline]
    fn find_pos(&self, byte: u8) -> Option<usize> {
        let pos = usize::from(byte);
        self.children[pos].is_some().then_some(pos)
    }

    #[inline]
    fn find(&self, byte: u8) -> Option<&Child<V>> {
        self.children[usize::from(byte)].as_ref()
    }

    #[inline]
    fn child_at(&self, pos: usize) -> Option<&Child<V>> {
        self.children.get(pos)?.as_ref()
    }

    fn child_at_mut(&mut self, pos: usize) -> &mut Child<V> {
        self.children[pos]
            .as_mut()
            .expect("find_pos only returns full slots")
    }

    fn add(&mut self, byte: u8, child: Child<V>) {
        let slot = &mut self.children[usize::from(byte)];
        debug_assert!(slot.is_none());
        *slot = Some(child);
        self.header.count += 1;
    }

    fn take(&mut self, byte: u8) -> Option<Child<V>> {
        let child = self.children[usize::from(byte)].take()?;
        self.header.count -= 1;
        Some(child)
    }

    fn first_child(&self) -> Option<&Child<V>> {
        self.children.iter().flatten().next()
    }

    fn last_child(&self) -> Option<&Child<V>> {
        self.children.iter().rev().flatten().next()
    }

    fn children<'a>(&'a self) -> impl Iterator<Item = (u8, &'a Child<V>)>
    where
        V: 'a,
    {
        (0..=u8::MAX)
            .zip(self.children.iter())
            .filter_map(|(byte, c)| c.as_ref().map(|c| (byte, c)))
    }
}
