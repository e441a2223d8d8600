//! `pmindex serve`: a memcached-compatible server (the text protocol) over
//! any engine, whose items survive restarts.
//!
//! ```no_run
//! use pmindex::serve::{Config, Server};
//! use pmindex::{Db, Options};
//! let db = Db::create("/tmp/cache.pool", &Options::with_engine("hart"))?;
//! let server = Server::bind(db, "127.0.0.1:11211", Config::default())?;
//! let db = server.run()?; // until stopped; then close the pool
//! drop(db);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Commands: `set`, `add`, `replace`, `append`, `prepend`, `cas`, `get`,
//! `gets`, `gat`, `gats`, `delete`, `incr`, `decr`, `touch`, `flush_all`,
//! `stats`, `version`, `verbosity`, `quit` and (where allowed) `shutdown`,
//! as memcached 1.6's `doc/protocol.txt` gives them. Not served: the
//! binary protocol (a connection that starts with its magic byte is
//! closed at once) and the meta protocol, `stats` groups, `cache_memlimit`
//! and the LRU: this is an index, not a cache that evicts, so a full pool
//! answers `SERVER_ERROR out of memory storing object`.
//!
//! - [`protocol`]: the command line parser.
//! - [`item`]: an item's layout in a value (flags, expiration, CAS).
//! - [`cache`]: each command's meaning over a [`crate::Db`]: atomicity,
//!   durability of a reply, expiration and CAS values.
//! - [`server`]: sockets and threads.
//! - [`gate`]: how many commands work on the index at once.
//! - [`load`]: a load generator in the manner of mc-benchmark, for the
//!   WORT paper's §5.4 experiment.

pub mod cache;
pub mod gate;
pub mod item;
pub mod load;
pub mod protocol;
pub mod server;

pub use server::{stop_on_signals, Config, Server, StopHandle};
