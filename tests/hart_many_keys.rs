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
