//! Recording what a pool does to PM: every store, flush and fence, in
//! program order.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::pm::PmObserver;

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
    /// The cache line at this offset was flushed.
    Flush(u64),
    /// A fence.
    Fence,
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
    /// The bytes of a store event.
    pub fn bytes(&self, at: usize, len: usize) -> &[u8] {
        &self.data[at..at + len]
    }
}

/// A [`PmObserver`] that records a [`Trace`]. Install it in a pool through
/// `PoolConfig::observer` / `Options::observer`. The crash simulator assumes
/// one thread issues the events (the harness runs its workload on one thread).
#[derive(Debug, Default)]
pub struct Recorder {
    trace: Mutex<Trace>,
    paused: AtomicBool,
}

impl Recorder {
    /// A new, empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of events recorded so far: the crash point "now".
    pub fn position(&self) -> usize {
        self.trace.lock().events.len()
    }

    /// Stops or resumes recording.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Takes the trace recorded so far, leaving an empty one.
    pub fn take(&self) -> Trace {
        std::mem::take(&mut *self.trace.lock())
    }

    fn push(&self, e: Event) {
        if !self.paused.load(Ordering::Relaxed) {
            self.trace.lock().events.push(e);
        }
    }
}

impl PmObserver for Recorder {
    fn store(&self, offset: u64, bytes: &[u8]) {
        if self.paused.load(Ordering::Relaxed) {
            return;
        }
        let mut t = self.trace.lock();
        let at = t.data.len();
        t.data.extend_from_slice(bytes);
        t.events.push(Event::Store {
            off: offset,
            at,
            len: bytes.len(),
        });
    }
    fn flush(&self, line: u64) {
        self.push(Event::Flush(line));
    }
    fn fence(&self) {
        self.push(Event::Fence);
    }
}
