//! The multi-threaded stress test with an oracle, run by `hart_stress.rs`
//! and `radix_stress.rs`.
//!
//! Writer threads share parts of the index (ARTs, hash shards, allocation
//! stripes, radix subtrees, as the key function places them) but each owns
//! its keys, so the final contents are known: the union of the writers' own
//! models. Scanning threads run meanwhile and check that every scan is
//! strictly ordered and that every value they see is one its writer wrote
//! for that key; threads of multi-key gets (`Db::get_many_with`) check the
//! same of every value they find. Writers also put several keys at once
//! (`Db::put_many`), so batches meet single writes and reads, and now and
//! then put or delete a lone key of their own (`j` = [`KEYS`]), which the
//! key function may place apart. At the end: contents against the oracle,
//! `check()` (structure and leak check), reopen (recovery), and the same
//! again.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use pmindex::{Db, Options};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Keys `j` of writer `w` (`key(w, j)`), `j` in `0..=KEYS`; `j` = `KEYS`
/// is the writer's lone key, put and deleted in turn.
pub type Keys = fn(usize, usize) -> Vec<u8>;

/// Keys per writer, besides its lone key.
pub const KEYS: usize = 2_000;

/// A value that names its writer, key and version.
fn value(w: usize, j: usize, version: u64) -> Vec<u8> {
    let mut v = format!("{w}:{j}:{version}:").into_bytes();
    v.resize(v.len() + (version % 300) as usize, b'x');
    if version.is_multiple_of(211) {
        v.resize(6000, b'L'); // a large value now and then
    }
    v
}

fn parse(v: &[u8]) -> (usize, usize, u64) {
    let s = std::str::from_utf8(v).expect("values are ASCII");
    let mut it = s.split(':');
    let w = it.next().unwrap().parse().unwrap();
    let j = it.next().unwrap().parse().unwrap();
    let version = it.next().unwrap().parse().unwrap();
    assert_eq!(v, &value(w, j, version)[..], "torn or foreign value");
    (w, j, version)
}

fn writer(db: &Db, key: Keys, w: usize, ops: usize, keys: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(1000 + w as u64);
    let mut mine = BTreeMap::new();
    for version in 1..=ops as u64 {
        let mut j = rng.gen_range(0..keys);
        let dice = rng.gen_range(0..20);
        if dice == 5 {
            j = KEYS;
        }
        let k = key(w, j);
        if dice < 4 || (dice == 5 && mine.contains_key(&k)) {
            assert_eq!(db.delete(&k).unwrap(), mine.remove(&k).is_some());
        } else if dice == 4 {
            // A multi-key put of 1 to 40 of its keys over several ARTs (two
            // batches past 32; a repeated key also splits the call), its
            // ARTs write-locked together beside the readers' batches.
            let n = rng.gen_range(1..=40);
            let items: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                .map(|i| {
                    let j = if i == 0 { j } else { rng.gen_range(0..keys) };
                    (key(w, j), value(w, j, version))
                })
                .collect();
            let refs: Vec<(&[u8], &[u8])> = items.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            db.put_many(&refs).unwrap();
            mine.extend(items);
        } else {
            let v = value(w, j, version);
            assert_eq!(db.put(&k, &v).unwrap(), mine.contains_key(&k));
            mine.insert(k, v);
        }
    }
    mine
}

fn scanner(db: &Db, key: Keys, stop: &AtomicBool) -> usize {
    let mut scans = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut prev: Option<Vec<u8>> = None;
        db.scan_with(Bound::Unbounded, Bound::Unbounded, |k, v| {
            if let Some(p) = &prev {
                assert!(p.as_slice() < k, "scan out of order");
            }
            let (w, j, _) = parse(v);
            assert_eq!(k, &key(w, j)[..], "a value under another key");
            prev = Some(k.to_vec());
            true
        })
        .unwrap();
        scans += 1;
    }
    scans
}

/// Multi-key gets of random keys of every writer while they write: every
/// value found is one its writer wrote for that key. A batch read-locks
/// several ARTs at once while writers queue for them, so a lock order
/// that could deadlock hangs this test.
fn batch_reader(db: &Db, key: Keys, stop: &AtomicBool, writers: usize, keys: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut batches = 0;
    while !stop.load(Ordering::Relaxed) {
        let n = rng.gen_range(1..40);
        let wanted: Vec<Vec<u8>> = (0..n)
            .map(|_| key(rng.gen_range(0..writers), rng.gen_range(0..keys)))
            .collect();
        let batch: Vec<&[u8]> = wanted.iter().map(Vec::as_slice).collect();
        db.get_many_with(&batch, |i, v| {
            if let Some(v) = v {
                let (w, j, _) = parse(v);
                assert_eq!(batch[i], &key(w, j)[..], "a value under another key");
            }
        })
        .unwrap();
        batches += 1;
    }
    batches
}

/// One-key gets of random keys of every writer while they write (the
/// engines' reads without the lock among them): every value found is one
/// its writer wrote for that key, whole.
fn point_reader(db: &Db, key: Keys, stop: &AtomicBool, writers: usize, keys: usize) -> usize {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut reads = 0;
    while !stop.load(Ordering::Relaxed) {
        let k = key(rng.gen_range(0..writers), rng.gen_range(0..keys));
        if let Some(v) = db.get(&k).unwrap() {
            let (w, j, _) = parse(&v);
            assert_eq!(k, key(w, j), "a value under another key");
        }
        reads += 1;
    }
    reads
}

fn verify(db: &Db, want: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let got = db.scan(Bound::Unbounded, Bound::Unbounded, None).unwrap();
    assert_eq!(got.len(), want.len());
    for ((gk, gv), (wk, wv)) in got.iter().zip(want) {
        assert_eq!(gk, wk);
        assert_eq!(gv, wv);
    }
    for (k, v) in want {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.check().unwrap();
}

/// Sets its flag when dropped: threads that loop until the flag is set
/// stop also when the thread that would set it panics (else the scope
/// that runs them waits for ever, and the test hangs instead of failing).
pub struct Stop<'a>(pub &'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The stress test on `engine` (an engine spec, settings included) with
/// `ops` operations per writer and the keys of `key`: writer threads
/// (`PMINDEX_STRESS_THREADS`, 2 by default), half as many scanners, as
/// many batch readers and as many one-key readers.
pub fn stress(engine: &str, key: Keys, ops: usize) {
    stress_with_threads(engine, key, ops, env("PMINDEX_STRESS_THREADS", 2));
}

/// [`stress`] with `threads` writers (and half as many scanners, batch
/// readers and one-key readers), whatever `PMINDEX_STRESS_THREADS` says.
pub fn stress_with_threads(engine: &str, key: Keys, ops: usize, threads: usize) {
    let threads = threads.max(1);
    let keys = KEYS;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.pool");
    let opts = super::options(engine, 512 << 20);
    let want = {
        let db = Db::create(&path, &opts).unwrap();
        let stop = AtomicBool::new(false);
        let want = std::thread::scope(|s| {
            let scanners: Vec<_> = (0..threads.div_ceil(2))
                .map(|_| s.spawn(|| scanner(&db, key, &stop)))
                .collect();
            let batch_readers: Vec<_> = (0..threads.div_ceil(2))
                .map(|_| s.spawn(|| batch_reader(&db, key, &stop, threads, keys)))
                .collect();
            let point_readers: Vec<_> = (0..threads.div_ceil(2))
                .map(|_| s.spawn(|| point_reader(&db, key, &stop, threads, keys)))
                .collect();
            let writers: Vec<_> = (0..threads)
                .map(|w| {
                    let db = &db;
                    s.spawn(move || writer(db, key, w, ops, keys))
                })
                .collect();
            let stopping = Stop(&stop);
            let mut want = BTreeMap::new();
            for h in writers {
                want.extend(h.join().expect("writer"));
            }
            drop(stopping);
            for h in scanners {
                assert!(h.join().expect("scanner") > 0);
            }
            for h in batch_readers {
                assert!(h.join().expect("batch reader") > 0);
            }
            for h in point_readers {
                assert!(h.join().expect("one-key reader") > 0);
            }
            want
        });
        verify(&db, &want);
        want
    };
    let db = Db::open(&path, &Options::default()).unwrap();
    verify(&db, &want);
}
