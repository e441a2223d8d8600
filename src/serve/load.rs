//! A memcached load generator in the manner of mc-benchmark (antirez), the
//! tool of the WORT paper's §5.4: a phase of `set`s, then a phase of
//! `get`s, each of a number of requests spread over many client
//! connections, with keys drawn uniformly from a key space
//! (`key:<12 digits>`, as mc-benchmark's `-r`).
//!
//! Each client is a thread with one connection, which sends `pipeline`
//! requests, reads their replies, and records the round trip in a latency
//! histogram. A reply other than the one the protocol gives for the
//! request (`STORED`; a `VALUE` block of the right length, or `END`) stops
//! the run with an error: a benchmark of a server that answers wrong
//! measures nothing.

use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::bench::report::LatencySummary;

/// What a load run does.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The server.
    pub addr: SocketAddr,
    /// Connections, each on its own thread.
    pub clients: usize,
    /// Requests per phase, over all clients.
    pub requests: u64,
    /// Keys are drawn from `0..keyspace`.
    pub keyspace: u64,
    /// Bytes of each `set`'s data.
    pub value_size: usize,
    /// Requests a client sends before it reads their replies.
    pub pipeline: usize,
    /// Seed of the key draws (client `i` of the `set` phase uses `seed +
    /// i`; the `get` phase draws another sequence).
    pub seed: u64,
}

/// One phase's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PhaseReport {
    /// `set` or `get`.
    pub phase: &'static str,
    /// Requests answered.
    pub requests: u64,
    /// Of the `get`s, those that found their key.
    pub hits: u64,
    /// Wall-clock seconds from the first request to the last reply.
    pub secs: f64,
    /// Requests per second.
    pub ops_per_sec: f64,
    /// Round trips of one pipelined batch of requests, in ns.
    pub latency: Option<LatencySummary>,
}

/// The two phases of mc-benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `set key:<n> 0 0 <value_size>`.
    Set,
    /// `get key:<n>`.
    Get,
}

/// `key:<n>`, `n` in 12 digits (mc-benchmark's `key:__rand_int__`).
pub fn key(n: u64) -> String {
    format!("key:{n:012}")
}

/// Runs `phase` of `cfg`; `done` counts the requests answered so far (for
/// a progress bar).
pub fn run_phase(cfg: &LoadConfig, phase: Phase, done: &AtomicU64) -> io::Result<PhaseReport> {
    if cfg.clients == 0 || cfg.pipeline == 0 || cfg.keyspace == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "clients, pipeline and key space must be at least 1",
        ));
    }
    // Connect every client before the clock starts.
    let mut conns = Vec::with_capacity(cfg.clients);
    for _ in 0..cfg.clients {
        let s = TcpStream::connect(cfg.addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        conns.push(s);
    }
    let per = cfg.requests / cfg.clients as u64;
    let extra = cfg.requests % cfg.clients as u64;
    let t0 = Instant::now();
    let results: Vec<io::Result<(u64, u64, hdrhistogram::Histogram<u64>)>> =
        std::thread::scope(|scope| {
            let handles: Vec<_> = conns
                .into_iter()
                .enumerate()
                .map(|(i, conn)| {
                    let n = per + u64::from((i as u64) < extra);
                    scope.spawn(move || client(cfg, phase, conn, i as u64, n, done))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(io::Error::other("a client thread panicked")))
                })
                .collect()
        });
    let secs = t0.elapsed().as_secs_f64();
    let mut hist = new_histogram();
    let (mut requests, mut hits) = (0, 0);
    for r in results {
        let (n, h, c) = r?;
        requests += n;
        hits += h;
        hist.add(&c).map_err(io::Error::other)?;
    }
    Ok(PhaseReport {
        phase: match phase {
            Phase::Set => "set",
            Phase::Get => "get",
        },
        requests,
        hits,
        secs,
        ops_per_sec: requests as f64 / secs.max(1e-9),
        latency: LatencySummary::of(&hist),
    })
}

fn new_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One client: `n` requests on `conn`; returns the requests answered, the
/// hits among them and the round-trip histogram.
fn client(
    cfg: &LoadConfig,
    phase: Phase,
    conn: TcpStream,
    index: u64,
    n: u64,
    done: &AtomicU64,
) -> io::Result<(u64, u64, hdrhistogram::Histogram<u64>)> {
    // Each phase draws its keys afresh, as mc-benchmark does: the `get`s
    // find the keys that some `set` drew (about 63% of the key space
    // after as many `set`s as keys).
    let phase_seed = match phase {
        Phase::Set => cfg.seed,
        Phase::Get => cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
    };
    let mut rng = SmallRng::seed_from_u64(phase_seed.wrapping_add(index));
    let mut hist = new_histogram();
    let mut reader = BufReader::with_capacity(64 * 1024, conn.try_clone()?);
    let mut writer = BufWriter::with_capacity(64 * 1024, conn);
    let value = vec![b'x'; cfg.value_size];
    let mut line = Vec::new();
    let mut data = Vec::new();
    let (mut sent, mut hits) = (0u64, 0u64);
    while sent < n {
        let batch = (cfg.pipeline as u64).min(n - sent);
        let t = Instant::now();
        for _ in 0..batch {
            let k = key(rng.gen_range(0..cfg.keyspace));
            match phase {
                Phase::Set => {
                    write!(writer, "set {k} 0 0 {}\r\n", value.len())?;
                    writer.write_all(&value)?;
                    writer.write_all(b"\r\n")?;
                }
                Phase::Get => write!(writer, "get {k}\r\n")?,
            }
        }
        writer.flush()?;
        for _ in 0..batch {
            line.clear();
            reader.read_until(b'\n', &mut line)?;
            match phase {
                Phase::Set if line == b"STORED\r\n" => {}
                Phase::Get if line == b"END\r\n" => {}
                Phase::Get if line.starts_with(b"VALUE ") => {
                    let len = std::str::from_utf8(&line)
                        .ok()
                        .and_then(|l| l.split_whitespace().nth(3))
                        .and_then(|n| n.parse::<usize>().ok())
                        .ok_or_else(|| bad_reply(&line))?;
                    data.resize(len + 2, 0);
                    reader.read_exact(&mut data)?;
                    line.clear();
                    reader.read_until(b'\n', &mut line)?;
                    if line != b"END\r\n" {
                        return Err(bad_reply(&line));
                    }
                    hits += 1;
                }
                _ => return Err(bad_reply(&line)),
            }
        }
        hist.saturating_record(t.elapsed().as_nanos() as u64);
        sent += batch;
        done.fetch_add(batch, Ordering::Relaxed);
    }
    Ok((sent, hits, hist))
}

fn bad_reply(line: &[u8]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "unexpected reply from the server: {:?}",
            String::from_utf8_lossy(line).trim_end()
        ),
    )
}
