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
//!   pointer no index byte names, flush; **fence**; store the 8-byte word
//!   holding `index[key]`, flush, **fence** (commit). 2 fences. A crash
//!   before the commit leaves an orphan pointer, cleared at open.
//! - **remove**: clear `index[key]` (one 8-byte store), flush, **fence**
//!   (commit); the caller then nulls `ptr[i]` (no flush). 1 fence.

use super::{byte, with_byte, Entry, BODY};
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
    let mut w = [0u64; 32];
    for (i, x) in w.iter_mut().enumerate() {
        *x = pool.load_u64(node + INDEX + 8 * i as u64)?;
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

fn used(w: &[u64; 32]) -> [bool; 48] {
    let mut used = [false; 48];
    for u in 0..=255u8 {
        let v = at(w, u);
        if (1..=48).contains(&v) {
            used[usize::from(v - 1)] = true;
        }
    }
    used
}

pub(super) fn orphans(pool: &Pool, node: u64) -> Result<Vec<u64>> {
    let used = used(&index(pool, node)?);
    let mut out = Vec::new();
    for (i, u) in used.iter().enumerate() {
        if !u && pool.load_u64(ptr_slot(node, i))? != 0 {
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

/// Adds `child` (written and flushed) for `unit` (see the module's persist
/// order). The node must not be full and must not list `unit`.
pub fn add(pool: &Pool, node: u64, unit: u8, child: u64) -> Result<()> {
    let used = used(&index(pool, node)?);
    let i = used
        .iter()
        .position(|u| !u)
        .ok_or_else(|| Error::corrupt(node, "radix: add to a full NODE48"))?;
    pool.store_u64(ptr_slot(node, i), child)?;
    pool.flush(ptr_slot(node, i), 8);
    pool.fence(); // child and pointer durable
    let iw = node + INDEX + 8 * (u64::from(unit) / 8);
    let w = with_byte(pool.load_u64(iw)?, usize::from(unit) % 8, i as u8 + 1);
    pool.store_u64(iw, w)?; // commit point of the insert
    pool.persist(iw, 8);
    Ok(())
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
