//! Operation mixes: which operations a workload runs, in what proportions,
//! with which request distribution.
//!
//! | name | insert | read | update | delete | scan | read-modify-write | keys chosen | source |
//! |---|---|---|---|---|---|---|---|---|
//! | `hart-read-intensive` | 10 | 70 | 10 | 10 | | | uniform | HART §IV-C, Fig. 9a |
//! | `hart-rmw` | | 50 | 50 | | | | uniform | HART §IV-C, Fig. 9b ("Read-Modified-Write") |
//! | `hart-write-intensive` | 40 | 20 | 40 | | | | uniform | HART §IV-C, Fig. 9c |
//! | `dptree-insert-only` | 100 | | | | | | uniform | DPTree §4.4, Fig. 12a |
//! | `dptree-read-only` | | 100 | | | | | uniform | DPTree §4.4, Fig. 12b |
//! | `dptree-read-update` | | 50 | 50 | | | | uniform | DPTree §4.4, Fig. 12c |
//! | `dptree-scan-insert` | 5 | | | | 95 | | uniform | DPTree §4.4, Fig. 12d |
//! | `dptree-mixed` | 20 | 50 | 20 | | 10 | | uniform | DPTree §4.4, Fig. 12e |
//! | `ycsb-a` | | 50 | 50 | | | | zipfian | YCSB workload A |
//! | `ycsb-b` | | 95 | 5 | | | | zipfian | YCSB workload B |
//! | `ycsb-c` | | 100 | | | | | zipfian | YCSB workload C |
//! | `ycsb-d` | 5 | 95 | | | | | latest | YCSB workload D |
//! | `ycsb-e` | 5 | | | | 95 | | zipfian | YCSB workload E (scan length uniform in 1..=N) |
//! | `ycsb-f` | | 50 | | | | 50 | zipfian | YCSB workload F |
//!
//! A custom mix is written as weights: `read=90,update=10` (names: insert,
//! read, update, delete, scan, rmw; weights are relative, any positive sum).
//!
//! # Operations
//! - **insert** adds a key never inserted before (the next extra key of the
//!   [`super::keys::KeySet`]);
//! - **read** gets a key and checks its value;
//! - **update** replaces the value of a key ([`crate::Db::update`]);
//! - **delete** removes a key;
//! - **scan** reads the records from a key on, as many as the scan length;
//! - **rmw** reads a key, then writes a new value (YCSB's read-modify-write).

use std::fmt;

use super::dist::Distribution;

/// One kind of operation in a mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// Insert a new key.
    Insert,
    /// Read a key and check its value.
    Read,
    /// Replace a key's value.
    Update,
    /// Remove a key.
    Delete,
    /// Read a range of records.
    Scan,
    /// Read, then update, one key.
    #[serde(rename = "rmw")]
    ReadModifyWrite,
}

impl OpKind {
    /// Every kind.
    pub const ALL: [OpKind; 6] = [
        OpKind::Insert,
        OpKind::Read,
        OpKind::Update,
        OpKind::Delete,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
    ];

    /// The name in mixes and reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Delete => "delete",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
        }
    }

    /// A dense index, for per-kind arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    fn parse(s: &str) -> Option<OpKind> {
        Some(match s {
            "insert" | "i" => OpKind::Insert,
            "read" | "search" | "get" | "lookup" | "r" => OpKind::Read,
            "update" | "u" => OpKind::Update,
            "delete" | "d" => OpKind::Delete,
            "scan" | "s" => OpKind::Scan,
            "rmw" | "read-modify-write" => OpKind::ReadModifyWrite,
            _ => return None,
        })
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a mix's scans have a fixed length or YCSB-E's uniform one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScanStyle {
    /// Every scan reads the scan length.
    Fixed,
    /// Uniform in 1..=scan length (YCSB workload E).
    Uniform,
}

/// A mix of operations.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Mix {
    /// Its name (`ycsb-a`, or the custom spec).
    pub name: String,
    /// What the paper calls it.
    pub label: String,
    /// Where it comes from.
    pub source: String,
    /// Relative weights of the operations (zero weights left out).
    pub weights: Vec<(OpKind, u32)>,
    /// The request distribution it uses unless told otherwise.
    pub dist: Distribution,
    /// How its scans choose their length.
    pub scan_style: ScanStyle,
}

/// (name, label, source, weights as insert/read/update/delete/scan/rmw, dist).
type MixRow = (&'static str, &'static str, &'static str, [u32; 6], Dist);

#[derive(Clone, Copy)]
enum Dist {
    Uniform,
    Zipfian,
    Latest,
}

#[rustfmt::skip]
const MIXES: &[MixRow] = &[
    ("hart-read-intensive", "Read-Intensive", "HART §IV-C, Fig. 9a", [10, 70, 10, 10, 0, 0], Dist::Uniform),
    ("hart-rmw", "Read-Modified-Write", "HART §IV-C, Fig. 9b", [0, 50, 50, 0, 0, 0], Dist::Uniform),
    ("hart-write-intensive", "Write-Intensive", "HART §IV-C, Fig. 9c", [40, 20, 40, 0, 0, 0], Dist::Uniform),
    ("dptree-insert-only", "InsertOnly", "DPTree §4.4, Fig. 12a", [100, 0, 0, 0, 0, 0], Dist::Uniform),
    ("dptree-read-only", "ReadOnly", "DPTree §4.4, Fig. 12b", [0, 100, 0, 0, 0, 0], Dist::Uniform),
    ("dptree-read-update", "ReadUpdate", "DPTree §4.4, Fig. 12c", [0, 50, 50, 0, 0, 0], Dist::Uniform),
    ("dptree-scan-insert", "ScanInsert", "DPTree §4.4, Fig. 12d", [5, 0, 0, 0, 95, 0], Dist::Uniform),
    ("dptree-mixed", "Mixed", "DPTree §4.4, Fig. 12e", [20, 50, 20, 0, 10, 0], Dist::Uniform),
    ("ycsb-a", "YCSB A (update heavy)", "YCSB workload A", [0, 50, 50, 0, 0, 0], Dist::Zipfian),
    ("ycsb-b", "YCSB B (read mostly)", "YCSB workload B", [0, 95, 5, 0, 0, 0], Dist::Zipfian),
    ("ycsb-c", "YCSB C (read only)", "YCSB workload C", [0, 100, 0, 0, 0, 0], Dist::Zipfian),
    ("ycsb-d", "YCSB D (read latest)", "YCSB workload D", [5, 95, 0, 0, 0, 0], Dist::Latest),
    ("ycsb-e", "YCSB E (short ranges)", "YCSB workload E", [5, 0, 0, 0, 95, 0], Dist::Zipfian),
    ("ycsb-f", "YCSB F (read-modify-write)", "YCSB workload F", [0, 50, 0, 0, 0, 50], Dist::Zipfian),
];

/// Short names accepted for the named mixes.
const ALIASES: &[(&str, &str)] = &[
    ("hart-ri", "hart-read-intensive"),
    ("hart-wi", "hart-write-intensive"),
    ("read-intensive", "hart-read-intensive"),
    ("write-intensive", "hart-write-intensive"),
    ("read-modify-write", "hart-rmw"),
    ("insert-only", "dptree-insert-only"),
    ("read-only", "dptree-read-only"),
    ("read-update", "dptree-read-update"),
    ("scan-insert", "dptree-scan-insert"),
    ("mixed", "dptree-mixed"),
];

impl Mix {
    /// The names of the named mixes.
    pub fn names() -> Vec<&'static str> {
        MIXES.iter().map(|m| m.0).collect()
    }

    /// A named mix (or an alias of one).
    pub fn named(name: &str) -> Option<Mix> {
        let name = ALIASES
            .iter()
            .find(|(a, _)| *a == name)
            .map_or(name, |(_, n)| n);
        let (name, label, source, w, dist) = MIXES.iter().find(|m| m.0 == name)?;
        Some(Mix {
            name: name.to_string(),
            label: label.to_string(),
            source: source.to_string(),
            weights: OpKind::ALL
                .iter()
                .zip(w)
                .filter(|(_, &w)| w > 0)
                .map(|(&k, &w)| (k, w))
                .collect(),
            dist: match dist {
                Dist::Uniform => Distribution::Uniform,
                Dist::Zipfian => Distribution::Zipfian {
                    theta: super::dist::DEFAULT_ZIPF_THETA,
                },
                Dist::Latest => Distribution::Latest {
                    theta: super::dist::DEFAULT_ZIPF_THETA,
                },
            },
            scan_style: if *name == "ycsb-e" {
                ScanStyle::Uniform
            } else {
                ScanStyle::Fixed
            },
        })
    }

    /// Parses a named mix or a custom one (`read=90,update=10`).
    pub fn parse(s: &str) -> Result<Mix, String> {
        let t = s.trim().to_ascii_lowercase();
        if let Some(m) = Mix::named(&t) {
            return Ok(m);
        }
        if !t.contains('=') {
            return Err(format!(
                "unknown mix `{s}`: name one of {}, or give weights such as read=90,update=10",
                Mix::names().join(", ")
            ));
        }
        let mut weights: Vec<(OpKind, u32)> = Vec::new();
        for part in t.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, w) = part
                .split_once('=')
                .ok_or_else(|| format!("mix `{s}`: `{part}` is not OP=WEIGHT"))?;
            let op = OpKind::parse(op.trim()).ok_or_else(|| {
                format!(
                    "mix `{s}`: unknown operation `{op}` (insert, read, update, delete, scan, rmw)"
                )
            })?;
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("mix `{s}`: weight `{w}` is not a whole number"))?;
            if weights.iter().any(|(k, _)| *k == op) {
                return Err(format!("mix `{s}`: `{op}` is given twice"));
            }
            if w > 0 {
                weights.push((op, w));
            }
        }
        let total: u64 = weights.iter().map(|(_, w)| u64::from(*w)).sum();
        if total == 0 || total > u64::from(u32::MAX) {
            return Err(format!(
                "mix `{s}`: the weights must add up to a positive number below 2^32"
            ));
        }
        weights.sort();
        Ok(Mix {
            name: t.replace(' ', ""),
            label: "custom".into(),
            source: "custom".into(),
            weights,
            dist: Distribution::Uniform,
            scan_style: ScanStyle::Fixed,
        })
    }

    /// Whether the mix has operations of this kind.
    pub fn has(&self, op: OpKind) -> bool {
        self.weights.iter().any(|(k, _)| *k == op)
    }

    /// The share of `op` in percent.
    pub fn percent(&self, op: OpKind) -> f64 {
        let total: u32 = self.weights.iter().map(|(_, w)| w).sum();
        let w = self
            .weights
            .iter()
            .find(|(k, _)| *k == op)
            .map_or(0, |(_, w)| *w);
        100.0 * f64::from(w) / f64::from(total.max(1))
    }

    /// A picker of operations for this mix.
    pub fn picker(&self) -> OpPicker {
        let mut acc = 0;
        let cumulative = self
            .weights
            .iter()
            .map(|&(k, w)| {
                acc += w;
                (acc, k)
            })
            .collect();
        OpPicker {
            cumulative,
            total: acc,
        }
    }

    /// `insert 10%, read 70%, ...`.
    pub fn describe(&self) -> String {
        self.weights
            .iter()
            .map(|(k, _)| format!("{k} {:.0}%", self.percent(*k)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Draws operation kinds in a mix's proportions.
#[derive(Debug, Clone)]
pub struct OpPicker {
    cumulative: Vec<(u32, OpKind)>,
    total: u32,
}

impl OpPicker {
    /// The one kind of a mix of one kind.
    pub fn only(&self) -> Option<OpKind> {
        match self.cumulative[..] {
            [(_, only)] => Some(only),
            _ => None,
        }
    }

    /// The next operation, from a uniform draw in `0..total`; a mix of
    /// one kind draws nothing.
    #[inline]
    pub fn pick(&self, rng: &mut impl rand::Rng) -> OpKind {
        if let Some(only) = self.only() {
            return only;
        }
        let x = rng.gen_range(0..self.total);
        self.cumulative
            .iter()
            .find(|(c, _)| x < *c)
            .map(|(_, k)| *k)
            .expect("x is below the last cumulative weight, which is the total")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_mix_of_one_kind_draws_nothing_from_its_stream() {
        let mut rng = SmallRng::seed_from_u64(3);
        let picker = Mix::parse("read=100").unwrap().picker();
        assert_eq!(picker.only(), Some(OpKind::Read));
        assert!((0..10).all(|_| picker.pick(&mut rng) == OpKind::Read));
        let untouched = SmallRng::seed_from_u64(3).gen::<u64>();
        assert_eq!(rng.gen::<u64>(), untouched);
        // Two kinds draw one number per pick.
        let picker = Mix::parse("read=50,update=50").unwrap().picker();
        assert_eq!(picker.only(), None);
        let mut rng = SmallRng::seed_from_u64(3);
        picker.pick(&mut rng);
        assert_ne!(rng.gen::<u64>(), untouched);
    }

    #[test]
    fn named_mixes_match_the_papers() {
        let ri = Mix::named("hart-read-intensive").unwrap();
        assert_eq!(
            ri.weights,
            [
                (OpKind::Insert, 10),
                (OpKind::Read, 70),
                (OpKind::Update, 10),
                (OpKind::Delete, 10)
            ]
        );
        assert_eq!(ri.dist, Distribution::Uniform);
        let wi = Mix::named("hart-wi").unwrap();
        assert_eq!(wi.describe(), "insert 40%, read 20%, update 40%");
        let mixed = Mix::named("dptree-mixed").unwrap();
        assert_eq!(
            mixed.describe(),
            "insert 20%, read 50%, update 20%, scan 10%"
        );
        assert!(matches!(
            Mix::named("ycsb-d").unwrap().dist,
            Distribution::Latest { .. }
        ));
        assert_eq!(Mix::named("ycsb-e").unwrap().scan_style, ScanStyle::Uniform);
        for name in Mix::names() {
            let m = Mix::named(name).unwrap();
            let total: u32 = m.weights.iter().map(|(_, w)| w).sum();
            assert_eq!(total, 100, "{name}");
        }
    }

    #[test]
    fn custom_mixes_parse_and_bad_ones_are_refused() {
        let m = Mix::parse("read=90, update=10").unwrap();
        assert_eq!(m.weights, [(OpKind::Read, 90), (OpKind::Update, 10)]);
        assert!((m.percent(OpKind::Read) - 90.0).abs() < 1e-9);
        for bad in ["nope", "read=x", "read=1,read=2", "fly=3", "read=0", "read"] {
            assert!(Mix::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn picker_follows_the_weights() {
        let p = Mix::named("hart-read-intensive").unwrap().picker();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut n = [0u32; 6];
        for _ in 0..100_000 {
            n[p.pick(&mut rng).index()] += 1;
        }
        assert!((9_000..11_000).contains(&n[OpKind::Insert.index()]));
        assert!((68_000..72_000).contains(&n[OpKind::Read.index()]));
        assert_eq!(n[OpKind::Scan.index()], 0);
    }
}
