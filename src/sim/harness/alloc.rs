//! The allocator alone as a crash-test subject ([`ALLOC_SUBJECT`]): a
//! seeded sequence of activates, replaces and frees into a slot table,
//! verified against a model of each slot's block, with the leak check.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{
    expected_at, live_failure, sim_persist, CrashConfig, Failure, RecoveryRun, Subject,
    ALLOC_SUBJECT,
};
use crate::error::{Error, Result};
use crate::pm::{Fault, Pool, PoolConfig};
use crate::sim::trace::{Recorder, Trace};

/// Root slot of the slot table in the allocator workload.
pub(super) const TABLE_ROOT: usize = 7;
/// Bytes of the slot table block.
const TABLE_SIZE: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AllocOp {
    /// Activate (or replace, if occupied) a block of `size` into slot `slot`.
    Put { slot: usize, size: u64 },
    /// Free the block in `slot`.
    Free { slot: usize },
}

impl std::fmt::Display for AllocOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocOp::Put { slot, size } => write!(f, "activate/replace {size} B into slot {slot}"),
            AllocOp::Free { slot } => write!(f, "free slot {slot}"),
        }
    }
}

/// Per slot: the tag written into its block, and the size asked for.
type SlotModel = Vec<Option<(u64, u64)>>;

pub(super) struct AllocSubject {
    fault: Option<Fault>,
    ops: Vec<AllocOp>,
    spans: Vec<(usize, usize)>,
    models: Vec<SlotModel>,
    setup_end: usize,
    slots: usize,
}

impl AllocSubject {
    fn config(&self, observer: Option<Arc<Recorder>>) -> PoolConfig {
        PoolConfig {
            persist: sim_persist(),
            observer: observer.map(|r| r as Arc<dyn crate::pm::PmObserver>),
            fault: self.fault,
            small_pages: false,
        }
    }

    /// Slot `i`: root slots 0..7, then words in the table block.
    fn slot_off(pool: &Pool, table: u64, i: usize) -> Result<u64> {
        if i < TABLE_ROOT {
            pool.root_slot(i)
        } else {
            Ok(table + 8 * (i - TABLE_ROOT) as u64)
        }
    }

    pub(super) fn generate(seed: u64, n: usize, slots: usize) -> Vec<AllocOp> {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0xA110C);
        let mut full = vec![false; slots];
        (0..n)
            .map(|_| {
                let slot = rng.gen_range(0..slots);
                if full[slot] && rng.gen_bool(0.5) {
                    full[slot] = false;
                    AllocOp::Free { slot }
                } else {
                    full[slot] = true;
                    let size = match rng.gen_range(0..100) {
                        0..=59 => rng.gen_range(1..=256),
                        60..=89 => rng.gen_range(257..=32 * 1024),
                        _ => rng.gen_range(32 * 1024 + 1..=200 * 1024),
                    };
                    AllocOp::Put { slot, size }
                }
            })
            .collect()
    }

    pub(super) fn record(
        cfg: &CrashConfig,
        ops: Vec<AllocOp>,
    ) -> Result<(AllocSubject, Trace, Vec<Failure>)> {
        let slots = cfg
            .keys
            .clamp(TABLE_ROOT + 1, TABLE_ROOT + (TABLE_SIZE / 8) as usize);
        let rec = Arc::new(Recorder::new());
        let mut s = AllocSubject {
            fault: cfg.fault,
            ops: Vec::new(),
            spans: Vec::new(),
            models: vec![vec![None; slots]],
            setup_end: 0,
            slots,
        };
        let pool = Pool::create_anonymous(
            cfg.pool_size,
            ALLOC_SUBJECT,
            &s.config(Some(Arc::clone(&rec))),
        )?;
        let r = pool.reserve(TABLE_SIZE)?;
        let table = r.offset();
        // SAFETY: single-threaded; the block is reserved and unpublished.
        unsafe { pool.zero_bytes(table, TABLE_SIZE)? };
        pool.flush(table, TABLE_SIZE);
        pool.activate(r, pool.root_slot(TABLE_ROOT)?)?;
        s.setup_end = rec.position();
        let mut failures = Vec::new();
        let mut model = s.models[0].clone();
        for (i, op) in ops.iter().enumerate() {
            let start = rec.position();
            let tag = i as u64 + 1;
            let res: Result<()> = match *op {
                AllocOp::Put { slot, size } => (|| {
                    let so = Self::slot_off(&pool, table, slot)?;
                    let r = pool.reserve(size)?;
                    let b = r.offset();
                    let end = b + r.size() - 8;
                    // SAFETY: single-threaded; the block is reserved and unpublished.
                    unsafe {
                        pool.write_bytes(b, &tag.to_le_bytes())?;
                        pool.write_bytes(end, &tag.to_le_bytes())?;
                    }
                    pool.flush(b, 8);
                    pool.flush(end, 8);
                    pool.replace(r, so)?;
                    model[slot] = Some((tag, size));
                    Ok(())
                })(),
                AllocOp::Free { slot } => (|| {
                    let so = Self::slot_off(&pool, table, slot)?;
                    if pool.load_u64(so)? == 0 {
                        return Ok(());
                    }
                    pool.free(so)?;
                    model[slot] = None;
                    Ok(())
                })(),
            };
            match res {
                Ok(()) | Err(Error::PoolFull { .. }) => {}
                Err(e) => failures.push(live_failure(i, op, format!("live run: {e}"))),
            }
            s.spans.push((start, rec.position()));
            s.models.push(model.clone());
        }
        drop(pool);
        s.ops = ops;
        Ok((s, rec.take(), failures))
    }

    fn expected(&self, point: usize) -> (usize, bool) {
        expected_at(&self.spans, point)
    }

    fn check_state(&self, pool: &Pool, model: &SlotModel) -> std::result::Result<(), String> {
        let e = |e: Error| e.to_string();
        let table = pool
            .load_u64(pool.root_slot(TABLE_ROOT).map_err(e)?)
            .map_err(e)?;
        let mut live = vec![table];
        for (i, m) in model.iter().enumerate() {
            let so = Self::slot_off(pool, table, i).map_err(e)?;
            let v = pool.load_u64(so).map_err(e)?;
            match m {
                None if v == 0 => {}
                None => return Err(format!("slot {i} holds {v:#x}, expected null")),
                Some((tag, size)) => {
                    if v == 0 {
                        return Err(format!("slot {i} is null, expected the block tagged {tag}"));
                    }
                    let bs = pool.block_size(v).map_err(|err| {
                        format!("slot {i} points to {v:#x}, not an allocated block: {err}")
                    })?;
                    if bs < *size {
                        return Err(format!(
                            "slot {i}: block of {bs} B, {size} B were asked for"
                        ));
                    }
                    let head = pool.load_u64(v).map_err(e)?;
                    let tail = pool.load_u64(v + bs - 8).map_err(e)?;
                    if head != *tag || tail != *tag {
                        return Err(format!(
                            "slot {i}: block contents tagged {head}/{tail}, expected {tag} (contents not durable before activation)"
                        ));
                    }
                    live.push(v);
                }
            }
        }
        let mut allocated: Vec<u64> = pool
            .allocated_blocks()
            .map_err(e)?
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        allocated.sort_unstable();
        live.sort_unstable();
        if live.windows(2).any(|w| w[0] == w[1]) {
            return Err("two slots share one block".into());
        }
        if allocated != live {
            let leak = allocated.iter().find(|b| !live.contains(b));
            let dangling = live.iter().find(|b| !allocated.contains(b));
            return Err(format!(
                "allocated blocks differ from the referenced ones (leaked: {leak:x?}, referenced but free: {dangling:x?})"
            ));
        }
        pool.check_untouched().map_err(e)?;
        Ok(())
    }
}

impl Subject for AllocSubject {
    fn verify(&self, image: &[u8], point: usize) -> std::result::Result<(), String> {
        let pool = match Pool::open_image(image, Some(ALLOC_SUBJECT), &self.config(None)) {
            Ok(p) => p,
            Err(Error::NotAPool { .. }) if point < self.setup_end => return Ok(()),
            Err(e) => return Err(format!("recovery failed: {e}")),
        };
        if point < self.setup_end {
            let t = pool
                .load_u64(pool.root_slot(TABLE_ROOT).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            let blocks = pool.allocated_blocks().map_err(|e| e.to_string())?;
            let ok = (t == 0 && blocks.is_empty()) || (blocks.len() == 1 && blocks[0].0 == t);
            return if ok {
                Ok(())
            } else {
                Err(format!("during setup: table {t:#x}, allocated {blocks:x?}"))
            };
        }
        let (acked, in_flight) = self.expected(point);
        let first = self.check_state(&pool, &self.models[acked]);
        if first.is_ok() {
            return Ok(());
        }
        if in_flight && self.check_state(&pool, &self.models[acked + 1]).is_ok() {
            return Ok(());
        }
        first
    }

    fn record_recovery(&self, image: &[u8]) -> std::result::Result<RecoveryRun, String> {
        let rec = Arc::new(Recorder::new());
        match Pool::open_image(
            image,
            Some(ALLOC_SUBJECT),
            &self.config(Some(Arc::clone(&rec))),
        ) {
            Ok(p) => drop(p),
            Err(Error::NotAPool { .. }) => {}
            Err(e) => return Err(format!("recovery failed: {e}")),
        }
        let trace = rec.take();
        Ok(RecoveryRun {
            recovered: trace.events.len(),
            trace,
            after: None,
        })
    }

    fn at(&self, point: usize) -> (usize, Option<String>) {
        let (acked, in_flight) = self.expected(point);
        let _ = self.slots;
        (acked, in_flight.then(|| self.ops[acked].to_string()))
    }
}
