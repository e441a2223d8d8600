//! The crash harness can fail: every injected bug (a dropped flush or fence
//! in the allocator or in an engine) must be reported, with a reproducible
//! seed and, for engines, a shrunk operation sequence.

use pmindex::pm::Fault;
use pmindex::sim::workload::Op;
use pmindex::sim::{run, run_ops, CrashConfig, ALLOC_SUBJECT};

fn must_catch(fault: Fault, subject: &str) {
    must_catch_with(fault, subject, &[]);
}

fn must_catch_with(fault: Fault, subject: &str, settings: &[(&str, &str)]) {
    let mut cfg = CrashConfig::new(subject);
    for (k, v) in settings {
        cfg.engine_config.insert(k.to_string(), v.to_string());
    }
    cfg.fault = Some(fault);
    cfg.states = 4000;
    let r = run(&cfg).expect("crash test runs");
    assert!(
        !r.failures.is_empty(),
        "fault {fault} on {subject} was not caught ({} images checked)",
        r.images
    );
    assert!(r.reproduce.contains(&format!("--fault {fault}")));
    println!(
        "{fault} on {subject}: caught after {} images: {}",
        r.images, r.failures[0].message
    );
    if subject != ALLOC_SUBJECT {
        let shrunk = r.shrunk.expect("engine failures are shrunk");
        assert!(!shrunk.is_empty() && shrunk.len() <= cfg.ops);
        println!("  shrunk to {} ops: {shrunk:?}", shrunk.len());
    }
}

#[test]
fn allocator_missing_mark_flush_is_caught() {
    must_catch(Fault::AllocSkipMarkFlush, ALLOC_SUBJECT);
}

#[test]
fn allocator_missing_record_fence_is_caught() {
    must_catch(Fault::AllocSkipRecordFence, ALLOC_SUBJECT);
}

#[test]
fn allocator_unflushed_heap_frontier_is_caught() {
    must_catch(Fault::AllocFrontierUnflushed, ALLOC_SUBJECT);
}

#[test]
fn pmlog_missing_append_fence_is_caught() {
    must_catch(Fault::PmlogSkipAppendFence, "pmlog");
}

#[test]
fn pmlog_missing_delete_flush_is_caught() {
    must_catch(Fault::PmlogSkipKillFlush, "pmlog");
}

/// Caught by the second crash after recovery's writes and their churn
/// (`CrashConfig::after_churn`, on by default); with `--after-churn 0`,
/// 20,000 images of the default workload pass.
#[test]
fn pmlog_recovery_loser_left_unflushed_is_caught() {
    must_catch(Fault::PmlogRecoveryLoserUnflushed, "pmlog");
}

#[test]
fn hart_missing_leaf_flush_is_caught() {
    must_catch(Fault::HartSkipLeafFlush, "hart");
}

#[test]
fn hart_commit_before_slot_is_caught() {
    must_catch(Fault::HartCommitBeforeSlot, "hart");
}

#[test]
fn hart_batch_without_its_fence_is_caught() {
    must_catch(Fault::HartBatchSkipFence, "hart");
}

#[test]
fn hart_early_leaf_left_live_is_caught() {
    must_catch(Fault::HartEarlyLeafLeftLive, "hart");
}

/// A DRAM bug: caught where the workload's ARTs have a point index, which
/// with the default threshold (ARTs of more than 64 keys) they never do.
#[test]
fn hart_point_index_kept_on_delete_is_caught() {
    must_catch_with(
        Fault::HartPointIndexKeptOnDelete,
        "hart",
        &[("hart.point_index_above", "0")],
    );
}

#[test]
fn wort_missing_leaf_flush_is_caught() {
    must_catch(Fault::WortSkipLeafFlush, "wort");
}

#[test]
fn wort_torn_split_header_is_caught() {
    must_catch(Fault::WortTornHeader, "wort");
}

#[test]
fn woart_node4_commit_before_child_is_caught() {
    must_catch(Fault::WoartNode4CommitFirst, "woart");
}

#[test]
fn woart_node16_bitmap_before_its_entry_is_caught() {
    must_catch(Fault::WoartNode16BitmapFirst, "woart");
}

#[test]
fn art_cow_missing_copy_flush_is_caught() {
    must_catch(Fault::ArtCowSkipCopyFlush, "art-cow");
}

#[test]
fn radix_batch_release_before_fence_is_caught() {
    must_catch(Fault::RadixBatchReleaseEarly, "art-cow");
}

#[test]
fn radix_batch_held_commits_without_their_fence_are_caught() {
    must_catch(Fault::RadixBatchHeldUnfenced, "art-cow");
}

#[test]
fn fptree_missing_insert_fence_is_caught() {
    must_catch(Fault::FptreeInsertSkipFence, "fptree");
}

/// Leaves of 3 slots, so that the workload splits leaves often.
#[test]
fn fptree_split_bitmap_before_link_is_caught() {
    must_catch_with(
        Fault::FptreeSplitBitmapFirst,
        "fptree",
        &[("fptree.leaf_slots", "3")],
    );
}

/// Leaves of 3 slots and a merge every 4 writes, so that the workload
/// merges often.
#[test]
fn dptree_flip_before_its_fence_is_caught() {
    must_catch_with(
        Fault::DptreeFlipUnfenced,
        "dptree",
        &[("dptree.leaf_slots", "3"), ("dptree.merge_min", "4")],
    );
}

#[test]
fn dptree_log_replayed_unchecked_is_caught() {
    must_catch(Fault::DptreeLogUnchecked, "dptree");
}

/// The default 512-byte nodes: the workload's keys fill leaves of up to
/// 27 entries, whose shifts cross lines.
#[test]
fn fastfair_shift_across_lines_unfenced_is_caught() {
    must_catch(Fault::FastfairShiftUnfenced, "fastfair");
}

/// Nodes of 4 entry slots, so that the workload splits often.
#[test]
fn fastfair_split_cut_before_link_is_caught() {
    must_catch_with(
        Fault::FastfairSplitCutFirst,
        "fastfair",
        &[("fastfair.node_bytes", "128")],
    );
}

/// Nodes of 4 entry slots, so that the workload's deletes merge nodes.
#[test]
fn fastfair_merge_unlinked_before_its_parent_entry_is_caught() {
    must_catch_with(
        Fault::FastfairMergeUnlinkFirst,
        "fastfair",
        &[("fastfair.node_bytes", "128")],
    );
}

/// The general workload's keys share a prefix with too few others to fill
/// a 24-slot NVNode: this one puts 40 keys under one prefix.
#[test]
fn art_bplus_split_bitmap_before_link_is_caught() {
    let mut cfg = CrashConfig::new("art-bplus");
    cfg.fault = Some(Fault::ArtBplusSplitBitmapFirst);
    cfg.states = 4000;
    let ops: Vec<Op> = (0..40u8)
        .map(|i| Op::Insert(vec![b'p', i.wrapping_mul(37)], vec![i; 8].into()))
        .collect();
    let r = run_ops(&cfg, ops).expect("crash test runs");
    assert!(
        !r.failures.is_empty(),
        "art-bplus-split-bitmap-first was not caught ({} images checked)",
        r.images
    );
    println!(
        "art-bplus-split-bitmap-first: caught after {} images: {}",
        r.images, r.failures[0].message
    );
}

#[test]
fn art_bplus_link_before_its_fence_is_caught() {
    must_catch(Fault::ArtBplusLinkUnfenced, "art-bplus");
}

#[test]
fn every_fault_is_covered_here() {
    // A new fault must get a test above (`hart-delete-fence-unlocked` is
    // caught only with writers on the same keys: its test is in
    // `crash_shared_keys.rs`; `hart-recovery-duplicate-unflushed` only by
    // a workload that makes duplicate leaves: in `crash_after_recovery.rs`;
    // `radix-compact-skip-copy-flush`, `radix-compact-group-unfenced` and
    // `hart-compact-skip-move-flush` and `hart-compact-skip-leaf-kill-flush`
    // only in a full pool that compacts: in `crash_full_pool.rs`).
    assert_eq!(Fault::ALL.len(), 33);
}
