//! Damaged pools: the workload that `tests/damaged_engine_pools.rs` (random
//! damage) and the fuzz target `fuzz/fuzz_targets/damaged_pool.rs`
//! (coverage-guided damage) run on a pool image they have changed.
//!
//! What the library promises for any bytes in a pool (docs/design.md §8,
//! "Damaged pools"): opening gives an error or a database, and on that
//! database every call returns a value or an error, without a panic and
//! without hanging. [`exercise`] makes the calls; the callers decide what
//! to change and catch what goes wrong.

use std::ops::Bound;

use crate::error::Result;
use crate::{Db, Options};

/// `n` keys of a pristine pool, sorted: strings of 6 to 58 bytes (some
/// sharing a hash key, some prefixes of others), eight binary 8-byte keys,
/// and the short keys `k`, `ke`, `key` and `\0`.
pub fn keys(n: u32) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut k = format!("key{:03}", i * 7 % n.max(1)).into_bytes();
            k.extend(std::iter::repeat_n(b'x', (i % 5 * 13) as usize));
            k
        })
        .collect();
    keys.extend((0..8u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec()));
    keys.extend([b"k".to_vec(), b"ke".to_vec(), b"key".to_vec(), vec![0u8]]);
    keys.sort();
    keys.dedup();
    keys
}

/// A value of 0 to 3,000 bytes for key `i`: empty, inline, value objects
/// and large blocks on the engines that have them.
pub fn value(i: usize) -> Vec<u8> {
    let len = [0, 1, 8, 9, 24, 64, 200, 700, 3000][i % 9];
    (0..len).map(|j| (i * 31 + j) as u8).collect()
}

/// The image of a pool made with `opts` in anonymous memory, holding
/// `keys` after inserts, updates of every third key and deletes of every
/// fifth (so that slots, logs and freed objects are in use), checked sound.
pub fn pristine(opts: &Options, keys: &[Vec<u8>]) -> Result<Vec<u8>> {
    let db = Db::create_anonymous(opts)?;
    for (i, k) in keys.iter().enumerate() {
        db.put(k, &value(i))?;
    }
    for (i, k) in keys.iter().enumerate().step_by(3) {
        db.put(k, &value(i + 1))?;
    }
    for k in keys.iter().skip(1).step_by(5) {
        db.delete(k)?;
    }
    db.check()?;
    Ok(db.pool().image())
}

/// Offsets of the 64-byte lines of `image` that are not all zero: where a
/// change can matter.
pub fn data_lines(image: &[u8]) -> Vec<usize> {
    (0..image.len())
        .step_by(64)
        .filter(|&at| {
            image[at..(at + 64).min(image.len())]
                .iter()
                .any(|&b| b != 0)
        })
        .collect()
}

/// Opens `image` with `opts` and, if it opens, reads, scans, checks and
/// writes through it: gets of every key of `keys`, a multi-key get, two
/// scans, `check`, puts, a `put_many` and deletes, then `check` again.
/// Returns whether it opened. Errors are expected and ignored; a panic or
/// a hang is the caller's to catch.
pub fn exercise(image: &[u8], opts: &Options, keys: &[Vec<u8>]) -> bool {
    let Ok(db) = Db::open_image(image, opts) else {
        return false;
    };
    for k in keys {
        let _ = db.get(k);
    }
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let _ = db.get_many_with(&refs, |_, _| {});
    let _ = db.scan(Bound::Unbounded, Bound::Unbounded, None);
    let _ = db.scan(Bound::Included(b"key1"), Bound::Excluded(b"key2"), Some(10));
    let _ = db.check();
    let _ = db.len();
    for (i, k) in keys.iter().enumerate().step_by(4) {
        let _ = db.put(k, &value(i + 2));
    }
    let _ = db.put(b"after-damage", b"x");
    let items: Vec<(&[u8], &[u8])> = keys
        .iter()
        .take(20)
        .map(|k| (k.as_slice(), &b"batched"[..]))
        .collect();
    let _ = db.put_many(&items);
    for k in keys.iter().step_by(7) {
        let _ = db.delete(k);
    }
    let _ = db.check();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pristine_image_opens_with_its_keys() {
        let keys = keys(40);
        assert!(keys.iter().any(|k| k.len() > 50) && keys.contains(&vec![0u8]));
        let opts = Options {
            engine: Some("hart".into()),
            pool_size: 4 << 20,
            ..Options::default()
        };
        let image = pristine(&opts, &keys).unwrap();
        let db = Db::open_image(&image, &opts).unwrap();
        // Every fifth key from the second on was deleted.
        assert_eq!(db.len() as usize, keys.len() - (keys.len() - 1).div_ceil(5));
        assert_eq!(db.get(&keys[0]).unwrap(), Some(value(1)));
        assert!(!data_lines(&image).is_empty());
        assert!(exercise(&image, &opts, &keys));
        assert!(!exercise(&image[..100], &opts, &keys));
    }
}
