//! Every engine, called through [`Db::engine`] (which skips `Db`'s own
//! checks), refuses a key or value its layout cannot hold with the error
//! `Db` gives, changes nothing, and leaves a pool that reopens and checks.
//! Before 2026-12-02 `fptree` and `pmlog` wrote such keys and the pool then
//! failed to open (`Corrupt`), and `hart` panicked on a 300-byte key.

mod common;

use common::{assert_check, assert_db_eq, create_db, open_db, Model, TempPool};
use pmindex::engine::{PutMode, ENGINES, MAX_KEY_LEN, MAX_VALUE_LEN};
use pmindex::Error;

fn is_limit_error(e: &Error) -> bool {
    matches!(
        e,
        Error::EmptyKey { .. } | Error::KeyTooLong { .. } | Error::ValueTooLong { .. }
    )
}

#[test]
fn engines_refuse_what_their_layout_cannot_hold() {
    let long = vec![b'k'; MAX_KEY_LEN + 1];
    let longer = vec![b'k'; 300];
    let big_value = vec![7u8; MAX_VALUE_LEN + 1];
    let bad: [(&[u8], &[u8]); 4] = [
        (b"", b"v"),
        (&long, b"v"),
        (&longer, b"v"),
        (b"good-key", &big_value),
    ];
    for info in ENGINES {
        let t = TempPool::new();
        let mut model = Model::new();
        {
            let db = create_db(&t.path, info.name, 64 << 20);
            let e = db.engine();
            for i in 0..20u32 {
                let k = format!("key{i:03}").into_bytes();
                e.put(&k, b"value", PutMode::Upsert).unwrap();
                model.insert(k, b"value".to_vec());
            }
            for (k, v) in bad {
                for mode in [PutMode::Upsert, PutMode::Insert, PutMode::Update] {
                    let r = e.put(k, v, mode);
                    assert!(
                        matches!(&r, Err(err) if is_limit_error(err)),
                        "{}: put of a {}-byte key, {}-byte value ({mode:?}): {r:?}",
                        info.name,
                        k.len(),
                        v.len()
                    );
                }
                // A batch with one bad item among good ones changes nothing.
                let items: [(&[u8], &[u8]); 3] = [(b"batch-a", b"1"), (k, v), (b"batch-b", b"2")];
                let r = e.put_many(&items);
                assert!(
                    matches!(&r, Err(err) if is_limit_error(err)),
                    "{}: put_many with a {}-byte key: {r:?}",
                    info.name,
                    k.len()
                );
                // Reads and deletes of such keys find nothing, and do not panic.
                if !k.is_empty() && k.len() <= MAX_KEY_LEN {
                    continue;
                }
                let found = e.get_with(k, &mut |_| {});
                assert!(
                    matches!(found, Ok(false) | Err(_)),
                    "{}: get of a {}-byte key: {found:?}",
                    info.name,
                    k.len()
                );
                let gone = e.delete(k);
                assert!(
                    matches!(gone, Ok(false) | Err(_)),
                    "{}: delete of a {}-byte key: {gone:?}",
                    info.name,
                    k.len()
                );
            }
            assert_db_eq(&db, &model, info.name);
            assert_check(&db, model.len(), info.name);
        }
        let db = open_db(&t.path);
        let ctx = format!("{} reopened", info.name);
        assert_db_eq(&db, &model, &ctx);
        assert_check(&db, model.len(), &ctx);
    }
}

/// A setting without an engine's prefix, or with a prefix that is no
/// engine's, is refused when a pool is made or opened (before, the engines
/// ignored it and `hash_key_len=3` made a pool with 2); one of another
/// engine is ignored.
#[test]
fn a_setting_that_names_no_engine_is_refused() {
    use pmindex::{Db, Options};
    for key in [
        "hash_key_len",
        "hrat.hash_key_len",
        "hart.",
        ".hash_key_len",
    ] {
        let opts = Options::with_engine("hart").setting(key, "3");
        let e = Db::create_anonymous(&opts).expect_err(key);
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("names no engine")),
            "{key}: {e:?}"
        );
        let t = TempPool::new();
        assert!(Db::create(&t.path, &opts).is_err(), "{key}");
        assert!(!t.path.exists(), "{key}: a refused create left its file");
    }
    let t = TempPool::new();
    drop(create_db(&t.path, "hart", 64 << 20));
    let opts = Options::default().setting("recovery_threads", "2");
    assert!(matches!(
        Db::open(&t.path, &opts),
        Err(Error::InvalidArgument(_))
    ));
    let db =
        Db::create_anonymous(&Options::with_engine("hart").setting("wort.format", "3")).unwrap();
    assert_eq!(db.info().settings["hart.hash_key_len"], "2");
}

/// `hart.reads=optimistic` where it cannot run (no point index, or the
/// hashed index of ARTs of `hash_key_len` above 2) is refused; before it
/// ran locked without a word.
#[test]
fn optimistic_reads_where_they_cannot_run_are_refused() {
    use pmindex::{Db, Options};
    let ok = Options::with_engine("hart").setting("hart.reads", "optimistic");
    let db = Db::create_anonymous(&ok).unwrap();
    assert_eq!(db.info().settings["hart.reads"], "optimistic");
    for (k, v) in [("hart.hash_key_len", "3"), ("hart.point_index", "off")] {
        let opts = ok.clone().setting(k, v);
        let e = Db::create_anonymous(&opts).expect_err(k);
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("hart.reads=optimistic")),
            "{k}={v}: {e:?}"
        );
    }
    // At open too: a pool made with hash_key_len=3.
    let t = TempPool::new();
    drop(
        Db::create(
            &t.path,
            &Options::with_engine("hart").setting("hart.hash_key_len", "3"),
        )
        .unwrap(),
    );
    let e = Db::open(
        &t.path,
        &Options::default().setting("hart.reads", "optimistic"),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    Db::open(&t.path, &Options::default()).unwrap();
}
