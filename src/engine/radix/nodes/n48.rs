//! ART NODE48 as WOART makes it consistent (§3.5): a child index array of
//! 256 bytes indexed by the partial key, and 48 pointers.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header |
//! | 8 | 8 | `end` |
//! | 16 | 256 | `index[256]`: pointer index + 1, 0 = no child |
//! | 272 | 384 | `ptr[48]` |
//!
//! Free pointers are found from the index array, not from null pointers
//! (the paper's point: a crash can leave a non-null pointer that nothing
//! indexes).
//!
//! # Persist order
//! - **add**: the child written and flushed by the caller; store it into a
//!   pointer no index byte names, flush; then the commit ([`Commit`],
//!   stored by the tree): **fence**; store the 8-byte word holding
//!   `index[key]`, flush, **fence**. 2 fences (in a batch, the first is
//!   shared with the batch's other commits and the last is the batch's).
//!   A crash before the commit leaves an orphan pointer, cleared at open.
//! - **remove**: clear `index[key]` (one 8-byte store), flush, **fence**
//!   (commit); the caller then nulls `ptr[i]` (no flush). 1 fence.

use super::{byte, with_byte, Commit, Entry, BODY};
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Offset of `index[0]`.
pub const INDEX: u64 = BODY;
/// Offset of `ptr[0]`.
pub const PTRS: u64 = INDEX + 256;
/// Node size (a 1 KiB block).
pub const SIZE: u64 = PTRS + 48 * 8;
const _: () = assert!(SIZE == 656);

fn ptr_slot(node: u64, i: usize) -> u64 {
    node + PTRS + 8 * i as u64
}

/// The 32 index words.
fn index(pool: &Pool, node: u64) -> Result<[u64; 32]> {
    // Every caller holds the tree's lock (`Words`' relaxed loads suffice).
    let pm = pool.words();
    let mut w = [0u64; 32];
    for (i, x) in w.iter_mut().enumerate() {
        *x = pm.load(node + INDEX + 8 * i as u64)?;
    }
    Ok(w)
}

fn at(w: &[u64; 32], unit: u8) -> u8 {
    byte(w[usize::from(unit) / 8], usize::from(unit) % 8)
}

#[inline]
pub fn find(pool: &Pool, node: u64, unit: u8) -> Result<Option<u64>> {
    let iw = node + INDEX + 8 * (u64::from(unit) / 8);
    let v = byte(pool.load_u64(iw)?, usize::from(unit) % 8);
    if v == 0 || v > 48 {
        return Ok(None);
    }
    Ok(Some(ptr_slot(node, usize::from(v - 1))))
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    let w = index(pool, node)?;
    let mut out = Vec::new();
    for u in 0..=255u8 {
        let v = at(&w, u);
        if v == 0 {
            continue;
        }
        if v > 48 {
            return Err(Error::corrupt(node, "radix: NODE48 index out of range"));
        }
        let slot = ptr_slot(node, usize::from(v - 1));
        out.push(Entry::read(pool, u, slot)?);
    }
    Ok(out)
}

/// Pointers the index names (each counted once, as [`add`] sees them).
pub(super) fn listed(pool: &Pool, node: u64) -> Result<usize> {
    Ok(used(&index(pool, node)?).count_ones() as usize)
}

/// Bit `i` set: some index byte names pointer `i` (bytes over 48 name
/// none). Visits the non-zero bytes only (at most 48 in a sound node).
fn used(w: &[u64; 32]) -> u64 {
    let mut used = 0u64;
    for &word in w {
        let mut rest = word;
        while rest != 0 {
            let b = rest.trailing_zeros() / 8;
            let v = byte(word, b as usize);
            if v <= 48 {
                used |= 1 << (v - 1);
            }
            rest &= !(0xFF << (8 * b));
        }
    }
    used
}

pub(super) fn orphans(pool: &Pool, node: u64) -> Result<Vec<u64>> {
    let used = used(&index(pool, node)?);
    let mut out = Vec::new();
    for i in 0..48 {
        if used & 1 << i == 0 && pool.load_u64(ptr_slot(node, i))? != 0 {
            out.push(ptr_slot(node, i));
        }
    }
    Ok(out)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    for (i, &(u, p)) in children.iter().enumerate() {
        body[usize::from(u)] = i as u8 + 1;
        let o = 256 + 8 * i;
        body[o..o + 8].copy_from_slice(&p.to_le_bytes());
    }
}

/// Adds `child` (written and flushed) for `unit` up to its commit, which
/// it returns (see the module's persist order). The node must not be full
/// and must not list `unit`.
pub fn add(pool: &Pool, node: u64, unit: u8, child: u64) -> Result<Commit> {
    let free = !used(&index(pool, node)?) & ((1 << 48) - 1);
    if free == 0 {
        return Err(Error::corrupt(node, "radix: add to a full NODE48"));
    }
    let i = free.trailing_zeros() as usize;
    pool.store_u64(ptr_slot(node, i), child)?;
    pool.flush(ptr_slot(node, i), 8);
    let iw = node + INDEX + 8 * (u64::from(unit) / 8);
    // The commit point of the insert; the pointer is in another line.
    Ok(Commit {
        at: iw,
        word: with_byte(pool.load_u64(iw)?, usize::from(unit) % 8, i as u8 + 1),
        fence_first: true,
        is_slot: false,
    })
}

/// Removes `unit` (see the module's persist order); returns the slot of its
/// pointer, which the caller nulls.
pub fn remove(pool: &Pool, node: u64, unit: u8) -> Result<u64> {
    let iw = node + INDEX + 8 * (u64::from(unit) / 8);
    let w = pool.load_u64(iw)?;
    let v = byte(w, usize::from(unit) % 8);
    if v == 0 || v > 48 {
        return Err(Error::corrupt(
            node,
            "radix: NODE48 remove of a missing key",
        ));
    }
    pool.store_u64(iw, with_byte(w, usize::from(unit) % 8, 0))?; // commit point of the delete
    pool.persist(iw, 8);
    Ok(ptr_slot(node, usize::from(v - 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `used` against the plain definition (every one of the 256 index
    /// bytes, in order), on indexes with gaps, repeats and bytes over 48.
    #[test]
    fn used_agrees_with_every_index_byte() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..3000 {
            let mut w = [0u64; 32];
            for word in w.iter_mut() {
                for b in 0..8 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly empty, as in a node; some values past 48.
                    let v = match x % (4 + round % 8) {
                        0 => (x >> 8) as u8 % 60,
                        _ => 0,
                    };
                    *word = with_byte(*word, b, v);
                }
            }
            let mut want = 0u64;
            for u in 0..=255u8 {
                let v = at(&w, u);
                if (1..=48).contains(&v) {
                    want |= 1 << (v - 1);
                }
            }
            assert_eq!(used(&w), want, "round {round}");
        }
    }
}
