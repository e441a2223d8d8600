//! Opening damaged or foreign files gives typed errors, never a panic.
//!
//! Every test prints the error's Display; run with
//! `cargo test --release --test pool_errors -- --nocapture --test-threads 1`
//! to read the messages.

mod common;

use std::path::Path;

use common::{
    expect_err, open_db, options, read_at, read_header, read_u64_at, write_at, write_u64_at,
    TempPool,
};
use pmindex::pm::{Pool, PoolConfig, CHUNK_SIZE, MIN_POOL_SIZE};
use pmindex::{Db, Error, Options};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A small pmlog pool with a few keys, closed.
fn make_pool(path: &Path) {
    let db = Db::create(path, &options("pmlog", 4 << 20)).expect("create pool");
    for i in 0..100u32 {
        db.put(format!("key{i:03}").as_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    db.check().unwrap();
}

/// Opens the pool `make_pool` made and checks that its 100 keys are all
/// there and the pool is sound; returns it open.
fn reopens_intact(path: &Path) -> Db {
    let db = open_db(path);
    assert_eq!(db.len(), 100);
    db.check().unwrap();
    db
}

fn open(path: &Path) -> pmindex::Result<Db> {
    Db::open(path, &Options::default())
}

#[test]
fn missing_file_is_an_io_error() {
    let t = TempPool::new();
    expect_err!(open(&t.path), Error::Io { .. }, "missing file");
    expect_err!(open(t.dir.path()), Error::Io { .. }, "a directory");
}

#[test]
fn file_shorter_than_a_header_is_not_a_pool() {
    let t = TempPool::new();
    for len in [0usize, 1, 100, 191, 199] {
        std::fs::write(&t.path, vec![0xAB; len]).unwrap();
        let e = expect_err!(
            open(&t.path),
            Error::NotAPool { .. },
            format!("{len}-byte file")
        );
        assert!(e.to_string().contains("too short"), "message: {e}");
    }
}

#[test]
fn random_bytes_are_not_a_pool() {
    let t = TempPool::new();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut bytes = vec![0u8; 1 << 20];
    rng.fill(&mut bytes[..]);
    std::fs::write(&t.path, &bytes).unwrap();
    let e = expect_err!(open(&t.path), Error::NotAPool { .. }, "random bytes");
    assert!(e.to_string().contains("wrong magic"), "message: {e}");
    // A text file.
    std::fs::write(&t.path, "hello, this is not a pool\n".repeat(100)).unwrap();
    expect_err!(open(&t.path), Error::NotAPool { .. }, "text file");
    // All zeros: nothing was ever written.
    std::fs::write(&t.path, vec![0u8; 1 << 20]).unwrap();
    expect_err!(open(&t.path), Error::NotAPool { .. }, "zero-filled file");
    // The file is left as it was.
    assert_eq!(std::fs::read(&t.path).unwrap(), vec![0u8; 1 << 20]);
}

#[test]
fn zeroed_magic_means_creation_never_finished() {
    let t = TempPool::new();
    make_pool(&t.path);
    write_at(&t.path, 0, &[0u8; 8]);
    let e = expect_err!(open(&t.path), Error::NotAPool { .. }, "zeroed magic");
    assert!(e.to_string().contains("never finished"), "message: {e}");
}

#[test]
fn flipped_byte_in_checksummed_header_is_corrupt() {
    let t = TempPool::new();
    make_pool(&t.path);
    let original = read_at(&t.path, 0, 192);
    // Bytes 0..8 are the magic (NotAPool), 8..12 the version
    // (UnsupportedVersion); 12..128 are checked by the CRC (128.. are the
    // root slots, outside it).
    let mut printed = false;
    for off in 12..128u64 {
        write_at(&t.path, off, &[original[off as usize] ^ 0x10]);
        match open(&t.path) {
            Err(e @ Error::Corrupt { .. }) => {
                if !printed {
                    println!("[flipped header byte at {off}] {e}");
                    printed = true;
                }
                if off < 120 {
                    assert!(e.to_string().contains("checksum"), "byte {off}: {e}");
                }
            }
            other => panic!("flipped header byte {off}: expected Corrupt, got {other:?}"),
        }
        write_at(&t.path, off, &original[off as usize..=off as usize]);
    }
    // Restored: the pool opens again.
    reopens_intact(&t.path);
}

#[test]
fn flipped_magic_byte_is_not_a_pool() {
    let t = TempPool::new();
    make_pool(&t.path);
    for off in 0..8u64 {
        let b = read_at(&t.path, off, 1)[0];
        write_at(&t.path, off, &[b ^ 0x01]);
        expect_err!(
            open(&t.path),
            Error::NotAPool { .. },
            format!("flipped magic byte {off}")
        );
        write_at(&t.path, off, &[b]);
    }
    open_db(&t.path).check().unwrap();
}

#[test]
fn truncated_pool_is_corrupt() {
    let t = TempPool::new();
    make_pool(&t.path);
    let size = std::fs::metadata(&t.path).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap();
    for len in [size - 4096, size / 2, 4096, 200] {
        f.set_len(len).unwrap();
        let e = expect_err!(
            open(&t.path),
            Error::Corrupt { .. },
            format!("truncated to {len} bytes")
        );
        assert!(e.to_string().contains("truncated"), "message: {e}");
    }
    // Below the header it is no longer recognisable.
    f.set_len(100).unwrap();
    expect_err!(
        open(&t.path),
        Error::NotAPool { .. },
        "truncated to 100 bytes"
    );
}

#[test]
fn extended_pool_is_corrupt() {
    let t = TempPool::new();
    make_pool(&t.path);
    let size = std::fs::metadata(&t.path).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&t.path)
        .unwrap();
    f.set_len(size + 4096).unwrap();
    let e = expect_err!(
        open(&t.path),
        Error::Corrupt { .. },
        "file longer than the pool"
    );
    assert!(e.to_string().contains("longer"), "message: {e}");
    f.set_len(size).unwrap();
    assert_eq!(open_db(&t.path).len(), 100);
}

#[test]
fn bumped_format_version_is_unsupported() {
    let t = TempPool::new();
    make_pool(&t.path);
    let h = read_header(&t.path);
    assert_eq!(h.version, 2);
    write_at(&t.path, 8, &(h.version + 1).to_le_bytes());
    let e = expect_err!(
        open(&t.path),
        Error::UnsupportedVersion { .. },
        "format version 3"
    );
    assert!(
        e.to_string().contains("reads versions 1 to 2"),
        "message: {e}"
    );
    let Error::UnsupportedVersion {
        found,
        oldest,
        supported,
        ..
    } = e
    else {
        unreachable!()
    };
    assert_eq!((found, oldest, supported), (3, 1, 2));
    write_at(&t.path, 8, &0u32.to_le_bytes());
    expect_err!(
        open(&t.path),
        Error::UnsupportedVersion { found: 0, .. },
        "format version 0"
    );
}

#[test]
fn pool_of_another_engine_is_wrong_engine() {
    let t = TempPool::new();
    drop(Pool::create(&t.path, MIN_POOL_SIZE * 2, "other", &PoolConfig::default()).unwrap());
    let e = expect_err!(
        Db::open(&t.path, &Options::with_engine("pmlog")),
        Error::WrongEngine { .. },
        "pmlog asked, pool made for `other`"
    );
    let Error::WrongEngine { expected, found } = e else {
        unreachable!()
    };
    assert_eq!((expected.as_str(), found.as_str()), ("pmlog", "other"));
    // At the pool level too.
    expect_err!(
        Pool::open(&t.path, Some("pmlog"), &PoolConfig::default()),
        Error::WrongEngine { .. },
        "Pool::open expecting pmlog"
    );
    // Without naming an engine, the pool names one this build does not have.
    expect_err!(
        Db::open(&t.path, &Options::default()),
        Error::UnknownEngine { .. } | Error::Corrupt { .. },
        "pool made for `other`, no engine asked"
    );
    // The pool itself is fine.
    let p = Pool::open(&t.path, Some("other"), &PoolConfig::default()).unwrap();
    assert_eq!(p.engine_id(), "other");
}

#[test]
fn unknown_engine_name_is_refused_before_touching_the_file() {
    let t = TempPool::new();
    let e = expect_err!(
        Db::create(&t.path, &options("no-such-engine", MIN_POOL_SIZE)),
        Error::UnknownEngine { .. },
        "create with unknown engine"
    );
    assert!(
        e.to_string().contains("pmlog"),
        "the message lists the engines: {e}"
    );
    assert!(!t.path.exists(), "a failed create left a file");
    expect_err!(
        Db::create_anonymous(&options("no-such-engine", MIN_POOL_SIZE)),
        Error::UnknownEngine { .. },
        "create_anonymous with unknown engine"
    );
    make_pool(&t.path);
    let before = std::fs::read(&t.path).unwrap();
    expect_err!(
        Db::open(&t.path, &Options::with_engine("no-such-engine")),
        Error::UnknownEngine { .. },
        "open with unknown engine"
    );
    assert!(
        std::fs::read(&t.path).unwrap() == before,
        "a refused open changed the file"
    );
}

#[test]
fn second_open_is_locked() {
    let t = TempPool::new();
    let db = Db::create(&t.path, &options("pmlog", MIN_POOL_SIZE)).unwrap();
    db.put(b"k", b"v").unwrap();
    let e = expect_err!(
        open(&t.path),
        Error::Locked { .. },
        "open while created handle is open"
    );
    assert!(
        e.to_string().contains(&*t.path.to_string_lossy()),
        "message names the file: {e}"
    );
    drop(db);
    let db = open_db(&t.path);
    expect_err!(
        open(&t.path),
        Error::Locked { .. },
        "open while opened handle is open"
    );
    expect_err!(
        Pool::open(&t.path, None, &PoolConfig::default()),
        Error::Locked { .. },
        "Pool::open while open"
    );
    // The refused opens did not disturb the open handle.
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.put(b"k2", b"v2").unwrap();
    db.check().unwrap();
    drop(db);
    let db = open_db(&t.path);
    assert_eq!(db.len(), 2);
}

#[test]
fn create_on_an_existing_path_fails_and_leaves_the_file() {
    let t = TempPool::new();
    make_pool(&t.path);
    let before = std::fs::read(&t.path).unwrap();
    expect_err!(
        Db::create(&t.path, &options("pmlog", MIN_POOL_SIZE)),
        Error::Io { .. },
        "create over a pool"
    );
    assert!(
        std::fs::read(&t.path).unwrap() == before,
        "create over an existing pool changed it"
    );
    let db = reopens_intact(&t.path);
    // Also while the pool is open, and over a file that is not a pool.
    expect_err!(
        Db::create(&t.path, &options("pmlog", MIN_POOL_SIZE)),
        Error::Io { .. },
        "create over an open pool"
    );
    drop(db);
    let other = t.sibling("notes.txt");
    std::fs::write(&other, b"precious").unwrap();
    expect_err!(
        Db::create(&other, &Options::default()),
        Error::Io { .. },
        "create over a text file"
    );
    assert_eq!(std::fs::read(&other).unwrap(), b"precious");
}

#[test]
fn bad_pool_sizes_are_refused() {
    let t = TempPool::new();
    for size in [
        0,
        4096,
        MIN_POOL_SIZE - 4096,
        MIN_POOL_SIZE + 1,
        MIN_POOL_SIZE + 100,
        (8 << 20) + 2048,
    ] {
        let label = format!("pool size {size}");
        let e = expect_err!(
            Db::create(&t.path, &options("pmlog", size)),
            Error::BadPoolSize { .. },
            label
        );
        let Error::BadPoolSize { size: s, .. } = e else {
            unreachable!()
        };
        assert_eq!(s, size);
        assert!(!t.path.exists(), "a refused size left a file");
        expect_err!(
            Db::create_anonymous(&options("pmlog", size)),
            Error::BadPoolSize { .. },
            label
        );
        expect_err!(
            Pool::create(&t.path, size, "pmlog", &PoolConfig::default()),
            Error::BadPoolSize { .. },
            label
        );
        expect_err!(
            Pool::create_anonymous(size, "pmlog", &PoolConfig::default()),
            Error::BadPoolSize { .. },
            label
        );
    }
    // The smallest size works.
    let db = Db::create(&t.path, &options("pmlog", MIN_POOL_SIZE)).unwrap();
    db.put(b"k", b"v").unwrap();
    db.check().unwrap();
}

/// Offset of chunk `i`'s descriptor, from the header.
fn desc_off(path: &Path, i: u64) -> u64 {
    read_header(path).desc_offset + 8 * i
}

/// Damage to the allocator metadata: each case writes one word, then
/// expects `Corrupt` at open, at the damaged offset.
#[test]
fn damaged_allocator_metadata_is_corrupt() {
    let t = TempPool::new();
    make_pool(&t.path);
    let h = read_header(&t.path);
    let last = h.chunk_count - 1;
    let d0 = read_u64_at(&t.path, desc_off(&t.path, 0));
    println!("descriptor of chunk 0 (the pmlog directory): {d0:#x}");
    assert_eq!(
        read_u64_at(&t.path, desc_off(&t.path, last)),
        0,
        "the last chunk should be free"
    );
    let bitmap_last = h.bitmap_offset + 128 * last;
    let cases: Vec<(&str, u64, u64, &str)> = vec![
        (
            "unknown descriptor tag",
            desc_off(&t.path, 0),
            7 << 56,
            "unknown descriptor",
        ),
        (
            "unknown tag on a free chunk",
            desc_off(&t.path, last),
            0xFF << 56,
            "unknown descriptor",
        ),
        (
            "reserved descriptor bits",
            desc_off(&t.path, 0),
            d0 | (1 << 40),
            "reserved bits",
        ),
        (
            "slab class 10",
            desc_off(&t.path, last),
            (1 << 56) | 10,
            "does not exist",
        ),
        (
            "continuation without head",
            desc_off(&t.path, last),
            (3 << 56) | 2,
            "continuation",
        ),
        (
            "large block past the heap",
            desc_off(&t.path, last),
            (2 << 56) | 5,
            "overruns",
        ),
        (
            "zero-length large block",
            desc_off(&t.path, last),
            2 << 56,
            "overruns",
        ),
        (
            "large head over a segment",
            desc_off(&t.path, 0),
            (2 << 56) | 3,
            "continuation",
        ),
        ("free chunk with bitmap bits", bitmap_last, 1, "bitmap"),
        (
            "lane record with a bad checksum",
            h.lanes_offset,
            (1 << 56) | 0x1234,
            "checksum",
        ),
    ];
    for (what, off, value, needle) in cases {
        let saved = read_u64_at(&t.path, off);
        write_u64_at(&t.path, off, value);
        let e = expect_err!(open(&t.path), Error::Corrupt { .. }, what);
        let Error::Corrupt { offset, ref reason } = e else {
            unreachable!()
        };
        assert!(
            reason.contains(needle),
            "{what}: reason `{reason}` lacks `{needle}`"
        );
        // Errors are reported at the damaged word: the descriptor, or the
        // bitmap; a broken large-block run at the first descriptor that
        // breaks it.
        let expected = match what {
            "large head over a segment" => desc_off(&t.path, 1),
            _ => off,
        };
        assert_eq!(offset, expected, "{what}: offset");
        write_u64_at(&t.path, off, saved);
    }
    // A slab whose bitmap marks blocks past its end: format the last chunk as
    // a 32 KiB slab (2 blocks) with bit 5 set.
    write_u64_at(&t.path, desc_off(&t.path, last), (1 << 56) | 9);
    write_u64_at(&t.path, bitmap_last, 1 << 5);
    let e = expect_err!(
        open(&t.path),
        Error::Corrupt { .. },
        "slab bitmap past its end"
    );
    assert!(e.to_string().contains("past the end"), "message: {e}");
    write_u64_at(&t.path, bitmap_last, 0);
    write_u64_at(&t.path, desc_off(&t.path, last), 0);
    // Undamaged again: the pool opens with its contents.
    reopens_intact(&t.path);
}

#[test]
fn damaged_engine_root_is_corrupt() {
    let t = TempPool::new();
    make_pool(&t.path);
    let h = read_header(&t.path);
    let root0 = h.roots[0];
    assert_ne!(root0, 0, "pmlog publishes its directory in root slot 0");
    for (what, value) in [
        ("root points into the header", 64),
        ("root points between blocks", h.heap_offset + 8),
        ("root is misaligned", h.heap_offset + 3),
        ("root points past the pool", h.pool_size + CHUNK_SIZE),
        (
            "root points at a free chunk",
            h.heap_offset + (h.chunk_count - 1) * CHUNK_SIZE,
        ),
    ] {
        write_u64_at(&t.path, 128, value);
        expect_err!(open(&t.path), Error::Corrupt { .. }, what);
    }
    // The directory's magic.
    write_u64_at(&t.path, 128, root0);
    let magic = read_u64_at(&t.path, root0);
    write_u64_at(&t.path, root0, magic ^ 1);
    expect_err!(open(&t.path), Error::Corrupt { .. }, "directory magic");
    write_u64_at(&t.path, root0, magic);
    // A directory slot that points nowhere, and a segment's magic.
    let seg = read_u64_at(&t.path, root0 + 8);
    assert_ne!(seg, 0, "directory slot 0 holds the first segment");
    write_u64_at(&t.path, root0 + 8, seg + 64);
    expect_err!(
        open(&t.path),
        Error::Corrupt { .. },
        "directory slot points into a block"
    );
    write_u64_at(&t.path, root0 + 8, seg);
    let seg_magic = read_u64_at(&t.path, seg);
    write_u64_at(&t.path, seg, !seg_magic);
    expect_err!(open(&t.path), Error::Corrupt { .. }, "segment magic");
    write_u64_at(&t.path, seg, seg_magic);
    reopens_intact(&t.path);
}

/// Random damage anywhere in the metadata or the data: open either fails
/// with an error or succeeds; then reads, a check, and writes must not panic.
#[test]
fn random_damage_never_panics() {
    let t = TempPool::new();
    make_pool(&t.path);
    let pristine = std::fs::read(&t.path).unwrap();
    let h = read_header(&t.path);
    // Damage only the part of the file in use: metadata and the first chunks.
    let span = h.heap_offset + 8 * CHUNK_SIZE;
    let (mut opened, mut refused, mut lost_silently) = (0, 0, 0);
    for seed in 0..300u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut image = pristine.clone();
        for _ in 0..rng.gen_range(1..=4) {
            let region = match rng.gen_range(0..4) {
                0 => 0..pmindex::pm::header::HEADER_BYTES as u64,
                1 => h.lanes_offset..h.heap_offset,
                2 => h.heap_offset..h.heap_offset + 2 * CHUNK_SIZE,
                _ => 0..span,
            };
            let off = rng.gen_range(region) as usize;
            image[off] ^= 1 << rng.gen_range(0..8);
        }
        std::fs::write(&t.path, &image).unwrap();
        println!("random damage seed {seed}");
        match open(&t.path) {
            Err(_) => refused += 1,
            Ok(db) => {
                opened += 1;
                // Damage inside a segment ends its log early: the keys after
                // it are gone, and nothing reports it (counted, not failed).
                if db.check().is_ok() && db.len() < 100 {
                    lost_silently += 1;
                }
                let _ = db.scan(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, None);
                for i in 0..100u32 {
                    let _ = db.get(format!("key{i:03}").as_bytes());
                }
                let _ = db.put(b"after-damage", b"x");
                let _ = db.delete(b"key050");
            }
        }
    }
    println!(
        "random damage: {opened} opened ({lost_silently} of them with keys lost and a passing check), \
         {refused} refused"
    );
    std::fs::write(&t.path, &pristine).unwrap();
    assert_eq!(open_db(&t.path).len(), 100);
}

#[test]
fn damaged_image_is_refused_by_open_image() {
    let t = TempPool::new();
    make_pool(&t.path);
    let mut image = std::fs::read(&t.path).unwrap();
    expect_err!(
        Db::open_image(&image[..100], &Options::default()),
        Error::NotAPool { .. },
        "image of 100 bytes"
    );
    expect_err!(
        Db::open_image(&image[..8192], &Options::default()),
        Error::Corrupt { .. },
        "truncated image"
    );
    image[40] ^= 0xFF;
    expect_err!(
        Db::open_image(&image, &Options::default()),
        Error::Corrupt { .. },
        "image with a bad checksum"
    );
    image[40] ^= 0xFF;
    let db = Db::open_image(&image, &Options::default()).unwrap();
    assert_eq!(db.len(), 100);
    db.check().unwrap();
}

/// Headers whose checksum is right but whose fields disagree with each
/// other or with the file: typed errors.
#[test]
fn consistent_checksum_over_inconsistent_fields() {
    use pmindex::pm::header::RawHeader;
    let t = TempPool::new();
    make_pool(&t.path);
    let good = read_header(&t.path);
    let write_header = |h: &RawHeader| {
        let mut h = *h;
        h.checksum = h.compute_checksum();
        write_at(&t.path, 0, &h.to_bytes()[..128]);
    };
    let cases: Vec<(&str, RawHeader)> = vec![
        (
            "chunk count one too many",
            RawHeader {
                chunk_count: good.chunk_count + 1,
                ..good
            },
        ),
        (
            "heap offset moved",
            RawHeader {
                heap_offset: good.heap_offset + CHUNK_SIZE,
                ..good
            },
        ),
        (
            "header size 8192",
            RawHeader {
                header_size: 8192,
                ..good
            },
        ),
        (
            "chunk size 4096",
            RawHeader {
                chunk_size: 4096,
                ..good
            },
        ),
        (
            "pool size larger than the file",
            RawHeader {
                pool_size: good.pool_size * 2,
                ..good
            },
        ),
        (
            "pool size not a multiple of 4096",
            RawHeader {
                pool_size: good.pool_size - 100,
                ..good
            },
        ),
    ];
    for (what, h) in cases {
        write_header(&h);
        expect_err!(open(&t.path), Error::Corrupt { .. }, what);
    }
    // Another engine's name, with a valid checksum.
    let mut other = good;
    other.engine = pmindex::pm::header::encode_engine_id("other").unwrap();
    write_header(&other);
    expect_err!(
        Db::open(&t.path, &Options::with_engine("pmlog")),
        Error::WrongEngine { .. },
        "engine renamed to `other`"
    );
    write_header(&good);
    reopens_intact(&t.path);
}

/// A pool made by `Pool::create` whose engine never published its root (a
/// crash inside `Db::create`) opens as an empty database.
#[test]
fn pool_without_an_engine_root_opens_empty() {
    let t = TempPool::new();
    drop(Pool::create(&t.path, 2 << 20, "pmlog", &PoolConfig::default()).unwrap());
    let db = open_db(&t.path);
    assert!(db.is_empty());
    db.check().unwrap();
    db.put(b"k", b"v").unwrap();
    drop(db);
    let db = open_db(&t.path);
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    db.check().unwrap();
}

/// A refused open must leave the file as it was, so that the damage can be
/// examined or repaired.
///
/// Fails on the current allocator: `Heap::recover` releases empty slabs
/// (stores 0 into their descriptors) while it walks the descriptors, so an
/// open that then finds a corrupt descriptor further on has already written
/// to the file.
#[test]
fn refused_open_leaves_the_file_unchanged() {
    let t = TempPool::new();
    make_pool(&t.path);
    {
        // Leave an empty slab behind: allocate and free one 64-byte block in
        // a root slot that pmlog does not use.
        let pool = Pool::open(&t.path, None, &PoolConfig::default()).unwrap();
        let r = pool.reserve(64).unwrap();
        let slot = pool.root_slot(7).unwrap();
        pool.activate(r, slot).unwrap();
        pool.free(slot).unwrap();
    }
    let h = read_header(&t.path);
    write_u64_at(&t.path, desc_off(&t.path, h.chunk_count - 1), 7 << 56);
    let before = std::fs::read(&t.path).unwrap();
    expect_err!(
        open(&t.path),
        Error::Corrupt { .. },
        "corrupt descriptor after an empty slab"
    );
    let after = std::fs::read(&t.path).unwrap();
    let changed: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != after[i])
        .collect();
    assert!(
        changed.is_empty(),
        "a refused open changed {} bytes of the file, the first at offset {:#x} \
         (descriptors start at {:#x})",
        changed.len(),
        changed[0],
        h.desc_offset
    );
}

/// The search loops' word loads (`Pool::words`) accept exactly the aligned
/// words inside the pool, read what `load_u64` reads, and refuse the rest
/// with an error (a damaged pointer read from PM must not be followed).
#[test]
fn word_loads_refuse_unaligned_and_outside_offsets() {
    let size = 4 << 20;
    let pool = Pool::create_anonymous(size, "pmlog", &PoolConfig::default()).unwrap();
    let words = pool.words();
    let last = size - 8;
    pool.store_u64(last, 0x1234_5678_9ABC_DEF0).unwrap();
    assert_eq!(words.load(last).unwrap(), 0x1234_5678_9ABC_DEF0);
    assert_eq!(words.load(0).unwrap(), pool.load_u64(0).unwrap());
    for bad in [
        size,
        last + 4,
        last + 1,
        1,
        7,
        4093,
        u64::MAX,
        u64::MAX - 7,
        1 << 61,
        (1 << 61) + 8,
        1 << 63,
    ] {
        expect_err!(
            words.load(bad),
            Error::Corrupt { .. },
            format!("word at {bad:#x}")
        );
    }
}

/// `Words::block` accepts exactly the aligned, non-null offsets whose whole
/// block is inside the pool; its loads read what `load_u64` reads.
#[test]
fn word_blocks_are_checked_once_for_null_alignment_and_bounds() {
    let size = 4 << 20;
    let pool = Pool::create_anonymous(size, "pmlog", &PoolConfig::default()).unwrap();
    let words = pool.words();
    let last = size - 64;
    pool.store_u64(last, 11).unwrap();
    pool.store_u64(last + 56, 22).unwrap();
    let b = words.block::<64>(last).expect("the last line of the pool");
    assert_eq!((b.load(0), b.load(56)), (11, 22));
    assert!(words.block::<8>(size - 8).is_some());
    assert!(words.block::<8>(8).is_some());
    for bad in [
        0,
        1,
        7,
        last + 8,
        last + 4,
        size,
        size - 8 + 64,
        u64::MAX - 7,
        1 << 63,
    ] {
        assert!(words.block::<64>(bad).is_none(), "block at {bad:#x}");
    }
    // Larger than the pool: refused everywhere.
    assert!(words.block::<{ 8 << 20 }>(8).is_none());
}

#[test]
#[should_panic(expected = "outside a 64-byte block")]
fn a_word_block_load_past_its_end_panics() {
    let pool = Pool::create_anonymous(4 << 20, "pmlog", &PoolConfig::default()).unwrap();
    let b = pool.words().block::<64>(4096).unwrap();
    // Computed at run time, so that the compiler cannot reject it.
    let at = std::hint::black_box(64);
    b.load(at);
}

/// The heap frontier (`pm::alloc`, "Heap frontier"): past the heap, or
/// below a chunk in use, it is `Corrupt` at open; data in a chunk past it
/// fails `Db::check`.
#[test]
fn damaged_heap_frontier_is_refused() {
    use pmindex::pm::header::FRONTIER_OFFSET;
    let t = TempPool::new();
    make_pool(&t.path);
    let h = read_header(&t.path);
    let f = h.heap_frontier;
    assert!(
        f >= 1 && f < h.chunk_count,
        "frontier {f} of {}",
        h.chunk_count
    );
    for bad in [h.chunk_count + 1, u64::from(u32::MAX) + 1, u64::MAX] {
        write_u64_at(&t.path, FRONTIER_OFFSET, bad);
        let e = expect_err!(
            open(&t.path),
            Error::Corrupt { .. },
            format!("frontier {bad}, past the heap")
        );
        assert!(e.to_string().contains("past the heap's"), "message: {e}");
    }
    // The whole heap counted as handed out is merely conservative.
    write_u64_at(&t.path, FRONTIER_OFFSET, h.chunk_count);
    open_db(&t.path).check().unwrap();
    write_u64_at(&t.path, FRONTIER_OFFSET, 0);
    let e = expect_err!(
        open(&t.path),
        Error::Corrupt { .. },
        "frontier below a chunk in use"
    );
    assert!(
        e.to_string().contains("past the heap frontier"),
        "message: {e}"
    );
    write_u64_at(&t.path, FRONTIER_OFFSET, f);
    // One byte of data in the last chunk, which was never handed out: the
    // metadata is sound, so the pool opens, and the check finds it.
    let last = h.heap_offset + (h.chunk_count - 1) * CHUNK_SIZE;
    write_at(&t.path, last + 100, &[1]);
    let db = open_db(&t.path);
    let e = expect_err!(db.check(), Error::CheckFailed(_), "data past the frontier");
    assert!(e.to_string().contains("never handed out"), "message: {e}");
    drop(db);
    write_at(&t.path, last + 100, &[0]);
    reopens_intact(&t.path);
}

/// A pool of format version 1 (no heap frontier) still opens and works; no
/// block in it counts as zeroed, and it stays version 1.
#[test]
fn a_format_1_pool_opens_and_counts_no_block_as_zeroed() {
    let t = TempPool::new();
    make_pool(&t.path);
    let mut h = read_header(&t.path);
    // What a version-1 build left: version 1, zeros where the frontier is.
    h.version = 1;
    h.heap_frontier = 0;
    h.checksum = h.compute_checksum();
    write_at(&t.path, 0, &h.to_bytes());
    let pool = Pool::open(&t.path, None, &PoolConfig::default()).unwrap();
    for size in [64u64, 4096, 1 << 20] {
        let r = pool.reserve(size).unwrap();
        assert!(!r.zeroed(), "{size}-byte block of a version-1 pool");
        pool.cancel(r).unwrap();
    }
    drop(pool);
    let db = open_db(&t.path);
    assert_eq!(db.len(), 100);
    for i in 0..2000u32 {
        db.put(format!("more{i:05}").as_bytes(), &[7; 300]).unwrap();
    }
    db.check().unwrap();
    drop(db);
    let after = read_header(&t.path);
    assert_eq!((after.version, after.heap_frontier), (1, 0));
    assert_eq!(open_db(&t.path).len(), 2100);
}

/// The allocator's metadata lost the engine's root block (damage: the
/// bitmap of the slab that holds it zeroed): open refuses the pool with the
/// root slot named, and leaves the file unchanged. Before, the allocator's
/// recovery took the slab for an empty one and released it (a durable
/// store) before the engine found its root freed, so restoring the bitmap
/// no longer repaired the pool (found by a helper's fuzzing through the
/// CLI).
#[test]
fn a_root_block_the_metadata_lost_is_refused_unchanged() {
    let t = TempPool::new();
    {
        let db = Db::create(&t.path, &options("hart", 4 << 20)).unwrap();
        for i in 0..20u32 {
            db.put(format!("key{i}").as_bytes(), b"v").unwrap();
        }
    }
    let dir = {
        let pool = Pool::open(&t.path, None, &PoolConfig::default()).unwrap();
        pool.load_u64(pool.root_slot(0).unwrap()).unwrap()
    };
    let h = read_header(&t.path);
    let chunk = (dir - h.heap_offset) / CHUNK_SIZE;
    let bitmap = h.bitmap_offset + 128 * chunk;
    for w in 0..16 {
        write_u64_at(&t.path, bitmap + 8 * w, 0);
    }
    let before = std::fs::read(&t.path).unwrap();
    match open(&t.path) {
        Err(Error::Corrupt { reason, .. }) => assert!(reason.contains("root slot 0"), "{reason}"),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("opened"),
    }
    assert!(
        std::fs::read(&t.path).unwrap() == before,
        "a refused open wrote to the file"
    );
}

/// A closed pool of `engine` (`size` bytes) holding `n` keys `key00000000`...
/// with their numbers as values.
fn filled_pool(engine: &str, size: u64, n: u32) -> TempPool {
    let t = TempPool::new();
    let db = Db::create(&t.path, &options(engine, size)).unwrap();
    for i in 0..n {
        db.put(format!("key{i:08}").as_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    t
}

/// `Db::open_read_only`: read-only opens of a pool run side by side, a
/// writer's open is refused meanwhile (and the other way round), writes
/// through the handle are refused, and nothing it does reaches the file,
/// not even a store through its pool (its mapping is private).
#[test]
fn read_only_opens_share_the_pool_and_never_write_it() {
    for engine in ["pmlog", "hart", "wort", "woart", "art-cow", "fptree"] {
        let t = filled_pool(engine, 16 << 20, 200);
        let before = std::fs::read(&t.path).unwrap();
        let a = Db::open_read_only(&t.path, &Options::default()).unwrap();
        let b = Db::open_read_only(&t.path, &Options::default()).unwrap();
        assert!(a.pool().is_read_only(), "{engine}");
        expect_err!(open(&t.path), Error::Locked { .. }, "open beside readers");
        assert_eq!(a.len(), 200, "{engine}");
        assert_eq!(
            b.get(b"key00000007").unwrap().as_deref(),
            Some(&7u32.to_le_bytes()[..])
        );
        a.check().unwrap();
        expect_err!(a.put(b"k", b"v"), Error::ReadOnly, "put");
        expect_err!(a.insert(b"k", b"v"), Error::ReadOnly, "insert");
        expect_err!(a.update(b"key00000001", b"v"), Error::ReadOnly, "update");
        expect_err!(a.delete(b"key00000001"), Error::ReadOnly, "delete");
        expect_err!(a.put_many(&[(b"k", b"v")]), Error::ReadOnly, "put_many");
        // A store through the pool changes this handle's copy only.
        let end = a.pool().size() - 8;
        a.pool().store_u64(end, 0x5eed).unwrap();
        assert_eq!(a.pool().load_u64(end).unwrap(), 0x5eed, "{engine}");
        drop((a, b));
        assert!(
            std::fs::read(&t.path).unwrap() == before,
            "{engine}: a read-only open changed the file"
        );
        let w = open_db(&t.path);
        expect_err!(
            Db::open_read_only(&t.path, &Options::default()),
            Error::Locked { .. },
            "read-only open beside a writer"
        );
        w.put(b"k", b"v").unwrap();
        assert_eq!(w.len(), 201, "{engine}");
    }
}

/// The private pages a read-only open makes: recovery of a clean pool
/// stores nothing, so the mapping copies (almost) no page. A `hart` pool
/// of 20,000 keys has about 700 chunks, whose headers recovery once
/// rewrote unchanged, copying a page each.
#[cfg(target_os = "linux")]
#[test]
fn a_read_only_open_of_a_clean_pool_copies_no_page() {
    for engine in ["pmlog", "hart", "wort", "woart", "art-cow", "fptree"] {
        let t = filled_pool(engine, 64 << 20, 20_000);
        let db = Db::open_read_only(&t.path, &Options::default()).unwrap();
        assert_eq!(db.len(), 20_000);
        let kib = private_dirty_kib(&t.path);
        assert!(kib <= 64, "{engine}: {kib} KiB of the pool copied");
    }
}

/// `Private_Dirty` of this process's mappings of `path`, in KiB (it must
/// have one).
#[cfg(target_os = "linux")]
fn private_dirty_kib(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    // The kernel shows the real path.
    let real = std::fs::canonicalize(path).unwrap();
    let name = real.to_str().unwrap();
    let mut mine = false;
    let mut found = false;
    let mut kib = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            // The path is the sixth field, spaces and all.
            mine = line.splitn(6, ' ').nth(5).map(str::trim_start) == Some(name);
            found |= mine;
        } else if mine {
            if let Some(v) = line.strip_prefix("Private_Dirty:") {
                kib += v
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    assert!(found, "no mapping of {name} in /proc/self/smaps");
    kib
}

/// A FIFO where a pool should be is refused at once (from a review:
/// `get`, `info`, `check` and `scan` on a FIFO waited forever for a writer,
/// and `put` called it "0 bytes"); so is a directory opened read-only.
#[test]
fn a_fifo_is_not_a_pool_and_nothing_waits() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path; mkfifo only reads it.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    {
        let what = "a FIFO";
        let (tx, rx) = std::sync::mpsc::channel();
        let p = fifo.clone();
        std::thread::spawn(move || {
            let results = [
                Pool::open(&p, None, &PoolConfig::default()).err(),
                Pool::open_read_only(&p, None, &PoolConfig::default()).err(),
                Pool::engine_of(&p).err(),
            ];
            tx.send(results.map(|e| e.map(|e| e.to_string()))).unwrap();
        });
        let results = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("opening {what} waited"));
        for r in results {
            let m = r.unwrap_or_else(|| panic!("{what} opened as a pool"));
            println!("{m}");
            assert!(m.contains(&format!("not a pmindex pool: {what}")), "{m}");
        }
    }
    let m = match Pool::open_read_only(dir.path(), None, &PoolConfig::default()) {
        Ok(_) => panic!("a directory opened as a pool"),
        Err(e) => e.to_string(),
    };
    assert!(m.contains("not a pmindex pool: a directory"), "{m}");
}
