//! The pool file itself: making a new one (its blocks allocated, and removed
//! again unless its creation finishes), opening an existing one (what can be
//! a pool), and locking it. [`super::Pool`] maps what these give it.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{Error, Result};

/// A pool file being created: removed when dropped before [`Self::done`],
/// and registered meanwhile for removal by a signal ([`super::signal`]).
pub(super) struct Unfinished<'a> {
    path: &'a Path,
    slot: Option<usize>,
    done: bool,
}

impl<'a> Unfinished<'a> {
    /// For a file this process has just created at `path`.
    pub(super) fn new(path: &'a Path) -> Unfinished<'a> {
        Unfinished {
            path,
            slot: super::signal::register(path),
            done: false,
        }
    }

    /// The header is durable: the file stays.
    pub(super) fn done(&mut self) {
        self.done = true;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(self.path);
        }
        // After the removal, so that a signal in between still finds it.
        if let Some(slot) = self.slot.take() {
            super::signal::unregister(slot);
        }
    }
}

/// Opens the existing pool file `path` (for writing too if `write`), and
/// refuses anything but a regular file or a character device (device DAX)
/// before a read: a FIFO's reads would wait for a writer forever and a
/// socket cannot be opened. `O_NONBLOCK` keeps the open of a FIFO from
/// waiting for the other end; it changes nothing for files and devices.
pub(super) fn open_existing(path: &Path, write: bool) -> Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let kind = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", path.display()), e))?
        .file_type();
    if kind.is_file() || kind.is_char_device() {
        return Ok(file);
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_block_device() {
        "a block device (a pool lives in a file or a device DAX character device)"
    } else {
        "not a regular file"
    };
    Err(Error::NotAPool {
        path: path.to_path_buf(),
        reason: what.to_string(),
    })
}

pub(super) fn lock_file(file: &File, path: &Path) -> Result<()> {
    lock_result(file.try_lock(), path)
}

/// [`lock_file`] for a read-only open: a shared lock, which other read-only
/// opens share and a writer's lock excludes.
pub(super) fn lock_file_shared(file: &File, path: &Path) -> Result<()> {
    lock_result(file.try_lock_shared(), path)
}

fn lock_result(r: std::result::Result<(), std::fs::TryLockError>, path: &Path) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            path: path.to_path_buf(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::io(format!("lock {}", path.display()), e))
        }
    }
}

/// Sizes a new pool file and allocates its blocks, so that a store into the
/// mapping never has to allocate a block in a page fault: on a full disk
/// that fault would kill the process with `SIGBUS` (here it is an error at
/// creation), on DAX with `MAP_SYNC` every such fault would also have to
/// make file system metadata durable, and concurrent writers would contend
/// on the file system's allocation in their page faults. File systems
/// without `fallocate` get a sparse file.
pub(super) fn allocate_file(file: &File, size: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    file.set_len(size)?;
    let len = libc::off_t::try_from(size)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "pool too large"))?;
    // SAFETY: `file` is an open, writable file descriptor for the whole
    // call; posix_fallocate only reads its arguments.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}
