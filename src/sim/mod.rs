//! The crash simulator: proves that engines survive any power failure.
//!
//! - [`trace`]: a [`trace::Recorder`] installed as the pool's observer
//!   records every PM store, flush and fence.
//! - [`cache`]: the cache model that turns a prefix of a trace into the crash
//!   images a power failure can leave (the model is documented there and in
//!   `docs/design.md`).
//! - [`workload`]: seeded workloads.
//! - [`linear`]: the check of a key that several writers' operations race
//!   on (shared-key workloads).
//! - [`harness`]: crash at every fence and between fences, recover every
//!   distinct image, verify it against the model of acknowledged operations.
//! - [`damage`]: not a power failure but damage (any bytes): the workload
//!   that the damaged-pool test and fuzz target run on a changed image.

pub mod cache;
pub mod damage;
pub mod harness;
pub mod linear;
pub mod trace;
pub mod workload;

pub use harness::{
    run, run_ops, run_plans, CrashConfig, CrashReport, Failure, ALLOC_SUBJECT, MAX_WRITERS,
};

/// The crash-image budget of a crash test: `PMINDEX_CRASH_STATES` when it is
/// set, else `default` (the quick budget CI runs).
///
/// # Panics
/// If the variable is set but is not a positive integer: a long run that
/// silently fell back to the quick budget would report figures nobody asked
/// for.
pub fn states_from_env(default: usize) -> usize {
    match std::env::var("PMINDEX_CRASH_STATES") {
        Err(_) => default,
        Ok(s) => match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("PMINDEX_CRASH_STATES={s:?}: expected a positive number of crash images"),
        },
    }
}

/// A key for messages: printable ASCII as is, anything else in hex.
pub fn show_key(k: &[u8]) -> String {
    let short = &k[..k.len().min(24)];
    let more = if k.len() > 24 {
        format!("…({} B)", k.len())
    } else {
        String::new()
    };
    if short.iter().all(|c| c.is_ascii_graphic()) {
        format!("\"{}\"{more}", String::from_utf8_lossy(short))
    } else {
        format!(
            "0x{}{more}",
            short.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }
}
