//! The DRAM figures with the counting allocator installed, as the
//! `pmindex` binary installs it.

use pmindex::bench::alloc::{dram_in_use, is_installed, CountingAlloc};
use pmindex::bench::keys::KeyKind;
use pmindex::bench::suite::{self, CustomSpec, RunOptions, Workload};
use pmindex::bench::NoProgress;
use pmindex::pm::FlushKind;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// The live-byte count is process-wide: the two tests take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_counting_allocator_sees_allocations_and_frees() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let v: Vec<u8> = Vec::with_capacity(1 << 20);
    assert!(is_installed());
    let with = dram_in_use().unwrap();
    drop(v);
    let without = dram_in_use().unwrap();
    // The test harness may allocate meanwhile, so only roughly.
    assert!(with >= 1 << 20);
    assert!(with.saturating_sub(without) >= (1 << 20) - (256 << 10));
}

#[test]
fn a_run_reports_measured_dram_per_record() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("pmindex-bench-dram-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let s = suite::custom(&CustomSpec {
        keys: vec![KeyKind::Sparse],
        records: 20_000,
        workloads: vec![Workload::Basic],
        ..CustomSpec::default()
    })
    .unwrap();
    let report = suite::run(
        &s,
        &RunOptions {
            engines: vec!["pmlog".into()],
            rounds: Some(1),
            dir: Some(dir.clone()),
            flush: FlushKind::Eadr,
            ..RunOptions::default()
        },
        &mut NoProgress,
    )
    .unwrap();
    assert!(report.dram_measured);
    let e = report.experiment("basic").unwrap().engine("pmlog").unwrap();
    let mem = e.memory.unwrap();
    // pmlog keeps a DRAM B-tree entry per key: tens of bytes per record,
    // close to its own estimate.
    let dram = mem.dram_bytes_per_record.unwrap();
    assert!(dram > 20.0 && dram < 1000.0, "{dram}");
    assert!(dram > 0.5 * mem.engine_dram_bytes_per_record, "{mem:?}");
    assert!(e.recovery.unwrap().dram_bytes_per_record_after.unwrap() > 20.0);
    assert!(!report.to_string().contains("DRAM B/rec: n/a"));
    std::fs::remove_dir(&dir).unwrap();
}
