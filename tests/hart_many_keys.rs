//! Many keys through HART, enough for hundreds of chunks in every list, with
//! `check()` (structure and leak check) after each phase. Regression test
//! for a bug where creating a chunk of 8-byte value objects zeroed 40 bytes
//! at each object and so wrote past the end of the chunk's block.

use pmindex::{Db, Options};

fn key(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes()
}

#[test]
fn insert_update_reopen_delete_fifty_thousand() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hart.pool");
    let n = 50_000u64;
    let opts = Options {
        engine: Some("hart".into()),
        pool_size: 128 << 20,
        ..Options::default()
    };
    {
        let db = Db::create(&path, &opts).unwrap();
        for i in 0..n {
            db.put(&key(i), &i.to_le_bytes()).unwrap();
        }
        db.check().unwrap();
        for i in (0..n).step_by(3) {
            db.put(&key(i), &[i as u8; 12]).unwrap();
        }
        db.check().unwrap();
    }
    let db = Db::open(&path, &Options::default()).unwrap();
    assert_eq!(db.len(), n);
    db.check().unwrap();
    for i in 0..n {
        let v = db.get(&key(i)).unwrap().expect("present");
        if i % 3 == 0 {
            assert_eq!(v, vec![i as u8; 12]);
        } else {
            assert_eq!(v, i.to_le_bytes());
        }
    }
    for i in 0..n {
        assert!(db.delete(&key(i)).unwrap());
    }
    assert!(db.is_empty());
    db.check().unwrap();
    let u = db.pool().usage();
    // Only the superblock and one (empty) chunk per list may remain.
    assert!(
        u.bytes_in_use() < 1 << 20,
        "{} bytes still in use",
        u.bytes_in_use()
    );
}

/// Recovery rebuilds the same index with one thread and with several
/// (phase 2 runs over chunks, phase 4 over allocation stripes), on a pool
/// with keys of every leaf size, values of several classes and above 4 KiB,
/// deleted keys (empty chunks to recycle) and updated keys.
#[test]
fn parallel_recovery_matches_serial_and_the_oracle() {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hart.pool");
    let mut oracle = BTreeMap::new();
    let opts = Options {
        engine: Some("hart".into()),
        pool_size: 256 << 20,
        ..Options::default()
    };
    {
        let db = Db::create(&path, &opts).unwrap();
        for i in 0..20_000u64 {
            let k = key(i);
            // Key lengths 1..=200 (every leaf size), including keys shorter
            // than the hash key and keys that are prefixes of others.
            let len = 1 + (i as usize * 7) % 200;
            let key: Vec<u8> = k.iter().copied().cycle().take(len).collect();
            let vlen = match i % 50 {
                0 => 5000 + i as usize % 300,
                n => (n as usize * 37) % 700,
            };
            let value = vec![(i % 251) as u8; vlen];
            db.put(&key, &value).unwrap();
            oracle.insert(key, value);
        }
        let keys: Vec<Vec<u8>> = oracle.keys().cloned().collect();
        for (j, k) in keys.iter().enumerate() {
            match j % 5 {
                0 => {
                    assert!(db.delete(k).unwrap());
                    oracle.remove(k);
                }
                1 => {
                    let v = vec![j as u8; j % 90];
                    db.put(k, &v).unwrap();
                    oracle.insert(k.clone(), v);
                }
                _ => {}
            }
        }
        db.check().unwrap();
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = oracle.into_iter().collect();
    for threads in ["1", "2", "7"] {
        let mut o = Options::default();
        o.engine_config
            .insert("hart.recovery_threads".into(), threads.into());
        let db = Db::open(&path, &o).unwrap();
        db.check().unwrap();
        let got = db.scan(Bound::Unbounded, Bound::Unbounded, None).unwrap();
        assert_eq!(got.len(), want.len(), "{threads} threads");
        assert!(
            got == want,
            "{threads} recovery threads rebuilt other contents"
        );
    }
}
