//! pmindex: crash-consistent key-value indexes for persistent memory.
//!
//! - [`pm`]: the PM substrate (pool, store API, allocator, counters).
//! - [`Db`]: the engine-independent key-value API.
//! - [`engine`]: the engines.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// Module docs link to the private modules and items that hold what they
// describe (layouts, persist orders), for readers of the source:
// `cargo doc --document-private-items` resolves every link, and a link
// that resolves nowhere still warns.
#![allow(rustdoc::private_intra_doc_links)]

pub mod bench;
mod checksum;
pub mod db;
pub mod engine;
pub mod error;
mod fnv;
mod hint;
mod keycmp;
pub mod pm;
pub mod serve;
pub mod sim;
mod swar;

pub use db::{Db, Options, Stats};
pub use error::{Error, Result};
