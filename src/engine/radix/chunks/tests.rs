//! Unit tests of the block heap (`super`): classes, reservations and
//! releases (under either lock), evacuations, and full pools.

use super::*;

#[test]
fn classes() {
    let size = |n: u64, between: bool| SIZES[usize::from(class_of(n, between))];
    for between in [false, true] {
        assert_eq!(size(1, between), 64);
        assert_eq!(size(64, between), 64);
        assert_eq!(size(65, between), 128);
        assert_eq!(size(4096, between), 4096);
        assert_eq!(size(32768, between), 32768);
        assert_eq!(class_of(32769, between), LARGE);
    }
    // Powers of two only in a format 2 heap; the sizes between in a
    // format 3 one.
    assert_eq!(size(144, false), 256);
    assert_eq!(size(144, true), 192);
    assert_eq!(size(193, true), 256);
    assert_eq!(size(272, false), 512);
    assert_eq!(size(272, true), 384);
    assert_eq!(size(4097, false), 8192);
    assert_eq!(size(4097, true), 6144);
    assert_eq!(size(24577, true), 32768);
    assert_eq!(chunk_len(64), CHUNK_SIZE);
    assert_eq!(chunk_len(4096), CHUNK_SIZE);
    assert_eq!(chunk_len(6144), 2 * CHUNK_SIZE);
    assert_eq!(chunk_len(32768), 8 * CHUNK_SIZE);
    // Every class's chunk holds at least 15 blocks.
    for s in SIZES {
        assert!((chunk_len(s) - FIRST) / s >= 15, "{s}");
    }
    // The PM word of each class, and back; a format 2 heap refuses the
    // sizes between.
    for (i, s) in SIZES.iter().enumerate() {
        let c = i as u8;
        let w = encode(c);
        assert_eq!(decode(w, true), Some(c));
        assert_eq!(decode(w, false), s.is_power_of_two().then_some(c));
        assert_eq!(w < 16, s.is_power_of_two());
    }
    assert_eq!((encode(LARGE), decode(0, false)), (0, Some(LARGE)));
    for w in [1, 5, 16, 64, 200, 4096, 1 << 20] {
        assert_eq!(decode(w, true), None, "{w}");
    }
}

fn fresh() -> (Pool, Chunks) {
    let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
    let head = pool.root_slot(1).unwrap();
    let c = Chunks::load(&pool, head, true).unwrap();
    (pool, c)
}

/// A block freed under the read lock ([`Chunks::free_shared`]) is
/// free: the next reservation takes it, even from a chunk that was
/// full (out of `partial` until the reservation absorbs `refilled`;
/// without that, it carves a new chunk). A second free of it, with
/// the location found before the first, is refused and changes
/// nothing (the atomic step's own check: two threads freeing one
/// block of a damaged tree at once).
#[test]
fn a_block_freed_under_the_read_lock_is_reserved_again() {
    let (pool, mut c) = fresh();
    // 4 KiB blocks: 15 to a 64 KiB chunk.
    let first = c.reserve(&pool, 4096).unwrap().offset();
    let mut blocks = vec![first];
    while c.partial[usize::from(class_of(4096, true))]
        .first()
        .is_some()
    {
        blocks.push(c.reserve(&pool, 4096).unwrap().offset());
    }
    assert_eq!(blocks.len(), 15, "one chunk, full");
    let chunks = c.offsets().count();
    let victim = blocks[6];
    let before = c.used_blocks();
    let (_, at) = c.in_use_at(victim).unwrap();
    c.free_shared(at, victim).unwrap();
    let e = c.free_shared(at, victim).unwrap_err();
    assert!(e.to_string().contains("free block"), "{e}");
    assert_ne!(c.used_blocks(), before);
    check_partial(&c, "after a shared free");
    let after = c.used_blocks();
    assert!(c.free_shared(at, victim).is_err());
    assert_eq!(c.used_blocks(), after, "a refused free changed the map");
    assert_eq!(c.reserve(&pool, 4096).unwrap().offset(), victim);
    assert_eq!(c.offsets().count(), chunks, "no new chunk");
    check_partial(&c, "after the reservation");
}

/// The lowest-free-block model of
/// `reserve_takes_the_lowest_free_block_after_any_releases`, with every
/// release through `free_shared` (from a review: without its
/// `fetch_min` of `low`, every unit test passed).
#[test]
fn shared_frees_keep_the_lowest_free_block_order() {
    lowest_free_block_model(true);
}

/// Threads freeing interleaved blocks of the same bitmap words under
/// the read lock leave the free counts, the bitmaps and
/// `partial`/`refilled` in agreement, and every block reservable
/// again, with no new chunk.
#[test]
fn concurrent_shared_frees_agree() {
    use parking_lot::RwLock;
    for round in 0..20 {
        let (pool, c) = fresh();
        let heap = RwLock::new(c);
        let blocks: Vec<u64> = (0..3000)
            .map(|_| heap.write().reserve(&pool, 64).unwrap().offset())
            .collect();
        let threads = 4;
        std::thread::scope(|s| {
            for t in 0..threads {
                let (heap, blocks) = (&heap, &blocks);
                s.spawn(move || {
                    for (j, &b) in blocks.iter().enumerate() {
                        if j % threads == t {
                            let h = heap.read();
                            let (_, at) = h.in_use_at(b).unwrap();
                            h.free_shared(at, b).unwrap();
                        }
                    }
                });
            }
        });
        let mut c = heap.into_inner();
        check_partial(&c, "after concurrent frees");
        let chunks = c.offsets().count();
        let mut again: Vec<u64> = (0..3000)
            .map(|_| c.reserve(&pool, 64).unwrap().offset())
            .collect();
        again.sort_unstable();
        let mut want = blocks.clone();
        want.sort_unstable();
        assert_eq!(again, want, "round {round}");
        assert_eq!(c.offsets().count(), chunks);
    }
}

#[test]
fn blocks_are_distinct_line_aligned_and_reused_after_release() {
    let (pool, mut c) = fresh();
    let mut seen = BTreeSet::new();
    let blocks: Vec<Block> = (0..2100).map(|_| c.reserve(&pool, 40).unwrap()).collect();
    for b in &blocks {
        assert_eq!(b.offset() % 64, 0);
        assert!(seen.insert(b.offset()), "block handed out twice");
        assert_eq!(c.block_size(b.offset()).unwrap(), 64);
    }
    // 1023 blocks of 64 B per chunk: three chunks.
    assert_eq!(c.offsets().count(), 3);
    let off = blocks[5].offset();
    c.release(&pool, off).unwrap();
    assert!(c.release(&pool, off).is_err(), "double release is refused");
    assert_eq!(c.reserve(&pool, 64).unwrap().offset(), off);
    assert!(c.block_size(off + 8).is_err());
}

/// A full pool whose last look for empty chunks found none looks again
/// once a chunk empties, through either free: the emptied chunk goes
/// back to the substrate for a block of another class
/// (`Chunks::maybe_empty`).
#[test]
fn a_chunk_emptied_after_a_refused_reserve_serves_another_class() {
    for shared in [false, true] {
        let (pool, mut c) = fresh();
        let mut small = Vec::new();
        loop {
            match c.reserve(&pool, 64) {
                Ok(b) => small.push(b.offset()),
                Err(Error::PoolFull { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        // No chunk for 4 KiB blocks, no empty one to give back: refused,
        // and the mark cleared.
        assert!(matches!(
            c.reserve(&pool, 4096),
            Err(Error::PoolFull { .. })
        ));
        assert!(!*c.maybe_empty.get_mut());
        assert!(matches!(
            c.reserve(&pool, 4096),
            Err(Error::PoolFull { .. })
        ));
        // Empty the first chunk (its blocks are the first handed out).
        let per_chunk = (CHUNK_SIZE - FIRST) / 64;
        for &off in &small[..per_chunk as usize] {
            if shared {
                let (_, at) = c.in_use_at(off).unwrap();
                c.free_shared(at, off).unwrap();
            } else {
                c.release(&pool, off).unwrap();
            }
        }
        assert!(*c.maybe_empty.get_mut(), "shared: {shared}");
        let b = c.reserve(&pool, 4096).unwrap();
        assert_eq!(c.block_size(b.offset()).unwrap(), 4096, "shared: {shared}");
    }
}

/// A full pool with a free block of a larger class only: a reserve
/// of a smaller size takes it (and it is freed into its own class).
#[test]
fn a_full_pool_serves_a_small_block_from_a_larger_class() {
    let (pool, mut c) = fresh();
    let mut big = Vec::new();
    loop {
        match c.reserve(&pool, 512) {
            Ok(b) => big.push(b),
            Err(Error::PoolFull { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(big.len() > 1000);
    let freed = big[7].offset();
    c.release(&pool, freed).unwrap();
    let small = c.reserve(&pool, 64).expect("a 512-byte block serves");
    assert_eq!(small.offset(), freed);
    assert_eq!(c.block_size(small.offset()).unwrap(), 512);
    assert!(matches!(c.reserve(&pool, 64), Err(Error::PoolFull { .. })));
    c.release(&pool, small.offset()).unwrap();
    assert_eq!(c.reserve(&pool, 512).unwrap().offset(), freed);
}

/// Three chunks of 512-byte blocks with 100, 60 and 20 blocks in use
/// (of 127): the sparsest is chosen (its 20 fit in the others' 27 + 67
/// free blocks; the next, 60 more, would not fit in 27), unless moving
/// its blocks would pass the budget; no block of a draining chunk is
/// handed out, and the emptied one goes back.
#[test]
fn an_evacuation_takes_the_sparsest_chunks_that_fit_elsewhere() {
    let (pool, mut c) = fresh();
    let per = ((CHUNK_SIZE - FIRST) / 512) as usize;
    let blocks: Vec<Block> = (0..3 * per)
        .map(|_| c.reserve(&pool, 512).unwrap())
        .collect();
    assert_eq!(c.offsets().count(), 3);
    let chunk_of = |b: &Block| c.offsets().filter(|&o| o <= b.offset()).max().unwrap();
    let starts: Vec<u64> = blocks.iter().map(chunk_of).collect();
    let mut kept: Vec<Vec<u64>> = vec![Vec::new(); 3];
    for (n, in_use) in [100, 60, 20].into_iter().enumerate() {
        let mine: Vec<&Block> = blocks.iter().skip(n * per).take(per).collect();
        for b in &mine[in_use..] {
            c.release(&pool, b.offset()).unwrap();
        }
        kept[n] = mine[..in_use].iter().map(|b| b.offset()).collect();
    }
    assert!(c.begin_evacuation(19 * 512).0.is_empty(), "over the budget");
    let (chosen, to_move) = c.begin_evacuation(u64::MAX);
    assert_eq!(chosen, vec![starts[2 * per]], "the sparsest only");
    assert_eq!(to_move, 20);
    assert!(c.draining(kept[2][0]) && !c.draining(kept[1][0]));
    // Its 20 blocks move: every block handed out now is elsewhere.
    let mut moved = Vec::new();
    for &old in &kept[2] {
        let b = c.reserve(&pool, 512).unwrap();
        assert!(
            !c.draining(b.offset()),
            "a block of a draining chunk handed out"
        );
        c.release(&pool, old).unwrap();
        moved.push(b.offset());
    }
    assert_eq!(c.end_evacuation(&pool, &chosen).unwrap(), 1);
    assert_eq!(c.offsets().count(), 2);
    // Nothing left to gain: the moved blocks filled the first chunk
    // (7 free of 127), and the second's 60 do not fit there.
    assert!(c.begin_evacuation(u64::MAX).0.is_empty());
    for b in moved {
        assert!(!c.draining(b));
    }
}

#[test]
fn large_blocks_take_a_chunk_each_and_give_it_back() {
    let (pool, mut c) = fresh();
    let before = pool.usage().bytes_in_use();
    let b = c.reserve(&pool, 100_000).unwrap();
    assert!(c.block_size(b.offset()).unwrap() >= 100_000);
    let small = c.reserve(&pool, 100).unwrap();
    assert_eq!(c.offsets().count(), 2);
    c.cancel(&pool, b).unwrap();
    assert_eq!(c.offsets().count(), 1);
    // The list in PM is the list in DRAM: a reload sees the one chunk.
    let mut again = Chunks::load(&pool, c.head_slot, true).unwrap();
    assert_eq!(
        again.offsets().collect::<Vec<_>>(),
        c.offsets().collect::<Vec<_>>()
    );
    again.mark(small.offset()).unwrap();
    assert!(
        again.mark(small.offset()).is_err(),
        "a block reached twice is corrupt"
    );
    again.settle(&pool).unwrap();
    assert_eq!(again.offsets().count(), 1);
    // Nothing marked: the chunk goes back to the substrate.
    let mut empty = Chunks::load(&pool, c.head_slot, true).unwrap();
    empty.settle(&pool).unwrap();
    assert_eq!(empty.offsets().count(), 0);
    assert_eq!(pool.load_u64(c.head_slot).unwrap(), 0);
    assert_eq!(pool.usage().bytes_in_use(), before);
}

/// Against a model: a reservation is always the lowest free block of
/// the lowest chunk with one (the `low` hint never skips a free word),
/// and a release makes exactly that block free again.
#[test]
fn reserve_takes_the_lowest_free_block_after_any_releases() {
    lowest_free_block_model(false);
}

/// The model's run: reservations of 64-byte blocks and releases of a
/// random live one (through [`Chunks::free_shared`] if `shared`, as
/// under the heap's read lock; else [`Chunks::release`]).
fn lowest_free_block_model(shared: bool) {
    let (pool, mut c) = fresh();
    let mut live: BTreeSet<u64> = BTreeSet::new();
    let mut free: BTreeSet<u64> = BTreeSet::new();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for step in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if !x.is_multiple_of(3) || live.is_empty() {
            let b = c.reserve(&pool, 64).unwrap().offset();
            if let Some(&lowest) = free.first() {
                assert_eq!(b, lowest, "step {step}: not the lowest free block");
            }
            free.remove(&b);
            assert!(live.insert(b), "step {step}: block handed out twice");
        } else {
            let b = *live.iter().nth((x >> 8) as usize % live.len()).unwrap();
            if shared {
                let (_, at) = c.in_use_at(b).unwrap();
                c.free_shared(at, b).unwrap();
            } else {
                c.release(&pool, b).unwrap();
            }
            live.remove(&b);
            free.insert(b);
        }
        if step % 997 == 0 {
            check_partial(&c, &format!("step {step}"));
        }
    }
    assert!(c.offsets().count() >= 2, "the run spans several chunks");
}

/// The positional map names exactly the chunks of the ordered map, at
/// every piece each covers, and `locate` finds the same block through
/// either.
fn check_by_piece(c: &Chunks, ctx: &str) {
    let mut covered = 0;
    for (&o, &i) in &c.index {
        let len = c.chunk(i).len;
        for p in o / CHUNK_SIZE..(o + len).div_ceil(CHUNK_SIZE) {
            assert_eq!(
                c.by_piece.get(p as usize).copied(),
                Some(i as u32 + 1),
                "{ctx}: piece {p} of chunk {o:#x}"
            );
            covered += 1;
        }
        for off in [o, o + FIRST, o + FIRST + 64, o + len - 64, o + len] {
            assert_eq!(
                c.locate(off),
                c.locate_in_map(off),
                "{ctx}: locate({off:#x})"
            );
        }
    }
    let nonzero = c.by_piece.iter().filter(|&&v| v != 0).count();
    assert_eq!(
        nonzero, covered,
        "{ctx}: stale pieces in the positional map"
    );
}

/// Every small chunk is in `partial` exactly while it has a free
/// block, with its free count right.
fn check_partial(c: &Chunks, ctx: &str) {
    check_by_piece(c, ctx);
    for (&o, &i) in &c.index {
        let ch = c.chunk(i);
        if ch.class == LARGE {
            continue;
        }
        let used: u32 = ch.used.iter().map(|w| w.load(Relaxed).count_ones()).sum();
        let free = ch.free.load(Relaxed);
        assert_eq!(free, ch.capacity() - used, "{ctx}: free count of {o:#x}");
        // A chunk refilled under the read lock waits in `refilled`.
        let inp = c.partial[usize::from(ch.class)].contains(&(o, i))
            || c.refilled.lock().contains(&(o, i));
        assert_eq!(
            inp,
            free > 0,
            "{ctx}: chunk {o:#x} free {free} in partial {inp}"
        );
    }
    for (k, p) in c.partial.iter().enumerate() {
        for &(o, i) in p {
            assert_eq!(c.index.get(&o), Some(&i), "{ctx}: stale partial entry");
            assert_eq!(usize::from(c.chunk(i).class), k);
        }
    }
}

/// Random reservations, cancels and releases of five sizes in a pool
/// that fills (so `release_empty` runs), with reopens (load, mark,
/// settle) between: the invariant `Chunks::keep` relies on (it puts a
/// chunk back in `partial` at its first free block only) holds after
/// every step. (Contributed by a review, 2026-11-27.)
#[test]
fn partial_holds_exactly_the_chunks_with_a_free_block() {
    // A small pool, so that pool-full and release_empty are reached.
    let pool = Pool::create_anonymous(2 << 20, "test", &Default::default()).unwrap();
    let head = pool.root_slot(1).unwrap();
    let mut c = Chunks::load(&pool, head, true).unwrap();
    let mut live: Vec<u64> = Vec::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let sizes = [64u64, 100, 200, 3000, 40_000];
    let mut fulls = 0;
    for step in 0..60_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let r = x % 100;
        if r < 55 || live.is_empty() {
            let size = sizes[(x >> 20) as usize % sizes.len()];
            match c.reserve(&pool, size) {
                Ok(b) => {
                    if (x >> 40).is_multiple_of(5) {
                        c.cancel(&pool, b).unwrap();
                    } else {
                        live.push(b.offset());
                    }
                }
                Err(Error::PoolFull { .. }) => fulls += 1,
                Err(e) => panic!("{e}"),
            }
        } else if r < 99 {
            let i = (x >> 8) as usize % live.len();
            let b = live.swap_remove(i);
            c.release(&pool, b).unwrap();
        } else {
            // Reopen: load, mark what is live, settle.
            let mut again = Chunks::load(&pool, head, true).unwrap();
            for &b in &live {
                again.mark(b).unwrap();
            }
            again.settle(&pool).unwrap();
            c = again;
            check_partial(&c, &format!("step {step} after settle"));
            let u = c.unmarked();
            for ch in u.all() {
                assert!(!u.partial[usize::from(ch.class).min(CLASSES - 1)]
                    .iter()
                    .any(|&(o, _)| o == ch.start));
            }
        }
        check_partial(&c, &format!("step {step}"));
    }
    assert!(fulls > 0, "the pool filled at least once");
}
