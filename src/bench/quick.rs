//! The first benchmark: insert, get and delete N keys on each engine.
//!
//! For each engine, in a fresh pool file in a temporary directory (removed
//! afterwards, also on error):
//! 1. **insert** the N keys of [`super::workload::keys`] with
//!    [`crate::Db::insert`], in key-index order (a random key order);
//! 2. **get** all N in another random order, checking every value (a missing
//!    key or a wrong value counts as an error of the phase);
//! 3. **delete** all N in a third random order (a key found absent counts as
//!    an error; so does a key left over at the end).
//!
//! Each phase reports mean ns/op, Mops/s and PM flushes, fences and lines
//! read per operation.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::report::{fmt_bytes, fmt_secs, phase_table, EngineReport, PhaseReport};
use super::temp_pool::TempPool;
use super::workload::{check_workload, keys, pool_size_for, shuffled_order, ValueGen};
use super::{BenchError, BenchResult, NoProgress, Progress, PROGRESS_BATCH};
use crate::db::Options;
use crate::engine;
use crate::error::Result;
use crate::pm::{self, FlushKind, PersistConfig};

/// What to run.
#[derive(Debug, Clone)]
pub struct QuickConfig {
    /// Keys per engine.
    pub records: u64,
    /// Bytes per value.
    pub value_size: u64,
    /// Seed of keys, values and orders.
    pub seed: u64,
    /// Engine ids; empty means every engine in [`engine::ENGINES`].
    pub engines: Vec<String>,
    /// Where pool files go; `None` means [`std::env::temp_dir`].
    pub dir: Option<PathBuf>,
    /// Flush instruction and latency emulation of the pools.
    pub persist: PersistConfig,
}

impl Default for QuickConfig {
    fn default() -> Self {
        QuickConfig {
            records: 200_000,
            value_size: 8,
            seed: 42,
            engines: Vec::new(),
            dir: None,
            persist: PersistConfig::default(),
        }
    }
}

/// What it measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuickReport {
    /// Keys per engine.
    pub records: u64,
    /// Bytes per key.
    pub key_size: u64,
    /// Bytes per value.
    pub value_size: u64,
    /// The seed.
    pub seed: u64,
    /// Flush instruction.
    pub flush: FlushKind,
    /// Emulated extra ns per flushed line.
    pub write_extra_ns: u32,
    /// Emulated extra ns per PM line read.
    pub read_extra_ns: u32,
    /// Directory of the pool files.
    pub dir: String,
    /// One report per engine, in the order they ran.
    pub engines: Vec<EngineReport>,
    /// Wall time of the whole benchmark (key generation included).
    pub total_secs: f64,
}

impl QuickReport {
    /// Errors over every engine and phase.
    pub fn errors(&self) -> u64 {
        self.engines
            .iter()
            .flat_map(|e| &e.phases)
            .map(|p| p.errors)
            .sum()
    }
}

impl fmt::Display for QuickReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pmindex bench: {} records, {}-byte keys, {}-byte values, seed {}",
            self.records, self.key_size, self.value_size, self.seed
        )?;
        write!(f, "flush {}", self.flush)?;
        if (self.write_extra_ns, self.read_extra_ns) != (0, 0) {
            write!(
                f,
                ", emulated PM latency +{} ns per flushed line, +{} ns per line read",
                self.write_extra_ns, self.read_extra_ns
            )?;
        }
        writeln!(f, "; pools in {}", self.dir)?;
        for e in &self.engines {
            writeln!(
                f,
                "  {}: {} pool, {}",
                e.engine,
                fmt_bytes(e.pool_size),
                e.mapping
            )?;
        }
        writeln!(f)?;
        write!(f, "{}", phase_table(&self.engines))?;
        writeln!(f)?;
        writeln!(f, "total wall time {}", fmt_secs(self.total_secs))?;
        let errors = self.errors();
        if errors > 0 {
            writeln!(f, "WARNING: {errors} operations returned a wrong result")?;
        }
        Ok(())
    }
}

/// Runs the benchmark without progress reports.
pub fn run(cfg: &QuickConfig) -> BenchResult<QuickReport> {
    run_with_progress(cfg, &mut NoProgress)
}

/// Runs the benchmark, reporting progress to `progress`.
pub fn run_with_progress(
    cfg: &QuickConfig,
    progress: &mut dyn Progress,
) -> BenchResult<QuickReport> {
    let start = Instant::now();
    check_workload(cfg.records, cfg.value_size)?;
    let engines: Vec<&'static str> = if cfg.engines.is_empty() {
        engine::ENGINES.iter().map(|e| e.name).collect()
    } else {
        cfg.engines
            .iter()
            .map(|name| {
                engine::find(name)
                    .map(|e| e.name)
                    .map_err(|e| BenchError::Config(e.to_string()))
            })
            .collect::<BenchResult<_>>()?
    };
    let dir = cfg.dir.clone().unwrap_or_else(std::env::temp_dir);
    let pool_size = pool_size_for(cfg.records, cfg.value_size)?;
    let n = cfg.records as usize;
    let keys = keys(cfg.seed, n);
    let get_order = shuffled_order(cfg.seed, 1, n);
    let delete_order = shuffled_order(cfg.seed, 2, n);

    let mut reports = Vec::new();
    for name in engines {
        let engine_start = Instant::now();
        let opts = Options {
            engine: Some(name.to_string()),
            pool_size,
            persist: cfg.persist,
            ..Options::default()
        };
        let pool = TempPool::create(&dir, name, &opts)?;
        let db = pool.db();
        let mut values = ValueGen::new(cfg.seed, cfg.value_size as usize);
        let mut phases = Vec::new();

        let context = |phase: &str| format!("engine `{name}`, {phase}");
        phases.push(
            run_phase(name, "insert", n as u64, progress, |i| {
                let k = &keys[i as usize];
                db.insert(k, values.value_of(k)).map(|()| true)
            })
            .map_err(|e| BenchError::failed(context("insert"), e))?,
        );
        phases.push(
            run_phase(name, "get", n as u64, progress, |i| {
                let k = &keys[get_order[i as usize] as usize];
                let expected = values.value_of(k);
                Ok(db.get_with(k, |v| v == expected)? == Some(true))
            })
            .map_err(|e| BenchError::failed(context("get"), e))?,
        );
        let mut delete = run_phase(name, "delete", n as u64, progress, |i| {
            db.delete(&keys[delete_order[i as usize] as usize])
        })
        .map_err(|e| BenchError::failed(context("delete"), e))?;
        delete.errors += db.len();
        phases.push(delete);

        let mapping = db.pool().mapping_mode();
        drop(pool);
        reports.push(EngineReport {
            engine: name.to_string(),
            pool_size,
            mapping,
            phases,
            secs: engine_start.elapsed().as_secs_f64(),
        });
    }
    let (write_extra_ns, read_extra_ns) = cfg.persist.latency_extra_ns();
    Ok(QuickReport {
        records: cfg.records,
        key_size: 8,
        value_size: cfg.value_size,
        seed: cfg.seed,
        flush: cfg.persist.flush_kind(),
        write_extra_ns,
        read_extra_ns,
        dir: dir.display().to_string(),
        engines: reports,
        total_secs: start.elapsed().as_secs_f64(),
    })
}

/// Runs `op(0) .. op(ops - 1)` as one timed phase. `op` returns `Ok(false)`
/// for a wrong result (counted as an error) and `Err` to stop the benchmark.
/// Progress is reported every [`PROGRESS_BATCH`] operations; PM counters
/// are read outside the timed region.
pub fn run_phase(
    engine: &str,
    phase: &str,
    ops: u64,
    progress: &mut dyn Progress,
    mut op: impl FnMut(u64) -> Result<bool>,
) -> Result<PhaseReport> {
    progress.start(engine, phase, ops);
    let before = pm::counters();
    let t0 = Instant::now();
    let mut errors = 0;
    let mut i = 0;
    let mut outcome = Ok(());
    'phase: while i < ops {
        let end = (i + PROGRESS_BATCH).min(ops);
        for j in i..end {
            match op(j) {
                Ok(true) => {}
                Ok(false) => errors += 1,
                Err(e) => {
                    outcome = Err(e);
                    break 'phase;
                }
            }
        }
        progress.advance(end - i);
        i = end;
    }
    let elapsed: Duration = t0.elapsed();
    let counters = pm::counters() - before;
    progress.finish();
    outcome?;
    Ok(PhaseReport::new(phase, ops, errors, elapsed, counters))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    struct Record {
        starts: Vec<(String, u64)>,
        advanced: u64,
        finished: u32,
    }

    impl Progress for Record {
        fn start(&mut self, _engine: &str, phase: &str, total: u64) {
            self.starts.push((phase.to_string(), total));
        }
        fn advance(&mut self, n: u64) {
            self.advanced += n;
        }
        fn finish(&mut self) {
            self.finished += 1;
        }
    }

    #[test]
    fn small_run_has_three_clean_phases_and_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("pmindex-quick-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = QuickConfig {
            records: 5000,
            value_size: 24,
            dir: Some(dir.clone()),
            ..QuickConfig::default()
        };
        let mut rec = Record::default();
        let r = run_with_progress(&cfg, &mut rec).unwrap();
        assert_eq!(r.engines.len(), engine::ENGINES.len());
        for e in &r.engines {
            let names: Vec<_> = e.phases.iter().map(|p| p.phase.as_str()).collect();
            assert_eq!(names, ["insert", "get", "delete"]);
            assert!(e.phases.iter().all(|p| p.ops == 5000 && p.errors == 0));
            // Every insert and delete is durable on return: at least one fence.
            assert!(e.phases[0].fences_per_op >= 1.0);
        }
        assert_eq!(rec.advanced, 3 * 5000 * engine::ENGINES.len() as u64);
        assert_eq!(rec.finished as usize, 3 * engine::ENGINES.len());
        assert_eq!(rec.starts[0], ("insert".to_string(), 5000));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
        assert!(r.to_string().contains("total wall time"));
    }

    #[test]
    fn bad_configs_are_refused() {
        let bad_engine = QuickConfig {
            engines: vec!["nope".into()],
            ..QuickConfig::default()
        };
        assert!(run(&bad_engine)
            .unwrap_err()
            .to_string()
            .contains("unknown engine"));
        let no_records = QuickConfig {
            records: 0,
            ..QuickConfig::default()
        };
        assert!(run(&no_records).is_err());
    }

    #[test]
    fn phase_counts_wrong_results_and_stops_on_error() {
        let p = run_phase("e", "p", 10, &mut NoProgress, |i| Ok(i % 2 == 0)).unwrap();
        assert_eq!((p.ops, p.errors), (10, 5));
        let calls = Cell::new(0);
        let e = run_phase("e", "p", 10, &mut NoProgress, |i| {
            calls.set(calls.get() + 1);
            if i == 3 {
                Err(crate::Error::KeyNotFound)
            } else {
                Ok(true)
            }
        });
        assert!(e.is_err());
        assert_eq!(calls.get(), 4);
    }
}
