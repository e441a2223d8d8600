//! The command line's error type and exit codes.
//!
//! `main` prints every error as `error: <Display>` on standard error and exits
//! with [`CliError::exit_code`]: 2 for a usage error (as clap does for the
//! ones it finds, and for arguments the library or the benchmark refuses:
//! a key or value out of bounds, a bad pool size, an engine setting or
//! other argument refused (`InvalidArgument`), a benchmark configuration
//! that cannot run), 1 for everything else, a damaged pool among them.

use pmindex::bench::BenchError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The library refused or failed.
    #[error(transparent)]
    Db(#[from] pmindex::Error),
    /// A benchmark could not run.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// `get` or `delete` did not find the key.
    #[error("key not found: {0}")]
    KeyNotFound(String),
    /// A `get` of several keys did not find these (two or more).
    #[error("{} keys not found: {}", .0.len(), .0.join(", "))]
    KeysNotFound(Vec<String>),
    /// An argument clap accepted but the command cannot use (bad hex).
    #[error("{0}")]
    Usage(String),
    /// The command ran but its result is a failure (a benchmark that read
    /// wrong values).
    #[error("{0}")]
    Failed(String),
    /// Writing the output failed.
    #[error("write to standard output: {0}")]
    Stdout(#[source] std::io::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Bench(BenchError::Config(_)) => 2,
            CliError::Db(e) | CliError::Bench(BenchError::Failed { source: e, .. })
                if is_usage(e) =>
            {
                2
            }
            _ => 1,
        }
    }

    /// Whether this is a closed standard output (`pmindex scan ... | head`),
    /// which ends the command quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Stdout(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// Whether the library refused an argument (the same for `put` as for a
/// benchmark's pool or records: `bench --pool-size 1K` as `create --size 1K`).
fn is_usage(e: &pmindex::Error) -> bool {
    use pmindex::Error as E;
    matches!(
        e,
        E::EmptyKey { .. }
            | E::KeyTooLong { .. }
            | E::ValueTooLong { .. }
            | E::BadPoolSize { .. }
            | E::InvalidArgument(_)
    )
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Stdout(e)
    }
}
