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

/// Puts `size`-byte values under `key(0)`, `key(1)`, ... until the pool is
/// full, then deletes every other of them (in `model` too); returns how
/// many were put.
fn fill_and_delete_every_other(
    db: &pmindex::Db,
    model: &mut Model,
    size: usize,
    engine: &str,
) -> usize {
    let mut n = 0;
    loop {
        match db.put(&key(n), &vec![7u8; size]) {
            Ok(_) => {
                model.insert(key(n), vec![7u8; size]);
                n += 1;
            }
            Err(e) => {
                assert!(is_pool_full(&e), "{engine}: {e:?}");
                break;
            }
        }
    }
    for i in (0..n).step_by(2) {
        assert!(db.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
    n
}

/// `db` holds `model` and passes `check`, and so does the pool at `path`
/// reopened.
fn holds_across_a_reopen(db: pmindex::Db, path: &std::path::Path, model: &Model, engine: &str) {
    assert_db_eq(&db, model, engine);
    assert_check(&db, model.len(), engine);
    drop(db);
    let db = open_db(path);
    assert_db_eq(&db, model, engine);
    assert_check(&db, model.len(), engine);
}

/// A full pool of 1,000-byte values with every other key deleted takes
/// new keys with 100-byte values: their leaves and nodes come from the
/// freed larger blocks where their own classes have no chunk and the pool
/// none to give (before 2026-12-02: not one new key, on all four engines).
fn smaller_after_larger(engine: &str) {
    let t = TempPool::new();
    let db = create_db(&t.path, engine, 8 << 20);
    let mut model = Model::new();
    let n = fill_and_delete_every_other(&db, &mut model, 1000, engine);
    let mut added = 0;
    for i in 0..n {
        let k = format!("new/{i}").into_bytes();
        match db.put(&k, &[8u8; 100]) {
            Ok(_) => {
                model.insert(k, vec![8u8; 100]);
                added += 1;
            }
            Err(e) => {
                assert!(is_pool_full(&e), "{engine}: {e:?}");
                break;
            }
        }
    }
    println!("{engine}: {n} keys of 1,000 B, half deleted, then {added} of 100 B");
    assert!(
        added * 4 >= n,
        "{engine}: {added} new keys after deleting {}",
        n / 2
    );
    holds_across_a_reopen(db, &t.path, &model, engine);
}

#[test]
fn smaller_values_fill_the_room_larger_ones_left() {
    for engine in ["wort", "woart", "art-cow", "fptree"] {
        smaller_after_larger(engine);
    }
}

/// A full pool of 100-byte values with every other key deleted takes new
/// keys with 1,000-byte values: a put that finds the pool full compacts
/// the heap, moving blocks out of half-empty chunks of the small classes
/// so that those chunks go back to the pool for the larger class
/// (`engine/radix/compact.rs`; before 2026-12-03, none).
/// `batched`: the new keys in `put_many` calls of 16.
fn larger_after_smaller(engine: &str, batched: bool) -> (usize, usize) {
    let t = TempPool::new();
    let db = create_db(&t.path, engine, 8 << 20);
    let mut model = Model::new();
    let n = fill_and_delete_every_other(&db, &mut model, 100, engine);
    let big = vec![8u8; 1000];
    let new_key = |i: usize| format!("new/{i}").into_bytes();
    let mut added = 0;
    let mut full = false;
    for group in 0.. {
        if full {
            break;
        }
        let keys: Vec<Vec<u8>> = (group * 16..group * 16 + 16).map(new_key).collect();
        let refused = if batched {
            let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &big[..])).collect();
            db.put_many(&items).err()
        } else {
            keys.iter().find_map(|k| db.put(k, &big).err())
        };
        if let Some(e) = refused {
            assert!(is_pool_full(&e), "{engine}: {e:?}");
            full = true;
        }
        // A refused batch keeps the items before the refused one.
        for k in &keys {
            if let Some(v) = db.get(k).unwrap() {
                model.insert(k.clone(), v);
                added += 1;
            }
        }
    }
    println!(
        "{engine}{}: {n} keys of 100 B, half deleted, then {added} of 1,000 B",
        if batched { " (batched)" } else { "" }
    );
    holds_across_a_reopen(db, &t.path, &model, engine);
    (n, added)
}

#[test]
fn larger_values_take_the_room_smaller_ones_left() {
    for engine in ["wort", "woart", "art-cow", "wort:writers=locked"] {
        // Without compactions (`<engine>.compact=off`), as before
        // 2026-12-03.
        let sep = if engine.contains(':') { ',' } else { ':' };
        let (_, without) = larger_after_smaller(&format!("{engine}{sep}compact=off"), false);
        for batched in [false, true] {
            let (n, added) = larger_after_smaller(engine, batched);
            // The deletes freed n/2 leaves of 128 bytes: room for about
            // n/16 leaves of 1,024 bytes, less the nodes.
            assert!(
                added * 20 >= n && added > 10 * without.max(1),
                "{engine}: {added} new keys after deleting {} ({without} without compactions)",
                n / 2
            );
        }
    }
}
