//! `pmindex bench` and `pmindex bench-store-api`: thin wrappers around
//! [`pmindex::bench`] that parse the lists, draw progress bars and print
//! the reports (text, `--json`, `--csv`) and charts (`--plot`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use pmindex::bench::dist::Distribution;
use pmindex::bench::keys::KeyKind;
use pmindex::bench::plot;
use pmindex::bench::preset::{Preset, PresetCtx};
use pmindex::bench::store_api::{self as store_api_bench, StoreApiConfig};
use pmindex::bench::suite::{self, CustomSpec, RunOptions, Workload};
use pmindex::bench::Progress;
use pmindex::pm::{FlushKind, PersistConfig, PmLatency};

use super::error::CliError;
use super::output::{print_json, print_text, Output};
use super::parse::{parse_count, parse_latency, parse_size};

/// The options of `pmindex bench`, as given.
#[derive(Debug)]
pub struct BenchOpts<'a> {
    pub preset: Option<Preset>,
    pub full: bool,
    /// `all` or a comma-separated list.
    pub engines: &'a str,
    pub baseline: Option<String>,
    pub keys: &'a str,
    pub dict: PathBuf,
    pub records: u64,
    pub ops: Option<u64>,
    pub value_sizes: &'a str,
    pub mixes: &'a [String],
    pub dist: Option<Distribution>,
    pub scan_len: u64,
    pub get_many: Option<usize>,
    pub put_many: Option<usize>,
    pub threads: &'a str,
    pub load_threads: Option<usize>,
    pub load_by_put: bool,
    pub prefault: bool,
    pub pm_latencies: Option<&'a str>,
    pub rounds: Option<u32>,
    pub seed: u64,
    pub dir: Option<PathBuf>,
    pub pool_size: &'a str,
    pub sample: u32,
    pub scan_time_limit: Option<u64>,
    pub csv: bool,
    pub plot: Option<PathBuf>,
}

/// Parses `--engines`: `all` (every engine) or a comma-separated list.
fn engine_list(s: &str) -> Result<Vec<String>, CliError> {
    if s.trim() == "all" {
        return Ok(Vec::new());
    }
    let list = split(s);
    if list.is_empty() {
        return Err(CliError::Usage(format!(
            "--engines `{s}`: name at least one engine, or `all`"
        )));
    }
    if list.iter().any(|e| e == "all") {
        return Err(CliError::Usage(format!(
            "--engines `{s}`: `all` stands alone; list the engines to add settings to one"
        )));
    }
    Ok(list)
}

/// The non-empty, trimmed items of a comma-separated list.
fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// Parses a comma-separated list with `f`; `what` names the option. An
/// item given twice (`--threads 2,2`, or `2,02`) counts once, as a repeated
/// engine in `--engines` does.
fn list<T: PartialEq>(
    s: &str,
    what: &str,
    f: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, CliError> {
    let items = split(s);
    if items.is_empty() {
        return Err(CliError::Usage(format!("{what} `{s}`: the list is empty")));
    }
    let mut out = Vec::with_capacity(items.len());
    for i in &items {
        let v = f(i).map_err(|e| CliError::Usage(format!("{what}: {e}")))?;
        push_new(&mut out, v);
    }
    Ok(out)
}

/// Appends `v` unless `out` holds it already.
fn push_new<T: PartialEq>(out: &mut Vec<T>, v: T) {
    if !out.contains(&v) {
        out.push(v);
    }
}

/// Parses the workloads of `--mix` (each occurrence a comma-separated list
/// of names, or one custom mix such as `read=90,update=10`).
fn workloads(mixes: &[String]) -> Result<Vec<Workload>, CliError> {
    let mut out = Vec::new();
    for m in mixes {
        if m.contains('=') {
            let w = Workload::parse(m).map_err(|e| CliError::Usage(format!("--mix: {e}")))?;
            push_new(&mut out, w);
        } else {
            for w in list(m, "--mix", Workload::parse)? {
                push_new(&mut out, w);
            }
        }
    }
    if out.is_empty() {
        return Err(CliError::Usage("--mix: name at least one workload".into()));
    }
    Ok(out)
}

/// Parses a PM latency or `none`.
fn latency_or_none(s: &str) -> Result<Option<PmLatency>, String> {
    if s.eq_ignore_ascii_case("none") {
        Ok(None)
    } else {
        parse_latency(s).map(Some)
    }
}

/// `pmindex bench`.
pub fn run(
    out: Output,
    flush: Option<FlushKind>,
    pm_latency: Option<PmLatency>,
    a: &BenchOpts<'_>,
) -> Result<(), CliError> {
    if out.json && a.csv {
        return Err(CliError::Usage(
            "--json and --csv both print the report: choose one".into(),
        ));
    }
    let flush = flush.unwrap_or_else(FlushKind::detect);
    // Refuse an instruction this CPU lacks before anything runs.
    PersistConfig::new(flush, None)?;
    if a.sample == 0 {
        return Err(CliError::Usage("--sample must be at least 1".into()));
    }
    if let Some(n) = a.load_threads {
        let max = pmindex::bench::experiment::MAX_THREADS;
        if n == 0 || n > max {
            return Err(CliError::Usage(format!(
                "--load-threads {n}: use 1 to {max}"
            )));
        }
    }
    let pool_size = if a.pool_size.trim().eq_ignore_ascii_case("auto") {
        None
    } else {
        Some(parse_size(a.pool_size).map_err(|e| CliError::Usage(format!("--pool-size: {e}")))?)
    };
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(pmindex::bench::suite::default_pool_dir);
    let suite = match a.preset {
        Some(p) => {
            if pm_latency.is_some() {
                return Err(CliError::Usage(format!(
                    "--pm-latency cannot be combined with --preset: the {p} preset runs the \
                     paper's own latency settings"
                )));
            }
            p.suite(&PresetCtx::detect(a.full, &a.dict, &dir))
        }
        None => {
            let latencies = match (a.pm_latencies, pm_latency) {
                (Some(_), Some(_)) => {
                    return Err(CliError::Usage(
                        "give either --pm-latency or --pm-latencies, not both".into(),
                    ))
                }
                (Some(l), None) => list(l, "--pm-latencies", latency_or_none)?,
                (None, l) => vec![l],
            };
            suite::custom(&CustomSpec {
                keys: list(a.keys, "--keys", |s| s.parse::<KeyKind>())?,
                records: a.records,
                ops: a.ops,
                value_sizes: list(a.value_sizes, "--value-size", parse_size)?,
                threads: list(a.threads, "--threads", |s| {
                    parse_count(s).and_then(|n| {
                        usize::try_from(n).map_err(|_| format!("bad thread count `{s}`"))
                    })
                })?,
                latencies,
                workloads: workloads(a.mixes)?,
                dist: a.dist,
                scan_len: a.scan_len,
                get_many: a.get_many,
                put_many: a.put_many,
            })?
        }
    };
    if let Some(d) = &a.plot {
        check_plot_dir(d)?;
    }
    let opts = RunOptions {
        engines: engine_list(a.engines)?,
        baseline: a.baseline.clone(),
        rounds: a.rounds,
        seed: a.seed,
        dir: Some(dir),
        pool_size,
        flush,
        dictionary: a.dict.clone(),
        sample_every: a.sample,
        load_threads: a.load_threads,
        load_by_put: a.load_by_put,
        prefault: a.prefault,
        scan_time_limit: match a.scan_time_limit {
            Some(0) => None,
            Some(s) => Some(std::time::Duration::from_secs(s)),
            None if a.full => None,
            None => Some(std::time::Duration::from_secs(5)),
        },
    };
    // Ctrl-C (or SIGTERM, SIGHUP) removes the temporary pool files too.
    pmindex::bench::temp_pool::remove_on_signal();
    let mut bars = Bars::new(std::io::stderr().is_terminal());
    let mut report = suite::run(&suite, &opts, &mut bars)?;
    drop(bars);
    if let Some(d) = &a.plot {
        let files = plot::write_figures(d, &suite.figures, &report)?;
        report.plots = files.iter().map(|p| p.display().to_string()).collect();
    }
    if out.json {
        print_json(&report)?;
    } else if a.csv {
        print_text(&report.to_csv())?;
    } else {
        print_text(&report.to_string())?;
    }
    match report.errors() {
        0 => Ok(()),
        n => Err(CliError::Failed(format!(
            "{n} operations returned a wrong result"
        ))),
    }
}

/// Refuses a `--plot` path that exists and is not a directory, or a
/// directory that cannot be created or written, before the benchmark runs
/// (creating it, as writing the plots would).
fn check_plot_dir(d: &Path) -> Result<(), CliError> {
    if let Ok(m) = std::fs::metadata(d) {
        if !m.is_dir() {
            return Err(CliError::Usage(format!(
                "--plot {}: exists and is not a directory",
                d.display()
            )));
        }
    }
    let unwritable = |e: std::io::Error| {
        CliError::Failed(format!("--plot {}: cannot write there: {e}", d.display()))
    };
    std::fs::create_dir_all(d).map_err(unwritable)?;
    let probe = d.join(format!(".pmindex-plot-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(unwritable)?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `pmindex bench-store-api` (and `pmindex bench --store-api`).
pub fn store_api(out: Output, cfg: &StoreApiConfig) -> Result<(), CliError> {
    let report = store_api_bench::run(cfg)?;
    if out.json {
        print_json(&report)
    } else {
        print_text(&report.to_string())
    }
}

/// Progress bars on standard error: one for the whole run, one per phase.
struct Bars {
    multi: Option<MultiProgress>,
    overall: Option<ProgressBar>,
    phase: Option<ProgressBar>,
}

impl Bars {
    fn new(show: bool) -> Self {
        Bars {
            multi: show.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
            overall: None,
            phase: None,
        }
    }
}

impl Drop for Bars {
    fn drop(&mut self) {
        if let Some(b) = self.phase.take() {
            b.finish_and_clear();
        }
        if let Some(b) = self.overall.take() {
            b.finish_and_clear();
        }
    }
}

impl Progress for Bars {
    fn begin(&mut self, step: usize, steps: usize, what: &str) {
        let Some(multi) = &self.multi else { return };
        let bar = self.overall.get_or_insert_with(|| {
            let style = ProgressStyle::with_template("[{pos}/{len}] {wide_msg} elapsed {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar = multi.add(ProgressBar::new(steps as u64).with_style(style));
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            bar
        });
        bar.set_length(steps as u64);
        // The step that runs now, counting from 1.
        bar.set_position(step as u64);
        bar.set_message(what.to_string());
    }

    fn start(&mut self, engine: &str, phase: &str, total: u64) {
        let Some(multi) = &self.multi else { return };
        let style = ProgressStyle::with_template(
            "{prefix:>24} [{bar:30}] {human_pos}/{human_len} eta {eta}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = multi.add(ProgressBar::new(total).with_style(style));
        bar.set_prefix(format!("{engine} {phase}"));
        if let Some(old) = self.phase.replace(bar) {
            old.finish_and_clear();
        }
    }

    fn advance(&mut self, n: u64) {
        if let Some(b) = &self.phase {
            b.inc(n);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.phase.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_lists() {
        assert_eq!(engine_list("all").unwrap(), Vec::<String>::new());
        assert_eq!(engine_list("pmlog").unwrap(), ["pmlog"]);
        assert_eq!(engine_list(" a , b,").unwrap(), ["a", "b"]);
        assert!(matches!(engine_list(" , "), Err(CliError::Usage(_))));
    }

    #[test]
    fn workload_lists_and_custom_mixes() {
        let w = workloads(&["basic,ycsb-a".into(), "read=90,update=10".into()]).unwrap();
        assert_eq!(w.len(), 3);
        assert_eq!(w[0], Workload::Basic);
        assert!(matches!(&w[2], Workload::Mix(m) if m.name == "read=90,update=10"));
        assert!(workloads(&["nope".into()]).is_err());
        assert!(workloads(&[]).is_err());
    }

    #[test]
    fn latency_lists() {
        let l = list("none, 300/100", "--pm-latencies", latency_or_none).unwrap();
        assert_eq!(l[0], None);
        assert_eq!(l[1].unwrap().write_ns, 300);
        assert!(list("300", "--pm-latencies", latency_or_none).is_err());
        assert!(list(",", "--pm-latencies", latency_or_none).is_err());
    }

    #[test]
    fn an_item_given_twice_counts_once() {
        let t = list("2, 1,2,02", "--threads", |s| {
            s.parse::<u32>().map_err(|e| e.to_string())
        });
        assert_eq!(t.unwrap(), [2, 1]);
        let w = workloads(&["basic,basic".into(), "basic".into()]).unwrap();
        assert_eq!(w, [Workload::Basic]);
        let l = list("none,NONE,300/100", "--pm-latencies", latency_or_none).unwrap();
        assert_eq!(l.len(), 2);
    }
}
