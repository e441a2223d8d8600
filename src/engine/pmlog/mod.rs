//! `pmlog`: the reference engine. An append-only log of records in PM, and a
//! DRAM `BTreeMap` from key to record, rebuilt at open by scanning the log.
//!
//! It is the simplest thing that persists, kept as a correctness oracle and
//! as the baseline of the benchmarks. It follows no paper.
//!
//! # Persist order
//! - **insert** (key absent): write the record at the tail of the active
//!   segment, flush it, **fence**. The record (validated by its CRC) is the
//!   commit point. 1 fence.
//! - **replace** (key present): append the new record as above (**fence**),
//!   then set `DEAD` on the old record with one 8-byte store, flush,
//!   **fence**. 2 fences. A crash between leaves both records alive;
//!   recovery keeps the one with the higher sequence number. The second fence
//!   makes the old record's death durable before anything can free its
//!   segment, so a freed segment can never take a newer record with it and
//!   leave an older one alive.
//! - **delete**: set `DEAD` on the record, flush, **fence**. 1 fence, and no
//!   allocation, so deletes work in a full pool.
//! - **new segment**: reserve a block, write its header (magic, fresh nonce),
//!   flush, then `activate` it into a free directory slot (3 fences, see the
//!   allocator).
//! - **free segment**: when a sealed segment holds no live record,
//!   `free(directory slot)`.
//! - **clean** (beyond a plain log, 2026-12-02): a sealed segment's live
//!   records are moved to the active segment's tail, one at a time, each
//!   as a replace with its own value (append, **fence**; `DEAD` on the old
//!   record, **fence**), and the segment, then without a live record, is
//!   freed. A crash in between leaves a key with two live records of one
//!   value, which recovery resolves as for a replace. It runs when a new
//!   segment starts and more than half the segments' record space is dead
//!   (the sealed segment with the fewest live bytes, if they fit), and when
//!   the pool has no room for a new segment beside the segment's worth it
//!   keeps free for cleaning (into the active segment's rest, or into a
//!   new segment made from that room, while some segment is at most three
//!   quarters live). Without it, one live record kept a whole segment: a
//!   cold key among hot updates pinned 256 KiB, and 63 of them filled a
//!   16 MiB pool; and a full pool whose every other key was deleted took
//!   back one in fifteen of them.
//!
//! # Recovery
//! Read every segment in the directory, record by record, until the first
//! record that fails validation. For each key the record with the highest
//! sequence number wins; if it is dead the key is absent. Losing records that
//! are still alive (a crash inside a replace) get `DEAD`, then a fence, then
//! segments with no live record are freed. Appends resume in the segment
//! with the newest record after its non-zero trailing words (a torn append)
//! are zeroed and fenced, so torn bytes are never followed by valid records.

mod record;
mod segment;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use rand::Rng;

use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, Locked, PutMode, PutOutcome,
    ScanFn, SerialEngine, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool};
use record::{RecordInfo, DEAD};
use segment::{dir_slot, DIR_MAGIC, DIR_SIZE, DIR_SLOTS, SEG_HEADER, SEG_MAGIC, SEG_SIZE};

/// Pools of at least this many segments' worth of heap keep one free for
/// cleaning ([`PmLog::keep`]): 3 MiB, which a pool of 4 MiB has and one
/// of 2 MiB has not.
const KEEP_FROM: u64 = 12;

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "pmlog",
    paper: "reference engine: append-only PM log + DRAM BTreeMap (no paper)",
    create,
    open,
};

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    super::settings(config, INFO.name, &[])?;
    let log = PmLog::create(Arc::clone(&pool))?;
    Ok(Box::new(Locked::new(pool, log)))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    super::settings(config, INFO.name, &[])?;
    let log = PmLog::open(Arc::clone(&pool))?;
    Ok(Box::new(Locked::new(pool, log)))
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Offset of the record.
    rec: u64,
    /// Directory slot of its segment.
    seg: u32,
    key_len: u32,
    value_len: u32,
}

impl Entry {
    /// Bytes of the record.
    fn size(&self) -> u64 {
        record::record_size(self.key_len as usize, self.value_len as usize)
    }
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    off: u64,
    end: u64,
    nonce: u64,
    /// Live records, and their bytes ([`record::record_size`]).
    live: u64,
    live_bytes: u64,
}

/// The pmlog engine (serial; wrapped in [`Locked`]).
pub struct PmLog {
    pool: Arc<Pool>,
    dir: u64,
    segments: Vec<Option<Segment>>,
    /// Directory slot of the segment being appended to.
    active: Option<usize>,
    tail: u64,
    index: BTreeMap<Box<[u8]>, Entry>,
    next_seq: u64,
    key_bytes: u64,
}

fn nonce() -> u64 {
    rand::thread_rng().gen_range(1..=u64::MAX)
}

impl PmLog {
    /// Makes the directory in a new pool.
    pub fn create(pool: Arc<Pool>) -> Result<PmLog> {
        let root = pool.root_slot(0)?;
        let dir = Self::make_directory(&pool, root)?;
        Ok(PmLog {
            pool,
            dir,
            segments: Vec::new(),
            active: None,
            tail: 0,
            index: BTreeMap::new(),
            next_seq: 1,
            key_bytes: 0,
        })
    }

    /// Persist order: zero the block and write the magic, flush; activate it
    /// into root slot 0 (whose F1 orders the flush).
    fn make_directory(pool: &Pool, root: u64) -> Result<u64> {
        let r = pool.reserve(DIR_SIZE)?;
        let dir = r.offset();
        // SAFETY: the block is reserved by us and not yet published.
        unsafe { pool.zero_bytes(dir, DIR_SIZE)? };
        pool.store_u64(dir, DIR_MAGIC)?;
        pool.flush(dir, DIR_SIZE);
        pool.activate(r, root)?;
        Ok(dir)
    }

    /// Recovers the index from the log.
    pub fn open(pool: Arc<Pool>) -> Result<PmLog> {
        let root = pool.root_slot(0)?;
        let mut dir = pool.load_u64(root)?;
        if dir == 0 {
            // Creation crashed before the directory was published (unless
            // blocks say it was lost instead).
            pool.check_unpublished_root(root, "pmlog")?;
            dir = Self::make_directory(&pool, root)?;
        }
        if pool.block_size(dir).ok() != Some(DIR_SIZE) || pool.load_u64(dir)? != DIR_MAGIC {
            return Err(Error::corrupt(
                dir,
                "pmlog: root slot 0 does not point to a directory",
            ));
        }
        let mut segments: Vec<Option<Segment>> = Vec::new();
        // key -> (seq, dead, entry)
        let mut best: BTreeMap<Box<[u8]>, (u64, bool, Entry)> = BTreeMap::new();
        let mut losers_alive = Vec::new();
        let mut max_seq = 0;
        // The segment holding the newest record, and where its log ends.
        let mut newest: Option<(usize, u64)> = None;
        let mut named = std::collections::HashSet::new();
        for i in 0..DIR_SLOTS {
            let off = pool.load_u64(dir_slot(dir, i))?;
            if off == 0 {
                continue;
            }
            // Damage: one segment in two slots would have its records
            // compared with themselves, killed as losers, and freed while
            // the other slot still names it.
            if !named.insert(off) {
                return Err(Error::corrupt(
                    dir_slot(dir, i),
                    "pmlog: two directory slots name the same segment",
                ));
            }
            segments.resize(i + 1, None);
            let seg_slot = &mut segments[i];
            let size = pool.block_size(off).map_err(|_| {
                Error::corrupt(dir_slot(dir, i), "pmlog: directory slot points to no block")
            })?;
            if pool.load_u64(off)? != SEG_MAGIC {
                return Err(Error::corrupt(off, "pmlog: segment has a bad magic number"));
            }
            let nonce = pool.load_u64(off + 8)?;
            let end = off + size;
            *seg_slot = Some(Segment {
                off,
                end,
                nonce,
                live: 0,
                live_bytes: 0,
            });
            let mut pos = off + SEG_HEADER;
            let mut seg_max = 0;
            // SAFETY: recovery runs before the engine is shared; nothing else
            // writes the pool.
            while let Some(info) = unsafe { record::read(&pool, pos, end, nonce)? } {
                max_seq = max_seq.max(info.seq);
                seg_max = seg_max.max(info.seq);
                let e = Entry {
                    rec: pos,
                    seg: i as u32,
                    key_len: info.key_len as u32,
                    value_len: info.value_len as u32,
                };
                // SAFETY: as above.
                let key = unsafe { pool.bytes(pos + info.key_offset(), info.key_len as u64)? };
                match best.get_mut(key) {
                    Some(b) if b.0 >= info.seq => {
                        if !info.dead {
                            losers_alive.push(pos);
                        }
                    }
                    Some(b) => {
                        if !b.1 {
                            losers_alive.push(b.2.rec);
                        }
                        *b = (info.seq, info.dead, e);
                    }
                    None => {
                        best.insert(key.into(), (info.seq, info.dead, e));
                    }
                }
                pos += info.size();
            }
            // A valid record past the end of the log means damage in the
            // middle of the log, not a torn append: refuse rather than drop
            // the records after it (and zero them on resume).
            let mut probe = pos;
            while probe + record::RECORD_HEADER <= end {
                // SAFETY: as above.
                if unsafe { record::read(&pool, probe, end, nonce)? }.is_some() {
                    return Err(Error::corrupt(
                        pos,
                        format!("pmlog: the record at {pos:#x} is damaged and valid records follow it at {probe:#x}"),
                    ));
                }
                probe += 8;
            }
            if seg_max > 0 && seg_max == max_seq {
                newest = Some((i, pos));
            }
        }
        // Damage: a sequence number at its limit (one append can never get
        // there, 2^63 of them first) would make the next record's number
        // carry the `DEAD` bit, and read as dead at the next open.
        if max_seq >= DEAD - 1 {
            return Err(Error::corrupt(
                dir,
                format!("pmlog: a record's sequence number {max_seq:#x} is at its limit"),
            ));
        }
        // Kill superseded records that a crash left alive, and make that
        // durable before any segment is freed.
        for &rec in &losers_alive {
            crate::pm::cases::record(crate::pm::cases::Case::PmlogLoserKilled);
            pool.fetch_or_u64(rec, DEAD)?;
            if !pool.fault(Fault::PmlogRecoveryLoserUnflushed) {
                pool.flush(rec, 8);
            }
        }
        pool.fence();
        let mut index = BTreeMap::new();
        let mut key_bytes = 0;
        for (k, (_, dead, e)) in best {
            if dead {
                continue;
            }
            if let Some(s) = segments[e.seg as usize].as_mut() {
                s.live += 1;
                s.live_bytes += e.size();
            }
            key_bytes += k.len() as u64;
            index.insert(k, e);
        }
        let mut log = PmLog {
            pool,
            dir,
            segments,
            active: None,
            tail: 0,
            index,
            next_seq: max_seq + 1,
            key_bytes,
        };
        if let Some((i, tail)) = newest {
            log.resume(i, tail)?;
        }
        for i in 0..log.segments.len() {
            if log.active != Some(i) && matches!(log.segments[i], Some(s) if s.live == 0) {
                log.free_segment(i)?;
            }
        }
        Ok(log)
    }

    /// Makes segment `i`, whose last valid record ends at `tail`, the active
    /// segment again, so that an open does not start a new segment.
    ///
    /// Bytes past `tail` may hold a torn record from a crash. The 8-byte words
    /// there that are not zero are zeroed, flushed and fenced before anything
    /// is appended, so torn bytes can never be followed by a valid record. A
    /// crash during the zeroing leaves only garbage past the tail, which the
    /// next open zeroes again.
    fn resume(&mut self, i: usize, tail: u64) -> Result<()> {
        let Some(seg) = self.segments[i] else {
            return Ok(());
        };
        if seg.end - tail < (seg.end - seg.off) / 4 {
            return Ok(()); // Nearly full: a new segment starts when needed.
        }
        // Records are padded to 8 bytes, so `tail` is 8-byte aligned.
        debug_assert!(tail.is_multiple_of(8));
        // A torn append's first word is its sequence number, the next one
        // (appends run one at a time); stale bytes of a reused block hold
        // anything else. Only the first is a repair (for `check`'s report).
        let torn = tail + 8 <= seg.end && self.pool.load_u64(tail)? & !DEAD == self.next_seq;
        let mut dirty = false;
        let mut w = tail;
        while w + 8 <= seg.end {
            if self.pool.load_u64(w)? != 0 {
                self.pool.store_u64(w, 0)?;
                self.pool.flush(w, 8);
                dirty = true;
            }
            w += 8;
        }
        if dirty {
            if torn {
                crate::pm::cases::record(crate::pm::cases::Case::PmlogTornTail);
            }
            self.pool.fence();
        }
        self.active = Some(i);
        self.tail = tail;
        Ok(())
    }

    fn free_segment(&mut self, i: usize) -> Result<()> {
        self.pool.free(dir_slot(self.dir, i))?;
        self.segments[i] = None;
        Ok(())
    }

    /// Starts a new segment that can hold at least `need` bytes of records,
    /// cleaning segments (module doc) where the pool has no room for one,
    /// and after it where dead records are most of the log.
    fn new_segment(&mut self, need: u64) -> Result<()> {
        let size = (need + SEG_HEADER).max(SEG_SIZE);
        // A turn frees a segment (cleaning into the active one's rest), or
        // moves a mostly dead one into a new segment whose rest may take
        // the record. A turn that frees no room is allowed once in a row:
        // a second would move the records just moved (found by review:
        // one refused 100 KiB put rewrote a 2 MiB pool's log for 1.4 GB).
        let mut idle = 0;
        loop {
            let keep = self.keep();
            match self.start_segment(size, keep) {
                Ok(()) => {
                    if self.mostly_dead() {
                        self.clean(need, 0)?;
                    }
                    return Ok(());
                }
                Err(Error::PoolFull { .. }) => {}
                Err(e) => return Err(e),
            }
            let free = self.pool.free_heap_bytes().0;
            if !self.make_room(size)? {
                break;
            }
            let room = self
                .active
                .and_then(|a| self.segments[a])
                .map_or(0, |s| s.end - self.tail);
            if room >= need {
                return Ok(());
            }
            if self.pool.free_heap_bytes().0 > free {
                idle = 0;
            } else {
                idle += 1;
                if idle == 2 {
                    break;
                }
            }
        }
        Err(Error::PoolFull { requested: size })
    }

    /// The room a new segment for appends leaves free, for cleaning
    /// ([`Self::make_room`]): a segment's worth, in a pool of at least
    /// [`KEEP_FROM`] segments whose log has a sealed segment; none in a
    /// smaller pool (a segment's worth would be a large share of it) or
    /// with nothing to clean (an empty log takes any record that fits).
    fn keep(&self) -> u64 {
        let sealed = self
            .segments
            .iter()
            .enumerate()
            .any(|(i, s)| s.is_some() && self.active != Some(i));
        if sealed && self.pool.free_heap_bytes().1 >= KEEP_FROM * SEG_SIZE {
            SEG_SIZE
        } else {
            0
        }
    }

    /// Frees a sealed segment of at least `size` bytes, for a pool with no
    /// room for a new segment of `size` beside the one kept for cleaning:
    /// the one with the fewest live bytes is cleaned into what is left of
    /// the active segment if they fit there, else into a new segment
    /// (which may take the room kept), if at most
    /// three quarters of its record space is live (so that each turn gains
    /// room). Returns whether one was freed.
    fn make_room(&mut self, size: u64) -> Result<bool> {
        if self.clean(0, size)? {
            return Ok(true);
        }
        let Some((_, seg)) = self
            .victim(u64::MAX, size)
            .filter(|(_, s)| s.live_bytes * 4 <= (s.end - s.off - SEG_HEADER) * 3)
        else {
            return Ok(false);
        };
        // A whole segment where the pool has one (its rest then serves
        // later appends, and the heap keeps to segments of one size), else
        // one just large enough (a pool filled to the last byte).
        let exact = seg.live_bytes + SEG_HEADER;
        for len in [exact.max(SEG_SIZE), exact] {
            match self.start_segment(len, 0) {
                Ok(()) => return self.clean(0, size),
                Err(Error::PoolFull { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Whether dead records fill more than half of the segments' record
    /// space (the active segment's unwritten tail counts as neither).
    fn mostly_dead(&self) -> bool {
        let (mut written, mut live) = (0, 0);
        for (i, s) in self.segments.iter().enumerate() {
            let Some(s) = s else { continue };
            let end = if self.active == Some(i) {
                self.tail
            } else {
                s.end
            };
            written += end - (s.off + SEG_HEADER);
            live += s.live_bytes;
        }
        live * 2 < written
    }

    /// The sealed segment of at least `size` bytes with the fewest live
    /// bytes, if those are at most `room`.
    fn victim(&self, room: u64, size: u64) -> Option<(usize, Segment)> {
        self.segments
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, (*s)?)))
            .filter(|&(i, s)| {
                self.active != Some(i) && s.live_bytes <= room && s.end - s.off >= size
            })
            .min_by_key(|&(_, s)| s.live_bytes)
    }

    /// Moves the live records of the sealed segment of at least `size`
    /// bytes with the fewest live bytes, if they fit in the active segment
    /// beside `keep` bytes (module doc, **clean**), which frees it; returns
    /// whether there was one.
    fn clean(&mut self, keep: u64, size: u64) -> Result<bool> {
        let Some(active) = self.active.and_then(|a| self.segments[a]) else {
            return Ok(false);
        };
        let room = (active.end - self.tail).saturating_sub(keep);
        let Some((v, seg)) = self.victim(room, size) else {
            return Ok(false);
        };
        // The keys whose indexed record is in the segment, in log order.
        let mut keys = Vec::new();
        let mut pos = seg.off + SEG_HEADER;
        // SAFETY: writers hold `&mut self`, and a sealed segment's records
        // are only ever written again by `kill`, which is one of them.
        while let Some(info) = unsafe { record::read(&self.pool, pos, seg.end, seg.nonce)? } {
            if !info.dead {
                // SAFETY: as above.
                let key = unsafe {
                    self.pool
                        .bytes(pos + info.key_offset(), info.key_len as u64)?
                };
                if self.index.get(key).is_some_and(|e| e.rec == pos) {
                    keys.push(key.to_vec());
                }
            }
            pos += info.size();
        }
        for key in keys {
            let old = self.index[&key[..]];
            let value = self.value_of(&old)?.to_vec();
            // Fits: the segment's live bytes fit in `room`.
            let e = self.append(&key, &value)?;
            *self.index.get_mut(&key[..]).expect("indexed") = e;
            // Frees the segment with its last live record.
            self.kill(old)?;
        }
        if self.segments[v].is_some() {
            return Err(Error::corrupt(
                seg.off,
                format!(
                    "pmlog: segment {v} holds live records its log does not show \
                     (its live count is {})",
                    self.segments[v].map_or(0, |s| s.live)
                ),
            ));
        }
        Ok(true)
    }

    /// Starts a new segment of `size` bytes (header included), without
    /// cleaning ([`Self::new_segment`]), if the pool keeps `keep` bytes free
    /// beside it: appends keep a segment's worth, for the segment that
    /// cleaning moves records into ([`Self::make_room`]), which keeps none.
    fn start_segment(&mut self, size: u64, keep: u64) -> Result<()> {
        // An active segment with no live record is freed first, so that its
        // space can serve the new one (a full pool must not refuse a put into
        // an empty index).
        if let Some(o) = self.active {
            if matches!(self.segments[o], Some(s) if s.live == 0) {
                self.active = None;
                self.free_segment(o)?;
            }
        }
        let i = match self.segments.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.segments.len() < DIR_SLOTS => {
                self.segments.push(None);
                self.segments.len() - 1
            }
            None => return Err(Error::PoolFull { requested: size }),
        };
        if keep > 0 && self.pool.free_heap_bytes().0 < size + keep {
            return Err(Error::PoolFull { requested: size });
        }
        let r = self.pool.reserve(size)?;
        let off = r.offset();
        let size = r.size();
        let nonce = nonce();
        let mut hdr = [0u8; SEG_HEADER as usize];
        hdr[..8].copy_from_slice(&SEG_MAGIC.to_le_bytes());
        hdr[8..16].copy_from_slice(&nonce.to_le_bytes());
        // SAFETY: the block is reserved by us and not yet published.
        unsafe { self.pool.write_bytes(off, &hdr)? };
        self.pool.flush(off, SEG_HEADER);
        self.pool.activate(r, dir_slot(self.dir, i))?;
        let old = self.active.replace(i);
        self.segments[i] = Some(Segment {
            off,
            end: off + size,
            nonce,
            live: 0,
            live_bytes: 0,
        });
        self.tail = off + SEG_HEADER;
        if let Some(o) = old {
            if matches!(self.segments[o], Some(s) if s.live == 0) {
                self.free_segment(o)?;
            }
        }
        Ok(())
    }

    /// Appends a record; durable on return (one fence).
    fn append(&mut self, key: &[u8], value: &[u8]) -> Result<Entry> {
        let size = record::record_size(key.len(), value.len());
        let fits = matches!(self.active.and_then(|a| self.segments[a]), Some(s) if self.tail + size <= s.end);
        if !fits {
            self.new_segment(size)?;
        }
        let a = self.active.expect("new_segment sets the active segment");
        let seg = self.segments[a].expect("active segment exists");
        let seq = self.next_seq;
        let bytes = record::encode(seg.nonce, seq, key, value);
        let at = self.tail;
        // SAFETY: the tail of the active segment is not referenced by the
        // index and we hold `&mut self`.
        unsafe { self.pool.write_bytes(at, &bytes)? };
        self.pool.flush(at, bytes.len() as u64);
        if !self.pool.fault(Fault::PmlogSkipAppendFence) {
            self.pool.fence();
        }
        self.next_seq += 1;
        self.tail += size;
        if let Some(s) = self.segments[a].as_mut() {
            s.live += 1;
            s.live_bytes += size;
        }
        Ok(Entry {
            rec: at,
            seg: a as u32,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        })
    }

    /// Sets `DEAD` on a record, durably; frees its segment if that was the
    /// last live record of a sealed segment.
    fn kill(&mut self, e: Entry) -> Result<()> {
        self.pool.fetch_or_u64(e.rec, DEAD)?;
        if !self.pool.fault(Fault::PmlogSkipKillFlush) {
            self.pool.flush(e.rec, 8);
        }
        self.pool.fence();
        let i = e.seg as usize;
        let now_empty = match self.segments[i].as_mut() {
            Some(s) => {
                s.live -= 1;
                s.live_bytes -= e.size();
                s.live == 0
            }
            None => false,
        };
        if now_empty && self.active != Some(i) {
            self.free_segment(i)?;
        }
        Ok(())
    }

    fn value_of(&self, e: &Entry) -> Result<&[u8]> {
        let info = RecordInfo {
            seq: 0,
            dead: false,
            key_len: e.key_len as usize,
            value_len: e.value_len as usize,
        };
        self.pool.touch(e.rec, info.size());
        // SAFETY: a live record's key and value are never written again, and
        // writers hold `&mut self`.
        unsafe {
            self.pool
                .bytes(e.rec + info.value_offset(), u64::from(e.value_len))
        }
    }
}

impl SerialEngine for PmLog {
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

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        match self.index.get(key) {
            Some(e) => {
                f(self.value_of(e)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        let old = self.index.get(key).copied();
        match (mode, old) {
            (PutMode::Insert, Some(_)) | (PutMode::Update, None) => {
                return Ok(PutOutcome::Unchanged)
            }
            _ => {}
        }
        let e = self.append(key, value)?;
        // Read again: a clean during the append may have moved the record.
        match self.index.get(key).copied() {
            Some(o) => {
                *self.index.get_mut(key).expect("present") = e;
                self.kill(o)?;
                Ok(PutOutcome::Replaced)
            }
            None => {
                self.key_bytes += key.len() as u64;
                self.index.insert(key.into(), e);
                Ok(PutOutcome::Inserted)
            }
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let Some(e) = self.index.get(key).copied() else {
            return Ok(false);
        };
        self.kill(e)?;
        self.index.remove(key);
        self.key_bytes -= key.len() as u64;
        Ok(true)
    }

    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        if let (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) =
            (lo, hi)
        {
            // BTreeMap::range panics on an inverted or empty-excluded range.
            if l > h
                || (l == h
                    && !(matches!(lo, Bound::Included(_)) && matches!(hi, Bound::Included(_))))
            {
                return Ok(());
            }
        }
        for (k, e) in self.index.range::<[u8], _>((lo, hi)) {
            if !f(k, self.value_of(e)?) {
                break;
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.index.len() as u64
    }

    fn check(&self) -> Result<CheckReport> {
        let mut live = vec![(0u64, 0u64); self.segments.len()];
        for (k, e) in &self.index {
            let seg = self.segments[e.seg as usize].ok_or_else(|| {
                Error::CheckFailed(format!("key {k:?} points into a missing segment"))
            })?;
            // SAFETY: `&self` excludes writers (they hold `&mut self`).
            let info = unsafe { record::read(&self.pool, e.rec, seg.end, seg.nonce)? }.ok_or_else(
                || Error::CheckFailed(format!("record at {:#x} fails validation", e.rec)),
            )?;
            if info.dead {
                return Err(Error::CheckFailed(format!(
                    "indexed record at {:#x} is dead",
                    e.rec
                )));
            }
            // SAFETY: as above.
            let key = unsafe {
                self.pool
                    .bytes(e.rec + info.key_offset(), info.key_len as u64)?
            };
            if key != &k[..] || info.value_len != e.value_len as usize {
                return Err(Error::CheckFailed(format!(
                    "record at {:#x} holds another key",
                    e.rec
                )));
            }
            let l = &mut live[e.seg as usize];
            l.0 += 1;
            l.1 += e.size();
        }
        let mut blocks = vec![self.dir];
        for i in 0..DIR_SLOTS {
            let on_pm = self.pool.load_u64(dir_slot(self.dir, i))?;
            match self.segments.get(i).copied().flatten() {
                Some(s) => {
                    if on_pm != s.off {
                        return Err(Error::CheckFailed(format!(
                            "directory slot {i} holds {on_pm:#x}, expected {:#x}",
                            s.off
                        )));
                    }
                    let (indexed, bytes) = live.get(i).copied().unwrap_or((0, 0));
                    if s.live != indexed || s.live_bytes != bytes {
                        return Err(Error::CheckFailed(format!(
                            "segment {i}: {} live records of {} bytes, but {indexed} of \
                             {bytes} bytes indexed",
                            s.live, s.live_bytes
                        )));
                    }
                    blocks.push(s.off);
                }
                None if on_pm != 0 => {
                    return Err(Error::CheckFailed(format!(
                        "directory slot {i} holds {on_pm:#x} unknown to the engine"
                    )))
                }
                None => {}
            }
        }
        Ok(CheckReport {
            keys: self.index.len() as u64,
            referenced_blocks: blocks,
        })
    }

    fn dram_bytes(&self) -> u64 {
        // Per entry: the boxed key, the Entry, and B-tree node overhead
        // (about one key pointer + entry per slot in nodes ~2/3 full).
        let per_entry =
            (std::mem::size_of::<Box<[u8]>>() + std::mem::size_of::<Entry>()) as u64 * 3 / 2;
        self.key_bytes
            + self.index.len() as u64 * per_entry
            + (self.segments.len() * std::mem::size_of::<Option<Segment>>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PutMode;

    /// A log of three keys in an anonymous pool; returns it with its pool.
    fn three_keys() -> (Arc<Pool>, PmLog) {
        let pool = Arc::new(Pool::create_anonymous(4 << 20, "pmlog", &Default::default()).unwrap());
        let mut log = PmLog::create(Arc::clone(&pool)).unwrap();
        for k in [b"k1", b"k2", b"k3"] {
            log.put(k, b"value", PutMode::Upsert).unwrap();
        }
        (pool, log)
    }

    /// Damage: a directory slot that names the segment another slot names
    /// is refused, with nothing written. Before, open compared the
    /// segment's records with themselves, killed them as superseded and
    /// freed the segment, so the keys were gone even once the slot was
    /// cleared (found by a helper's fuzzing through the CLI).
    #[test]
    fn a_segment_named_twice_is_refused_unchanged() {
        let (pool, log) = three_keys();
        let dir = log.dir;
        drop(log);
        let seg = pool.load_u64(dir_slot(dir, 0)).unwrap();
        assert_ne!(seg, 0);
        assert_eq!(pool.load_u64(dir_slot(dir, 1)).unwrap(), 0);
        pool.store_u64(dir_slot(dir, 1), seg).unwrap();
        let before = pool.image();
        let e = PmLog::open(Arc::clone(&pool)).err().expect("refused");
        assert!(e.to_string().contains("same segment"), "{e}");
        assert!(pool.image() == before, "a refused open wrote to the pool");
        pool.store_u64(dir_slot(dir, 1), 0).unwrap();
        let log = PmLog::open(pool).unwrap();
        assert_eq!(log.len(), 3);
    }

    /// Damage: a record whose sequence number (with a valid checksum) is
    /// at its limit is refused. Before, the next append got the number
    /// with the `DEAD` bit, reported success, and its record read as dead
    /// (then torn, and zeroed) at the next open.
    #[test]
    fn a_sequence_number_at_its_limit_is_refused() {
        let (pool, log) = three_keys();
        let seg = log.segments[0].expect("the first segment");
        drop(log);
        let at = seg.off + SEG_HEADER;
        let bytes = record::encode(seg.nonce, DEAD - 1, b"k1", b"value");
        // SAFETY: this test's own pool; nothing else uses it.
        unsafe { pool.write_bytes(at, &bytes).unwrap() };
        let e = PmLog::open(pool).err().expect("refused");
        assert!(e.to_string().contains("at its limit"), "{e}");
    }
}
