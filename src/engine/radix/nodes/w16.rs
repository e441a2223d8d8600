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
use crate::pm::Pool;

/// Node size (a 256-byte block).
pub const SIZE: u64 = BODY + 16 * 8;
const _: () = assert!(SIZE == 144);

/// Slot of child `unit`.
#[inline]
pub fn slot(node: u64, unit: u8) -> u64 {
    debug_assert!(unit < 16);
    node + BODY + 8 * u64::from(unit)
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    super::direct_entries(pool, node, 16)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    super::fill_direct(body, children);
}
