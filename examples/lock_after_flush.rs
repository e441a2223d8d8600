//! How long a locked instruction waits for the write-backs flushed before
//! it (docs/design.md §7, "The lock before the leaf").
//!
//! `cargo run --release --example lock_after_flush [MIB]`
//!
//! Each iteration stores 8 bytes into a line of a `MIB`-MiB block (default
//! 64) of an anonymous pool, lines taken in a scattered order and the
//! caches filled with other data before each run, so that each store
//! misses; then, by variant, flushes the line (`Pool::flush`, the
//! pool's flush instruction: `clwb` where the CPU has it) and/or adds to a
//! DRAM counter with a locked instruction (`fetch_add`); then 20 dependent
//! adds. It prints ns per iteration for the four variants, twice each. A
//! flush alone costs little (the write-back runs in the background), a
//! locked instruction alone little more; both together cost about one
//! write-back each: the locked instruction waits for it. A second table
//! shows a fence after the flush: the CPU goes on past it until the stores
//! after it fill the store buffer (docs/design.md §7, "With and without
//! flushes"). On real PM, whose write-back is slower, the waits grow.
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pmindex::pm::{Pool, PoolConfig, CACHE_LINE};

fn main() -> pmindex::Result<()> {
    let mib: u64 = match std::env::args().nth(1) {
        Some(a) => match a.parse() {
            Ok(m) if (1..=4096).contains(&m) => m,
            _ => {
                eprintln!(
                    "lock_after_flush: MIB must be a number of MiB from 1 to 4096, not `{a}`"
                );
                std::process::exit(2);
            }
        },
        None => 64,
    };
    let bytes = mib << 20;
    let pool = Pool::create_anonymous(bytes + (64 << 20), "pmlog", &PoolConfig::default())?;
    let block = pool.reserve(bytes)?;
    let base = block.offset();
    let lines = bytes / CACHE_LINE;
    // Write every line once, so that the timed stores find mapped pages.
    for l in 0..lines {
        pool.store_u64(base + l * CACHE_LINE, l)?;
    }
    // Written between runs to push the block out of the caches: larger
    // than any last-level cache (this VM's is 32 MiB), whatever `MIB` is.
    let mut evict = vec![0u8; 256 << 20];
    let counter = AtomicU64::new(0);
    println!(
        "{mib} MiB, {lines} lines, flush `{}`",
        pool.persist_config().flush_kind()
    );
    println!("flush  locked  ns/iteration");
    for (flush, locked) in [(false, false), (true, false), (false, true), (true, true)] {
        for _ in 0..2 {
            let fill = black_box(evict[0].wrapping_add(1));
            evict.fill(fill);
            let mut sink = 0u64;
            let t = Instant::now();
            for i in 0..lines {
                let off = base + (i.wrapping_mul(7919) % lines) * CACHE_LINE;
                pool.store_u64(off, i)?;
                if flush {
                    pool.flush(off, 8);
                }
                if locked {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                for k in 0..20u64 {
                    sink = opaque(sink.wrapping_mul(3).wrapping_add(k));
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / lines as f64;
            black_box(sink);
            println!("{:<6} {:<7} {ns:>12.1}", flush, locked);
        }
    }
    // A fence after the flush: the CPU goes on past it, and only stores
    // wait behind it; it stops once they fill the store buffer.
    println!("flush + fence, then N stores to a hot DRAM array, then 600 dependent adds");
    println!("stores  ns/iteration (no flush)  ns/iteration (flush + fence)");
    let mut hot = [0u64; 512];
    for stores in [0usize, 64, 128, 192, 256] {
        let mut row = [0f64; 2];
        for (v, persist) in [false, true].into_iter().enumerate() {
            let fill = black_box(evict[0].wrapping_add(1));
            evict.fill(fill);
            let mut sink = 0u64;
            let t = Instant::now();
            for i in 0..lines / 4 {
                let off = base + (i.wrapping_mul(7919) % lines) * CACHE_LINE;
                pool.store_u64(off, i)?;
                if persist {
                    pool.flush(off, 8);
                    pool.fence();
                }
                for h in hot.iter_mut().take(stores) {
                    // SAFETY: `h` is a valid, aligned `&mut u64`; the
                    // volatile write keeps each store in the loop.
                    unsafe { std::ptr::write_volatile(h, i) };
                }
                for k in 0..600u64 {
                    sink = opaque(sink.wrapping_mul(3).wrapping_add(k));
                }
            }
            row[v] = t.elapsed().as_nanos() as f64 / (lines / 4) as f64;
            black_box(sink);
        }
        println!("{stores:>6}  {:>23.1}  {:>28.1}", row[0], row[1]);
    }
    black_box(&hot);
    pool.fence();
    pool.cancel(block)?;
    Ok(())
}

/// `x`, through a register the compiler cannot see into: keeps each add of
/// the dependent chain without the store and load `black_box` makes.
#[inline(always)]
fn opaque(mut x: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty `asm!` that only names a register operand: it reads
    // and writes nothing else and has no effect.
    unsafe {
        std::arch::asm!("/* {0} */", inout(reg) x, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(target_arch = "x86_64"))]
    {
        x = black_box(x);
    }
    x
}
