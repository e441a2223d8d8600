//! memcached's commands over a [`Db`]: what `pmindex serve` does with each
//! parsed [`Command`], apart from the sockets.
//!
//! # Atomicity
//! Every command that changes an item (all storage commands, `delete`,
//! `incr`/`decr`, `touch`, `gat`) takes the mutex of the key's stripe (one
//! of [`STRIPES`], by a hash of the key) for its read, decision and write,
//! so that two clients' `cas`, `append` or `incr` on one key never lose
//! each other's change. `get` takes no mutex: each `Db::put` replaces an
//! item whole, so a reader sees the item before or after a change.
//!
//! # Durability
//! A reply is written after the `Db` call returns, so an acknowledged
//! change is durable as every `Db` change is (the module doc of
//! [`crate::db`]): on an ordinary file it survives a killed server, on PM
//! mapped with `MAP_SYNC` a power failure.
//!
//! # Expiration and CAS values
//! Expiration is kept as a Unix time ([`super::item`]), so it runs on across
//! restarts. An expired item is a miss; the read that finds it removes it
//! (under its stripe's mutex, if it is still the same item). A store whose
//! expiration is already past removes the key instead of storing.
//!
//! CAS values come from one counter started at the Unix time in
//! nanoseconds when the cache opens, so values given after a restart are
//! above those given before it (unless the clock went back, or the server
//! made more than one change per nanosecond of the time between).

use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::gate::{Gate, Slot};
use super::item::{self, Meta, HEADER_LEN};
use super::protocol::{Command, StoreOp, RELATIVE_EXPTIME_LIMIT};
use super::server::Config;
use crate::engine::MAX_VALUE_LEN;
use crate::{Db, Error};

/// Stripes of the per-key mutexes.
pub const STRIPES: usize = 4096;

/// The longest data an item may hold: a value of [`MAX_VALUE_LEN`] bytes
/// less the item header.
pub const MAX_DATA_LEN: usize = MAX_VALUE_LEN - HEADER_LEN;

/// A retrieval's reply is sent on once it holds this many bytes.
pub const SPILL_AT: usize = 256 * 1024;

/// Keys a retrieval looks up at once (the engines overlap up to 32).
const GET_GROUP: usize = 32;

/// The version `version` and `stats` report.
pub const VERSION: &str = concat!("1.6.0-pmindex-", env!("CARGO_PKG_VERSION"));

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Read the next command.
    Continue,
    /// Close this connection (`quit`).
    Close,
    /// Stop the server (`shutdown`, where allowed).
    Shutdown,
}

/// Counters reported by `stats`.
#[derive(Default)]
pub struct Counters {
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    cmd_get: AtomicU64,
    cmd_set: AtomicU64,
    cmd_touch: AtomicU64,
    cmd_flush: AtomicU64,
    get_hits: AtomicU64,
    get_misses: AtomicU64,
    get_expired: AtomicU64,
    delete_hits: AtomicU64,
    delete_misses: AtomicU64,
    incr_hits: AtomicU64,
    incr_misses: AtomicU64,
    decr_hits: AtomicU64,
    decr_misses: AtomicU64,
    cas_hits: AtomicU64,
    cas_misses: AtomicU64,
    cas_badval: AtomicU64,
    touch_hits: AtomicU64,
    touch_misses: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// The memcached commands over one [`Db`].
pub struct Cache {
    db: Db,
    stripes: Box<[Mutex<()>]>,
    next_cas: AtomicU64,
    clock: Clock,
    started: Instant,
    allow_shutdown: bool,
    /// The deadline of a delayed `flush_all`, and its timer.
    timer: Arc<FlushTimer>,
    /// Commands at work on the index at once (`Config::concurrency`).
    gate: Option<Gate>,
    /// What `stats` reports.
    pub counters: Counters,
}

/// The Unix time in seconds.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A delayed `flush_all`: one deadline, as memcached keeps one (a later
/// `flush_all` replaces it), watched by one thread started with the first
/// delay. The thread holds only a weak reference to the cache, and ends
/// within a second of the cache.
#[derive(Default)]
struct FlushTimer {
    /// The Unix time at which to flush.
    deadline: Mutex<Option<u64>>,
    wake: parking_lot::Condvar,
    started: std::sync::atomic::AtomicBool,
}

/// The Unix time in seconds.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Cache {
    /// A cache over `db`, run as `config` says (`shutdown` is obeyed only
    /// if `config.allow_shutdown`; `config.concurrency` commands at once).
    pub fn new(db: Db, config: &Config) -> Cache {
        Cache::with_clock(db, config, Arc::new(unix_now))
    }

    /// [`Cache::new`] with `clock` as the Unix time in seconds (tests of
    /// expiration).
    pub fn with_clock(db: Db, config: &Config, clock: Clock) -> Cache {
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Cache {
            db,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            next_cas: AtomicU64::new(ns.max(1)),
            clock,
            started: Instant::now(),
            allow_shutdown: config.allow_shutdown,
            timer: Arc::default(),
            gate: config.concurrency.map(Gate::new),
            counters: Counters::default(),
        }
    }

    /// The database (to close it: `Arc::try_unwrap` the cache, then
    /// [`Cache::into_db`]).
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Gives the database back.
    pub fn into_db(self) -> Db {
        self.db
    }

    /// Runs `cmd` (with `data`, the block of a storage command) and appends
    /// its reply to `out` (nothing with `noreply`). A failure of the `Db`
    /// is answered `SERVER_ERROR <message>`. A retrieval hands `out` to
    /// `spill` (which sends and empties it) whenever it holds more than
    /// [`SPILL_AT`] bytes between groups of keys, so that a `get` of many
    /// large items, or of one key many times, is sent as it is read, not
    /// gathered whole; `spill` returns false when the client is gone.
    pub fn execute(
        self: &Arc<Self>,
        cmd: &Command<'_>,
        data: &[u8],
        out: &mut Vec<u8>,
        spill: &mut dyn FnMut(&mut Vec<u8>) -> bool,
    ) -> Next {
        let mark = out.len();
        // Commands that work on the index take a slot; a retrieval takes
        // its slots group by group (`get`), so that it holds none while it
        // hands its reply to the socket.
        let _slot = matches!(
            cmd,
            Command::Store { .. }
                | Command::Delete { .. }
                | Command::Arith { .. }
                | Command::Touch { .. }
                | Command::FlushAll { .. }
        )
        .then(|| self.slot());
        let (noreply, r) = match *cmd {
            Command::Store {
                op,
                key,
                flags,
                exptime,
                noreply,
                ..
            } => (noreply, self.store(op, key, flags, exptime, data, out)),
            Command::Get {
                ref keys,
                with_cas,
                touch,
            } => {
                let mut sent = false;
                let r = self.get(keys, with_cas, touch, out, &mut |o| {
                    sent = true;
                    spill(o)
                });
                return match r {
                    Ok(true) => Next::Continue,
                    // The client is gone: do not run what it sent after.
                    Ok(false) => Next::Close,
                    Err(e) => {
                        // Only the error, unless part of the reply is sent.
                        if !sent {
                            out.truncate(mark);
                        }
                        server_error(out, &e);
                        Next::Continue
                    }
                };
            }
            Command::Delete { key, noreply } => (noreply, self.delete(key, out)),
            Command::Arith {
                key,
                delta,
                incr,
                noreply,
            } => (noreply, self.arith(key, delta, incr, out)),
            Command::Touch {
                key,
                exptime,
                noreply,
            } => (noreply, self.touch(key, exptime, out)),
            Command::FlushAll { delay, noreply } => (noreply, self.flush_all(delay, out)),
            Command::Stats { group } => {
                match group {
                    None => self.stats(out),
                    Some(_) => out.extend_from_slice(b"ERROR\r\n"),
                }
                (false, Ok(()))
            }
            Command::Version => {
                out.extend_from_slice(format!("VERSION {VERSION}\r\n").as_bytes());
                (false, Ok(()))
            }
            Command::Verbosity { noreply } => {
                out.extend_from_slice(b"OK\r\n");
                (noreply, Ok(()))
            }
            Command::Quit => return Next::Close,
            Command::Shutdown { mode_ok } => {
                match (self.allow_shutdown, mode_ok) {
                    (true, true) => return Next::Shutdown,
                    (true, false) => {
                        out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n")
                    }
                    (false, _) => out.extend_from_slice(b"ERROR: shutdown not enabled\r\n"),
                }
                (false, Ok(()))
            }
        };
        if let Err(e) = r {
            out.truncate(mark);
            server_error(out, &e);
        } else if noreply {
            out.truncate(mark);
        }
        Next::Continue
    }

    /// A slot of the gate, if there is one.
    fn slot(&self) -> Option<Slot<'_>> {
        self.gate.as_ref().map(Gate::enter)
    }

    fn stripe(&self, key: &[u8]) -> parking_lot::MutexGuard<'_, ()> {
        // FNV-1a: cheap, and enough to spread keys over the stripes.
        self.stripes[(crate::fnv::fnv1a(key) as usize) % STRIPES].lock()
    }

    /// The Unix time at which an item given `exptime` expires (0: never);
    /// `None` if it is gone already.
    fn expires_at(&self, exptime: i64) -> Option<u64> {
        let now = (self.clock)();
        let at = match exptime {
            0 => return Some(0),
            t if t < 0 => return None,
            t if t <= RELATIVE_EXPTIME_LIMIT => now + t as u64,
            t => t as u64,
        };
        (at > now).then_some(at)
    }

    /// The live item at `key`.
    fn current(&self, key: &[u8]) -> Result<Option<(Meta, Vec<u8>)>, Error> {
        let Some(value) = self.db.get(key)? else {
            return Ok(None);
        };
        let (meta, data) = item::decode(&value);
        if meta.expired((self.clock)()) {
            return Ok(None);
        }
        Ok(Some((meta, data.to_vec())))
    }

    fn new_cas(&self) -> u64 {
        self.next_cas.fetch_add(1, Relaxed)
    }

    /// Stores `parts` as the item at `key` (its stripe held), or removes
    /// the key if `expires` is `None` (an expiration already past).
    fn write(
        &self,
        key: &[u8],
        flags: u32,
        expires: Option<u64>,
        parts: &[&[u8]],
    ) -> Result<(), Error> {
        match expires {
            None => {
                self.db.delete(key)?;
            }
            Some(expires) => {
                let meta = Meta {
                    flags,
                    expires,
                    cas: self.new_cas(),
                };
                self.db.put(key, &item::encode(&meta, parts))?;
            }
        }
        Ok(())
    }

    fn store(
        &self,
        op: StoreOp,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        if data.len() > MAX_DATA_LEN {
            return self.refuse_too_large(op, key, out);
        }
        bump(&self.counters.cmd_set);
        let _stripe = self.stripe(key);
        let expires = self.expires_at(exptime);
        let current = match op {
            StoreOp::Set => None,
            _ => self.current(key)?,
        };
        let reply: &[u8] = match (op, current) {
            (StoreOp::Set, _) => {
                if let Err(e) = self.write(key, flags, expires, &[data]) {
                    // memcached unlinks the old item when a `set` fails for
                    // want of memory, so that no stale value is read.
                    if matches!(e, Error::PoolFull { .. }) {
                        let _ = self.db.delete(key);
                    }
                    return Err(e);
                }
                b"STORED\r\n"
            }
            (StoreOp::Add, None) => {
                self.write(key, flags, expires, &[data])?;
                b"STORED\r\n"
            }
            (StoreOp::Add, Some(_)) => b"NOT_STORED\r\n",
            (StoreOp::Replace | StoreOp::Append | StoreOp::Prepend, None) => b"NOT_STORED\r\n",
            (StoreOp::Replace, Some(_)) => {
                self.write(key, flags, expires, &[data])?;
                b"STORED\r\n"
            }
            (StoreOp::Append | StoreOp::Prepend, Some((meta, old))) => {
                if old.len() + data.len() > MAX_DATA_LEN {
                    // memcached's answer when the joined item is too large.
                    b"NOT_STORED\r\n"
                } else {
                    // memcached keeps the item's flags and expiration.
                    let parts: [&[u8]; 2] = if op == StoreOp::Append {
                        [&old, data]
                    } else {
                        [data, &old]
                    };
                    self.write(key, meta.flags, Some(meta.expires), &parts)?;
                    b"STORED\r\n"
                }
            }
            (StoreOp::Cas(_), None) => {
                bump(&self.counters.cas_misses);
                b"NOT_FOUND\r\n"
            }
            (StoreOp::Cas(cas), Some((meta, _))) if meta.cas != cas => {
                bump(&self.counters.cas_badval);
                b"EXISTS\r\n"
            }
            (StoreOp::Cas(_), Some(_)) => {
                bump(&self.counters.cas_hits);
                self.write(key, flags, expires, &[data])?;
                b"STORED\r\n"
            }
        };
        out.extend_from_slice(reply);
        Ok(())
    }

    /// A storage command whose data block is over [`MAX_DATA_LEN`] (the
    /// server reads and drops the block, then calls this): `SERVER_ERROR
    /// object too large for cache`, and a `set` removes the key's item, as
    /// memcached does, so that no stale value is read.
    pub fn refuse_too_large(
        &self,
        op: StoreOp,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        bump(&self.counters.cmd_set);
        if op == StoreOp::Set {
            let _slot = self.slot();
            let _stripe = self.stripe(key);
            self.db.delete(key)?;
        }
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        Ok(())
    }

    fn get(
        &self,
        keys: &[&[u8]],
        with_cas: bool,
        touch: Option<i64>,
        out: &mut Vec<u8>,
        spill: &mut dyn FnMut(&mut Vec<u8>) -> bool,
    ) -> Result<bool, Error> {
        if let Some(exptime) = touch {
            for &key in keys {
                bump(&self.counters.cmd_touch);
                {
                    // Neither held while the reply goes to the socket.
                    let _slot = self.slot();
                    let _stripe = self.stripe(key);
                    match self.current(key)? {
                        None => {
                            bump(&self.counters.get_misses);
                            bump(&self.counters.touch_misses);
                        }
                        Some((meta, data)) => {
                            bump(&self.counters.get_hits);
                            bump(&self.counters.touch_hits);
                            let expires = self.expires_at(exptime);
                            self.retime(key, meta, expires, &data)?;
                            let cas = with_cas.then_some(meta.cas);
                            value_line(out, key, meta.flags, &data, cas);
                        }
                    }
                }
                if out.len() > SPILL_AT && !spill(out) {
                    return Ok(false);
                }
            }
            out.extend_from_slice(b"END\r\n");
            return Ok(true);
        }
        let now = (self.clock)();
        let mut expired = Vec::new();
        for (g, group) in keys.chunks(GET_GROUP).enumerate() {
            let slot = self.slot();
            self.db.get_many_with(group, |i, value| {
                bump(&self.counters.cmd_get);
                let Some(value) = value else {
                    bump(&self.counters.get_misses);
                    return;
                };
                let (meta, data) = item::decode(value);
                if meta.expired(now) {
                    bump(&self.counters.get_misses);
                    bump(&self.counters.get_expired);
                    expired.push((g * GET_GROUP + i, meta.cas));
                    return;
                }
                bump(&self.counters.get_hits);
                value_line(
                    out,
                    group[i],
                    meta.flags,
                    data,
                    with_cas.then_some(meta.cas),
                );
            })?;
            drop(slot);
            if out.len() > SPILL_AT && !spill(out) {
                return Ok(false);
            }
        }
        out.extend_from_slice(b"END\r\n");
        // Removing what the reads found expired is housekeeping: the reply
        // is complete, and a failure here leaves the item to the next read.
        let _slot = (!expired.is_empty()).then(|| self.slot());
        for (i, cas) in expired {
            let _ = self.remove_if_expired(keys[i], cas);
        }
        Ok(true)
    }

    /// Rewrites the item at `key` (its stripe held) with a new expiration,
    /// keeping its CAS value (memcached's `touch` does); removes it if the
    /// expiration is already past.
    fn retime(
        &self,
        key: &[u8],
        meta: Meta,
        expires: Option<u64>,
        data: &[u8],
    ) -> Result<(), Error> {
        match expires {
            None => {
                self.db.delete(key)?;
            }
            Some(expires) => {
                let meta = Meta { expires, ..meta };
                self.db.put(key, &item::encode(&meta, &[data]))?;
            }
        }
        Ok(())
    }

    /// Removes the item at `key` if it is still the expired one a read saw
    /// (CAS value `cas`).
    fn remove_if_expired(&self, key: &[u8], cas: u64) -> Result<(), Error> {
        let _stripe = self.stripe(key);
        let now = (self.clock)();
        let same = self.db.get_with(key, |v| {
            let (meta, _) = item::decode(v);
            meta.cas == cas && meta.expired(now)
        })?;
        if same == Some(true) {
            self.db.delete(key)?;
        }
        Ok(())
    }

    fn delete(&self, key: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        let _stripe = self.stripe(key);
        // An expired item is not there for the client, but goes all the same.
        let live = self.current(key)?.is_some();
        let removed = self.db.delete(key)?;
        if live && removed {
            bump(&self.counters.delete_hits);
            out.extend_from_slice(b"DELETED\r\n");
        } else {
            bump(&self.counters.delete_misses);
            out.extend_from_slice(b"NOT_FOUND\r\n");
        }
        Ok(())
    }

    fn arith(&self, key: &[u8], delta: u64, incr: bool, out: &mut Vec<u8>) -> Result<(), Error> {
        let (hits, misses) = if incr {
            (&self.counters.incr_hits, &self.counters.incr_misses)
        } else {
            (&self.counters.decr_hits, &self.counters.decr_misses)
        };
        let _stripe = self.stripe(key);
        let Some((meta, data)) = self.current(key)? else {
            bump(misses);
            out.extend_from_slice(b"NOT_FOUND\r\n");
            return Ok(());
        };
        let Some(n) = leading_number(&data) else {
            out.extend_from_slice(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            );
            return Ok(());
        };
        bump(hits);
        // incr wraps at 2^64; decr stops at 0 (memcached's rules).
        let n = if incr {
            n.wrapping_add(delta)
        } else {
            n.saturating_sub(delta)
        };
        let text = n.to_string();
        self.write(key, meta.flags, Some(meta.expires), &[text.as_bytes()])?;
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\r\n");
        Ok(())
    }

    fn touch(&self, key: &[u8], exptime: i64, out: &mut Vec<u8>) -> Result<(), Error> {
        bump(&self.counters.cmd_touch);
        let _stripe = self.stripe(key);
        match self.current(key)? {
            None => {
                bump(&self.counters.touch_misses);
                out.extend_from_slice(b"NOT_FOUND\r\n");
            }
            Some((meta, data)) => {
                bump(&self.counters.touch_hits);
                self.retime(key, meta, self.expires_at(exptime), &data)?;
                out.extend_from_slice(b"TOUCHED\r\n");
            }
        }
        Ok(())
    }

    /// `flush_all [delay]`: removes every item given a CAS value before
    /// the flush (and every value not written by `serve`), now or once
    /// `delay` has passed (memcached's rules for a time: up to 30 days
    /// relative, above that a Unix time). A later `flush_all` replaces a
    /// pending one; a pending flush is forgotten if the server stops.
    fn flush_all(self: &Arc<Self>, delay: i64, out: &mut Vec<u8>) -> Result<(), Error> {
        bump(&self.counters.cmd_flush);
        let now = (self.clock)();
        let at = match delay {
            d if d <= 0 => now,
            d if d <= RELATIVE_EXPTIME_LIMIT => now + d as u64,
            d => d as u64,
        };
        if at <= now {
            *self.timer.deadline.lock() = None;
            self.flush_now()?;
        } else {
            self.start_timer()?;
            *self.timer.deadline.lock() = Some(at);
            self.timer.wake.notify_all();
        }
        out.extend_from_slice(b"OK\r\n");
        Ok(())
    }

    /// Starts the thread that runs delayed flushes, once.
    fn start_timer(self: &Arc<Self>) -> Result<(), Error> {
        if self.timer.started.swap(true, Relaxed) {
            return Ok(());
        }
        let (timer, clock, cache) = (
            Arc::clone(&self.timer),
            Arc::clone(&self.clock),
            Arc::downgrade(self),
        );
        std::thread::Builder::new()
            .name("memcached-flush-timer".into())
            .spawn(move || run_timer(&timer, &*clock, &cache))
            .map(drop)
            .map_err(|e| {
                self.timer.started.store(false, Relaxed);
                Error::io("start the delayed flush_all's timer", e)
            })
    }

    fn flush_now(&self) -> Result<(), Error> {
        self.flush_before(self.next_cas.load(Relaxed))
    }

    /// Removes every item whose CAS value is below `cutoff`: those written
    /// before the flush (a change racing with the flush gets a value above
    /// it and stays).
    fn flush_before(&self, cutoff: u64) -> Result<(), Error> {
        for pair in self.db.range(Bound::Unbounded, Bound::Unbounded) {
            let (key, value) = pair?;
            if item::decode(&value).0.cas >= cutoff {
                continue;
            }
            let _stripe = self.stripe(&key);
            // Written again since the scan read it: newer than the flush.
            let older = self.db.get_with(&key, |v| item::decode(v).0.cas < cutoff)?;
            if older == Some(true) {
                self.db.delete(&key)?;
            }
        }
        Ok(())
    }

    fn stats(&self, out: &mut Vec<u8>) {
        let c = &self.counters;
        let db = self.db.stats();
        let mut s = String::new();
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("pid", &std::process::id());
        stat("uptime", &self.started.elapsed().as_secs());
        stat("time", &(self.clock)());
        stat("version", &VERSION);
        stat("pointer_size", &(usize::BITS));
        for (name, v) in [
            ("curr_connections", &c.curr_connections),
            ("total_connections", &c.total_connections),
            ("rejected_connections", &c.rejected_connections),
            ("cmd_get", &c.cmd_get),
            ("cmd_set", &c.cmd_set),
            ("cmd_flush", &c.cmd_flush),
            ("cmd_touch", &c.cmd_touch),
            ("get_hits", &c.get_hits),
            ("get_misses", &c.get_misses),
            ("get_expired", &c.get_expired),
            ("delete_misses", &c.delete_misses),
            ("delete_hits", &c.delete_hits),
            ("incr_misses", &c.incr_misses),
            ("incr_hits", &c.incr_hits),
            ("decr_misses", &c.decr_misses),
            ("decr_hits", &c.decr_hits),
            ("cas_misses", &c.cas_misses),
            ("cas_hits", &c.cas_hits),
            ("cas_badval", &c.cas_badval),
            ("touch_hits", &c.touch_hits),
            ("touch_misses", &c.touch_misses),
        ] {
            stat(name, &v.load(Relaxed));
        }
        stat("curr_items", &db.keys);
        stat("bytes", &db.pm_bytes);
        stat("limit_maxbytes", &db.pool_size);
        stat("item_size_max", &MAX_DATA_LEN);
        stat("engine", &db.engine);
        stat("dram_bytes", &db.dram_bytes);
        s.push_str("END\r\n");
        out.extend_from_slice(s.as_bytes());
    }
}

/// The delayed-flush thread: sleeps until the deadline (checking the clock
/// every 100 ms, so that a deadline moved earlier is kept), flushes, and
/// ends within a second of the cache.
fn run_timer(timer: &FlushTimer, clock: &(dyn Fn() -> u64 + Send + Sync), cache: &Weak<Cache>) {
    let mut deadline = timer.deadline.lock();
    while cache.strong_count() > 0 {
        match *deadline {
            None => {
                timer.wake.wait_for(&mut deadline, Duration::from_secs(1));
            }
            Some(at) if clock() >= at => {
                *deadline = None;
                drop(deadline);
                if let Some(cache) = cache.upgrade() {
                    let _slot = cache.slot();
                    // Nobody waits for this; a failure shows in `stats`.
                    let _ = cache.flush_now();
                }
                deadline = timer.deadline.lock();
            }
            Some(_) => {
                timer
                    .wake
                    .wait_for(&mut deadline, Duration::from_millis(100));
            }
        }
    }
}

/// The number an item's data holds for `incr`/`decr`, read as memcached
/// reads it (`strtoull`, then a check of what follows): leading white
/// space, an optional `+`, decimal digits that fit in 64 bits, then the
/// end of the data or white space (`"5 abc"` is 5).
fn leading_number(data: &[u8]) -> Option<u64> {
    let s = data.trim_ascii_start();
    let s = s.strip_prefix(b"+").unwrap_or(s);
    let end = s
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    if end == 0 || !s.get(end).is_none_or(u8::is_ascii_whitespace) {
        return None;
    }
    std::str::from_utf8(&s[..end]).ok()?.parse().ok()
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`.
fn value_line(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    let _ = match cas {
        Some(cas) => write!(Buf(out), " {flags} {} {cas}\r\n", data.len()),
        None => write!(Buf(out), " {flags} {}\r\n", data.len()),
    };
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `SERVER_ERROR <message>` on one line.
pub fn server_error(out: &mut Vec<u8>, e: &Error) {
    let msg = match e {
        Error::PoolFull { .. } => "out of memory storing object".to_string(),
        e => e.to_string().replace(['\r', '\n'], " "),
    };
    out.extend_from_slice(format!("SERVER_ERROR {msg}\r\n").as_bytes());
}

/// `fmt::Write` into a byte buffer.
struct Buf<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Buf<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::parse;
    use crate::Options;

    /// A cache on an anonymous `hart` pool whose clock the test sets.
    fn cache() -> (Arc<Cache>, Arc<AtomicU64>) {
        let now = Arc::new(AtomicU64::new(1_800_000_000));
        let clock = Arc::clone(&now);
        let db = Db::create_anonymous(&Options::with_engine("hart")).unwrap();
        let config = Config {
            allow_shutdown: false,
            ..Config::default()
        };
        let cache = Cache::with_clock(db, &config, Arc::new(move || clock.load(Relaxed)));
        (Arc::new(cache), now)
    }

    /// Runs one command line (and its data block) and returns the reply.
    fn run(cache: &Arc<Cache>, line: &str, data: &str) -> String {
        let mut out = Vec::new();
        let cmd = parse(line.as_bytes()).unwrap();
        assert_eq!(
            cache.execute(&cmd, data.as_bytes(), &mut out, &mut |_| true),
            Next::Continue
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn relative_and_absolute_expiration_times_run_out() {
        let (c, now) = cache();
        let t = now.load(Relaxed);
        assert_eq!(run(&c, "set rel 0 10 1", "a"), "STORED\r\n");
        assert_eq!(
            run(&c, &format!("set abs 0 {} 1", t + 20), "b"),
            "STORED\r\n"
        );
        assert_eq!(run(&c, "set never 0 0 1", "c"), "STORED\r\n");
        let all = "get rel abs never";
        assert_eq!(
            run(&c, all, ""),
            "VALUE rel 0 1\r\na\r\nVALUE abs 0 1\r\nb\r\nVALUE never 0 1\r\nc\r\nEND\r\n"
        );
        now.store(t + 10, Relaxed);
        assert_eq!(
            run(&c, all, ""),
            "VALUE abs 0 1\r\nb\r\nVALUE never 0 1\r\nc\r\nEND\r\n"
        );
        // The read that found `rel` expired removed it.
        assert_eq!(c.db().get(b"rel").unwrap(), None);
        now.store(t + 20, Relaxed);
        assert_eq!(run(&c, all, ""), "VALUE never 0 1\r\nc\r\nEND\r\n");
        assert_eq!(c.counters.get_expired.load(Relaxed), 2);
        // An expired item is absent for add, replace, incr, delete, touch.
        assert_eq!(run(&c, "set e 0 5 1", "1"), "STORED\r\n");
        now.store(t + 30, Relaxed);
        assert_eq!(run(&c, "replace e 0 0 1", "x"), "NOT_STORED\r\n");
        assert_eq!(run(&c, "incr e 1", ""), "NOT_FOUND\r\n");
        assert_eq!(run(&c, "touch e 100", ""), "NOT_FOUND\r\n");
        assert_eq!(run(&c, "delete e", ""), "NOT_FOUND\r\n");
        assert_eq!(run(&c, "add e 0 0 1", "y"), "STORED\r\n");
        assert_eq!(run(&c, "get e", ""), "VALUE e 0 1\r\ny\r\nEND\r\n");
    }

    #[test]
    fn a_time_already_past_removes_the_key() {
        let (c, now) = cache();
        let t = now.load(Relaxed);
        assert_eq!(run(&c, "set k 0 0 1", "a"), "STORED\r\n");
        assert_eq!(run(&c, "set k 0 -1 1", "b"), "STORED\r\n");
        assert_eq!(c.db().get(b"k").unwrap(), None);
        assert_eq!(run(&c, "set k 0 0 1", "a"), "STORED\r\n");
        assert_eq!(run(&c, &format!("set k 0 {} 1", t - 1), "b"), "STORED\r\n");
        assert_eq!(run(&c, "get k", ""), "END\r\n");
        assert_eq!(run(&c, "set k 0 0 1", "a"), "STORED\r\n");
        assert_eq!(run(&c, "touch k -1", ""), "TOUCHED\r\n");
        assert_eq!(c.db().get(b"k").unwrap(), None);
    }

    #[test]
    fn touch_and_gat_move_the_expiration_and_keep_the_cas_value() {
        let (c, now) = cache();
        let t = now.load(Relaxed);
        assert_eq!(run(&c, "set k 7 10 2", "hi"), "STORED\r\n");
        let cas = |c: &Arc<Cache>| item::decode(&c.db().get(b"k").unwrap().unwrap()).0.cas;
        let before = cas(&c);
        assert_eq!(run(&c, "touch k 100", ""), "TOUCHED\r\n");
        now.store(t + 50, Relaxed);
        assert_eq!(
            run(&c, "gats 1000 k missing", ""),
            format!("VALUE k 7 2 {before}\r\nhi\r\nEND\r\n")
        );
        assert_eq!(cas(&c), before);
        now.store(t + 1000, Relaxed);
        assert_eq!(run(&c, "get k", ""), "VALUE k 7 2\r\nhi\r\nEND\r\n");
        now.store(t + 1050, Relaxed);
        assert_eq!(run(&c, "get k", ""), "END\r\n");
        assert_eq!(c.counters.touch_hits.load(Relaxed), 2);
        assert_eq!(c.counters.touch_misses.load(Relaxed), 1);
    }

    #[test]
    fn append_keeps_flags_and_expiration_and_incr_keeps_flags() {
        let (c, now) = cache();
        let t = now.load(Relaxed);
        assert_eq!(run(&c, "set k 3 10 1", "b"), "STORED\r\n");
        assert_eq!(run(&c, "append k 9 0 1", "c"), "STORED\r\n");
        assert_eq!(run(&c, "prepend k 9 0 1", "a"), "STORED\r\n");
        assert_eq!(run(&c, "get k", ""), "VALUE k 3 3\r\nabc\r\nEND\r\n");
        now.store(t + 10, Relaxed);
        assert_eq!(run(&c, "get k", ""), "END\r\n");
        assert_eq!(run(&c, "set n 12 0 2", "99"), "STORED\r\n");
        assert_eq!(run(&c, "incr n 1", ""), "100\r\n");
        assert_eq!(run(&c, "get n", ""), "VALUE n 12 3\r\n100\r\nEND\r\n");
        assert_eq!(
            run(&c, "set n 0 0 20", "18446744073709551615"),
            "STORED\r\n"
        );
        assert_eq!(run(&c, "incr n 2", ""), "1\r\n");
        assert_eq!(run(&c, "decr n 5", ""), "0\r\n");
        assert_eq!(run(&c, "set n 0 0 2", "-1"), "STORED\r\n");
        assert_eq!(
            run(&c, "incr n 1", ""),
            "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
        );
    }

    #[test]
    fn flush_all_removes_what_was_there_and_only_that() {
        let (c, _) = cache();
        for i in 0..600 {
            assert_eq!(run(&c, &format!("set k{i} 0 0 1"), "v"), "STORED\r\n");
        }
        c.db().put(b"raw", b"not an item").unwrap();
        assert_eq!(run(&c, "flush_all noreply", ""), "");
        assert_eq!(c.db().len(), 0);
        // A flush whose cut-off was taken before `after` was written (a
        // write racing with the flush's walk) leaves it, and the items
        // written before.
        assert_eq!(run(&c, "set before 0 0 1", "v"), "STORED\r\n");
        let cutoff = c.next_cas.load(Relaxed);
        assert_eq!(run(&c, "set after 0 0 1", "v"), "STORED\r\n");
        c.flush_before(cutoff).unwrap();
        assert_eq!(
            run(&c, "get before after", ""),
            "VALUE after 0 1\r\nv\r\nEND\r\n"
        );
        c.flush_now().unwrap();
        assert_eq!(c.db().len(), 0);
    }

    /// A value put by other means that starts with an item's magic is
    /// served whole and is present to `add` (from a review: with an
    /// unchecked 24-byte header it read as an expired item, a miss, and
    /// `add` overwrote it).
    #[test]
    fn a_value_of_ones_own_that_starts_with_the_magic_is_served_whole() {
        let (c, _) = cache();
        let mut raw = b"pmc1".to_vec();
        raw.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        raw.extend_from_slice(&[0; 8]);
        raw.extend_from_slice(b"tail");
        c.db().put(b"k", &raw).unwrap();
        let mut want = format!("VALUE k 0 {}\r\n", raw.len()).into_bytes();
        want.extend_from_slice(&raw);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(run(&c, "get k", "").as_bytes(), &want[..]);
        assert_eq!(run(&c, "add k 0 0 1", "v"), "NOT_STORED\r\n");
        assert_eq!(c.db().get(b"k").unwrap().unwrap(), raw);
        c.db()
            .put(b"t", b"pmc2 and then some text of one's own")
            .unwrap();
        assert_eq!(
            run(&c, "get t", ""),
            "VALUE t 0 36\r\npmc2 and then some text of one's own\r\nEND\r\n"
        );
    }

    #[test]
    fn values_too_large_and_a_full_pool_are_server_errors() {
        let (c, _) = cache();
        let big = "x".repeat(MAX_DATA_LEN + 1);
        let line = format!("set k 0 0 {}", big.len());
        assert_eq!(
            run(&c, &line, &big),
            "SERVER_ERROR object too large for cache\r\n"
        );
        let most = "x".repeat(MAX_DATA_LEN);
        assert_eq!(
            run(&c, &format!("set k 0 0 {}", most.len()), &most),
            "STORED\r\n"
        );
        assert_eq!(run(&c, "append k 0 0 1", "y"), "NOT_STORED\r\n");
        // A `set` refused for its size removes the key's old item (no stale
        // read); an `add` leaves it.
        assert_eq!(
            run(&c, &format!("add k 0 0 {}", big.len()), &big),
            "SERVER_ERROR object too large for cache\r\n"
        );
        assert!(c.db().get(b"k").unwrap().is_some());
        assert_eq!(
            run(&c, &format!("set k 0 0 {}", big.len()), &big),
            "SERVER_ERROR object too large for cache\r\n"
        );
        assert_eq!(c.db().get(b"k").unwrap(), None);
        let mut out = Vec::new();
        server_error(&mut out, &Error::PoolFull { requested: 64 });
        assert_eq!(out, b"SERVER_ERROR out of memory storing object\r\n");
    }

    #[test]
    fn noreply_silences_replies_and_shutdown_needs_leave_to_stop() {
        let (c, _) = cache();
        assert_eq!(run(&c, "set k 0 0 1 noreply", "v"), "");
        assert_eq!(run(&c, "add k 0 0 1 noreply", "w"), "");
        assert_eq!(run(&c, "get k", ""), "VALUE k 0 1\r\nv\r\nEND\r\n");
        assert_eq!(run(&c, "shutdown", ""), "ERROR: shutdown not enabled\r\n");
        let mut out = Vec::new();
        assert_eq!(
            c.execute(&Command::Quit, &[], &mut out, &mut |_| true),
            Next::Close
        );
    }

    /// Waits (up to 3 s) for `cond`, which the flush timer makes true.
    fn eventually(cond: impl Fn() -> bool) -> bool {
        for _ in 0..300 {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    #[test]
    fn a_delayed_flush_keeps_one_deadline_that_a_later_flush_replaces() {
        let (c, now) = cache();
        let t = now.load(Relaxed);
        assert_eq!(run(&c, "set a 0 0 1", "1"), "STORED\r\n");
        // flush_all 2, then flush_all 0: the delayed one is gone.
        assert_eq!(run(&c, "flush_all 2", ""), "OK\r\n");
        assert_eq!(run(&c, "flush_all 0", ""), "OK\r\n");
        assert_eq!(run(&c, "set b 0 0 1", "2"), "STORED\r\n");
        now.store(t + 3, Relaxed);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(run(&c, "get a b", ""), "VALUE b 0 1\r\n2\r\nEND\r\n");
        // flush_all 4, then flush_all 1: one deadline, the second's; what
        // is set before it goes, what is set after it stays.
        let t = t + 3;
        assert_eq!(run(&c, "flush_all 4", ""), "OK\r\n");
        assert_eq!(run(&c, "flush_all 1", ""), "OK\r\n");
        now.store(t + 1, Relaxed);
        assert!(eventually(|| c.db().is_empty()), "the flush at t + 1 ran");
        assert_eq!(run(&c, "set late 0 0 1", "3"), "STORED\r\n");
        now.store(t + 5, Relaxed);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(run(&c, "get late", ""), "VALUE late 0 1\r\n3\r\nEND\r\n");
        // A time above 30 days is a Unix time.
        let t = t + 5;
        assert_eq!(run(&c, &format!("flush_all {}", t + 2), ""), "OK\r\n");
        now.store(t + 1, Relaxed);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(c.db().len(), 1);
        now.store(t + 2, Relaxed);
        assert!(
            eventually(|| c.db().is_empty()),
            "the flush at the Unix time ran"
        );
    }

    /// Threads of this process.
    fn threads() -> usize {
        std::fs::read_dir("/proc/self/task").unwrap().count()
    }

    #[test]
    fn many_delayed_flushes_start_one_thread() {
        let (c, _) = cache();
        let before = threads();
        for _ in 0..500 {
            assert_eq!(run(&c, "flush_all 86400 noreply", ""), "");
        }
        // Other tests' threads come and go: allow them some.
        assert!(
            threads() < before + 20,
            "{before} threads before, {} after",
            threads()
        );
        assert!(c.timer.started.load(Relaxed));
    }

    #[test]
    fn incr_reads_a_number_as_memcached_does() {
        for (data, n) in [
            (&b"5"[..], Some(5)),
            (b" 5", Some(5)),
            (b"+5", Some(5)),
            (b"5\t", Some(5)),
            (b"5 abc", Some(5)),
            (b"000000000000000000001", Some(1)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"-1", None),
            (b"5abc", None),
            (b"abc", None),
            (b"", None),
            (b" ", None),
        ] {
            assert_eq!(
                leading_number(data),
                n,
                "{:?}",
                String::from_utf8_lossy(data)
            );
        }
    }

    /// Stores a 100,000-byte item at `k` and returns its data.
    fn large_item(c: &Arc<Cache>) -> String {
        let value = "v".repeat(100_000);
        let line = format!("set k 0 0 {}", value.len());
        assert_eq!(run(c, &line, &value), "STORED\r\n");
        value
    }

    #[test]
    fn a_long_retrieval_is_handed_on_as_it_is_read() {
        let (c, _) = cache();
        let value = large_item(&c);
        let line = format!("get{}", " k".repeat(1000));
        let cmd = parse(line.as_bytes()).unwrap();
        let (mut sent, mut largest) = (0usize, 0usize);
        let mut out = Vec::new();
        let mut spill = |o: &mut Vec<u8>| {
            sent += o.len();
            largest = largest.max(o.len());
            o.clear();
            true
        };
        c.execute(&cmd, &[], &mut out, &mut spill);
        let block = "VALUE k 0 100000\r\n".len() + value.len() + 2;
        assert_eq!(sent + out.len(), 1000 * block + "END\r\n".len());
        assert!(
            largest <= SPILL_AT + GET_GROUP * block,
            "{largest} bytes at once"
        );
        assert!(out.ends_with(b"END\r\n"));
    }

    #[test]
    fn a_client_gone_mid_reply_closes_the_connection() {
        let (c, _) = cache();
        large_item(&c);
        let line = format!("get{}", " k".repeat(100));
        let cmd = parse(line.as_bytes()).unwrap();
        let mut out = Vec::new();
        assert_eq!(c.execute(&cmd, &[], &mut out, &mut |_| false), Next::Close);
    }

    #[test]
    fn a_get_that_cannot_remove_an_expired_item_still_answers_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ro.pool");
        let now = Arc::new(AtomicU64::new(1_800_000_000));
        let clock: Clock = {
            let now = Arc::clone(&now);
            Arc::new(move || now.load(Relaxed))
        };
        let config = Config::default();
        let db = Db::create(&path, &Options::with_engine("wort")).unwrap();
        let c = Arc::new(Cache::with_clock(db, &config, Arc::clone(&clock)));
        assert_eq!(run(&c, "set k 0 10 1", "v"), "STORED\r\n");
        drop(Arc::try_unwrap(c).ok().unwrap().into_db());
        // On a read-only handle the removal fails: the reply is still
        // one `END`.
        let db = Db::open_read_only(&path, &Options::default()).unwrap();
        let c = Arc::new(Cache::with_clock(db, &config, clock));
        now.fetch_add(10, Relaxed);
        assert_eq!(run(&c, "get k", ""), "END\r\n");
    }
}
