//! `--preset wort`: the evaluation of Lee et al., "WORT: write optimal
//! radix tree for persistent memory storage systems", FAST'17, §5.
//!
//! | paper | experiment ids | what |
//! |---|---|---|
//! | Fig. 7, Table 1(b) | `D@dram`, `S@dram`, `C@dram` (`insert`) | insertion time and flushes per insertion at DRAM latency; Dense, Sparse, Clustered |
//! | Fig. 8 | `D@W/R`, ... (`insert`) | insertion with PM latencies 300/100, 100/300, 300/300 |
//! | Fig. 9 | `D@dram`, `D@100/300`, ... (`search`) | search at read latency 100 and 300 ns |
//! | Fig. 10 | `D@dram`, ... (`range-0.001%`, `range-0.01%`) | range queries of 0.001% and 0.01% of the keys |
//!
//! The paper inserts 128 million 8-byte keys in random order (§4) and emulates
//! PM with Quartz; the latency values of Fig. 8 are only in the figure, so
//! this preset takes write and read latencies of 100 (DRAM) and 300 ns.
//! The paper compares WORT, WOART and ART+CoW with FPTree, NVTree and
//! wB+Tree; NVTree and wB+Tree are not in this project's plan.

use super::{exp, latency, Built, Planner, PresetCtx, SEARCH_MANY_BATCH};
use crate::bench::dist::ScanLen;
use crate::bench::experiment::PhaseSpec;
use crate::bench::keys::KeyKind;
use crate::bench::plot::Figure;
use crate::bench::verdict::{Case, Check, Claim, Metric};

/// (tag, key set).
const DISTS: [(&str, KeyKind); 3] = [
    ("D", KeyKind::Dense),
    ("S", KeyKind::Sparse),
    ("C", KeyKind::Clustered),
];
/// (tag, write ns, read ns): DRAM, then the PM settings of Fig. 8 and 9.
const LATS: [(&str, u32, u32); 4] = [
    ("dram", 100, 100),
    ("300/100", 300, 100),
    ("100/300", 100, 300),
    ("300/300", 300, 300),
];
/// Range query selectivities of Fig. 10: (phase name, fraction of the keys).
const RANGES: [(&str, f64); 2] = [("range-0.001%", 0.00001), ("range-0.01%", 0.0001)];

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn id(d: &str, l: &str) -> String {
    format!("{d}@{l}")
}

pub(super) fn build(ctx: &PresetCtx) -> Built {
    let mut p = Planner::new(ctx);
    let n_req = p.scale(100_000, 128_000_000);
    for (d, keys) in DISTS {
        let n = p.records(n_req, keys, 8);
        for (l, w, r) in LATS {
            let mut phases = vec![PhaseSpec::Load, PhaseSpec::Search];
            if l == "dram" {
                phases.push(PhaseSpec::SearchMany {
                    batch: SEARCH_MANY_BATCH,
                });
                for (name, frac) in RANGES {
                    phases.push(PhaseSpec::Scan {
                        name: name.into(),
                        count: p.scale(2000, 10_000),
                        len: ScanLen::Fixed {
                            len: ((n as f64 * frac).round() as u64).max(1),
                        },
                    });
                }
            }
            p.add(exp(
                id(d, l),
                format!(
                    "Fig. 7-10: insertion, search{}, {} keys in random order, latency {l}",
                    if l == "dram" {
                        " and range queries"
                    } else {
                        ""
                    },
                    keys.label()
                ),
                keys,
                n,
                8,
                1,
                latency(w, r),
                phases,
            ));
        }
    }

    let by_dist = |l: &str, phase: &str| -> Vec<Case> {
        DISTS
            .iter()
            .map(|(d, _)| Case::new(id(d, l), phase))
            .collect()
    };
    let labelled = |l: &str, phase: &str| -> Vec<(String, Case)> {
        DISTS
            .iter()
            .map(|(d, k)| (k.label().to_string(), Case::new(id(d, l), phase)))
            .collect()
    };
    let figures = vec![
        Figure::bars(
            "wort-fig7-insert",
            "WORT Fig. 7: insertion at DRAM latency, time per insertion",
            Metric::NsPerOp,
            labelled("dram", "insert"),
        ),
        Figure::bars(
            "wort-fig8-insert-latency",
            "WORT Fig. 8: insertion against PM write/read latency",
            Metric::NsPerOp,
            DISTS
                .iter()
                .flat_map(|(d, k)| {
                    LATS.iter().map(move |(l, _, _)| {
                        (format!("{} {l}", k.label()), Case::new(id(d, l), "insert"))
                    })
                })
                .collect(),
        ),
        Figure::bars(
            "wort-table1-flushes",
            "WORT Table 1(b): cache-line flushes per insertion",
            Metric::FlushesPerOp,
            labelled("dram", "insert"),
        ),
        Figure::bars(
            "wort-fig9-search",
            "WORT Fig. 9: search at read latency 100 and 300 ns",
            Metric::NsPerOp,
            DISTS
                .iter()
                .flat_map(|(d, k)| {
                    [("dram", "read 100"), ("100/300", "read 300")]
                        .into_iter()
                        .map(move |(l, label)| {
                            (
                                format!("{} {label}", k.label()),
                                Case::new(id(d, l), "search"),
                            )
                        })
                })
                .collect(),
        ),
        Figure::bars(
            "wort-fig10-range",
            "WORT Fig. 10: range queries, time per query",
            Metric::NsPerOp,
            DISTS
                .iter()
                .flat_map(|(d, k)| {
                    RANGES.iter().map(move |(name, _)| {
                        (
                            format!("{} {}", k.label(), name.trim_start_matches("range-")),
                            Case::new(id(d, "dram"), *name),
                        )
                    })
                })
                .collect(),
        ),
    ];

    let radix = s(&["wort", "woart", "art-cow"]);
    let mut claims = vec![
        Claim {
            source: "Fig. 7".into(),
            claim: "the radix trees (WORT, WOART, ART+CoW) insert faster than NVTree and wB+Tree".into(),
            check: Check::Beats {
                subjects: radix.clone(),
                rivals: s(&["nvtree", "wbtree"]),
                cases: by_dist("dram", "insert"),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "radix trees considerably better than NVTree and wB+Tree; FPTree sometimes better than a radix tree".into(),
            },
        },
        Claim {
            source: "Fig. 7, Table 1(a)".into(),
            claim: "insertion of Clustered keys is about 1.5x slower than of Dense keys in the radix trees".into(),
            check: Check::Ratio {
                engines: radix.clone(),
                num: Case::new(id("C", "dram"), "insert"),
                num_metric: Metric::NsPerOp,
                den: Case::new(id("D", "dram"), "insert"),
                den_metric: Metric::NsPerOp,
                min: 1.2,
                paper: "roughly 1.5x, from more LLC misses on the fragmented prefixes".into(),
            },
        },
    ];
    for (engine, name, d, sp, c) in [
        ("wort", "WORT", 2.2, 2.4, 2.3),
        ("woart", "WOART", 2.4, 3.5, 3.7),
        ("art-cow", "ART+CoW", 2.4, 3.8, 3.9),
        ("fptree", "FPTree", 4.8, 4.8, 4.8),
    ] {
        claims.push(Claim {
            source: "Table 1(b)".into(),
            claim: format!(
                "{name} flushes {d}/{sp}/{c} cache lines per insertion on Dense/Sparse/Clustered"
            ),
            check: Check::Near {
                engine: engine.into(),
                metric: Metric::FlushesPerOp,
                expected: vec![
                    (Case::new(id("D", "dram"), "insert"), d),
                    (Case::new(id("S", "dram"), "insert"), sp),
                    (Case::new(id("C", "dram"), "insert"), c),
                ],
                tolerance: 0.5,
            },
        });
    }
    claims.extend([
        Claim {
            source: "Table 1(b)".into(),
            claim: "the radix trees flush fewer lines per insertion than FPTree (NVTree and wB+Tree, not planned here, flush more still)".into(),
            check: Check::Beats {
                subjects: radix.clone(),
                rivals: s(&["fptree"]),
                cases: by_dist("dram", "insert"),
                metric: Metric::FlushesPerOp,
                min_share: 1.0,
                paper: "2.2-3.9 for the radix trees, 4.8 for FPTree, 3.3 NVTree, 6.0 wB+Tree".into(),
            },
        },
        Claim {
            source: "Fig. 8".into(),
            claim: "as PM latency grows, insertion in the radix trees (all nodes in PM) slows down more than in FPTree (inner nodes in DRAM)".into(),
            check: Check::MoreSensitive {
                subjects: radix.clone(),
                rivals: s(&["fptree"]),
                from: by_dist("dram", "insert"),
                to: by_dist("300/300", "insert"),
                metric: Metric::NsPerOp,
                paper: "wB+Tree and the radix trees that store every node in PM suffer more".into(),
            },
        },
        Claim {
            source: "Fig. 9".into(),
            claim: "ART+CoW searches fastest at DRAM latency on every distribution".into(),
            check: Check::Beats {
                subjects: s(&["art-cow"]),
                rivals: s(&["wort", "woart", "fptree"]),
                cases: by_dist("dram", "search"),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "ART+CoW performs the best for all cases".into(),
            },
        },
        Claim {
            source: "Fig. 9".into(),
            claim: "WORT's search slows down most when the PM read latency rises to 300 ns (Dense, Clustered)".into(),
            check: Check::MoreSensitive {
                subjects: s(&["wort"]),
                rivals: s(&["woart", "art-cow"]),
                from: vec![Case::new(id("D", "dram"), "search"), Case::new(id("C", "dram"), "search")],
                to: vec![Case::new(id("D", "100/300"), "search"), Case::new(id("C", "100/300"), "search")],
                metric: Metric::NsPerOp,
                paper: "WORT stands out in latency increase (it has the deepest tree)".into(),
            },
        },
        Claim {
            source: "Fig. 9".into(),
            claim: "WOART and ART+CoW search faster than FPTree even at read latency 300 ns".into(),
            check: Check::Beats {
                subjects: s(&["woart", "art-cow"]),
                rivals: s(&["fptree"]),
                cases: by_dist("100/300", "search"),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "better than the B-tree variants though FPTree's inner nodes see DRAM latency".into(),
            },
        },
        Claim {
            source: "Fig. 10".into(),
            claim: "FPTree answers range queries faster than the radix trees".into(),
            check: Check::Beats {
                subjects: s(&["fptree"]),
                rivals: radix,
                cases: DISTS
                    .iter()
                    .flat_map(|(d, _)| RANGES.iter().map(move |(n, _)| Case::new(id(d, "dram"), *n)))
                    .collect(),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "the radix trees take 3.0x (0.001%) and 2.8x (0.01%) as long as FPTree".into(),
            },
        },
    ]);
    Built {
        engines: vec!["wort", "woart", "art-cow", "fptree"],
        experiments: p.experiments,
        figures,
        claims,
        notes: p.notes,
    }
}
