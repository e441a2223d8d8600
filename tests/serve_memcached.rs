//! `pmindex serve`: the memcached text protocol over real sockets, on every
//! engine; items across a clean restart and a killed server; concurrent
//! read-modify-writes; a connection kept in step through bad input, and a
//! binary-protocol client disconnected; the connection limit; and
//! `pmindex mc-bench`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use pmindex::serve::cache::MAX_DATA_LEN;
use pmindex::serve::{item, Config, Server, StopHandle};
use pmindex::{Db, Options};

/// A client connection that reads replies line by line.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn send(&mut self, text: &str) {
        self.writer.write_all(text.as_bytes()).unwrap();
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.reader.read_line(&mut l).unwrap();
        l
    }

    /// Sends `text` and reads a one-line reply.
    fn call(&mut self, text: &str) -> String {
        self.send(text);
        self.line()
    }

    /// Sends `text` (a retrieval) and reads up to and including `END`.
    fn get(&mut self, text: &str) -> String {
        self.send(text);
        let mut all = String::new();
        loop {
            let l = self.line();
            assert!(
                !l.is_empty(),
                "the server closed the connection after {all:?}"
            );
            all.push_str(&l);
            if l == "END\r\n" {
                return all;
            }
        }
    }

    /// The CAS value of `key`, from `gets`.
    fn cas(&mut self, key: &str) -> u64 {
        let r = self.get(&format!("gets {key}\r\n"));
        r.lines()
            .next()
            .unwrap()
            .split(' ')
            .nth(4)
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Whether the server has closed the connection.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.reader.read(&mut b), Ok(0))
    }
}

/// A server running on a thread, on a free port.
struct Running {
    addr: SocketAddr,
    stop: StopHandle,
    thread: JoinHandle<Db>,
}

impl Running {
    /// Stops the server and gives its database back.
    fn finish(self) -> Db {
        self.stop.stop();
        self.thread.join().unwrap()
    }
}

/// Starts a server on `db`.
fn start(db: Db, config: Config) -> Running {
    let server = Server::bind(db, "127.0.0.1:0", config).unwrap();
    let addr = server.local_addr().unwrap();
    let stop = server.stop_handle();
    let thread = std::thread::spawn(move || server.run().unwrap());
    Running { addr, stop, thread }
}

#[test]
fn every_engine_serves_the_protocol() {
    for engine in pmindex::engine::ENGINES.iter().map(|e| e.name) {
        let db = Db::create_anonymous(&Options::with_engine(engine)).unwrap();
        let server = start(db, Config::default());
        let addr = server.addr;
        let mut c = Client::connect(addr);
        let ctx = |what: &str| format!("{engine}: {what}");
        assert_eq!(
            c.call("set a 1 0 3\r\nxyz\r\n"),
            "STORED\r\n",
            "{}",
            ctx("set")
        );
        assert_eq!(
            c.call("add a 0 0 1\r\nq\r\n"),
            "NOT_STORED\r\n",
            "{}",
            ctx("add")
        );
        assert_eq!(c.call("add b 2 0 2\r\nbb\r\n"), "STORED\r\n");
        assert_eq!(c.call("replace zz 0 0 1\r\nq\r\n"), "NOT_STORED\r\n");
        assert_eq!(c.call("replace b 3 0 2\r\nBB\r\n"), "STORED\r\n");
        assert_eq!(c.call("append a 0 0 2\r\n++\r\n"), "STORED\r\n");
        assert_eq!(c.call("prepend a 0 0 2\r\n--\r\n"), "STORED\r\n");
        assert_eq!(
            c.get("get a b missing\r\n"),
            "VALUE a 1 7\r\n--xyz++\r\nVALUE b 3 2\r\nBB\r\nEND\r\n",
            "{}",
            ctx("get")
        );
        let cas = c.cas("a");
        assert_eq!(
            c.call(&format!("cas a 5 0 1 {}\r\nq\r\n", cas + 1)),
            "EXISTS\r\n"
        );
        assert_eq!(
            c.call(&format!("cas zz 5 0 1 {cas}\r\nq\r\n")),
            "NOT_FOUND\r\n"
        );
        assert_eq!(c.call(&format!("cas a 5 0 1 {cas}\r\nq\r\n")), "STORED\r\n");
        assert_eq!(c.call(&format!("cas a 5 0 1 {cas}\r\nr\r\n")), "EXISTS\r\n");
        assert!(c.cas("a") > cas, "{}", ctx("a new CAS value"));
        assert_eq!(c.call("set n 0 0 1\r\n9\r\n"), "STORED\r\n");
        assert_eq!(c.call("incr n 1\r\n"), "10\r\n");
        assert_eq!(c.call("decr n 11\r\n"), "0\r\n");
        assert_eq!(c.call("incr nope 1\r\n"), "NOT_FOUND\r\n");
        assert_eq!(c.call("touch n 100\r\n"), "TOUCHED\r\n");
        assert_eq!(c.call("delete n\r\n"), "DELETED\r\n");
        assert_eq!(c.call("delete n\r\n"), "NOT_FOUND\r\n");
        // Keys of every length up to 250 bytes, and binary data.
        let long = "k".repeat(250);
        assert_eq!(
            c.call(&format!("set {long} 0 0 4\r\n\0\r\n\x01\r\n")),
            "STORED\r\n"
        );
        assert_eq!(
            c.get(&format!("get {long}\r\n")),
            format!("VALUE {long} 0 4\r\n\0\r\n\x01\r\nEND\r\n")
        );
        assert!(c.call("stats\r\n").starts_with("STAT pid "));
        while c.line() != "END\r\n" {}
        assert_eq!(c.call("flush_all\r\n"), "OK\r\n");
        assert_eq!(c.get("get a b\r\n"), "END\r\n", "{}", ctx("flush_all"));
        assert!(c.call("version\r\n").starts_with("VERSION "));
        c.send("quit\r\n");
        assert!(c.closed());
        let db = server.finish();
        assert_eq!(db.len(), 0, "{}", ctx("flush_all emptied the index"));
        db.check().unwrap();
    }
}

#[test]
fn items_survive_a_restart_with_their_flags_expiration_and_cas_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache.pool");
    let db = Db::create(&path, &Options::with_engine("hart")).unwrap();
    let server = start(db, Config::default());
    let addr = server.addr;
    let mut c = Client::connect(addr);
    for i in 0..200 {
        assert_eq!(
            c.call(&format!("set key{i} {i} 3600 5\r\nv{i:04}\r\n")),
            "STORED\r\n"
        );
    }
    assert_eq!(c.call("set gone 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(c.call("delete gone\r\n"), "DELETED\r\n");
    let cas_before = c.cas("key7");
    drop(c);
    drop(server.finish());

    let db = Db::open(&path, &Options::default()).unwrap();
    let (meta, data) = {
        let v = db.get(b"key7").unwrap().unwrap();
        let (m, d) = item::decode(&v);
        (m, d.to_vec())
    };
    assert_eq!(
        (meta.flags, data.as_slice(), meta.cas),
        (7, &b"v0007"[..], cas_before)
    );
    assert!(meta.expires > 0, "the expiration is kept as a time");
    let server = start(db, Config::default());
    let addr = server.addr;
    let mut c = Client::connect(addr);
    for i in 0..200 {
        assert_eq!(
            c.get(&format!("get key{i}\r\n")),
            format!("VALUE key{i} {i} 5\r\nv{i:04}\r\nEND\r\n")
        );
    }
    assert_eq!(c.get("get gone\r\n"), "END\r\n");
    assert_eq!(c.cas("key7"), cas_before);
    assert_eq!(c.call("set key7 0 0 1\r\nz\r\n"), "STORED\r\n");
    assert!(
        c.cas("key7") > cas_before,
        "CAS values given after a restart are above those given before"
    );
    server.finish().check().unwrap();
}

#[test]
fn a_killed_server_keeps_every_acknowledged_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.pool");
    for engine in ["hart", "woart"] {
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new(env!("CARGO_BIN_EXE_pmindex"))
            .args(["--json", "serve"])
            .arg(&path)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--size",
                "64M",
                "--engine",
                engine,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["created"], true);
        let addr: SocketAddr = v["listening"].as_str().unwrap().parse().unwrap();
        let mut c = Client::connect(addr);
        // Pipelined sets, then a get of the last: every `STORED` read before
        // the kill is an acknowledged item.
        let mut script = String::new();
        for i in 0..3000 {
            script.push_str(&format!("set k{i} {i} 0 6\r\nd{i:05}\r\n"));
        }
        c.send(&script);
        for _ in 0..3000 {
            assert_eq!(c.line(), "STORED\r\n");
        }
        assert_eq!(c.call("incr counter 1\r\n"), "NOT_FOUND\r\n");
        child.kill().unwrap();
        child.wait().unwrap();

        let db = Db::open(&path, &Options::default()).unwrap();
        db.check().unwrap();
        assert_eq!(db.len(), 3000, "{engine}");
        for i in 0..3000 {
            let v = db.get(format!("k{i}").as_bytes()).unwrap().unwrap();
            let (meta, data) = item::decode(&v);
            assert_eq!(
                (meta.flags, data),
                (i, format!("d{i:05}").as_bytes()),
                "{engine}"
            );
        }
    }
}

#[test]
fn concurrent_increments_and_cas_loops_lose_no_update() {
    // Without a limit on commands at once, and with one command at a time
    // (`--concurrency 1`: the others wait at the gate, gets included).
    for concurrency in [None, Some(1)] {
        increments_and_cas_loops(Config {
            concurrency,
            ..Config::default()
        });
    }
}

fn increments_and_cas_loops(config: Config) {
    let db = Db::create_anonymous(&Options::with_engine("hart")).unwrap();
    let server = start(db, config);
    let addr = server.addr;
    let mut c = Client::connect(addr);
    assert_eq!(c.call("set n 0 0 1\r\n0\r\n"), "STORED\r\n");
    assert_eq!(c.call("set c 0 0 1\r\n0\r\n"), "STORED\r\n");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = Client::connect(addr);
                for _ in 0..300 {
                    assert_ne!(c.call("incr n 1\r\n"), "NOT_FOUND\r\n");
                }
            });
        }
        for _ in 0..3 {
            s.spawn(|| {
                let mut c = Client::connect(addr);
                for _ in 0..100 {
                    // Read, add one, write back if nobody wrote meanwhile.
                    loop {
                        let r = c.get("gets c\r\n");
                        let mut lines = r.lines();
                        let head: Vec<&str> = lines.next().unwrap().split(' ').collect();
                        let n: u64 = lines.next().unwrap().parse().unwrap();
                        let next = (n + 1).to_string();
                        let reply = c.call(&format!(
                            "cas c 0 0 {} {}\r\n{next}\r\n",
                            next.len(),
                            head[4]
                        ));
                        match reply.as_str() {
                            "STORED\r\n" => break,
                            "EXISTS\r\n" => continue,
                            r => panic!("cas answered {r:?}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(
        c.get("get n c\r\n"),
        "VALUE n 0 4\r\n1200\r\nVALUE c 0 3\r\n300\r\nEND\r\n"
    );
    server.finish();
}

#[test]
fn a_connection_stays_in_step_through_bad_input() {
    let db = Db::create_anonymous(&Options::with_engine("wort")).unwrap();
    let server = start(db, Config::default());
    let addr = server.addr;
    let mut c = Client::connect(addr);
    // A value over the limit is read and dropped, then refused; a `set`
    // refused so removes the key's old item (memcached: no stale read).
    assert_eq!(c.call("set big 0 0 3\r\nold\r\n"), "STORED\r\n");
    let big = "x".repeat(MAX_DATA_LEN + 1);
    assert_eq!(
        c.call(&format!("set big 0 0 {}\r\n{big}\r\n", big.len())),
        "SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(c.get("get big\r\n"), "END\r\n");
    // The largest value is stored whole.
    let most = "y".repeat(MAX_DATA_LEN);
    assert_eq!(
        c.call(&format!("set most 0 0 {}\r\n{most}\r\n", most.len())),
        "STORED\r\n"
    );
    assert_eq!(
        c.get("get most\r\n"),
        format!("VALUE most 0 {}\r\n{most}\r\nEND\r\n", most.len())
    );
    assert_eq!(
        c.call("set k 0 0 2\r\nabcd\r\n"),
        "CLIENT_ERROR bad data chunk\r\n"
    );
    assert_eq!(
        c.line(),
        "ERROR\r\n",
        "the rest of the block read as a command"
    );
    assert_eq!(c.call("frobnicate\r\n"), "ERROR\r\n");
    assert_eq!(c.call("set k 0 0\r\n"), "ERROR\r\n");
    assert_eq!(
        c.call("set k x 0 1\r\n"),
        "CLIENT_ERROR bad command line format\r\n"
    );
    assert_eq!(
        c.call("incr k x\r\n"),
        "CLIENT_ERROR invalid numeric delta argument\r\n"
    );
    assert_eq!(
        c.call(&format!("get {}\r\n", "k".repeat(251))),
        "CLIENT_ERROR bad command line format\r\n"
    );
    // Pipelined commands, bare newlines among them, answered in order.
    c.send("set p 0 0 1\nA\r\nget p\nappend p 0 0 1 noreply\r\nB\r\nget p\r\n");
    assert_eq!(c.line(), "STORED\r\n");
    assert_eq!(c.line(), "VALUE p 0 1\r\n");
    assert_eq!(c.line(), "A\r\n");
    assert_eq!(c.line(), "END\r\n");
    assert_eq!(c.get(""), "VALUE p 0 2\r\nAB\r\nEND\r\n");
    // A line longer than the limit closes the connection.
    c.send(&"g".repeat(pmindex::serve::server::MAX_LINE + 10));
    assert_eq!(c.line(), "CLIENT_ERROR line too long\r\n");
    assert!(c.closed());
    // The server serves on; a reply does not wait for the rest of a line
    // the client has begun.
    let mut c = Client::connect(addr);
    assert_eq!(c.get("get p\r\nget p"), "VALUE p 0 2\r\nAB\r\nEND\r\n");
    assert_eq!(c.get(" nope\r\n"), "VALUE p 0 2\r\nAB\r\nEND\r\n");
    // A `get` of thousands of keys (a long line) is answered.
    let keys: String = (0..20_000).map(|i| format!(" key{i:06}")).collect();
    assert_eq!(
        c.get(&format!("get{keys} p\r\n")),
        "VALUE p 0 2\r\nAB\r\nEND\r\n"
    );
    // A binary-protocol client (a `get` of `p`: magic 0x80, opcode 0, key
    // length 1, body length 1) is disconnected at once, not left to wait
    // for a reply to a line that never ends; the server serves on.
    let mut b = Client::connect(addr);
    let mut request = [0u8; 25];
    request[..4].copy_from_slice(&[0x80, 0x00, 0x00, 0x01]);
    request[11] = 1;
    request[24] = b'p';
    b.writer.write_all(&request).unwrap();
    assert!(b.closed());
    assert_eq!(c.get("get p\r\n"), "VALUE p 0 2\r\nAB\r\nEND\r\n");
    server.finish();
}

#[test]
fn connections_beyond_the_limit_are_refused_and_shutdown_stops_the_server() {
    let db = Db::create_anonymous(&Options::with_engine("art-cow")).unwrap();
    let config = Config {
        max_connections: 1,
        allow_shutdown: true,
        ..Config::default()
    };
    let server = start(db, config);
    let addr = server.addr;
    let mut first = Client::connect(addr);
    assert_eq!(first.call("set a 0 0 1\r\n1\r\n"), "STORED\r\n");
    let mut second = Client::connect(addr);
    assert_eq!(second.line(), "ERROR Too many open connections\r\n");
    assert!(second.closed());
    first.send("quit\r\n");
    assert!(first.closed());
    // Once the first connection's thread has ended, a new one is served.
    let mut third = loop {
        let mut c = Client::connect(addr);
        c.send("version\r\n");
        let l = c.line();
        if l.starts_with("VERSION") {
            break c;
        }
        assert_eq!(l, "ERROR Too many open connections\r\n");
        std::thread::sleep(Duration::from_millis(20));
    };
    third.send("shutdown\r\n");
    assert!(third.closed());
    let db = server.thread.join().unwrap(); // stopped by `shutdown`
    assert_eq!(
        db.get(b"a").unwrap().map(|v| item::decode(&v).1.to_vec()),
        Some(b"1".to_vec())
    );
}

#[test]
fn mc_bench_loads_each_engine_and_a_running_server() {
    let out = Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args([
            "--json",
            "mc-bench",
            "--engines",
            "hart,wort",
            "--clients",
            "3",
        ])
        .args([
            "--requests",
            "3000",
            "--keyspace",
            "1000",
            "--pipeline",
            "4",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        let round = &r["rounds"][0];
        assert_eq!(round["set"]["requests"], 3000);
        assert_eq!(round["get"]["requests"], 3000);
        // 3,000 uniform draws from 1,000 keys set about 95% of them.
        let hits = round["get"]["hits"].as_u64().unwrap();
        assert!((2500..3000).contains(&hits), "{hits} hits");
        assert!(r["get_ops_per_sec_median"].as_f64().unwrap() > 0.0);
    }

    let db = Db::create_anonymous(&Options::with_engine("woart")).unwrap();
    let server = start(db, Config::default());
    let addr = server.addr;
    let out = Command::new(env!("CARGO_BIN_EXE_pmindex"))
        .args(["mc-bench", "--server", &addr.to_string(), "--clients", "2"])
        .args(["--requests", "500"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&addr.to_string()), "{text}");
    let db = server.finish();
    assert!(db.len() > 300 && db.len() <= 500, "{} items", db.len());
    // A refused setting exits with status 2, before anything is made.
    let dir = tempfile::tempdir().unwrap();
    let pool = dir.path().join("never.pool");
    for args in [
        &["mc-bench", "--clients", "0"][..],
        &["mc-bench", "--concurrency", "0"],
        &["serve", pool.to_str().unwrap(), "--concurrency", "0"],
        &["serve", pool.to_str().unwrap(), "--max-connections", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pmindex"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    assert!(!pool.exists());
}
