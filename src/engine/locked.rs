//! [`Locked`]: a [`SerialEngine`] made concurrent by a reader-writer lock,
//! with lock-free point reads for engines that offer them.
//!
//! # Writers
//! A writer takes the lock alone. Around its change it moves the version
//! counter from even to odd (before its first PM store) and back to even
//! (after its last), so a reader can tell whether a change ran while it
//! read.
//!
//! # Optimistic reads (a sequence lock)
//! An engine whose point search can run on a structure that a writer is
//! changing under it (every read bounds-checked, every walk bounded, nothing
//! read through a `&[u8]` into PM) offers an [`OptimisticRead`]. `get_with`
//! then runs it without the lock:
//!
//! 1. load the version (acquire); if it is odd, a writer is inside: take
//!    the lock instead;
//! 2. search, copying the value into a buffer on the reader's stack;
//! 3. acquire fence, load the version again;
//! 4. the same version: no writer stored anything between 1 and 3, so what
//!    was read is a state of the tree between two writes, and the value in
//!    the buffer is the answer. Only now does the caller's closure run, on
//!    the buffer. A different version: discard everything and try again
//!    ([`OPTIMISTIC_TRIES`] times, then take the lock).
//!
//! An error, or a value longer than the buffer, is not trusted either: a
//! validated one goes to the locked path, which returns the error of a
//! damaged tree or the long value.
//!
//! Why: a read lock is two atomic read-modify-writes on one shared line. On
//! x86 each is a full barrier, so the misses of successive searches cannot
//! overlap, and every reader thread writes the lock's line (docs/design.md
//! §11, "Reads without the lock"). The optimistic path executes loads only.
//!
//! Nothing here changes what reaches PM: the version lives in DRAM, and
//! crash consistency is the engine's own (the crash simulator tests it
//! without this wrapper).

use std::mem::MaybeUninit;
use std::ops::{Bound, Range};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};

use super::{Capabilities, CheckReport, Engine, PutMode, PutOutcome, ScanFn, SerialEngine};
use crate::error::Result;
use crate::pm::Pool;

/// Optimistic attempts before a reader takes the lock.
pub const OPTIMISTIC_TRIES: usize = 4;
/// How long a writer waits for another writer's hold to end by spinning
/// before it sleeps in the kernel ([`Locked::write`]).
pub const WRITE_SPIN: std::time::Duration = std::time::Duration::from_micros(20);

/// Bytes of value an optimistic read can return; longer values are read
/// under the lock.
pub const VALUE_BUF: usize = 256;

/// Where an optimistic read copies a value, a PM word at a time: on the
/// reader's stack, and not zeroed first (a read fills one or two words of
/// it, mostly).
pub struct ValueBuf {
    /// Words written, from the first. Declared before `words`: in the
    /// other order, rustc 1.95 builds the value with a 264-byte memset.
    filled: usize,
    words: MaybeUninit<[u64; VALUE_BUF / 8]>,
}

impl ValueBuf {
    /// An empty buffer.
    #[inline]
    pub fn new() -> ValueBuf {
        ValueBuf {
            filled: 0,
            words: MaybeUninit::uninit(),
        }
    }

    /// Whether `n` words fit.
    #[inline]
    pub fn fits(&self, n: u64) -> bool {
        n <= VALUE_BUF as u64 / 8
    }

    /// Forgets the words written (before a new read).
    #[inline]
    pub fn clear(&mut self) {
        self.filled = 0;
    }

    /// Appends a word; panics if full (callers check [`ValueBuf::fits`]).
    #[inline]
    pub fn push(&mut self, w: u64) {
        assert!(self.filled < VALUE_BUF / 8, "value buffer overflow");
        // SAFETY: `filled < VALUE_BUF / 8` (just checked): the word lies
        // inside the array.
        unsafe {
            self.words
                .as_mut_ptr()
                .cast::<u64>()
                .add(self.filled)
                .write(w)
        };
        self.filled += 1;
    }

    /// Sets the buffer to the words `word(0)..word(n)`, `n` at most 8 (a
    /// cache line's words; panics beyond): one store of the count instead
    /// of one per word, and no test per word.
    #[inline(always)]
    pub fn set_words(&mut self, n: usize, word: impl Fn(usize) -> u64) {
        assert!(n <= 8 && 8 <= VALUE_BUF / 8, "more than a line of words");
        let dst = self.words.as_mut_ptr().cast::<u64>();
        for i in 0..n {
            // SAFETY: `i < n <= 8 <= VALUE_BUF / 8` (checked above): the
            // word lies inside the array.
            unsafe { dst.add(i).write(word(i)) };
        }
        self.filled = n;
    }

    /// The bytes of the words written, in memory order.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the first `filled` words are initialised (`push` wrote
        // them); a `u64` has no padding, every byte of it is a valid `u8`,
        // and the slice borrows `self`, so the words outlive it.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.filled * 8) }
    }
}

impl Default for ValueBuf {
    fn default() -> Self {
        ValueBuf::new()
    }
}

/// What an optimistic read found (trusted only once the version is
/// checked, see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The key is absent.
    Absent,
    /// The key is present; its value is these bytes of
    /// [`ValueBuf::bytes`].
    Found(Range<usize>),
    /// The key is present; its value is longer than the buffer.
    TooLong,
}

/// A point search that may run while a writer changes the structure.
///
/// **Contract.** `get_into` may read a torn or freed state of the index:
/// then it must still return (no panic, no endless loop, no access outside
/// the pool), though with any answer or error, which the caller discards.
/// It must read PM only through atomic word loads ([`Pool::words`]), never
/// through a slice, and must not write anything but `buf`. On a state
/// between two writes it answers as the engine's `get_with` does.
pub trait OptimisticRead: Send + Sync {
    /// Searches `key`; copies the value into `buf` when it fits.
    fn get_into(&self, key: &[u8], buf: &mut ValueBuf) -> Result<Probe>;

    /// [`Self::get_into`] for several keys (at most [`BATCH`]): `out[i]`
    /// answers `keys[i]`, with its value in `bufs[i]`. The default searches
    /// one key after another; a reader that overlaps the searches' misses
    /// overrides it. The same contract holds for every key, and every
    /// `out[i]` must be written on every call (the caller reuses `out`
    /// across tries).
    fn get_many_into(&self, keys: &[&[u8]], bufs: &mut [ValueBuf], out: &mut [Result<Probe>]) {
        for ((key, buf), out) in keys.iter().zip(bufs).zip(out) {
            *out = self.get_into(key, buf);
        }
    }
}

/// The answer of an optimistic probe whose version check passed, with
/// the value in `buf`: `Some(None)` for an absent key, `Some(Some(value))`
/// for a present one, and `None` when the lock must decide (a value longer
/// than the buffer, an error, or a reader that broke its contract).
pub(crate) fn answer<'b>(probe: &Result<Probe>, buf: &'b ValueBuf) -> Option<Option<&'b [u8]>> {
    match probe {
        Ok(Probe::Absent) => Some(None),
        Ok(Probe::Found(r)) => buf.bytes().get(r.clone()).map(Some),
        Ok(Probe::TooLong) | Err(_) => None,
    }
}

/// Keys per batch of [`Engine::get_many`] (one version check covers a
/// batch) and of [`Engine::put_many`], and the most an
/// [`OptimisticRead::get_many_into`] is given: enough to keep a core's
/// miss buffers busy (10 to 16 line fills on recent x86 cores; a radix
/// tree's step prefetches two lines per key, and not every key has a miss
/// in flight at every step), few enough that a batch's state and its value
/// buffers (8 KiB) stay in L1 and L2. 32 rather than 16: batched searches
/// of 1M sparse keys took 107-109 ns per key on WORT and 126-129 on WOART
/// at 32, 122-130 and 141-145 at 16; HART's searches and every engine's
/// batched inserts did not change (docs/design.md §11, "Batched puts").
pub const BATCH: usize = 32;

/// A [`SerialEngine`] behind a reader-writer lock: writers take it alone;
/// readers share it, or skip it (see the module doc).
pub struct Locked<E> {
    pool: Arc<Pool>,
    inner: RwLock<E>,
    /// Even: no writer inside. Changed only by lock holders.
    version: AtomicU64,
    /// The `<engine>.reads` setting, for an engine that offers an
    /// optimistic reader (reported by `settings`); `None` for the others.
    reads: Option<Reads>,
    reader: Option<Box<dyn OptimisticRead>>,
    /// Settings of the wrapper's user to report with the engine's
    /// ([`Locked::with_setting`]).
    extra: super::EngineConfig,
}

/// Makes the version odd for its lifetime (one writer's change).
pub(crate) struct Writing<'a>(&'a AtomicU64);

impl<'a> Writing<'a> {
    /// Persist-order note: only DRAM is written here. The fence keeps the
    /// odd version ahead of every store the change makes.
    pub(crate) fn begin(version: &'a AtomicU64) -> Writing<'a> {
        // The writer holds the lock: no one else stores the version.
        version.store(version.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        Writing(version)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        // Even again, after every store of the change (release). Also on
        // an unwinding panic, so that readers are not sent to the lock for
        // ever.
        self.0
            .store(self.0.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

/// How [`Locked`] runs point reads (engine setting `<engine>.reads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// Without the lock first, where the engine offers an
    /// [`OptimisticRead`] (the default).
    Optimistic,
    /// Always under the read lock.
    Locked,
}

impl Reads {
    /// The setting's value for this choice ([`Reads::parse`] reads it).
    pub fn name(self) -> &'static str {
        match self {
            Reads::Optimistic => "optimistic",
            Reads::Locked => "locked",
        }
    }

    /// Parses the setting `name` = `v`.
    pub fn parse(name: &str, v: &str) -> Result<Reads> {
        match v {
            "optimistic" => Ok(Reads::Optimistic),
            "locked" => Ok(Reads::Locked),
            _ => Err(crate::Error::InvalidArgument(format!(
                "{name} `{v}`: expected optimistic or locked"
            ))),
        }
    }
}

impl<E: SerialEngine> Locked<E> {
    /// Wraps `engine`, which lives in `pool`, with optimistic reads where
    /// the engine offers them.
    pub fn new(pool: Arc<Pool>, engine: E) -> Self {
        Locked::with_reads(pool, engine, Reads::Optimistic)
    }

    /// Wraps `engine`, which lives in `pool`, reading as `reads` says.
    pub fn with_reads(pool: Arc<Pool>, engine: E, reads: Reads) -> Self {
        let reader = engine.optimistic_reader();
        Locked {
            pool,
            reads: reader.is_some().then_some(reads),
            reader: match reads {
                Reads::Optimistic => reader,
                Reads::Locked => None,
            },
            inner: RwLock::new(engine),
            version: AtomicU64::new(0),
            extra: super::EngineConfig::new(),
        }
    }

    /// Adds `name` = `value` to what [`Engine::settings`] reports (a
    /// setting that chose this wrapper, say).
    pub fn with_setting(mut self, name: String, value: String) -> Self {
        self.extra.insert(name, value);
        self
    }

    /// The write lock. While another thread holds the lock, a writer spins
    /// on it (reading the lock word only) for up to [`WRITE_SPIN`] before it
    /// sleeps in `parking_lot`'s queue, which it would do after about a
    /// microsecond of spinning and yielding. A write holds the lock for one
    /// to a few microseconds, so writers that sleep sooner turn every hand
    /// over into a kernel wake-up paid by the holder at its unlock, and
    /// into a wake-up latency for the sleeper: on the 16-core device two
    /// writing threads inserted at 0.67x one thread's rate and four at 0.41x
    /// (docs/design.md §11, "Writers spin before they sleep").
    ///
    /// A lock that reads free but refuses `try_write` has threads asleep in
    /// its queue (`parking_lot` keeps a parked bit in the lock word, which
    /// `is_locked` ignores): spinning cannot take it then, and `write`
    /// takes it at once without sleeping, so the spinner goes there.
    fn write(&self) -> RwLockWriteGuard<'_, E> {
        if let Some(g) = self.inner.try_write() {
            return g;
        }
        let start = std::time::Instant::now();
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
                if !self.inner.is_locked() {
                    break;
                }
            }
            if !self.inner.is_locked() {
                return match self.inner.try_write() {
                    Some(g) => g,
                    // Sleepers queued, or another spinner won: the lock's
                    // own path decides.
                    None => self.inner.write(),
                };
            }
            if start.elapsed() > WRITE_SPIN {
                return self.inner.write();
            }
        }
    }

    /// The optimistic path: `Some` with the answer, `None` when the lock
    /// must decide.
    #[inline]
    fn try_optimistic(
        &self,
        reader: &dyn OptimisticRead,
        key: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Option<bool> {
        let mut buf = ValueBuf::new();
        for _ in 0..OPTIMISTIC_TRIES {
            let v = self.version.load(Ordering::Acquire);
            if v & 1 == 1 {
                // A writer is inside: the lock waits for it.
                return None;
            }
            let probe = reader.get_into(key, &mut buf);
            fence(Ordering::Acquire);
            if self.version.load(Ordering::Relaxed) != v {
                std::hint::spin_loop();
                continue;
            }
            return answer(&probe, &buf).map(|v| {
                v.inspect(|v| f(v));
                v.is_some()
            });
        }
        None
    }

    /// [`Engine::get_many`] for at most [`BATCH`] keys, numbered from
    /// `first`: one optimistic batch, validated by one version check; the
    /// keys it cannot answer (and all of them, if no batch validates) are
    /// read under the lock.
    fn get_batch(
        &self,
        first: usize,
        keys: &[&[u8]],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        let n = keys.len();
        debug_assert!(n <= BATCH);
        if let Some(reader) = &self.reader {
            let mut bufs: [ValueBuf; BATCH] = std::array::from_fn(|_| ValueBuf::new());
            let mut out: [Result<Probe>; BATCH] = std::array::from_fn(|_| Ok(Probe::Absent));
            for _ in 0..OPTIMISTIC_TRIES {
                let v = self.version.load(Ordering::Acquire);
                if v & 1 == 1 {
                    break;
                }
                reader.get_many_into(keys, &mut bufs[..n], &mut out[..n]);
                fence(Ordering::Acquire);
                if self.version.load(Ordering::Relaxed) != v {
                    std::hint::spin_loop();
                    continue;
                }
                // Validated: every answer is a state between two writes.
                for (i, (out, buf)) in out[..n].iter().zip(&bufs).enumerate() {
                    match answer(out, buf) {
                        Some(v) => f(first + i, v),
                        None => self.get_locked(first + i, keys[i], f)?,
                    }
                }
                return Ok(());
            }
        }
        // One lock hold per key, as `get_with`: a batch does not keep
        // writers out for 16 searches and their callbacks.
        for (i, key) in keys.iter().enumerate() {
            self.get_locked(first + i, key, f)?;
        }
        Ok(())
    }

    /// One key of a batch under the read lock (released before `f` runs
    /// for an absent key).
    fn get_locked(
        &self,
        i: usize,
        key: &[u8],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        if !self.inner.read().get_with(key, &mut |v| f(i, Some(v)))? {
            f(i, None);
        }
        Ok(())
    }
}

impl<E: SerialEngine> Engine for Locked<E> {
    fn name(&self) -> &'static str {
        self.inner.read().name()
    }
    fn settings(&self) -> super::EngineConfig {
        let inner = self.inner.read();
        let mut settings = inner.settings();
        if let Some(reads) = self.reads {
            settings.insert(format!("{}.reads", inner.name()), reads.name().into());
        }
        settings.extend(self.extra.clone());
        settings
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            concurrent: true,
            ..self.inner.read().capabilities()
        }
    }
    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if let Some(reader) = &self.reader {
            if let Some(found) = self.try_optimistic(reader.as_ref(), key, f) {
                return Ok(found);
            }
        }
        self.inner.read().get_with(key, f)
    }
    fn get_many(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        for (b, batch) in keys.chunks(BATCH).enumerate() {
            self.get_batch(b * BATCH, batch, f)?;
        }
        Ok(())
    }
    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        super::check_item(key, value)?;
        let mut g = self.write();
        let _w = Writing::begin(&self.version);
        g.put(key, value, mode)
    }
    /// [`BATCH`] items per write-lock hold, so that readers wait for at
    /// most one batch.
    fn put_many(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        super::check_items(items)?;
        for batch in items.chunks(BATCH) {
            let mut g = self.write();
            let _w = Writing::begin(&self.version);
            g.put_many(batch)?;
        }
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut g = self.write();
        let _w = Writing::begin(&self.version);
        g.delete(key)
    }
    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        self.inner.read().scan(lo, hi, f)
    }
    fn len(&self) -> u64 {
        self.inner.read().len()
    }
    fn check(&self) -> Result<CheckReport> {
        self.inner.read().check()
    }
    fn dram_bytes(&self) -> u64 {
        self.inner.read().dram_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// An engine of one key whose optimistic reader answers as told.
    struct Fake {
        value: Vec<u8>,
        probe: fn() -> Result<Probe>,
        locked_gets: Arc<AtomicUsize>,
        /// Puts so far, counted by a read, a short wait and a write (lost
        /// counts if two puts ever ran at once).
        puts: u64,
    }

    struct FakeReader(fn() -> Result<Probe>);

    impl OptimisticRead for FakeReader {
        fn get_into(&self, _key: &[u8], buf: &mut ValueBuf) -> Result<Probe> {
            buf.clear();
            buf.push(u64::from_ne_bytes(*b"optimist"));
            (self.0)()
        }
    }

    impl SerialEngine for Fake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                ordered_scan: false,
                concurrent: false,
                max_key_len: 8,
                max_value_len: 8,
            }
        }
        fn get_with(&self, _key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            self.locked_gets.fetch_add(1, Ordering::Relaxed);
            f(&self.value);
            Ok(true)
        }
        fn put(&mut self, _key: &[u8], value: &[u8], _mode: PutMode) -> Result<PutOutcome> {
            self.value = value.to_vec();
            let n = self.puts;
            for _ in 0..200 {
                std::hint::spin_loop();
            }
            std::hint::black_box(&mut *self).puts = n + 1;
            Ok(PutOutcome::Replaced)
        }
        fn delete(&mut self, _key: &[u8]) -> Result<bool> {
            Ok(false)
        }
        fn scan(&self, _: Bound<&[u8]>, _: Bound<&[u8]>, _: &mut ScanFn<'_>) -> Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            1
        }
        fn check(&self) -> Result<CheckReport> {
            Ok(CheckReport::default())
        }
        fn dram_bytes(&self) -> u64 {
            0
        }
        fn optimistic_reader(&self) -> Option<Box<dyn OptimisticRead>> {
            Some(Box::new(FakeReader(self.probe)))
        }
    }

    /// A `Locked` fake whose locked reads find `locked` and are counted.
    /// Reader answers that send a key to the lock: a long value, an error,
    /// a range outside the buffer.
    const TO_THE_LOCK: [fn() -> Result<Probe>; 3] = [
        || Ok(Probe::TooLong),
        || Err(crate::Error::corrupt(64, "torn")),
        || Ok(Probe::Found(4..12)),
    ];

    fn fake(probe: fn() -> Result<Probe>, reads: Reads) -> (Locked<Fake>, Arc<AtomicUsize>) {
        let pool = Arc::new(Pool::create_anonymous(8 << 20, "fake", &Default::default()).unwrap());
        let locked_gets = Arc::new(AtomicUsize::new(0));
        let fake = Fake {
            value: b"locked".to_vec(),
            probe,
            locked_gets: Arc::clone(&locked_gets),
            puts: 0,
        };
        (Locked::with_reads(pool, fake, reads), locked_gets)
    }

    /// What `get_with` hands the closure, and how many reads took the lock.
    fn read(probe: fn() -> Result<Probe>, reads: Reads) -> (Option<Vec<u8>>, usize) {
        let (e, locked_gets) = fake(probe, reads);
        let mut got = None;
        let found = e.get_with(b"k", &mut |v| got = Some(v.to_vec())).unwrap();
        assert_eq!(found, got.is_some());
        (got, locked_gets.load(Ordering::Relaxed))
    }

    /// What `get_many` hands the closure for 2 batches and a bit of keys
    /// (in the order called), and how many reads took the lock.
    fn read_many(probe: fn() -> Result<Probe>, reads: Reads) -> (Vec<Option<Vec<u8>>>, usize) {
        let (e, locked_gets) = fake(probe, reads);
        let keys = [&b"k"[..]; 2 * BATCH + 3];
        let mut got = Vec::new();
        e.get_many(&keys, &mut |i, v| {
            assert_eq!(i, got.len(), "answers in key order, one each");
            got.push(v.map(<[u8]>::to_vec));
        })
        .unwrap();
        assert_eq!(got.len(), keys.len());
        (got, locked_gets.load(Ordering::Relaxed))
    }

    #[test]
    fn batched_reads_use_validated_answers_and_send_the_rest_to_the_lock() {
        let n = 2 * BATCH + 3;
        let all = |v: Option<&[u8]>| vec![v.map(<[u8]>::to_vec); n];
        assert_eq!(
            read_many(|| Ok(Probe::Found(1..5)), Reads::Optimistic),
            (all(Some(b"ptim")), 0)
        );
        assert_eq!(
            read_many(|| Ok(Probe::Absent), Reads::Optimistic),
            (all(None), 0)
        );
        for probe in TO_THE_LOCK {
            assert_eq!(
                read_many(probe, Reads::Optimistic),
                (all(Some(b"locked")), n)
            );
        }
        assert_eq!(
            read_many(|| Ok(Probe::Found(0..8)), Reads::Locked),
            (all(Some(b"locked")), n)
        );
    }

    /// A writer that finds the lock held waits, spinning and then asleep
    /// past [`WRITE_SPIN`], and enters only once the holder leaves; a
    /// reader holding the lock keeps it out as a writer does.
    #[test]
    fn a_writer_waits_out_a_long_hold_spinning_then_asleep() {
        let (e, _) = fake(|| Ok(Probe::Absent), Reads::Locked);
        for hold in ["write", "read"] {
            let (wg, rg) = match hold {
                "write" => (Some(e.inner.write()), None),
                _ => (None, Some(e.inner.read())),
            };
            let entered_early = std::thread::scope(|sc| {
                let t = sc.spawn(|| e.put(b"k", hold.as_bytes(), PutMode::Upsert).unwrap());
                std::thread::sleep(WRITE_SPIN * 50);
                let early = t.is_finished();
                // Dropped before any assertion, so that a failure cannot
                // leave the put waiting for ever.
                drop(wg);
                drop(rg);
                assert_eq!(t.join().unwrap(), PutOutcome::Replaced);
                early
            });
            assert!(!entered_early, "a put entered past a {hold} hold");
            assert_eq!(e.inner.read().value, hold.as_bytes());
        }
    }

    /// Writers of several threads still run one at a time: each put reads
    /// the count, waits, and stores it plus one; none is lost. The threads
    /// start together, so that they find the lock taken and spin.
    #[test]
    fn spinning_writers_exclude_each_other() {
        let (e, _) = fake(|| Ok(Probe::Absent), Reads::Optimistic);
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|sc| {
            for _ in 0..4 {
                sc.spawn(|| {
                    start.wait();
                    for _ in 0..20_000 {
                        e.put(b"k", b"v", PutMode::Upsert).unwrap();
                    }
                });
            }
        });
        assert_eq!(e.inner.read().puts, 80_000);
    }

    #[test]
    fn a_validated_optimistic_answer_is_used_without_the_lock() {
        let (got, locked) = read(|| Ok(Probe::Found(1..5)), Reads::Optimistic);
        assert_eq!((got.as_deref(), locked), (Some(&b"ptim"[..]), 0));
        assert_eq!(read(|| Ok(Probe::Absent), Reads::Optimistic), (None, 0));
    }

    #[test]
    fn errors_long_values_and_bad_ranges_go_to_the_lock() {
        for probe in TO_THE_LOCK {
            assert_eq!(
                read(probe, Reads::Optimistic),
                (Some(b"locked".to_vec()), 1)
            );
        }
    }

    #[test]
    fn locked_reads_never_ask_the_reader() {
        let (got, locked) = read(|| Ok(Probe::Found(0..8)), Reads::Locked);
        assert_eq!((got.as_deref(), locked), (Some(&b"locked"[..]), 1));
    }

    #[test]
    fn a_change_leaves_the_version_even_and_higher() {
        let pool = Arc::new(Pool::create_anonymous(8 << 20, "fake", &Default::default()).unwrap());
        let fake = Fake {
            value: Vec::new(),
            probe: || Ok(Probe::Absent),
            locked_gets: Arc::default(),
            puts: 0,
        };
        let e = Locked::new(pool, fake);
        e.put(b"k", b"v", PutMode::Upsert).unwrap();
        e.delete(b"k").unwrap();
        assert_eq!(e.version.load(Ordering::Relaxed), 4);
    }
}
