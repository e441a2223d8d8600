//! A process killed (SIGKILL) while its threads write loses nothing it
//! acknowledged, for every engine: the README's "killed process, ordinary
//! file" durability claim, end to end through a real pool file, its lock
//! and recovery.
//!
//! This test binary runs itself again as the writer: the child opens the
//! pool, runs two threads of seeded puts, deletes and `put_many` calls on
//! their own keys, and after each call returns writes `ACK <thread> <op>`
//! to its standard output, one `write` per line. The parent kills it after
//! a while, opens the pool (recovery), runs `check`, and compares every key
//! with the model of the acknowledged operations. The one operation per
//! thread that was running when the kill came (the one after its last
//! acknowledgement) may be there or not; each key of an unfinished
//! `put_many` holds its value from before the call or one the call gave
//! it, as `Db::put_many` says. Three kills per engine
//! (`PMINDEX_KILL_ROUNDS=N` for more, `PMINDEX_KILL_THREADS=N` for more
//! writer threads), each round on top of the last one's pool.
//!
//! A failure names the engine, the round, its seed and how many operations
//! each thread had acknowledged, and keeps a copy of the pool (its path is
//! in the message). A writer thread that panics ends the child, and one
//! that makes no progress while the others run fails the round: neither
//! can pass for an operation in flight.
//!
//! Unlike the crash simulator, which crashes one thread's operations at
//! every fence but models a power failure, this is the page cache's view
//! (every store made survives) with several operations stopped at once, in
//! threads that were really running, at whatever instruction the signal
//! found.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::ops::Bound;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{options, TempPool};
use pmindex::Db;

/// The child's entry: set in its environment, `pool|engine|seed` (the
/// engine as `common::options` takes it, with its settings).
const CHILD: &str = "PMINDEX_KILLED_PROCESS_CHILD";
/// Writer threads in the child: 2, or `PMINDEX_KILL_THREADS`.
fn threads() -> u64 {
    std::env::var("PMINDEX_KILL_THREADS").map_or(2, |t| {
        t.parse()
            .expect("PMINDEX_KILL_THREADS is a number of threads")
    })
}
/// Keys per thread.
const KEYS: u64 = 1500;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Thread `t`'s key number `k`: its own keys, 6 to 42 bytes, whose first
/// bytes the threads share (in `hart`, both threads write the same ARTs).
fn key(t: u64, k: u64) -> Vec<u8> {
    let mut s = format!("{k:04}t{t}");
    s.extend(std::iter::repeat_n('x', (k % 37) as usize));
    s.into_bytes()
}

/// A put (`Some(value)`) or a delete (`None`) of one key.
type Item = (Vec<u8>, Option<Vec<u8>>);

/// Operation `i` of thread `t` in round `seed`: one put or delete of one
/// of the thread's keys, or (one in 16) a `put_many` of 8 puts, a key
/// possibly twice. Values of 0 to 299 bytes, and now and then 5,000 (a
/// large value: its own allocator block in `hart`). Every value starts
/// with its operation's random word, so that two short values (`hart`
/// keeps up to 8 bytes inline) of the same length still differ.
fn op(seed: u64, t: u64, i: u64) -> (Vec<Item>, bool) {
    let r = splitmix(seed ^ (t << 40) ^ i);
    let item = |r: u64, put_only: bool| -> Item {
        let k = key(t, r % KEYS);
        if !put_only && (r >> 20) % 10 >= 7 {
            return (k, None);
        }
        let len = if (r >> 30).is_multiple_of(64) {
            5000
        } else {
            ((r >> 36) % 300) as usize
        };
        let fill = format!("{r:016x}.{seed}.{t}.{i};");
        (k, Some(fill.bytes().cycle().take(len).collect()))
    };
    if (r >> 56).is_multiple_of(16) {
        let items = (0..8).map(|j| item(splitmix(r ^ j), true)).collect();
        return (items, true);
    }
    (vec![item(r, false)], false)
}

/// The writer: never returns (the parent kills it).
fn child(spec: &str) -> ! {
    let mut parts = spec.rsplitn(3, '|');
    let seed: u64 = parts.next().unwrap().parse().unwrap();
    let engine = parts.next().unwrap();
    let pool = parts.next().unwrap();
    // A writer thread that panics stops the whole child at once, so that
    // the parent sees it (the other threads would go on acknowledging, and
    // the failed call would pass for the one in flight).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(101);
    }));
    let db = Db::open(pool, &options(engine, 0)).expect("the child opens the pool");
    std::thread::scope(|s| {
        for t in 0..threads() {
            let db = &db;
            s.spawn(move || {
                for i in 0.. {
                    match op(seed, t, i) {
                        (items, true) => {
                            let items: Vec<(&[u8], &[u8])> = items
                                .iter()
                                .map(|(k, v)| (&k[..], &v.as_ref().unwrap()[..]))
                                .collect();
                            db.put_many(&items).expect("put_many");
                        }
                        (items, false) => match &items[0] {
                            (k, Some(v)) => {
                                db.put(k, v).expect("put");
                            }
                            (k, None) => {
                                db.delete(k).expect("delete");
                            }
                        },
                    }
                    let line = format!("ACK {t} {i}\n");
                    // SAFETY: writes `line`'s bytes to fd 1; a pipe takes a
                    // line this short in one piece.
                    let n = unsafe { libc::write(1, line.as_ptr().cast(), line.len()) };
                    assert_eq!(n, line.len() as isize, "ack written");
                }
            });
        }
    });
    unreachable!("the writers never stop")
}

/// Runs as the child when the parent asked for it; otherwise does nothing.
#[test]
fn killed_process_child() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
    }
}

/// Where a round stands, for failure messages: engine, round, seed and
/// threads (`PMINDEX_KILL_THREADS`).
struct Round<'a> {
    engine: &'a str,
    round: u64,
    seed: u64,
}

impl std::fmt::Display for Round<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, round {} (seed {}, {} threads)",
            self.engine,
            self.round,
            self.seed,
            threads()
        )
    }
}

/// Starts the child on `pool`, lets it run for `run`, kills it; returns
/// the last operation each thread acknowledged (`None`: none).
fn run_and_kill(pool: &Path, at: &Round, run: Duration) -> Vec<Option<u64>> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "killed_process_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            CHILD,
            format!("{}|{}|{}", pool.display(), at.engine, at.seed),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().unwrap();
    // Read as it comes, so that a child writing much to it never blocks.
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
        err
    });
    // Acknowledgements per thread, and the first one out of order.
    let acks: Arc<Vec<AtomicU64>> = Arc::new((0..threads()).map(|_| AtomicU64::new(0)).collect());
    let disorder = Arc::new(Mutex::new(None));
    let (count, bad) = (Arc::clone(&acks), Arc::clone(&disorder));
    let reader = std::thread::spawn(move || {
        let mut last = vec![None; threads() as usize];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The test harness's "test killed_process_child ... " has no
            // line end: the first ack may follow it on its line.
            let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) else {
                continue;
            };
            let mut w = rest.split(' ').map(|x| x.parse::<u64>());
            if let (Some(Ok(t)), Some(Ok(i))) = (w.next(), w.next()) {
                let want = last[t as usize].map_or(0, |l| l + 1);
                if i != want {
                    // Keep reading: closing the pipe would make the
                    // child's next ack fail and hide this.
                    bad.lock()
                        .unwrap()
                        .get_or_insert(format!("thread {t}: operation {i} where {want} was next"));
                    continue;
                }
                last[t as usize] = Some(i);
                count[t as usize].store(i + 1, Ordering::Relaxed);
            }
        }
        last
    });
    let total = || acks.iter().map(|a| a.load(Ordering::Relaxed)).sum::<u64>();
    // `run` counts from the 200th acknowledgement, so that a slow start
    // (a loaded machine, the child's recovery) does not shorten it.
    let start = Instant::now();
    let mut running: Option<(Instant, Vec<u64>)> = None;
    let mut stuck = None;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let err = errors.join().unwrap();
            panic!("{at}: the child stopped by itself ({status}): {err}");
        }
        match &running {
            None if total() >= 200 => {
                let now = acks.iter().map(|a| a.load(Ordering::Relaxed)).collect();
                running = Some((Instant::now(), now));
            }
            None if start.elapsed() > Duration::from_secs(60) => {
                stuck = Some(format!("{} acknowledgements in 60 s", total()));
                break;
            }
            Some((since, before)) if since.elapsed() >= run => {
                // Every thread went on while the others ran: none is
                // stuck, which the model could not tell from a call in
                // flight.
                if let Some(t) =
                    (0..acks.len()).find(|&t| acks[t].load(Ordering::Relaxed) == before[t])
                {
                    stuck = Some(format!("thread {t} acknowledged nothing in {run:?}"));
                }
                break;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().unwrap();
    let last = reader.join().unwrap();
    let err = errors.join().unwrap();
    if let Some(d) = disorder.lock().unwrap().take() {
        panic!("{at}: acknowledgements out of order: {d}");
    }
    if let Some(s) = stuck {
        panic!("{at}: {s}; the child's errors: {err}");
    }
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{at}: the child ended otherwise ({status}): {err}"
    );
    last
}

/// Keeps a copy of the pool when the round fails (the temporary directory
/// goes with the unwinding), and says where.
struct KeepOnFailure<'a> {
    pool: &'a Path,
    name: String,
}

impl Drop for KeepOnFailure<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let to: PathBuf = std::env::temp_dir().join(&self.name);
            match std::fs::copy(self.pool, &to) {
                Ok(_) => eprintln!("the failed round's pool is kept at {}", to.display()),
                Err(e) => eprintln!("could not keep the failed round's pool: {e}"),
            }
        }
    }
}

/// Every key of the pool against the model of the acknowledged operations;
/// the operation in flight in each thread may be applied or not. Returns
/// the pool's contents (the next round's model).
fn verify(
    db: &Db,
    base: &BTreeMap<Vec<u8>, Vec<u8>>,
    seed: u64,
    last: &[Option<u64>],
    at: &Round,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = base.clone();
    let mut in_flight = BTreeMap::new();
    for t in 0..threads() {
        let acked = last[t as usize].map_or(0, |l| l + 1);
        for i in 0..acked {
            for (k, v) in op(seed, t, i).0 {
                match v {
                    Some(v) => model.insert(k, v),
                    None => model.remove(&k),
                };
            }
        }
        // Each key of the call in flight: as before it, or as it set it
        // (a `put_many` is not atomic as a whole).
        for (k, v) in op(seed, t, acked).0 {
            in_flight.entry(k).or_insert_with(Vec::new).push(v);
        }
    }
    let found: BTreeMap<Vec<u8>, Vec<u8>> = db
        .scan(Bound::Unbounded, Bound::Unbounded, None)
        .unwrap()
        .into_iter()
        .collect();
    let keys: std::collections::BTreeSet<&Vec<u8>> = model.keys().chain(found.keys()).collect();
    for k in keys {
        let (want, got) = (model.get(k), found.get(k));
        if want == got {
            continue;
        }
        let flight = in_flight.get(k);
        assert!(
            flight.is_some_and(|f| f.iter().any(|v| v.as_ref() == got)),
            "{at}, acknowledged per thread {last:?}: key {:?}: found {:?} bytes, acknowledged \
             {:?} bytes, in flight {:?}",
            String::from_utf8_lossy(k),
            got.map(Vec::len),
            want.map(Vec::len),
            flight.map(|f| f
                .iter()
                .map(|v| v.as_ref().map(Vec::len))
                .collect::<Vec<_>>())
        );
    }
    // Point reads agree with the scan.
    for (k, v) in &found {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{at}");
    }
    assert_eq!(db.len(), found.len() as u64, "{at}");
    found
}

#[test]
fn a_killed_writer_loses_nothing_it_acknowledged() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let rounds: u64 = std::env::var("PMINDEX_KILL_ROUNDS")
        .map(|r| r.parse().expect("PMINDEX_KILL_ROUNDS is a number"))
        .unwrap_or(3);
    // Rounds whose read-only open's recovery changed its copy of the pool
    // (so that it had something to keep from the file), and rounds.
    let mut repaired_total = (0, 0);
    for engine in [
        "pmlog",
        "hart",
        "hart:persist_order=paper",
        "wort",
        "wort:writers=locked",
        "woart",
        "woart:writers=locked",
        "art-cow",
        "art-cow:format=2,writers=locked",
        "fptree",
        "fptree:leaf_slots=3",
        "dptree",
        "dptree:leaf_slots=3,merge_min=4",
        "fastfair",
        "fastfair:node_bytes=128",
        "art-bplus",
    ] {
        let t = TempPool::new();
        drop(Db::create(&t.path, &options(engine, 64 << 20)).unwrap());
        let mut base = BTreeMap::new();
        for round in 0..rounds {
            repaired_total.1 += 1;
            let seed = splitmix(round ^ 0xdead);
            let at = Round {
                engine,
                round,
                seed,
            };
            let _keep = KeepOnFailure {
                pool: &t.path,
                name: format!(
                    "pmindex-killed-{}-round-{round}.pool",
                    engine.replace(':', "-")
                ),
            };
            let run = Duration::from_millis(150 + 100 * (round % 4));
            let last = run_and_kill(&t.path, &at, run);
            // First a reader's open (`Db::open_read_only`): it recovers in
            // memory, sees what the writer's open will, and writes nothing.
            let before = std::fs::read(&t.path).unwrap();
            let seen = {
                let ro = Db::open_read_only(&t.path, &options(engine, 0))
                    .unwrap_or_else(|e| panic!("{at}: read-only open: {e}"));
                // Its recovery changed its private copy: the comparison of
                // the file below is then not vacuous.
                if ro.pool().image() != before {
                    repaired_total.0 += 1;
                }
                ro.check()
                    .unwrap_or_else(|e| panic!("{at}: read-only check: {e}"));
                verify(&ro, &base, seed, &last, &at)
            };
            assert!(
                std::fs::read(&t.path).unwrap() == before,
                "{at}: a read-only open wrote the pool"
            );
            let db = Db::open(&t.path, &options(engine, 0))
                .unwrap_or_else(|e| panic!("{at}: reopen: {e}"));
            let report = db.check().unwrap_or_else(|e| panic!("{at}: check: {e}"));
            base = verify(&db, &base, seed, &last, &at);
            assert_eq!(seen, base, "{at}: the read-only open saw other keys");
            assert_eq!(report.keys, base.len() as u64, "{at}");
            eprintln!(
                "{engine}, round {round}: killed after {} acknowledged operations; {} keys",
                last.iter().map(|l| l.map_or(0, |l| l + 1)).sum::<u64>(),
                base.len()
            );
        }
    }
    eprintln!(
        "recovery changed {} of {} killed pools (in the read-only open's copy)",
        repaired_total.0, repaired_total.1
    );
    assert!(
        repaired_total.0 > 0,
        "no killed pool needed a repair: the read-only check above proved nothing"
    );
}
