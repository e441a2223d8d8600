//! The radix trees in a small pool: puts (which split paths, expand leaves
//! and grow nodes, all of which allocate more than one block) until
//! `PoolFull`; then every earlier key still reads back, the check passes (no
//! half-done split, no leaked reservation, no pending block), inserts of
//! present keys and updates of absent ones are refused as such, every key can
//! be deleted (shrinks and merges in a full pool), and a reopen keeps
//! everything. Also `fptree`, whose leaves and records come from the same
//! block heap (`engine/radix/chunks.rs`).

mod common;

use common::{assert_check, assert_db_eq, create_db, is_pool_full, open_db, Model, TempPool};

const SMALL_POOL: u64 = 2 << 20;

fn key(i: usize) -> Vec<u8> {
    // Spread over many nodes: a varying prefix, then a counter.
    format!("{:x}/k{i}", (i * 2_654_435_761) % 97).into_bytes()
}

fn fill_then_empty(engine: &str) {
    let t = TempPool::new();
    let db = create_db(&t.path, engine, SMALL_POOL);
    let mut model = Model::new();
    let value = vec![5u8; 200];
    let mut failed = None;
    for i in 0..100_000 {
        match db.put(&key(i), &value) {
            Ok(_) => {
                model.insert(key(i), value.clone());
            }
            Err(e) => {
                assert!(is_pool_full(&e), "{engine}: put {i}: {e:?}");
                failed = Some(i);
                break;
            }
        }
    }
    let failed = failed.expect("the pool fills up");
    println!("{engine}: pool full after {failed} keys");
    assert!(failed > 1000, "{engine}: only {failed} keys fit");
    assert_db_eq(&db, &model, "full pool");
    assert_check(&db, model.len(), "full pool");
    // A full pool still answers what needs no new block: the leaf a put
    // writes ahead of its walk (docs/design.md §11, "Leaf first") cannot be
    // reserved, and the walk goes on without it. Present keys refuse an
    // insert, absent keys refuse an update, and present keys can still be
    // read.
    for i in (0..failed).step_by(97) {
        match db.insert(&key(i), &value) {
            Err(pmindex::Error::KeyExists) => {}
            r => panic!("{engine}: insert of present key {i} in a full pool: {r:?}"),
        }
    }
    for i in failed + 1000..failed + 1010 {
        match db.update(&key(i), &value) {
            Err(pmindex::Error::KeyNotFound) => {}
            r => panic!("{engine}: update of absent key {i} in a full pool: {r:?}"),
        }
    }
    assert_check(&db, model.len(), "refused writes in a full pool");
    // A few more attempts at the edge: each fails cleanly or succeeds.
    for i in failed..failed + 50 {
        match db.put(&key(i), &value) {
            Ok(_) => {
                model.insert(key(i), value.clone());
            }
            Err(e) => assert!(is_pool_full(&e), "{e:?}"),
        }
        assert_check(&db, model.len(), "at the edge");
    }
    drop(db);
    let db = open_db(&t.path);
    assert_db_eq(&db, &model, "reopened");
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for (n, k) in keys.iter().enumerate() {
        assert!(db.delete(k).expect("deletes work in a full pool"), "{k:?}");
        model.remove(k);
        if n % 500 == 0 {
            assert_check(&db, model.len(), "deleting");
        }
    }
    assert_db_eq(&db, &model, "emptied");
    assert_check(&db, 0, "emptied");
}

#[test]
fn wort_full_pool() {
    fill_then_empty("wort");
}

#[test]
fn woart_full_pool() {
    fill_then_empty("woart");
}

#[test]
fn art_cow_full_pool() {
    fill_then_empty("art-cow");
}

#[test]
fn fptree_full_pool() {
    fill_then_empty("fptree");
}
