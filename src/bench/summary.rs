//! Medians over rounds, ratios against the baseline engine, and the whole
//! report of a benchmark run: its text tables and its CSV.
//!
//! # Medians
//! Every figure of a phase (ns/op, Mops/s, flushes/op, each percentile, ...)
//! is the median of that figure over the rounds, taken figure by figure
//! (so the medians of two figures may come from different rounds). The
//! spread `±%` is half the range of ns/op over the rounds, in percent of its
//! median: a rough measure of how much to trust a difference.
//!
//! # Ratios
//! `vs BASE` is the baseline's median ns/op divided by the engine's: above 1
//! the engine is faster (`2.00x` means it takes half the time per
//! operation), as the papers state their speed-ups.

use std::fmt::{self, Write as _};

use super::experiment::Experiment;
use super::keys::KeyKind;
use super::mix::OpKind;
use super::report::{
    fmt_bytes, fmt_count, fmt_mops, fmt_num, fmt_ratio, fmt_secs, Align, EngineRun, Table,
};
use super::verdict::Verdict;
use crate::pm::FlushKind;

/// The median of `xs` (the mean of the two middle values for an even
/// count); `None` if empty. NaNs sort last.
pub fn median(xs: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = xs.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// One kind of operation of a phase, medians over rounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OpSummary {
    /// The kind.
    pub op: OpKind,
    /// Operations of this kind (median).
    pub ops: f64,
    /// Of which missed (median).
    pub misses: f64,
    /// Throughput of this kind (median).
    pub mops_per_sec: f64,
    /// Mean latency of the sampled operations (median over rounds).
    pub mean_ns: Option<f64>,
    /// Median latency.
    pub p50_ns: Option<f64>,
    /// 99th percentile.
    pub p99_ns: Option<f64>,
    /// 99.9th percentile.
    pub p999_ns: Option<f64>,
}

/// One phase of one engine, medians over rounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseSummary {
    /// The phase's name.
    pub phase: String,
    /// Threads.
    pub threads: usize,
    /// Operations per round (median).
    pub ops: f64,
    /// Wrong results, summed over all rounds.
    pub errors: u64,
    /// Misses (median).
    pub misses: f64,
    /// Wall time (median), seconds.
    pub secs: f64,
    /// Time per operation and thread (median), ns.
    pub ns_per_op: f64,
    /// Half the range of ns/op over the rounds, in % of the median.
    pub spread_pct: f64,
    /// ns/op of each round.
    pub ns_per_op_rounds: Vec<f64>,
    /// Throughput (median), millions of operations per second.
    pub mops_per_sec: f64,
    /// Flushed lines per operation (median).
    pub flushes_per_op: f64,
    /// Fences per operation (median).
    pub fences_per_op: f64,
    /// PM lines read per operation (median).
    pub lines_read_per_op: f64,
    /// Sampled latency, mean (median over rounds).
    pub mean_ns: Option<f64>,
    /// Sampled latency, 50th percentile.
    pub p50_ns: Option<f64>,
    /// Sampled latency, 99th percentile.
    pub p99_ns: Option<f64>,
    /// Sampled latency, 99.9th percentile.
    pub p999_ns: Option<f64>,
    /// Records per range query (median), if the phase scans.
    pub records_per_scan: Option<f64>,
    /// Per kind of operation.
    pub by_op: Vec<OpSummary>,
    /// Baseline ns/op over this engine's (above 1: faster); `None` if the
    /// baseline did not run this phase.
    pub speedup: Option<f64>,
    /// Whether the phase stopped at its time limit in some round.
    pub stopped_early: bool,
}

/// Memory after the load, per record, medians over rounds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MemorySummary {
    /// Keys loaded.
    pub records: u64,
    /// Heap bytes per record, measured (`None` without the counting allocator).
    pub dram_bytes_per_record: Option<f64>,
    /// DRAM bytes per record as the engine estimates them.
    pub engine_dram_bytes_per_record: f64,
    /// PM bytes per record.
    pub pm_bytes_per_record: f64,
}

/// Build against recovery, medians over rounds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RecoverySummary {
    /// Keys recovered.
    pub records: u64,
    /// Load time, seconds.
    pub build_secs: f64,
    /// Open (recovery) time, seconds.
    pub recovery_secs: f64,
    /// Build time over recovery time (above 1: recovery is faster).
    pub build_over_recovery: f64,
    /// Heap bytes per record after recovery.
    pub dram_bytes_per_record_after: Option<f64>,
}

/// One engine in one experiment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineSummary {
    /// Engine id.
    pub engine: String,
    /// Rounds it ran.
    pub rounds: usize,
    /// Its phases.
    pub phases: Vec<PhaseSummary>,
    /// Memory after the load.
    pub memory: Option<MemorySummary>,
    /// Build against recovery.
    pub recovery: Option<RecoverySummary>,
}

impl EngineSummary {
    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseSummary> {
        self.phases.iter().find(|p| p.phase == name)
    }
}

/// One experiment: what it was, and what every engine did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ExperimentReport {
    /// The experiment.
    pub experiment: Experiment,
    /// Why it did not run (for example a missing word list), if it did not.
    pub skipped: Option<String>,
    /// Mean key length of the key set, bytes.
    pub mean_key_len: f64,
    /// Pool size each engine got.
    pub pool_size: u64,
    /// How the pools were mapped.
    pub mapping: Option<String>,
    /// One summary per engine, in the order of even rounds.
    pub engines: Vec<EngineSummary>,
    /// Every round of every engine.
    pub runs: Vec<EngineRun>,
}

impl ExperimentReport {
    /// A report for an experiment that did not run.
    pub fn skipped(experiment: Experiment, why: String) -> Self {
        ExperimentReport {
            experiment,
            skipped: Some(why),
            mean_key_len: 0.0,
            pool_size: 0,
            mapping: None,
            engines: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// The summary of `engine`.
    pub fn engine(&self, engine: &str) -> Option<&EngineSummary> {
        self.engines.iter().find(|e| e.engine == engine)
    }

    /// Summarises `runs` (every round of every engine) with ratios against
    /// `baseline`.
    pub fn summarise(
        experiment: Experiment,
        engines: &[&str],
        baseline: &str,
        mean_key_len: f64,
        pool_size: u64,
        runs: Vec<EngineRun>,
    ) -> Self {
        let mut summaries: Vec<EngineSummary> = engines
            .iter()
            .map(|e| {
                let mine: Vec<&EngineRun> = runs.iter().filter(|r| r.engine == *e).collect();
                summarise_engine(e, &experiment, &mine)
            })
            .collect();
        let base: Vec<(String, f64)> = summaries
            .iter()
            .find(|s| s.engine == baseline)
            .map(|s| {
                s.phases
                    .iter()
                    .map(|p| (p.phase.clone(), p.ns_per_op))
                    .collect()
            })
            .unwrap_or_default();
        for s in &mut summaries {
            for p in &mut s.phases {
                p.speedup = base
                    .iter()
                    .find(|(name, _)| *name == p.phase)
                    .and_then(|(_, b)| (p.ns_per_op > 0.0).then(|| b / p.ns_per_op));
            }
        }
        ExperimentReport {
            mapping: runs.first().map(|r| {
                let mut m = r.mapping.to_string();
                if runs.iter().all(|r| r.prefaulted) {
                    m.push_str(", every page mapped before timing");
                }
                let huge: Vec<u64> = runs.iter().filter_map(|r| r.huge_page_bytes).collect();
                if let (Some(lo), Some(hi)) = (huge.iter().min(), huge.iter().max()) {
                    // Whether the kernel took the pools' huge-page advice
                    // (docs/design.md §3, "Huge pages").
                    let range = if lo == hi {
                        fmt_bytes(*lo)
                    } else {
                        format!("{} to {}", fmt_bytes(*lo), fmt_bytes(*hi))
                    };
                    m.push_str(&format!(", {range} on huge pages after the load"));
                }
                m
            }),
            experiment,
            skipped: None,
            mean_key_len,
            pool_size,
            engines: summaries,
            runs,
        }
    }
}

fn summarise_engine(engine: &str, exp: &Experiment, runs: &[&EngineRun]) -> EngineSummary {
    let phases = exp
        .phases
        .iter()
        .filter_map(|spec| {
            let ps: Vec<_> = runs
                .iter()
                .filter_map(|r| r.phases.iter().find(|p| p.phase == spec.name()))
                .collect();
            let first = ps.first()?;
            let med = |f: &dyn Fn(&super::report::PhaseResult) -> f64| {
                median(ps.iter().map(|p| f(p))).unwrap_or(0.0)
            };
            let lat = |f: &dyn Fn(&super::report::LatencySummary) -> f64| {
                median(ps.iter().filter_map(|p| p.latency.as_ref().map(f)))
            };
            let ns_rounds: Vec<f64> = ps.iter().map(|p| p.ns_per_op).collect();
            let ns = med(&|p| p.ns_per_op);
            let (lo, hi) = ns_rounds
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| {
                    (lo.min(x), hi.max(x))
                });
            let by_op = OpKind::ALL
                .iter()
                .filter_map(|&k| {
                    let os: Vec<_> = ps
                        .iter()
                        .filter_map(|p| p.by_op.iter().find(|o| o.op == k))
                        .collect();
                    if os.is_empty() {
                        return None;
                    }
                    let m = |f: &dyn Fn(&super::report::OpResult) -> f64| {
                        median(os.iter().map(|o| f(o))).unwrap_or(0.0)
                    };
                    let l = |f: &dyn Fn(&super::report::LatencySummary) -> f64| {
                        median(os.iter().filter_map(|o| o.latency.as_ref().map(f)))
                    };
                    Some(OpSummary {
                        op: k,
                        ops: m(&|o| o.ops as f64),
                        misses: m(&|o| o.misses as f64),
                        mops_per_sec: m(&|o| o.mops_per_sec),
                        mean_ns: l(&|s| s.mean_ns),
                        p50_ns: l(&|s| s.p50_ns),
                        p99_ns: l(&|s| s.p99_ns),
                        p999_ns: l(&|s| s.p999_ns),
                    })
                })
                .collect();
            Some(PhaseSummary {
                phase: first.phase.clone(),
                threads: first.threads,
                ops: med(&|p| p.ops as f64),
                errors: ps.iter().map(|p| p.errors).sum(),
                misses: med(&|p| p.misses as f64),
                secs: med(&|p| p.secs),
                ns_per_op: ns,
                spread_pct: if ns > 0.0 && ps.len() > 1 {
                    50.0 * (hi - lo) / ns
                } else {
                    0.0
                },
                ns_per_op_rounds: ns_rounds,
                mops_per_sec: med(&|p| p.mops_per_sec),
                flushes_per_op: med(&|p| p.flushes_per_op),
                fences_per_op: med(&|p| p.fences_per_op),
                lines_read_per_op: med(&|p| p.lines_read_per_op),
                mean_ns: lat(&|s| s.mean_ns),
                p50_ns: lat(&|s| s.p50_ns),
                p99_ns: lat(&|s| s.p99_ns),
                p999_ns: lat(&|s| s.p999_ns),
                records_per_scan: median(ps.iter().filter_map(|p| p.records_per_scan)),
                by_op,
                speedup: None,
                stopped_early: ps.iter().any(|p| p.stopped_early),
            })
        })
        .collect();
    let memory = {
        let ms: Vec<_> = runs.iter().filter_map(|r| r.memory).collect();
        ms.first().map(|m0| {
            let per = |x: f64| x / m0.records.max(1) as f64;
            MemorySummary {
                records: m0.records,
                dram_bytes_per_record: median(
                    ms.iter().filter_map(|m| m.dram_bytes.map(|b| b as f64)),
                )
                .map(per),
                engine_dram_bytes_per_record: per(median(
                    ms.iter().map(|m| m.engine_dram_bytes as f64),
                )
                .unwrap_or(0.0)),
                pm_bytes_per_record: per(
                    median(ms.iter().map(|m| m.pm_bytes as f64)).unwrap_or(0.0)
                ),
            }
        })
    };
    let recovery = {
        let rs: Vec<_> = runs.iter().filter_map(|r| r.recovery).collect();
        rs.first().map(|r0| {
            let build = median(rs.iter().map(|r| r.build_secs)).unwrap_or(0.0);
            let rec = median(rs.iter().map(|r| r.recovery_secs)).unwrap_or(0.0);
            RecoverySummary {
                records: r0.records,
                build_secs: build,
                recovery_secs: rec,
                build_over_recovery: if rec > 0.0 { build / rec } else { 0.0 },
                dram_bytes_per_record_after: median(
                    rs.iter()
                        .filter_map(|r| r.dram_bytes_after.map(|b| b as f64)),
                )
                .map(|b| b / r0.records.max(1) as f64),
            }
        })
    };
    EngineSummary {
        engine: engine.to_string(),
        rounds: runs.len(),
        phases,
        memory,
        recovery,
    }
}

/// The machine the benchmark ran on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MachineInfo {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// CPU model, from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// Physical memory, bytes.
    pub memory_bytes: Option<u64>,
}

impl MachineInfo {
    /// This machine.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string());
        MachineInfo {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_bytes: meminfo_kib("MemTotal:").map(|k| k * 1024),
        }
    }
}

/// A field of `/proc/meminfo`, in KiB.
pub fn meminfo_kib(field: &str) -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Everything a benchmark run found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SuiteReport {
    /// What ran.
    pub title: String,
    /// The preset, if one ran.
    pub preset: Option<String>,
    /// `quick`, `full` or `custom`.
    pub scale: String,
    /// The seed.
    pub seed: u64,
    /// Rounds per experiment.
    pub rounds: u32,
    /// The engines, in the order of even rounds.
    pub engines: Vec<String>,
    /// The engine ratios are taken against.
    pub baseline: String,
    /// Flush instruction.
    pub flush: FlushKind,
    /// Directory of the pool files.
    pub dir: String,
    /// Latency sampling: every N-th operation.
    pub sample_every: u32,
    /// Every page of each pool was mapped after create and reopen, untimed
    /// (`--prefault`).
    pub prefault: bool,
    /// Whether DRAM was measured (the counting allocator is installed).
    pub dram_measured: bool,
    /// The machine.
    pub machine: MachineInfo,
    /// The experiments, in the order they ran.
    pub experiments: Vec<ExperimentReport>,
    /// Notes: engines skipped, scales capped, and the like.
    pub notes: Vec<String>,
    /// Verdicts on the paper's claims (presets only).
    pub verdicts: Vec<Verdict>,
    /// Plot files written.
    pub plots: Vec<String>,
    /// Wall time of the whole run, seconds.
    pub total_secs: f64,
}

impl SuiteReport {
    /// Wrong results over every experiment, engine, round and phase.
    pub fn errors(&self) -> u64 {
        self.experiments
            .iter()
            .flat_map(|e| &e.engines)
            .flat_map(|e| &e.phases)
            .map(|p| p.errors)
            .sum()
    }

    /// The experiment called `id`.
    pub fn experiment(&self, id: &str) -> Option<&ExperimentReport> {
        self.experiments.iter().find(|e| e.experiment.id == id)
    }

    /// The summary of `phase` of `engine` in experiment `id`.
    pub fn phase(&self, id: &str, engine: &str, phase: &str) -> Option<&PhaseSummary> {
        self.experiment(id)?.engine(engine)?.phase(phase)
    }

    /// The CSV form: one row per experiment, engine and phase (and one per
    /// kind of operation of a mix, with `op` set), medians over rounds; the
    /// memory and recovery columns repeat on every row of an engine.
    pub fn to_csv(&self) -> String {
        let mut out = String::new();
        out.push_str(&CSV_COLUMNS.join(","));
        out.push('\n');
        for x in &self.experiments {
            let e = &x.experiment;
            for s in &x.engines {
                let mem = s.memory.as_ref();
                let rec = s.recovery.as_ref();
                let tail = [
                    opt(mem.and_then(|m| m.dram_bytes_per_record)),
                    opt(mem.map(|m| m.engine_dram_bytes_per_record)),
                    opt(mem.map(|m| m.pm_bytes_per_record)),
                    opt(rec.map(|r| r.build_secs)),
                    opt(rec.map(|r| r.recovery_secs)),
                ];
                for p in &s.phases {
                    let head = [
                        e.id.clone(),
                        e.keys.name().to_string(),
                        e.records.to_string(),
                        e.value_size.to_string(),
                        // The phase's own: `--load-threads` for the load,
                        // 1 for recovery (one `Db::open`), as in the JSON.
                        p.threads.to_string(),
                        e.latency_label(),
                        self.flush.to_string(),
                        s.engine.clone(),
                        p.phase.clone(),
                    ];
                    let mut row: Vec<String> = head.to_vec();
                    row.extend([
                        String::new(),
                        s.rounds.to_string(),
                        num(p.ops),
                        num(p.secs),
                        num(p.ns_per_op),
                        num(p.spread_pct),
                        num(p.mops_per_sec),
                        opt(p.mean_ns),
                        opt(p.p50_ns),
                        opt(p.p99_ns),
                        opt(p.p999_ns),
                        num(p.flushes_per_op),
                        num(p.fences_per_op),
                        num(p.lines_read_per_op),
                        opt(p.records_per_scan),
                        p.errors.to_string(),
                        num(p.misses),
                        opt(p.speedup),
                    ]);
                    row.extend(tail.iter().cloned());
                    push_csv_row(&mut out, &row);
                    if p.by_op.len() > 1 {
                        for o in &p.by_op {
                            let mut row: Vec<String> = head.to_vec();
                            row.extend([
                                o.op.name().to_string(),
                                s.rounds.to_string(),
                                num(o.ops),
                                String::new(),
                                String::new(),
                                String::new(),
                                num(o.mops_per_sec),
                                opt(o.mean_ns),
                                opt(o.p50_ns),
                                opt(o.p99_ns),
                                opt(o.p999_ns),
                                String::new(),
                                String::new(),
                                String::new(),
                                String::new(),
                                String::new(),
                                num(o.misses),
                                String::new(),
                            ]);
                            row.extend(tail.iter().cloned());
                            push_csv_row(&mut out, &row);
                        }
                    }
                }
            }
        }
        out
    }
}

/// The columns of [`SuiteReport::to_csv`].
pub const CSV_COLUMNS: [&str; 32] = [
    "experiment",
    "keys",
    "records",
    "value_size",
    "threads",
    "pm_latency",
    "flush",
    "engine",
    "phase",
    "op",
    "rounds",
    "ops",
    "secs",
    "ns_per_op",
    "spread_pct",
    "mops_per_sec",
    "mean_ns",
    "p50_ns",
    "p99_ns",
    "p999_ns",
    "flushes_per_op",
    "fences_per_op",
    "lines_read_per_op",
    "records_per_scan",
    "errors",
    "misses",
    "speedup_vs_baseline",
    "dram_bytes_per_record",
    "engine_dram_bytes_per_record",
    "pm_bytes_per_record",
    "build_secs",
    "recovery_secs",
];

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x:.6}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_default()
}

/// Appends one CSV row (RFC 4180 quoting where a field needs it).
pub fn push_csv_row(out: &mut String, fields: &[String]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if f.contains([',', '"', '\n', '\r']) {
            out.push('"');
            out.push_str(&f.replace('"', "\"\""));
            out.push('"');
        } else {
            out.push_str(f);
        }
    }
    out.push('\n');
}

fn opt_num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), fmt_num)
}

/// The heading line of an experiment.
pub fn experiment_heading(x: &ExperimentReport) -> String {
    let e = &x.experiment;
    let key_desc = if e.keys.is_integer() {
        "8-byte".to_string()
    } else if x.mean_key_len > 0.0 {
        format!("{:.1}-byte mean", x.mean_key_len)
    } else {
        "string".into()
    };
    let keys = if e.keys == KeyKind::Dictionary {
        format!("{} words", e.records)
    } else {
        format!("{} records", e.records)
    };
    // A load on another thread count (`--load-threads`) is said.
    let load = x
        .engines
        .first()
        .and_then(|s| s.phases.first())
        .map(|p| p.threads)
        .filter(|&t| t != e.threads)
        .map_or_else(String::new, |t| {
            format!(" (loaded by {t} thread{})", if t == 1 { "" } else { "s" })
        });
    format!(
        "{} keys ({key_desc}), {keys}, {}-byte values, {} thread{}{load}, PM latency {}",
        e.keys.label(),
        e.value_size,
        e.threads,
        if e.threads == 1 { "" } else { "s" },
        e.latency_label(),
    )
}

/// The table of one experiment's phases.
pub fn phase_table(x: &ExperimentReport, baseline: &str, show_ratio: bool) -> Table {
    let ratio_header = format!("vs {baseline}");
    let mut cols = vec![
        ("engine", Align::Left),
        ("phase", Align::Left),
        ("ops", Align::Right),
        ("ns/op", Align::Right),
        ("±%", Align::Right),
        ("Mops/s", Align::Right),
        ("p50", Align::Right),
        ("p99", Align::Right),
        ("p99.9", Align::Right),
        ("flush/op", Align::Right),
        ("fence/op", Align::Right),
        ("read/op", Align::Right),
    ];
    if show_ratio {
        cols.push((ratio_header.as_str(), Align::Right));
    }
    cols.push(("errors", Align::Right));
    let mut t = Table::new(&cols);
    for s in &x.engines {
        for (i, p) in s.phases.iter().enumerate() {
            let mut phase = p.phase.clone();
            if let Some(r) = p.records_per_scan {
                let _ = write!(phase, " ({} rec)", fmt_count(r));
            }
            if p.stopped_early {
                phase.push_str(" *");
            }
            let mut row = vec![
                if i == 0 {
                    s.engine.clone()
                } else {
                    String::new()
                },
                phase,
                fmt_count(p.ops),
                fmt_num(p.ns_per_op),
                format!("{:.0}", p.spread_pct),
                fmt_mops(p.mops_per_sec),
                opt_num(p.p50_ns),
                opt_num(p.p99_ns),
                opt_num(p.p999_ns),
                format!("{:.2}", p.flushes_per_op),
                format!("{:.2}", p.fences_per_op),
                format!("{:.2}", p.lines_read_per_op),
            ];
            if show_ratio {
                row.push(p.speedup.map_or_else(|| "-".into(), fmt_ratio));
            }
            row.push(if p.misses > 0.0 {
                format!("{} ({} missed)", p.errors, fmt_count(p.misses))
            } else {
                p.errors.to_string()
            });
            t.row(row);
            if p.by_op.len() > 1 {
                for o in &p.by_op {
                    t.row(vec![
                        String::new(),
                        format!("  {}", o.op),
                        fmt_count(o.ops),
                        opt_num(o.mean_ns),
                        String::new(),
                        fmt_mops(o.mops_per_sec),
                        opt_num(o.p50_ns),
                        opt_num(o.p99_ns),
                        opt_num(o.p999_ns),
                    ]);
                }
            }
        }
    }
    t
}

/// The memory and recovery table: one row per experiment and engine that
/// has either. Memory depends on the keys, records and values, not on the
/// latency or the workload after the load, so of experiments without
/// recovery that share those only the first is shown.
pub fn memory_table(r: &SuiteReport) -> Table {
    let mut seen: Vec<(KeyKind, u64, u64)> = Vec::new();
    let mut t = Table::new(&[
        ("experiment", Align::Left),
        ("engine", Align::Left),
        ("records", Align::Right),
        ("DRAM B/rec", Align::Right),
        ("(engine est.)", Align::Right),
        ("PM B/rec", Align::Right),
        ("build", Align::Right),
        ("recovery", Align::Right),
        ("build/recovery", Align::Right),
    ]);
    for x in &r.experiments {
        let e = &x.experiment;
        let shape = (e.keys, e.records, e.value_size);
        let has_recovery = x.engines.iter().any(|s| s.recovery.is_some());
        if !has_recovery && seen.contains(&shape) {
            continue;
        }
        seen.push(shape);
        for s in &x.engines {
            if s.memory.is_none() && s.recovery.is_none() {
                continue;
            }
            let m = s.memory.as_ref();
            let rec = s.recovery.as_ref();
            t.row(vec![
                x.experiment.id.clone(),
                s.engine.clone(),
                m.map_or_else(String::new, |m| m.records.to_string()),
                m.and_then(|m| m.dram_bytes_per_record)
                    .map_or_else(|| "n/a".into(), |d| format!("{d:.1}")),
                m.map_or_else(String::new, |m| {
                    format!("{:.1}", m.engine_dram_bytes_per_record)
                }),
                m.map_or_else(String::new, |m| format!("{:.1}", m.pm_bytes_per_record)),
                rec.map_or_else(|| "-".into(), |r| fmt_secs(r.build_secs)),
                rec.map_or_else(|| "-".into(), |r| fmt_secs(r.recovery_secs)),
                rec.map_or_else(|| "-".into(), |r| format!("{:.2}x", r.build_over_recovery)),
            ]);
        }
    }
    t
}

impl fmt::Display for SuiteReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "pmindex bench: {}", self.title)?;
        writeln!(
            f,
            "engines: {} (baseline {}); {} round{} per experiment, engines alternating; \
             figures are medians over rounds",
            self.engines.join(", "),
            self.baseline,
            self.rounds,
            if self.rounds == 1 { "" } else { "s" },
        )?;
        let m = &self.machine;
        writeln!(
            f,
            "machine: {} CPU{}{}{}; flush {}; pools in {}{}; seed {}",
            m.cpus,
            if m.cpus == 1 { "" } else { "s" },
            m.cpu_model
                .as_deref()
                .map_or_else(String::new, |c| format!(" ({c})")),
            m.memory_bytes
                .map_or_else(String::new, |b| format!(", {} memory", fmt_bytes(b))),
            self.flush,
            self.dir,
            if self.prefault {
                ", every page mapped after create and reopen (--prefault)"
            } else {
                ""
            },
            self.seed,
        )?;
        writeln!(
            f,
            "ns/op: wall time per operation and thread; ±%: half the range over rounds; \
             p50/p99/p99.9: ns, sampled 1 in {}; flush/fence/read per op: PM lines flushed, \
             fences, PM lines read{}",
            self.sample_every,
            if self.engines.len() > 1 {
                format!("; vs {}: its ns/op over the engine's", self.baseline)
            } else {
                String::new()
            },
        )?;
        let show_ratio = self.engines.len() > 1;
        for x in &self.experiments {
            writeln!(f)?;
            writeln!(f, "== {}: {}", x.experiment.id, x.experiment.title)?;
            writeln!(f, "   {}", experiment_heading(x))?;
            if let Some(why) = &x.skipped {
                writeln!(f, "   skipped: {why}")?;
                continue;
            }
            if let Some(mapping) = &x.mapping {
                writeln!(f, "   pools: {} each, {mapping}", fmt_bytes(x.pool_size))?;
            }
            write!(f, "{}", indent(&phase_table(x, &self.baseline, show_ratio)))?;
            if x.engines
                .iter()
                .flat_map(|e| &e.phases)
                .any(|p| p.stopped_early)
            {
                writeln!(
                    f,
                    "   * stopped at the scan time limit (--scan-time-limit); figures are over \
                     the operations done"
                )?;
            }
        }
        let mem = memory_table(self);
        if !mem.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "== memory after the load, and build (load) time against recovery (reopen) time"
            )?;
            if !self.dram_measured {
                writeln!(
                    f,
                    "   DRAM B/rec: n/a (measured DRAM needs the counting allocator, \
                     pmindex::bench::alloc::CountingAlloc, as the global allocator; the \
                     pmindex binary installs it)"
                )?;
            }
            write!(f, "{}", indent(&mem))?;
        }
        if !self.verdicts.is_empty() {
            writeln!(f)?;
            writeln!(f, "== the paper's claims")?;
            for v in &self.verdicts {
                writeln!(f, "{v}")?;
            }
        }
        if !self.notes.is_empty() {
            writeln!(f)?;
            writeln!(f, "notes:")?;
            for n in &self.notes {
                writeln!(f, "- {n}")?;
            }
        }
        if !self.plots.is_empty() {
            writeln!(f)?;
            writeln!(f, "plots ({} files, PNG and SVG):", self.plots.len())?;
            let mut stems: Vec<&str> = self
                .plots
                .iter()
                .map(|p| {
                    p.strip_suffix(".png")
                        .or(p.strip_suffix(".svg"))
                        .unwrap_or(p)
                })
                .collect();
            stems.dedup();
            for s in stems {
                writeln!(f, "- {s}.png (.svg)")?;
            }
        }
        writeln!(f)?;
        writeln!(f, "total wall time {}", fmt_secs(self.total_secs))?;
        let errors = self.errors();
        if errors > 0 {
            writeln!(f, "WARNING: {errors} operations returned a wrong result")?;
        }
        Ok(())
    }
}

fn indent(t: &Table) -> String {
    t.to_string().lines().map(|l| format!("   {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(Vec::<f64>::new()), None);
        assert_eq!(median([f64::NAN, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        let mut s = String::new();
        push_csv_row(
            &mut s,
            &["a".into(), "b,c".into(), "say \"hi\"".into(), String::new()],
        );
        assert_eq!(s, "a,\"b,c\",\"say \"\"hi\"\"\",\n");
        assert_eq!(num(3.0), "3");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(2.0 / 3.0), "0.666667");
        assert_eq!(opt(None), "");
    }
}
