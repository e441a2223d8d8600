//! The radix trees' compaction (`engine/radix/compact.rs`) while other
//! threads write and read: a put that finds the pool full moves blocks
//! out of half-empty chunks, holding the whole tree, while an updater
//! waits for its stripes and a reader reads lock-free first. One test in
//! this binary, so that the process-wide count of compactions is its own.

mod common;

use common::{create_db, is_pool_full, open_db, TempPool};
use pmindex::engine::radix::compactions;

/// Rounds of the filling thread.
const ROUNDS: u64 = 3;

/// A value of stable key `i` at version `v`: it names both, and its bytes
/// follow from them, so a reader tells a torn or foreign value.
fn stable_value(i: u64, v: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(100);
    b.extend_from_slice(&i.to_le_bytes());
    b.extend_from_slice(&v.to_le_bytes());
    b.resize(100, (i ^ v) as u8);
    b
}

fn check_stable_value(i: u64, got: &[u8]) -> u64 {
    assert_eq!(got.len(), 100, "key {i}: a value of {} bytes", got.len());
    let named = u64::from_le_bytes(got[..8].try_into().unwrap());
    let v = u64::from_le_bytes(got[8..16].try_into().unwrap());
    assert_eq!(named, i, "key {i}: a value of key {named}");
    assert_eq!(got, &stable_value(i, v)[..], "key {i}: a torn value");
    v
}

/// Compactions while other threads write and read: one thread fills the
/// pool with 100-byte values, deletes every other, fills it with
/// 1,000-byte values (which compacts) and deletes what it put, three
/// times; a second updates the stable keys; a third reads them,
/// lock-free first (every answer must be the key's own, whole). Then the
/// contents, `check` and a reopen.
fn compactions_beside_writers_and_readers(engine: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let t = TempPool::new();
    let db = create_db(&t.path, engine, 4 << 20);
    let stable = |i: u64| format!("s/{i}").into_bytes();
    let mut n = 0;
    while db.put(&stable(n), &stable_value(n, 0)).is_ok() {
        n += 1;
    }
    for i in (0..n).step_by(2) {
        assert!(db.delete(&stable(i)).unwrap());
    }
    let odd: Vec<u64> = (1..n).step_by(2).collect();
    let done = AtomicBool::new(false);
    let before = compactions();
    let (versions, reads) = std::thread::scope(|s| {
        let filler = s.spawn(|| {
            // The others stop when this thread does, also if it panics.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _done = Done(&done);
            // Puts `size`-byte values under `prefix` until the pool is full.
            let fill = |prefix: &str, size: usize| {
                let mut keys = Vec::new();
                loop {
                    let k = format!("{prefix}/{}", keys.len()).into_bytes();
                    match db.put(&k, &vec![size as u8; size]) {
                        Ok(_) => keys.push(k),
                        Err(e) => {
                            assert!(is_pool_full(&e), "{engine}: {e:?}");
                            return keys;
                        }
                    }
                }
            };
            let mut kept = Vec::new();
            for round in 0..ROUNDS {
                // Small values, every other deleted: their chunks half full.
                let small = fill(&format!("f{round}"), 100);
                for k in small.iter().step_by(2) {
                    assert!(db.delete(k).unwrap());
                }
                // Large values: their class's room only a compaction makes.
                let large = fill(&format!("g{round}"), 1000);
                assert!(!large.is_empty(), "{engine}: round {round} put nothing");
                for k in &large {
                    assert!(db.delete(k).unwrap());
                }
                for k in small.iter().skip(1).step_by(2) {
                    if round + 1 < ROUNDS {
                        assert!(db.delete(k).unwrap());
                    } else {
                        kept.push(k.clone());
                    }
                }
            }
            kept
        });
        let updater = s.spawn(|| {
            let mut versions = vec![0u64; odd.len()];
            let mut v = 1;
            while !done.load(Ordering::Relaxed) {
                for (j, &i) in odd.iter().enumerate().step_by(7) {
                    match db.put(&stable(i), &stable_value(i, v)) {
                        Ok(_) => versions[j] = v,
                        Err(e) => assert!(is_pool_full(&e), "{engine}: {e:?}"),
                    }
                }
                v += 1;
            }
            versions
        });
        let reader = s.spawn(|| {
            let mut reads = 0u64;
            while !done.load(Ordering::Relaxed) {
                for &i in odd.iter().step_by(3) {
                    let got = db.get(&stable(i)).unwrap();
                    let got = got.unwrap_or_else(|| panic!("{engine}: stable key {i} missing"));
                    check_stable_value(i, &got);
                    reads += 1;
                }
            }
            reads
        });
        let live = filler.join().unwrap();
        let versions = updater.join().unwrap();
        let reads = reader.join().unwrap();
        for k in &live {
            assert!(db.get(k).unwrap().is_some(), "{engine}: filler key lost");
        }
        (versions, reads)
    });
    let after = compactions();
    let (made, moved) = (after.0 - before.0, after.1 - before.1);
    println!("{engine}: {made} compactions moved {moved} blocks, {reads} reads beside them");
    // Each round's large values need one at least.
    assert!(made >= ROUNDS, "{engine}: {made} compactions");
    let expect = |db: &pmindex::Db| {
        for (j, &i) in odd.iter().enumerate() {
            let got = db.get(&stable(i)).unwrap().expect("stable key");
            assert_eq!(
                check_stable_value(i, &got),
                versions[j],
                "{engine}: key {i}"
            );
        }
        db.check().unwrap_or_else(|e| panic!("{engine}: {e}"));
    };
    expect(&db);
    drop(db);
    expect(&open_db(&t.path));
}

#[test]
fn compactions_beside_writers_and_readers_keep_every_key() {
    for engine in ["wort", "woart", "art-cow"] {
        compactions_beside_writers_and_readers(engine);
    }
}
