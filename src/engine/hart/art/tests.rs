//! Tests: a structural validator, differential runs against a `BTreeMap`
//! model over several key shapes, and scenario tests for node growth and
//! shrink, prefix keys, long prefixes and large trees.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ops::Bound;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::*;

/// [`Art::probe`] through a [`ProbeCursor`], one node per step, checking
/// that the steps are bounded by the key's length plus one.
fn probe_by_steps<V: LeafValue>(art: &Art<V>, key: &[u8]) -> Option<V> {
    let mut c = match art.probe_cursor(key) {
        Ok(c) => c,
        Err(found) => return found,
    };
    for _ in 0..=key.len() {
        c = match c.step() {
            Ok(c) => c,
            Err(found) => return found,
        };
    }
    panic!("the probe of {key:?} took more steps than the key has bytes");
}

/// Test keys: the value of a key is its index in the vector.
struct VecKeys(Vec<Vec<u8>>);

impl LeafKeys<u32> for VecKeys {
    fn key(&self, v: u32) -> &[u8] {
        &self.0[v as usize]
    }
}

/// Keys of a [`VecKeys`], counting the loads.
struct CountedKeys<'a>(&'a VecKeys, std::cell::Cell<usize>);

impl<V> LeafKeys<V> for CountedKeys<'_>
where
    VecKeys: LeafKeys<V>,
{
    fn key(&self, v: V) -> &[u8] {
        self.1.set(self.1.get() + 1);
        self.0.key(v)
    }
}

impl VecKeys {
    /// Stores `key` and returns its value.
    fn add(&mut self, key: &[u8]) -> u32 {
        self.0.push(key.to_vec());
        (self.0.len() - 1) as u32
    }
}

// ---------------------------------------------------------------------------
// Validator

impl<V: LeafValue> Art<V> {
    /// Panics unless invariants 1-4 of the module docs hold.
    fn validate<K: LeafKeys<V> + ?Sized>(&self, keys: &K) {
        self.validate_counting_tags(keys);
    }

    /// [`Self::validate`], returning how many leaves have a tag that knows
    /// a byte.
    fn validate_counting_tags<K: LeafKeys<V> + ?Sized>(&self, keys: &K) -> usize {
        let mut totals = (0usize, 0usize, 0usize); // (entries, dram, tagged leaves)
        if let Some(root) = &self.root {
            validate_child(root, &mut Vec::new(), keys, &mut totals);
        }
        assert_eq!(totals.0, self.len, "len counts every entry");
        assert_eq!(totals.1, self.dram, "dram counter matches the nodes");
        totals.2
    }
}

fn validate_child<V: LeafValue, K: LeafKeys<V> + ?Sized>(
    child: &Child<V>,
    path: &mut Vec<u8>,
    keys: &K,
    totals: &mut (usize, usize, usize),
) {
    match child.view() {
        View::Leaf(v) => {
            let key = keys.key(v);
            assert!(key.starts_with(path), "leaf key extends its path");
            // The slot's tag promises only bytes the key has past the path.
            let tag = child.leaf_tag();
            assert!(
                key[path.len()..].starts_with(tag.known()),
                "the tag {tag:?} of {key:?} at depth {} is wrong",
                path.len()
            );
            if V::TAGGED {
                totals.2 += usize::from(!tag.known().is_empty());
            }
            totals.0 += 1;
        }
        View::Inner(node) => {
            totals.1 += node.node_bytes::<V>() + node.header().prefix.heap_bytes();
            if let Kind::N48(n) = node {
                assert!(n.index_is_consistent(), "Node48 index agrees with slots");
            }
            dispatch!(node, n => validate_node(n, path, keys, totals));
        }
    }
}

fn validate_node<V: LeafValue, N: InnerNode<V>, K: LeafKeys<V> + ?Sized>(
    n: &N,
    path: &mut Vec<u8>,
    keys: &K,
    totals: &mut (usize, usize, usize),
) {
    let mark = path.len();
    let header = n.header();
    path.extend_from_slice(header.prefix.as_slice());
    assert_eq!(
        header.no_path,
        header.prefix.is_empty(),
        "no_path agrees with the prefix"
    );
    let count = usize::from(header.count);
    assert!(
        (N::MIN_CHILDREN..=N::MAX_CHILDREN).contains(&count),
        "child count {count} outside {}..={}",
        N::MIN_CHILDREN,
        N::MAX_CHILDREN
    );
    assert!(
        count + usize::from(header.value.is_some()) >= 2,
        "no single-entry nodes"
    );
    if let Some(v) = header.value() {
        assert_eq!(keys.key(v), &path[..], "value slot key equals the path");
        totals.0 += 1;
    }
    let mut seen = 0;
    let mut last: Option<u8> = None;
    for (byte, child) in n.children() {
        assert!(last.is_none_or(|l| l < byte), "children in byte order");
        assert!(
            n.find(byte).is_some_and(|c| std::ptr::eq(c, child)),
            "find gives each child its own slot"
        );
        last = Some(byte);
        seen += 1;
        path.push(byte);
        validate_child(child, path, keys, totals);
        path.pop();
    }
    assert_eq!(seen, count, "count matches the children");
    // The search's `find` skips `count` (Node4, Node16): a slot past it must
    // be empty, so `find` answers exactly the children.
    let live: Vec<u8> = n.children().map(|(b, _)| b).collect();
    for b in 0..=255u8 {
        assert_eq!(n.find(b).is_some(), live.contains(&b), "find({b:#x})");
    }
    path.truncate(mark);
}

// ---------------------------------------------------------------------------
// Differential harness

fn in_bounds(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo_ok = match lo {
        Bound::Included(l) => k >= &l[..],
        Bound::Excluded(l) => k > &l[..],
        Bound::Unbounded => true,
    };
    let hi_ok = match hi {
        Bound::Included(h) => k <= &h[..],
        Bound::Excluded(h) => k < &h[..],
        Bound::Unbounded => true,
    };
    lo_ok && hi_ok
}

fn as_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

struct Harness<G> {
    art: Art<u32>,
    keys: VecKeys,
    model: BTreeMap<Vec<u8>, u32>,
    /// Every key generated so far (present or not), to pick repeats from.
    pool: Vec<Vec<u8>>,
    rng: SmallRng,
    gen: G,
    /// Largest node count of each kind seen at a check.
    peak: NodeCounts,
}

impl<G: FnMut(&mut SmallRng) -> Vec<u8>> Harness<G> {
    fn new(seed: u64, gen: G) -> Self {
        Harness {
            art: Art::new(),
            keys: VecKeys(Vec::new()),
            model: BTreeMap::new(),
            pool: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
            gen,
            peak: NodeCounts::default(),
        }
    }

    /// A key: half the time one seen before, else a fresh one.
    fn pick(&mut self) -> Vec<u8> {
        if !self.pool.is_empty() && self.rng.gen_bool(0.5) {
            self.pool[self.rng.gen_range(0..self.pool.len())].clone()
        } else {
            let k = (self.gen)(&mut self.rng);
            self.pool.push(k.clone());
            k
        }
    }

    /// An upsert, an insert-if-absent, or an insert-if-absent whose value
    /// fails to be made (the tree must not change).
    fn insert(&mut self, key: &[u8]) {
        let v = self.keys.add(key);
        match self.rng.gen_range(0..8) {
            0..=3 => {
                let got = self.art.insert(key, v, &self.keys);
                assert_eq!(got, self.model.insert(key.to_vec(), v), "insert {key:?}");
            }
            4..=6 => {
                let mut made = false;
                let got = self.art.insert_with(key, &self.keys, || {
                    made = true;
                    Ok::<u32, ()>(v)
                });
                let present = self.model.get(key).copied();
                assert_eq!(got, Ok(present), "insert_with {key:?}");
                assert_eq!(
                    made,
                    present.is_none(),
                    "insert_with {key:?} makes a value iff absent"
                );
                if present.is_none() {
                    self.model.insert(key.to_vec(), v);
                }
            }
            _ => {
                let got = self
                    .art
                    .insert_with(key, &self.keys, || Err::<u32, &str>("no leaf"));
                match self.model.get(key).copied() {
                    Some(present) => assert_eq!(got, Ok(Some(present)), "insert_with {key:?}"),
                    None => assert_eq!(got, Err("no leaf"), "insert_with {key:?}"),
                }
            }
        }
    }

    fn remove(&mut self, key: &[u8]) {
        let got = self.art.remove(key, &self.keys);
        assert_eq!(got, self.model.remove(key), "remove {key:?}");
    }

    fn get(&self, key: &[u8]) {
        let got = self.art.get(key, &self.keys);
        assert_eq!(got, self.model.get(key).copied(), "get {key:?}");
        // `probe` names the one candidate: the key's own entry when it is
        // present, and otherwise nothing or an entry with another key.
        let probed = self.art.probe(key);
        match self.model.get(key) {
            Some(&v) => assert_eq!(probed, Some(v), "probe {key:?}"),
            None => {
                if let Some(v) = probed {
                    assert_ne!(self.keys.key(v), key, "probe {key:?} of an absent key");
                }
            }
        }
        assert_eq!(probe_by_steps(&self.art, key), probed, "cursor {key:?}");
    }

    fn bound(&mut self) -> Bound<Vec<u8>> {
        let key = self.pick();
        match self.rng.gen_range(0..3) {
            0 => Bound::Unbounded,
            1 => Bound::Included(key),
            _ => Bound::Excluded(key),
        }
    }

    fn collect(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, limit: usize) -> Vec<(Vec<u8>, u32)> {
        let mut out = Vec::new();
        self.art.range(lo, hi, &self.keys, |k, v| {
            assert_eq!(k, self.keys.key(v), "range passes the leaf's key");
            out.push((k.to_vec(), v));
            out.len() < limit
        });
        out
    }

    fn check_range(&self, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>, limit: usize) {
        let expected: Vec<(Vec<u8>, u32)> = self
            .model
            .iter()
            .filter(|(k, _)| in_bounds(k, lo, hi))
            .take(limit)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let got = self.collect(as_slice_bound(lo), as_slice_bound(hi), limit);
        assert_eq!(got, expected, "range {lo:?}..{hi:?} limit {limit}");
        // The same entries without their keys, and a key loaded only where
        // a bound is compared with a leaf: at most one per bound.
        let counted = CountedKeys(&self.keys, std::cell::Cell::new(0));
        let mut values = Vec::new();
        self.art
            .range_values(as_slice_bound(lo), as_slice_bound(hi), &counted, |v| {
                values.push(v);
                values.len() < limit
            });
        let want: Vec<u32> = expected.iter().map(|&(_, v)| v).collect();
        assert_eq!(values, want, "range_values {lo:?}..{hi:?} limit {limit}");
        let bounds = [lo, hi]
            .iter()
            .filter(|b| !matches!(b, Bound::Unbounded))
            .count();
        assert!(
            counted.1.get() <= bounds,
            "range_values {lo:?}..{hi:?} loaded {} keys",
            counted.1.get()
        );
    }

    fn check(&mut self) {
        self.art.validate(&self.keys);
        assert_eq!(self.art.len(), self.model.len());
        assert_eq!(self.art.is_empty(), self.model.is_empty());
        assert_eq!(self.art.first(), self.model.values().next().copied());
        assert_eq!(self.art.last(), self.model.values().next_back().copied());
        self.check_range(&Bound::Unbounded, &Bound::Unbounded, usize::MAX);
        for _ in 0..4 {
            let (lo, hi) = (self.bound(), self.bound());
            self.check_range(&lo, &hi, usize::MAX);
        }
        let (lo, hi) = (self.bound(), self.bound());
        let limit = self.rng.gen_range(1..8);
        self.check_range(&lo, &hi, limit);
        let c = self.art.node_counts();
        assert_eq!(c.leaves + c.value_slots, self.model.len());
        self.peak.node4 = self.peak.node4.max(c.node4);
        self.peak.node16 = self.peak.node16.max(c.node16);
        self.peak.node48 = self.peak.node48.max(c.node48);
        self.peak.node256 = self.peak.node256.max(c.node256);
        self.peak.value_slots = self.peak.value_slots.max(c.value_slots);
    }

    /// `ops` random operations in alternating grow (mostly inserts) and
    /// shrink (mostly removes) phases of `phase` operations, checking
    /// everything every 8 operations; then removes every key.
    fn run(&mut self, ops: usize, phase: usize) {
        for i in 0..ops {
            let growing = (i / phase).is_multiple_of(2);
            let key = self.pick();
            let roll = self.rng.gen_range(0..10);
            let insert_cut = if growing { 6 } else { 3 };
            if roll < insert_cut {
                self.insert(&key);
            } else if roll < 8 {
                self.remove(&key);
                // Removing a present key exercises shrinking more than a
                // random (often absent) one.
                if let Some(k) = self
                    .model
                    .keys()
                    .nth(self.rng.gen_range(0..=self.model.len() / 2))
                {
                    let k = k.clone();
                    self.remove(&k);
                }
            } else {
                self.get(&key);
            }
            if i % 8 == 7 {
                self.check();
            }
        }
        self.check();
        let mut present: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        while !present.is_empty() {
            let k = present.swap_remove(self.rng.gen_range(0..present.len()));
            self.remove(&k);
            self.get(&k);
            if present.len().is_multiple_of(64) {
                self.check();
            }
        }
        assert!(self.art.is_empty());
        assert_eq!(self.art.dram_bytes(), 0);
        assert_eq!(self.art.node_counts(), NodeCounts::default());
    }
}

// ---------------------------------------------------------------------------
// Differential tests by key shape

#[test]
fn random_short_keys_match_btreemap() {
    for seed in 0..4 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            let len = rng.gen_range(0..20);
            (0..len).map(|_| rng.gen()).collect()
        });
        h.run(3000, 700);
        assert!(h.peak.node256 > 0 || h.peak.node48 > 0);
    }
}

#[test]
fn small_alphabet_keys_match_btreemap() {
    for seed in 0..4 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            let len = rng.gen_range(0..8);
            (0..len).map(|_| b"abc"[rng.gen_range(0..3)]).collect()
        });
        h.run(3000, 500);
        assert!(h.peak.value_slots > 0, "prefix keys used value slots");
    }
}

#[test]
fn long_shared_prefixes_match_btreemap() {
    for seed in 0..4 {
        let mut rng = SmallRng::seed_from_u64(1000 + seed);
        let bases: Vec<Vec<u8>> = (0..4)
            .map(|_| {
                let len = rng.gen_range(30..70);
                (0..len).map(|_| b"xy"[rng.gen_range(0..2)]).collect()
            })
            .collect();
        let mut h = Harness::new(seed, move |rng: &mut SmallRng| {
            let base = &bases[rng.gen_range(0..bases.len())];
            let cut = if rng.gen_bool(0.3) {
                rng.gen_range(0..=base.len())
            } else {
                base.len()
            };
            let mut k = base[..cut].to_vec();
            let tail = rng.gen_range(0..4);
            k.extend((0..tail).map(|_| rng.gen_range(0..6u8)));
            k
        });
        h.run(3000, 600);
    }
}

#[test]
fn prefix_chains_match_btreemap() {
    const CHAIN: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN";
    for seed in 0..4 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            let mut k = CHAIN[..rng.gen_range(0..=CHAIN.len())].to_vec();
            if rng.gen_bool(0.25) {
                k.push(rng.gen_range(0..4));
            }
            k
        });
        h.run(2000, 300);
        assert!(h.peak.value_slots > 10, "chains live in value slots");
    }
}

#[test]
fn dense_big_endian_integers_match_btreemap() {
    for seed in 0..3 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            rng.gen_range(0u64..4000).to_be_bytes().to_vec()
        });
        h.run(6000, 1500);
        assert!(h.peak.node256 > 0, "dense keys fill Node256s");
    }
}

#[test]
fn sparse_big_endian_integers_match_btreemap() {
    for seed in 0..3 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            let x: u64 = rng.gen();
            // Sparse, but with some shared high bytes.
            (x & 0x0F0F_00FF_F0F0_FF0F).to_be_bytes().to_vec()
        });
        h.run(4000, 1000);
    }
}

#[test]
fn zero_and_ff_bytes_match_btreemap() {
    for seed in 0..4 {
        let mut h = Harness::new(seed, |rng: &mut SmallRng| {
            let len = rng.gen_range(0..12);
            (0..len)
                .map(|_| if rng.gen_bool(0.5) { 0x00 } else { 0xFF })
                .collect()
        });
        h.run(3000, 500);
    }
}

#[test]
fn mixed_shapes_match_btreemap() {
    let mut h = Harness::new(99, |rng: &mut SmallRng| match rng.gen_range(0..4) {
        0 => Vec::new(),
        1 => rng.gen_range(0u64..300).to_be_bytes().to_vec(),
        2 => vec![0xFF; rng.gen_range(1..40)],
        _ => (0..rng.gen_range(0..30)).map(|_| rng.gen()).collect(),
    });
    h.run(5000, 800);
}

// ---------------------------------------------------------------------------
// Scenarios

/// The kind of the inner node at `path`'s end ("N4", …), or "leaf"/"none".
fn kind_at(art: &Art<u32>, path: &[u8]) -> &'static str {
    let mut cur = match &art.root {
        None => return "none",
        Some(c) => c,
    };
    let mut depth = 0;
    loop {
        let node = match cur.view() {
            View::Leaf(_) => return "leaf",
            View::Inner(node) => node,
        };
        depth += node.header().prefix.as_slice().len();
        if depth >= path.len() {
            return match node {
                Kind::N4(_) => "N4",
                Kind::N16(_) => "N16",
                Kind::N48(_) => "N48",
                Kind::N256(_) => "N256",
            };
        }
        cur = dispatch!(node, n => n.find(path[depth])).expect("path exists");
        depth += 1;
    }
}

/// The kind a node with `children` children has, growing from empty.
fn kind_growing(children: usize) -> &'static str {
    match children {
        0..=4 => "N4",
        5..=16 => "N16",
        17..=48 => "N48",
        _ => "N256",
    }
}

/// The kind a full `Node256` with `children` left has, shrinking.
fn kind_shrinking(children: usize) -> &'static str {
    match children {
        0..=3 => "N4",
        4..=12 => "N16",
        13..=37 => "N48",
        _ => "N256",
    }
}

/// Grows a node under `stem` to 256 children and shrinks it back, checking
/// its kind at every step. `extra` keys are inserted first and stay.
fn grow_and_shrink(stem: &[u8], extra: &[&[u8]], seed: u64) {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    for e in extra {
        let v = keys.add(e);
        art.insert(e, v, &keys);
    }
    let key = |b: u8| [stem, &[b][..]].concat();
    // The node under the stem holds a value slot if the stem is a key.
    let stem_has_value = extra.contains(&stem);
    let mut bytes: Vec<u8> = (0..=255).collect();
    let mut rng = SmallRng::seed_from_u64(seed);
    bytes.shuffle(&mut rng);
    for (i, &b) in bytes.iter().enumerate() {
        let k = key(b);
        let v = keys.add(&k);
        assert_eq!(art.insert(&k, v, &keys), None);
        let children = i + 1;
        // With one child and no value slot the node is still a leaf.
        if children > 1 || stem_has_value {
            let kind = kind_at(&art, stem);
            assert_eq!(kind, kind_growing(children), "{children} children");
        }
        art.validate(&keys);
    }
    bytes.shuffle(&mut rng);
    for (i, &b) in bytes.iter().enumerate() {
        let k = key(b);
        assert!(art.remove(&k, &keys).is_some());
        let children = 255 - i;
        if children >= 2 || (children == 1 && stem_has_value) {
            assert_eq!(
                kind_at(&art, stem),
                kind_shrinking(children),
                "{children} left"
            );
        }
        art.validate(&keys);
    }
    assert_eq!(art.len(), extra.len());
}

#[test]
fn root_grows_through_every_kind_and_shrinks_back() {
    grow_and_shrink(b"", &[], 1);
}

#[test]
fn inner_node_grows_and_shrinks_below_a_compressed_path() {
    // "stem" + byte keys under a node with prefix "tem" below the root.
    grow_and_shrink(b"stem", &[b"other"], 2);
}

#[test]
fn node_with_value_slot_grows_and_shrinks() {
    grow_and_shrink(b"ab", &[b"ab", b""], 3);
}

#[test]
fn prefix_keys_and_the_empty_key() {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    let chain: [&[u8]; 5] = [b"", b"a", b"ab", b"abc", b"abcd"];
    // Insert in an order that puts leaves, then value slots, at each level.
    for k in [b"abc" as &[u8], b"", b"abcd", b"a", b"ab"] {
        let v = keys.add(k);
        assert_eq!(art.insert(k, v, &keys), None);
        art.validate(&keys);
    }
    for k in chain {
        assert_eq!(art.get(k, &keys).map(|v| keys.key(v)), Some(k));
    }
    assert_eq!(art.get(b"abcde", &keys), None);
    assert_eq!(art.get(b"b", &keys), None);
    let mut seen = Vec::new();
    art.range(Bound::Unbounded, Bound::Unbounded, &keys, |k, _| {
        seen.push(k.to_vec());
        true
    });
    assert_eq!(seen, chain.map(|k| k.to_vec()));
    // Excluding "ab" at the top keeps its prefixes only.
    let mut seen = Vec::new();
    art.range(Bound::Unbounded, Bound::Excluded(b"ab"), &keys, |k, _| {
        seen.push(k.to_vec());
        true
    });
    assert_eq!(seen, [b"".to_vec(), b"a".to_vec()]);
    // Removing from the middle of the chain merges nothing away.
    let ab = art.remove(b"ab", &keys).expect("present");
    assert_eq!(keys.key(ab), b"ab");
    art.validate(&keys);
    assert_eq!(
        art.get(b"abc", &keys).map(|v| keys.key(v)),
        Some(&b"abc"[..])
    );
    for k in [b"" as &[u8], b"abcd", b"a", b"abc"] {
        assert!(art.remove(k, &keys).is_some());
        art.validate(&keys);
    }
    assert!(art.is_empty());
    assert_eq!(art.dram_bytes(), 0);
}

#[test]
fn empty_key_alone_is_a_root_leaf() {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    let v = keys.add(b"");
    assert_eq!(art.insert(b"", v, &keys), None);
    assert_eq!(art.node_counts().leaves, 1);
    assert_eq!(art.dram_bytes(), 0);
    let w = keys.add(b"");
    assert_eq!(art.insert(b"", w, &keys), Some(v));
    assert_eq!(art.get(b"", &keys), Some(w));
    assert_eq!(art.get(b"x", &keys), None);
    assert_eq!(art.remove(b"x", &keys), None);
    assert_eq!(art.remove(b"", &keys), Some(w));
    assert!(art.is_empty());
}

#[test]
fn removal_merges_paths() {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    for k in [b"aaaa1" as &[u8], b"aaaa2", b"aabb"] {
        let v = keys.add(k);
        art.insert(k, v, &keys);
    }
    // Root N4 "aa" -> {'a': N4 "a" {1, 2}, 'b': leaf}.
    assert_eq!(art.node_counts().node4, 2);
    art.remove(b"aabb", &keys);
    art.validate(&keys);
    // The root merged with its only child: one N4 with prefix "aaaa".
    assert_eq!(art.node_counts().node4, 1);
    match &art.root {
        Some(c) if !matches!(c.view(), View::Leaf(_)) => {
            assert_eq!(c.inner().header().prefix.as_slice(), b"aaaa")
        }
        _ => panic!("root is an inner node"),
    }
    art.remove(b"aaaa1", &keys);
    art.validate(&keys);
    assert_eq!(art.node_counts().leaves, 1);
    assert_eq!(art.dram_bytes(), 0);
}

#[test]
fn long_keys_spill_prefixes_and_merge_them() {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    let base = vec![7u8; 3000];
    let ks: Vec<Vec<u8>> = vec![
        [&base[..], b"x"].concat(),
        [&base[..], b"y"].concat(),
        [&base[..1500], b"z"].concat(),
        base[..10].to_vec(),
    ];
    for k in &ks {
        let v = keys.add(k);
        art.insert(k, v, &keys);
        art.validate(&keys);
    }
    for k in &ks {
        assert_eq!(art.get(k, &keys).map(|v| keys.key(v)), Some(&k[..]));
    }
    assert!(
        art.dram_bytes() > 2 * 1400,
        "long prefixes spill to the heap"
    );
    for k in &ks {
        assert!(art.remove(k, &keys).is_some());
        art.validate(&keys);
    }
    assert_eq!(art.dram_bytes(), 0);
}

#[test]
fn range_stops_when_the_callback_says_so() {
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    for i in 0u32..1000 {
        let k = i.to_be_bytes();
        let v = keys.add(&k);
        art.insert(&k, v, &keys);
    }
    let mut n = 0u32;
    art.range(
        Bound::Included(&500u32.to_be_bytes()[..]),
        Bound::Unbounded,
        &keys,
        |k, _| {
            assert_eq!(k, (500 + n).to_be_bytes());
            n += 1;
            n < 10
        },
    );
    assert_eq!(n, 10);
    // lo > hi visits nothing.
    art.range(
        Bound::Included(&9u32.to_be_bytes()[..]),
        Bound::Excluded(&3u32.to_be_bytes()[..]),
        &keys,
        |_, _| panic!("empty range"),
    );
}

#[test]
fn works_through_a_trait_object() {
    let mut art = Art::new();
    let mut store = VecKeys(Vec::new());
    let v = store.add(b"key");
    let keys: &dyn LeafKeys<u32> = &store;
    art.insert(b"key", v, keys);
    assert_eq!(art.get(b"key", keys), Some(v));
    assert_eq!(art.remove(b"key", keys), Some(v));
}

#[test]
fn hundred_thousand_random_keys() {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut keys = VecKeys(Vec::new());
    let mut model = BTreeMap::new();
    let mut art = Art::new();
    for _ in 0..100_000 {
        let len = rng.gen_range(1..=24);
        let k: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let v = keys.add(&k);
        assert_eq!(art.insert(&k, v, &keys), model.insert(k, v));
    }
    art.validate(&keys);
    assert_eq!(art.len(), model.len());
    for (k, v) in &model {
        assert_eq!(art.get(k, &keys), Some(*v));
    }
    let mut all = Vec::with_capacity(model.len());
    art.range(Bound::Unbounded, Bound::Unbounded, &keys, |_, v| {
        all.push(v);
        true
    });
    assert!(all.iter().copied().eq(model.values().copied()));
    let counts = art.node_counts();
    assert!(counts.node256 >= 1 && counts.node48 + counts.node16 + counts.node4 > 0);

    // Remove every other key; the rest stay, the removed ones are gone.
    let mut removed = Vec::new();
    for (i, k) in model.keys().enumerate() {
        if i % 2 == 0 {
            removed.push(k.clone());
        }
    }
    for k in &removed {
        assert_eq!(art.remove(k, &keys), model.remove(k));
    }
    art.validate(&keys);
    for k in &removed {
        assert_eq!(art.get(k, &keys), None);
    }
    for (k, v) in &model {
        assert_eq!(art.get(k, &keys), Some(*v));
    }
    let keys_left: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in &keys_left {
        assert!(art.remove(k, &keys).is_some());
    }
    assert!(art.is_empty());
    assert_eq!(art.dram_bytes(), 0);
}

#[test]
fn node_sizes_are_as_documented() {
    assert_eq!(size_of::<Node4<u64>>(), 72);
    assert_eq!(size_of::<Node16<u64>>(), 176);
    assert_eq!(size_of::<Node48<u64>>(), 672);
    assert_eq!(size_of::<Node256<u64>>(), 2080);
    let mut art = Art::new();
    let mut keys = VecKeys(Vec::new());
    for k in [b"a" as &[u8], b"b"] {
        let v = keys.add(k);
        art.insert(k, v, &keys);
    }
    assert_eq!(art.dram_bytes(), size_of::<Node4<u32>>());
}

impl LeafKeys<u64> for VecKeys {
    fn key(&self, v: u64) -> &[u8] {
        &self.0[v as usize]
    }
}

#[test]
fn a_value_too_large_for_a_word_panics_before_the_tree_changes() {
    let mut art: Art<u64> = Art::new();
    let mut keys = VecKeys(Vec::new());
    for k in [b"aaaa1" as &[u8], b"aaaa2"] {
        let v = u64::from(keys.add(k));
        art.insert(k, v, &keys);
    }
    // Root: a Node4 with the path "aaaa" and two leaves. Each key below
    // reaches another insertion case: a prefix split, a new child, the
    // value slot, a leaf split.
    for k in [b"ab" as &[u8], b"aaaa3", b"aaaa", b"aaaa1x"] {
        let before = (art.len(), art.dram_bytes(), art.node_counts());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            art.insert(k, 1 << 63, &keys)
        }));
        assert!(r.is_err(), "{k:?}: a value of 2^63 is refused");
        assert_eq!((art.len(), art.dram_bytes(), art.node_counts()), before);
        art.validate(&keys);
        assert_eq!(art.get(b"aaaa1", &keys), Some(0));
        assert_eq!(art.get(b"aaaa2", &keys), Some(1));
        assert_eq!(art.get(k, &keys), None);
    }
}

/// Inserts `key` (absent or present) with `insert_with`; returns how many
/// keys the tree loaded.
fn loads_to_insert<V: LeafValue>(art: &mut Art<V>, keys: &mut VecKeys, key: &[u8]) -> usize
where
    VecKeys: LeafKeys<V>,
{
    let v = V::from_bits(u64::from(keys.add(key)));
    let counted = CountedKeys(keys, std::cell::Cell::new(0));
    art.insert_with(key, &counted, || Ok::<V, ()>(v))
        .expect("the value is made");
    counted.1.get()
}

#[test]
fn an_insert_that_meets_a_leaf_loads_its_key_only_where_the_slot_cannot_tell() {
    let mut art: Art<u32> = Art::new();
    let mut keys = VecKeys(Vec::new());
    // Root leaf "abc" (tag "ab"); "xyz" parts at byte 0: no load. "abc"
    // moves under 'a' (depth 1) and keeps what is left of its tag: "b".
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"abc"), 0);
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"xyz"), 0);
    // "aqz" parts from it at that byte: no load; "abc" goes to depth 2
    // knowing nothing.
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"aqz"), 0);
    // So "abd" loads it, as does a present key whose tag agrees.
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"abd"), 1);
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"xyz"), 1);
    art.validate(&keys);
    let counted = CountedKeys(&keys, std::cell::Cell::new(0));
    // Searches and removes of keys the tags tell apart load nothing.
    assert_eq!(art.get(b"xyq", &counted), None);
    assert_eq!(art.get(b"x", &counted), None);
    assert_eq!(art.remove(b"xa", &counted), None);
    assert_eq!(counted.1.get(), 0);
    assert_eq!(art.get(b"xyz", &counted), Some(1));
    assert_eq!(counted.1.get(), 1);
    // A merge moves "xyz" up to the root's slot, where it knows "xy"
    // again: a new key there parts from it without a load.
    for k in [b"abc" as &[u8], b"abd", b"aqz"] {
        assert!(art.remove(k, &keys).is_some());
    }
    art.validate(&keys);
    assert_eq!(loads_to_insert(&mut art, &mut keys, b"xq"), 0);
    assert_eq!(art.get(b"xq", &keys), Some(5));
    assert_eq!(art.get(b"xyz", &keys), Some(1));
}

#[test]
fn tags_spare_most_key_loads_of_random_inserts() {
    // The same 20,000 random 8-byte keys into a tagged tree (u32 values)
    // and an untagged one (u64): the untagged tree loads a key at every
    // leaf an insert meets.
    let mut rng = SmallRng::seed_from_u64(11);
    let inserts: Vec<[u8; 8]> = (0..20_000).map(|_| rng.gen()).collect();
    let (mut tagged, mut plain) = (Art::<u32>::new(), Art::<u64>::new());
    let (mut keys_t, mut keys_p) = (VecKeys(Vec::new()), VecKeys(Vec::new()));
    let (mut loads_t, mut loads_p) = (0, 0);
    for k in &inserts {
        loads_t += loads_to_insert(&mut tagged, &mut keys_t, k);
        loads_p += loads_to_insert(&mut plain, &mut keys_p, k);
    }
    let tagged_leaves = tagged.validate_counting_tags(&keys_t);
    assert_eq!(plain.validate_counting_tags(&keys_p), 0);
    assert!(loads_p > 2_000, "untagged: {loads_p} loads");
    assert!(
        loads_t * 20 < loads_p,
        "tagged: {loads_t} loads, untagged {loads_p}"
    );
    assert!(tagged_leaves > 15_000, "{tagged_leaves} leaves with a tag");
}
