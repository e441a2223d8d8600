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

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmindex::sim::damage;
use pmindex::Options;

/// Engines (with settings) whose pools are damaged.
const ENGINES: [(&str, &[(&str, &str)]); 8] = [
    ("hart", &[("hart.recovery_threads", "1")]),
    (
        "hart",
        &[("hart.hash_key_len", "3"), ("hart.recovery_threads", "1")],
    ),
    (
        "hart",
        &[
            ("hart.persist_order", "paper"),
            ("hart.recovery_threads", "1"),
        ],
    ),
    (
        "hart",
        &[
            ("hart.point_index_above", "0"),
            ("hart.reads", "optimistic"),
            ("hart.recovery_threads", "1"),
        ],
    ),
    ("wort", &[]),
    ("woart", &[]),
    ("art-cow", &[]),
    ("fptree", &[("fptree.leaf_slots", "3")]),
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

/// Keys of the images.
const KEYS: u32 = 48;

/// A pristine image of engine `e` ([`damage::pristine`]) and its lines
/// that hold data.
fn image(e: usize) -> &'static (Vec<u8>, Vec<usize>) {
    static IMAGES: [OnceLock<(Vec<u8>, Vec<usize>)>; ENGINES.len()] =
        [const { OnceLock::new() }; ENGINES.len()];
    IMAGES[e].get_or_init(|| {
        let bytes = damage::pristine(&options(e), &damage::keys(KEYS)).expect("a pristine image");
        let lines = damage::data_lines(&bytes);
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
    damage::exercise(&img, &options(e), &damage::keys(KEYS));
});
