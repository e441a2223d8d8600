//! The 8-byte child slot: a leaf value or an owned inner node, told apart by
//! tag bits in one word. The only `unsafe` code of the ART is here.
//!
//! # Encoding
//!
//! | word | meaning |
//! |---|---|
//! | `bits << 1 \| 1` | a leaf whose value is `V::from_bits(bits)` (`bits` < 2^63) |
//! | `tag << 47 \| bits << 1 \| 1` | the same, where `V::TAGGED` (`bits` < 2^46): `tag` is the leaf's [`KeyTag`] |
//! | `address \| kind << 1` | an inner node at `address` (aligned to 8), `kind` 0..=3 = `Node4`, `Node16`, `Node48`, `Node256` |
//!
//! The word is never 0 (a leaf has bit 0 set, a node address is not null),
//! so `Option<Child<V>>` is 8 bytes too. A 16-byte enum (a tag beside a
//! pointer or value) made every child slot twice as large: a `Node4` took
//! 120 bytes, a `Node256` 4,144 (docs/design.md §7, "Compact nodes").
//!
//! # Ownership
//! A node word is made by [`Child::node`] from `Box::leak`, and the `Child`
//! owns that box: it is rebuilt and freed when the `Child` is dropped (and
//! nowhere else outside the tests). [`Child::view`] and [`Child::view_mut`] lend
//! it for as long as the `Child` is borrowed, so the borrow rules of
//! `Box` hold unchanged. Node addresses keep their provenance
//! (`NonNull::map_addr`); a leaf word is a plain number with none, and is
//! never dereferenced.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::num::{NonZeroU64, NonZeroUsize};
use std::ptr::NonNull;

use super::node16::Node16;
use super::node256::Node256;
use super::node4::Node4;
use super::node48::Node48;
use super::tag::{KeyTag, TAG_BITS};

/// Values an ART can hold: numbers below 2^63, so that a leaf and its tag
/// bit fit in one word (HART's leaves are PM offsets, below 2^46).
pub trait LeafValue: Copy {
    /// The value as a number; storing one of 2^63 or more in a tree panics
    /// ([`leaf_word`]).
    fn to_bits(self) -> u64;
    /// The value of [`Self::to_bits`]'s result.
    fn from_bits(bits: u64) -> Self;
    /// Whether every value is below 2^46 ([`TAGGED_LIMIT`]), which leaves
    /// room in a leaf word for the leaf's [`KeyTag`] (HART's leaves: pools
    /// are at most 2^46 bytes). Untagged trees split every leaf they meet
    /// by loading its key.
    const TAGGED: bool = false;
}

/// Every value of a [`LeafValue::TAGGED`] type is below this.
pub const TAGGED_LIMIT: u64 = 1 << 46;

/// Where a leaf word's tag starts.
const TAG_SHIFT: u32 = 47;
const _: () = assert!(TAG_SHIFT + TAG_BITS == 64 && TAGGED_LIMIT << 1 == 1 << TAG_SHIFT);

/// The value of a leaf word (the inverse of [`leaf_word`]).
#[inline(always)]
fn leaf_value<V: LeafValue>(word: u64) -> V {
    if V::TAGGED {
        V::from_bits((word >> 1) & (TAGGED_LIMIT - 1))
    } else {
        V::from_bits(word >> 1)
    }
}

/// The tag of a leaf word ([`KeyTag::NONE`] in an untagged tree).
#[inline(always)]
fn leaf_tag<V: LeafValue>(word: u64) -> KeyTag {
    if V::TAGGED {
        KeyTag::from_bits(word >> TAG_SHIFT)
    } else {
        KeyTag::NONE
    }
}

/// The leaf word of `v` with `tag` (dropped in an untagged tree):
/// `bits << 1 | 1`, and `tag << 47` where `V::TAGGED`.
///
/// # Panics
/// If `v.to_bits()` is 2^63 or more (no pool offset is), or 2^46 or more
/// where `V::TAGGED`. Callers encode a value before they change the tree,
/// so a panic leaves it as it was.
#[inline]
fn leaf_word<V: LeafValue>(v: V, tag: KeyTag) -> NonZeroU64 {
    let bits = v.to_bits();
    let word = if V::TAGGED {
        assert!(bits < TAGGED_LIMIT, "an ART value must be below 2^46");
        tag.to_bits() << TAG_SHIFT | bits << 1 | 1
    } else {
        assert!(bits < 1 << 63, "an ART value must be below 2^63");
        bits << 1 | 1
    };
    NonZeroU64::new(word).expect("bit 0 is set")
}

impl LeafValue for u64 {
    #[inline]
    fn to_bits(self) -> u64 {
        self
    }

    #[inline]
    fn from_bits(bits: u64) -> Self {
        bits
    }
}

impl LeafValue for u32 {
    const TAGGED: bool = true;

    #[inline]
    fn to_bits(self) -> u64 {
        u64::from(self)
    }

    #[inline]
    fn from_bits(bits: u64) -> Self {
        bits as u32
    }
}

const _: () = assert!(size_of::<usize>() == 8, "child words are 64-bit");

/// One of the four node kinds, holding `A`..`D`: owned boxes ([`Inner`]),
/// shared references ([`InnerRef`]) or exclusive ones ([`InnerMut`]).
#[derive(Clone, Copy)]
pub(super) enum Kind<A, B, C, D> {
    N4(A),
    N16(B),
    N48(C),
    N256(D),
}

/// An inner node, owned.
pub(super) type Inner<V> = Kind<Box<Node4<V>>, Box<Node16<V>>, Box<Node48<V>>, Box<Node256<V>>>;
/// An inner node, borrowed.
pub(super) type InnerRef<'a, V> = Kind<&'a Node4<V>, &'a Node16<V>, &'a Node48<V>, &'a Node256<V>>;
/// An inner node, borrowed exclusively.
pub(super) type InnerMut<'a, V> =
    Kind<&'a mut Node4<V>, &'a mut Node16<V>, &'a mut Node48<V>, &'a mut Node256<V>>;

impl<A, B, C, D> Kind<A, B, C, D> {
    /// 0..=3 for `N4`..`N256` (the tag of a node word).
    #[inline]
    fn tag(&self) -> usize {
        match self {
            Kind::N4(_) => 0,
            Kind::N16(_) => 1,
            Kind::N48(_) => 2,
            Kind::N256(_) => 3,
        }
    }

    /// `size_of` the node of this kind (without its prefix spill).
    pub(super) fn node_bytes<V>(&self) -> usize {
        [
            size_of::<Node4<V>>(),
            size_of::<Node16<V>>(),
            size_of::<Node48<V>>(),
            size_of::<Node256<V>>(),
        ][self.tag()]
    }
}

/// What a child slot holds, seen through [`Child::view`] (`N` =
/// [`InnerRef`]) or [`Child::view_mut`] ([`InnerMut`]).
pub(super) enum View<V, N> {
    /// A key's value; its key is `keys.key(v)`.
    Leaf(V),
    /// An inner node.
    Inner(N),
}

/// A child slot (or the root): a leaf value or an owned inner node, in one
/// word (see the module docs).
pub(super) struct Child<V> {
    word: NonNull<u8>,
    _owns: PhantomData<Inner<V>>,
}

// SAFETY: a `Child` is a `V` or an owned `Box` of a node, and a node holds
// only `Child`ren, `V`s (packed), its prefix (owned bytes) and plain
// numbers (module docs, "Ownership"). It shares nothing, so it may move to
// another thread when `V` may.
unsafe impl<V: Send> Send for Child<V> {}
// SAFETY: as for `Send`: `&Child` gives out only `&` to the node and copies
// of `V`s, so it may be shared when `V` may.
unsafe impl<V: Sync> Sync for Child<V> {}

const _: () = assert!(size_of::<Option<Child<u64>>>() == 8);

/// A value in one non-zero word (`bits << 1 | 1`, a leaf word without
/// ownership): a node's value slot, `Option<Packed<V>>`, is 8 bytes.
pub(super) struct Packed<V> {
    word: NonZeroU64,
    _v: PhantomData<V>,
}

impl<V: LeafValue> Clone for Packed<V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: LeafValue> Copy for Packed<V> {}

impl<V: LeafValue> Packed<V> {
    #[inline]
    pub(super) fn new(v: V) -> Self {
        Packed {
            word: leaf_word(v, KeyTag::NONE),
            _v: PhantomData,
        }
    }

    #[inline]
    pub(super) fn get(self) -> V {
        leaf_value(self.word.get())
    }
}

const _: () = assert!(size_of::<Option<Packed<u64>>>() == 8);

/// Bits 1..=2: the kind of a node word.
const KIND_MASK: usize = 0b110;

/// The node at `$at` (a `*mut u8`) whose kind is in bits 1..=2 of `$word`,
/// as a [`Kind`] whose variant holds `$make`, evaluated with `$p` bound to
/// the node's typed pointer.
macro_rules! node_of {
    ($at:expr, $word:expr, |$p:ident| $make:expr) => {
        match ($word & KIND_MASK) >> 1 {
            0 => {
                let $p = $at.cast::<Node4<V>>();
                Kind::N4($make)
            }
            1 => {
                let $p = $at.cast::<Node16<V>>();
                Kind::N16($make)
            }
            2 => {
                let $p = $at.cast::<Node48<V>>();
                Kind::N48($make)
            }
            _ => {
                let $p = $at.cast::<Node256<V>>();
                Kind::N256($make)
            }
        }
    };
}

impl<V: LeafValue> Child<V> {
    /// A leaf holding `v`, whose slot knows nothing of its key.
    #[inline]
    pub(super) fn leaf(v: V) -> Self {
        Self::tagged_leaf(v, KeyTag::NONE)
    }

    /// A leaf holding `v`, whose slot knows `tag` of its key (kept only
    /// where `V::TAGGED`).
    #[inline]
    pub(super) fn tagged_leaf(v: V, tag: KeyTag) -> Self {
        let word = NonZeroUsize::new(leaf_word(v, tag).get() as usize).expect("bit 0 is set");
        Child {
            word: NonNull::without_provenance(word),
            _owns: PhantomData,
        }
    }

    /// The tag of the leaf in this slot ([`KeyTag::NONE`] for a node, or in
    /// an untagged tree).
    #[inline]
    pub(super) fn leaf_tag(&self) -> KeyTag {
        let word = self.word.addr().get() as u64;
        if word & 1 == 1 {
            leaf_tag::<V>(word)
        } else {
            KeyTag::NONE
        }
    }

    /// What the slot holds, borrowed.
    #[inline(always)]
    pub(super) fn view(&self) -> View<V, InnerRef<'_, V>> {
        let word = self.word.addr().get();
        if word & 1 == 1 {
            return View::Leaf(leaf_value(word as u64));
        }
        let at = self.node_ptr();
        // SAFETY: bit 0 is clear, so `Child::node` made this word from a live
        // box of the kind in bits 1..=2, which `self` owns; `&self` lends it
        // shared for as long as `self` is borrowed (module docs).
        View::Inner(unsafe { node_of!(at, word, |p| &*p) })
    }

    /// What the slot holds, the node borrowed exclusively.
    #[inline]
    pub(super) fn view_mut(&mut self) -> View<V, InnerMut<'_, V>> {
        let word = self.word.addr().get();
        if word & 1 == 1 {
            return View::Leaf(leaf_value(word as u64));
        }
        let at = self.node_ptr();
        // SAFETY: as in `view`; `&mut self` lends the box exclusively.
        View::Inner(unsafe { node_of!(at, word, |p| &mut *p) })
    }

    /// Starts loading the first line of the node in this slot (nothing for
    /// a leaf), without waiting: a range walk asks for the next siblings'
    /// nodes while it walks one, so that their misses overlap.
    #[inline(always)]
    pub(super) fn prefetch_node(&self) {
        if self.word.addr().get() & 1 == 0 {
            crate::hint::prefetch_ptr(self.node_ptr());
        }
    }

    /// The slot's word as a number, for [`prefetch_word`]: a copy that a
    /// caller keeps outside the tree (HART's root hints) and that owns
    /// nothing; it is never turned back into a `Child`.
    #[inline]
    pub(super) fn word(&self) -> u64 {
        self.word.addr().get() as u64
    }

    /// The inner node in a slot the caller has just seen hold one.
    #[inline]
    pub(super) fn inner(&self) -> InnerRef<'_, V> {
        match self.view() {
            View::Inner(node) => node,
            View::Leaf(_) => unreachable!("the caller saw an inner node in this slot"),
        }
    }

    /// See [`Child::inner`].
    #[inline]
    pub(super) fn inner_mut(&mut self) -> InnerMut<'_, V> {
        match self.view_mut() {
            View::Inner(node) => node,
            View::Leaf(_) => unreachable!("the caller saw an inner node in this slot"),
        }
    }
}

impl<V> Child<V> {
    /// A slot owning `node`.
    pub(super) fn node(node: Inner<V>) -> Self {
        let tag = node.tag();
        let at = match node {
            Kind::N4(b) => NonNull::from(Box::leak(b)).cast::<u8>(),
            Kind::N16(b) => NonNull::from(Box::leak(b)).cast::<u8>(),
            Kind::N48(b) => NonNull::from(Box::leak(b)).cast::<u8>(),
            Kind::N256(b) => NonNull::from(Box::leak(b)).cast::<u8>(),
        };
        const {
            assert!(align_of::<Node4<V>>() >= 8 && align_of::<Node16<V>>() >= 8);
            assert!(align_of::<Node48<V>>() >= 8 && align_of::<Node256<V>>() >= 8);
        }
        debug_assert_eq!(at.addr().get() & (KIND_MASK | 1), 0, "nodes are 8-aligned");
        Child {
            word: at.map_addr(|a| a | (tag << 1)),
            _owns: PhantomData,
        }
    }

    /// The node a slot owns, handed back as its box (`None` for a leaf).
    #[cfg(test)]
    fn into_node(self) -> Option<Inner<V>> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again, so the box it
        // owned is rebuilt exactly once, here.
        unsafe { this.take_box() }
    }

    /// The node address of a node word (its tag bits cleared).
    #[inline(always)]
    fn node_ptr(&self) -> *mut u8 {
        self.word.as_ptr().map_addr(|a| a & !KIND_MASK)
    }

    /// The box of a node word (`None` for a leaf).
    ///
    /// # Safety
    /// The caller must not use `self` afterwards except to forget it: the
    /// box now owns the node.
    unsafe fn take_box(&self) -> Option<Inner<V>> {
        let word = self.word.addr().get();
        if word & 1 == 1 {
            return None;
        }
        let at = self.node_ptr();
        // SAFETY: the word was made by `Child::node` from `Box::leak` of a
        // node of the kind in bits 1..=2 (bit 0 is clear), and the caller
        // gives up `self`, so the box is rebuilt once.
        Some(unsafe { node_of!(at, word, |p| Box::from_raw(p)) })
    }
}

impl<V> Drop for Child<V> {
    fn drop(&mut self) {
        // SAFETY: `self` is being dropped and not used again.
        drop(unsafe { self.take_box() });
    }
}

/// Starts loading the lines that a search for `byte` reads first in the
/// node of `word`, a copy of some slot's word taken by [`Child::word`]
/// (0: none), without reading the node: the copy may be stale and its node
/// freed, and a prefetch of any address is harmless (it never faults and
/// changes no architectural state). A leaf word is not loaded: its value is
/// returned, for the caller to prefetch what it points to.
#[inline(always)]
pub(super) fn prefetch_word<V: LeafValue>(word: u64, byte: Option<u8>) -> Option<V> {
    if word & 1 == 1 {
        return Some(leaf_value(word));
    }
    if word == 0 {
        return None;
    }
    // An address for the hint only: never dereferenced, so it needs no
    // provenance.
    let at = std::ptr::without_provenance::<u8>(word as usize & !KIND_MASK);
    match (word as usize & KIND_MASK) >> 1 {
        0 => Node4::<V>::prefetch_at(at),
        1 => Node16::<V>::prefetch_at(at),
        2 => Node48::<V>::prefetch_at(at, byte),
        _ => Node256::<V>::prefetch_at(at, byte),
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::Header;
    use super::*;

    #[test]
    fn leaves_round_trip_through_the_word() {
        for v in [0u64, 1, 42, (1 << 62) + 7, (1 << 63) - 1] {
            match Child::leaf(v).view() {
                View::Leaf(got) => assert_eq!(got, v),
                View::Inner(_) => panic!("a leaf read as a node"),
            }
        }
        match Child::leaf(u32::MAX).view() {
            View::Leaf(got) => assert_eq!(got, u32::MAX),
            View::Inner(_) => panic!("a leaf read as a node"),
        }
        assert!(Child::leaf(3u64).into_node().is_none());
    }

    #[test]
    #[should_panic(expected = "below 2^63")]
    fn a_value_of_2_pow_63_is_refused() {
        let _ = Child::leaf(1u64 << 63);
    }

    #[test]
    fn nodes_keep_their_kind_and_contents() {
        let mut n4 = Node4::<u64>::new(Header::default());
        super::super::InnerNode::add(&mut n4, 7, Child::leaf(70));
        let nodes: [Inner<u64>; 4] = [
            Kind::N4(Box::new(n4)),
            Kind::N16(Box::new(Node16::empty())),
            Kind::N48(Box::new(Node48::empty())),
            Kind::N256(Box::new(Node256::empty())),
        ];
        for (tag, node) in nodes.into_iter().enumerate() {
            let mut c = Child::node(node);
            match c.view() {
                View::Inner(n) => assert_eq!(n.tag(), tag),
                View::Leaf(_) => panic!("a node read as a leaf"),
            }
            assert_eq!(c.inner_mut().tag(), tag);
            match c.into_node() {
                Some(Kind::N4(n)) => {
                    use super::super::InnerNode;
                    match n.find(7).map(Child::view) {
                        Some(View::Leaf(v)) => assert_eq!(v, 70),
                        _ => panic!("the Node4 lost its child"),
                    }
                }
                Some(n) => assert_eq!(n.tag(), tag),
                None => panic!("a node read as a leaf"),
            }
        }
    }
}
