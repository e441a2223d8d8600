//! [`Striped`]: a radix tree whose writers run at once where they change
//! different children of the root node (`<engine>.writers=striped`, the
//! default since 2026-11-27; `locked` is the tree-wide lock of [`Locked`]:
//! docs/design.md §11, "Writers of different root children at once").
//!
//! # Stripes
//! A key's stripe is its unit at the root node's branch position: WORT's
//! 16 units have a stripe each, the ART trees' 256 share
//! [`UNIT_STRIPES`] (unit mod 64), and keys that end at the branch (the
//! root's `end` slot) have their own. A writer takes its key's stripe
//! (a reader-writer lock, for writing) and walks with `Scope::Below`: it
//! may change the blocks under the root node's child for its unit and
//! that child's slot in the root node, which no other stripe's key reaches. A change of the root slot or
//! of the root node's own words (a new root, a split of its path, a WOART
//! or ART+CoW root that adds or drops a child, any delete in the root node)
//! is refused before its first store, and the writer runs it again holding
//! every stripe (`Scope::Tree`), as do batches of puts. A WORT root and a
//! NODE256 root take a new child with one store into that child's slot,
//! so those stay in the stripe. Whole-tree writes are the ones near the
//! root: while the tree is small, while an ART root is below NODE256, and
//! deletes of a root's direct leaves.
//!
//! The root node's branch position and its compressed path are kept in
//! DRAM, changed only by a writer holding every stripe; a stripe's writer
//! reads the position, locks the stripe, and reads it again (it cannot
//! change while one stripe is held). The walk checks a key against the
//! root's path from that copy: a path longer than the node's header holds
//! is otherwise read from a leaf under the root, which another stripe's
//! writer may be freeing meanwhile.
//!
//! A scan takes one stripe at a time for reading, that of the root's
//! child it is in (see [`Striped::scan`]); checks and `len` take every
//! stripe for reading, and a point read that falls back to a lock takes
//! its stripe for reading, so that all of these run at once.
//!
//! # Readers
//! As in [`Locked`], a point read runs without a lock first and is checked
//! with versions: the root's (odd while a writer holds the whole tree) and
//! its key's stripe's (odd while that stripe's writer changes it). What a
//! reader reads is the root slot and the root node, which only whole-tree
//! writers change, and its stripe's slot and blocks, which only that
//! stripe's writers change (a block another stripe reuses was unlinked from
//! the reader's path by its own stripe's writer first). So the two versions
//! unchanged across the read mean no store the read depended on ran. A
//! batched read checks each key's stripe on its own.
//!
//! # Crash consistency
//! Unchanged: every operation's persist order is the serial tree's (see
//! `write.rs`). Two stripes' operations store to different words; a flush
//! of one may write back the other's store early, as the cache may at any
//! time, which every protocol allows (a commit is stored only after what it
//! publishes is durable). A block is given back only after the commit that
//! unlinked it is durable, whoever takes it next.

use std::cell::UnsafeCell;
use std::ops::Bound;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::span::Span;
use super::{whole_tree_refused, RadixTree, Scope, StripeScan};
use crate::engine::locked::{answer, Writing};
#[cfg(doc)]
use crate::engine::Locked;
use crate::engine::{
    Capabilities, CheckReport, Engine, EngineConfig, OptimisticRead, Probe, PutMode, PutOutcome,
    Reads, ScanFn, SerialEngine, ValueBuf, BATCH, OPTIMISTIC_TRIES,
};
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Stripes of the root node's units (an ART unit `u` takes stripe
/// `u % UNIT_STRIPES`).
pub const UNIT_STRIPES: usize = 64;
/// The stripe of the keys that end at the root node's branch position.
const END_STRIPE: usize = UNIT_STRIPES;
/// [`Root::route`] when the root is empty or a leaf: every write then
/// holds the whole tree (and every key's stripe reads as [`END_STRIPE`]).
const NO_ROOT: u64 = u64::MAX;

/// One stripe, alone in its cache lines (128 bytes: Intel's adjacent-line
/// prefetcher pairs lines).
#[repr(align(128))]
struct Stripe {
    /// Written by the stripe's writers (and by whole-tree writers, who take
    /// every stripe); read by scans, checks and locked point reads, so
    /// that those run at once.
    lock: RwLock<()>,
    /// Even: no writer of this stripe inside.
    version: AtomicU64,
}

/// What only whole-tree writers change, in its own lines.
#[repr(align(128))]
struct Root {
    /// Even: no whole-tree writer inside.
    version: AtomicU64,
    /// Where a key's stripe is read, for the root node's branch position
    /// ([`route_for`]), or [`NO_ROOT`].
    route: AtomicU64,
}

/// A radix tree whose writers of different stripes run at once (see the
/// module doc).
pub struct Striped {
    pool: Arc<Pool>,
    span: Span,
    name: &'static str,
    capabilities: Capabilities,
    settings: EngineConfig,
    root: Root,
    /// [`UNIT_STRIPES`] + 1 (the last is [`END_STRIPE`]).
    stripes: Box<[Stripe]>,
    reader: Option<Box<dyn OptimisticRead>>,
    /// The tree's `<engine>.compact` (fixed at open): a put that finds the
    /// pool full takes the whole tree to compact only if it is on.
    compact: bool,
    /// Shared (`&`) by the holders of a stripe; mutable (`&mut`) only to a
    /// holder of every stripe.
    tree: UnsafeCell<RadixTree>,
    /// The root node's compressed path (`Scope::Below`'s `root_path`;
    /// empty without a root node): shared and written as `tree` is.
    root_path: UnsafeCell<Vec<u8>>,
}

// SAFETY: the tree and the root's path are reached only through `Striped::in_stripe`,
// `Striped::whole` and `Striped::read_all`: `&RadixTree` while at least one
// stripe is held (only a holder of a stripe for writing writes, and only
// to atomics, mutex-guarded state and PM words that no other stripe's
// holder reads or writes, see the module doc; holders for reading do not
// write), and
// `&mut RadixTree` only while every stripe is held, so never alongside
// another reference. `RadixTree` is `Send + Sync` itself.
unsafe impl Sync for Striped {}
// SAFETY: moving the wrapper moves an owned `RadixTree`, which is `Send`.
unsafe impl Send for Striped {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<RadixTree>();
};

/// The route word of a root node that branches at unit `branch`: bits
/// 0..32 the byte of a key that holds its unit there, 32..40 the shift
/// and 40..48 the mask that take the unit's stripe from that byte (WORT:
/// the high or the low nibble; the ART trees: the byte mod
/// [`UNIT_STRIPES`]). Computed once per root shape, so that a point read
/// finds its stripe with a load, a shift and a mask (a read's instructions
/// are its overlap with the next one's misses: docs/design.md §11, "Lean
/// one-key reads").
fn route_for(span: Span, branch: usize) -> u64 {
    let (at, shift, mask) = match span {
        Span::Nibble => (
            branch / 2,
            if branch.is_multiple_of(2) { 4 } else { 0 },
            0x0F,
        ),
        Span::Byte => (branch, 0, UNIT_STRIPES as u64 - 1),
    };
    debug_assert!(at < 0xFFFF_FFFF);
    at as u64 | shift << 32 | mask << 40
}

/// The first key under the root node's child of `unit` (`None`: the key
/// of its end slot), for a root whose path is `root_path`: the path and
/// the unit as bytes, a WORT key ending in the child's nibble padded with
/// a 0 nibble.
fn child_start(span: Span, root_path: &[u8], unit: Option<u8>) -> Vec<u8> {
    let units = root_path.iter().copied().chain(unit);
    match span {
        Span::Byte => units.collect(),
        Span::Nibble => {
            let units: Vec<u8> = units.collect();
            units
                .chunks(2)
                .map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0))
                .collect()
        }
    }
}

/// The stripe of `key` for the route word `route`: its unit at the root
/// node's branch position (mod [`UNIT_STRIPES`]), or [`END_STRIPE`] for a
/// key that ends there or before (and for every key under [`NO_ROOT`]).
#[inline]
fn stripe_of(key: &[u8], route: u64) -> usize {
    match key.get((route & 0xFFFF_FFFF) as usize) {
        Some(&b) => usize::from((b >> ((route >> 32) & 7)) & (route >> 40) as u8),
        None => END_STRIPE,
    }
}

impl Striped {
    /// Wraps `tree` (opened or created), reading as `reads` says.
    pub fn new(pool: Arc<Pool>, tree: RadixTree, reads: Reads) -> Striped {
        let (route, root_path) = match tree.root_shape() {
            Some((b, path)) => (route_for(tree.span, b), path),
            None => (NO_ROOT, Vec::new()),
        };
        let mut settings = tree.settings();
        settings.insert(format!("{}.reads", tree.flavor.name()), reads.name().into());
        settings.insert(format!("{}.writers", tree.flavor.name()), "striped".into());
        Striped {
            pool,
            span: tree.span,
            name: tree.flavor.name(),
            capabilities: Capabilities {
                concurrent: true,
                ..tree.capabilities()
            },
            settings,
            root: Root {
                version: AtomicU64::new(0),
                route: AtomicU64::new(route),
            },
            stripes: (0..=UNIT_STRIPES)
                .map(|_| Stripe {
                    lock: RwLock::new(()),
                    version: AtomicU64::new(0),
                })
                .collect(),
            reader: match reads {
                Reads::Optimistic => tree.optimistic_reader(),
                Reads::Locked => None,
            },
            compact: tree.compacts(),
            tree: UnsafeCell::new(tree),
            root_path: UnsafeCell::new(root_path),
        }
    }

    /// Every stripe's lock, in order (so two whole-tree holders cannot
    /// deadlock; a stripe's writer holds one only).
    fn hold_all(&self) -> Vec<RwLockWriteGuard<'_, ()>> {
        self.stripes.iter().map(|s| s.lock.write()).collect()
    }

    /// `f` on the tree with every stripe held, read only (scans, checks,
    /// locked reads of a tree without a root node).
    fn read_all<R>(&self, f: impl FnOnce(&RadixTree) -> R) -> R {
        // Read locks: scans of several threads run at once (with the
        // stripes' mutexes, until 2026-11-27, they ran one at a time).
        let _all: Vec<RwLockReadGuard<'_, ()>> =
            self.stripes.iter().map(|s| s.lock.read()).collect();
        // SAFETY: every stripe is held: no `&mut` to the tree exists (see
        // the `Sync` impl).
        f(unsafe { &*self.tree.get() })
    }

    /// `f` on the tree with every stripe held, for a change of any part of
    /// it: the root's version is odd meanwhile, and the root's branch
    /// position and path are updated before it is even again.
    fn whole<R>(&self, f: impl FnOnce(&mut RadixTree) -> R) -> R {
        let _all = self.hold_all();
        let _w = Writing::begin(&self.root.version);
        // SAFETY: every stripe is held, so no other reference to the tree
        // exists (optimistic readers hold none: they read PM through their
        // own `Reader`).
        let tree = unsafe { &mut *self.tree.get() };
        let r = f(tree);
        // SAFETY: every stripe is held: no other reference to the path
        // exists.
        let root_path = unsafe { &mut *self.root_path.get() };
        let route = match tree.root_shape() {
            Some((b, path)) => {
                *root_path = path;
                route_for(self.span, b)
            }
            None => {
                root_path.clear();
                NO_ROOT
            }
        };
        self.root.route.store(route, Ordering::Relaxed);
        r
        // `_w` is dropped first: the version goes even (release) after the
        // route's store; then the stripes are unlocked.
    }

    /// `f` on the tree and the root's path holding `key`'s stripe only, for
    /// writing if `write` (its version odd meanwhile), else for reading (`f`
    /// must not write then); `None` if the root is not a node, or if `f`
    /// says the change needs the whole tree.
    fn in_stripe<R>(
        &self,
        key: &[u8],
        write: bool,
        f: impl FnOnce(&RadixTree, &[u8]) -> Option<R>,
    ) -> Option<R> {
        loop {
            let route = self.root.route.load(Ordering::Acquire);
            if route == NO_ROOT {
                return None;
            }
            let s = &self.stripes[stripe_of(key, route)];
            let _g = if write {
                (Some(s.lock.write()), None)
            } else {
                (None, Some(s.lock.read()))
            };
            // A whole-tree writer may have moved the branch between the
            // load and the lock; it cannot while the stripe is held.
            if self.root.route.load(Ordering::Relaxed) != route {
                continue;
            }
            // SAFETY: a stripe is held: no `&mut` to the tree exists, and
            // `f` changes only what this stripe owns (`Scope::Below`), and
            // only when the stripe is held for writing.
            let tree = unsafe { &*self.tree.get() };
            // SAFETY: as the tree's: written only with every stripe held.
            let root_path = unsafe { &*self.root_path.get() };
            let _w = write.then(|| Writing::begin(&s.version));
            return f(tree, root_path);
        }
    }

    /// The optimistic path of a point read: `Some` with the answer, `None`
    /// when a lock must decide (as [`Locked`]'s, with two versions).
    fn try_optimistic(
        &self,
        reader: &dyn OptimisticRead,
        key: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Option<bool> {
        let mut buf = ValueBuf::new();
        for _ in 0..OPTIMISTIC_TRIES {
            let rv = self.root.version.load(Ordering::Acquire);
            if rv & 1 == 1 {
                return None;
            }
            let route = self.root.route.load(Ordering::Relaxed);
            let s = &self.stripes[stripe_of(key, route)];
            let sv = s.version.load(Ordering::Acquire);
            if sv & 1 == 1 {
                // Its stripe's writer is inside: the lock waits for it.
                return None;
            }
            let probe = reader.get_into(key, &mut buf);
            fence(Ordering::Acquire);
            if s.version.load(Ordering::Relaxed) != sv
                || self.root.version.load(Ordering::Relaxed) != rv
            {
                std::hint::spin_loop();
                continue;
            }
            return answer(&probe, &buf).map(|v| {
                v.inspect(|v| f(v));
                v.is_some()
            });
        }
        None
    }

    /// A point read under its stripe's lock (every stripe's, if the root is
    /// not a node).
    fn get_locked(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if let Some(r) = self.in_stripe(key, false, |t, _| Some(t.get_with(key, &mut *f))) {
            return r;
        }
        self.read_all(|t| t.get_with(key, f))
    }

    /// [`Engine::get_many`] for at most [`BATCH`] keys, numbered from
    /// `first`: one optimistic batch, under one check of the root's version;
    /// a key whose stripe's version moved (or was odd) is read again under
    /// its stripe's lock, and so is every key if the root's moved on every
    /// try.
    fn get_batch(
        &self,
        first: usize,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let n = keys.len();
        debug_assert!(n <= BATCH);
        if let Some(reader) = &self.reader {
            let mut bufs: [ValueBuf; BATCH] = std::array::from_fn(|_| ValueBuf::new());
            let mut out: [Result<Probe>; BATCH] = std::array::from_fn(|_| Ok(Probe::Absent));
            let mut seen = [(0usize, 0u64); BATCH];
            for _ in 0..OPTIMISTIC_TRIES {
                let rv = self.root.version.load(Ordering::Acquire);
                if rv & 1 == 1 {
                    break;
                }
                let route = self.root.route.load(Ordering::Relaxed);
                for (key, seen) in keys.iter().zip(&mut seen) {
                    let s = stripe_of(key, route);
                    *seen = (s, self.stripes[s].version.load(Ordering::Acquire));
                }
                reader.get_many_into(keys, &mut bufs[..n], &mut out[..n]);
                fence(Ordering::Acquire);
                if self.root.version.load(Ordering::Relaxed) != rv {
                    std::hint::spin_loop();
                    continue;
                }
                for i in 0..n {
                    let (s, v) = seen[i];
                    let valid = v & 1 == 0 && self.stripes[s].version.load(Ordering::Relaxed) == v;
                    // Changed meanwhile, or the lock decides (see `answer`).
                    match answer(&out[i], &bufs[i]).filter(|_| valid) {
                        Some(v) => f(first + i, v),
                        None => self.get_locked_at(first + i, keys[i], f)?,
                    }
                }
                return Ok(());
            }
        }
        for (i, key) in keys.iter().enumerate() {
            self.get_locked_at(first + i, key, f)?;
        }
        Ok(())
    }

    /// One key of a batch under its stripe's lock (released before `f`
    /// runs for an absent key).
    fn get_locked_at(
        &self,
        i: usize,
        key: &[u8],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        if !self.get_locked(key, &mut |v| f(i, Some(v)))? {
            f(i, None);
        }
        Ok(())
    }
}

impl Engine for Striped {
    fn name(&self) -> &'static str {
        self.name
    }
    fn settings(&self) -> EngineConfig {
        self.settings.clone()
    }
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if let Some(reader) = &self.reader {
            if let Some(found) = self.try_optimistic(reader.as_ref(), key, f) {
                return Ok(found);
            }
        }
        self.get_locked(key, f)
    }
    fn get_many(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        for (b, batch) in keys.chunks(BATCH).enumerate() {
            self.get_batch(b * BATCH, batch, f)?;
        }
        Ok(())
    }
    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        crate::engine::check_item(key, value)?;
        // Whether a put that found the pool full in its stripe found too
        // that a compaction would give nothing back.
        let mut futile = false;
        let below = |t: &RadixTree, root_path: &[u8]| {
            let r = t.put_impl(key, value, mode, Scope::Below { root_path });
            if self.compact && matches!(r, Err(Error::PoolFull { .. })) {
                futile = t.compaction_futile();
            }
            r.transpose()
        };
        let whole = |t: &mut RadixTree| {
            t.put_impl(key, value, mode, Scope::Tree)?
                .ok_or_else(whole_tree_refused)
        };
        let Some(r) = self.in_stripe(key, true, below) else {
            // Compacting, if it must, in the same hold of the whole tree.
            return self.whole(|t| {
                let r = whole(t);
                t.with_compaction(r, whole)
            });
        };
        if !matches!(r, Err(Error::PoolFull { .. })) || !self.compact || futile {
            return r;
        }
        // A full pool: a compaction, holding the whole tree, may make room
        // (`compact.rs`). The put runs again first: another thread's
        // compaction or delete may have made room since it failed (and
        // found nothing left to move). Not when the last compaction gave
        // nothing back and nothing was released since (`futile`): then
        // refused puts would take the whole tree in turn, and send the
        // optimistic readers to the locks, for nothing.
        self.whole(|t| {
            let again = whole(t);
            t.with_compaction(again, whole)
        })
    }
    /// [`BATCH`] items per hold of the whole tree, so that other writers and
    /// readers wait for at most one batch.
    fn put_many(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        crate::engine::check_items(items)?;
        for batch in items.chunks(BATCH) {
            self.whole(|t| t.put_many_compacting(batch))?;
        }
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<bool> {
        let below = |t: &RadixTree, root_path: &[u8]| {
            t.delete_impl(key, Scope::Below { root_path }).transpose()
        };
        if let Some(r) = self.in_stripe(key, true, below) {
            return r;
        }
        self.whole(|t| {
            t.delete_impl(key, Scope::Tree)?
                .ok_or_else(whole_tree_refused)
        })
    }
    /// One stripe at a time, for reading: the stripe of the child of the
    /// root node where the scan is, until the scan needs another child
    /// (`RadixTree::scan_one_stripe`); then that one's, from the child's
    /// first key on. A scan of a few keys takes one or two stripes, not all
    /// 65, and never holds two, so it waits for no whole-tree writer while
    /// holding one. Between two stripes the root may change; the scan goes
    /// on from the next child's first key whatever the root then is. It
    /// takes every stripe (as before 2026-11-27) when the root is not a
    /// node, or when two tries in a row made no progress (whole-tree writes
    /// moving the root meanwhile).
    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        let mut from: Bound<Vec<u8>> = lo.map(<[u8]>::to_vec);
        let mut stalled = 0;
        loop {
            let route = self.root.route.load(Ordering::Acquire);
            if route == NO_ROOT || stalled == 2 {
                break;
            }
            let s = match &from {
                Bound::Included(k) | Bound::Excluded(k) => stripe_of(k, route),
                Bound::Unbounded => END_STRIPE,
            };
            let _g = self.stripes[s].lock.read();
            if self.root.route.load(Ordering::Relaxed) != route {
                continue;
            }
            // SAFETY: a stripe is held for reading: no `&mut` to the tree
            // exists, and the scan writes nothing.
            let tree = unsafe { &*self.tree.get() };
            // SAFETY: as the tree's: written only with every stripe held.
            let root_path = unsafe { &*self.root_path.get() };
            let mine = |u: Option<u8>| match u {
                Some(u) => usize::from(u) % UNIT_STRIPES == s,
                None => s == END_STRIPE,
            };
            let mut seen = 0u64;
            let mut counted = |k: &[u8], v: &[u8]| {
                seen += 1;
                f(k, v)
            };
            let lo = from.as_ref().map(Vec::as_slice);
            match tree.scan_one_stripe(lo, hi, &mut counted, root_path, &mine)? {
                StripeScan::Done => return Ok(()),
                StripeScan::Whole => break,
                StripeScan::Next(u) => {
                    // Every key in bounds before that child was given to
                    // `f`: on from its first key.
                    let start = child_start(self.span, root_path, u);
                    let later = match &from {
                        Bound::Included(k) | Bound::Excluded(k) => start > *k,
                        Bound::Unbounded => true,
                    };
                    stalled = if seen == 0 && !later { stalled + 1 } else { 0 };
                    if later {
                        from = Bound::Included(start);
                    }
                }
            }
        }
        let lo = from.as_ref().map(Vec::as_slice);
        self.read_all(|t| t.scan(lo, hi, f))
    }
    fn len(&self) -> u64 {
        self.read_all(|t| t.len())
    }
    fn check(&self) -> Result<CheckReport> {
        self.read_all(|t| t.check())
    }
    fn dram_bytes(&self) -> u64 {
        let stripes = std::mem::size_of_val::<[Stripe]>(&self.stripes) as u64;
        self.read_all(|t| t.dram_bytes()) + stripes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The route word gives every key the stripe of its unit at the
    /// branch position (mod [`UNIT_STRIPES`]), and the end stripe to a key
    /// that has no unit there, for both spans, even and odd nibble
    /// positions, and every byte value; [`NO_ROOT`] gives the end stripe.
    #[test]
    fn route_words_give_each_key_the_stripe_of_its_unit() {
        let keys: Vec<Vec<u8>> = (0..=255u8)
            .map(|b| vec![b; 1])
            .chain((0..8).map(|n| (0..n).map(|i| (i * 37 + 5) as u8).collect()))
            .chain([vec![0x12, 0x34, 0xAB, 0xFF, 0x80, 0x7F, 0x00, 0xC3, 0x3C]])
            .collect();
        for span in [Span::Nibble, Span::Byte] {
            for branch in 0..20 {
                let route = route_for(span, branch);
                for key in &keys {
                    let want = if span.len(key) > branch {
                        span.unit(key, branch) as usize % UNIT_STRIPES
                    } else {
                        END_STRIPE
                    };
                    assert_eq!(stripe_of(key, route), want, "{span:?} {branch} {key:?}");
                }
            }
        }
        for key in &keys {
            assert_eq!(stripe_of(key, NO_ROOT), END_STRIPE);
        }
    }

    /// A child's first key: the root's path and the unit as bytes, a WORT
    /// key whose last nibble is the child's padded with 0 (so no key under
    /// the child sorts before it, and every key under an earlier child or
    /// in the end slot sorts before it); the end slot's key is the path.
    #[test]
    fn a_childs_first_key_is_its_path_and_unit() {
        assert_eq!(child_start(Span::Byte, &[7, 9], Some(3)), vec![7, 9, 3]);
        assert_eq!(child_start(Span::Byte, &[], Some(0xFF)), vec![0xFF]);
        assert_eq!(child_start(Span::Byte, &[7], None), vec![7]);
        assert_eq!(child_start(Span::Nibble, &[], Some(0xA)), vec![0xA0]);
        assert_eq!(child_start(Span::Nibble, &[1], Some(0xA)), vec![0x1A]);
        assert_eq!(child_start(Span::Nibble, &[1, 2], None), vec![0x12]);
        assert_eq!(
            child_start(Span::Nibble, &[1, 2, 3], Some(4)),
            vec![0x12, 0x34]
        );
        // Against every key of two bytes: under the child (its units from
        // the path's on equal) exactly when at or after the first key and
        // before the next child's.
        for (path, unit) in [
            (&[][..], 5u8),
            (&[3][..], 0),
            (&[3][..], 15),
            (&[0xA, 0xB][..], 9),
        ] {
            let first = child_start(Span::Nibble, path, Some(unit));
            let next = (unit < 15).then(|| child_start(Span::Nibble, path, Some(unit + 1)));
            for k in 0..=u16::MAX {
                let key = k.to_be_bytes();
                let units = Span::Nibble.all(&key);
                let under = units.starts_with(path) && units[path.len()] == unit;
                let within = key.as_slice() >= first.as_slice()
                    && next.as_ref().is_none_or(|n| key.as_slice() < n.as_slice());
                let same_prefix = units.starts_with(path);
                if same_prefix {
                    assert_eq!(under, within, "{path:?} {unit} {key:?}");
                }
            }
        }
    }

    /// In a full pool whose last compaction gave nothing back, a refused
    /// put holds its own stripe only: the root's version (odd while a
    /// whole-tree writer is inside, so optimistic readers go to the locks)
    /// does not move. A delete releases a block, and the next refused put
    /// takes the whole tree again, once.
    #[test]
    fn refused_puts_after_a_futile_compaction_leave_the_whole_tree_alone() {
        use crate::engine::radix::Flavor;
        use crate::engine::{Engine, PutMode, Reads};
        for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
            let pool = Arc::new(
                Pool::create_anonymous(1 << 20, flavor.name(), &Default::default()).unwrap(),
            );
            let t = RadixTree::create(Arc::clone(&pool), flavor).unwrap();
            let db = Striped::new(pool, t, Reads::Optimistic);
            // The root branches at the key's second byte from the first
            // puts on, so later puts stay in their stripes.
            let key = |i: u32| {
                let mut k = i.to_le_bytes().to_vec();
                k.insert(0, 7);
                k
            };
            let mut n = 0;
            while db.put(&key(n), &[1; 200], PutMode::Upsert).is_ok() {
                n += 1;
            }
            assert!(n > 1000, "{n}");
            let wholes = || db.root.version.load(Ordering::SeqCst);
            let refused = |value: &[u8]| {
                let e = db.put(&key(n), value, PutMode::Upsert).unwrap_err();
                assert!(matches!(e, Error::PoolFull { .. }), "{flavor:?}: {e}");
            };
            let before = wholes();
            let tried = db.read_all(|t| t.compactions_tried);
            assert!(tried >= 1, "{flavor:?}: the fill's last put compacted");
            for _ in 0..50 {
                refused(&[3; 200]);
            }
            assert_eq!(db.read_all(|t| t.compactions_tried), tried);
            assert_eq!(wholes(), before, "{flavor:?}");
            assert!(db.delete(&key(1)).unwrap());
            // A larger leaf, which the freed block does not serve: the
            // whole tree once, to compact (nothing to move), then not.
            refused(&[3; 900]);
            let after = wholes();
            assert!(after > before, "{flavor:?}");
            for _ in 0..50 {
                refused(&[4; 900]);
            }
            assert_eq!(wholes(), after, "{flavor:?}");
            assert_eq!(db.read_all(|t| t.compactions_tried), tried + 1);
            // The freed block serves a key of its class.
            db.put(&key(n), &[5; 200], PutMode::Upsert).unwrap();
            db.check().unwrap();
        }
    }
}
