//! `hart`: the hash-assisted adaptive radix tree of Pan, Xie and Song
//! (`papers/hart-hash-assisted-art.txt`).
//!
//! # Structure (§III-A)
//! - The first `k_h` bytes of a key (default 2) are the *hash key*; a hash
//!   table in DRAM maps each hash key to one ART. The rest of the key is the
//!   ART key. A key shorter than `k_h` is its own hash key with an empty ART
//!   key. The hash keys are also kept in an ordered set, so scans visit the
//!   ARTs in key order (beyond the paper, whose range query searches key by
//!   key).
//! - ART internal nodes are in DRAM ([`art`]); leaves are in PM and hold the
//!   complete key ([`leaf`]); values are in PM value objects ([`chunk`]) or,
//!   above 4 KiB, in allocator blocks.
//! - Beyond the paper, an ART of more than 64 keys also has a point index
//!   in DRAM ([`points`]): a hash table from its ART keys to their leaves,
//!   changed with the ART under its write lock, which searches and updates
//!   probe instead of descending the ART ([`indexed`];
//!   `hart.point_index`). The ART stays the ordered index.
//! - EPallocator: leaves and value objects come from chunks of 56 objects in
//!   one persistent list per size ([`chunk`]), kept in 16 allocation stripes
//!   ([`superblock`]): a new leaf comes from the inserting thread's stripe,
//!   and its ART entry names that stripe ([`LeafRef`]); the DRAM free state
//!   is rebuilt at recovery.
//! - Concurrency (§III-A.3): a reader-writer lock per ART; the hash table is
//!   sharded, each shard behind its own reader-writer lock. Readers and
//!   writers of different ARTs do not contend except briefly on a shard, on
//!   the ordered set of hash keys when an ART is created or retired, or on a
//!   stripe's object-size list when one frees into a stripe that another
//!   inserts into (up to 16 inserting threads have a stripe each; a
//!   deleting thread hands its leaves to each list in groups, [`frees`]).
//!
//! # Persist order (`tight`; see [`leaf`] for the commit word)
//! The PM writes of each operation are in [`mod@write`]; the ART side (locks,
//! descent, linking) is here, in the `Engine` methods.
//! - **insert** (Algorithm 1): take a free leaf and value object (DRAM);
//!   write the value, flush it; write slot 0 (`p_value`, `meta` with the
//!   CRC of key ‖ value), zero slot 1, write the key, store the commit word
//!   last; flush the leaf; **one fence**. The commit word is the commit
//!   point. Then insert into the ART. The paper's six `persistent()` calls
//!   become one fence: the chunk bitmaps are hints rebuilt at recovery, and
//!   the CRC replaces the fences between value, key and bitmap.
//! - **upsert, leaf first** (beyond the paper; when the stripe's last
//!   upsert inserted and the value takes no large block): the leaf is
//!   written and flushed as for an insert under the ART's lock, *before*
//!   the descent, so its write-back overlaps the descent. Key absent: **one
//!   fence**, then link. Key present: store 0 into the early leaf's commit
//!   word, flush; update the indexed leaf as below; **one fence**; give the
//!   early leaf back. A crash in between can leave two live leaves of the
//!   key, both states the upsert in flight may leave; recovery keeps one
//!   ([`recovery`]).
//! - **update** (Algorithm 3): write the new value into a new object, write
//!   it into the *inactive* slot, flush; store the commit word with the
//!   active slot flipped; flush; **one fence**. The old object is freed in
//!   DRAM afterwards. The two slots replace the paper's three-pointer update
//!   log: a crash before the fence leaves either the old commit word (old
//!   value) or the new one; if the new slot was torn, recovery falls back to
//!   the old slot, which is intact because nothing reuses the old object
//!   before the fence.
//! - **delete** (Algorithm 5): store 0 into the commit word, flush, **one
//!   fence**; then remove from the ART and free the objects in DRAM (the
//!   leaf later, in a group of the thread's frees: [`frees`]).
//! - A value above 4 KiB is an allocator block activated into its slot
//!   (three more fences), after the slot's `meta` (with `LARGE`) is flushed;
//!   it is freed through the slot when it is replaced or deleted. Recovery
//!   frees any large block that a slot still points to but that is not a
//!   live value (a crash between the two steps).
//! - EPRecycle (Algorithm 6): see [`chunk`].
//!
//! # Recovery (Algorithm 7)
//! Walk every chunk list; a leaf is live if its commit word is valid and its
//! active slot's CRC matches key ‖ value (else the other slot's, and the
//! commit word is repaired). Live leaves go back into the ARTs, their value
//! objects are marked used, leftover large blocks are freed, and empty chunks
//! are recycled. It runs on every core: see [`recovery`].

pub mod art;
mod batch;
mod chunk;
mod compact;
mod frees;
mod indexed;
mod leaf;
mod points;
mod recovery;
mod scan;
mod superblock;
mod trees;
mod write;

pub use compact::compactions;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use self::art::LeafKeys;
use self::chunk::ChunkList;
use self::leaf::{Checksum, Commit, Meta, LINE_KEY_MAX};
use self::recovery::{slot_is_valid, StripeLists};
use self::superblock::STRIPES;
use self::trees::{HashKey, Trees};
use super::{
    Capabilities, CheckReport, Engine, EngineConfig, EngineInfo, PutMode, PutOutcome, ScanFn,
    BATCH, MAX_KEY_LEN, MAX_VALUE_LEN,
};
use crate::error::{Error, Result};
use crate::keycmp;
use crate::pm::{lines_spanned, Fault, Pool, WordBlock, CACHE_LINE};

/// The engine's entry in [`super::ENGINES`].
pub const INFO: EngineInfo = EngineInfo {
    name: "hart",
    paper: "Pan, Xie, Song: HART, a hash-assisted adaptive radix tree for PM",
    create,
    open,
};

/// Default hash key length (the paper's setting, §IV-A).
pub const DEFAULT_HASH_KEY_LEN: usize = 2;
const SHARDS: usize = 64;
const _: () = assert!(
    SHARDS.is_multiple_of(STRIPES),
    "a shard's hash keys share a stripe"
);

fn create(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    Ok(Box::new(create_hart(pool, config)?))
}

fn open(pool: Arc<Pool>, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    Ok(Box::new(open_hart(pool, config)?))
}

fn create_hart(pool: Arc<Pool>, config: &EngineConfig) -> Result<Hart> {
    let Settings {
        k_h,
        order,
        stripes,
        leaf_first,
        point_index,
        point_above,
        optimistic,
        format,
        compact,
        ..
    } = parse_config(config)?;
    let mut h = Hart::create_format(
        pool,
        k_h.unwrap_or(DEFAULT_HASH_KEY_LEN),
        format.unwrap_or(superblock::FORMAT),
    )?;
    h.set_order(order);
    h.leaf_first = leaf_first;
    h.point_index = point_index;
    h.point_above = point_above;
    h.set_reads(optimistic)?;
    h.set_stripes(stripes)?;
    h.compact = compact;
    Ok(h)
}

fn open_hart(pool: Arc<Pool>, config: &EngineConfig) -> Result<Hart> {
    let Settings {
        k_h,
        order,
        recovery_threads,
        stripes,
        leaf_first,
        point_index,
        point_above,
        optimistic,
        format,
        compact,
    } = parse_config(config)?;
    let points = point_index.then_some(point_above);
    let mut h = recovery::open(pool, recovery_threads, (k_h, format), points)?;
    h.leaf_first = leaf_first;
    h.set_reads(optimistic)?;
    if let Some(k) = k_h.filter(|&k| k != h.k_h) {
        return Err(Error::InvalidArgument(format!(
            "hart.hash_key_len={k}, but this pool was created with {}; it is fixed at creation",
            h.k_h
        )));
    }
    if let Some(f) = format.filter(|&f| f != h.format()) {
        return Err(Error::InvalidArgument(format!(
            "hart.format={f}, but this pool has format {}; it is fixed at creation",
            h.format()
        )));
    }
    h.set_order(order);
    h.set_stripes(stripes)?;
    h.compact = compact;
    Ok(h)
}

/// Where new leaves come from (`hart.stripes`; see [`superblock`],
/// "Stripes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeChoice {
    /// The inserting thread's stripe (format 5 and later).
    Thread,
    /// The stripe the hash key's hash selects (as formats 3 and 4 must).
    HashKey,
    /// The next stripe in turn, whatever thread inserts (format 5 and later):
    /// one thread spreads the leaves of each hash key over every stripe, as
    /// many threads inserting into it would. For the crash simulator, which
    /// runs one thread.
    RoundRobin,
}

impl StripeChoice {
    const ALL: [StripeChoice; 3] = [
        StripeChoice::Thread,
        StripeChoice::HashKey,
        StripeChoice::RoundRobin,
    ];

    /// The setting's value for this choice.
    fn name(self) -> &'static str {
        match self {
            StripeChoice::Thread => "thread",
            StripeChoice::HashKey => "hash_key",
            StripeChoice::RoundRobin => "round_robin",
        }
    }
}

/// The order in which HART makes its PM writes durable
/// (`hart.persist_order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistOrder {
    /// One fence per insert, update and delete (see the module doc).
    Tight,
    /// The paper's `persistent()` calls in the paper's order (Algorithms 1,
    /// 3 and 5), on the same layout: value; value pointer; value bit; key;
    /// key length (the commit word); leaf bit. Updates also write the
    /// three-pointer update log. Recovery is the same as for `Tight` (every
    /// state this order can leave is one the tight order can leave too, plus
    /// persisted bitmap hints and log lines that recovery does not need), so
    /// this mode exists to measure what the tighter order buys.
    Paper,
}

/// The engine's settings (`hart.*` in [`EngineConfig`]).
struct Settings {
    /// `hart.hash_key_len` (creation only).
    k_h: Option<usize>,
    /// `hart.persist_order`.
    order: PersistOrder,
    /// `hart.recovery_threads`: threads that rebuild the index at open
    /// (default: every core).
    recovery_threads: Option<usize>,
    /// `hart.stripes` (default: by thread where the format allows it).
    stripes: Option<StripeChoice>,
    /// `hart.leaf_first` (default on): whether an upsert may write its leaf
    /// before its descent ([`Hart::leaf_first`]; `tight` order only).
    leaf_first: bool,
    /// `hart.point_index` (default on): whether each ART has a point index
    /// ([`points`]).
    point_index: bool,
    /// `hart.point_index_above` (default [`points::BUILD_ABOVE`]): the
    /// number of keys above which an ART gets its point index.
    point_above: usize,
    /// `hart.reads` (default locked): whether searches probe the point
    /// index without the ART's lock first ([`indexed`]).
    optimistic: bool,
    /// `hart.format` (creation only; default [`superblock::FORMAT`]): 5 for
    /// a pool that the versions before format 6 read.
    format: Option<u8>,
    /// `hart.compact` (default on): whether a put that finds the pool full
    /// moves values out of sparse chunks and tries again ([`compact`]).
    compact: bool,
}

/// The value of an on/off setting `name`.
fn on_off(name: &str, v: &str) -> Result<bool> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(Error::InvalidArgument(format!(
            "{name} `{v}`: expected on or off"
        ))),
    }
}

fn parse_config(config: &EngineConfig) -> Result<Settings> {
    let mut k_h = None;
    let mut order = PersistOrder::Tight;
    let mut recovery_threads = None;
    let mut stripes = None;
    let mut leaf_first = true;
    let mut point_index = true;
    let mut point_above = points::BUILD_ABOVE;
    let mut optimistic = false;
    let mut format = None;
    let mut compact = true;
    for (k, v) in super::settings(
        config,
        INFO.name,
        &[
            "persist_order",
            "hash_key_len",
            "recovery_threads",
            "stripes",
            "leaf_first",
            "point_index",
            "point_index_above",
            "reads",
            "format",
            "compact",
        ],
    )? {
        match k {
            "compact" => compact = on_off("hart.compact", v)?,
            "format" => {
                // 3 and 4 name older pools at open; only 5 and 6 can be
                // made (`Hart::create_format`).
                format = Some(
                    v.parse::<u8>()
                        .ok()
                        .filter(|f| (3..=6).contains(f))
                        .ok_or_else(|| {
                            Error::InvalidArgument(format!(
                                "hart.format `{v}`: expected 6 (the default: a value may take a \
                             larger class's object in a full pool) or 5 (each value in its \
                             own class; read by the versions before format 6)"
                            ))
                        })?,
                )
            }
            "reads" => {
                optimistic = super::Reads::parse("hart.reads", v)? == super::Reads::Optimistic;
            }
            "point_index" => point_index = on_off("hart.point_index", v)?,
            "point_index_above" => {
                point_above = v.parse::<usize>().map_err(|_| {
                    Error::InvalidArgument(format!(
                        "hart.point_index_above `{v}`: expected a number of keys (0 or more)"
                    ))
                })?
            }
            "leaf_first" => leaf_first = on_off("hart.leaf_first", v)?,
            "stripes" => {
                stripes = Some(
                    StripeChoice::ALL
                        .into_iter()
                        .find(|c| c.name() == v)
                        .ok_or_else(|| {
                            Error::InvalidArgument(format!(
                                "hart.stripes `{v}`: expected thread, hash_key or round_robin"
                            ))
                        })?,
                )
            }
            "persist_order" => {
                order = match v {
                    "tight" => PersistOrder::Tight,
                    "paper" => PersistOrder::Paper,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "hart.persist_order `{v}`: expected paper or tight"
                        )))
                    }
                }
            }
            "recovery_threads" => {
                recovery_threads =
                    Some(v.parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "hart.recovery_threads `{v}`: expected a number of threads, at least 1"
                        ))
                    })?)
            }
            _ => {
                k_h = Some(v.parse::<usize>().map_err(|_| {
                    Error::InvalidArgument(format!("hart.hash_key_len `{v}`: expected 1..=8"))
                })?)
            }
        }
    }
    Ok(Settings {
        k_h,
        order,
        recovery_threads,
        stripes,
        leaf_first,
        point_index,
        point_above,
        optimistic,
        format,
        compact,
    })
}

/// What an ART holds for a key: its leaf's PM offset and the allocation
/// stripe whose leaf list holds the leaf (DRAM only, rebuilt at recovery
/// from the list the leaf is found on). Leaves start on a cache line, so the
/// stripe fits in the offset's low bits; a value object of the leaf comes
/// from the same stripe ([`superblock`], "Stripes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LeafRef(u64);

const STRIPE_BITS: u64 = 63;
const _: () = assert!(STRIPES as u64 <= STRIPE_BITS + 1);
const _: () = assert!(chunk::CHUNK_HEADER.is_multiple_of(STRIPE_BITS + 1));
const _: () = {
    let mut i = 0;
    while i < leaf::LEAF_SIZES.len() {
        assert!(leaf::LEAF_SIZES[i].is_multiple_of(STRIPE_BITS + 1));
        i += 1;
    }
};

impl LeafRef {
    /// The leaf at `off` (a cache-line offset) of stripe `stripe`.
    fn new(off: u64, stripe: usize) -> LeafRef {
        debug_assert!(off & STRIPE_BITS == 0 && stripe < STRIPES);
        LeafRef(off | stripe as u64)
    }

    /// The leaf's PM offset.
    #[inline(always)]
    fn off(self) -> u64 {
        self.0 & !STRIPE_BITS
    }

    /// The stripe that holds the leaf and its value object.
    #[inline(always)]
    fn stripe(self) -> usize {
        (self.0 & STRIPE_BITS) as usize
    }
}

// Every leaf offset (and its stripe bits) leaves room for a key tag in
// the ART's leaf word (`art/tag.rs`).
const _: () = assert!(crate::pm::MAX_POOL_SIZE <= art::TAGGED_LIMIT);

impl art::LeafValue for LeafRef {
    const TAGGED: bool = true;

    #[inline(always)]
    fn to_bits(self) -> u64 {
        self.0
    }
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        LeafRef(bits)
    }
}

/// The allocation stripe of this thread's inserts, in formats that allow
/// any (see [`Hart::insert_stripe`]): threads take stripes in turn at their
/// first insert, so up to [`STRIPES`] threads never share one.
fn thread_stripe() -> usize {
    crate::engine::thread_number() % STRIPES
}

/// Reads leaf keys from PM for the ART (the ART key: the key without its
/// first `k_h` bytes).
struct PmKeys<'a> {
    pool: &'a Pool,
    k_h: usize,
}

impl LeafKeys<LeafRef> for PmKeys<'_> {
    fn key(&self, leaf: LeafRef) -> &[u8] {
        let full = self.full_key(leaf.off());
        &full[self.k_h.min(full.len())..]
    }
}

impl PmKeys<'_> {
    fn full_key(&self, leaf: u64) -> &[u8] {
        let w = self.pool.load_u64(leaf).unwrap_or(0);
        let Some(c) = Commit::decode(w) else {
            return &[];
        };
        self.pool.touch(leaf, leaf::HEADER + c.key_len as u64);
        // SAFETY: the ART only holds live leaves, whose keys are never
        // written while they are reachable (writers of a leaf hold its ART's
        // write lock; the caller holds at least the read lock).
        unsafe { leaf::key(self.pool, leaf, c) }.unwrap_or(&[])
    }
}

/// The HART engine.
pub struct Hart {
    pool: Arc<Pool>,
    sb: u64,
    k_h: usize,
    trees: Trees,
    stripes: Vec<Stripe>,
    order: PersistOrder,
    /// `hart.leaf_first`: whether upserts may write their leaf before the
    /// descent ([`Self::leaf_first`]).
    leaf_first: bool,
    /// `hart.point_index`: whether every ART keeps a point index
    /// ([`points`]) that searches, updates and inserts use instead of a
    /// descent ([`indexed`]). Fixed once the index is built (at create or
    /// recovery).
    point_index: bool,
    /// `hart.point_index_above`: an ART gets its point index once it holds
    /// more keys than this, and loses it below [`points::drop_below`] of it.
    point_above: usize,
    /// `hart.reads`: whether searches go without the ART's lock first,
    /// where they can ([`indexed`], "Searches without the lock").
    optimistic: bool,
    /// The slots' checksum (by the superblock's format).
    checksum: Checksum,
    /// Whether a leaf may be in any stripe (format 5 and later) rather than
    /// only its hash key's (formats 3 and 4).
    any_stripe: bool,
    /// Whether a value object may come from a larger class than its
    /// value's (format 6; [`superblock`], "Value objects of a larger
    /// class").
    any_class: bool,
    /// Where new leaves come from: `hart.stripes`.
    stripe_choice: StripeChoice,
    /// The last stripe taken, for [`StripeChoice::RoundRobin`].
    turn: AtomicUsize,
    /// Frees gathered per thread and handed to the chunk lists in groups
    /// (`tight` order; [`frees`]).
    frees: frees::Frees,
    /// `hart.compact`: whether a put that finds the pool full compacts
    /// ([`compact`]).
    compact: bool,
    /// Value compactions in a full pool ([`compact`]).
    compactions: compact::Compactions,
}

/// One allocation stripe (see [`superblock`]): its chunk lists (of the
/// leaves its threads inserted in formats 5 and 6, of the hash keys routed to it
/// in formats 3 and 4, or with `hart.stripes=hash_key`), and how many
/// leaves they hold. Aligned so that two stripes' counters never share a
/// cache line.
#[repr(align(128))]
struct Stripe {
    /// One list per [`leaf::LEAF_SIZES`] entry.
    leaves: Vec<Mutex<ChunkList>>,
    /// One list per [`superblock::VALUE_SIZES`] entry.
    values: Vec<Mutex<ChunkList>>,
    len: AtomicU64,
    /// For each leaf list, the leaf its next allocation takes (0: unknown),
    /// read without the list's lock by an insert that prefetches the leaf's
    /// line while it searches the ART ([`Pool::prefetch_write`]). A stale
    /// hint costs one useless prefetch.
    next_leaf: [AtomicU64; leaf::LEAF_SIZES.len()],
    /// Whether the last upsert from this stripe inserted a key (initially
    /// true): the hint by which the next one writes its leaf first
    /// ([`Hart::leaf_first`]). A wrong hint costs time, never correctness.
    upserts_insert: AtomicBool,
}

/// Where a value lives, read from a slot.
#[derive(Debug, Clone, Copy)]
struct ValueRef {
    /// `p_value`: the value object's or block's offset, or the value itself
    /// (see [`Meta::inline`]).
    p: u64,
    meta: Meta,
    written: bool,
    /// Offset of the slot (an inline value's bytes are its first word).
    at: u64,
}

/// How [`Hart::delete_leaf`] failed.
enum DeleteError {
    /// Before the commit word was cleared: the leaf still holds its key.
    Unchanged(Error),
    /// After: the key is deleted in PM; freeing its value or leaf failed.
    Deleted(Error),
}

/// A value an update replaced, and the slot that points to it: freed once
/// the update is durable.
#[derive(Debug, Clone, Copy)]
struct OldValue {
    value: ValueRef,
    slot: u64,
}

/// Reads slot `s` of `leaf`; a never-written slot reads as an empty value
/// with `written == false`.
fn read_slot(pool: &Pool, leaf: u64, s: u64) -> Result<ValueRef> {
    let so = leaf::slot_off(leaf, s);
    let meta = Meta::decode(pool.load_u64(so + 8)?);
    Ok(ValueRef {
        p: pool.load_u64(so)?,
        at: so,
        written: meta.is_some(),
        meta: meta.unwrap_or(Meta {
            crc: 0,
            value_len: 0,
            large: false,
        }),
    })
}

impl Hart {
    fn empty(pool: Arc<Pool>, sb: u64, k_h: usize) -> Hart {
        let stripes = (0..STRIPES)
            .map(|s| StripeLists::new(sb, s).into_stripe(0))
            .collect();
        Self::with_stripes(pool, sb, k_h, stripes)
    }

    fn with_stripes(pool: Arc<Pool>, sb: u64, k_h: usize, stripes: Vec<Stripe>) -> Hart {
        Hart {
            pool,
            sb,
            k_h,
            trees: Trees::new(k_h),
            stripes,
            order: PersistOrder::Tight,
            leaf_first: true,
            point_index: true,
            point_above: points::BUILD_ABOVE,
            optimistic: false,
            checksum: Checksum::Crc32c,
            any_stripe: true,
            any_class: true,
            stripe_choice: StripeChoice::Thread,
            turn: AtomicUsize::new(0),
            frees: frees::Frees::default(),
            compact: true,
            compactions: compact::Compactions::default(),
        }
    }

    /// Applies `hart.stripes` (`None`: by thread where the format allows).
    /// By thread, up to 16 inserting threads never share a stripe; by hash
    /// key, the frees of later deleters spread over the stripes whatever
    /// thread inserted (docs/design.md §7, "Stripes by thread").
    fn set_stripes(&mut self, choice: Option<StripeChoice>) -> Result<()> {
        self.stripe_choice = match choice {
            None if self.any_stripe => StripeChoice::Thread,
            None | Some(StripeChoice::HashKey) => StripeChoice::HashKey,
            Some(c) if self.any_stripe => c,
            Some(c) => {
                return Err(Error::InvalidArgument(format!(
                    "hart.stripes={}: this pool's format (3 or 4) keeps every leaf in its \
                     hash key's stripe; use hash_key, or a new pool",
                    c.name()
                )))
            }
        };
        Ok(())
    }

    /// The stripe a new leaf of a hash key routed by `r` (and its value
    /// object) comes from: the thread's in formats 5 and 6, the hash key's before.
    #[inline]
    fn insert_stripe(&self, r: trees::Route) -> usize {
        match self.stripe_choice {
            StripeChoice::Thread => thread_stripe(),
            StripeChoice::HashKey => r.stripe,
            StripeChoice::RoundRobin => self.turn.fetch_add(1, Ordering::Relaxed) % STRIPES,
        }
    }

    /// Sets the persist order. The `paper` order keeps every chunk header
    /// (the paper's leaf and value bits) current and persists it; the
    /// `tight` order leaves headers alone at run time, because recovery
    /// decides which objects are used from the leaves' commit words.
    fn set_order(&mut self, order: PersistOrder) {
        self.order = order;
        for st in &mut self.stripes {
            for l in st.leaves.iter_mut().chain(st.values.iter_mut()) {
                l.get_mut().set_keep_header(order == PersistOrder::Paper);
            }
        }
    }

    /// Applies `hart.reads`: searches without the ARTs' locks first
    /// (`optimistic`), which needs the point index and the direct index of
    /// ARTs (`hash_key_len` 1 or 2); refused elsewhere (before 2026-12-02
    /// it fell back to `locked` without a word).
    fn set_reads(&mut self, optimistic: bool) -> Result<()> {
        self.optimistic = self.trees.read_unlocked(optimistic && self.point_index);
        if optimistic && !self.optimistic {
            return Err(Error::InvalidArgument(format!(
                "hart.reads=optimistic needs hart.point_index=on and hart.hash_key_len 1 or 2 \
                 (here: point_index={}, hash_key_len={})",
                if self.point_index { "on" } else { "off" },
                self.k_h
            )));
        }
        Ok(())
    }

    fn leaves(&self, stripe: usize, lc: usize) -> &Mutex<ChunkList> {
        &self.stripes[stripe].leaves[lc]
    }

    fn values(&self, stripe: usize, vc: usize) -> &Mutex<ChunkList> {
        &self.stripes[stripe].values[vc]
    }

    /// Creates an empty HART in a new pool, with hash keys of `k_h` bytes,
    /// of the newest format.
    pub fn create(pool: Arc<Pool>, k_h: usize) -> Result<Hart> {
        Self::create_format(pool, k_h, superblock::FORMAT)
    }

    /// Creates an empty HART of format `format` (5 or 6) in a new pool,
    /// with hash keys of `k_h` bytes.
    pub fn create_format(pool: Arc<Pool>, k_h: usize, format: u8) -> Result<Hart> {
        if !(1..=8).contains(&k_h) {
            return Err(Error::InvalidArgument(format!(
                "hart: hash key length {k_h} is not in 1..=8"
            )));
        }
        let magic = match format {
            6 => superblock::MAGIC,
            5 => superblock::MAGIC_5,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "hart.format={format}: only formats 5 and 6 can be created (3 and 4 \
                     are read and written where older pools have them)"
                )))
            }
        };
        let sb = Self::make_superblock(&pool, k_h, magic)?;
        let mut h = Self::empty(pool, sb, k_h);
        h.any_class = superblock::format_of(magic).is_some_and(|f| f.any_class);
        Ok(h)
    }

    /// The format this HART's pool has (3 to 6, [`superblock`]).
    pub fn format(&self) -> u8 {
        match (self.any_class, self.any_stripe, self.checksum) {
            (true, _, _) => 6,
            (false, true, _) => 5,
            (false, false, Checksum::Crc32c) => 4,
            (false, false, Checksum::Crc32) => 3,
        }
    }

    /// Persist order: zero the block, write `magic` and `k_h`, flush;
    /// activate it into root slot 0.
    fn make_superblock(pool: &Pool, k_h: usize, magic: u64) -> Result<u64> {
        let r = pool.reserve(superblock::SIZE)?;
        let sb = r.offset();
        // SAFETY: the block is reserved by us and not yet published.
        unsafe { pool.zero_bytes(sb, superblock::SIZE)? };
        pool.store_u64(sb, magic)?;
        pool.store_u64(sb + superblock::K_H, k_h as u64)?;
        pool.store_u64(sb + superblock::ORDER, 0)?;
        pool.store_u64(sb + superblock::STRIPE_COUNT, STRIPES as u64)?;
        pool.flush(sb, superblock::SIZE);
        pool.activate(r, pool.root_slot(0)?)?;
        Ok(sb)
    }

    fn split<'k>(&self, key: &'k [u8]) -> (&'k [u8], &'k [u8]) {
        key.split_at(self.k_h.min(key.len()))
    }

    fn keys(&self) -> PmKeys<'_> {
        PmKeys {
            pool: &self.pool,
            k_h: self.k_h,
        }
    }

    /// Reads slot `s`; a never-written slot reads as an empty value with
    /// `written == false`.
    fn slot(&self, leaf: u64, s: u64) -> Result<ValueRef> {
        read_slot(&self.pool, leaf, s)
    }

    /// Algorithm 4 from the leaf a probe of `key` ended at, under the
    /// read lock of the ART that holds it: the leaf check in one pass over
    /// the leaf's first line (the commit word, the key, compared here and
    /// not inside the ART so that the word is decoded once, the active
    /// slot), then `f` on the value. Returns whether the leaf is `key`'s.
    /// The path from the probe to `f` is short on purpose: a search is a
    /// chain of cache misses, and the fewer instructions between one
    /// search's last miss and the next search's first, the more searches
    /// the CPU overlaps (docs/design.md §7, "Instructions between two
    /// searches").
    ///
    /// A key of at most [`LINE_KEY_MAX`] bytes takes
    /// [`Self::answer_in_line`]. For a longer one, `PREFETCHED`: the caller
    /// prefetched the leaf's line (a batch), so the key is compared by
    /// [`keycmp::eq`], whose loads stay in that line; a lone search
    /// compares with `memcmp`, whose 32-byte load also takes the next line,
    /// at the same time as the first (docs/design.md §7, "Ordered scans").
    #[inline(always)]
    fn answer<const PREFETCHED: bool>(
        &self,
        leaf: u64,
        key: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool> {
        // Keys of up to `LINE_KEY_MAX` bytes (every key of the paper's
        // workloads) end in the leaf's first line: one bounds check for the
        // line, then the commit word, the key, the slot and an inline value
        // are read from it with no further test.
        if key.len() <= LINE_KEY_MAX && leaf.is_multiple_of(CACHE_LINE) {
            if let Some(l) = self.pool.words().block::<CACHE_LINE>(leaf) {
                return self.answer_in_line(l, leaf, key, f);
            }
        }
        let c = self.live_commit(leaf)?;
        // SAFETY: the ART only holds live leaves, whose keys are never
        // written while they are reachable (writers hold the ART's write
        // lock; the caller holds its read lock).
        let k = unsafe { leaf::key(&self.pool, leaf, c)? };
        let key_lines = lines_spanned(leaf, leaf::HEADER + c.key_len as u64);
        let same = if PREFETCHED {
            keycmp::eq(k, key)
        } else {
            k == key
        };
        if !same {
            self.pool.touch_lines(key_lines);
            return Ok(false);
        }
        let (value, value_lines) = self.current_value(leaf, c)?;
        self.pool.touch_lines(key_lines + value_lines);
        f(value);
        Ok(true)
    }

    /// [`Self::answer`] for a key of at most [`LINE_KEY_MAX`] bytes, from
    /// the leaf's first line `l` (checked once, by the caller): the key is
    /// compared a word at a time within the two slices
    /// ([`keycmp::eq_same_len`]: no call, no load past the key into the
    /// next line), and an inline or empty value is passed from the line
    /// (docs/design.md §7, "The leaf's line, checked once").
    #[inline(always)]
    fn answer_in_line(
        &self,
        l: WordBlock<'_, CACHE_LINE>,
        leaf: u64,
        key: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool> {
        let w = l.load(0);
        if !Commit::tagged(w) {
            return Err(leaf::corrupt(leaf, "indexed leaf is not committed"));
        }
        // The key length's byte: where it equals `key.len() <=
        // LINE_KEY_MAX`, `Commit::decode`'s 250-byte bound holds; where not,
        // it is tested below, off the path of a found key.
        // SAFETY: as in `answer`: the key of a live leaf is not written
        // while the caller holds its ART's read lock; it lies in the line
        // (checked again by `bytes`).
        let same = (w >> 8) & 0xFF == key.len() as u64
            && keycmp::eq_same_len(unsafe { l.bytes(leaf::HEADER, key.len() as u64) }, key);
        // The commit word and the key: the leaf's first line, where both
        // end (the leaf is line-aligned, its key at most `LINE_KEY_MAX`).
        self.pool.touch_lines(1);
        if !same {
            return match Commit::decode(w) {
                Some(_) => Ok(false),
                None => Err(leaf::corrupt(leaf, "indexed leaf is not committed")),
            };
        }
        let active = w & 1;
        let so = 8 + 16 * active;
        let meta = l.load(so + 8);
        if let Some(len) = Meta::in_slot_len(meta) {
            // SAFETY: the slot of a live leaf is not written while it is
            // reachable under the caller's ART lock (updates write the
            // other slot, under the write lock). A value in the slot has at
            // most 8 bytes, in its `p_value` word.
            f(unsafe { l.bytes(so, len) });
            return Ok(true);
        }
        let c = Commit {
            key_len: key.len(),
            active,
        };
        let (value, value_lines) = self.current_value(leaf, c)?;
        self.pool.touch_lines(value_lines);
        f(value);
        Ok(true)
    }

    /// Starts loading the root of the ART of `hk` from its hint (and the
    /// lines the search for `ak` reads first there, or the leaf if the root
    /// is one) before the caller locks the ART, whose slot line is usually
    /// a miss of its own: the two misses overlap (docs/design.md §7, "Root
    /// hints"). Nothing is read through the hint; a stale one costs a
    /// useless prefetch.
    #[inline(always)]
    fn prefetch_root(&self, hk: &[u8], ak: &[u8]) {
        self.prefetch_root_hint(self.trees.root_hint(hk), ak);
    }

    /// [`Self::prefetch_root`] from the root hint `hint` already loaded.
    #[inline(always)]
    fn prefetch_root_hint(&self, hint: u64, ak: &[u8]) {
        if let Some(leaf) = art::Art::<LeafRef>::prefetch_hinted(hint, ak) {
            self.pool.words().prefetch(leaf.off());
        }
    }

    /// The commit word of a leaf the ART holds (an error if it is not
    /// committed: an indexed leaf always is).
    fn live_commit(&self, leaf: u64) -> Result<Commit> {
        Commit::decode(self.pool.words().load(leaf)?)
            .ok_or_else(|| leaf::corrupt(leaf, "indexed leaf is not committed"))
    }

    /// The current value of a live leaf whose commit word is `c`, and the PM
    /// lines it read besides the leaf's first line (0 for an inline or empty
    /// value, which is in that line). Reads the slot word without building
    /// a [`ValueRef`]: this is on every search's path.
    #[inline(always)]
    fn current_value(&self, leaf: u64, c: Commit) -> Result<(&[u8], u64)> {
        let pm = self.pool.words();
        let so = leaf::slot_off(leaf, c.active);
        let meta = pm.load(so + 8)?;
        let len = Meta::value_len_of(meta);
        if len == 0 {
            return Ok((&[], 0));
        }
        if Meta::inline_word(meta) {
            // SAFETY: the slot of a live leaf is not written while the leaf
            // is reachable under the caller's ART lock (updates write the
            // other slot, under the write lock).
            return Ok((unsafe { self.pool.bytes(so, len) }?, 0));
        }
        let p = pm.load(so)?;
        // SAFETY: a live value object or block is never written while it is
        // the current value of a leaf reachable under the caller's ART lock.
        let v = unsafe { self.pool.bytes(p, len) }?;
        Ok((v, lines_spanned(p, len)))
    }

    /// Recovers a HART from its pool (Algorithm 7) on every core.
    pub fn open(pool: Arc<Pool>) -> Result<Hart> {
        recovery::open(pool, None, (None, None), Some(points::BUILD_ABOVE))
    }
}

impl Hart {
    /// [`Engine::put`] without [`Self::with_compaction`]: a put that finds
    /// the pool full changes nothing.
    fn put_once(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        super::check_item(key, value)?;
        let (hk_bytes, ak) = self.split(key);
        let (root, word) = self.trees.hints(hk_bytes);
        self.prefetch_root_hint(root, ak);
        // The hash of the ART key, where the ART had a point index when its
        // hints were read (else computed if one is found or built).
        let h = (word != 0).then(|| points::hash(ak));
        if let Some(h) = h {
            points::prefetch_published(word, h);
        }
        let hk = HashKey::new(hk_bytes);
        let r = hk.route();
        let st = self.insert_stripe(r);
        let probe_first = self.point_index
            && match mode {
                PutMode::Update => true,
                PutMode::Upsert => !self.stripes[st].upserts_insert.load(Ordering::Relaxed),
                PutMode::Insert => false,
            };
        if let Some(lc) = leaf::leaf_class(key.len()).filter(|_| mode != PutMode::Update) {
            // The new leaf's line, if this is an insert: its fetch overlaps
            // the ART's descent instead of following it.
            self.pool
                .prefetch_write(self.stripes[st].next_leaf[lc].load(Ordering::Relaxed));
        }
        let want_early = mode == PutMode::Upsert && self.leaf_first(st, value);
        loop {
            let tree = if mode == PutMode::Update {
                match self.trees.find(&hk) {
                    Some(t) => t,
                    None => return Ok(PutOutcome::Unchanged),
                }
            } else {
                self.trees.for_insert(&hk, r)
            };
            let mut t = tree.write();
            if t.dead {
                continue; // Emptied and retired meanwhile: look again.
            }
            if probe_first {
                if let Some(done) = self.update_indexed(&t, h, st, key, value, mode)? {
                    return Ok(done);
                }
            }
            // Leaf first ("Leaf first", docs/design.md §7): an upsert that
            // will likely insert writes and flushes its leaf now, so that
            // the line's write-back overlaps the descent and the fence
            // after it waits for less. Written under the ART's lock, not
            // before it: taking the lock is a locked instruction, which
            // waits for every earlier flush to finish ("The lock before
            // the leaf", §7), so a leaf flushed before it would be written
            // back before the descent began. The leaf may become durable
            // (live) before the descent decides; see `update_instead` for a
            // key found present. If it cannot be written (a full pool), the
            // upsert goes on without it: an update in place may need no new
            // object. This iteration returns, so the leaf is written once.
            let early = if want_early {
                self.new_leaf(st, key, value).ok()
            } else {
                None
            };
            let keys = self.keys();
            if mode == PutMode::Update {
                return match t.art.get(ak, &keys) {
                    Some(leaf) => {
                        self.update_leaf(leaf.stripe(), leaf.off(), key, value)?;
                        Ok(PutOutcome::Replaced)
                    }
                    None => Ok(PutOutcome::Unchanged),
                };
            }
            // One descent: the leaf is written and persisted (Algorithm 1,
            // lines 10-18) at the point where the ART will hold it, and
            // linked there only once that succeeded.
            let was_empty = t.art.is_empty();
            // The new leaf, whose stripe is `st`'s unless the pool was full
            // (`Hart::take_leaf`).
            let mut made = None;
            let inserted = t.art.insert_with(ak, &keys, || {
                let leaf = match early {
                    // Persist order (leaf first): the leaf was written and
                    // flushed before the descent; the fence makes it
                    // durable, and only then does the ART link it.
                    Some(e) => {
                        self.pool.fence();
                        Ok(e)
                    }
                    None => self.insert_leaf(st, key, value),
                };
                made = leaf.as_ref().ok().copied();
                leaf
            });
            self.trees.note_root(hk_bytes, &t.art);
            return match inserted {
                Ok(Some(leaf)) => {
                    if mode == PutMode::Insert {
                        return Ok(PutOutcome::Unchanged);
                    }
                    if mode == PutMode::Upsert {
                        self.note_upsert(st, false);
                    }
                    let _w = self.writing(hk_bytes);
                    match early {
                        Some(e) => self.update_instead(e.stripe(), e.off(), leaf, key, value)?,
                        None => self.update_leaf(leaf.stripe(), leaf.off(), key, value)?,
                    }
                    Ok(PutOutcome::Replaced)
                }
                Ok(None) => {
                    let made = made.expect("an inserted key's leaf was made");
                    if self.point_index {
                        self.link_point(&mut t, h, key, made);
                    }
                    if was_empty {
                        self.trees.filled(&hk);
                    }
                    self.stripes[made.stripe()]
                        .len
                        .fetch_add(1, Ordering::Relaxed);
                    if mode == PutMode::Upsert {
                        self.note_upsert(st, true);
                    }
                    Ok(PutOutcome::Inserted)
                }
                Err(e) => {
                    if t.art.is_empty() {
                        self.trees.retire(&hk, r, &mut t);
                    }
                    if let Some(l) = early {
                        // Never linked (the closure, which cannot fail
                        // with an early leaf, was not what failed).
                        self.abandon_early(l.stripe(), l.off(), key.len())?;
                    }
                    Err(e)
                }
            };
        }
    }

    /// [`Engine::put_many`] without a compaction: on a full pool the items
    /// before the refused one stay put. `applied` counts the items applied
    /// (from the first), whatever the result.
    fn put_many_once(&self, items: &[(&[u8], &[u8])], applied: &mut usize) -> Result<()> {
        if self.order == PersistOrder::Paper {
            for (key, value) in items {
                self.put_once(key, value, PutMode::Upsert)?;
                *applied += 1;
            }
            return Ok(());
        }
        let mut rest = items;
        while !rest.is_empty() {
            let n = batch::distinct_prefix(rest, BATCH);
            let mut got = 0;
            let r = self.put_batch(&rest[..n], &mut got);
            *applied += got;
            r?;
            rest = &rest[n..];
        }
        Ok(())
    }
}

impl Engine for Hart {
    fn name(&self) -> &'static str {
        INFO.name
    }

    fn settings(&self) -> EngineConfig {
        let order = match self.order {
            PersistOrder::Tight => "tight",
            PersistOrder::Paper => "paper",
        };
        [
            ("hart.hash_key_len", self.k_h.to_string()),
            ("hart.format", self.format().to_string()),
            ("hart.persist_order", order.to_string()),
            ("hart.stripes", self.stripe_choice.name().to_string()),
            (
                "hart.leaf_first",
                if self.leaf_first { "on" } else { "off" }.to_string(),
            ),
            (
                "hart.point_index",
                if self.point_index { "on" } else { "off" }.to_string(),
            ),
            ("hart.point_index_above", self.point_above.to_string()),
            (
                "hart.compact",
                if self.compact { "on" } else { "off" }.to_string(),
            ),
            (
                "hart.reads",
                if self.optimistic {
                    "optimistic"
                } else {
                    "locked"
                }
                .to_string(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ordered_scan: true,
            concurrent: true,
            max_key_len: MAX_KEY_LEN,
            max_value_len: MAX_VALUE_LEN,
        }
    }

    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Algorithm 4. The paper checks the leaf bit in the chunk bitmap; here a
    /// leaf is in the ART only while it is committed, which the DRAM state
    /// guarantees under the ART lock.
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        if self.point_index {
            return self.get_indexed(key, f);
        }
        let (hk, ak) = self.split(key);
        let (tree, hint) = self.trees.find_bytes_hinted(hk);
        if let Some(leaf) = art::Art::<LeafRef>::prefetch_hinted(hint, ak) {
            self.pool.words().prefetch(leaf.off());
        }
        let Some(tree) = tree else {
            return Ok(false);
        };
        let t = tree.read();
        let Some(leaf) = t.art.probe(ak) else {
            return Ok(false);
        };
        self.answer::<false>(leaf.off(), key, f)
    }

    /// [`Self::get_with`] for each key, [`BATCH`] keys at a time whose
    /// searches run side by side (beyond the paper, docs/design.md §7,
    /// "Interleaved batched searches"), on either index of ARTs.
    fn get_many(&self, keys: &[&[u8]], f: &mut dyn FnMut(usize, Option<&[u8]>)) -> Result<()> {
        for (b, batch) in keys.chunks(BATCH).enumerate() {
            self.get_batch(b * BATCH, batch, f)?;
        }
        Ok(())
    }

    /// Algorithm 1 (insert) and Algorithm 3 (update).
    ///
    /// With the point index, an update, and an upsert after one of its
    /// stripe that updated, look the key up there first and update without
    /// a descent ([`Self::update_indexed`]); the rest descend, and link a
    /// new leaf into the point index beside the ART. The descent rather
    /// than a probe first: where the key is likely absent, the probe's miss
    /// would come before the descent's instead of beside it.
    fn put(&self, key: &[u8], value: &[u8], mode: PutMode) -> Result<PutOutcome> {
        self.with_compaction(|| self.put_once(key, value, mode))
    }

    /// Upserts in batches of up to [`BATCH`] items with distinct keys, each
    /// batch with one fence ([`Self::put_batch`]). The `paper` order puts
    /// one item after another.
    fn put_many(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        super::check_items(items)?;
        // After a compaction, the items not yet applied: an item applied
        // twice could overwrite another thread's later put of its key.
        let mut applied = 0;
        self.with_compaction(|| {
            let mut now = 0;
            let r = self.put_many_once(&items[applied..], &mut now);
            applied += now;
            r
        })
    }

    /// Algorithm 5, with the empty ART freed (lines 15-16).
    fn delete(&self, key: &[u8]) -> Result<bool> {
        let (hk_bytes, ak) = self.split(key);
        let (root, word) = self.trees.hints(hk_bytes);
        self.prefetch_root_hint(root, ak);
        // The hash of the ART key, where the ART had a point index when its
        // hints were read (else computed if one is found or built).
        let h = (word != 0).then(|| points::hash(ak));
        if let Some(h) = h {
            points::prefetch_published(word, h);
        }
        let hk = HashKey::new(hk_bytes);
        let r = hk.route();
        let Some(tree) = self.trees.find(&hk) else {
            return Ok(false);
        };
        let mut t = tree.write();
        if t.dead {
            return Ok(false);
        }
        let keys = self.keys();
        // Out of the ART first: the ART compares keys through the leaf,
        // which reads as keyless once its commit word is cleared. One
        // descent finds and removes it (a search first, then the removal,
        // took two descents and two reads of the leaf's key).
        let Some(leaf) = t.art.remove(ak, &keys) else {
            return Ok(false);
        };
        // A failure after the commit word was cleared leaves the key deleted
        // in PM: the DRAM state follows, and the error is returned after.
        // Readers without the lock see the change as one: the commit word,
        // the frees and the point index's entry.
        let w = self.writing(hk_bytes);
        let mut group_due = false;
        let freed = match self.delete_leaf(leaf.stripe(), leaf.off()) {
            Ok(due) => {
                group_due = due;
                Ok(true)
            }
            Err(DeleteError::Unchanged(e)) => {
                // Back in: the removal may have reshaped the root (a
                // collapsed Node4), so the hint follows again. (Not reached
                // in practice: the probe above read the same commit word.)
                t.art.insert(ak, leaf, &keys);
                self.trees.note_root(hk_bytes, &t.art);
                return Err(e);
            }
            Err(DeleteError::Deleted(e)) => Err(e),
        };
        self.trees.note_root(hk_bytes, &t.art);
        // The fault: the entry stays (the crash harness's self-test).
        if t.points.is_built() && !self.pool.fault(Fault::HartPointIndexKeptOnDelete) {
            let h = h.unwrap_or_else(|| points::hash(ak));
            let before = t.points.word();
            let removed = t.points.remove(
                h,
                leaf,
                points::drop_below(self.point_above),
                |l| keys.key(l),
                self.trees.tables(),
            );
            debug_assert!(removed, "a built point index holds the ART's leaves");
            if t.points.word() != before {
                self.trees.note_points(hk_bytes, &t.points);
            }
        }
        self.stripes[leaf.stripe()]
            .len
            .fetch_sub(1, Ordering::Relaxed);
        if t.art.is_empty() {
            self.trees.retire(&hk, r, &mut t);
        }
        drop(w);
        drop(t);
        if self.pool.fault(Fault::HartDeleteFenceUnlocked) {
            self.pool.fence();
        }
        if group_due {
            // The delete is durable and the DRAM state follows it: an error
            // of the group (a leaf its list does not hold) comes after.
            self.hand_over_mine()?;
        }
        freed
    }

    /// Ordered scan: hash keys in order from the ordered set, then each ART
    /// in order ([`Self::scan_ordered`]).
    fn scan(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut ScanFn<'_>) -> Result<()> {
        self.scan_ordered(lo, hi, f)
    }

    fn len(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.len.load(Ordering::Relaxed))
            .sum()
    }

    fn check(&self) -> Result<CheckReport> {
        // The lists as a reopen would find them: every delete's leaf given
        // back, and the chunks that leaves empty recycled; and a hand-over
        // error that no operation returned.
        self.settle_frees()?;
        if let Some(e) = self.take_late_free_error() {
            return Err(e);
        }
        let keys = self.keys();
        let mut blocks = vec![self.sb];
        for st in &self.stripes {
            for l in st.leaves.iter().chain(st.values.iter()) {
                blocks.extend(l.lock().chunk_offsets());
            }
        }
        let mut n = 0u64;
        self.trees.check().map_err(Error::CheckFailed)?;
        let mut hks = Vec::new();
        self.trees
            .keys_after(Bound::Unbounded, usize::MAX, &mut hks);
        for hk in hks {
            let r = hk.route();
            let Some(tree) = self.trees.find(&hk) else {
                return Err(Error::CheckFailed(format!(
                    "hash key {:?} is ordered but not in the index",
                    hk.as_slice()
                )));
            };
            let t = tree.read();
            if t.art.is_empty() {
                return Err(Error::CheckFailed(format!(
                    "the ART of hash key {:?} is empty",
                    hk.as_slice()
                )));
            }
            // A point index is built exactly for an ART of more than
            // `point_above` keys, or of fewer that once had more (down to
            // `drop_below` of it), and then holds every leaf of its ART.
            let built = t.points.is_built();
            let shape_ok = if built {
                self.point_index && t.points.len() == t.art.len()
            } else {
                t.points.len() == 0 && (!self.point_index || t.art.len() <= self.point_above)
            };
            if !shape_ok {
                return Err(Error::CheckFailed(format!(
                    "the point index of hash key {:?} holds {} leaves (built: {built}), its ART {}",
                    hk.as_slice(),
                    t.points.len(),
                    t.art.len()
                )));
            }
            let mut err = None;
            t.art
                .range(Bound::Unbounded, Bound::Unbounded, &keys, |ak, at| {
                    n += 1;
                    let (leaf, st) = (at.off(), at.stripe());
                    let r = (|| -> Result<()> {
                        let c = leaf::commit(&self.pool, leaf)?.ok_or_else(|| {
                            Error::CheckFailed(format!(
                                "leaf {leaf:#x} in the ART is not committed"
                            ))
                        })?;
                        let full = keys.full_key(leaf);
                        let (fhk, fak) = self.split(full);
                        if full.len() != c.key_len || fhk != hk.as_slice() || fak != ak {
                            return Err(Error::CheckFailed(format!(
                                "leaf {leaf:#x} holds another key"
                            )));
                        }
                        let lc = leaf::class_for_key(c.key_len);
                        if self.leaves(st, lc).lock().locate(leaf).is_none() {
                            return Err(Error::CheckFailed(format!(
                                "leaf {leaf:#x} is not in the leaf list of stripe {st}, \
                                 which its ART entry names"
                            )));
                        }
                        if !self.any_stripe && st != r.stripe {
                            return Err(Error::CheckFailed(format!(
                                "leaf {leaf:#x} is in stripe {st}, not its hash key's \
                                 (format 3 and 4 pools keep each hash key in one)"
                            )));
                        }
                        let v = self.slot(leaf, c.active)?;
                        let in_stripe = |len: usize, p: u64| {
                            superblock::value_classes(len, self.any_class)
                                .any(|vc| self.values(st, vc).lock().locate(p).is_some())
                        };
                        if !slot_is_valid(&self.pool, self.checksum, v, full, &in_stripe)? {
                            return Err(Error::CheckFailed(format!(
                                "leaf {leaf:#x}: value fails its CRC"
                            )));
                        }
                        if v.meta.large {
                            blocks.push(v.p);
                        }
                        if built && !t.points.contains(points::hash(ak), at) {
                            return Err(Error::CheckFailed(format!(
                                "leaf {leaf:#x} is in the ART but not in its point index"
                            )));
                        }
                        Ok(())
                    })();
                    if let Err(e) = r {
                        err = Some(e);
                        return false;
                    }
                    true
                });
            if let Some(e) = err {
                return Err(e);
            }
        }
        if n != self.len() {
            return Err(Error::CheckFailed(format!(
                "the ARTs hold {n} keys, the engine counts {}",
                self.len()
            )));
        }
        Ok(CheckReport {
            keys: n,
            referenced_blocks: blocks,
        })
    }

    fn dram_bytes(&self) -> u64 {
        let mut b = self.trees.dram_bytes() + self.frees.dram_bytes();
        for st in &self.stripes {
            for l in st.leaves.iter().chain(st.values.iter()) {
                b += l.lock().dram_bytes();
            }
        }
        b
    }
}

#[cfg(test)]
mod tests;
