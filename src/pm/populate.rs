//! Maps fresh heap ahead of its use, on a thread of the pool's own.
//!
//! The first store into a page of a mapping takes a page fault (about a
//! microsecond here). The allocator used to map each MiB the heap frontier
//! opened in one `madvise(MADV_POPULATE_WRITE)` call made by the thread
//! that reserved (docs/design.md §4, "Heap frontier"): about 300 µs, once
//! per MiB of fresh heap, inside whatever lock the engine held around its
//! reservation (a radix tree's heap mutex, a HART stripe's list mutex).
//! Now the allocator hands the range to this thread and goes on; the
//! thread maps it, and the one after it, while the engines work, at the
//! lowest ordinary priority, so mostly on a CPU that has nothing else to
//! run. A page an engine reaches first faults as it would without any of
//! this.
//!
//! Populating writes nothing: no byte of the pool changes, so nothing here
//! touches PM contents, the counters or the crash simulator.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes mapped per `madvise` call by the thread.
const PIECE: u64 = 64 << 10;

/// What the thread is asked to do.
enum Request {
    /// Map `off..off + len` of the mapping.
    Map(u64, u64),
    /// Answer once every earlier request is done.
    #[cfg(test)]
    Idle(std::sync::mpsc::SyncSender<()>),
}

/// The mapping's base address, sent to the thread.
struct Base(NonNull<u8>);

// SAFETY: the thread only passes addresses inside the mapping to `madvise`
// and never dereferences them; the owning `Pool` joins the thread (drops
// its `Populator`) before it unmaps the mapping (field order in `Pool`).
unsafe impl Send for Base {}

/// The thread and the way to reach it; dropping it stops the thread after
/// the piece it is mapping, and waits for it to end.
pub(crate) struct Populator {
    tx: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    /// Set when the pool closes: the thread drops what is left to map.
    stop: Arc<AtomicBool>,
}

impl Populator {
    /// A thread that maps ranges of the mapping at `base` (`len` bytes), or
    /// `None` if the system refuses the thread.
    pub(crate) fn start(base: NonNull<u8>, len: usize) -> Option<Populator> {
        let (tx, rx) = channel::<Request>();
        let base = Base(base);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("pmindex-populate".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let base = base;
                low_priority();
                while let Ok(req) = rx.recv() {
                    match req {
                        Request::Map(off, n) => {
                            // A piece at a time (about 20 µs of CPU each):
                            // the call holds the process's memory-map lock
                            // for reading, so that a writer of it (a thread
                            // growing its heap) waits for one piece, and a
                            // closing pool for one piece (in CPU time: a
                            // preempted piece takes longer).
                            let end = off.saturating_add(n).min(len as u64);
                            let mut at = off;
                            while at < end && !stopped.load(Ordering::Relaxed) {
                                let step = (end - at).min(PIECE);
                                map(&base, len, at, step);
                                at += step;
                            }
                        }
                        #[cfg(test)]
                        Request::Idle(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })
            .ok()?;
        Some(Populator {
            tx: Some(tx),
            thread: Some(thread),
            stop,
        })
    }

    /// Asks for `off..off + len` to be mapped, without waiting; false if
    /// the thread is gone (it ended after a panic): nothing was asked.
    pub(crate) fn request(&self, off: u64, len: u64) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| tx.send(Request::Map(off, len)).is_ok())
    }

    /// Waits until every request made before is done (for tests).
    #[cfg(test)]
    pub(crate) fn wait_idle(&self) {
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        if let Some(tx) = &self.tx {
            if tx.send(Request::Idle(done_tx)).is_ok() {
                let _ = done_rx.recv();
            }
        }
    }
}

impl Drop for Populator {
    fn drop(&mut self) {
        // The thread stops within one piece, and closing the channel ends
        // its loop: a pool that closes does not wait for pages it will not
        // use.
        self.stop.store(true, Ordering::Relaxed);
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Gives the calling thread the lowest priority of the ordinary class
/// (nice 19): it takes about 1.5% of a CPU that the engines' threads keep
/// busy, and all of an idle one. Not `SCHED_IDLE`: a thread of that class
/// can wait off the CPU for a long time on a busy machine, and while it
/// is preempted inside `madvise` it holds the memory-map lock that
/// `mmap`, `munmap` and heap growth need (docs/design.md §4, "On a thread
/// of its own"). Best effort.
fn low_priority() {
    // SAFETY: `gettid` has no preconditions; `setpriority` with
    // `PRIO_PROCESS` and a thread id changes that thread's nice value
    // (Linux), here the calling thread's.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Maps the pages of `off..off + n` of the mapping at `base` (`len`
/// bytes) writable now (`madvise` with `MADV_POPULATE_WRITE`). Best
/// effort: a kernel without it (before Linux 5.14) or a failure leaves the
/// pages to fault at their first store.
fn map(base: &Base, len: usize, off: u64, n: u64) {
    const PAGE: u64 = 4096;
    let end = off.saturating_add(n).min(len as u64);
    let start = off - off % PAGE;
    if start >= end {
        return;
    }
    // SAFETY: `start..end` lies inside the mapping (clamped above), which
    // outlives every caller (see `Base`), and `start` is page-aligned (the
    // mapping is); populating page tables changes no byte of memory.
    unsafe {
        libc::madvise(
            base.0.as_ptr().add(start as usize).cast(),
            (end - start) as usize,
            libc::MADV_POPULATE_WRITE,
        )
    };
}

/// [`map`] on the calling thread, for when no populator thread runs.
pub(crate) fn map_now(base: NonNull<u8>, len: usize, off: u64, n: u64) {
    map(&Base(base), len, off, n);
}
