//! Pool files to remove if a signal ends the process: the temporary pools
//! of a benchmark ([`crate::bench::temp_pool`]) for as long as they live, and
//! a pool that [`Pool::create`](super::Pool::create) has not finished (its
//! file sized, which takes a while for a large pool, but its header not yet
//! written: a file that would only say "not a pmindex pool" and block the
//! name).
//!
//! A signal does not unwind. A program that wants the files removed when it
//! is interrupted (the `pmindex` command line does) calls
//! [`remove_on_signal`]: on SIGINT, SIGTERM or SIGHUP the handler unlinks
//! every registered path, then dies of the signal as it would have. The
//! paths live in a fixed table of atomic pointers ([`SIGNAL_SLOTS`]), so the
//! handler only does async-signal-safe things (atomic swaps, `unlink`,
//! `signal`, `raise`). Each slot's path is owned by whichever side swaps it
//! out first: the handler (which never frees it; the process is ending) or
//! [`unregister`] (which frees it). Without the handlers, registering does
//! nothing but fill a slot.

use std::ffi::{c_char, c_int, CString};
use std::path::Path;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Pool files that a signal handler can remove at once.
pub const SIGNAL_SLOTS: usize = 64;

/// The paths (leaked `CString`s) of registered pool files (temporary pools,
/// pools being created); null when free.
pub(crate) static LIVE_PATHS: [AtomicPtr<c_char>; SIGNAL_SLOTS] =
    [const { AtomicPtr::new(null_mut()) }; SIGNAL_SLOTS];

/// Puts `path` in a free slot; `None` if it cannot (no slot, or a NUL byte).
pub(crate) fn register(path: &Path) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    let raw = CString::new(path.as_os_str().as_bytes()).ok()?.into_raw();
    for (i, slot) in LIVE_PATHS.iter().enumerate() {
        if slot
            .compare_exchange(null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Some(i);
        }
    }
    // SAFETY: `raw` came from `CString::into_raw` above and was not stored.
    drop(unsafe { CString::from_raw(raw) });
    None
}

/// Takes the path out of `slot` and frees it, unless a signal handler took
/// it first.
pub(crate) fn unregister(slot: usize) {
    let raw = LIVE_PATHS[slot].swap(null_mut(), Ordering::SeqCst);
    if !raw.is_null() {
        // SAFETY: a non-null slot holds a pointer from `CString::into_raw`
        // (see `register`), and the swap made this call its only owner.
        drop(unsafe { CString::from_raw(raw) });
    }
}

extern "C" fn remove_and_die(sig: c_int) {
    for slot in &LIVE_PATHS {
        let raw = slot.swap(null_mut(), Ordering::SeqCst);
        if !raw.is_null() {
            // SAFETY: `raw` is a NUL-terminated path from `CString::into_raw`
            // that nothing frees any more (the swap took it); `unlink` is
            // async-signal-safe.
            unsafe { libc::unlink(raw) };
        }
    }
    // SAFETY: `signal` and `raise` are async-signal-safe; restoring the
    // default action and raising the signal again ends the process the way
    // the signal would have.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every live
/// temporary pool file and then let the signal end the process (see the
/// [module docs](self)). For programs, not libraries: it replaces the
/// process's handlers for those signals.
pub fn remove_on_signal() {
    let handler = remove_and_die as extern "C" fn(c_int);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `handler` is an `extern "C" fn(c_int)` that only does
        // async-signal-safe work; installing it has no other effect.
        unsafe {
            libc::signal(sig, handler as libc::sighandler_t);
        }
    }
}

/// Holds back SIGINT, SIGTERM and SIGHUP on this thread while it lives, so
/// that a file can be created and registered with nothing in between: a
/// signal sent meanwhile is delivered when this is dropped, and then finds
/// the path registered. A signal the kernel gives another thread of the
/// process is not held back (the command line creates pools on its one
/// thread).
pub(crate) struct Deferred {
    old: libc::sigset_t,
}

impl Deferred {
    pub(crate) fn new() -> Deferred {
        // SAFETY: `sigemptyset`, `sigaddset` and `pthread_sigmask` only
        // write the sets they are given, which live on this stack frame
        // (zeroed, then initialised by `sigemptyset`); blocking signals on
        // this thread has no other effect.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            Deferred { old }
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: restores the mask `new` saved; a signal held back is
        // delivered now.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}
