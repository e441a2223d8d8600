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

#[test]
fn another_thread_takes_the_room_deletes_made() {
    let t = TempPool::new();
    let db = create_db(&t.path, "hart", POOL);
    let mut model = Model::new();
    let n = fill(&db, &mut model);
    assert!(n > 3000, "only {n} values fit");
    // Every other key deleted, on this thread (the frees go to the filling
    // thread's stripe whatever thread deletes).
    for i in (0..n).step_by(2) {
        assert!(db.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
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
