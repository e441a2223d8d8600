//! `dptree`: the Differential Persistent Tree of Zhou, Shen, Shen, Wu and
//! Jiang (VLDB'19), `papers/dptree.txt`: writes go to a small buffer tree
//! in DRAM made durable by a PM log, and are merged in batches into a
//! read-optimised base tree whose leaves are in PM.
//!
//! - **Buffer tree** (§2.1): a B-tree in DRAM of the keys written since the
//!   last merge, each to its latest record (or a delete), with a Bloom
//!   filter in front of it for point reads (§2: "to filter out searches for
//!   keys that are not in the buffer tree"). Its durability is the
//!   [`log`]: one 8-byte entry per put or delete, naming the record.
//! - **Base tree** (§2.2): DRAM inner nodes (the same ordered map of leaf
//!   bounds as `fptree`'s, [`crate::engine::fptree::inner`]) over a list of
//!   PM [`leaf`] nodes, each with two sets of metadata, one per version; the
//!   global version `gv` in the [`superblock`] says which is active.
//! - **Merge** (§2.3, Algorithm 1; [`merge`]): once the buffer holds
//!   `dptree.merge_ratio` (R, default 0.1) times the base tree's keys, and
//!   at least `dptree.merge_min`, it is merged into the base tree in place,
//!   never writing what the active version uses, then `gv` is flipped: one
//!   8-byte store commits the whole merge.
//! - **Records** ([`record`]): a key and its value in a heap block of its
//!   own (the radix trees' heap, [`crate::engine::radix::chunks`]: a block
//!   is in use exactly when reached, as in `fptree`). Log entries and leaf
//!   slots point to them; a merge moves the pointer, not the bytes.
//! - **Concurrency**: one reader-writer lock over the tree ([`Locked`]),
//!   and merges run inside the put that fills the buffer. The paper's
//!   concurrent DPTree (§3: a front and a middle buffer tree, a background
//!   merge, versioned readers) is not built (docs/design.md §14).
//!
//! # Persist order
//! - **Put** (insert, update, upsert): write the record, flush it; store
//!   the log entry, flush it; **fence**. 1 fence (2 when the log takes a
//!   new page). The entry can reach PM before its record: recovery checks
//!   the record of every entry ([`record::is_whole`]) and ends the log at
//!   the first that is not whole, whose put had not returned.
//! - **Delete** of a key whose latest write is a buffered put: a log entry
//!   with the delete bit that names that put's record, stored, flushed;
//!   **fence**. No new record, and no new page: a put first makes the log
//!   room for a delete of every buffered key. 1 fence.
//! - **Delete** of a key only the base tree holds: its bit cleared in the
//!   active bitmap (the commit point), flushed; **fence**; the record freed.
//!   1 fence. So no delete needs space (docs/design.md §14, "Deletes").
//! - **Merge** ([`merge`]): the inactive version's metadata and new leaves
//!   written and flushed, with no fence, then **fence**; store `gv + 1`,
//!   flush; **fence**. 2 fences per merge. Blocks the new version no longer
//!   reaches (old leaves, replaced and deleted records, the log's records
//!   of deletes and of superseded puts) go back to the heap only after the
//!   second fence.
//!
//! # Recovery ([`recovery`])
//! Walk the active version's leaf list and the log, marking what they
//! reach in the heap; give the rest back; rebuild the inner map, and the
//! buffer tree by replaying the log.

mod buffer;
pub(crate) mod leaf;
pub(crate) mod log;
mod merge;
pub(crate) mod record;
mod recovery;
pub(crate) mod superblock;
#[cfg(test)]
mod tests;

use std::ops::Bound;
use std::sync::Arc;

use super::fptree::inner::Inner;
use super::radix::chunks::Chunks;
use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::Pool;
use buffer::Buffer;
use leaf::{fingerprint, Meta};
use log::Log;

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "dptree",
    paper: "Zhou et al., DPTree (VLDB'19): a DRAM buffer tree with a PM log, merged into PM leaves",
    create,
    open,
};

/// The paper's merge threshold R (§4.1: 0.1).
pub const DEFAULT_MERGE_RATIO: f64 = 0.1;
/// Buffered writes below which no merge starts, however small the base.
pub const DEFAULT_MERGE_MIN: u64 = 256;

/// The settings `dptree.*`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Slots per leaf (when the pool is made; `None` on open: the pool's).
    pub leaf_slots: Option<u32>,
    /// R: the buffer's size over the base tree's that starts a merge.
    pub merge_ratio: f64,
    /// The fewest buffered writes that start a merge.
    pub merge_min: u64,
}

impl Settings {
    /// Reads `dptree.leaf_slots`, `dptree.merge_ratio` and
    /// `dptree.merge_min` from `config`.
    pub fn parse(config: &EngineConfig) -> Result<Settings> {
        let mut s = Settings {
            leaf_slots: None,
            merge_ratio: DEFAULT_MERGE_RATIO,
            merge_min: DEFAULT_MERGE_MIN,
        };
        let bad = |k: &str, v: &str, want: &str| {
            Error::InvalidArgument(format!("dptree.{k} `{v}`: expected {want}"))
        };
        for (k, v) in super::settings(
            config,
            INFO.name,
            &["leaf_slots", "merge_ratio", "merge_min"],
        )? {
            match k {
                "leaf_slots" => {
                    s.leaf_slots = Some(
                        v.parse::<u32>()
                            .ok()
                            .filter(|n| leaf::SLOTS.contains(n))
                            .ok_or_else(|| {
                                bad(
                                    k,
                                    v,
                                    &format!("{} to {}", leaf::SLOTS.start(), leaf::SLOTS.end()),
                                )
                            })?,
                    )
                }
                "merge_ratio" => {
                    s.merge_ratio = v
                        .parse::<f64>()
                        .ok()
                        .filter(|r| *r > 0.0 && *r <= 1.0)
                        .ok_or_else(|| bad(k, v, "a ratio above 0, at most 1"))?
                }
                _ => {
                    s.merge_min = v
                        .parse::<u64>()
                        .ok()
                        .filter(|n| (1..=1 << 32).contains(n))
                        .ok_or_else(|| bad(k, v, "1 to 2^32 writes"))?
                }
            }
        }
        Ok(s)
    }
}

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let s = Settings::parse(config)?;
    let tree = DpTree::create(Arc::clone(&pool), s)?;
    Ok(Box::new(Locked::new(pool, tree)))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let s = Settings::parse(config)?;
    let tree = DpTree::open(Arc::clone(&pool), s)?;
    Ok(Box::new(Locked::new(pool, tree)))
}

/// A buffered write: the record its log entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The record (the key alone for a delete).
    rec: u64,
    /// A delete.
    tomb: bool,
    /// The record's value length.
    value_len: u32,
}

/// A Bloom filter over the buffer tree's keys: 3 probes into a table of
/// at least 10 bits per key the buffer may hold before it merges (about
/// 1.7% false positives).
struct Bloom {
    bits: Vec<u64>,
    mask: u64,
}

impl Bloom {
    fn new(keys: u64) -> Bloom {
        let n = (keys.saturating_mul(10))
            .clamp(1024, 1 << 34)
            .next_power_of_two();
        Bloom {
            bits: vec![0; (n / 64) as usize],
            mask: n - 1,
        }
    }

    fn probes(&self, key: &[u8]) -> [u64; 3] {
        let h = crate::fnv::fnv1a(key);
        let h2 = h.rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        [h, h.wrapping_add(h2), h.wrapping_add(h2.wrapping_mul(2))].map(|p| (p >> 7) & self.mask)
    }

    fn add(&mut self, key: &[u8]) {
        for p in self.probes(key) {
            self.bits[(p / 64) as usize] |= 1 << (p % 64);
        }
    }

    fn may_hold(&self, key: &[u8]) -> bool {
        self.probes(key)
            .iter()
            .all(|p| self.bits[(p / 64) as usize] & 1 << (p % 64) != 0)
    }

    fn dram_bytes(&self) -> u64 {
        8 * self.bits.len() as u64
    }
}

/// The dptree engine (serial; wrapped in [`Locked`]).
pub struct DpTree {
    pool: Arc<Pool>,
    sb: u64,
    /// Slots per leaf.
    slots: u32,
    heap: Chunks,
    /// The global version (DRAM copy of the superblock's `gv`).
    gv: u64,
    /// This open's number (the superblock's `opens`), which records and
    /// log entries carry.
    opens: u64,
    /// Each leaf's lower bound → the leaf, in the active version's list
    /// order (the base tree's DRAM inner nodes).
    leaves: Inner,
    /// Keys in the base tree.
    base_keys: u64,
    /// The buffer tree: each key written since the last merge → its latest
    /// write.
    buffer: Buffer,
    bloom: Bloom,
    log: Log,
    /// Records the log names whose write a later one of the same key
    /// superseded: freed after the next merge's flip.
    superseded: Vec<u64>,
    /// Leaves of the active list that deletes emptied: out of the inner
    /// map, freed after the next merge's flip.
    empty_leaves: Vec<u64>,
    /// Keys in the tree.
    count: u64,
    merge_ratio: f64,
    merge_min: u64,
    /// Buffered writes that start the next merge.
    threshold: u64,
    /// Merges run since the pool was opened.
    merges: u64,
}

/// Where a key was found.
#[derive(Clone, Copy)]
enum Found {
    /// In the buffer tree (a put).
    Buffer { rec: u64, value_len: u32 },
    /// In the base tree, slot `slot` of `leaf`.
    Base {
        rec: u64,
        value_len: u32,
        leaf: u64,
        slot: u32,
    },
}

impl DpTree {
    /// Makes an empty tree in a new pool.
    pub fn create(pool: Arc<Pool>, s: Settings) -> Result<DpTree> {
        let slots = s.leaf_slots.unwrap_or(leaf::DEFAULT_SLOTS);
        if !leaf::SLOTS.contains(&slots) {
            return Err(Error::InvalidArgument(format!(
                "dptree: {slots} slots per leaf; expected {} to {}",
                leaf::SLOTS.start(),
                leaf::SLOTS.end()
            )));
        }
        let sb = superblock::create(&pool, slots)?;
        let heap = Chunks::load(&pool, sb + superblock::CHUNKS, true)?;
        let mut t = DpTree {
            pool,
            sb,
            slots,
            heap,
            gv: 1,
            opens: 0,
            leaves: Inner::default(),
            base_keys: 0,
            buffer: Buffer::default(),
            bloom: Bloom::new(0),
            log: Log::empty(),
            superseded: Vec::new(),
            empty_leaves: Vec::new(),
            count: 0,
            merge_ratio: s.merge_ratio,
            merge_min: s.merge_min,
            threshold: 0,
            merges: 0,
        };
        t.new_epoch();
        Ok(t)
    }

    /// Recovers the tree of a pool (see [`recovery`]).
    pub fn open(pool: Arc<Pool>, s: Settings) -> Result<DpTree> {
        recovery::open(pool, s)
    }

    /// The active version: the low bit of `gv`.
    fn cv(&self) -> usize {
        (self.gv & 1) as usize
    }

    /// Merges run since the pool was opened.
    pub fn merges(&self) -> u64 {
        self.merges
    }

    /// Buffered writes now.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The threshold and the Bloom filter for the buffer of a new epoch
    /// (after a merge, or at open).
    fn new_epoch(&mut self) {
        let by_ratio = (self.base_keys as f64 * self.merge_ratio).ceil() as u64;
        self.threshold = by_ratio.max(self.merge_min);
        self.bloom = Bloom::new(self.threshold.max(self.buffer.len() as u64));
        for (k, _) in self.buffer.iter() {
            self.bloom.add(k);
        }
    }

    /// Finds `key` in the base tree (the active version).
    fn base_find(&self, key: &[u8]) -> Result<Option<(u64, u32, u64, u32)>> {
        let Some((_, l)) = self.leaves.find(key) else {
            return Ok(None);
        };
        let m = Meta::read(&self.pool, l, self.cv(), self.slots)?;
        self.find_in(l, &m, key, fingerprint(key))
    }

    /// The live slot of `l` (metadata `m`) that holds `key`: (record, value
    /// length, leaf, slot).
    fn find_in(
        &self,
        l: u64,
        m: &Meta,
        key: &[u8],
        fp: u8,
    ) -> Result<Option<(u64, u32, u64, u32)>> {
        for j in m.live() {
            if m.fps[j as usize] != fp {
                continue;
            }
            let rec = self.pool.load_u64(leaf::slot(l, j))?;
            self.pool.touch(leaf::slot(l, j), 8);
            let w = self.pool.load_u64(rec)?;
            let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as u32);
            if k != key.len() {
                continue;
            }
            self.pool.touch(rec, record::size(k, 0));
            // SAFETY: a reachable record is never written again; writers
            // hold the tree exclusively.
            if unsafe { record::key(&self.pool, rec, k)? } == key {
                return Ok(Some((rec, v, l, j)));
            }
        }
        Ok(None)
    }

    /// Where `key` is, if present: the buffer tree first, then the base.
    fn find(&self, key: &[u8]) -> Result<Option<Found>> {
        if self.bloom.may_hold(key) {
            if let Some(p) = self.buffer.get(key) {
                return Ok((!p.tomb).then_some(Found::Buffer {
                    rec: p.rec,
                    value_len: p.value_len,
                }));
            }
        }
        Ok(self
            .base_find(key)?
            .map(|(rec, value_len, leaf, slot)| Found::Base {
                rec,
                value_len,
                leaf,
                slot,
            }))
    }

    /// The value of the record `rec` of `key`.
    fn value_of(&self, rec: u64, key_len: usize, value_len: u32) -> Result<&[u8]> {
        let at = rec + record::HEADER + key_len as u64;
        self.pool.touch(at, u64::from(value_len));
        // SAFETY: as in `find_in`.
        unsafe { record::value(&self.pool, rec, key_len, value_len as usize) }
    }

    /// Writes the record of `key` and `value` into a new block and flushes
    /// it (not fenced).
    fn write_record(&mut self, key: &[u8], value: &[u8]) -> Result<u64> {
        let size = record::size(key.len(), value.len());
        let b = self.heap.reserve(&self.pool, size)?;
        let rec = b.offset();
        let head = record::header(self.gv, self.opens, key, value);
        // SAFETY: the block is reserved by us and unreachable; writers hold
        // the tree exclusively.
        let written = unsafe {
            self.pool
                .write_bytes(rec, &head)
                .and_then(|()| self.pool.write_bytes(rec + record::HEADER, key))
                .and_then(|()| {
                    self.pool
                        .write_bytes(rec + record::HEADER + key.len() as u64, value)
                })
        };
        if let Err(e) = written {
            self.heap.cancel(&self.pool, b)?;
            return Err(e);
        }
        self.pool.flush(rec, size);
        Ok(rec)
    }

    /// Logs a put of `value` to `key`: see the module doc, "Persist
    /// order". Durable on return. The log first takes pages until it has
    /// room for this entry and for a delete of every buffered key, so that
    /// a delete never needs a page ([`DpTree::delete`]: in a full pool too).
    ///
    /// The room comes before the record: once a record is written, only a
    /// failed store (a bug) gives it back unlogged, so no record left
    /// whole in a freed block comes from this open (see [`record`]).
    fn log_put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        // This entry, and a delete of each buffered key and of this one.
        self.log_room(self.buffer.len() as u64 + 2)?;
        let rec = self.write_record(key, value)?;
        let vb = self.gv & 1;
        let e = log::entry(rec, false, vb, self.opens);
        let r = self.log.append(&self.pool, &mut self.heap, self.sb, e);
        if let Err(err) = r {
            self.heap.release(&self.pool, rec)?;
            return Err(err);
        }
        self.pool.fence();
        self.note_write(
            key,
            Pending {
                rec,
                tomb: false,
                value_len: value.len() as u32,
            },
        );
        Ok(())
    }

    /// Takes log pages until the log has room for `want` entries.
    fn log_room(&mut self, want: u64) -> Result<()> {
        while self.log.room() < want {
            self.log
                .grow(&self.pool, &mut self.heap, self.sb, self.gv & 1)?;
        }
        Ok(())
    }

    /// Records `p` as `key`'s latest write in the buffer tree.
    fn note_write(&mut self, key: &[u8], p: Pending) {
        // A delete's record is its put's, superseded already.
        if let Some(old) = self.buffer.insert(key, p).filter(|o| !o.tomb) {
            self.superseded.push(old.rec);
        }
        self.bloom.add(key);
    }

    /// A delete of a key whose latest write is the buffered put of record
    /// `rec`: a log entry with the delete bit that names `rec` (no new
    /// record), stored, flushed, **fenced**. The log has room for it
    /// ([`DpTree::log_put`]).
    fn log_delete(&mut self, key: &[u8], rec: u64) -> Result<()> {
        let e = log::entry(rec, true, self.gv & 1, self.opens);
        self.log.append(&self.pool, &mut self.heap, self.sb, e)?;
        self.pool.fence();
        self.count -= 1;
        self.note_write(
            key,
            Pending {
                rec,
                tomb: true,
                value_len: 0,
            },
        );
        Ok(())
    }

    /// A delete of a key only the base tree holds, slot `j` of `l` with
    /// record `rec`: its bit cleared in the active bitmap (one 8-byte
    /// store, the commit point), flushed, **fenced**; then the record goes
    /// back to the heap. A leaf left empty leaves the inner map and stays
    /// in the list until the next merge drops it (docs/design.md §14,
    /// "Deletes").
    fn delete_in_base(&mut self, key: &[u8], l: u64, j: u32, rec: u64) -> Result<()> {
        let at = leaf::bitmap_at(l, self.cv());
        let bits = self.pool.load_u64(at)? & !(1 << j);
        self.pool.store_u64(at, bits)?;
        self.pool.flush(at, 8);
        self.pool.fence();
        self.base_keys -= 1;
        self.count -= 1;
        if bits == 0 {
            let bound: Box<[u8]> = self
                .leaves
                .find(key)
                .map_or(Box::default(), |(b, _)| b.into());
            self.leaves.remove(&bound);
            if bound.is_empty() {
                // The next leaf is first now: its bound becomes the empty key.
                if let Some((_, n)) = self.leaves.pop_first() {
                    self.leaves.insert(Box::default(), n);
                }
            }
            self.empty_leaves.push(l);
        }
        self.heap.release(&self.pool, rec)
    }

    /// For a scan: calls `f` on the buffered puts before `upto` (all, if
    /// `None`), skipping deletes; false if `f` said stop.
    fn emit_buffered<'a>(
        &self,
        upto: Option<&[u8]>,
        buffered: &mut std::iter::Peekable<impl Iterator<Item = (&'a [u8], Pending)>>,
        f: &mut ScanFn<'_>,
    ) -> Result<bool> {
        while let Some(&(k, p)) = buffered.peek() {
            if upto.is_some_and(|u| k >= u) {
                break;
            }
            buffered.next();
            if !p.tomb && !f(k, self.value_of(p.rec, k.len(), p.value_len)?) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Merges if the buffer has reached the threshold. A merge that finds
    /// the pool full changes nothing and is tried again once the buffer
    /// has grown by half again (the write that started it is durable and
    /// applied all the same).
    fn maybe_merge(&mut self) -> Result<()> {
        if (self.buffer.len() as u64) < self.threshold {
            return Ok(());
        }
        match self.merge() {
            Err(Error::PoolFull { .. }) => {
                self.threshold = self.threshold.saturating_add(self.threshold / 2 + 1);
                Ok(())
            }
            r => r,
        }
    }
}

impl SerialEngine for DpTree {
    fn name(&self) -> &'static str {
        INFO.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ordered_scan: true,
            concurrent: false,
            max_key_len: MAX_KEY_LEN,
            max_value_len: MAX_VALUE_LEN,
        }
    }

    fn settings(&self) -> EngineConfig {
        EngineConfig::from([
            ("dptree.leaf_slots".to_string(), self.slots.to_string()),
            (
                "dptree.merge_ratio".to_string(),
                self.merge_ratio.to_string(),
            ),
            ("dptree.merge_min".to_string(), self.merge_min.to_string()),
        ])
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.find(key)? {
            Some(Found::Buffer { rec, value_len } | Found::Base { rec, value_len, .. }) => {
                f(self.value_of(rec, key.len(), value_len)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        super::check_item(key, value)?;
        let present = self.find(key)?.is_some();
        match (present, mode) {
            (true, PutMode::Insert) | (false, PutMode::Update) => return Ok(PutOutcome::Unchanged),
            _ => {}
        }
        match self.log_put(key, value) {
            // No page for the log (or no block for the record): a merge
            // frees what the buffer superseded and starts the log again on
            // its own pages; then once more.
            Err(Error::PoolFull { .. }) if !self.buffer.is_empty() => {
                self.merge()?;
                self.log_put(key, value)?;
            }
            r => r?,
        }
        if !present {
            self.count += 1;
        }
        self.maybe_merge()?;
        Ok(if present {
            PutOutcome::Replaced
        } else {
            PutOutcome::Inserted
        })
    }

    /// Deletes never grow the buffer tree, so they start no merge, and
    /// take no space (see [`DpTree::log_put`]). After a crash in a merge's
    /// flip the log can have less room than that promise needs (the merge
    /// had cut its pages); open takes pages back where it can, and a
    /// delete that still finds none merges first, after which its key is
    /// in the base tree alone.
    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        match self.find(key)? {
            None => return Ok(false),
            Some(Found::Buffer { rec, .. }) => match self.log_delete(key, rec) {
                Err(Error::PoolFull { .. }) => {
                    self.merge()?;
                    return self.delete(key);
                }
                r => r?,
            },
            Some(Found::Base {
                rec, leaf, slot, ..
            }) => self.delete_in_base(key, leaf, slot, rec)?,
        }
        Ok(true)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
            (lo, hi)
        {
            let both_in = matches!((lo, hi), (Bound::Included(_), Bound::Included(_)));
            if l > h || (l == h && !both_in) {
                return Ok(());
            }
        }
        let above_lo = |k: &[u8]| super::above_lo(k, lo);
        let below_hi = |k: &[u8]| super::below_hi(k, hi);
        let mut buffered = self.buffer.range(lo, hi).peekable();
        let start: &[u8] = match lo {
            Bound::Included(k) | Bound::Excluded(k) => self.leaves.find(k).map_or(&[], |(b, _)| b),
            Bound::Unbounded => &[],
        };
        let mut pairs: Vec<(&[u8], u64, u32)> = Vec::with_capacity(self.slots as usize);
        for (_, l) in self.leaves.iter_from(Bound::Included(start)) {
            let m = Meta::read(&self.pool, l, self.cv(), self.slots)?;
            let words = self.pool.words();
            words.prefetch(m.next);
            pairs.clear();
            for j in m.live() {
                let rec = self.pool.load_u64(leaf::slot(l, j))?;
                let w = self.pool.load_u64(rec)?;
                let (k, v) = ((w & 0xFFFF) as usize, ((w >> 16) & 0xFFFF_FFFF) as u32);
                // SAFETY: as in `find_in`.
                let key = unsafe { record::key(&self.pool, rec, k)? };
                pairs.push((key, rec, v));
            }
            pairs.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for &(k, rec, v) in &pairs {
                if !above_lo(k) {
                    continue;
                }
                if !below_hi(k) {
                    self.emit_buffered(None, &mut buffered, f)?;
                    return Ok(());
                }
                if !self.emit_buffered(Some(k), &mut buffered, f)? {
                    return Ok(());
                }
                // A buffered write of this key wins over the base's.
                if buffered.peek().is_some_and(|&(bk, _)| bk == k) {
                    continue;
                }
                self.pool.touch(rec, record::size(k.len(), v as usize));
                if !f(k, self.value_of(rec, k.len(), v)?) {
                    return Ok(());
                }
            }
        }
        self.emit_buffered(None, &mut buffered, f)?;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.count
    }

    fn check(&self) -> Result<CheckReport> {
        self.check_impl()
    }

    fn dram_bytes(&self) -> u64 {
        let buffer = self.buffer.dram_bytes();
        self.leaves.dram_bytes()
            + self.heap.dram_bytes()
            + buffer
            + self.bloom.dram_bytes()
            + 8 * (self.superseded.capacity() + self.log.pages().len()) as u64
    }
}
