//! A small `pmindex bench` run through the library, end to end: the suite
//! of the command line, every engine, every output (text, CSV, JSON,
//! charts), the verdicts, and no pool file left behind.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pmindex::bench::keys::KeyKind;
use pmindex::bench::plot::{self, Figure};
use pmindex::bench::suite::{self, CustomSpec, RunOptions, Suite, Workload};
use pmindex::bench::summary::CSV_COLUMNS;
use pmindex::bench::verdict::{Case, Check, Claim, Metric, Status};
use pmindex::bench::NoProgress;
use pmindex::pm::FlushKind;

/// PM counters are process-wide: runs in parallel tests would count each
/// other's flushes and fences, so every test that runs a suite holds this.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmindex-bench-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        rounds: Some(2),
        dir: Some(dir.to_path_buf()),
        flush: FlushKind::Eadr,
        sample_every: 2,
        ..RunOptions::default()
    }
}

fn tiny() -> CustomSpec {
    CustomSpec {
        keys: vec![KeyKind::RandString],
        records: 2000,
        threads: vec![1, 2],
        workloads: vec![
            Workload::Basic,
            Workload::parse("ycsb-e").unwrap(),
            Workload::parse("hart-read-intensive").unwrap(),
        ],
        scan_len: 10,
        ..CustomSpec::default()
    }
}

#[test]
fn a_tiny_run_reports_every_engine_and_leaves_no_pool() {
    let _serial = serial();
    let dir = scratch("run");
    let suite = suite::custom(&tiny()).unwrap();
    let report = suite::run(&suite, &opts(&dir), &mut NoProgress).unwrap();
    assert_eq!(report.errors(), 0);
    assert_eq!(report.baseline, "pmlog");
    let engines: Vec<&str> = pmindex::engine::ENGINES.iter().map(|e| e.name).collect();
    assert_eq!(report.engines, engines);
    assert_eq!(report.experiments.len(), 6);
    for x in &report.experiments {
        assert!(x.skipped.is_none());
        assert_eq!(x.engines.len(), engines.len());
        assert_eq!(x.runs.len(), 2 * engines.len(), "two rounds per engine");
        // Rounds alternate the engine order.
        if engines.len() > 1 {
            assert_eq!(x.runs[0].engine, engines[0]);
            assert_eq!(x.runs[engines.len()].engine, *engines.last().unwrap());
        }
        for e in &x.engines {
            let mem = e.memory.expect("memory is measured after every load");
            assert_eq!(mem.records, 2000);
            assert!(mem.pm_bytes_per_record > 0.0);
            assert_eq!(
                mem.dram_bytes_per_record, None,
                "no counting allocator here"
            );
            for p in &e.phases {
                assert_eq!(p.ns_per_op_rounds.len(), 2);
                let base = x.engine("pmlog").unwrap().phase(&p.phase).unwrap();
                let expect = base.ns_per_op / p.ns_per_op;
                assert!((p.speedup.unwrap() - expect).abs() < 1e-9);
            }
        }
    }
    let basic = report.experiment("t1/basic").unwrap();
    let pmlog = basic.engine("pmlog").unwrap();
    let names: Vec<_> = pmlog.phases.iter().map(|p| p.phase.as_str()).collect();
    assert_eq!(
        names,
        ["insert", "recovery", "search", "update", "scan", "delete"]
    );
    assert!(pmlog.recovery.unwrap().recovery_secs > 0.0);
    let ycsb_e = report.phase("t2/ycsb-e", "pmlog", "ycsb-e").unwrap();
    assert_eq!(ycsb_e.threads, 2);
    let kinds: Vec<_> = ycsb_e.by_op.iter().map(|o| o.op.name()).collect();
    assert_eq!(kinds, ["insert", "scan"]);
    assert!(ycsb_e.p99_ns.unwrap() >= ycsb_e.p50_ns.unwrap());

    // Text.
    let text = report.to_string();
    for needle in [
        "== t1/basic:",
        "== t2/hart-read-intensive:",
        "Random keys (",
        "vs pmlog",
        "== memory after the load",
        "DRAM B/rec: n/a",
        "total wall time",
    ] {
        assert!(text.contains(needle), "text lacks {needle:?}:\n{text}");
    }

    // CSV: a header, then rows of as many fields.
    let csv = report.to_csv();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), CSV_COLUMNS.join(","));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == CSV_COLUMNS.len()));
    let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
    let insert = rows
        .iter()
        .find(|r| r[col("experiment")] == "t1/basic" && r[col("phase")] == "insert")
        .unwrap();
    assert_eq!(insert[col("engine")], "pmlog");
    assert_eq!(insert[col("keys")], "rand-string");
    assert_eq!(insert[col("ops")], "2000");
    assert!(insert[col("ns_per_op")].parse::<f64>().unwrap() > 0.0);
    // A mix has a row per kind of operation.
    assert!(rows
        .iter()
        .any(|r| r[col("phase")] == "hart-read-intensive" && r[col("op")] == "delete"));

    // JSON.
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["baseline"], "pmlog");
    let x0 = &json["experiments"][0];
    assert_eq!(x0["experiment"]["id"], "t1/basic");
    assert_eq!(x0["experiment"]["keys"], "rand-string");
    assert_eq!(x0["experiment"]["phases"][0]["phase"], "load");
    assert!(x0["engines"][0]["phases"][0]["ns_per_op"].as_f64().unwrap() > 0.0);
    assert!(x0["runs"][0]["phases"][0]["latency"]["p99_ns"].is_number());
    // How much of the pool the kernel put on huge pages after the load: a
    // byte count wherever /proc/self/smaps exists, at most the pool.
    if std::path::Path::new("/proc/self/smaps").exists() {
        let huge = x0["runs"][0]["huge_page_bytes"].as_u64().unwrap();
        assert!(huge <= x0["runs"][0]["pool_size"].as_u64().unwrap());
    }

    // Charts: a throughput chart per experiment, a scaling chart per workload.
    let plots = dir.join("plots");
    let files = plot::write_figures(&plots, &suite.figures, &report).unwrap();
    assert_eq!(files.len(), 2 * (6 + 3));
    assert!(files.iter().all(|f| f.exists()));
    assert!(plots.join("basic-scaling.png").exists());

    std::fs::remove_dir_all(&plots).unwrap();
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "a pool file was left behind"
    );
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn claims_are_judged_from_the_measurements() {
    let _serial = serial();
    let dir = scratch("claims");
    let mut s: Suite = suite::custom(&CustomSpec {
        records: 3000,
        workloads: vec![Workload::Basic],
        ..CustomSpec::default()
    })
    .unwrap();
    let case = |phase: &str| Case::new("basic", phase);
    let claim = |check| Claim {
        source: "Fig. 0".into(),
        claim: "test".into(),
        check,
    };
    s.claims = vec![
        claim(Check::Ratio {
            engines: vec!["pmlog".into()],
            num: case(""),
            num_metric: Metric::BuildSecs,
            den: case(""),
            den_metric: Metric::RecoverySecs,
            min: 0.0,
            paper: "any".into(),
        }),
        claim(Check::Ratio {
            engines: vec!["pmlog".into()],
            num: case("insert"),
            num_metric: Metric::NsPerOp,
            den: case("insert"),
            den_metric: Metric::NsPerOp,
            min: 2.0,
            paper: "twice itself".into(),
        }),
        claim(Check::Near {
            engine: "pmlog".into(),
            metric: Metric::FencesPerOp,
            expected: vec![(case("insert"), 1.0)],
            tolerance: 0.01,
        }),
        claim(Check::Beats {
            subjects: vec!["pmlog".into()],
            rivals: vec!["nvtree".into()],
            cases: vec![case("insert")],
            metric: Metric::NsPerOp,
            min_share: 1.0,
            paper: "-".into(),
        }),
        claim(Check::Beats {
            subjects: vec!["pmlog".into()],
            rivals: vec!["pmlog".into()],
            cases: vec![Case::new("no-such-experiment", "insert")],
            metric: Metric::NsPerOp,
            min_share: 1.0,
            paper: "-".into(),
        }),
    ];
    let mut o = opts(&dir);
    o.engines = vec!["pmlog".into()];
    o.rounds = Some(1);
    let report = suite::run(&s, &o, &mut NoProgress).unwrap();
    let status: Vec<Status> = report.verdicts.iter().map(|v| v.status).collect();
    assert_eq!(
        status,
        [
            Status::Reproduced,
            Status::NotReproduced,
            // pmlog's insert is one fence (its persist order).
            Status::Reproduced,
            Status::NotMeasurable,
            Status::NotMeasurable,
        ],
        "{:#?}",
        report.verdicts
    );
    assert!(report.verdicts[3]
        .why
        .contains("not in this project's plan"));
    assert!(report.verdicts[4].why.contains("did not run"));
    assert!(report.to_string().contains("== the paper's claims"));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_preset_skips_what_it_cannot_run() {
    use pmindex::bench::preset::{Preset, PresetCtx};
    let ctx = PresetCtx {
        full: false,
        dictionary: "/nonexistent/words".into(),
        cpus: 2,
        mem_available: None,
        disk_available: None,
    };
    let s = Preset::Hart.suite(&ctx);
    assert!(s.engines.iter().any(|e| e == "hart") && s.engines.iter().any(|e| e == "pmlog"));
    let skipped = s.experiments.iter().filter(|p| p.skip.is_some()).count();
    assert_eq!(skipped, 3, "the three Dictionary experiments");
    assert!(s
        .figures
        .iter()
        .any(|f| matches!(f, Figure::Bars { id, .. } if id == "hart-fig4-insert")));
}

#[test]
fn bad_runs_are_refused_with_a_reason() {
    let _serial = serial();
    let dir = scratch("bad");
    let s = suite::custom(&CustomSpec {
        records: 10,
        ..CustomSpec::default()
    })
    .unwrap();
    let mut o = opts(&dir);
    o.rounds = Some(0);
    assert!(suite::run(&s, &o, &mut NoProgress)
        .unwrap_err()
        .to_string()
        .contains("--rounds"));
    let mut o = opts(&dir);
    o.dir = Some("/nonexistent-pmindex-dir".into());
    assert!(suite::run(&s, &o, &mut NoProgress)
        .unwrap_err()
        .to_string()
        .contains("nonexistent-pmindex-dir"));
    let dict = suite::custom(&CustomSpec {
        keys: vec![KeyKind::Dictionary],
        records: 10,
        ..CustomSpec::default()
    })
    .unwrap();
    let mut o = opts(&dir);
    o.dictionary = "/nonexistent/words".into();
    let e = suite::run(&dict, &o, &mut NoProgress)
        .unwrap_err()
        .to_string();
    assert!(e.contains("wamerican-insane"), "{e}");
    let zero = suite::custom(&CustomSpec {
        records: 0,
        ..CustomSpec::default()
    })
    .unwrap();
    assert!(suite::run(&zero, &opts(&dir), &mut NoProgress).is_err());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}
