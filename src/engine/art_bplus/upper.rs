//! The upper layer, in DRAM: an adaptive radix tree over key prefixes whose
//! entries are the B+-subtrees of NVNodes (art-bplus §2.2, Fig. 3), rebuilt
//! from the leaf list at every open (docs/design.md §16, "Decisions",
//! item 1).
//!
//! A key of `n` bytes is split into its *prefix*, `key[..n - 1]`, which the
//! radix layer resolves, and its *fragment*, `key[n - 1]`, which the NVNode
//! layer partitions (§3.2(1): "是对键分片的最后一字的划分"). The ART
//! ([`Art`], HART's DRAM tree, keyed by prefix) maps each prefix to a
//! [`Sub`]: its subtree, whose leaves (NVNodes in PM) each hold the keys of
//! one range of fragments. The paper's inner NVNodes pick a leaf by "the
//! largest fragment smaller than the key"; here that is a sorted list of
//! each leaf's least fragment (`low`), searched in DRAM.
//!
//! The subtrees are also linked in prefix order (`prev`, `next`), which is
//! the leaf list's order: the leaf list holds every subtree's leaves, the
//! subtrees in byte-wise order of their prefixes and each one's leaves in
//! order of their fragments. A new subtree's first leaf goes into the list
//! after the last leaf of the subtree before it (the paper's predecessor
//! search, §2.5, done in DRAM), and a leaf leaves the list through its
//! predecessor there ([`Upper::list_pred`]).

use std::ops::Bound;

use crate::engine::hart::art::{Art, LeafKeys};

/// No subtree.
pub const NONE: u32 = u32::MAX;

/// A subtree: the leaves of one prefix.
pub struct Sub {
    /// The prefix: every key of the subtree is `prefix ‖ fragment`.
    pub prefix: Box<[u8]>,
    /// The first leaf (its low fragment is 0).
    pub leaf0: u64,
    /// The other leaves, by low fragment: `(low, leaf)`, each leaf holding
    /// the fragments from its `low` up to the next leaf's.
    pub more: Vec<(u8, u64)>,
    /// The subtrees before and after in prefix order, or [`NONE`].
    pub prev: u32,
    /// See `prev`.
    pub next: u32,
}

impl Sub {
    /// The subtree's leaves, in list order, with their low fragments.
    pub fn leaves(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        std::iter::once((0, self.leaf0)).chain(self.more.iter().copied())
    }

    /// The number of leaves.
    pub fn leaf_count(&self) -> usize {
        1 + self.more.len()
    }

    /// The leaf that holds `frag`, and its index among the leaves. The
    /// lows are counted, not searched: a loop without branches, where a
    /// binary search over random fragments mispredicts at most steps.
    pub fn leaf_for(&self, frag: u8) -> (usize, u64) {
        let i = self.more.iter().filter(|&&(low, _)| low <= frag).count();
        (i, self.leaf(i))
    }

    /// Leaf `i`.
    pub fn leaf(&self, i: usize) -> u64 {
        if i == 0 {
            self.leaf0
        } else {
            self.more[i - 1].1
        }
    }

    /// The last leaf.
    pub fn last_leaf(&self) -> u64 {
        self.more.last().map_or(self.leaf0, |&(_, l)| l)
    }
}

/// Where the ART finds a subtree's key: its prefix.
struct Prefixes<'a>(&'a [Sub]);

impl LeafKeys<u32> for Prefixes<'_> {
    fn key(&self, v: u32) -> &[u8] {
        &self.0[v as usize].prefix
    }
}

/// The upper layer: the ART, the subtrees, their order.
#[derive(Default)]
pub struct Upper {
    art: Art<u32>,
    subs: Vec<Sub>,
    /// Slots of `subs` that hold no subtree.
    free: Vec<u32>,
    /// The first and last subtrees in prefix order, or [`NONE`] (empty);
    /// `first` is [`NONE`] exactly when the tree is empty.
    first: u32,
    last: u32,
    /// How many subtrees have a prefix of each length (a scan looks for the
    /// subtrees whose prefix is a prefix of its bound only at these).
    by_len: Vec<u32>,
    /// Leaves in all.
    leaves: usize,
}

impl Upper {
    /// An empty layer.
    pub fn new() -> Upper {
        Upper {
            first: NONE,
            last: NONE,
            ..Upper::default()
        }
    }

    /// The subtree of `prefix`, if any.
    pub fn find(&self, prefix: &[u8]) -> Option<u32> {
        self.art.get(prefix, &Prefixes(&self.subs))
    }

    /// The one subtree that can be `prefix`'s, found without comparing
    /// any prefix ([`Art::probe`]): `prefix`'s if it has one, else another
    /// or none. The caller compares the whole key where it reads it anyway
    /// (a search, in the record of the value).
    #[inline]
    pub fn probe(&self, prefix: &[u8]) -> Option<u32> {
        self.art.probe(prefix)
    }

    /// Subtree `s`.
    pub fn sub(&self, s: u32) -> &Sub {
        &self.subs[s as usize]
    }

    /// The first subtree in prefix order, or [`NONE`].
    pub fn first(&self) -> u32 {
        self.first
    }

    /// Whether the layer holds no subtree.
    pub fn is_empty(&self) -> bool {
        self.first == NONE
    }

    /// Subtrees in all.
    pub fn sub_count(&self) -> usize {
        self.art.len()
    }

    /// Leaves in all.
    pub fn leaf_count(&self) -> usize {
        self.leaves
    }

    /// The first subtree whose prefix is at or after `lo`, or [`NONE`].
    pub fn at_or_after(&self, lo: Bound<&[u8]>) -> u32 {
        let mut found = NONE;
        self.art
            .range_values(lo, Bound::Unbounded, &Prefixes(&self.subs), |s| {
                found = s;
                false
            });
        found
    }

    /// The subtrees around a prefix that has none: the one before and the
    /// one after it in prefix order ([`NONE`] at an end).
    pub fn neighbours(&self, prefix: &[u8]) -> (u32, u32) {
        let next = self.at_or_after(Bound::Excluded(prefix));
        let prev = if next == NONE {
            self.last
        } else {
            self.sub(next).prev
        };
        (prev, next)
    }

    /// The leaf before leaf `i` of subtree `s` in the leaf list, or `None`
    /// if it is the list's first.
    pub fn list_pred(&self, s: u32, i: usize) -> Option<u64> {
        let sub = self.sub(s);
        if i > 0 {
            return Some(sub.leaf(i - 1));
        }
        (sub.prev != NONE).then(|| self.sub(sub.prev).last_leaf())
    }

    /// The leaf list's first NVNode of subtree `next` (the one after a new
    /// prefix), or 0 if `next` is [`NONE`].
    pub fn list_succ_of_sub(&self, next: u32) -> u64 {
        if next == NONE {
            0
        } else {
            self.sub(next).leaf0
        }
    }

    /// Adds the subtree of `prefix` (which has none) with its one leaf,
    /// between `prev` and `next` ([`Self::neighbours`]); returns it.
    pub fn add_sub(&mut self, prefix: &[u8], leaf: u64, prev: u32, next: u32) -> u32 {
        let sub = Sub {
            prefix: prefix.into(),
            leaf0: leaf,
            more: Vec::new(),
            prev,
            next,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.subs[s as usize] = sub;
                s
            }
            None => {
                self.subs.push(sub);
                u32::try_from(self.subs.len() - 1).expect("fewer than 2^32 subtrees")
            }
        };
        let old = self.art.insert(prefix, s, &Prefixes(&self.subs));
        debug_assert!(old.is_none(), "add_sub of a prefix that has a subtree");
        match prev {
            NONE => self.first = s,
            p => self.subs[p as usize].next = s,
        }
        match next {
            NONE => self.last = s,
            n => self.subs[n as usize].prev = s,
        }
        if self.by_len.len() <= prefix.len() {
            self.by_len.resize(prefix.len() + 1, 0);
        }
        self.by_len[prefix.len()] += 1;
        self.leaves += 1;
        s
    }

    /// Adds `leaf`, whose least fragment is `low`, to subtree `s` (after a
    /// split: `low` is above the fragments of the leaf before it).
    pub fn add_leaf(&mut self, s: u32, low: u8, leaf: u64) {
        let more = &mut self.subs[s as usize].more;
        let at = more.partition_point(|&(l, _)| l < low);
        more.insert(at, (low, leaf));
        self.leaves += 1;
    }

    /// Removes leaf `i` of subtree `s`, and the subtree with it if it was
    /// its only leaf.
    pub fn remove_leaf(&mut self, s: u32, i: usize) {
        self.leaves -= 1;
        let sub = &mut self.subs[s as usize];
        if !sub.more.is_empty() {
            if i == 0 {
                sub.leaf0 = sub.more.remove(0).1;
            } else {
                sub.more.remove(i - 1);
            }
            return;
        }
        let (prev, next) = (sub.prev, sub.next);
        let removed = self
            .art
            .remove(&self.subs[s as usize].prefix, &Prefixes(&self.subs));
        debug_assert_eq!(removed, Some(s));
        let prefix = std::mem::take(&mut self.subs[s as usize].prefix);
        match prev {
            NONE => self.first = next,
            p => self.subs[p as usize].next = next,
        }
        match next {
            NONE => self.last = prev,
            n => self.subs[n as usize].prev = prev,
        }
        self.by_len[prefix.len()] -= 1;
        self.free.push(s);
    }

    /// The subtrees whose prefix is a proper prefix of `key`, shortest
    /// first: in key order their keys that follow `key` come before those
    /// of the subtrees at or after `key` (a scan starts with them).
    pub fn ancestors(&self, key: &[u8]) -> Vec<u32> {
        let top = self.by_len.len().min(key.len());
        (0..top)
            .filter(|&n| self.by_len[n] > 0)
            .filter_map(|n| self.find(&key[..n]))
            .collect()
    }

    /// DRAM bytes: the ART's nodes, the subtrees and their heap parts.
    pub fn dram_bytes(&self) -> u64 {
        let heap: usize = self
            .subs
            .iter()
            .map(|s| s.prefix.len() + s.more.capacity() * std::mem::size_of::<(u8, u64)>())
            .sum();
        (self.art.dram_bytes()
            + self.subs.capacity() * std::mem::size_of::<Sub>()
            + self.free.capacity() * 4
            + self.by_len.capacity() * 4
            + heap) as u64
    }

    /// Every subtree in prefix order.
    pub fn iter(&self) -> impl Iterator<Item = &Sub> + '_ {
        let mut s = self.first;
        std::iter::from_fn(move || {
            (s != NONE).then(|| {
                let sub = &self.subs[s as usize];
                s = sub.next;
                sub
            })
        })
    }
}
