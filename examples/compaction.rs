//! What a compaction costs and what it gives back: the radix trees'
//! (`engine/radix/compact.rs`, docs/design.md §11, "A full heap moves
//! blocks to empty chunks") and `hart`'s (`engine/hart/compact.rs`, §7,
//! "A full pool: values moved out of sparse chunks"; its moves are values).
//!
//! `cargo run --release --example compaction -- [POOL_MIB] [ENGINES]`
//! (default 64 and `wort,woart,art-cow,hart`). For each engine, with
//! `<engine>.compact` on and off, in a pool of anonymous memory: 100-byte
//! values under 16-byte keys until the pool is full, every other key
//! deleted, then 1,000-byte values until the pool is full again. Prints
//! the keys of each phase; for the large puts, their time, the slowest
//! one (a compaction runs inside a put, with its walk of the tree), the
//! compactions, the blocks they moved and the fences of the phase. Then,
//! the pool full again, the rate of reads beside a thread whose puts are
//! all refused (docs/design.md §11, "A futile compaction").

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pmindex::engine::{hart, radix};
use pmindex::{Db, Options};

/// Compactions that gave a chunk back and blocks (values) moved, both
/// engine families together.
fn compactions() -> (u64, u64) {
    let (r, h) = (radix::compactions(), hart::compactions());
    (r.0 + h.0, r.1 + h.1)
}

fn key(prefix: &str, i: u64) -> Vec<u8> {
    // Spread over the tree: a hashed prefix, then a counter.
    format!(
        "{prefix}{:04x}/{i:010}",
        (i.wrapping_mul(2_654_435_761)) % 65_521
    )
    .into_bytes()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: u64 = args
        .next()
        .map(|s| s.parse().expect("POOL_MIB: a whole number"))
        .unwrap_or(64);
    let engines = args
        .next()
        .unwrap_or_else(|| "wort,woart,art-cow,hart".into());
    println!("| engine | compact | 100-B keys | deleted | 1,000-B keys after | their puts | slowest put | compactions | blocks moved | fences |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut full = Vec::new();
    for engine in engines.split(',') {
        for compact in ["on", "off"] {
            let db = Db::create_anonymous(
                &Options {
                    pool_size: mib << 20,
                    ..Options::with_engine(engine)
                }
                .setting(&format!("{engine}.compact"), compact),
            )
            .unwrap_or_else(|e| panic!("{engine}: {e}"));
            let small = vec![7u8; 100];
            let mut n = 0;
            while db.put(&key("s", n), &small).is_ok() {
                n += 1;
            }
            for i in (0..n).step_by(2) {
                db.delete(&key("s", i)).expect("delete");
            }
            let large = vec![8u8; 1000];
            let (c0, f0) = (compactions(), pmindex::pm::counters::snapshot().fences);
            let t = Instant::now();
            let (mut m, mut slowest) = (0u64, Duration::ZERO);
            loop {
                let one = Instant::now();
                let ok = db.put(&key("l", m), &large).is_ok();
                slowest = slowest.max(one.elapsed());
                if !ok {
                    break;
                }
                m += 1;
            }
            let took = t.elapsed();
            let (c1, f1) = (compactions(), pmindex::pm::counters::snapshot().fences);
            db.check().unwrap_or_else(|e| panic!("{engine}: {e}"));
            println!(
                "| {engine} | {compact} | {n} | {} | {m} | {:.0} ms | {:.1} ms | {} | {} | {} |",
                n.div_ceil(2),
                took.as_secs_f64() * 1e3,
                slowest.as_secs_f64() * 1e3,
                c1.0 - c0.0,
                c1.1 - c0.1,
                f1 - f0
            );
            full.push((engine, compact, beside_refused_puts(&db, n, m)));
        }
    }
    println!();
    println!("The pool full again: for {BESIDE:?}, one thread puts new 1,000-byte keys (all refused) while another reads the small keys left");
    println!();
    println!("| engine | compact | refused puts/s | reads/s |");
    println!("|---|---|---:|---:|");
    for (engine, compact, (refused, reads)) in full {
        println!("| {engine} | {compact} | {refused:.0} | {reads:.0} |");
    }
}

/// How long [`beside_refused_puts`] runs.
const BESIDE: Duration = Duration::from_secs(1);

/// Refused puts per second in one thread, and reads per second in
/// another, beside them, of the odd ones of the `n` small keys (the `m`
/// large keys come after them, the new keys after those).
fn beside_refused_puts(db: &Db, n: u64, m: u64) -> (f64, f64) {
    let stop = AtomicBool::new(false);
    let large = vec![9u8; 1000];
    std::thread::scope(|s| {
        let putter = s.spawn(|| {
            let mut tries = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let fresh = key("l", m + n + tries);
                assert!(db.put(&fresh, &large).is_err(), "the pool was full");
                tries += 1;
            }
            tries
        });
        let t = Instant::now();
        let mut reads = 0u64;
        while t.elapsed() < BESIDE {
            for i in 0..1000 {
                // A small key left (the odd ones): in another stripe
                // than the new keys' (`engine/radix/striped.rs`).
                let k = key("s", ((reads + i) * 7919 % (n / 2)) * 2 + 1);
                assert!(db.get(&k).expect("get").is_some());
            }
            reads += 1000;
        }
        stop.store(true, Ordering::Relaxed);
        let secs = t.elapsed().as_secs_f64();
        let tries = putter.join().expect("putter");
        (tries as f64 / secs, reads as f64 / secs)
    })
}
