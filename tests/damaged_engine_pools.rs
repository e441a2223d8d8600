//! Random damage to the pools of `hart` (both persist orders, both indexes
//! of ARTs), `wort`, `woart`, `art-cow`, `fptree`, `dptree` and `fastfair`:
//! opening a damaged pool either fails with an error or succeeds, and then
//! reads, scans, a check and writes return (values or errors) without a
//! panic and without hanging. (`tests/pool_errors.rs` does the same for
//! `pmlog` and the pool's own metadata.)
//!
//! Each case makes 1 to 4 changes (a flipped bit, or a word overwritten
//! with 0, all ones, a small or random number, another structure's
//! offset, or a copy of another word) in lines of the pool that hold data
//! (the allocator's records, the engine's superblock or root, chunk
//! headers, leaves, nodes, values), opens the image in anonymous memory
//! and runs a fixed workload on it in a thread of its own, which must
//! finish within a deadline. `PMINDEX_DAMAGE_CASES=N` runs N cases per
//! engine instead of the quick default.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::options;
use pmindex::sim::damage;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Pool size of the damaged pools (the smallest the engines take with
/// room for the workload's keys).
const POOL: u64 = 8 << 20;

/// Keys in the pristine pools ([`damage::keys`]).
const KEYS: u32 = 300;

/// How long one case may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(20);

/// One change to `image` in one of the `lines` that hold data: a flipped
/// bit, or an aligned word overwritten with 0, all ones, a small number, a
/// random number, the offset of a line that holds data (a pointer to
/// another structure: cycles, shared children, a leaf where a node was),
/// a copy of another aligned word of such a line, or one of the
/// `pointers` (words that name a data line, tags and a WORT slot map
/// included, as the engine writes them) copied over another: a slot that
/// now names another's child, as whole as the engine's own words (a
/// cycle, for one, which the radix trees' open refuses: the delete that
/// walked one for ever needed the damage after the open,
/// `radix::tests::a_child_pointing_back_at_an_ancestor_is_an_error_not_an_endless_walk`).
fn damage_once(rng: &mut SmallRng, image: &mut [u8], lines: &[usize], pointers: &[usize]) {
    let line = lines[rng.gen_range(0..lines.len())];
    if rng.gen_bool(0.5) {
        let at = (line + rng.gen_range(0..64)).min(image.len() - 1);
        image[at] ^= 1 << rng.gen_range(0..8);
        return;
    }
    let word_at = |image: &[u8], at: usize| {
        image
            .get(at..at + 8)
            .map_or(0, |w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    let mut at = line + 8 * rng.gen_range(0..8);
    let other = lines[rng.gen_range(0..lines.len())] as u64;
    let value: u64 = match rng.gen_range(0..8) {
        0 => 0,
        1 => u64::MAX,
        2 => rng.gen_range(1..300),
        3 => rng.gen(),
        4 => other,
        5 => other + 8 * rng.gen_range(1..8),
        6 => word_at(image, other as usize + 8 * rng.gen_range(0..8)),
        _ if pointers.len() >= 2 => {
            // Two different words: a copy onto itself changes nothing.
            let i = rng.gen_range(0..pointers.len());
            let j = (i + rng.gen_range(1..pointers.len())) % pointers.len();
            at = pointers[i];
            word_at(image, pointers[j])
        }
        _ => other,
    };
    if let Some(word) = image.get_mut(at..at + 8) {
        word.copy_from_slice(&value.to_le_bytes());
    }
}

/// The aligned words of the `lines` (sorted) that name one of them once
/// the low 6 bits (a radix tree's leaf tag and WORT slot map,
/// `nodes::TAGS`) are cleared: the pointers of `image`, as far as their
/// values tell.
fn pointer_words(image: &[u8], lines: &[usize]) -> Vec<usize> {
    let mut out = Vec::new();
    for &line in lines {
        for at in (line..line + 64).step_by(8) {
            let Some(w) = image.get(at..at + 8) else {
                continue;
            };
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes")) & !0x3F;
            if v != 0 && lines.binary_search(&(v as usize & !63)).is_ok() {
                out.push(at);
            }
        }
    }
    out
}

/// Runs `cases` damaged images of `engine` (seeds `seed0..`); panics with
/// the seed and the panic message of every failing case, or the first
/// that hung.
fn damage(engine: &'static str, seed0: u64) {
    let cases: u64 = std::env::var("PMINDEX_DAMAGE_CASES")
        .map(|s| s.parse().expect("PMINDEX_DAMAGE_CASES is a number"))
        .unwrap_or(300);
    let opts = options(engine, POOL);
    let keys = damage::keys(KEYS);
    let image = damage::pristine(&opts, &keys).expect("the pristine pool");
    let lines = damage::data_lines(&image);
    let pointers = pointer_words(&image, &lines);
    let (mut refused, mut opened, mut failures) = (0, 0, Vec::new());
    for case in 0..cases {
        let seed = seed0 + case;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut damaged = image.clone();
        for _ in 0..rng.gen_range(1..=4) {
            damage_once(&mut rng, &mut damaged, &lines, &pointers);
        }
        let (tx, rx) = mpsc::channel();
        let worker = std::thread::Builder::new()
            .name(format!("{engine} damage case {seed}"))
            .spawn(move || {
                let (opts, keys) = (options(engine, POOL), damage::keys(KEYS));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    damage::exercise(&damaged, &opts, &keys)
                }));
                let _ = tx.send(r.map_err(|p| {
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into())
                }));
            })
            .expect("spawn");
        match rx.recv_timeout(DEADLINE) {
            Ok(Ok(false)) => refused += 1,
            Ok(Ok(true)) => opened += 1,
            Ok(Err(msg)) => failures.push(format!("case {seed}: panicked: {msg}")),
            Err(_) => {
                failures.push(format!("case {seed}: no answer in {DEADLINE:?}"));
                break; // The worker still runs; later cases would compete with it.
            }
        }
        let _ = worker.join();
    }
    println!(
        "{engine}: {cases} damaged images, {opened} opened, {refused} refused ({} pointer words)",
        pointers.len()
    );
    assert!(
        failures.is_empty(),
        "{engine}: {} of {cases} damaged images failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn damaged_hart_pools_never_panic() {
    damage("hart", 0);
}

#[test]
fn damaged_hart_pools_in_the_paper_order_never_panic() {
    damage("hart:persist_order=paper", 10_000);
}

#[test]
fn damaged_hart_pools_with_the_hashed_index_never_panic() {
    damage("hart:hash_key_len=3", 20_000);
}

/// An index on every ART and searches without the ART's lock: damage met
/// by the point index's rebuild at open and by its unlocked probes.
#[test]
fn damaged_hart_pools_with_indexes_everywhere_and_unlocked_reads_never_panic() {
    damage("hart:point_index_above=0,reads=optimistic", 70_000);
}

#[test]
fn damaged_wort_pools_never_panic() {
    damage("wort", 20_000);
}

#[test]
fn damaged_woart_pools_never_panic() {
    damage("woart", 30_000);
}

#[test]
fn damaged_art_cow_pools_never_panic() {
    damage("art-cow", 40_000);
}

#[test]
fn damaged_fptree_pools_never_panic() {
    damage("fptree", 50_000);
}

/// Leaves of 3 slots: a long leaf list, so damage meets `next` pointers.
#[test]
fn damaged_fptree_pools_with_small_leaves_never_panic() {
    damage("fptree:leaf_slots=3", 60_000);
}

#[test]
fn damaged_dptree_pools_never_panic() {
    damage("dptree", 80_000);
}

/// Leaves of 3 slots merging every 4 writes: a long leaf list, both
/// versions' metadata written, and a log of few entries.
#[test]
fn damaged_dptree_pools_with_small_leaves_never_panic() {
    damage("dptree:leaf_slots=3,merge_min=4", 90_000);
}

#[test]
fn damaged_fastfair_pools_never_panic() {
    damage("fastfair", 80_000);
}

/// Nodes of 4 entry slots: a tall tree, so damage meets inner nodes,
/// sibling chains and lower bounds.
#[test]
fn damaged_fastfair_pools_with_small_nodes_never_panic() {
    damage("fastfair:node_bytes=128", 90_000);
}

#[test]
fn damaged_art_bplus_pools_never_panic() {
    damage("art-bplus", 80_000);
}

/// A pool whose root slot 0 was zeroed (damage: the slot is outside the
/// header's checksum) is refused with an error on open, for every engine.
/// Before, the engine took it for a creation that crashed before its root
/// was published and created a new, empty index over the old one's blocks:
/// `get` said "not found", `info` "0 keys", and the old root was gone for
/// good (found by a helper's fuzzing of damaged pools through the CLI).
/// A pool where creation did crash (nothing allocated) still opens, empty.
#[test]
fn a_lost_root_is_refused_not_replaced() {
    for engine in [
        "hart",
        "wort",
        "woart",
        "art-cow",
        "fptree",
        "dptree",
        "fastfair",
        "art-bplus",
        "pmlog",
    ] {
        let opts = options(engine, POOL);
        let keys = damage::keys(40);
        let image = damage::pristine(&opts, &keys).expect("the pristine pool");
        let root = {
            let db = pmindex::Db::open_image(&image, &opts).expect("the pristine image opens");
            db.pool().root_slot(0).unwrap() as usize
        };
        assert_ne!(image[root..root + 8], [0; 8], "{engine}: a published root");
        let mut damaged = image.clone();
        damaged[root..root + 8].fill(0);
        match pmindex::Db::open_image(&damaged, &opts) {
            Err(pmindex::Error::Corrupt { reason, .. }) => {
                assert!(reason.contains("root was lost"), "{engine}: {reason}")
            }
            Err(e) => panic!("{engine}: another error: {e}"),
            Ok(db) => panic!("{engine}: opened, with {} keys", db.len()),
        }
        // A creation that crashed before its root: no block allocated.
        let fresh = pmindex::pm::Pool::create_anonymous(POOL, engine, &Default::default())
            .unwrap()
            .image();
        let db = pmindex::Db::open_image(&fresh, &opts).expect("an unpublished root");
        assert_eq!(db.len(), 0, "{engine}");
        db.put(b"k", b"v").unwrap();
        assert_eq!(
            db.get(b"k").unwrap().as_deref(),
            Some(&b"v"[..]),
            "{engine}"
        );
    }
}
