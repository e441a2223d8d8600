//! Benchmarks, as library code; the `pmindex bench` commands are thin
//! wrappers around them.
//!
//! - [`quick`]: the first benchmark: insert, get and delete N keys on every
//!   engine, each in a temporary pool file.
//! - [`store_api`]: what the pool's store API costs over raw stores to DRAM.
//! - [`report`]: the report types and text tables, shared by the benchmarks.
//! - [`workload`]: keys, values and orders, reproducible from a seed.
//! - [`temp_pool`]: a pool file that is removed when the benchmark ends.
//!
//! # Measuring
//! A phase is timed as a whole (one [`std::time::Instant`] before, one
//! after), so a figure is the mean over its operations, not a percentile.
//! PM counters ([`crate::pm::counters`]) are process-wide: a snapshot is taken
//! before and after each phase and subtracted, so nothing else in the process
//! may touch a pool while a benchmark runs.
//!
//! # Progress
//! Benchmarks report progress through [`Progress`] in batches of
//! [`PROGRESS_BATCH`] operations, so that a progress bar costs nothing
//! measurable; library callers that want none pass [`NoProgress`].

pub mod quick;
pub mod report;
pub mod store_api;
pub mod temp_pool;
pub mod workload;

use crate::error::Error;

/// How many operations run between two calls of [`Progress::advance`].
pub const PROGRESS_BATCH: u64 = 4096;

/// Receives the progress of a benchmark (the CLI draws progress bars).
pub trait Progress {
    /// A phase of `total` operations starts on `engine`.
    fn start(&mut self, engine: &str, phase: &str, total: u64);
    /// `n` more operations of the current phase are done.
    fn advance(&mut self, n: u64);
    /// The current phase is over (also called when it fails).
    fn finish(&mut self);
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _engine: &str, _phase: &str, _total: u64) {}
    fn advance(&mut self, _n: u64) {}
    fn finish(&mut self) {}
}

/// Why a benchmark could not run or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The configuration cannot be run as given.
    #[error("{0}")]
    Config(String),
    /// The directory for pool files has too little free space.
    #[error(
        "{dir}: {} free, but the benchmark pool may need up to {} ({needed} bytes); \
         choose another directory with --dir, or use fewer records or smaller values",
        report::fmt_bytes(*available),
        report::fmt_bytes(*needed)
    )]
    NoSpace {
        /// The directory.
        dir: String,
        /// Bytes the pool may use.
        needed: u64,
        /// Bytes free for this user.
        available: u64,
    },
    /// An operation of the library failed.
    #[error("{context}: {source}")]
    Failed {
        /// What the benchmark was doing (engine and phase).
        context: String,
        /// The library's error.
        #[source]
        source: Error,
    },
}

impl BenchError {
    /// Wraps a library error with what the benchmark was doing.
    pub fn failed(context: impl Into<String>, source: Error) -> Self {
        BenchError::Failed {
            context: context.into(),
            source,
        }
    }
}

/// The benchmarks' result type.
pub type BenchResult<T> = std::result::Result<T, BenchError>;
