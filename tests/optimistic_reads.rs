//! Lock-free point reads of WORT, WOART and ART+CoW (`engine/locked.rs`,
//! `engine/radix/search.rs`), of HART's point index
//! (`engine/hart/indexed.rs`) and of FAST&FAIR (`engine/fastfair/reader.rs`),
//! against a writer that changes the tree under
//! them.
//!
//! The writer grows, shrinks and reshapes the tree: churn keys are
//! inserted, updated and deleted (node growth and shrinking, prefix splits
//! and merges, leaves freed and their blocks reused; for HART, point
//! indexes grown, shrunk and emptied, their tables retired and handed out
//! again, leaves and value objects freed and reused), and stable keys get
//! new values (a leaf replaced in its slot, or a HART leaf's slot
//! flipped). Keys share prefixes and end
//! inside one another (end slots). Values run from empty to past the
//! optimistic buffer, so both the copying path and the fallback to the
//! lock are taken.
//!
//! The pool emulates a slow PM read (`PmLatency`): a search spins for
//! each line it read after its walk, before it copies the value, which
//! keeps each read open long enough for the writer to free and reuse the
//! leaf under it.
//!
//! Readers look keys up one at a time and in batches (`Db::get_many`),
//! and check every answer: a stable key is always found, and every
//! value found is one the writer wrote for that key (it names its key and
//! version, and its bytes follow from them). A torn read that slipped past
//! the version check would show as a missing stable key or a foreign or
//! torn value. At the end: the contents against the writer's model, and
//! `check()`.
//!
//! `PMINDEX_STRESS_OPS=200000 cargo test --release --test
//! optimistic_reads` for a longer run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pmindex::pm::{FlushKind, PersistConfig, PmLatency};
use pmindex::{Db, Options};

mod common;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn ops() -> u64 {
    std::env::var("PMINDEX_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

// Few keys: the writer keeps changing the nodes and leaves the readers
// are on, and a freed leaf's block is soon reused by another key.
const STABLE: u64 = 16;
const CHURN: u64 = 48;

/// Key `i`: stable keys are 8-byte integers; churn keys are short strings
/// of which some are prefixes of others (`k12` and `k123`).
fn key(i: u64) -> Vec<u8> {
    if i < STABLE {
        (i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .to_be_bytes()
            .to_vec()
    } else {
        format!("k{}", i - STABLE).into_bytes()
    }
}

/// Version `v` of key `i`'s value: a header naming both, then bytes that
/// follow from them; lengths from 0 to past the optimistic buffer.
fn value(i: u64, v: u64) -> Vec<u8> {
    let len = match v % 7 {
        0 => 0,
        1 => 8,
        6 => 300 + (v % 50) as usize,
        _ => 16 + (v % 200) as usize,
    };
    if len < 16 {
        return vec![(i % 251) as u8; len];
    }
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&i.to_le_bytes());
    out.extend_from_slice(&v.to_le_bytes());
    out.extend((16..len).map(|j| (i.wrapping_mul(31) ^ v ^ j as u64) as u8));
    out
}

/// Panics unless `got` is some version of key `i`'s value.
fn check_value(i: u64, got: &[u8]) {
    if got.len() < 16 {
        assert!(
            got.iter().all(|&b| b == (i % 251) as u8),
            "key {i}: torn or foreign short value {got:?}"
        );
        return;
    }
    let owner = u64::from_le_bytes(got[..8].try_into().unwrap());
    let v = u64::from_le_bytes(got[8..16].try_into().unwrap());
    assert_eq!(owner, i, "key {i}: a value of key {owner}");
    assert_eq!(got, &value(i, v)[..], "key {i}: torn value of version {v}");
}

// One reader: with the writer, one thread per core of a 2-core machine.
const READERS: u64 = 1;

/// An anonymous `Db` of `engine` and `size` bytes whose PM reads are slowed
/// by `read_ns` per line (emulated latency), so that readers spend long
/// inside their reads while a writer changes what they read.
fn slow_read_db(engine: &str, read_ns: u32, size: u64) -> Db {
    let slow_reads = PmLatency {
        write_ns: 0,
        read_ns,
        dram_ns: 0,
    };
    Db::create_anonymous(&Options {
        persist: PersistConfig::new(FlushKind::detect(), Some(slow_reads)).unwrap(),
        ..common::options(engine, size)
    })
    .unwrap()
}

fn stress(engine: &str) {
    let db = slow_read_db(engine, 2_000, 256 << 20);
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..STABLE {
        db.put(&key(i), &value(i, 0)).unwrap();
        model.insert(i, 0);
    }
    let fillers = fill_hart_arts(&db, engine);
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let ops = ops();
    let model = std::thread::scope(|s| {
        for r in 0..READERS {
            let (db, done, reads) = (&db, &done, &reads);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(77 + r);
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    // Half the reads one key, half a batch of 2 to 20
                    // (`Db::get_many`, one version check per batch).
                    let batch: Vec<u64> = if rng.gen_bool(0.5) {
                        vec![rng.gen_range(0..STABLE + CHURN)]
                    } else {
                        let m = rng.gen_range(2..=20);
                        (0..m).map(|_| rng.gen_range(0..STABLE + CHURN)).collect()
                    };
                    let got = if let [i] = batch[..] {
                        vec![db.get(&key(i)).unwrap()]
                    } else {
                        let ks: Vec<Vec<u8>> = batch.iter().map(|&i| key(i)).collect();
                        let ks: Vec<&[u8]> = ks.iter().map(Vec::as_slice).collect();
                        db.get_many(&ks).unwrap()
                    };
                    for (&i, got) in batch.iter().zip(got) {
                        match got {
                            Some(v) => check_value(i, &v),
                            None => assert!(i >= STABLE, "stable key {i} not found"),
                        }
                        n += 1;
                    }
                }
                reads.fetch_add(n, Ordering::Relaxed);
            });
        }
        let mut rng = SmallRng::seed_from_u64(5);
        for v in 1..=ops {
            let i = rng.gen_range(0..STABLE + CHURN);
            if i >= STABLE && rng.gen_bool(0.4) {
                db.delete(&key(i)).unwrap();
                model.remove(&i);
            } else {
                db.put(&key(i), &value(i, v)).unwrap();
                model.insert(i, v);
            }
        }
        done.store(true, Ordering::Relaxed);
        model
    });
    assert!(reads.load(Ordering::Relaxed) > 0, "the readers ran");
    for i in 0..STABLE + CHURN {
        let want = model.get(&i).map(|&v| value(i, v));
        assert_eq!(db.get(&key(i)).unwrap(), want, "key {i} at the end");
    }
    assert_eq!(db.check().unwrap().keys, model.len() as u64 + fillers);
}

/// For HART, keys that are never read nor changed, in the ARTs of the
/// churn keys (their first two bytes, `k0` to `k9`, or `k` alone), enough
/// that those ARTs have a point index (more than 64 keys,
/// `hart/points.rs`); the count. No keys for the other engines.
fn fill_hart_arts(db: &Db, engine: &str) -> u64 {
    if !engine.starts_with("hart") {
        return 0;
    }
    let mut n = 0;
    for d in 0..10 {
        for j in 0..70 {
            db.put(format!("k{d}~{j:02}").as_bytes(), b"filler")
                .unwrap();
            n += 1;
        }
    }
    n
}

#[test]
fn wort_reads_without_the_lock_see_only_written_values() {
    stress("wort");
}

#[test]
fn woart_reads_without_the_lock_see_only_written_values() {
    stress("woart");
}

#[test]
fn art_cow_reads_without_the_lock_see_only_written_values() {
    stress("art-cow");
}

// The same with the tree-wide lock (`writers=locked`): a read is checked
// against the tree's one version, where the default, striped writers
// (`engine/radix/striped.rs`), check the root's version and the key's
// stripe's.

#[test]
fn wort_locked_reads_without_the_lock_see_only_written_values() {
    stress("wort:writers=locked");
}

#[test]
fn woart_locked_reads_without_the_lock_see_only_written_values() {
    stress("woart:writers=locked");
}

#[test]
fn art_cow_locked_reads_without_the_lock_see_only_written_values() {
    stress("art-cow:writers=locked");
}

// FAST&FAIR's readers without the tree's lock (`fastfair.reads=optimistic`,
// the default), nodes of 4 entry slots so that shifts and splits run at
// every level under them.

#[test]
fn fastfair_reads_without_the_lock_see_only_written_values() {
    stress("fastfair:node_bytes=128");
}

#[test]
fn fastfair_default_nodes_reads_without_the_lock_see_only_written_values() {
    stress("fastfair");
}

// HART's point index read without the ART's lock (`hart.reads=optimistic`):
// the churn keys share the hash key `k1`..`k4` ARTs, so their point
// indexes grow, shrink and empty under the readers; a 1-byte hash key puts
// every churn key in one ART.

#[test]
fn hart_reads_without_the_lock_see_only_written_values() {
    stress("hart:reads=optimistic");
}

#[test]
fn hart_one_byte_hash_keys_reads_without_the_lock_see_only_written_values() {
    stress("hart:hash_key_len=1,reads=optimistic");
}

/// HART: two keys of one ART and one stripe, updated in turn with 64-byte
/// values, so that each update frees the value object that the next
/// update, of the other key, takes and writes. A reader of the first key
/// that read its slot, then waits (a slow emulated PM read) while the
/// object is freed and written with the other key's value, must not
/// return that value: the update and the free change the ART's sequence
/// count, and the read is tried again. (Without the count's changes in
/// the writers, this test fails within a few hundred reads.)
#[test]
fn hart_a_value_object_reused_under_a_reader_is_not_returned() {
    let db = slow_read_db("hart:reads=optimistic", 20_000, 64 << 20);
    let keys = [b"ab-x".to_vec(), b"ab-y".to_vec()];
    // Key `k`'s value of version `v`: 64 bytes that name both.
    let value = |k: usize, v: u64| {
        let mut out = vec![k as u8; 64];
        out[8..16].copy_from_slice(&v.to_le_bytes());
        out
    };
    for (k, key) in keys.iter().enumerate() {
        db.put(key, &value(k, 0)).unwrap();
    }
    // Enough other keys in their ART for it to have a point index.
    for j in 0..100 {
        db.put(format!("ab~{j:03}").as_bytes(), b"filler").unwrap();
    }
    let done = AtomicBool::new(false);
    let reads = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                let got = db.get(&keys[0]).unwrap().expect("always present");
                assert_eq!(got.len(), 64);
                assert!(
                    got[..8].iter().chain(&got[16..]).all(|&b| b == 0),
                    "key x returned another key's value: {got:?}"
                );
                n += 1;
            }
            n
        });
        for v in 1..=ops() / 5 {
            let k = (v % 2) as usize;
            db.put(&keys[k], &value(k, v)).unwrap();
        }
        done.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(reads > 0, "the reader ran");
    db.check().unwrap();
}
