//! The crash-consistent allocator's normal paths: `Pool::reserve`,
//! `activate`, `replace`, `free` and `cancel`, on anonymous and file pools;
//! size classes, disjoint blocks, exact usage counts, reopen, a full pool.
//!
//! Persistent slots are the header's root slots and the words of a "slot
//! table": one 64 KiB block activated into root slot 0, holding 8192 slots.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{expect_err, TempPool};
use pmindex::pm::{
    Pool, PoolConfig, Reservation, Usage, CHUNK_SIZE, MAX_SLAB_BLOCK, MIN_BLOCK, SLAB_CLASSES,
};
use pmindex::Error;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ENGINE: &str = "alloctest";

fn anonymous(size: u64) -> Pool {
    Pool::create_anonymous(size, ENGINE, &PoolConfig::default()).expect("create anonymous pool")
}

fn file_pool(t: &TempPool, size: u64) -> Pool {
    Pool::create(&t.path, size, ENGINE, &PoolConfig::default()).expect("create file pool")
}

fn reopen(t: &TempPool) -> Pool {
    Pool::open(&t.path, Some(ENGINE), &PoolConfig::default()).expect("reopen file pool")
}

/// Runs `f` on a fresh anonymous pool and on a fresh file pool of `size`.
fn on_both(size: u64, f: impl Fn(&Pool, &str)) {
    f(&anonymous(size), "anonymous pool");
    let t = TempPool::new();
    f(&file_pool(&t, size), "file pool");
}

/// The block size `reserve(request)` must give.
fn class_size_for(request: u64) -> u64 {
    if request <= MAX_SLAB_BLOCK {
        request.max(MIN_BLOCK).next_power_of_two()
    } else {
        request.div_ceil(CHUNK_SIZE) * CHUNK_SIZE
    }
}

/// The slab class of a block size, `None` for a large block.
fn class_of(size: u64) -> Option<usize> {
    (size <= MAX_SLAB_BLOCK).then(|| (size / MIN_BLOCK).trailing_zeros() as usize)
}

fn heap_range(pool: &Pool) -> (u64, u64) {
    let h = pool.header();
    (h.heap_offset, h.heap_offset + h.chunk_count * CHUNK_SIZE)
}

fn chunk_of(pool: &Pool, off: u64) -> u64 {
    (off - pool.header().heap_offset) / CHUNK_SIZE
}

/// 8192 persistent slots in one 64 KiB block, published in root slot 0.
struct SlotTable {
    base: u64,
}

const TABLE_SIZE: u64 = 64 * 1024;
const TABLE_SLOTS: usize = (TABLE_SIZE / 8) as usize;

impl SlotTable {
    fn create(pool: &Pool) -> SlotTable {
        let r = pool.reserve(TABLE_SIZE).expect("reserve the slot table");
        assert_eq!(r.size(), TABLE_SIZE);
        let base = r.offset();
        // SAFETY: the block is reserved by this test and not yet published;
        // nothing else touches the pool.
        unsafe { pool.zero_bytes(base, TABLE_SIZE).unwrap() };
        pool.flush(base, TABLE_SIZE);
        pool.activate(r, pool.root_slot(0).unwrap()).unwrap();
        SlotTable { base }
    }

    /// The table of a reopened pool.
    fn find(pool: &Pool) -> SlotTable {
        let base = pool.load_u64(pool.root_slot(0).unwrap()).unwrap();
        assert_eq!(
            pool.block_size(base).unwrap(),
            TABLE_SIZE,
            "root slot 0 lost the slot table"
        );
        SlotTable { base }
    }

    fn slot(&self, i: usize) -> u64 {
        assert!(i < TABLE_SLOTS);
        self.base + 8 * i as u64
    }
}

/// The blocks a test has activated: slot -> (offset, size).
type Live = BTreeMap<u64, (u64, u64)>;

/// Checks the allocator against `live` (plus the slot table, if any):
/// `allocated_blocks` is exactly the live set, `usage` counts exactly the
/// live blocks per class, and the chunk accounting adds up.
/// `reserved_large_chunks`: chunks held by outstanding large reservations.
fn assert_state(
    pool: &Pool,
    table: Option<&SlotTable>,
    live: &Live,
    reserved_large_chunks: u64,
    ctx: &str,
) {
    let mut want: Vec<(u64, u64)> = live.values().copied().collect();
    if let Some(t) = table {
        want.push((t.base, TABLE_SIZE));
    }
    want.sort_unstable();
    let mut got = pool
        .allocated_blocks()
        .unwrap_or_else(|e| panic!("{ctx}: allocated_blocks: {e}"));
    got.sort_unstable();
    assert_eq!(
        got, want,
        "{ctx}: allocated_blocks differs from the live blocks"
    );

    let u = pool.usage();
    let mut blocks = [0u64; SLAB_CLASSES];
    let mut chunks_with_blocks: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); SLAB_CLASSES];
    let (mut large_blocks, mut large_bytes) = (0, 0);
    for &(off, size) in &want {
        match class_of(size) {
            Some(c) => {
                blocks[c] += 1;
                chunks_with_blocks[c].insert(chunk_of(pool, off));
            }
            None => {
                large_blocks += 1;
                large_bytes += size;
            }
        }
    }
    for c in 0..SLAB_CLASSES {
        let cu = &u.classes[c];
        assert_eq!(cu.block_size, MIN_BLOCK << c, "{ctx}: class {c} block size");
        assert_eq!(
            cu.blocks, blocks[c],
            "{ctx}: class {c} ({} B) blocks",
            cu.block_size
        );
        assert_eq!(
            cu.bytes,
            blocks[c] * cu.block_size,
            "{ctx}: class {c} bytes"
        );
        assert!(
            cu.chunks >= chunks_with_blocks[c].len() as u64,
            "{ctx}: class {c} counts {} chunks, but blocks lie in {}",
            cu.chunks,
            chunks_with_blocks[c].len()
        );
    }
    assert_eq!(
        (u.large_blocks, u.large_bytes),
        (large_blocks, large_bytes),
        "{ctx}: large blocks"
    );
    assert_eq!(
        u.bytes_in_use(),
        want.iter().map(|b| b.1).sum::<u64>(),
        "{ctx}: bytes_in_use"
    );
    let slab_chunks: u64 = u.classes.iter().map(|c| c.chunks).sum();
    assert_eq!(
        u.free_chunks + slab_chunks + large_bytes / CHUNK_SIZE + reserved_large_chunks,
        u.total_chunks,
        "{ctx}: free + slab + large chunks do not add up to the heap ({u:?})"
    );
    assert_eq!(u.total_chunks, pool.header().chunk_count);
    assert_eq!(u.heap_bytes, u.total_chunks * CHUNK_SIZE);
    for &(off, size) in &want {
        assert_eq!(
            pool.block_size(off).ok(),
            Some(size),
            "{ctx}: block_size({off:#x})"
        );
    }
}

/// After a reopen the DRAM state is rebuilt from PM: slab chunks are exactly
/// those that hold live blocks (empty slabs are released).
fn assert_rebuilt_exactly(pool: &Pool, table: &SlotTable, live: &Live, ctx: &str) {
    assert_state(pool, Some(table), live, 0, ctx);
    let u = pool.usage();
    let mut chunks: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); SLAB_CLASSES];
    for &(off, size) in live.values() {
        if let Some(c) = class_of(size) {
            chunks[c].insert(chunk_of(pool, off));
        }
    }
    for (c, (cu, chunks)) in u.classes.iter().zip(&chunks).enumerate() {
        assert_eq!(
            cu.chunks,
            chunks.len() as u64,
            "{ctx}: class {c} chunks after reopen"
        );
    }
}

fn activate_into(pool: &Pool, live: &mut Live, r: Reservation, slot: u64) {
    let (off, size) = (r.offset(), r.size());
    pool.activate(r, slot)
        .unwrap_or_else(|e| panic!("activate {off:#x} into {slot:#x}: {e}"));
    assert_eq!(
        pool.load_u64(slot).unwrap(),
        off,
        "activate did not store the offset into the slot"
    );
    live.insert(slot, (off, size));
}

// ----- tests ----------------------------------------------------------------

#[test]
fn sizes_land_in_their_class() {
    on_both(64 << 20, |pool, what| {
        let (heap_lo, heap_hi) = heap_range(pool);
        // In a new pool the whole heap fits in one block.
        let whole = pool
            .reserve(heap_hi - heap_lo)
            .expect("the whole heap as one block");
        assert_eq!((whole.offset(), whole.size()), (heap_lo, heap_hi - heap_lo));
        pool.cancel(whole).unwrap();
        let requests = [
            1,
            2,
            63,
            64,
            65,
            100,
            127,
            128,
            129,
            255,
            256,
            1000,
            1024,
            4095,
            4096,
            4097,
            16 << 10,
            (32 << 10) - 1,
            32 << 10,
            (32 << 10) + 1,
            64 << 10,
            (64 << 10) + 1,
            100 << 10,
            (1 << 20) - 1,
            1 << 20,
            (1 << 20) + 1,
            3 << 20,
        ];
        for req in requests {
            let r = pool
                .reserve(req)
                .unwrap_or_else(|e| panic!("{what}: reserve {req}: {e}"));
            let want = class_size_for(req);
            assert_eq!(
                r.size(),
                want,
                "{what}: reserve({req}) gave a block of {}",
                r.size()
            );
            assert!(r.size() >= req);
            let align = want.min(CHUNK_SIZE);
            assert_eq!(
                r.offset() % align,
                0,
                "{what}: block of {want} B at {:#x} is not aligned",
                r.offset()
            );
            assert!(
                r.offset() >= heap_lo && r.offset() + r.size() <= heap_hi,
                "{what}: block outside the heap"
            );
            pool.cancel(r).unwrap();
        }
        assert_eq!(
            pool.usage().bytes_in_use(),
            0,
            "{what}: cancelled reservations count as used"
        );
        assert!(pool.allocated_blocks().unwrap().is_empty());
        expect_err!(
            pool.reserve(0),
            Error::InvalidArgument(_),
            format!("{what}: reserve(0)")
        );
        let too_big = heap_hi - heap_lo + 1;
        let e = expect_err!(
            pool.reserve(too_big),
            Error::PoolFull { .. },
            format!("{what}: reserve more than the heap")
        );
        assert!(matches!(e, Error::PoolFull { requested } if requested == too_big));
        expect_err!(
            pool.reserve(u64::MAX),
            Error::PoolFull { .. },
            format!("{what}: reserve(u64::MAX)")
        );
    });
}

#[test]
fn blocks_never_overlap() {
    on_both(64 << 20, |pool, what| {
        let (heap_lo, heap_hi) = heap_range(pool);
        let table = SlotTable::create(pool);
        let mut rng = SmallRng::seed_from_u64(0xb10c);
        let mut live = Live::new();
        let check_disjoint = |blocks: &mut Vec<(u64, u64)>, ctx: &str| {
            blocks.sort_unstable();
            for w in blocks.windows(2) {
                assert!(
                    w[0].0 + w[0].1 <= w[1].0,
                    "{what} {ctx}: block {:#x}+{} overlaps block {:#x}",
                    w[0].0,
                    w[0].1,
                    w[1].0
                );
            }
            for &(off, size) in blocks.iter() {
                assert!(
                    off >= heap_lo && off + size <= heap_hi,
                    "{what} {ctx}: block {off:#x} outside the heap"
                );
            }
        };
        for round in 0..3 {
            let mut pending = Vec::new();
            for _ in 0..1500 {
                let size = match rng.gen_range(0..100) {
                    0..=59 => rng.gen_range(1..=512),
                    60..=94 => rng.gen_range(513..=MAX_SLAB_BLOCK),
                    _ => rng.gen_range(MAX_SLAB_BLOCK + 1..=300 << 10),
                };
                pending.push(
                    pool.reserve(size)
                        .unwrap_or_else(|e| panic!("{what}: reserve {size}: {e}")),
                );
            }
            let mut all: Vec<(u64, u64)> = live.values().copied().collect();
            all.push((table.base, TABLE_SIZE));
            all.extend(pending.iter().map(|r| (r.offset(), r.size())));
            check_disjoint(&mut all, &format!("round {round}"));
            // Activate about half, cancel the rest, free some live ones.
            let free_slots: Vec<u64> = (0..TABLE_SLOTS)
                .map(|i| table.slot(i))
                .filter(|s| !live.contains_key(s))
                .collect();
            let mut next_slot = free_slots.into_iter();
            for r in pending {
                if rng.gen_bool(0.5) {
                    let slot = next_slot.next().expect("a free slot");
                    activate_into(pool, &mut live, r, slot);
                } else {
                    pool.cancel(r).unwrap();
                }
            }
            let slots: Vec<u64> = live.keys().copied().collect();
            for slot in slots {
                if rng.gen_bool(0.3) {
                    pool.free(slot).unwrap();
                    live.remove(&slot);
                }
            }
            assert_state(
                pool,
                Some(&table),
                &live,
                0,
                &format!("{what} after round {round}"),
            );
        }
    });
}

#[test]
fn activate_stores_the_offset_into_the_slot() {
    on_both(16 << 20, |pool, what| {
        let mut live = Live::new();
        // Root slots 1..8 (slot 0 is left null here).
        for i in 1..8 {
            let slot = pool.root_slot(i).unwrap();
            assert_eq!(pool.load_u64(slot).unwrap(), 0);
            let r = pool.reserve(100 * i as u64 + 1).unwrap();
            let off = r.offset();
            assert!(
                !pool.allocated_blocks().unwrap().iter().any(|b| b.0 == off),
                "{what}: a reserved block is allocated before activate"
            );
            activate_into(pool, &mut live, r, slot);
            assert_eq!(
                pool.block_size(off).unwrap(),
                class_size_for(100 * i as u64 + 1)
            );
        }
        expect_err!(
            pool.root_slot(8),
            Error::InvalidArgument(_),
            format!("{what}: root slot 8")
        );
        assert_state(pool, None, &live, 0, &format!("{what}: root slots"));
        // Slots inside another block: a large block and a 4 KiB slab block.
        for table_size in [200 << 10, 4096u64] {
            let tr = pool.reserve(table_size).unwrap();
            let table = tr.offset();
            // SAFETY: reserved by this test, not yet published.
            unsafe { pool.zero_bytes(table, table_size).unwrap() };
            pool.flush(table, table_size);
            let holder = pool.root_slot(1).unwrap();
            pool.free(holder).unwrap();
            live.remove(&holder);
            activate_into(pool, &mut live, tr, holder);
            for j in 0..8u64 {
                let slot = table + 8 * (j * 37 % (table_size / 8));
                let r = pool.reserve(1 << (6 + j)).unwrap();
                activate_into(pool, &mut live, r, slot);
            }
            assert_state(
                pool,
                None,
                &live,
                0,
                &format!("{what}: slots in a {table_size}-byte block"),
            );
            for j in 0..8u64 {
                let slot = table + 8 * (j * 37 % (table_size / 8));
                pool.free(slot).unwrap();
                assert_eq!(pool.load_u64(slot).unwrap(), 0);
                live.remove(&slot);
            }
        }
        assert_state(pool, None, &live, 0, &format!("{what}: at the end"));
    });
}

#[test]
fn free_nulls_the_slot_and_the_block_is_reused() {
    on_both(16 << 20, |pool, what| {
        let table = SlotTable::create(pool);
        let mut live = Live::new();
        for (i, size) in [64u64, 200, 4096, 32 << 10, 64 << 10, 300 << 10]
            .into_iter()
            .enumerate()
        {
            // A neighbour so that the slab stays in use.
            let n = pool.reserve(size).unwrap();
            activate_into(pool, &mut live, n, table.slot(100 + i));
            let slot = table.slot(i);
            let r = pool.reserve(size).unwrap();
            let off = r.offset();
            activate_into(pool, &mut live, r, slot);
            pool.free(slot)
                .unwrap_or_else(|e| panic!("{what}: free {size}: {e}"));
            live.remove(&slot);
            assert_eq!(
                pool.load_u64(slot).unwrap(),
                0,
                "{what}: free did not null the slot"
            );
            assert!(
                pool.block_size(off).is_err(),
                "{what}: block_size of a freed block"
            );
            assert_state(
                pool,
                Some(&table),
                &live,
                0,
                &format!("{what}: after free of {size}"),
            );
            let again = pool.reserve(size).unwrap();
            assert_eq!(
                again.offset(),
                off,
                "{what}: the freed {size}-byte block was not reused"
            );
            activate_into(pool, &mut live, again, slot);
        }
        // Freeing a null slot, or a slot that holds no block, is refused.
        let null = table.slot(4000);
        let e = expect_err!(
            pool.free(null),
            Error::InvalidArgument(_),
            format!("{what}: free of a null slot")
        );
        assert!(e.to_string().contains("null"));
        pool.store_u64(null, table.base + 8).unwrap();
        expect_err!(
            pool.free(null),
            Error::Corrupt { .. },
            format!("{what}: free of a slot holding no block")
        );
        pool.store_u64(null, 0).unwrap();
        expect_err!(
            pool.free(7),
            Error::InvalidArgument(_),
            format!("{what}: free of a misaligned slot")
        );
        assert_state(pool, Some(&table), &live, 0, &format!("{what}: at the end"));
    });
}

#[test]
fn cancel_returns_the_block() {
    on_both(16 << 20, |pool, what| {
        let before = pool.usage();
        for size in [64u64, 1000, 32 << 10, 64 << 10, 1 << 20] {
            let r = pool.reserve(size).unwrap();
            let off = r.offset();
            pool.cancel(r).unwrap();
            let again = pool.reserve(size).unwrap();
            assert_eq!(
                again.offset(),
                off,
                "{what}: a cancelled {size}-byte block was not reused"
            );
            pool.cancel(again).unwrap();
        }
        let after = pool.usage();
        assert_eq!(after.bytes_in_use(), 0);
        assert_eq!(after.large_blocks, before.large_blocks);
        assert!(
            pool.allocated_blocks().unwrap().is_empty(),
            "{what}: a cancelled block is allocated"
        );
    });
}

#[test]
fn replace_frees_the_old_block() {
    on_both(16 << 20, |pool, what| {
        let table = SlotTable::create(pool);
        let mut live = Live::new();
        let slot = table.slot(0);
        // A neighbour keeps the 128-byte slab in use.
        let n = pool.reserve(128).unwrap();
        activate_into(pool, &mut live, n, table.slot(1));
        // Replace into a null slot acts as activate.
        let a = pool.reserve(100).unwrap();
        let a_off = a.offset();
        pool.replace(a, slot).unwrap();
        live.insert(slot, (a_off, 128));
        assert_eq!(pool.load_u64(slot).unwrap(), a_off);
        assert_state(
            pool,
            Some(&table),
            &live,
            0,
            &format!("{what}: replace into a null slot"),
        );
        // small -> small (another class) -> large -> large -> small.
        let mut old = a_off;
        for size in [2000u64, 100 << 10, 1 << 20, 64] {
            let r = pool.reserve(size).unwrap();
            let (off, got) = (r.offset(), r.size());
            pool.replace(r, slot)
                .unwrap_or_else(|e| panic!("{what}: replace with {size}: {e}"));
            assert_eq!(
                pool.load_u64(slot).unwrap(),
                off,
                "{what}: replace did not store the new offset"
            );
            assert!(
                pool.block_size(old).is_err(),
                "{what}: the old block {old:#x} is still allocated"
            );
            live.insert(slot, (off, got));
            assert_state(
                pool,
                Some(&table),
                &live,
                0,
                &format!("{what}: after replace with {size}"),
            );
            old = off;
        }
        // The freed blocks are reusable: the first one comes back.
        let r = pool.reserve(100).unwrap();
        assert_eq!(
            r.offset(),
            a_off,
            "{what}: the block freed by replace was not reused"
        );
        pool.cancel(r).unwrap();
    });
}

/// Usage counts, step by step, against an exact expected `Usage`.
#[test]
fn usage_counts_go_up_and_down_exactly() {
    on_both(16 << 20, |pool, what| {
        let total = pool.header().chunk_count;
        let mut want = pool.usage();
        assert_eq!(
            want.free_chunks, total,
            "{what}: a new pool has used chunks"
        );
        assert_eq!(want.classes.len(), SLAB_CLASSES);
        assert!(want
            .classes
            .iter()
            .all(|c| c.blocks == 0 && c.chunks == 0 && c.bytes == 0));
        let eq = |want: &Usage, step: &str| assert_eq!(&pool.usage(), want, "{what}: {step}");

        // A 100-byte reservation formats one 128-byte slab; nothing is in use.
        let r1 = pool.reserve(100).unwrap();
        want.classes[1].chunks = 1;
        want.free_chunks -= 1;
        eq(&want, "reserve 100 B");
        pool.activate(r1, pool.root_slot(0).unwrap()).unwrap();
        want.classes[1].blocks = 1;
        want.classes[1].bytes = 128;
        eq(&want, "activate 100 B");
        for i in 1..4 {
            let r = pool.reserve(128).unwrap();
            pool.activate(r, pool.root_slot(i).unwrap()).unwrap();
        }
        want.classes[1].blocks = 4;
        want.classes[1].bytes = 512;
        eq(&want, "activate 3 more 128 B");
        pool.free(pool.root_slot(3).unwrap()).unwrap();
        want.classes[1].blocks = 3;
        want.classes[1].bytes = 384;
        eq(&want, "free one 128 B");

        // Large: 40 KiB takes one chunk, 200 KiB four.
        let l1 = pool.reserve(40 << 10).unwrap();
        want.free_chunks -= 1;
        eq(&want, "reserve 40 KiB");
        pool.activate(l1, pool.root_slot(4).unwrap()).unwrap();
        want.large_blocks = 1;
        want.large_bytes = 64 << 10;
        eq(&want, "activate 40 KiB");
        let l2 = pool.reserve(200 << 10).unwrap();
        assert_eq!(l2.size(), 256 << 10);
        want.free_chunks -= 4;
        eq(&want, "reserve 200 KiB");
        pool.activate(l2, pool.root_slot(5).unwrap()).unwrap();
        want.large_blocks = 2;
        want.large_bytes = 320 << 10;
        eq(&want, "activate 200 KiB");

        // Replace the 40 KiB block by a 4 KiB slab block.
        let s = pool.reserve(4096).unwrap();
        want.classes[6].chunks = 1;
        want.free_chunks -= 1;
        eq(&want, "reserve 4 KiB");
        pool.replace(s, pool.root_slot(4).unwrap()).unwrap();
        want.classes[6].blocks = 1;
        want.classes[6].bytes = 4096;
        want.large_blocks = 1;
        want.large_bytes = 256 << 10;
        want.free_chunks += 1;
        eq(&want, "replace 40 KiB by 4 KiB");

        // Cancel gives back without counting.
        let c = pool.reserve(1 << 20).unwrap();
        want.free_chunks -= 16;
        eq(&want, "reserve 1 MiB");
        pool.cancel(c).unwrap();
        want.free_chunks += 16;
        eq(&want, "cancel 1 MiB");

        pool.free(pool.root_slot(5).unwrap()).unwrap();
        want.large_blocks = 0;
        want.large_bytes = 0;
        want.free_chunks += 4;
        eq(&want, "free 200 KiB");
        assert_eq!(pool.usage().bytes_in_use(), 384 + 4096);
    });
}

/// Random reserve / activate / replace / free / cancel against a model,
/// with reservations kept outstanding across steps.
#[test]
fn random_allocator_ops_match_the_model() {
    on_both(32 << 20, |pool, what| {
        let table = SlotTable::create(pool);
        let mut rng = SmallRng::seed_from_u64(0xa110c);
        let mut live = Live::new();
        let mut pending: Vec<Reservation> = Vec::new();
        let random_size = |rng: &mut SmallRng| match rng.gen_range(0..100) {
            0..=69 => rng.gen_range(1..=1024),
            70..=94 => rng.gen_range(1025..=MAX_SLAB_BLOCK),
            _ => rng.gen_range(MAX_SLAB_BLOCK + 1..=512 << 10),
        };
        for step in 0..4000 {
            let slot = table.slot(rng.gen_range(0..512));
            match rng.gen_range(0..10) {
                0..=2 => {
                    let size = random_size(&mut rng);
                    match pool.reserve(size) {
                        Ok(r) => pending.push(r),
                        Err(e) => assert!(
                            common::is_pool_full(&e),
                            "{what} step {step}: reserve {size}: {e}"
                        ),
                    }
                }
                3..=4 if !pending.is_empty() => {
                    let r = pending.swap_remove(rng.gen_range(0..pending.len()));
                    let (off, size) = (r.offset(), r.size());
                    // Replace (also into a null slot), or activate into a null slot.
                    if live.contains_key(&slot) || rng.gen_bool(0.5) {
                        pool.replace(r, slot).unwrap();
                        assert_eq!(pool.load_u64(slot).unwrap(), off);
                        live.insert(slot, (off, size));
                    } else {
                        activate_into(pool, &mut live, r, slot);
                    }
                }
                5 if !pending.is_empty() => {
                    let r = pending.swap_remove(rng.gen_range(0..pending.len()));
                    pool.cancel(r).unwrap();
                }
                _ => {
                    if live.remove(&slot).is_some() {
                        pool.free(slot).unwrap();
                        assert_eq!(pool.load_u64(slot).unwrap(), 0);
                    }
                }
            }
            if step % 100 == 0 || step == 3999 {
                let reserved_large: u64 = pending
                    .iter()
                    .filter(|r| r.size() > MAX_SLAB_BLOCK)
                    .map(|r| r.size() / CHUNK_SIZE)
                    .sum();
                assert_state(
                    pool,
                    Some(&table),
                    &live,
                    reserved_large,
                    &format!("{what} step {step}"),
                );
                // Outstanding reservations overlap neither each other nor live blocks.
                let mut all: Vec<(u64, u64)> = live.values().copied().collect();
                all.extend(pending.iter().map(|r| (r.offset(), r.size())));
                all.sort_unstable();
                assert!(
                    all.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0),
                    "{what} step {step}: overlap"
                );
            }
        }
        for r in pending {
            pool.cancel(r).unwrap();
        }
        assert_state(pool, Some(&table), &live, 0, &format!("{what} at the end"));
    });
}

/// A file pool, reopened: the same allocated set and usage; reservations
/// never activated are free again.
#[test]
fn reopen_rebuilds_usage_and_allocated_blocks() {
    let t = TempPool::new();
    let mut live = Live::new();
    let mut dropped = Vec::new();
    {
        let pool = file_pool(&t, 32 << 20);
        let table = SlotTable::create(&pool);
        let mut rng = SmallRng::seed_from_u64(0x5e0);
        for i in 0..1200 {
            let size = match rng.gen_range(0..10) {
                0..=6 => rng.gen_range(1..=4096),
                7..=8 => rng.gen_range(4097..=MAX_SLAB_BLOCK),
                _ => rng.gen_range(MAX_SLAB_BLOCK + 1..=256 << 10),
            };
            let r = pool.reserve(size).unwrap();
            activate_into(&pool, &mut live, r, table.slot(i));
        }
        // Free a third, so that some slabs are partly used and some empty.
        for i in (0..1200).step_by(3) {
            pool.free(table.slot(i)).unwrap();
            live.remove(&table.slot(i));
        }
        // Reservations that are never activated, dropped with the pool.
        for size in [64u64, 64, 2048, 32 << 10, 100 << 10] {
            let r = pool.reserve(size).unwrap();
            dropped.push((r.offset(), r.size()));
        }
        assert_state(&pool, Some(&table), &live, 2, "before reopen");
        pool.sync().unwrap();
    }
    let pool = reopen(&t);
    let table = SlotTable::find(&pool);
    for (&slot, &(off, _)) in &live {
        assert_eq!(
            pool.load_u64(slot).unwrap(),
            off,
            "slot {slot:#x} lost its block"
        );
    }
    assert_rebuilt_exactly(&pool, &table, &live, "after reopen");
    let allocated: BTreeSet<u64> = pool
        .allocated_blocks()
        .unwrap()
        .into_iter()
        .map(|b| b.0)
        .collect();
    for (off, _) in &dropped {
        assert!(
            !allocated.contains(off),
            "a reservation never activated is allocated after reopen"
        );
    }
    // The pool keeps working: free everything, allocate again, reopen again.
    let slots: Vec<u64> = live.keys().copied().collect();
    for slot in slots.iter().step_by(2) {
        pool.free(*slot).unwrap();
        live.remove(slot);
    }
    for i in 2000..2100 {
        let r = pool.reserve(i as u64).unwrap();
        activate_into(&pool, &mut live, r, table.slot(i));
    }
    assert_state(
        &pool,
        Some(&table),
        &live,
        0,
        "after changes following a reopen",
    );
    drop(pool);
    let pool = reopen(&t);
    assert_rebuilt_exactly(
        &pool,
        &SlotTable::find(&pool),
        &live,
        "after the second reopen",
    );
}

/// Reservations dropped without activate or cancel stay out of use while the
/// pool is open, and are free after a reopen.
#[test]
fn dropped_reservations_are_free_after_reopen() {
    let t = TempPool::new();
    let size = 1024u64;
    let dropped: Vec<(u64, u64)>;
    {
        let pool = file_pool(&t, 2 << 20);
        let table = SlotTable::create(&pool);
        let mut live = Live::new();
        for i in 0..50 {
            let r = pool.reserve(size).unwrap();
            activate_into(&pool, &mut live, r, table.slot(i));
        }
        let rs: Vec<Reservation> = (0..20).map(|_| pool.reserve(size).unwrap()).collect();
        let large = pool.reserve(200 << 10).unwrap();
        dropped = rs
            .iter()
            .chain([&large])
            .map(|r| (r.offset(), r.size()))
            .collect();
        drop(rs);
        drop(large);
        // While the pool is open, they are not handed out again.
        let mut all = Vec::new();
        loop {
            match pool.reserve(size) {
                Ok(r) => all.push(r),
                Err(e) => {
                    assert!(common::is_pool_full(&e), "{e}");
                    break;
                }
            }
        }
        for r in &all {
            assert!(
                !dropped
                    .iter()
                    .any(|&(o, s)| r.offset() >= o && r.offset() < o + s),
                "a dropped reservation's block was handed out again before reopen"
            );
        }
        for r in all {
            pool.cancel(r).unwrap();
        }
        assert_state(
            &pool,
            Some(&table),
            &live,
            (200u64 << 10).div_ceil(CHUNK_SIZE),
            "before reopen",
        );
    }
    let pool = reopen(&t);
    let mut all = Vec::new();
    loop {
        match pool.reserve(size) {
            Ok(r) => all.push(r.offset()),
            Err(e) => {
                assert!(common::is_pool_full(&e), "{e}");
                break;
            }
        }
    }
    let got: BTreeSet<u64> = all.into_iter().collect();
    for (off, s) in dropped {
        for block in (off..off + s).step_by(size as usize) {
            assert!(
                got.contains(&block),
                "block {block:#x} of a dropped reservation is not free after reopen"
            );
        }
    }
}

/// Fill the pool until `PoolFull`; frees still work and allocation works
/// again; the same after a reopen of the full pool.
#[test]
fn full_pool_then_free_and_allocate_again() {
    let t = TempPool::new();
    let pool = file_pool(&t, 2 << 20);
    let table = SlotTable::create(&pool);
    let mut live = Live::new();
    let mut rng = SmallRng::seed_from_u64(0xf011);
    let mut next = 0;
    let mut fulls = 0;
    // Random sizes until 30 refusals in a row, then every class until full.
    while fulls < 30 {
        let size = match rng.gen_range(0..10) {
            0..=5 => rng.gen_range(64..=2048),
            6..=8 => rng.gen_range(2049..=MAX_SLAB_BLOCK),
            _ => rng.gen_range(MAX_SLAB_BLOCK + 1..=192 << 10),
        };
        match pool.reserve(size) {
            Ok(r) => {
                activate_into(&pool, &mut live, r, table.slot(next));
                next += 1;
                fulls = 0;
            }
            Err(e) => {
                let Error::PoolFull { requested } = e else {
                    panic!("reserve {size}: {e}")
                };
                assert_eq!(requested, size);
                fulls += 1;
            }
        }
    }
    for c in (0..SLAB_CLASSES).rev() {
        while let Ok(r) = pool.reserve(MIN_BLOCK << c) {
            activate_into(&pool, &mut live, r, table.slot(next));
            next += 1;
        }
    }
    println!("full after {next} blocks: {:?}", pool.usage());
    for size in [1u64, 64, 4096, MAX_SLAB_BLOCK, MAX_SLAB_BLOCK + 1, 1 << 20] {
        expect_err!(
            pool.reserve(size),
            Error::PoolFull { .. },
            format!("full pool: reserve {size}")
        );
    }
    assert_state(&pool, Some(&table), &live, 0, "full pool");

    // Frees work in a full pool, and the space can be allocated again: every
    // slab is full, so a freed block is the only room of its size, and the
    // same size gets it back.
    let sample: Vec<(u64, (u64, u64))> = live.iter().step_by(5).map(|(&s, &b)| (s, b)).collect();
    for &(slot, (off, size)) in &sample {
        pool.free(slot).unwrap();
        live.remove(&slot);
        assert_state(&pool, Some(&table), &live, 0, "full pool after one free");
        let r = pool
            .reserve(size)
            .unwrap_or_else(|e| panic!("reserve {size} after a free: {e}"));
        assert_eq!(
            r.offset(),
            off,
            "the only free {size}-byte block was not handed out"
        );
        activate_into(&pool, &mut live, r, slot);
        expect_err!(pool.reserve(64), Error::PoolFull { .. }, "full again");
    }
    // Many frees at once, then allocation in the freed space.
    let freed: Vec<(u64, (u64, u64))> = live.iter().step_by(7).map(|(&s, &b)| (s, b)).collect();
    for &(slot, _) in &freed {
        pool.free(slot).unwrap();
        live.remove(&slot);
    }
    assert_state(&pool, Some(&table), &live, 0, "full pool after many frees");
    let small = freed
        .iter()
        .find(|f| f.1 .1 <= MAX_SLAB_BLOCK)
        .expect("a slab block was freed");
    let r = pool
        .reserve(small.1 .1)
        .expect("allocate in the freed space");
    activate_into(&pool, &mut live, r, small.0);
    assert_state(
        &pool,
        Some(&table),
        &live,
        0,
        "full pool after frees and an allocation",
    );

    // A full pool reopens, and stays full; frees and allocations work after.
    drop(pool);
    let pool = reopen(&t);
    assert_rebuilt_exactly(&pool, &table, &live, "full pool reopened");
    expect_err!(
        pool.reserve(64),
        Error::PoolFull { .. },
        "full pool after reopen"
    );
    let slots: Vec<u64> = live.keys().copied().collect();
    for slot in &slots {
        pool.free(*slot).unwrap();
        live.remove(slot);
    }
    assert_state(&pool, Some(&table), &live, 0, "everything freed");
    for i in 0..100 {
        let r = pool.reserve(4096).unwrap();
        activate_into(&pool, &mut live, r, table.slot(i));
    }
    assert_state(
        &pool,
        Some(&table),
        &live,
        0,
        "allocating after everything was freed",
    );
}

/// A slab that becomes empty while another slab of its class has room is
/// released at once, and a large block can take its chunk.
#[test]
fn empty_slab_is_released_for_a_large_block() {
    on_both(2 << 20, |pool, what| {
        let mut live = Live::new();
        let slot = |i| pool.root_slot(i).unwrap();
        // Three 32 KiB blocks: slab A holds two, slab B one.
        for i in 0..3 {
            let r = pool.reserve(MAX_SLAB_BLOCK).unwrap();
            activate_into(pool, &mut live, r, slot(i));
        }
        let a = chunk_of(pool, live[&slot(0)].0);
        let b = chunk_of(pool, live[&slot(2)].0);
        assert_eq!(chunk_of(pool, live[&slot(1)].0), a);
        assert_ne!(a, b);
        assert_eq!(pool.usage().classes[SLAB_CLASSES - 1].chunks, 2);
        // Fill every other chunk with one large block.
        let free = pool.usage().free_chunks;
        let big = pool.reserve(free * CHUNK_SIZE).unwrap();
        activate_into(pool, &mut live, big, slot(3));
        expect_err!(
            pool.reserve(CHUNK_SIZE),
            Error::PoolFull { .. },
            format!("{what}: no free chunk")
        );
        // A gets room, then B empties: B is released.
        pool.free(slot(0)).unwrap();
        live.remove(&slot(0));
        pool.free(slot(2)).unwrap();
        live.remove(&slot(2));
        let u = pool.usage();
        assert_eq!(
            u.classes[SLAB_CLASSES - 1].chunks,
            1,
            "{what}: the empty slab was not released"
        );
        assert_eq!(
            u.free_chunks, 1,
            "{what}: the released slab is not a free chunk"
        );
        let r = pool
            .reserve(CHUNK_SIZE)
            .unwrap_or_else(|e| panic!("{what}: large block after the release: {e}"));
        assert_eq!(
            chunk_of(pool, r.offset()),
            b,
            "{what}: the large block did not take the released chunk"
        );
        activate_into(pool, &mut live, r, slot(0));
        assert_state(pool, None, &live, 0, &format!("{what}: at the end"));
    });
}

/// After every block is freed, the whole heap can be one block again.
///
/// Fails on the current allocator: `Heap::release` keeps the last empty slab
/// of each class (it releases an empty slab only when another slab of its
/// class is open), and `Heap::reserve` never reclaims such slabs, so a large
/// reservation fails with `PoolFull` although no block is in use.
#[test]
fn freeing_every_block_makes_the_whole_heap_available() {
    on_both(2 << 20, |pool, what| {
        let heap = pool.header().chunk_count * CHUNK_SIZE;
        // One block of each slab class, then free them all.
        for c in 0..SLAB_CLASSES.min(8) {
            let r = pool.reserve(MIN_BLOCK << c).unwrap();
            pool.activate(r, pool.root_slot(c).unwrap()).unwrap();
        }
        for c in 0..SLAB_CLASSES.min(8) {
            pool.free(pool.root_slot(c).unwrap()).unwrap();
        }
        let u = pool.usage();
        assert_eq!(u.bytes_in_use(), 0);
        assert!(pool.allocated_blocks().unwrap().is_empty());
        let r = pool.reserve(heap);
        assert!(
            r.is_ok(),
            "{what}: no block is in use, yet a block of the whole heap is refused: {:?}; usage: free_chunks {} of {}, \
             empty slab chunks per class {:?}",
            r.as_ref().err(),
            u.free_chunks,
            u.total_chunks,
            u.classes.iter().map(|c| c.chunks).collect::<Vec<_>>()
        );
        pool.cancel(r.unwrap()).unwrap();
    });
}

/// A reserved (not activated) slab block is not an allocated block:
/// `block_size` must refuse it, and `free` of a slot that holds it must fail
/// and change nothing.
///
/// Fails on the current allocator: `Heap::allocated_chunks` tests the DRAM
/// `taken` bitmap, which also marks reservations.
#[test]
fn a_reserved_block_is_not_allocated() {
    let pool = anonymous(4 << 20);
    let keep = pool.reserve(64).unwrap();
    pool.activate(keep, pool.root_slot(0).unwrap()).unwrap();
    let large = pool.reserve(100 << 10).unwrap();
    assert!(
        pool.block_size(large.offset()).is_err(),
        "block_size accepts a reserved large block"
    );
    pool.cancel(large).unwrap();
    let r = pool.reserve(64).unwrap();
    let off = r.offset();
    let before = pool.usage();
    let size = pool.block_size(off);
    let slot = pool.root_slot(1).unwrap();
    pool.store_u64(slot, off).unwrap();
    let freed = pool.free(slot);
    let after = pool.usage();
    assert!(
        size.is_err() && freed.is_err() && after == before,
        "a reserved, never activated 64-byte block is treated as allocated: block_size -> {size:?}, \
         free -> {freed:?}; class 0 blocks before {}, after {}",
        before.classes[0].blocks,
        after.classes[0].blocks
    );
    pool.activate(r, slot).unwrap();
    assert_eq!(pool.usage().classes[0].blocks, 2);
}

/// Threads reserving, activating and freeing in their own slots at once.
#[test]
fn concurrent_allocations_stay_disjoint() {
    let pool = anonymous(64 << 20);
    let table = SlotTable::create(&pool);
    const THREADS: usize = 4;
    const SLOTS_EACH: usize = 256;
    let lives: Vec<Live> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pool, table) = (&pool, &table);
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t as u64);
                    let mut live = Live::new();
                    for _ in 0..3000 {
                        let slot = table.slot(t * SLOTS_EACH + rng.gen_range(0..SLOTS_EACH));
                        if live.contains_key(&slot) && rng.gen_bool(0.5) {
                            pool.free(slot).unwrap();
                            live.remove(&slot);
                        } else {
                            let size = if rng.gen_bool(0.05) {
                                rng.gen_range(MAX_SLAB_BLOCK + 1..=128 << 10)
                            } else {
                                rng.gen_range(1..=4096)
                            };
                            let r = pool.reserve(size).unwrap();
                            let (off, got) = (r.offset(), r.size());
                            pool.replace(r, slot).unwrap();
                            live.insert(slot, (off, got));
                        }
                    }
                    live
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an allocating thread panicked"))
            .collect()
    });
    let mut live = Live::new();
    for l in lives {
        live.extend(l);
    }
    for (&slot, &(off, _)) in &live {
        assert_eq!(pool.load_u64(slot).unwrap(), off);
    }
    assert_state(
        &pool,
        Some(&table),
        &live,
        0,
        "after concurrent allocations",
    );
    // Every chunk handed out lies below the durable frontier, and the rest
    // of the heap is untouched.
    let frontier = pool.load_u64(pmindex::pm::header::FRONTIER_OFFSET).unwrap();
    for &(off, size) in live.values() {
        assert!(chunk_of(&pool, off + size - 1) < frontier);
    }
    pool.check_untouched().unwrap();
}

/// `Reservation::zeroed` (the heap frontier, `pm::alloc`): true exactly for
/// blocks never handed out since the pool was created, and such a block
/// reads as zero.
#[test]
fn only_blocks_never_handed_out_count_as_zeroed() {
    on_both(16 << 20, |pool, what| {
        for size in [100u64, 4096, 200 << 10] {
            let a = pool.reserve(size).unwrap();
            let b = pool.reserve(size).unwrap();
            assert!(a.zeroed() && b.zeroed(), "{what}: new {size}-byte blocks");
            for r in [&a, &b] {
                for w in (0..r.size()).step_by(8) {
                    assert_eq!(pool.load_u64(r.offset() + w).unwrap(), 0, "{what}");
                }
            }
            // Written, then given back: handed out again, it is not zeroed.
            let off = a.offset();
            pool.store_u64(off, 7).unwrap();
            pool.cancel(a).unwrap();
            let again = pool.reserve(size).unwrap();
            assert_eq!(again.offset(), off, "{what}");
            assert!(
                !again.zeroed(),
                "{what}: a {size}-byte block handed out before"
            );
            pool.cancel(again).unwrap();
            pool.cancel(b).unwrap();
        }
    });
}

/// The frontier is raised before a chunk past it is handed out, by
/// `FRONTIER_STEP` chunks at a time: one fence per step, none in between.
#[test]
fn the_heap_frontier_is_raised_a_step_at_a_time() {
    use pmindex::pm::header::FRONTIER_OFFSET;
    use pmindex::pm::{thread_counters as counters, FRONTIER_STEP};
    let pool = anonymous(16 << 20);
    let frontier = || pool.load_u64(FRONTIER_OFFSET).unwrap();
    assert_eq!(frontier(), 0);
    let mut held = Vec::new();
    for i in 0..2 * FRONTIER_STEP + 1 {
        let c0 = counters();
        let r = pool.reserve(CHUNK_SIZE).unwrap();
        let fences = (counters() - c0).fences;
        assert_eq!(chunk_of(&pool, r.offset()), u64::from(i));
        assert!(r.zeroed(), "chunk {i}");
        assert_eq!(fences, u64::from(i % FRONTIER_STEP == 0), "reserve {i}");
        assert_eq!(
            frontier(),
            u64::from((i / FRONTIER_STEP + 1) * FRONTIER_STEP),
            "after chunk {i}"
        );
        held.push(r);
    }
    for r in held {
        pool.cancel(r).unwrap();
    }
}

/// After a reopen, only chunks past the durable frontier count as zeroed:
/// a slab rebuilt at open, and a chunk that was handed out and given back,
/// may hold anything.
#[test]
fn after_a_reopen_only_chunks_past_the_frontier_count_as_zeroed() {
    use pmindex::pm::header::FRONTIER_OFFSET;
    let t = TempPool::new();
    let pool = file_pool(&t, 16 << 20);
    let s = pool.reserve(64).unwrap();
    let s_off = s.offset();
    pool.activate(s, pool.root_slot(1).unwrap()).unwrap();
    let l = pool.reserve(CHUNK_SIZE).unwrap();
    let l_off = l.offset();
    pool.store_u64(l_off, 9).unwrap();
    pool.persist(l_off, 8);
    // Dropped: free again after the reopen, with data in it.
    drop(l);
    let f = pool.load_u64(FRONTIER_OFFSET).unwrap();
    drop(pool);
    let pool = reopen(&t);
    assert_eq!(pool.load_u64(FRONTIER_OFFSET).unwrap(), f);
    let s2 = pool.reserve(64).unwrap();
    assert_eq!(chunk_of(&pool, s2.offset()), chunk_of(&pool, s_off));
    assert!(!s2.zeroed(), "a slab rebuilt at open");
    let l2 = pool.reserve(CHUNK_SIZE).unwrap();
    assert_eq!(l2.offset(), l_off);
    assert!(!l2.zeroed(), "a chunk handed out before the reopen");
    let mut held = vec![s2, l2];
    let mut seen_past = false;
    while let Ok(r) = pool.reserve(CHUNK_SIZE) {
        let past = chunk_of(&pool, r.offset()) >= f;
        assert_eq!(r.zeroed(), past, "chunk {}", chunk_of(&pool, r.offset()));
        seen_past |= past;
        held.push(r);
    }
    assert!(seen_past);
    for r in held {
        pool.cancel(r).unwrap();
    }
}

/// A run of chunks longer than a step takes the frontier to its end; a run
/// that starts below the chunks handed out is not zeroed, even where it
/// reaches past them.
#[test]
fn long_runs_move_the_frontier_to_their_end_and_zeroed_needs_the_whole_run() {
    use pmindex::pm::header::FRONTIER_OFFSET;
    use pmindex::pm::FRONTIER_STEP;
    let pool = anonymous(16 << 20);
    let frontier = || pool.load_u64(FRONTIER_OFFSET).unwrap();
    let n = u64::from(FRONTIER_STEP) * 2 + 8;
    let r = pool.reserve(n * CHUNK_SIZE).unwrap();
    assert_eq!(chunk_of(&pool, r.offset()), 0);
    assert!(r.zeroed());
    assert_eq!(
        frontier(),
        n,
        "a run past a step: the frontier goes to its end"
    );
    pool.cancel(r).unwrap();
    // Chunks 0..n were handed out: a longer run from chunk 0 is not zeroed.
    let r = pool.reserve((n + 3) * CHUNK_SIZE).unwrap();
    assert_eq!(chunk_of(&pool, r.offset()), 0);
    assert!(!r.zeroed(), "a run that starts below the handed-out mark");
    assert_eq!(frontier(), n + u64::from(FRONTIER_STEP));
    let next = pool.reserve(CHUNK_SIZE).unwrap();
    assert_eq!(chunk_of(&pool, next.offset()), n + 3);
    assert!(next.zeroed(), "the chunk after them was never handed out");
    pool.check_untouched().unwrap();
    pool.cancel(next).unwrap();
    pool.cancel(r).unwrap();
}

/// A slab released while another slab of its class is open goes back to
/// the free chunks; formatted again, for another class, none of its blocks
/// is zeroed.
#[test]
fn a_released_slab_formatted_again_has_no_zeroed_block() {
    let pool = anonymous(16 << 20);
    // 4 KiB blocks: 16 to a chunk. Fill one slab and open a second.
    let first: Vec<Reservation> = (0..16).map(|_| pool.reserve(4096).unwrap()).collect();
    let a = chunk_of(&pool, first[0].offset());
    assert!(first.iter().all(|r| chunk_of(&pool, r.offset()) == a));
    for r in &first {
        pool.store_u64(r.offset() + 8, 0xdead).unwrap();
    }
    let second = pool.reserve(4096).unwrap();
    assert_ne!(chunk_of(&pool, second.offset()), a);
    for r in first {
        pool.cancel(r).unwrap();
    }
    // The first slab is empty with another open: released. A 64-byte slab
    // takes its chunk, the lowest free one.
    let small = pool.reserve(64).unwrap();
    assert_eq!(chunk_of(&pool, small.offset()), a);
    assert!(!small.zeroed(), "a block in a slab formatted again");
    pool.check_untouched().unwrap();
    pool.cancel(small).unwrap();
    pool.cancel(second).unwrap();
}

/// `check_untouched` looks at every chunk not handed out, also those below
/// the frontier (raised ahead of use), and not at chunks handed out and
/// given back.
#[test]
fn check_untouched_reads_every_chunk_not_handed_out() {
    use pmindex::pm::header::FRONTIER_OFFSET;
    let pool = anonymous(16 << 20);
    let r = pool.reserve(CHUNK_SIZE).unwrap();
    let off = r.offset();
    pool.store_u64(off + 64, 1).unwrap();
    pool.cancel(r).unwrap();
    pool.check_untouched().unwrap();
    // Chunk 3 lies below the frontier (16) but was never handed out.
    assert!(pool.load_u64(FRONTIER_OFFSET).unwrap() > 3);
    let third = off + 3 * CHUNK_SIZE + 4000;
    pool.store_u64(third, 5).unwrap();
    match pool.check_untouched() {
        Err(Error::CheckFailed(m)) => {
            assert!(m.contains(&format!("{third:#x}")), "message: {m}");
            assert!(m.contains("chunk 3 was never handed out"), "message: {m}");
        }
        other => panic!("expected CheckFailed, got {other:?}"),
    }
    pool.store_u64(third, 0).unwrap();
    pool.check_untouched().unwrap();
}
