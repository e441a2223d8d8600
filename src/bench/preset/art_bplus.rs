//! `--preset art-bplus`: the evaluation of Liu, Zhang, Luo and Jin,
//! "Heterogeneous index for non-volatile memory" (面向非易失内存的异构索引,
//! Journal of Software 2022), §3. The paper calls its index HART; this
//! project's engine id is `art-bplus`, to keep it apart from the
//! hash-assisted HART.
//!
//! | paper | experiment ids | what |
//! |---|---|---|
//! | Fig. 11 | `dense`, `clustered` (`insert`, `search`) | write and read throughput, Dense and Clustered keys |
//! | Fig. 12 | `clustered` (`point-N`) | point query latency against the number of queries |
//! | Fig. 13 | `clustered` (`range-W`) | range query latency against the query width |
//! | Fig. 14 | `value-B` | point query throughput with 8, 256 and 4096-byte values, Clustered |
//! | Table 2 | `dense`, `clustered` (or `size-*` at full scale) | index size (DRAM + PM per record) |
//!
//! The paper's scales (§3.1): 8-byte keys and values, 256 million records
//! (4 GB), inserted and queried in random order on one thread; range
//! queries return 64 million items in all; Table 2 measures the index after
//! 1 million records. The number of point queries of Fig. 12 and the widths
//! of Fig. 13 are only in the figures; this preset picks them. The paper
//! compares with WOART, FAST&FAIR and wB+-tree (the last is not in this
//! project's plan).

use super::{exp, short_count, Built, Planner, PresetCtx};
use crate::bench::dist::{Distribution, ScanLen};
use crate::bench::experiment::PhaseSpec;
use crate::bench::keys::KeyKind;
use crate::bench::mix::Mix;
use crate::bench::plot::Figure;
use crate::bench::verdict::{Case, Check, Claim, Metric};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// A read-only mix called `name` (uniform keys).
fn point_queries(name: &str) -> Mix {
    let mut m = Mix::parse("read=1").expect("`read=1` is a valid mix");
    m.name = name.into();
    m.label = "point queries".into();
    m.source = "art-bplus Fig. 12".into();
    m
}

pub(super) fn build(ctx: &PresetCtx) -> Built {
    let mut p = Planner::new(ctx);
    let n_req = p.scale(100_000, 256_000_000);
    let points: Vec<u64> = p.scale(
        vec![10_000, 50_000, 100_000],
        vec![1_000_000, 10_000_000, 100_000_000],
    );
    let widths: [u64; 4] = [10, 100, 1000, 10_000];
    let range_total: u64 = p.scale(500_000, 64_000_000);

    let dense_n = p.records(n_req, KeyKind::Dense, 8);
    p.add(exp(
        "dense",
        "Fig. 11: write and read throughput, Dense keys",
        KeyKind::Dense,
        dense_n,
        8,
        1,
        None,
        vec![PhaseSpec::Load, PhaseSpec::Search],
    ));
    let clustered_n = p.records(n_req, KeyKind::Clustered, 8);
    let mut phases = vec![PhaseSpec::Load, PhaseSpec::Search];
    for &q in &points {
        phases.push(PhaseSpec::mix(
            point_queries(&format!("point-{}", short_count(q))),
            q,
            Some(Distribution::Uniform),
            1,
        ));
    }
    for w in widths {
        phases.push(PhaseSpec::Scan {
            name: format!("range-{}", short_count(w)),
            count: (range_total / w).max(1),
            len: ScanLen::Fixed { len: w },
        });
    }
    p.add(exp(
        "clustered",
        "Fig. 11-13: throughput, point queries and range queries, Clustered keys",
        KeyKind::Clustered,
        clustered_n,
        8,
        1,
        None,
        phases,
    ));
    let value_sizes = [8u64, 256, 4096];
    for v in value_sizes {
        let n = p.scale(20_000, 256_000_000);
        let n = p.records(n, KeyKind::Clustered, v);
        p.add(exp(
            format!("value-{v}"),
            format!("Fig. 14: point queries with {v}-byte values, Clustered keys"),
            KeyKind::Clustered,
            n,
            v,
            1,
            None,
            vec![PhaseSpec::Load, PhaseSpec::Search],
        ));
    }
    let (size_dense, size_clustered) = if ctx.full {
        for (id, keys) in [
            ("size-dense", KeyKind::Dense),
            ("size-clustered", KeyKind::Clustered),
        ] {
            p.add(exp(
                id,
                "Table 2: index size after 1 million records",
                keys,
                1_000_000,
                8,
                1,
                None,
                vec![PhaseSpec::Load],
            ));
        }
        ("size-dense", "size-clustered")
    } else {
        ("dense", "clustered")
    };

    let point_names: Vec<String> = points
        .iter()
        .map(|q| format!("point-{}", short_count(*q)))
        .collect();
    let range_names: Vec<String> = widths
        .iter()
        .map(|w| format!("range-{}", short_count(*w)))
        .collect();
    let figures = vec![
        Figure::bars(
            "art-bplus-fig11-throughput",
            "art-bplus Fig. 11: write and read throughput",
            Metric::MopsPerSec,
            vec![
                ("Dense write".into(), Case::new("dense", "insert")),
                ("Dense read".into(), Case::new("dense", "search")),
                ("Clustered write".into(), Case::new("clustered", "insert")),
                ("Clustered read".into(), Case::new("clustered", "search")),
            ],
        ),
        Figure::lines(
            "art-bplus-fig12-points",
            "art-bplus Fig. 12: point query latency (Clustered)",
            "point queries",
            Metric::NsPerOp,
            points.iter().map(|q| short_count(*q)).collect(),
            vec![(
                String::new(),
                point_names
                    .iter()
                    .map(|n| Case::new("clustered", n))
                    .collect(),
            )],
        ),
        Figure::lines(
            "art-bplus-fig13-range",
            "art-bplus Fig. 13: range query latency against width (Clustered)",
            "records per query",
            Metric::NsPerOp,
            widths.iter().map(|w| short_count(*w)).collect(),
            vec![(
                String::new(),
                range_names
                    .iter()
                    .map(|n| Case::new("clustered", n))
                    .collect(),
            )],
        ),
        Figure::bars(
            "art-bplus-fig14-values",
            "art-bplus Fig. 14: point query throughput against value size (Clustered)",
            Metric::MopsPerSec,
            value_sizes
                .iter()
                .map(|v| (format!("{v} B"), Case::new(format!("value-{v}"), "search")))
                .collect(),
        ),
        Figure::bars(
            "art-bplus-table2-size",
            "art-bplus Table 2: index size (DRAM + PM) per record",
            Metric::BytesPerRecord,
            vec![
                ("Dense".into(), Case::new(size_dense, "")),
                ("Clustered".into(), Case::new(size_clustered, "")),
            ],
        ),
    ];

    let beats =
        |subjects: &[&str], rivals: &[&str], cases: Vec<Case>, metric, paper: &str| Check::Beats {
            subjects: s(subjects),
            rivals: s(rivals),
            cases,
            metric,
            min_share: 1.0,
            paper: paper.into(),
        };
    let claims = vec![
        Claim {
            source: "Fig. 11".into(),
            claim: "art-bplus has the highest write and read throughput on Dense keys (against WOART and FAST&FAIR; wB+-tree is not planned here)".into(),
            check: beats(&["art-bplus"], &["woart", "fastfair"], vec![Case::new("dense", "insert"), Case::new("dense", "search")], Metric::MopsPerSec,
                "better than all other indexes on Dense in reads and writes"),
        },
        Claim {
            source: "Fig. 11".into(),
            claim: "on Clustered keys WOART reads faster than art-bplus".into(),
            check: beats(&["woart"], &["art-bplus"], vec![Case::new("clustered", "search")], Metric::MopsPerSec,
                "art-bplus's read throughput drops on Clustered, below WOART's (one more node on the path)"),
        },
        Claim {
            source: "Fig. 11".into(),
            claim: "on Clustered keys art-bplus reads faster than FAST&FAIR".into(),
            check: beats(&["art-bplus"], &["fastfair"], vec![Case::new("clustered", "search")], Metric::MopsPerSec,
                "still above wB+-tree and FAST&FAIR"),
        },
        Claim {
            source: "Fig. 12".into(),
            claim: "on Clustered keys art-bplus answers point queries slower than WOART at every query count".into(),
            check: beats(&["woart"], &["art-bplus"], point_names.iter().map(|n| Case::new("clustered", n)).collect(), Metric::NsPerOp,
                "art-bplus's point queries below WOART's at every count"),
        },
        Claim {
            source: "Fig. 13".into(),
            claim: "FAST&FAIR answers range queries faster than art-bplus".into(),
            check: beats(&["fastfair"], &["art-bplus"], range_names.iter().map(|n| Case::new("clustered", n)).collect(), Metric::NsPerOp,
                "FAST&FAIR best (sorted nodes); art-bplus below wB+-tree and FAST&FAIR"),
        },
        Claim {
            source: "§3.2(2), Fig. 13".into(),
            claim: "art-bplus answers range queries far faster than WOART".into(),
            check: beats(&["art-bplus"], &["woart"], range_names.iter().map(|n| Case::new("clustered", n)).collect(), Metric::NsPerOp,
                "WOART 200-300x slower than the other indexes (2-3 orders of magnitude)"),
        },
        Claim {
            source: "Fig. 14".into(),
            claim: "art-bplus answers point queries faster than FAST&FAIR at every value size".into(),
            check: beats(&["art-bplus"], &["fastfair"], value_sizes.iter().map(|v| Case::new(format!("value-{v}"), "search")).collect(), Metric::MopsPerSec,
                "better than wB+-tree and FAST&FAIR in all cases"),
        },
        Claim {
            source: "Fig. 14".into(),
            claim: "with 256-byte values art-bplus answers point queries faster than WOART".into(),
            check: beats(&["art-bplus"], &["woart"], vec![Case::new("value-256", "search")], Metric::MopsPerSec,
                "best at 256 B, and better than WOART there"),
        },
        Claim {
            source: "Table 2".into(),
            claim: "art-bplus's index is the smallest on Dense keys".into(),
            check: beats(&["art-bplus"], &["woart", "fastfair"], vec![Case::new(size_dense, "")], Metric::BytesPerRecord,
                "14.88 MB against WOART 32.09, FAST&FAIR 31.09, wB+-tree 28.69 MB (1M records)"),
        },
        Claim {
            source: "Table 2".into(),
            claim: "art-bplus's index on Clustered keys is over 10x its size on Dense keys".into(),
            check: Check::Ratio {
                engines: s(&["art-bplus"]),
                num: Case::new(size_clustered, ""),
                num_metric: Metric::BytesPerRecord,
                den: Case::new(size_dense, ""),
                den_metric: Metric::BytesPerRecord,
                min: 10.0,
                paper: "277.37 MB against 14.88 MB (18.6x): no space reclamation yet".into(),
            },
        },
    ];
    Built {
        engines: vec!["art-bplus", "woart", "fastfair"],
        experiments: p.experiments,
        figures,
        claims,
        notes: p.notes,
    }
}
