//! `hart` in a full pool: the room that deletes make is taken again by
//! whichever thread writes next (docs/design.md §7, "A full pool: leaves
//! from another stripe").
//!
//! A delete frees its leaf into the stripe that holds the leaf, which is
//! the stripe of the thread that inserted it, while a new leaf comes from
//! the inserting thread's stripe. So a pool filled by one thread and half
//! emptied had room only for that thread: another thread's inserts, and a
//! server's other connection threads, got `PoolFull` (0 of 200 in the test
//! below before `Hart::take_leaf` fell back to the other stripes).

mod common;

use common::{assert_check, assert_db_eq, create_db, is_pool_full, open_db, Model, TempPool};
use pmindex::Db;

const POOL: u64 = 8 << 20;

fn key(i: usize) -> Vec<u8> {
    // Spread over many hash keys (ARTs).
    format!("{:02x}/k{i:06}", (i * 2_654_435_761) % 199).into_bytes()
}

/// Puts 1,000-byte values from a thread of its own until the pool is
/// full; returns how many fit.
fn fill(db: &Db, model: &mut Model) -> usize {
    let value = vec![7u8; 1000];
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0.. {
                match db.put(&key(i), &value) {
                    Ok(_) => {
                        model.insert(key(i), value.clone());
                    }
                    Err(e) => {
                        assert!(is_pool_full(&e), "put {i}: {e:?}");
                        return i;
                    }
                }
            }
            unreachable!()
        })
        .join()
        .unwrap()
    })
}

/// Deletes every other one of the first `n` keys (from key 0), from
/// `model` too.
fn delete_every_other(db: &Db, model: &mut Model, n: usize) {
    for i in (0..n).step_by(2) {
        assert!(db.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
}

/// Puts `value` under the keys of `range`, each one that fits into
/// `model` (a refusal must be a full pool); returns how many fit.
fn put_new(db: &Db, model: &mut Model, range: std::ops::Range<usize>, value: &[u8]) -> usize {
    range
        .filter(|&i| match db.put(&key(i), value) {
            Ok(_) => {
                model.insert(key(i), value.to_vec());
                true
            }
            Err(e) => {
                assert!(is_pool_full(&e), "{e:?}");
                false
            }
        })
        .count()
}

#[test]
fn another_thread_takes_the_room_deletes_made() {
    let t = TempPool::new();
    let db = create_db(&t.path, "hart", POOL);
    let mut model = Model::new();
    let n = fill(&db, &mut model);
    assert!(n > 3000, "only {n} values fit");
    // Every other key deleted, on this thread (the frees go to the filling
    // thread's stripe whatever thread deletes).
    delete_every_other(&db, &mut model, n);
    assert_check(&db, model.len(), "half deleted");
    let freed: Vec<usize> = (0..n).step_by(2).collect();
    let value = vec![9u8; 1000];
    // Single puts from a new thread: every freed leaf and value object is
    // room for one.
    let half = freed.len() / 2;
    let single = std::thread::scope(|s| {
        s.spawn(|| {
            freed[..half]
                .iter()
                .filter(|&&i| match db.put(&key(i), &value) {
                    Ok(_) => true,
                    Err(e) => {
                        assert!(is_pool_full(&e), "{e:?}");
                        false
                    }
                })
                .count()
        })
        .join()
        .unwrap()
    });
    assert_eq!(single, half, "single puts from another thread");
    // Batched puts from a third thread.
    let batched = std::thread::scope(|s| {
        s.spawn(|| {
            let keys: Vec<Vec<u8>> = freed[half..].iter().map(|&i| key(i)).collect();
            for chunk in keys.chunks(20) {
                let items: Vec<(&[u8], &[u8])> =
                    chunk.iter().map(|k| (&k[..], &value[..])).collect();
                db.put_many(&items).expect("room for every batch");
            }
            keys.len()
        })
        .join()
        .unwrap()
    });
    for &i in &freed {
        model.insert(key(i), value.clone());
    }
    println!("{n} values filled the pool; {single} single and {batched} batched puts from other threads took the room back");
    assert_db_eq(&db, &model, "room taken back");
    assert_check(&db, model.len(), "room taken back");
    // Full again: one more is refused, and changes nothing.
    match db.put(&key(n + 1), &value) {
        Err(e) => assert!(is_pool_full(&e), "{e:?}"),
        Ok(_) => {
            model.insert(key(n + 1), value.clone());
        }
    }
    drop(db);
    let db = open_db(&t.path);
    assert_db_eq(&db, &model, "reopened");
    assert_check(&db, model.len(), "reopened");
}

/// Format 6: with every other 1,000-byte value deleted, a full pool takes
/// new keys with 100-byte values, and updates of present keys to 100
/// bytes, though their own class has no chunk and the pool none to give.
/// With compactions (the default), the first such put moves 1,000-byte
/// values out of sparse chunks, and the 100-byte values take 128-byte
/// objects in the chunks that room makes (docs/design.md §7, "A full
/// pool: a compaction before a larger class"): the pool then takes more
/// 1,000-byte values again. Without (`compact=off`), each takes a freed
/// 1,024-byte object, and the pool is full once they are taken. A reopen
/// finds them all (recovery accepts an object of a larger class in format
/// 6), and deleting every key gives all the room back.
#[test]
fn smaller_values_take_the_room_of_deleted_larger_ones() {
    let mut fitted = Vec::new();
    for spec in ["hart", "hart:compact=off"] {
        let t = TempPool::new();
        let db = create_db(&t.path, spec, POOL);
        let mut model = Model::new();
        let n = fill(&db, &mut model);
        delete_every_other(&db, &mut model, n);
        let small = vec![3u8; 100];
        // Updates to a smaller value: the old object is freed.
        let upd: Vec<Vec<u8>> = model.keys().take(50).cloned().collect();
        for k in &upd {
            db.update(k, &small).expect("an update in a full pool");
            model.insert(k.clone(), small.clone());
        }
        // New keys: their leaves come from the deleted keys' freed leaves
        // (of the same class).
        let new_keys = put_new(&db, &mut model, n..n + n / 2, &small);
        // Nearly all fit: in a freed 1,024-byte object each, or in the
        // 128-byte chunks a compaction made room for.
        assert!(
            new_keys * 10 >= n / 2 * 9,
            "{spec}: {new_keys} of {}",
            n / 2
        );
        let more = put_new(&db, &mut model, 2 * n..3 * n, &[5u8; 1000]);
        println!(
            "{spec}: {n} values filled the pool; {new_keys} new 100-byte values after deleting \
             {}, then {more} more of 1,000 B",
            n.div_ceil(2)
        );
        assert_db_eq(&db, &model, spec);
        assert_check(&db, model.len(), spec);
        drop(db);
        let db = open_db(&t.path);
        assert_db_eq(&db, &model, &format!("{spec}, reopened"));
        assert_check(&db, model.len(), &format!("{spec}, reopened"));
        // Deletes give the room back: once every key is gone, the pool
        // takes as many 1,000-byte values as it first did.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for k in &keys {
            assert!(db.delete(k).unwrap());
        }
        model.clear();
        assert_check(&db, 0, &format!("{spec}, emptied"));
        let again = fill(&db, &mut model);
        assert!(
            again * 100 >= n * 99,
            "{spec}: {again} values fit again, {n} at first"
        );
        drop(db);
        let db = open_db(&t.path);
        assert_db_eq(&db, &model, &format!("{spec}, filled again, reopened"));
        fitted.push((n, more));
    }
    let [(n, on), (_, off)] = fitted[..] else {
        unreachable!()
    };
    // 100-byte values in 128-byte objects leave about 7/8 of the half the
    // deletes freed: room for 7 n / 16 values of 1,000 B.
    assert!(on * 4 >= n, "{on} more 1,000-byte values of {}", 7 * n / 16);
    assert!(off * 20 < n, "{off} more without compaction");
}

/// The other way round: after every other 1,000-byte value of a full
/// pool is deleted, no chunk is empty and the pool has no room for a chunk
/// of 2,048-byte objects, so a new 2,000-byte value was refused
/// (`hart.compact=off` still is). A put that finds the pool full moves the
/// values of the sparsest chunks into the free objects of the others
/// (`hart/compact.rs`), the emptied chunks go back to the pool, and the
/// put takes their room.
#[test]
fn larger_values_take_the_room_of_deleted_smaller_ones() {
    let mut fitted = Vec::new();
    for spec in ["hart", "hart:compact=off"] {
        let t = TempPool::new();
        let db = create_db(&t.path, spec, POOL);
        let mut model = Model::new();
        let n = fill(&db, &mut model);
        delete_every_other(&db, &mut model, n);
        let large = vec![4u8; 2000];
        let new_keys = put_new(&db, &mut model, n..n + n / 2, &large);
        println!(
            "{spec}: {n} values of 1,000 B filled the pool; {new_keys} new 2,000-byte values \
             after deleting {}",
            n.div_ceil(2)
        );
        assert_db_eq(&db, &model, spec);
        assert_check(&db, model.len(), spec);
        drop(db);
        let db = open_db(&t.path);
        assert_db_eq(&db, &model, &format!("{spec}, reopened"));
        assert_check(&db, model.len(), &format!("{spec}, reopened"));
        fitted.push((n, new_keys));
    }
    let [(n, on), (_, off)] = fitted[..] else {
        unreachable!()
    };
    // The deletes freed about n / 2 KB, room for n / 4 values of 2,048 B.
    assert!(on * 5 >= n / 4 * 3, "{on} new large values of {}", n / 4);
    assert!(off * 10 < on, "{off} without compaction, {on} with");
}

/// `hart.format=5` makes a pool that the versions before format 6 read:
/// each value in its own class, so the full pool of the test above
/// refuses the 100-byte values without a compaction (`compact=off`), and
/// takes them after one, which frees 1,024-byte chunks; the format is
/// fixed at creation (another value at open is refused by name, as is a
/// format this version cannot make).
#[test]
fn a_format_5_pool_is_made_on_request_and_keeps_it() {
    let t = TempPool::new();
    let db = create_db(&t.path, "hart:format=5,compact=off", POOL);
    let mut model = Model::new();
    let n = fill(&db, &mut model);
    delete_every_other(&db, &mut model, n);
    match db.put(&key(n + 1), &[3u8; 100]) {
        Err(e) => assert!(is_pool_full(&e), "{e:?}"),
        Ok(_) => panic!("format 5 keeps each value in its class"),
    }
    // The freed 1,024-byte objects still take 1,000-byte values.
    db.put(&key(0), &[4u8; 1000]).unwrap();
    model.insert(key(0), vec![4u8; 1000]);
    drop(db);
    let e = pmindex::Db::open(&t.path, &common::options("hart:format=6", POOL))
        .map(drop)
        .expect_err("another format at open is refused")
        .to_string();
    assert!(
        e.contains("hart.format=6, but this pool has format 5"),
        "{e}"
    );
    let db = pmindex::Db::open(&t.path, &common::options("hart:format=5", POOL)).unwrap();
    assert_db_eq(&db, &model, "reopened as format 5");
    // With compactions (the default at this open) the small value fits.
    db.put(&key(n + 1), &[3u8; 100]).unwrap();
    model.insert(key(n + 1), vec![3u8; 100]);
    assert_db_eq(&db, &model, "format 5, compacted");
    assert_check(&db, model.len(), "format 5, compacted");
    drop(db);
    let t2 = TempPool::new();
    let e = pmindex::Db::create(&t2.path, &common::options("hart:format=4", POOL))
        .map(drop)
        .expect_err("format 4 cannot be made")
        .to_string();
    assert!(e.contains("hart.format=4: only formats 5 and 6"), "{e}");
    let e = pmindex::Db::create(&t2.path, &common::options("hart:format=7", POOL))
        .map(drop)
        .expect_err("format 7 is refused")
        .to_string();
    assert!(e.contains("hart.format `7`"), "{e}");
    // `info` names the format.
    let db = open_db(&t.path);
    assert_eq!(db.info().settings["hart.format"], "5");
}

/// Leaves too: a full pool of 10-byte keys with inline 8-byte values,
/// every other one deleted, has its room in half-empty chunks of 64-byte
/// leaves, and a key of 40 bytes needs a 128-byte leaf, whose class has no
/// chunk. A compaction moves the leaves of some chunks into the free
/// leaves of the others (a copy and a kill each: `hart/compact.rs`), the
/// emptied chunks go back, and the longer keys take their room; 0 of them
/// fit with `compact=off`. Contents, `check` and a reopen are checked.
#[test]
fn longer_keys_take_the_room_of_deleted_shorter_ones() {
    let long = |i: usize| format!("{:02x}/a-key-of-the-128-byte-leaf-class/{i:07}", i % 199);
    let mut fitted = Vec::new();
    for spec in ["hart", "hart:compact=off"] {
        let t = TempPool::new();
        let db = create_db(&t.path, spec, POOL);
        let mut model = Model::new();
        let mut n = 0;
        loop {
            let v = (n as u64).to_le_bytes();
            match db.put(&key(n), &v) {
                Ok(_) => drop(model.insert(key(n), v.to_vec())),
                Err(e) => {
                    assert!(is_pool_full(&e), "put {n}: {e:?}");
                    break;
                }
            }
            n += 1;
        }
        delete_every_other(&db, &mut model, n);
        let mut new_keys = 0;
        for i in 0..n / 2 {
            let v = ((i as u64 + 1) << 40).to_le_bytes();
            match db.put(long(i).as_bytes(), &v) {
                Ok(_) => {
                    model.insert(long(i).into_bytes(), v.to_vec());
                    new_keys += 1;
                }
                Err(e) => assert!(is_pool_full(&e), "{e:?}"),
            }
        }
        println!(
            "{spec}: {n} keys of 10 B filled the pool; {new_keys} new keys of 40 B after \
             deleting {}",
            n.div_ceil(2)
        );
        assert_db_eq(&db, &model, spec);
        assert_check(&db, model.len(), spec);
        drop(db);
        let db = open_db(&t.path);
        assert_db_eq(&db, &model, &format!("{spec}, reopened"));
        assert_check(&db, model.len(), &format!("{spec}, reopened"));
        fitted.push((n, new_keys));
    }
    let [(n, on), (_, off)] = fitted[..] else {
        unreachable!()
    };
    // The deletes freed n / 2 leaves of 64 bytes: room for n / 4 of 128.
    assert!(on * 5 >= n / 4 * 3, "{on} new longer keys of {}", n / 4);
    assert!(off * 10 < on, "{off} without compaction, {on} with");
}

/// Readers during leaf moves: a full pool of 10-byte keys, every other one
/// deleted, then longer keys, whose puts compact and move the leaves that
/// are left, while two threads read those keys, with and without the
/// ARTs' locks (`reads=optimistic`, every ART with a point index). Each
/// read must find its key with its value: a moved leaf's ART entry and
/// point index entry change under the readers, and its old leaf is
/// killed and given back.
#[test]
fn readers_see_every_key_while_its_leaf_moves() {
    for spec in [
        "hart:point_index_above=0",
        "hart:reads=optimistic,point_index_above=0",
    ] {
        let t = TempPool::new();
        let db = create_db(&t.path, spec, POOL);
        let val = |i: usize| (i as u64 * 3 + 1).to_le_bytes();
        let mut n = 0;
        while db.put(&key(n), &val(n)).is_ok() {
            n += 1;
        }
        for i in (0..n).step_by(2) {
            assert!(db.delete(&key(i)).unwrap());
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        let (reads, new_keys) = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (db, done) = (&db, &done);
                    s.spawn(move || {
                        let mut reads = 0u64;
                        let mut i = 1 + 2 * r;
                        while !done.load(std::sync::atomic::Ordering::Relaxed) {
                            let got = db.get(&key(i)).unwrap();
                            assert_eq!(got.as_deref(), Some(&val(i)[..]), "{spec}: key {i}");
                            reads += 1;
                            i = ((i + 4) % n) | 1;
                        }
                        reads
                    })
                })
                .collect();
            let long =
                |i: usize| format!("{:02x}/a-key-of-the-128-byte-leaf-class/{i:07}", i % 199);
            let new_keys = (0..n / 2)
                .filter(|&i| db.put(long(i).as_bytes(), b"longer").is_ok())
                .count();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
            (reads, new_keys)
        });
        println!("{spec}: {new_keys} longer keys put beside {reads} reads");
        assert!(new_keys * 2 >= n / 4, "{spec}: {new_keys} of {}", n / 4);
        for i in (1..n).step_by(2) {
            assert_eq!(db.get(&key(i)).unwrap().as_deref(), Some(&val(i)[..]));
        }
        assert_check(&db, n / 2 + new_keys, spec);
    }
}
