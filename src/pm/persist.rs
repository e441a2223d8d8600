//! Flush and fence primitives: the only place in the crate that issues
//! `clwb`, `clflushopt`, `clflush` or `sfence`.
//!
//! # Choosing the instruction
//! The instruction is chosen at run time, never at build time: [`FlushKind::detect`]
//! reads CPUID and takes `clwb` if the CPU has it, else `clflushopt`, else
//! `clflush`. A pool can be told to use any of them (or [`FlushKind::Eadr`],
//! which issues fences only) through [`PersistConfig`].
//!
//! # What the instructions guarantee (x86-64)
//! - `clwb` and `clflushopt` start the write-back of one cache line; they are
//!   ordered only by a later `sfence` (or `mfence` / locked instruction).
//!   After `clwb L; sfence` every store to `L` that preceded the `clwb` in
//!   program order has reached the persistence domain (the memory controller's
//!   write-pending queue, which ADR drains on power loss).
//! - `clflush` is ordered with other stores and `clflush`es by itself; we still
//!   issue the `sfence` so that all three kinds share one persist order.
//! - With eADR (or CXL memory whose caches are in the persistence domain) the
//!   caches are drained on power loss, so a store is persistent once it is
//!   globally visible; only the fence (ordering) is needed, no flush.
//!
//! On targets other than x86-64 the flush is a no-op and the fence a
//! `SeqCst` fence: such builds are for development only.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The size of a cache line, the unit of flushing.
pub const CACHE_LINE: u64 = 64;

/// Cache lines that the `len` bytes at `off` touch (0 for no bytes).
#[inline(always)]
pub fn lines_spanned(off: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    (off + len - 1) / CACHE_LINE - off / CACHE_LINE + 1
}

/// Which instruction makes a cache line persistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushKind {
    /// `clwb`: write back, keep the line cached (Skylake-SP and later).
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    ClflushOpt,
    /// `clflush`: write back and invalidate, strongly ordered (every x86-64).
    Clflush,
    /// No flush at all: the platform's caches are in the persistence domain
    /// (eADR, or CXL memory with persistent caches). Fences still order stores.
    Eadr,
}

impl FlushKind {
    /// The best flush instruction this CPU has: clwb, else clflushopt, else clflush.
    pub fn detect() -> FlushKind {
        #[cfg(target_arch = "x86_64")]
        {
            let (clwb, clflushopt) = cpuid_flush_features();
            if clwb {
                FlushKind::Clwb
            } else if clflushopt {
                FlushKind::ClflushOpt
            } else {
                FlushKind::Clflush
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            FlushKind::Clflush
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn is_supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let (clwb, clflushopt) = cpuid_flush_features();
            match self {
                FlushKind::Clwb => clwb,
                FlushKind::ClflushOpt => clflushopt,
                FlushKind::Clflush | FlushKind::Eadr => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            true
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::Eadr => "eadr",
        }
    }
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FlushKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "clwb" => Ok(FlushKind::Clwb),
            "clflushopt" => Ok(FlushKind::ClflushOpt),
            "clflush" => Ok(FlushKind::Clflush),
            "eadr" => Ok(FlushKind::Eadr),
            "auto" => Ok(FlushKind::detect()),
            other => Err(Error::InvalidArgument(format!(
                "unknown persistence mode `{other}` (auto, clwb, clflushopt, clflush, eadr)"
            ))),
        }
    }
}

/// CPUID leaf 7, EBX bit 24 (CLWB) and bit 23 (CLFLUSHOPT).
#[cfg(target_arch = "x86_64")]
fn cpuid_flush_features() -> (bool, bool) {
    use std::sync::OnceLock;
    static FEATURES: OnceLock<(bool, bool)> = OnceLock::new();
    *FEATURES.get_or_init(|| {
        // CPUID is available on every x86-64 CPU, and leaf 7 exists when leaf
        // 0 reports a maximum leaf of at least 7.
        let max_leaf = std::arch::x86_64::__cpuid(0).eax;
        if max_leaf < 7 {
            return (false, false);
        }
        let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
        (ebx & (1 << 24) != 0, ebx & (1 << 23) != 0)
    })
}

/// Writes back the cache line that holds `addr` with `kind`'s instruction.
/// Does not fence.
#[inline(always)]
pub(crate) fn flush_line(kind: FlushKind, addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the cache-flush instructions take any address that is mapped
    // in this process and have no effect on memory contents; callers pass an
    // address inside the pool mapping. The instruction was checked against
    // CPUID when the pool's PersistConfig was built (`PersistConfig::new`).
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            FlushKind::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => {
                std::arch::asm!("clflush [{0}]", in(reg) addr, options(nostack, preserves_flags))
            }
            FlushKind::Eadr => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, addr);
    }
}

/// Orders every earlier store and flush before every later one: `sfence`.
#[inline(always)]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no operands and no effect besides ordering.
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags))
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// PM latencies to emulate, as the papers state them: the PM write latency
/// and the PM read latency in ns, against a DRAM latency (100 ns by default,
/// the figure the HART paper measured on its machine, §IV-A).
///
/// The emulator spins for `write_ns - dram_ns` after every flushed cache line
/// and for `read_ns - dram_ns` for every PM line an engine reports reading
/// ([`crate::pm::Pool::touch`]). This is an emulation: it charges time, it
/// does not model PM bandwidth, the write-pending queue or media buffering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PmLatency {
    /// PM write latency in ns.
    pub write_ns: u32,
    /// PM read latency in ns.
    pub read_ns: u32,
    /// The DRAM latency the differences are taken from, in ns.
    pub dram_ns: u32,
}

impl PmLatency {
    /// The extra ns charged per flushed line.
    pub fn write_extra_ns(&self) -> u32 {
        self.write_ns.saturating_sub(self.dram_ns)
    }
    /// The extra ns charged per PM line read.
    pub fn read_extra_ns(&self) -> u32 {
        self.read_ns.saturating_sub(self.dram_ns)
    }
}

impl fmt::Display for PmLatency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.write_ns, self.read_ns)
    }
}

impl PmLatency {
    /// The longest latency [`FromStr`] takes, in ns per line: 100 µs, a
    /// hundred times the slowest persistent memory the papers model.
    pub const MAX_NS: u32 = 100_000;
}

impl FromStr for PmLatency {
    type Err = Error;
    /// Parses `WRITE/READ` in ns (`300/100`), optionally `WRITE/READ@DRAM`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidArgument(format!(
                "bad PM latency `{s}`: expected WRITE/READ in ns, e.g. 300/100 (optionally @DRAM, e.g. 300/100@80)"
            ))
        };
        let (wr, dram) = match s.split_once('@') {
            Some((wr, d)) => (wr, d.trim().parse::<u32>().map_err(|_| bad())?),
            None => (s, 100),
        };
        let (w, r) = wr.split_once('/').ok_or_else(bad)?;
        let write_ns = w.trim().parse::<u32>().map_err(|_| bad())?;
        let read_ns = r.trim().parse::<u32>().map_err(|_| bad())?;
        // Each flushed or read line waits this long: 4,294,967,295 ns, which
        // a u32 takes, made a one-key `put` wait for hours (a review).
        if write_ns.max(read_ns).max(dram) > Self::MAX_NS {
            return Err(Error::InvalidArgument(format!(
                "PM latency `{s}`: at most {} ns per line (each line flushed or \
                 read waits that long)",
                Self::MAX_NS
            )));
        }
        Ok(PmLatency {
            write_ns,
            read_ns,
            dram_ns: dram,
        })
    }
}

/// How a pool makes stores persistent: the flush instruction and the
/// latency emulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistConfig {
    pub(crate) flush: FlushKind,
    pub(crate) write_extra_ns: u32,
    pub(crate) read_extra_ns: u32,
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            flush: FlushKind::detect(),
            write_extra_ns: 0,
            read_extra_ns: 0,
        }
    }
}

impl PersistConfig {
    /// A configuration with `flush` and optional latency emulation. Fails if
    /// this CPU lacks the instruction.
    pub fn new(flush: FlushKind, latency: Option<PmLatency>) -> Result<Self> {
        if !flush.is_supported() {
            return Err(Error::InvalidArgument(format!(
                "this CPU does not support `{flush}`"
            )));
        }
        Ok(PersistConfig {
            flush,
            write_extra_ns: latency.map_or(0, |l| l.write_extra_ns()),
            read_extra_ns: latency.map_or(0, |l| l.read_extra_ns()),
        })
    }
    /// The flush instruction.
    pub fn flush_kind(&self) -> FlushKind {
        self.flush
    }
    /// Extra ns per flushed line and per PM line read.
    pub fn latency_extra_ns(&self) -> (u32, u32) {
        (self.write_extra_ns, self.read_extra_ns)
    }
}

/// Spins for about `ns` nanoseconds (the latency emulator's delay).
#[inline]
pub(crate) fn spin_ns(ns: u64) {
    if ns == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let ticks = ns.saturating_mul(tsc_ticks_per_ms()) / 1_000_000;
        // The delay starts once every earlier instruction has completed: an
        // `rdtsc` alone may run while the loads it is to add latency to are
        // still in flight, and the spin then hides in their miss (a search
        // whose one PM line is charged while that line is still coming paid
        // nothing for it; docs/design.md §2, "Latency emulation").
        // SAFETY: `lfence` is SSE2, which every x86-64 CPU has; it only
        // orders instruction execution.
        unsafe { std::arch::x86_64::_mm_lfence() };
        // SAFETY: `rdtsc` is available on every x86-64 CPU and only reads the
        // time-stamp counter.
        let start = unsafe { std::arch::x86_64::_rdtsc() };
        loop {
            std::hint::spin_loop();
            // SAFETY: as above.
            let now = unsafe { std::arch::x86_64::_rdtsc() };
            if now.wrapping_sub(start) >= ticks {
                break;
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let start = std::time::Instant::now();
        while (start.elapsed().as_nanos() as u64) < ns {
            std::hint::spin_loop();
        }
    }
}

/// TSC ticks per millisecond, measured once against the monotonic clock.
#[cfg(target_arch = "x86_64")]
fn tsc_ticks_per_ms() -> u64 {
    use std::sync::OnceLock;
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        let t0 = std::time::Instant::now();
        // SAFETY: see `spin_ns`.
        let c0 = unsafe { std::arch::x86_64::_rdtsc() };
        while t0.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        // SAFETY: see `spin_ns`.
        let c1 = unsafe { std::arch::x86_64::_rdtsc() };
        let ns = t0.elapsed().as_nanos().max(1) as u64;
        (c1.wrapping_sub(c0).saturating_mul(1_000_000) / ns).max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_parses_and_rejects() {
        let l: PmLatency = "300/100".parse().unwrap();
        assert_eq!((l.write_ns, l.read_ns, l.dram_ns), (300, 100, 100));
        assert_eq!((l.write_extra_ns(), l.read_extra_ns()), (200, 0));
        let l: PmLatency = "600/300@80".parse().unwrap();
        assert_eq!((l.write_extra_ns(), l.read_extra_ns()), (520, 220));
        assert!("300".parse::<PmLatency>().is_err());
        assert!("a/b".parse::<PmLatency>().is_err());
        assert!("100000/100000@100000".parse::<PmLatency>().is_ok());
        for s in [
            "100001/300",
            "300/100001",
            "300/100@100001",
            "4294967295/4294967295",
        ] {
            let e = s.parse::<PmLatency>().unwrap_err().to_string();
            assert!(e.contains("at most 100000 ns"), "{s}: {e}");
        }
    }

    #[test]
    fn detected_flush_is_supported() {
        let k = FlushKind::detect();
        assert!(k.is_supported());
        assert_eq!(k.name().parse::<FlushKind>().unwrap(), k);
    }

    #[test]
    fn spin_waits_at_least_roughly_the_time() {
        let t = std::time::Instant::now();
        for _ in 0..100 {
            spin_ns(10_000);
        }
        // 100 × 10 µs = 1 ms; allow generous slack for TSC calibration error.
        assert!(t.elapsed() >= std::time::Duration::from_micros(700));
    }
}
