//! Process-wide counts of the recovery cases met when pools are opened.
//!
//! A crash test proves something about a recovery path only if its crash
//! images reach that path: a run that never crashed inside an update says
//! nothing about update recovery. Recovery code calls [`record`] at each
//! case it handles, and tests read [`count`] after a crash run to show that
//! every case was exercised. The counts only grow; a test that needs exact
//! figures runs alone in its test binary.
//!
//! The command line reads them too: `pmindex check` reports what recovery
//! repaired when it opened the pool ([`snapshot`] before and after; the
//! cases that are [`Case::is_repair`]). A crash leaves about one repair per
//! write in flight; many more point to damage (docs/design.md §8, the
//! limits of the formats).

use std::sync::atomic::{AtomicU64, Ordering};

/// A recovery case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Case {
    /// Allocator: an unfinished `activate` was rolled back.
    AllocActivateRolledBack,
    /// Allocator: an unfinished `replace` was rolled back.
    AllocReplaceRolledBack,
    /// Allocator: an unfinished `free` or `free_and_store` was rolled back
    /// (HART's chunk recycling, Algorithm 6, is a `free_and_store`).
    AllocFreeRolledBack,
    /// HART: a leaf had a valid commit word but no slot whose CRC matched
    /// (a torn insert); it is free again.
    HartTornLeaf,
    /// HART: the active slot failed its CRC and the other slot was used, and
    /// the commit word repaired (a torn update: the three-pointer update
    /// log's recovery, Algorithm 3).
    HartUpdateFallback,
    /// HART: a slot pointed to a large block that was no live value (a
    /// crash between writing a slot and activating or freeing the block);
    /// the block was freed.
    HartLeftoverBlock,
    /// HART: an empty chunk was recycled at open (a crash between the last
    /// object's release and the chunk's recycling, or, in the `tight`
    /// order, leaves whose release a thread deferred when the pool closed).
    HartChunkRecycledAtOpen,
    /// HART: a key was held by two live leaves (a crash during an upsert
    /// that wrote its leaf before its descent and found the key present);
    /// one was killed.
    HartDuplicateLeaf,
    /// Radix trees: a node's depth differed from the depth it is reached
    /// at (a crash inside a split or a merge); its header was rebuilt from
    /// its leaves (WORT Algorithm 2).
    RadixHeaderRepaired,
    /// Radix trees: a WOART node held a pointer it does not list (a crash
    /// inside an insert or a delete); the pointer was cleared (its block is
    /// free, being unreached).
    RadixOrphanCleared,
    /// Radix trees: a chunk held no block the tree reaches (a crash after a
    /// new chunk was linked and before a block of it was published, or
    /// after its last block was unlinked, or chunks emptied by deletes,
    /// which are released only at open); it went back to the substrate.
    RadixChunkReleasedAtOpen,
    /// pmlog: a torn append after the log's last valid record (bytes there
    /// starting with the next sequence number) was zeroed before appends
    /// resume. Stale bytes of a reused block, zeroed the same way, are not
    /// counted.
    PmlogTornTail,
    /// pmlog: a record superseded by a newer one of its key was still
    /// alive (a crash inside a replace or delete); it was killed.
    PmlogLoserKilled,
    /// fptree: a leaf and the next one held the same records (a crash
    /// inside a split, after the old leaf's pointer to the new one and
    /// before its new bitmap); the split was finished.
    FptreeSplitFinished,
    /// fptree: an empty leaf was in the leaf list (a crash between a
    /// delete's commit and the leaf's unlinking); it was unlinked.
    FptreeEmptyLeafUnlinked,
    /// fastfair: a shift a crash cut short was finished (its trace removed).
    FastfairShiftFinished,
    /// fastfair: a split's upper half, which a crash left in the old node
    /// too, was cut off.
    FastfairSplitCut,
    /// fastfair: a split node that a crash left out of its parent got its
    /// separator there.
    FastfairSeparatorLinked,
    /// art-bplus: an NVNode and the next one held the same records (a
    /// crash inside a split, after the old NVNode's pointer to the new one
    /// and before its new bitmap); the split was finished.
    ArtBplusSplitFinished,
}

impl Case {
    /// Every case.
    pub const ALL: &'static [Case] = &[
        Case::AllocActivateRolledBack,
        Case::AllocReplaceRolledBack,
        Case::AllocFreeRolledBack,
        Case::HartTornLeaf,
        Case::HartUpdateFallback,
        Case::HartLeftoverBlock,
        Case::HartChunkRecycledAtOpen,
        Case::HartDuplicateLeaf,
        Case::RadixHeaderRepaired,
        Case::RadixOrphanCleared,
        Case::RadixChunkReleasedAtOpen,
        Case::PmlogTornTail,
        Case::PmlogLoserKilled,
        Case::FptreeSplitFinished,
        Case::FptreeEmptyLeafUnlinked,
        Case::FastfairShiftFinished,
        Case::FastfairSplitCut,
        Case::FastfairSeparatorLinked,
        Case::ArtBplusSplitFinished,
    ];

    /// Whether the case repairs what a crash (or damage) left, as opposed
    /// to housekeeping that a clean close also leaves to the next open
    /// (empty chunks given back).
    pub fn is_repair(self) -> bool {
        !matches!(
            self,
            Case::HartChunkRecycledAtOpen | Case::RadixChunkReleasedAtOpen
        )
    }

    /// The case's name in JSON (`snake_case`).
    pub fn name(self) -> &'static str {
        match self {
            Case::AllocActivateRolledBack => "alloc_activate_rolled_back",
            Case::AllocReplaceRolledBack => "alloc_replace_rolled_back",
            Case::AllocFreeRolledBack => "alloc_free_rolled_back",
            Case::HartTornLeaf => "hart_torn_leaf",
            Case::HartUpdateFallback => "hart_update_fallback",
            Case::HartLeftoverBlock => "hart_leftover_block",
            Case::HartChunkRecycledAtOpen => "hart_chunk_recycled_at_open",
            Case::HartDuplicateLeaf => "hart_duplicate_leaf",
            Case::RadixHeaderRepaired => "radix_header_repaired",
            Case::RadixOrphanCleared => "radix_orphan_cleared",
            Case::RadixChunkReleasedAtOpen => "radix_chunk_released_at_open",
            Case::PmlogTornTail => "pmlog_torn_tail",
            Case::PmlogLoserKilled => "pmlog_loser_killed",
            Case::FptreeSplitFinished => "fptree_split_finished",
            Case::FptreeEmptyLeafUnlinked => "fptree_empty_leaf_unlinked",
            Case::FastfairShiftFinished => "fastfair_shift_finished",
            Case::FastfairSplitCut => "fastfair_split_cut",
            Case::FastfairSeparatorLinked => "fastfair_separator_linked",
            Case::ArtBplusSplitFinished => "art_bplus_split_finished",
        }
    }

    /// What recovery did, for a person: the thing repaired, plural.
    pub fn describe(self) -> &'static str {
        match self {
            Case::AllocActivateRolledBack => "unfinished allocations rolled back",
            Case::AllocReplaceRolledBack => "unfinished block replacements rolled back",
            Case::AllocFreeRolledBack => "unfinished frees rolled back",
            Case::HartTornLeaf => "torn leaves dropped (their keys are gone)",
            Case::HartUpdateFallback => "torn updates undone (the older value kept)",
            Case::HartLeftoverBlock => "leftover value blocks freed",
            Case::HartChunkRecycledAtOpen => "empty chunks recycled",
            Case::HartDuplicateLeaf => "duplicate leaves of one key killed",
            Case::RadixHeaderRepaired => "node headers rebuilt from their leaves",
            Case::RadixOrphanCleared => {
                "unlisted child pointers cleared (what they reached is gone)"
            }
            Case::RadixChunkReleasedAtOpen => "unreached chunks released",
            Case::PmlogTornTail => "torn log tails zeroed",
            Case::PmlogLoserKilled => "superseded records killed",
            Case::FptreeSplitFinished => "torn leaf splits finished",
            Case::FptreeEmptyLeafUnlinked => "empty leaves unlinked",
            Case::FastfairShiftFinished => "torn node shifts finished",
            Case::FastfairSplitCut => "torn node splits cut",
            Case::FastfairSeparatorLinked => "split nodes linked into their parents",
            Case::ArtBplusSplitFinished => "torn NVNode splits finished",
        }
    }

    fn index(self) -> usize {
        Case::ALL
            .iter()
            .position(|&c| c == self)
            .expect("every case is in ALL")
    }
}

static COUNTS: [AtomicU64; 19] = [const { AtomicU64::new(0) }; 19];
const _: () = assert!(Case::ALL.len() == COUNTS.len());

/// Notes that recovery met `case`.
pub fn record(case: Case) {
    COUNTS[case.index()].fetch_add(1, Ordering::Relaxed);
}

/// How often recovery has met `case` in this process.
pub fn count(case: Case) -> u64 {
    COUNTS[case.index()].load(Ordering::Relaxed)
}

/// Every case's count now, in [`Case::ALL`]'s order.
pub fn snapshot() -> Vec<u64> {
    Case::ALL.iter().map(|&c| count(c)).collect()
}

/// The cases met since `before` (a [`snapshot`]), with how often: what one
/// open's recovery did, when nothing else opened a pool meanwhile.
pub fn since(before: &[u64]) -> Vec<(Case, u64)> {
    Case::ALL
        .iter()
        .zip(before)
        .map(|(&c, &b)| (c, count(c).saturating_sub(b)))
        .filter(|&(_, n)| n > 0)
        .collect()
}
