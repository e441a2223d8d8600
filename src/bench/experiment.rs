//! What one experiment runs: a key set, a record count, a value size, a
//! thread count, a PM latency, and a sequence of phases on one pool.
//!
//! Every engine runs every experiment in a pool of its own: the phases run
//! in order, each timed on its own (see [`super::runner`]).
//!
//! | phase | what it does | reported as |
//! |---|---|---|
//! | [`PhaseSpec::Load`] | inserts the `records` keys (the build) | `insert` |
//! | [`PhaseSpec::Recover`] | closes the database, opens it again, times the open | `recovery` |
//! | [`PhaseSpec::Search`] | gets every key inserted so far, in a random order, checking values | `search` |
//! | [`PhaseSpec::SearchMany`] | the same, `batch` keys per [`crate::Db::get_many_with`] call (memcached's multi-key get) | `search-many` |
//! | [`PhaseSpec::Update`] | replaces every key's value, in a random order | `update` |
//! | [`PhaseSpec::Delete`] | deletes every key, in a random order | `delete` |
//! | [`PhaseSpec::InsertMany`] | inserts the `records` keys again (after `delete`), `batch` per [`crate::Db::put_many`] call | `insert-many` |
//! | [`PhaseSpec::Mix`] | runs `ops` operations of a mix (see [`super::mix`]) | the mix's name |
//! | [`PhaseSpec::Scan`] | `count` range queries from random keys | its name |

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::dist::{Distribution, ScanLen};
use super::keys::KeyKind;
use super::mix::{Mix, OpKind, OpPicker, ScanStyle};
use super::workload::mix64;
use super::{BenchError, BenchResult};
use crate::engine::MAX_VALUE_LEN;
use crate::pm::PmLatency;

/// Most threads an experiment may use.
pub const MAX_THREADS: usize = 1024;

/// One phase of an experiment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum PhaseSpec {
    /// Insert the `records` keys.
    Load,
    /// Close and reopen the database; time the open (recovery).
    Recover,
    /// Get every key inserted so far.
    Search,
    /// Get every key inserted so far, `batch` keys per
    /// [`crate::Db::get_many_with`] call, in [`PhaseSpec::Search`]'s random
    /// order. Operations count keys, so its throughput
    /// compares with `search`'s; a latency sample is one whole call.
    #[serde(rename = "search-many")]
    SearchMany {
        /// Keys per call.
        batch: usize,
    },
    /// Replace every key's value.
    Update,
    /// Delete every key.
    Delete,
    /// Insert the `records` keys again, in load order, `batch` items per
    /// [`crate::Db::put_many`] call; it follows [`PhaseSpec::Delete`], which
    /// left the index empty. Operations count keys, so its throughput
    /// compares with `insert`'s; a latency sample is one whole call.
    #[serde(rename = "insert-many")]
    InsertMany {
        /// Items per call.
        batch: usize,
    },
    /// Operations of a mix.
    Mix {
        /// The mix.
        mix: Mix,
        /// Operations in all (split over the threads).
        ops: u64,
        /// How keys are chosen.
        dist: Distribution,
        /// How long its scans are.
        scan: ScanLen,
    },
    /// Range queries from uniformly chosen keys.
    Scan {
        /// The phase's name (`scan`, `scan-0.01%`).
        name: String,
        /// Number of range queries.
        count: u64,
        /// Records per query.
        len: ScanLen,
    },
}

impl PhaseSpec {
    /// A mix phase with the mix's own distribution and a scan length of
    /// `scan_len` (uniform in 1..=`scan_len` for YCSB E).
    pub fn mix(mix: Mix, ops: u64, dist: Option<Distribution>, scan_len: u64) -> PhaseSpec {
        let scan = match mix.scan_style {
            ScanStyle::Fixed => ScanLen::Fixed { len: scan_len },
            ScanStyle::Uniform => ScanLen::Uniform { max: scan_len },
        };
        PhaseSpec::Mix {
            dist: dist.unwrap_or(mix.dist),
            mix,
            ops,
            scan,
        }
    }

    /// The name in reports.
    pub fn name(&self) -> &str {
        match self {
            PhaseSpec::Load => "insert",
            PhaseSpec::Recover => "recovery",
            PhaseSpec::Search => "search",
            PhaseSpec::SearchMany { .. } => "search-many",
            PhaseSpec::Update => "update",
            PhaseSpec::Delete => "delete",
            PhaseSpec::InsertMany { .. } => "insert-many",
            PhaseSpec::Mix { mix, .. } => &mix.name,
            PhaseSpec::Scan { name, .. } => name,
        }
    }

    /// A one-line description.
    pub fn describe(&self) -> String {
        match self {
            PhaseSpec::Load => "insert every record".into(),
            PhaseSpec::Recover => "close, reopen, time the recovery".into(),
            PhaseSpec::Search => "get every key in random order".into(),
            PhaseSpec::SearchMany { batch } => {
                format!("get every key in random order, {batch} per multi-key get")
            }
            PhaseSpec::Update => "update every key in random order".into(),
            PhaseSpec::Delete => "delete every key in random order".into(),
            PhaseSpec::InsertMany { batch } => {
                format!("insert every record again, {batch} per multi-key put")
            }
            PhaseSpec::Mix {
                mix,
                ops,
                dist,
                scan,
            } => {
                let mut s = format!(
                    "{ops} ops of {} ({}), keys {dist}",
                    mix.label,
                    mix.describe()
                );
                if mix.has(OpKind::Scan) {
                    s.push_str(&format!(", scans of {scan} records"));
                }
                s
            }
            PhaseSpec::Scan { count, len, .. } => {
                format!("{count} range queries of {len} records from random keys")
            }
        }
    }
}

/// One experiment.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Experiment {
    /// Unique within a suite; used by figures and claims.
    pub id: String,
    /// A human title.
    pub title: String,
    /// The key set.
    pub keys: KeyKind,
    /// Keys loaded.
    pub records: u64,
    /// Bytes per value.
    pub value_size: u64,
    /// Threads that run each phase.
    pub threads: usize,
    /// Emulated PM latency (`None`: none).
    pub latency: Option<PmLatency>,
    /// The phases, in order; the first is [`PhaseSpec::Load`].
    pub phases: Vec<PhaseSpec>,
}

/// The seed of the operation-kind stream of `thread` in phase `phase`.
pub(crate) fn op_stream_seed(seed: u64, phase: usize, thread: usize) -> u64 {
    mix64(seed ^ mix64(((phase as u64) << 32 | thread as u64) ^ 0x6f70_7374_7265_616d))
}

/// Operations of thread `t` when `ops` are split over `threads`.
pub(crate) fn thread_share(ops: u64, threads: usize, t: usize) -> u64 {
    let n = threads as u64;
    ops / n + u64::from((t as u64) < ops % n)
}

impl Experiment {
    /// `latency` as written on the command line (`300/100`, or `none`).
    pub fn latency_label(&self) -> String {
        self.latency
            .map_or_else(|| "none".into(), |l| l.to_string())
    }

    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseSpec> {
        self.phases.iter().find(|p| p.name() == name)
    }

    /// Checks that the experiment can run.
    pub fn check(&self) -> BenchResult<()> {
        let bad = |m: String| Err(BenchError::Config(format!("experiment `{}`: {m}", self.id)));
        if self.records == 0 {
            return bad("--records must be at least 1".into());
        }
        if self.value_size > MAX_VALUE_LEN as u64 {
            return bad(format!(
                "value size {} is more than the largest value ({MAX_VALUE_LEN} bytes)",
                self.value_size
            ));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return bad(format!("{} threads: use 1 to {MAX_THREADS}", self.threads));
        }
        if self.phases.first() != Some(&PhaseSpec::Load)
            || self
                .phases
                .iter()
                .filter(|p| **p == PhaseSpec::Load)
                .count()
                != 1
        {
            return bad("the first phase, and only the first, must be the load".into());
        }
        for (i, p) in self.phases.iter().enumerate() {
            if self.phases[..i].iter().any(|q| q.name() == p.name()) {
                return bad(format!("two phases are called `{}`", p.name()));
            }
            match p {
                PhaseSpec::Mix { ops: 0, .. } => {
                    return bad("a mix needs at least 1 operation (--ops)".into())
                }
                PhaseSpec::Scan { count: 0, .. } => {
                    return bad("a scan phase needs at least 1 query".into())
                }
                PhaseSpec::SearchMany { batch: 0 } => {
                    return bad("a multi-key get needs at least 1 key (--get-many)".into())
                }
                PhaseSpec::InsertMany { batch: 0 } => {
                    return bad("a multi-key put needs at least 1 item (--put-many)".into())
                }
                PhaseSpec::InsertMany { .. } if self.phases[i - 1] != PhaseSpec::Delete => {
                    return bad(
                        "insert-many inserts every record again: it must follow delete".into(),
                    )
                }
                _ => {}
            }
        }
        let total = self.records.checked_add(self.planned_inserts(0));
        if total.is_none_or(|t| t > u64::from(u32::MAX)) {
            return bad(format!(
                "{} records plus the keys the mixes insert is more than this benchmark supports ({})",
                self.records,
                u32::MAX
            ));
        }
        Ok(())
    }

    /// How many keys the mixes insert, in all phases and threads, when run
    /// with `seed`. The operation kinds are drawn from per-thread streams
    /// (seeded by phase and thread), so this is exact, and the key set is generated
    /// with just that many extra keys.
    pub fn planned_inserts(&self, seed: u64) -> u64 {
        let mut n = 0;
        for (pi, p) in self.phases.iter().enumerate() {
            if let PhaseSpec::Mix { mix, ops, .. } = p {
                if !mix.has(OpKind::Insert) {
                    continue;
                }
                let picker: OpPicker = mix.picker();
                for t in 0..self.threads {
                    let mut rng = SmallRng::seed_from_u64(op_stream_seed(seed, pi, t));
                    n += (0..thread_share(*ops, self.threads, t))
                        .filter(|_| picker.pick(&mut rng) == OpKind::Insert)
                        .count() as u64;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(phases: Vec<PhaseSpec>) -> Experiment {
        Experiment {
            id: "t".into(),
            title: "t".into(),
            keys: KeyKind::Sparse,
            records: 100,
            value_size: 8,
            threads: 2,
            latency: None,
            phases,
        }
    }

    #[test]
    fn planned_inserts_are_exact_and_reproducible() {
        let m = Mix::named("ycsb-d").unwrap();
        let e = exp(vec![PhaseSpec::Load, PhaseSpec::mix(m, 10_000, None, 10)]);
        let n = e.planned_inserts(1);
        assert_eq!(n, e.planned_inserts(1));
        assert!((400..600).contains(&n), "{n}");
        assert_eq!(
            exp(vec![PhaseSpec::Load, PhaseSpec::Search]).planned_inserts(1),
            0
        );
        assert_eq!(thread_share(10, 3, 0), 4);
        assert_eq!((0..3).map(|t| thread_share(10, 3, t)).sum::<u64>(), 10);
    }

    #[test]
    fn bad_experiments_are_refused() {
        assert!(exp(vec![PhaseSpec::Load, PhaseSpec::Search])
            .check()
            .is_ok());
        assert!(exp(vec![PhaseSpec::Search]).check().is_err());
        assert!(exp(vec![PhaseSpec::Load, PhaseSpec::Load]).check().is_err());
        assert!(
            exp(vec![PhaseSpec::Load, PhaseSpec::Search, PhaseSpec::Search])
                .check()
                .is_err()
        );
        let mut e = exp(vec![PhaseSpec::Load]);
        e.threads = 0;
        assert!(e.check().is_err());
        e.threads = 1;
        e.records = 0;
        assert!(e.check().unwrap_err().to_string().contains("--records"));
        let m = Mix::named("ycsb-a").unwrap();
        assert!(exp(vec![PhaseSpec::Load, PhaseSpec::mix(m, 0, None, 1)])
            .check()
            .is_err());
    }
}
