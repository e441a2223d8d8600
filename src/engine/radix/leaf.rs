//! A leaf: the whole key and its value, in one allocator block.
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `word`: kind [`LEAF_KIND`] (bits 0..4), key length (bits 8..16), value length (bits 32..64) |
//! | 8 | key length | the key |
//! | 8 + key length | value length | the value |
//!
//! A leaf is written whole into a reserved block, flushed, and published by
//! the 8-byte store of its offset into the slot that points to it (after a
//! fence; in format 4 the offset carries [`super::nodes::LEAF_TAG`]); it is
//! never changed in place afterwards. The functions here take the pointer
//! word as it was read from a slot, tagged or not. An update writes a new
//! leaf and stores it over the old one in the same slot.
//!
//! **Decision: the value lives in the leaf's block**, not behind a pointer
//! to a separate block as in the paper: one block to write, flush and
//! publish, and an 8-byte key with an 8-byte value is one 64-byte line (one
//! flush where the paper's layout needs two).

use std::ops::Range;

use super::nodes::block_of;
use crate::engine::{ValueBuf, MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::error::{Error, Result};
use crate::pm::{Pool, WordBlock, Words, CACHE_LINE};

/// Kind of a leaf (low 4 bits of its first word).
pub const LEAF_KIND: u8 = 1;
/// Bytes before the key.
pub const HEADER: u64 = 8;

/// A decoded leaf word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafWord {
    /// Key length.
    pub key_len: usize,
    /// Value length.
    pub value_len: usize,
}

impl LeafWord {
    /// Encodes the word.
    pub fn encode(self) -> u64 {
        u64::from(LEAF_KIND) | (self.key_len as u64) << 8 | (self.value_len as u64) << 32
    }

    /// Decodes a leaf word; an error if it is not one.
    pub fn decode(off: u64, w: u64) -> Result<LeafWord> {
        let key_len = ((w >> 8) & 0xFF) as usize;
        let value_len = (w >> 32) as usize;
        // A value over the API's limit is damage too; refusing it here also
        // bounds what a search counts (and, with emulated latency, waits)
        // for a damaged or torn leaf word.
        if w & 0xF != u64::from(LEAF_KIND)
            || key_len == 0
            || w & 0xFFFF_00F0 != 0
            || value_len > MAX_VALUE_LEN
        {
            return Err(Error::corrupt(off, format!("radix: bad leaf word {w:#x}")));
        }
        Ok(LeafWord { key_len, value_len })
    }

    /// Block bytes the leaf needs.
    pub fn size(self) -> u64 {
        HEADER + self.key_len as u64 + self.value_len as u64
    }
}

/// Writes a leaf into the reserved block at `off` (of at least
/// [`LeafWord::size`] bytes), then flushes it (no fence: the store that
/// publishes it fences first). With `skip_flush` (a fault-injection switch)
/// the flush is left out.
///
/// # Safety
/// The block is reserved by the caller and not yet published: nothing else
/// reads or writes it.
pub unsafe fn write(
    pool: &Pool,
    off: u64,
    key: &[u8],
    value: &[u8],
    skip_flush: bool,
) -> Result<()> {
    // What the word can say (`Db` checks the same; the engine's own callers
    // may not have): an over-long key or value would be written as a word
    // that reads back as damage.
    crate::db::check_key_len(key, MAX_KEY_LEN)?;
    crate::db::check_value_len(value, MAX_VALUE_LEN)?;
    let w = LeafWord {
        key_len: key.len(),
        value_len: value.len(),
    };
    // Written in place, part by part: the block is not published yet, so
    // the order of these stores does not matter (the flush below makes all
    // of them durable before the publishing store).
    // SAFETY: forwarded from the caller (the block is ours alone).
    unsafe {
        pool.write_bytes(off, &w.encode().to_le_bytes())?;
        pool.write_bytes(off + HEADER, key)?;
        pool.write_bytes(off + HEADER + key.len() as u64, value)?;
    }
    if !skip_flush {
        pool.flush(off, w.size());
    }
    Ok(())
}

/// Reads a leaf's word (and counts the line read).
pub fn word(pool: &Pool, leaf: u64) -> Result<LeafWord> {
    let leaf = block_of(leaf);
    pool.touch(leaf, 8);
    LeafWord::decode(leaf, pool.load_u64(leaf)?)
}

/// Whether the leaf at `leaf` (its word decoded as `w`) holds `key`.
///
/// Compares a word at a time through atomic loads, not through a slice:
/// leaves are line-aligned, so the key's words start at an aligned offset,
/// and the last one ends inside the block (blocks are whole words); its
/// bytes past the key are masked off. So it is also safe on a leaf that a
/// writer is reusing (the optimistic search, `search.rs`).
#[inline(always)]
pub fn key_matches(pm: Words<'_>, leaf: u64, w: LeafWord, key: &[u8]) -> Result<bool> {
    let leaf = block_of(leaf);
    if w.key_len != key.len() {
        return Ok(false);
    }
    let mut at = leaf + HEADER;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        if pm.load(at)? != u64::from_ne_bytes(c.try_into().expect("chunks of 8 bytes")) {
            return Ok(false);
        }
        at += 8;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() && pm.load(at)? & tail_mask(tail.len()) != tail_word(tail) {
        return Ok(false);
    }
    Ok(true)
}

/// The leaf at `leaf`, if it is one that fits in one cache line: `Some`
/// with its word if it holds `key`, `Some(None)` if it holds another key;
/// `None` if `leaf` is not such a leaf (null, a node, a longer leaf, or an
/// offset outside the pool), which the caller's general path handles. A
/// bad leaf word is an error, as in [`LeafWord::decode`].
///
/// One bounds check for the line, then word loads within it, each offset
/// compared with the line's end only (as
/// [`key_matches`], so also safe on a leaf being reused).
#[inline(always)]
pub fn find_in_line(pm: Words<'_>, leaf: u64, key: &[u8]) -> Result<Option<Option<LeafWord>>> {
    Ok(find_line(pm, leaf, key)?.map(|found| found.map(|(lw, _)| lw)))
}

/// [`find_in_line`], with the checked line of a leaf that holds `key`, from
/// which [`copy_from_line`] reads the value without a second check.
#[inline(always)]
pub fn find_line<'a>(
    pm: Words<'a>,
    leaf: u64,
    key: &[u8],
) -> Result<Option<Option<(LeafWord, WordBlock<'a, CACHE_LINE>)>>> {
    let leaf = block_of(leaf);
    let Some(l) = pm.block::<CACHE_LINE>(leaf) else {
        return Ok(None);
    };
    let w = l.load(0);
    if w & 0xF != u64::from(LEAF_KIND) {
        return Ok(None);
    }
    let lw = LeafWord::decode(leaf, w)?;
    if lw.size() > CACHE_LINE {
        return Ok(None);
    }
    if lw.key_len != key.len() {
        return Ok(Some(None));
    }
    // Leaves are line-aligned: the key's words start at `HEADER`.
    let mut at = HEADER;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        if l.load(at) != u64::from_ne_bytes(c.try_into().expect("chunks of 8 bytes")) {
            return Ok(Some(None));
        }
        at += 8;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() && l.load(at) & tail_mask(tail.len()) != tail_word(tail) {
        return Ok(Some(None));
    }
    Ok(Some(Some((lw, l))))
}

/// Copies the value of a leaf of one line (`lw.size() <= CACHE_LINE`; the
/// line `l` starts at the leaf) into `buf`: at most 8 words, each loaded
/// from the line without a test. Returns where in [`ValueBuf::bytes`] the
/// value lies.
#[inline(always)]
pub fn copy_from_line(
    l: WordBlock<'_, CACHE_LINE>,
    lw: LeafWord,
    buf: &mut ValueBuf,
) -> Range<usize> {
    debug_assert!(lw.size() <= CACHE_LINE);
    let start = HEADER + lw.key_len as u64;
    let first = start & !7;
    let end = start + lw.value_len as u64;
    buf.set_words((end - first).div_ceil(8) as usize, |i| {
        // In the line: `first + 8 * i < lw.size() <= 64`; the mask only
        // lets the compiler see it.
        l.load((first + 8 * i as u64) & (CACHE_LINE - 8))
    });
    let skip = (start - first) as usize;
    skip..skip + lw.value_len
}

/// The low `n` bytes of a word (in memory order), `n` in 1..8.
#[inline(always)]
fn tail_mask(n: usize) -> u64 {
    let mut mask = [0u8; 8];
    mask[..n].fill(0xFF);
    u64::from_ne_bytes(mask)
}

/// `tail` (under 8 bytes) as the word that holds it, zero-padded.
#[inline(always)]
fn tail_word(tail: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes[..tail.len()].copy_from_slice(tail);
    u64::from_ne_bytes(bytes)
}

/// Copies the leaf's value into `buf` a word at a time (as
/// [`key_matches`] reads, so also safe on a leaf being reused); returns
/// where in [`ValueBuf::bytes`] the value lies, or `None` when its words
/// do not fit.
#[inline(always)]
pub fn copy_value(
    pm: Words<'_>,
    leaf: u64,
    w: LeafWord,
    buf: &mut ValueBuf,
) -> Result<Option<Range<usize>>> {
    let leaf = block_of(leaf);
    // A leaf in one line (the common case, an 8-byte key and value): one
    // bounds check for the line.
    if w.size() <= CACHE_LINE {
        if let Some(l) = pm.block::<CACHE_LINE>(leaf) {
            return Ok(Some(copy_from_line(l, w, buf)));
        }
    }
    let start = leaf + HEADER + w.key_len as u64;
    let mut at = start & !7;
    let end = start + w.value_len as u64;
    let skip = (start - at) as usize;
    if !buf.fits((end - at).div_ceil(8)) {
        return Ok(None);
    }
    buf.clear();
    if w.value_len == 0 {
        return Ok(Some(0..0));
    }
    while at < end {
        buf.push(pm.load(at)?);
        at += 8;
    }
    Ok(Some(skip..skip + w.value_len))
}

/// Borrows a leaf's key.
///
/// # Safety
/// No writer may change or free the leaf while the slice lives (the tree's
/// lock guarantees it; leaves are never written after publication).
pub unsafe fn key(pool: &Pool, leaf: u64, w: LeafWord) -> Result<&[u8]> {
    let leaf = block_of(leaf);
    pool.touch(leaf + HEADER, w.key_len as u64);
    // SAFETY: forwarded from the caller.
    unsafe { pool.bytes(leaf + HEADER, w.key_len as u64) }
}

/// Borrows a leaf's value.
///
/// # Safety
/// As for [`key`].
pub unsafe fn value(pool: &Pool, leaf: u64, w: LeafWord) -> Result<&[u8]> {
    let leaf = block_of(leaf);
    let off = leaf + HEADER + w.key_len as u64;
    pool.touch(off, w.value_len as u64);
    // SAFETY: forwarded from the caller.
    unsafe { pool.bytes(off, w.value_len as u64) }
}

/// Whether the leaf at `leaf` holds `key`: compared in place, with the
/// lines counted as [`key_vec`] counts them (the leaf's word, then its
/// key's bytes).
pub(super) fn holds(pool: &Pool, leaf: u64, key: &[u8]) -> Result<bool> {
    let w = word(pool, leaf)?;
    pool.touch(block_of(leaf) + HEADER, w.key_len as u64);
    key_matches(pool.words(), leaf, w, key)
}

/// The leaf's key, copied.
pub(super) fn key_vec(pool: &Pool, leaf: u64) -> Result<Vec<u8>> {
    let w = word(pool, leaf)?;
    // SAFETY: the caller holds the tree (every caller is a tree method under
    // its lock), so the leaf is not freed while we copy.
    Ok(unsafe { key(pool, leaf, w)? }.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_in_line_reads_one_line_leaves_and_leaves_the_rest() {
        let pool = Pool::create_anonymous(1 << 20, "wort", &Default::default()).unwrap();
        let pm = pool.words();
        let end = pool.size();
        let short = 4096;
        let long = 8192;
        let last = end - CACHE_LINE;
        // SAFETY: a fresh pool of this test alone; these blocks are not
        // used by anything else.
        unsafe {
            write(&pool, short, b"key-one", b"value", false).unwrap();
            write(&pool, long, b"key-two", &[3; 60], false).unwrap();
            write(&pool, last, b"k", b"v", false).unwrap();
        }
        let w = |k: &[u8], v: usize| LeafWord {
            key_len: k.len(),
            value_len: v,
        };
        assert_eq!(
            find_in_line(pm, short, b"key-one").unwrap(),
            Some(Some(w(b"key-one", 5)))
        );
        // Same length, another key; another length.
        assert_eq!(find_in_line(pm, short, b"key-onf").unwrap(), Some(None));
        assert_eq!(find_in_line(pm, short, b"key-on").unwrap(), Some(None));
        assert_eq!(find_in_line(pm, short, b"key-one!").unwrap(), Some(None));
        // The pointer word with its leaf tag names the same leaf.
        assert_eq!(
            find_in_line(pm, short | super::super::nodes::LEAF_TAG, b"key-one").unwrap(),
            Some(Some(w(b"key-one", 5)))
        );
        // A leaf of two lines, null, a non-leaf word (zeroes), and offsets
        // past the pool: not for this path.
        assert_eq!(find_in_line(pm, long, b"key-two").unwrap(), None);
        assert_eq!(find_in_line(pm, 0, b"key-one").unwrap(), None);
        assert_eq!(
            find_in_line(pm, short + CACHE_LINE, b"key-one").unwrap(),
            None
        );
        assert_eq!(find_in_line(pm, end, b"k").unwrap(), None);
        assert_eq!(find_in_line(pm, end + CACHE_LINE, b"k").unwrap(), None);
        // The last line of the pool.
        assert_eq!(
            find_in_line(pm, last, b"k").unwrap(),
            Some(Some(w(b"k", 1)))
        );
        // A bad leaf word is an error, as in `decode`.
        pool.store_u64(short, u64::from(LEAF_KIND)).unwrap();
        assert!(find_in_line(pm, short, b"key-one").is_err());
    }

    #[test]
    fn copy_value_reads_short_and_long_leaves() {
        let pool = Pool::create_anonymous(1 << 20, "wort", &Default::default()).unwrap();
        let long_value: Vec<u8> = (0..100).collect();
        // SAFETY: as above.
        unsafe {
            write(&pool, 4096, b"abc", b"short value", false).unwrap();
            write(&pool, 8192, b"abc", &long_value, false).unwrap();
        }
        for (leaf, value) in [(4096, &b"short value"[..]), (8192, &long_value[..])] {
            let lw = word(&pool, leaf).unwrap();
            let mut buf = ValueBuf::new();
            let r = copy_value(pool.words(), leaf, lw, &mut buf)
                .unwrap()
                .unwrap();
            assert_eq!(&buf.bytes()[r], value);
        }
    }

    /// `key_vec(..) == key` and the lines it counted (the delete's test
    /// before `holds`).
    fn by_copy(pool: &Pool, leaf: u64, key: &[u8]) -> (Result<bool>, u64) {
        let r0 = crate::pm::counters::this_thread().lines_read;
        let r = key_vec(pool, leaf).map(|k| k == key);
        (r, crate::pm::counters::this_thread().lines_read - r0)
    }
    /// `holds` and the lines it counted.
    fn in_place(pool: &Pool, leaf: u64, key: &[u8]) -> (Result<bool>, u64) {
        let r0 = crate::pm::counters::this_thread().lines_read;
        let r = holds(pool, leaf, key);
        (r, crate::pm::counters::this_thread().lines_read - r0)
    }

    /// `holds` answers as the copy did and counts the same lines, for keys
    /// of 1 to 250 bytes (past one line), prefixes, longer and shorter
    /// probes, tagged pointers and a leaf at the pool's end; on a leaf
    /// whose key length runs past the pool's end it errs or says absent.
    /// (Contributed by a review, 2026-11-27.)
    #[test]
    fn holds_answers_and_counts_as_the_copy_did() {
        let pool = Pool::create_anonymous(1 << 20, "wort", &Default::default()).unwrap();
        let end = pool.size();
        let stored: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"abcdefg".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefghi".to_vec(),
            (0..=249u8).collect(),
            vec![0; 100],
            vec![0xff; 63],
            b"abcdefgh\0".to_vec(),
        ];
        let mut probes = stored.clone();
        probes.push(b"abcdefgi".to_vec());
        probes.push(b"b".to_vec());
        probes.push(vec![0; 99]);
        probes.push(vec![0; 101]);
        probes.push(b"abcdefgh\0\0".to_vec());
        probes.push((0..=248u8).collect());
        probes.push({
            let mut v: Vec<u8> = (0..=249u8).collect();
            v[249] = 0;
            v
        });
        probes.push({
            let mut v: Vec<u8> = (0..=249u8).collect();
            v[200] ^= 1;
            v
        });
        let mut n = 0;
        for (i, k) in stored.iter().enumerate() {
            for (at, tag) in [
                (4096 * (i as u64 + 1), 0u64),
                (end - 512, 0),
                (4096 * 40, super::super::nodes::LEAF_TAG),
            ] {
                // SAFETY: a fresh pool of this test alone; nothing else
                // uses these blocks.
                unsafe { write(&pool, at, k, &[7; 30], false).unwrap() };
                for p in &probes {
                    let (o, lo) = by_copy(&pool, at | tag, p);
                    let (h, lh) = in_place(&pool, at | tag, p);
                    assert_eq!(o.unwrap(), h.unwrap(), "{k:?} {p:?}");
                    assert_eq!(lo, lh, "lines {k:?} {p:?}");
                    n += 1;
                }
            }
        }
        assert!(n > 100);
        // Damaged: a key length that runs past the pool's end.
        let at = end - 64;
        let w = LeafWord {
            key_len: 200,
            value_len: 0,
        }
        .encode();
        // SAFETY: as above.
        unsafe { pool.write_bytes(at, &w.to_le_bytes()).unwrap() };
        for p in [vec![1u8; 200], vec![1u8; 8], vec![1u8; 201]] {
            // The copy errs ("access past the end of the pool"); `holds`
            // errs too, or answers "absent" where the lengths or a word
            // in the pool already differ (docs/design.md §11).
            assert!(by_copy(&pool, at, &p).0.is_err());
            let (h, _) = in_place(&pool, at, &p);
            assert!(h.is_err() || !h.unwrap(), "{} bytes", p.len());
        }
    }
}
