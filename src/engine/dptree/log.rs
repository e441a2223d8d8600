//! The buffer tree's log (DPTree §2.1, Fig. 2): a persistent list of
//! pages of 8-byte entries, each entry one failure-atomic word, written
//! and persisted with the put's one fence.
//!
//! | page offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `next`: the next page, or null |
//! | 8 `i` (`i` = 1 to [`ENTRIES`]) | 8 | entry `i` |
//!
//! An entry is `stamp << 46 | rec | tomb << 1 | valid`: the offset of a
//! record ([`super::record`], 64-byte aligned and below 2^46, so its low 6
//! bits and high 18 are free), bit 1 set for a delete, bit 0 the validity
//! bit, and in bits 46..64 the low 18 bits of the open the entry was
//! written in (the superblock's `opens`), which a put's record must match. An entry is valid when its
//! validity bit is the low bit of the global version `gv`; a valid entry
//! whose `rec` is 0 is padding. The log is read from the first page's entry
//! 1 up to the first entry that is not valid.
//!
//! The paper's scheme, for entries of one word: a page is **ready** for a
//! version when none of its entries is valid in it, and entries are
//! written in order, so the valid ones are always a prefix. After a merge
//! the pages the log used hold valid entries of the old version in every
//! place (the merge pads the last page's tail with valid padding), which
//! the new version reads as invalid: they are ready for it, with no write
//! (the paper's two free lists of pages, one per validity bit). A page
//! the log did not reach in a version would still hold the old entries of
//! the version before, valid again in the next, so a merge unlinks such
//! pages and frees them. A new page is made ready before it is linked (one
//! fence; none for a page known to be zero, which version 1's entries find
//! invalid), and a page found past the end of the log at open, whose
//! state is not known, is made ready before the log enters it.

use crate::engine::radix::chunks::Chunks;
use crate::error::{Error, Result};
use crate::pm::Pool;

/// Bytes of a page.
pub const PAGE: u64 = 4096;
/// Entries in a page.
pub const ENTRIES: u64 = PAGE / 8 - 1;

/// Bits of an entry that hold its record's offset.
const REC_MASK: u64 = ((1 << 46) - 1) & !63;
/// The bits of `opens` an entry keeps, in its bits 46..64.
pub const STAMP_MASK: u64 = (1 << 18) - 1;

/// The entry word of `rec` (a delete if `tomb`) in version bit `vb`,
/// written in open `opens`.
pub fn entry(rec: u64, tomb: bool, vb: u64, opens: u64) -> u64 {
    debug_assert_eq!(rec & !REC_MASK, 0);
    (opens & STAMP_MASK) << 46 | rec | u64::from(tomb) << 1 | vb
}

/// What a valid entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The record.
    pub rec: u64,
    /// A delete.
    pub tomb: bool,
}

/// The log's place in DRAM.
pub struct Log {
    /// The page list, in order.
    pages: Vec<u64>,
    /// Index in `pages` of the page the next entry goes to (`pages` not
    /// empty), with `next_entry` the entry's index (1 to [`ENTRIES`] + 1:
    /// one past the end means the page is full).
    page: usize,
    next_entry: u64,
    /// `pages[..known]` are behind the end of the log, or ready.
    known: usize,
}

impl Log {
    /// An empty log without pages.
    pub fn empty() -> Log {
        Log {
            pages: Vec::new(),
            page: 0,
            next_entry: 1,
            known: 0,
        }
    }

    /// The pages, in list order.
    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Entries that can be appended without a new page.
    pub fn room(&self) -> u64 {
        if self.pages.is_empty() {
            return 0;
        }
        let here = ENTRIES + 1 - self.next_entry;
        here + ENTRIES * (self.pages.len() - 1 - self.page) as u64
    }

    /// Adds a page at the end of the list, past the log's end: made ready
    /// for version bit `vb`, durable (one fence, or none for a zero page
    /// that version 1 reads as ready), then linked (store, flush; not
    /// fenced: a link lost with a crash leaves the page free). So a link
    /// is never durable before the page it names is ready.
    pub fn grow(&mut self, pool: &Pool, heap: &mut Chunks, sb: u64, vb: u64) -> Result<()> {
        let b = heap.reserve(pool, PAGE)?;
        let p = b.offset();
        if !(b.zeroed() && vb == 1) {
            let r = pool.store_u64(p, 0).and_then(|()| make_ready(pool, p, vb));
            if let Err(e) = r {
                heap.cancel(pool, b)?;
                return Err(e);
            }
            pool.flush(p, 8);
            pool.fence();
        }
        let link = self
            .pages
            .last()
            .map_or(sb + super::superblock::LOG, |&l| l);
        if let Err(e) = pool.store_u64(link, p) {
            heap.release(pool, p)?;
            return Err(e);
        }
        pool.flush(link, 8);
        if self.pages.is_empty() {
            self.page = 0;
            self.next_entry = 1;
        }
        // Known if every page before it is.
        if self.known == self.pages.len() {
            self.known += 1;
        }
        self.pages.push(p);
        Ok(())
    }

    /// Appends `e` (not fenced: the caller's fence makes it durable),
    /// taking a new page ([`Log::grow`]) if there is no room.
    pub fn append(&mut self, pool: &Pool, heap: &mut Chunks, sb: u64, e: u64) -> Result<()> {
        let vb = e & 1;
        if self.room() == 0 {
            self.grow(pool, heap, sb, vb)?;
        }
        if self.next_entry > ENTRIES {
            let at = self.page + 1;
            if at >= self.known {
                make_ready(pool, self.pages[at], vb)?;
                pool.fence();
                self.known = at + 1;
            }
            self.page = at;
            self.next_entry = 1;
        }
        let at = self.pages[self.page] + 8 * self.next_entry;
        pool.store_u64(at, e)?;
        pool.flush(at, 8);
        self.next_entry += 1;
        Ok(())
    }

    /// Before a merge's flip (not fenced: the flip's fence orders it): pads
    /// the current page's tail with valid padding of version bit `vb` and
    /// unlinks the pages past it. Returns those pages, to be freed once the
    /// flip is durable. Afterwards every page of the list is ready for the
    /// next version; [`Log::restart`] moves the log's end to the start.
    pub fn seal(&mut self, pool: &Pool, vb: u64) -> Result<Vec<u64>> {
        let Some(&p) = self.pages.get(self.page) else {
            return Ok(Vec::new());
        };
        if self.next_entry <= ENTRIES {
            let from = p + 8 * self.next_entry;
            let words = ENTRIES + 1 - self.next_entry;
            let pad = vec![vb; words as usize];
            // SAFETY: the page is the log's, written only by the writer,
            // which holds the tree exclusively.
            unsafe { pool.write_bytes(from, bytes_of(&pad))? };
            pool.flush(from, 8 * words);
            self.next_entry = ENTRIES + 1;
        }
        let cut = self.pages.split_off(self.page + 1);
        if !cut.is_empty() {
            pool.store_u64(p, 0)?;
            pool.flush(p, 8);
        }
        Ok(cut)
    }

    /// Stores an invalid entry of version bit `vb` where the next entry
    /// goes and flushes it (not fenced): recovery's repair of an entry
    /// whose record a crash left unwritten.
    pub fn clear_end(&self, pool: &Pool, vb: u64) -> Result<()> {
        let at = self.pages[self.page] + 8 * self.next_entry;
        pool.store_u64(at, vb ^ 1)?;
        pool.flush(at, 8);
        Ok(())
    }

    /// After a flip: the log starts again at the first page's first entry,
    /// every page ready.
    pub fn restart(&mut self) {
        self.page = 0;
        self.next_entry = 1;
        self.known = self.pages.len();
    }
}

/// The words as bytes.
fn bytes_of(words: &[u64]) -> &[u8] {
    // SAFETY: u64s have no padding and every byte pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
}

/// Stores invalid entries of version bit `vb` in every entry of page `p`
/// and flushes them (not fenced).
fn make_ready(pool: &Pool, p: u64, vb: u64) -> Result<()> {
    let words = vec![vb ^ 1; ENTRIES as usize];
    // SAFETY: the page is the log's and past its end: nothing reads it.
    unsafe { pool.write_bytes(p + 8, bytes_of(&words))? };
    pool.flush(p + 8, 8 * ENTRIES);
    Ok(())
}

/// What [`walk`] found.
pub struct Walked {
    /// The log's place.
    pub log: Log,
    /// The valid entries with whole records, in order (no padding).
    pub entries: Vec<Entry>,
    /// Whether the log ended at an entry whose record was not whole (an
    /// append a crash cut short).
    pub torn: bool,
}

/// Reads the log whose first page `sb.log` names under global version
/// `gv`, marking every page of the list and every record of its entries in
/// `heap`. The walk ends at the first invalid entry, or at a valid one
/// whose record is not whole (its put had not returned: the entry is
/// overwritten by the next append). With `checked` false (an injected
/// fault) records are not checked.
pub fn walk(pool: &Pool, heap: &mut Chunks, sb: u64, gv: u64, checked: bool) -> Result<Walked> {
    let vb = gv & 1;
    let bad = |off: u64, what: &str| Error::corrupt(off, format!("dptree: {what}"));
    let mut pages = Vec::new();
    let mut at = pool.load_u64(sb + super::superblock::LOG)?;
    while at != 0 {
        if heap
            .block_size(at)
            .map_err(|_| bad(at, "the log names no block"))?
            < PAGE
        {
            return Err(bad(at, "the log names a block smaller than a page"));
        }
        heap.mark(at)
            .map_err(|_| bad(at, "the log's pages form a cycle"))?;
        pages.push(at);
        at = pool.load_u64(at)?;
    }
    let mut entries = Vec::new();
    let mut end = None;
    let mut torn = false;
    'pages: for (i, &p) in pages.iter().enumerate() {
        pool.touch(p, PAGE);
        for j in 1..=ENTRIES {
            let w = pool.load_u64(p + 8 * j)?;
            if w & 1 != vb {
                end = Some((i, j));
                break 'pages;
            }
            let rec = w & REC_MASK;
            if rec == 0 {
                if w & !1 != 0 {
                    return Err(bad(p + 8 * j, "a log entry with bits but no record"));
                }
                continue;
            }
            let block = heap
                .block_size(rec)
                .map_err(|_| bad(p + 8 * j, "a log entry names no block"))?;
            let tomb = w & 2 != 0;
            // A delete's entry names the record of the put it deletes,
            // earlier in the log and durable before it: marked there.
            if !tomb {
                let stamp = w >> 46;
                if checked && !super::record::is_whole(pool, rec, block, gv, stamp)? {
                    torn = true;
                    end = Some((i, j));
                    break 'pages;
                }
                heap.mark(rec)
                    .map_err(|_| bad(rec, "a record is reached twice"))?;
            }
            entries.push(Entry { rec, tomb });
        }
    }
    let (page, next_entry) = end.unwrap_or((pages.len().saturating_sub(1), ENTRIES + 1));
    let known = if pages.is_empty() { 0 } else { page + 1 };
    Ok(Walked {
        log: Log {
            pages,
            page,
            next_entry,
            known,
        },
        entries,
        torn,
    })
}
