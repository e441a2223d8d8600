//! Benchmarks: the first `pmindex bench` (insert, get, delete per engine).
