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

use super::{Entry, BODY};
use crate::error::Result;
use crate::pm::{Pool, CACHE_LINE};

/// Node size (a 256-byte block).
pub const SIZE: u64 = BODY + 16 * 8;
const _: () = assert!(SIZE == 144);

/// Slot of child `unit`.
#[inline]
pub fn slot(node: u64, unit: u8) -> u64 {
    debug_assert!(unit < 16);
    node + BODY + 8 * u64::from(unit)
}

/// 1 if child `unit`'s slot lies in a later cache line than the header, 0
/// if in the same (blocks are line-aligned): what a search counts for the
/// slot, computed without the node's address.
#[inline(always)]
pub fn slot_in_later_line(unit: u8) -> u64 {
    u64::from(BODY + 8 * u64::from(unit) >= CACHE_LINE)
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    super::direct_entries(pool, node, 16)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    super::fill_direct(body, children);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_line_from_the_unit_agrees_with_the_addresses() {
        for node in [0, CACHE_LINE, 4096] {
            for u in 0..16u8 {
                let later = slot(node, u) / CACHE_LINE != node / CACHE_LINE;
                assert_eq!(slot_in_later_line(u), u64::from(later), "unit {u}");
            }
        }
    }
}
