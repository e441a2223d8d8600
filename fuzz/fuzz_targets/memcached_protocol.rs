//! Any byte stream, as one memcached connection to `pmindex serve`: no
//! input may panic the server or break the index it serves.
//!
//! `cargo +nightly fuzz run memcached_protocol` (from the repository root).
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use pmindex::serve::cache::Cache;
use pmindex::serve::server::serve_stream;
use pmindex::serve::Config;
use pmindex::{Db, Options};

static CACHE: OnceLock<Arc<Cache>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let cache = CACHE.get_or_init(|| {
        let db = Db::create_anonymous(&Options::with_engine("hart")).expect("an anonymous pool");
        let config = Config {
            allow_shutdown: true,
            ..Config::default()
        };
        Arc::new(Cache::new(db, &config))
    });
    let _ = serve_stream(cache, data, std::io::sink());
});
