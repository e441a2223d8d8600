//! `pmindex create`, `put`, `get` and `delete` as commands: what they print
//! and their exit codes, for one key and for several.

use std::path::PathBuf;
use std::process::{Command, Output};

fn pmindex(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args(args)
        .output()
        .expect("run pmindex")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A pool file of `engine` in `dir`, holding `a` = `1` and `b` = `two words`.
fn pool(dir: &tempfile::TempDir, engine: &str) -> PathBuf {
    let p = dir.path().join(format!("{engine}.pool"));
    let s = p.to_str().unwrap();
    let o = pmindex(&["create", s, "--engine", engine, "--size", "64M"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for (k, v) in [("a", "1"), ("b", "two words")] {
        let o = pmindex(&["put", s, k, v]);
        assert_eq!(text(&o.stdout), "inserted\n");
    }
    p
}

#[test]
fn get_prints_one_value_as_stored_and_several_as_lines() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["pmlog", "hart", "wort", "woart"] {
        let p = pool(&dir, engine);
        let s = p.to_str().unwrap();

        // One key: the bytes alone (no newline: not a terminal).
        let o = pmindex(&["get", s, "b"]);
        assert!(o.status.success());
        assert_eq!(o.stdout, b"two words");

        // Several keys: a line per key found, in the order asked; an absent
        // key is named on standard error and makes the exit status 1.
        let o = pmindex(&["get", s, "b", "zz", "a"]);
        assert_eq!(o.status.code(), Some(1), "{engine}");
        assert_eq!(text(&o.stdout), "b\ttwo words\na\t1\n", "{engine}");
        assert!(text(&o.stderr).contains("key not found: zz"), "{engine}");
        let o = pmindex(&["get", s, "y", "a", "z"]);
        assert_eq!(o.status.code(), Some(1), "{engine}");
        assert_eq!(text(&o.stdout), "a\t1\n", "{engine}");
        assert!(
            text(&o.stderr).contains("2 keys not found: y, z"),
            "{engine}"
        );
        let o = pmindex(&["get", s, "a", "b"]);
        assert!(o.status.success());
        assert_eq!(text(&o.stdout), "a\t1\nb\ttwo words\n");

        // JSON: an object per key asked, without "value" when absent.
        let o = pmindex(&["get", "--json", s, "a", "c"]);
        assert_eq!(o.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            v,
            serde_json::json!([{"key": "a", "value": "1"}, {"key": "c"}])
        );
        // One key is an array of one, found or not.
        let o = pmindex(&["get", "--json", s, "a"]);
        assert!(o.status.success(), "{engine}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v, serde_json::json!([{"key": "a", "value": "1"}]));
        let o = pmindex(&["get", "--json", s, "c"]);
        assert_eq!(o.status.code(), Some(1), "{engine}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v, serde_json::json!([{"key": "c"}]));
        assert!(text(&o.stderr).contains("key not found: c"), "{engine}");

        // Hex in and out.
        let o = pmindex(&["--hex", "get", s, "61", "62"]);
        assert!(o.status.success());
        assert_eq!(text(&o.stdout), "61\t31\n62\t74776f20776f726473\n");

        // After a delete the key is absent, alone or among others.
        assert_eq!(text(&pmindex(&["delete", s, "a"]).stdout), "deleted\n");
        let o = pmindex(&["get", s, "a"]);
        assert_eq!(o.status.code(), Some(1));
        assert!(o.stdout.is_empty());
        let o = pmindex(&["get", s, "a", "b"]);
        assert_eq!(o.status.code(), Some(1));
        assert_eq!(text(&o.stdout), "b\ttwo words\n");
    }
}

#[test]
fn bad_gets_are_errors_with_nothing_printed() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "wort");
    let s = p.to_str().unwrap();
    // No key, a key that is not hex with --hex, and an empty key (which
    // the library refuses): usage errors (2).
    for (args, code) in [
        (&["get", s][..], 2),
        (&["--hex", "get", s, "61", "6"], 2),
        (&["get", s, "a", ""], 2),
    ] {
        let o = pmindex(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", text(&o.stdout));
        assert!(!o.stderr.is_empty(), "{args:?}");
    }
}

/// `pmindex info` on the pool `s`, which must succeed: its text and its
/// `--json` form.
fn info(s: &str) -> (String, serde_json::Value) {
    let o = pmindex(&["info", s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o2 = pmindex(&["info", "--json", s]);
    assert!(o2.status.success(), "{}", text(&o2.stderr));
    (text(&o.stdout), serde_json::from_slice(&o2.stdout).unwrap())
}

/// `info` shows the heap frontier (format version 2): where the heap that
/// was never used begins, live, in text and in JSON.
#[test]
fn info_shows_the_heap_frontier() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "wort");
    let s = p.to_str().unwrap();
    let (out, v) = info(s);
    assert!(out.contains("format version 2"), "{out}");
    assert!(out.contains("never used from chunk 16 on"), "{out}");
    assert_eq!(v["header"]["heap_frontier"], 16);
    // 2 MiB of values take the frontier further.
    for i in 0..40 {
        let o = pmindex(&["put", s, &format!("big{i}"), &"v".repeat(60_000)]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let (_, v) = info(s);
    let f = v["header"]["heap_frontier"].as_u64().unwrap();
    assert!(f > 16 && f.is_multiple_of(16), "frontier {f}");
}

/// A format-1 pool has no frontier, and `info` says so.
#[test]
fn info_on_a_format_1_pool_shows_no_frontier() {
    use pmindex::pm::header::{RawHeader, HEADER_BYTES};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "pmlog");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    let mut b = [0u8; HEADER_BYTES];
    f.read_exact_at(&mut b, 0).unwrap();
    let mut h = RawHeader::from_bytes(&b);
    h.version = 1;
    h.heap_frontier = 0;
    h.checksum = h.compute_checksum();
    f.write_all_at(&h.to_bytes(), 0).unwrap();
    drop(f);
    let s = p.to_str().unwrap();
    let (out, v) = info(s);
    assert!(out.contains("format version 1"), "{out}");
    assert!(out.contains("no frontier (format version 1)"), "{out}");
    assert!(v["header"]["heap_frontier"].is_null(), "{v}");
    assert_eq!(v["header"]["version"], 1);
    let o = pmindex(&["get", s, "b"]);
    assert_eq!(o.stdout, b"two words");
}

/// `--engine-opt` reaches the engine: at create (HART's hash key length
/// and a radix tree's format, fixed for the pool's life, which `info`
/// shows) and at open (settings of one command); a key with another
/// engine's prefix, a key the engine does not know and a setting that
/// contradicts the pool are errors, with nothing changed.
#[test]
fn engine_settings_reach_the_engine_at_create_and_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let settings = |s: &str, extra: &[&str]| {
        let mut args = vec!["info", "--json", s];
        args.extend_from_slice(extra);
        let o = pmindex(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["settings"].clone()
    };
    // `create` of a 16 MiB pool of `engine` with one setting.
    let create = |path: &str, engine: &str, opt: &str| {
        pmindex(&[
            "create",
            path,
            "--engine",
            engine,
            "--size",
            "16M",
            "--engine-opt",
            opt,
        ])
    };

    let h = dir.path().join("h.pool");
    let h = h.to_str().unwrap();
    let o = create(h, "hart", "hash_key_len=3");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        settings(h, &[]),
        serde_json::json!({"hart.format": "6", "hart.hash_key_len": "3", "hart.persist_order": "tight",
                           "hart.stripes": "thread", "hart.leaf_first": "on",
                           "hart.point_index": "on", "hart.point_index_above": "64",
                           "hart.reads": "locked", "hart.compact": "on"})
    );
    let s = settings(h, &["--engine-opt", "leaf_first=off"]);
    assert_eq!(s["hart.leaf_first"], "off");
    // A setting for this command only, with or without the prefix.
    let s = settings(h, &["--engine-opt", "hart.persist_order=paper"]);
    assert_eq!(s["hart.persist_order"], "paper");
    let s = settings(h, &["--engine-opt", "hart.compact=off"]);
    assert_eq!(s["hart.compact"], "off");
    let s = settings(h, &["--engine-opt", "stripes=hash_key"]);
    assert_eq!(s["hart.stripes"], "hash_key");
    let o = pmindex(&["put", h, "abcd", "v", "--engine-opt", "persist_order=paper"]);
    assert_eq!(text(&o.stdout), "inserted\n", "{}", text(&o.stderr));
    let text_info = text(&pmindex(&["info", h]).stdout);
    assert!(
        text_info.contains(
            "settings    hart.compact=on hart.format=6 hart.hash_key_len=3 hart.leaf_first=on hart.persist_order=tight"
        ),
        "{text_info}"
    );

    // Errors: another engine's key, an unknown key, not KEY=VALUE, a
    // creation-only setting that differs from the pool's.
    for (opt, code, message) in [
        (
            "wort.reads=locked",
            2,
            "`wort.reads` is for engine `wort`, not hart",
        ),
        (
            "bogus=1",
            2,
            "unknown setting `hart.bogus` for engine hart (known:",
        ),
        ("persist_order", 2, "is not KEY=VALUE"),
        ("hart.=1", 2, "needs a key and a value"),
        ("stripes=thread", 2, "is given twice"),
        ("hash_key_len=2", 2, "this pool was created with 3"),
    ] {
        let o = pmindex(&[
            "get",
            h,
            "abcd",
            "--engine-opt",
            "hart.stripes=thread",
            "--engine-opt",
            opt,
        ]);
        assert_eq!(o.status.code(), Some(code), "{opt}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(message),
            "{opt}: {}",
            text(&o.stderr)
        );
        assert!(o.stdout.is_empty(), "{opt}");
    }
    assert_eq!(pmindex(&["get", h, "abcd"]).stdout, b"v");
    // The allocator's crash test has no settings to give.
    let o = pmindex(&[
        "crashtest",
        "--engine",
        "alloc",
        "--states",
        "10",
        "--engine-opt",
        "x=1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("has no settings"));

    // A radix tree of format 2, which stays 2; reads for one command.
    let w = dir.path().join("w.pool");
    let w = w.to_str().unwrap();
    let o = create(w, "wort", "wort.format=2");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&pmindex(&["put", w, "k", "v"]).stdout), "inserted\n");
    assert_eq!(
        settings(w, &["--engine-opt", "reads=locked"]),
        serde_json::json!({"wort.compact": "on", "wort.format": "2", "wort.reads": "locked", "wort.writers": "striped"})
    );
    assert_eq!(
        settings(w, &[]),
        serde_json::json!({"wort.compact": "on", "wort.format": "2", "wort.reads": "optimistic", "wort.writers": "striped"})
    );
    assert_eq!(
        settings(
            w,
            &[
                "--engine-opt",
                "writers=locked",
                "--engine-opt",
                "compact=off"
            ]
        ),
        serde_json::json!({"wort.compact": "off", "wort.format": "2", "wort.reads": "optimistic", "wort.writers": "locked"})
    );
    let o = pmindex(&["info", w, "--engine-opt", "compact=maybe"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("wort.compact `maybe`"),
        "{}",
        text(&o.stderr)
    );
    // A refused setting at create leaves no pool behind.
    let bad = dir.path().join("bad.pool");
    let o = create(bad.to_str().unwrap(), "woart", "format=9");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("expected 2"),
        "{}",
        text(&o.stderr)
    );
    assert!(!bad.exists(), "a refused create left its file");
}

/// `pmindex put` fed on standard input.
fn pmindex_with_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pmindex");
    let mut stdin = child.stdin.take().expect("piped");
    // A refused value may close the pipe before all of it is written.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().expect("wait for pmindex")
}

/// Values too long for one command-line argument (Linux passes at most
/// 128 KiB) and values that are not text reach `put` through
/// `--value-file`, from a file or standard input, byte for byte up to the
/// 1 MiB limit; one byte more is refused and nothing is stored.
#[test]
fn put_takes_a_value_from_a_file_or_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    // Not text, and with every byte value.
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let file = dir.path().join("value");
    std::fs::write(&file, &big).unwrap();
    let f = file.to_str().unwrap();
    for engine in ["pmlog", "hart", "wort"] {
        let p = pool(&dir, engine);
        let s = p.to_str().unwrap();
        let o = pmindex(&["put", s, "big", "--value-file", f]);
        assert!(o.status.success(), "{engine}: {}", text(&o.stderr));
        assert_eq!(text(&o.stdout), "inserted\n");
        let o = pmindex(&["get", s, "big"]);
        assert!(o.status.success(), "{engine}");
        assert!(o.stdout == big, "{engine}: the value read back differs");

        let o = pmindex_with_stdin(&["put", s, "a", "--value-file", "-"], b"x\0y\n");
        assert_eq!(text(&o.stdout), "replaced\n", "{engine}");
        assert_eq!(pmindex(&["get", s, "a"]).stdout, b"x\0y\n", "{engine}");

        // An empty input is an empty value.
        let o = pmindex_with_stdin(&["put", s, "e", "--value-file", "-"], b"");
        assert_eq!(text(&o.stdout), "inserted\n", "{engine}");
        let o = pmindex(&["get", s, "e"]);
        assert!(o.status.success() && o.stdout.is_empty(), "{engine}");

        let over = vec![7u8; (1 << 20) + 1];
        let o = pmindex_with_stdin(&["put", s, "over", "--value-file", "-"], &over);
        assert_eq!(o.status.code(), Some(2), "{engine}");
        assert!(
            text(&o.stderr).contains("longer than the limit of 1048576 bytes"),
            "{engine}: {}",
            text(&o.stderr)
        );
        assert_eq!(pmindex(&["get", s, "over"]).status.code(), Some(1));

        let o = pmindex(&["put", s, "a", "--value-file", "/nonexistent/value"]);
        assert_eq!(o.status.code(), Some(2), "{engine}");
        assert!(text(&o.stderr).contains("/nonexistent/value"), "{engine}");
        // A value and a file at once, or neither: refused by the parser.
        let o = pmindex(&["put", s, "a", "v", "--value-file", f]);
        assert_eq!(o.status.code(), Some(2), "{engine}");
        let o = pmindex(&["put", s, "a"]);
        assert_eq!(o.status.code(), Some(2), "{engine}");
        assert_eq!(pmindex(&["get", s, "a"]).stdout, b"x\0y\n", "{engine}");
    }
}

/// `pmindex crashtest --writers`: several writers at once, and the counts
/// it refuses.
#[test]
fn crashtest_with_several_writers() {
    let o = pmindex(&[
        "crashtest",
        "--engine",
        "pmlog",
        "--writers",
        "2",
        "--states",
        "200",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("by each of 2 writers at once"), "{out}");
    assert!(
        out.contains("with two or more operations in flight"),
        "{out}"
    );
    assert!(out.contains("0 failures"), "{out}");
    for bad in ["0", "17"] {
        let o = pmindex(&["crashtest", "--writers", bad, "--states", "10"]);
        assert_eq!(o.status.code(), Some(2), "--writers {bad}");
        assert!(text(&o.stderr).contains("1..=16"), "{}", text(&o.stderr));
    }
    let o = pmindex(&[
        "crashtest",
        "--engine",
        "alloc",
        "--writers",
        "2",
        "--states",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("runs on one thread"));
}

/// `pmindex crashtest --after-churn`: the churn after each recovery is on
/// by default and catches a store recovery left unpersisted; a run
/// without it is reproduced with `--after-churn 0`; a bad size and the
/// allocator workload are usage errors.
#[test]
fn crashtest_after_churn() {
    let fault = ["--fault", "pmlog-recovery-loser-unflushed"];
    let mut args = vec![
        "crashtest",
        "--engine",
        "pmlog",
        "--states",
        "3000",
        "--no-shrink",
    ];
    args.extend(fault);
    let o = pmindex(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("image after/"), "{out}");
    assert!(!out.contains("--after-churn"), "{out}");
    args.extend(["--after-churn", "0"]);
    let o = pmindex(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = pmindex(&["crashtest", "--after-churn", "1X", "--states", "10"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("unknown suffix"),
        "{}",
        text(&o.stderr)
    );
    let o = pmindex(&["crashtest", "--engine", "alloc", "--after-churn", "1K"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("makes no writes after recovery"));
}

/// `pmindex crashtest --shared-keys`: writers on the same keys, and the
/// allocator refused.
#[test]
fn crashtest_with_writers_on_shared_keys() {
    let o = pmindex(&[
        "crashtest",
        "--engine",
        "wort",
        "--writers",
        "2",
        "--shared-keys",
        "--keys",
        "16",
        "--states",
        "200",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("writers at once, on shared keys"), "{out}");
    assert!(out.contains("of them on one key"), "{out}");
    assert!(out.contains("0 failures"), "{out}");
    let o = pmindex(&[
        "crashtest",
        "--engine",
        "alloc",
        "--shared-keys",
        "--states",
        "10",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("has no keys"));
}

/// `o` failed (exit status 1) saying `needle` on standard error.
fn fails_with(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains(needle), "{}", text(&o.stderr));
}

/// A pool another process holds: `--wait 0` fails at once; the default
/// wait outlasts a short hold and then runs the command.
#[test]
fn a_held_pool_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "hart");
    let s = p.to_str().unwrap();
    // This test process holds the pool's lock while its handle is open.
    let held = pmindex::Db::open(&p, &pmindex::Options::default()).unwrap();
    let o = pmindex(&["--wait", "0", "get", s, "a"]);
    fails_with(&o, "file lock held");
    fails_with(&pmindex(&["--wait", "1", "get", s, "a"]), "waited 1 s");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(held);
    });
    let o = pmindex(&["put", s, "c", "3"]);
    release.join().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "inserted\n");
    assert_eq!(pmindex(&["get", s, "c"]).stdout, b"3");

    // A reader's handle: the reading commands (which open read-only) run
    // beside it at once, a writing one waits for it; none writes the file.
    let reader = pmindex::Db::open_read_only(&p, &pmindex::Options::default()).unwrap();
    let before = std::fs::read(&p).unwrap();
    for args in [
        &["--wait", "0", "get", s, "c"][..],
        &["--wait", "0", "scan", s],
        &["--wait", "0", "info", s],
        &["--wait", "0", "check", s],
    ] {
        let o = pmindex(args);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    }
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a reading command wrote the pool"
    );
    fails_with(
        &pmindex(&["--wait", "0", "delete", s, "c"]),
        "file lock held",
    );
    drop(reader);
    assert_eq!(text(&pmindex(&["delete", s, "c"]).stdout), "deleted\n");
}

/// Arguments the library refuses are usage errors (exit status 2), as the
/// ones clap refuses; a key that is absent is a failure (1).
#[test]
fn refused_arguments_exit_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "wort");
    let s = p.to_str().unwrap();
    let long = "k".repeat(251);
    for args in [
        &["put", s, "", "x"][..],
        &["put", s, &long, "x"],
        &["crashtest", "--states", "0"],
        &["crashtest", "--ops", "0", "--states", "10"],
        &["bench", "--records", "0"],
        &["bench", "--engines", "bogus"],
    ] {
        let o = pmindex(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(text(&o.stderr).starts_with("error: "), "{args:?}");
    }
    assert_eq!(pmindex(&["get", s, "zz"]).status.code(), Some(1));
}

/// With `--json`, an error is one JSON object on standard error, whether
/// the command or clap found it.
#[test]
fn json_errors_are_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "pmlog");
    let s = p.to_str().unwrap();
    let missing = dir.path().join("missing.pool");
    for (args, code, needle) in [
        (&["--json", "delete", s, "zz"][..], 1, "key not found: zz"),
        (
            &["--json", "get", missing.to_str().unwrap(), "a"],
            1,
            "missing.pool",
        ),
        (&["--json", "put", s, "", "x"], 2, "key is empty"),
        // clap's own usage errors too.
        (&["--json", "get", s], 2, "required arguments"),
        (&["get", "--json", s, "a", "--bogus"], 2, "--bogus"),
    ] {
        let o = pmindex(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stderr)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&o.stderr)));
        assert_eq!(v["exit_status"], code, "{args:?}");
        assert!(
            v["error"].as_str().unwrap().contains(needle),
            "{args:?}: {v}"
        );
    }
}

/// A cleanly closed pool has nothing repaired at open, even where the
/// close left housekeeping to the next open: radix chunks emptied by
/// deletes, and a pmlog segment reused with stale bytes past its tail.
#[test]
fn check_lists_no_repair_on_a_clean_pool() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["wort", "woart", "art-cow", "hart", "fptree", "pmlog"] {
        let p = dir.path().join(format!("{engine}.pool"));
        {
            let opts = pmindex::Options {
                pool_size: 16 << 20,
                ..pmindex::Options::with_engine(engine)
            };
            let db = pmindex::Db::create(&p, &opts).unwrap();
            for round in 0..100u32 {
                for i in 0..100u32 {
                    db.put(format!("k{i}").as_bytes(), &[round as u8; 100])
                        .unwrap();
                }
            }
            for i in 0..5_000u32 {
                db.put(format!("d{i}").as_bytes(), b"x").unwrap();
            }
            for i in 0..4_990u32 {
                assert!(db.delete(format!("d{i}").as_bytes()).unwrap());
            }
        }
        let o = pmindex(&["check", p.to_str().unwrap()]);
        assert!(o.status.success(), "{engine}: {}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(out.starts_with("ok: 110 keys and "), "{engine}: {out}");
        assert_eq!(out.lines().count(), 1, "{engine}: {out}");
    }
}

/// `check` says what recovery repaired when it opened the pool (in memory:
/// the file stays as it was): here a pmlog whose last record is damaged,
/// which reads as a torn append.
#[test]
fn check_reports_what_recovery_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let p = pool(&dir, "pmlog");
    let s = p.to_str().unwrap();
    let o = pmindex(&["check", s]);
    assert!(o.status.success());
    assert_eq!(text(&o.stdout), "ok: 2 keys and 2 blocks checked\n");
    let o = pmindex(&["--json", "check", s]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["repaired_at_open"], serde_json::json!({}));

    // One flipped byte in the value of the last record (`b`'s).
    let mut bytes = std::fs::read(&p).unwrap();
    let at = bytes
        .windows(9)
        .rposition(|w| w == b"two words")
        .expect("the last record's value");
    bytes[at] ^= 1;
    std::fs::write(&p, &bytes).unwrap();
    let o = pmindex(&["check", s]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.starts_with("ok: 1 keys"), "{out}");
    assert!(out.contains("torn log tails zeroed: 1"), "{out}");
    let o = pmindex(&["--json", "check", s]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["repaired_at_open"],
        serde_json::json!({"pmlog_torn_tail": 1})
    );
    assert!(std::fs::read(&p).unwrap() == bytes, "check wrote the pool");
}

/// Ctrl-C while `create` sizes a large pool leaves no file behind (from a
/// review: it left a file of the full size with no header, which every
/// command then called "not a pmindex pool" and `create` "File exists").
/// The signal is sent as soon as the file appears, while it is being sized;
/// if the create had finished by then, the pool must be whole.
#[test]
fn an_interrupted_create_leaves_no_file() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let mut interrupted = 0;
    for round in 0..5 {
        let p = dir.path().join(format!("big{round}.pool"));
        let child = Command::new(env!("CARGO_BIN_EXE_pmindex"))
            .args(["create", p.to_str().unwrap(), "--size", "1G"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while !p.exists() && t0.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::yield_now();
        }
        // SAFETY: `kill` only sends a signal to our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        let o = child.wait_with_output().unwrap();
        if o.status.signal() == Some(libc::SIGINT) {
            interrupted += 1;
            assert!(
                !p.exists(),
                "round {round}: an interrupted create left its file"
            );
        } else {
            assert!(o.status.success(), "round {round}: {}", text(&o.stderr));
            let o = pmindex(&["check", p.to_str().unwrap()]);
            assert!(o.status.success(), "round {round}: {}", text(&o.stderr));
        }
    }
    eprintln!("{interrupted} of 5 creates interrupted while the file was sized");
}

/// `serve` on an address it cannot listen on fails before it creates the
/// pool (from a review: it created a 1 GiB pool, then failed to bind).
#[test]
fn serve_on_an_address_it_cannot_listen_on_creates_no_pool() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    for listen in ["bogus", "127.0.0.1:99999", port.as_str()] {
        let p = dir.path().join("new.pool");
        let o = pmindex(&[
            "serve",
            p.to_str().unwrap(),
            "--listen",
            listen,
            "--size",
            "64M",
        ]);
        fails_with(&o, &format!("listen on {listen}"));
        assert!(!p.exists(), "--listen {listen} left a pool behind");
    }
}

/// `crashtest` refuses a fault of another engine (whose self-test would
/// pass for no reason) and zero counts (which it used to raise to 1).
#[test]
fn crashtest_refuses_a_fault_of_another_engine_and_zero_counts() {
    let refused = |args: &[&str], needle: &str| {
        let o = pmindex(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    };
    let base = ["crashtest", "--states", "10", "--ops", "20"];
    let with = |more: &[&'static str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend_from_slice(more);
        v
    };
    refused(
        &with(&["--engine", "hart", "--fault", "pmlog-skip-append-fence"]),
        "in pmlog's code, not hart's",
    );
    refused(
        &with(&["--engine", "fptree", "--fault", "wort-skip-leaf-flush"]),
        "in wort's code, not fptree's",
    );
    for zero in ["--keys", "--threads", "--max-failures"] {
        refused(
            &with(&["--engine", "pmlog", zero, "0"]),
            &format!("{zero} must be at least 1"),
        );
    }
    refused(
        &with(&["--engine", "pmlog", "--keys", "100000000"]),
        "--keys 100000000: at most",
    );
    refused(
        &[
            "crashtest",
            "--engine",
            "pmlog",
            "--states",
            "10",
            "--ops",
            "100000000",
        ],
        "--ops 100000000: at most",
    );
    // A radix fault acts on all three radix trees, a substrate fault on
    // every engine: both run (and the substrate's is caught).
    let o = pmindex(&with(&[
        "--engine",
        "woart",
        "--fault",
        "wort-skip-leaf-flush",
        "--keys",
        "8",
    ]));
    assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = pmindex(&with(&[
        "--engine",
        "hart",
        "--fault",
        "alloc-skip-mark-flush",
    ]));
    assert_ne!(o.status.code(), Some(2), "{}", text(&o.stderr));
}
