//! Random damage to the pools of `hart`, `wort`, `woart` and `art-cow`:
//! opening a damaged pool either fails with an error or succeeds, and then
//! reads, scans, a check and writes return (values or errors) without a
//! panic and without hanging. (`tests/pool_errors.rs` does the same for
//! `pmlog` and the pool's own metadata.)
//!
//! Each case makes 1 to 4 changes (a flipped bit, or a word overwritten
//! with 0, all ones, a small or random number, or another structure's
//! offset) in lines of the pool that hold data (the allocator's records,
//! the engine's superblock or root, chunk headers, leaves, nodes, values),
//! opens the image in anonymous memory and runs a
//! fixed workload on it in a thread of its own, which must finish within a
//! deadline. `PMINDEX_DAMAGE_CASES=N` runs N cases per engine instead of
//! the quick default.

mod common;

use std::ops::Bound;
use std::sync::mpsc;
use std::time::Duration;

use common::{options, read_header, TempPool};
use pmindex::Db;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Pool size of the damaged pools (the smallest the engines take with
/// room for the workload's keys).
const POOL: u64 = 8 << 20;

/// How long one case may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// The keys of the pool before damage: short and long (up to 60 bytes),
/// keys that are prefixes of others, shared hash prefixes, and binary bytes.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..300u32)
        .map(|i| {
            let mut k = format!("key{:03}", i * 7 % 300).into_bytes();
            k.extend(std::iter::repeat_n(b'x', (i % 5 * 13) as usize));
            k
        })
        .collect();
    keys.extend((0..40u64).map(|i| (i * 0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec()));
    keys.extend([
        b"k".to_vec(),
        b"ke".to_vec(),
        b"key".to_vec(),
        vec![0u8],
        vec![],
    ]);
    keys.retain(|k| !k.is_empty());
    keys.sort();
    keys.dedup();
    keys
}

/// A value of 0 to 3,000 bytes for key `i` (inline, value objects and
/// large blocks on the engines that have them).
fn value(i: usize) -> Vec<u8> {
    let len = [0, 1, 8, 9, 24, 64, 200, 700, 3000][i % 9];
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// Builds the pool (with updates and deletes, so that slots, logs and
/// freed objects are in use) and returns its closed image.
fn pristine(engine: &str) -> Vec<u8> {
    let t = TempPool::new();
    let keys = keys();
    {
        let db = Db::create(&t.path, &options(engine, POOL)).expect("create");
        for (i, k) in keys.iter().enumerate() {
            db.put(k, &value(i)).expect("put");
        }
        for (i, k) in keys.iter().enumerate().step_by(3) {
            db.put(k, &value(i + 1)).expect("update");
        }
        for k in keys.iter().skip(1).step_by(5) {
            db.delete(k).expect("delete");
        }
        db.check().expect("the pool is sound before damage");
    }
    std::fs::read(&t.path).expect("read the pool")
}

/// Offsets of the 64-byte lines of `image` from `from` on that are not all
/// zero: where damage can change something.
fn used_lines(image: &[u8], from: u64) -> Vec<usize> {
    (from as usize..image.len())
        .step_by(64)
        .filter(|&at| {
            image[at..(at + 64).min(image.len())]
                .iter()
                .any(|&b| b != 0)
        })
        .collect()
}

/// One change to `image` in one of the `lines` that hold data: a flipped
/// bit, or an aligned word overwritten with 0, all ones, a small number, a
/// random number, or the offset of a line that holds data (a pointer to
/// another structure: cycles, shared children, a leaf where a node was).
fn damage_once(rng: &mut SmallRng, image: &mut [u8], lines: &[usize]) {
    let line = lines[rng.gen_range(0..lines.len())];
    if rng.gen_bool(0.5) {
        let at = (line + rng.gen_range(0..64)).min(image.len() - 1);
        image[at] ^= 1 << rng.gen_range(0..8);
        return;
    }
    let at = line + 8 * rng.gen_range(0..8);
    let Some(word) = image.get_mut(at..at + 8) else {
        return;
    };
    let other = lines[rng.gen_range(0..lines.len())] as u64;
    let value: u64 = match rng.gen_range(0..6) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.gen_range(1..300),
        3 => rng.gen(),
        4 => other,
        _ => other + 8 * rng.gen_range(1..8),
    };
    word.copy_from_slice(&value.to_le_bytes());
}

/// What one damaged image did.
enum Outcome {
    Refused,
    Opened,
}

/// Opens `image` and works on it; any panic propagates.
fn exercise(engine: &str, image: &[u8]) -> Outcome {
    let Ok(db) = Db::open_image(image, &options(engine, POOL)) else {
        return Outcome::Refused;
    };
    let keys = keys();
    for k in &keys {
        let _ = db.get(k);
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let _ = db.get_many_with(&refs, |_, _| {});
    let _ = db.scan(Bound::Unbounded, Bound::Unbounded, None);
    let _ = db.scan(Bound::Included(b"key1"), Bound::Excluded(b"key2"), Some(10));
    let _ = db.check();
    let _ = db.len();
    for (i, k) in keys.iter().enumerate().step_by(4) {
        let _ = db.put(k, &value(i + 2));
    }
    let _ = db.put(b"after-damage", b"x");
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .take(20)
        .map(|k| (k.as_slice(), &b"batched"[..]))
        .collect();
    let _ = db.put_many(&items);
    for k in keys.iter().step_by(7) {
        let _ = db.delete(k);
    }
    let _ = db.check();
    Outcome::Opened
}

/// Runs `cases` damaged images of `engine`; panics with every failing case
/// (a panic or a hang) and the command to rerun them.
fn damage(engine: &'static str, seed0: u64) {
    let cases: u64 = std::env::var("PMINDEX_DAMAGE_CASES")
        .map(|s| s.parse().expect("PMINDEX_DAMAGE_CASES is a number"))
        .unwrap_or(300);
    let image = pristine(engine);
    // The pristine image opens with every key.
    let db = Db::open_image(&image, &options(engine, POOL)).expect("pristine image");
    db.check().expect("pristine image is sound");
    drop(db);
    let t = TempPool::new();
    std::fs::write(&t.path, &image).unwrap();
    let lines = used_lines(&image, read_header(&t.path).lanes_offset);
    let (mut refused, mut opened, mut failures) = (0, 0, Vec::new());
    for case in 0..cases {
        let seed = seed0 + case;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut damaged = image.clone();
        for _ in 0..rng.gen_range(1..=4) {
            damage_once(&mut rng, &mut damaged, &lines);
        }
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name(format!("{engine} damage case {seed}"))
            .spawn(move || {
                let r = std::panic::catch_unwind(|| exercise(engine, &damaged));
                let _ = tx.send(r.map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into())
                }));
            })
            .expect("spawn");
        match rx.recv_timeout(DEADLINE) {
            Ok(Ok(Outcome::Refused)) => refused += 1,
            Ok(Ok(Outcome::Opened)) => opened += 1,
            Ok(Err(msg)) => failures.push(format!("case {seed}: panicked: {msg}")),
            Err(_) => {
                failures.push(format!("case {seed}: no answer in {DEADLINE:?}"));
                break; // The worker still runs; later cases would compete with it.
            }
        }
        let _ = worker.join();
    }
    println!("{engine}: {cases} damaged images, {opened} opened, {refused} refused");
    assert!(
        failures.is_empty(),
        "{engine}: {} of {cases} damaged images failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn damaged_hart_pools_never_panic() {
    damage("hart", 0);
}

#[test]
fn damaged_hart_pools_in_the_paper_order_never_panic() {
    damage("hart:persist_order=paper", 10_000);
}

#[test]
fn damaged_wort_pools_never_panic() {
    damage("wort", 20_000);
}

#[test]
fn damaged_woart_pools_never_panic() {
    damage("woart", 30_000);
}

#[test]
fn damaged_art_cow_pools_never_panic() {
    damage("art-cow", 40_000);
}
