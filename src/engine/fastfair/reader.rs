//! The lock-free point search: FAST&FAIR's readers take no lock (the
//! paper's "tolerating read inconsistency"). Here they run without the
//! tree's lock under [`crate::engine::Locked`]'s sequence count, which
//! discards any answer a writer overlapped, so a reader need not make
//! sense of a shift in flight; it only has to stay inside the pool and
//! end ([`OptimisticRead`]'s contract): every word is read through
//! [`Pool::words`], every loop is bounded by the levels a tree may have
//! and the slots a node has, and a record's lengths are not trusted.
//!
//! Between two writes it answers as `get_with` does: the same descent
//! (the last entry at or below the key, by head and then by the child's
//! lower bound), the same leaf scan, the same records.

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use super::node;
use super::superblock;
use crate::engine::fptree::inner::head;
use crate::engine::fptree::record;
use crate::engine::{OptimisticRead, Probe, ValueBuf};
use crate::error::{Error, Result};
use crate::pm::{Pool, Words};

/// The tree's lock-free reader.
pub(super) struct Reader {
    pub pool: Arc<Pool>,
    pub sb: u64,
    pub slots: u32,
}

/// The key of the record at `rec` against `key`, word by word; and the
/// record's key and value lengths. Lengths past a record's are not
/// trusted: the loads stay in the pool, and the caller bounds what it
/// copies.
fn compare(pm: Words<'_>, rec: u64, key: &[u8]) -> Result<(Ordering, u64, u64)> {
    let lens = pm.load(rec)?;
    let (k, v) = (lens & 0xFFFF, (lens >> 16) & 0xFFFF_FFFF);
    let common = (k as usize).min(key.len());
    let mut i = 0;
    while i < common {
        let w = pm
            .load(rec.wrapping_add(record::HEADER + i as u64))?
            .to_le_bytes();
        let n = (common - i).min(8);
        match w[..n].cmp(&key[i..i + n]) {
            Ordering::Equal => {}
            o => return Ok((o, k, v)),
        }
        i += 8;
    }
    Ok(((k as usize).cmp(&key.len()), k, v))
}

/// Copies the `v` bytes of value at `start` into `buf` a word at a time;
/// `None` if they do not fit.
fn copy(pm: Words<'_>, start: u64, v: u64, buf: &mut ValueBuf) -> Result<Option<Range<usize>>> {
    let mut at = start & !7;
    let end = start.wrapping_add(v);
    if end < start {
        return Ok(None);
    }
    let skip = (start - at) as usize;
    if !buf.fits((end - at).div_ceil(8)) {
        return Ok(None);
    }
    buf.clear();
    while at < end {
        buf.push(pm.load(at)?);
        at += 8;
    }
    Ok(Some(skip..skip + v as usize))
}

/// Entry `i`'s head in `n`, a node offset that may be anything: wrapping,
/// so that a pointer read from a torn state cannot overflow (the load
/// checks the pool's bounds).
fn entry(n: u64, i: u32) -> u64 {
    n.wrapping_add(node::ENTRY0 + node::ENTRY * u64::from(i))
}

impl OptimisticRead for Reader {
    /// Counts the PM lines read only for an answer (`Absent` or `Found`):
    /// a key that falls back to the lock is searched and counted there.
    fn get_into(&self, key: &[u8], buf: &mut ValueBuf) -> Result<Probe> {
        let pm = self.pool.words();
        let kh = head(key);
        let mut n = pm.load(self.sb + superblock::ROOT)?;
        if n == 0 {
            return Ok(Probe::Absent);
        }
        let mut lines = 0u64;
        let mut depth = 0;
        loop {
            lines += 1;
            if pm.load(n.wrapping_add(node::LEVEL))? == 0 {
                break;
            }
            depth += 1;
            if depth > node::MAX_LEVEL {
                return Err(Error::corrupt(n, "fastfair: a path deeper than any tree"));
            }
            let mut child = pm.load(n.wrapping_add(node::LEFTMOST))?;
            let mut i = 0;
            while i < self.slots {
                let p = pm.load(entry(n, i).wrapping_add(8))?;
                if p == 0 {
                    break;
                }
                let eh = pm.load(entry(n, i))?;
                if eh > kh {
                    break;
                }
                if eh == kh {
                    let low = pm.load(p.wrapping_add(node::LOW))?;
                    lines += 2;
                    if low == 0 || compare(pm, low, key)?.0 == Ordering::Greater {
                        break;
                    }
                }
                child = p;
                i += 1;
            }
            lines += node::ENTRY * u64::from((i + 1).min(self.slots)) / 64 + 1;
            n = child;
        }
        let mut i = 0;
        while i < self.slots {
            let p = pm.load(entry(n, i).wrapping_add(8))?;
            if p == 0 {
                break;
            }
            let eh = pm.load(entry(n, i))?;
            if eh > kh {
                break;
            }
            if eh == kh {
                let (o, k, v) = compare(pm, p, key)?;
                lines += 1;
                match o {
                    Ordering::Less => {}
                    Ordering::Greater => break,
                    Ordering::Equal => {
                        let Some(r) = copy(pm, p.wrapping_add(record::HEADER + k), v, buf)? else {
                            return Ok(Probe::TooLong);
                        };
                        lines += node::ENTRY * u64::from(i + 1) / 64 + 1;
                        self.pool.touch_lines(lines);
                        return Ok(Probe::Found(r));
                    }
                }
            }
            i += 1;
        }
        lines += node::ENTRY * u64::from((i + 1).min(self.slots)) / 64 + 1;
        self.pool.touch_lines(lines);
        Ok(Probe::Absent)
    }
}
