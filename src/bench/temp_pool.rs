//! A pool file that lives as long as a benchmark run.
//!
//! [`TempPool`] picks a fresh name in a directory, creates the database there,
//! and removes the file when it is dropped: after a normal run, after an error,
//! and while a panic unwinds.
//!
//! # Signals
//! A signal does not unwind. A program that wants the files removed when it
//! is interrupted (the `pmindex` command line does) calls
//! [`remove_on_signal`]: on SIGINT, SIGTERM or SIGHUP the handler unlinks
//! every live temporary pool, then dies of the signal as it would have
//! ([`crate::pm::signal`]). A process killed by SIGKILL still leaves the
//! file behind; its name starts with `pmindex-bench-`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BenchError, BenchResult};
use crate::db::{Db, Options};
use crate::error::Error;

use crate::pm::signal::{register, unregister};
pub use crate::pm::signal::{remove_on_signal, SIGNAL_SLOTS};

/// A database in a pool file that is deleted on drop.
#[derive(Debug)]
pub struct TempPool {
    // Declared before `path` is removed: `Drop` closes the database (which
    // unmaps the pool and releases its lock) before it removes the file.
    db: Option<Db>,
    path: PathBuf,
    /// The slot of `path` in the signal handler's table.
    slot: Option<usize>,
}

impl TempPool {
    /// Creates a database with `opts` in a new pool file in `dir`, named after
    /// `tag`. Fails with [`BenchError::NoSpace`] if `dir` has less than
    /// `opts.pool_size` bytes free.
    pub fn create(dir: &Path, tag: &str, opts: &Options) -> BenchResult<TempPool> {
        check_free_space(dir, opts.pool_size)?;
        let path = fresh_path(dir, tag);
        // Registered before the file exists: creating a large pool takes a
        // while, and a signal meanwhile must remove the file too.
        let slot = register(&path);
        match Db::create(&path, opts) {
            Ok(db) => Ok(TempPool {
                db: Some(db),
                slot,
                path,
            }),
            // The name was taken after we looked: the file is not ours, so
            // leave it alone.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                if let Some(slot) = slot {
                    unregister(slot);
                }
                Err(BenchError::failed(
                    "benchmark pool",
                    Error::io(
                        format!(
                            "create {}: a file of that name appeared meanwhile",
                            path.display()
                        ),
                        source,
                    ),
                ))
            }
            Err(e) => {
                // The creation may have left a partial file behind.
                let _ = std::fs::remove_file(&path);
                if let Some(slot) = slot {
                    unregister(slot);
                }
                // `e` names the file already.
                Err(BenchError::failed("benchmark pool", e))
            }
        }
    }

    /// The database.
    ///
    /// # Panics
    /// After a [`TempPool::reopen`] that failed (the caller is expected to
    /// drop the pool then).
    pub fn db(&self) -> &Db {
        self.db
            .as_ref()
            .expect("the database is present except in drop and after a failed reopen")
    }

    /// Closes the database and opens it again with `opts` (recovery).
    /// Returns how long the open took (closing is not timed: it unmaps the
    /// pool and writes a page-cache mapping back to its file). On error the
    /// pool holds no database; drop it.
    pub fn reopen(&mut self, opts: &Options) -> BenchResult<std::time::Duration> {
        drop(self.db.take());
        let t0 = std::time::Instant::now();
        let db = Db::open(&self.path, opts)
            .map_err(|e| BenchError::failed(format!("reopen {}", self.path.display()), e))?;
        let elapsed = t0.elapsed();
        self.db = Some(db);
        Ok(elapsed)
    }

    /// Lends the database out whole, for an owner that takes it by value
    /// (a `pmindex::serve::Server`); [`TempPool::restore`] gives it back.
    /// Until then [`TempPool::db`] panics, and a drop closes nothing
    /// before it removes the file (the borrower's handle keeps the file's
    /// pages until it is dropped).
    pub fn take(&mut self) -> Option<Db> {
        self.db.take()
    }

    /// Gives back the database that [`TempPool::take`] lent.
    pub fn restore(&mut self, db: Db) {
        self.db = Some(db);
    }

    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempPool {
    fn drop(&mut self) {
        drop(self.db.take());
        let _ = std::fs::remove_file(&self.path);
        // After the removal, so that a signal in between still finds it.
        if let Some(slot) = self.slot.take() {
            unregister(slot);
        }
    }
}

/// A name in `dir` that no file has now.
fn fresh_path(dir: &Path, tag: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "pmindex-bench-{}-{tag}-{}-{nanos:09}.pool",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        if std::fs::symlink_metadata(&path).is_err() {
            return path;
        }
    }
}

/// Fails if the file system of `dir` has less than `needed` bytes free. The
/// pool file is sparse, but a mapping of a file whose blocks cannot be
/// allocated kills the process with `SIGBUS` on the first store, so it is
/// better to refuse up front.
fn check_free_space(dir: &Path, needed: u64) -> BenchResult<()> {
    let meta = std::fs::metadata(dir).map_err(|e| {
        BenchError::failed(
            "benchmark directory",
            Error::io(format!("stat {}", dir.display()), e),
        )
    })?;
    if !meta.is_dir() {
        return Err(BenchError::Config(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    if let Some(available) = free_bytes(dir) {
        if available < needed {
            return Err(BenchError::NoSpace {
                dir: dir.display().to_string(),
                needed,
                available,
            });
        }
    }
    Ok(())
}

/// Bytes available to unprivileged users on the file system of `dir`, or
/// `None` if it cannot be told.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path that outlives the call, and `st`
    // points to writable memory of the size `statvfs` fills.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `statvfs` returned 0, so it initialised `st`.
    let st = unsafe { st.assume_init() };
    #[allow(
        clippy::unnecessary_cast,
        reason = "the field types differ between targets"
    )]
    let bytes = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_file_is_removed_on_drop() {
        let dir = std::env::temp_dir();
        let opts = Options {
            pool_size: 1 << 20,
            ..Options::default()
        };
        let t = TempPool::create(&dir, "unit test", &opts).unwrap();
        let path = t.path().to_path_buf();
        assert!(path.exists());
        assert!(path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .contains("unit_test"));
        t.db().put(b"k", b"v").unwrap();
        drop(t);
        assert!(!path.exists());
    }

    #[test]
    fn reopen_recovers_the_keys() {
        let opts = Options {
            pool_size: 1 << 20,
            ..Options::default()
        };
        let mut t = TempPool::create(&std::env::temp_dir(), "reopen", &opts).unwrap();
        t.db().put(b"k", b"v").unwrap();
        let took = t.reopen(&Options::default()).unwrap();
        assert!(took.as_nanos() > 0);
        assert_eq!(t.db().get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        let path = t.path().to_path_buf();
        drop(t);
        assert!(!path.exists());
    }

    #[test]
    fn live_pools_are_registered_for_the_signal_handler() {
        let t = TempPool::create(
            &std::env::temp_dir(),
            "signal",
            &Options {
                pool_size: 1 << 20,
                ..Options::default()
            },
        )
        .unwrap();
        let slot = t.slot.expect("a free slot");
        let raw = crate::pm::signal::LIVE_PATHS[slot].load(Ordering::SeqCst);
        assert!(!raw.is_null());
        // SAFETY: the slot holds a live CString until `t` is dropped.
        let registered = unsafe { std::ffi::CStr::from_ptr(raw) };
        assert_eq!(registered.to_str().unwrap(), t.path().to_str().unwrap());
        let path = t.path().to_path_buf();
        drop(t);
        assert!(!path.exists());
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let e = TempPool::create(
            Path::new("/nonexistent-pmindex-dir"),
            "x",
            &Options::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("nonexistent-pmindex-dir"), "{e}");
    }

    #[test]
    fn free_space_is_known_for_the_temp_dir() {
        assert!(free_bytes(&std::env::temp_dir()).is_some());
    }
}
