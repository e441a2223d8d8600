//! The buffer tree (DPTree §2.1): an ordered map in DRAM from each key
//! written since the last merge to its latest write.
//!
//! The paper's buffer tree is a B+-tree with its fixed-size keys in the
//! nodes, so a descent compares integers. A `BTreeMap<Box<[u8]>, _>`
//! would follow a pointer and call `memcmp` for every key it compares (a
//! cache miss each in a buffer of 100,000 writes: 16% of a 1M-key load's
//! time). So each key is kept with its *head*, its first 8 bytes read
//! big-endian with zeros after a shorter key, and compared by head first:
//! the bytes are read only where two heads are equal. Since `a < b`
//! implies `head(a) <= head(b)`, the order is the bytes' order (as in
//! [`crate::engine::fptree::inner`]).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

use super::Pending;
use crate::engine::fptree::inner::head;

/// What a lookup compares: a head and the key's bytes.
trait Probe {
    fn head(&self) -> u64;
    fn bytes(&self) -> &[u8];
}

impl PartialEq for dyn Probe + '_ {
    fn eq(&self, o: &Self) -> bool {
        self.head() == o.head() && self.bytes() == o.bytes()
    }
}

impl Eq for dyn Probe + '_ {}

impl PartialOrd for dyn Probe + '_ {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for dyn Probe + '_ {
    fn cmp(&self, o: &Self) -> Ordering {
        self.head()
            .cmp(&o.head())
            .then_with(|| self.bytes().cmp(o.bytes()))
    }
}

/// A stored key.
struct Key {
    head: u64,
    bytes: Box<[u8]>,
}

impl Probe for Key {
    fn head(&self) -> u64 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A key looked up, borrowed.
struct Lookup<'a> {
    head: u64,
    bytes: &'a [u8],
}

impl<'a> Lookup<'a> {
    fn of(bytes: &'a [u8]) -> Lookup<'a> {
        Lookup {
            head: head(bytes),
            bytes,
        }
    }
}

impl Probe for Lookup<'_> {
    fn head(&self) -> u64 {
        self.head
    }
    fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl<'a> Borrow<dyn Probe + 'a> for Key {
    fn borrow(&self) -> &(dyn Probe + 'a) {
        self
    }
}

impl PartialEq for Key {
    fn eq(&self, o: &Self) -> bool {
        (self as &dyn Probe) == (o as &dyn Probe)
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Key {
    fn cmp(&self, o: &Self) -> Ordering {
        (self as &dyn Probe).cmp(o as &dyn Probe)
    }
}

/// The buffer tree: key → latest write, in key order.
#[derive(Default, PartialEq, Eq)]
pub struct Buffer {
    map: BTreeMap<Key, Pending>,
    key_bytes: u64,
}

impl Buffer {
    /// The latest write of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.map.get(&Lookup::of(key) as &dyn Probe)
    }

    /// Records `p` as `key`'s latest write; returns the one it replaces.
    pub fn insert(&mut self, key: &[u8], p: Pending) -> Option<Pending> {
        if let Some(old) = self.map.get_mut(&Lookup::of(key) as &dyn Probe) {
            return Some(std::mem::replace(old, p));
        }
        self.key_bytes += key.len() as u64;
        self.map.insert(
            Key {
                head: head(key),
                bytes: key.into(),
            },
            p,
        );
        None
    }

    /// Writes buffered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No write buffered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The writes, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Pending)> + '_ {
        self.map.iter().map(|(k, p)| (&k.bytes[..], *p))
    }

    /// The writes of keys within `lo..hi`, in key order. The bounds must
    /// make a valid range (`lo` not above `hi`, not equal and excluded).
    pub fn range<'s>(
        &'s self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> impl Iterator<Item = (&'s [u8], Pending)> + 's {
        let (lo, hi) = (lo.map(Lookup::of), hi.map(Lookup::of));
        let lo = lo.as_ref().map(|l| l as &dyn Probe);
        let hi = hi.as_ref().map(|h| h as &dyn Probe);
        self.map
            .range::<dyn Probe, _>((lo, hi))
            .map(|(k, p)| (&k.bytes[..], *p))
    }

    /// Bytes of DRAM (estimate): keys, and nodes about two thirds full.
    pub fn dram_bytes(&self) -> u64 {
        let per = (std::mem::size_of::<Key>() + std::mem::size_of::<Pending>()) as u64;
        self.key_bytes + self.map.len() as u64 * per * 3 / 2
    }
}
