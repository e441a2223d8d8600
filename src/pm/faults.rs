//! Fault injection for the crash harness's self-test.
//!
//! A pool can be created with one [`Fault`] switched on (through
//! [`super::PoolConfig::fault`]); the code at the named site then drops one
//! flush or fence (or, for an engine's DRAM index, one update of it). The crash harness must report failures for every fault:
//! that is how we know it can fail. The switch is per pool, so a faulty pool
//! in one test cannot disturb another test running in the same process, and
//! a pool without a fault pays one predictable branch at each site.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A persist that can be dropped on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum Fault {
    /// Allocator: the apply step does not flush the block's bitmap word or
    /// descriptors (so a durable slot can point to a block that recovery
    /// thinks is free).
    AllocSkipMarkFlush,
    /// Allocator: no fence F1 after writing the lane record (the effects can
    /// become durable without the record).
    AllocSkipRecordFence,
    /// Allocator: the heap frontier is raised without a flush or fence
    /// before chunks past it are handed out (a crash can leave data in a
    /// chunk that the frontier says was never touched).
    AllocFrontierUnflushed,
    /// pmlog: an appended record is flushed but not fenced before the put
    /// returns (an acknowledged put can be lost).
    PmlogSkipAppendFence,
    /// pmlog: a delete sets `DEAD` without flushing it (an acknowledged
    /// delete can be undone).
    PmlogSkipKillFlush,
    /// pmlog: recovery sets `DEAD` on a superseded record that a crash left
    /// alive without flushing it (the record comes back once the segment of
    /// the record that superseded it is freed).
    PmlogRecoveryLoserUnflushed,
    /// hart: an insert or update flushes the value but not the leaf's line 0
    /// (an acknowledged insert or update can be lost).
    HartSkipLeafFlush,
    /// hart: an update stores the new commit word before the new slot (the
    /// commit can reach PM pointing at a slot that was never written).
    HartCommitBeforeSlot,
    /// hart: a batch of puts returns without its fence (acknowledged items
    /// can be lost).
    HartBatchSkipFence,
    /// hart: a delete fences its cleared commit word only after it lets go
    /// of the ART's lock (another thread can act on the delete, and return,
    /// before the delete is durable). Caught only with writers on the same
    /// keys (`pmindex crashtest --shared-keys`): the deleting thread's own
    /// operation is still in flight until that fence.
    HartDeleteFenceUnlocked,
    /// hart: an upsert that wrote its leaf before the descent ("Leaf
    /// first") and then found the key present updates the indexed leaf but
    /// leaves the early one live in PM, unreachable (a later delete of the
    /// key can come back at recovery).
    HartEarlyLeafLeftLive,
    /// hart: a delete leaves its key's entry in the ART's point index (a
    /// DRAM bug, no persist dropped: the entry then leads searches to a
    /// freed leaf). Caught only where ARTs of the workload have an index
    /// (`hart.point_index_above=0` for the crash simulator's small ones).
    HartPointIndexKeptOnDelete,
    /// hart: recovery kills the second live leaf of a key (an early leaf
    /// of an upsert in flight) without flushing its cleared commit word.
    /// Nothing is wrong until the key is deleted or updated and the pool
    /// crashes again: the killed leaf then comes back. Caught by the
    /// crash harness's writes after recovery and second crash, where the
    /// workload makes such leaves (`hart.point_index=off`).
    HartRecoveryDuplicateUnflushed,
    /// hart: a compaction's move writes a value's copy into its new object
    /// without flushing it (the update that names the copy can be durable
    /// and the copy not, after the old object's chunk went back to the
    /// pool). Caught only in a full pool that compacts.
    HartCompactSkipMoveFlush,
    /// hart: a compaction's leaf move clears the old leaf's commit word
    /// without flushing it (the old leaf, at the lower offset, can come
    /// back after a crash and win over its copy, which a later update or
    /// delete of the key changed). Caught only in a full pool that
    /// compacts leaves.
    HartCompactSkipLeafKillFlush,
    /// wort: a new leaf is not flushed before it is activated (an
    /// acknowledged insert can point to a leaf that never reached PM).
    WortSkipLeafFlush,
    /// wort: a split stores the node's new header as two 4-byte halves, not
    /// one 8-byte store (a crash between them leaves a new prefix with the
    /// old depth, which no depth check can see).
    WortTornHeader,
    /// woart: a NODE4 insert stores its commit word before activating the
    /// child into the pointer it names (Algorithm 3 in the wrong order).
    WoartNode4CommitFirst,
    /// woart: a NODE16 insert whose pointer is in the bitmap's line stores
    /// the bitmap before the key and the pointer (the same-line order that
    /// lets it skip their flush and its fence, reversed).
    WoartNode16BitmapFirst,
    /// art-cow: a copy-on-write copy is not flushed before it is swapped
    /// into its parent.
    ArtCowSkipCopyFlush,
    /// Radix trees: a batch of puts gives a block back as soon as a commit
    /// unlinks it, before the batch's last fence (a later item can take
    /// and overwrite it while the unlinking commit can still be lost).
    RadixBatchReleaseEarly,
    /// Radix trees: a batch of puts stores the commits it held back
    /// without the fence before them (a commit can reach PM before the
    /// node or pointer it publishes).
    RadixBatchHeldUnfenced,
    /// Radix trees: a compaction does not flush the copy of a block it
    /// moves before it swings the pointer to it (a crash can leave the
    /// pointer durable and the copy not).
    RadixCompactSkipCopyFlush,
    /// Radix trees: a compaction stores the pointers of a group of moves
    /// without the fence after the group's copies (a pointer can reach PM
    /// before the copy it names, flushed but not fenced).
    RadixCompactGroupUnfenced,
    /// fptree: an insert stores its bitmap bit without the fence before it
    /// (the commit can reach PM before the record or the slot it names).
    FptreeInsertSkipFence,
    /// fptree: a split stores the old leaf's lower-half bitmap before its
    /// pointer to the new leaf (a crash between loses the upper half).
    FptreeSplitBitmapFirst,
    /// dptree: a merge stores the flipped global version without the fence
    /// after the new version's leaves and metadata (the flip can reach PM
    /// before what it commits).
    DptreeFlipUnfenced,
    /// dptree: recovery replays the log without checking its entries'
    /// records (an entry that reached PM before its record is read as a
    /// write).
    DptreeLogUnchecked,
    /// fastfair: a shift moves from one line of a node to the next without
    /// the fence between (a later line's copy can be lost while an earlier
    /// line's overwrite of the entry it copied is durable).
    FastfairShiftUnfenced,
    /// fastfair: a split cuts the old node's upper half before it links
    /// the new node (a crash between loses the upper half).
    FastfairSplitCutFirst,
    /// fastfair: a merge unlinks the right node from its level before it
    /// removes the node's entry from the parent (a crash between leaves a
    /// parent pointing to a node its level no longer holds).
    FastfairMergeUnlinkFirst,
    /// art-bplus: a split stores the old NVNode's lower-half bitmap before
    /// its pointer to the new NVNode (a crash between loses the upper half).
    ArtBplusSplitBitmapFirst,
    /// art-bplus: a new prefix's NVNode is linked into the leaf list
    /// without the fence after it is written (the link can reach PM before
    /// the NVNode it names).
    ArtBplusLinkUnfenced,
}

impl Fault {
    /// Every fault.
    pub const ALL: &'static [Fault] = &[
        Fault::AllocSkipMarkFlush,
        Fault::AllocSkipRecordFence,
        Fault::AllocFrontierUnflushed,
        Fault::PmlogSkipAppendFence,
        Fault::PmlogSkipKillFlush,
        Fault::PmlogRecoveryLoserUnflushed,
        Fault::HartSkipLeafFlush,
        Fault::HartCommitBeforeSlot,
        Fault::HartBatchSkipFence,
        Fault::HartDeleteFenceUnlocked,
        Fault::HartEarlyLeafLeftLive,
        Fault::HartPointIndexKeptOnDelete,
        Fault::HartRecoveryDuplicateUnflushed,
        Fault::HartCompactSkipMoveFlush,
        Fault::HartCompactSkipLeafKillFlush,
        Fault::WortSkipLeafFlush,
        Fault::WortTornHeader,
        Fault::WoartNode4CommitFirst,
        Fault::WoartNode16BitmapFirst,
        Fault::ArtCowSkipCopyFlush,
        Fault::RadixBatchReleaseEarly,
        Fault::RadixBatchHeldUnfenced,
        Fault::RadixCompactSkipCopyFlush,
        Fault::RadixCompactGroupUnfenced,
        Fault::FptreeInsertSkipFence,
        Fault::FptreeSplitBitmapFirst,
        Fault::DptreeFlipUnfenced,
        Fault::DptreeLogUnchecked,
        Fault::FastfairShiftUnfenced,
        Fault::FastfairSplitCutFirst,
        Fault::FastfairMergeUnlinkFirst,
        Fault::ArtBplusSplitBitmapFirst,
        Fault::ArtBplusLinkUnfenced,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::AllocSkipMarkFlush => "alloc-skip-mark-flush",
            Fault::AllocSkipRecordFence => "alloc-skip-record-fence",
            Fault::AllocFrontierUnflushed => "alloc-frontier-unflushed",
            Fault::PmlogSkipAppendFence => "pmlog-skip-append-fence",
            Fault::PmlogSkipKillFlush => "pmlog-skip-kill-flush",
            Fault::PmlogRecoveryLoserUnflushed => "pmlog-recovery-loser-unflushed",
            Fault::HartSkipLeafFlush => "hart-skip-leaf-flush",
            Fault::HartCommitBeforeSlot => "hart-commit-before-slot",
            Fault::HartBatchSkipFence => "hart-batch-skip-fence",
            Fault::HartDeleteFenceUnlocked => "hart-delete-fence-unlocked",
            Fault::HartEarlyLeafLeftLive => "hart-early-leaf-left-live",
            Fault::HartPointIndexKeptOnDelete => "hart-point-index-kept-on-delete",
            Fault::HartRecoveryDuplicateUnflushed => "hart-recovery-duplicate-unflushed",
            Fault::HartCompactSkipMoveFlush => "hart-compact-skip-move-flush",
            Fault::HartCompactSkipLeafKillFlush => "hart-compact-skip-leaf-kill-flush",
            Fault::WortSkipLeafFlush => "wort-skip-leaf-flush",
            Fault::WortTornHeader => "wort-torn-header",
            Fault::WoartNode4CommitFirst => "woart-node4-commit-first",
            Fault::WoartNode16BitmapFirst => "woart-node16-bitmap-first",
            Fault::ArtCowSkipCopyFlush => "art-cow-skip-copy-flush",
            Fault::RadixBatchReleaseEarly => "radix-batch-release-early",
            Fault::RadixBatchHeldUnfenced => "radix-batch-held-unfenced",
            Fault::RadixCompactSkipCopyFlush => "radix-compact-skip-copy-flush",
            Fault::RadixCompactGroupUnfenced => "radix-compact-group-unfenced",
            Fault::FptreeInsertSkipFence => "fptree-insert-skip-fence",
            Fault::FptreeSplitBitmapFirst => "fptree-split-bitmap-first",
            Fault::DptreeFlipUnfenced => "dptree-flip-unfenced",
            Fault::DptreeLogUnchecked => "dptree-log-unchecked",
            Fault::FastfairShiftUnfenced => "fastfair-shift-unfenced",
            Fault::FastfairSplitCutFirst => "fastfair-split-cut-first",
            Fault::FastfairMergeUnlinkFirst => "fastfair-merge-unlink-first",
            Fault::ArtBplusSplitBitmapFirst => "art-bplus-split-bitmap-first",
            Fault::ArtBplusLinkUnfenced => "art-bplus-link-unfenced",
        }
    }

    /// The engine whose code has the site (`None`: the substrate).
    pub fn engine(self) -> Option<&'static str> {
        match self {
            Fault::AllocSkipMarkFlush
            | Fault::AllocSkipRecordFence
            | Fault::AllocFrontierUnflushed => None,
            Fault::PmlogSkipAppendFence
            | Fault::PmlogSkipKillFlush
            | Fault::PmlogRecoveryLoserUnflushed => Some("pmlog"),
            Fault::HartSkipLeafFlush
            | Fault::HartCommitBeforeSlot
            | Fault::HartBatchSkipFence
            | Fault::HartDeleteFenceUnlocked
            | Fault::HartEarlyLeafLeftLive
            | Fault::HartPointIndexKeptOnDelete
            | Fault::HartRecoveryDuplicateUnflushed
            | Fault::HartCompactSkipMoveFlush
            | Fault::HartCompactSkipLeafKillFlush => Some("hart"),
            Fault::WortSkipLeafFlush | Fault::WortTornHeader | Fault::RadixCompactSkipCopyFlush => {
                Some("wort")
            }
            Fault::WoartNode4CommitFirst
            | Fault::WoartNode16BitmapFirst
            | Fault::RadixCompactGroupUnfenced => Some("woart"),
            Fault::ArtCowSkipCopyFlush
            | Fault::RadixBatchReleaseEarly
            | Fault::RadixBatchHeldUnfenced => Some("art-cow"),
            Fault::FptreeInsertSkipFence | Fault::FptreeSplitBitmapFirst => Some("fptree"),
            Fault::DptreeFlipUnfenced | Fault::DptreeLogUnchecked => Some("dptree"),
            Fault::FastfairShiftUnfenced
            | Fault::FastfairSplitCutFirst
            | Fault::FastfairMergeUnlinkFirst => Some("fastfair"),
            Fault::ArtBplusSplitBitmapFirst | Fault::ArtBplusLinkUnfenced => Some("art-bplus"),
        }
    }
}

impl Fault {
    /// Whether the site of this fault lies on a path that `engine` (an
    /// engine's name, or `alloc` for the crash simulator's allocator
    /// workload) runs: the substrate's faults on every one, an engine's on
    /// its own, the radix trees' on all three of them (their write paths
    /// are one module). A fault given for another engine would drop
    /// nothing and its self-test would pass for no reason.
    pub fn acts_on(self, engine: &str) -> bool {
        const RADIX: [&str; 3] = ["wort", "woart", "art-cow"];
        match self.engine() {
            None => true,
            Some(e) if RADIX.contains(&e) => RADIX.contains(&engine),
            Some(e) => e == engine,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fault {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Fault::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown fault `{s}` (known: {})",
                    Fault::ALL
                        .iter()
                        .map(|f| f.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }
}
