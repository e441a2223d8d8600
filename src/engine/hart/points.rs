//! The point index of one ART (beyond the paper, docs/design.md §7 "The
//! point index"): a DRAM hash table from the ART key to its leaf, beside the
//! ART and changed under the same write lock, so that a search, an update
//! and an insert's presence test find their leaf with one probe instead of
//! a descent of the ART, whose nodes are a chain of cache misses. The ART
//! stays the ordered index (scans, and the shape recovery and `check`
//! verify); both hold exactly the same leaves.
//!
//! # Only for ARTs of more than [`BUILD_ABOVE`] keys
//! A small ART is one or two inner nodes deep, whose lines its search's
//! root hint prefetches: its point index would add a miss (the table's
//! line) in place of the one it saves, and an insert's share of the
//! table's growth. So an ART gets its point index once it holds more than
//! [`BUILD_ABOVE`] keys (built from its leaves, their keys read once), and
//! loses it once down to fewer than half of that ([`drop_below`]: 32);
//! meanwhile its searches descend it. Measured: docs/design.md §7 "The
//! point index". The threshold is a setting, `hart.point_index_above`
//! (default [`BUILD_ABOVE`]), so that the crash simulator's small
//! workloads run through the index's build, use and drop too.
//!
//! # Layout
//! Open addressing with linear probing over 8-byte entries, 8 to a cache
//! line; the capacity is a power of two `2^k`, at least [`MIN_CAPACITY`]:
//!
//! ```text
//! entry:  63           46 45                  6 5      4 3      0
//!         | tag[19..2]   | leaf offset / 64    | tag[1..0] | stripe |
//!         (the LeafRef's bits: an offset below 2^46 on a 64-byte line,
//!          whose bits 4 and 5 are free, and its stripe below 16)
//! EMPTY = 0, TOMB = 1 (a removed entry; no entry is 0 or 1: no leaf is
//! at offset 0, the pool's header)
//! ```
//!
//! A key's `tag` is the top 20 bits of its [`hash`] `h`, and its home entry
//! is the top `k` bits of `h`. So for tables of up to 2^20 entries the home
//! of every entry follows from its tag, and the table grows or drops its
//! tombstones without reading a key; a larger table (an ART of more than
//! 786,000 keys) hashes each key again from its leaf, the caller's
//! `key_of`. A probe reads a leaf only where the tag matches: beyond the
//! `k` bits of the home, `20 - k` bits of tag tell keys apart (14 bits for
//! the 15 keys of an ART of 1M sparse 8-byte keys, 9 for the 950 of a
//! dictionary ART). The leaf is the source of truth: a found entry is the
//! key's only if the leaf's key is the key.
//!
//! # Reads without the lock
//! Entries are atomic words, stored under the ART's write lock, so that a
//! reader may probe a table without the lock and validate what it read
//! afterwards by a sequence count ([`super::indexed`]). Such a reader finds
//! the table through its published word ([`Points::word`]), which may be
//! stale: so a table, once published, stays a table of its capacity for as
//! long as its [`Tables`] lives. Retired tables go back to their `Tables`,
//! which gives each out again only as a table of the same capacity, and
//! never back to the allocator ([`Tables::view`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use super::art::LeafValue;
use super::superblock::STRIPES;
use super::LeafRef;

/// No entry.
const EMPTY: u64 = 0;
/// A removed entry: probes go on past it; inserts may reuse it.
const TOMB: u64 = 1;
/// Bits of an entry that hold its LeafRef: below 2^46, bits 4 and 5 not.
const REF_MASK: u64 = ((1 << 46) - 1) & !0x30;
/// Bits of a key's tag (the top bits of its hash).
const TAG_BITS: u32 = 20;
/// The smallest table: one cache line.
pub(super) const MIN_CAPACITY: usize = 8;
/// An ART gets a point index once it holds more keys than this, by
/// default (`hart.point_index_above`).
pub(super) const BUILD_ABOVE: usize = 64;
/// An ART loses its point index once it holds fewer keys than this, by
/// default.
#[cfg(test)]
pub(super) const DROP_BELOW: usize = drop_below(BUILD_ABOVE);

/// The number of keys below which an ART loses the point index it got
/// above `above` keys: half of `above`, at least 1 (an emptied ART holds
/// no index).
pub(super) const fn drop_below(above: usize) -> usize {
    if above / 2 > 1 {
        above / 2
    } else {
        1
    }
}
/// Capacities are `2^k` for `k` below this.
const MAX_LOG2: usize = 47;

const _: () = assert!(crate::pm::MAX_POOL_SIZE <= 1 << 46);
const _: () = assert!(STRIPES <= 16, "a stripe fits in bits 0..4");
const _: () = assert!(
    super::leaf::LEAF_SIZES[0] >= 64,
    "bits 4 and 5 of a leaf are 0"
);

/// The 64-bit hash of a key: its bytes 8 at a time, each folded into the
/// state by a 128-bit multiply (as wyhash does), the length mixed in. Loads
/// stay inside the key: a key of 8 or more bytes is read in words, the last
/// one overlapping; a shorter one in two overlapping halves.
#[inline(always)]
pub(super) fn hash(key: &[u8]) -> u64 {
    const P0: u64 = 0xa076_1d64_78bd_642f;
    const P1: u64 = 0xe703_7ed1_a0b4_28db;
    #[inline(always)]
    fn fold(a: u64, b: u64) -> u64 {
        let r = u128::from(a) * u128::from(b);
        (r as u64) ^ ((r >> 64) as u64)
    }
    let n = key.len();
    let w8 = |at: usize| u64::from_le_bytes(key[at..at + 8].try_into().expect("8 bytes"));
    let w4 = |at: usize| u64::from(u32::from_le_bytes(key[at..at + 4].try_into().expect("4")));
    let mut h = P0 ^ (n as u64).wrapping_mul(P1);
    let last = if n >= 8 {
        let mut i = 0;
        while i + 8 < n {
            h = fold(h ^ w8(i), P1);
            i += 8;
        }
        w8(n - 8)
    } else if n >= 4 {
        w4(0) | (w4(n - 4) << 32)
    } else if n > 0 {
        u64::from(key[0]) | (u64::from(key[n / 2]) << 8) | (u64::from(key[n - 1]) << 16)
    } else {
        0
    };
    fold(fold(h ^ last, P1) ^ P0, P1 ^ n as u64)
}

/// A key's tag: the top [`TAG_BITS`] of its hash.
#[inline(always)]
fn tag_of(h: u64) -> u64 {
    h >> (64 - TAG_BITS)
}

/// The entry of `leaf` for a key with tag `tag`.
#[inline(always)]
fn entry(tag: u64, leaf: LeafRef) -> u64 {
    ((tag >> 2) << 46) | ((tag & 3) << 4) | leaf.to_bits()
}

/// The tag of a live entry.
#[inline(always)]
fn entry_tag(e: u64) -> u64 {
    ((e >> 46) << 2) | ((e >> 4) & 3)
}

/// The leaf of a live entry.
#[inline(always)]
fn entry_leaf(e: u64) -> LeafRef {
    LeafRef::from_bits(e & REF_MASK)
}

/// Whether `e` is a live entry with tag `tag`.
#[inline(always)]
fn has_tag(e: u64, tag: u64) -> bool {
    e > TOMB && entry_tag(e) == tag
}

/// The home entry of hash `h` in a table of `2^log2` entries.
#[inline(always)]
fn home(h: u64, log2: u32) -> usize {
    // `log2 >= 3` (MIN_CAPACITY): the shift is below 64.
    (h >> (64 - log2)) as usize
}

/// Probes `slots` (a table of `2^log2` entries) for hash `h`: each live
/// entry with `h`'s tag is offered to `is_key`, in probe order, until it
/// answers `Some` or the probe meets an empty entry or has read every entry
/// (only a torn table, read without the lock, has no empty entry).
#[inline(always)]
fn probe<T, E>(
    slots: &[AtomicU64],
    log2: u32,
    h: u64,
    mut is_key: impl FnMut(LeafRef) -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    let mask = slots.len() - 1;
    let tag = tag_of(h);
    let mut i = home(h, log2) & mask;
    for _ in 0..slots.len() {
        let e = slots[i].load(Relaxed);
        if e == EMPTY {
            return Ok(None);
        }
        if has_tag(e, tag) {
            if let Some(found) = is_key(entry_leaf(e))? {
                return Ok(Some(found));
            }
        }
        i = (i + 1) & mask;
    }
    Ok(None)
}

/// [`Points::find`] in a table read without the lock ([`Tables::view`]),
/// which may be torn: the probe reads at most every entry once.
#[inline(always)]
pub(super) fn probe_view<T, E>(
    table: &[AtomicU64],
    h: u64,
    is_key: impl FnMut(LeafRef) -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    probe(table, table.len().trailing_zeros(), h, is_key)
}

/// Puts entry `e` (home `at`) into the first empty entry from `at` in
/// `slots`, a table with an empty entry.
fn place(slots: &[AtomicU64], at: usize, e: u64) {
    let mask = slots.len() - 1;
    let mut i = at & mask;
    while slots[i].load(Relaxed) != EMPTY {
        i = (i + 1) & mask;
    }
    slots[i].store(e, Relaxed);
}

/// [`Points::word`]: the table's address below bit 57, its log2 capacity
/// above.
const WORD_SHIFT: u32 = 57;
const WORD_ADDRESS: u64 = (1 << WORD_SHIFT) - 1;

/// Starts loading the line where the probe for hash `h` starts, in the
/// table whose [`Points::word`] is `word`, without reading the table (the
/// word may be stale, which costs a useless prefetch and nothing else). A
/// writer then waits for its ART's lock and its first entry at once, not
/// one after the other.
#[inline(always)]
pub(super) fn prefetch_published(word: u64, h: u64) {
    if word == 0 {
        return;
    }
    let log2 = (word >> WORD_SHIFT) as u32;
    let at = (word & WORD_ADDRESS) + 8 * home(h, log2) as u64;
    // An address for the prefetch only, never dereferenced.
    crate::hint::prefetch_ptr(std::ptr::without_provenance(at as usize));
}

/// Where the tables of a set of point indexes come from and go back to
/// (one per index of ARTs).
pub(super) struct Tables {
    /// Retired tables by log2 capacity, given out again before new ones are
    /// allocated. With `recycle`, none is ever dropped: a reader without
    /// the lock may still hold its word ([`Tables::view`]).
    free: Vec<Mutex<Vec<Box<[AtomicU64]>>>>,
    recycle: bool,
}

impl Tables {
    /// Tables for point indexes that readers probe without the lock
    /// (`recycle`), or only under it (retired tables are dropped).
    pub(super) fn new(recycle: bool) -> Tables {
        Tables {
            free: (0..MAX_LOG2).map(|_| Mutex::new(Vec::new())).collect(),
            recycle,
        }
    }

    /// Whether retired tables are kept from now on: set before readers
    /// without the lock are let in (`hart.reads`, at create or open, while
    /// no other thread holds the engine), and only where such readers may
    /// come (the direct index of ARTs).
    pub(super) fn set_recycle(&mut self, recycle: bool) {
        self.recycle = recycle;
    }

    /// A zeroed table of `2^log2` entries.
    fn take(&self, log2: u32) -> Box<[AtomicU64]> {
        if let Some(t) = self.free[log2 as usize].lock().pop() {
            for e in t.iter() {
                e.store(EMPTY, Relaxed);
            }
            return t;
        }
        (0..1usize << log2).map(|_| AtomicU64::new(EMPTY)).collect()
    }

    /// Takes back a table no index uses any more.
    fn give(&self, t: Box<[AtomicU64]>) {
        if self.recycle && !t.is_empty() {
            self.free[t.len().trailing_zeros() as usize].lock().push(t);
        }
    }

    /// The table that a [`Points::word`] read without the lock names (or
    /// `None` for 0): a table these `Tables` handed out, of the capacity the
    /// word says, though it may since have been retired, zeroed and handed
    /// out again to this or another index. Only for `recycle` tables.
    pub(super) fn view(&self, word: u64) -> Option<&[AtomicU64]> {
        if word == 0 || !self.recycle {
            return None;
        }
        let len = 1usize << (word >> WORD_SHIFT);
        let at = std::ptr::with_exposed_provenance::<AtomicU64>((word & WORD_ADDRESS) as usize);
        // SAFETY: `word` is a `Points::word` of a table taken from `self`
        // (the only tables a point index of `self` holds), made from the
        // address of a live `Box<[AtomicU64]>` of `len` entries whose
        // provenance was exposed. With `recycle`, such a table is never
        // deallocated while `self` lives: it is held by an index, or in
        // `free`, and given out only as a table of the same length (module
        // doc, "Reads without the lock"). The slice borrows `self`, so it
        // does not outlive it; it is only read, through atomic loads, while
        // writers store into it through atomics too.
        Some(unsafe { std::slice::from_raw_parts(at, len) })
    }

    /// DRAM bytes of the retired tables kept.
    pub(super) fn dram_bytes(&self) -> usize {
        self.free
            .iter()
            .map(|f| f.lock().iter().map(|t| t.len() * 8).sum::<usize>())
            .sum()
    }
}

/// One ART's point index.
#[derive(Default)]
pub(super) struct Points {
    /// Empty until the first insert; else `2^k` entries.
    slots: Box<[AtomicU64]>,
    /// Entries held (not counting tombstones) in the low [`LEN_BITS`],
    /// tombstones above: one word, so that a [`Points`] takes 24 bytes and
    /// an ART's slot of the direct index stays one cache line.
    counts: u64,
}

/// Bits of [`Points::counts`] that count entries: an ART holds at most
/// 2^40 leaves (a pool is at most 2^46 bytes, a leaf at least 64).
const LEN_BITS: u32 = 41;
/// The most tombstones [`Points::counts`] can count; a table that would
/// hold more is rebuilt without them.
const MAX_TOMBS: u64 = (1 << (64 - LEN_BITS)) - 1;

const _: () = assert!(crate::pm::MAX_POOL_SIZE / 64 < 1 << LEN_BITS);
const _: () = assert!(std::mem::size_of::<Points>() == 24);

impl Points {
    /// An index of the leaves `entries` (each with its key's hash; no key
    /// twice), sized so that its load stays under 3/4: recovery builds
    /// each ART's index at once, without growing it.
    pub(super) fn with_entries(entries: &[(u64, LeafRef)], tables: &Tables) -> Points {
        if entries.is_empty() {
            return Points::default();
        }
        let capacity = (entries.len() * 4 / 3 + 1)
            .next_power_of_two()
            .max(MIN_CAPACITY);
        let log2 = capacity.trailing_zeros();
        let slots = tables.take(log2);
        for &(h, leaf) in entries {
            place(&slots, home(h, log2), entry(tag_of(h), leaf));
        }
        Points {
            slots,
            counts: entries.len() as u64,
        }
    }

    /// Whether the index is built ([`BUILD_ABOVE`]): only then does it
    /// hold its ART's leaves; else it holds none and the ART is searched.
    #[inline(always)]
    pub(super) fn is_built(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        (self.counts & ((1 << LEN_BITS) - 1)) as usize
    }

    /// Tombstones in the table.
    fn tombs(&self) -> u64 {
        self.counts >> LEN_BITS
    }

    /// log2 of the capacity (the table is not empty).
    fn log2(&self) -> u32 {
        self.slots.len().trailing_zeros()
    }

    /// DRAM bytes of the table.
    pub(super) fn dram_bytes(&self) -> usize {
        self.slots.len() * 8
    }

    /// The table's place as one word (0: no table), published for readers
    /// without the lock ([`Tables::view`]) and for prefetches
    /// ([`prefetch_published`]): its address, whose provenance this
    /// exposes, and above it the log2 of its capacity.
    pub(super) fn word(&self) -> u64 {
        if self.slots.is_empty() {
            return 0;
        }
        let at = self.slots.as_ptr().expose_provenance() as u64;
        debug_assert!(at <= WORD_ADDRESS, "user-space addresses are below 2^57");
        at | (u64::from(self.log2()) << WORD_SHIFT)
    }

    /// The leaf of the key whose hash is `h`: each entry with `h`'s tag is
    /// offered to `is_key`, in probe order, until it answers `Some` (that
    /// leaf is the key's: its answer is returned) or the probe meets an
    /// empty entry (`None`). The caller holds the ART's lock.
    #[inline(always)]
    pub(super) fn find<T, E>(
        &self,
        h: u64,
        is_key: impl FnMut(LeafRef) -> Result<Option<T>, E>,
    ) -> Result<Option<T>, E> {
        if self.slots.is_empty() {
            return Ok(None);
        }
        probe(&self.slots, self.log2(), h, is_key)
    }

    /// Whether the index holds `leaf` for a key with hash `h`.
    pub(super) fn contains(&self, h: u64, leaf: LeafRef) -> bool {
        self.find(h, |l| Ok::<_, ()>((l == leaf).then_some(())))
            .is_ok_and(|found| found.is_some())
    }

    /// Adds `leaf` for a key with hash `h` that the index does not hold.
    /// A table three quarters full (tombstones included) is rebuilt first
    /// with twice the entries held.
    pub(super) fn insert<'k>(
        &mut self,
        h: u64,
        leaf: LeafRef,
        key_of: impl Fn(LeafRef) -> &'k [u8],
        tables: &Tables,
    ) {
        let len = self.len();
        if (len + self.tombs() as usize + 1) * 4 > self.slots.len() * 3 {
            let want = ((len + 1) * 2).next_power_of_two().max(MIN_CAPACITY);
            self.rebuild(want.trailing_zeros(), key_of, tables);
        }
        let log2 = self.log2();
        let mask = self.slots.len() - 1;
        let mut i = home(h, log2) & mask;
        loop {
            let e = self.slots[i].load(Relaxed);
            if e == EMPTY || e == TOMB {
                if e == TOMB {
                    self.counts -= 1 << LEN_BITS;
                }
                self.slots[i].store(entry(tag_of(h), leaf), Relaxed);
                self.counts += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Points the entry of `old` (of a key with hash `h`) to `new`, the
    /// same key's leaf moved by a compaction, in one store; returns whether
    /// there was one.
    pub(super) fn replace(&mut self, h: u64, old: LeafRef, new: LeafRef) -> bool {
        let n = self.slots.len();
        if n == 0 {
            return false;
        }
        let mask = n - 1;
        let want = entry(tag_of(h), old);
        let mut i = home(h, self.log2()) & mask;
        for _ in 0..n {
            let e = self.slots[i].load(Relaxed);
            if e == EMPTY {
                return false;
            }
            if e == want {
                self.slots[i].store(entry(tag_of(h), new), Relaxed);
                return true;
            }
            i = (i + 1) & mask;
        }
        false
    }

    /// Removes the entry of `leaf` (of a key with hash `h`); returns
    /// whether there was one. An index down to fewer than `drop_below`
    /// entries is dropped (no longer built); a table down to an eighth of
    /// its capacity (or whose tombstones its count cannot hold) is rebuilt
    /// to fit.
    pub(super) fn remove<'k>(
        &mut self,
        h: u64,
        leaf: LeafRef,
        drop_below: usize,
        key_of: impl Fn(LeafRef) -> &'k [u8],
        tables: &Tables,
    ) -> bool {
        let n = self.slots.len();
        if n == 0 {
            return false;
        }
        let mask = n - 1;
        let want = entry(tag_of(h), leaf);
        let mut i = home(h, self.log2()) & mask;
        for _ in 0..n {
            let e = self.slots[i].load(Relaxed);
            if e == EMPTY {
                return false;
            }
            if e == want {
                // A tombstone unless the next entry is empty, where no probe
                // needs this one to go on.
                if self.slots[(i + 1) & mask].load(Relaxed) == EMPTY {
                    self.slots[i].store(EMPTY, Relaxed);
                } else {
                    self.slots[i].store(TOMB, Relaxed);
                    self.counts += 1 << LEN_BITS;
                }
                self.counts -= 1;
                let len = self.len();
                if len < drop_below {
                    tables.give(std::mem::take(&mut self.slots));
                    self.counts = 0;
                } else if (len * 8 < n && n > MIN_CAPACITY) || self.tombs() == MAX_TOMBS {
                    let want = (len * 2).next_power_of_two().max(MIN_CAPACITY);
                    self.rebuild(want.trailing_zeros(), key_of, tables);
                }
                return true;
            }
            i = (i + 1) & mask;
        }
        false
    }

    /// Moves every entry into a new table of `2^log2` entries, without
    /// tombstones, and retires the old one. Up to 2^20 entries, each
    /// entry's home follows from its tag; beyond, from its key's hash again
    /// (`key_of`: a read of its leaf).
    fn rebuild<'k>(&mut self, log2: u32, key_of: impl Fn(LeafRef) -> &'k [u8], tables: &Tables) {
        let new = tables.take(log2);
        if log2 <= TAG_BITS {
            for e in self
                .slots
                .iter()
                .map(|e| e.load(Relaxed))
                .filter(|&e| e > TOMB)
            {
                place(&new, (entry_tag(e) >> (TAG_BITS - log2)) as usize, e);
            }
        } else {
            for e in self
                .slots
                .iter()
                .map(|e| e.load(Relaxed))
                .filter(|&e| e > TOMB)
            {
                let h = hash(key_of(entry_leaf(e)));
                place(&new, home(h, log2), e);
            }
        }
        let old = std::mem::replace(&mut self.slots, new);
        tables.give(old);
        self.counts = self.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Key `i` of a test, its leaf, and a `key_of` over such leaves.
    fn key(i: usize) -> Vec<u8> {
        format!("key-{i}").into_bytes()
    }
    fn leaf(i: usize) -> LeafRef {
        LeafRef::new(64 * (i as u64 + 1), i % STRIPES)
    }
    fn index_of(l: LeafRef) -> usize {
        (l.off() / 64 - 1) as usize
    }

    /// The index against a `HashMap` over random inserts and removes,
    /// through growth, shrinking and tombstones, with keys whose hashes
    /// are made to share their tag and home (a multiple of 2^44 apart: the
    /// same top 20 bits) in half the cases, so that probes meet entries of
    /// other keys with their tag.
    #[test]
    fn agrees_with_a_hash_map() {
        let keys: Vec<Vec<u8>> = (0..20_000).map(key).collect();
        let h_of = |i: usize| {
            if i.is_multiple_of(2) {
                hash(&keys[i])
            } else {
                // Collide with key i - 1 in tag and home.
                hash(&keys[i - 1]) ^ ((i as u64) & 0xFFF)
            }
        };
        let key_of = |l: LeafRef| -> &[u8] { &keys[index_of(l)] };
        let tables = Tables::new(true);
        let mut p = Points::default();
        let mut model: HashMap<usize, ()> = HashMap::new();
        // Past `DROP_BELOW` first; removes keep it there (below, the index
        // is dropped: tested at the end).
        for i in 0..1000 {
            p.insert(h_of(i), leaf(i), key_of, &tables);
            model.insert(i, ());
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // More inserts than removes in the first half, the other way
            // round in the second: the table grows, then shrinks.
            let i = (x % keys.len() as u64) as usize;
            let insert = (x >> 40) % 10 < if step < 100_000 { 7 } else { 3 };
            let is = |l: LeafRef| Ok::<_, ()>((index_of(l) == i).then_some(l));
            let found = p.find(h_of(i), is).unwrap();
            assert_eq!(
                found.is_some(),
                model.contains_key(&i),
                "step {step}: key {i}"
            );
            if insert && found.is_none() {
                p.insert(h_of(i), leaf(i), key_of, &tables);
                model.insert(i, ());
            } else if !insert && found.is_some() && model.len() > DROP_BELOW {
                assert!(p.remove(h_of(i), leaf(i), DROP_BELOW, key_of, &tables));
                model.remove(&i);
            }
            assert_eq!(p.len(), model.len());
            // Load at most 3/4, tombstones included.
            assert!((p.len() + p.tombs() as usize) * 4 <= p.slots.len() * 3);
        }
        for i in 0..keys.len() {
            assert_eq!(
                p.contains(h_of(i), leaf(i)),
                model.contains_key(&i),
                "key {i}"
            );
        }
        // Down to fewer than `DROP_BELOW` keys: the index is dropped, its
        // table back in `tables`.
        let mut left = model.len();
        for i in 0..keys.len() {
            if model.contains_key(&i) && left >= DROP_BELOW {
                assert!(p.is_built());
                assert!(p.remove(h_of(i), leaf(i), DROP_BELOW, key_of, &tables));
                left -= 1;
            }
        }
        assert_eq!(left, DROP_BELOW - 1);
        assert!(!p.is_built());
        assert_eq!((p.len(), p.dram_bytes(), p.word()), (0, 0, 0));
        assert!(tables.dram_bytes() > 0);
    }

    /// A table of more than 2^20 entries, whose homes do not follow from
    /// the tags: it grows by hashing the keys again.
    #[test]
    fn grows_past_the_tags_by_hashing_keys_again() {
        let n = 800_000;
        let keys: Vec<Vec<u8>> = (0..n).map(key).collect();
        let key_of = |l: LeafRef| -> &[u8] { &keys[index_of(l)] };
        let tables = Tables::new(false);
        let mut p = Points::default();
        for (i, k) in keys.iter().enumerate() {
            p.insert(hash(k), leaf(i), key_of, &tables);
        }
        assert!(p.log2() > TAG_BITS, "log2 {}", p.log2());
        for i in (0..n).step_by(7) {
            assert!(p.contains(hash(&keys[i]), leaf(i)), "key {i}");
        }
        // Removes down to an eighth: it shrinks below 2^20 again.
        for (i, k) in keys.iter().enumerate().take(n - 50_000) {
            assert!(p.remove(hash(k), leaf(i), DROP_BELOW, key_of, &tables));
        }
        assert!(p.log2() <= TAG_BITS, "log2 {}", p.log2());
        for (i, k) in keys.iter().enumerate().skip(n - 50_000) {
            assert!(p.contains(hash(k), leaf(i)), "key {i}");
        }
        // Without `recycle`, retired tables are dropped.
        assert_eq!(tables.dram_bytes(), 0);
    }

    /// The published word names the table, of its capacity, for as long as
    /// it is in use, and a retired table is given out again only with its
    /// own capacity.
    #[test]
    fn published_tables_stay_tables_of_their_capacity() {
        let keys: Vec<Vec<u8>> = (0..100).map(key).collect();
        let key_of = |l: LeafRef| -> &[u8] { &keys[index_of(l)] };
        let tables = Tables::new(true);
        let mut p = Points::default();
        assert!(tables.view(p.word()).is_none());
        let mut words = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            p.insert(hash(k), leaf(i), key_of, &tables);
            let w = p.word();
            let view = tables.view(w).expect("a table");
            assert_eq!(view.len(), p.slots.len());
            assert!(std::ptr::eq(view.as_ptr(), p.slots.as_ptr()));
            let found = probe(view, p.log2(), hash(k), |l| {
                Ok::<_, ()>((l == leaf(i)).then_some(()))
            });
            assert_eq!(found, Ok(Some(())));
            if words.last() != Some(&w) {
                words.push(w);
            }
        }
        // 8, 16, 32, 64, 128 and 256 entries: five retired, one in use.
        assert_eq!(words.len(), 6);
        assert_eq!(tables.dram_bytes(), 8 * (8 + 16 + 32 + 64 + 128));
        // A new index of 8 entries takes the retired 8-entry table.
        let mut q = Points::default();
        q.insert(hash(&keys[0]), leaf(0), key_of, &tables);
        assert_eq!(q.word(), words[0]);
        assert_eq!(q.len(), 1, "zeroed before it was given out again");
    }

    /// Keys that differ only in length or in one byte hash apart, and the
    /// tags of sequential keys spread.
    #[test]
    fn hashes_tell_close_keys_apart() {
        let mut seen = std::collections::HashSet::new();
        for k in [
            &b""[..],
            b"a",
            b"a\0",
            b"\0a",
            b"ab",
            b"ba",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
        ] {
            assert!(seen.insert(hash(k)), "{k:?}");
        }
        let tags: std::collections::HashSet<u64> = (0..4096u32)
            .map(|i| tag_of(hash(&i.to_be_bytes())))
            .collect();
        assert!(tags.len() > 4000, "{} distinct tags of 4096", tags.len());
    }
}
