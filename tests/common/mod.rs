//! Helpers shared by the integration tests: temporary pools, the `BTreeMap`
//! model and the comparisons against it.
//!
//! Every test binary compiles this module and uses a different part of it.
#![allow(
    dead_code,
    reason = "each test binary uses its own subset of the helpers"
)]

pub mod conformance;
pub mod stress;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use pmindex::{Db, Error, Options};
use tempfile::TempDir;

/// The reference model of a key-value store.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A key-value pair as `scan` returns it.
pub type Pair = (Vec<u8>, Vec<u8>);

/// Pool size of the conformance tests: large enough for many 1 MiB values,
/// and sparse, so cheap to create.
pub const POOL_SIZE: u64 = 64 << 20;

/// Options that create `engine` with pools of `pool_size` bytes. `engine`
/// may carry settings: `"hart:hash_key_len=3,persist_order=paper"` is the
/// engine `hart` with `hart.hash_key_len = 3` and `hart.persist_order =
/// paper`.
pub fn options(engine: &str, pool_size: u64) -> Options {
    let (name, settings) = engine.split_once(':').unwrap_or((engine, ""));
    let mut o = Options {
        engine: Some(name.into()),
        pool_size,
        ..Default::default()
    };
    for kv in settings.split(',').filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("engine setting `{kv}` is not KEY=VALUE"));
        o.engine_config.insert(format!("{name}.{k}"), v.into());
    }
    o
}

/// The engine name of an engine spec (see [`options`]).
pub fn engine_name(engine: &str) -> &str {
    engine.split_once(':').map_or(engine, |(name, _)| name)
}

/// A temporary directory holding one pool path; removed on drop.
pub struct TempPool {
    /// Keeps the directory alive.
    pub dir: TempDir,
    /// `dir/test.pool` (not created).
    pub path: PathBuf,
}

impl TempPool {
    /// A fresh directory; the pool file does not exist yet.
    pub fn new() -> TempPool {
        let dir = tempfile::Builder::new()
            .prefix("pmindex-test-")
            .tempdir()
            .expect("create a temporary directory");
        let path = dir.path().join("test.pool");
        TempPool { dir, path }
    }

    /// Another path in the same directory.
    pub fn sibling(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Creates a pool for `engine` at `path`.
pub fn create_db(path: &Path, engine: &str, pool_size: u64) -> Db {
    Db::create(path, &options(engine, pool_size))
        .unwrap_or_else(|e| panic!("create {engine} pool at {}: {e}", path.display()))
}

/// Opens the pool at `path` with `Options::default()` (the engine the pool names).
pub fn open_db(path: &Path) -> Db {
    Db::open(path, &Options::default()).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// A key or value shown for a failure message: printable ASCII as is, other
/// bytes as `\xNN`, long ones cut.
pub fn show(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(40) {
        if b.is_ascii_graphic() || b == b' ' {
            s.push(b as char);
        } else {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    if bytes.len() > 40 {
        let _ = write!(s, "...({} bytes)", bytes.len());
    }
    s
}

/// A bound shown for a failure message.
pub fn show_bound(b: Bound<&[u8]>) -> String {
    match b {
        Bound::Included(k) => format!("Included({})", show(k)),
        Bound::Excluded(k) => format!("Excluded({})", show(k)),
        Bound::Unbounded => "Unbounded".into(),
    }
}

/// Whether `k` lies between `lo` and `hi` (byte order).
pub fn in_bounds(k: &[u8], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    (match lo {
        Bound::Included(l) => k >= l,
        Bound::Excluded(l) => k > l,
        Bound::Unbounded => true,
    }) && (match hi {
        Bound::Included(h) => k <= h,
        Bound::Excluded(h) => k < h,
        Bound::Unbounded => true,
    })
}

/// What `scan(lo, hi, limit)` must return on `model`. Written with a filter,
/// not `BTreeMap::range`, so inverted and empty ranges need no special case.
pub fn model_scan(
    model: &Model,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
    limit: Option<usize>,
) -> Vec<Pair> {
    model
        .iter()
        .filter(|(k, _)| in_bounds(k, lo, hi))
        .take(limit.unwrap_or(usize::MAX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Every pair in the database, by a full scan.
pub fn dump(db: &Db) -> Model {
    let pairs = db
        .scan(Bound::Unbounded, Bound::Unbounded, None)
        .unwrap_or_else(|e| panic!("full scan failed: {e}"));
    let n = pairs.len();
    let model: Model = pairs.into_iter().collect();
    assert_eq!(model.len(), n, "a full scan returned a key twice");
    model
}

/// Panics with the first difference between `db` and `model`. Compares the
/// full scan, `len`, `is_empty`, and a `get` of every model key.
pub fn assert_db_eq(db: &Db, model: &Model, ctx: &str) {
    let got = dump(db);
    if &got != model {
        let missing = model.keys().find(|k| !got.contains_key(*k));
        let extra = got.keys().find(|k| !model.contains_key(*k));
        let differs = model
            .iter()
            .find(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
            .map(|(k, _)| k);
        panic!(
            "{ctx}: contents differ from the model ({} keys in the db, {} in the model); \
             first missing key: {:?}; first extra key: {:?}; first key with another value: {:?}",
            got.len(),
            model.len(),
            missing.map(|k| show(k)),
            extra.map(|k| show(k)),
            differs.map(|k| show(k)),
        );
    }
    assert_eq!(db.len(), model.len() as u64, "{ctx}: Db::len");
    assert_eq!(db.is_empty(), model.is_empty(), "{ctx}: Db::is_empty");
    for (k, v) in model {
        let got = db
            .get(k)
            .unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)));
        assert!(
            got.as_ref() == Some(v),
            "{ctx}: get {} returned another value",
            show(k)
        );
    }
    // Every key again through the multi-key get, in one call.
    let keys: Vec<&[u8]> = model.keys().map(Vec::as_slice).collect();
    let got = db
        .get_many(&keys)
        .unwrap_or_else(|e| panic!("{ctx}: get_many: {e}"));
    for ((k, v), got) in model.iter().zip(got) {
        assert!(
            got.as_ref() == Some(v),
            "{ctx}: get_many of {} returned another value",
            show(k)
        );
    }
}

/// Runs `Db::check` and panics with `ctx` if it fails; checks that the walk
/// found `keys` keys.
pub fn assert_check(db: &Db, keys: usize, ctx: &str) {
    let report = db
        .check()
        .unwrap_or_else(|e| panic!("{ctx}: Db::check failed: {e}"));
    assert_eq!(
        report.keys, keys as u64,
        "{ctx}: Db::check walked another number of keys"
    );
}

/// Asserts that `r` failed with the variant `pat`, prints the error's
/// Display (visible with `--nocapture`) and returns the error.
#[allow(unused_macros, reason = "not every test binary uses it")]
macro_rules! expect_err {
    ($r:expr, $pat:pat, $label:expr) => {{
        match $r {
            Ok(v) => panic!("{}: expected {}, got Ok({:?})", $label, stringify!($pat), v),
            Err(e) => {
                println!("[{}] {}", $label, e);
                assert!(
                    matches!(e, $pat),
                    "{}: expected {}, got {:?} ({})",
                    $label,
                    stringify!($pat),
                    e,
                    e
                );
                e
            }
        }
    }};
}
#[allow(unused_imports, reason = "not every test binary uses it")]
pub(crate) use expect_err;

/// Whether `e` is [`Error::PoolFull`].
pub fn is_pool_full(e: &Error) -> bool {
    matches!(e, Error::PoolFull { .. })
}

/// Reads `len` bytes at `offset` of a file.
pub fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).expect("open pool file for reading");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).expect("read pool file");
    buf
}

/// Overwrites the bytes at `offset` of a file.
pub fn write_at(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open pool file for writing");
    f.write_all_at(bytes, offset).expect("write pool file");
}

/// Reads the 8-byte little-endian word at `offset` of a file.
pub fn read_u64_at(path: &Path, offset: u64) -> u64 {
    let b = read_at(path, offset, 8);
    u64::from_le_bytes(b.try_into().expect("8 bytes"))
}

/// Writes the 8-byte little-endian word at `offset` of a file.
pub fn write_u64_at(path: &Path, offset: u64, value: u64) {
    write_at(path, offset, &value.to_le_bytes());
}

/// The pool header of a file, decoded (not validated).
pub fn read_header(path: &Path) -> pmindex::pm::header::RawHeader {
    let b = read_at(path, 0, pmindex::pm::header::HEADER_BYTES);
    pmindex::pm::header::RawHeader::from_bytes(&b.try_into().expect("a whole header"))
}

/// What [`crash_budget`] checked.
pub struct CrashTotals {
    /// Distinct crash images recovered and verified.
    pub images: usize,
    /// Crash points.
    pub points: usize,
    /// Workload runs (seeds 1, 2, ...).
    pub rounds: u64,
    /// Seconds spent in the simulator.
    pub seconds: f64,
}

/// Runs the crash simulator on `workload(round)` with seeds 1, 2, ... until
/// `states` distinct images are checked (a fixed workload gives only so
/// many per run); panics on the first run with a failure.
pub fn crash_budget(
    cfg: &mut pmindex::sim::CrashConfig,
    states: usize,
    workload: impl Fn(u64) -> Vec<pmindex::sim::workload::Op>,
) -> CrashTotals {
    budget_of_runs(cfg, states, |cfg, round| {
        pmindex::sim::run_ops(cfg, workload(round))
    })
}

/// [`crash_budget`] for several writers at once: `plans(round)` are
/// their workloads, one a writer ([`pmindex::sim::run_plans`]).
pub fn crash_budget_plans(
    cfg: &mut pmindex::sim::CrashConfig,
    states: usize,
    plans: impl Fn(u64) -> Vec<Vec<pmindex::sim::workload::Op>>,
) -> CrashTotals {
    budget_of_runs(cfg, states, |cfg, round| {
        pmindex::sim::run_plans(cfg, plans(round))
    })
}

/// The loop of [`crash_budget`]: `run(cfg, round)` with seeds 1, 2, ...
fn budget_of_runs(
    cfg: &mut pmindex::sim::CrashConfig,
    states: usize,
    run: impl Fn(&pmindex::sim::CrashConfig, u64) -> pmindex::Result<pmindex::sim::CrashReport>,
) -> CrashTotals {
    let mut t = CrashTotals {
        images: 0,
        points: 0,
        rounds: 0,
        seconds: 0.0,
    };
    while t.images < states {
        cfg.states = states - t.images;
        cfg.seed = t.rounds + 1;
        let r = run(cfg, t.rounds).expect("crash test runs");
        // A round that checks nothing would loop here for good.
        assert!(r.images > 0, "{}: a round checked no image", cfg.engine);
        assert!(
            r.failures.is_empty(),
            "{}, seed {}: {} failures; first: {:?}\nreproduce: {}",
            cfg.engine,
            cfg.seed,
            r.failures.len(),
            r.failures[0],
            r.reproduce
        );
        t.images += r.images;
        t.points += r.crash_points;
        t.seconds += r.seconds;
        t.rounds += 1;
    }
    t
}

/// Runs `run` (crash-simulator runs) and returns the recovery cases of
/// `wanted` that it never reached, after printing how often it reached
/// each ([`pmindex::pm::cases`] counts, read before and after: they are
/// process-wide, so the calling binary runs one test at a time).
pub fn cases_missed(
    wanted: &[pmindex::pm::cases::Case],
    run: impl FnOnce(),
) -> Vec<pmindex::pm::cases::Case> {
    use pmindex::pm::cases;
    let before: Vec<u64> = wanted.iter().map(|&c| cases::count(c)).collect();
    run();
    let mut missing = Vec::new();
    for (&c, b) in wanted.iter().zip(before) {
        let n = cases::count(c) - b;
        println!("  {c:?}: {n}");
        if n == 0 {
            missing.push(c);
        }
    }
    missing
}
