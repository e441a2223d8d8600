//! Presets: the papers' evaluations as suites, with their claims.
//!
//! | preset | paper | experiments |
//! |---|---|---|
//! | `hart` | Pan, Xie, Song: HART (hash-assisted ART), §IV | Fig. 4–7 basic operations × 3 workloads × 3 latencies, Fig. 8 record counts, Fig. 9 mixes, Fig. 10a range query, 10b memory, 10c build vs recovery, 10d threads |
//! | `wort` | Lee et al., FAST'17 (WORT, WOART, ART+CoW), §5 | Fig. 7–8 insertion, Table 1 flushes per insertion, Fig. 9 search, Fig. 10 range queries |
//! | `dptree` | Zhou et al., VLDB'19 (DPTree), §4 | Fig. 8a–c insert, lookup, scan; Table 1 flushes and fences; space; Fig. 12 YCSB mixes × threads; Fig. 13 recovery |
//! | `art-bplus` | Liu et al., J. Software 2022 (heterogeneous ART + B+-tree), §3 | Fig. 11 throughput, Fig. 12 point queries, Fig. 13 range queries, Fig. 14 value sizes, Table 2 index size |
//!
//! Each preset runs the engines of its paper that are in this build, plus
//! the reference engine `pmlog`; the others are skipped with a note, and
//! the claims that need them are "not measurable here". Each has a quick
//! scale (seconds to a minute, the default) and a full one (`--full`: the
//! paper's record counts, capped where this machine's memory or disk would
//! not hold them, with a note).
//!
//! The section numbers are the ones printed in the papers: the DPTree
//! paper's evaluation is its section 4, the art-bplus paper's its section 3.

mod art_bplus;
mod dptree;
mod hart;
mod wort;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::experiment::{Experiment, PhaseSpec};
use super::keys::{dictionary_available, missing_dictionary_message, KeyKind};
use super::suite::{Planned, Suite, REFERENCE_ENGINE};
use super::summary::meminfo_kib;
use crate::engine::{BATCH, MAX_KEY_LEN};
use crate::pm::PmLatency;

/// A preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// The HART paper.
    Hart,
    /// The WORT / WOART / ART+CoW paper.
    Wort,
    /// The DPTree paper.
    Dptree,
    /// The heterogeneous ART + B+-tree paper.
    ArtBplus,
}

/// Keys per multi-key get in the presets' `search-many` phases (beyond
/// the papers, which search one key at a time): the engines' own batch,
/// so that each call is one batch of searches run side by side.
const SEARCH_MANY_BATCH: usize = BATCH;

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 4] = [Preset::Hart, Preset::Wort, Preset::Dptree, Preset::ArtBplus];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Hart => "hart",
            Preset::Wort => "wort",
            Preset::Dptree => "dptree",
            Preset::ArtBplus => "art-bplus",
        }
    }

    /// The paper.
    pub fn paper(self) -> &'static str {
        match self {
            Preset::Hart => {
                "Pan, Xie, Song: HART, a hash-assisted adaptive radix tree for persistent memory (§IV)"
            }
            Preset::Wort => {
                "Lee et al.: WORT: write optimal radix tree for persistent memory storage systems, FAST'17 (§5)"
            }
            Preset::Dptree => {
                "Zhou et al.: DPTree: differential indexing for persistent memory, VLDB'19 (§4)"
            }
            Preset::ArtBplus => {
                "Liu, Zhang, Luo, Jin: heterogeneous index for non-volatile memory (ART + B+-tree), J. Software 2022 (§3)"
            }
        }
    }

    /// The suite at quick or full scale.
    pub fn suite(self, ctx: &PresetCtx) -> Suite {
        let mut b = match self {
            Preset::Hart => hart::build(ctx),
            Preset::Wort => wort::build(ctx),
            Preset::Dptree => dptree::build(ctx),
            Preset::ArtBplus => art_bplus::build(ctx),
        };
        let mut engines: Vec<String> = b.engines.iter().map(|e| e.to_string()).collect();
        if !engines.iter().any(|e| e == REFERENCE_ENGINE) {
            engines.push(REFERENCE_ENGINE.to_string());
        }
        b.notes.insert(
            0,
            format!(
                "{} scale{}; `{REFERENCE_ENGINE}` runs as the reference engine (it is in none of the papers)",
                if ctx.full { "full" } else { "quick" },
                if ctx.full {
                    ""
                } else {
                    " (--full for the paper's record counts)"
                }
            ),
        );
        Suite {
            title: format!("--preset {}: {}", self.name(), self.paper()),
            preset: Some(self.name().to_string()),
            scale: if ctx.full { "full" } else { "quick" }.into(),
            engines,
            experiments: b.experiments,
            figures: b.figures,
            claims: b.claims,
            notes: b.notes,
            rounds: if ctx.full { 1 } else { 3 },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown preset `{s}` (one of: {})",
                    Preset::ALL.map(Preset::name).join(", ")
                )
            })
    }
}

/// What a preset needs to know about this run and machine.
#[derive(Debug, Clone)]
pub struct PresetCtx {
    /// `--full`.
    pub full: bool,
    /// The word list of the Dictionary workload.
    pub dictionary: PathBuf,
    /// Logical CPUs.
    pub cpus: usize,
    /// Bytes of memory available (for capping full-scale record counts).
    pub mem_available: Option<u64>,
    /// Bytes free where the pools go.
    pub disk_available: Option<u64>,
}

impl PresetCtx {
    /// The context of this machine; pools go to `pool_dir`.
    pub fn detect(full: bool, dictionary: &Path, pool_dir: &Path) -> Self {
        PresetCtx {
            full,
            dictionary: dictionary.to_path_buf(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_available: meminfo_kib("MemAvailable:").map(|k| k * 1024),
            disk_available: super::temp_pool::free_bytes(pool_dir),
        }
    }
}

/// What a preset module builds.
pub(crate) struct Built {
    pub engines: Vec<&'static str>,
    pub experiments: Vec<Planned>,
    pub figures: Vec<super::plot::Figure>,
    pub claims: Vec<super::verdict::Claim>,
    pub notes: Vec<String>,
}

/// `W/R` ns of emulated PM latency against 100 ns DRAM; `None` for 100/100.
pub(crate) fn latency(write_ns: u32, read_ns: u32) -> Option<PmLatency> {
    if (write_ns, read_ns) == (100, 100) {
        return None;
    }
    Some(PmLatency {
        write_ns,
        read_ns,
        dram_ns: 100,
    })
}

/// An experiment.
#[allow(
    clippy::too_many_arguments,
    reason = "a plain constructor of a plain struct"
)]
pub(crate) fn exp(
    id: impl Into<String>,
    title: impl Into<String>,
    keys: KeyKind,
    records: u64,
    value_size: u64,
    threads: usize,
    latency: Option<PmLatency>,
    phases: Vec<PhaseSpec>,
) -> Experiment {
    Experiment {
        id: id.into(),
        title: title.into(),
        keys,
        records,
        value_size,
        threads,
        latency,
        phases,
    }
}

/// Plans experiments, skipping Dictionary ones when the word list is
/// missing, and capping record counts at full scale.
pub(crate) struct Planner<'a> {
    pub ctx: &'a PresetCtx,
    pub experiments: Vec<Planned>,
    pub notes: Vec<String>,
    dictionary_words: Option<Option<u64>>,
    dict_note: bool,
}

impl<'a> Planner<'a> {
    pub fn new(ctx: &'a PresetCtx) -> Self {
        Planner {
            ctx,
            experiments: Vec::new(),
            notes: Vec::new(),
            dictionary_words: None,
            dict_note: false,
        }
    }

    /// `quick` at quick scale, `full` at full scale.
    pub fn scale<T>(&self, quick: T, full: T) -> T {
        if self.ctx.full {
            full
        } else {
            quick
        }
    }

    /// Distinct words in the word list (read once), `None` if it is missing.
    pub fn dictionary_words(&mut self) -> Option<u64> {
        if self.dictionary_words.is_none() {
            let n = dictionary_available(&self.ctx.dictionary)
                .then(|| std::fs::read(&self.ctx.dictionary).ok())
                .flatten()
                .map(|text| {
                    let mut seen = std::collections::HashSet::new();
                    text.split(|&b| b == b'\n')
                        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
                        .filter(|w| !w.is_empty() && w.len() <= MAX_KEY_LEN)
                        .filter(|w| seen.insert(w.to_vec()))
                        .count() as u64
                });
            self.dictionary_words = Some(n);
        }
        self.dictionary_words.flatten()
    }

    /// The record count for `requested`, capped at full scale where this
    /// machine's memory or disk would not hold it (with a note).
    pub fn records(&mut self, requested: u64, keys: KeyKind, value_size: u64) -> u64 {
        if !self.ctx.full {
            return requested;
        }
        let key = keys.max_key_len().min(24) as u64;
        // DRAM: the key set, a DRAM index of about 100 B per record, and the
        // pool's pages in the page cache; disk: the pool file (see
        // `pool_size_for`).
        let per_record_mem = key + 4 + 100 + key + value_size + 64;
        let per_record_disk = 4 * (key + value_size + 64);
        let mut cap = u64::MAX;
        if let Some(m) = self.ctx.mem_available {
            cap = cap.min(m / 10 * 6 / per_record_mem);
        }
        if let Some(d) = self.ctx.disk_available {
            cap = cap.min(d / 10 * 8 / per_record_disk);
        }
        let cap = cap.max(1000);
        if requested > cap {
            let note = format!(
                "{} records of {} keys with {value_size}-byte values capped at {cap} to fit this \
                 machine's memory and disk",
                requested,
                keys.label()
            );
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
            cap
        } else {
            requested
        }
    }

    /// Adds an experiment (skipped with the reason if it needs a missing
    /// word list).
    pub fn add(&mut self, e: Experiment) {
        let skip = (e.keys == KeyKind::Dictionary && self.dictionary_words().is_none())
            .then(|| missing_dictionary_message(&self.ctx.dictionary));
        if skip.is_some() && !self.dict_note {
            self.dict_note = true;
            self.notes.push(format!(
                "Dictionary experiments skipped: {}",
                missing_dictionary_message(&self.ctx.dictionary)
            ));
        }
        self.experiments.push(Planned {
            experiment: e,
            skip,
        });
    }
}

/// `10000` as `10k`, `1000000` as `1M`.
pub(crate) fn short_count(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suite;

    fn ctx(full: bool, dict: &str) -> PresetCtx {
        PresetCtx {
            full,
            dictionary: dict.into(),
            cpus: 2,
            mem_available: Some(8 << 30),
            disk_available: Some(100 << 30),
        }
    }

    #[test]
    fn presets_parse_and_build_valid_suites() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
            for full in [false, true] {
                let s = p.suite(&ctx(full, "/nonexistent/words"));
                assert!(!s.experiments.is_empty(), "{p}");
                assert!(!s.claims.is_empty(), "{p}");
                assert!(!s.figures.is_empty(), "{p}");
                assert!(s.engines.iter().any(|e| e == "pmlog"));
                let mut ids = std::collections::HashSet::new();
                for planned in &s.experiments {
                    planned.experiment.check().unwrap();
                    assert!(
                        ids.insert(planned.experiment.id.clone()),
                        "{p}: duplicate id"
                    );
                }
                // Every case a figure or claim names is an experiment of the suite.
                for f in &s.figures {
                    let cases: Vec<_> = match f {
                        crate::bench::plot::Figure::Bars { bars, .. } => {
                            bars.iter().map(|b| b.case.clone()).collect()
                        }
                        crate::bench::plot::Figure::Lines { lines, .. } => {
                            lines.iter().flat_map(|l| l.cases.clone()).collect()
                        }
                    };
                    for c in cases {
                        let e = s
                            .experiments
                            .iter()
                            .find(|e| e.experiment.id == c.exp)
                            .unwrap_or_else(|| panic!("{p}: figure {} names {}", f.id(), c.exp));
                        assert!(
                            c.phase.is_empty() || e.experiment.phase(&c.phase).is_some(),
                            "{p}: figure {} names phase {} of {}",
                            f.id(),
                            c.phase,
                            c.exp
                        );
                    }
                }
            }
        }
        assert!("nope".parse::<Preset>().is_err());
    }

    #[test]
    fn claims_name_existing_cases() {
        use crate::bench::verdict::Check;
        for p in Preset::ALL {
            let s = p.suite(&ctx(false, "/nonexistent/words"));
            for c in &s.claims {
                let cases: Vec<_> = match &c.check {
                    Check::Beats { cases, .. } => cases.clone(),
                    Check::Near { expected, .. } => {
                        expected.iter().map(|(c, _)| c.clone()).collect()
                    }
                    Check::Ratio { num, den, .. } => vec![num.clone(), den.clone()],
                    Check::MoreSensitive { from, to, .. } => {
                        from.iter().chain(to).cloned().collect()
                    }
                    Check::Never { .. } => vec![],
                };
                for case in cases {
                    let e = s
                        .experiments
                        .iter()
                        .find(|e| e.experiment.id == case.exp)
                        .unwrap_or_else(|| panic!("{p} {}: no experiment {}", c.source, case.exp));
                    assert!(
                        case.phase.is_empty() || e.experiment.phase(&case.phase).is_some(),
                        "{p} {}: no phase {} in {}",
                        c.source,
                        case.phase,
                        case.exp
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_word_list_skips_dictionary_experiments_with_a_note() {
        let s = Preset::Hart.suite(&ctx(false, "/nonexistent/words"));
        let skipped: Vec<_> = s.experiments.iter().filter(|p| p.skip.is_some()).collect();
        assert!(!skipped.is_empty());
        assert!(skipped
            .iter()
            .all(|p| p.experiment.keys == KeyKind::Dictionary));
        assert!(s.notes.iter().any(|n| n.contains("wamerican-insane")));
    }

    #[test]
    fn full_scale_is_capped_to_the_machine() {
        let mut small = ctx(true, "/nonexistent/words");
        small.mem_available = Some(1 << 30);
        let s = Preset::Hart.suite(&small);
        assert!(s.notes.iter().any(|n| n.contains("capped")));
        assert!(s
            .experiments
            .iter()
            .all(|p| p.experiment.records < 100_000_000));
        let _ = suite::REFERENCE_ENGINE;
    }

    #[test]
    fn counts_are_short() {
        assert_eq!(short_count(10_000), "10k");
        assert_eq!(short_count(2_000_000), "2M");
        assert_eq!(short_count(1234), "1234");
    }
}
