//! Two threads deleting from one index, without the benchmark harness:
//! whether a delete slows down when the leaf it frees was written by the
//! other thread (so lies in the other thread's allocation stripe, and its
//! DRAM nodes came from the other thread's `malloc` arena).
//!
//! `cargo run --release --example delete_scaling -- [N] [ENGINE]` (default
//! 1000000 hart). Each case builds a fresh index: two threads insert the N
//! sparse 8-byte keys of `pmindex bench --keys sparse` (splitmix64 of
//! 0..N), thread `t` those with an index of parity `t`; then every key is
//! deleted, in a shuffled order:
//!
//! - `one`: by one thread;
//! - `own`: by two threads, each deleting the keys it inserted;
//! - `other`: by two threads, each deleting the keys the other inserted;
//! - `halves`: by two threads, each deleting one half of the order (what
//!   `pmindex bench --threads 2` does);
//! - `alternate`: by two threads, thread `t` deleting the keys at the
//!   order's positions of parity `t`: like `halves`, each thread frees
//!   into both threads' stripes; like `own` and `other`, the two walk the
//!   order side by side.
//!
//! `OPT=KEY=VALUE[,...]` passes engine settings (for example
//! `OPT=hart.stripes=hash_key`, where a leaf's stripe follows its key, not
//! the thread that wrote it).
//!
//! Prints the deletes per second of each case (the whole phase over its
//! wall time). Keys are read from an array, as the bench does, so each
//! delete starts with the key's miss. The pool is a temporary file in
//! `/dev/shm` when that exists (as the bench's), else anonymous memory.
//! docs/design.md §7, "Two threads deleting".

use std::time::Instant;

use pmindex::{Db, Options};

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A new index holding key `i` of `keys` for every `i`, inserted by two
/// threads (thread `t` the keys of parity `t`).
fn build(engine: &str, keys: &[[u8; 8]], dir: Option<&std::path::Path>) -> Db {
    let n = keys.len() as u64;
    let mut opts = Options {
        engine: Some(engine.into()),
        pool_size: (n * 400).max(64 << 20).next_multiple_of(1 << 20),
        ..Options::default()
    };
    if let Ok(kvs) = std::env::var("OPT") {
        for kv in kvs.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').expect("OPT is KEY=VALUE[,KEY=VALUE...]");
            opts.engine_config.insert(k.to_string(), v.to_string());
        }
    }
    let db = match dir {
        Some(d) => {
            let path = d.join("delete_scaling.pool");
            let _ = std::fs::remove_file(&path);
            Db::create(&path, &opts)
        }
        None => Db::create_anonymous(&opts),
    }
    .expect("create the pool");
    std::thread::scope(|s| {
        for t in 0..2 {
            let db = &db;
            s.spawn(move || {
                for (i, k) in keys.iter().enumerate().skip(t).step_by(2) {
                    db.put(k, &(i as u64 + 1).to_le_bytes()).expect("put");
                }
            });
        }
    });
    db
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|s| s.parse().expect("N is a number"))
        .unwrap_or(1_000_000);
    let engine = args.next().unwrap_or_else(|| "hart".into());
    let keys: Vec<[u8; 8]> = (0..n as u64).map(|i| splitmix(i).to_be_bytes()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (splitmix(i as u64 ^ 99) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let shm = std::path::Path::new("/dev/shm");
    let dir = shm
        .is_dir()
        .then(|| tempfile::tempdir_in(shm).expect("temporary directory"));
    let (keys, order) = (&keys, &order);
    for case in ["one", "own", "other", "halves", "alternate"] {
        let db = build(&engine, keys, dir.as_ref().map(|d| d.path()));
        let delete = |i: usize| assert!(db.delete(&keys[i]).expect("delete"), "key {i} found");
        let t0 = Instant::now();
        if case == "one" {
            order.iter().for_each(|&i| delete(i));
        } else {
            std::thread::scope(|s| {
                for t in 0..2 {
                    let delete = &delete;
                    s.spawn(move || match case {
                        "own" => order
                            .iter()
                            .filter(|&&i| i % 2 == t)
                            .for_each(|&i| delete(i)),
                        "other" => order
                            .iter()
                            .filter(|&&i| i % 2 != t)
                            .for_each(|&i| delete(i)),
                        "alternate" => order.iter().skip(t).step_by(2).for_each(|&i| delete(i)),
                        "halves" => order[t * n / 2..(t + 1) * n / 2]
                            .iter()
                            .for_each(|&i| delete(i)),
                        _ => unreachable!("a case listed above"),
                    });
                }
            });
        }
        let secs = t0.elapsed().as_secs_f64();
        assert_eq!(db.len(), 0, "every key deleted");
        println!("{engine} {case:6} {:.3} Mops/s", n as f64 / secs / 1e6);
    }
}
