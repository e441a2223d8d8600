//! Flushes and fences per operation for HART's two persist orders
//! (`cargo run --release --example hart_orders`).
use pmindex::engine::EngineConfig;
use pmindex::pm::counters;
use pmindex::{Db, Options};

fn main() -> pmindex::Result<()> {
    let n = 100_000u64;
    println!("order  op      flushes/op  fences/op  ns/op");
    for order in ["tight", "paper"] {
        let mut cfg = EngineConfig::new();
        cfg.insert("hart.persist_order".into(), order.into());
        let opts = Options {
            engine: Some("hart".into()),
            pool_size: 256 << 20,
            engine_config: cfg,
            ..Options::default()
        };
        let db = Db::create_anonymous(&opts)?;
        let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
        let phase = |name: &str, f: &dyn Fn(u64) -> pmindex::Result<()>| -> pmindex::Result<()> {
            let c0 = counters();
            let t = std::time::Instant::now();
            for i in 0..n {
                f(i)?;
            }
            let ns = t.elapsed().as_nanos() as f64 / n as f64;
            let d = counters() - c0;
            println!(
                "{order:<6} {name:<7} {:>10.2}  {:>9.2}  {ns:>5.0}",
                d.flushes as f64 / n as f64,
                d.fences as f64 / n as f64
            );
            Ok(())
        };
        phase("insert", &|i| db.insert(&key(i), &i.to_le_bytes()))?;
        phase("update", &|i| db.update(&key(i), &(i + 1).to_le_bytes()))?;
        phase("get", &|i| db.get(&key(i)).map(|_| ()))?;
        phase("delete", &|i| db.delete(&key(i)).map(|_| ()))?;
    }
    Ok(())
}
