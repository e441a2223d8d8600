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
    // One entry at a time, from the end: at most 15 moves of a byte and a
    // word. `copy_within` and `rotate_right` called `memmove` and the
    // general rotation (130 instructions per insert on dictionary words,
    // docs/design.md §7 "DRAM work of an insert").
    for i in (at..count).rev() {
        keys[i + 1] = keys[i];
        children[i + 1] = children[i].take();
    }
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
    // As in `insert`: entry by entry.
    for i in at + 1..count {
        keys[i - 1] = keys[i];
        children[i - 1] = children[i].take();
    }
    child
}

#[cfg(test)]
mod tests {
    use super::super::{Child, View};
    use super::*;

    /// The leaves' values in slot order, `None` for an empty slot.
    fn values(children: &[Option<Child<u64>>]) -> Vec<Option<u64>> {
        children
            .iter()
            .map(|c| {
                c.as_ref().map(|c| match c.view() {
                    View::Leaf(v) => v,
                    View::Inner(_) => unreachable!("the test holds leaves only"),
                })
            })
            .collect()
    }

    /// The keys and children agree with `model`, and the slots after them
    /// are empty.
    fn check(keys: &[u8], children: &[Option<Child<u64>>], model: &[u8]) {
        let n = model.len();
        assert_eq!(&keys[..n], model);
        let want: Vec<Option<u64>> = model
            .iter()
            .map(|&m| Some(u64::from(m)))
            .chain(std::iter::repeat_n(None, children.len() - n))
            .collect();
        assert_eq!(values(children), want);
    }

    /// Every insert position and every removal of a 16-entry array, against
    /// a sorted `Vec`: keys in order, each child beside its key, the slots
    /// past `count` empty.
    #[test]
    fn inserts_and_removals_keep_keys_sorted_with_their_children() {
        for order in [
            (0..16u8).collect::<Vec<_>>(),
            (0..16u8).rev().collect(),
            vec![7, 3, 11, 0, 15, 5, 9, 1, 13, 2, 14, 6, 10, 4, 12, 8],
        ] {
            let mut keys = [0u8; 16];
            let mut children: [Option<Child<u64>>; 16] = Default::default();
            let mut model: Vec<u8> = Vec::new();
            for (count, &k) in order.iter().enumerate() {
                let byte = k * 16 + 1;
                insert(
                    &mut keys,
                    &mut children,
                    count,
                    byte,
                    Child::leaf(u64::from(byte)),
                );
                let at = model.partition_point(|&m| m < byte);
                model.insert(at, byte);
                check(&keys, &children, &model);
            }
            for &k in &order {
                let byte = k * 16 + 1;
                let at = model.iter().position(|&m| m == byte).expect("present");
                let got = remove(&mut keys, &mut children, model.len(), at);
                assert_eq!(values(&[got]), vec![Some(u64::from(byte))]);
                model.remove(at);
                check(&keys, &children, &model);
            }
        }
    }
}
