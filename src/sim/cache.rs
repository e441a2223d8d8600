//! The cache model: what a power failure can leave in PM.
//!
//! The model (x86-TSO, a volatile write-back cache, 8-byte failure-atomic
//! stores), event by event:
//! - a **store** joins the pending list of each cache line it touches, as one
//!   *unit* per line, split into *pieces* at 8-byte boundaries;
//! - a **flush** of a line by thread `t` marks every unit pending on it so
//!   far, whoever stored it, as flushed by `t` (the line is written back
//!   whole);
//! - a **fence** by thread `t` makes every unit flushed by `t` certainly
//!   durable: it is applied to the durable image and leaves the pending
//!   list. Units that only other threads flushed stay pending until one of
//!   those threads fences (`sfence` orders only its own thread's `clwb`s).
//!   With one thread this is the plain rule: a fence makes the flushed
//!   units durable.
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

use super::trace::{Event, ThreadIndex, Trace};
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
    /// Per thread that flushed this line since its last fence: how many of
    /// `units` (from the front) its last flush covered.
    flushed: Vec<(ThreadIndex, usize)>,
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
    /// Per thread: the lines it flushed since its last fence (a line may
    /// be listed twice; the second finds nothing left to do).
    flushed_lines: Vec<Vec<u64>>,
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
            Event::Flush(line, t) => {
                if let Some(ls) = self.lines.get_mut(&line) {
                    let n = ls.units.len();
                    match ls.flushed.iter_mut().find(|(ft, _)| *ft == t) {
                        Some((_, covered)) => *covered = n,
                        None => {
                            ls.flushed.push((t, n));
                            let t = t as usize;
                            if self.flushed_lines.len() <= t {
                                self.flushed_lines.resize_with(t + 1, Vec::new);
                            }
                            self.flushed_lines[t].push(line);
                        }
                    }
                }
            }
            Event::Fence(t) => {
                self.epoch += 1;
                let Some(mine) = self.flushed_lines.get_mut(t as usize) else {
                    return;
                };
                for line in std::mem::take(mine) {
                    let Some(ls) = self.lines.get_mut(&line) else {
                        continue;
                    };
                    let Some(i) = ls.flushed.iter().position(|(ft, _)| *ft == t) else {
                        continue;
                    };
                    let (_, n) = ls.flushed.swap_remove(i);
                    for u in ls.units.drain(..n) {
                        for p in &u.pieces {
                            let o = p.off as usize;
                            self.durable[o..o + p.len as usize]
                                .copy_from_slice(&p.bytes[..p.len as usize]);
                        }
                    }
                    // Other threads' flushes covered a prefix of the same
                    // units; what is left of it for them.
                    for (_, covered) in &mut ls.flushed {
                        *covered = covered.saturating_sub(n);
                    }
                    ls.flushed.retain(|&(_, covered)| covered > 0);
                    if ls.units.is_empty() {
                        self.lines.remove(&line);
                    }
                }
            }
        }
    }

    /// Lines that a thread flushed and has not fenced since, with pending
    /// units its flush covered: `(thread, line)`, in line order. At the end
    /// of a thread's work there should be none: only its own fence makes
    /// its flushes durable, and nothing after it will.
    pub fn unfenced(&self) -> Vec<(ThreadIndex, u64)> {
        let mut out: Vec<(ThreadIndex, u64)> = self
            .lines
            .iter()
            .flat_map(|(&line, ls)| ls.flushed.iter().map(move |&(t, _)| (t, line)))
            .collect();
        out.sort_unstable_by_key(|&(t, line)| (line, t));
        out
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
        m.apply(&t, &Event::Fence(0)); // fence without flush: still pending
        assert_eq!(m.image_durable().0[0], 0);
        m.apply(&t, &Event::Flush(0, 0));
        assert_eq!(m.image_durable().0[0], 0); // flushed, not fenced
        m.apply(&t, &Event::Fence(0));
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
        m.apply(&t, &Event::Flush(0, 0));
        m.apply(&t, &b);
        m.apply(&t, &Event::Fence(0));
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
        m.apply(&t, &Event::Flush(0, 0));
        m.apply(&t, &Event::Fence(0));
        let d = m.image_durable().0;
        assert_eq!((d[60], d[64]), (9, 0));
    }

    #[test]
    fn a_fence_makes_durable_only_what_its_own_thread_flushed() {
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 192], false);
        let a = store(&mut t, 0, &[1; 8]);
        let b = store(&mut t, 64, &[2; 8]);
        m.apply(&t, &a);
        m.apply(&t, &b);
        m.apply(&t, &Event::Flush(0, 0));
        m.apply(&t, &Event::Flush(64, 1));
        m.apply(&t, &Event::Fence(1));
        let d = m.image_durable().0;
        assert_eq!((d[0], d[64]), (0, 2), "thread 1's fence: its line only");
        m.apply(&t, &Event::Fence(0));
        assert_eq!(m.image_durable().0[0], 1);
        assert_eq!(m.pending_lines(), 0);
    }

    #[test]
    fn a_flush_covers_every_thread_s_earlier_stores_on_the_line() {
        // Thread 0 stores at 0 and never flushes; thread 1 stores at 8 on
        // the same line, flushes it and fences: the line went back whole.
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 128], false);
        let a = store(&mut t, 0, &[1; 8]);
        let b = store(&mut t, 8, &[2; 8]);
        let c = store(&mut t, 16, &[3; 8]);
        m.apply(&t, &a);
        m.apply(&t, &b);
        m.apply(&t, &Event::Flush(0, 1));
        m.apply(&t, &Event::Flush(0, 0));
        m.apply(&t, &c); // after both flushes
        m.apply(&t, &Event::Fence(1));
        let d = m.image_durable().0;
        assert_eq!((d[0], d[8], d[16]), (1, 2, 0));
        // Thread 0's flush covered the same two units: nothing is left
        // for its fence, and the later store stays pending.
        m.apply(&t, &Event::Fence(0));
        assert_eq!(m.image_durable().0[16], 0);
        assert_eq!(m.pending_lines(), 1);
    }

    #[test]
    fn a_later_flush_by_another_thread_outlives_an_earlier_fence() {
        // Thread 0 flushes the first unit, thread 1 the first two; thread
        // 0's fence makes the first durable, and thread 1's the second.
        let mut t = Trace::default();
        let mut m = CacheModel::new(vec![0; 128], false);
        let a = store(&mut t, 0, &[1; 8]);
        let b = store(&mut t, 8, &[2; 8]);
        m.apply(&t, &a);
        m.apply(&t, &Event::Flush(0, 0));
        m.apply(&t, &b);
        m.apply(&t, &Event::Flush(0, 1));
        m.apply(&t, &Event::Fence(0));
        let d = m.image_durable().0;
        assert_eq!((d[0], d[8]), (1, 0));
        m.apply(&t, &Event::Fence(1));
        assert_eq!(m.image_durable().0[8], 2);
        assert_eq!(m.pending_lines(), 0);
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
