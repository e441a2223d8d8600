//! The one error type of the crate.
//!
//! Library code never panics on bad input or on a damaged pool file: every
//! such case is one of these variants, with the facts a user needs to act.

use std::path::PathBuf;

/// Everything that can go wrong in pmindex.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a pmindex pool at all (wrong magic, too short to hold
    /// a header, or its creation never finished).
    #[error("{path}: not a pmindex pool: {reason}")]
    NotAPool {
        /// The file.
        path: PathBuf,
        /// Why we think so.
        reason: String,
    },
    /// The pool was written by another format version of pmindex.
    #[error(
        "{path}: pool format version {found}, this build reads versions {oldest} to {supported}"
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the header.
        found: u32,
        /// The oldest version this build reads.
        oldest: u32,
        /// The newest version this build reads (and the one it writes).
        supported: u32,
    },
    /// The pool is damaged: a checksum, a size or a persistent structure does
    /// not hold what it must.
    #[error("pool is corrupt at offset {offset:#x}: {reason}")]
    Corrupt {
        /// Byte offset in the pool where the damage was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The pool was created for another engine.
    #[error("pool was created for engine `{found}`, not `{expected}`")]
    WrongEngine {
        /// The engine the caller asked for.
        expected: String,
        /// The engine recorded in the pool header.
        found: String,
    },
    /// No engine of that name is built into this library.
    #[error("unknown engine `{name}` (available: {available})")]
    UnknownEngine {
        /// The requested name.
        name: String,
        /// The names that exist, comma separated.
        available: String,
    },
    /// Another process (or another handle in this one) has the pool open.
    #[error("{path}: pool is already open in another process or handle (file lock held)")]
    Locked {
        /// The file.
        path: PathBuf,
    },
    /// The pool has no free space left for this allocation. Reads and deletes
    /// still work. Space that deletes and replacements free comes back as
    /// each engine's layout allows: pmlog moves the live records of mostly
    /// dead log segments first (docs/design.md §6); the trees reuse a
    /// freed node or leaf for one of its size, and give a chunk back only
    /// when none of its blocks is in use, so interleaved deletes may free
    /// little room for other sizes.
    #[error("pool is full: no room for {requested} more bytes")]
    PoolFull {
        /// The size of the allocation that failed.
        requested: u64,
    },
    /// A pool size that cannot be used.
    #[error("bad pool size {size}: {reason}")]
    BadPoolSize {
        /// The requested size.
        size: u64,
        /// Why it is refused.
        reason: String,
    },
    /// A key is empty.
    #[error("key is empty; keys are 1 to {max} bytes")]
    EmptyKey {
        /// The largest key length.
        max: usize,
    },
    /// A key is too long.
    #[error("key is {len} bytes; the limit is {max}")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value is too long.
    #[error("value is {len} bytes; the limit is {max}")]
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `insert` found the key already present.
    #[error("key already exists")]
    KeyExists,
    /// `update` did not find the key.
    #[error("key not found")]
    KeyNotFound,
    /// A write through a pool opened read-only ([`crate::Db::open_read_only`]).
    #[error("the pool is open read-only: nothing can be changed through this handle")]
    ReadOnly,
    /// An invalid argument that is none of the above.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A consistency check found a broken invariant.
    #[error("consistency check failed: {0}")]
    CheckFailed(String),
}

impl Error {
    /// Wraps an `io::Error` with what we were doing.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A [`Error::Corrupt`] at `offset`.
    pub fn corrupt(offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            offset,
            reason: reason.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
