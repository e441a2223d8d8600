//! Ordered traversal between two bounds ([`super::Art::range`]).
//!
//! The walk is an in-order depth-first traversal: at each inner node the
//! value slot first (its key is a prefix of every key below), then the
//! children in byte order.
//!
//! # Pruning without key loads
//! While a bound may still cut through the current subtree, the walk keeps
//! the subtree's path (prefixes and child bytes from the root) and compares
//! it with the bound ([`classify`]). Every key below starts with the path, so
//! the path alone decides whether the whole subtree lies below the lower
//! bound (skip it), above the upper bound (stop), entirely inside (stop
//! checking that bound, and stop keeping the path once neither bound
//! needs it), or straddles the bound at exactly one child byte (check that
//! child). So at most two root-to-leaf paths are examined against the
//! bounds; everything between them is emitted without comparisons. Leaves on
//! those two paths are compared by their full key.
//!
//! # Key loads
//! [`super::Art::range`] passes every entry's key, so it loads one key per
//! entry. [`super::Art::range_values`] passes values alone and loads a key
//! only where a bound must be compared with it: the leaf at the end of each
//! bound's path, at most two keys per call. Its caller can then fetch the
//! keys of many entries at once (HART's scan prefetches a batch of leaves
//! before it reads any).

#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::ops::Bound;

use super::{Child, InnerNode, Kind, LeafKeys, LeafValue, View};

/// Siblings whose nodes are asked for ahead of the walk.
const PREFETCH_AHEAD: usize = 4;

/// Where all keys that start with a path lie relative to a bound key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Every such key is smaller than the bound.
    Below,
    /// Every such key is greater than the bound.
    Above,
    /// The path equals the bound: the value slot holds the bound key
    /// itself, every child key is greater.
    Equal,
    /// The path is a proper prefix of the bound, whose next byte is this:
    /// the value slot is smaller, children under smaller bytes are smaller,
    /// under larger bytes greater, and the child under this byte straddles.
    Straddles(u8),
}

/// Classifies the keys starting with `path` against `bound`.
fn classify(path: &[u8], bound: &[u8]) -> Position {
    let m = path.len().min(bound.len());
    match path[..m].cmp(&bound[..m]) {
        Ordering::Less => Position::Below,
        Ordering::Greater => Position::Above,
        Ordering::Equal => match path.len().cmp(&bound.len()) {
            Ordering::Greater => Position::Above,
            Ordering::Equal => Position::Equal,
            Ordering::Less => Position::Straddles(bound[path.len()]),
        },
    }
}

/// A bound key and whether it is included.
#[derive(Clone, Copy)]
struct Edge<'b> {
    key: &'b [u8],
    inclusive: bool,
}

impl<'b> Edge<'b> {
    fn from_bound(b: Bound<&'b [u8]>) -> Option<Self> {
        match b {
            Bound::Included(key) => Some(Edge {
                key,
                inclusive: true,
            }),
            Bound::Excluded(key) => Some(Edge {
                key,
                inclusive: false,
            }),
            Bound::Unbounded => None,
        }
    }
}

/// One `range` call in progress.
pub(super) struct RangeWalk<'b, 'k, K: ?Sized, F> {
    lo: Option<Edge<'b>>,
    hi: Option<Edge<'b>>,
    keys: &'k K,
    f: F,
    /// Whether `f` needs every entry's key; if not, keys are loaded only to
    /// compare a leaf with a bound, and `f` gets `None` otherwise.
    all_keys: bool,
    /// The current node's path; only kept up to date while a bound is
    /// being checked in the current subtree.
    path: Vec<u8>,
}

impl<'b, 'k, K: ?Sized, F> RangeWalk<'b, 'k, K, F> {
    /// A walk that calls `f(key, value)` for each entry in bounds; `key` is
    /// `Some` for every entry if `all_keys`, else only where the walk
    /// loaded it to compare it with a bound.
    pub(super) fn new(
        lo: Bound<&'b [u8]>,
        hi: Bound<&'b [u8]>,
        keys: &'k K,
        all_keys: bool,
        f: F,
    ) -> Self {
        RangeWalk {
            lo: Edge::from_bound(lo),
            hi: Edge::from_bound(hi),
            keys,
            f,
            all_keys,
            path: Vec::new(),
        }
    }

    /// Walks the tree under `root`.
    pub(super) fn run<V: LeafValue>(mut self, root: &Child<V>)
    where
        K: LeafKeys<V>,
        F: FnMut(Option<&[u8]>, V) -> bool,
    {
        let (check_lo, check_hi) = (self.lo.is_some(), self.hi.is_some());
        self.walk(root, check_lo, check_hi);
    }

    /// Visits the subtree `child`; `check_lo`/`check_hi` say whether the
    /// bound may cut through it (then `path` is its path). Returns `false`
    /// once the walk must stop (upper bound passed, or `f` said stop).
    fn walk<V: LeafValue>(&mut self, child: &Child<V>, check_lo: bool, check_hi: bool) -> bool
    where
        K: LeafKeys<V>,
        F: FnMut(Option<&[u8]>, V) -> bool,
    {
        match child.view() {
            View::Leaf(v) => {
                if !(check_lo || check_hi || self.all_keys) {
                    return (self.f)(None, v);
                }
                let key = self.keys.key(v);
                if check_lo && !self.above_lo(key) {
                    return true;
                }
                if check_hi && !self.below_hi(key) {
                    return false;
                }
                (self.f)(Some(key), v)
            }
            View::Inner(node) => {
                let mark = self.path.len();
                let go_on = dispatch!(node, n => self.walk_node(n, check_lo, check_hi));
                self.path.truncate(mark);
                go_on
            }
        }
    }

    fn walk_node<V: LeafValue, N: InnerNode<V>>(
        &mut self,
        n: &N,
        check_lo: bool,
        check_hi: bool,
    ) -> bool
    where
        K: LeafKeys<V>,
        F: FnMut(Option<&[u8]>, V) -> bool,
    {
        let header = n.header();
        let (mut lo_pos, mut hi_pos) = (None, None);
        if check_lo || check_hi {
            self.path.extend_from_slice(header.prefix.as_slice());
            lo_pos = self
                .lo
                .filter(|_| check_lo)
                .map(|e| classify(&self.path, e.key));
            hi_pos = self
                .hi
                .filter(|_| check_hi)
                .map(|e| classify(&self.path, e.key));
        }
        if lo_pos == Some(Position::Below) {
            return true;
        }
        if hi_pos == Some(Position::Above) {
            return false;
        }

        if let Some(v) = header.value() {
            let lo_ok = match lo_pos {
                None | Some(Position::Above) => true,
                Some(Position::Equal) => self.lo.is_some_and(|e| e.inclusive),
                Some(Position::Below | Position::Straddles(_)) => false,
            };
            let hi_ok = match hi_pos {
                None | Some(Position::Below | Position::Straddles(_)) => true,
                Some(Position::Equal) => self.hi.is_some_and(|e| e.inclusive),
                Some(Position::Above) => false,
            };
            // The path decided the bounds: the key is loaded only for `f`.
            if lo_ok && hi_ok && !(self.f)(self.all_keys.then(|| self.keys.key(v)), v) {
                return false;
            }
        }
        if hi_pos == Some(Position::Equal) {
            // Every child key extends the upper bound key.
            return false;
        }

        // The children below the lower bound are skipped; of the others,
        // the nodes of the next siblings start loading while one is walked.
        let from = match lo_pos {
            Some(Position::Straddles(b)) => b,
            _ => 0,
        };
        let children = || n.children().filter(move |&(byte, _)| byte >= from);
        let mut ahead = children().skip(PREFETCH_AHEAD);
        for (_, child) in children().take(PREFETCH_AHEAD) {
            child.prefetch_node();
        }
        for (byte, child) in children() {
            if let Some((_, next)) = ahead.next() {
                next.prefetch_node();
            }
            let child_lo = match lo_pos {
                Some(Position::Straddles(b)) if byte < b => continue,
                Some(Position::Straddles(b)) => byte == b,
                _ => false,
            };
            let child_hi = match hi_pos {
                Some(Position::Straddles(b)) if byte > b => return false,
                Some(Position::Straddles(b)) => byte == b,
                _ => false,
            };
            let keep_path = child_lo || child_hi;
            if keep_path {
                self.path.push(byte);
            }
            let go_on = self.walk(child, child_lo, child_hi);
            if keep_path {
                self.path.pop();
            }
            if !go_on {
                return false;
            }
        }
        true
    }

    fn above_lo(&self, key: &[u8]) -> bool {
        self.lo.is_none_or(|e| {
            if e.inclusive {
                key >= e.key
            } else {
                key > e.key
            }
        })
    }

    fn below_hi(&self, key: &[u8]) -> bool {
        self.hi.is_none_or(|e| {
            if e.inclusive {
                key <= e.key
            } else {
                key < e.key
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_covers_every_position() {
        assert_eq!(classify(b"ab", b"ac"), Position::Below);
        assert_eq!(classify(b"ad", b"ac"), Position::Above);
        assert_eq!(classify(b"acd", b"ac"), Position::Above);
        assert_eq!(classify(b"ac", b"ac"), Position::Equal);
        assert_eq!(classify(b"a", b"ac"), Position::Straddles(b'c'));
        assert_eq!(classify(b"", b""), Position::Equal);
        assert_eq!(classify(b"", b"x"), Position::Straddles(b'x'));
        assert_eq!(classify(b"x", b""), Position::Above);
    }
}
