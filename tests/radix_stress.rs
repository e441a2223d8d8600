//! Multi-threaded stress test of WORT, WOART and ART+CoW against an oracle
//! (the test is in `common/stress.rs`), with `writers=striped`: writers of
//! different root children run at once (`engine/radix/striped.rs`; the
//! default since 2026-11-27), beside scans (one root child's stripe at a
//! time), batched gets and batched puts. Also WORT with the tree-wide lock
//! (`writers=locked`), each tree with 4 writers, 2 scanners at once and
//! locked point reads (`reads=locked`), and bounded, early-stopping scans
//! against writers that reshape the root between stripes
//! (`*_scans_miss_no_stable_key`), and threads that only delete, each
//! the others' keys too (`*_deletes_everywhere`).
//!
//! Keys start with one of 24 bytes, so the root node has 24 children, and
//! WORT's root 15 (their first nibbles), shared by every writer; under
//! them each writer's keys end inside one another's subtrees. Each
//! writer's lone key is a single byte of its own, `0xF0 + w`: putting and
//! deleting it adds and removes a child of an ART root (a write that needs
//! the whole tree, while other writers hold their stripes), and a WORT
//! root's slot F.
//!
//! `PMINDEX_STRESS_THREADS=16 PMINDEX_STRESS_OPS=5000 cargo test --release
//! --test radix_stress` on a bigger machine. (One operation in twenty of
//! each writer needs the whole tree, so writers wait for each other, and
//! for the scanners, every few operations: at 20,000 operations per
//! writer one test took 66 s on a 2-vCPU machine.)

mod common;

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use common::in_bounds;
use common::stress::{env, stress, Stop, KEYS};
use pmindex::Db;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Key `j` of writer `w` (see the module doc).
fn key(w: usize, j: usize) -> Vec<u8> {
    if j == KEYS {
        return vec![0xF0 + w as u8];
    }
    let mut k = vec![(j % 24) as u8 * 10, b'k'];
    k.extend_from_slice(format!("{j:05}.{w:02}").as_bytes());
    k
}

fn ops() -> usize {
    env("PMINDEX_STRESS_OPS", 100_000) / 2
}

#[test]
fn wort_writers_of_different_root_children() {
    stress("wort:writers=striped", key, ops());
}

#[test]
fn woart_writers_of_different_root_children() {
    stress("woart:writers=striped", key, ops());
}

#[test]
fn art_cow_writers_of_different_root_children() {
    stress("art-cow:writers=striped", key, ops());
}

/// The tree-wide lock (`writers=locked`) under the same load.
#[test]
fn wort_with_one_writer_at_a_time() {
    stress("wort:writers=locked", key, ops() / 2);
}

/// A root whose compressed path is longer than its header holds (8 bytes;
/// the header keeps 5, WORT's 10 nibbles): a walk reads such a path from a
/// leaf under the root. A stripe's writer must not (it did, found by a
/// review): the leftmost leaf is another stripe's, which one thread frees
/// and refills with a key off the root's path (an update of an absent key
/// writes its leaf before it walks), while another thread puts keys off
/// the path. A writer that read the refilled leaf took its key for on the
/// path, put it under the root's child for its unit, and lost the key
/// already there: 7 to 33 keys in 3 to 4 seconds per tree before the fix
/// (the root's path kept in DRAM by the whole tree's holders).
fn long_root_path(engine: &str) {
    const P: &[u8] = b"PREFIX--";
    let key = |p: &[u8], unit: u8, rest: u32| {
        let mut k = p.to_vec();
        k.push(unit);
        k.extend_from_slice(&rest.to_be_bytes());
        k
    };
    let db = Db::create_anonymous(&common::options(engine, 256 << 20)).unwrap();
    for u in 0..=255u8 {
        db.put(&key(P, u, 0), b"seed").unwrap();
    }
    db.put(&key(P, 0, 1), b"seed").unwrap();
    let ops = env("PMINDEX_STRESS_OPS", 100_000);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // The stripe of unit 0: frees the leftmost leaf and refills it.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                db.put(&key(P, 0, 0), b"seed").unwrap();
                assert!(db.delete(&key(P, 0, 0)).unwrap());
                let absent = db.update(&key(b"PREFIXzz", 0, 0), b"seed");
                assert!(
                    matches!(absent, Err(pmindex::Error::KeyNotFound)),
                    "{absent:?}"
                );
            }
        });
        // Keys off the root's path, under other units (the other thread
        // stops when this one ends, or panics).
        let _stop = Stop(&stop);
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..ops {
            let k = key(b"PREFIXzz", rng.gen_range(1..=255u8), 0);
            assert!(!db.put(&k, b"new").unwrap(), "{k:?} was there");
            let got = db.scan(Bound::Included(&k[..]), Bound::Included(&k[..]), None);
            assert_eq!(got.unwrap().len(), 1, "{k:?} misplaced");
            assert!(db.delete(&k).unwrap());
        }
    });
    for u in 1..=255u8 {
        assert_eq!(
            db.get(&key(P, u, 0)).unwrap().as_deref(),
            Some(&b"seed"[..])
        );
    }
    db.check().unwrap();
}

#[test]
fn wort_stripe_writers_under_a_long_root_path() {
    long_root_path("wort:writers=striped");
}

#[test]
fn woart_stripe_writers_under_a_long_root_path() {
    long_root_path("woart:writers=striped");
}

#[test]
fn art_cow_stripe_writers_under_a_long_root_path() {
    long_root_path("art-cow:writers=striped");
}

/// Striped writers with point reads that always take their stripe's lock
/// (`reads=locked`), and 4 writers, so that 2 scanners share the stripes
/// at once: what a stripe held for reading allows (a review's probe).
fn four_writers_with_locked_reads(engine: &str) {
    let engine = format!("{engine}:reads=locked");
    common::stress::stress_with_threads(&engine, key, ops() / 2, 4);
}

#[test]
fn wort_scans_and_locked_reads_share_stripes() {
    four_writers_with_locked_reads("wort");
}

#[test]
fn woart_scans_and_locked_reads_share_stripes() {
    four_writers_with_locked_reads("woart");
}

#[test]
fn art_cow_scans_and_locked_reads_share_stripes() {
    four_writers_with_locked_reads("art-cow");
}

/// Keys that stay for a whole [`scans_miss_no_stable_key`] run: "P" (in
/// the root's end slot whenever the root's path is "P"), "P" + u for
/// every other third unit u, and "P" + u + "s" for every third.
fn stable_keys() -> BTreeSet<Vec<u8>> {
    let mut s = BTreeSet::new();
    s.insert(b"P".to_vec());
    for u in (0..=255u8).step_by(3) {
        s.insert(vec![b'P', u, b's']);
        if u % 2 == 0 {
            s.insert(vec![b'P', u]);
        }
    }
    s
}

/// Striped scans, which hold one root child's stripe at a time and resume
/// at the next child's first key, against writers that change the root
/// between stripes: one puts and deletes keys off the root's path ("Q",
/// "O", "A", "Q\x01": the root's path flips between "P", "" and, for
/// WORT, an odd nibble path, each a whole-tree write) and "PZ\x00" (a new
/// child of the root when its path is "P"), one writes under the root's
/// children. A scanner runs bounds drawn from the stable keys and from
/// child starts ("P" + u, + 0, + 0xFF), included, excluded or unbounded,
/// and stops early at random; every scan must return its keys in order,
/// once, in bounds, with their values, and every stable key in bounds up
/// to where it stopped. `PMINDEX_STRESS_SCANS` scans per tree (default
/// 20,000). Written by a review of the one-stripe scans (2026-11-27); it
/// fails with a child's first key skipped (`child_start` one unit off)
/// and with a scan that ends at the first other stripe; with `mine`
/// always true (another stripe's children read unlocked) it failed two
/// of the three trees in one run, by the chance of a race.
fn scans_miss_no_stable_key(engine: &str) {
    let db = Db::create_anonymous(&common::options(engine, 256 << 20)).unwrap();
    let stable = stable_keys();
    for k in &stable {
        db.put(k, k).unwrap();
    }
    let mut probes: Vec<Vec<u8>> = stable.iter().cloned().collect();
    for u in 0..=255u8 {
        probes.push(vec![b'P', u]);
        probes.push(vec![b'P', u, 0]);
        probes.push(vec![b'P', u, 0xFF]);
    }
    for p in [
        &b""[..],
        b"A",
        b"O",
        b"P",
        b"P\x00",
        b"Q",
        b"Q\x00",
        b"R",
        b"\xff",
        b"\x50\x0f",
    ] {
        probes.push(p.to_vec());
    }
    let scans = env("PMINDEX_STRESS_SCANS", 20_000);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers = [
            // Writes that reshape the root: keys off its path (whole-tree
            // writes), and a new child of it.
            s.spawn(|| {
                let mut rng = SmallRng::seed_from_u64(1);
                let keys: [&[u8]; 5] = [b"Q", b"O", b"A", b"Q\x01", b"PZ\x00"];
                while !stop.load(Ordering::Relaxed) {
                    let k = keys[rng.gen_range(0..keys.len())];
                    db.put(k, k).unwrap();
                    std::thread::yield_now();
                    db.delete(k).unwrap();
                }
            }),
            // Stripe writes below the root's children.
            s.spawn(|| {
                let mut rng = SmallRng::seed_from_u64(2);
                while !stop.load(Ordering::Relaxed) {
                    let k = vec![b'P', rng.gen(), b'v', rng.gen()];
                    db.put(&k, &k).unwrap();
                    db.delete(&k).unwrap();
                }
            }),
        ];
        let scanner = s.spawn(|| {
            let _stop = Stop(&stop);
            let mut rng = SmallRng::seed_from_u64(3);
            for _ in 0..scans {
                let bound = |rng: &mut SmallRng| -> Bound<Vec<u8>> {
                    let p = probes[rng.gen_range(0..probes.len())].clone();
                    match rng.gen_range(0..5) {
                        0 | 1 => Bound::Included(p),
                        2 | 3 => Bound::Excluded(p),
                        _ => Bound::Unbounded,
                    }
                };
                let (lo, hi) = (bound(&mut rng), bound(&mut rng));
                let (lo, hi) = (
                    lo.as_ref().map(Vec::as_slice),
                    hi.as_ref().map(Vec::as_slice),
                );
                let limit = rng.gen_bool(0.3).then(|| rng.gen_range(1..20));
                let mut got: Vec<Vec<u8>> = Vec::new();
                db.scan_with(lo, hi, |k, v| {
                    assert_eq!(k, v, "{engine}: the value of {k:?}");
                    assert!(
                        in_bounds(k, lo, hi),
                        "{engine}: {k:?} out of {lo:?}..{hi:?}"
                    );
                    if let Some(p) = got.last() {
                        assert!(
                            p.as_slice() < k,
                            "{engine}: {p:?} then {k:?} in {lo:?}..{hi:?}"
                        );
                    }
                    got.push(k.to_vec());
                    limit.is_none_or(|n| got.len() < n)
                })
                .unwrap();
                let stopped = limit.is_some_and(|n| got.len() == n);
                let seen: BTreeSet<&Vec<u8>> = got.iter().collect();
                for k in stable.iter().filter(|k| in_bounds(k, lo, hi)) {
                    if stopped && Some(k) > got.last() {
                        break;
                    }
                    assert!(
                        seen.contains(k),
                        "{engine}: stable {k:?} skipped in {lo:?}..{hi:?} (got {got:?})"
                    );
                }
            }
        });
        let r = scanner.join();
        for w in writers {
            w.join().unwrap();
        }
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    });
    db.check().unwrap();
    for k in &stable {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(k.as_slice()));
    }
}

#[test]
fn wort_scans_miss_no_stable_key() {
    scans_miss_no_stable_key("wort:writers=striped");
}

#[test]
fn woart_scans_miss_no_stable_key() {
    scans_miss_no_stable_key("woart:writers=striped");
}

#[test]
fn art_cow_scans_miss_no_stable_key() {
    scans_miss_no_stable_key("art-cow:writers=striped");
}

/// Key `j` of writer `w` in [`deletes_everywhere`]: spread over 24 root
/// children, so every thread's deletes reach every stripe.
fn spread_key(w: usize, j: usize) -> Vec<u8> {
    let mut k = vec![(j % 24) as u8 * 10];
    k.extend_from_slice(format!("{j:05}.{w:02}").as_bytes());
    k
}

/// Threads that only delete, at once: each thread's kept blocks of a class
/// fill within its first deletes, and from then on nearly every release
/// is freed by the heap under its write lock (`radix/caches.rs`), while
/// the other threads check theirs under the read lock. Thread `t`
/// deletes the keys `(w, j)` with `(w + j) % threads == t`, in a shuffled
/// order, so most keys (half with 2 threads) are deleted by a thread that
/// did not write them. Then `check()` must find no
/// block lost (a leak) or freed twice, the freed blocks must take every
/// key again, and a reopen must agree.
fn deletes_everywhere(engine: &str) {
    let threads = env("PMINDEX_STRESS_THREADS", 2).max(2);
    let per = 6_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deletes.pool");
    let db = Db::create(&path, &common::options(engine, 256 << 20)).unwrap();
    // Values of 8 to 300 bytes: several block classes at once.
    let value = |w: usize, j: usize| vec![b'a' + w as u8; 8 + (j * 7) % 293];
    let fill = |db: &Db| {
        std::thread::scope(|s| {
            for w in 0..threads {
                s.spawn(move || {
                    for j in 0..per {
                        assert!(!db.put(&spread_key(w, j), &value(w, j)).unwrap());
                    }
                });
            }
        });
    };
    fill(&db);
    assert_eq!(db.len(), (threads * per) as u64);
    db.check().unwrap();
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = &db;
            s.spawn(move || {
                let mut order: Vec<(usize, usize)> = (0..threads)
                    .flat_map(|w| (0..per).map(move |j| (w, j)))
                    .filter(|&(w, j)| (w + j) % threads == t)
                    .collect();
                let mut rng = SmallRng::seed_from_u64(t as u64);
                for i in (1..order.len()).rev() {
                    order.swap(i, rng.gen_range(0..=i));
                }
                for (w, j) in order {
                    assert!(db.delete(&spread_key(w, j)).unwrap(), "key {w}/{j}");
                }
            });
        }
    });
    assert_eq!(db.len(), 0);
    db.check().unwrap();
    fill(&db);
    db.check().unwrap();
    drop(db);
    let db = Db::open(&path, &Default::default()).unwrap();
    assert_eq!(db.len(), (threads * per) as u64);
    db.check().unwrap();
    for w in 0..threads {
        for j in (0..per).step_by(97) {
            assert_eq!(db.get(&spread_key(w, j)).unwrap(), Some(value(w, j)));
        }
    }
}

#[test]
fn wort_deletes_everywhere() {
    deletes_everywhere("wort:writers=striped");
}

#[test]
fn woart_deletes_everywhere() {
    deletes_everywhere("woart:writers=striped");
}

#[test]
fn art_cow_deletes_everywhere() {
    deletes_everywhere("art-cow:writers=striped");
}
