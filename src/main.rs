//! The `pmindex` command-line tool: create, inspect and check pools, read and
//! write keys, and run the benchmarks. See `pmindex --help`; the commands live
//! in [`cli`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod cli;

/// Counts heap bytes, so that `pmindex bench` can report the DRAM an index
/// holds (see `pmindex::bench::alloc`).
#[global_allocator]
static ALLOC: pmindex::bench::alloc::CountingAlloc = pmindex::bench::alloc::CountingAlloc::new();

fn main() -> std::process::ExitCode {
    cli::main()
}
