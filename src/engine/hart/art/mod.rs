//! A DRAM adaptive radix tree whose leaves live elsewhere: the per-prefix
//! index of HART (Leis, Kemper, Neumann, "The Adaptive Radix Tree", ICDE
//! 2013; HART §III-A "Hash-assisted ARTs", "Selective consistency").
//!
//! # Role in HART
//! HART splits a key into a hash key (its first `k_h` bytes, 2 by default)
//! and the rest. The hash key selects one [`Art`]; the rest is that tree's
//! key, so a tree key may be empty, and keys that are prefixes of one
//! another are normal. Inner nodes live in DRAM and are rebuilt at recovery;
//! a leaf is only a `V` (in HART the `u64` PM offset of a leaf that stores
//! the complete key). The tree never stores leaf keys: when a search reaches
//! a leaf it asks the caller through [`LeafKeys`], which reads the key from
//! PM.
//!
//! # Structure
//! A child slot holds a `Child`, one 8-byte word (`child.rs`): either a
//! leaf value or an owned pointer to an inner node of one of four kinds,
//! chosen by fan-out, tagged in the pointer's low bits:
//!
//! | kind | children | search | bytes |
//! |---|---:|---|---:|
//! | `Node4` | 1..=4 | 4 bytes compared at once (SWAR) | 72 |
//! | `Node16` | 4..=16 | 16 bytes compared at once (SSE2 on x86-64) | 176 |
//! | `Node48` | 13..=48 | 256-byte index, then slot | 672 |
//! | `Node256` | 38..=256 | direct | 2080 |
//!
//! A kind grows into the next one when a child arrives at a full node, and
//! shrinks into the previous one at 3 (`Node16`), 12 (`Node48`) or 37
//! (`Node256`) children. Every node starts with a `Header`: its compressed
//! path (a `Prefix`), its value slot, and its child count.
//!
//! - **Path compression (pessimistic).** A chain of single-child nodes is
//!   collapsed into one node whose `prefix` holds the chain's bytes in full
//!   (inline up to 14 bytes, else a heap spill). Searches compare them in
//!   DRAM; only the final key comparison at a leaf loads a key.
//! - **Lazy expansion.** A leaf sits directly in the child slot where its
//!   path becomes unique; the bytes below it are not materialised. Inserting
//!   a second key there replaces the leaf by a `Node4` whose prefix is the
//!   two keys' common part (from the slot's key tag when it tells, else
//!   read once through [`LeafKeys`]).
//! - **Keys that are prefixes of other keys.** A key that ends exactly at an
//!   inner node (after its prefix) is kept in that node's value slot
//!   (`Header::value`), not in a child. The empty key at the root, `"a"`
//!   under `"ab"`, etc. all use it. In key order the value slot comes before
//!   every child, because a key sorts before all its extensions.
//! - **Merging on remove.** A `Node4` left with one entry is replaced by
//!   it: a lone value becomes a `Leaf` in the node's slot, a lone leaf child
//!   moves up, and a lone inner child takes the node's place with its prefix
//!   extended to `node prefix ‖ child byte ‖ child prefix`.
//!
//! # Invariants
//! Let the *path* of a node be the bytes consumed to reach it (the prefixes
//! and child bytes above it), and its *depth* the path's length.
//! 1. Every key stored below a node starts with `path ‖ prefix`. A value
//!    slot holds the key equal to `path ‖ prefix`; a leaf reached through
//!    child byte `b` has a key starting with `path ‖ prefix ‖ b`.
//! 2. Every inner node has at least one child, and children plus value slot
//!    count at least 2 (no chains of single-child nodes).
//! 3. Each kind's child count lies in the range of the table above.
//! 4. `len` is the number of leaves plus full value slots; `dram` is the sum
//!    of node sizes and prefix spills ([`Art::dram_bytes`]).
//! 5. A leaf's key tag knows only bytes its key has: for a leaf in a slot
//!    at depth `d` (root: 0), `key[d..]` starts with the tag's bytes.
//!
//! The tests check all five after every few random operations
//! (`Art::validate`).
//!
//! # Search loop shape
//! A search is a chain of cache misses, one node after another, so two
//! things keep each step's misses side by side instead of one after the
//! other (measured in docs/design.md §7, "Search loop shape"):
//! - on entering a `Node4` or `Node16`, the lines of its child slots are
//!   prefetched ([`crate::hint::prefetch`]) while its key bytes are still in
//!   flight, so the slot is there when the keys say which one it is;
//! - a node without a compressed path is recognised by a branch on one
//!   byte (`Header::no_path`), and the common case takes the child byte from
//!   the depth alone, so the CPU loads a `Node48` index entry or a `Node256`
//!   slot before the header arrives (with `depth + prefix length` it would
//!   wait for the header).
//!
//! # Key loads
//! A leaf's child slot also holds a *key tag* (`tag.rs`, where the value
//! type leaves room: HART's PM offsets, below 2^46): up to two bytes of the
//! leaf's key past the slot's depth. `get` and `remove` load at most one
//! key (the leaf's) when they reach a leaf: none when its tag already
//! tells the keys apart, none when they stop at an inner node. `insert`
//! loads one when it reaches a leaf whose tag agrees with the new key, to
//! either replace it (same key) or split it; where the tag shows where the
//! keys part, it splits the leaf without loading its key (on random
//! strings, nearly every split; docs/design.md §7, "Key tags in the child
//! slot"). `probe` loads none and leaves the tag unread: its caller
//! compares the whole key in the leaf it reads anyway. `range` loads the
//! key of every entry it passes to the callback, plus those of the leaves
//! on the (at most two) root-to-leaf paths where a bound cuts a node,
//! which it compares with the bounds.
//!
//! # Recursion and memory
//! `get`, `insert` and `remove` are loops. `range` recurses, and dropping
//! the tree recurses through `Box`: both are bounded by the height, at most
//! the longest key's length plus one (251 levels for 250-byte keys).
//!
//! # Concurrency
//! `Art` is a plain single-writer structure (`&mut self` for writes); HART
//! wraps each tree in a reader-writer lock. It owns its nodes as a tree of
//! boxes and holds `V`s, so it is `Send + Sync` whenever `V` is (checked
//! below at compile time). The only `unsafe` code is the tagged child word
//! (`child.rs`); every other file of the module forbids it.

#![deny(unsafe_code)]

/// Runs `$body` with `$n` bound to the node (a box or a reference),
/// whatever its kind.
macro_rules! dispatch {
    ($inner:expr, $n:ident => $body:expr) => {
        match $inner {
            Kind::N4($n) => $body,
            Kind::N16($n) => $body,
            Kind::N48($n) => $body,
            Kind::N256($n) => $body,
        }
    };
}

mod child;
mod node16;
mod node256;
mod node4;
mod node48;
mod prefix;
mod range;
mod sorted;
mod tag;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::fmt;
use std::mem::size_of;
use std::ops::Bound;

use child::{Child, Inner, InnerMut, InnerRef, Kind, View};
pub use child::{LeafValue, TAGGED_LIMIT};
use node16::Node16;
use node256::Node256;
use node4::Node4;
use node48::Node48;
use prefix::Prefix;
use tag::KeyTag;

/// Where the tree finds the full key of a leaf.
///
/// # Contract
/// `key(v)` returns the key that `v` was inserted under, for as long as `v`
/// is in the tree (HART: the key bytes of the PM leaf at offset `v`, after
/// the hash prefix). The tree calls it only for values it holds; the value
/// passed to [`Art::insert`] is not looked up during that insert. A `key`
/// that breaks the contract makes results wrong, and may panic on an index
/// out of range; it never makes the tree unsound.
pub trait LeafKeys<V> {
    /// The full key of the entry whose value is `v`.
    fn key(&self, v: V) -> &[u8];
}

/// An adaptive radix tree from byte-string keys to `V`s, keys kept by the
/// caller (see the module docs).
pub struct Art<V: LeafValue> {
    root: Option<Child<V>>,
    /// Entries (leaves plus full value slots).
    len: usize,
    /// Heap bytes: node sizes plus prefix spills.
    dram: usize,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    const fn _check<V: LeafValue + Send + Sync>() {
        send_sync::<Art<V>>();
    }
    send_sync::<Art<u64>>();
};

impl<V: LeafValue> Default for Art<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: LeafValue> fmt::Debug for Art<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Art")
            .field("len", &self.len)
            .field("dram_bytes", &self.dram)
            .finish_non_exhaustive()
    }
}

impl<V: LeafValue> Art<V> {
    /// An empty tree. Allocates nothing.
    pub fn new() -> Self {
        Art {
            root: None,
            len: 0,
            dram: 0,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes the tree holds: the sum of `size_of` of every inner node
    /// plus the spills of prefixes longer than 14 bytes (allocator overhead not
    /// counted). An empty tree, or one with a single key, holds 0.
    pub fn dram_bytes(&self) -> usize {
        self.dram
    }

    /// How many nodes of each kind the tree holds (a walk of the tree).
    pub fn node_counts(&self) -> NodeCounts {
        let mut counts = NodeCounts::default();
        let mut stack: Vec<&Child<V>> = self.root.iter().collect();
        while let Some(child) = stack.pop() {
            let node = match child.view() {
                View::Leaf(_) => {
                    counts.leaves += 1;
                    continue;
                }
                View::Inner(node) => node,
            };
            match node {
                Kind::N4(_) => counts.node4 += 1,
                Kind::N16(_) => counts.node16 += 1,
                Kind::N48(_) => counts.node48 += 1,
                Kind::N256(_) => counts.node256 += 1,
            }
            counts.value_slots += usize::from(node.header().value.is_some());
            dispatch!(node, n => stack.extend(n.children().map(|(_, c)| c)));
        }
        counts
    }

    /// The value of `key`, if present. Loads at most one key (at a leaf).
    pub fn get<K: LeafKeys<V> + ?Sized>(&self, key: &[u8], keys: &K) -> Option<V> {
        let mut cur = self.root.as_ref()?;
        let mut depth = 0;
        loop {
            let node = match cur.view() {
                View::Leaf(v) => return leaf_holds(cur, v, key, depth, keys).then_some(v),
                View::Inner(node) => node,
            };
            cur = match dispatch!(node, n => descend(n, key, &mut depth)) {
                Ok(next) => next,
                Err(found) => return found,
            };
        }
    }

    /// The one entry that can hold `key`, found without loading any key:
    /// [`Self::get`] without its final comparison. Returns the leaf the
    /// search ends at (lazy expansion: its key may differ from `key` past
    /// the bytes the tree has seen) or the value slot of the node where
    /// `key` ends (its key is `key`). The caller compares the entry's key
    /// with `key` before it believes the result; HART does this in the
    /// same pass over the PM leaf that reads the value. Inlined into the
    /// caller: a search is a few hundred instructions, and the call and its
    /// spills were 19 of them.
    #[inline(always)]
    pub fn probe(&self, key: &[u8]) -> Option<V> {
        let mut cur = self.root.as_ref()?;
        let mut depth = 0;
        loop {
            let node = match cur.view() {
                View::Leaf(v) => return Some(v),
                View::Inner(node) => node,
            };
            cur = match dispatch!(node, n => descend(n, key, &mut depth)) {
                Ok(next) => next,
                Err(found) => return found,
            };
        }
    }

    /// A copy of the root's word (0 for an empty tree), which the caller
    /// may keep outside the tree, without a lock, to start a later search's
    /// first loads before it takes the lock ([`Self::prefetch_hinted`]).
    /// It owns nothing and is only ever a prefetch address.
    #[inline]
    pub fn root_hint(&self) -> u64 {
        self.root.as_ref().map_or(0, Child::word)
    }

    /// Starts loading what a search for `key` reads first in the root that
    /// [`Self::root_hint`] returned as `hint` (the root node's header and
    /// the slots for `key`'s first byte), without reading the tree: the
    /// hint may be stale and its node freed, which costs a useless prefetch
    /// and nothing else. A root that is a leaf is returned, for the caller
    /// to prefetch the entry it stands for.
    #[inline(always)]
    pub fn prefetch_hinted(hint: u64, key: &[u8]) -> Option<V> {
        child::prefetch_word(hint, key.first().copied())
    }

    /// [`Self::probe`] taken one node at a time, so that a caller can run
    /// several at once and their cache misses overlap (HART's batched gets,
    /// docs/design.md §7, "Interleaved batched searches"): the cursor before
    /// the root node, whose first lines it starts loading, or `Err` with
    /// `probe`'s answer when there is no node to visit (an empty tree, or a
    /// root that is a leaf).
    #[inline]
    pub fn probe_cursor<'a>(&'a self, key: &'a [u8]) -> Result<ProbeCursor<'a, V>, Option<V>> {
        let root = self.root.as_ref().ok_or(None)?;
        ProbeCursor::enter(root, key, 0)
    }

    /// Maps `key` to `value`; returns the value it replaced, if the key was
    /// present (upsert). `keys.key(value)` need not work until this returns.
    pub fn insert<K: LeafKeys<V> + ?Sized>(&mut self, key: &[u8], value: V, keys: &K) -> Option<V> {
        match self.upsert(key, keys, true, || Ok::<V, Infallible>(value)) {
            Ok(old) => old,
            Err(never) => match never {},
        }
    }

    /// Inserts `key` if it is absent, with the value `make` returns, in one
    /// descent: returns `Ok(Some(v))` without calling `make` if the key is
    /// present with value `v`, `Ok(None)` once `make`'s value is in. `make`
    /// runs at the point of insertion, before the tree changes, so when it
    /// fails the tree is as it was. HART writes and persists the PM leaf
    /// there (the leaf must be durable before it is reachable).
    /// `keys.key` of the new value need not work until this returns.
    pub fn insert_with<K, E, F>(&mut self, key: &[u8], keys: &K, make: F) -> Result<Option<V>, E>
    where
        K: LeafKeys<V> + ?Sized,
        F: FnOnce() -> Result<V, E>,
    {
        self.upsert(key, keys, false, make)
    }

    /// [`Self::insert`] (`replace`) or [`Self::insert_with`].
    fn upsert<K, E, F>(
        &mut self,
        key: &[u8],
        keys: &K,
        replace: bool,
        make: F,
    ) -> Result<Option<V>, E>
    where
        K: LeafKeys<V> + ?Sized,
        F: FnOnce() -> Result<V, E>,
    {
        let old = match &mut self.root {
            None => {
                self.root = Some(Child::tagged_leaf(make()?, KeyTag::of(key, 0)));
                None
            }
            Some(root) => insert_below(root, key, keys, &mut self.dram, replace, make)?,
        };
        if old.is_none() {
            self.len += 1;
        }
        Ok(old)
    }

    /// Removes `key`; returns its value, if it was present. Shrinks nodes
    /// and merges paths as described in the module docs.
    pub fn remove<K: LeafKeys<V> + ?Sized>(&mut self, key: &[u8], keys: &K) -> Option<V> {
        let root = self.root.as_mut()?;
        let removed = match root.view() {
            View::Leaf(v) => {
                if !leaf_holds(root, v, key, 0, keys) {
                    return None;
                }
                self.root = None;
                Some(v)
            }
            View::Inner(_) => remove_below(root, key, keys, &mut self.dram),
        };
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    /// Calls `f(key, value)` for every key in `lo..hi`, in byte-wise
    /// lexicographic order (a key before its extensions), until `f` returns
    /// `false`. `lo > hi` visits nothing. Subtrees outside the bounds are
    /// skipped without loading keys; the key passed to `f` comes from
    /// `keys`.
    pub fn range<K, F>(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, keys: &K, f: F)
    where
        K: LeafKeys<V> + ?Sized,
        F: FnMut(&[u8], V) -> bool,
    {
        let mut f = f;
        if let Some(root) = &self.root {
            range::RangeWalk::new(lo, hi, keys, true, |key: Option<&[u8]>, v| {
                f(key.expect("the walk loads every key"), v)
            })
            .run(root);
        }
    }

    /// [`Self::range`] without the keys: calls `f(value)` for every key in
    /// `lo..hi`, in key order, until `f` returns `false`, and loads a key
    /// only to compare it with a bound (at most two per call, see
    /// `range.rs`, "Key loads").
    pub fn range_values<K, F>(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, keys: &K, mut f: F)
    where
        K: LeafKeys<V> + ?Sized,
        F: FnMut(V) -> bool,
    {
        if let Some(root) = &self.root {
            range::RangeWalk::new(lo, hi, keys, false, |_: Option<&[u8]>, v| f(v)).run(root);
        }
    }

    /// The value of the smallest key.
    pub fn first(&self) -> Option<V> {
        let mut cur = self.root.as_ref()?;
        loop {
            let node = match cur.view() {
                View::Leaf(v) => return Some(v),
                View::Inner(node) => node,
            };
            if let Some(v) = node.header().value() {
                return Some(v);
            }
            cur = dispatch!(node, n => n.first_child())?;
        }
    }

    /// The value of the largest key.
    pub fn last(&self) -> Option<V> {
        let mut cur = self.root.as_ref()?;
        loop {
            let node = match cur.view() {
                View::Leaf(v) => return Some(v),
                View::Inner(node) => node,
            };
            match dispatch!(node, n => n.last_child()) {
                Some(child) => cur = child,
                None => return node.header().value(),
            }
        }
    }
}

/// How many nodes of each kind a tree holds ([`Art::node_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounts {
    /// `Node4`s.
    pub node4: usize,
    /// `Node16`s.
    pub node16: usize,
    /// `Node48`s.
    pub node48: usize,
    /// `Node256`s.
    pub node256: usize,
    /// Leaves in child slots (or at the root).
    pub leaves: usize,
    /// Inner nodes whose value slot holds a key.
    pub value_slots: usize,
}

const _: () = assert!(size_of::<Option<Child<u64>>>() == 8);

/// The part every inner node starts with.
///
/// | offset | size | field |
/// |---:|---:|---|
/// | 0 | 16 | `prefix`: the compressed path |
/// | 16 | 8 | `value`: the key equal to `path ‖ prefix`, if present (a [`child::Packed`] word) |
/// | 24 | 2 | `count`: children in use |
/// | 26 | 1 | `no_path`: whether `prefix` is empty |
/// | 27 | 5 | padding |
///
/// `no_path` repeats what `prefix` says so that a search tests one byte
/// where `Prefix::is_empty` tests the variant and the length, two loads
/// and two branches, at every node (docs/design.md §7, "Node lookups
/// without the count"). A new `prefix` is set only through
/// [`Header::with_prefix`] and [`Header::set_prefix`], which keep the two
/// in step (`Default` makes both empty; `mem::take` moves both); the tests'
/// `validate` checks it of every node, and `descend` in debug builds.
#[repr(C)]
struct Header<V> {
    prefix: Prefix,
    value: Option<child::Packed<V>>,
    count: u16,
    no_path: bool,
}

const _: () = assert!(size_of::<Header<u64>>() == 32);

impl<V: LeafValue> Header<V> {
    /// An empty header (no value, count 0) with the path `prefix`.
    fn with_prefix(prefix: Prefix) -> Self {
        Header {
            no_path: prefix.is_empty(),
            prefix,
            value: None,
            count: 0,
        }
    }

    /// Replaces the compressed path.
    fn set_prefix(&mut self, prefix: Prefix) {
        self.no_path = prefix.is_empty();
        self.prefix = prefix;
    }

    /// The value slot's value.
    #[inline]
    fn value(&self) -> Option<V> {
        self.value.map(child::Packed::get)
    }

    /// Sets the value slot.
    fn set_value(&mut self, v: Option<V>) {
        self.value = v.map(child::Packed::new);
    }
}

impl<V> Default for Header<V> {
    fn default() -> Self {
        Header {
            prefix: Prefix::default(),
            value: None,
            count: 0,
            no_path: true,
        }
    }
}

/// A search of [`Art::probe`] stopped in front of an inner node (made by
/// [`Art::probe_cursor`]). Each [`Self::step`] visits that node and starts
/// loading the next one's first lines, so the caller can step other
/// cursors while they arrive.
pub struct ProbeCursor<'a, V: LeafValue> {
    /// An inner node: the slot the search goes through next.
    at: &'a Child<V>,
    key: &'a [u8],
    /// Key bytes consumed above `at`.
    depth: usize,
}

impl<'a, V: LeafValue> ProbeCursor<'a, V> {
    /// The cursor in front of `at` at `depth`, or `probe`'s answer when `at`
    /// is a leaf (a leaf word holds its value: no load).
    #[inline(always)]
    fn enter(at: &'a Child<V>, key: &'a [u8], depth: usize) -> Result<Self, Option<V>> {
        match at.view() {
            View::Leaf(v) => Err(Some(v)),
            View::Inner(node) => {
                let byte = key.get(depth).copied();
                dispatch!(node, n => n.prefetch_search(byte));
                Ok(ProbeCursor { at, key, depth })
            }
        }
    }

    /// Visits the node in front: `Ok` with the cursor in front of the next
    /// node, or `Err` with what [`Art::probe`] returns for the key.
    #[inline(always)]
    pub fn step(self) -> Result<Self, Option<V>> {
        let mut depth = self.depth;
        let next = dispatch!(self.at.inner(), n => descend(n, self.key, &mut depth))?;
        Self::enter(next, self.key, depth)
    }
}

/// What the four node kinds share. Positions (`pos`) are indices into the
/// kind's child array, valid until the node changes.
trait InnerNode<V: LeafValue> {
    /// Fewest children of a node of this kind (invariant 3).
    const MIN_CHILDREN: usize;
    /// Most children of a node of this kind.
    const MAX_CHILDREN: usize;

    fn header(&self) -> &Header<V>;
    fn header_mut(&mut self) -> &mut Header<V>;
    /// Starts loading the lines of the child slots a search may read next.
    #[inline]
    fn prefetch_children(&self) {}
    /// Starts loading what a search for `byte` (the key's byte at the
    /// node's depth; `None` where the key ends there) reads first in this
    /// node if it has no compressed path: the header's line and the lines
    /// of the child slots the byte can be in. Addresses only: nothing is
    /// loaded, and a wrong guess (a node with a path) costs bandwidth.
    #[inline(always)]
    fn prefetch_search(&self, byte: Option<u8>) {
        let _ = byte;
        crate::hint::prefetch(self.header());
        self.prefetch_children();
    }
    /// Position of the child for `byte`.
    fn find_pos(&self, byte: u8) -> Option<usize>;
    /// The child for `byte`.
    fn find(&self, byte: u8) -> Option<&Child<V>>;
    /// The child at a position `find_pos` returned.
    fn child_at(&self, pos: usize) -> Option<&Child<V>>;
    /// The child at a position `find_pos` returned (there is one).
    fn child_at_mut(&mut self, pos: usize) -> &mut Child<V>;
    /// Adds a child for `byte`, which has none; the node is not full.
    fn add(&mut self, byte: u8, child: Child<V>);
    /// Removes the child for `byte`.
    fn take(&mut self, byte: u8) -> Option<Child<V>>;
    /// The child with the smallest byte.
    fn first_child(&self) -> Option<&Child<V>>;
    /// The child with the largest byte.
    fn last_child(&self) -> Option<&Child<V>>;
    /// The children with their bytes, in byte order.
    fn children<'a>(&'a self) -> impl Iterator<Item = (u8, &'a Child<V>)>
    where
        V: 'a;

    /// Whether `add` needs a bigger kind first.
    fn is_full(&self) -> bool {
        usize::from(self.header().count) >= Self::MAX_CHILDREN
    }

    /// Whether the node must shrink into a smaller kind (a `Node4` is
    /// replaced by its last entry instead, see `fix_underfull`).
    fn is_underfull(&self) -> bool {
        usize::from(self.header().count) < Self::MIN_CHILDREN
    }
}

impl<'a, V: LeafValue> InnerRef<'a, V> {
    #[inline]
    fn header(self) -> &'a Header<V> {
        dispatch!(self, n => n.header())
    }
}

impl<'a, V: LeafValue> InnerMut<'a, V> {
    fn header_mut(self) -> &'a mut Header<V> {
        dispatch!(self, n => n.header_mut())
    }
}

/// Adds a child for `byte` (which has none) to the inner node in `slot`,
/// growing the node into the next kind first if it is full.
fn add_child<V: LeafValue>(slot: &mut Child<V>, byte: u8, child: Child<V>, dram: &mut usize) {
    let grown = match slot.inner_mut() {
        Kind::N4(n) if n.is_full() => Kind::N16(Box::new(Node16::grown(n))),
        Kind::N16(n) if n.is_full() => Kind::N48(Box::new(Node48::grown(n))),
        Kind::N48(n) if n.is_full() => Kind::N256(Box::new(Node256::grown(n))),
        node => return dispatch!(node, n => n.add(byte, child)),
    };
    replace_node(slot, grown, dram);
    dispatch!(slot.inner_mut(), n => n.add(byte, child));
}

/// Puts `other` (which took over the contents of the node in `slot`) in its
/// place.
fn replace_node<V: LeafValue>(slot: &mut Child<V>, other: Inner<V>, dram: &mut usize) {
    *dram -= slot.inner().node_bytes::<V>();
    *dram += other.node_bytes::<V>();
    *slot = Child::node(other);
}

/// Whether the leaf `v` in `slot`, at `depth`, holds `key`: no when the
/// slot's tag already tells the keys apart, else by loading its key.
#[inline]
fn leaf_holds<V: LeafValue, K: LeafKeys<V> + ?Sized>(
    slot: &Child<V>,
    v: V,
    key: &[u8],
    depth: usize,
    keys: &K,
) -> bool {
    slot.leaf_tag().first_difference(&key[depth..]).is_none() && keys.key(v) == key
}

/// Length of the common prefix of `a` and `b`.
#[inline]
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// One search step at `n`, `depth` bytes into `key`: the next child (depth
/// advanced past its byte), or the answer (`Err`).
#[inline(always)]
fn descend<'a, V: LeafValue, N: InnerNode<V>>(
    n: &'a N,
    key: &[u8],
    depth: &mut usize,
) -> Result<&'a Child<V>, Option<V>> {
    n.prefetch_children();
    let h = n.header();
    // Most nodes have no compressed path. Decided by a branch, the common
    // case's child byte comes from `depth` alone, so the CPU loads the
    // child slot while the header is still in flight (the search-loop
    // shape of docs/design.md §11); `depth + prefix length` would make the
    // slot wait for the header.
    debug_assert_eq!(
        h.no_path,
        h.prefix.is_empty(),
        "no_path agrees with the prefix"
    );
    let at = if h.no_path {
        *depth
    } else {
        let prefix = h.prefix.as_slice();
        let end = *depth + prefix.len();
        // `key[depth..]` starts with the prefix, compared without a call
        // (most paths are a few bytes).
        match key.get(*depth..end) {
            Some(k) if crate::keycmp::eq_same_len(k, prefix) => end,
            _ => return Err(None),
        }
    };
    let Some(&byte) = key.get(at) else {
        return Err(h.value());
    };
    *depth = at + 1;
    n.find(byte).ok_or(None)
}

/// What `insert` does at the node it is looking at.
enum InsertStep<V> {
    /// The slot holds a leaf: replace or split it.
    Leaf(V),
    /// The key leaves the node's prefix after `matched` bytes.
    SplitPrefix { matched: usize },
    /// The key ends at this node.
    ValueSlot,
    /// Go down to the child at this position.
    Descend(usize),
    /// No child for this byte: add a leaf.
    AddLeaf(u8),
}

/// Inserts into the non-empty subtree in `slot` (at depth 0): the value
/// `make` returns, called where the key goes in; if the key is present, its
/// value is returned, and replaced by `make`'s only if `replace`.
///
/// Each round inspects the slot through a shared borrow and then acts on
/// it, so the cursor is only reborrowed mutably where it moves down.
fn insert_below<V, K, E, F>(
    mut slot: &mut Child<V>,
    key: &[u8],
    keys: &K,
    dram: &mut usize,
    replace: bool,
    make: F,
) -> Result<Option<V>, E>
where
    V: LeafValue,
    K: LeafKeys<V> + ?Sized,
    F: FnOnce() -> Result<V, E>,
{
    let mut depth = 0;
    loop {
        let step = match slot.view() {
            View::Leaf(old) => InsertStep::Leaf(old),
            View::Inner(node) => {
                let prefix = node.header().prefix.as_slice();
                let matched = common_prefix_len(prefix, &key[depth..]);
                if matched < prefix.len() {
                    InsertStep::SplitPrefix { matched }
                } else {
                    depth += prefix.len();
                    match key.get(depth) {
                        None => InsertStep::ValueSlot,
                        Some(&byte) => match dispatch!(node, n => n.find_pos(byte)) {
                            Some(pos) => InsertStep::Descend(pos),
                            None => InsertStep::AddLeaf(byte),
                        },
                    }
                }
            }
        };
        return match step {
            InsertStep::Descend(pos) => {
                slot = dispatch!(slot.inner_mut(), n => n.child_at_mut(pos));
                depth += 1;
                continue;
            }
            InsertStep::Leaf(old) => {
                // The slot's tag may tell that the keys differ, and where,
                // without loading the leaf's key from PM ("Key tags in the
                // child slot", docs/design.md §7).
                let tag = slot.leaf_tag();
                if let Some(common) = tag.first_difference(&key[depth..]) {
                    let value = make()?;
                    let old_entry = (tag.known()[common], old, tag.after(common + 1));
                    *slot = split_leaf(old_entry, key, value, depth, common, dram);
                    return Ok(None);
                }
                let old_key = keys.key(old);
                if old_key == key {
                    if replace {
                        *slot = Child::tagged_leaf(make()?, KeyTag::of(key, depth));
                    }
                    return Ok(Some(old));
                }
                let value = make()?;
                let common = common_prefix_len(&old_key[depth..], &key[depth..]);
                let at = depth + common;
                let old_entry = match old_key.get(at) {
                    Some(&byte) => (byte, old, KeyTag::of(old_key, at + 1)),
                    // The old key ends where the new one goes on: it takes
                    // the new node's value slot, and the new key its child.
                    None => {
                        let byte = key[at];
                        let mut n = Node4::new(Header::with_prefix(Prefix::new(&key[depth..at])));
                        n.header.set_value(Some(old));
                        n.add(byte, Child::tagged_leaf(value, KeyTag::of(key, at + 1)));
                        *dram += size_of::<Node4<V>>() + n.header.prefix.heap_bytes();
                        *slot = Child::node(Kind::N4(Box::new(n)));
                        return Ok(None);
                    }
                };
                *slot = split_leaf(old_entry, key, value, depth, common, dram);
                Ok(None)
            }
            InsertStep::SplitPrefix { matched } => {
                let value = make()?;
                split_prefix(slot, depth, matched, key, value, dram);
                Ok(None)
            }
            InsertStep::ValueSlot => {
                let header = slot.inner_mut().header_mut();
                match header.value() {
                    Some(old) => {
                        if replace {
                            header.set_value(Some(make()?));
                        }
                        Ok(Some(old))
                    }
                    None => {
                        header.set_value(Some(make()?));
                        Ok(None)
                    }
                }
            }
            InsertStep::AddLeaf(byte) => {
                let value = make()?;
                let leaf = Child::tagged_leaf(value, KeyTag::of(key, depth + 1));
                add_child(slot, byte, leaf, dram);
                Ok(None)
            }
        };
    }
}

/// Lazy expansion: the `Node4` that replaces a leaf at `depth` when a
/// different key arrives, where the leaf's key goes on past the two keys'
/// `common` bytes after `depth`: with `old = (byte, value, tag)`, its next
/// byte, its value and its tag below that byte. The node's prefix is the
/// common part; `key` then ends there (value slot) or goes on under its
/// next byte, which differs from the old key's.
fn split_leaf<V: LeafValue>(
    old: (u8, V, KeyTag),
    key: &[u8],
    value: V,
    depth: usize,
    common: usize,
    dram: &mut usize,
) -> Child<V> {
    let at = depth + common;
    // Encoded before the tree changes (it panics on a value too large).
    let new_leaf = key
        .get(at)
        .map(|&byte| (byte, Child::tagged_leaf(value, KeyTag::of(key, at + 1))));
    let mut n = Node4::new(Header::with_prefix(Prefix::new(&key[depth..at])));
    let (old_byte, old_value, old_tag) = old;
    n.add(old_byte, Child::tagged_leaf(old_value, old_tag));
    match new_leaf {
        None => n.header.set_value(Some(value)),
        Some((byte, leaf)) => n.add(byte, leaf),
    }
    *dram += size_of::<Node4<V>>() + n.header.prefix.heap_bytes();
    Child::node(Kind::N4(Box::new(n)))
}

/// Puts a `Node4` above the inner node in `slot` (at `depth`) whose prefix
/// `key` leaves after `matched` bytes. The new node takes the `matched`
/// common bytes; the old node keeps the bytes after the first difference and
/// hangs under it; the new key goes beside it.
fn split_prefix<V: LeafValue>(
    slot: &mut Child<V>,
    depth: usize,
    matched: usize,
    key: &[u8],
    value: V,
    dram: &mut usize,
) {
    // Encoded before the tree changes (it panics on a value of 2^63 or
    // more); it fills the slot until the new node moves in.
    let placeholder = Child::leaf(value);
    let header = slot.inner_mut().header_mut();
    let old_prefix = header.prefix.as_slice();
    let upper = Prefix::new(&old_prefix[..matched]);
    let old_byte = old_prefix[matched];
    let lower = Prefix::new(&old_prefix[matched + 1..]);
    *dram -= header.prefix.heap_bytes();
    *dram += lower.heap_bytes() + upper.heap_bytes() + size_of::<Node4<V>>();
    header.set_prefix(lower);

    let mut n = Node4::new(Header::with_prefix(upper));
    match key.get(depth + matched) {
        None => n.header.set_value(Some(value)),
        Some(&byte) => {
            let tag = KeyTag::of(key, depth + matched + 1);
            n.add(byte, Child::tagged_leaf(value, tag));
        }
    }
    let old = std::mem::replace(slot, placeholder);
    n.add(old_byte, old);
    *slot = Child::node(Kind::N4(Box::new(n)));
}

/// Removes `key` from the inner node in `slot` (at depth 0) or below.
///
/// Leaves are removed from their parent, whose slot is the cursor, so the
/// fix-up after a removal ([`fix_underfull`]) always has the slot to
/// rewrite.
fn remove_below<V: LeafValue, K: LeafKeys<V> + ?Sized>(
    mut slot: &mut Child<V>,
    key: &[u8],
    keys: &K,
    dram: &mut usize,
) -> Option<V> {
    let mut depth = 0;
    loop {
        let node = slot.inner();
        let header = node.header();
        let prefix = header.prefix.as_slice();
        if !key[depth..].starts_with(prefix) {
            return None;
        }
        depth += prefix.len();
        let Some(&byte) = key.get(depth) else {
            header.value?;
            let old = slot
                .inner_mut()
                .header_mut()
                .value
                .take()
                .map(child::Packed::get);
            fix_underfull(slot, dram);
            return old;
        };
        let pos = dispatch!(node, n => n.find_pos(byte))?;
        let child = dispatch!(node, n => n.child_at(pos))?;
        match child.view() {
            View::Leaf(v) => {
                if !leaf_holds(child, v, key, depth + 1, keys) {
                    return None;
                }
                dispatch!(slot.inner_mut(), n => n.take(byte));
                fix_underfull(slot, dram);
                return Some(v);
            }
            View::Inner(_) => {
                slot = dispatch!(slot.inner_mut(), n => n.child_at_mut(pos));
                depth += 1;
            }
        }
    }
}

/// Restores invariants 2 and 3 for the inner node in `slot` after it lost
/// one entry: shrinks a sparse `Node16`/`Node48`/`Node256`, and replaces a
/// `Node4` with a single entry by that entry (merging prefixes when the
/// entry is an inner node).
fn fix_underfull<V: LeafValue>(slot: &mut Child<V>, dram: &mut usize) {
    let shrunk = match slot.inner_mut() {
        Kind::N4(n) => {
            let entries = usize::from(n.header.count) + usize::from(n.header.value.is_some());
            if entries >= 2 {
                return;
            }
            *dram -= size_of::<Node4<V>>() + n.header.prefix.heap_bytes();
            // The entry left moves up into the node's slot; a leaf's tag
            // then starts before the node's path.
            let only = n.take_only_child();
            let prefix = n.header.prefix.as_slice();
            let replacement = match only {
                None => Child::tagged_leaf(
                    n.header
                        .value()
                        .expect("a node with no child keeps its value slot"),
                    KeyTag::under(prefix, None, KeyTag::NONE),
                ),
                Some((byte, mut child)) => match child.view_mut() {
                    View::Inner(inner) => {
                        let child_header = inner.header_mut();
                        let merged =
                            Prefix::joined(prefix, Some(byte), child_header.prefix.as_slice());
                        *dram -= child_header.prefix.heap_bytes();
                        *dram += merged.heap_bytes();
                        child_header.set_prefix(merged);
                        child
                    }
                    View::Leaf(v) => {
                        let tag = KeyTag::under(prefix, Some(byte), child.leaf_tag());
                        Child::tagged_leaf(v, tag)
                    }
                },
            };
            *slot = replacement;
            return;
        }
        Kind::N16(n) if n.is_underfull() => Kind::N4(Box::new(Node4::shrunk(n))),
        Kind::N48(n) if n.is_underfull() => Kind::N16(Box::new(Node16::shrunk(n))),
        Kind::N256(n) if n.is_underfull() => Kind::N48(Box::new(Node48::shrunk(n))),
        _ => return,
    };
    replace_node(slot, shrunk, dram);
}
