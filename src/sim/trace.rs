//! Recording what a pool does to PM: every store, flush and fence, in the
//! order the recorder saw them. With several threads that is one
//! interleaving of their events; flushes and fences carry the index of the
//! thread that issued them, because a fence orders only its own thread's
//! flushes (docs/design.md §8, "Several writers").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::ThreadId;

use parking_lot::{Mutex, MutexGuard};

use crate::pm::PmObserver;

/// The index of a recorded thread: the order in which threads first
/// recorded an event into one recorder, from 0. (Threads past the
/// 65,535th would share the last index; a crash test records a few dozen.)
pub type ThreadIndex = u16;

/// One PM event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `len` bytes stored at `off`; the bytes are `Trace::data[at..at + len]`.
    Store {
        /// Pool offset.
        off: u64,
        /// Start of the bytes in [`Trace::data`].
        at: usize,
        /// Number of bytes.
        len: usize,
    },
    /// The cache line at this offset was flushed, by this thread.
    Flush(u64, ThreadIndex),
    /// A fence, by this thread: it makes durable what this thread flushed.
    Fence(ThreadIndex),
}

impl Event {
    /// Whether this is a fence (of any thread).
    pub fn is_fence(&self) -> bool {
        matches!(self, Event::Fence(_))
    }
}

/// A recorded sequence of events.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The events, in program order.
    pub events: Vec<Event>,
    /// The bytes of every store, back to back.
    pub data: Vec<u8>,
}

impl Trace {
    /// Appends a store of `bytes` at `off`.
    fn push_store(&mut self, off: u64, bytes: &[u8]) {
        let at = self.data.len();
        self.data.extend_from_slice(bytes);
        self.events.push(Event::Store {
            off,
            at,
            len: bytes.len(),
        });
    }

    /// The bytes of a store event.
    pub fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.data[at..at + len]
    }
}

/// A [`PmObserver`] that records a [`Trace`]. Install it in a pool through
/// `PoolConfig::observer` / `Options::observer`. Any number of threads may
/// record at once: their events are kept in the order they reached the
/// recorder, each flush and fence with its thread's [`ThreadIndex`].
#[derive(Debug, Default)]
pub struct Recorder {
    inner: Mutex<Inner>,
    paused: AtomicBool,
    /// Nanoseconds: the most a thread waits before its fence is recorded
    /// ([`Recorder::delay_fences`]); 0: no wait.
    fence_delay: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    trace: Trace,
    /// Threads that recorded, by index.
    threads: Vec<ThreadId>,
}

impl Inner {
    fn thread_index(&mut self) -> ThreadIndex {
        let me = std::thread::current().id();
        match self.threads.iter().position(|&t| t == me) {
            Some(i) => i.min(ThreadIndex::MAX as usize) as ThreadIndex,
            None => {
                self.threads.push(me);
                (self.threads.len() - 1).min(ThreadIndex::MAX as usize) as ThreadIndex
            }
        }
    }
}

impl Recorder {
    /// A new, empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events recorded so far: the crash point "now".
    pub fn position(&self) -> usize {
        self.inner.lock().trace.events.len()
    }

    /// Stops or resumes recording.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// From now on, each thread waits (spinning) a pseudo-random time of up
    /// to `max` before each of its fences is recorded. Between a thread's
    /// stores and its fence is where another thread may act on what is not
    /// yet durable; with several writers the wait widens that window, so
    /// that the interleavings a slow fence would give (on real PM a fence
    /// waits for the write-backs) are recorded, not only the fast ones.
    pub fn delay_fences(&self, max: std::time::Duration) {
        let ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        self.fence_delay.store(ns, Ordering::Relaxed);
    }

    /// The wait of [`Recorder::delay_fences`], if one is set.
    fn wait_before_fence(&self) {
        let max = self.fence_delay.load(Ordering::Relaxed);
        if max == 0 {
            return;
        }
        thread_local! {
            static STATE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        // A per-thread xorshift, seeded from the thread's address space
        // position so that threads differ.
        let r = STATE.with(|s| {
            let mut x = s.get();
            if x == 0 {
                x = (s as *const _ as u64) | 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x
        });
        let wait = std::time::Duration::from_nanos(r % max);
        let t0 = std::time::Instant::now();
        while t0.elapsed() < wait {
            std::hint::spin_loop();
        }
    }

    /// Takes the trace recorded so far, leaving an empty one.
    pub fn take(&self) -> Trace {
        std::mem::take(&mut self.inner.lock().trace)
    }

    /// Records the event `make` builds from the calling thread's index.
    fn push(&self, make: impl FnOnce(ThreadIndex) -> Event) {
        if !self.paused.load(Ordering::Relaxed) {
            let mut inner = self.inner.lock();
            let t = inner.thread_index();
            inner.trace.events.push(make(t));
            // A thread waiting to record goes next: several writers then
            // interleave event by event instead of one running on while
            // the other sleeps (no cost without a waiter).
            MutexGuard::unlock_fair(inner);
        }
    }
}

impl PmObserver for Recorder {
    fn store(&self, offset: u64, bytes: &[u8]) {
        if self.paused.load(Ordering::Relaxed) {
            return;
        }
        let mut inner = self.inner.lock();
        inner.trace.push_store(offset, bytes);
        MutexGuard::unlock_fair(inner);
    }
    /// Runs the read-modify-write under the recorder's lock: the order of
    /// two threads' read-modify-writes of one word in the trace is the
    /// order in which they took effect.
    fn rmw(&self, offset: u64, op: &mut dyn FnMut() -> u64) {
        if self.paused.load(Ordering::Relaxed) {
            op();
            return;
        }
        let mut inner = self.inner.lock();
        let new = op();
        inner.trace.push_store(offset, &new.to_le_bytes());
        MutexGuard::unlock_fair(inner);
    }
    fn flush(&self, line: u64) {
        self.push(|t| Event::Flush(line, t));
    }
    fn fence(&self) {
        if !self.paused.load(Ordering::Relaxed) {
            self.wait_before_fence();
        }
        self.push(Event::Fence);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_fences_wait_and_are_still_recorded() {
        let rec = Recorder::new();
        rec.delay_fences(std::time::Duration::from_millis(2));
        let t0 = std::time::Instant::now();
        for _ in 0..50 {
            rec.fence();
        }
        // 50 waits of up to 2 ms, about 50 ms in all; far more than 5 ms
        // unless the waits are skipped.
        assert!(t0.elapsed() >= std::time::Duration::from_millis(5));
        assert_eq!(rec.take().events, vec![Event::Fence(0); 50]);
        // Paused: neither recorded nor delayed.
        rec.set_paused(true);
        let t0 = std::time::Instant::now();
        rec.fence();
        assert!(rec.take().events.is_empty());
        assert!(t0.elapsed() < std::time::Duration::from_millis(500));
    }

    #[test]
    fn each_thread_s_flushes_and_fences_carry_its_own_index() {
        let rec = Recorder::new();
        rec.flush(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                rec.flush(64);
                rec.fence();
            });
        });
        rec.fence();
        let t = rec.take();
        assert_eq!(
            t.events,
            vec![
                Event::Flush(0, 0),
                Event::Flush(64, 1),
                Event::Fence(1),
                Event::Fence(0)
            ]
        );
    }
}
