//! A suite: the experiments of one `pmindex bench` run, with the figures to
//! plot and (for presets) the paper's claims to judge.
//!
//! [`custom`] builds the suite of a command line without `--preset`: the
//! cartesian product of its key sets, value sizes, thread counts, PM
//! latencies and workloads, one experiment each. [`run`] runs any suite on
//! the engines, in alternating rounds (see [`super::runner`]), and returns
//! the [`SuiteReport`].

use std::path::PathBuf;
use std::time::Instant;

use super::alloc;
use super::dist::{Distribution, ScanLen};
use super::experiment::{Experiment, PhaseSpec};
use super::keys::{self, KeyKind};
use super::mix::Mix;
use super::plot::Figure;
use super::runner::{self, EngineSpec, RunConfig};
use super::summary::{ExperimentReport, MachineInfo, SuiteReport};
use super::verdict::{Case, Claim, Metric};
use super::{BenchError, BenchResult, Progress};
use crate::engine;
use crate::pm::{FlushKind, PmLatency};

/// The reference engine: in every preset, and the default baseline.
pub const REFERENCE_ENGINE: &str = "pmlog";

/// An experiment of a suite, or the reason it will not run.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The experiment.
    pub experiment: Experiment,
    /// Why it is skipped (a missing word list), if it is.
    pub skip: Option<String>,
}

/// What a `pmindex bench` run does.
#[derive(Debug, Clone, PartialEq)]
pub struct Suite {
    /// What it is, for the report's first line.
    pub title: String,
    /// The preset's name, if it is one.
    pub preset: Option<String>,
    /// `quick`, `full` or `custom`.
    pub scale: String,
    /// The engines it wants, in order (the ones not in this build are
    /// skipped with a note).
    pub engines: Vec<String>,
    /// The experiments, in order.
    pub experiments: Vec<Planned>,
    /// Charts to draw with `--plot`.
    pub figures: Vec<Figure>,
    /// The paper's claims (presets).
    pub claims: Vec<Claim>,
    /// Notes for the report.
    pub notes: Vec<String>,
    /// Rounds unless told otherwise.
    pub rounds: u32,
}

/// A workload of a custom run.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// Load, recovery, search, update, scan and delete on one pool (the
    /// HART paper's four basic operations, §IV-B, plus recovery and scans).
    Basic,
    /// Load, then a mix.
    Mix(Mix),
}

impl Workload {
    /// Parses `basic`, a named mix or a custom mix.
    pub fn parse(s: &str) -> Result<Workload, String> {
        if s.trim().eq_ignore_ascii_case("basic") {
            Ok(Workload::Basic)
        } else {
            Mix::parse(s).map(Workload::Mix)
        }
    }

    fn name(&self) -> &str {
        match self {
            Workload::Basic => "basic",
            Workload::Mix(m) => &m.name,
        }
    }
}

/// The knobs of a custom run (`pmindex bench` without `--preset`).
#[derive(Debug, Clone, PartialEq)]
pub struct CustomSpec {
    /// Key sets.
    pub keys: Vec<KeyKind>,
    /// Records loaded.
    pub records: u64,
    /// Operations per mix (and records read by the scans of `basic`);
    /// `None`: as many as records.
    pub ops: Option<u64>,
    /// Value sizes.
    pub value_sizes: Vec<u64>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// PM latencies (`None`: no emulation).
    pub latencies: Vec<Option<PmLatency>>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Request distribution for every mix (`None`: each mix's own).
    pub dist: Option<Distribution>,
    /// Records per scan.
    pub scan_len: u64,
    /// Keys per multi-key get: the `basic` workload then also reads every
    /// key again through [`crate::Db::get_many_with`], in a `search-many`
    /// phase after `search` (`None`: no such phase).
    pub get_many: Option<usize>,
    /// Items per multi-key put: the `basic` workload then inserts every
    /// record again through [`crate::Db::put_many`], in an `insert-many`
    /// phase after `delete` (`None`: no such phase).
    pub put_many: Option<usize>,
}

impl Default for CustomSpec {
    /// The default `pmindex bench`: 200,000 random 8-byte keys with 8-byte
    /// values, the basic operations and YCSB A.
    fn default() -> Self {
        CustomSpec {
            keys: vec![KeyKind::Sparse],
            records: 200_000,
            ops: None,
            value_sizes: vec![8],
            threads: vec![1],
            latencies: vec![None],
            workloads: vec![
                Workload::Basic,
                Workload::Mix(Mix::named("ycsb-a").expect("ycsb-a is a named mix")),
            ],
            dist: None,
            scan_len: 100,
            get_many: None,
            put_many: None,
        }
    }
}

/// The phases of the `basic` workload: load, recovery, search (and, with
/// `get_many`, search-many), update, `ops / scan_len` range scans of
/// `scan_len` records, delete (and, with `put_many`, insert-many).
pub fn basic_phases(
    ops: u64,
    scan_len: u64,
    get_many: Option<usize>,
    put_many: Option<usize>,
) -> Vec<PhaseSpec> {
    let mut phases = vec![PhaseSpec::Load, PhaseSpec::Recover, PhaseSpec::Search];
    phases.extend(get_many.map(|batch| PhaseSpec::SearchMany { batch }));
    phases.extend([
        PhaseSpec::Update,
        PhaseSpec::Scan {
            name: "scan".into(),
            // Scans read as many records as the other phases touch. (A
            // tenth, until 2026-11-27: 1,000 scans of 1M records took
            // 11 ms, short enough for one descheduling to halve a
            // 2-thread figure; docs/design.md §9.)
            count: (ops / scan_len.max(1)).max(1),
            len: ScanLen::Fixed { len: scan_len },
        },
        PhaseSpec::Delete,
    ]);
    phases.extend(put_many.map(|batch| PhaseSpec::InsertMany { batch }));
    phases
}

/// The suite of a custom run: one experiment per combination of key set,
/// value size, thread count, latency and workload.
pub fn custom(spec: &CustomSpec) -> BenchResult<Suite> {
    let nonempty = |n: usize, what: &str| {
        if n == 0 {
            Err(BenchError::Config(format!("give at least one {what}")))
        } else {
            Ok(())
        }
    };
    nonempty(spec.keys.len(), "key set (--keys)")?;
    nonempty(spec.value_sizes.len(), "value size (--value-size)")?;
    nonempty(spec.threads.len(), "thread count (--threads)")?;
    nonempty(spec.latencies.len(), "PM latency")?;
    nonempty(spec.workloads.len(), "workload (--mix)")?;
    if spec.scan_len == 0 {
        return Err(BenchError::Config("--scan-len must be at least 1".into()));
    }
    if spec.get_many == Some(0) {
        return Err(BenchError::Config("--get-many must be at least 1".into()));
    }
    if spec.get_many.is_some() && !spec.workloads.contains(&Workload::Basic) {
        return Err(BenchError::Config(
            "--get-many adds a phase to the basic workload: add basic to --mix".into(),
        ));
    }
    if spec.put_many == Some(0) {
        return Err(BenchError::Config("--put-many must be at least 1".into()));
    }
    if spec.put_many.is_some() && !spec.workloads.contains(&Workload::Basic) {
        return Err(BenchError::Config(
            "--put-many adds a phase to the basic workload: add basic to --mix".into(),
        ));
    }
    let ops = spec.ops.unwrap_or(spec.records);
    let varies = |n: usize| n > 1;
    let mut experiments = Vec::new();
    let mut figures = Vec::new();
    for &keys in &spec.keys {
        for &value_size in &spec.value_sizes {
            for latency in &spec.latencies {
                for w in &spec.workloads {
                    let mut group = Vec::new();
                    if varies(spec.keys.len()) {
                        group.push(keys.name().to_string());
                    }
                    if varies(spec.value_sizes.len()) {
                        group.push(format!("v{value_size}"));
                    }
                    if varies(spec.latencies.len()) {
                        group.push(latency.map_or_else(|| "none".into(), |l| l.to_string()));
                    }
                    group.push(w.name().to_string());
                    let mut scaling = Vec::new();
                    for &threads in &spec.threads {
                        let mut id = group.clone();
                        if varies(spec.threads.len()) {
                            id.insert(id.len() - 1, format!("t{threads}"));
                        }
                        let id = id.join("/");
                        let (title, phases) = match w {
                            Workload::Basic => (
                                "the basic operations, recovery and range scans".to_string(),
                                basic_phases(ops, spec.scan_len, spec.get_many, spec.put_many),
                            ),
                            Workload::Mix(m) => (
                                format!("{} ({})", m.label, m.source),
                                vec![
                                    PhaseSpec::Load,
                                    PhaseSpec::mix(m.clone(), ops, spec.dist, spec.scan_len),
                                ],
                            ),
                        };
                        let e = Experiment {
                            id: id.clone(),
                            title,
                            keys,
                            records: spec.records,
                            value_size,
                            threads,
                            latency: *latency,
                            phases,
                        };
                        figures.push(Figure::bars(
                            format!("{}-throughput", id.replace('/', "-")),
                            format!("{id}: throughput per phase"),
                            Metric::MopsPerSec,
                            e.phases
                                .iter()
                                .filter(|p| !matches!(p, PhaseSpec::Recover))
                                .map(|p| (p.name().to_string(), Case::new(&id, p.name())))
                                .collect(),
                        ));
                        scaling.push(e.clone());
                        experiments.push(Planned {
                            experiment: e,
                            skip: None,
                        });
                    }
                    if scaling.len() > 1 {
                        let names: Vec<String> = scaling[0]
                            .phases
                            .iter()
                            .filter(|p| !matches!(p, PhaseSpec::Recover))
                            .map(|p| p.name().to_string())
                            .collect();
                        let g = group.join("/");
                        figures.push(Figure::lines(
                            format!("{}-scaling", g.replace('/', "-")),
                            format!("{g}: thread scaling"),
                            "threads",
                            Metric::MopsPerSec,
                            scaling.iter().map(|e| e.threads.to_string()).collect(),
                            names
                                .iter()
                                .map(|n| {
                                    (
                                        n.clone(),
                                        scaling.iter().map(|e| Case::new(&e.id, n)).collect(),
                                    )
                                })
                                .collect(),
                        ));
                    }
                }
            }
        }
    }
    let title = if *spec == CustomSpec::default() {
        "the default benchmark (random 8-byte keys: basic operations, recovery, scans; YCSB A)"
            .to_string()
    } else {
        format!(
            "{} experiment{}",
            experiments.len(),
            if experiments.len() == 1 { "" } else { "s" }
        )
    };
    Ok(Suite {
        title,
        preset: None,
        scale: "custom".into(),
        engines: engine::ENGINES.iter().map(|e| e.name.to_string()).collect(),
        experiments,
        figures,
        claims: Vec::new(),
        notes: Vec::new(),
        rounds: 3,
    })
}

/// How to run a suite.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Engines to run; empty: the suite's engines that are in this build.
    pub engines: Vec<String>,
    /// The engine ratios are taken against; `None`: `pmlog` if it runs,
    /// else the first engine.
    pub baseline: Option<String>,
    /// Rounds per experiment; `None`: the suite's default.
    pub rounds: Option<u32>,
    /// Seed of keys, values and operation streams.
    pub seed: u64,
    /// Where pool files go; `None`: the system's temporary directory.
    pub dir: Option<PathBuf>,
    /// Pool size; `None`: sized from each experiment.
    pub pool_size: Option<u64>,
    /// The flush instruction.
    pub flush: FlushKind,
    /// The word list of the `dictionary` key set.
    pub dictionary: PathBuf,
    /// Time every N-th operation (latency percentiles).
    pub sample_every: u32,
    /// Stop scan phases after this long (see [`RunConfig::scan_time_limit`]).
    pub scan_time_limit: Option<std::time::Duration>,
    /// Threads of every load phase, 1 to [`super::experiment::MAX_THREADS`]
    /// (see [`RunConfig::load_threads`]).
    pub load_threads: Option<usize>,
    /// Load phases upsert (see [`RunConfig::load_by_put`]).
    pub load_by_put: bool,
    /// Map every page of each pool after create and reopen, untimed
    /// ([`RunConfig::prefault`]).
    pub prefault: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            engines: Vec::new(),
            baseline: None,
            rounds: None,
            seed: 42,
            dir: None,
            pool_size: None,
            flush: FlushKind::detect(),
            dictionary: super::keys::DEFAULT_DICTIONARY.into(),
            sample_every: 32,
            scan_time_limit: Some(std::time::Duration::from_secs(5)),
            load_threads: None,
            load_by_put: false,
            prefault: false,
        }
    }
}

/// Runs `suite` and judges its claims.
pub fn run(
    suite: &Suite,
    opts: &RunOptions,
    progress: &mut dyn Progress,
) -> BenchResult<SuiteReport> {
    let started = Instant::now();
    if let Some(n) = opts.load_threads {
        let max = super::experiment::MAX_THREADS;
        if n == 0 || n > max {
            return Err(BenchError::Config(format!(
                "{n} load threads: use 1 to {max}"
            )));
        }
    }
    let mut notes = suite.notes.clone();
    if opts.load_by_put {
        notes.push(
            "--load-by-put: every load (the `insert` rows) upserts its keys with Db::put, \
             not Db::insert"
                .into(),
        );
    }
    let specs: Vec<EngineSpec> = if opts.engines.is_empty() {
        let (have, missing): (Vec<&String>, Vec<&String>) =
            suite.engines.iter().partition(|e| engine::find(e).is_ok());
        if !missing.is_empty() {
            notes.push(format!(
                "skipped engines not in this build yet: {} (this build has: {})",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                engine::ENGINES
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        have.iter()
            .map(|e| engine::find(e).map(|i| EngineSpec::plain(i.name)))
            .collect::<crate::Result<_>>()
            .map_err(|e| BenchError::Config(e.to_string()))?
    } else {
        let mut v: Vec<EngineSpec> = Vec::new();
        for name in &opts.engines {
            let e = EngineSpec::parse(name).map_err(|e| BenchError::Config(e.to_string()))?;
            if !v.iter().any(|s| s.same(&e)) {
                e.check().map_err(|e| BenchError::Config(e.to_string()))?;
                v.push(e);
            }
        }
        v
    };
    if specs.is_empty() {
        return Err(BenchError::Config("no engine to run".into()));
    }
    let engines: Vec<&str> = specs.iter().map(|s| s.label.as_str()).collect();
    let baseline: &str = match &opts.baseline {
        Some(b) => {
            let e = EngineSpec::parse(b).map_err(|e| BenchError::Config(e.to_string()))?;
            match specs.iter().find(|s| s.same(&e)) {
                Some(s) => s.label.as_str(),
                None => {
                    return Err(BenchError::Config(format!(
                        "--baseline {b} is not among the engines that run ({})",
                        engines.join(", ")
                    )))
                }
            }
        }
        None if engines.contains(&REFERENCE_ENGINE) => REFERENCE_ENGINE,
        None => engines[0],
    };
    let rounds = opts.rounds.unwrap_or(suite.rounds);
    if rounds == 0 {
        return Err(BenchError::Config("--rounds must be at least 1".into()));
    }
    for (i, p) in suite.experiments.iter().enumerate() {
        p.experiment.check()?;
        if suite.experiments[..i]
            .iter()
            .any(|q| q.experiment.id == p.experiment.id)
        {
            return Err(BenchError::Config(format!(
                "two experiments are called `{}`",
                p.experiment.id
            )));
        }
    }
    // A word list too short for some experiment fails the run now, not
    // after the experiments before that one have run.
    let mut dictionary_words = None;
    for p in suite.experiments.iter().filter(|p| p.skip.is_none()) {
        let exp = &p.experiment;
        if exp.keys != KeyKind::Dictionary {
            continue;
        }
        let have = match dictionary_words {
            Some(n) => n,
            None => *dictionary_words.insert(keys::dictionary_capacity(&opts.dictionary)?),
        };
        let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        keys::check_dictionary_size(
            &opts.dictionary,
            have,
            as_usize(exp.records),
            as_usize(exp.planned_inserts(opts.seed)),
        )?;
    }
    let dir = opts.dir.clone().unwrap_or_else(default_pool_dir);
    let cfg = RunConfig {
        engines: specs.clone(),
        baseline: baseline.to_string(),
        rounds,
        seed: opts.seed,
        dir: dir.clone(),
        pool_size: opts.pool_size,
        flush: opts.flush,
        dictionary: opts.dictionary.clone(),
        sample_every: opts.sample_every.max(1),
        scan_time_limit: opts.scan_time_limit,
        load_threads: opts.load_threads,
        load_by_put: opts.load_by_put,
        prefault: opts.prefault,
    };
    let to_run = suite
        .experiments
        .iter()
        .filter(|p| p.skip.is_none())
        .count();
    let steps = to_run * rounds as usize * engines.len();
    let mut step = 0;
    let mut reports = Vec::new();
    for p in &suite.experiments {
        let exp = &p.experiment;
        if let Some(why) = &p.skip {
            reports.push(ExperimentReport::skipped(exp.clone(), why.clone()));
            continue;
        }
        let prep = runner::prepare(&cfg, exp)?;
        let mut runs = Vec::new();
        for round in 0..rounds {
            let order: Vec<&EngineSpec> = if round % 2 == 0 {
                specs.iter().collect()
            } else {
                specs.iter().rev().collect()
            };
            for e in order {
                step += 1;
                progress.begin(
                    step,
                    steps,
                    &format!("{} · round {}/{rounds} · {}", exp.id, round + 1, e.label),
                );
                runs.push(runner::run_engine(&cfg, exp, &prep, e, round, progress)?);
            }
        }
        reports.push(ExperimentReport::summarise(
            exp.clone(),
            &engines,
            baseline,
            prep.keys.mean_len(),
            prep.pool_size,
            runs,
        ));
    }
    let mut report = SuiteReport {
        title: suite.title.clone(),
        preset: suite.preset.clone(),
        scale: suite.scale.clone(),
        seed: opts.seed,
        rounds,
        engines: engines.iter().map(|e| e.to_string()).collect(),
        baseline: baseline.to_string(),
        flush: opts.flush,
        dir: dir.display().to_string(),
        sample_every: cfg.sample_every,
        prefault: cfg.prefault,
        dram_measured: alloc::is_installed(),
        machine: MachineInfo::detect(),
        experiments: reports,
        notes,
        verdicts: Vec::new(),
        plots: Vec::new(),
        total_secs: 0.0,
    };
    report.verdicts = suite.claims.iter().map(|c| c.judge(&report)).collect();
    report.total_secs = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Where pool files go without `--dir`: `/dev/shm` when it is there with
/// at least 1 GiB free, else the system's temporary directory. Memory
/// behind a file system is the closest this machine has to PM: a pool on a
/// disk file system is written back by kernel threads during the run, which
/// steals CPU from the benchmark's own threads (on a 2-core machine, the
/// 2-thread figures suffered most).
pub fn default_pool_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir()
        && super::temp_pool::free_bytes(shm).is_some_and(|b| b >= 1 << 30)
        && writable(shm)
    {
        return shm.to_path_buf();
    }
    std::env::temp_dir()
}

fn writable(dir: &std::path::Path) -> bool {
    let probe = dir.join(format!(".pmindex-probe-{}", std::process::id()));
    let ok = std::fs::File::create(&probe).is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_suite_has_basic_and_ycsb_a() {
        let s = custom(&CustomSpec::default()).unwrap();
        let ids: Vec<_> = s
            .experiments
            .iter()
            .map(|p| p.experiment.id.as_str())
            .collect();
        assert_eq!(ids, ["basic", "ycsb-a"]);
        let names: Vec<_> = s.experiments[0]
            .experiment
            .phases
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        assert_eq!(
            names,
            ["insert", "recovery", "search", "update", "scan", "delete"]
        );
        assert_eq!(s.figures.len(), 2);
    }

    #[test]
    fn sweeps_multiply_and_name_experiments_by_what_varies() {
        let spec = CustomSpec {
            keys: vec![KeyKind::Dense, KeyKind::Clustered],
            threads: vec![1, 2],
            workloads: vec![Workload::parse("ycsb-c").unwrap()],
            ..CustomSpec::default()
        };
        let s = custom(&spec).unwrap();
        let ids: Vec<_> = s
            .experiments
            .iter()
            .map(|p| p.experiment.id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "dense/t1/ycsb-c",
                "dense/t2/ycsb-c",
                "clustered/t1/ycsb-c",
                "clustered/t2/ycsb-c"
            ]
        );
        // A throughput chart per experiment and a scaling chart per group.
        assert_eq!(s.figures.len(), 6);
        assert!(matches!(&s.figures[2], Figure::Lines { id, .. } if id == "dense-ycsb-c-scaling"));
    }

    /// Counts the engine runs that started.
    struct CountBegins(usize);
    impl Progress for CountBegins {
        fn begin(&mut self, _step: usize, _steps: usize, _what: &str) {
            self.0 += 1;
        }
        fn start(&mut self, _engine: &str, _phase: &str, _total: u64) {}
        fn advance(&mut self, _n: u64) {}
        fn finish(&mut self) {}
    }

    #[test]
    fn a_word_list_too_short_for_a_later_experiment_fails_before_the_first_runs() {
        let words =
            std::env::temp_dir().join(format!("pmindex-suite-words-{}", std::process::id()));
        std::fs::write(&words, "one\ntwo\nthree\nfour\nfive\n").unwrap();
        let spec = CustomSpec {
            keys: vec![KeyKind::Sparse, KeyKind::Dictionary],
            records: 6,
            workloads: vec![Workload::parse("basic").unwrap()],
            ..CustomSpec::default()
        };
        let suite = custom(&spec).unwrap();
        let opts = RunOptions {
            engines: vec!["pmlog".into()],
            rounds: Some(1),
            dictionary: words.clone(),
            ..RunOptions::default()
        };
        let mut progress = CountBegins(0);
        let e = run(&suite, &opts, &mut progress).unwrap_err().to_string();
        assert!(
            e.contains("5 distinct words") && e.contains("--records 5"),
            "{e}"
        );
        assert_eq!(progress.0, 0, "an experiment ran before the check");

        // Five words are enough for five records: both experiments run.
        let spec = CustomSpec { records: 5, ..spec };
        let r = run(&custom(&spec).unwrap(), &opts, &mut progress).unwrap();
        assert_eq!(r.experiments.len(), 2);
        assert_eq!(progress.0, 2);
        std::fs::remove_file(&words).unwrap();
    }

    #[test]
    fn bad_specs_are_refused() {
        let no_keys = CustomSpec {
            keys: vec![],
            ..CustomSpec::default()
        };
        assert!(custom(&no_keys).is_err());
        let no_scan = CustomSpec {
            scan_len: 0,
            ..CustomSpec::default()
        };
        assert!(custom(&no_scan).is_err());
        for (get_many, workloads) in [
            (Some(0), vec![Workload::Basic]),
            (Some(16), vec![Workload::parse("ycsb-c").unwrap()]),
        ] {
            let spec = CustomSpec {
                get_many,
                workloads,
                ..CustomSpec::default()
            };
            assert!(custom(&spec)
                .unwrap_err()
                .to_string()
                .contains("--get-many"));
        }
        let many = custom(&CustomSpec {
            get_many: Some(16),
            ..CustomSpec::default()
        })
        .unwrap();
        let names: Vec<_> = many.experiments[0]
            .experiment
            .phases
            .iter()
            .map(|p| p.name())
            .collect();
        assert_eq!(
            names,
            [
                "insert",
                "recovery",
                "search",
                "search-many",
                "update",
                "scan",
                "delete"
            ]
        );
        assert!(Workload::parse("bogus").is_err());
        assert_eq!(Workload::parse("BASIC").unwrap(), Workload::Basic);
    }

    #[test]
    fn engines_and_baseline_are_checked() {
        let suite = custom(&CustomSpec {
            records: 10,
            ..CustomSpec::default()
        })
        .unwrap();
        let run_with = |engines: Vec<&str>, baseline: Option<&str>| {
            run(
                &suite,
                &RunOptions {
                    engines: engines.into_iter().map(String::from).collect(),
                    baseline: baseline.map(String::from),
                    rounds: Some(1),
                    ..RunOptions::default()
                },
                &mut super::super::NoProgress,
            )
        };
        assert!(run_with(vec!["nope"], None)
            .unwrap_err()
            .to_string()
            .contains("unknown engine"));
        assert!(run_with(vec!["pmlog"], Some("nope")).is_err());
        let r = run_with(vec!["pmlog", "pmlog"], None).unwrap();
        assert_eq!(r.engines, ["pmlog"]);
        assert_eq!(r.baseline, "pmlog");
    }

    /// `--engines hart,hart:persist_order=paper`: one engine beside itself
    /// with other settings, each run with its own (the paper order's
    /// inserts fence more), named by its label in the report and usable as
    /// the baseline; a setting the engine does not know, or one that is
    /// not KEY=VALUE, fails before anything runs.
    #[test]
    fn an_engine_runs_beside_itself_with_other_settings() {
        let suite = custom(&CustomSpec {
            records: 300,
            workloads: vec![Workload::Basic],
            ..CustomSpec::default()
        })
        .unwrap();
        let run_with = |engines: &[&str], baseline: Option<&str>| {
            run(
                &suite,
                &RunOptions {
                    engines: engines.iter().map(|e| e.to_string()).collect(),
                    baseline: baseline.map(String::from),
                    rounds: Some(1),
                    ..RunOptions::default()
                },
                &mut super::super::NoProgress,
            )
        };
        let r = run_with(
            &[
                "hart",
                " hart : hart.persist_order = paper ",
                "hart:persist_order=paper",
            ],
            Some("hart:hart.persist_order=paper"),
        )
        .unwrap();
        assert_eq!(r.engines, ["hart", "hart:persist_order=paper"]);
        assert_eq!(r.baseline, "hart:persist_order=paper");
        let id = &r.experiments[0].experiment.id;
        let fences = |e: &str| r.phase(id, e, "insert").unwrap().fences_per_op;
        assert!(
            fences("hart:persist_order=paper") > fences("hart") + 1.0,
            "paper {} tight {}",
            fences("hart:persist_order=paper"),
            fences("hart")
        );
        assert_eq!(r.errors(), 0);
        for (bad, says) in [
            ("hart:no_such_setting=1", "no_such_setting"),
            ("hart:persist_order=sloppy", "sloppy"),
            ("hart:persist_order", "KEY=VALUE"),
            ("hart:persist_order=", "a key and a value"),
            ("hart:stripes=thread:stripes=hash_key", "twice"),
            ("nope:reads=locked", "unknown engine"),
            ("wort:woart.reads=locked", "is for engine `woart`"),
            ("pmlog:x=1", "engine pmlog has no settings"),
        ] {
            let e = run_with(&["hart", bad], None).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = run_with(&["hart"], Some("hart:persist_order=paper")).unwrap_err();
        assert!(e.to_string().contains("not among"), "{e}");
        // Settings in another order are the same engine, under the label
        // first given, and the baseline names it either way.
        let r = run_with(
            &[
                "hart:persist_order=paper:stripes=hash_key",
                "hart:stripes=hash_key:persist_order=paper",
            ],
            Some("hart:stripes=hash_key:persist_order=paper"),
        )
        .unwrap();
        assert_eq!(r.engines, ["hart:persist_order=paper:stripes=hash_key"]);
        assert_eq!(r.baseline, "hart:persist_order=paper:stripes=hash_key");
    }
}
