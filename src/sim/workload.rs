//! Seeded workloads for the crash harness.
//!
//! Key shapes are chosen to reach every persist-ordered path: keys that are
//! prefixes of each other, keys with 0x00 and 0xFF bytes, maximum-length keys,
//! and runs of keys sharing long prefixes (node growth and path-compression
//! splits in the radix trees); a small key space so that replacements,
//! deletes of present keys and re-inserts are common; value sizes from empty
//! to tens of KiB so that log segments, large blocks and value chunks turn
//! over.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::engine::MAX_KEY_LEN;

/// One key-value operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Upsert.
    Put(Vec<u8>, Arc<[u8]>),
    /// Insert if absent.
    Insert(Vec<u8>, Arc<[u8]>),
    /// Replace if present.
    Update(Vec<u8>, Arc<[u8]>),
    /// Remove.
    Delete(Vec<u8>),
    /// Upsert several items with one [`crate::Db::put_many`] call (a key may
    /// repeat). In flight, each of its keys may hold its value from before
    /// the call or any the call gives it, independently of the others.
    PutMany(Vec<(Vec<u8>, Arc<[u8]>)>),
    /// Read (only in the shared-key workloads, [`generate_shared`]: what a
    /// read returned is checked against the other writers' operations).
    Get(Vec<u8>),
    /// Every pair with a key from the first to the second, both included
    /// (only in the shared-key workloads: each key in the range is read,
    /// at some instant of the scan's span, as by a [`Op::Get`]).
    Scan(Vec<u8>, Vec<u8>),
    /// Close the pool and open it again (recovery runs, and later appends
    /// follow a recovered log).
    Reopen,
}

impl Op {
    /// The key (the first item's for `PutMany`, the low end of a `Scan`'s
    /// range, empty for `Reopen`).
    pub fn key(&self) -> &[u8] {
        match self {
            Op::Put(k, _)
            | Op::Insert(k, _)
            | Op::Update(k, _)
            | Op::Delete(k)
            | Op::Get(k)
            | Op::Scan(k, _) => k,
            Op::PutMany(items) => items.first().map_or(&[], |(k, _)| k),
            Op::Reopen => &[],
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = crate::sim::show_key(self.key());
        match self {
            Op::Put(_, v) => write!(f, "put {k} ({} B)", v.len()),
            Op::Insert(_, v) => write!(f, "insert {k} ({} B)", v.len()),
            Op::Update(_, v) => write!(f, "update {k} ({} B)", v.len()),
            Op::Delete(_) => write!(f, "delete {k}"),
            Op::Get(_) => write!(f, "get {k}"),
            Op::Scan(_, hi) => write!(f, "scan {k} ..= {}", crate::sim::show_key(hi)),
            Op::PutMany(items) => write!(
                f,
                "put_many of {} items ({})",
                items.len(),
                items
                    .iter()
                    .map(|(k, v)| format!("{} {} B", crate::sim::show_key(k), v.len()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Op::Reopen => write!(f, "reopen"),
        }
    }
}

/// The key space: `n` keys of mixed shapes, the same for a given seed.
pub fn key_space(rng: &mut SmallRng, n: usize) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        b"ab".to_vec(),
        b"abc".to_vec(),
        b"abcd".to_vec(),
        vec![0x00],
        vec![0x00, 0x00],
        vec![0xFF],
        vec![0xFF, 0x00, 0xFF],
        vec![b'k'; MAX_KEY_LEN],
        {
            let mut k = vec![b'k'; MAX_KEY_LEN];
            k[MAX_KEY_LEN - 1] = b'z';
            k
        },
    ];
    // Runs that share a long prefix and differ late (node growth, prefix splits).
    for i in 0..20u8 {
        let mut k = b"user:000000:".to_vec();
        k.push(b'a' + i);
        keys.push(k);
    }
    // 8-byte big-endian integers, dense and sparse.
    for i in 0..16u64 {
        keys.push(
            (i * if i % 2 == 0 { 1 } else { 0x0101_0101 })
                .to_be_bytes()
                .to_vec(),
        );
    }
    while keys.len() < n {
        let len = rng.gen_range(1..=24);
        keys.push((0..len).map(|_| rng.gen()).collect());
    }
    keys.sort();
    keys.dedup();
    keys.truncate(n.max(1));
    keys
}

/// A value of a size drawn from the harness's mix.
pub fn value(rng: &mut SmallRng, tag: u64) -> Arc<[u8]> {
    let len = match rng.gen_range(0..100) {
        0..=9 => 0,
        10..=69 => rng.gen_range(1..=64),
        70..=89 => rng.gen_range(65..=2048),
        90..=97 => rng.gen_range(2049..=20_000),
        _ => rng.gen_range(20_001..=70_000),
    };
    let mut v = vec![0u8; len];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (tag as u8).wrapping_add(i as u8).wrapping_mul(31);
    }
    if len >= 8 {
        v[..8].copy_from_slice(&tag.to_le_bytes());
    }
    v.into()
}

/// `n` operations over a key space of `keys` keys.
pub fn generate(seed: u64, n: usize, keys: usize) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let space = key_space(&mut rng, keys);
    ops_over(&mut rng, n, &space, true)
}

/// The workloads of `writers` threads that run at once: the key space of
/// `keys` keys is dealt out (key `i` to thread `i % writers`, so the
/// threads' keys are mixed in key order and share nodes, chunks and
/// blocks), and thread `t` gets `n` operations over its own keys, with no
/// reopen. Each thread's keys are its own, so each thread's acknowledged
/// operations alone say what its keys must hold.
pub fn generate_concurrent(seed: u64, n: usize, keys: usize, writers: usize) -> Vec<Vec<Op>> {
    let writers = writers.max(1);
    let mut rng = SmallRng::seed_from_u64(seed);
    let space = key_space(&mut rng, keys.max(writers));
    (0..writers)
        .map(|t| {
            let mine: Vec<Vec<u8>> = space.iter().skip(t).step_by(writers).cloned().collect();
            ops_over(&mut rng, n, &mine, false)
        })
        .collect()
}

/// The workloads of `writers` threads that run at once over **one** key
/// space of `keys` keys: thread `t` gets `n` operations over all of them,
/// a fifth of them reads (15% [`Op::Get`], 5% [`Op::Scan`] of a random
/// range), with no reopen. The threads'
/// operations on one key then race, and a crash is checked by the order of
/// them that explains what the key holds ([`super::linear`]).
pub fn generate_shared(seed: u64, n: usize, keys: usize, writers: usize) -> Vec<Vec<Op>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let space = key_space(&mut rng, keys);
    (0..writers.max(1))
        .map(|t| {
            (0..n)
                .map(|i| {
                    let pick = |rng: &mut SmallRng| space[rng.gen_range(0..space.len())].clone();
                    let read = rng.gen_range(0..20);
                    if read < 3 {
                        Op::Get(pick(&mut rng))
                    } else if read == 3 {
                        let (a, b) = (pick(&mut rng), pick(&mut rng));
                        Op::Scan(a.clone().min(b.clone()), a.max(b))
                    } else {
                        // Values tagged by writer too, so that two writers'
                        // values mostly differ (not the empty ones, nor
                        // some of 1 to 7 bytes, which hold only the tag's
                        // low byte: equal values only weaken the check).
                        one_op(&mut rng, t * n + i, &space, false)
                    }
                })
                .collect()
        })
        .collect()
}

/// `n` operations over the keys of `space`; `reopen`: whether some are
/// reopens.
fn ops_over(rng: &mut SmallRng, n: usize, space: &[Vec<u8>], reopen: bool) -> Vec<Op> {
    (0..n).map(|i| one_op(rng, i, space, reopen)).collect()
}

/// Operation `i` of a workload over the keys of `space` (the mix of
/// [`generate`]).
fn one_op(rng: &mut SmallRng, i: usize, space: &[Vec<u8>], reopen: bool) -> Op {
    let k = space[rng.gen_range(0..space.len())].clone();
    match rng.gen_range(0..100) {
        0..=1 if reopen => Op::Reopen,
        0..=1 => Op::Put(k, value(rng, i as u64)),
        2..=7 => {
            // 1 to 40 items: past one engine batch of 32, with
            // repeated keys now and then.
            let n = rng.gen_range(1..=40);
            let mut items = vec![(k, value(rng, i as u64))];
            for j in 1..n {
                let k = space[rng.gen_range(0..space.len())].clone();
                items.push((k, value(rng, (i as u64) << 8 | j)));
            }
            Op::PutMany(items)
        }
        8..=44 => Op::Put(k, value(rng, i as u64)),
        45..=59 => Op::Insert(k, value(rng, i as u64)),
        60..=74 => Op::Update(k, value(rng, i as u64)),
        _ => Op::Delete(k),
    }
}
