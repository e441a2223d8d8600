//! The engine-independent key-value API.
//!
//! ```no_run
//! use pmindex::{Db, Options};
//! let db = Db::create("/tmp/example.pool", &Options::default())?;
//! db.put(b"hello", b"world")?;
//! assert_eq!(db.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! # Ok::<(), pmindex::Error>(())
//! ```
//!
//! Keys are 1 to 250 bytes, ordered byte-lexicographically; values are 0 to
//! 1 MiB. When `put`, `insert`, `update` or `delete` returns, the change is
//! durable (on an ordinary file: it survives a killed process; on real PM
//! mapped with `MAP_SYNC`: it survives power loss).
//!
//! An error from a change means it was not made, with one exception: in a
//! damaged pool ([`Error::Corrupt`]), a change can commit and then fail to
//! give back a block it unlinked. It then stands (and [`Db::len`] counts
//! it) and the error is returned; what was not given back stays allocated,
//! and the next open frees it where the pool's lists still reach it (where
//! they do not, `check` reports it as a leak).

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use crate::engine::{
    self, CheckReport, Engine, EngineConfig, PutMode, PutOutcome, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::pm::{
    self, Fault, MappingMode, PersistConfig, PmCounters, PmObserver, Pool, PoolConfig, Usage,
};

/// The engine used when none is named.
pub const DEFAULT_ENGINE: &str = "pmlog";
/// The pool size used when none is given: 256 MiB (a sparse file).
pub const DEFAULT_POOL_SIZE: u64 = 256 << 20;

/// How to create or open a database.
#[derive(Clone)]
pub struct Options {
    /// The engine; `None` means [`DEFAULT_ENGINE`] at create and "whatever the
    /// pool holds" at open. At open, a name that differs from the pool's is
    /// [`Error::WrongEngine`].
    pub engine: Option<String>,
    /// Pool size at create.
    pub pool_size: u64,
    /// Flush instruction and latency emulation.
    pub persist: PersistConfig,
    /// Crash-simulator hook.
    pub observer: Option<Arc<dyn PmObserver>>,
    /// A persist to drop on purpose (the crash harness's self-test only).
    pub fault: Option<Fault>,
    /// Engine settings such as `hart.persist_order = paper`.
    pub engine_config: EngineConfig,
    /// Map the pool with base pages only ([`PoolConfig::small_pages`]);
    /// by default a pool not on DAX is advised for transparent huge pages.
    pub small_pages: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            engine: None,
            pool_size: DEFAULT_POOL_SIZE,
            persist: PersistConfig::default(),
            observer: None,
            fault: None,
            engine_config: EngineConfig::new(),
            small_pages: false,
        }
    }
}

impl Options {
    /// Default options with `engine`.
    pub fn with_engine(engine: &str) -> Self {
        Options {
            engine: Some(engine.to_string()),
            ..Options::default()
        }
    }

    /// These options with the engine setting `key = value` (the key with
    /// the engine's prefix; see each engine's settings in the README).
    /// The engine checks it when the pool is made or opened; a key that
    /// names no engine (`hash_key_len` without `hart.`) is refused then
    /// too, and one of another engine is ignored.
    ///
    /// ```
    /// use pmindex::{Db, Options};
    /// let opts = Options::with_engine("hart").setting("hart.hash_key_len", "3");
    /// let db = Db::create_anonymous(&opts)?;
    /// assert_eq!(db.info().settings["hart.hash_key_len"], "3");
    /// let bad = Options::with_engine("wort").setting("wort.format", "9");
    /// assert!(Db::create_anonymous(&bad).is_err());
    /// # Ok::<(), pmindex::Error>(())
    /// ```
    pub fn setting(mut self, key: &str, value: &str) -> Self {
        self.engine_config
            .insert(key.to_string(), value.to_string());
        self
    }

    fn pool_config(&self) -> PoolConfig {
        PoolConfig {
            persist: self.persist,
            observer: self.observer.clone(),
            fault: self.fault,
            small_pages: self.small_pages,
        }
    }
}

/// Statistics of an open database.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    /// Engine id.
    pub engine: String,
    /// Number of keys.
    pub keys: u64,
    /// DRAM bytes held by the index.
    pub dram_bytes: u64,
    /// PM bytes in allocated blocks. Engines give PM back in whole units:
    /// a chunk of nodes or leaves (`hart`, the radix trees), a leaf of up
    /// to 40 records (`fptree`), a log segment (`pmlog`). A delete lowers
    /// this only when it empties one; the room it frees inside one serves
    /// that engine's later writes.
    pub pm_bytes: u64,
    /// Pool size.
    pub pool_size: u64,
    /// PM counters of the whole process (flushes, fences, lines read).
    pub counters: PmCounters,
    /// Allocator use per class.
    pub usage: Usage,
}

/// Facts about the pool, for `pmindex info`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolInfo {
    /// File path, if any.
    pub path: Option<String>,
    /// Engine id.
    pub engine: String,
    /// Format version.
    pub format_version: u32,
    /// Pool size.
    pub pool_size: u64,
    /// Pool UUID.
    pub uuid: String,
    /// Creation time, ns since the Unix epoch.
    pub created_unix_ns: u64,
    /// How the pool is mapped.
    pub mapping: MappingMode,
    /// Bytes of the mapping on huge pages now, for a writable mapping not
    /// on DAX, if the system says ([`crate::pm::Pool::huge_page_bytes`]).
    pub huge_page_bytes: Option<u64>,
    /// Flush instruction.
    pub flush: pm::FlushKind,
    /// Heap chunks and their size.
    pub chunk_count: u64,
    /// Heap start.
    pub heap_offset: u64,
    /// Allocator use.
    pub usage: Usage,
    /// Number of keys.
    pub keys: u64,
    /// The engine's settings: fixed at creation, or chosen for this open
    /// ([`Engine::settings`]).
    pub settings: EngineConfig,
}

/// An open key-value database on one engine.
pub struct Db {
    engine: Box<dyn Engine>,
    /// Key and value limits: the API's, or the engine's if smaller.
    limits: (usize, usize),
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("engine", &self.engine.name())
            .field("pool", self.engine.pool())
            .finish()
    }
}

/// An error unless `key` has 1 to `max` bytes.
pub(crate) fn check_key_len(key: &[u8], max: usize) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey { max });
    }
    if key.len() > max {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max,
        });
    }
    Ok(())
}

/// An error if `value` has more than `max` bytes.
pub(crate) fn check_value_len(value: &[u8], max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::ValueTooLong {
            len: value.len(),
            max,
        });
    }
    Ok(())
}

impl Db {
    /// Creates a pool file at `path` and an empty index in it. If the
    /// engine refuses (a bad setting, for one), the file this call made is
    /// removed again.
    pub fn create(path: impl AsRef<Path>, opts: &Options) -> Result<Db> {
        engine::check_setting_keys(&opts.engine_config)?;
        let path = path.as_ref();
        let info = engine::find(opts.engine.as_deref().unwrap_or(DEFAULT_ENGINE))?;
        let pool = Arc::new(Pool::create(
            path,
            opts.pool_size,
            info.name,
            &opts.pool_config(),
        )?);
        match (info.create)(Arc::clone(&pool), &opts.engine_config) {
            Ok(engine) => Self::wrap(engine),
            Err(e) => {
                // `Pool::create` made the file (it refuses an existing
                // one). It is removed while `pool` still holds its lock:
                // a process that opened it in between would find an
                // unpublished root, make an empty index and lose its
                // writes with the unlinked file.
                let _ = std::fs::remove_file(path);
                drop(pool);
                Err(e)
            }
        }
    }

    /// Opens the pool at `path` and recovers its index.
    pub fn open(path: impl AsRef<Path>, opts: &Options) -> Result<Db> {
        engine::check_setting_keys(&opts.engine_config)?;
        if let Some(e) = &opts.engine {
            engine::find(e)?;
        }
        let pool = Pool::open(path.as_ref(), opts.engine.as_deref(), &opts.pool_config())?;
        Self::recover(pool, &opts.engine_config)
    }

    /// Opens the pool at `path` for reading only, and recovers its index in
    /// memory: the pool file is never written, whatever recovery finds
    /// (it repairs this process's private copy of the pages it changes;
    /// [`Pool::open_read_only`]). Read-only opens of one pool run at once;
    /// an [`Db::open`] of it is refused meanwhile ([`Error::Locked`]), and
    /// the other way round. `put`, `put_many`, `insert`, `update` and
    /// `delete` return [`Error::ReadOnly`]. For inspecting a pool without
    /// changing it (`pmindex info` and `check`) and for readers.
    ///
    /// ```
    /// use pmindex::{Db, Error, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("p.pool");
    /// Db::create(&path, &Options::with_engine("wort"))?.put(b"k", b"v")?;
    /// let db = Db::open_read_only(&path, &Options::default())?;
    /// assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
    /// assert!(matches!(db.put(b"k", b"w"), Err(Error::ReadOnly)));
    /// # Ok::<(), pmindex::Error>(())
    /// ```
    pub fn open_read_only(path: impl AsRef<Path>, opts: &Options) -> Result<Db> {
        engine::check_setting_keys(&opts.engine_config)?;
        if let Some(e) = &opts.engine {
            engine::find(e)?;
        }
        let pool =
            Pool::open_read_only(path.as_ref(), opts.engine.as_deref(), &opts.pool_config())?;
        Self::recover(pool, &opts.engine_config)
    }

    /// Creates a database in anonymous memory (tests, simulation, benchmarks
    /// without a file).
    pub fn create_anonymous(opts: &Options) -> Result<Db> {
        engine::check_setting_keys(&opts.engine_config)?;
        let info = engine::find(opts.engine.as_deref().unwrap_or(DEFAULT_ENGINE))?;
        let pool = Pool::create_anonymous(opts.pool_size, info.name, &opts.pool_config())?;
        Self::wrap((info.create)(Arc::new(pool), &opts.engine_config)?)
    }

    /// Opens a pool image (for example a crash image) in anonymous memory and
    /// recovers its index.
    pub fn open_image(image: &[u8], opts: &Options) -> Result<Db> {
        engine::check_setting_keys(&opts.engine_config)?;
        let pool = Pool::open_image(image, opts.engine.as_deref(), &opts.pool_config())?;
        Self::recover(pool, &opts.engine_config)
    }

    fn wrap(engine: Box<dyn Engine>) -> Result<Db> {
        let caps = engine.capabilities();
        Ok(Db {
            limits: (
                caps.max_key_len.min(MAX_KEY_LEN),
                caps.max_value_len.min(MAX_VALUE_LEN),
            ),
            engine,
        })
    }

    fn recover(pool: Pool, config: &EngineConfig) -> Result<Db> {
        let info = engine::find(&pool.engine_id())?;
        Self::wrap((info.open)(Arc::new(pool), config)?)
    }

    /// Validates a key against the API limit (1..=250 bytes) and the
    /// engine's native limit.
    fn check_key(&self, key: &[u8]) -> Result<()> {
        check_key_len(key, self.limits.0)
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        check_value_len(value, self.limits.1)
    }

    /// [`Error::ReadOnly`] on a pool opened with [`Db::open_read_only`].
    fn check_writable(&self) -> Result<()> {
        if self.pool().is_read_only() {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// The engine. On a handle from [`Db::open_read_only`] its writes are
    /// not refused, but they change only this process's private copy of the
    /// pool and are lost: use the engine for reading there.
    pub fn engine(&self) -> &dyn Engine {
        &*self.engine
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<Pool> {
        self.engine.pool()
    }

    /// Inserts or replaces; returns whether a value was replaced.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.check_writable()?;
        self.check_key(key)?;
        self.check_value(value)?;
        Ok(self.engine.put(key, value, PutMode::Upsert)? == PutOutcome::Replaced)
    }

    /// Inserts or replaces every `(key, value)` of `items`, in order (a key
    /// given twice ends with its last value); all of them are durable when
    /// it returns. Every item is checked before any is written, so a bad
    /// key or value fails the call with nothing changed. Not atomic as a
    /// whole: on any other error (a full pool) the items before the one
    /// that failed are applied and durable and the rest are not (in a
    /// damaged pool, see the module doc, all may be applied), and after
    /// a crash during the call each key holds either its value from before
    /// the call or one the call gave it. On `hart`, up to 32 items at a time
    /// share one fence and their searches overlap (docs/design.md §7,
    /// "Batched puts"); the radix trees write 32 items' leaves with one
    /// fence and commit them with a fence only where a new node needs one
    /// (§11, "Batched puts"); `pmlog` puts one item after another.
    ///
    /// ```
    /// use pmindex::{Db, Options};
    /// let db = Db::create_anonymous(&Options::with_engine("hart"))?;
    /// db.put_many(&[(&b"a"[..], &b"1"[..]), (b"b", b"2"), (b"a", b"3")])?;
    /// assert_eq!(db.get(b"a")?.as_deref(), Some(&b"3"[..]));
    /// # Ok::<(), pmindex::Error>(())
    /// ```
    pub fn put_many(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        self.check_writable()?;
        for (key, value) in items {
            self.check_key(key)?;
            self.check_value(value)?;
        }
        self.engine.put_many(items)
    }

    /// Inserts; [`Error::KeyExists`] if the key is present (nothing changes).
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_key(key)?;
        self.check_value(value)?;
        match self.engine.put(key, value, PutMode::Insert)? {
            PutOutcome::Unchanged => Err(Error::KeyExists),
            _ => Ok(()),
        }
    }

    /// Replaces; [`Error::KeyNotFound`] if the key is absent.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_key(key)?;
        self.check_value(value)?;
        match self.engine.put(key, value, PutMode::Update)? {
            PutOutcome::Unchanged => Err(Error::KeyNotFound),
            _ => Ok(()),
        }
    }

    /// The value of `key`, copied.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_with(key, <[u8]>::to_vec)
    }

    /// Calls `f` on the value of `key` in place (no copy). `f` must not
    /// call back into the `Db`: it may run under the engine's read lock (an
    /// ART's on `hart`, the tree's on the others when their lock-free read
    /// gives way), which a write from `f` would wait for forever, and a
    /// read from `f` too once a writer queues for that lock. Copy the
    /// value out ([`Db::get`]) to act on it.
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        self.check_key(key)?;
        let mut f = Some(f);
        let mut out = None;
        self.engine.get_with(key, &mut |v| {
            if let Some(f) = f.take() {
                out = Some(f(v));
            }
        })?;
        Ok(out)
    }

    /// Looks up every key of `keys`: calls `f(i, value)` for each `keys[i]`,
    /// in order, with `None` where the key is absent (memcached's multi-key
    /// `get`). Every key is checked before any is looked up, so a bad key
    /// fails the call with no `f` run. Where the engine can, the searches
    /// of several keys run at once and their PM misses overlap: on the
    /// radix trees (with their default lock-free reads), 2 to 3 times the
    /// throughput of one `get_with` per key (docs/design.md §11, "Batched
    /// searches"); on `hart`, 1.3 to 3 times (§7, "Interleaved batched
    /// searches"). `f` must not call back into the `Db`: it may run under
    /// an engine's read locks. An error stops the call, after `f` has run
    /// for the keys before it.
    pub fn get_many_with(
        &self,
        keys: &[&[u8]],
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        for key in keys {
            self.check_key(key)?;
        }
        self.engine.get_many(keys, &mut f)
    }

    /// The values of `keys`, in order (`None` where absent); see
    /// [`Db::get_many_with`].
    ///
    /// ```
    /// use pmindex::{Db, Options};
    /// let db = Db::create_anonymous(&Options::default())?;
    /// db.put(b"key", b"value")?;
    /// let found = db.get_many(&[&b"key"[..], &b"absent"[..]])?;
    /// assert_eq!(found, vec![Some(b"value".to_vec()), None]);
    /// # Ok::<(), pmindex::Error>(())
    /// ```
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = vec![None; keys.len()];
        self.get_many_with(keys, |i, v| out[i] = v.map(<[u8]>::to_vec))?;
        Ok(out)
    }

    /// Removes `key`; returns whether it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.check_writable()?;
        self.check_key(key)?;
        self.engine.delete(key)
    }

    /// Calls `f(key, value)` for the keys between `lo` and `hi`, in order,
    /// until `f` returns false. `f` must not call back into the `Db`: it
    /// runs under the engine's read locks (a tree's, or an ART's on
    /// `hart`), which a write from `f` would wait for forever. To change
    /// keys while going through a range, use [`Db::range`], which holds no
    /// lock between its batches.
    pub fn scan_with(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if self.engine.capabilities().ordered_scan {
            return self.engine.scan(lo, hi, &mut f);
        }
        // Unordered engine: collect the range, sort, then call back.
        let mut all = Vec::new();
        self.engine
            .scan(Bound::Unbounded, Bound::Unbounded, &mut |k, v| {
                if (lo, hi).contains_key(k) {
                    all.push((k.to_vec(), v.to_vec()));
                }
                true
            })?;
        all.sort();
        for (k, v) in all {
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }

    /// The pairs between `lo` and `hi`, in order, at most `limit` of them.
    pub fn scan(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: Option<usize>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let limit = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.scan_with(lo, hi, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            out.len() < limit
        })?;
        Ok(out)
    }

    /// An iterator over `lo..hi` that fetches pairs in batches (it holds no
    /// lock between batches, so it sees concurrent changes batch by batch).
    pub fn range(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> RangeIter<'_> {
        RangeIter {
            db: self,
            next_lo: lo.map(<[u8]>::to_vec),
            hi: hi.map(<[u8]>::to_vec),
            buf: VecDeque::new(),
            done: false,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.engine.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.engine.is_empty()
    }

    /// Statistics.
    pub fn stats(&self) -> Stats {
        let usage = self.pool().usage();
        Stats {
            engine: self.engine.name().to_string(),
            keys: self.engine.len(),
            dram_bytes: self.engine.dram_bytes(),
            pm_bytes: usage.bytes_in_use(),
            pool_size: self.pool().size(),
            counters: pm::counters(),
            usage,
        }
    }

    /// Facts about the pool.
    pub fn info(&self) -> PoolInfo {
        let pool = self.pool();
        let h = pool.header();
        PoolInfo {
            path: pool.path().map(|p| p.display().to_string()),
            engine: h.engine_id(),
            format_version: h.version,
            pool_size: h.pool_size,
            uuid: h.uuid_string(),
            created_unix_ns: h.created_unix_ns,
            mapping: pool.mapping_mode(),
            huge_page_bytes: pool.huge_page_bytes(),
            flush: pool.persist_config().flush_kind(),
            chunk_count: h.chunk_count,
            heap_offset: h.heap_offset,
            usage: pool.usage(),
            keys: self.engine.len(),
            settings: self.engine.settings(),
        }
    }

    /// A full consistency check: the engine's structural check, then the
    /// allocator's: every allocated block is referenced by the index (no
    /// leak), every referenced block is allocated (no dangling pointer), and
    /// the heap past the frontier is untouched ([`Pool::check_untouched`]).
    /// Reads every key and the whole unused heap: O(pool size). Run it
    /// while no other thread writes: `hart` has no lock over the whole
    /// index, so beside writers it checks a state in flux and may report
    /// one as an error (it does not deadlock with them).
    pub fn check(&self) -> Result<CheckReport> {
        let report = self.engine.check()?;
        if report.keys != self.engine.len() {
            return Err(Error::CheckFailed(format!(
                "the walk found {} keys, the engine counts {}",
                report.keys,
                self.engine.len()
            )));
        }
        let allocated: BTreeSet<u64> = self
            .pool()
            .allocated_blocks()?
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        let referenced: BTreeSet<u64> = report.referenced_blocks.iter().copied().collect();
        if referenced.len() != report.referenced_blocks.len() {
            return Err(Error::CheckFailed("a block is referenced twice".into()));
        }
        if let Some(b) = allocated.difference(&referenced).next() {
            return Err(Error::CheckFailed(format!(
                "leak: block {b:#x} is allocated but not referenced by the index ({} such blocks)",
                allocated.difference(&referenced).count()
            )));
        }
        if let Some(b) = referenced.difference(&allocated).next() {
            return Err(Error::CheckFailed(format!(
                "block {b:#x} is referenced but not allocated"
            )));
        }
        self.pool().check_untouched()?;
        Ok(report)
    }

    /// Writes a page-cache mapping back to its file (no-op on DAX).
    pub fn sync(&self) -> Result<()> {
        self.pool().sync()
    }

    /// Maps every page of the pool now, so that no later operation waits
    /// for a page fault or for the allocator mapping fresh heap (one
    /// `madvise` of about 300 µs per MiB, made by whichever insert first
    /// reaches it): [`Pool::prefault_all`]. Call it after create or open,
    /// before latency matters (`pmindex bench --prefault`). Changes no
    /// byte; the pool keeps its memory or page cache resident from then on
    /// (limits: [`Pool::prefault_all`]). [`Error::ReadOnly`] on a handle
    /// from [`Db::open_read_only`], where it would copy every page.
    pub fn prefault(&self) -> Result<()> {
        self.pool().prefault_all()
    }
}

trait BoundsExt {
    fn contains_key(&self, k: &[u8]) -> bool;
}

impl BoundsExt for (Bound<&[u8]>, Bound<&[u8]>) {
    fn contains_key(&self, k: &[u8]) -> bool {
        crate::engine::above_lo(k, self.0) && crate::engine::below_hi(k, self.1)
    }
}

/// Iterator returned by [`Db::range`].
pub struct RangeIter<'a> {
    db: &'a Db,
    next_lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

const RANGE_BATCH: usize = 256;

impl Iterator for RangeIter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() && !self.done {
            let batch = self.db.scan(
                self.next_lo.as_ref().map(Vec::as_slice),
                self.hi.as_ref().map(Vec::as_slice),
                Some(RANGE_BATCH),
            );
            match batch {
                Ok(b) => {
                    if b.len() < RANGE_BATCH {
                        self.done = true;
                    }
                    if let Some((k, _)) = b.last() {
                        self.next_lo = Bound::Excluded(k.clone());
                    }
                    self.buf.extend(b);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        self.buf.pop_front().map(Ok)
    }
}
