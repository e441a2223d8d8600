//! ART NODE256, as in WORT (§3.5 "NODE256 ... we simply make use of WORT").
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header |
//! | 8 | 8 | `end` |
//! | 16 | 2048 | `children[256]` |
//!
//! Insert: publish the child into the null slot (commit: the slot store).
//! Delete: store null into the slot (commit).

use super::{Entry, BODY};
use crate::error::Result;
use crate::pm::Pool;

/// Node size (a 4 KiB block).
pub const SIZE: u64 = BODY + 256 * 8;
const _: () = assert!(SIZE == 2064);

/// Slot of child `unit`.
#[inline]
pub fn slot(node: u64, unit: u8) -> u64 {
    node + BODY + 8 * u64::from(unit)
}

pub(super) fn entries(pool: &Pool, node: u64) -> Result<Vec<Entry>> {
    super::direct_entries(pool, node, 256)
}

pub(super) fn fill(body: &mut [u8], children: &[(u8, u64)]) {
    super::fill_direct(body, children);
}
