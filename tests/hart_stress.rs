//! Multi-threaded stress test of HART against an oracle (the test is in
//! `common/stress.rs`).
//!
//! Writer threads share hash keys, so they contend on the same ARTs, hash
//! shards and allocation stripes; scans, batched gets and batched puts run
//! beside them.
//!
//! `PMINDEX_STRESS_THREADS=16 PMINDEX_STRESS_OPS=5000 cargo test --release
//! --test hart_stress` on a bigger machine. (The first test's 16 writers
//! share 40 ARTs, and one operation in twenty is a batch of up to 40 keys
//! that write-locks their ARTs together: at 200,000 operations per writer
//! it did not end within 150 s on a 16-core machine, and 20,000 took 50 s
//! on a 2-vCPU one.)

mod common;

use common::stress::{env, stress};

/// Key `j` of writer `w`: the hash key (first two bytes) cycles through 40
/// values shared by all writers.
fn key(w: usize, j: usize) -> Vec<u8> {
    let mut k = vec![b'a' + (j % 40) as u8, b'k'];
    k.extend_from_slice(format!("{j:05}.{w:02}").as_bytes());
    k
}

#[test]
fn writers_sharing_arts_and_concurrent_scans() {
    stress("hart", key, env("PMINDEX_STRESS_OPS", 100_000));
}

/// The same with one-key searches that probe the point index without the
/// ART's lock first (`hart.reads=optimistic`).
#[test]
fn writers_sharing_arts_under_reads_without_the_lock() {
    stress(
        "hart:reads=optimistic",
        key,
        env("PMINDEX_STRESS_OPS", 100_000) / 2,
    );
}

/// The hashed index of ARTs (`k_h` = 8): a hash key is a key's first 8
/// bytes, `{letter}k{j:05}.`, so each ART holds one `j`'s keys of every
/// writer, and deletes empty and retire ARTs all the time while other
/// threads' batched puts and gets hold references to them (a batched put
/// that finds one of its ARTs retired once it has locked them looks them
/// all up again).
#[test]
fn hashed_arts_retired_and_made_again_under_batches() {
    stress(
        "hart:hash_key_len=8",
        key,
        env("PMINDEX_STRESS_OPS", 100_000) / 2,
    );
}

/// Key `j` of writer `w` in ARTs of at most four keys: the hash key is one
/// of 1,000, shared by `j` and `j + 1000` of both writers.
fn small_art_key(w: usize, j: usize) -> Vec<u8> {
    let mut k = vec![b'a' + (j % 1000 / 40) as u8, b'a' + (j % 40) as u8];
    k.extend_from_slice(format!("{j:05}.{w:02}").as_bytes());
    k
}

/// A point index on every ART that holds a key (`point_index_above=0`),
/// read without the lock: ARTs of one to four keys get an index with
/// their first key and lose it with their last, all the time, while
/// one-key readers probe the tables that are published and retired.
#[test]
fn point_indexes_built_and_dropped_under_reads_without_the_lock() {
    stress(
        "hart:reads=optimistic,point_index_above=0",
        small_art_key,
        env("PMINDEX_STRESS_OPS", 100_000) / 2,
    );
}
