//! The sockets of `pmindex serve`: a listener, and one thread per client
//! connection that reads commands, runs them on the [`Cache`] and writes
//! the replies.
//!
//! Replies are buffered and written whenever no complete command line is
//! buffered, so a client that pipelines commands gets their replies in few
//! writes, and a reply never waits for a line the client has only begun.
//! A storage command's data block is read whole before the command runs;
//! one longer than the item limit is read and dropped (`SERVER_ERROR
//! object too large for cache`, and a `set` removes the key's old item),
//! as memcached does, so the connection stays in step.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::cache::{server_error, Cache, Next, MAX_DATA_LEN, SPILL_AT};
use super::protocol::{self, Command, ParseError};
use crate::Db;

/// The longest command line read (a `get` of many keys is long: 2 MiB is
/// some 8,000 keys of 250 bytes, 100,000 of 20); a longer one closes the
/// connection after `CLIENT_ERROR line too long`.
pub const MAX_LINE: usize = 2 << 20;

/// A storage command announcing more bytes than this is refused without
/// reading its block, and the connection closed: no client sends it in
/// step with the protocol.
const MAX_SWALLOW: usize = 64 << 20;

/// The first byte of every request of memcached's binary protocol, and of
/// no text command.
const BINARY_REQUEST: u8 = 0x80;

/// How a server runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Connections served at once; one more is answered `ERROR Too many
    /// open connections` (memcached's words) and closed.
    pub max_connections: usize,
    /// Whether the `shutdown` command stops the server.
    pub allow_shutdown: bool,
    /// At most this many commands at work on the index at once, the others
    /// sleeping until one ends ([`super::gate`]); `None` (the default): no
    /// limit.
    pub concurrency: Option<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_connections: 1024,
            allow_shutdown: false,
            concurrency: None,
        }
    }
}

/// A memcached server over one [`Db`].
pub struct Server {
    listener: TcpListener,
    cache: Arc<Cache>,
    config: Config,
    shared: Arc<Shared>,
}

/// What the listener and the connections share.
#[derive(Default)]
struct Shared {
    stopping: AtomicBool,
    next_id: AtomicU64,
    /// The open connections, to close them at shutdown.
    conns: Mutex<HashMap<u64, TcpStream>>,
}

/// Stops a running [`Server`] from another thread.
#[derive(Clone)]
pub struct StopHandle(Arc<Shared>);

impl StopHandle {
    /// Asks the server to stop: it accepts no more connections, closes the
    /// open ones, and [`Server::run`] returns.
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::SeqCst);
    }
}

/// Set by SIGINT and SIGTERM once [`stop_on_signals`] installed handlers.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM stop every running [`Server`] cleanly (a
/// second signal kills the process as usual). For the command line.
pub fn stop_on_signals() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sa` is zeroed, then its handler set to `on_signal`, which
        // only stores to an atomic (async-signal-safe); SA_RESETHAND puts the
        // default action back after the first signal.
        let r = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESETHAND;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Server {
    /// Binds `addr` (port 0 picks a free port: [`Server::local_addr`]).
    pub fn bind(db: Db, addr: impl ToSocketAddrs, config: Config) -> io::Result<Server> {
        Ok(Server::on(db, TcpListener::bind(addr)?, config))
    }

    /// A server on a listener bound already: `pmindex serve` binds before
    /// it opens or creates the pool, so that an address it cannot listen
    /// on leaves no new pool behind.
    pub fn on(db: Db, listener: TcpListener, config: Config) -> Server {
        Server {
            listener,
            cache: Arc::new(Cache::new(db, &config)),
            config,
            shared: Arc::default(),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle that stops [`Server::run`].
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.shared))
    }

    /// Serves until stopped (a [`StopHandle`], a `shutdown` command where
    /// allowed, or a signal after [`stop_on_signals`]), then closes every
    /// connection, waits for their threads and gives the database back, to
    /// be closed by dropping it.
    pub fn run(self) -> io::Result<Db> {
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let stopped =
            || self.shared.stopping.load(Ordering::SeqCst) || SIGNALLED.load(Ordering::SeqCst);
        while !stopped() {
            if !readable(&self.listener, Duration::from_millis(100))? {
                continue;
            }
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                // A client that gave up between poll and accept, or a
                // transient shortage of descriptors: keep serving the rest.
                Err(e) if e.kind() != io::ErrorKind::InvalidInput => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => return Err(e),
            };
            threads.retain(|t| !t.is_finished());
            let counters = &self.cache.counters;
            if threads.len() >= self.config.max_connections {
                counters
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                let _ = (&stream).write_all(b"ERROR Too many open connections\r\n");
                continue;
            }
            counters.total_connections.fetch_add(1, Ordering::Relaxed);
            let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
            // Kept to close it at shutdown (or to refuse it, below).
            let Ok(handle) = stream.try_clone() else {
                continue;
            };
            self.shared.conns.lock().insert(id, handle);
            let cache = Arc::clone(&self.cache);
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name(format!("memcached-conn-{id}"))
                .spawn(move || {
                    // Unregisters the connection however the thread ends,
                    // a panic included, so that its socket is closed.
                    let _open = OpenConnection::new(&cache, &shared, id);
                    if serve_connection(&cache, stream) == Next::Shutdown {
                        shared.stopping.store(true, Ordering::SeqCst);
                    }
                });
            match spawned {
                Ok(t) => threads.push(t),
                // No thread for it (the system's limit): refuse it, serve on.
                Err(_) => {
                    if let Some(s) = self.shared.conns.lock().remove(&id) {
                        let _ = (&s).write_all(b"SERVER_ERROR out of threads\r\n");
                    }
                }
            }
        }
        for s in self.shared.conns.lock().values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in threads {
            let _ = t.join();
        }
        // A delayed `flush_all` running now holds the cache until it ends.
        let mut cache = self.cache;
        loop {
            match Arc::try_unwrap(cache) {
                Ok(c) => return Ok(c.into_db()),
                Err(c) => {
                    cache = c;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// A connection being served: counted in `curr_connections` and listed in
/// the server's connections until dropped.
struct OpenConnection<'a> {
    cache: &'a Cache,
    shared: &'a Shared,
    id: u64,
}

impl<'a> OpenConnection<'a> {
    fn new(cache: &'a Cache, shared: &'a Shared, id: u64) -> Self {
        let counters = &cache.counters;
        counters.curr_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection { cache, shared, id }
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        let counters = &self.cache.counters;
        counters.curr_connections.fetch_sub(1, Ordering::Relaxed);
        self.shared.conns.lock().remove(&self.id);
    }
}

/// Waits up to `timeout` for a connection to accept.
fn readable(listener: &TcpListener, timeout: Duration) -> io::Result<bool> {
    let mut fd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`, and its count 1.
    let n = unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) };
    match n {
        -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => Ok(false),
        -1 => Err(io::Error::last_os_error()),
        n => Ok(n > 0),
    }
}

/// Serves one connection until the client closes it, `quit`s, sends what
/// cannot be kept in step with, or the server stops.
fn serve_connection(cache: &Arc<Cache>, stream: TcpStream) -> Next {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return Next::Close;
    };
    serve_stream(cache, read_half, stream)
}

/// The protocol over one byte stream: reads commands from `input` until
/// it ends (or a `quit`, a `shutdown`, or input that cannot be kept in
/// step with), runs them on `cache` and writes the replies to `output`.
/// What a connection runs; public for the fuzz target.
pub fn serve_stream(cache: &Arc<Cache>, input: impl Read, output: impl Write) -> Next {
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    let mut writer = BufWriter::with_capacity(64 * 1024, output);
    let mut line = Vec::with_capacity(256);
    let mut data = Vec::new();
    let mut out = Vec::with_capacity(4096);
    // The first byte tells the protocol, as in memcached: a client of the
    // binary protocol, which this server does not speak, is disconnected
    // at once rather than left to time out waiting for a reply to a line
    // that never ends (docs/design.md §12, "Binary-protocol clients").
    if let Ok(&[BINARY_REQUEST, ..]) = reader.fill_buf() {
        return Next::Close;
    }
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return Next::Close,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            // The line did not end within MAX_LINE bytes (or the client
            // closed mid-line).
            let _ = writer.write_all(b"CLIENT_ERROR line too long\r\n");
            let _ = writer.flush();
            return Next::Close;
        }
        line.pop();
        // A `noreply` line's errors are not answered either (memcached),
        // except an unknown word or a wrong count of tokens.
        let quiet = protocol::errors_unanswered(&line);
        let next = match protocol::parse(&line) {
            Err(e) => {
                if !quiet || e == ParseError::UnknownCommand {
                    out.extend_from_slice(format!("{e}\r\n").as_bytes());
                }
                Next::Continue
            }
            Ok(Command::Store { bytes, .. }) if bytes > MAX_SWALLOW => {
                let _ = writer.write_all(b"SERVER_ERROR object too large for cache\r\n");
                let _ = writer.flush();
                return Next::Close;
            }
            Ok(Command::Store { op, key, bytes, .. }) if bytes > MAX_DATA_LEN => {
                // Read and drop the block, then refuse.
                let want = bytes as u64 + 2;
                let r = io::copy(&mut (&mut reader).take(want), &mut io::sink());
                if !matches!(r, Ok(n) if n == want) {
                    return Next::Close;
                }
                let mark = out.len();
                if let Err(e) = cache.refuse_too_large(op, key, &mut out) {
                    server_error(&mut out, &e);
                }
                if quiet {
                    out.truncate(mark);
                }
                Next::Continue
            }
            Ok(cmd) => {
                let block = match cmd {
                    Command::Store { bytes, .. } => {
                        data.clear();
                        data.resize(bytes + 2, 0);
                        if reader.read_exact(&mut data).is_err() {
                            return Next::Close;
                        }
                        Some(bytes)
                    }
                    _ => None,
                };
                match block {
                    Some(_) if !data.ends_with(b"\r\n") => {
                        if !quiet {
                            out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
                        }
                        Next::Continue
                    }
                    _ => {
                        let data = block.map_or(&[][..], |n| &data[..n]);
                        // A long retrieval is sent as it is read.
                        let mut spill = |o: &mut Vec<u8>| {
                            let sent = writer.write_all(o).is_ok();
                            o.clear();
                            sent
                        };
                        cache.execute(&cmd, data, &mut out, &mut spill)
                    }
                }
            }
        };
        if !out.is_empty() {
            if writer.write_all(&out).is_err() {
                return Next::Close;
            }
            out.clear();
            // Do not keep a large reply's buffer for the connection's life.
            if out.capacity() > 2 * SPILL_AT {
                out = Vec::with_capacity(4096);
            }
        }
        if next != Next::Continue {
            let _ = writer.flush();
            return next;
        }
        // Send the replies once no complete command line is buffered:
        // pipelined commands get theirs in one write, and a reply never
        // waits for the rest of a line the client has not sent.
        if !reader.buffer().contains(&b'\n') && writer.flush().is_err() {
            return Next::Close;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Options;
    use proptest::prelude::*;

    fn cache() -> Arc<Cache> {
        let db = Db::create_anonymous(&Options::with_engine("hart")).unwrap();
        let config = Config {
            allow_shutdown: true,
            ..Config::default()
        };
        Arc::new(Cache::new(db, &config))
    }

    /// The replies to `input` as one stream.
    fn replies(cache: &Arc<Cache>, input: &[u8]) -> (Next, String) {
        let mut out = Vec::new();
        let next = serve_stream(cache, input, &mut out);
        (next, String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn a_stream_of_commands_is_answered_in_order() {
        let c = cache();
        let (next, r) = replies(
            &c,
            b"set a 0 0 1\r\n1\r\nget a b\r\nincr a 2\nbogus\r\nquit\r\nget a\r\n",
        );
        assert_eq!(next, Next::Close);
        assert_eq!(r, "STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n3\r\nERROR\r\n");
        let (next, r) = replies(&c, b"get a\r\nshutdown\r\n");
        assert_eq!(
            (next, r.as_str()),
            (Next::Shutdown, "VALUE a 0 1\r\n3\r\nEND\r\n")
        );
        // A stream that ends inside a data block stores nothing.
        let (next, r) = replies(&c, b"set b 0 0 10\r\nshort");
        assert_eq!((next, r.as_str()), (Next::Close, ""));
        assert_eq!(c.db().get(b"b").unwrap(), None);
    }

    #[test]
    fn a_noreply_line_s_errors_are_not_answered() {
        let c = cache();
        let (_, r) = replies(
            &c,
            b"incr k abc noreply\r\ntouch k x noreply\r\nset j 0 0 3 noreply\r\nabcde\r\nget j\r\n",
        );
        // The bad block's tail is read as a command, as memcached does.
        assert_eq!(r, "ERROR\r\nEND\r\n");
        let (_, r) = replies(&c, b"incr k abc\r\nset j 0 0 3\r\nabcde\r\n");
        assert_eq!(
            r,
            "CLIENT_ERROR invalid numeric delta argument\r\nCLIENT_ERROR bad data chunk\r\nERROR\r\n"
        );
    }

    #[test]
    fn errors_that_noreply_does_not_silence() {
        let c = cache();
        let long = "k".repeat(251);
        let input = format!(
            "get {long} noreply\r\nbogus noreply\r\nset k 0 0 1 x noreply\r\nX\r\n\
             set a 0 0 1\r\n1\r\nflush_all noreply x\r\nget a\r\nshutdown now\r\n"
        );
        let (next, r) = replies(&c, input.as_bytes());
        assert_eq!(next, Next::Close);
        assert_eq!(
            r,
            "CLIENT_ERROR bad command line format\r\nERROR\r\nERROR\r\nERROR\r\n\
             STORED\r\nCLIENT_ERROR invalid exptime argument\r\nVALUE a 0 1\r\n1\r\nEND\r\n\
             CLIENT_ERROR invalid shutdown mode\r\n"
        );
    }

    /// A connection that starts with a binary request (a `set` of `k`) is
    /// closed unanswered, and nothing is stored; one that starts with text
    /// is not taken for binary later.
    #[test]
    fn a_binary_client_is_disconnected_and_nothing_is_stored() {
        let c = cache();
        let mut set = vec![0x80, 0x01, 0, 1, 8, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 5];
        set.extend([0; 8]); // CAS
        set.extend([0; 8]); // extras: flags, expiration
        set.extend(b"kv");
        let (next, r) = replies(&c, &set);
        assert_eq!((next, r.as_str()), (Next::Close, ""));
        assert_eq!(c.db().len(), 0);
        let mut text = b"set a 0 0 1\r\n1\r\n".to_vec();
        text.extend(&set);
        let (_, r) = replies(&c, &text);
        assert!(r.starts_with("STORED\r\n"), "{r:?}");
    }

    /// Streams built from command words, numbers, keys and line ends.
    fn streams() -> impl Strategy<Value = Vec<u8>> {
        const WORDS: &[&str] = &[
            "set ",
            "cas ",
            "append ",
            "get ",
            "gats ",
            "incr ",
            "decr ",
            "delete ",
            "touch ",
            "flush_all ",
            "noreply ",
            "\r\n",
            "\n",
            "-1 ",
            "18446744073709551616 ",
        ];
        let token = prop_oneof![
            proptest::sample::select(WORDS).prop_map(|w| w.as_bytes().to_vec()),
            (0u64..20).prop_map(|n| format!("{n} ").into_bytes()),
            "[a-c]{1,3} ".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..8),
        ];
        proptest::collection::vec(token, 0..60).prop_map(|ts| ts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// No input panics the server or leaves the index inconsistent,
        /// and every item it holds afterwards decodes.
        #[test]
        fn no_stream_breaks_the_server(input in streams()) {
            let c = cache();
            let _ = replies(&c, &input);
            c.db().check().unwrap();
            for pair in c.db().range(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded) {
                let (_, v) = pair.unwrap();
                prop_assert!(v.len() >= super::super::item::HEADER_LEN);
                prop_assert_eq!(&v[..4], &super::super::item::MAGIC[..]);
            }
        }
    }
}
