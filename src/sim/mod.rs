//! The crash simulator: proves that engines survive any power failure.
//!
//! - [`trace`]: a [`trace::Recorder`] installed as the pool's observer
//!   records every PM store, flush and fence.
//! - [`cache`]: the cache model that turns a prefix of a trace into the crash
//!   images a power failure can leave (the model is documented there and in
//!   `docs/design.md`).
//! - [`workload`]: seeded workloads.
//! - [`harness`]: crash at every fence and between fences, recover every
//!   distinct image, verify it against the model of acknowledged operations.

pub mod cache;
pub mod harness;
pub mod trace;
pub mod workload;

pub use harness::{run, run_ops, CrashConfig, CrashReport, Failure, ALLOC_SUBJECT};

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
