//! Benchmarks, as library code; the `pmindex bench` commands are thin
//! wrappers around them. docs/bench.md is the user's guide.
//!
//! # The benchmark (`pmindex bench`)
//! A run is a [`suite::Suite`] of [`experiment::Experiment`]s: each one a
//! key set ([`keys`]), a record count, a value size, a thread count, a PM
//! latency and a sequence of phases (load, recovery, the basic operations,
//! mixes of [`mix`] with the request distributions of [`dist`], range
//! scans). [`runner`] runs every experiment on every engine in alternating
//! rounds in one process, each engine in a temporary pool ([`temp_pool`]);
//! [`summary`] takes medians over rounds and ratios against a baseline
//! engine and formats the tables and the CSV; [`plot`] draws the charts.
//! [`preset`] builds the suites that reproduce the papers' evaluations,
//! with the claims that [`verdict`] judges. [`alloc`] is the counting global
//! allocator behind the DRAM figures.
//!
//! Adding an engine to [`crate::engine::ENGINES`] adds it to every run: no
//! change here is needed.
//!
//! # Other benchmarks
//! - [`store_api`]: what the pool's store API costs over raw stores to DRAM.
//!
//! # Measuring
//! See [`runner`]: phases are timed as a whole, latencies sampled; PM
//! counters ([`crate::pm::counters()`]) are process-wide, so a snapshot is
//! taken before and after each phase and subtracted, and nothing else in
//! the process may touch a pool while a benchmark runs.
//!
//! # Progress
//! Benchmarks report progress through [`Progress`]; worker threads count
//! operations in batches of at most [`PROGRESS_BATCH`], so that a progress
//! bar costs nothing measurable; library callers that want none pass
//! [`NoProgress`].

pub mod alloc;
pub mod dist;
pub mod experiment;
pub mod keys;
pub mod mix;
pub mod plot;
pub mod preset;
pub mod report;
pub mod runner;
pub mod store_api;
pub mod suite;
pub mod summary;
pub mod temp_pool;
pub mod verdict;
pub mod workload;

use crate::error::Error;

/// How many operations run between two calls of [`Progress::advance`].
pub const PROGRESS_BATCH: u64 = 4096;

/// Receives the progress of a benchmark (the CLI draws progress bars).
pub trait Progress {
    /// Step `step` of `steps` (one engine in one round of one experiment)
    /// starts; `what` says which.
    fn begin(&mut self, _step: usize, _steps: usize, _what: &str) {}
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
