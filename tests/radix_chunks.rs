//! The radix trees' block heap (`engine/radix/chunks.rs`) seen from the
//! API: space freed by deletes is reused, a tree emptied by deletes gives
//! its chunks back to the pool at the next open, leaves too large for a
//! carved block come and go, a format 2 heap keeps to powers of two while a
//! format 3 heap carves the sizes between, and a pool of format 1 is
//! refused with a message instead of being misread.

mod common;

use common::{assert_check, assert_db_eq, create_db, open_db, Model, TempPool};
use pmindex::pm::PoolConfig;

const ENGINES: [&str; 3] = ["wort", "woart", "art-cow"];

fn key(i: usize) -> Vec<u8> {
    format!("{:x}/k{i}", (i * 2_654_435_761) % 251).into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    // Mostly small, some in the 8 to 32 KiB classes, a few over the 32 KiB
    // carved-block limit.
    let len = if i.is_multiple_of(499) {
        40_000 + i % 3000
    } else if i.is_multiple_of(97) {
        5000 + i * 7 % 20_000
    } else {
        8 + i % 300
    };
    vec![(i % 251) as u8; len]
}

#[test]
fn space_is_reused_and_an_emptied_tree_gives_its_chunks_back() {
    for engine in ENGINES {
        let t = TempPool::new();
        let db = create_db(&t.path, engine, 64 << 20);
        let empty = db.pool().usage().bytes_in_use();
        let mut model = Model::new();
        for i in 0..5000 {
            db.put(&key(i), &value(i)).unwrap();
            model.insert(key(i), value(i));
        }
        assert_check(&db, model.len(), engine);
        let full = db.pool().usage().bytes_in_use();
        // Delete and insert again: the freed blocks are reused, so the pool
        // does not grow by more than a few chunks.
        for round in 0..3 {
            for i in 0..5000 {
                assert!(db.delete(&key(i)).unwrap());
                model.remove(&key(i));
                if i % 2 == round % 2 {
                    continue;
                }
                db.put(&key(i), &value(i + round)).unwrap();
                model.insert(key(i), value(i + round));
            }
            for i in 0..5000 {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(key(i)) {
                    db.put(&key(i), &value(i)).unwrap();
                    e.insert(value(i));
                }
            }
            assert_check(&db, model.len(), engine);
        }
        let again = db.pool().usage().bytes_in_use();
        assert!(
            again <= full + 8 * 64 * 1024,
            "{engine}: {full} bytes in use after the load, {again} after three rounds of churn"
        );
        assert_db_eq(&db, &model, engine);
        for k in model.keys() {
            assert!(db.delete(k).unwrap());
        }
        model.clear();
        assert_check(&db, 0, engine);
        drop(db);
        let db = open_db(&t.path);
        assert_check(&db, 0, engine);
        assert_eq!(
            db.pool().usage().bytes_in_use(),
            empty,
            "{engine}: an emptied tree holds chunks after reopening"
        );
        // And it is usable afterwards.
        db.put(b"after", b"x").unwrap();
        assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"x"[..]));
    }
}

#[test]
fn a_format_1_radix_pool_is_refused_with_a_message() {
    for engine in ENGINES {
        let t = TempPool::new();
        let db = create_db(&t.path, engine, 8 << 20);
        db.put(b"k", b"v").unwrap();
        drop(db);
        {
            let pool = pmindex::pm::Pool::open(&t.path, None, &PoolConfig::default()).unwrap();
            let sb = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
            let f = pool.load_u64(sb + 8).unwrap();
            assert_eq!(f >> 8, 4, "{engine}: format version 4");
            pool.store_u64(sb + 8, (f & 0xFF) | 1 << 8).unwrap();
            pool.persist(sb + 8, 8);
            pool.sync().unwrap();
        }
        let err = pmindex::Db::open(&t.path, &Default::default())
            .err()
            .unwrap_or_else(|| panic!("{engine}: a format-1 pool opened"));
        let msg = err.to_string();
        assert!(msg.contains("version 1"), "{engine}: {msg}");
        // A format newer than this build reads is named as such.
        set_version(&t.path, 5);
        let err = pmindex::Db::open(&t.path, &Default::default())
            .err()
            .unwrap_or_else(|| panic!("{engine}: a format-5 pool opened"));
        let msg = err.to_string();
        assert!(
            msg.contains("format 5, newer than this build reads"),
            "{engine}: {msg}"
        );
    }
}

#[test]
fn space_freed_in_one_class_serves_another_without_reopening() {
    for engine in ENGINES {
        let t = TempPool::new();
        let db = create_db(&t.path, engine, 2 << 20);
        // Fill the pool with small leaves (64 and 128-byte blocks).
        let mut n = 0;
        while db.put(&key(n), &[1u8; 40]).is_ok() {
            n += 1;
        }
        assert!(n > 1000, "{engine}: only {n} keys fit");
        for i in 0..n {
            assert!(db.delete(&key(i)).unwrap(), "{engine}: delete {i}");
        }
        // The small chunks are empty now; a leaf of another class (here one
        // over 32 KiB, a chunk of its own) takes their space.
        db.put(b"big", &vec![2u8; 40_000])
            .unwrap_or_else(|e| panic!("{engine}: {e}"));
        db.put(b"mid", &vec![3u8; 6000])
            .unwrap_or_else(|e| panic!("{engine}: {e}"));
        assert_check(&db, 2, engine);
        drop(db);
        let db = open_db(&t.path);
        assert_eq!(db.get(b"big").unwrap().map(|v| v.len()), Some(40_000));
        assert_check(&db, 2, engine);
    }
}

/// A new node in a block never written before flushes only the lines it
/// uses; the same node in a reused block flushes all of them (the heap
/// frontier, `pm::alloc`; `RadixTree::write_image`). WORT's node is 144
/// bytes, 3 lines: the header, `end` and slots 0..6 in the first. In
/// format 4 a node's slot map puts its two children in that line unless
/// their units are 8 apart (`nodes::w16::map_for`); format 3 has none.
#[test]
fn a_new_node_in_an_untouched_block_flushes_only_its_lines() {
    for format in [3, 4] {
        let mut opts = common::options("wort", 8 << 20);
        opts.engine_config
            .insert("wort.format".into(), format.to_string());
        new_node_flushes(pmindex::Db::create_anonymous(&opts).unwrap(), format);
    }
}

fn new_node_flushes(db: pmindex::Db, format: u64) {
    // Root node with children 1 and 2: the node class's chunk exists now.
    db.put(&[0x10], b"a").unwrap();
    db.put(&[0x20], b"b").unwrap();
    let flushed = |k: &[u8]| {
        let c0 = pmindex::pm::thread_counters();
        db.put(k, b"c").unwrap();
        (pmindex::pm::thread_counters() - c0).flushes
    };
    // 0x11 meets the leaf 0x10 under child 1: a node at depth 1 holding
    // both leaves under children 0 and 1, all in its first line. The leaf,
    // that line and the slot's line: 3.
    assert_eq!(flushed(&[0x11]), 3, "node in an untouched block");
    // The delete merges the node away and frees its block; the next
    // expansion takes that block again, where stale lines must be written.
    assert!(db.delete(&[0x11]).unwrap());
    assert_eq!(flushed(&[0x11]), 5, "node in a reused block: all 3 lines");
    // 0x2F meets 0x20: children 0 and 15, in the first and last lines in
    // format 3; in format 4 the map puts both in the first.
    let want = if format >= 4 { 3 } else { 4 };
    assert_eq!(flushed(&[0x2F]), want, "format {format}: children 0 and 15");
    // Children 8 apart: lines 0 and 1 whatever the map.
    db.put(&[0x40], b"d").unwrap();
    assert_eq!(flushed(&[0x48]), 4, "format {format}: children 0 and 8");
    db.check().unwrap();
    assert_eq!(db.get(&[0x11]).unwrap().as_deref(), Some(&b"c"[..]));
    assert_eq!(db.get(&[0x2F]).unwrap().as_deref(), Some(&b"c"[..]));
}

/// The `class` words of the tree's chunks, in list order, and the format
/// version, read from the pool file.
fn chunk_classes(path: &std::path::Path) -> (u64, Vec<u64>) {
    let pool = pmindex::pm::Pool::open(path, None, &PoolConfig::default()).unwrap();
    let sb = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
    let version = pool.load_u64(sb + 8).unwrap() >> 8;
    let mut classes = Vec::new();
    let mut at = pool.load_u64(sb + 24).unwrap();
    while at != 0 {
        classes.push(pool.load_u64(at + 8).unwrap());
        at = pool.load_u64(at + 16).unwrap();
    }
    (version, classes)
}

/// Sets the format version in the superblock of the pool at `path`.
fn set_version(path: &std::path::Path, version: u64) {
    let pool = pmindex::pm::Pool::open(path, None, &PoolConfig::default()).unwrap();
    let sb = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
    let f = pool.load_u64(sb + 8).unwrap();
    pool.store_u64(sb + 8, (f & 0xFF) | version << 8).unwrap();
    pool.persist(sb + 8, 8);
    pool.sync().unwrap();
}

/// A new pool (format 4, whose heap is format 3's) puts WORT nodes (144 bytes) and NODE16s (168) in
/// 192-byte blocks and leaves of 300-byte values in 384-byte ones; a
/// format 2 pool (`<engine>.format=2`), which older builds read, keeps to
/// powers of two (256, 512) and stays format 2; and a format 2 pool with a
/// chunk of a size between two powers of two is refused, not misread.
#[test]
fn block_sizes_between_powers_of_two_only_in_format_3() {
    for engine in ENGINES {
        let fill = |path: &std::path::Path, model: &mut Model| {
            let db = open_db(path);
            for i in 0..3000 {
                let k = format!("{:04}", i * 7919 % 10_000).into_bytes();
                let v = vec![i as u8; if i % 10 == 0 { 300 } else { 8 }];
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            assert_db_eq(&db, model, engine);
            assert_check(&db, model.len(), engine);
        };
        // Format 4 (format 3's heap, leaf-tagged pointers).
        let t = TempPool::new();
        drop(create_db(&t.path, engine, 32 << 20));
        let mut model = Model::new();
        fill(&t.path, &mut model);
        let (version, classes) = chunk_classes(&t.path);
        assert_eq!(version, 4, "{engine}");
        assert!(classes.contains(&192), "{engine}: {classes:?}");
        assert!(classes.contains(&384), "{engine}: {classes:?}");
        assert!(!classes.contains(&8), "{engine}: {classes:?}");
        let three = pmindex::Db::open(&t.path, &Default::default())
            .unwrap()
            .stats()
            .pm_bytes;

        // Format 2 (`<engine>.format=2`, as older builds made it): the same
        // keys.
        let t2 = TempPool::new();
        let mut opts = common::options(engine, 32 << 20);
        opts.engine_config
            .insert(format!("{engine}.format"), "2".into());
        drop(pmindex::Db::create(&t2.path, &opts).unwrap());
        opts.engine_config
            .insert(format!("{engine}.format"), "5".into());
        let e = pmindex::Db::create(&TempPool::new().path, &opts)
            .err()
            .unwrap();
        assert!(e.to_string().contains("expected 2"), "{engine}: {e}");
        let mut model2 = Model::new();
        fill(&t2.path, &mut model2);
        let (version, classes) = chunk_classes(&t2.path);
        assert_eq!(version, 2, "{engine}");
        assert!(
            classes.iter().all(|&c| (6..=15).contains(&c)),
            "{engine}: {classes:?}"
        );
        assert!(
            classes.contains(&8) && classes.contains(&9),
            "{engine}: {classes:?}"
        );
        let db = open_db(&t2.path);
        assert_db_eq(&db, &model2, engine);
        let two = db.stats().pm_bytes;
        drop(db);
        assert!(
            three < two,
            "{engine}: format 3 {three} bytes, format 2 {two}"
        );

        // A format 3 heap marked format 2: its 192-byte chunks are damage.
        set_version(&t.path, 2);
        let err = pmindex::Db::open(&t.path, &Default::default())
            .err()
            .unwrap_or_else(|| panic!("{engine}: misread a format 3 heap as format 2"));
        assert!(
            err.to_string().contains("bad chunk class"),
            "{engine}: {err}"
        );
    }
}

/// A creation that crashed before its superblock was published is made
/// again at open in the format the settings ask for (`<engine>.format=2`),
/// not in this build's newest; a published tree keeps its own format, and
/// a setting that names another is refused.
#[test]
fn a_crashed_creation_is_made_again_in_the_format_asked() {
    for engine in ENGINES {
        let version = |db: &pmindex::Db| {
            let pool = db.pool();
            let sb = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
            pool.load_u64(sb + 8).unwrap() >> 8
        };
        let mut opts = common::options(engine, 32 << 20);
        opts.engine_config
            .insert(format!("{engine}.format"), "2".into());
        // Nothing published: the pool as a crash right after its header.
        let fresh = pmindex::pm::Pool::create_anonymous(32 << 20, engine, &Default::default())
            .unwrap()
            .image();
        let db = pmindex::Db::open_image(&fresh, &opts).unwrap();
        assert_eq!(version(&db), 2, "{engine}");
        db.put(b"k", &[7; 300]).unwrap();
        let image = db.pool().image();
        drop(db);
        // Published: format 2 stays 2 with the default settings, and a
        // format 4 tree stays 4 with `format=2`.
        let db = pmindex::Db::open_image(&image, &common::options(engine, 32 << 20)).unwrap();
        assert_eq!(version(&db), 2, "{engine}");
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&[7; 300][..]));
        drop(db);
        let three = pmindex::Db::open_image(&fresh, &common::options(engine, 32 << 20)).unwrap();
        assert_eq!(version(&three), 4, "{engine}");
        let image = three.pool().image();
        drop(three);
        let e = pmindex::Db::open_image(&image, &opts).err().unwrap();
        assert!(
            e.to_string()
                .contains(&format!("{engine}.format=2, but this pool has format 4")),
            "{engine}: {e}"
        );
    }
}
