//! The point index of one ART (beyond the paper, docs/design.md §7 "The
//! point index"): a DRAM hash table from the ART key to its leaf, beside the
//! ART and under the same reader-writer lock, so that a search, an update
//! and a delete find their leaf with one probe instead of a descent of the
//! ART, whose nodes are a chain of cache misses. The ART stays the ordered
//! index (scans, and the shape recovery and `check` verify); both hold
//! exactly the same leaves.
//!
//! # Layout
//! Open addressing with linear probing over 8-byte entries, 8 to a cache
//! line; the capacity is a power of two, at least [`MIN_CAPACITY`]:
//!
//! ```text
//! entry:  63        46 45                 6 5    4 3      0
//!         | tag (18b) | leaf offset / 64     | 0 0 | stripe |
//!         ^ h >> 46     (the LeafRef's bits, < 2^46)
//! EMPTY = 0, TOMB = 1 (a removed entry; no LeafRef is 0 or 1: no leaf
//! is at offset 0, the pool's header)
//! ```
//!
//! A key's home is `h & mask`, `h` its [`hash`]; its tag is `h`'s top 18
//! bits, so a probe reads a leaf only where the tag matches (a false match
//! once in 262,144 occupied entries passed). The leaf is the source of
//! truth: a found entry is the key's only if the leaf's key is the key.
//!
//! The table keeps no hash: growing it, or clearing its tombstones, hashes
//! every key again from its leaf (the caller's `key_of`), once per
//! doubling, so about once per key over the table's life.

use super::art::LeafValue;
use super::LeafRef;

/// No entry.
const EMPTY: u64 = 0;
/// A removed entry: probes go on past it; inserts may reuse it.
const TOMB: u64 = 1;
/// Bits of a LeafRef (offsets below 2^46, `art::TAGGED_LIMIT`).
const REF_BITS: u32 = 46;
const REF_MASK: u64 = (1 << REF_BITS) - 1;
/// The smallest table: one cache line.
pub(super) const MIN_CAPACITY: usize = 8;

const _: () = assert!(crate::pm::MAX_POOL_SIZE <= 1 << REF_BITS);

/// [`Points::hint`]: the address below bit 57, the log2 capacity above.
const HINT_SHIFT: u32 = 57;
const HINT_ADDRESS: u64 = 1 << HINT_SHIFT;

/// Starts loading the line where the probe for hash `h` starts, in the
/// table that [`Points::hint`] described as `hint`, without reading the
/// table: the hint may be stale and its table freed, which costs a useless
/// prefetch and nothing else. A search then waits for its ART's lock and
/// its first entry at once, not one after the other.
#[inline(always)]
pub(super) fn prefetch_hinted(hint: u64, h: u64) {
    if hint == 0 {
        return;
    }
    let mask = (1u64 << (hint >> HINT_SHIFT)) - 1;
    let at = (hint & (HINT_ADDRESS - 1)) + 8 * (h & mask);
    // An address for the prefetch only, never dereferenced.
    crate::hint::prefetch_ptr(std::ptr::without_provenance(at as usize));
}

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

/// An entry's tag for hash `h`.
#[inline(always)]
fn tag(h: u64) -> u64 {
    h & !REF_MASK
}

/// Puts `leaf` (hash `h`) into the first empty entry of its probe in
/// `slots`, a table without tombstones and with an empty entry.
fn place(slots: &mut [u64], h: u64, leaf: LeafRef) {
    let mask = slots.len() - 1;
    let mut i = (h as usize) & mask;
    while slots[i] != EMPTY {
        i = (i + 1) & mask;
    }
    slots[i] = tag(h) | leaf.to_bits();
}

/// One ART's point index.
#[derive(Default)]
pub(super) struct Points {
    /// Empty until the first insert; else a power-of-two capacity.
    slots: Box<[u64]>,
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
    pub(super) fn with_entries(entries: &[(u64, LeafRef)]) -> Points {
        if entries.is_empty() {
            return Points::default();
        }
        let capacity = (entries.len() * 4 / 3 + 1)
            .next_power_of_two()
            .max(MIN_CAPACITY);
        let mut slots = vec![EMPTY; capacity].into_boxed_slice();
        for &(h, leaf) in entries {
            place(&mut slots, h, leaf);
        }
        Points {
            slots,
            counts: entries.len() as u64,
        }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        (self.counts & ((1 << LEN_BITS) - 1)) as usize
    }

    /// Tombstones in the table.
    fn tombs(&self) -> u64 {
        self.counts >> LEN_BITS
    }

    /// DRAM bytes of the table.
    pub(super) fn dram_bytes(&self) -> usize {
        self.slots.len() * 8
    }

    /// The table's place as one word, for [`prefetch_hinted`] by searches
    /// that have not locked the ART yet (0: no table). The table's address
    /// (below 2^57 on every x86-64 and AArch64 user space) and, above it,
    /// the log2 of its capacity.
    pub(super) fn hint(&self) -> u64 {
        if self.slots.is_empty() {
            return 0;
        }
        let at = self.slots.as_ptr() as u64;
        debug_assert!(at < HINT_ADDRESS);
        at | (u64::from(self.slots.len().trailing_zeros()) << HINT_SHIFT)
    }

    /// The leaf of the key whose hash is `h`: each entry with `h`'s tag is
    /// offered to `is_key`, in probe order, until it answers `Some`
    /// (that leaf is the key's: its answer is returned) or the probe
    /// meets an empty entry (`None`).
    #[inline(always)]
    pub(super) fn find<T, E>(
        &self,
        h: u64,
        mut is_key: impl FnMut(LeafRef) -> Result<Option<T>, E>,
    ) -> Result<Option<T>, E> {
        let n = self.slots.len();
        if n == 0 {
            return Ok(None);
        }
        let mask = n - 1;
        let t = tag(h);
        let mut i = (h as usize) & mask;
        loop {
            let e = self.slots[i];
            if e == EMPTY {
                return Ok(None);
            }
            if e != TOMB && e & !REF_MASK == t {
                if let Some(found) = is_key(LeafRef::from_bits(e & REF_MASK))? {
                    return Ok(Some(found));
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `leaf` for a key with hash `h` that the index does not hold.
    /// Growing the table (or clearing its tombstones) hashes every key
    /// again, each from `key_of` of its leaf.
    pub(super) fn insert<'k>(
        &mut self,
        h: u64,
        leaf: LeafRef,
        key_of: impl Fn(LeafRef) -> &'k [u8],
    ) {
        // At most 3/4 of the entries used, tombstones included.
        let len = self.len();
        if (len + self.tombs() as usize + 1) * 4 > self.slots.len() * 3 {
            let want = ((len + 1) * 2).next_power_of_two().max(MIN_CAPACITY);
            self.rebuild(want, key_of);
        }
        let mask = self.slots.len() - 1;
        let mut i = (h as usize) & mask;
        loop {
            let e = self.slots[i];
            if e == EMPTY || e == TOMB {
                if e == TOMB {
                    self.counts -= 1 << LEN_BITS;
                }
                self.slots[i] = tag(h) | leaf.to_bits();
                self.counts += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Removes the entry of `leaf` (of a key with hash `h`); returns
    /// whether there was one. A table that is down to an eighth of its
    /// capacity (or whose tombstones its count cannot hold) is rebuilt to
    /// fit, its keys hashed again from `key_of`.
    pub(super) fn remove<'k>(
        &mut self,
        h: u64,
        leaf: LeafRef,
        key_of: impl Fn(LeafRef) -> &'k [u8],
    ) -> bool {
        let n = self.slots.len();
        if n == 0 {
            return false;
        }
        let mask = n - 1;
        let want = tag(h) | leaf.to_bits();
        let mut i = (h as usize) & mask;
        loop {
            let e = self.slots[i];
            if e == EMPTY {
                return false;
            }
            if e == want {
                // A tombstone unless the next entry is empty, where no probe
                // needs this one to go on.
                if self.slots[(i + 1) & mask] == EMPTY {
                    self.slots[i] = EMPTY;
                } else {
                    self.slots[i] = TOMB;
                    self.counts += 1 << LEN_BITS;
                }
                self.counts -= 1;
                let len = self.len();
                if len == 0 {
                    *self = Points::default();
                } else if (len * 8 < n && n > MIN_CAPACITY) || self.tombs() == MAX_TOMBS {
                    self.rebuild((len * 2).next_power_of_two().max(MIN_CAPACITY), key_of);
                }
                return true;
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether the index holds `leaf` for a key with hash `h`.
    pub(super) fn contains(&self, h: u64, leaf: LeafRef) -> bool {
        self.find(h, |l| Ok::<_, ()>((l == leaf).then_some(())))
            .is_ok_and(|found| found.is_some())
    }

    /// A table of `capacity` entries with every leaf held, hashed again
    /// from its key. The leaves' lines are prefetched a few entries ahead:
    /// the keys are in PM, one line each for the keys of most leaves.
    fn rebuild<'k>(&mut self, capacity: usize, key_of: impl Fn(LeafRef) -> &'k [u8]) {
        let old = std::mem::take(&mut self.slots);
        let held: Vec<LeafRef> = old
            .iter()
            .filter(|&&e| e != EMPTY && e != TOMB)
            .map(|&e| LeafRef::from_bits(e & REF_MASK))
            .collect();
        drop(old);
        let mut slots = vec![EMPTY; capacity].into_boxed_slice();
        for &leaf in &held {
            place(&mut slots, hash(key_of(leaf)), leaf);
        }
        self.slots = slots;
        self.counts = held.len() as u64;
    }
}
