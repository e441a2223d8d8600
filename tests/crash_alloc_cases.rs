//! The crash simulator on the allocator alone reaches each of the
//! allocator's recovery cases: an unfinished activate, replace and free
//! rolled back (before 2026-12-02 no test required the replace case).
//!
//! The counts in [`pmindex::pm::cases`] are process-wide, so this binary
//! holds one test.

use pmindex::pm::cases::Case;
use pmindex::sim::{run, states_from_env, CrashConfig, ALLOC_SUBJECT};

mod common;

#[test]
fn every_allocator_recovery_case_is_reached_and_survived() {
    let mut cfg = CrashConfig::new(ALLOC_SUBJECT);
    cfg.states = states_from_env(4000);
    let wanted = [
        Case::AllocActivateRolledBack,
        Case::AllocReplaceRolledBack,
        Case::AllocFreeRolledBack,
    ];
    let missing = common::cases_missed(&wanted, || {
        let r = run(&cfg).expect("crash test runs");
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        println!(
            "allocator: {} images ({} during recovery), {} crash points, {:.1} s",
            r.images, r.recovery_images, r.crash_points, r.seconds
        );
    });
    assert!(
        missing.is_empty(),
        "recovery cases never reached: {missing:?}"
    );
}
