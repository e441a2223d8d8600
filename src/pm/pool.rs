//! The pool: a file (or, for tests and the crash simulator, anonymous memory)
//! mapped into the process, with the store, flush and fence API that every
//! engine uses.
//!
//! # Layout
//! ```text
//! 0        4096          8192                                     heap_offset
//! | header | lane records | chunk descriptors | chunk bitmaps | pad | chunk 0 | chunk 1 | ...
//!          | 64 × 64 B    | 8 B per chunk     | 128 B per chunk     | 64 KiB each
//! ```
//! The header is described in [`super::header`]; lanes, descriptors and
//! bitmaps in [`super::alloc`].
//!
//! # Persistent pointers
//! A persistent pointer is a `u64` byte offset from the start of the pool;
//! 0 is null (offset 0 is the header, never a block). A pool can be mapped at
//! any address.
//!
//! # Stores
//! Every store to PM goes through this API, so that the crash simulator, which
//! installs a [`PmObserver`], sees each one. 8-byte stores ([`Pool::store_u64`])
//! are single aligned `mov`s: failure-atomic on x86-64. Range writes
//! ([`Pool::write_bytes`]) may tear at 8-byte boundaries. Nothing is durable
//! until it is flushed and a fence follows ([`Pool::persist`]).
//!
//! # Mapping modes
//! On a DAX file system the file is mapped `MAP_SHARED_VALIDATE | MAP_SYNC`:
//! flushed stores are durable without `msync`. Elsewhere it is mapped
//! `MAP_SHARED`: the page cache holds the data, so it survives a killed
//! process but not a power failure (it is written back by `msync` on close,
//! or by the kernel at its own pace). [`Pool::open_read_only`] maps the file
//! `MAP_PRIVATE` instead: recovery's stores change this process's copies of
//! the pages they touch, never the file (docs/design.md §3, "Read-only
//! opens").

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::alloc::Heap;
use super::counters;
use super::faults::Fault;
use super::file::{allocate_file, lock_file, lock_file_shared, open_existing, Unfinished};
use super::header::{
    self, RawHeader, FORMAT_VERSION, HEADER_BYTES, HEADER_SIZE, MAGIC, OLDEST_FORMAT_VERSION,
    ROOTS_OFFSET,
};
use super::persist::{self, FlushKind, PersistConfig, CACHE_LINE};
use crate::error::{Error, Result};

/// Bytes per heap chunk.
pub const CHUNK_SIZE: u64 = 64 * 1024;
/// Number of allocator lane records.
pub const LANE_COUNT: u64 = 64;
/// Bytes per lane record.
pub const LANE_SIZE: u64 = 64;
/// Bytes of bitmap per chunk.
pub const BITMAP_BYTES: u64 = 128;
/// Smallest pool: the metadata pages and at least a few heap chunks.
pub const MIN_POOL_SIZE: u64 = 1 << 20;
/// Largest pool (the chunk index is 32 bits).
pub const MAX_POOL_SIZE: u64 = 1 << 46;

/// Sees every PM store, flush and fence of a pool, in program order. The
/// crash simulator implements it; normal pools have none.
pub trait PmObserver: Send + Sync {
    /// `bytes` were stored at `offset` (after the store happened).
    fn store(&self, offset: u64, bytes: &[u8]);
    /// The cache line at `line` (a multiple of 64) is flushed (called just
    /// before the flush instruction, so that a store recorded before the
    /// flush happened before it; see [`Pool::flush`]).
    fn flush(&self, line: u64);
    /// A fence was issued.
    fn fence(&self);
    /// An atomic read-modify-write of the 8-byte word at `offset`: `op`
    /// performs it and returns the word's new value, which is then a store.
    /// An observer that orders the events of several threads runs `op`
    /// inside that order, so that two threads' read-modify-writes of one
    /// word are recorded in the order they took effect (recorded after the
    /// fact, the later one's value could be recorded first and the other's
    /// bit lost from the record). The default runs `op` and records the
    /// store.
    fn rmw(&self, offset: u64, op: &mut dyn FnMut() -> u64) {
        let new = op();
        self.store(offset, &new.to_le_bytes());
    }
}

/// How to map and persist a pool.
#[derive(Clone, Default)]
pub struct PoolConfig {
    /// Flush instruction and latency emulation.
    pub persist: PersistConfig,
    /// Crash-simulator hook.
    pub observer: Option<Arc<dyn PmObserver>>,
    /// A persist to drop on purpose (the crash harness's self-test only).
    pub fault: Option<Fault>,
    /// Map with base pages only (`madvise(MADV_NOHUGEPAGE)`, which holds
    /// even where the kernel's `transparent_hugepage` is `always`). By
    /// default a writable pool that is not on DAX (anonymous memory, or a
    /// file in the page cache) is advised to the kernel for transparent
    /// huge pages (`madvise(MADV_HUGEPAGE)`), as a DAX pool is mapped with
    /// 2 MiB pages where the file allows (docs/design.md §3, "Huge pages").
    /// A read-only open's private mapping is advised neither way: its pages
    /// are copied only where recovery stores, and those copies should stay
    /// small.
    pub small_pages: bool,
}

impl std::fmt::Debug for PoolConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolConfig")
            .field("persist", &self.persist)
            .field("observer", &self.observer.is_some())
            .field("fault", &self.fault)
            .field("small_pages", &self.small_pages)
            .finish()
    }
}

/// How the pool memory is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
#[serde(rename_all = "snake_case")]
pub enum MappingMode {
    /// A DAX file mapped with `MAP_SHARED_VALIDATE | MAP_SYNC`.
    DaxMapSync,
    /// An ordinary file mapped with `MAP_SHARED` (page cache).
    Shared,
    /// Anonymous memory (tests, crash simulation): lost when dropped.
    Anonymous,
    /// A pool file opened read-only ([`Pool::open_read_only`]), mapped
    /// `MAP_PRIVATE`: what recovery writes stays in this process's copy of
    /// the pages it changes, and the file is never written. A writer maps
    /// it through the page cache ([`MappingMode::Shared`]).
    Private,
    /// [`MappingMode::Private`] of a file on DAX, which a writer maps
    /// [`MappingMode::DaxMapSync`].
    PrivateDax,
}

impl MappingMode {
    /// Whether this is a read-only open's private mapping.
    pub fn is_private(self) -> bool {
        matches!(self, MappingMode::Private | MappingMode::PrivateDax)
    }
}

impl std::fmt::Display for MappingMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MappingMode::DaxMapSync => "MAP_SHARED_VALIDATE|MAP_SYNC (DAX)",
            MappingMode::Shared => "MAP_SHARED (page cache, not DAX)",
            MappingMode::Anonymous => "anonymous (volatile)",
            MappingMode::Private => {
                "MAP_PRIVATE (read-only: the file is not written; writers map it MAP_SHARED, page cache)"
            }
            MappingMode::PrivateDax => {
                "MAP_PRIVATE (read-only: the file is not written; writers map it MAP_SYNC, DAX)"
            }
        })
    }
}

/// The region boundaries derived from a pool size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub lanes_offset: u64,
    pub desc_offset: u64,
    pub bitmap_offset: u64,
    pub heap_offset: u64,
    pub chunk_count: u64,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Geometry {
    pub(crate) fn for_size(size: u64) -> Result<Geometry> {
        if size < MIN_POOL_SIZE {
            return Err(Error::BadPoolSize {
                size,
                reason: format!("the smallest pool is {MIN_POOL_SIZE} bytes (1 MiB)"),
            });
        }
        if size > MAX_POOL_SIZE {
            return Err(Error::BadPoolSize {
                size,
                reason: format!("the largest pool is {MAX_POOL_SIZE} bytes (64 TiB)"),
            });
        }
        if !size.is_multiple_of(4096) {
            return Err(Error::BadPoolSize {
                size,
                reason: "the size must be a multiple of 4096".into(),
            });
        }
        let lanes_offset = HEADER_SIZE;
        let desc_offset = lanes_offset + LANE_COUNT * LANE_SIZE;
        let layout = |n: u64| {
            let bitmap_offset = align_up(desc_offset + 8 * n, CACHE_LINE);
            let heap_offset = align_up(bitmap_offset + BITMAP_BYTES * n, CHUNK_SIZE);
            (bitmap_offset, heap_offset, heap_offset + n * CHUNK_SIZE)
        };
        let mut n = (size - desc_offset) / (CHUNK_SIZE + 8 + BITMAP_BYTES);
        while n > 0 && layout(n).2 > size {
            n -= 1;
        }
        if n == 0 {
            return Err(Error::BadPoolSize {
                size,
                reason: "too small to hold one heap chunk".into(),
            });
        }
        let (bitmap_offset, heap_offset, _) = layout(n);
        Ok(Geometry {
            lanes_offset,
            desc_offset,
            bitmap_offset,
            heap_offset,
            chunk_count: n,
        })
    }
}

/// The memory mapping; unmapped on drop.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    mode: MappingMode,
}

// SAFETY: the mapping is plain memory (shared with the file, or this
// process's private or anonymous pages); all access to it goes through
// `Pool`, whose methods document their synchronisation requirements.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

/// The huge-page bytes of the mapping `base..base + len`, from the text of
/// `/proc/PID/smaps`: the sum of the `AnonHugePages`, `ShmemPmdMapped` and
/// `FilePmdMapped` lines (in kB) of the entries inside it (the kernel may
/// split a mapping into several). `None` if no entry lies inside it, or if
/// an entry reaches across either end: the kernel merged the mapping with
/// a neighbour of the same flags (another anonymous pool, say), and its
/// figure is not the pool's alone.
fn huge_bytes_in_smaps(smaps: &str, base: usize, len: usize) -> Option<u64> {
    let end = base.checked_add(len)?;
    let mut inside = false;
    let mut found = false;
    let mut kb = 0u64;
    for line in smaps.lines() {
        // An entry's first line: `START-END PERMS ...`, hexadecimal.
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = base <= a && b <= end;
                    if !inside && a < end && base < b {
                        return None; // Reaches across an end of the mapping.
                    }
                    found |= inside;
                    continue;
                }
            }
        }
        if !inside {
            continue;
        }
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if matches!(name, "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped") {
            let n = rest.trim().trim_end_matches("kB").trim();
            kb += n.parse::<u64>().unwrap_or(0);
        }
    }
    found.then_some(kb * 1024)
}

/// Advises the kernel to back `len` bytes at `p`, a fresh mapping that is
/// not on DAX, with transparent huge pages if `huge` (`MADV_HUGEPAGE`):
/// fewer TLB misses for structures that live in the pool, as a DAX pool
/// mapped with 2 MiB pages has (docs/design.md §3, "Huge pages"); or never
/// with them (`MADV_NOHUGEPAGE`, [`PoolConfig::small_pages`]). Advice
/// only: where the kernel has them off (`transparent_hugepage/enabled` =
/// never, or for a tmpfs file `shmem_enabled` = never) or refuses, the
/// pool keeps base pages, and nothing else changes.
fn advise_huge(p: *mut libc::c_void, len: usize, huge: bool) {
    let advice = if huge {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: `p..p + len` is a mapping this module just made; madvise
    // with either advice changes no contents and its failure is harmless.
    let _ = unsafe { libc::madvise(p, len, advice) };
}

impl Mapping {
    fn map_file(file: &File, len: usize, huge: bool) -> Result<Mapping> {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: mmap with a null hint, a valid fd and a length equal to the
        // file's length; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                fd,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok(Mapping {
                base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
                len,
                mode: MappingMode::DaxMapSync,
            });
        }
        // Not DAX (EOPNOTSUPP) or an old kernel (EINVAL): map through the page cache.
        // SAFETY: as above.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(Error::io("mmap", std::io::Error::last_os_error()));
        }
        advise_huge(p, len, huge);
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            mode: MappingMode::Shared,
        })
    }

    /// A private, copy-on-write mapping of `file` (which may be open
    /// read-only): stores change this process's copy of a page, never the
    /// file.
    fn map_private(file: &File, len: usize) -> Result<Mapping> {
        use std::os::fd::AsRawFd;
        let dax = Self::is_dax(file);
        // SAFETY: mmap with a null hint, a valid fd and a length equal to the
        // file's length; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io("mmap", std::io::Error::last_os_error()));
        }
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            mode: if dax {
                MappingMode::PrivateDax
            } else {
                MappingMode::Private
            },
        })
    }

    /// Whether `file` is on DAX: a read-only `MAP_SYNC` mapping of its
    /// first page succeeds (only DAX allows `MAP_SYNC`); it is undone at
    /// once.
    fn is_dax(file: &File) -> bool {
        use std::os::fd::AsRawFd;
        // One page: the file, a pool, holds at least MIN_POOL_SIZE bytes.
        let page = 4096;
        // SAFETY: a read-only mapping of the file's first page with a null
        // hint; the result is checked against MAP_FAILED, and nothing reads
        // it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        // SAFETY: `p` is the one-page mapping made above, unused since.
        // Failing to unmap it would only leave a page of address space.
        let _ = unsafe { libc::munmap(p, page) };
        true
    }

    fn map_anonymous(len: usize, huge: bool) -> Result<Mapping> {
        // SAFETY: anonymous private mapping with a null hint; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::io("mmap anonymous", std::io::Error::last_os_error()));
        }
        advise_huge(p, len, huge);
        Ok(Mapping {
            base: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            mode: MappingMode::Anonymous,
        })
    }

    fn msync(&self) -> Result<()> {
        if self.mode != MappingMode::Shared {
            return Ok(());
        }
        // SAFETY: base/len describe a live mapping made by `map_file`.
        let r = unsafe { libc::msync(self.base.as_ptr().cast(), self.len, libc::MS_SYNC) };
        if r != 0 {
            return Err(Error::io("msync", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = self.msync();
        // SAFETY: base/len describe a live mapping made by this struct, and
        // every reference into it borrows the owning `Pool`, which is being
        // dropped.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// Loads of 8-byte words from a pool, for search loops; see [`Pool::words`].
#[derive(Clone, Copy)]
pub struct Words<'a> {
    pool: &'a Pool,
    base: NonNull<u8>,
    // Index (offset / 8) of the last whole word in the mapping.
    last_word: u64,
}

impl<'a> Words<'a> {
    /// Loads the word at `off` (8-byte aligned, inside the pool), as
    /// [`Pool::load_u64`] does but with relaxed ordering: callers are
    /// searches that hold their structure's lock, which orders them after
    /// every writer.
    #[inline(always)]
    pub fn load(self, off: u64) -> Result<u64> {
        // One test for both conditions: rotating an unaligned offset moves
        // its low bits to the top, past any word index.
        if off.rotate_right(3) > self.last_word {
            return Err(Words::bad(self.pool, off));
        }
        // SAFETY: `off + 8 <= map.len` and `off` is 8-byte aligned (the
        // mapping is page aligned), so this is an aligned word inside the
        // mapping, which lives as long as the borrowed pool; every access to
        // PM words goes through atomics (see `Pool::word`).
        let w = unsafe { &*(self.base.as_ptr().add(off as usize) as *const AtomicU64) };
        Ok(w.load(Ordering::Relaxed))
    }

    /// The `BYTES` bytes at `off` as a [`WordBlock`], checked once: `off`
    /// is 8-byte aligned, not 0, and `off + BYTES` is inside the pool.
    /// `None` otherwise. Offset 0 (the pool header, never an engine's
    /// block) is refused so that an engine's null test and the bounds test
    /// are one compare: a search loop does one check per node instead of
    /// one per word.
    #[inline(always)]
    pub fn block<const BYTES: u64>(self, off: u64) -> Option<WordBlock<'a, BYTES>> {
        const { assert!(BYTES >= 8 && BYTES.is_multiple_of(8)) };
        // `off - 8`, rotated, is `(off - 8) / 8` for an aligned `off >= 8`,
        // and has its top bits set otherwise (0 wraps; low bits rotate up).
        // Its largest good value: `off + BYTES == (last_word + 1) * 8`.
        let last = (self.last_word + 1).checked_sub(BYTES / 8 + 1)?;
        if off.wrapping_sub(8).rotate_right(3) > last {
            return None;
        }
        // SAFETY: `8 <= off <= map.len - BYTES` (just checked), so the
        // pointer stays inside the mapping.
        let at = unsafe { self.base.add(off as usize) };
        Some(WordBlock {
            at,
            _pool: std::marker::PhantomData,
        })
    }

    /// Asks the CPU to bring the cache line holding `off` closer, without
    /// waiting for it: a hint that reads nothing and cannot fault, for any
    /// `off` ([`crate::hint::prefetch_ptr`]; the address is computed with a
    /// wrapping add and never dereferenced). Batched searches issue it for
    /// the next node of each key in flight, so that their misses overlap.
    #[inline(always)]
    pub fn prefetch(self, off: u64) {
        crate::hint::prefetch_ptr(self.base.as_ptr().wrapping_add(off as usize));
    }

    // Takes the pool alone (one register), so that a search loop need not
    // keep the whole `Words` in memory for this call.
    #[cold]
    #[inline(never)]
    fn bad(pool: &Pool, off: u64) -> Error {
        pool.word(off)
            .err()
            .unwrap_or_else(|| Error::corrupt(off, "word outside the pool"))
    }
}

/// `BYTES` bytes of a pool, 8-byte aligned and inside the mapping (checked
/// by [`Words::block`]): loads within them need no further test.
#[derive(Clone, Copy)]
pub struct WordBlock<'a, const BYTES: u64> {
    at: NonNull<u8>,
    _pool: std::marker::PhantomData<&'a Pool>,
}

impl<'a, const BYTES: u64> WordBlock<'a, BYTES> {
    /// Loads the word `at` bytes into the block (relaxed, as
    /// [`Words::load`]). Panics unless `at` is a multiple of 8 below
    /// `BYTES`; with `at` a constant, or computed from a masked index, the
    /// compiler proves that and the test costs nothing.
    #[inline(always)]
    pub fn load(self, at: u64) -> u64 {
        assert!(
            at < BYTES && at.is_multiple_of(8),
            "word {at} outside a {BYTES}-byte block"
        );
        // SAFETY: the block's `BYTES` bytes are inside the mapping and it
        // starts 8-byte aligned (`Words::block`); `at` is a multiple of 8
        // below `BYTES` (just checked). The mapping lives as long as the
        // borrowed pool; PM words are read through atomics (`Pool::word`).
        let w = unsafe { &*(self.at.as_ptr().add(at as usize) as *const AtomicU64) };
        w.load(Ordering::Relaxed)
    }

    /// The `len` bytes `at` bytes into the block, as [`Pool::bytes`] gives
    /// them but with no test against the pool. Panics unless they lie in
    /// the block.
    ///
    /// # Safety
    ///
    /// As [`Pool::bytes`]: nothing writes these bytes while the slice
    /// lives.
    #[inline(always)]
    pub unsafe fn bytes(self, at: u64, len: u64) -> &'a [u8] {
        assert!(
            at <= BYTES && len <= BYTES - at,
            "bytes {at}+{len} outside a {BYTES}-byte block"
        );
        // SAFETY: `at + len <= BYTES`, and the block's `BYTES` bytes are
        // inside the mapping (`Words::block`), which lives as long as the
        // borrowed pool; no writer while the slice lives (the caller).
        unsafe { std::slice::from_raw_parts(self.at.as_ptr().add(at as usize), len as usize) }
    }
}

/// An open pool.
pub struct Pool {
    map: Mapping,
    // Keeps the file lock; `None` for anonymous pools.
    _file: Option<File>,
    path: Option<PathBuf>,
    header: RawHeader,
    persist: PersistConfig,
    observer: Option<Arc<dyn PmObserver>>,
    fault: Option<Fault>,
    heap: Heap,
    /// Every page was mapped by [`Pool::prefault_all`]: the allocator's mapping
    /// of fresh heap ([`Pool::prefault`]) has nothing left to do.
    all_mapped: AtomicBool,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("size", &self.header.pool_size)
            .field("engine", &self.header.engine_id())
            .field("mode", &self.map.mode)
            .finish()
    }
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Pool {
    /// Creates a pool file of `size` bytes for `engine`, with its disk blocks
    /// allocated. Fails if the file exists or the disk cannot hold it.
    pub fn create(path: &Path, size: u64, engine: &str, cfg: &PoolConfig) -> Result<Pool> {
        let geometry = Geometry::for_size(size)?;
        let engine_id = header::encode_engine_id(engine)?;
        // The file is ours once made: until its header is durable, an error
        // or a signal (where the program asked, `signal::remove_on_signal`)
        // removes it. Sizing a large pool takes seconds; an interrupted
        // create must not leave a file that only says "not a pmindex pool"
        // and blocks the name. Signals wait while the file is made and
        // registered, so that none falls in between.
        let (file, mut unfinished) = {
            let _held = super::signal::Deferred::new();
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| Error::io(format!("create {}", path.display()), e))?;
            (file, Unfinished::new(path))
        };
        lock_file(&file, path)?;
        allocate_file(&file, size).map_err(|e| {
            Error::io(
                format!("reserve {size} bytes of disk for {}", path.display()),
                e,
            )
        })?;
        let map = Mapping::map_file(&file, size as usize, !cfg.small_pages)?;
        let pool = Self::format(map, Some(file), Some(path), geometry, engine_id, size, cfg)?;
        pool.map.msync()?;
        unfinished.done();
        Ok(pool)
    }

    /// Creates a volatile pool in anonymous memory (tests, crash simulation).
    pub fn create_anonymous(size: u64, engine: &str, cfg: &PoolConfig) -> Result<Pool> {
        let geometry = Geometry::for_size(size)?;
        let engine_id = header::encode_engine_id(engine)?;
        let map = Mapping::map_anonymous(size as usize, !cfg.small_pages)?;
        Self::format(map, None, None, geometry, engine_id, size, cfg)
    }

    /// Writes a fresh header into a zeroed mapping. Persist order: every
    /// header field but `magic`, flush, fence; then `magic`, flush, fence.
    /// The lane records, descriptors and bitmaps are all zero already (a new
    /// sparse file or anonymous memory), which is their empty state.
    fn format(
        map: Mapping,
        file: Option<File>,
        path: Option<&Path>,
        geometry: Geometry,
        engine: [u8; header::ENGINE_ID_LEN],
        size: u64,
        cfg: &PoolConfig,
    ) -> Result<Pool> {
        let mut uuid = [0u8; 16];
        rand::Rng::fill(&mut rand::thread_rng(), &mut uuid[..]);
        let mut h = RawHeader {
            magic: MAGIC,
            version: FORMAT_VERSION,
            header_size: HEADER_SIZE as u32,
            engine,
            pool_size: size,
            uuid,
            created_unix_ns: now_unix_ns(),
            lanes_offset: geometry.lanes_offset,
            lane_count: LANE_COUNT,
            desc_offset: geometry.desc_offset,
            bitmap_offset: geometry.bitmap_offset,
            heap_offset: geometry.heap_offset,
            chunk_count: geometry.chunk_count,
            chunk_size: CHUNK_SIZE,
            checksum: 0,
            roots: [0; header::ROOT_SLOTS],
            heap_frontier: 0,
        };
        h.checksum = h.compute_checksum();
        let pool = Pool {
            heap: Heap::empty(&geometry),
            map,
            _file: file,
            path: path.map(Path::to_path_buf),
            header: h,
            persist: cfg.persist,
            observer: cfg.observer.clone(),
            fault: cfg.fault,
            all_mapped: AtomicBool::new(false),
        };
        let bytes = h.to_bytes();
        // SAFETY: the pool is not shared with any other thread yet.
        unsafe { pool.write_bytes(8, &bytes[8..])? };
        pool.persist(0, bytes.len() as u64);
        // SAFETY: as above.
        unsafe { pool.write_bytes(0, &bytes[..8])? };
        pool.persist(0, 8);
        Ok(pool)
    }

    /// Opens an existing pool file. With `expected_engine`, fails with
    /// [`Error::WrongEngine`] if the pool was made for another engine.
    pub fn open(path: &Path, expected_engine: Option<&str>, cfg: &PoolConfig) -> Result<Pool> {
        let file = open_existing(path, true)?;
        lock_file(&file, path)?;
        let h = read_header(&file, path, expected_engine)?;
        let map = Mapping::map_file(&file, h.pool_size as usize, !cfg.small_pages)?;
        Self::recovered(map, Some(file), Some(path), h, cfg)
    }

    /// Opens the pool file at `path` for reading only: the file is opened
    /// read-only and mapped privately (copy-on-write), so the allocator's
    /// and the engine's recovery run on this process's copy of the pages
    /// they change and the file is never written, whatever it holds. For
    /// inspecting a pool (`info`, `check`) and for readers that share the
    /// pool: it takes a shared lock, so read-only opens run at once while
    /// a writer's open ([`Pool::open`]) is refused, and the other way
    /// round. Stores through the pool change only the private copy; the
    /// caller must not offer writes on it ([`crate::Db`] refuses them).
    pub fn open_read_only(
        path: &Path,
        expected_engine: Option<&str>,
        cfg: &PoolConfig,
    ) -> Result<Pool> {
        let file = open_existing(path, false)?;
        lock_file_shared(&file, path)?;
        let h = read_header(&file, path, expected_engine)?;
        let map = Mapping::map_private(&file, h.pool_size as usize)?;
        Self::recovered(map, Some(file), Some(path), h, cfg)
    }

    /// The pool whose bytes `map` holds (header `h`), with its allocator
    /// recovered: the end of every open.
    fn recovered(
        map: Mapping,
        file: Option<File>,
        path: Option<&Path>,
        h: RawHeader,
        cfg: &PoolConfig,
    ) -> Result<Pool> {
        let geometry = Geometry::for_size(h.pool_size)?;
        let pool = Pool {
            heap: Heap::empty(&geometry),
            map,
            _file: file,
            path: path.map(Path::to_path_buf),
            header: h,
            persist: cfg.persist,
            observer: cfg.observer.clone(),
            fault: cfg.fault,
            all_mapped: AtomicBool::new(false),
        };
        pool.heap.recover(&pool)?;
        Ok(pool)
    }

    /// Whether the pool was opened with [`Pool::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.map.mode.is_private()
    }

    /// The engine the pool file at `path` was made for, from its header
    /// alone (validated as [`Pool::open`] does; nothing is mapped, locked or
    /// recovered): for a caller that must know it before opening, such as
    /// the command line resolving engine settings given without a prefix.
    pub fn engine_of(path: &Path) -> Result<String> {
        let file = open_existing(path, false)?;
        Ok(read_header(&file, path, None)?.engine_id())
    }

    /// Opens a pool from an in-memory image (a crash image, or a copy made by
    /// [`Pool::image`]) in anonymous memory.
    pub fn open_image(
        image: &[u8],
        expected_engine: Option<&str>,
        cfg: &PoolConfig,
    ) -> Result<Pool> {
        let fake = Path::new("<image>");
        if image.len() < HEADER_BYTES {
            return Err(Error::NotAPool {
                path: fake.to_path_buf(),
                reason: format!(
                    "the image is {} bytes, too short to hold a pool header",
                    image.len()
                ),
            });
        }
        let mut first = [0u8; HEADER_BYTES];
        first.copy_from_slice(&image[..HEADER_BYTES]);
        let h = validate_header(fake, &first, image.len() as u64, expected_engine)?;
        let map = Mapping::map_anonymous(h.pool_size as usize, !cfg.small_pages)?;
        // SAFETY: the mapping is fresh, `pool_size` bytes long, and equal to
        // `image.len()` (checked by `validate_header`).
        unsafe {
            std::ptr::copy_nonoverlapping(image.as_ptr(), map.base.as_ptr(), image.len());
        }
        Self::recovered(map, None, None, h, cfg)
    }

    /// A copy of the whole pool's bytes.
    pub fn image(&self) -> Vec<u8> {
        // SAFETY: the caller of `image` must not run concurrent writers; the
        // method exists for tests and the crash simulator, which are
        // single-threaded while they take images.
        unsafe { std::slice::from_raw_parts(self.map.base.as_ptr(), self.map.len).to_vec() }
    }

    /// Writes dirty pages of a page-cache mapping back to the file (no-op on
    /// DAX and anonymous pools).
    pub fn sync(&self) -> Result<()> {
        self.map.msync()
    }

    // ----- facts ---------------------------------------------------------

    /// Pool size in bytes.
    pub fn size(&self) -> u64 {
        self.header.pool_size
    }
    /// The immutable header as read at open.
    pub fn header(&self) -> &RawHeader {
        &self.header
    }
    /// The engine id stored in the header.
    pub fn engine_id(&self) -> String {
        self.header.engine_id()
    }
    /// How the pool is mapped.
    pub fn mapping_mode(&self) -> MappingMode {
        self.map.mode
    }

    /// Bytes of the pool's mapping the kernel backs with huge pages now
    /// (`AnonHugePages`, `ShmemPmdMapped` and `FilePmdMapped` of its entries
    /// in `/proc/self/smaps`), for a writable mapping that is not on DAX;
    /// `None` for the others, or where that cannot be read (not Linux, or
    /// the mapping merged with a neighbour). Says whether the advice of
    /// [`PoolConfig::small_pages`] took effect.
    pub fn huge_page_bytes(&self) -> Option<u64> {
        // A DAX mapping's 2 MiB pages are device memory, which smaps does not
        // count; a private mapping is a read-only open's, never advised, and
        // says nothing of the writers' pages.
        if self.map.mode != MappingMode::Anonymous && self.map.mode != MappingMode::Shared {
            return None;
        }
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        huge_bytes_in_smaps(&smaps, self.map.base.as_ptr() as usize, self.map.len)
    }
    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// Flush instruction and latency emulation in use.
    pub fn persist_config(&self) -> PersistConfig {
        self.persist
    }
    pub(crate) fn heap(&self) -> &Heap {
        &self.heap
    }
    /// Whether `fault` is switched on for this pool (crash-harness self-test).
    #[inline]
    pub fn fault(&self, fault: Fault) -> bool {
        self.fault == Some(fault)
    }

    /// Offset of root slot `i` (0..8), for engines to publish their roots.
    pub fn root_slot(&self, i: usize) -> Result<u64> {
        if i >= header::ROOT_SLOTS {
            return Err(Error::InvalidArgument(format!(
                "root slot {i} out of range (0..{})",
                header::ROOT_SLOTS
            )));
        }
        Ok(ROOTS_OFFSET + 8 * i as u64)
    }

    /// The offset of the first non-zero byte in `off..off + len`, if any.
    ///
    /// # Safety
    /// No thread may write the range meanwhile (the allocator calls it on
    /// chunks never handed out, under its state lock).
    pub(crate) unsafe fn first_nonzero(&self, off: u64, len: u64) -> Result<Option<u64>> {
        let p = self.check(off, len)?;
        // SAFETY: `check` bounds the range inside the mapping; the caller
        // guarantees that nobody writes it while the slice lives.
        let bytes = unsafe { std::slice::from_raw_parts(p, len as usize) };
        for (i, block) in bytes.chunks(4096).enumerate() {
            // An OR over the whole block (vectorised), then the position.
            if block.iter().fold(0u8, |a, &b| a | b) != 0 {
                let at = block.iter().position(|&b| b != 0).unwrap_or(0);
                return Ok(Some(off + (i * 4096 + at) as u64));
            }
        }
        Ok(None)
    }

    // ----- store API -----------------------------------------------------

    #[inline(always)]
    fn check(&self, off: u64, len: u64) -> Result<*mut u8> {
        match off.checked_add(len) {
            Some(end) if end <= self.map.len as u64 => {
                // SAFETY: `off + len <= map.len`, so the result stays inside
                // (or one past the end of) the mapping.
                Ok(unsafe { self.map.base.as_ptr().add(off as usize) })
            }
            _ => Err(self.out_of_bounds(off, len)),
        }
    }

    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self, off: u64, len: u64) -> Error {
        Error::corrupt(
            off,
            format!(
                "access of {len} bytes past the end of the pool ({} bytes)",
                self.map.len
            ),
        )
    }

    #[cold]
    #[inline(never)]
    fn misaligned(off: u64) -> Error {
        Error::corrupt(off, "misaligned 8-byte word")
    }

    #[inline(always)]
    fn word(&self, off: u64) -> Result<&AtomicU64> {
        if !off.is_multiple_of(8) {
            return Err(Self::misaligned(off));
        }
        let p = self.check(off, 8)?;
        // SAFETY: `p` is 8-byte aligned (the mapping is page aligned and `off`
        // is a multiple of 8), inside the mapping, and lives as long as `self`.
        // Every access to PM words goes through atomics or through the unsafe
        // range methods, whose callers promise no concurrent conflicting access.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }

    /// A view for hot read loops (a tree search): the mapping's base and
    /// length in a small copyable value, so each load is one bounds and
    /// alignment test and one move, with nothing reloaded through the pool.
    #[inline(always)]
    pub fn words(&self) -> Words<'_> {
        Words {
            pool: self,
            base: self.map.base,
            // The mapping's length is a multiple of the page size, so the
            // word at `last_word * 8` ends exactly at its end.
            last_word: (self.map.len as u64 / 8).saturating_sub(1),
        }
    }

    /// Loads the 8-byte word at `off` (must be 8-byte aligned).
    #[inline]
    pub fn load_u64(&self, off: u64) -> Result<u64> {
        Ok(self.word(off)?.load(Ordering::Acquire))
    }

    /// Stores the 8-byte word at `off` with one failure-atomic store.
    #[inline]
    pub fn store_u64(&self, off: u64, value: u64) -> Result<()> {
        self.word(off)?.store(value, Ordering::Release);
        if let Some(o) = &self.observer {
            o.store(off, &value.to_le_bytes());
        }
        Ok(())
    }

    /// Atomically ORs `bits` into the word at `off`; returns the old value.
    #[inline]
    pub fn fetch_or_u64(&self, off: u64, bits: u64) -> Result<u64> {
        self.read_modify_write(
            off,
            |w| w.fetch_or(bits, Ordering::AcqRel),
            |old| old | bits,
        )
    }

    /// Atomically ANDs `mask` into the word at `off`; returns the old value.
    #[inline]
    pub fn fetch_and_u64(&self, off: u64, mask: u64) -> Result<u64> {
        self.read_modify_write(
            off,
            |w| w.fetch_and(mask, Ordering::AcqRel),
            |old| old & mask,
        )
    }

    /// Runs `op` (an atomic read-modify-write returning the old value) on
    /// the word at `off`, inside the observer's order if there is one
    /// ([`PmObserver::rmw`]); `new` gives the stored value from the old.
    #[inline]
    fn read_modify_write(
        &self,
        off: u64,
        op: impl Fn(&AtomicU64) -> u64,
        new: impl Fn(u64) -> u64,
    ) -> Result<u64> {
        let w = self.word(off)?;
        let Some(o) = &self.observer else {
            return Ok(op(w));
        };
        let mut old = 0;
        o.rmw(off, &mut || {
            old = op(w);
            new(old)
        });
        Ok(old)
    }

    /// Copies `data` into PM at `off`. Not failure-atomic: a crash may leave
    /// any subset of its 8-byte words.
    ///
    /// # Safety
    /// No other thread may read or write `off..off + data.len()` while this
    /// runs (the engine's locking, or the block being freshly reserved and
    /// not yet published, guarantees it).
    #[inline]
    pub unsafe fn write_bytes(&self, off: u64, data: &[u8]) -> Result<()> {
        let p = self.check(off, data.len() as u64)?;
        // SAFETY: `p..p+len` is inside the mapping (checked) and the caller
        // guarantees exclusive access; `data` cannot overlap PM it does not
        // own exclusively.
        unsafe { std::ptr::copy(data.as_ptr(), p, data.len()) };
        if let Some(o) = &self.observer {
            o.store(off, data);
        }
        Ok(())
    }

    /// Fills `off..off + len` with zeros. Same contract as [`Pool::write_bytes`].
    ///
    /// # Safety
    /// As for [`Pool::write_bytes`].
    pub unsafe fn zero_bytes(&self, off: u64, len: u64) -> Result<()> {
        let zeros = [0u8; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(4096);
            // SAFETY: forwarded from the caller.
            unsafe { self.write_bytes(off + done, &zeros[..n as usize])? };
            done += n;
        }
        Ok(())
    }

    /// Borrows `len` bytes of PM at `off`.
    ///
    /// # Safety
    /// No other thread may write `off..off + len` while the slice lives.
    #[inline]
    pub unsafe fn bytes(&self, off: u64, len: u64) -> Result<&[u8]> {
        let p = self.check(off, len)?;
        // SAFETY: inside the mapping (checked); the caller guarantees no
        // concurrent writer for the slice's lifetime.
        Ok(unsafe { std::slice::from_raw_parts(p, len as usize) })
    }

    // ----- persistence ---------------------------------------------------

    /// Writes back every cache line of `off..off + len`; does not fence.
    #[inline]
    pub fn flush(&self, off: u64, len: u64) {
        if len == 0 || off.checked_add(len).is_none_or(|e| e > self.map.len as u64) {
            return;
        }
        let first = off & !(CACHE_LINE - 1);
        let end = off + len;
        let kind = self.persist.flush;
        let mut line = first;
        let mut lines = 0;
        while line < end {
            // Recorded before the flush, not after: another thread's store
            // to the line recorded before this flush then happened before
            // it too (stores are recorded after they happen), so the model
            // never takes a flush to cover a store it missed. Recorded
            // after, a store made between this flush and its record would
            // be (found by review, 2026-12-02; writers on one line).
            if let Some(o) = &self.observer {
                o.flush(line);
            }
            if kind != FlushKind::Eadr {
                // `line` is inside the mapping: `first <= off < end <= len`.
                persist::flush_line(kind, self.map.base.as_ptr().wrapping_add(line as usize));
                lines += 1;
                if self.persist.write_extra_ns != 0 {
                    persist::spin_ns(u64::from(self.persist.write_extra_ns));
                }
            }
            line += CACHE_LINE;
        }
        counters::count_flush(lines, len);
    }

    /// Orders every earlier flush and store before every later one.
    #[inline]
    pub fn fence(&self) {
        persist::store_fence();
        counters::count_fence();
        if let Some(o) = &self.observer {
            o.fence();
        }
    }

    /// `flush(off, len)` then `fence()`: the range is durable on return.
    #[inline]
    pub fn persist(&self, off: u64, len: u64) {
        self.flush(off, len);
        self.fence();
    }

    /// A hint that the line at `off` is about to be written (an engine that
    /// knows where its next PM object is, before it gets there): starts
    /// fetching it, so that the store does not wait for it. No effect on
    /// PM contents, the counters or the crash simulator; an offset outside
    /// the pool is ignored.
    #[inline]
    pub fn prefetch_write(&self, off: u64) {
        if off < self.map.len as u64 {
            crate::hint::prefetch_write(self.map.base.as_ptr().wrapping_add(off as usize));
        }
    }

    /// Maps the pages of `off..off + len` writable now (`madvise` with
    /// `MADV_POPULATE_WRITE`), so that the first stores into them take no
    /// page fault: the allocator calls it for each stretch of fresh heap it
    /// opens, once per [`crate::pm::alloc::FRONTIER_STEP`] chunks, instead
    /// of a fault at the first store into each of its pages, which an
    /// engine may make while it holds a lock (docs/design.md §4, "Heap
    /// frontier"). Writes nothing: no effect on PM contents, the counters
    /// or the crash simulator. Best effort: a kernel without it (before
    /// Linux 5.14) or a failure leaves the pages to fault as before.
    pub fn prefault(&self, off: u64, len: u64) {
        // Populating a private mapping for writing would copy every page
        // it covers.
        if self.all_mapped.load(Ordering::Relaxed) || self.is_read_only() {
            return;
        }
        const PAGE: u64 = 4096;
        let end = off.saturating_add(len).min(self.map.len as u64);
        let start = off - off % PAGE;
        if start >= end {
            return;
        }
        // SAFETY: `start..end` lies inside the mapping (clamped above) and
        // `start` is page-aligned (the mapping is); populating page tables
        // changes no byte of memory.
        unsafe {
            libc::madvise(
                self.map.base.as_ptr().add(start as usize).cast(),
                (end - start) as usize,
                libc::MADV_POPULATE_WRITE,
            )
        };
    }

    /// Whether [`Pool::prefault_all`] has mapped every page of this
    /// mapping of the pool.
    pub fn is_prefaulted(&self) -> bool {
        self.all_mapped.load(Ordering::Relaxed)
    }

    /// Maps every page of the pool now (`madvise` with
    /// `MADV_POPULATE_WRITE` over the whole mapping), so that no later
    /// operation takes a page fault, and the allocator no longer maps each
    /// stretch of fresh heap when it opens it, about 300 µs per MiB inside
    /// the reservation that opens it (docs/design.md §4, "Mapping the
    /// whole pool"). Changes no byte. Takes about 1 µs per 4 KiB page
    /// (95-140 ms for 370 MiB here), and the pool's memory, or page cache,
    /// from then on. A pool opened again must be mapped again. Limits: on a
    /// pool file on a disk file system the pages become dirty page cache,
    /// and writeback (`Pool::sync`, the kernel's flusher) write-protects
    /// them again, so later first stores fault again; memory pressure may
    /// evict pages. Fails if the kernel cannot (before Linux 5.14; a full
    /// `tmpfs`); the pool is unchanged and usable then.
    pub fn prefault_all(&self) -> Result<()> {
        if self.all_mapped.load(Ordering::Relaxed) {
            return Ok(());
        }
        if self.is_read_only() {
            // It would copy every page into this process's memory.
            return Err(Error::ReadOnly);
        }
        loop {
            // SAFETY: the whole mapping, from its page-aligned base;
            // populating page tables changes no byte of memory.
            let rc = unsafe {
                libc::madvise(
                    self.map.base.as_ptr().cast(),
                    self.map.len,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io(
                    format!(
                        "map every page of the pool{} ({} bytes; madvise MADV_POPULATE_WRITE, Linux 5.14 or later)",
                        self.path
                            .as_ref()
                            .map_or_else(String::new, |p| format!(" {}", p.display())),
                        self.map.len
                    ),
                    e,
                ));
            }
            // A signal came first: the pages mapped so far stay mapped.
        }
        self.all_mapped.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Read hook for `lines` cache lines an engine has counted itself (a
    /// search that tallies the distinct lines of its path): counts them and
    /// charges the emulated read latency, as [`Pool::touch`] does.
    #[inline]
    pub fn touch_lines(&self, lines: u64) {
        if lines == 0 {
            return;
        }
        counters::count_read(lines);
        if self.persist.read_extra_ns != 0 {
            persist::spin_ns(lines * u64::from(self.persist.read_extra_ns));
        }
    }

    /// Read hook: an engine reports that it read PM `off..off + len`. Counts
    /// the cache lines and charges the emulated read latency.
    #[inline]
    pub fn touch(&self, off: u64, len: u64) {
        self.touch_lines(persist::lines_spanned(off, len));
    }
}

/// Reads and validates the header of the pool file `file` (at `path`).
fn read_header(file: &File, path: &Path, expected_engine: Option<&str>) -> Result<RawHeader> {
    use std::os::unix::fs::FileExt;
    let file_len = file
        .metadata()
        .map_err(|e| Error::io(format!("stat {}", path.display()), e))?
        .len();
    let mut first = [0u8; HEADER_BYTES];
    if file_len < first.len() as u64 {
        return Err(Error::NotAPool {
            path: path.to_path_buf(),
            reason: format!("the file is {file_len} bytes, too short to hold a pool header"),
        });
    }
    file.read_exact_at(&mut first, 0)
        .map_err(|e| Error::io(format!("read {}", path.display()), e))?;
    validate_header(path, &first, file_len, expected_engine)
}

/// Checks a header read from a file or image of `file_len` bytes.
fn validate_header(
    path: &Path,
    first: &[u8; HEADER_BYTES],
    file_len: u64,
    expected_engine: Option<&str>,
) -> Result<RawHeader> {
    let h = RawHeader::from_bytes(first);
    if h.magic != MAGIC {
        let reason = if h.magic == [0; 8] && first.iter().any(|&b| b != 0) {
            "the magic number is missing: pool creation never finished".to_string()
        } else {
            format!(
                "wrong magic number {:02x?} (expected {:02x?} \"PMINDEX\")",
                h.magic, MAGIC
            )
        };
        return Err(Error::NotAPool {
            path: path.to_path_buf(),
            reason,
        });
    }
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&h.version) {
        return Err(Error::UnsupportedVersion {
            path: path.to_path_buf(),
            found: h.version,
            oldest: OLDEST_FORMAT_VERSION,
            supported: FORMAT_VERSION,
        });
    }
    let sum = h.compute_checksum();
    if sum != h.checksum {
        return Err(Error::corrupt(
            header::CHECKSUM_OFFSET,
            format!(
                "header checksum mismatch: stored {:#010x}, computed {:#010x}",
                h.checksum, sum
            ),
        ));
    }
    if file_len < h.pool_size {
        return Err(Error::corrupt(
            file_len,
            format!(
                "file is truncated: the header says {} bytes, the file has {file_len}",
                h.pool_size
            ),
        ));
    }
    if file_len > h.pool_size {
        return Err(Error::corrupt(
            h.pool_size,
            format!(
                "file is longer than the pool: the header says {} bytes, the file has {file_len}",
                h.pool_size
            ),
        ));
    }
    let g = Geometry::for_size(h.pool_size).map_err(|e| Error::corrupt(32, e.to_string()))?;
    let stored = (
        h.header_size as u64,
        h.lanes_offset,
        h.lane_count,
        h.desc_offset,
        h.bitmap_offset,
        h.heap_offset,
        h.chunk_count,
        h.chunk_size,
    );
    let expected = (
        HEADER_SIZE,
        g.lanes_offset,
        LANE_COUNT,
        g.desc_offset,
        g.bitmap_offset,
        g.heap_offset,
        g.chunk_count,
        CHUNK_SIZE,
    );
    if stored != expected {
        return Err(Error::corrupt(
            12,
            format!(
                "header geometry {stored:?} does not match the pool size (expected {expected:?})"
            ),
        ));
    }
    if let Some(e) = expected_engine {
        let found = h.engine_id();
        if found != e {
            return Err(Error::WrongEngine {
                expected: e.to_string(),
                found,
            });
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// Whether the page at `off` of `pool`'s mapping is resident.
    fn resident(pool: &Pool, off: u64) -> bool {
        let mut v = 0u8;
        let at = pool
            .map
            .base
            .as_ptr()
            .wrapping_add(off as usize & !(PAGE - 1));
        // SAFETY: `at` is a page-aligned address inside the mapping, and
        // `v` holds the one byte `mincore` writes for one page.
        let rc = unsafe { libc::mincore(at.cast(), PAGE, &mut v) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v & 1 == 1
    }

    /// A pool on base pages: the residency tests look at single 4 KiB
    /// pages, and a huge page makes its whole 2 MiB resident at the first
    /// store (formatting writes the metadata near the start of the pool).
    fn base_pages() -> PoolConfig {
        PoolConfig {
            small_pages: true,
            ..PoolConfig::default()
        }
    }

    /// Whether this kernel has `MADV_POPULATE_WRITE` (Linux 5.14).
    fn populate_supported() -> bool {
        // SAFETY: a private anonymous page of our own, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let ok = libc::madvise(p, PAGE, libc::MADV_POPULATE_WRITE) == 0;
            libc::munmap(p, PAGE);
            ok
        }
    }

    #[test]
    fn prefault_all_maps_every_page_and_says_so() {
        if !populate_supported() {
            eprintln!("skipped: this kernel has no MADV_POPULATE_WRITE");
            return;
        }
        let size: u64 = 16 << 20;
        let pool = Pool::create_anonymous(size, "test", &base_pages()).unwrap();
        let heap = pool.header.heap_offset;
        let probes = [heap + (1 << 20), heap + (8 << 20) + 4096, size - 4096];
        for &off in &probes {
            assert!(!resident(&pool, off), "page at {off} resident before");
        }
        assert!(!pool.all_mapped.load(Ordering::Relaxed));
        pool.prefault_all().unwrap();
        assert!(pool.all_mapped.load(Ordering::Relaxed));
        for off in (0..size).step_by(PAGE) {
            assert!(resident(&pool, off), "page at {off} not mapped");
        }
        // Nothing was written, and the pool works as before.
        assert_eq!(pool.load_u64(probes[1]).unwrap(), 0);
        let r = pool.reserve(3 << 20).unwrap();
        assert!(r.zeroed());
        pool.prefault_all().unwrap();
    }

    /// The smaps reader sums the huge-page lines of the entries inside the
    /// pool's range, and gives up on one that reaches across its ends.
    #[test]
    fn huge_page_bytes_come_from_the_pool_entries_of_smaps() {
        let smaps = "\
55ad8aa00000-55ad8d800000 rw-p 00000000 00:00 0                          [heap]
Size:              47104 kB
AnonHugePages:     47104 kB
7f9b15200000-7f9b25000000 rw-p 00000000 00:00 0 
Size:             262144 kB
Rss:               49152 kB
AnonHugePages:     45056 kB
ShmemPmdMapped:     2048 kB
VmFlags: rd wr mr mw me ac sd hg 
7f9b25000000-7f9b25200000 rw-p 00000000 fe:00 1234   /tmp/a-b c.pool
FilePmdMapped:      2048 kB
7f9b25200000-7f9b25400000 rw-p 00000000 00:00 0 
AnonHugePages:      2048 kB
";
        let mb = 1 << 20;
        // One entry, or two (a mapping the kernel split).
        assert_eq!(
            huge_bytes_in_smaps(smaps, 0x7f9b_1520_0000, 254 * mb),
            Some(47104 * 1024)
        );
        assert_eq!(
            huge_bytes_in_smaps(smaps, 0x7f9b_1520_0000, 256 * mb),
            Some(49152 * 1024)
        );
        assert_eq!(
            huge_bytes_in_smaps(smaps, 0x55ad_8aa0_0000, 46 * mb),
            Some(47104 * 1024)
        );
        // An entry reaching past either end: merged with a neighbour.
        assert_eq!(huge_bytes_in_smaps(smaps, 0x7f9b_1520_0000, 8 * mb), None);
        assert_eq!(huge_bytes_in_smaps(smaps, 0x7f9b_1540_0000, 300 * mb), None);
        // No entry inside.
        assert_eq!(huge_bytes_in_smaps(smaps, 0x1000, 4096), None);
        assert_eq!(huge_bytes_in_smaps("", 0x1000, 4096), None);
        // A live anonymous pool, with either page policy: its entries (if
        // it did not merge with another test's pool) hold at most the pool.
        if std::path::Path::new("/proc/self/smaps").exists() {
            for small_pages in [false, true] {
                let cfg = PoolConfig {
                    small_pages,
                    ..PoolConfig::default()
                };
                let pool = Pool::create_anonymous(8 << 20, "test", &cfg).unwrap();
                if let Some(b) = pool.huge_page_bytes() {
                    assert!(b <= pool.size(), "{b} bytes of huge pages in the pool");
                    if small_pages {
                        assert_eq!(b, 0, "huge pages in a pool mapped with base pages");
                    }
                }
            }
        }
    }

    #[test]
    fn fresh_heap_is_mapped_when_the_frontier_opens_it_not_at_first_store() {
        if !populate_supported() {
            eprintln!("skipped: this kernel has no MADV_POPULATE_WRITE");
            return;
        }
        let pool = Pool::create_anonymous(64 << 20, "test", &base_pages()).unwrap();
        let heap = pool.header.heap_offset;
        // 4 MiB into the heap: far from the metadata that formatting wrote.
        let probe = heap + (4 << 20);
        assert!(!resident(&pool, probe), "untouched heap is not resident");
        // One large block over the probe raises the frontier past it.
        let r = pool.reserve(6 << 20).unwrap();
        assert!(r.offset() <= probe && probe < r.offset() + r.size());
        for off in (r.offset()..r.offset() + r.size()).step_by(PAGE) {
            assert!(
                resident(&pool, off),
                "page at {off} not mapped before any store"
            );
        }
        // Nothing was written: the block is still zero.
        assert!(r.zeroed());
        assert_eq!(pool.load_u64(probe).unwrap(), 0);
    }
}
