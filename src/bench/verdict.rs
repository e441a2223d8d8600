//! The papers' claims, and verdicts on them from what was measured.
//!
//! A preset lists the claims of its paper's evaluation ([`Claim`]), each
//! with a [`Check`] that says which engines and which measurements decide
//! it. After the run every claim gets a [`Verdict`]:
//!
//! - **reproduced**: the engines it names ran, and the measurements agree
//!   with the claim's direction (and, where it states a number, come within
//!   the stated tolerance of it);
//! - **not reproduced**: they ran, and the measurements disagree (the
//!   verdict says where);
//! - **not measurable here**: an engine it names is not in this build (or
//!   not in the project's plan at all), was left out with `--engines`, or a
//!   measurement it needs did not run (for example a missing word list).
//!
//! The paper's own figures are quoted in each verdict next to the measured
//! ones. Machines, scales and emulated latencies differ from the papers',
//! so a verdict is about the direction of an effect more than its size.

use std::fmt;

use super::report::fmt_ratio;
use super::summary::{ExperimentReport, PhaseSummary, SuiteReport};
use crate::engine;

/// A measured figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Time per operation and thread (lower is better).
    NsPerOp,
    /// Throughput, millions of operations per second.
    MopsPerSec,
    /// Flushed lines per operation.
    FlushesPerOp,
    /// Fences per operation.
    FencesPerOp,
    /// Measured DRAM bytes per record (the engine's estimate without the
    /// counting allocator).
    DramPerRecord,
    /// PM bytes per record.
    PmPerRecord,
    /// DRAM and PM bytes per record.
    BytesPerRecord,
    /// Load time, seconds.
    BuildSecs,
    /// Recovery time, seconds.
    RecoverySecs,
}

impl Metric {
    /// The axis label.
    pub fn label(self) -> &'static str {
        match self {
            Metric::NsPerOp => "time per operation (ns)",
            Metric::MopsPerSec => "throughput (Mops/s)",
            Metric::FlushesPerOp => "flushed lines per operation",
            Metric::FencesPerOp => "fences per operation",
            Metric::DramPerRecord => "DRAM bytes per record",
            Metric::PmPerRecord => "PM bytes per record",
            Metric::BytesPerRecord => "DRAM + PM bytes per record",
            Metric::BuildSecs => "build time (s)",
            Metric::RecoverySecs => "recovery time (s)",
        }
    }

    /// Whether the metric is per phase (else per experiment).
    pub fn per_phase(self) -> bool {
        matches!(
            self,
            Metric::NsPerOp | Metric::MopsPerSec | Metric::FlushesPerOp | Metric::FencesPerOp
        )
    }

    /// Its value for `engine` in experiment `x` (phase `phase` for
    /// per-phase metrics).
    pub fn value(self, x: &ExperimentReport, engine: &str, phase: &str) -> Option<f64> {
        let s = x.engine(engine)?;
        let p = || -> Option<&PhaseSummary> { s.phase(phase) };
        match self {
            Metric::NsPerOp => p().map(|p| p.ns_per_op),
            Metric::MopsPerSec => p().map(|p| p.mops_per_sec),
            Metric::FlushesPerOp => p().map(|p| p.flushes_per_op),
            Metric::FencesPerOp => p().map(|p| p.fences_per_op),
            Metric::DramPerRecord => s.memory.map(|m| {
                m.dram_bytes_per_record
                    .unwrap_or(m.engine_dram_bytes_per_record)
            }),
            Metric::PmPerRecord => s.memory.map(|m| m.pm_bytes_per_record),
            Metric::BytesPerRecord => s.memory.map(|m| {
                m.dram_bytes_per_record
                    .unwrap_or(m.engine_dram_bytes_per_record)
                    + m.pm_bytes_per_record
            }),
            Metric::BuildSecs => s.recovery.map(|r| r.build_secs),
            Metric::RecoverySecs => s.recovery.map(|r| r.recovery_secs),
        }
    }
}

/// A measurement: a phase of an experiment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Case {
    /// Experiment id.
    pub exp: String,
    /// Phase name (ignored by per-experiment metrics).
    pub phase: String,
}

impl Case {
    /// Phase `phase` of experiment `exp`.
    pub fn new(exp: impl Into<String>, phase: impl Into<String>) -> Self {
        Case {
            exp: exp.into(),
            phase: phase.into(),
        }
    }

    fn label(&self) -> String {
        format!("{} {}", self.exp, self.phase)
    }
}

/// How a claim is decided.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Check {
    /// Every subject beats every rival on `metric` in at least `min_share`
    /// of the (case, subject, rival) triples (lower wins, except for
    /// [`Metric::MopsPerSec`]).
    Beats {
        /// The engines the claim favours.
        subjects: Vec<String>,
        /// The engines they are compared with.
        rivals: Vec<String>,
        /// Where.
        cases: Vec<Case>,
        /// What is compared.
        metric: Metric,
        /// Share of triples they must win: 1.0 for "all", 0.5 for "most".
        min_share: f64,
        /// What the paper reports.
        paper: String,
    },
    /// `metric` of `engine` at each case is within `tolerance` (relative)
    /// of the paper's value there.
    Near {
        /// The engine.
        engine: String,
        /// What.
        metric: Metric,
        /// Where, and the paper's value there.
        expected: Vec<(Case, f64)>,
        /// Allowed relative difference (0.5: ±50%).
        tolerance: f64,
    },
    /// For each engine, `num_metric` at `num` divided by `den_metric` at
    /// `den` is at least `min`.
    Ratio {
        /// The engines the claim is about.
        engines: Vec<String>,
        /// Numerator.
        num: Case,
        /// Numerator metric.
        num_metric: Metric,
        /// Denominator.
        den: Case,
        /// Denominator metric.
        den_metric: Metric,
        /// Least ratio that agrees with the claim.
        min: f64,
        /// What the paper reports.
        paper: String,
    },
    /// Every subject's `metric` grows more from `from[i]` to `to[i]` (a
    /// higher latency, say) than every rival's, for every `i`.
    MoreSensitive {
        /// The engines the claim says suffer more.
        subjects: Vec<String>,
        /// The engines they are compared with.
        rivals: Vec<String>,
        /// The settings before.
        from: Vec<Case>,
        /// The settings after, pairwise with `from`.
        to: Vec<Case>,
        /// What.
        metric: Metric,
        /// What the paper reports.
        paper: String,
    },
    /// Cannot be measured by this tool (the reason is given).
    Never {
        /// Why.
        why: String,
    },
}

/// One claim of a paper.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Claim {
    /// Where the paper makes it (`Fig. 4`, `Table 1`).
    pub source: String,
    /// The claim, in a sentence.
    pub claim: String,
    /// How it is decided.
    pub check: Check,
}

/// Reproduced, not reproduced, or not measurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The measurements agree with the claim.
    Reproduced,
    /// The measurements disagree.
    NotReproduced,
    /// The claim could not be measured here.
    NotMeasurable,
}

impl Status {
    /// As printed.
    pub fn label(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::NotReproduced => "not reproduced",
            Status::NotMeasurable => "not measurable here",
        }
    }
}

/// The verdict on one claim.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// Where the paper makes the claim.
    pub source: String,
    /// The claim.
    pub claim: String,
    /// The verdict.
    pub status: Status,
    /// Why.
    pub why: String,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "- {}: {}", self.source, self.claim)?;
        write!(f, "  -> {}: {}", self.status.label(), self.why)
    }
}

/// Engines that the papers compare with and this project plans to build,
/// by id (see README).
pub const PLANNED_ENGINES: &[&str] = &[
    "hart",
    "wort",
    "woart",
    "art-cow",
    "dptree",
    "art-bplus",
    "fptree",
    "fastfair",
];

/// Engines of the papers that are not in this project's plan.
pub const UNPLANNED_ENGINES: &[&str] = &["nvtree", "wbtree", "2-tier-bm", "btree"];

fn in_build(name: &str) -> bool {
    engine::ENGINES.iter().any(|e| e.name == name)
}

/// Why a set of engines cannot be compared here, if it cannot.
fn missing_engines(report: &SuiteReport, names: &[&str]) -> Option<String> {
    let not_built: Vec<&str> = names.iter().copied().filter(|n| !in_build(n)).collect();
    if !not_built.is_empty() {
        let (planned, unplanned): (Vec<&str>, Vec<&str>) = not_built
            .iter()
            .partition(|n| !UNPLANNED_ENGINES.contains(n));
        let mut parts = Vec::new();
        if !planned.is_empty() {
            parts.push(format!(
                "{} {} not in this build yet",
                planned
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if planned.len() == 1 { "is" } else { "are" }
            ));
        }
        if !unplanned.is_empty() {
            parts.push(format!(
                "{} {} not in this project's plan",
                unplanned.join(", "),
                if unplanned.len() == 1 { "is" } else { "are" }
            ));
        }
        return Some(format!("engines missing: {}", parts.join("; ")));
    }
    let not_run: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !report.engines.iter().any(|e| e == n))
        .collect();
    if !not_run.is_empty() {
        return Some(format!(
            "{} left out of this run (--engines)",
            not_run.join(", ")
        ));
    }
    None
}

/// Why a case cannot be read, if it cannot.
fn missing_case(report: &SuiteReport, case: &Case) -> Option<String> {
    match report.experiment(&case.exp) {
        None => Some(format!("experiment `{}` did not run", case.exp)),
        Some(x) => x
            .skipped
            .as_ref()
            .map(|why| format!("experiment `{}` was skipped: {why}", case.exp)),
    }
}

fn value(report: &SuiteReport, case: &Case, engine: &str, m: Metric) -> Option<f64> {
    m.value(report.experiment(&case.exp)?, engine, &case.phase)
}

fn lower_is_better(m: Metric) -> bool {
    !matches!(m, Metric::MopsPerSec)
}

fn ratio_range(rs: &[f64]) -> String {
    let lo = rs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = rs.iter().copied().fold(0.0, f64::max);
    if (hi - lo).abs() < 0.005 {
        fmt_ratio(lo)
    } else {
        format!("{} to {}", fmt_ratio(lo), fmt_ratio(hi))
    }
}

impl Claim {
    /// The verdict on this claim given `report`.
    pub fn judge(&self, report: &SuiteReport) -> Verdict {
        let (status, why) = self.decide(report);
        Verdict {
            source: self.source.clone(),
            claim: self.claim.clone(),
            status,
            why,
        }
    }

    fn decide(&self, report: &SuiteReport) -> (Status, String) {
        let unmeasurable = |why: String| (Status::NotMeasurable, why);
        match &self.check {
            Check::Never { why } => unmeasurable(why.clone()),
            Check::Beats {
                subjects,
                rivals,
                cases,
                metric,
                min_share,
                paper,
            } => {
                let names: Vec<&str> = subjects.iter().chain(rivals).map(String::as_str).collect();
                if let Some(why) = missing_engines(report, &names) {
                    return unmeasurable(why);
                }
                if let Some(why) = cases.iter().find_map(|c| missing_case(report, c)) {
                    return unmeasurable(why);
                }
                let mut ratios = Vec::new();
                let mut lost = Vec::new();
                for c in cases {
                    for s in subjects {
                        for r in rivals {
                            let (Some(a), Some(b)) =
                                (value(report, c, s, *metric), value(report, c, r, *metric))
                            else {
                                return unmeasurable(format!("{} was not measured", c.label()));
                            };
                            // How many times better the subject is.
                            let ratio = if lower_is_better(*metric) {
                                b / a
                            } else {
                                a / b
                            };
                            if !ratio.is_finite() {
                                return unmeasurable(format!("{} measured zero", c.label()));
                            }
                            ratios.push(ratio);
                            if ratio <= 1.0 {
                                lost.push(format!("{}: {s} vs {r} {ratio:.2}x", c.label()));
                            }
                        }
                    }
                }
                let share = 1.0 - lost.len() as f64 / ratios.len().max(1) as f64;
                let measured = format!(
                    "{} better by {} on {} (paper: {paper})",
                    subjects.join(", "),
                    ratio_range(&ratios),
                    metric.label()
                );
                if share + 1e-9 >= *min_share {
                    (Status::Reproduced, measured)
                } else {
                    (
                        Status::NotReproduced,
                        format!("{measured}; not better in {}", lost.join("; ")),
                    )
                }
            }
            Check::Near {
                engine,
                metric,
                expected,
                tolerance,
            } => {
                if let Some(why) = missing_engines(report, &[engine]) {
                    return unmeasurable(why);
                }
                if let Some(why) = expected.iter().find_map(|(c, _)| missing_case(report, c)) {
                    return unmeasurable(why);
                }
                let mut parts = Vec::new();
                let mut ok = true;
                for (c, want) in expected {
                    let Some(v) = value(report, c, engine, *metric) else {
                        return unmeasurable(format!("{} was not measured", c.label()));
                    };
                    ok &= (v - want).abs() <= tolerance * want.abs();
                    parts.push(format!("{}: {v:.2} (paper {want})", c.exp));
                }
                let text = format!(
                    "{engine}, {}: {} (tolerance ±{:.0}%)",
                    metric.label(),
                    parts.join(", "),
                    tolerance * 100.0
                );
                if ok {
                    (Status::Reproduced, text)
                } else {
                    (Status::NotReproduced, text)
                }
            }
            Check::MoreSensitive {
                subjects,
                rivals,
                from,
                to,
                metric,
                paper,
            } => {
                let names: Vec<&str> = subjects.iter().chain(rivals).map(String::as_str).collect();
                if let Some(why) = missing_engines(report, &names) {
                    return unmeasurable(why);
                }
                if let Some(why) = from.iter().chain(to).find_map(|c| missing_case(report, c)) {
                    return unmeasurable(why);
                }
                let growth = |e: &str, i: usize| -> Option<f64> {
                    let a = value(report, &from[i], e, *metric)?;
                    let b = value(report, &to[i], e, *metric)?;
                    (a > 0.0).then(|| b / a)
                };
                let mut parts = Vec::new();
                let mut ok = true;
                for i in 0..from.len().min(to.len()) {
                    for s in subjects {
                        let Some(gs) = growth(s, i) else {
                            return unmeasurable(format!("{s}: not measured"));
                        };
                        for r in rivals {
                            let Some(gr) = growth(r, i) else {
                                return unmeasurable(format!("{r}: not measured"));
                            };
                            ok &= gs > gr;
                            parts.push(format!(
                                "{} to {}: {s} x{gs:.2}, {r} x{gr:.2}",
                                from[i].exp, to[i].exp
                            ));
                        }
                    }
                }
                let text = format!("{} (paper: {paper})", parts.join("; "));
                if ok {
                    (Status::Reproduced, text)
                } else {
                    (Status::NotReproduced, text)
                }
            }
            Check::Ratio {
                engines,
                num,
                num_metric,
                den,
                den_metric,
                min,
                paper,
            } => {
                let names: Vec<&str> = engines.iter().map(String::as_str).collect();
                if let Some(why) = missing_engines(report, &names) {
                    return unmeasurable(why);
                }
                if let Some(why) = [num, den].into_iter().find_map(|c| missing_case(report, c)) {
                    return unmeasurable(why);
                }
                let mut parts = Vec::new();
                let mut ok = true;
                for e in engines {
                    let (Some(a), Some(b)) = (
                        value(report, num, e, *num_metric),
                        value(report, den, e, *den_metric),
                    ) else {
                        return unmeasurable(format!("{e}: not measured"));
                    };
                    if b == 0.0 {
                        return unmeasurable(format!("{e}: measured zero"));
                    }
                    let r = a / b;
                    ok &= r >= *min;
                    parts.push(format!("{e} {r:.2}x"));
                }
                let text = format!(
                    "measured {} (claim holds at {min:.2}x or more; paper: {paper})",
                    parts.join(", ")
                );
                if ok {
                    (Status::Reproduced, text)
                } else {
                    (Status::NotReproduced, text)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_and_unplanned_engines_are_named() {
        let report = empty_report(vec!["pmlog".into()]);
        let why = missing_engines(&report, &["pmlog", "nvtree"]).unwrap();
        assert_eq!(why, "engines missing: nvtree is not in this project's plan");
        assert!(missing_engines(&report, &["pmlog"]).is_none());
        // A planned engine not built yet (while there is one).
        if let Some(p) = PLANNED_ENGINES.iter().find(|p| !in_build(p)) {
            let why = missing_engines(&report, &["pmlog", p]).unwrap();
            assert!(
                why.contains(&format!("`{p}` is not in this build yet")),
                "{why}"
            );
        }
        // An engine in the build that the run left out.
        let pmlog_only = empty_report(vec![]);
        let why = missing_engines(&pmlog_only, &["pmlog"]).unwrap();
        assert!(why.contains("left out of this run"), "{why}");
    }

    #[test]
    fn never_is_not_measurable() {
        let c = Claim {
            source: "Fig. 1".into(),
            claim: "x".into(),
            check: Check::Never {
                why: "because".into(),
            },
        };
        let v = c.judge(&empty_report(vec![]));
        assert_eq!(v.status, Status::NotMeasurable);
        assert_eq!(
            v.to_string(),
            "- Fig. 1: x\n  -> not measurable here: because"
        );
    }

    pub(crate) fn empty_report(engines: Vec<String>) -> SuiteReport {
        SuiteReport {
            title: String::new(),
            preset: None,
            scale: "custom".into(),
            seed: 0,
            rounds: 1,
            baseline: engines.first().cloned().unwrap_or_default(),
            engines,
            flush: crate::pm::FlushKind::Eadr,
            dir: String::new(),
            sample_every: 1,
            prefault: false,
            dram_measured: false,
            machine: super::super::summary::MachineInfo {
                cpus: 1,
                cpu_model: None,
                memory_bytes: None,
            },
            experiments: Vec::new(),
            notes: Vec::new(),
            verdicts: Vec::new(),
            plots: Vec::new(),
            total_secs: 0.0,
        }
    }
}
