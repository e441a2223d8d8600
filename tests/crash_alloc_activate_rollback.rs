//! Regression test for the first bug the crash simulator found.
//!
//! The allocator's lane record used to be a *redo* record: recovery rolled a
//! non-empty record forward. But the record can reach PM by eviction before
//! its fence completes, that is before the caller's flush of the block's
//! contents is durable; rolling forward then published a block with garbage
//! in it (pmlog: "segment has a bad magic number"). The record is now an undo
//! record. This test builds exactly that crash image: the lane record line
//! durable, the block's contents and the slot not.

use std::sync::Arc;

use pmindex::pm::{FlushKind, PersistConfig, PmObserver, Pool, PoolConfig};
use pmindex::sim::cache::{CacheModel, LineChoice};
use pmindex::sim::trace::Recorder;

#[test]
fn a_durable_record_without_durable_contents_does_not_publish_the_block() {
    let rec = Arc::new(Recorder::new());
    let cfg = PoolConfig {
        persist: PersistConfig::new(FlushKind::Eadr, None).unwrap(),
        observer: Some(Arc::clone(&rec) as Arc<dyn PmObserver>),
        fault: None,
        small_pages: false,
    };
    let size = 2 << 20;
    let pool = Pool::create_anonymous(size, "alloc", &cfg).unwrap();
    let lanes = pool.header().lanes_offset;
    let lanes_end = lanes + 64 * pmindex::pm::LANE_COUNT;
    let r = pool.reserve(1000).unwrap();
    let block = r.offset();
    // SAFETY: single-threaded; the block is reserved and unpublished.
    unsafe { pool.write_bytes(block, &[0xAB; 64]).unwrap() };
    pool.flush(block, 64);
    let slot = pool.root_slot(0).unwrap();
    let act = rec.position();
    pool.activate(r, slot).unwrap();
    drop(pool);
    let trace = rec.take();

    // Crash just before the first fence of `activate` (F1): the lane record
    // line reached PM (evicted), the block's line (flushed, not yet fenced)
    // did not. Every other pending line survives.
    let f1 = act
        + trace.events[act..]
            .iter()
            .position(|e| e.is_fence())
            .unwrap();
    let mut model = CacheModel::new(vec![0; size as usize], false);
    for e in &trace.events[..f1] {
        model.apply(&trace, e);
    }
    let block_line = block & !63;
    let (image, _) = model.image(|line, n, _| LineChoice {
        prefix: if line == block_line { 0 } else { n },
        tear: 0,
    });
    assert!(
        (lanes..lanes_end).any(|l| image[l as usize] != 0),
        "the record is in the image"
    );
    let cfg = PoolConfig {
        persist: PersistConfig::new(FlushKind::Eadr, None).unwrap(),
        ..PoolConfig::default()
    };
    let pool = Pool::open_image(&image, Some("alloc"), &cfg).unwrap();
    assert_eq!(
        pool.load_u64(slot).unwrap(),
        0,
        "the block must not be published"
    );
    assert!(
        pool.allocated_blocks().unwrap().is_empty(),
        "and it must not stay allocated (leak)"
    );
}
