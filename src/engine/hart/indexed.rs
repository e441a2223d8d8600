//! Searches and puts through the point index (`hart.point_index=on`, the
//! default; beyond the paper, docs/design.md §7 "The point index"): each
//! ART's [`Points`] finds a key's leaf with one probe, where a descent of
//! the ART is a chain of cache misses, one per inner node. A search and an
//! update no longer descend the ART; an insert descends it only to link its
//! new leaf, once the point index has said that the key is absent, so it
//! always writes its leaf first (its write-back overlaps the descent).
//!
//! The PM writes, and their persist orders, are those of [`mod@super::write`],
//! unchanged: the point index is DRAM only, changed under the ART's write
//! lock together with the ART, and rebuilt with it at recovery.

use std::sync::atomic::Ordering;

use super::art::LeafKeys;
use super::points::{self, Points};
use super::trees::HashKey;
use super::{leaf, Hart, LeafRef, PersistOrder};
use crate::engine::{PutMode, PutOutcome};
use crate::error::Result;

impl Hart {
    /// Algorithm 4 through the point index: the probe's first entry was
    /// prefetched before the ART's lock was taken, from the slot's hint
    /// ([`points::prefetch_hinted`]); a found entry's leaf is checked and
    /// answered by [`Self::answer`] (a tag that matched another key's leaf
    /// goes on to the next entry).
    #[inline]
    pub(super) fn get_indexed(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let (hk, ak) = self.split(key);
        let h = points::hash(ak);
        let (tree, hint) = self.trees.find_bytes_point_hinted(hk);
        points::prefetch_hinted(hint, h);
        let Some(tree) = tree else {
            return Ok(false);
        };
        let t = tree.read();
        let found = t.points.find(h, |l| {
            self.answer::<false>(l.off(), key, &mut *f)
                .map(|hit| hit.then_some(()))
        })?;
        Ok(found.is_some())
    }

    /// The leaf of `key` (hash `h` of its ART key) in `points`, if the key
    /// is present; the caller holds the lock of the ART they index.
    pub(super) fn find_leaf(&self, points: &Points, h: u64, key: &[u8]) -> Result<Option<LeafRef>> {
        points.find(h, |l| Ok(self.holds_key(l.off(), key)?.then_some(l)))
    }

    /// Algorithm 1 (insert) and Algorithm 3 (update) through the point
    /// index. Under the ART's write lock:
    ///
    /// - the point index says whether the key is present;
    /// - present: an update in place ([`Self::update_leaf`]: one fence), no
    ///   descent; or nothing, for [`PutMode::Insert`];
    /// - absent: the new leaf is written and flushed first (in the tight
    ///   order, for a value that takes no large block: "leaf first" without
    ///   its guess, since the key is known absent), then the ART is
    ///   descended, the leaf fenced (durable) and linked into the ART and
    ///   the point index. The paper order, and a large value, write the
    ///   leaf at the link ([`Self::insert_leaf`]).
    pub(super) fn put_indexed(
        &self,
        key: &[u8],
        value: &[u8],
        mode: PutMode,
    ) -> Result<PutOutcome> {
        let (hk_bytes, ak) = self.split(key);
        let h = points::hash(ak);
        points::prefetch_hinted(self.trees.point_hint(hk_bytes), h);
        let hk = HashKey::new(hk_bytes);
        let r = hk.route();
        let st = self.insert_stripe(r);
        if mode != PutMode::Update {
            self.prefetch_root(hk_bytes, ak);
            if let Some(lc) = leaf::leaf_class(key.len()) {
                // The new leaf's line, if the key is absent: its fetch
                // overlaps the lock and the probe.
                self.pool
                    .prefetch_write(self.stripes[st].next_leaf[lc].load(Ordering::Relaxed));
            }
        }
        loop {
            let tree = if mode == PutMode::Update {
                match self.trees.find(&hk) {
                    Some(t) => t,
                    None => return Ok(PutOutcome::Unchanged),
                }
            } else {
                self.trees.for_insert(&hk, r)
            };
            let mut t = tree.write();
            if t.dead {
                continue; // Emptied and retired meanwhile: look again.
            }
            if let Some(l) = self.find_leaf(&t.points, h, key)? {
                if mode == PutMode::Insert {
                    return Ok(PutOutcome::Unchanged);
                }
                self.update_leaf(l.stripe(), l.off(), key, value)?;
                return Ok(PutOutcome::Replaced);
            }
            if mode == PutMode::Update {
                return Ok(PutOutcome::Unchanged);
            }
            // Persist order (leaf first): value, slots, key, commit word
            // last, flushed (`new_leaf`); the descent; the fence (in the
            // closure), and only then the links.
            let early = if self.order == PersistOrder::Tight && value.len() <= leaf::MAX_OBJECT {
                match self.new_leaf(st, key, value) {
                    Ok(l) => Some(l),
                    Err(e) => {
                        if t.art.is_empty() {
                            self.trees.retire(&hk, r, &mut t);
                        }
                        return Err(e);
                    }
                }
            } else {
                None
            };
            let was_empty = t.art.is_empty();
            let keys = self.keys();
            let mut made = None;
            let linked = t.art.insert_with(ak, &keys, || {
                let l = match early {
                    Some(e) => {
                        self.pool.fence();
                        Ok(LeafRef::new(e, st))
                    }
                    None => self.insert_leaf(st, key, value),
                };
                made = l.as_ref().ok().copied();
                l
            });
            self.trees.note_root(hk_bytes, &t.art);
            return match (linked, made) {
                (Ok(None), Some(l)) => {
                    t.points.insert(h, l, |x| keys.key(x));
                    self.trees.note_points(hk_bytes, &t.points);
                    if was_empty {
                        self.trees.filled(&hk);
                    }
                    self.stripes[st].len.fetch_add(1, Ordering::Relaxed);
                    Ok(PutOutcome::Inserted)
                }
                (Ok(found), _) => {
                    // The ART holds a key that its point index does not
                    // (`found`): DRAM state out of step, which no path
                    // leaves. The early leaf was not linked.
                    if let Some(e) = early {
                        self.abandon_early(st, e, key.len())?;
                    }
                    let at = found.map_or(0, LeafRef::off);
                    Err(leaf::corrupt(
                        at,
                        "the ART holds a key its point index does not",
                    ))
                }
                (Err(e), _) => {
                    if t.art.is_empty() {
                        self.trees.retire(&hk, r, &mut t);
                    }
                    if let Some(l) = early {
                        // Never linked (the closure, which cannot fail with
                        // an early leaf, was not what failed).
                        self.abandon_early(st, l, key.len())?;
                    }
                    Err(e)
                }
            };
        }
    }
}
