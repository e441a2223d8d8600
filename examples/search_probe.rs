use pmindex::{Db, Options};
use std::time::Instant;
fn sm(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E3779B97F4A7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
    z ^ (z >> 31)
}
fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(1_000_000);
    let engine = std::env::args().nth(2).unwrap_or("hart".into());
    let path = std::path::Path::new("/dev/shm/probe.pool");
    let _ = std::fs::remove_file(path);
    let o = Options {
        engine: Some(engine),
        pool_size: 1 << 30,
        ..Options::default()
    };
    let db = if std::env::var("ANON").is_ok() {
        Db::create_anonymous(&o).unwrap()
    } else {
        Db::create(path, &o).unwrap()
    };
    let keys: Vec<[u8; 8]> = (0..n).map(|i| sm(i).to_be_bytes()).collect();
    let t = Instant::now();
    for k in &keys {
        db.put(k, &k[..]).unwrap();
    }
    println!(
        "insert {:.0} ns/op",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    let mut order: Vec<usize> = (0..n as usize).collect();
    for i in (1..order.len()).rev() {
        let j = (sm(i as u64 ^ 77) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    for _ in 0..3 {
        let t = Instant::now();
        let mut hits = 0u64;
        for &i in &order {
            db.get_with(&keys[i], |v| hits += v.len() as u64).unwrap();
        }
        println!(
            "search {:.0} ns/op ({hits})",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
    drop(db);
    let _ = std::fs::remove_file(path);
}
