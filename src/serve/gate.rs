//! At most N commands at work on the index at once (`pmindex serve
//! --concurrency`, off by default); the others sleep until a slot is free.
//!
//! Why: the server runs one thread per connection, and with many more
//! connections than cores the engines' locks (which spin briefly before
//! they sleep) meet lock holders that the scheduler has preempted. With
//! 50 connections on 2 cores and no limit, half the `set`s took under
//! 150 µs and one in a hundred over 11 ms; with 4 slots 370 µs and 2.6-2.7
//! ms, with 2 slots 480 µs and 1.6-1.8 ms, at about the same throughput. A
//! command that waits costs a wake-up, so fewer slots than busy
//! connections slows the rest: 4 connections with 2 slots set 22-37%
//! slower, and 50 pipelining connections with 4 slots 28-38% slower
//! (docs/design.md §12, "How many commands at once"); hence no limit by
//! default. A command that writes to the socket (a long `get` handing its
//! reply on) gives its slot back first, so a slow reader holds none.

use parking_lot::{Condvar, Mutex};

/// A counting semaphore.
pub struct Gate {
    free: Mutex<usize>,
    freed: Condvar,
}

/// A slot of a [`Gate`], given back when dropped.
pub struct Slot<'a>(&'a Gate);

impl Gate {
    /// A gate of `slots` slots (at least one).
    pub fn new(slots: usize) -> Gate {
        Gate {
            free: Mutex::new(slots.max(1)),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free slot and takes it.
    pub fn enter(&self) -> Slot<'_> {
        let mut free = self.free.lock();
        while *free == 0 {
            self.freed.wait(&mut free);
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock() += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[test]
    fn no_more_than_its_slots_are_held_at_once() {
        let gate = Gate::new(2);
        let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _slot = gate.enter();
                        let n = inside.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(n, SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, SeqCst);
                    }
                });
            }
        });
        assert_eq!(most.load(SeqCst), 2);
        assert_eq!(*gate.free.lock(), 2);
    }
}
