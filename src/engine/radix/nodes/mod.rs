//! Inner nodes. Every node starts with the same two words:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | header ([`super::header`]): kind, depth, prefix length, prefix |
//! | 8 | 8 | `end`: the leaf whose key ends at this node's branch position, or null |
//!
//! then a body per kind: [`w16`] (WORT, 16 children indexed by a nibble),
//! and the four ART kinds [`n4`], [`n16`], [`n48`], [`n256`].
//!
//! **Keys that are prefixes of other keys.** A key whose last unit is just
//! before a node's branch position has nowhere to go among the children; it
//! lives in the node's `end` slot (a "value at inner node" slot, like a 17th
//! or 257th child that sorts before all others). Its commit is one 8-byte
//! store, as for a WORT child.
//!
//! **Orphans.** A node owns only the pointers it lists. WOART's protocols
//! write a pointer before the word that makes it visible (insert) and hide
//! it before nulling it (delete); a crash between leaves a non-null pointer
//! in an invisible slot (an *orphan pointer*). Its block is not reached, so
//! it is free after the crash (or, if it was reused, in use elsewhere); open
//! stores null in the slot, never frees through it. Between operations there
//! are none, and `check` refuses them.

/// The commit of an in-place insert into a WOART NODE4, NODE16 or NODE48,
/// or of any change that swaps one pointer slot: one 8-byte store of
/// `word` at `at`, then a flush of its line. A node's
/// `add` has stored the entry the commit makes visible, and flushed what
/// of it lies outside the commit word's line, before it returns one; the
/// tree stores it ([`super::RadixTree::commit`]). One put at a time
/// fences before the store (what it publishes durable) and after it
/// ([`Commit::apply`]); a batch of puts fences before it only where
/// something it publishes is not durable yet, and then holds it back to
/// share that fence with the batch's other commits (docs/design.md §11,
/// "Held-back commits").
#[must_use = "a prepared commit must be stored"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Offset of the commit word.
    pub at: u64,
    /// Its new value.
    pub word: u64,
    /// What the commit makes visible includes a flush that no fence has
    /// covered yet (NODE16's or NODE48's pointer in another line).
    pub fence_first: bool,
    /// The commit swaps a pointer slot (a child, `end` or the root), which
    /// a later put reads only by loading that slot or by copying the node
    /// around it; else it is a node's commit word, which every later put
    /// through the node reads (a NODE48 add reads the whole index).
    pub is_slot: bool,
}

impl Commit {
    /// The commit of a slot swap: `word` into `slot`.
    pub fn slot(slot: u64, word: u64) -> Commit {
        Commit {
            at: slot,
            word,
            fence_first: false,
            is_slot: true,
        }
    }

    /// Stores the word and flushes its line (no fence).
    pub(super) fn store(self, pool: &Pool) -> Result<()> {
        pool.store_u64(self.at, self.word)?;
        pool.flush(self.at, 8);
        Ok(())
    }

    /// One put at a time: **fence** (everything it publishes durable);
    /// store; flush; **fence**.
    pub fn apply(self, pool: &Pool) -> Result<()> {
        pool.fence();
        self.store(pool)?;
        pool.fence();
        Ok(())
    }
}

pub mod n16;
pub mod n256;
pub mod n4;
pub mod n48;
pub mod w16;

use crate::error::{Error, Result};
use crate::pm::Pool;

/// Offset of the header word.
pub const HDR: u64 = 0;
/// Offset of the `end` slot.
pub const END: u64 = 8;
/// Offset of the kind-specific body.
pub const BODY: u64 = 16;

/// Bit 0 of a pointer word (a child, `end` or the root slot) in a tree of
/// format 4: set when the block it names is a leaf. Blocks are line-aligned,
/// so the low 6 bits of an offset are free; a search then knows it has
/// reached a leaf as soon as the slot's word arrives, before the leaf's own
/// line (docs/design.md §11, "Leaf-tagged pointers and slot maps"). Bits 1..6 of a
/// pointer to a WORT node hold its slot map ([`w16::MAP`]). Trees of
/// formats 2 and 3 set none of these bits; pointers to ART nodes never do.
pub const LEAF_TAG: u64 = 1;

/// The bits of a pointer word that are not the block's offset.
pub const TAGS: u64 = LEAF_TAG | w16::MAP;

/// The block a pointer word names: the word without [`TAGS`]. Code that
/// reads or writes the block's words takes this; code that moves the
/// pointer (into another slot, a copy) keeps the word whole.
#[inline(always)]
pub fn block_of(word: u64) -> u64 {
    word & !TAGS
}

/// What a block is (low 4 bits of its first word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A leaf ([`super::leaf`]).
    Leaf = 1,
    /// WORT node: 16 children indexed by a nibble.
    W16 = 2,
    /// ART NODE4.
    N4 = 3,
    /// ART NODE16.
    N16 = 4,
    /// ART NODE48.
    N48 = 5,
    /// ART NODE256.
    N256 = 6,
}

impl Kind {
    /// Decodes the kind bits of a block's first word.
    #[inline]
    pub fn of(off: u64, w: u64) -> Result<Kind> {
        Ok(match w & 0xF {
            1 => Kind::Leaf,
            2 => Kind::W16,
            3 => Kind::N4,
            4 => Kind::N16,
            5 => Kind::N48,
            6 => Kind::N256,
            k => {
                return Err(Error::corrupt(
                    off,
                    format!("radix: unknown block kind {k}"),
                ))
            }
        })
    }

    /// Bytes of a node of this kind.
    pub fn size(self) -> u64 {
        match self {
            Kind::Leaf => 0,
            Kind::W16 => w16::SIZE,
            Kind::N4 => n4::SIZE,
            Kind::N16 => n16::SIZE,
            Kind::N48 => n48::SIZE,
            Kind::N256 => n256::SIZE,
        }
    }

    /// Children a node of this kind holds.
    pub fn capacity(self) -> usize {
        match self {
            Kind::Leaf => 0,
            Kind::W16 => 16,
            Kind::N4 => 4,
            Kind::N16 => 16,
            Kind::N48 => 48,
            Kind::N256 => 256,
        }
    }

    /// The next larger ART kind.
    pub fn grown(self) -> Kind {
        match self {
            Kind::N4 => Kind::N16,
            Kind::N16 => Kind::N48,
            _ => Kind::N256,
        }
    }

    /// The ART kind a node shrinks to when it holds `n` children after a
    /// delete (at most [`Kind::shrinks_at`]), if any.
    pub fn shrunk(self, n: usize) -> Option<Kind> {
        if n > self.shrinks_at() {
            return None;
        }
        match self {
            Kind::N16 => Some(Kind::N4),
            Kind::N48 => Some(Kind::N16),
            Kind::N256 => Some(Kind::N48),
            _ => None,
        }
    }

    /// The most children a node of this kind holds when it shrinks (the
    /// thresholds of ART's reference code: 3, 12, 37; 0 for the kinds that
    /// never shrink).
    pub fn shrinks_at(self) -> usize {
        match self {
            Kind::N16 => 3,
            Kind::N48 => 12,
            Kind::N256 => 37,
            _ => 0,
        }
    }

    /// The smallest ART kind that holds `n` children.
    pub fn art_for(n: usize) -> Kind {
        match n {
            0..=4 => Kind::N4,
            5..=16 => Kind::N16,
            17..=48 => Kind::N48,
            _ => Kind::N256,
        }
    }
}

/// A visible child of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its unit (partial key).
    pub unit: u8,
    /// The 8-byte slot holding its pointer.
    pub slot: u64,
    /// The pointer (never null in a consistent tree: recovery and `check`
    /// refuse a listed null pointer).
    pub ptr: u64,
}

impl Entry {
    /// The entry for `unit` whose pointer is in `slot` (read now).
    pub fn read(pool: &Pool, unit: u8, slot: u64) -> Result<Entry> {
        Ok(Entry {
            unit,
            slot,
            ptr: pool.load_u64(slot)?,
        })
    }
}

/// Entries of a node whose body is a plain array of `n` child pointers
/// indexed by unit (NODE256): the non-null slots.
fn direct_entries(pool: &Pool, node: u64, n: u16) -> Result<Vec<Entry>> {
    let node = block_of(node);
    let mut out = Vec::new();
    for u in 0..n {
        let unit = u as u8;
        let slot = node + BODY + 8 * u64::from(unit);
        let ptr = pool.load_u64(slot)?;
        if ptr != 0 {
            out.push(Entry { unit, slot, ptr });
        }
    }
    Ok(out)
}

/// How many visible children (non-null pointers) `node` has besides unit
/// `skip`, which must be a child it has: exact up to `limit`, and
/// `limit + 1` for any more. A delete decides by this count (merge at one
/// child left, shrink at [`Kind::shrinks_at`]) without listing the node:
/// NODE4, NODE16 and NODE48 read only their list ([`listed`]: a listed
/// pointer is never null in a tree that opened), and a WORT node or a
/// NODE256 stops reading its slots at the `limit + 1`-th child it finds.
pub fn count_other(
    pool: &Pool,
    node: u64,
    kind: Kind,
    skip: Option<u8>,
    limit: usize,
) -> Result<usize> {
    let n: u16 = match kind {
        Kind::W16 => 16,
        Kind::N256 => 256,
        _ => {
            let c = listed(pool, node, kind)?.saturating_sub(usize::from(skip.is_some()));
            return Ok(c.min(limit + 1));
        }
    };
    let mut c = 0;
    for u in 0..n {
        let slot = match kind {
            Kind::W16 => w16::slot(node, u as u8),
            _ => block_of(node) + BODY + 8 * u64::from(u),
        };
        if Some(u as u8) != skip && pool.load_u64(slot)? != 0 {
            c += 1;
            if c > limit {
                break;
            }
        }
    }
    Ok(c)
}

/// Writes `children` into a direct array body (NODE256).
fn fill_direct(body: &mut [u8], children: &[(u8, u64)]) {
    for &(u, p) in children {
        let o = 8 * usize::from(u);
        body[o..o + 8].copy_from_slice(&p.to_le_bytes());
    }
}

/// The kind of the block that the pointer word `off` names (reads its
/// first word).
pub fn kind(pool: &Pool, off: u64) -> Result<Kind> {
    let off = block_of(off);
    pool.touch(off, 8);
    Kind::of(off, pool.load_u64(off)?)
}

/// The slot of child `unit`, if the node lists it (its pointer may be null:
/// an empty WORT or NODE256 slot).
#[inline(always)]
pub fn find(pool: &Pool, node: u64, kind: Kind, unit: u8) -> Result<Option<u64>> {
    // A WORT node's map is in the pointer word; the others take the block.
    if kind == Kind::W16 {
        return Ok(Some(w16::slot(node, unit)));
    }
    let node = block_of(node);
    match kind {
        Kind::W16 => unreachable!("above"),
        Kind::N4 => n4::find(pool, node, unit),
        Kind::N16 => n16::find(pool, node, unit),
        Kind::N48 => n48::find(pool, node, unit),
        Kind::N256 => Ok(Some(n256::slot(node, unit))),
        Kind::Leaf => Err(Error::corrupt(node, "radix: leaf used as a node")),
    }
}

/// Visible children in unit order (WORT and NODE256: non-null slots only).
pub fn entries(pool: &Pool, node: u64, kind: Kind) -> Result<Vec<Entry>> {
    pool.touch(block_of(node), kind.size());
    if kind == Kind::W16 {
        return w16::entries(pool, node);
    }
    let node = block_of(node);
    match kind {
        Kind::W16 => unreachable!("above"),
        Kind::N4 => n4::entries(pool, node),
        Kind::N16 => n16::entries(pool, node),
        Kind::N48 => n48::entries(pool, node),
        Kind::N256 => n256::entries(pool, node),
        Kind::Leaf => Err(Error::corrupt(node, "radix: leaf used as a node")),
    }
}

/// How many children a NODE4, NODE16 or NODE48 lists (its commit word,
/// bitmap or index), read in place: whether an insert must grow the node.
/// Reads (and counts) only those words, not the pointers.
pub fn listed(pool: &Pool, node: u64, kind: Kind) -> Result<usize> {
    match kind {
        Kind::N4 => {
            pool.touch(node + n4::KEYS, 8);
            n4::listed(pool, node)
        }
        Kind::N16 => {
            pool.touch(node + n16::BITMAP, 8);
            n16::listed(pool, node)
        }
        Kind::N48 => {
            pool.touch(node + n48::INDEX, 256);
            n48::listed(pool, node)
        }
        k => Err(Error::corrupt(
            node,
            format!("radix: {k:?} node has no list of children"),
        )),
    }
}

/// Slots holding a non-null pointer that the node does not list (orphans).
pub fn orphans(pool: &Pool, node: u64, kind: Kind) -> Result<Vec<u64>> {
    match kind {
        Kind::N4 => n4::orphans(pool, node),
        Kind::N16 => n16::orphans(pool, node),
        Kind::N48 => n48::orphans(pool, node),
        _ => Ok(Vec::new()),
    }
}

/// Writes the bytes of a fresh node into `b` (exactly `kind.size()`
/// bytes, all zero): `hdr` (its kind bits must be `kind`), `end`, and
/// `children` (unit, pointer) in unit order, all visible; `map`: the bits
/// that pointers to a WORT node will carry ([`w16::MAP`]; 0 for the others).
pub fn image(b: &mut [u8], kind: Kind, hdr: u64, end: u64, children: &[(u8, u64)], map: u64) {
    debug_assert_eq!(hdr & 0xF, kind as u64);
    debug_assert_eq!(b.len() as u64, kind.size());
    debug_assert!(b.iter().all(|&x| x == 0));
    debug_assert!(children.len() <= kind.capacity());
    debug_assert!(children.windows(2).all(|w| w[0].0 < w[1].0));
    b[0..8].copy_from_slice(&hdr.to_le_bytes());
    b[8..16].copy_from_slice(&end.to_le_bytes());
    let body = &mut b[BODY as usize..];
    match kind {
        Kind::W16 => w16::fill(body, children, map),
        Kind::N4 => n4::fill(body, children),
        Kind::N16 => n16::fill(body, children),
        Kind::N48 => n48::fill(body, children),
        Kind::N256 => n256::fill(body, children),
        Kind::Leaf => unreachable!("leaves are not nodes"),
    }
}

/// Sets byte `i` of the 8-byte word `w` (little-endian) to `v`.
pub(crate) fn with_byte(w: u64, i: usize, v: u8) -> u64 {
    (w & !(0xFFu64 << (8 * i))) | u64::from(v) << (8 * i)
}

/// Byte `i` of the 8-byte word `w`.
#[inline]
pub(crate) fn byte(w: u64, i: usize) -> u8 {
    (w >> (8 * i)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `listed` counts what `entries` lists, for every fill of every kind
    /// that has a list, through adds and removes in place.
    #[test]
    fn listed_agrees_with_entries() {
        let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
        for kind in [Kind::N4, Kind::N16, Kind::N48] {
            let node = pool.reserve(kind.size()).unwrap().offset();
            let mut b = vec![0u8; kind.size() as usize];
            image(&mut b, kind, kind as u64, 0, &[], 0);
            // SAFETY: the block is ours alone (a test pool).
            unsafe { pool.write_bytes(node, &b).unwrap() };
            let cap = kind.capacity();
            let units: Vec<u8> = (0..cap).map(|i| (i * 37 % 256) as u8).collect();
            for (n, &u) in units.iter().enumerate() {
                assert_eq!(listed(&pool, node, kind).unwrap(), n, "{kind:?}");
                match kind {
                    Kind::N4 => n4::add(&pool, node, u, 0x1000 + n as u64, false)
                        .and_then(|c| c.apply(&pool))
                        .unwrap(),
                    Kind::N16 => n16::add(&pool, node, u, 0x1000 + n as u64, false)
                        .and_then(|c| c.apply(&pool))
                        .unwrap(),
                    _ => n48::add(&pool, node, u, 0x1000 + n as u64)
                        .and_then(|c| c.apply(&pool))
                        .unwrap(),
                }
                let e = entries(&pool, node, kind).unwrap().len();
                assert_eq!(listed(&pool, node, kind).unwrap(), e, "{kind:?}");
            }
            assert_eq!(listed(&pool, node, kind).unwrap(), cap, "{kind:?} full");
            for (n, &u) in units.iter().enumerate().step_by(2) {
                let slot = match kind {
                    Kind::N4 => n4::remove(&pool, node, u),
                    Kind::N16 => n16::remove(&pool, node, u),
                    _ => n48::remove(&pool, node, u),
                }
                .unwrap();
                pool.store_u64(slot, 0).unwrap();
                let e = entries(&pool, node, kind).unwrap().len();
                assert_eq!(listed(&pool, node, kind).unwrap(), e, "{kind:?} after {n}");
            }
        }
        assert!(listed(&pool, 0, Kind::W16).is_err());
    }

    /// `count_other` counts what `entries` lists besides the skipped unit,
    /// up to its limit, for every kind, fill, skipped unit and limit (and
    /// WORT slot maps); `entries` lists the units written, in order.
    #[test]
    fn count_other_agrees_with_entries_up_to_its_limit() {
        let pool = Pool::create_anonymous(8 << 20, "test", &Default::default()).unwrap();
        for (kind, map) in [
            (Kind::W16, 0),
            (Kind::W16, 0x2A),
            (Kind::W16, w16::MAP),
            (Kind::N4, 0),
            (Kind::N16, 0),
            (Kind::N48, 0),
            (Kind::N256, 0),
        ] {
            let node = pool.reserve(kind.size()).unwrap().offset() | map;
            let cap = kind.capacity();
            for fill in [0, 1, 2, 3, 4, cap / 2, cap - 1, cap] {
                // Units spread over the node's range (WORT's are nibbles).
                let range = if kind == Kind::W16 { 16 } else { 256 };
                let mut units: Vec<u8> = (0..fill).map(|i| (i * range / cap) as u8).collect();
                units.dedup();
                let children: Vec<(u8, u64)> = units
                    .iter()
                    .map(|&u| (u, 0x1000 + 8 * u64::from(u)))
                    .collect();
                let mut b = vec![0u8; kind.size() as usize];
                image(&mut b, kind, kind as u64, 0, &children, map);
                // SAFETY: the block is ours alone (a test pool).
                unsafe { pool.write_bytes(block_of(node), &b).unwrap() };
                let listed: Vec<(u8, u64)> = entries(&pool, node, kind)
                    .unwrap()
                    .iter()
                    .map(|e| (e.unit, e.ptr))
                    .collect();
                assert_eq!(listed, children, "{kind:?} map {map:#x}");
                // A unit the node has (or none).
                let skips = [None, units.first().copied(), units.last().copied()];
                for skip in skips {
                    let want = entries(&pool, node, kind)
                        .unwrap()
                        .iter()
                        .filter(|e| Some(e.unit) != skip)
                        .count();
                    for limit in [1, 3, 12, 37, 300] {
                        let got = count_other(&pool, node, kind, skip, limit).unwrap();
                        assert_eq!(got, want.min(limit + 1), "{kind:?} {fill} {skip:?} {limit}");
                    }
                }
            }
        }
    }
}
