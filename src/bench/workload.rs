//! Random integers, values and operation orders, all reproducible from a
//! seed; pool sizing. (The key sets are in [`super::keys`].)
//!
//! # Random integers
//! [`key_u64`]`(seed, i)` is `seed + (i + 1) × γ` (γ odd) passed through the
//! SplitMix64 finaliser. Each step is a bijection on `u64`, so distinct `i`
//! give distinct integers without a set to check them, spread uniformly over
//! the key space.
//!
//! # Values
//! A value of `value_size` bytes is a fixed random filler (drawn from the seed;
//! one filler for inserted values, another for updated ones) whose first
//! `min(8, value_size)` bytes are replaced by the key's tag
//! ([`super::keys::key_tag`]: the key itself for 8-byte keys, else a hash).
//! Building one costs one 8-byte copy, and a value read back under the wrong
//! key (with `value_size >= 8`) does not carry the right tag.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::keys::key_tag;
use super::{BenchError, BenchResult};
use crate::pm::{MAX_POOL_SIZE, MIN_POOL_SIZE};

/// SplitMix64's increment (an odd constant: 2^64 / golden ratio).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 finaliser: a bijection on `u64` with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`-th key of the key set drawn from `seed`, as a `u64`. Distinct `i`
/// give distinct keys.
#[inline]
pub fn key_u64(seed: u64, i: u64) -> u64 {
    mix64(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// `n` distinct keys, 8-byte big-endian (so byte order is numeric order).
pub fn keys(seed: u64, n: usize) -> Vec<[u8; 8]> {
    (0..n as u64)
        .map(|i| key_u64(seed, i).to_be_bytes())
        .collect()
}

/// `0..n` in a random order drawn from `seed`. `salt` picks one of several
/// independent orders from the same seed.
pub fn shuffled_order(seed: u64, salt: u64, n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = SmallRng::seed_from_u64(mix64(seed ^ mix64(salt)));
    order.shuffle(&mut rng);
    order
}

/// Builds the values of a benchmark in one reusable buffer.
#[derive(Debug, Clone)]
pub struct ValueGen {
    buf: Vec<u8>,
}

impl ValueGen {
    /// Values of `size` bytes, filler drawn from `seed`.
    pub fn new(seed: u64, size: usize) -> Self {
        Self::with_salt(seed, size, 0x7661_6c75_6573)
    }

    /// Values of `size` bytes with another filler (for updates: an update
    /// really changes the bytes).
    pub fn updated(seed: u64, size: usize) -> Self {
        Self::with_salt(seed, size, 0x7570_6461_7465)
    }

    fn with_salt(seed: u64, size: usize, salt: u64) -> Self {
        let mut buf = vec![0u8; size];
        SmallRng::seed_from_u64(mix64(seed ^ salt)).fill(&mut buf[..]);
        ValueGen { buf }
    }

    /// The value of `key` (valid until the next call).
    #[inline]
    pub fn value_of(&mut self, key: &[u8]) -> &[u8] {
        let n = self.buf.len().min(8);
        self.buf[..n].copy_from_slice(&key_tag(key)[..n]);
        &self.buf
    }
}

/// Whether `value` can be the value of `key` written by a [`ValueGen`] of
/// `size` bytes (its length and tag; the filler is not compared, since an
/// update may have replaced it).
#[inline]
pub fn value_matches(value: &[u8], key: &[u8], size: usize) -> bool {
    let n = size.min(8);
    value.len() == size && value[..n] == key_tag(key)[..n]
}

/// Bytes a key-value pair is assumed to take in an index, beyond its key and
/// value (record headers, alignment, node slack): a generous guess.
const PAIR_OVERHEAD: u64 = 64;

/// A pool size for `keys` pairs of keys of at most `max_key_len` bytes and
/// `value_size`-byte values: four times the raw data plus 64 MiB, rounded up
/// to 1 MiB (so a multiple of 4096, and at least [`MIN_POOL_SIZE`]). The
/// file is sparse, so the slack costs no disk until it is written.
pub fn pool_size_for(keys: u64, max_key_len: u64, value_size: u64) -> BenchResult<u64> {
    const MIB: u64 = 1 << 20;
    let too_big = || {
        BenchError::Config(format!(
            "{keys} records of {value_size}-byte values need a pool larger than \
             the largest pool ({MAX_POOL_SIZE} bytes)"
        ))
    };
    let raw = value_size
        .checked_add(max_key_len)
        .and_then(|kv| kv.checked_add(PAIR_OVERHEAD))
        .and_then(|pair| pair.checked_mul(keys))
        .ok_or_else(too_big)?;
    let size = raw
        .checked_mul(4)
        .and_then(|s| s.checked_add(64 * MIB))
        .and_then(|s| s.checked_next_multiple_of(MIB))
        .ok_or_else(too_big)?;
    if size > MAX_POOL_SIZE {
        return Err(too_big());
    }
    Ok(size.max(MIN_POOL_SIZE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_distinct_and_reproducible() {
        let a = keys(7, 100_000);
        let set: HashSet<_> = a.iter().collect();
        assert_eq!(set.len(), a.len());
        assert_eq!(a, keys(7, 100_000));
        assert_ne!(a[..10], keys(8, 10)[..]);
    }

    #[test]
    fn orders_are_permutations_and_differ_by_salt() {
        let a = shuffled_order(1, 1, 1000);
        let b = shuffled_order(1, 2, 1000);
        assert_ne!(a, b);
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn values_carry_their_key() {
        let mut g = ValueGen::new(3, 20);
        let k = 42u64.to_be_bytes();
        let v = g.value_of(&k).to_vec();
        assert_eq!(v.len(), 20);
        assert_eq!(&v[..8], &k);
        assert_ne!(g.value_of(&43u64.to_be_bytes()), &v[..]);
        assert_eq!(ValueGen::new(3, 0).value_of(&k), b"");
        assert_eq!(ValueGen::new(3, 3).value_of(&k), &k[..3]);
        let u = ValueGen::updated(3, 20).value_of(&k).to_vec();
        assert_ne!(u, v);
        assert!(value_matches(&u, &k, 20) && value_matches(&v, &k, 20));
        assert!(!value_matches(&v, &43u64.to_be_bytes(), 20));
        assert!(!value_matches(&v[..19], &k, 20));
        let s = ValueGen::new(3, 30).value_of(b"a string key").to_vec();
        assert!(value_matches(&s, b"a string key", 30));
        assert!(!value_matches(&s, b"another key", 30));
    }

    #[test]
    fn pool_sizes_are_usable() {
        for (n, v) in [(1, 0), (200_000, 8), (1_000_000, 1000), (3, 1 << 20)] {
            let s = pool_size_for(n, 8, v).unwrap();
            assert_eq!(s % 4096, 0);
            assert!((MIN_POOL_SIZE..=MAX_POOL_SIZE).contains(&s));
            assert!(s >= 4 * n * (v + 8));
        }
        assert!(pool_size_for(u64::MAX, 8, 8).is_err());
        assert!(pool_size_for(1 << 40, 8, 1 << 20).is_err());
        assert!(pool_size_for(1000, 250, 8).unwrap() > pool_size_for(1000, 8, 8).unwrap());
    }
}
