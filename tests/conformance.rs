//! The conformance suite, run by every engine: one line per engine.
//! The scenarios are in `tests/common/conformance.rs`.

mod common;

use common::conformance::conformance_suite;

conformance_suite!(pmlog, "pmlog");
conformance_suite!(hart, "hart");
