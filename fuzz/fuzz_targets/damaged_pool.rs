//! Coverage-guided damage to the pools of the PM-index engines: the
//! fuzzer's input picks an engine and a list of changes to a small pool
//! image of it (bytes overwritten in lines that hold data); opening the
//! damaged image must give an error or a database on which reads, scans,
//! a check and writes return without a panic. `tests/damaged_engine_pools.rs`
//! runs random damage of the same kinds in `cargo test`; this target lets
//! libFuzzer steer the damage towards new branches of recovery.
//!
//! `cargo fuzz run damaged_pool -s none` (see docs/design.md §8, "Damaged
//! pools").

#![no_main]

use std::ops::Bound;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmindex::{Db, Options};

/// Engines (with settings) whose pools are damaged.
const ENGINES: [(&str, &[(&str, &str)]); 5] = [
    ("hart", &[("hart.recovery_threads", "1")]),
    (
        "hart",
        &[
            ("hart.persist_order", "paper"),
            ("hart.recovery_threads", "1"),
        ],
    ),
    ("wort", &[]),
    ("woart", &[]),
    ("art-cow", &[]),
];

/// Pool size of the images.
const POOL: u64 = 2 << 20;

fn options(e: usize) -> Options {
    let (name, settings) = ENGINES[e];
    let mut o = Options {
        engine: Some(name.into()),
        pool_size: POOL,
        ..Options::default()
    };
    for (k, v) in settings {
        o.engine_config.insert((*k).into(), (*v).into());
    }
    o
}

/// Keys of the image: short, long, prefixes of one another, binary.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..48u32)
        .map(|i| {
            let mut k = format!("k{:02}", i * 7 % 48).into_bytes();
            k.extend(std::iter::repeat_n(b'x', (i % 4 * 11) as usize));
            k
        })
        .collect();
    keys.extend((0..8u64).map(|i| (i * 0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec()));
    keys.extend([b"k".to_vec(), b"k0".to_vec(), vec![0]]);
    keys.sort();
    keys.dedup();
    keys
}

fn value(i: usize) -> Vec<u8> {
    let len = [0, 3, 8, 9, 40, 300, 5000][i % 7];
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// An image of engine `e` with updates and deletes behind it, and the
/// offsets of its lines that hold data.
fn image(e: usize) -> &'static (Vec<u8>, Vec<usize>) {
    static IMAGES: [OnceLock<(Vec<u8>, Vec<usize>)>; ENGINES.len()] =
        [const { OnceLock::new() }; ENGINES.len()];
    IMAGES[e].get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("pmindex-fuzz-{}-{e}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let keys = keys();
        {
            let db = Db::create(&dir, &options(e)).expect("create the image");
            for (i, k) in keys.iter().enumerate() {
                db.put(k, &value(i)).expect("put");
            }
            for (i, k) in keys.iter().enumerate().step_by(3) {
                db.put(k, &value(i + 1)).expect("update");
            }
            for k in keys.iter().skip(1).step_by(5) {
                db.delete(k).expect("delete");
            }
        }
        let bytes = std::fs::read(&dir).expect("read the image");
        let _ = std::fs::remove_file(&dir);
        let lines = (0..bytes.len())
            .step_by(64)
            .filter(|&at| bytes[at..at + 64].iter().any(|&b| b != 0))
            .collect();
        (bytes, lines)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, changes)) = data.split_first() else {
        return;
    };
    let e = pick as usize % ENGINES.len();
    let (pristine, lines) = image(e);
    let mut img = pristine.clone();
    // Each change: a line (2 bytes), an offset in it (1), a length 1..=8
    // (1) and the bytes written (up to 8).
    for c in changes.chunks(12).filter(|c| c.len() >= 5) {
        let line = lines[u16::from_le_bytes([c[0], c[1]]) as usize % lines.len()];
        let at = line + c[2] as usize % 64;
        let n = (1 + c[3] as usize % 8).min(c.len() - 4);
        let end = (at + n).min(img.len());
        img[at..end].copy_from_slice(&c[4..4 + (end - at)]);
    }
    let Ok(db) = Db::open_image(&img, &options(e)) else {
        return;
    };
    let keys = keys();
    for k in &keys {
        let _ = db.get(k);
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let _ = db.get_many_with(&refs, |_, _| {});
    let _ = db.scan(Bound::Unbounded, Bound::Unbounded, None);
    let _ = db.check();
    for (i, k) in keys.iter().enumerate().step_by(3) {
        let _ = db.put(k, &value(i + 2));
    }
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .take(9)
        .map(|k| (k.as_slice(), &b"b"[..]))
        .collect();
    let _ = db.put_many(&items);
    for k in keys.iter().step_by(4) {
        let _ = db.delete(k);
    }
    let _ = db.check();
});
