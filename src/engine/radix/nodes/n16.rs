//! WOART NODE16 (§3.5, Algorithm 4): append-only parallel arrays of
//! partial keys and pointers, and a 16-bit bitmap of valid entries, which
//! is the commit point. Keys are not sorted.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header |
//! | 8 | 8 | `end` |
//! | 16 | 8 | `bitmap` (bits 0..16: entry `i` valid) |
//! | 24 | 16 | `keys[16]` |
//! | 40 | 128 | `ptr[16]` |
//!
//! # Persist order
//! - **add** (Algorithm 4): the child written and flushed by the caller;
//!   take the first clear bit `i`; store the 8-byte word holding `keys[i]`
//!   and the child into `ptr[i]`; if `ptr[i]` is not in the bitmap's line,
//!   flush its line; then the commit ([`Commit`], stored by the tree):
//!   **fence** (child and pointer durable); store `bitmap | 1 << i`, flush
//!   the bitmap's line, **fence**. The keys and the bitmap share the
//!   node's first line (and `ptr[0..3]` do too), and the bitmap is stored
//!   last: a durable bitmap implies durable keys (same-line order, as
//!   NODE4's commit word and `hart`'s leaves rely on), so the paper's
//!   separate flush of the key is not needed, and for `i < 3` neither is
//!   the pointer's. 2 fences and 1 line (`i < 3`) or 2 lines; in a batch
//!   the first fence is shared with the batch's other commits and the
//!   last is the batch's. Before (2026-11-24) the key's line was flushed
//!   before the fence and again with the bitmap: one line more per add.
//!   A crash before the commit leaves `ptr[i]` unlisted (an orphan
//!   pointer, cleared at open).
//! - **remove**: store `bitmap & !(1 << i)`, flush, **fence** (commit); the
//!   caller then nulls `ptr[i]` (no flush). 1 fence.

use super::{byte, with_byte, Commit, Entry, BODY};
use crate::error::{Error, Result};
use crate::pm::{Pool, WordBlock, CACHE_LINE};
use crate::swar::{byte_mask, bytes_equal};

/// Offset of the bitmap.
pub const BITMAP: u64 = BODY;
/// Offset of `keys[0]`.
pub const KEYS: u64 = BODY + 8;
/// Offset of `ptr[0]`.
pub const PTRS: u64 = KEYS + 16;
/// Node size (a 256-byte block).
pub const SIZE: u64 = PTRS + 16 * 8;
const _: () = assert!(SIZE == 168);

fn ptr_slot(node: u64, i: usize) -> u64 {
    node + PTRS + 8 * i as u64
}

/// Valid entries (bits of the bitmap).
pub(super) fn listed(pool: &Pool, node: u64) -> Result<usize> {
    Ok((pool.load_u64(node + BITMAP)? & 0xFFFF).count_ones() as usize)
}

/// (key, index) of the valid entries, in key order.
fn valid(pool: &Pool, node: u64) -> Result<Vec<(u8, usize)>> {
    let bitmap = pool.load_u64(node + BITMAP)? & 0xFFFF;
    let k0 = pool.load_u64(node + KEYS)?;
    let k1 = pool.load_u64(node + KEYS + 8)?;
    let mut out: Vec<(u8, usize)> = (0..16)
        .filter(|i| bitmap & (1 << i) != 0)
        .map(|i| (if i < 8 { byte(k0, i) } else { byte(k1, i - 8) }, i))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The slot of the child for `unit`, if a valid entry has it (the lowest
/// such entry, as in [`valid`]'s order; read in place, no allocation).
#[inline]
pub fn find(pool: &Pool, node: u64, unit: u8) -> Result<Option<u64>> {
    let bitmap = pool.load_u64(node + BITMAP)?;
    let k0 = pool.load_u64(node + KEYS)?;
    let k1 = pool.load_u64(node + KEYS + 8)?;
    Ok(entry_for(bitmap, k0, k1, unit).map(|i| ptr_slot(node, i)))
}

/// The lowest valid entry whose key is `unit`: all 16 keys compared at
/// once, so that the only branch left (found or not) is predictable. A
/// loop over the valid entries (before 2026-11-26) left at a random entry,
/// a mispredicted branch per search that waits for the node's miss.
#[inline(always)]
fn entry_for(bitmap: u64, k0: u64, k1: u64, unit: u8) -> Option<usize> {
    // The two masks fill bits 0..16 only: bitmap bits above are ignored.
    let hits = (byte_mask(bytes_equal(k0, unit)) | byte_mask(bytes_equal(k1, unit)) << 8) & bitmap;
    (hits != 0).then(|| hits.trailing_zeros() as usize)
}

/// [`find`] in the node's first line, already checked (`l`, at `node`;
/// the bitmap and the keys are in it): the one-key search's loop
/// (`Search::walk_bytes`).
#[inline(always)]
pub fn find_in_line(l: WordBlock<'_, CACHE_LINE>, node: u64, unit: u8) -> Option<u64> {
    const { assert!(KEYS + 16 <= CACHE_LINE) };
    let (k0, k1) = (l.load(KEYS), l.load(KEYS + 8));
    entry_for(l.load(BITMAP), k0, k1, unit).map(|i| ptr_slot(node, i))
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    valid(pool, node)?
        .into_iter()
        .map(|(k, i)| Entry::read(pool, k, ptr_slot(node, i)))
        .collect()
}

pub(super) fn orphans(pool: &Pool, node: u64) -> Result<Vec<u64>> {
    let bitmap = pool.load_u64(node + BITMAP)?;
    let mut out = Vec::new();
    for i in 0..16 {
        if bitmap & (1 << i) == 0 && pool.load_u64(ptr_slot(node, i))? != 0 {
            out.push(ptr_slot(node, i));
        }
    }
    Ok(out)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    let bitmap: u64 = (1u64 << children.len()) - 1;
    body[0..8].copy_from_slice(&bitmap.to_le_bytes());
    for (i, &(u, p)) in children.iter().enumerate() {
        body[8 + i] = u;
        let o = 24 + 8 * i;
        body[o..o + 8].copy_from_slice(&p.to_le_bytes());
    }
}

/// Algorithm 4 (see the module's persist order): adds `child` (written
/// and flushed) for `unit` up to its commit, which it returns. The node
/// must not be full and must not list `unit`. `bitmap_first` is the fault
/// `woart-node16-bitmap-first`.
pub fn add(pool: &Pool, node: u64, unit: u8, child: u64, bitmap_first: bool) -> Result<Commit> {
    let bitmap = pool.load_u64(node + BITMAP)?;
    let i = (!bitmap & 0xFFFF).trailing_zeros() as usize;
    if i >= 16 {
        return Err(Error::corrupt(node, "radix: add to a full NODE16"));
    }
    let kw = node + KEYS + 8 * (i as u64 / 8);
    let ps = ptr_slot(node, i);
    let line = |off: u64| off / CACHE_LINE;
    // Same-line order needs the key word in the bitmap's line; a node at
    // an offset where it is not (none the allocator hands out: blocks
    // are line-aligned) flushes it as a line of its own.
    let key_apart = line(kw) != line(node + BITMAP);
    let ptr_apart = line(ps) != line(node + BITMAP);
    if bitmap_first && !ptr_apart && !key_apart {
        pool.store_u64(node + BITMAP, bitmap | 1 << i)?;
    }
    pool.store_u64(kw, with_byte(pool.load_u64(kw)?, i % 8, unit))?;
    pool.store_u64(ps, child)?;
    if key_apart {
        pool.flush(kw, 8);
    }
    if ptr_apart {
        pool.flush(ps, 8);
    }
    // The commit point of the insert.
    Ok(Commit {
        at: node + BITMAP,
        word: bitmap | 1 << i,
        fence_first: ptr_apart || key_apart,
        is_slot: false,
    })
}

/// Removes `unit` (see the module's persist order); returns the slot of its
/// pointer, which the caller nulls.
pub fn remove(pool: &Pool, node: u64, unit: u8) -> Result<u64> {
    let (_, i) = valid(pool, node)?
        .into_iter()
        .find(|&(k, _)| k == unit)
        .ok_or_else(|| Error::corrupt(node, "radix: NODE16 remove of a missing key"))?;
    let bitmap = pool.load_u64(node + BITMAP)?;
    pool.store_u64(node + BITMAP, bitmap & !(1 << i))?; // commit point of the delete
    pool.persist(node + BITMAP, 8);
    Ok(ptr_slot(node, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_agrees_with_valid() {
        let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
        let node = pool.reserve(256).unwrap().offset();
        // Random bitmaps and keys from a small alphabet, so that keys repeat
        // (the lowest valid entry wins) and are often absent; the alphabet
        // has bytes on both sides of each bit that the compare of all keys
        // at once treats apart (0, 0x7F, 0x80, 0xFF).
        const ALPHABET: [u8; 9] = [0, 1, 2, 0x7F, 0x80, 0x81, 0xFE, 0xFF, 0x40];
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..4000 {
            x = x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1);
            let (mut k0, mut k1) = (x, x.rotate_left(29));
            for i in 0..8 {
                k0 = with_byte(k0, i, ALPHABET[usize::from(byte(k0, i)) % 9]);
                k1 = with_byte(k1, i, ALPHABET[usize::from(byte(k1, i)) % 9]);
            }
            pool.store_u64(node + BITMAP, x >> 40).unwrap();
            pool.store_u64(node + KEYS, k0).unwrap();
            pool.store_u64(node + KEYS + 8, k1).unwrap();
            let valid = valid(&pool, node).unwrap();
            for unit in ALPHABET.into_iter().chain([3, 0x7E]) {
                let want = valid
                    .iter()
                    .find(|&&(k, _)| k == unit)
                    .map(|&(_, i)| ptr_slot(node, i));
                assert_eq!(find(&pool, node, unit).unwrap(), want, "{x:#x} {unit}");
            }
        }
    }
}
