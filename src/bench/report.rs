//! Benchmark results and their text tables.
//!
//! Reports are plain data with `serde::Serialize` (for `--json`); the text
//! form is built with [`Table`]. Per-operation figures are means over a
//! phase: `ns_per_op = elapsed / ops`, `flushes_per_op = flushes / ops`.

use std::fmt;
use std::time::Duration;

use crate::pm::PmCounters;

/// The result of one timed phase (for example "insert") on one engine.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseReport {
    /// The phase's name.
    pub phase: String,
    /// Operations run.
    pub ops: u64,
    /// Operations whose result was wrong (a missing key, a wrong value).
    pub errors: u64,
    /// Wall time of the phase, in seconds.
    pub secs: f64,
    /// Mean wall time per operation, in ns.
    pub ns_per_op: f64,
    /// Operations per second, in millions.
    pub mops_per_sec: f64,
    /// Cache lines flushed per operation.
    pub flushes_per_op: f64,
    /// Fences per operation.
    pub fences_per_op: f64,
    /// PM cache lines read per operation (as the engine reports them).
    pub lines_read_per_op: f64,
    /// The phase's PM counters (after minus before).
    pub counters: PmCounters,
}

impl PhaseReport {
    /// Derives the per-operation figures from what was measured.
    pub fn new(
        phase: impl Into<String>,
        ops: u64,
        errors: u64,
        elapsed: Duration,
        counters: PmCounters,
    ) -> Self {
        let secs = elapsed.as_secs_f64();
        let per_op = |x: u64| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
        PhaseReport {
            phase: phase.into(),
            ops,
            errors,
            secs,
            ns_per_op: if ops == 0 {
                0.0
            } else {
                secs * 1e9 / ops as f64
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
        }
    }
}

/// The phases of one engine.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineReport {
    /// Engine id.
    pub engine: String,
    /// Size of the pool it ran in.
    pub pool_size: u64,
    /// How that pool was mapped (page cache or DAX).
    pub mapping: crate::pm::MappingMode,
    /// The phases, in the order they ran.
    pub phases: Vec<PhaseReport>,
    /// Wall time for this engine, pool creation and removal included.
    pub secs: f64,
}

/// The standard table of phases: one row per engine and phase.
pub fn phase_table(engines: &[EngineReport]) -> Table {
    let mut t = Table::new(&[
        ("engine", Align::Left),
        ("phase", Align::Left),
        ("ops", Align::Right),
        ("ns/op", Align::Right),
        ("Mops/s", Align::Right),
        ("flushes/op", Align::Right),
        ("fences/op", Align::Right),
        ("lines read/op", Align::Right),
        ("errors", Align::Right),
    ]);
    for e in engines {
        for p in &e.phases {
            t.row(vec![
                e.engine.clone(),
                p.phase.clone(),
                p.ops.to_string(),
                fmt_num(p.ns_per_op),
                format!("{:.3}", p.mops_per_sec),
                format!("{:.2}", p.flushes_per_op),
                format!("{:.2}", p.fences_per_op),
                format!("{:.2}", p.lines_read_per_op),
                p.errors.to_string(),
            ]);
        }
    }
    t
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
        let p = PhaseReport::new("insert", 100, 0, Duration::from_micros(10), c);
        assert!((p.ns_per_op - 100.0).abs() < 1e-9);
        assert!((p.mops_per_sec - 10.0).abs() < 1e-9);
        assert_eq!(
            (p.flushes_per_op, p.fences_per_op, p.lines_read_per_op),
            (3.0, 1.0, 0.5)
        );
        let empty = PhaseReport::new("x", 0, 0, Duration::ZERO, PmCounters::default());
        assert_eq!((empty.ns_per_op, empty.mops_per_sec), (0.0, 0.0));
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(1234.4), "1234");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(1.234), "1.23");
    }
}
