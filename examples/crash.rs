use pmindex::sim::{run, CrashConfig};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut cfg = CrashConfig::new(args.get(1).map(String::as_str).unwrap_or("pmlog"));
    cfg.states = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
    cfg.ops = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(200);
    if let Some(f) = args.get(4) {
        cfg.fault = Some(f.parse().unwrap());
    }
    let r = run(&cfg).unwrap();
    println!("{} events {} fences {} points {} images {} (recovery {}) dups {} in {:.1}s = {:.0}/s failures {}",
        r.engine, r.events, r.fences, r.crash_points, r.images, r.recovery_images, r.duplicates, r.seconds, r.images_per_second(), r.failures.len());
    for f in &r.failures {
        println!("  {f:?}");
    }
    if let Some(s) = &r.shrunk {
        println!("shrunk: {s:?}");
    }
}
