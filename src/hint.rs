//! CPU hints that change no state a program can observe.

/// Asks the CPU to start loading the cache line that holds `*r` into all
/// cache levels, without waiting for it and without making any later
/// instruction wait for it.
///
/// Searches use it where they know a line they will need before the data
/// that says exactly where in it to look has arrived (the child slots of a
/// DRAM ART node while its keys are still in flight, see
/// `engine::hart::art`): the two misses then overlap instead of following
/// one another. On other architectures it does nothing.
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    prefetch_ptr((r as *const T).cast::<u8>());
}

/// [`prefetch`] of the line at `p`, which need not be valid: a prefetch
/// never faults and changes no architectural state. Batched searches
/// issue it for the next node of each key in flight, so that their misses
/// overlap.
#[inline(always)]
pub(crate) fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults, even on an invalid address, and
    // changes no architectural state.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch_ptr`] of the first line of each key of a batch: the keys of
/// batched gets and puts are the caller's, often cold, and a batch reads
/// them one after another, so all of them start loading before the first
/// is read (docs/design.md §7, "Batched puts").
#[inline(always)]
pub(crate) fn prefetch_keys<'k>(keys: impl IntoIterator<Item = &'k [u8]>) {
    for key in keys {
        prefetch_ptr(key.as_ptr());
    }
}

/// Asks the CPU to fetch the cache line at `p` in a state ready for a write
/// (`prefetchw`), without waiting. `p` need not be valid: a prefetch never
/// faults and changes no architectural state. On other architectures it
/// does nothing.
#[inline(always)]
pub(crate) fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address, and changes no
    // architectural state.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
