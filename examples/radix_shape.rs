//! Table 1 of the WORT paper for this crate's radix trees: flushes and
//! fences per insertion (and how many lines are the substrate allocator's,
//! which the trees call only to take 64 KiB chunks),
//! average leaf depth (Table 1(d)) and PM lines read per search, on Dense,
//! Sparse and Clustered 8-byte keys inserted in random order.
//! `cargo run --release --example radix_shape [records]` (default 100,000).
//! `ENGINES=wort,art-cow` and `KEYS=sparse` run only those trees and key
//! sets (the paper's own scale, 134,217,728 keys, takes minutes per cell
//! and up to 18 GiB of memory).

use std::path::Path;
use std::sync::Arc;

use pmindex::bench::keys::{KeyKind, KeySet};
use pmindex::engine::radix::{allocator_steps, Flavor, RadixTree};
use pmindex::engine::{PutMode, SerialEngine};
use pmindex::pm::{counters, Pool, PoolConfig, CHUNK_SIZE};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(100_000);
    // What one allocator step costs on its own: activate 64 KiB chunks.
    let pool = Pool::create_anonymous(256 << 20, "wort", &PoolConfig::default())?;
    let slots = pool.reserve(8 * 1000)?;
    let base = slots.offset();
    pool.activate(slots, pool.root_slot(1)?)?;
    let c0 = counters();
    for i in 0..1000 {
        let r = pool.reserve(CHUNK_SIZE)?;
        pool.activate(r, base + 8 * i)?;
    }
    let a = counters() - c0;
    let step_lines = a.flushes as f64 / 1000.0;
    let step_fences = a.fences as f64 / 1000.0;
    println!("one chunk activate: {step_lines:.2} lines flushed, {step_fences:.2} fences\n");
    println!(
        "engine   keys       ins lines  ins fences  alloc steps  tree lines*  leaf depth  search lines"
    );
    let wanted = |var: &str, name: &str| {
        std::env::var(var).map_or(true, |list| {
            list.split(',').any(|w| w.eq_ignore_ascii_case(name))
        })
    };
    for flavor in [Flavor::Wort, Flavor::Woart, Flavor::ArtCow] {
        if !wanted("ENGINES", flavor.name()) {
            continue;
        }
        for kind in [KeyKind::Dense, KeyKind::Sparse, KeyKind::Clustered] {
            if !wanted("KEYS", kind.label()) {
                continue;
            }
            let keys = KeySet::generate(kind, n, 0, 42, Path::new("/dev/null"))?;
            let pool = Arc::new(Pool::create_anonymous(
                (n * 600).max(64 << 20).next_multiple_of(1 << 20),
                flavor.name(),
                &PoolConfig::default(),
            )?);
            let mut t = RadixTree::create(Arc::clone(&pool), flavor)?;
            let value = [7u8; 8];
            let (c0, s0) = (counters(), allocator_steps());
            for i in 0..keys.len() {
                t.put(keys.get(i), &value, PutMode::Upsert)?;
            }
            let ins = counters() - c0;
            let steps = (allocator_steps() - s0) as f64 / n as f64;
            let lines = ins.flushes as f64 / n as f64;
            let (depth, leaves) = t.leaf_depth()?;
            assert_eq!(leaves, n);
            let c1 = counters();
            for i in 0..keys.len() {
                assert!(t.get_with(keys.get(i), &mut |_| {})?);
            }
            let search = (counters() - c1).lines_read as f64 / n as f64;
            println!(
                "{:<8} {:<9} {:>10.2}  {:>10.2}  {:>11.2}  {:>11.2}  {:>10.2}  {:>12.2}",
                flavor.name(),
                kind.label(),
                lines,
                ins.fences as f64 / n as f64,
                steps,
                lines - steps * step_lines,
                depth,
                search
            );
        }
    }
    println!(
        "\n* tree lines: flushed lines per insert less the substrate allocator's (each\n  \
         chunk's activate: its lane record, bitmap and list slot), which the paper's\n  \
         volatile allocator did not have."
    );
    Ok(())
}
