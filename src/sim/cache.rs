//! The cache model: what a power failure can leave in PM.
//!
//! The model (x86-TSO, a volatile write-back cache, 8-byte failure-atomic
//! stores), event by event:
//! - a **store** joins the pending list of each cache line it touches, as one
//!   *unit* per line, split into *pieces* at 8-byte boundaries;
//! - a **flush** of a line marks every unit pending on it so far as flushed;
//! - a **fence** makes every flushed unit certainly durable: it is applied to
//!   the durable image and leaves the pending list.
//!
//! At a crash, each line independently holds its durable content plus a
//! prefix, in program order, of its pending units (the cache may have evicted
//! the line at any moment, and a line is written back whole, so what reaches
//! PM is a prefix). The unit after the prefix may additionally be *torn*: any
//! subset of its 8-byte pieces (a store wider than 8 bytes is not
//! failure-atomic). An aligned 8-byte store is one piece, so it never tears.
//!
//! In **eADR** mode the caches are drained at power loss: every store made
//! before the crash point survives, so there is exactly one image per crash
//! point.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use rand::Rng;

use super::trace::{Event, Trace};
use crate::pm::CACHE_LINE;

#[derive(Debug, Clone, Copy)]
struct Piece {
    off: u64,
    len: u8,
    bytes: [u8; 8],
}

#[derive(Debug, Clone, Default)]
struct Unit {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, Default)]
struct LineState {
    units: Vec<Unit>,
    flushed: usize,
}

/// What survives of one pending line at a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineChoice {
    /// Number of whole pending units that survive, in program order.
    pub prefix: usize,
    /// Which pieces of the unit after the prefix survive (bit `i` = piece `i`).
    pub tear: u64,
}

/// The state of PM and the cache after a prefix of a trace.
#[derive(Debug, Clone)]
pub struct CacheModel {
    durable: Vec<u8>,
    lines: HashMap<u64, LineState>,
    flushed_lines: Vec<u64>,
    eadr: bool,
    epoch: u64,
}

impl CacheModel {
    /// A model whose PM holds `base` and whose cache is clean.
    pub fn new(base: Vec<u8>, eadr: bool) -> Self {
        CacheModel {
            durable: base,
            lines: HashMap::new(),
            flushed_lines: Vec::new(),
            eadr,
            epoch: 0,
        }
    }

    /// Number of fences applied so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What is certainly durable now.
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Number of lines with pending (not certainly durable) stores.
    pub fn pending_lines(&self) -> usize {
        self.lines.len()
    }

    /// Advances the model by one event of `trace`.
    pub fn apply(&mut self, trace: &Trace, e: &Event) {
        match *e {
            Event::Store { off, at, len } => {
                let bytes = trace.bytes(at, len);
                if self.eadr {
                    self.durable[off as usize..off as usize + len].copy_from_slice(bytes);
                    return;
                }
                let mut pos = 0usize;
                while pos < len {
                    let a = off + pos as u64;
                    let line = a & !(CACHE_LINE - 1);
                    let line_end = ((line + CACHE_LINE) - off) as usize;
                    let end = len.min(line_end);
                    let mut unit = Unit::default();
                    let mut p = pos;
                    while p < end {
                        let pa = off + p as u64;
                        let word_end = (((pa & !7) + 8) - off) as usize;
                        let q = end.min(word_end);
                        let mut b = [0u8; 8];
                        b[..q - p].copy_from_slice(&bytes[p..q]);
                        unit.pieces.push(Piece {
                            off: pa,
                            len: (q - p) as u8,
                            bytes: b,
                        });
                        p = q;
                    }
                    self.lines.entry(line).or_default().units.push(unit);
                    pos = end;
                }
            }
            Event::Flush(line) => {
                if let Some(ls) = self.lines.get_mut(&line) {
                    if ls.flushed == 0 {
                        self.flushed_lines.push(line);
                    }
                    ls.flushed = ls.units.len();
                }
            }
            Event::Fence => {
                self.epoch += 1;
                for line in std::mem::take(&mut self.flushed_lines) {
                    let Some(ls) = self.lines.get_mut(&line) else {
                        continue;
                    };
                    let n = ls.flushed;
                    for u in ls.units.drain(..n) {
                        for p in &u.pieces {
                            let o = p.off as usize;
                            self.durable[o..o + p.len as usize]
                                .copy_from_slice(&p.bytes[..p.len as usize]);
                        }
                    }
                    ls.flushed = 0;
                    if ls.units.is_empty() {
                        self.lines.remove(&line);
                    }
                }
            }
        }
    }

    /// Builds the crash image where each pending line keeps what `choose`
    /// says, and a hash that identifies the image among all images of this
    /// epoch (lines equal to the durable image do not contribute).
    pub fn image(&self, mut choose: impl FnMut(u64, usize, usize) -> LineChoice) -> (Vec<u8>, u64) {
        let mut img = self.durable.clone();
        let mut lines: Vec<&u64> = self.lines.keys().collect();
        lines.sort_unstable();
        let mut h = DefaultHasher::new();
        self.epoch.hash(&mut h);
        for &line in lines {
            let ls = &self.lines[&line];
            let next_pieces = ls.units.first().map_or(0, |u| u.pieces.len());
            let c = choose(line, ls.units.len(), next_pieces);
            let prefix = c.prefix.min(ls.units.len());
            for u in &ls.units[..prefix] {
                for p in &u.pieces {
                    let o = p.off as usize;
                    img[o..o + p.len as usize].copy_from_slice(&p.bytes[..p.len as usize]);
                }
            }
            if let Some(u) = ls.units.get(prefix) {
                for (i, p) in u.pieces.iter().enumerate() {
                    if i < 64 && c.tear & (1 << i) != 0 {
                        let o = p.off as usize;
                        img[o..o + p.len as usize].copy_from_slice(&p.bytes[..p.len as usize]);
                    }
                }
            }
            let l = line as usize;
            let got = &img[l..l + CACHE_LINE as usize];
            if got != &self.durable[l..l + CACHE_LINE as usize] {
                line.hash(&mut h);
                got.hash(&mut h);
            }
        }
        (img, h.finish())
    }

    /// The image where every pending store survived.
    pub fn image_all(&self) -> (Vec<u8>, u64) {
        self.image(|_, n, _| LineChoice { prefix: n, tear: 0 })
    }

    /// The image where only certainly-durable stores survived.
    pub fn image_durable(&self) -> (Vec<u8>, u64) {
        self.image(|_, _, _| LineChoice { prefix: 0, tear: 0 })
    }

    /// A random image: each line keeps a uniformly chosen prefix of its
    /// pending units; one time in four the next unit is torn at random.
    pub fn image_random(&self, rng: &mut impl Rng) -> (Vec<u8>, u64) {
        self.image(|_, n, next_pieces| {
            let prefix = rng.gen_range(0..=n);
            let tear = if prefix < n && next_pieces > 1 && rng.gen_ratio(1, 4) {
                rng.gen::<u64>() & (u64::MAX >> (64 - next_pieces.min(64)))
            } else {
                0
            };
            LineChoice { prefix, tear }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(t: &mut Trace, off: u64, bytes: &[u8]) -> Event {
        let at = t.data.len();
        t.data.extend_from_slice(bytes);
        Event::Store {
            off,
            at,
            len: bytes.len(),
        }
    }

    #[test]
    fn flush_then_fence_makes_durable_and_nothing_else_does() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 256], false);
        let s = store(&mut t, 0, &[1; 8]);
        m.apply(&t, &s);
        assert_eq!(m.image_durable().0[0], 0);
        assert_eq!(m.image_all().0[0], 1);
        m.apply(&t, &Event::Fence); // fence without flush: still pending
        assert_eq!(m.image_durable().0[0], 0);
        m.apply(&t, &Event::Flush(0));
        assert_eq!(m.image_durable().0[0], 0); // flushed, not fenced
        m.apply(&t, &Event::Fence);
        assert_eq!(m.image_durable().0[0], 1);
        assert_eq!(m.pending_lines(), 0);
    }

    #[test]
    fn stores_after_the_flush_stay_pending() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 128], false);
        let a = store(&mut t, 0, &[1; 8]);
        let b = store(&mut t, 8, &[2; 8]);
        m.apply(&t, &a);
        m.apply(&t, &Event::Flush(0));
        m.apply(&t, &b);
        m.apply(&t, &Event::Fence);
        let d = m.image_durable().0;
        assert_eq!((d[0], d[8]), (1, 0));
        assert_eq!(m.image_all().0[8], 2);
    }

    #[test]
    fn lines_keep_program_order_prefixes_and_wide_stores_tear() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 128], false);
        let a = store(&mut t, 0, &[1; 16]); // two pieces
        let b = store(&mut t, 16, &[2; 8]);
        m.apply(&t, &a);
        m.apply(&t, &b);
        let (img, _) = m.image(|_, _, _| LineChoice { prefix: 1, tear: 0 });
        assert_eq!((img[0], img[8], img[16]), (1, 1, 0));
        let (img, _) = m.image(|_, _, _| LineChoice {
            prefix: 0,
            tear: 0b10,
        });
        assert_eq!((img[0], img[8], img[16]), (0, 1, 0));
    }

    #[test]
    fn stores_split_across_lines() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 192], false);
        let a = store(&mut t, 60, &[9; 8]);
        m.apply(&t, &a);
        assert_eq!(m.pending_lines(), 2);
        m.apply(&t, &Event::Flush(0));
        m.apply(&t, &Event::Fence);
        let d = m.image_durable().0;
        assert_eq!((d[60], d[64]), (9, 0));
    }

    #[test]
    fn eadr_keeps_every_store() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 64], true);
        let a = store(&mut t, 0, &[3; 8]);
        m.apply(&t, &a);
        assert_eq!(m.image_durable().0[0], 3);
    }

    #[test]
    fn identical_images_hash_alike_and_different_ones_differ() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 128], false);
        let a = store(&mut t, 0, &[0; 8]); // stores what is already there
        m.apply(&t, &a);
        assert_eq!(m.image_all().1, m.image_durable().1);
        let b = store(&mut t, 64, &[1; 8]);
        m.apply(&t, &b);
        assert_ne!(m.image_all().1, m.image_durable().1);
    }
}
