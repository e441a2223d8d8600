//! The inner nodes, in DRAM: each leaf's lower bound → the leaf, ordered.
//!
//! FPTree's inner nodes hold fixed-size keys in the node, so a descent
//! compares integers. A `BTreeMap<Box<[u8]>, u64>` would chase a pointer
//! for every key it compares, a cache miss each in a large tree. Here the
//! B-tree is keyed by each bound's *head*, its first 8 bytes read
//! big-endian with zeros after a shorter key, so that the descent compares
//! `u64`s; bounds that share a head (longer keys with a common first 8
//! bytes) share one entry, in order. Since `a < b` implies `head(a) <=
//! head(b)`, ordering by head, then by bytes within a head, is the bytes'
//! order.

use std::collections::BTreeMap;
use std::ops::Bound;

/// The first 8 bytes of `key`, big-endian, zero-padded.
pub(crate) fn head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The bounds of one head: the least inline, so that a descent that ends
/// at a head below its key reads the leaf without another miss, and the
/// rest (rare unless keys share their first 8 bytes) in order.
struct Group {
    bound: Box<[u8]>,
    leaf: u64,
    more: BTreeMap<Box<[u8]>, u64>,
}

impl Group {
    fn entries(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        std::iter::once((&self.bound[..], self.leaf))
            .chain(self.more.iter().map(|(b, l)| (&b[..], *l)))
    }

    fn last(&self) -> (&[u8], u64) {
        self.more
            .last_key_value()
            .map_or((&self.bound[..], self.leaf), |(b, l)| (&b[..], *l))
    }

    /// The last entry at or below `key` (`inclusive`) or below it.
    fn last_before(&self, key: &[u8], inclusive: bool) -> Option<(&[u8], u64)> {
        let hi = if inclusive {
            Bound::Included(key)
        } else {
            Bound::Excluded(key)
        };
        if let Some((b, l)) = self
            .more
            .range::<[u8], _>((Bound::Unbounded, hi))
            .next_back()
        {
            return Some((&b[..], *l));
        }
        let first = &self.bound[..];
        (if inclusive { first <= key } else { first < key }).then_some((first, self.leaf))
    }
}

/// Leaves by lower bound (see the module doc).
#[derive(Default)]
pub struct Inner {
    map: BTreeMap<u64, Group>,
    len: usize,
    bytes: u64,
}

impl Inner {
    /// The last entry whose bound is at or below `key` (`Included`) or
    /// below it (`Excluded`).
    fn last_before(&self, key: &[u8], inclusive: bool) -> Option<(&[u8], u64)> {
        let h = head(key);
        for (&gh, g) in self.map.range(..=h).rev() {
            if gh < h {
                return Some(g.last());
            }
            if let Some(e) = g.last_before(key, inclusive) {
                return Some(e);
            }
        }
        None
    }

    /// The leaf `key` belongs to: the last whose bound is at or below it,
    /// with that bound.
    pub fn find(&self, key: &[u8]) -> Option<(&[u8], u64)> {
        self.last_before(key, true)
    }

    /// The leaf before the one whose bound is `bound`.
    pub fn pred(&self, bound: &[u8]) -> Option<u64> {
        self.last_before(bound, false).map(|(_, l)| l)
    }

    /// Adds (or replaces) the leaf of `bound`.
    pub fn insert(&mut self, bound: Box<[u8]>, leaf: u64) {
        let h = head(&bound);
        let len = bound.len() as u64;
        let Some(g) = self.map.get_mut(&h) else {
            self.map.insert(
                h,
                Group {
                    bound,
                    leaf,
                    more: BTreeMap::new(),
                },
            );
            self.len += 1;
            self.bytes += len;
            return;
        };
        if bound == g.bound {
            g.leaf = leaf;
            return;
        }
        if bound < g.bound {
            let old = std::mem::replace(&mut g.bound, bound);
            let old_leaf = std::mem::replace(&mut g.leaf, leaf);
            g.more.insert(old, old_leaf);
        } else if g.more.insert(bound, leaf).is_some() {
            return;
        }
        self.len += 1;
        self.bytes += len;
    }

    /// Removes the leaf of `bound`; returns it.
    pub fn remove(&mut self, bound: &[u8]) -> Option<u64> {
        let h = head(bound);
        let g = self.map.get_mut(&h)?;
        let leaf = if &g.bound[..] == bound {
            let leaf = g.leaf;
            match g.more.pop_first() {
                Some((b, l)) => {
                    g.bound = b;
                    g.leaf = l;
                }
                None => {
                    self.map.remove(&h);
                }
            }
            leaf
        } else {
            g.more.remove(bound)?
        };
        self.len -= 1;
        self.bytes -= bound.len() as u64;
        Some(leaf)
    }

    /// Removes the first entry; returns it.
    pub fn pop_first(&mut self) -> Option<(Box<[u8]>, u64)> {
        let bound: Box<[u8]> = self.map.first_key_value()?.1.bound.clone();
        let leaf = self.remove(&bound)?;
        Some((bound, leaf))
    }

    /// The entries whose bound is at or above `start` (`Included`), above
    /// it (`Excluded`), or all (`Unbounded`), in order.
    pub fn iter_from<'a>(
        &'a self,
        start: Bound<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], u64)> + 'a {
        let from = match start {
            Bound::Included(s) | Bound::Excluded(s) => head(s),
            Bound::Unbounded => 0,
        };
        self.map
            .range(from..)
            .flat_map(|(_, g)| g.entries())
            .filter(move |&(b, _)| match start {
                Bound::Included(s) => b >= s,
                Bound::Excluded(s) => b > s,
                Bound::Unbounded => true,
            })
    }

    /// Every entry, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        self.iter_from(Bound::Unbounded)
    }

    /// Number of leaves.
    pub fn len(&self) -> usize {
        self.len
    }

    /// No leaf.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// DRAM bytes (estimate): the bounds, and per head a B-tree slot of
    /// its key and group in nodes about two thirds full.
    pub fn dram_bytes(&self) -> u64 {
        let per_group = (8 + std::mem::size_of::<Group>()) as u64 * 3 / 2;
        let extra =
            (self.len - self.map.len()) as u64 * std::mem::size_of::<(Box<[u8]>, u64)>() as u64;
        self.bytes + self.map.len() as u64 * per_group + extra
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Random inserts, removes and lookups against a `BTreeMap`, with keys
    /// that share heads (long common prefixes), are prefixes of each other
    /// and hold zero bytes.
    #[test]
    fn matches_a_btreemap() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut inner = Inner::default();
        let mut model: BTreeMap<Box<[u8]>, u64> = BTreeMap::new();
        let key = |rng: &mut SmallRng| -> Vec<u8> {
            let base: &[u8] =
                [&b"commonpr"[..], b"common", b"c", b"", b"commonprefix\0"][rng.gen_range(0..5)];
            let mut k = base.to_vec();
            for _ in 0..rng.gen_range(0..4) {
                k.push([0u8, b'a', b'b', 0xFF][rng.gen_range(0..4)]);
            }
            k
        };
        for i in 0..20_000u64 {
            let k = key(&mut rng);
            match rng.gen_range(0..3) {
                0 => {
                    inner.insert(k.clone().into(), i);
                    model.insert(k.into(), i);
                }
                1 => assert_eq!(inner.remove(&k), model.remove(&k[..])),
                _ => {
                    let want = model
                        .range::<[u8], _>((Bound::Unbounded, Bound::Included(&k[..])))
                        .next_back()
                        .map(|(b, &l)| (&b[..], l));
                    assert_eq!(inner.find(&k), want, "{k:?}");
                    let want = model
                        .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(&k[..])))
                        .next_back()
                        .map(|(_, &l)| l);
                    assert_eq!(inner.pred(&k), want);
                    for lo in [Bound::Included(&k[..]), Bound::Excluded(&k[..])] {
                        let got: Vec<_> = inner.iter_from(lo).collect();
                        let want: Vec<_> = model
                            .range::<[u8], _>((lo, Bound::Unbounded))
                            .map(|(b, &l)| (&b[..], l))
                            .collect();
                        assert_eq!(got, want);
                    }
                }
            }
            assert_eq!(inner.len(), model.len());
        }
        let all: Vec<_> = inner.iter().map(|(b, l)| (b.to_vec(), l)).collect();
        let want: Vec<_> = model.iter().map(|(b, &l)| (b.to_vec(), l)).collect();
        assert_eq!(all, want);
        while let Some((b, l)) = inner.pop_first() {
            assert_eq!(model.pop_first(), Some((b, l)));
        }
        assert!(model.is_empty() && inner.is_empty());
    }
}
