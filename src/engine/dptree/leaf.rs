//! A base-tree leaf (DPTree §2.2, Fig. 3): two sets of metadata, one per
//! version, over one pool of key-value slots. The global version's low bit
//! `v` says which set is active; a merge writes only the other set and
//! slots that the active set does not use, then flips the version.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `meta[0].bitmap`: bit `j` set = slot `j` is live in version 0 |
//! | 8 | 8 | `meta[0].next`: the next leaf of version 0's list, or null |
//! | 16 | 8 | `meta[1].bitmap` |
//! | 24 | 8 | `meta[1].next` |
//! | 32 | `S` | `fp[j]`: fingerprint of slot `j`'s key ([`fingerprint`]) |
//! | 64 + 8 `j` | 8 | slot `j`: offset of its record ([`super::record`]) |
//!
//! `S` slots, 2 to 32 ([`SLOTS`]; [`DEFAULT_SLOTS`] unless
//! `dptree.leaf_slots` says otherwise when the pool is made): both
//! versions' metadata and the fingerprints share the first line, so a
//! search reads one line of the leaf before its slot, and a merge flushes
//! one line of metadata per leaf. The paper's
//! leaf also keeps per version a count, an order array and the maximum
//! key, not persisted; here the count is the bitmap's, the order is sorted
//! in DRAM when a scan or a merge needs it, and the DRAM inner map holds
//! each leaf's lower bound (docs/design.md §14, "The leaf"). The
//! fingerprints are shared by both versions: a merge writes only those of
//! slots the active version does not use, and flushes them with the rest.
//! The paper's slots are probed by hash; these are scanned by fingerprint,
//! as FPTree's, and a leaf's slots are all free or live (no tombstone
//! bit: no probe sequence to keep).

use std::ops::RangeInclusive;

use crate::error::Result;
use crate::pm::Pool;

pub use crate::engine::fptree::leaf::fingerprint;

/// Offset of the fingerprints.
pub const FPS: u64 = 32;
/// Offset of slot 0.
pub const SLOT0: u64 = 64;
/// Slots a leaf may have.
pub const SLOTS: RangeInclusive<u32> = 2..=MAX_SLOTS;
/// Most slots: as many fingerprints as fit in the first line.
pub const MAX_SLOTS: u32 = 32;
/// Slots of a new pool's leaves (a 320-byte leaf, five lines).
pub const DEFAULT_SLOTS: u32 = 32;

const _: () = assert!(FPS + MAX_SLOTS as u64 <= SLOT0);

/// Bytes of a leaf with `slots` slots.
pub const fn size(slots: u32) -> u64 {
    SLOT0 + 8 * slots as u64
}

/// Offset of `meta[v].bitmap` of `leaf`.
pub fn bitmap_at(leaf: u64, v: usize) -> u64 {
    leaf + 16 * v as u64
}

/// Offset of `meta[v].next` of `leaf`.
pub fn next_at(leaf: u64, v: usize) -> u64 {
    leaf + 16 * v as u64 + 8
}

/// Offset of slot `j` of `leaf`.
pub fn slot(leaf: u64, j: u32) -> u64 {
    leaf + SLOT0 + 8 * u64::from(j)
}

/// One version's metadata of a leaf, and the fingerprints, read once.
#[derive(Clone, Copy)]
pub struct Meta {
    /// Live slots of this version.
    pub bitmap: u64,
    /// The next leaf of this version, or 0.
    pub next: u64,
    /// Fingerprints.
    pub fps: [u8; MAX_SLOTS as usize],
}

impl Meta {
    /// Reads version `v`'s metadata of `leaf`, a leaf of `slots` slots,
    /// and its fingerprints.
    pub fn read(pool: &Pool, leaf: u64, v: usize, slots: u32) -> Result<Meta> {
        let bitmap = pool.load_u64(bitmap_at(leaf, v))?;
        let next = pool.load_u64(next_at(leaf, v))?;
        let mut fps = [0u8; MAX_SLOTS as usize];
        // SAFETY: writers hold the tree exclusively; readers hold it shared.
        fps[..slots as usize].copy_from_slice(unsafe { pool.bytes(leaf + FPS, u64::from(slots))? });
        pool.touch(leaf, 64);
        Ok(Meta { bitmap, next, fps })
    }

    /// The live slots, lowest first.
    pub fn live(&self) -> impl Iterator<Item = u32> {
        bits(self.bitmap)
    }
}

/// The set bits of `b`, lowest first.
pub fn bits(mut b: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (b != 0).then(|| {
            let j = b.trailing_zeros();
            b &= b - 1;
            j
        })
    })
}

/// All slots of a leaf of `slots` slots.
pub fn all(slots: u32) -> u64 {
    if slots == 64 {
        u64::MAX
    } else {
        (1 << slots) - 1
    }
}
