//! The `pmindex` command-line tool: create, inspect and check pools, read and
//! write keys, and run the benchmarks. See `pmindex --help`; the commands live
//! in [`cli`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
