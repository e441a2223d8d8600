//! A pool file that lives as long as a benchmark run.
//!
//! [`TempPool`] picks a fresh name in a directory, creates the database there,
//! and removes the file when it is dropped: after a normal run, after an error,
//! and while a panic unwinds. (A process killed by a signal leaves the file
//! behind; its name starts with `pmindex-bench-`.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BenchError, BenchResult};
use crate::db::{Db, Options};
use crate::error::Error;

/// A database in a pool file that is deleted on drop.
#[derive(Debug)]
pub struct TempPool {
    // Declared before `path` is removed: `Drop` closes the database (which
    // unmaps the pool and releases its lock) before it removes the file.
    db: Option<Db>,
    path: PathBuf,
}

impl TempPool {
    /// Creates a database with `opts` in a new pool file in `dir`, named after
    /// `tag`. Fails with [`BenchError::NoSpace`] if `dir` has less than
    /// `opts.pool_size` bytes free.
    pub fn create(dir: &Path, tag: &str, opts: &Options) -> BenchResult<TempPool> {
        check_free_space(dir, opts.pool_size)?;
        let path = fresh_path(dir, tag);
        match Db::create(&path, opts) {
            Ok(db) => Ok(TempPool { db: Some(db), path }),
            // The name was taken after we looked: the file is not ours, so
            // leave it alone.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(BenchError::Config(format!(
                    "{}: a file of that name appeared while the benchmark was starting",
                    path.display()
                )))
            }
            Err(e) => {
                // The creation may have left a partial file behind.
                let _ = std::fs::remove_file(&path);
                Err(BenchError::failed(format!("create {}", path.display()), e))
            }
        }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        self.db
            .as_ref()
            .expect("the database is only taken out in drop")
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
fn free_bytes(dir: &Path) -> Option<u64> {
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
