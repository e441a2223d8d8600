//! `pmindex bench` and `pmindex bench-store-api`: thin wrappers around
//! [`pmindex::bench`] that draw progress bars and print the reports.

use std::io::IsTerminal;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressStyle};
use pmindex::bench::quick::{self as quick_bench, QuickConfig};
use pmindex::bench::store_api::{self as store_api_bench, StoreApiConfig};
use pmindex::bench::Progress;
use pmindex::pm::PersistConfig;

use super::error::CliError;
use super::output::{print_json, print_text, Output};

/// The options of `pmindex bench`.
#[derive(Debug)]
pub struct QuickArgs<'a> {
    pub records: u64,
    pub value_size: u64,
    pub seed: u64,
    /// `all` or a comma-separated list.
    pub engines: &'a str,
    pub dir: Option<PathBuf>,
}

/// Parses `--engines`: `all` (every engine) or a comma-separated list.
fn engine_list(s: &str) -> Result<Vec<String>, CliError> {
    if s.trim() == "all" {
        return Ok(Vec::new());
    }
    let list: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if list.is_empty() {
        return Err(CliError::Usage(format!(
            "--engines `{s}`: name at least one engine, or `all`"
        )));
    }
    Ok(list)
}

/// `pmindex bench`.
pub fn quick(out: Output, persist: PersistConfig, a: &QuickArgs<'_>) -> Result<(), CliError> {
    let cfg = QuickConfig {
        records: a.records,
        value_size: a.value_size,
        seed: a.seed,
        engines: engine_list(a.engines)?,
        dir: a.dir.clone(),
        persist,
    };
    let mut bars = Bars::new(!out.json && std::io::stdout().is_terminal());
    let report = quick_bench::run_with_progress(&cfg, &mut bars)?;
    if out.json {
        print_json(&report)?;
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

/// `pmindex bench-store-api` (and `pmindex bench --store-api`).
pub fn store_api(out: Output, cfg: &StoreApiConfig) -> Result<(), CliError> {
    let report = store_api_bench::run(cfg)?;
    if out.json {
        print_json(&report)
    } else {
        print_text(&report.to_string())
    }
}

/// One progress bar per phase on standard error, or none.
struct Bars {
    show: bool,
    bar: Option<ProgressBar>,
}

impl Bars {
    fn new(show: bool) -> Self {
        Bars { show, bar: None }
    }
}

impl Progress for Bars {
    fn start(&mut self, engine: &str, phase: &str, total: u64) {
        if !self.show {
            return;
        }
        let style = ProgressStyle::with_template(
            "{prefix:>14} [{bar:30}] {human_pos}/{human_len} eta {eta}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::new(total).with_style(style);
        bar.set_prefix(format!("{engine} {phase}"));
        self.bar = Some(bar);
    }

    fn advance(&mut self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
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
}
