//! HART recovery (Algorithm 7), in parallel.
//!
//! The paper rebuilds the DRAM index by walking the chunk lists. Here that
//! runs in four phases:
//!
//! 1. **Load** every stripe's chunk lists (one PM read per chunk; each chunk
//!    is checked to be an allocated block of the right size, and each list
//!    to have no cycle).
//! 2. **Validate leaves, in parallel over chunks**: a worker thread takes
//!    one leaf chunk at a time and decides for each of its 56 leaves whether
//!    it is live (valid commit word, key length of its list, active slot
//!    whose CRC matches key ‖ value, else the other slot, whose number is
//!    then written back into the commit word and flushed). This is where
//!    recovery reads PM, so it is the phase that gains from cores.
//!    A worker that repaired a commit word fences once, on its own thread,
//!    when it runs out of chunks: a fence orders only the flushes of the
//!    thread that issues it (docs/design.md §8, "Several writers").
//! 3. Free the large blocks that a slot still points to but that are no
//!    live value (a crash between a slot write and its activation or free).
//! 4. **Rebuild, in parallel over stripes**: worker `s` marks stripe `s`'s
//!    live leaves and value objects used and recycles its empty chunks, and
//!    puts into their ARTs the live leaves of the hash keys that route to
//!    `s`, wherever they are (phase 2 grouped them so; each entry carries
//!    its leaf's stripe, [`super::LeafRef`]). No other worker touches those
//!    lists or ARTs, so no locks are needed.
//!
//! **A key held by two live leaves** comes from a crash during an upsert
//! that wrote its leaf before its descent and found the key present
//! (`Hart::update_instead`, docs/design.md §7 "Leaf first"): the early leaf
//! was not yet killed. Either leaf is a state that the upsert in flight may
//! leave (before it, or after it), so phase 4 keeps one of them, the one
//! at the lower offset, and kills the other (`commit = 0` → flush, fenced
//! by the worker that flushed), and then gives it and its value back.
//! Before 2026-11-28 this was `Corrupt`. Until 2026-12-02 phase 4 kept the
//! one its ART insertion met last, an order that depends on which
//! recovery thread took which chunk: a read-only open, whose repairs stay
//! in its private copy, could then show the other value than the writable
//! open after it (`tests/killed_process.rs` found it; regression test
//! `which_of_two_live_leaves_recovery_keeps_does_not_depend_on_its_threads`).
//!
//! A value object used twice, and in formats 3 and 4 a leaf outside its
//! hash key's stripe, are `Corrupt`: neither can come from a crash.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::art::{Art, LeafKeys};
use super::chunk::ChunkList;
use super::leaf::{self, Checksum, Commit, LEAF_SIZES, MAX_OBJECT};
use super::points::{self, Points};
use super::superblock::{self, value_class, Format, STRIPES, VALUE_SIZES};
use super::trees::WordHasher;
use super::{read_slot, Hart, HashKey, LeafRef, Stripe, ValueRef, DEFAULT_HASH_KEY_LEN};
use crate::engine::MAX_VALUE_LEN;
use crate::error::{Error, Result};
use crate::pm::cases::{self, Case};
use crate::pm::{Fault, Pool};

/// The chunk lists of one stripe, outside their locks (recovery owns them).
pub(super) struct StripeLists {
    leaves: Vec<ChunkList>,
    values: Vec<ChunkList>,
}

impl StripeLists {
    /// Empty lists of stripe `s` of the superblock at `sb`.
    pub(super) fn new(sb: u64, s: usize) -> Self {
        StripeLists {
            leaves: (0..LEAF_SIZES.len())
                .map(|lc| {
                    ChunkList::new(
                        LEAF_SIZES[lc],
                        sb + superblock::leaf_head(s, lc),
                        leaf::HEADER,
                    )
                })
                .collect(),
            values: (0..VALUE_SIZES.len())
                .map(|vc| ChunkList::new(VALUE_SIZES[vc], sb + superblock::value_head(s, vc), 0))
                .collect(),
        }
    }

    /// Walks the persistent lists of stripe `s`.
    fn load(pool: &Pool, sb: u64, s: usize) -> Result<Self> {
        Ok(StripeLists {
            leaves: (0..LEAF_SIZES.len())
                .map(|lc| {
                    ChunkList::load(
                        pool,
                        LEAF_SIZES[lc],
                        sb + superblock::leaf_head(s, lc),
                        leaf::HEADER,
                    )
                })
                .collect::<Result<_>>()?,
            values: (0..VALUE_SIZES.len())
                .map(|vc| {
                    ChunkList::load(pool, VALUE_SIZES[vc], sb + superblock::value_head(s, vc), 0)
                })
                .collect::<Result<_>>()?,
        })
    }

    /// Puts the lists behind their locks, with the stripe's key count.
    pub(super) fn into_stripe(self, len: u64) -> Stripe {
        Stripe {
            leaves: self.leaves.into_iter().map(Mutex::new).collect(),
            values: self.values.into_iter().map(Mutex::new).collect(),
            len: AtomicU64::new(len),
            next_leaf: Default::default(),
            upserts_insert: AtomicBool::new(true),
        }
    }
}

/// Whether a slot holds a complete value for `key`: written, a plausible
/// length, a pointer to an object of a class that may hold it
/// (`in_stripe(len, p)` says whether `p` is an object of one of the
/// stripe's lists [`superblock::value_classes`] names for a value of `len`
/// bytes) or to an allocated block big enough, and a CRC of key ‖ value
/// that matches.
pub(super) fn slot_is_valid(
    pool: &Pool,
    checksum: Checksum,
    v: ValueRef,
    key: &[u8],
    in_stripe: &dyn Fn(usize, u64) -> bool,
) -> Result<bool> {
    let len = v.meta.value_len;
    if !v.written || len > MAX_VALUE_LEN {
        return Ok(false);
    }
    let value: &[u8] = if len == 0 {
        if v.p != 0 {
            return Ok(false);
        }
        &[]
    } else if v.meta.inline() {
        // SAFETY: the slot is 16 bytes of a leaf in a chunk (allocated);
        // nobody writes it meanwhile (as below).
        unsafe { pool.bytes(v.at, len as u64)? }
    } else if v.meta.large {
        if len <= MAX_OBJECT || pool.block_size(v.p).map_or(true, |b| b < len as u64) {
            return Ok(false);
        }
        // SAFETY: the block is allocated and at least `len` bytes; recovery
        // runs before the engine is shared, and `check` holds the ART lock
        // under which the value is never written.
        unsafe { pool.bytes(v.p, len as u64)? }
    } else {
        // A length above the largest object's in a slot not marked large
        // is damage (found by tests/damaged_engine_pools.rs: it panicked
        // in `value_class`).
        if len > MAX_OBJECT || !in_stripe(len, v.p) {
            return Ok(false);
        }
        // SAFETY: `p` is an object of at least `len` bytes (its class or
        // a larger one);
        // as above, nobody writes it meanwhile.
        unsafe { pool.bytes(v.p, len as u64)? }
    };
    Ok(checksum.of(key, value) == v.meta.crc)
}

/// The value list of `lists` that holds object `p` of a value of `len`
/// bytes (`1..=MAX_OBJECT`), with the object's chunk and index: its class's
/// list, or in format 6 a larger class's ([`superblock::value_classes`]).
fn object_of(lists: &StripeLists, format: Format, len: usize, p: u64) -> Option<(usize, u64, u64)> {
    superblock::value_classes(len, format.any_class)
        .find_map(|vc| lists.values[vc].locate(p).map(|(c, i)| (vc, c, i)))
}

/// A leaf found live in phase 2.
struct Live {
    leaf: LeafRef,
    /// Its key: `keys[key_at..key_at + key_len]` of its [`StripeFound`].
    key_at: usize,
    key_len: usize,
}

/// What one worker found in phase 2 for one stripe `s`. Keys go into one
/// buffer, so that a million live leaves do not cost a million allocations.
#[derive(Default)]
struct StripeFound {
    /// The live leaves whose hash keys route to `s`, of any stripe.
    live: Vec<Live>,
    keys: Vec<u8>,
    /// How many live leaves stripe `s` holds.
    held: u64,
    /// `(leaf list, chunk, used bitmap)` of every chunk scanned.
    leaf_chunks: Vec<(usize, u64, u64)>,
    /// `(value list, chunk, object index)` of every live small value.
    values: Vec<(usize, u64, u64)>,
}

/// What one worker found in phase 2.
#[derive(Default)]
struct Found {
    /// By stripe.
    stripes: Vec<StripeFound>,
    /// Slots that point to a large block that is no live value, and the
    /// block.
    leftovers: Vec<(u64, u64)>,
    /// The blocks of live large values.
    large: Vec<u64>,
    /// Whether a commit word was rewritten (and flushed).
    repaired: bool,
}

/// Decides whether `leaf` (of leaf list `lc` of stripe `s`) is live, and if
/// so records it (and its value object) in `found`. Returns whether it is.
fn scan_leaf(
    pool: &Pool,
    format: Format,
    k_h: usize,
    lists: &StripeLists,
    (leaf, lc, s): (u64, usize, usize),
    found: &mut Found,
) -> Result<bool> {
    let Found {
        stripes,
        leftovers,
        large,
        repaired,
    } = found;
    let checksum = format.checksum;
    let commit =
        leaf::commit(pool, leaf)?.filter(|c| c.key_len > 0 && leaf::class_for_key(c.key_len) == lc);
    let in_stripe = |len: usize, p: u64| object_of(lists, format, len, p).is_some();
    let mut live_slot = None;
    if let Some(c) = commit {
        // SAFETY: recovery runs before the engine is shared; the commit word
        // gives a key length that fits this leaf list's leaves.
        let key = unsafe { leaf::key(pool, leaf, c)? };
        for slot in [c.active, 1 - c.active] {
            let v = read_slot(pool, leaf, slot)?;
            if slot_is_valid(pool, checksum, v, key, &in_stripe)? {
                if slot != c.active {
                    // The newer slot is torn: fall back to the other one.
                    cases::record(Case::HartUpdateFallback);
                    pool.store_u64(leaf, Commit { active: slot, ..c }.encode())?;
                    pool.flush(leaf, 8);
                    *repaired = true;
                }
                if v.meta.large {
                    large.push(v.p);
                }
                // The ARTs are rebuilt by the stripe of the hash key (its
                // route), the lists by the leaf's own.
                let p = HashKey::new(&key[..k_h.min(key.len())]).route().stripe;
                if p != s && !format.any_stripe {
                    return Err(leaf::corrupt(
                        leaf,
                        "the leaf is in another allocation stripe than its hash key's",
                    ));
                }
                if v.meta.value_len > 0 && !v.meta.large && !v.meta.inline() {
                    let (vc, chunk, i) =
                        object_of(lists, format, v.meta.value_len, v.p).expect("validated");
                    stripes[s].values.push((vc, chunk, i));
                }
                stripes[s].held += 1;
                let out = &mut stripes[p];
                out.live.push(Live {
                    leaf: LeafRef::new(leaf, s),
                    key_at: out.keys.len(),
                    key_len: key.len(),
                });
                out.keys.extend_from_slice(key);
                live_slot = Some(slot);
                break;
            }
        }
        if live_slot.is_none() {
            cases::record(Case::HartTornLeaf);
        }
    }
    for slot in 0..2 {
        if Some(slot) == live_slot {
            continue;
        }
        let v = read_slot(pool, leaf, slot)?;
        if v.meta.large && v.p != 0 {
            leftovers.push((leaf::slot_off(leaf, slot), v.p));
        }
    }
    Ok(live_slot.is_some())
}

/// Runs `work(i)` for `i` in `0..n` on `threads` threads; each thread
/// folds its results into its own `T`, and calls `done` on it, on its own
/// thread, when no `i` is left.
fn parallel<T: Send + Default>(
    threads: usize,
    n: usize,
    work: impl Fn(usize, &mut T) -> Result<()> + Sync,
    done: impl Fn(&T) + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let run = || -> Result<T> {
        let mut acc = T::default();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                done(&acc);
                return Ok(acc);
            }
            work(i, &mut acc)?;
        }
    };
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return Ok(vec![run()?]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(run)).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a recovery thread panicked"))
            .collect()
    })
}

/// What one stripe rebuilt in phase 4.
/// Each hash key's rebuilt ART, and the hashes of its ART keys with their
/// leaves for its point index (empty with `hart.point_index=off`).
type RebuiltTrees =
    HashMap<HashKey, (Art<LeafRef>, Vec<(u64, LeafRef)>), BuildHasherDefault<WordHasher>>;

struct Rebuilt {
    trees: RebuiltTrees,
    len: u64,
    /// Leaves killed as the second live leaf of a key, with their leaf
    /// list and live value, to give back once every worker is done.
    killed: Vec<(LeafRef, usize, ValueRef)>,
}

/// Recovers a HART from its pool with `threads` threads (default: every
/// core). `(k_h, format)` are the hash key length and format the caller
/// asked for, if any: they only matter if creation crashed before the
/// superblock was published, and the engine is then created again with
/// them. `points`: where ARTs get
/// a point index (`hart.point_index_above`), `None` for none.
pub(super) fn open(
    pool: Arc<Pool>,
    threads: Option<usize>,
    (k_h, format): (Option<usize>, Option<u8>),
    points: Option<usize>,
) -> Result<Hart> {
    let point_index = points.is_some();
    let point_above = points.unwrap_or(points::BUILD_ABOVE);
    let root = pool.root_slot(0)?;
    let sb = pool.load_u64(root)?;
    if sb == 0 {
        // Creation crashed before the superblock was published (a bug the
        // crash simulator found: this used to create the default `k_h`,
        // and an open that named another one then failed), unless blocks
        // say the superblock was lost instead.
        pool.check_unpublished_root(root, "hart")?;
        let mut h = Hart::create_format(
            pool,
            k_h.unwrap_or(DEFAULT_HASH_KEY_LEN),
            format.unwrap_or(superblock::FORMAT),
        )?;
        h.point_index = point_index;
        h.point_above = point_above;
        return Ok(h);
    }
    let magic = if pool.block_size(sb).ok() == Some(superblock::SIZE) {
        pool.load_u64(sb)?
    } else {
        0
    };
    let newest = superblock::MAGIC >> 56;
    if superblock::OLD_MAGICS.contains(&magic) {
        return Err(Error::corrupt(
            sb,
            format!(
                "hart: this pool has HART format {}, which this version (format {newest}) \
                 no longer reads (it reads formats 3 to {newest}); re-create it",
                magic >> 56
            ),
        ));
    }
    if magic & !(0xFF << 56) == superblock::MAGIC & !(0xFF << 56) && magic >> 56 > newest {
        return Err(Error::corrupt(
            sb,
            format!(
                "hart: this pool has HART format {}, newer than this version reads \
                 (formats 3 to {newest}); open it with a newer pmindex",
                magic >> 56
            ),
        ));
    }
    let Some(format) = superblock::format_of(magic) else {
        return Err(Error::corrupt(
            sb,
            "hart: root slot 0 does not point to a superblock",
        ));
    };
    let k_h = pool.load_u64(sb + superblock::K_H)? as usize;
    if !(1..=8).contains(&k_h) {
        return Err(Error::corrupt(
            sb + superblock::K_H,
            format!("hart: hash key length {k_h}"),
        ));
    }
    let stripes = pool.load_u64(sb + superblock::STRIPE_COUNT)?;
    if stripes != STRIPES as u64 {
        return Err(Error::corrupt(
            sb + superblock::STRIPE_COUNT,
            format!("hart: {stripes} allocation stripes, this version has {STRIPES}"),
        ));
    }
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let pool_ref = &*pool;

    // Phase 1.
    let mut lists: Vec<StripeLists> = (0..STRIPES)
        .map(|s| StripeLists::load(pool_ref, sb, s))
        .collect::<Result<_>>()?;
    // A chunk on two lists (damage: a rewritten `PNext`) would be recycled
    // by the list where it holds nothing while the other still uses it.
    let mut listed = HashSet::new();
    for c in lists
        .iter()
        .flat_map(|l| l.leaves.iter().chain(&l.values))
        .flat_map(ChunkList::chunk_offsets)
    {
        if !listed.insert(c) {
            return Err(Error::corrupt(c, "hart: chunk is on two chunk lists"));
        }
    }

    // Phase 2.
    let chunks: Vec<(usize, usize, u64)> = lists
        .iter()
        .enumerate()
        .flat_map(|(s, l)| {
            l.leaves
                .iter()
                .enumerate()
                .flat_map(move |(lc, list)| list.chunk_offsets().map(move |c| (s, lc, c)))
        })
        .collect();
    let found = parallel(
        threads,
        chunks.len(),
        |i, found: &mut Found| {
            if found.stripes.is_empty() {
                found.stripes.resize_with(STRIPES, StripeFound::default);
            }
            let (s, lc, c) = chunks[i];
            let mut used = 0u64;
            for (j, leaf) in lists[s].leaves[lc].chunk_objects(c).enumerate() {
                if scan_leaf(pool_ref, format, k_h, &lists[s], (leaf, lc, s), found)? {
                    used |= 1 << j;
                }
            }
            found.stripes[s].leaf_chunks.push((lc, c, used));
            Ok(())
        },
        // The worker's repaired commit words, durable before the large
        // blocks are freed (phase 3) and before recovery returns.
        |found: &Found| {
            if found.repaired {
                pool_ref.fence();
            }
        },
    )?;

    // Phase 3.
    let mut per_stripe: Vec<Vec<StripeFound>> = (0..STRIPES).map(|_| Vec::new()).collect();
    let mut leftovers = Vec::new();
    let mut large = Vec::new();
    for f in found {
        leftovers.extend(f.leftovers);
        large.extend(f.large);
        for (s, sf) in f.stripes.into_iter().enumerate() {
            per_stripe[s].push(sf);
        }
    }
    // A large value's block, live or left over, is a block of its own:
    // not the superblock, not inside a chunk, named by one slot. Else a
    // damaged slot would have recovery free (as a leftover) or an update
    // later free (as the old value) a block that something else uses.
    let mut named = HashSet::new();
    for p in large.iter().chain(leftovers.iter().map(|(_, p)| p)) {
        let in_chunk = || {
            lists
                .iter()
                .flat_map(|l| l.leaves.iter().chain(&l.values))
                .any(|list| list.covers(*p))
        };
        if *p == sb || !named.insert(*p) || in_chunk() {
            return Err(Error::corrupt(
                *p,
                "hart: a large value's block is also the superblock, a chunk, or another slot's",
            ));
        }
    }
    for (slot, _) in leftovers {
        cases::record(Case::HartLeftoverBlock);
        pool.free(slot)?;
    }

    // Phase 4.
    let work: Vec<Mutex<(&mut StripeLists, Vec<StripeFound>)>> =
        lists.iter_mut().zip(per_stripe).map(Mutex::new).collect();
    let keys = super::PmKeys {
        pool: pool_ref,
        k_h,
    };
    let rebuilt = parallel(
        threads,
        STRIPES,
        |s, out: &mut Vec<(usize, Rebuilt)>| {
            let mut w = work[s].lock();
            let (lists, found) = &mut *w;
            let mut trees = RebuiltTrees::default();
            let mut len = 0;
            let mut values = Vec::new();
            let mut killed = Vec::new();
            for f in found.iter_mut() {
                for &(lc, c, used) in &f.leaf_chunks {
                    lists.leaves[lc].set_taken(c, used)?;
                }
                values.append(&mut f.values);
                len += f.held;
                for l in &f.live {
                    let key = &f.keys[l.key_at..l.key_at + l.key_len];
                    let (hk, ak) = key.split_at(k_h.min(key.len()));
                    let (art, entries) = trees.entry(HashKey::new(hk)).or_default();
                    let indexed = point_index && !entries.is_empty();
                    // Two live leaves of one key: an early leaf of an
                    // upsert in flight (module doc). The ART keeps the one
                    // at the lower offset, whichever it met first, and the
                    // other is killed.
                    let (kept, loser) = match art.insert(ak, l.leaf, &keys) {
                        None => (l.leaf, None),
                        Some(other) if other.off() < l.leaf.off() => {
                            art.insert(ak, other, &keys);
                            (other, Some(l.leaf))
                        }
                        Some(other) => (l.leaf, Some(other)),
                    };
                    // The point index's entries, once the ART is large
                    // enough to get one (its first leaves' keys read
                    // again then): a small ART allocates nothing here. A
                    // leaf kept over one met later is in them already.
                    if indexed && kept == l.leaf {
                        entries.push((points::hash(ak), l.leaf));
                    }
                    if point_index && entries.is_empty() && art.len() > point_above {
                        art.range_values(Bound::Unbounded, Bound::Unbounded, &keys, |v| {
                            entries.push((points::hash(keys.key(v)), v));
                            true
                        });
                    }
                    if let Some(loser) = loser {
                        // Its value is read before its commit word is
                        // cleared.
                        cases::record(Case::HartDuplicateLeaf);
                        let off = loser.off();
                        let c = leaf::commit(pool_ref, off)?
                            .ok_or_else(|| leaf::corrupt(off, "live leaf has no commit word"))?;
                        let v = read_slot(pool_ref, off, c.active)?;
                        pool_ref.store_u64(off, 0)?;
                        if !pool_ref.fault(Fault::HartRecoveryDuplicateUnflushed) {
                            pool_ref.flush(off, 8);
                        }
                        killed.push((loser, leaf::class_for_key(l.key_len), v));
                    }
                }
            }
            // Value objects, a chunk at a time (an object used twice is
            // `Corrupt`).
            values.sort_unstable();
            let mut k = 0;
            while k < values.len() {
                let (vc, c, _) = values[k];
                let mut mask = 0u64;
                while k < values.len() && values[k].0 == vc && values[k].1 == c {
                    let bit = 1u64 << values[k].2;
                    if mask & bit != 0 {
                        return Err(Error::corrupt(
                            c,
                            "hart: a value object is referenced by two leaves",
                        ));
                    }
                    mask |= bit;
                    k += 1;
                }
                lists.values[vc].set_taken(c, mask)?;
            }
            for l in lists.leaves.iter_mut().chain(lists.values.iter_mut()) {
                for _ in 0..l.settle(pool_ref)? {
                    cases::record(Case::HartChunkRecycledAtOpen);
                }
            }
            out.push((s, Rebuilt { trees, len, killed }));
            Ok(())
        },
        // The worker's killed leaves, durable before they are given back.
        |out: &Vec<(usize, Rebuilt)>| {
            if out.iter().any(|(_, r)| !r.killed.is_empty()) {
                pool_ref.fence();
            }
        },
    )?;
    drop(work);

    let mut lens = [0u64; STRIPES];
    let mut all_trees = Vec::new();
    let mut killed = Vec::new();
    for (s, r) in rebuilt.into_iter().flatten() {
        lens[s] = r.len;
        all_trees.push(r.trees);
        killed.extend(r.killed);
    }
    // The ARTs no longer hold the killed leaves; their point indexes must
    // not either.
    let killed_refs: Vec<LeafRef> = killed.iter().map(|(l, _, _)| *l).collect();
    // The killed leaves were counted, and marked used with their values, by
    // their own stripes' workers: undone here, after every worker's fence.
    for (l, lc, v) in killed {
        let s = l.stripe();
        lens[s] -= 1;
        if v.meta.large {
            pool.free(v.at)?;
        } else if v.meta.value_len > 0 && !v.meta.inline() {
            let vc = object_of(&lists[s], format, v.meta.value_len, v.p)
                .map_or(value_class(v.meta.value_len), |(vc, _, _)| vc);
            lists[s].values[vc].release(pool_ref, v.p)?;
        }
        lists[s].leaves[lc].release(pool_ref, l.off())?;
    }
    let stripes = lists
        .into_iter()
        .zip(lens)
        .map(|(l, len)| l.into_stripe(len))
        .collect();
    let mut h = Hart::with_stripes(pool, sb, k_h, stripes);
    h.checksum = format.checksum;
    h.any_stripe = format.any_stripe;
    h.any_class = format.any_class;
    h.set_stripes(None)?;
    h.point_index = point_index;
    h.point_above = point_above;
    let killed_leaves: HashSet<LeafRef> = killed_refs.into_iter().collect();
    for trees in all_trees {
        for (hk, (art, mut entries)) in trees {
            if !killed_leaves.is_empty() {
                entries.retain(|(_, l)| !killed_leaves.contains(l));
            }
            let points = if entries.len() > point_above {
                Points::with_entries(&entries, h.trees.tables())
            } else {
                Points::default()
            };
            h.trees.install(hk, art, points);
        }
    }
    Ok(h)
}
