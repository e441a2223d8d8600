//! Writes one of the bench's key sets to a key file, for the drivers that
//! run the authors' code on the same keys as ours (`scripts/authors/`,
//! docs/design.md §7, "The authors' published code").
//!
//! `cargo run --release --example write_keys -- KIND N FILE [SEED] [WORDS]`
//!
//! `KIND` is a `pmindex bench --keys` name (`sparse`, `dense`,
//! `rand-string`, `dictionary`, ...), `N` the number of keys (a dictionary
//! gives at most its number of distinct words, and says so), `SEED` the
//! bench's `--seed` (default 42, the bench's default), `WORDS` the word list
//! of `dictionary` (default `/usr/share/dict/words`). The keys are those
//! `pmindex bench --keys KIND --records N --seed SEED` loads, in its loading
//! order. The file holds one record per key: its length as a little-endian
//! `u32`, then its bytes; `examples/search_probe.rs` and the drivers read
//! this format. `MAX_LEN=L` leaves out keys longer than `L` bytes (the
//! authors' HART holds at most 24 bytes of a key past its 2-byte hash key,
//! so `scripts/authors/compare.sh` writes the dictionary with `MAX_LEN=25`
//! for both sides), and says how many.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use pmindex::bench::keys::{dictionary_capacity, KeyKind, KeySet, DEFAULT_DICTIONARY};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 || args.len() > 5 {
        eprintln!("usage: write_keys KIND N FILE [SEED] [WORDS]");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("write_keys: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let kind: KeyKind = args[0].parse()?;
    let mut n: u64 = args[1]
        .parse()
        .map_err(|_| format!("N must be a number, not {:?}", args[1]))?;
    let file = PathBuf::from(&args[2]);
    let seed: u64 = match args.get(3) {
        Some(s) => s
            .parse()
            .map_err(|_| format!("SEED must be a number, not {s:?}"))?,
        None => 42,
    };
    let words = PathBuf::from(args.get(4).map_or(DEFAULT_DICTIONARY, String::as_str));
    if kind == KeyKind::Dictionary {
        let have = dictionary_capacity(&words)? as u64;
        if have < n {
            eprintln!(
                "write_keys: {} holds {have} distinct words; writing {have}",
                words.display()
            );
            n = have;
        }
    }
    let max_len: usize = match std::env::var("MAX_LEN").ok().filter(|l| !l.is_empty()) {
        Some(l) => l
            .parse()
            .map_err(|_| format!("MAX_LEN must be a number, not {l:?}"))?,
        None => usize::MAX,
    };
    let set = KeySet::generate(kind, n, 0, seed, &words)?;
    let created = std::fs::File::create(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut out = std::io::BufWriter::new(created);
    let mut written = 0;
    for i in 0..set.len() {
        let k = set.get(i);
        if k.len() > max_len {
            continue;
        }
        out.write_all(&u32::try_from(k.len())?.to_le_bytes())?;
        out.write_all(k)?;
        written += 1;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let left_out = set.len() - written;
    println!(
        "{}: {written} keys of {}{}",
        file.display(),
        kind.name(),
        if left_out > 0 {
            format!(" ({left_out} longer than {max_len} bytes left out)")
        } else {
            String::new()
        }
    );
    Ok(())
}
