//! Ordered scans of `hart` (beyond the paper, whose range query searches
//! key by key; docs/design.md §7, "Ordered scans"): the hash keys in
//! order, each ART in key order, its leaves read in batches whose PM lines
//! are fetched before any is read.

use std::ops::Bound;

use super::leaf::{self, Meta};
use super::trees::HashKey;
use super::Hart;
use crate::engine::{ScanFn, BATCH};
use crate::error::Result;
use crate::keycmp;

/// Leaves a scan reads at a time, their lines fetched before any is read
/// (the batched searches' [`BATCH`]: as many misses in flight as help).
const SCAN_BATCH: usize = BATCH;
/// The first batch of a scan in each ART; each next one is twice as large,
/// up to [`SCAN_BATCH`], so that a short scan fetches little it does not
/// return.
const SCAN_FIRST_BATCH: usize = 4;

impl Hart {
    /// Ordered scan: hash keys in order from the ordered set, then each ART
    /// in order.
    pub(super) fn scan_ordered(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut ScanFn<'_>,
    ) -> Result<()> {
        let mut next: Bound<HashKey> = match lo {
            Bound::Included(k) | Bound::Excluded(k) => {
                Bound::Included(HashKey::new(self.split(k).0))
            }
            Bound::Unbounded => Bound::Unbounded,
        };
        let keys = self.keys();
        // Hash keys are fetched a few at a time: the index's ordered keys are
        // not locked while an ART is read (writers take an ART's lock before
        // the ordered set's), and a short scan must not copy them all.
        const HASH_KEYS: usize = 8;
        let mut batch: Vec<HashKey> = Vec::with_capacity(HASH_KEYS);
        let mut hks = batch.drain(..);
        // One buffer for the batches of every ART the scan reads.
        let mut leaves: Vec<u64> = Vec::with_capacity(SCAN_BATCH);
        loop {
            let hk = match hks.next() {
                Some(hk) => hk,
                None => {
                    drop(hks);
                    self.trees.keys_after(next, HASH_KEYS, &mut batch);
                    let Some(last) = batch.last() else {
                        break;
                    };
                    next = Bound::Excluded(*last);
                    hks = batch.drain(..);
                    continue;
                }
            };
            let hkey = hk;
            let hk = hkey.as_slice();
            let past_hi = match hi {
                Bound::Included(h) => hk > h,
                Bound::Excluded(h) => hk >= h,
                Bound::Unbounded => false,
            };
            if past_hi {
                break;
            }
            let Some(tree) = self.trees.find(&hkey) else {
                continue;
            };
            let t = tree.read();
            let sub = |b: Bound<&[u8]>| -> Bound<Vec<u8>> {
                match b {
                    Bound::Included(k) if k.len() >= self.k_h && k[..self.k_h] == *hk => {
                        Bound::Included(k[self.k_h..].to_vec())
                    }
                    Bound::Excluded(k) if k.len() >= self.k_h && k[..self.k_h] == *hk => {
                        Bound::Excluded(k[self.k_h..].to_vec())
                    }
                    _ => Bound::Unbounded,
                }
            };
            let (alo, ahi) = (sub(lo), sub(hi));
            // The ART gives its leaves in key order without loading their
            // keys (`range_values`); they are read [`SCAN_BATCH`] at a time,
            // each batch's lines fetched before any is read, so that their
            // misses overlap instead of coming one per key (beyond the
            // paper: docs/design.md §7, "Ordered scans"). The first batches
            // are smaller, so that a short scan fetches little it does not
            // return.
            leaves.clear();
            let mut want = SCAN_FIRST_BATCH;
            let mut go_on = Ok(true);
            t.art.range_values(
                alo.as_ref().map(Vec::as_slice),
                ahi.as_ref().map(Vec::as_slice),
                &keys,
                |leaf| {
                    leaves.push(leaf.off());
                    if leaves.len() < want {
                        return true;
                    }
                    go_on = self.scan_batch(&leaves, lo, hi, f);
                    leaves.clear();
                    want = (want * 2).min(SCAN_BATCH);
                    matches!(go_on, Ok(true))
                },
            );
            if matches!(go_on, Ok(true)) && !leaves.is_empty() {
                go_on = self.scan_batch(&leaves, lo, hi, f);
            }
            if !go_on? {
                break;
            }
        }
        Ok(())
    }

    /// Reads the leaves of one scan batch (live leaves of one ART, in key
    /// order) and calls `f` on those in `lo..hi`: first every leaf's first
    /// line is prefetched, then each value object's or block's first line
    /// (found in the leaves' slots, which are now arriving), then the
    /// entries are read and passed on. Returns whether the scan goes on
    /// (`false` past `hi` or when `f` says stop).
    fn scan_batch(
        &self,
        leaves: &[u64],
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut ScanFn<'_>,
    ) -> Result<bool> {
        let pm = self.pool.words();
        for &leaf in leaves {
            pm.prefetch(leaf);
        }
        for &leaf in leaves {
            let c = self.live_commit(leaf)?;
            let so = leaf::slot_off(leaf, c.active);
            if !Meta::inline_word(pm.load(so + 8)?) {
                pm.prefetch(pm.load(so)?);
            }
        }
        let keys = self.keys();
        // The leaves after a stop were read above but are not returned:
        // their first lines count as read all the same.
        let unreturned = |i: usize| self.pool.touch_lines((leaves.len() - i - 1) as u64);
        for (i, &leaf) in leaves.iter().enumerate() {
            let full = keys.full_key(leaf);
            // `keycmp`: `memcmp` would reach into the next leaf's line.
            let in_lo = match lo {
                Bound::Included(l) => keycmp::cmp(full, l).is_ge(),
                Bound::Excluded(l) => keycmp::cmp(full, l).is_gt(),
                Bound::Unbounded => true,
            };
            let in_hi = match hi {
                Bound::Included(h) => keycmp::cmp(full, h).is_le(),
                Bound::Excluded(h) => keycmp::cmp(full, h).is_lt(),
                Bound::Unbounded => true,
            };
            if !in_hi {
                unreturned(i);
                return Ok(false);
            }
            if !in_lo {
                continue;
            }
            let (value, lines) = self.current_value(leaf, self.live_commit(leaf)?)?;
            // `full_key` counted the leaf's own lines.
            self.pool.touch_lines(lines);
            if !f(full, value) {
                unreturned(i);
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::{Engine, PutMode};
    use crate::pm::{counters, Pool};

    /// A scan reads each leaf it returns once (one line for a short key
    /// and an inline value), plus at most one leaf per bound that the ART
    /// compares with it; the ART walk loads no other key (`range_values`).
    /// Batches of every size, a stop inside a batch, and bounds that cut
    /// an ART or fall between hash keys return what the model says.
    #[test]
    fn a_scan_reads_each_leaf_once_in_batches() {
        let pool = Arc::new(Pool::create_anonymous(64 << 20, "hart", &Default::default()).unwrap());
        let h = Hart::create(pool, 2).unwrap();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..300u32 {
            let key = format!("{}{:04}", ["ab", "ac", "b"][i as usize % 3], i * 7 % 1000);
            h.put(key.as_bytes(), &i.to_le_bytes(), PutMode::Upsert)
                .unwrap();
            model.insert(key.into_bytes(), i.to_le_bytes().to_vec());
        }
        let scan = |lo: Bound<&[u8]>, hi: Bound<&[u8]>, limit: usize| {
            let mut got = Vec::new();
            let before = counters::this_thread().lines_read;
            h.scan(lo, hi, &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()));
                got.len() < limit
            })
            .unwrap();
            (got, counters::this_thread().lines_read - before)
        };
        for (lo, hi, limit) in [
            (Bound::Unbounded, Bound::Unbounded, usize::MAX),
            (
                Bound::Included(&b"ab0100"[..]),
                Bound::Excluded(&b"ac0500"[..]),
                usize::MAX,
            ),
            (
                Bound::Excluded(&b"ab0007"[..]),
                Bound::Included(&b"b"[..]),
                usize::MAX,
            ),
            (Bound::Included(&b"a"[..]), Bound::Unbounded, 1),
            (Bound::Included(&b"ab"[..]), Bound::Unbounded, 5),
            (Bound::Included(&b"ab0500"[..]), Bound::Unbounded, 37),
            (Bound::Included(&b"zz"[..]), Bound::Unbounded, usize::MAX),
        ] {
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .range::<[u8], _>((lo, hi))
                .take(limit)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let (got, lines) = scan(lo, hi, limit);
            assert_eq!(got, want, "{lo:?}..{hi:?} limit {limit}");
            // Leaves read past a stop inside a batch count too.
            let bounds = u64::from(lo != Bound::Unbounded) + u64::from(hi != Bound::Unbounded);
            let past_stop = if limit == usize::MAX && hi == Bound::Unbounded {
                0
            } else {
                SCAN_BATCH as u64 - 1
            };
            let n = got.len() as u64;
            assert!(
                (n..=n + 2 * bounds + past_stop).contains(&lines),
                "{lo:?}..{hi:?} limit {limit}: {lines} lines for {n} keys"
            );
        }
    }
}
