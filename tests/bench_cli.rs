//! `pmindex bench` as a command: clear errors on bad input (no panic),
//! and the machine-readable outputs.

use std::process::{Command, Output};

fn pmindex(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args(args)
        .output()
        .expect("run pmindex")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    for (args, code, needle) in [
        (
            &["bench", "--records", "0"][..],
            2,
            "--records must be at least 1",
        ),
        (&["bench", "--keys", "nope"], 2, "unknown key set"),
        (&["bench", "--get-many", "0"], 2, "key count of 1 or more"),
        (
            &[
                "bench",
                "--mix",
                "ycsb-c",
                "--get-many",
                "4",
                "--records",
                "10",
            ],
            2,
            "add basic to --mix",
        ),
        (
            &["bench", "--preset", "wort", "--get-many", "4"],
            2,
            "--get-many",
        ),
        (&["bench", "--mix", "nope"], 2, "unknown mix"),
        (&["bench", "--mix", "read=x"], 2, "weight"),
        (
            &["bench", "--threads", "0", "--records", "10"],
            2,
            "threads",
        ),
        (
            &["bench", "--value-size", "2M", "--records", "10"],
            2,
            "largest value",
        ),
        (&["bench", "--load-threads", "0"], 2, "use 1 to 1024"),
        (&["bench", "--load-threads", "1025"], 2, "use 1 to 1024"),
        (&["bench", "--engines", "nope"], 2, "unknown engine"),
        (
            &["bench", "--engines", "hart,hart:bogus=1"],
            2,
            "unknown setting `hart.bogus`",
        ),
        (&["bench", "--engines", "wort:reads"], 2, "is not KEY=VALUE"),
        (
            &["bench", "--engines", "all,hart:persist_order=paper"],
            2,
            "`all` stands alone",
        ),
        (
            &["bench", "--baseline", "nope", "--records", "10"],
            2,
            "unknown engine",
        ),
        (&["bench", "--dist", "zipfian:7"], 2, "out of range"),
        (&["bench", "--pool-size", "12Q"], 2, "--pool-size"),
        // Refused by the library, as `create --size 1K` is: a usage error too.
        (
            &["bench", "--pool-size", "1K", "--records", "10"],
            2,
            "the smallest pool is",
        ),
        (&["bench", "--pm-latencies", "300"], 2, "--pm-latencies"),
        (&["bench", "--preset", "nope"], 2, "unknown preset"),
        (
            &["bench", "--preset", "hart", "--keys", "dense"],
            2,
            "cannot be used with",
        ),
        (
            &["--pm-latency", "300/100", "bench", "--preset", "hart"],
            2,
            "--pm-latency",
        ),
        (&["--json", "bench", "--csv"], 2, "choose one"),
        (
            &[
                "bench",
                "--dir",
                "/nonexistent-pmindex-dir",
                "--records",
                "10",
            ],
            1,
            "nonexistent-pmindex-dir",
        ),
        (
            &[
                "bench",
                "--keys",
                "dictionary",
                "--dict",
                "/nonexistent/words",
                "--records",
                "10",
            ],
            2,
            "wamerican-insane",
        ),
        (
            &[
                "bench",
                "--records",
                "100000",
                "--value-size",
                "1000",
                "--pool-size",
                "4M",
                "--rounds",
                "1",
                "--mix",
                "basic",
            ],
            1,
            "pool",
        ),
    ] {
        let o = pmindex(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `pmindex bench ARGS --csv` and `pmindex --json bench ARGS`: the CSV's
/// header and rows (each checked to have the header's columns), and the
/// JSON.
fn csv_and_json(args: &[&str]) -> (Vec<String>, Vec<String>, serde_json::Value) {
    let o = pmindex(&[&["bench"][..], args, &["--csv"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8(o.stdout).unwrap();
    let mut lines = csv.lines().map(String::from);
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let rows: Vec<String> = lines.collect();
    assert!(
        rows.iter().all(|r| r.split(',').count() == header.len()),
        "{csv}"
    );
    let o = pmindex(&[&["--json", "bench"][..], args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    (header, rows, serde_json::from_slice(&o.stdout).unwrap())
}

#[test]
fn csv_and_json_come_out_whole() {
    let (header, rows, v) = csv_and_json(&[
        "--records",
        "500",
        "--rounds",
        "1",
        "--flush",
        "eadr",
        "--engines",
        "pmlog",
    ]);
    assert_eq!(header[0], "experiment");
    // basic: 6 phases; ycsb-a: insert, the mix, and its read and update rows.
    assert_eq!(rows.len(), 6 + 4, "{rows:?}");
    assert_eq!(v["engines"], serde_json::json!(["pmlog"]));
    assert_eq!(v["experiments"].as_array().unwrap().len(), 2);
    // The binary installs the counting allocator.
    assert_eq!(v["dram_measured"], true);
    let mem = &v["experiments"][0]["engines"][0]["memory"];
    assert!(mem["dram_bytes_per_record"].as_f64().unwrap() > 0.0);

    // An engine beside itself with other settings keeps the CSV whole
    // (the label has no comma) and names both in the JSON.
    let (_, rows, v) = csv_and_json(&[
        "--records",
        "500",
        "--rounds",
        "1",
        "--mix",
        "basic",
        "--engines",
        "pmlog,wort,wort:reads=locked",
    ]);
    assert_eq!(rows.len(), 3 * 6, "{rows:?}");
    let locked = rows.iter().filter(|r| r.contains(",wort:reads=locked,"));
    assert_eq!(locked.count(), 6, "{rows:?}");
    assert_eq!(
        v["engines"],
        serde_json::json!(["pmlog", "wort", "wort:reads=locked"])
    );
}

/// `--load-threads`: the load's row gives its own thread count in the CSV
/// (as every phase's row does: 1 for recovery), and the text's heading
/// says the pool was loaded by another count.
#[test]
fn a_load_on_its_own_thread_count_is_reported_as_such() {
    let args = [
        "--records",
        "2000",
        "--rounds",
        "1",
        "--flush",
        "eadr",
        "--engines",
        "pmlog",
        "--mix",
        "basic",
        "--threads",
        "2",
        "--load-threads",
        "1",
    ];
    let (header, rows, _) = csv_and_json(&args);
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (phase, threads) = (col("phase"), col("threads"));
    let of: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            (f[phase].to_string(), f[threads].to_string())
        })
        .collect();
    for (p, t) in &of {
        let want = match p.as_str() {
            "insert" | "recovery" => "1",
            _ => "2",
        };
        assert_eq!(t, want, "{p}: {of:?}");
    }
    let o = pmindex(&[&["bench"][..], &args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("2 threads (loaded by 1 thread)"), "{text}");
}

/// A phase whose threads cannot all start (here: an address-space limit
/// that 1,024 threads' stacks exceed) ends the run, whatever the way:
/// before, the threads already started waited at the start gate for ever.
#[test]
fn a_thread_that_cannot_start_does_not_hang_the_run() {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pmindex"));
    cmd.args([
        "bench",
        "--engines",
        "pmlog",
        "--mix",
        "basic",
        "--records",
        "20000",
        "--threads",
        "1",
        "--load-threads",
        "1024",
        "--rounds",
        "1",
        "--dir",
    ])
    .arg(dir.path())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    // SAFETY: `setrlimit` is async-signal-safe, and the closure touches
    // nothing else of the parent between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 3 << 30,
                rlim_max: 3 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the bench hung when its threads could not all start");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn pools_go_to_the_documented_default_directory() {
    // `--dir` left out: /dev/shm when it has 1 GiB free, else the temp dir
    // (docs/bench.md). The command line once used the temp dir always.
    let o = pmindex(&[
        "bench",
        "--records",
        "200",
        "--rounds",
        "1",
        "--flush",
        "eadr",
        "--engines",
        "pmlog",
        "--mix",
        "read=100",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let want = format!(
        "pools in {};",
        pmindex::bench::suite::default_pool_dir().display()
    );
    assert!(out.contains(&want), "want {want:?} in:\n{out}");
}

#[test]
fn plots_are_written_and_listed() {
    let dir = std::env::temp_dir().join(format!("pmindex-bench-cli-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = pmindex(&[
        "bench",
        "--records",
        "300",
        "--rounds",
        "1",
        "--flush",
        "eadr",
        "--engines",
        "pmlog",
        "--mix",
        "ycsb-b",
        "--threads",
        "1,2",
        "--plot",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("plots (6 files, PNG and SVG):"), "{text}");
    assert!(text.contains("ycsb-b-scaling.png (.svg)"), "{text}");
    for f in [
        "t1-ycsb-b-throughput.png",
        "t2-ycsb-b-throughput.svg",
        "ycsb-b-scaling.png",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_interrupted_run_removes_its_pool_file() {
    use std::time::{Duration, Instant};
    let dir = std::env::temp_dir().join(format!("pmindex-bench-cli-sigint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args([
            "bench",
            "--records",
            "50_000_000",
            "--engines",
            "pmlog",
            "--dir",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the pool file to appear (the key set is generated first).
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&dir).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "no pool file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: `kill` with a child's pid and a valid signal number.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir(&dir).unwrap();
}

/// `--prefault` maps each pool whole after create and reopen: the run says
/// so in its heading and its JSON, and its figures are whole.
#[test]
fn a_prefaulted_run_says_so() {
    let args = [
        "--records",
        "2000",
        "--rounds",
        "1",
        "--flush",
        "eadr",
        "--engines",
        "hart,wort",
        "--mix",
        "basic",
        "--prefault",
    ];
    let (_, rows, json) = csv_and_json(&args);
    assert_eq!(json["prefault"], serde_json::Value::Bool(true), "{json}");
    assert!(rows.iter().any(|r| r.contains(",recovery,")), "{rows:?}");
    let o = pmindex(&[&["bench"][..], &args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("every page mapped after create and reopen (--prefault)"),
        "{text}"
    );
    // Read from the pools themselves, once per experiment.
    assert!(
        text.contains("each, MAP_SHARED (page cache, not DAX), every page mapped before timing")
            || text.contains(
                "each, MAP_SHARED_VALIDATE|MAP_SYNC (DAX), every page mapped before timing"
            ),
        "{text}"
    );
    let o = pmindex(&[
        "--json",
        "bench",
        "--records",
        "500",
        "--rounds",
        "1",
        "--engines",
        "pmlog",
        "--mix",
        "basic",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["prefault"], serde_json::Value::Bool(false), "{json}");
}
