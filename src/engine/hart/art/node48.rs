//! `Node48`: 13 to 48 children behind a 256-byte index.
//!
//! Layout (`#[repr(C)]`, 672 bytes):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 32 | [`Header`]: prefix (16), value slot (8), `count` (2), `no_path` (1), padding (5) |
//! | 32 | 256 | `index`: for each byte, [`EMPTY`] or the child's slot + 1 |
//! | 288 | 384 | `children`: 48 slots, in no particular order; `None` when free |
//!
//! Lookup is one index load and one slot load. Removing a child frees its
//! slot in place; adding one takes the first free slot (a scan of at most 48
//! entries). Iteration in key order walks `index`.
//!
//! # Growth and shrink
//! A full `Node16` receiving a 17th child becomes a `Node48`; a `Node48`
//! falling to 12 children becomes a `Node16`; a full `Node48` receiving a
//! 49th child becomes a `Node256`.

#![forbid(unsafe_code)]

use std::mem::{offset_of, size_of};

use super::node16::Node16;
use super::node256::Node256;
use super::{Child, Header, InnerNode, LeafValue};

/// `index` entry of a byte without a child.
const EMPTY: u8 = 0;

/// An inner node with up to 48 children.
#[repr(C)]
pub(super) struct Node48<V> {
    pub(super) header: Header<V>,
    index: [u8; 256],
    children: [Option<Child<V>>; 48],
}

const _: () = assert!(size_of::<Node48<u64>>() == 672);

/// A `Node48` with this many children or fewer becomes a `Node16`.
const SHRINK_AT: usize = 12;

impl<V: LeafValue> Node48<V> {
    pub(super) fn empty() -> Self {
        Node48 {
            header: Header::default(),
            index: [EMPTY; 256],
            children: [const { None }; 48],
        }
    }

    /// Moves the contents of a full `Node16` into a new `Node48`.
    pub(super) fn grown(from: &mut Node16<V>) -> Self {
        let mut n = Self::empty();
        for (slot, (byte, child)) in from.drain().enumerate() {
            n.index[usize::from(byte)] = slot as u8 + 1;
            n.children[slot] = Some(child);
        }
        n.header = std::mem::take(&mut from.header);
        n
    }

    /// Moves the contents of a `Node256` with at most 48 children into a new
    /// `Node48`.
    pub(super) fn shrunk(from: &mut Node256<V>) -> Self {
        debug_assert!(from.header.count <= 48);
        let mut n = Self::empty();
        for (slot, (byte, child)) in from.drain().enumerate() {
            n.index[usize::from(byte)] = slot as u8 + 1;
            n.children[slot] = Some(child);
        }
        n.header = std::mem::take(&mut from.header);
        n
    }

    /// Removes every child, in key order. The header, count included, is
    /// left for the caller to take.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = (u8, Child<V>)> + '_ {
        let children = &mut self.children;
        (0..=u8::MAX)
            .zip(self.index.iter_mut())
            .filter_map(move |(byte, i)| {
                let slot = std::mem::replace(i, EMPTY).checked_sub(1)?;
                children[usize::from(slot)].take().map(|c| (byte, c))
            })
    }

    /// The slot of `byte`'s child.
    #[inline]
    fn slot(&self, byte: u8) -> Option<usize> {
        self.index[usize::from(byte)]
            .checked_sub(1)
            .map(usize::from)
    }

    /// `index` entries in use, in key order, as (byte, slot).
    fn used(&self) -> impl DoubleEndedIterator<Item = (u8, usize)> + '_ {
        (0..=u8::MAX)
            .zip(self.index.iter())
            .filter_map(|(byte, &i)| i.checked_sub(1).map(|s| (byte, usize::from(s))))
    }
}

impl<V> Node48<V> {
    /// Starts loading, without reading it (`child::prefetch_word`), the
    /// header line of a `Node48` at `at` and the line of `byte`'s index
    /// entry (right when the node has no compressed path).
    #[inline(always)]
    pub(super) fn prefetch_at(at: *const u8, byte: Option<u8>) {
        crate::hint::prefetch_ptr(at);
        if let Some(b) = byte {
            crate::hint::prefetch_ptr(at.wrapping_add(offset_of!(Self, index) + usize::from(b)));
        }
    }
}

impl<V: LeafValue> InnerNode<V> for Node48<V> {
    const MIN_CHILDREN: usize = SHRINK_AT + 1;
    const MAX_CHILDREN: usize = 48;

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
            crate::hint::prefetch(&self.index[usize::from(b)]);
        }
    }

    #[inline]
    fn find_pos(&self, byte: u8) -> Option<usize> {
        self.slot(byte)
    }

    #[inline]
    fn find(&self, byte: u8) -> Option<&Child<V>> {
        self.children.get(self.slot(byte)?)?.as_ref()
    }

    #[inline]
    fn child_at(&self, pos: usize) -> Option<&Child<V>> {
        self.children.get(pos)?.as_ref()
    }

    fn child_at_mut(&mut self, pos: usize) -> &mut Child<V> {
        self.children[pos]
            .as_mut()
            .expect("an index entry points at a full slot")
    }

    fn add(&mut self, byte: u8, child: Child<V>) {
        debug_assert!(self.slot(byte).is_none());
        let slot = self
            .children
            .iter()
            .position(Option::is_none)
            .expect("add is only called on a node that is not full");
        self.children[slot] = Some(child);
        self.index[usize::from(byte)] = slot as u8 + 1;
        self.header.count += 1;
    }

    fn take(&mut self, byte: u8) -> Option<Child<V>> {
        let slot = self.slot(byte)?;
        self.index[usize::from(byte)] = EMPTY;
        self.header.count -= 1;
        self.children[slot].take()
    }

    fn first_child(&self) -> Option<&Child<V>> {
        let (_, slot) = self.used().next()?;
        self.children[slot].as_ref()
    }

    fn last_child(&self) -> Option<&Child<V>> {
        let (_, slot) = self.used().next_back()?;
        self.children[slot].as_ref()
    }

    fn children<'a>(&'a self) -> impl Iterator<Item = (u8, &'a Child<V>)>
    where
        V: 'a,
    {
        self.used()
            .filter_map(|(byte, slot)| self.children[slot].as_ref().map(|c| (byte, c)))
    }
}

#[cfg(test)]
impl<V: LeafValue> Node48<V> {
    /// Checks that `index` and `children` agree: every used entry points at
    /// a distinct full slot, and every full slot is pointed at.
    pub(super) fn index_is_consistent(&self) -> bool {
        let mut seen = [false; 48];
        for (_, slot) in self.used() {
            if seen[slot] || self.children[slot].is_none() {
                return false;
            }
            seen[slot] = true;
        }
        seen.iter()
            .zip(self.children.iter())
            .all(|(&s, c)| s == c.is_some())
    }
}
