//! Point-search cost of one engine without the benchmark harness: loads N
//! sparse 8-byte keys (splitmix64 of 0..N, big-endian; not the bench's
//! `--keys sparse`, which `examples/write_keys.rs` writes to a key file),
//! then searches all of them
//! three times in a shuffled order and prints ns per operation. Values are
//! 8 bytes (`i + 1`, as in the comparison drivers). A `key digest N LOAD
//! SEARCH` line gives FNV-1a digests of the keys in loading and in search
//! order, as `scripts/authors/driver.c` prints them for the authors' code.
//!
//! `cargo run --release --example search_probe -- [N] [ENGINE] [KEYS]`
//! (default 1000000 hart). `KEYS` is a key file instead of the sparse keys:
//! records of a little-endian `u32` length and that many bytes, the first N
//! used in file order (the format of the comparison drivers for the
//! authors' code, see docs/design.md §7). The pool is a temporary file in `/dev/shm` when
//! that exists, else in the temporary directory; `ANON=1` uses anonymous
//! memory instead. `OPT=KEY=VALUE[,KEY=VALUE...]` passes engine settings
//! (for example `OPT=wort.reads=locked`). `THREADS=T` searches with T
//! threads at once, each over all keys (from its own start in the order),
//! and prints ns per operation of all of them together.
//! `AB=KEY=VALUE[,...]` builds a second index in anonymous memory, with
//! these settings added, and alternates search rounds between the two
//! (`A` and `B`, five each): an A/B comparison in one process and one
//! stretch of time, as this machine's timings drift by ±30% between runs.
//! `SEARCHES=K` runs K search rounds instead of three (0: insert only).
//! `SMALL_PAGES=1` maps the pool with base pages only (by default it is
//! advised for transparent huge pages, `Options::small_pages`); the probe
//! prints how much of the pool the kernel put on huge pages.
//! `DELETES=1` deletes every key at the end, in the shuffled order, and
//! prints ns per delete.
//! `REOPENS=R` (not with `ANON`) reopens the pool R times after loading
//! it, instead of once, and prints each recovery's time.
//! `FLUSH=KIND` makes lines persistent with `KIND` (auto, clwb,
//! clflushopt, clflush, or eadr: fences only) instead of the best the CPU
//! has (auto).
//! `BATCH=G` looks the keys up G at a time through `Db::get_many_with`
//! (memcached's multi-key get) instead of one `get_with` each.
//! `PUT_BATCH=G` inserts the keys G at a time through `Db::put_many`
//! instead of one `put` each.
//! `PAD=K` (50, 100 or 200, x86-64) runs about K independent instructions
//! after each search: how the overlap of successive searches shrinks as
//! the instructions between their misses grow (docs/design.md §7, "What
//! an instruction of the search is worth").
//! `SCAN=L` then runs ordered scans of L keys (`Db::scan_with`) from
//! 20,000 keys in the shuffled order, three rounds, and prints ns per scan
//! and per key returned (`SEARCHES=0 SCAN=100` for scans alone).

use std::ops::Bound;
use std::time::Instant;

use pmindex::{Db, Options};

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Keys back to back in one buffer; key `i` ends at `ends[i]`, or when all
/// keys have one length `width`, starts at `i * width` (one load, as in an
/// array of integers).
struct FlatKeys {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    width: Option<usize>,
}

impl FlatKeys {
    fn new(list: &[Vec<u8>]) -> FlatKeys {
        let mut bytes = Vec::with_capacity(list.iter().map(Vec::len).sum());
        let mut ends = Vec::with_capacity(list.len());
        for k in list {
            bytes.extend_from_slice(k);
            ends.push(bytes.len());
        }
        let width = list.first().map(Vec::len);
        let width = width.filter(|&w| list.iter().all(|k| k.len() == w));
        FlatKeys { bytes, ends, width }
    }
    fn len(&self) -> usize {
        self.ends.len()
    }
    fn get(&self, i: usize) -> &[u8] {
        if let Some(w) = self.width {
            return &self.bytes[i * w..(i + 1) * w];
        }
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

/// About `k` (50, 100 or 200) instructions that depend on nothing and
/// that nothing depends on: four chains of `add`s, which take room in the
/// CPU's instruction window between two searches without touching memory
/// (docs/design.md §7, "What an instruction of the search is worth").
#[inline(always)]
fn pad_instructions(k: u32) {
    #[cfg(target_arch = "x86_64")]
    macro_rules! adds {
        ($reps:literal) => {
            // SAFETY: arithmetic on four scratch registers that the block
            // declares as clobbered (and the flags, which `asm!` assumes
            // clobbered by default); it touches no memory and no stack.
            unsafe {
                std::arch::asm!(
                    concat!(".rept ", $reps),
                    "add {a}, 1",
                    "add {b}, 1",
                    "add {c}, 1",
                    "add {d}, 1",
                    ".endr",
                    a = inout(reg) 0u64 => _,
                    b = inout(reg) 0u64 => _,
                    c = inout(reg) 0u64 => _,
                    d = inout(reg) 0u64 => _,
                )
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    match k {
        50 => adds!(12),
        100 => adds!(25),
        200 => adds!(50),
        _ => panic!("PAD is 50, 100 or 200"),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = k;
}

/// Adds the engine settings in environment variable `var`
/// (`KEY=VALUE[,KEY=VALUE...]`) to `opts`.
fn add_settings(var: &str, opts: &mut Options) {
    let Some(kvs) = std::env::var_os(var) else {
        return;
    };
    for kv in kvs.to_string_lossy().split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("{var} is KEY=VALUE[,KEY=VALUE...]"));
        opts.engine_config.insert(k.to_string(), v.to_string());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("N is a number"))
        .unwrap_or(1_000_000);
    let engine = args.next().unwrap_or_else(|| "hart".into());
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("temporary directory");
    let mut opts = Options {
        engine: Some(engine.clone()),
        pool_size: (n * 400).max(64 << 20).next_multiple_of(1 << 20),
        ..Options::default()
    };
    add_settings("OPT", &mut opts);
    opts.small_pages = std::env::var_os("SMALL_PAGES").is_some();
    if let Ok(kind) = std::env::var("FLUSH") {
        let kind = kind
            .parse()
            .expect("FLUSH is clwb, clflushopt, clflush or eadr");
        opts.persist = pmindex::pm::PersistConfig::new(kind, None).expect("FLUSH");
    }
    let threads: usize = std::env::var("THREADS")
        .map(|t| t.parse().expect("THREADS is a number"))
        .unwrap_or(1)
        .max(1);
    let db = if std::env::var_os("ANON").is_some() {
        Db::create_anonymous(&opts)
    } else {
        Db::create(dir.path().join("probe.pool"), &opts)
    }
    .expect("create the pool");
    let list: Vec<Vec<u8>> = match args.next() {
        Some(file) => {
            let raw = std::fs::read(&file).expect("read the key file");
            let mut keys = Vec::new();
            let mut at = 0;
            while keys.len() < n as usize {
                let Some(len) = raw.get(at..at + 4) else {
                    break;
                };
                let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                let Some(key) = raw.get(at + 4..at + 4 + len) else {
                    eprintln!(
                        "{file}: record {} is truncated; using the {} before it",
                        keys.len(),
                        keys.len()
                    );
                    break;
                };
                keys.push(key.to_vec());
                at += 4 + len;
            }
            keys
        }
        None => (0..n).map(|i| splitmix(i).to_be_bytes().to_vec()).collect(),
    };
    // One flat buffer, as the comparison drivers keep their keys in one
    // array: a search reads its key from there, not through a pointer.
    let keys = FlatKeys::new(&list);
    drop(list);
    let n = keys.len() as u64;
    let put_batch: usize = std::env::var("PUT_BATCH")
        .map(|b| b.parse().expect("PUT_BATCH is a number"))
        .unwrap_or(0);
    let t = Instant::now();
    if put_batch == 0 {
        for (i, k) in (0..keys.len()).map(|i| keys.get(i)).enumerate() {
            db.put(k, &(i as u64 + 1).to_le_bytes()).expect("put");
        }
    } else {
        let values: Vec<[u8; 8]> = (1..=n).map(u64::to_le_bytes).collect();
        let mut items = Vec::with_capacity(put_batch);
        for start in (0..keys.len()).step_by(put_batch) {
            items.clear();
            let end = (start + put_batch).min(keys.len());
            items.extend((start..end).map(|i| (keys.get(i), &values[i][..])));
            db.put_many(&items).expect("put_many");
        }
    }
    println!(
        "{engine}: insert {:.0} ns/op{}",
        t.elapsed().as_nanos() as f64 / n as f64,
        if put_batch > 0 {
            format!(" ({put_batch} per put_many)")
        } else {
            String::new()
        }
    );
    let build = t.elapsed();
    if let Some(b) = db.info().huge_page_bytes {
        println!("{engine}: pool on huge pages: {} MiB", b >> 20);
    }
    let db = if std::env::var_os("ANON").is_some() {
        db
    } else {
        // Reopen: the engine's recovery rebuilds its DRAM state.
        let reopens: usize = std::env::var("REOPENS")
            .map(|r| r.parse().expect("REOPENS is a number"))
            .unwrap_or(1)
            .max(1);
        let reopen = Options {
            engine_config: opts.engine_config.clone(),
            small_pages: opts.small_pages,
            ..Options::default()
        };
        let mut db = db;
        for _ in 0..reopens {
            drop(db);
            let t = Instant::now();
            db = Db::open(dir.path().join("probe.pool"), &reopen).expect("reopen");
            let rec = t.elapsed();
            println!(
                "{engine}: recovery {:.0} ms, build {:.0} ms: {:.2}x",
                rec.as_secs_f64() * 1e3,
                build.as_secs_f64() * 1e3,
                build.as_secs_f64() / rec.as_secs_f64()
            );
        }
        db
    };
    let db_b = std::env::var_os("AB").map(|_| {
        let mut o = opts.clone();
        add_settings("AB", &mut o);
        let b = Db::create_anonymous(&o).expect("create the B pool");
        for i in 0..keys.len() {
            b.put(keys.get(i), &(i as u64 + 1).to_le_bytes())
                .expect("put");
        }
        b
    });
    let mut order: Vec<usize> = (0..keys.len()).collect();
    for i in (1..order.len()).rev() {
        let j = (splitmix(i as u64 ^ 77) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    // The keys in loading order and in search order, as one FNV-1a digest
    // each (of every key's length as a little-endian `u32`, then its
    // bytes): scripts/authors/driver.c prints the same line, and
    // scripts/authors/selftest.sh checks that both drivers do the same work.
    let digest = |idx: &mut dyn Iterator<Item = usize>| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for i in idx {
            let k = keys.get(i);
            for &b in (k.len() as u32).to_le_bytes().iter().chain(k) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    };
    println!(
        "{engine}: key digest {n} {:016x} {:016x}",
        digest(&mut (0..keys.len())),
        digest(&mut order.iter().copied())
    );
    // LFENCE=1 serializes successive searches (no overlap of their misses).
    let lfence = std::env::var_os("LFENCE").is_some();
    // PAD=K runs K independent instructions after each search.
    let pad: u32 = std::env::var("PAD")
        .map(|p| p.parse().expect("PAD is 50, 100 or 200"))
        .unwrap_or(0);
    if pad > 0 && !cfg!(target_arch = "x86_64") {
        eprintln!("PAD is ignored: not an x86-64 machine");
    }
    if lfence && !cfg!(target_arch = "x86_64") {
        eprintln!("LFENCE=1 is ignored: not an x86-64 machine");
    }
    // BATCH=G looks keys up G at a time (`Db::get_many_with`).
    let batch: usize = std::env::var("BATCH")
        .map(|t| t.parse().expect("BATCH is a number"))
        .unwrap_or(0);
    let order = &order;
    let search_all = |db: &Db, start: usize| {
        let mut found = 0u64;
        if batch > 0 {
            let all: Vec<usize> = order[start..]
                .iter()
                .chain(&order[..start])
                .copied()
                .collect();
            let mut ks: Vec<&[u8]> = Vec::with_capacity(batch);
            for group in all.chunks(batch) {
                ks.clear();
                ks.extend(group.iter().map(|&i| keys.get(i)));
                db.get_many_with(&ks, |_, v| found += u64::from(v.is_some()))
                    .expect("get_many");
            }
            assert_eq!(found, n, "every key is found");
            return;
        }
        for &i in order[start..].iter().chain(&order[..start]) {
            if db
                .get_with(keys.get(i), |v| v.len())
                .expect("get")
                .is_some()
            {
                found += 1;
            }
            #[cfg(target_arch = "x86_64")]
            if pad > 0 {
                pad_instructions(pad);
            }
            #[cfg(target_arch = "x86_64")]
            if lfence {
                // SAFETY: lfence has no preconditions (x86-64 always has SSE2).
                unsafe { std::arch::x86_64::_mm_lfence() };
            }
        }
        assert_eq!(found, n, "every key is found");
    };
    let searches: usize = std::env::var("SEARCHES")
        .map(|t| t.parse().expect("SEARCHES is a number"))
        .unwrap_or(3);
    let rounds: Vec<(&str, &Db)> = match &db_b {
        Some(b) => [("A ", &db), ("B ", b)].repeat(5),
        None => vec![("", &db); searches],
    };
    for (name, db) in rounds {
        let t = Instant::now();
        std::thread::scope(|s| {
            for k in 1..threads {
                let search_all = &search_all;
                s.spawn(move || search_all(db, k * order.len() / threads));
            }
            search_all(db, 0);
        });
        let per = if threads > 1 {
            format!(" ({threads} threads)")
        } else {
            String::new()
        };
        println!(
            "{engine}: search {name}{:.0} ns/op{per}",
            t.elapsed().as_nanos() as f64 / (n * threads as u64) as f64
        );
    }
    // SCAN=L: ordered scans of L keys each (`Db::scan_with`), from keys
    // taken in the shuffled order, three rounds of 20,000.
    let scan_len: usize = std::env::var("SCAN")
        .map(|l| l.parse().expect("SCAN is a number"))
        .unwrap_or(0);
    if scan_len > 0 {
        const SCANS: usize = 20_000;
        for round in 0..3 {
            let (mut returned, mut bytes) = (0usize, 0usize);
            let t = Instant::now();
            for s in 0..SCANS {
                let start = keys.get(order[(round * SCANS + s) % order.len()]);
                let mut left = scan_len;
                db.scan_with(Bound::Included(start), Bound::Unbounded, |_, v| {
                    bytes += v.len();
                    left -= 1;
                    left > 0
                })
                .expect("scan");
                returned += scan_len - left;
            }
            let ns = t.elapsed().as_nanos() as f64;
            println!(
                "{engine}: scan of {scan_len} {:.0} ns/scan, {:.0} ns/key ({bytes} value bytes)",
                ns / SCANS as f64,
                ns / returned as f64
            );
        }
    }
    // DELETES=1: then deletes every key, in the shuffled order.
    if std::env::var_os("DELETES").is_some() {
        let t = Instant::now();
        for &i in order {
            assert!(
                db.delete(keys.get(i)).expect("delete"),
                "every key is there"
            );
        }
        println!(
            "{engine}: delete {:.0} ns/op",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}
