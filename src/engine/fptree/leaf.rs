//! A leaf: FPTree's persistent leaf node (Oukid et al., SIGMOD'16, §4):
//! an unsorted array of slots, a bitmap of the live ones, a one-byte
//! fingerprint per slot, and the pointer to the next leaf. `S` slots,
//! 2 to 40 ([`SLOTS`]; [`DEFAULT_SLOTS`] unless `fptree.leaf_slots` says
//! otherwise when the pool is made).
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `bitmap`: bit `j` set = slot `j` is live. The commit word of every insert and delete |
//! | 8 | 8 | `next`: the next leaf in key order, or null |
//! | 16 | `S` | `fp[j]`: fingerprint of slot `j`'s key ([`fingerprint`]) |
//! | 64 + 8 `j` | 8 | slot `j`: offset of its record ([`super::record`]) |
//!
//! The bitmap, `next` and the fingerprints share the leaf's first cache
//! line: stores to one line reach PM in program order (docs/design.md §1),
//! which the split's commit relies on ([`super`], "Persist order").

use std::ops::RangeInclusive;

use crate::error::Result;
use crate::pm::Pool;

/// Offset of the bitmap.
pub const BITMAP: u64 = 0;
/// Offset of `next`.
pub const NEXT: u64 = 8;
/// Offset of the fingerprints.
pub const FPS: u64 = 16;
/// Offset of slot 0.
pub const SLOT0: u64 = 64;
/// Slots a leaf may have.
pub const SLOTS: RangeInclusive<u32> = 2..=MAX_SLOTS;
/// Most slots: as many fingerprints as fit in the first line.
pub const MAX_SLOTS: u32 = 40;
/// Slots of a new pool's leaves: a 384-byte leaf, six lines.
pub const DEFAULT_SLOTS: u32 = 40;

const _: () = assert!(FPS + MAX_SLOTS as u64 <= SLOT0);
const _: () = assert!(SLOT0 == 64, "the header is one cache line");

/// Bytes of a leaf with `slots` slots.
pub const fn size(slots: u32) -> u64 {
    SLOT0 + 8 * slots as u64
}

/// Offset of slot `j` of `leaf`.
pub fn slot(leaf: u64, j: u32) -> u64 {
    leaf + SLOT0 + 8 * u64::from(j)
}

/// The one-byte hash of a key kept beside its slot, so that a search reads
/// the record of a slot only when its fingerprint matches (FPTree §4.1):
/// the top byte of the key's FNV-1a hash after MurmurHash3's 64-bit
/// finalizer. FNV-1a's own top byte hardly depends on the key's last
/// bytes (its multiplier moves them only into the low bits), so keys that
/// differ only there, such as sequential strings, shared fingerprints:
/// 12.4 PM lines read per search on the HART paper's Sequential keys
/// with it, against about 3 with the finalizer
/// (`fingerprints_spread_over_sequential_keys`).
pub fn fingerprint(key: &[u8]) -> u8 {
    let mut h = crate::fnv::fnv1a(key);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    (h >> 56) as u8
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    /// Sequential strings, as the HART paper's Sequential key set makes
    /// them, spread over the 256 fingerprints about evenly.
    #[test]
    fn fingerprints_spread_over_sequential_keys() {
        let mut counts = [0u32; 256];
        let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut n = 0;
        for a in digits {
            for b in digits {
                for c in digits.iter().take(16) {
                    counts[usize::from(fingerprint(&[b'k', *a, *b, *c]))] += 1;
                    n += 1;
                }
            }
        }
        let mean = n / 256;
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(
            *lo > mean / 2 && *hi < mean * 3 / 2,
            "{lo}..{hi} around {mean}"
        );
        // FNV-1a's own top byte fails this.
        let mut fnv = [0u32; 256];
        for a in digits {
            for b in digits {
                for c in digits.iter().take(16) {
                    fnv[(crate::fnv::fnv1a(&[b'k', *a, *b, *c]) >> 56) as usize] += 1;
                }
            }
        }
        assert!(fnv.iter().filter(|&&c| c == 0).count() > 64);
    }
}

/// A leaf's first line, read once.
#[derive(Clone, Copy)]
pub struct Header {
    /// Live slots.
    pub bitmap: u64,
    /// The next leaf, or 0.
    pub next: u64,
    /// Fingerprints.
    pub fps: [u8; MAX_SLOTS as usize],
}

impl Header {
    /// Reads the first line of `leaf`, a leaf of `slots` slots. Its slot
    /// lines are prefetched first: every use of a header goes on to a
    /// slot, and the slot's miss then overlaps the header's instead of
    /// following it (a search waits for two misses in the leaf, not three).
    pub fn read(pool: &Pool, leaf: u64, slots: u32) -> Result<Header> {
        let words = pool.words();
        let mut line = leaf + SLOT0;
        while line < leaf + size(slots) {
            words.prefetch(line);
            line += 64;
        }
        let bitmap = pool.load_u64(leaf + BITMAP)?;
        let next = pool.load_u64(leaf + NEXT)?;
        let mut fps = [0u8; MAX_SLOTS as usize];
        // SAFETY: writers hold the tree exclusively; readers hold it shared.
        fps.copy_from_slice(unsafe { pool.bytes(leaf + FPS, u64::from(MAX_SLOTS))? });
        pool.touch(leaf, 64);
        Ok(Header { bitmap, next, fps })
    }

    /// Starts loading the first line of the record of every live slot of
    /// `leaf` (whose first line this is), so that a walk over all of them
    /// (a scan, recovery) waits for their misses side by side instead of
    /// one after the other. A slot word it cannot read is skipped: the
    /// caller's own read of it reports the error. Counts no PM line: the
    /// caller's reads do.
    pub fn prefetch_records(&self, pool: &Pool, leaf: u64) {
        let words = pool.words();
        for j in self.live() {
            if let Ok(rec) = words.load(slot(leaf, j)) {
                words.prefetch(rec);
            }
        }
    }

    /// The live slots, lowest first.
    pub fn live(&self) -> impl Iterator<Item = u32> {
        let mut b = self.bitmap;
        std::iter::from_fn(move || {
            (b != 0).then(|| {
                let j = b.trailing_zeros();
                b &= b - 1;
                j
            })
        })
    }

    /// The first free slot of a leaf of `slots` slots, if any.
    pub fn free_slot(&self, slots: u32) -> Option<u32> {
        let j = (!self.bitmap).trailing_zeros();
        (j < slots).then_some(j)
    }
}
