//! Benchmark results of one engine in one round, and the text tables.
//!
//! Results are plain data with `serde::Serialize` (for `--json`); the text
//! form is built with [`Table`]. Per-operation figures of a phase are means
//! over the phase: `flushes_per_op = flushes / ops`; `ns_per_op` is the
//! wall time a thread spent per operation (`threads × secs / ops`, so the
//! mean latency when one thread runs) and `mops_per_sec` the throughput of
//! all threads together (`ops / secs`). Latency percentiles come from
//! sampled operations (see [`super::runner`]).

use std::fmt;
use std::time::Duration;

use super::mix::OpKind;
use crate::pm::PmCounters;

/// Latency of sampled operations, in ns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    /// Operations sampled.
    pub samples: u64,
    /// Mean of the samples.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: f64,
    /// 99th percentile.
    pub p99_ns: f64,
    /// 99.9th percentile.
    pub p999_ns: f64,
    /// Largest sample.
    pub max_ns: f64,
}

impl LatencySummary {
    /// The summary of a histogram of ns, or `None` if it is empty.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Option<LatencySummary> {
        if h.is_empty() {
            return None;
        }
        Some(LatencySummary {
            samples: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5) as f64,
            p99_ns: h.value_at_quantile(0.99) as f64,
            p999_ns: h.value_at_quantile(0.999) as f64,
            max_ns: h.max() as f64,
        })
    }
}

/// One kind of operation within a phase (a mix has several).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpResult {
    /// The kind.
    pub op: OpKind,
    /// Operations of this kind.
    pub ops: u64,
    /// Of which found no key (a deleted or not yet inserted key).
    pub misses: u64,
    /// Operations of this kind per second, in millions.
    pub mops_per_sec: f64,
    /// Latency of the sampled operations of this kind.
    pub latency: Option<LatencySummary>,
}

/// The result of one timed phase on one engine in one round.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseResult {
    /// The phase's name.
    pub phase: String,
    /// Threads that ran it.
    pub threads: usize,
    /// Operations run (for `recovery`: keys recovered).
    pub ops: u64,
    /// Operations whose result was wrong: a wrong value, a key missing that
    /// must be present, a key present that must be absent.
    pub errors: u64,
    /// Operations that found no key where that is expected (a mix that
    /// deletes, a read racing an insert in another thread).
    pub misses: u64,
    /// Wall time of the phase, in seconds.
    pub secs: f64,
    /// Wall time per operation and thread, in ns.
    pub ns_per_op: f64,
    /// Operations per second, all threads, in millions.
    pub mops_per_sec: f64,
    /// Cache lines flushed per operation.
    pub flushes_per_op: f64,
    /// Fences per operation.
    pub fences_per_op: f64,
    /// PM cache lines read per operation (as the engine reports them).
    pub lines_read_per_op: f64,
    /// The phase's PM counters (after minus before).
    pub counters: PmCounters,
    /// Latency of the sampled operations, all kinds together.
    pub latency: Option<LatencySummary>,
    /// Per kind of operation, in [`OpKind`] order.
    pub by_op: Vec<OpResult>,
    /// Mean records returned per range query, if the phase ran any.
    pub records_per_scan: Option<f64>,
    /// Whether the phase stopped at its time limit (the figures are over
    /// the operations done).
    pub stopped_early: bool,
}

impl PhaseResult {
    /// Derives the per-operation figures from what was measured.
    pub fn new(
        phase: impl Into<String>,
        threads: usize,
        ops: u64,
        elapsed: Duration,
        counters: PmCounters,
    ) -> Self {
        let secs = elapsed.as_secs_f64();
        let per_op = |x: u64| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
        PhaseResult {
            phase: phase.into(),
            threads,
            ops,
            errors: 0,
            misses: 0,
            secs,
            ns_per_op: if ops == 0 {
                0.0
            } else {
                secs * 1e9 * threads.max(1) as f64 / ops as f64
            },
            mops_per_sec: if secs > 0.0 {
                ops as f64 / secs / 1e6
            } else {
                0.0
            },
            flushes_per_op: per_op(counters.flushes),
            fences_per_op: per_op(counters.fences),
            lines_read_per_op: per_op(counters.lines_read),
            counters,
            latency: None,
            by_op: Vec::new(),
            records_per_scan: None,
            stopped_early: false,
        }
    }
}

/// Memory held after the load.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MemoryReport {
    /// Keys loaded.
    pub records: u64,
    /// Heap bytes the database holds, measured by the counting allocator
    /// (`None` if it is not installed).
    pub dram_bytes: Option<u64>,
    /// DRAM bytes as the engine estimates them ([`crate::Stats::dram_bytes`]).
    pub engine_dram_bytes: u64,
    /// PM bytes in allocated blocks ([`crate::Stats::pm_bytes`]).
    pub pm_bytes: u64,
}

/// Build (load) time against recovery time.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RecoveryReport {
    /// Keys in the database when it was closed.
    pub records: u64,
    /// Wall time of the load phase.
    pub build_secs: f64,
    /// Wall time of `Db::open`.
    pub recovery_secs: f64,
    /// Heap bytes the database holds after recovery (`None` without the
    /// counting allocator).
    pub dram_bytes_after: Option<u64>,
}

/// Everything one engine did in one round of one experiment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineRun {
    /// Engine id.
    pub engine: String,
    /// Round, from 0.
    pub round: u32,
    /// The phases, in the order they ran.
    pub phases: Vec<PhaseResult>,
    /// Memory after the load.
    pub memory: Option<MemoryReport>,
    /// Build against recovery, if the experiment recovers.
    pub recovery: Option<RecoveryReport>,
    /// Size of the pool it ran in.
    pub pool_size: u64,
    /// How that pool was mapped (page cache or DAX).
    pub mapping: crate::pm::MappingMode,
    /// Bytes of the pool on huge pages right after the load
    /// ([`crate::pm::Pool::huge_page_bytes`]), where the system says.
    pub huge_page_bytes: Option<u64>,
    /// Every page of the pool was mapped before the timed phases, after
    /// create and after each reopen (`--prefault`): read from the pool,
    /// not from the settings.
    pub prefaulted: bool,
    /// Wall time, pool creation and removal included.
    pub secs: f64,
}

/// How a column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A text table: a header row, a rule, then rows; columns padded to their
/// widest cell and separated by two spaces.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(columns: &[(&str, Align)]) -> Self {
        Table {
            headers: columns.iter().map(|(h, _)| h.to_string()).collect(),
            align: columns.iter().map(|(_, a)| *a).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row(&mut self, mut cells: Vec<String>) {
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// Number of rows (header not counted).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = |c: usize| {
            self.rows
                .iter()
                .map(|r| r[c].chars().count())
                .chain(std::iter::once(self.headers[c].chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.headers.len()).map(width).collect();
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            let mut s = String::new();
            for (c, cell) in cells.iter().enumerate() {
                if c > 0 {
                    s.push_str("  ");
                }
                let pad = widths[c].saturating_sub(cell.chars().count());
                match self.align[c] {
                    Align::Left => {
                        s.push_str(cell);
                        s.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        s.extend(std::iter::repeat_n(' ', pad));
                        s.push_str(cell);
                    }
                }
            }
            writeln!(f, "{}", s.trim_end())
        };
        line(f, &self.headers)?;
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(f, &rule)?;
        for r in &self.rows {
            line(f, r)?;
        }
        Ok(())
    }
}

/// A number with about three significant digits (`1234`, `123`, `12.3`, `1.23`).
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A count: whole numbers without decimals, else [`fmt_num`] (a median of
/// an even number of rounds may fall between two counts).
pub fn fmt_count(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        fmt_num(x)
    }
}

/// A throughput in Mops/s: three decimals, or three significant digits
/// below 0.01 (`0.742`, `0.00132`).
pub fn fmt_mops(x: f64) -> String {
    if x == 0.0 || x.abs() >= 0.01 {
        format!("{x:.3}")
    } else {
        let digits = (2 - x.abs().log10().floor() as i32).clamp(3, 12) as usize;
        format!("{x:.digits$}")
    }
}

/// A ratio with three significant digits and an `x` (`1.35x`, `0.0123x`).
pub fn fmt_ratio(x: f64) -> String {
    if x == 0.0 || x.abs() >= 0.1 {
        format!("{x:.2}x")
    } else {
        let digits = (2 - x.abs().log10().floor() as i32).clamp(2, 12) as usize;
        format!("{x:.digits$}x")
    }
}

/// A byte count in binary units (`512 B`, `64 KiB`, `1.5 GiB`).
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = 0;
    let mut v = n as f64;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Seconds with millisecond precision.
pub fn fmt_secs(secs: f64) -> String {
    format!("{secs:.3} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&[("name", Align::Left), ("n", Align::Right)]);
        t.row(vec!["a".into(), "1000".into()]);
        t.row(vec!["long name".into()]);
        assert_eq!(
            t.to_string(),
            "name          n\n---------  ----\na          1000\nlong name\n"
        );
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn byte_counts() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(64 << 10), "64 KiB");
        assert_eq!(fmt_bytes(256 << 20), "256 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.5 GiB");
    }

    #[test]
    fn per_op_figures() {
        let c = PmCounters {
            flushes: 300,
            fences: 100,
            bytes_persisted: 0,
            lines_read: 50,
        };
        let p = PhaseResult::new("insert", 1, 100, Duration::from_micros(10), c);
        assert!((p.ns_per_op - 100.0).abs() < 1e-9);
        assert!((p.mops_per_sec - 10.0).abs() < 1e-9);
        assert_eq!(
            (p.flushes_per_op, p.fences_per_op, p.lines_read_per_op),
            (3.0, 1.0, 0.5)
        );
        // Two threads: the same throughput, twice the time per operation.
        let p2 = PhaseResult::new("insert", 2, 100, Duration::from_micros(10), c);
        assert!((p2.ns_per_op - 200.0).abs() < 1e-9);
        assert!((p2.mops_per_sec - 10.0).abs() < 1e-9);
        let empty = PhaseResult::new("x", 1, 0, Duration::ZERO, PmCounters::default());
        assert_eq!((empty.ns_per_op, empty.mops_per_sec), (0.0, 0.0));
    }

    #[test]
    fn latency_summary_of_a_histogram() {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        assert!(LatencySummary::of(&h).is_none());
        for v in 1..=1000 {
            h.record(v).unwrap();
        }
        let s = LatencySummary::of(&h).unwrap();
        assert_eq!(s.samples, 1000);
        assert!((s.p50_ns - 500.0).abs() <= 1.0);
        assert!((s.p99_ns - 990.0).abs() <= 1.0);
        assert!((s.p999_ns - 999.0).abs() <= 1.0);
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(1.234), "1.23");
        assert_eq!(fmt_count(20.0), "20");
        assert_eq!(fmt_count(20.5), "20.5");
        assert_eq!(fmt_mops(0.7421), "0.742");
        assert_eq!(fmt_mops(0.0013249), "0.00132");
        assert_eq!(fmt_mops(0.0), "0.000");
        assert_eq!(fmt_ratio(1.3456), "1.35x");
        assert_eq!(fmt_ratio(0.00123), "0.00123x");
    }
}
