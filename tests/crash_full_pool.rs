//! The crash simulator on full pools of the block-heap engines (the radix
//! trees, `fptree`, `dptree` and `fastfair`) and `hart`: filled with 1,000-byte values until the
//! pool refuses, every other key deleted, then keys with 100-byte values,
//! whose leaves and nodes (the block-heap engines: `Chunks::reserve` falls
//! back to a larger class when its own has no chunk and the pool has none
//! to give) or value objects (`hart`, format 6: `Hart::alloc_value`) come
//! from the freed larger ones, and a reopen; `hart` in format 5 too, where
//! those puts are refused.
//!
//! And `hart` in a full pool whose stripes have room unevenly: with
//! `hart.stripes=round_robin` the keys take the stripes in turn, the
//! deletes free half of the stripes, and the puts after them that meet a
//! full stripe take their leaves and value objects from another
//! (`Hart::take_leaf`).
//!
//! And two writers at once, each on keys of its own, through the same
//! phases (`pmindex::sim::run_plans`): a put of one compacting the radix
//! heap, or taking room in `hart`, beside the other's.
//!
//! `PMINDEX_CRASH_STATES=20000 cargo test --release --test crash_full_pool`
//! runs a longer budget (per engine).

use std::sync::Arc;

use pmindex::sim::workload::Op;
use pmindex::sim::{states_from_env, CrashConfig};

mod common;

/// Puts of `fill` values (a count and a size) in a 2 MiB pool, more than
/// it holds (the last fail: PoolFull); every other of those keys deleted;
/// `new` puts of new keys (a count, a size, and how many of them come
/// after a reopen). Variant `v` spreads the keys differently.
fn fill_delete_refill(v: u64, fill: (u64, usize), new: (u64, usize, u64)) -> Vec<Op> {
    writer_fill_delete_refill("", v, fill, new)
}

/// [`fill_delete_refill`] with every key starting with `who` (the
/// workload of one of several writers, each with keys of its own).
fn writer_fill_delete_refill(
    who: &str,
    v: u64,
    fill: (u64, usize),
    new: (u64, usize, u64),
) -> Vec<Op> {
    let k =
        |p: &str, i: u64| format!("{who}{p}{:x}/{i}", (i * 2_654_435_761 + v) % 61).into_bytes();
    // Each key's value of its own (its number first), so that a value
    // read from a stale copy, or from another key's object, is told apart.
    let value = |fill: u8, len: usize, i: u64| -> Arc<[u8]> {
        let mut v = vec![fill; len];
        let n = len.min(8);
        v[..n].copy_from_slice(&i.to_le_bytes()[..n]);
        v.into()
    };
    let mut ops = Vec::new();
    for i in 0..fill.0 {
        ops.push(Op::Put(k("a", i), value(7, fill.1, i)));
    }
    for i in (0..fill.0).step_by(2) {
        ops.push(Op::Delete(k("a", i)));
    }
    for i in 0..new.0 {
        if i + new.2 == new.0 {
            ops.push(Op::Reopen);
        }
        ops.push(Op::Put(k("n", i), value(8, new.1, i)));
    }
    ops
}

/// 1,000-byte values, then 760 puts of 100 bytes (which the block-heap
/// engines' fallback to a larger class, or hart's format 6, lets in).
fn workload(v: u64) -> Vec<Op> {
    fill_delete_refill(v, (1900, 1000), (760, 100, 60))
}

/// How many puts of `size`-byte values of `ops` succeed, run live on a
/// pool of the simulator's size.
fn puts_live(engine: &str, cfg: &CrashConfig, ops: Vec<Op>, size: usize) -> usize {
    plans_live(engine, cfg, vec![ops], size)
}

/// How many of the workload's 100-byte puts succeed live.
fn small_puts_live(engine: &str, cfg: &CrashConfig) -> usize {
    puts_live(engine, cfg, workload(0), 100)
}

/// The crash simulator on `workload`'s variants until `states` images
/// are checked (0 failures required), and what it ran, under `label`.
fn run_budget(cfg: &mut CrashConfig, states: usize, workload: fn(u64) -> Vec<Op>, label: &str) {
    let t = common::crash_budget(cfg, states, workload);
    println!(
        "{label}: {} images, {} crash points, {} variants, {:.1} s",
        t.images, t.points, t.rounds, t.seconds
    );
}

/// `hart` with `hart.stripes=round_robin`: 1,000-byte values until the
/// pool refuses (key `i` from stripe `i % 16`, as the turn starts at 0 and
/// every put takes one), half the keys of stripes 0 to 7 deleted, then new keys
/// of the same size, half of whose turns name a stripe with no room, and a
/// reopen.
fn hart_workload(v: u64) -> Vec<Op> {
    let k = |p: &str, i: u64| format!("{p}{:x}/{i}", (i * 2_654_435_761 + v) % 61).into_bytes();
    let big: Arc<[u8]> = vec![7u8; 1000].into();
    let mut ops = Vec::new();
    for i in 0..1900 {
        ops.push(Op::Put(k("a", i), Arc::clone(&big)));
    }
    // Every other key of stripes 0 to 7: their chunks keep live leaves,
    // so none is recycled into room that any stripe could take.
    for i in (0..1900).filter(|i| i % 16 < 8 && i / 16 % 2 == 0) {
        ops.push(Op::Delete(k("a", i)));
    }
    for i in 0..450 {
        ops.push(Op::Put(k("n", i), Arc::clone(&big)));
    }
    ops.push(Op::Reopen);
    for i in 450..480 {
        ops.push(Op::Put(k("n", i), Arc::clone(&big)));
    }
    ops
}

const HART_STRIPES: (&str, &str) = ("hart.stripes", "round_robin");

#[test]
fn a_full_hart_pool_with_room_in_other_stripes_survives_every_crash() {
    // Live first: the new keys take the room the deletes made, through
    // the fallback (without it, the puts whose turn names a full stripe
    // fail: about half).
    let cfg = {
        let mut c = CrashConfig::new("hart");
        c.engine_config
            .insert(HART_STRIPES.0.into(), HART_STRIPES.1.into());
        c
    };
    let db = pmindex::Db::create_anonymous(&pmindex::Options {
        pool_size: cfg.pool_size,
        engine_config: cfg.engine_config.clone(),
        ..pmindex::Options::with_engine("hart")
    })
    .unwrap();
    let (mut deleted, mut refilled) = (0, 0);
    for op in hart_workload(0) {
        match op {
            Op::Put(k, v) => {
                let ok = db.put(&k, &v).is_ok();
                refilled += usize::from(ok && k.starts_with(b"n"));
            }
            Op::Delete(k) => deleted += usize::from(db.delete(&k).unwrap()),
            _ => {}
        }
    }
    println!("hart: {deleted} deleted, {refilled} of 480 new keys put");
    assert!(deleted > 350, "{deleted}");
    assert!(
        refilled * 10 >= deleted * 9,
        "{refilled} new keys in the room of {deleted} deleted ones"
    );
    let mut cfg = cfg;
    cfg.recovery_checks = 20;
    let states = states_from_env(1500);
    run_budget(
        &mut cfg,
        states,
        hart_workload,
        "hart (round-robin stripes)",
    );
    // The budget again on the new keys' puts, the ones that take room
    // from other stripes, which the fill's fences leave few points of.
    cfg.from_op = hart_workload(0)
        .iter()
        .position(|op| matches!(op, Op::Put(k, _) if k.starts_with(b"n")))
        .expect("the workload puts new keys");
    run_budget(
        &mut cfg,
        states,
        hart_workload,
        "hart (round-robin stripes), from the first new key",
    );
}

#[test]
fn full_pools_survive_every_crash() {
    let states = states_from_env(1500);
    for engine in [
        "wort",
        "woart",
        "art-cow",
        "fptree",
        "hart",
        "dptree",
        "fastfair",
        "art-bplus",
    ] {
        // The workload reaches the fallback: most small puts fit.
        let mut cfg = CrashConfig::new(engine);
        let ok = small_puts_live(engine, &cfg);
        println!("{engine}: {ok} of 760 puts of 100 B fit live after the deletes");
        assert!(ok >= 400, "{engine}: {ok} of 760 small puts fit live");
        cfg.recovery_checks = 20;
        run_budget(&mut cfg, states, workload, engine);
        // The budget again on the puts after the deletes, which the fill's
        // fences leave few points of above.
        cfg.from_op = first_put_of(&workload(0), 100);
        run_budget(
            &mut cfg,
            states,
            workload,
            &format!("{engine}, from the first put after the deletes"),
        );
    }
}

/// `hart` in format 5 (`hart.format=5`) without compactions: no value
/// object from a larger class, so the small puts after the deletes fit
/// only where a value chunk of their class was freed or can still be
/// made, and a refused put must leave nothing behind.
#[test]
fn a_full_hart_pool_of_format_5_survives_every_crash() {
    let mut cfg = CrashConfig::new("hart");
    cfg.engine_config.insert("hart.format".into(), "5".into());
    // Without compactions, which would make room (`hart_compactions_survive_every_crash`).
    cfg.engine_config
        .insert("hart.compact".into(), "off".into());
    let ok = small_puts_live("hart", &cfg);
    let ok6 = small_puts_live("hart", &CrashConfig::new("hart"));
    println!("hart: {ok} of 760 small puts fit live in format 5, {ok6} in format 6");
    assert!(ok < ok6, "format 5: {ok}, format 6: {ok6}");
    cfg.recovery_checks = 20;
    let states = states_from_env(1500);
    run_budget(&mut cfg, states, workload, "hart (format 5)");
    // Again from the small puts on, where the refusals are.
    cfg.from_op = first_put_of(&workload(0), 100);
    run_budget(
        &mut cfg,
        states,
        workload,
        "hart (format 5), from the first put after the deletes",
    );
}

/// The radix trees' compaction (`engine/radix/compact.rs`): 400-byte
/// values until the pool refuses, every other key deleted, then keys with
/// 2,000-byte values, whose leaves' class has no chunk and the pool none
/// to give: the first such put compacts the heap (blocks moved out of
/// half-empty chunks, two fences per group of 64, the emptied chunks given
/// back), and a reopen.
fn compaction_workload(v: u64) -> Vec<Op> {
    fill_delete_refill(v, (5000, 400), (150, 2000, 30))
}

/// The index of the first put of `size`-byte values in `ops` (after the
/// fill and the deletes of [`fill_delete_refill`]).
fn first_put_of(ops: &[Op], size: usize) -> usize {
    ops.iter()
        .position(|op| matches!(op, Op::Put(_, v) if v.len() == size))
        .expect("the workload has such puts")
}

/// The index of [`compaction_workload`]'s first 2,000-byte put, the one
/// that compacts.
fn first_large_put() -> usize {
    first_put_of(&compaction_workload(0), 2000)
}

/// How many of [`compaction_workload`]'s 2,000-byte puts succeed live.
fn big_puts_live(engine: &str, cfg: &CrashConfig) -> usize {
    puts_live(engine, cfg, compaction_workload(0), 2000)
}

#[test]
fn radix_compactions_survive_every_crash() {
    let states = states_from_env(1500);
    for engine in ["wort", "woart", "art-cow"] {
        let mut cfg = CrashConfig::new(engine);
        let ok = big_puts_live(engine, &cfg);
        let mut off = CrashConfig::new(engine);
        off.engine_config
            .insert(format!("{engine}.compact"), "off".into());
        let without = big_puts_live(engine, &off);
        println!("{engine}: {ok} of 150 puts of 2,000 B fit live ({without} without compactions)");
        assert!(
            ok >= 100 && without < 10,
            "{engine}: {ok} of 150 large puts fit live, {without} without compactions"
        );
        cfg.recovery_checks = 20;
        run_budget(&mut cfg, states, compaction_workload, engine);
        // The same budget again on the large puts only: the fill and the
        // deletes before them have most of the workload's fences, so
        // the run above reaches few crash points inside the compaction's
        // groups of moves (`a_compaction_without_its_copy_flush_or_fence_is_caught`).
        cfg.from_op = first_large_put();
        run_budget(
            &mut cfg,
            states,
            compaction_workload,
            &format!("{engine}, from the compacting put"),
        );
    }
}

/// Two writers' plans: each puts `fill`'s count of values, enough to fill
/// the pool alone (so that it is full at the end of both fills, whatever
/// their interleaving: a writer's fill takes back the room of the other's
/// deletes), deletes every other of its keys, then puts its half of
/// `new`'s (no reopen: the writers share one open pool).
fn two_writers(v: u64, fill: (u64, usize), new: (u64, usize)) -> Vec<Vec<Op>> {
    ["p", "q"]
        .iter()
        .enumerate()
        .map(|(t, who)| {
            writer_fill_delete_refill(who, v + t as u64 * 7, fill, (new.0 / 2, new.1, 0))
        })
        .collect()
}

/// How many puts of `size`-byte values of `plans` succeed, each plan run
/// live on a thread of its own, all on one pool of the simulator's size.
fn plans_live(engine: &str, cfg: &CrashConfig, plans: Vec<Vec<Op>>, size: usize) -> usize {
    let db = pmindex::Db::create_anonymous(&pmindex::Options {
        pool_size: cfg.pool_size,
        engine_config: cfg.engine_config.clone(),
        ..pmindex::Options::with_engine(engine)
    })
    .unwrap();
    std::thread::scope(|s| {
        let runs: Vec<_> = plans
            .into_iter()
            .map(|ops| {
                let db = &db;
                s.spawn(move || {
                    let mut ok = 0;
                    for op in ops {
                        match op {
                            Op::Put(k, v) => {
                                ok += usize::from(db.put(&k, &v).is_ok() && v.len() == size)
                            }
                            Op::Delete(k) => drop(db.delete(&k).unwrap()),
                            _ => {}
                        }
                    }
                    ok
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).sum()
    })
}

/// [`plans_live`] of `plans` run one after the other on one thread (how
/// many fit does not depend on an interleaving there), then at once, one
/// thread each (where it does: a writer's refill made while the other
/// still fills meets a pool that fill keeps full).
fn live_in_turn_and_at_once(
    engine: &str,
    cfg: &CrashConfig,
    plans: Vec<Vec<Op>>,
    size: usize,
) -> (usize, usize) {
    let in_turn = plans_live(engine, cfg, vec![plans.concat()], size);
    (in_turn, plans_live(engine, cfg, plans, size))
}

/// How many operations each of [`two_writers`]' plans holds before its
/// first put of `size`-byte values: with that as
/// [`CrashConfig::from_op`], the crash points are those where one writer
/// at least is in its refill.
fn ops_before_refill(plans: &[Vec<Op>], size: usize) -> usize {
    let firsts: Vec<usize> = plans.iter().map(|ops| first_put_of(ops, size)).collect();
    assert!(firsts.iter().all(|&f| f == firsts[0]), "{firsts:?}");
    firsts[0]
}

/// [`run_budget`] for two writers' plans.
fn run_plans_budget(
    cfg: &mut CrashConfig,
    states: usize,
    plans: impl Fn(u64) -> Vec<Vec<Op>>,
    label: &str,
) {
    let t = common::crash_budget_plans(cfg, states, plans);
    println!(
        "{label}: {} images, {} crash points, {} variants, {:.1} s",
        t.images, t.points, t.rounds, t.seconds
    );
}

/// Two writers at once on a full pool, each on keys of its own: both fill
/// the pool with 1,000-byte values until it refuses them, delete every
/// other of their keys, then put 100-byte values (which come from the
/// freed larger blocks, or hart's larger value class); and, in the radix
/// trees, 400-byte values then 2,000-byte ones, where a put of one writer
/// compacts the heap with the whole tree held while the other writer's
/// put waits, or is refused after a compaction that gave nothing back.
#[test]
fn two_writers_on_a_full_pool_survive_every_crash() {
    let states = states_from_env(1500);
    let small = |v| two_writers(v, (1900, 1000), (760, 100));
    for engine in ["wort", "woart", "art-cow", "fptree", "hart"] {
        let mut cfg = CrashConfig::new(engine);
        // Asserted on the plans run in turn, printed at once: a writer
        // whose refill comes while the other still fills meets a pool that
        // fill keeps full (CI saw hart fit 380 of 760 at once).
        let (ok, together) = live_in_turn_and_at_once(engine, &cfg, small(0), 100);
        println!(
            "{engine}, two writers: {ok} of 760 puts of 100 B fit live in turn, {together} at once"
        );
        assert!(
            ok >= 600,
            "{engine}: {ok} of 760 small puts fit live in turn"
        );
        cfg.recovery_checks = 20;
        run_plans_budget(&mut cfg, states, small, &format!("{engine}, two writers"));
        cfg.from_op = ops_before_refill(&small(0), 100);
        run_plans_budget(
            &mut cfg,
            states,
            small,
            &format!("{engine}, two writers, from the refill"),
        );
    }
    let large = |v| two_writers(v, (5000, 400), (150, 2000));
    for engine in ["wort", "woart", "art-cow", "hart"] {
        let mut cfg = CrashConfig::new(engine);
        let mut off = CrashConfig::new(engine);
        off.engine_config
            .insert(format!("{engine}.compact"), "off".into());
        // At once, as the crash simulator runs them: 56-150 of 150 fit in
        // 16 runs of `hart`, 75-150 in the radix trees; printed, not
        // asserted.
        let (ok, together) = live_in_turn_and_at_once(engine, &cfg, large(0), 2000);
        let without = plans_live(engine, &off, vec![large(0).concat()], 2000);
        println!(
            "{engine}, two writers: {ok} of 150 puts of 2,000 B fit live in turn ({without} \
             without compactions), {together} at once"
        );
        assert!(
            ok >= 100 && without < 10,
            "{engine}: {ok} of 150 large puts fit live, {without} without compactions"
        );
        cfg.recovery_checks = 20;
        cfg.from_op = ops_before_refill(&large(0), 2000);
        run_plans_budget(
            &mut cfg,
            states,
            large,
            &format!("{engine}, two writers, from the compactions"),
        );
    }
}

/// `hart`'s compaction (`engine/hart/compact.rs`): 1,000-byte values
/// until the pool refuses, every other key deleted, then keys with
/// 2,000-byte values, whose class has no chunk and the pool no room for
/// one: the first such put moves the values of the sparsest 1,024-byte
/// chunks into the others' free objects (an update each), the emptied
/// chunks go back, and a reopen.
fn hart_compaction_workload(v: u64) -> Vec<Op> {
    fill_delete_refill(v, (1900, 1000), (120, 2000, 20))
}

#[test]
fn hart_compactions_survive_every_crash() {
    let states = states_from_env(1500);
    let mut cfg = CrashConfig::new("hart");
    let ok = puts_live("hart", &cfg, hart_compaction_workload(0), 2000);
    let mut off = CrashConfig::new("hart");
    off.engine_config
        .insert("hart.compact".into(), "off".into());
    let without = puts_live("hart", &off, hart_compaction_workload(0), 2000);
    println!("hart: {ok} of 120 puts of 2,000 B fit live ({without} without compactions)");
    assert!(
        ok >= 60 && without < 10,
        "hart: {ok} of 120 large puts fit live, {without} without compactions"
    );
    cfg.recovery_checks = 20;
    run_budget(
        &mut cfg,
        states,
        hart_compaction_workload,
        "hart, compactions",
    );
    cfg.from_op = first_put_of(&hart_compaction_workload(0), 2000);
    run_budget(
        &mut cfg,
        states,
        hart_compaction_workload,
        "hart, from the compacting put",
    );
}

/// A compaction whose move does not flush the value's copy
/// (`hart-compact-skip-move-flush`) is caught in the compacting put, and
/// the same fault without compactions changes nothing (the switch acts on
/// the moves alone). So the runs above crash inside the moves.
#[test]
fn a_hart_compaction_without_its_copy_flush_is_caught() {
    use pmindex::pm::Fault;
    let mut found = Vec::new();
    for compact in ["on", "off"] {
        let mut cfg = CrashConfig::new("hart");
        cfg.engine_config
            .insert("hart.compact".into(), compact.into());
        cfg.fault = Some(Fault::HartCompactSkipMoveFlush);
        // A value move's copy left unflushed is lost only once the chunk
        // of the object it replaced went back (before, recovery falls
        // back to that object): crash points late in the moves, the first
        // at image 5,569 before leaves moved too. A leaf move writes its
        // value's copy the same way, and leaves no old object to fall
        // back to once its old leaf is killed: caught within 36 images
        // now. The run stops at its fifth failure.
        cfg.states = 20_000;
        cfg.from_op = first_put_of(&hart_compaction_workload(0), 2000);
        cfg.shrink = false;
        cfg.recovery_checks = 0;
        let r = pmindex::sim::run_ops(&cfg, hart_compaction_workload(0)).expect("crash test runs");
        println!(
            "hart, compact={compact}, {}: {} failures in {} images; first: {:?}",
            Fault::HartCompactSkipMoveFlush.name(),
            r.failures.len(),
            r.images,
            r.failures.first().map(|f| (&f.in_flight, &f.message))
        );
        found.push(r.failures.iter().any(|f| {
            f.in_flight
                .as_deref()
                .is_some_and(|op| op.contains("2000 B"))
        }));
    }
    assert_eq!(
        found,
        [true, false],
        "caught with compactions, and only then"
    );
}

/// [`hart_compaction_workload`] without its reopen, with one fill key in
/// 40 that stays holding a 5,000-byte value (a block of its own, whose
/// leaf a compaction does not move), and then a delete of every key the
/// fill left: keys whose leaves the compaction moved among them. A leaf
/// chunk that the compaction empties goes back to the pool, and its old
/// leaves with it, killed or not: the chunks that keep a large value's
/// leaf are where a kill matters.
fn hart_leaf_move_workload(v: u64) -> Vec<Op> {
    let mut ops = fill_delete_refill(v, (1900, 1000), (120, 2000, 0));
    for (i, op) in ops.iter_mut().take(1900).enumerate() {
        if let Op::Put(_, val) = op {
            if i % 40 == 1 {
                *val = vec![9u8; 5000].into();
            }
        }
    }
    let mut left = std::collections::BTreeSet::new();
    for op in &ops {
        match op {
            Op::Put(k, val) if val.len() != 2000 => drop(left.insert(k.clone())),
            Op::Delete(k) => drop(left.remove(k)),
            _ => {}
        }
    }
    ops.extend(left.into_iter().map(Op::Delete));
    ops
}

/// A compaction's leaf move that does not flush the old leaf's cleared
/// commit word (`hart-compact-skip-leaf-kill-flush`) is caught once the
/// moved keys are deleted: after a crash the old leaf, at the lower
/// offset, comes back and wins over its deleted copy. The same fault
/// without compactions changes nothing. So the runs above crash inside
/// the leaf moves too (the fill's leaf chunks are half empty after its
/// deletes, and the compaction drains them with the value chunks).
#[test]
fn a_hart_leaf_move_without_its_kill_flush_is_caught() {
    use pmindex::pm::Fault;
    let mut found = Vec::new();
    for compact in ["on", "off"] {
        let mut cfg = CrashConfig::new("hart");
        cfg.engine_config
            .insert("hart.compact".into(), compact.into());
        cfg.fault = Some(Fault::HartCompactSkipLeafKillFlush);
        cfg.states = 20_000;
        cfg.from_op = first_put_of(&hart_leaf_move_workload(0), 2000);
        cfg.shrink = false;
        cfg.recovery_checks = 0;
        let r = pmindex::sim::run_ops(&cfg, hart_leaf_move_workload(0)).expect("crash test runs");
        println!(
            "hart, compact={compact}, {}: {} failures in {} images; first: {:?}",
            Fault::HartCompactSkipLeafKillFlush.name(),
            r.failures.len(),
            r.images,
            r.failures.first().map(|f| (&f.in_flight, &f.message))
        );
        found.push(!r.failures.is_empty());
    }
    assert_eq!(
        found,
        [true, false],
        "caught with compactions, and only then"
    );
}

/// A compaction that swings a pointer to a copy it did not flush, or
/// whose flush no fence covered before the pointer's store (a group of
/// moves without its first fence), is caught, in every tree: after a crash
/// the pointer can be durable and the copy not. (So the crash points of
/// the runs above reach into the compacting put.)
#[test]
fn a_compaction_without_its_copy_flush_or_fence_is_caught() {
    use pmindex::pm::Fault;
    for (engine, fault) in ["wort", "woart", "art-cow"].into_iter().flat_map(|e| {
        [
            (e, Fault::RadixCompactSkipCopyFlush),
            (e, Fault::RadixCompactGroupUnfenced),
        ]
    }) {
        let mut cfg = CrashConfig::new(engine);
        cfg.fault = Some(fault);
        cfg.states = 1500;
        // A copy flushed but not fenced is lost only at the crash points
        // inside its group (an unflushed one at every later point too),
        // which the budget spread over the whole workload barely reaches
        // (0 failures in 1,053 images; the first at image 6,665 of 10,000).
        cfg.from_op = first_large_put();
        cfg.shrink = false;
        // Images of the workload itself (recovery's crashes and the
        // writes after it compact too, and would report their failures
        // first).
        cfg.recovery_checks = 0;
        let r = pmindex::sim::run_ops(&cfg, compaction_workload(0)).expect("crash test runs");
        println!(
            "{engine}, {}: {} failures in {} images; first: {:?}",
            fault.name(),
            r.failures.len(),
            r.images,
            r.failures.first().map(|f| &f.message)
        );
        assert!(
            r.failures.iter().any(|f| f
                .in_flight
                .as_deref()
                .is_some_and(|op| op.contains("2000 B"))),
            "{engine}: {} was not caught in a compacting put",
            fault.name()
        );
        // And with two writers, a compaction beside the other writer (the
        // fault acts in the compaction alone: any failure of a crash image
        // is of one; the other writer's operation may be the one in
        // flight, or none, as the copies left unflushed stay so).
        // The other writer's fill can go on beside the compactions, and
        // its fences take images first: a budget that the run stops
        // spending at its fifth failure (11-1,399 images in eight runs).
        let plans = two_writers(0, (5000, 400), (150, 2000));
        cfg.from_op = ops_before_refill(&plans, 2000);
        cfg.states = 10_000;
        let r = pmindex::sim::run_plans(&cfg, plans).expect("crash test runs");
        println!(
            "{engine}, {}, two writers: {} failures in {} images",
            fault.name(),
            r.failures.len(),
            r.images
        );
        assert!(
            r.failures.iter().any(|f| f.crash_point.is_some()),
            "{engine}: {} was not caught with two writers",
            fault.name()
        );
    }
}
