//! Process-wide counts of the recovery cases met when pools are opened.
//!
//! A crash test proves something about a recovery path only if its crash
//! images reach that path: a run that never crashed inside an update says
//! nothing about update recovery. Recovery code calls [`record`] at each
//! case it handles, and tests read [`count`] after a crash run to show that
//! every case was exercised. The counts only grow; a test that needs exact
//! figures runs alone in its test binary.

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
    /// object's release and the chunk's recycling).
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
    /// after its last block was unlinked); it went back to the substrate.
    RadixChunkReleasedAtOpen,
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
    ];

    fn index(self) -> usize {
        Case::ALL
            .iter()
            .position(|&c| c == self)
            .expect("every case is in ALL")
    }
}

static COUNTS: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];
const _: () = assert!(Case::ALL.len() == COUNTS.len());

/// Notes that recovery met `case`.
pub fn record(case: Case) {
    COUNTS[case.index()].fetch_add(1, Ordering::Relaxed);
}

/// How often recovery has met `case` in this process.
pub fn count(case: Case) -> u64 {
    COUNTS[case.index()].load(Ordering::Relaxed)
}
