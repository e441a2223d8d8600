//! WOART NODE4 (§3.5, Fig. 5, Algorithm 3): partial keys and a slot array
//! packed into one 8-byte word, which is the commit point.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header |
//! | 8 | 8 | `end` |
//! | 16 | 8 | `keys`: bytes 0..4 = partial keys in order; bytes 4..8 = slot array: pointer index + 1 of each key, 0 after the last |
//! | 24 | 32 | `ptr[4]` |
//!
//! The entries are the leading non-zero slot bytes; `keys[i]` goes with
//! `ptr[slot[i] - 1]`. The node is one 64-byte line.
//!
//! # Persist order
//! - **add** (Algorithm 3): the child written and flushed by the caller;
//!   pick a pointer index no slot byte names; store the child into
//!   `ptr[idx]`; then the commit ([`Commit`], stored by the tree):
//!   **fence** (the child is durable); store the new `keys` word with the
//!   key inserted in order; flush the node's line; **fence**. The `keys`
//!   store is the commit point: it is in the same line as `ptr[idx]` and
//!   stored after it, so (same-line order) a durable `keys` implies a
//!   durable `ptr[idx]`, and the paper's separate flush of the pointer is
//!   not needed. A crash before the commit leaves `ptr[idx]` unlisted (an
//!   orphan pointer, cleared at open). 2 fences, 1 line; in a batch
//!   whose leaves are durable already, no fence of its own.
//! - **remove**: store `keys` without the entry; flush; **fence** (commit);
//!   the caller then nulls `ptr[idx]` (no flush: an orphan pointer left by a
//!   crash is cleared at open). 1 fence.

use super::{byte, with_byte, Commit, Entry, BODY};
use crate::error::{Error, Result};
use crate::pm::{Pool, WordBlock, CACHE_LINE};
use crate::swar::bytes_equal;

/// Offset of the packed keys/slots word.
pub const KEYS: u64 = BODY;
/// Offset of `ptr[0]`.
pub const PTRS: u64 = BODY + 8;
/// Node size (one 64-byte line).
pub const SIZE: u64 = PTRS + 4 * 8;
const _: () = assert!(SIZE == 56 && SIZE <= 64);

/// Entries of a packed word: (key, pointer index) in key order.
pub fn decode(w: u64) -> Vec<(u8, usize)> {
    (0..4)
        .map_while(|i| {
            let s = byte(w, 4 + i);
            (s != 0).then(|| (byte(w, i), usize::from(s - 1)))
        })
        .collect()
}

/// The packed word of entries (key, pointer index), which must be in key order.
pub fn encode(entries: &[(u8, usize)]) -> u64 {
    let mut w = 0;
    for (i, &(k, p)) in entries.iter().enumerate() {
        w = with_byte(w, i, k);
        w = with_byte(w, 4 + i, p as u8 + 1);
    }
    w
}

/// Entries listed in the packed word (as many as [`decode`] gives).
pub(super) fn listed(pool: &Pool, node: u64) -> Result<usize> {
    let w = pool.load_u64(node + KEYS)?;
    Ok((0..4).take_while(|&i| byte(w, 4 + i) != 0).count())
}

fn ptr_slot(node: u64, idx: usize) -> u64 {
    node + PTRS + 8 * idx as u64
}

/// The slot of the child for `unit`, if listed (the entries of [`decode`],
/// read in place: a search allocates nothing).
#[inline]
pub fn find(pool: &Pool, node: u64, unit: u8) -> Result<Option<u64>> {
    let w = pool.load_u64(node + KEYS)?;
    Ok(pointer_for(w, unit).map(|p| ptr_slot(node, p)))
}

/// The pointer index of the first listed entry whose key is `unit`: the
/// four keys compared at once, as NODE16's (`n16::entry_for`), instead of
/// a loop that leaves at a random entry.
#[inline(always)]
fn pointer_for(w: u64, unit: u8) -> Option<usize> {
    const HIGH4: u64 = 0x8080_8080;
    let keys = bytes_equal(w, unit) & HIGH4;
    // The high bit of the first zero slot byte, or bit 39 if none is zero:
    // the entries are the bytes below it.
    let end = (bytes_equal(w >> 32, 0) & HIGH4 | 1 << 39).trailing_zeros() - 7;
    let hits = keys & ((1u64 << end) - 1);
    (hits != 0).then(|| usize::from(byte(w, 4 + hits.trailing_zeros() as usize / 8)) - 1)
}

/// [`find`] in the node's first line, already checked (`l`, at `node`):
/// the one-key search's loop (`Search::walk_bytes`).
#[inline(always)]
pub fn find_in_line(l: WordBlock<'_, CACHE_LINE>, node: u64, unit: u8) -> Option<u64> {
    const { assert!(SIZE <= CACHE_LINE) };
    pointer_for(l.load(KEYS), unit).map(|p| ptr_slot(node, p))
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    let w = pool.load_u64(node + KEYS)?;
    decode(w)
        .into_iter()
        .map(|(k, p)| Entry::read(pool, k, ptr_slot(node, p)))
        .collect()
}

pub(super) fn orphans(pool: &Pool, node: u64) -> Result<Vec<u64>> {
    let used: Vec<usize> = decode(pool.load_u64(node + KEYS)?)
        .into_iter()
        .map(|e| e.1)
        .collect();
    let mut out = Vec::new();
    for i in 0..4 {
        if !used.contains(&i) && pool.load_u64(ptr_slot(node, i))? != 0 {
            out.push(ptr_slot(node, i));
        }
    }
    Ok(out)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    // Child `i` in pointer slot `i`: the entries of `encode` in place.
    let mut w = 0;
    for (i, &(u, p)) in children.iter().enumerate() {
        w = with_byte(with_byte(w, i, u), 4 + i, i as u8 + 1);
        body[8 + 8 * i..16 + 8 * i].copy_from_slice(&p.to_le_bytes());
    }
    body[0..8].copy_from_slice(&w.to_le_bytes());
}

/// Algorithm 3 (see the module's persist order): adds `child` (written
/// and flushed) for `unit` up to its commit, which it returns. The node
/// must not be full and must not list `unit`. `commit_first` is a
/// fault-injection switch: the `keys` word is stored and persisted before
/// the child pointer.
pub fn add(pool: &Pool, node: u64, unit: u8, child: u64, commit_first: bool) -> Result<Commit> {
    if !node.is_multiple_of(CACHE_LINE) {
        // Its commit's flush must cover the pointer (same-line order);
        // blocks start on a line, so only damage puts a node elsewhere.
        return Err(Error::corrupt(node, "radix: NODE4 not on a line"));
    }
    let mut e = decode(pool.load_u64(node + KEYS)?);
    if e.len() >= 4 {
        return Err(Error::corrupt(node, "radix: add to a full NODE4"));
    }
    let idx = (0..4)
        .find(|i| !e.iter().any(|x| x.1 == *i))
        .expect("a NODE4 with < 4 entries has a free pointer");
    let pos = e.partition_point(|x| x.0 < unit);
    e.insert(pos, (unit, idx));
    if commit_first {
        pool.store_u64(node + KEYS, encode(&e))?;
        pool.persist(node + KEYS, 8);
    }
    pool.store_u64(ptr_slot(node, idx), child)?;
    // The commit point of the insert, in the pointer's line (checked
    // above): its flush covers both.
    Ok(Commit {
        at: node + KEYS,
        word: encode(&e),
        fence_first: false,
        is_slot: false,
    })
}

/// Removes `unit` (see the module's persist order); returns the slot of its
/// pointer, which the caller nulls.
pub fn remove(pool: &Pool, node: u64, unit: u8) -> Result<u64> {
    let mut e = decode(pool.load_u64(node + KEYS)?);
    let pos = e
        .iter()
        .position(|x| x.0 == unit)
        .ok_or_else(|| Error::corrupt(node, "radix: NODE4 remove of a missing key"))?;
    let (_, idx) = e.remove(pos);
    pool.store_u64(node + KEYS, encode(&e))?; // commit point of the delete
    pool.persist(node + KEYS, 8);
    Ok(ptr_slot(node, idx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_word_round_trip() {
        let e = vec![(3, 2), (9, 0), (200, 3)];
        assert_eq!(decode(encode(&e)), e);
        assert!(decode(0).is_empty());
    }

    #[test]
    fn find_agrees_with_decode() {
        let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
        let node = pool.reserve(64).unwrap().offset();
        // Every slot-byte pattern, including gaps after a zero (ignored) and
        // repeated keys (the first listed wins), over a few key choices.
        // Keys on both sides of each bit that the compare of all keys at
        // once treats apart (0, 0x7F, 0x80, 0xFF).
        const ALPHABET: [u8; 6] = [0, 1, 0x7F, 0x80, 0xFF, 0x40];
        // Slot bytes past 4 too, as a torn read may give.
        const SLOTS: [u8; 8] = [0, 1, 2, 3, 4, 5, 0x80, 0xFF];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..4000 {
            x = x.wrapping_mul(0x5851_F42D_4C95_7F2D).wrapping_add(1);
            let mut w = x;
            for i in 0..4 {
                w = with_byte(w, i, ALPHABET[usize::from(byte(w, i)) % 6]);
                w = with_byte(w, 4 + i, SLOTS[usize::from(byte(w, 4 + i)) % 8]);
            }
            pool.store_u64(node + KEYS, w).unwrap();
            for unit in ALPHABET.into_iter().chain([2, 0xFE]) {
                let want = decode(w)
                    .into_iter()
                    .find(|&(k, _)| k == unit)
                    .map(|(_, p)| ptr_slot(node, p));
                assert_eq!(find(&pool, node, unit).unwrap(), want, "{w:#x} {unit}");
            }
        }
    }
}
