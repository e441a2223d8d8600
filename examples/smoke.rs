use pmindex::{Db, Options};
use std::ops::Bound;
fn main() -> pmindex::Result<()> {
    let p = std::env::temp_dir().join(format!("smoke-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&p);
    {
        let db = Db::create(
            &p,
            &Options {
                pool_size: 8 << 20,
                ..Options::default()
            },
        )?;
        for i in 0..20000u32 {
            db.put(format!("key{i:06}").as_bytes(), &i.to_le_bytes())?;
        }
        for i in 0..20000u32 {
            if i % 3 == 0 {
                assert!(db.delete(format!("key{i:06}").as_bytes())?);
            }
        }
        for i in 0..20000u32 {
            if i % 5 == 0 {
                db.put(format!("key{i:06}").as_bytes(), b"five")?;
            }
        }
        db.check()?;
        println!(
            "len {} usage {:?}",
            db.len(),
            db.pool().usage().bytes_in_use()
        );
        match Db::open(&p, &Options::default()) {
            Err(e) => println!("second open: {e}"),
            Ok(_) => panic!("lock"),
        }
    }
    let db = Db::open(&p, &Options::default())?;
    db.check()?;
    println!("reopened len {}", db.len());
    let v = db.scan(
        Bound::Included(b"key000010"),
        Bound::Excluded(b"key000020"),
        Some(4),
    )?;
    println!(
        "{:?}",
        v.iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    println!("{}", db.put(&[0u8; 251], b"x").unwrap_err());
    let s = db.stats();
    println!("{:?}", s.counters);
    std::fs::remove_file(&p).ok();
    Ok(())
}
