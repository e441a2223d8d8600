//! WORT node (§3.4): 16 child pointers indexed by a nibble.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header |
//! | 8 | 8 | `end` |
//! | 16 | 128 | `children[16]` |
//!
//! Insert of a child: publish the leaf into its (null) slot; the slot
//! store is the commit point. Delete: store null into the slot (commit).
//!
//! **The slot map (format 4).** Child `unit` lives in slot
//! `((unit + b) mod 16) XOR x`, where `b` (0 to 15) and `x` (0 or 2) are
//! chosen when the node is made and carried by every pointer to it, in
//! the bits [`MAP`] of the pointer word (blocks are line-aligned, so the
//! low 6 bits of an offset are free; bit 0 is the leaf tag, never set
//! here). A new node holds two children (a leaf expansion or a split), and
//! the map puts both in the header's line whenever it can (every pair of
//! units but those 8 apart): then the node costs one line to write and to
//! flush instead of two or three (docs/design.md §11, "Leaf-tagged
//! pointers and slot maps"). Trees of formats 2 and 3 have no map: `b = 0`,
//! `x = 0`. A search computes the slot from the pointer and the key alone,
//! as before, so the slot's load does not wait for the header, with five
//! instructions more than without a map.

use super::{block_of, Entry, BODY};
use crate::error::Result;
use crate::pm::{Pool, CACHE_LINE};

/// The bits of a pointer word to a WORT node that hold its slot map:
/// `b` in bits 1 to 4, and bit 5 set for `x = 2`.
pub const MAP: u64 = 0x3E;

/// Node size (a 192-byte block; 256 in format 2).
pub const SIZE: u64 = BODY + 16 * 8;
const _: () = assert!(SIZE == 144);

/// The index (0..16) of child `unit`'s slot in the node that the pointer
/// word `node` names: `((unit + b) mod 16) XOR x` (see the module doc).
/// Shifts, an add, an XOR and a mask: no multiply, select or table load
/// on the way from the pointer to the slot's address (each of those made
/// one-key searches about 25% slower: docs/design.md §11).
#[inline(always)]
pub const fn index(node: u64, unit: u8) -> u64 {
    debug_assert!(unit < 16);
    // `b` is bits 1..5 (the mask drops the offset's bits, shifted in
    // above it); `x` is bit 5 moved to bit 1.
    ((unit as u64 + (node >> 1)) ^ ((node >> 4) & 2)) & 15
}

/// The unit whose slot is `index` in the node `node` names: the inverse of
/// [`index`] (nothing reads slots by index outside the tests: `entries`
/// walks the units and maps each).
#[cfg(test)]
fn unit_at(node: u64, index: u64) -> u8 {
    ((index ^ ((node >> 4) & 2)).wrapping_sub(node >> 1) & 15) as u8
}

/// Where child `unit`'s slot lies in the node that the pointer word `node`
/// names, from the node's start (below [`SIZE`]), and whether that is in
/// a later line than the header (1) or not (0). Nodes are line-aligned,
/// so a search counts the line without waiting for a load.
#[inline(always)]
pub fn slot_at(node: u64, unit: u8) -> (u64, u64) {
    let i = index(node, unit & 15);
    (BODY + 8 * i, u64::from(BODY + 8 * i >= CACHE_LINE))
}

/// Slot of child `unit` in the node that the pointer word `node` names.
/// Wrapping: a search computes it from a word not checked yet (its
/// load is checked).
#[inline(always)]
pub fn slot(node: u64, unit: u8) -> u64 {
    block_of(node).wrapping_add(slot_at(node, unit).0)
}

/// The map bits (see [`MAP`]) that put the slots of `units` in the fewest
/// cache lines, the header's line counted always; the first map among
/// equals (the identity first). Every pair of units but those 8 apart fits
/// in the header's line. A new node has one or two children: their map is
/// read from a table (a third of WORT's inserts make a node, and trying
/// the 32 maps costs a few hundred instructions).
pub fn map_for(units: &[u8]) -> u64 {
    match *units {
        [u] => u64::from(PAIR_MAP[usize::from(u & 15)][usize::from(u & 15)]),
        [u, v] => u64::from(PAIR_MAP[usize::from(u & 15)][usize::from(v & 15)]),
        _ => {
            let mut best = (u32::MAX, 0);
            for map in (0..32u64).map(|m| m << 1) {
                let mut seen = 1u8; // the header's line
                for &u in units {
                    seen |= 1 << ((BODY + 8 * index(map, u & 15)) / CACHE_LINE);
                }
                if seen.count_ones() < best.0 {
                    best = (seen.count_ones(), map);
                }
            }
            best.1
        }
    }
}

/// Lines of a node's header and of the slots of units `u` and `v` under
/// `map`.
const fn pair_lines(map: u64, u: u8, v: u8) -> u32 {
    let lu = 1u8 << ((BODY + 8 * index(map, u)) / CACHE_LINE);
    let lv = 1u8 << ((BODY + 8 * index(map, v)) / CACHE_LINE);
    (1 | lu | lv).count_ones()
}

/// [`map_for`] of every pair of units (and of one unit, on the diagonal).
static PAIR_MAP: [[u8; 16]; 16] = {
    let mut t = [[0u8; 16]; 16];
    let mut u = 0;
    while u < 16 {
        let mut v = 0;
        while v < 16 {
            let (mut best, mut m) = (u32::MAX, 0);
            while m < 32 {
                let n = pair_lines(m << 1, u, v);
                if n < best {
                    best = n;
                    t[u as usize][v as usize] = (m << 1) as u8;
                }
                m += 1;
            }
            v += 1;
        }
        u += 1;
    }
    t
};

/// The children of the node that the pointer word `node` names, in unit
/// order (non-null slots only).
pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for unit in 0..16u8 {
        let slot = slot(node, unit);
        let ptr = pool.load_u64(slot)?;
        if ptr != 0 {
            out.push(Entry { unit, slot, ptr });
        }
    }
    Ok(out)
}

/// Writes `children` into the body of a node whose pointers carry the map
/// bits `map`.
pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)], map: u64) {
    for &(u, p) in children {
        let o = 8 * index(map, u) as usize;
        body[o..o + 8].copy_from_slice(&p.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_line_from_the_unit_agrees_with_the_addresses() {
        for node in [0, CACHE_LINE, 4096] {
            for map in (0..32).map(|m| m << 1) {
                for u in 0..16u8 {
                    let later = slot(node | map, u) / CACHE_LINE != node / CACHE_LINE;
                    let (at, l) = slot_at(map, u);
                    assert_eq!(at, BODY + 8 * index(map, u), "unit {u} map {map:#x}");
                    assert_eq!(l, u64::from(later), "unit {u} map {map:#x}");
                    assert!(at + 8 <= SIZE);
                }
            }
        }
    }

    /// Every map is a permutation of the 16 slots, `unit_at` is its
    /// inverse, and the leaf tag is not part of it.
    #[test]
    fn every_map_is_a_permutation_with_its_inverse() {
        for map in (0..32).map(|m| m << 1) {
            assert_eq!(map & !MAP, 0);
            let mut seen = 0u32;
            for u in 0..16u8 {
                let i = index(map, u);
                seen |= 1 << i;
                assert_eq!(unit_at(map, i), u, "map {map:#x}");
                assert_eq!(slot(4096 | map, u), 4096 + BODY + 8 * i);
            }
            assert_eq!(seen, 0xFFFF, "map {map:#x}");
        }
    }

    /// The map chosen for two units puts both in the header's line unless
    /// they are 8 apart (then no map of this family can: their slots
    /// differ in bit 3, so one is 8 or more), and for one unit always.
    #[test]
    fn the_map_puts_two_children_in_the_header_line_unless_8_apart() {
        let in_first = |map: u64, u: u8| BODY + 8 * index(map, u) < CACHE_LINE;
        for u in 0..16u8 {
            assert!(in_first(map_for(&[u]), u));
            for v in 0..16u8 {
                if u == v {
                    continue;
                }
                let map = map_for(&[u, v]);
                let both = in_first(map, u) && in_first(map, v);
                assert_eq!(both, u.abs_diff(v) != 8, "units {u} and {v}: map {map:#x}");
            }
        }
        assert_eq!(map_for(&[0, 1]), 0, "the identity among equals");
        // The table agrees with the search over the 32 maps (3 units take
        // it), and a map puts three units in as few lines as any.
        for u in 0..16u8 {
            for v in 0..16u8 {
                for w in [0u8, 5, 15] {
                    let lines = |map: u64| {
                        let mut seen = 1u8;
                        for x in [u, v, w] {
                            seen |= 1 << ((BODY + 8 * index(map, x)) / CACHE_LINE);
                        }
                        seen.count_ones()
                    };
                    let best = (0..32).map(|m| lines(m << 1)).min().unwrap();
                    assert_eq!(lines(map_for(&[u, v, w])), best, "{u} {v} {w}");
                }
                let pair = (0..32u64)
                    .map(|m| m << 1)
                    .min_by_key(|&m| pair_lines(m, u, v))
                    .unwrap();
                assert_eq!(map_for(&[u, v]), pair, "{u} {v}");
            }
        }
    }
}
