//! What the pool's store API costs over plain stores to DRAM.
//!
//! Every PM store in the crate goes through [`Pool`] (bounds and alignment
//! checks, a `Result`, the crash-simulator hook). This benchmark measures
//! that price on an anonymous pool, where the memory itself is ordinary
//! DRAM, so the difference is the API alone:
//!
//! | operation           | through the pool          | raw baseline                        |
//! |---------------------|---------------------------|-------------------------------------|
//! | 8-byte store        | [`Pool::store_u64`]       | `ptr::write_volatile` into a `Vec`  |
//! | 64-byte range write | [`Pool::write_bytes`]     | `ptr::copy_nonoverlapping`          |
//!
//! Neither side flushes or fences: this is the cost of the store path only.
//!
//! # Access patterns
//! Both sides run the same loop over the same addresses, within a region of
//! [`StoreApiConfig::region_bytes`] (1 MiB: cache resident, so the loop is
//! not memory bound). The addresses come from a table of [`WALK_TABLE`]
//! unit indices (a unit is 8 or 64 bytes), XORed with a per-pass salt:
//! - **sequential**: the table is `0, 1, 2, ...` and pass `p`'s salt is
//!   `p × WALK_TABLE`, so the passes sweep the region in address order;
//! - **random**: the table holds random indices and each pass's salt is
//!   random, so each pass touches a different scattered set.
//!
//! The index arithmetic and the table load are the same on both sides and
//! have no loop-carried dependency, so they overlap with the stores.
//!
//! # Repetitions
//! Each measurement is repeated [`StoreApiConfig::repeats`] times, pool and
//! raw alternating (and alternating which of the two goes first), and the
//! report gives the medians and their ratio.

use std::fmt;
use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::report::{fmt_bytes, fmt_num, fmt_secs, Align, Table};
use super::workload::mix64;
use super::{BenchError, BenchResult};
use crate::error::Result;
use crate::pm::{Pool, PoolConfig, CHUNK_SIZE};

/// Entries in the address table that both sides of a measurement walk.
pub const WALK_TABLE: usize = 4096;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreApiConfig {
    /// 8-byte stores per measurement (rounded up to a multiple of [`WALK_TABLE`]).
    pub stores: u64,
    /// 64-byte writes per measurement (rounded up likewise).
    pub range_writes: u64,
    /// Bytes of the region the stores land in: a power of two, 4 KiB to 1 GiB.
    pub region_bytes: u64,
    /// Measurements per side and row; the medians are reported.
    pub repeats: u32,
    /// Seed of the random pattern.
    pub seed: u64,
}

impl Default for StoreApiConfig {
    fn default() -> Self {
        StoreApiConfig {
            stores: 50_000_000,
            range_writes: 50_000_000 / 8,
            region_bytes: 1 << 20,
            repeats: 7,
            seed: 42,
        }
    }
}

/// One operation and pattern, pool against raw.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoreApiRow {
    /// What the pool side calls.
    pub operation: String,
    /// What the raw side does.
    pub baseline: String,
    /// `sequential` or `random`.
    pub pattern: String,
    /// Bytes per operation.
    pub op_bytes: u64,
    /// Operations per measurement.
    pub ops: u64,
    /// ns per operation through the pool, one entry per repetition.
    pub pool_ns: Vec<f64>,
    /// ns per operation on the raw side, one entry per repetition.
    pub raw_ns: Vec<f64>,
    /// Median of `pool_ns`.
    pub pool_median_ns: f64,
    /// Median of `raw_ns`.
    pub raw_median_ns: f64,
    /// `pool_median_ns / raw_median_ns`.
    pub ratio: f64,
}

/// What the benchmark measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoreApiReport {
    /// Bytes of the region written.
    pub region_bytes: u64,
    /// Repetitions per side and row.
    pub repeats: u32,
    /// The seed.
    pub seed: u64,
    /// Size of the anonymous pool.
    pub pool_size: u64,
    /// One row per operation and pattern.
    pub rows: Vec<StoreApiRow>,
    /// Wall time of the whole benchmark.
    pub total_secs: f64,
}

impl fmt::Display for StoreApiReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pmindex store-API overhead: anonymous {} pool, stores within {}, \
             medians of {} alternating runs, no flushes or fences",
            fmt_bytes(self.pool_size),
            fmt_bytes(self.region_bytes),
            self.repeats
        )?;
        writeln!(f)?;
        let mut t = Table::new(&[
            ("operation", Align::Left),
            ("baseline", Align::Left),
            ("pattern", Align::Left),
            ("ops/run", Align::Right),
            ("pool ns/op", Align::Right),
            ("raw ns/op", Align::Right),
            ("ratio", Align::Right),
        ]);
        for r in &self.rows {
            t.row(vec![
                r.operation.clone(),
                r.baseline.clone(),
                r.pattern.clone(),
                r.ops.to_string(),
                fmt_num(r.pool_median_ns),
                fmt_num(r.raw_median_ns),
                format!("{:.2}x", r.ratio),
            ]);
        }
        write!(f, "{t}")?;
        writeln!(f)?;
        writeln!(f, "total wall time {}", fmt_secs(self.total_secs))
    }
}

/// The addresses of one measurement: unit `(table[j] ^ salts[p]) & mask`
/// for pass `p` and entry `j`.
struct Walk {
    table: Vec<u32>,
    salts: Vec<u64>,
    mask: u64,
}

impl Walk {
    fn new(units: u64, ops: u64, random: bool, seed: u64) -> Walk {
        let mask = units - 1;
        let passes = ops.div_ceil(WALK_TABLE as u64).max(1);
        let mut rng = SmallRng::seed_from_u64(mix64(seed ^ units));
        let (table, salts) = if random {
            let table = (0..WALK_TABLE)
                .map(|_| rng.gen_range(0..units.min(1 << 32)) as u32)
                .collect();
            let salts = (0..passes).map(|_| rng.gen::<u64>() & mask).collect();
            (table, salts)
        } else {
            let table = (0..WALK_TABLE as u32).collect();
            let salts = (0..passes)
                .map(|p| p.wrapping_mul(WALK_TABLE as u64) & mask)
                .collect();
            (table, salts)
        };
        Walk { table, salts, mask }
    }

    fn ops(&self) -> u64 {
        (self.table.len() * self.salts.len()) as u64
    }
}

/// 8-byte stores through [`Pool::store_u64`] at `base + 8 × unit`.
#[inline(never)]
fn pool_store_u64(pool: &Pool, base: u64, walk: &Walk) -> Result<Duration> {
    let t = Instant::now();
    let mut v = 0u64;
    for &salt in &walk.salts {
        for &e in &walk.table {
            let unit = (u64::from(e) ^ salt) & walk.mask;
            pool.store_u64(base + unit * 8, v)?;
            v = v.wrapping_add(1);
        }
    }
    Ok(t.elapsed())
}

/// 8-byte volatile stores into `words[unit]`.
///
/// # Safety
/// `words` must be valid for writes of `walk.mask + 1` `u64`s, and nothing
/// else may access them during the call.
#[inline(never)]
unsafe fn raw_store_u64(words: *mut u64, walk: &Walk) -> Duration {
    let words = black_box(words);
    let t = Instant::now();
    let mut v = 0u64;
    for &salt in &walk.salts {
        for &e in &walk.table {
            let unit = (u64::from(e) ^ salt) & walk.mask;
            // SAFETY: `unit <= mask`, and the caller guarantees `mask + 1`
            // words are valid and exclusively ours.
            unsafe { words.add(unit as usize).write_volatile(v) };
            v = v.wrapping_add(1);
        }
    }
    t.elapsed()
}

/// 64-byte writes through [`Pool::write_bytes`] at `base + 64 × unit`.
///
/// # Safety
/// Nothing else may access `base .. base + 64 × (walk.mask + 1)` in the pool
/// during the call.
#[inline(never)]
unsafe fn pool_write_64(pool: &Pool, base: u64, walk: &Walk) -> Result<Duration> {
    let src = black_box([0xA5u8; 64]);
    let t = Instant::now();
    for &salt in &walk.salts {
        for &e in &walk.table {
            let unit = (u64::from(e) ^ salt) & walk.mask;
            // SAFETY: forwarded from the caller: the range is exclusively ours.
            unsafe { pool.write_bytes(base + unit * 64, &src)? };
        }
    }
    Ok(t.elapsed())
}

/// 64-byte `copy_nonoverlapping`s into `bytes + 64 × unit`.
///
/// # Safety
/// `bytes` must be valid for writes of `64 × (walk.mask + 1)` bytes, and
/// nothing else may access them during the call.
#[inline(never)]
unsafe fn raw_write_64(bytes: *mut u8, walk: &Walk) -> Duration {
    let bytes = black_box(bytes);
    let src = black_box([0xA5u8; 64]);
    let t = Instant::now();
    for &salt in &walk.salts {
        for &e in &walk.table {
            let unit = (u64::from(e) ^ salt) & walk.mask;
            // SAFETY: `unit <= mask`, so the 64 bytes are inside the buffer
            // the caller vouches for; `src` is a local array, so it does not
            // overlap it.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), bytes.add(unit as usize * 64), 64)
            };
        }
    }
    t.elapsed()
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn ns_per_op(d: Duration, ops: u64) -> f64 {
    d.as_secs_f64() * 1e9 / ops.max(1) as f64
}

/// Checks a configuration.
fn check(cfg: &StoreApiConfig) -> BenchResult<()> {
    let r = cfg.region_bytes;
    if !r.is_power_of_two() || !(4096..=1 << 30).contains(&r) {
        return Err(BenchError::Config(format!(
            "the region must be a power of two from 4 KiB to 1 GiB, not {r} bytes"
        )));
    }
    if cfg.repeats == 0 {
        return Err(BenchError::Config("--repeats must be at least 1".into()));
    }
    if cfg.stores == 0 || cfg.range_writes == 0 {
        return Err(BenchError::Config(
            "the store and write counts must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Runs the benchmark. Single-threaded; it owns the pool and the buffer it
/// writes, which is what makes the `unsafe` range writes sound.
pub fn run(cfg: &StoreApiConfig) -> BenchResult<StoreApiReport> {
    check(cfg)?;
    let start = Instant::now();
    let region = cfg.region_bytes;
    let pool_size = (region + (4 << 20)).next_multiple_of(CHUNK_SIZE);
    let failed = |what: &str| {
        let what = what.to_string();
        move |e: crate::Error| BenchError::failed(what, e)
    };
    // Base pages, as the raw buffer has: the difference is the API alone.
    let base_pages = PoolConfig {
        small_pages: true,
        ..PoolConfig::default()
    };
    let pool = Pool::create_anonymous(pool_size, "pmlog", &base_pages)
        .map_err(failed("create the anonymous pool"))?;
    let reservation = pool.reserve(region).map_err(failed("reserve the region"))?;
    let base = reservation.offset();

    // The raw buffer, page aligned like the pool block.
    let mut raw = vec![0u64; (region / 8 + 512) as usize];
    let align = raw.as_ptr().align_offset(4096);
    let raw_words = raw[align..][..(region / 8) as usize].as_mut_ptr();

    // Touch every page of both sides before timing.
    // SAFETY: single-threaded; the reservation is ours and never published,
    // so nothing else reads or writes it.
    unsafe { pool.zero_bytes(base, region) }.map_err(failed("zero the region"))?;

    let patterns = [(false, "sequential"), (true, "random")];
    let mut rows = Vec::new();
    // 8-byte stores.
    for (random, pattern) in patterns {
        let walk = Walk::new(region / 8, cfg.stores, random, cfg.seed);
        let (pool_ns, raw_ns) = alternate(
            cfg.repeats,
            walk.ops(),
            || pool_store_u64(&pool, base, &walk).map_err(failed("store_u64")),
            // SAFETY: `raw_words` points to `region / 8` words of `raw`
            // (page-aligned start, 512 spare words), which only this function
            // uses.
            || unsafe { raw_store_u64(raw_words, &walk) },
        )?;
        rows.push(row(
            "Pool::store_u64",
            "write_volatile u64",
            pattern,
            8,
            walk.ops(),
            pool_ns,
            raw_ns,
        ));
    }
    // 64-byte range writes.
    for (random, pattern) in patterns {
        let walk = Walk::new(region / 64, cfg.range_writes, random, cfg.seed);
        let (pool_ns, raw_ns) = alternate(
            cfg.repeats,
            walk.ops(),
            // SAFETY: single-threaded and exclusive: the range is the
            // reservation made above, never published to any engine.
            || unsafe { pool_write_64(&pool, base, &walk) }.map_err(failed("write_bytes")),
            // SAFETY: as for the 8-byte stores: `region` bytes of `raw`, used
            // by nothing else.
            || unsafe { raw_write_64(raw_words.cast::<u8>(), &walk) },
        )?;
        rows.push(row(
            "Pool::write_bytes",
            "copy_nonoverlapping",
            pattern,
            64,
            walk.ops(),
            pool_ns,
            raw_ns,
        ));
    }
    black_box(&raw);
    pool.cancel(reservation)
        .map_err(failed("cancel the reservation"))?;
    Ok(StoreApiReport {
        region_bytes: region,
        repeats: cfg.repeats,
        seed: cfg.seed,
        pool_size,
        rows,
        total_secs: start.elapsed().as_secs_f64(),
    })
}

/// Runs `pool_side` and `raw_side` `repeats` times each, alternating which
/// goes first; returns their ns per operation.
fn alternate(
    repeats: u32,
    ops: u64,
    mut pool_side: impl FnMut() -> BenchResult<Duration>,
    mut raw_side: impl FnMut() -> Duration,
) -> BenchResult<(Vec<f64>, Vec<f64>)> {
    let (mut pool_ns, mut raw_ns) = (Vec::new(), Vec::new());
    for rep in 0..repeats {
        if rep % 2 == 0 {
            pool_ns.push(ns_per_op(pool_side()?, ops));
            raw_ns.push(ns_per_op(raw_side(), ops));
        } else {
            raw_ns.push(ns_per_op(raw_side(), ops));
            pool_ns.push(ns_per_op(pool_side()?, ops));
        }
    }
    Ok((pool_ns, raw_ns))
}

fn row(
    operation: &str,
    baseline: &str,
    pattern: &str,
    op_bytes: u64,
    ops: u64,
    pool_ns: Vec<f64>,
    raw_ns: Vec<f64>,
) -> StoreApiRow {
    let pool_median_ns = median(&pool_ns);
    let raw_median_ns = median(&raw_ns);
    StoreApiRow {
        operation: operation.to_string(),
        baseline: baseline.to_string(),
        pattern: pattern.to_string(),
        op_bytes,
        ops,
        pool_ns,
        raw_ns,
        pool_median_ns,
        raw_median_ns,
        ratio: if raw_median_ns > 0.0 {
            pool_median_ns / raw_median_ns
        } else {
            f64::INFINITY
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_stay_in_the_region_and_sweep_in_order() {
        let seq = Walk::new(1 << 14, 3 * WALK_TABLE as u64, false, 1);
        let units: Vec<u64> = seq
            .salts
            .iter()
            .flat_map(|s| {
                seq.table
                    .iter()
                    .map(move |&e| (u64::from(e) ^ s) & seq.mask)
            })
            .collect();
        assert_eq!(units, (0..3 * WALK_TABLE as u64).collect::<Vec<_>>());
        let rnd = Walk::new(1 << 10, 10, true, 1);
        assert_eq!(rnd.ops(), WALK_TABLE as u64);
        assert!(rnd.table.iter().all(|&e| u64::from(e) < 1 << 10));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn small_run_reports_four_rows() {
        let cfg = StoreApiConfig {
            stores: 10_000,
            range_writes: 10_000,
            region_bytes: 64 << 10,
            repeats: 3,
            seed: 1,
        };
        let r = run(&cfg).unwrap();
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            assert_eq!(row.pool_ns.len(), 3);
            assert_eq!(row.raw_ns.len(), 3);
            assert!(row.pool_median_ns > 0.0 && row.raw_median_ns > 0.0);
        }
        assert!(r.to_string().contains("Pool::store_u64"));
    }

    #[test]
    fn bad_regions_are_refused() {
        for region in [0, 1000, 3 << 20, 2 << 30] {
            let cfg = StoreApiConfig {
                region_bytes: region,
                ..StoreApiConfig::default()
            };
            assert!(run(&cfg).is_err(), "{region}");
        }
    }
}
