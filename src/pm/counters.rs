//! Per-thread PM counters, summed on demand.
//!
//! Each thread that touches a pool gets its own block of counters; it is the
//! only writer of that block, so an increment is a plain load and store (no
//! locked instruction). [`snapshot`] sums the blocks of all live threads plus
//! what exited threads left behind. The counters are process-wide, not per
//! pool: take a snapshot before and after a piece of work and subtract.

use std::cell::Cell;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A sum of the PM counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PmCounters {
    /// Cache lines flushed (clwb / clflushopt / clflush). Zero in eADR mode.
    pub flushes: u64,
    /// Fences (sfence) issued.
    pub fences: u64,
    /// Bytes in the ranges passed to `persist` / `flush`.
    pub bytes_persisted: u64,
    /// PM cache lines that engines reported reading.
    pub lines_read: u64,
}

impl Sub for PmCounters {
    type Output = PmCounters;
    fn sub(self, o: PmCounters) -> PmCounters {
        PmCounters {
            flushes: self.flushes.wrapping_sub(o.flushes),
            fences: self.fences.wrapping_sub(o.fences),
            bytes_persisted: self.bytes_persisted.wrapping_sub(o.bytes_persisted),
            lines_read: self.lines_read.wrapping_sub(o.lines_read),
        }
    }
}

#[derive(Default)]
struct Block {
    flushes: AtomicU64,
    fences: AtomicU64,
    bytes: AtomicU64,
    lines_read: AtomicU64,
}

impl Block {
    fn read(&self) -> PmCounters {
        PmCounters {
            flushes: self.flushes.load(Ordering::Relaxed),
            fences: self.fences.load(Ordering::Relaxed),
            bytes_persisted: self.bytes.load(Ordering::Relaxed),
            lines_read: self.lines_read.load(Ordering::Relaxed),
        }
    }
}

struct Registry {
    /// Blocks of live threads.
    live: Vec<&'static Block>,
    /// Blocks of exited threads, zeroed, for the next thread to register.
    spare: Vec<&'static Block>,
    retired: PmCounters,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    spare: Vec::new(),
    retired: PmCounters {
        flushes: 0,
        fences: 0,
        bytes_persisted: 0,
        lines_read: 0,
    },
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    // A panic while holding this lock cannot leave the counters inconsistent
    // in a way that matters (they are statistics), so take the data anyway.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

// # Thread-local access
// A count is one load of `FAST` (a const-initialised cell with no
// destructor: one thread-pointer-relative load, no lazy-init check) and a
// plain add. Blocks are never freed: an exiting thread's block is folded
// into `retired`, zeroed and kept in `spare` for the next thread, so there
// are as many blocks as threads ever ran at once, and `FAST` can hold a
// `&'static` without `unsafe`. `LOCAL` exists only for its destructor,
// which retires the block at thread exit and clears `FAST` first; a count
// made after that (by another thread-local's destructor) is dropped, as
// before.
thread_local! {
    static FAST: Cell<Option<&'static Block>> = const { Cell::new(None) };
    static LOCAL: Local = Local::register();
}

struct Local(&'static Block);

impl Registry {
    /// A block for a new thread: a spare one (zeroed) or a new one.
    fn take(&mut self) -> &'static Block {
        let b = match self.spare.pop() {
            Some(b) => b,
            None => Box::leak(Box::default()),
        };
        self.live.push(b);
        b
    }

    /// An exiting thread's block: its counts go to `retired`, and the
    /// block, zeroed, to `spare`.
    fn retire(&mut self, b: &'static Block) {
        let c = b.read();
        self.retired.flushes += c.flushes;
        self.retired.fences += c.fences;
        self.retired.bytes_persisted += c.bytes_persisted;
        self.retired.lines_read += c.lines_read;
        self.live.retain(|l| !std::ptr::eq(*l, b));
        // Under the lock, out of `live`: no snapshot sees the zeroing.
        for c in [&b.flushes, &b.fences, &b.bytes, &b.lines_read] {
            c.store(0, Ordering::Relaxed);
        }
        self.spare.push(b);
    }
}

impl Local {
    fn register() -> Local {
        Local(registry().take())
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        FAST.set(None);
        registry().retire(self.0);
    }
}

#[inline(always)]
fn bump(f: impl Fn(&Block)) {
    match FAST.get() {
        Some(b) => f(b),
        None => bump_slow(f),
    }
}

/// The first count of a thread: registers its block.
#[cold]
#[inline(never)]
fn bump_slow(f: impl Fn(&Block)) {
    // `try_with` fails only during thread teardown; counting is then skipped.
    let _ = LOCAL.try_with(|l| {
        FAST.set(Some(l.0));
        f(l.0)
    });
}

#[inline(always)]
fn add(c: &AtomicU64, n: u64) {
    // Single writer: a plain load and store, no locked instruction.
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[inline]
pub(crate) fn count_flush(lines: u64, bytes: u64) {
    bump(|b| {
        add(&b.flushes, lines);
        add(&b.bytes, bytes);
    });
}

#[inline]
pub(crate) fn count_fence() {
    bump(|b| add(&b.fences, 1));
}

#[inline]
pub(crate) fn count_read(lines: u64) {
    bump(|b| add(&b.lines_read, lines));
}

/// The calling thread's own counters since it started: exact for the work
/// of this thread while other threads touch pools too (tests that count one
/// operation's PM traffic while other tests run). [`snapshot`] is the sum
/// over all threads.
pub fn this_thread() -> PmCounters {
    let out = std::cell::Cell::new(PmCounters::default());
    bump(|b| out.set(b.read()));
    out.get()
}

/// The sum of every thread's counters since the process started.
pub fn snapshot() -> PmCounters {
    let r = registry();
    let mut s = r.retired;
    for b in &r.live {
        let c = b.read();
        s.flushes += c.flushes;
        s.fences += c.fences;
        s.bytes_persisted += c.bytes_persisted;
        s.lines_read += c.lines_read;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_threads_that_exited_are_kept() {
        let before = snapshot();
        std::thread::spawn(|| {
            count_flush(3, 100);
            count_fence();
            count_read(5);
        })
        .join()
        .unwrap();
        let d = snapshot() - before;
        // Other tests may run concurrently and add to the counters.
        assert!(d.flushes >= 3 && d.fences >= 1 && d.lines_read >= 5);
        assert!(d.bytes_persisted >= 100);
    }

    #[test]
    fn a_retired_block_is_reused_zeroed_and_its_counts_kept() {
        // Under one hold of the lock, so that no other thread takes the
        // spare block in between.
        let mut r = registry();
        let before = r.retired;
        let b = r.take();
        add(&b.lines_read, 7);
        add(&b.flushes, 2);
        r.retire(b);
        assert_eq!(r.retired.lines_read, before.lines_read + 7);
        assert_eq!(r.retired.flushes, before.flushes + 2);
        assert!(!r.live.iter().any(|l| std::ptr::eq(*l, b)));
        let again = r.take();
        assert!(std::ptr::eq(again, b), "the spare block is reused");
        assert_eq!(again.read(), PmCounters::default());
        r.retire(again);
        assert_eq!(r.retired.lines_read, before.lines_read + 7);
    }

    #[test]
    fn a_new_thread_counts_from_zero() {
        let (start, end) = std::thread::spawn(|| {
            let start = this_thread();
            count_read(7);
            count_flush(2, 64);
            (start, this_thread())
        })
        .join()
        .unwrap();
        assert_eq!(start, PmCounters::default());
        assert_eq!(
            (end.lines_read, end.flushes, end.bytes_persisted),
            (7, 2, 64)
        );
    }
}
