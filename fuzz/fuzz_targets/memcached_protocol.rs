//! Any byte stream, as one memcached connection to `pmindex serve`: no
//! input may panic the server or break the index it serves.
//!
//! `cargo +nightly fuzz run memcached_protocol` (from the repository root).
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use pmindex::serve::cache::Cache;
use pmindex::serve::server::serve_stream;
use pmindex::{Db, Options};

static CACHE: OnceLock<Arc<Cache>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let cache = CACHE.get_or_init(|| {
        let db = Db::create_anonymous(&Options::with_engine("hart")).expect("an anonymous pool");
        Arc::new(Cache::new(db, true))
    });
    let _ = serve_stream(cache, data, std::io::sink());
});
