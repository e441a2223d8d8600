//! Multi-threaded stress test of HART against an oracle.
//!
//! Writer threads share hash keys (so they contend on the same ARTs, hash
//! shards and allocation stripes) but each owns its keys, so the final
//! contents are known: the union of the writers' own models. Scanning
//! threads run meanwhile and check that every scan is strictly ordered and
//! that every value they see is one its writer wrote for that key; threads
//! of multi-key gets (`Db::get_many_with`) check the same of every value
//! they find. Writers also put several keys at once (`Db::put_many`), so
//! batches that write-lock several ARTs meet batches that read-lock them.
//! At the end: contents against the oracle, `check()` (structure and leak check),
//! reopen (recovery), and the same again.
//!
//! `PMINDEX_STRESS_THREADS=16 PMINDEX_STRESS_OPS=200000 cargo test --release
//! --test hart_stress` on a bigger machine.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use pmindex::{Db, Options};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Key `j` of writer `w`: the hash key (first two bytes) cycles through 40
/// values shared by all writers.
fn key(w: usize, j: usize) -> Vec<u8> {
    let mut k = vec![b'a' + (j % 40) as u8, b'k'];
    k.extend_from_slice(format!("{j:05}.{w:02}").as_bytes());
    k
}

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

fn writer(db: &Db, w: usize, ops: usize, keys: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(1000 + w as u64);
    let mut mine = BTreeMap::new();
    for version in 1..=ops as u64 {
        let j = rng.gen_range(0..keys);
        let k = key(w, j);
        let dice = rng.gen_range(0..20);
        if dice < 4 {
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

fn scanner(db: &Db, stop: &AtomicBool) -> usize {
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
fn batch_reader(db: &Db, stop: &AtomicBool, writers: usize, keys: usize) -> usize {
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

#[test]
fn writers_sharing_arts_and_concurrent_scans() {
    stress("hart", env("PMINDEX_STRESS_OPS", 100_000));
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
        env("PMINDEX_STRESS_OPS", 100_000) / 2,
    );
}

fn stress(engine: &str, ops: usize) {
    let threads = env("PMINDEX_STRESS_THREADS", 2).max(1);
    let keys = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.pool");
    let opts = common::options(engine, 512 << 20);
    let want = {
        let db = Db::create(&path, &opts).unwrap();
        let stop = AtomicBool::new(false);
        let want = std::thread::scope(|s| {
            let scanners: Vec<_> = (0..threads.div_ceil(2))
                .map(|_| s.spawn(|| scanner(&db, &stop)))
                .collect();
            let batch_readers: Vec<_> = (0..threads.div_ceil(2))
                .map(|_| s.spawn(|| batch_reader(&db, &stop, threads, keys)))
                .collect();
            let writers: Vec<_> = (0..threads)
                .map(|w| {
                    let db = &db;
                    s.spawn(move || writer(db, w, ops, keys))
                })
                .collect();
            let mut want = BTreeMap::new();
            for h in writers {
                want.extend(h.join().expect("writer"));
            }
            stop.store(true, Ordering::Relaxed);
            for h in scanners {
                assert!(h.join().expect("scanner") > 0);
            }
            for h in batch_readers {
                assert!(h.join().expect("batch reader") > 0);
            }
            want
        });
        verify(&db, &want);
        want
    };
    let db = Db::open(&path, &Options::default()).unwrap();
    verify(&db, &want);
}
