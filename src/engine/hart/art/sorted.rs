//! The sorted key array shared by Node4 and Node16: `keys[..count]` in
//! ascending order, `children[i]` the child of `keys[i]`.

#![forbid(unsafe_code)]

use super::{Child, LeafValue};

/// Inserts `byte` → `child` at its sorted position. The caller checked that
/// there is room and that `byte` is absent.
pub(super) fn insert<V: LeafValue>(
    keys: &mut [u8],
    children: &mut [Option<Child<V>>],
    count: usize,
    byte: u8,
    child: Child<V>,
) {
    debug_assert!(count < keys.len() && !keys[..count].contains(&byte));
    let at = keys[..count]
        .iter()
        .position(|&k| k > byte)
        .unwrap_or(count);
    keys.copy_within(at..count, at + 1);
    children[at..=count].rotate_right(1);
    keys[at] = byte;
    children[at] = Some(child);
}

/// Removes the entry at position `at < count` and returns its child.
pub(super) fn remove<V: LeafValue>(
    keys: &mut [u8],
    children: &mut [Option<Child<V>>],
    count: usize,
    at: usize,
) -> Option<Child<V>> {
    let child = children[at].take();
    keys.copy_within(at + 1..count, at);
    children[at..count].rotate_left(1);
    child
}
