//! The engine interface, and the list of engines.
//!
//! An engine is an index over a [`Pool`]. Engines with their own concurrency
//! control implement [`Engine`] directly; the others implement
//! [`SerialEngine`] (mutation takes `&mut self`) and are wrapped in a
//! reader-writer lock by [`Locked`], which also runs their lock-free point
//! reads ([`OptimisticRead`]) where they offer one. Keys and values arrive validated by
//! [`crate::Db`]: 1 to 250 bytes of key, at most 1 MiB of value.
//!
//! Adding an engine takes one line in [`ENGINES`].

use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::pm::Pool;
pub use locked::{
    Locked, OptimisticRead, Probe, Reads, ValueBuf, BATCH, OPTIMISTIC_TRIES, VALUE_BUF,
};

pub mod art_bplus;
pub mod dptree;
pub mod fastfair;
pub mod fptree;
pub mod hart;
mod locked;
pub mod pmlog;
pub mod radix;
#[cfg(test)]
pub(crate) mod testing;

/// This thread's number: threads are numbered 0, 1, 2, ... in the order
/// they first ask. Engines share per-thread state by it (`hart`'s
/// allocation stripes, the radix trees' heap caches), so that up to as
/// many threads as they have shares never share one.
pub(crate) fn thread_number() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.try_with(|m| {
        if m.get() == usize::MAX {
            m.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        m.get()
    })
    .unwrap_or(0)
}

/// Longest key (memcached's limit).
pub const MAX_KEY_LEN: usize = 250;
/// Longest value.
pub const MAX_VALUE_LEN: usize = 1 << 20;

/// An error, as [`crate::Db`] gives it, unless `key` has 1 to
/// [`MAX_KEY_LEN`] bytes and `value` at most [`MAX_VALUE_LEN`]. Every
/// engine's `put` and `put_many` check this themselves, because
/// [`crate::Db::engine`] reaches them without `Db`'s checks: a key the
/// layout cannot hold would otherwise be written as a record that reads
/// back as damage (pmlog, fptree) or trip an assertion (hart).
pub(crate) fn check_item(key: &[u8], value: &[u8]) -> Result<()> {
    crate::db::check_key_len(key, MAX_KEY_LEN)?;
    crate::db::check_value_len(value, MAX_VALUE_LEN)
}

/// [`check_item`] for every item, before any is applied.
pub(crate) fn check_items(items: &[(&[u8], &[u8])]) -> Result<()> {
    items.iter().try_for_each(|(k, v)| check_item(k, v))
}

/// Whether `key` is at or past a scan's lower bound `lo` (past it, for an
/// excluded bound): the engines' scans and [`crate::Db`]'s range share it.
#[inline]
pub(crate) fn above_lo(key: &[u8], lo: Bound<&[u8]>) -> bool {
    match lo {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    }
}

/// Whether `key` is at or before a scan's upper bound `hi` (before it, for
/// an excluded bound).
#[inline]
pub(crate) fn below_hi(key: &[u8], hi: Bound<&[u8]>) -> bool {
    match hi {
        Bound::Included(h) => key <= h,
        Bound::Excluded(h) => key < h,
        Bound::Unbounded => true,
    }
}

/// What `put` does when the key is present or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// Insert or replace.
    Upsert,
    /// Insert only; leave an existing key alone.
    Insert,
    /// Replace only; do nothing if the key is absent.
    Update,
}

/// What `put` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The key was absent and is now present.
    Inserted,
    /// The key was present; its value was replaced.
    Replaced,
    /// Nothing changed: `Insert` found the key, or `Update` did not.
    Unchanged,
}

/// What an engine supports natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Scans return keys in order without sorting.
    pub ordered_scan: bool,
    /// The engine synchronises its own readers and writers.
    pub concurrent: bool,
    /// Longest key the layout holds.
    pub max_key_len: usize,
    /// Longest value the layout holds.
    pub max_value_len: usize,
}

/// What a consistency check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    /// Keys found by walking the persistent structure.
    pub keys: u64,
    /// Every PM block the engine references (offsets). [`crate::Db::check`]
    /// compares them with the allocator's allocated blocks.
    pub referenced_blocks: Vec<u64>,
}

/// A scan callback: gets each key and value in order; returns `false` to stop.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

/// A concurrent engine.
pub trait Engine: Send + Sync {
    /// The engine id (as stored in the pool header).
    fn name(&self) -> &'static str;
    /// What it supports natively.
    fn capabilities(&self) -> Capabilities;
    /// The pool it lives in.
    fn pool(&self) -> &Arc<Pool>;
    /// Calls `f` with the value of `key`, if present; returns whether it was.
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool>;
    /// Calls `f(i, value)` for each `keys[i]`, in order, with `None` where
    /// the key is absent; stops at the first error. The default searches
    /// one key after another; engines that overlap the searches of several
    /// keys override it (the radix trees, through [`Locked`]).
    fn get_many(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        for (i, key) in keys.iter().enumerate() {
            if !self.get_with(key, &mut |v| f(i, Some(v)))? {
                f(i, None);
            }
        }
        Ok(())
    }
    /// Inserts or replaces per `mode`. Durable on return. A key or value
    /// out of the API's limits is refused as [`crate::Db::put`] refuses it
    /// ([`crate::Error::EmptyKey`], [`crate::Error::KeyTooLong`],
    /// [`crate::Error::ValueTooLong`]), whatever `mode`.
    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome>;
    /// Upserts `items[i] = (key, value)` in order (a key given twice ends
    /// with its last value); every item is durable on return. Not atomic as
    /// a whole: on an error, the items before the one that failed are
    /// applied and durable and the rest are not; after a crash during the
    /// call, each key holds its value from before the call or one the call
    /// gave it. An item out of the API's limits (see [`Engine::put`]) is
    /// refused before any item is applied. The default puts one item after
    /// another; engines that
    /// share fences between items override it (`hart`, and the radix
    /// trees through [`Locked`]).
    fn put_many(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        check_items(items)?;
        for (key, value) in items {
            self.put(key, value, PutMode::Upsert)?;
        }
        Ok(())
    }
    /// Removes `key`; returns whether it was present. Durable on return.
    fn delete(&self, key: &[u8]) -> Result<bool>;
    /// Calls `f` for each key in `lo..hi` (byte order) until it returns false.
    /// `f` may run under the engine's read locks (the radix trees' striped
    /// scans hold one stripe at a time, a whole-tree scan all of them):
    /// it must not call back into the engine, where a write would wait
    /// for itself.
    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()>;
    /// Number of keys.
    fn len(&self) -> u64;
    /// Whether there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Walks the persistent structure and checks its invariants.
    fn check(&self) -> Result<CheckReport>;
    /// DRAM bytes held by the index (estimate from its own structures).
    fn dram_bytes(&self) -> u64;
    /// The settings this index runs with, keys with the engine's prefix as
    /// [`EngineConfig`] takes them: those fixed when the pool was made and
    /// those chosen for this run (`pmindex info` prints them). None by
    /// default.
    fn settings(&self) -> EngineConfig {
        EngineConfig::new()
    }
}

/// An engine without its own concurrency control.
pub trait SerialEngine: Send + Sync {
    /// See [`Engine::name`].
    fn name(&self) -> &'static str;
    /// See [`Engine::capabilities`]; `concurrent` is set by [`Locked`].
    fn capabilities(&self) -> Capabilities;
    /// See [`Engine::get_with`].
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool>;
    /// See [`Engine::put`].
    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome>;
    /// See [`Engine::put_many`]; [`Locked`] holds its write lock over at
    /// most [`BATCH`] items per call. The default puts one after another.
    fn put_many(&mut self, items: &[(&[u8], &[u8])]) -> Result<()> {
        for (key, value) in items {
            self.put(key, value, PutMode::Upsert)?;
        }
        Ok(())
    }
    /// See [`Engine::delete`].
    fn delete(&mut self, key: &[u8]) -> Result<bool>;
    /// See [`Engine::scan`].
    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()>;
    /// See [`Engine::len`].
    fn len(&self) -> u64;
    /// See [`Engine::is_empty`].
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// See [`Engine::check`].
    fn check(&self) -> Result<CheckReport>;
    /// See [`Engine::dram_bytes`].
    fn dram_bytes(&self) -> u64;
    /// The settings this index runs with, keys with the engine's prefix as
    /// [`EngineConfig`] takes them: those fixed when the pool was made and
    /// those chosen for this run (`pmindex info` prints them). None by
    /// default.
    fn settings(&self) -> EngineConfig {
        EngineConfig::new()
    }
    /// A point search that [`Locked`] may run without its lock (see
    /// [`OptimisticRead`] for what it must guarantee); none by default.
    fn optimistic_reader(&self) -> Option<Box<dyn OptimisticRead>> {
        None
    }
}

/// Engine settings, `engine.key = value` (for example
/// `hart.persist_order = paper`). Each engine reads the keys with its own
/// prefix and rejects unknown ones; keys of other engines are ignored.
pub type EngineConfig = std::collections::BTreeMap<String, String>;

/// The settings in `config` for engine `name`, without the prefix. Fails on a
/// key with this prefix that is not in `known`.
pub fn settings<'c>(
    config: &'c EngineConfig,
    name: &str,
    known: &[&str],
) -> crate::Result<Vec<(&'c str, &'c str)>> {
    let mut out = Vec::new();
    for (k, v) in config {
        let Some(rest) = k.strip_prefix(name).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        if !known.contains(&rest) {
            return Err(crate::Error::InvalidArgument(if known.is_empty() {
                format!("unknown setting `{k}`: engine {name} has no settings")
            } else {
                format!(
                    "unknown setting `{k}` for engine {name} (known: {})",
                    known
                        .iter()
                        .map(|s| format!("{name}.{s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }));
        }
        out.push((rest, v.as_str()));
    }
    Ok(out)
}

/// Adds one setting `KEY=VALUE` for `engine` to `config`, as the command
/// line and the bench's `ENGINE:KEY=VALUE` entries give them: KEY with or
/// without the engine's prefix (`stripes=hash_key` is `hart.stripes=
/// hash_key` for `hart`), spaces around KEY and VALUE ignored, VALUE
/// everything after the first `=`. Returns the key without its prefix.
/// Refused, with `InvalidArgument`: no `=`, an empty key or value, a key
/// with another engine's prefix (the engine would ignore it: see
/// [`EngineConfig`]), and a key already in `config`. Whether the engine
/// knows the key is its own check, when a pool is made or opened.
pub fn add_setting(config: &mut EngineConfig, engine: &str, kv: &str) -> Result<String> {
    let invalid = |m: String| Err(crate::Error::InvalidArgument(m));
    let Some((k, v)) = kv.split_once('=').map(|(k, v)| (k.trim(), v.trim())) else {
        return invalid(format!("setting `{kv}` is not KEY=VALUE"));
    };
    let k = k
        .strip_prefix(engine)
        .and_then(|r| r.strip_prefix('.'))
        .unwrap_or(k);
    if k.is_empty() || v.is_empty() {
        return invalid(format!("setting `{kv}` needs a key and a value"));
    }
    if let Some((other, _)) = k.split_once('.') {
        return invalid(format!(
            "setting `{k}` is for engine `{other}`, not {engine}"
        ));
    }
    if config
        .insert(format!("{engine}.{k}"), v.to_string())
        .is_some()
    {
        return invalid(format!("setting `{k}` is given twice"));
    }
    Ok(k.to_string())
}

/// Makes (or recovers) an engine in a pool, with its settings.
pub type EngineCtor = fn(Arc<Pool>, &EngineConfig) -> Result<Box<dyn Engine>>;

/// How an engine is made and reopened.
pub struct EngineInfo {
    /// The id stored in pool headers and used on the command line.
    pub name: &'static str,
    /// The design it implements.
    pub paper: &'static str,
    /// Builds a new, empty index in a freshly created pool.
    pub create: EngineCtor,
    /// Recovers the index from an existing pool.
    pub open: EngineCtor,
}

/// Every engine in this build. One line per engine.
pub const ENGINES: &[EngineInfo] = &[
    pmlog::INFO,
    hart::INFO,
    radix::WORT_INFO,
    radix::WOART_INFO,
    radix::ART_COW_INFO,
    fptree::INFO,
    dptree::INFO,
    fastfair::INFO,
    art_bplus::INFO,
];

/// Refuses a setting whose key names no engine: one without a prefix
/// (`hash_key_len` for `hart.hash_key_len`, which every engine would
/// ignore: [`EngineConfig`]) or with a prefix that is no engine's. Keys of
/// other engines pass. [`crate::Db`] checks this before it makes or opens
/// a pool.
pub fn check_setting_keys(config: &EngineConfig) -> crate::Result<()> {
    for k in config.keys() {
        let named = k
            .split_once('.')
            .is_some_and(|(e, rest)| !rest.is_empty() && ENGINES.iter().any(|i| i.name == e));
        if !named {
            return Err(crate::Error::InvalidArgument(format!(
                "setting `{k}` names no engine: keys are ENGINE.KEY, such as \
                 `hart.hash_key_len` (engines: {})",
                ENGINES
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

/// Looks an engine up by name.
pub fn find(name: &str) -> crate::Result<&'static EngineInfo> {
    ENGINES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| crate::Error::UnknownEngine {
            name: name.to_string(),
            available: ENGINES
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}
