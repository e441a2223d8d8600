//! `--preset dptree`: the evaluation of Zhou et al., "DPTree: differential
//! indexing for persistent memory", VLDB'19, §4.
//!
//! | paper | experiment ids | what |
//! |---|---|---|
//! | Fig. 8a, 8b | `size-N` | insertion and point lookup against the data size |
//! | Table 1, space (§4.2) | `micro` (`insert`) | flushes and fences per insert; DRAM + PM per record |
//! | Fig. 8c | `micro` (`scan-0.001%` ...) | range scans of 0.001%, 0.01% and 0.1% of the keys |
//! | Fig. 12 | `MIX-tT` | YCSB InsertOnly, ReadOnly, ReadUpdate, ScanInsert, Mixed on T threads |
//! | Fig. 13 | `recovery-N` | recovery time against the data size |
//!
//! Keys are uniformly random 64-bit integers with 8-byte values (16-byte
//! pairs). The paper's scales: 25 to 100 million pairs for Fig. 8a/8b,
//! 50 million for Table 1, Fig. 8c and Fig. 12 (after which each workload
//! runs; its operation count is not stated, the full scale uses 10 million),
//! 2^23 to 2^27 pairs for Fig. 13, 1 to 32 threads. Scans in Fig. 12 have a
//! selectivity of 0.001% with a standard deviation of 0.0006%.
//! The paper compares DPTree with FAST&FAIR, FPTree and WORT.

use super::{exp, short_count, Built, Planner, PresetCtx};
use crate::bench::dist::ScanLen;
use crate::bench::experiment::PhaseSpec;
use crate::bench::keys::KeyKind;
use crate::bench::mix::Mix;
use crate::bench::plot::{Bar, Figure};
use crate::bench::verdict::{Case, Check, Claim, Metric};

const KEYS: KeyKind = KeyKind::RandomU64;
/// Fig. 8c selectivities: (phase, fraction of the keys).
const SCANS: [(&str, f64); 3] = [
    ("scan-0.001%", 0.00001),
    ("scan-0.01%", 0.0001),
    ("scan-0.1%", 0.001),
];
/// Fig. 12 workloads: (id tag, mix name).
const MIXES: [(&str, &str); 5] = [
    ("insert-only", "dptree-insert-only"),
    ("read-only", "dptree-read-only"),
    ("read-update", "dptree-read-update"),
    ("scan-insert", "dptree-scan-insert"),
    ("mixed", "dptree-mixed"),
];

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub(super) fn build(ctx: &PresetCtx) -> Built {
    let mut p = Planner::new(ctx);

    let sizes: Vec<u64> = p
        .scale(
            vec![25_000, 50_000, 100_000],
            vec![25_000_000, 50_000_000, 75_000_000, 100_000_000],
        )
        .into_iter()
        .map(|n| p.records(n, KEYS, 8))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    for &n in &sizes {
        p.add(exp(
            format!("size-{}", short_count(n)),
            "Fig. 8a, 8b: insertion and point lookup against the data size",
            KEYS,
            n,
            8,
            1,
            None,
            vec![PhaseSpec::Load, PhaseSpec::Search],
        ));
    }

    let micro_n = p.scale(100_000, 50_000_000);
    let micro_n = p.records(micro_n, KEYS, 8);
    let mut phases = vec![PhaseSpec::Load, PhaseSpec::Search];
    for (name, frac) in SCANS {
        phases.push(PhaseSpec::Scan {
            name: name.into(),
            count: p.scale(500, 10_000),
            len: ScanLen::Fixed {
                len: ((micro_n as f64 * frac).round() as u64).max(1),
            },
        });
    }
    p.add(exp(
        "micro",
        "Table 1, Fig. 8c, space: inserts, lookups and range scans",
        KEYS,
        micro_n,
        8,
        1,
        None,
        phases,
    ));

    let mut threads: Vec<usize> = p.scale(vec![1, 2], vec![1, 2, 4, 8, 16, 32]);
    if ctx.full {
        let max = ctx.cpus.max(2);
        if threads.iter().any(|&t| t > max) {
            p.notes.push(format!(
                "Fig. 12: thread counts above {max} left out (this machine has {} CPUs; the \
                 paper went to 32 threads on 26 cores)",
                ctx.cpus
            ));
            threads.retain(|&t| t <= max);
        }
    } else if threads.iter().any(|&t| t > ctx.cpus) {
        p.notes.push(format!(
            "Fig. 12: this machine has {} CPUs; runs with more threads than CPUs measure time slicing",
            ctx.cpus
        ));
    } else if threads.contains(&ctx.cpus) {
        p.notes.push(format!(
            "Fig. 12: {} threads use every CPU of this machine, so any other load on it shows \
             in the scaling figures",
            ctx.cpus
        ));
    }
    let ycsb_n = p.scale(50_000, 50_000_000);
    let ycsb_n = p.records(ycsb_n, KEYS, 8);
    let ycsb_ops = p.scale(50_000, 10_000_000);
    let scan = ScanLen::Normal {
        mean: (ycsb_n as f64 * 0.00001).max(1.0),
        sd: ycsb_n as f64 * 0.000006,
    };
    for (tag, name) in MIXES {
        let mix = Mix::named(name).expect("the DPTree mixes are named mixes");
        for &t in &threads {
            p.add(exp(
                format!("{tag}-t{t}"),
                format!(
                    "Fig. 12: {} ({}) on {t} thread{}",
                    mix.label,
                    mix.describe(),
                    if t == 1 { "" } else { "s" }
                ),
                KEYS,
                ycsb_n,
                8,
                t,
                None,
                vec![
                    PhaseSpec::Load,
                    PhaseSpec::Mix {
                        mix: mix.clone(),
                        ops: ycsb_ops,
                        dist: mix.dist,
                        scan,
                    },
                ],
            ));
        }
    }

    let rec_sizes: Vec<u64> = p
        .scale(
            (14..=17).map(|b| 1u64 << b).collect::<Vec<_>>(),
            (23..=27).map(|b| 1u64 << b).collect(),
        )
        .into_iter()
        .map(|n| p.records(n, KEYS, 8))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    for &n in &rec_sizes {
        p.add(exp(
            format!("recovery-{n}"),
            "Fig. 13: recovery time against the data size",
            KEYS,
            n,
            8,
            1,
            None,
            vec![PhaseSpec::Load, PhaseSpec::Recover],
        ));
    }

    let size_cases = |phase: &str| -> Vec<Case> {
        sizes
            .iter()
            .map(|n| Case::new(format!("size-{}", short_count(*n)), phase))
            .collect()
    };
    let size_labels: Vec<String> = sizes.iter().map(|n| short_count(*n)).collect();
    let rec_cases: Vec<Case> = rec_sizes
        .iter()
        .map(|n| Case::new(format!("recovery-{n}"), ""))
        .collect();
    let mut figures = vec![
        Figure::lines(
            "dptree-fig8a-insert",
            "DPTree Fig. 8a: insertion latency against data size",
            "key-value pairs",
            Metric::NsPerOp,
            size_labels.clone(),
            vec![(String::new(), size_cases("insert"))],
        ),
        Figure::lines(
            "dptree-fig8b-lookup",
            "DPTree Fig. 8b: point lookup latency against data size",
            "key-value pairs",
            Metric::NsPerOp,
            size_labels,
            vec![(String::new(), size_cases("search"))],
        ),
        Figure::bars(
            "dptree-fig8c-scan",
            "DPTree Fig. 8c: range scan throughput against selectivity",
            Metric::MopsPerSec,
            SCANS
                .iter()
                .map(|(n, _)| {
                    (
                        n.trim_start_matches("scan-").to_string(),
                        Case::new("micro", *n),
                    )
                })
                .collect(),
        ),
        Figure::Bars {
            id: "dptree-table1-persists".into(),
            title: "DPTree Table 1: PM flushes and fences per insert".into(),
            y_label: "per insert".into(),
            bars: vec![
                Bar {
                    label: "flushes".into(),
                    case: Case::new("micro", "insert"),
                    metric: Metric::FlushesPerOp,
                },
                Bar {
                    label: "fences".into(),
                    case: Case::new("micro", "insert"),
                    metric: Metric::FencesPerOp,
                },
            ],
        },
        Figure::Bars {
            id: "dptree-space".into(),
            title: "DPTree §4.2 space consumption: bytes per key-value pair".into(),
            y_label: "bytes per record".into(),
            bars: [
                ("DRAM", Metric::DramPerRecord),
                ("PM", Metric::PmPerRecord),
                ("total", Metric::BytesPerRecord),
            ]
            .into_iter()
            .map(|(label, metric)| Bar {
                label: label.into(),
                case: Case::new("micro", ""),
                metric,
            })
            .collect(),
        },
    ];
    for (i, (tag, name)) in MIXES.iter().enumerate() {
        figures.push(Figure::lines(
            format!("dptree-fig12{}-{tag}", (b'a' + i as u8) as char),
            format!(
                "DPTree Fig. 12{}: {} throughput against threads",
                (b'a' + i as u8) as char,
                Mix::named(name).map(|m| m.label).unwrap_or_default()
            ),
            "threads",
            Metric::MopsPerSec,
            threads.iter().map(|t| t.to_string()).collect(),
            vec![(
                String::new(),
                threads
                    .iter()
                    .map(|t| Case::new(format!("{tag}-t{t}"), *name))
                    .collect(),
            )],
        ));
    }
    figures.push(Figure::lines(
        "dptree-fig13-recovery",
        "DPTree Fig. 13: recovery time against data size",
        "key-value pairs",
        Metric::RecoverySecs,
        rec_sizes
            .iter()
            .map(|n| format!("2^{}", n.trailing_zeros()))
            .collect(),
        vec![(String::new(), rec_cases.clone())],
    ));

    let mix_cases = |tags: &[(&str, &str)]| -> Vec<Case> {
        tags.iter()
            .flat_map(|(tag, name)| {
                threads
                    .iter()
                    .map(move |t| Case::new(format!("{tag}-t{t}"), *name))
            })
            .collect()
    };
    let micro = |phase: &str| vec![Case::new("micro", phase)];
    let mut claims = vec![
        Claim {
            source: "Fig. 8a".into(),
            claim: "DPTree inserts faster than FAST&FAIR, FPTree and WORT at every data size".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["fastfair", "fptree", "wort"]),
                cases: size_cases("insert"),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "1.27-1.43x lower latency than FAST&FAIR, 1.76-1.78x than FPTree; WORT 1.25x higher".into(),
            },
        },
        Claim {
            source: "Table 1".into(),
            claim: "DPTree flushes about 2.26 cache lines per insert".into(),
            check: Check::Near {
                engine: "dptree".into(),
                metric: Metric::FlushesPerOp,
                expected: vec![(Case::new("micro", "insert"), 2.26)],
                tolerance: 0.5,
            },
        },
        Claim {
            source: "Table 1".into(),
            claim: "DPTree issues about 1.06 fences per insert".into(),
            check: Check::Near {
                engine: "dptree".into(),
                metric: Metric::FencesPerOp,
                expected: vec![(Case::new("micro", "insert"), 1.06)],
                tolerance: 0.5,
            },
        },
        Claim {
            source: "Table 1".into(),
            claim: "DPTree flushes the fewest lines per insert".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["wort", "fastfair", "fptree"]),
                cases: micro("insert"),
                metric: Metric::FlushesPerOp,
                min_share: 1.0,
                paper: "DPTree 2.26, FPTree 3.64, FAST&FAIR 4.35, WORT 6.8".into(),
            },
        },
        Claim {
            source: "Table 1".into(),
            claim: "DPTree issues the fewest fences per insert".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["wort", "fastfair", "fptree"]),
                cases: micro("insert"),
                metric: Metric::FencesPerOp,
                min_share: 1.0,
                paper: "DPTree 1.06, FPTree 3.6, FAST&FAIR 4, WORT 6.5".into(),
            },
        },
        Claim {
            source: "Fig. 8b".into(),
            claim: "DPTree looks keys up faster than FAST&FAIR, FPTree and WORT".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["fastfair", "fptree", "wort"]),
                cases: size_cases("search"),
                metric: Metric::NsPerOp,
                min_share: 1.0,
                paper: "up to 1.82x/1.85x/2.19x faster than FAST&FAIR/FPTree/WORT".into(),
            },
        },
        Claim {
            source: "Fig. 8c".into(),
            claim: "DPTree scans faster than FPTree and WORT".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["fptree", "wort"]),
                cases: SCANS.iter().map(|(n, _)| Case::new("micro", *n)).collect(),
                metric: Metric::MopsPerSec,
                min_share: 1.0,
                paper: "up to 3.0x/10.98x faster than FPTree/WORT".into(),
            },
        },
        Claim {
            source: "Fig. 8c".into(),
            claim: "FAST&FAIR scans a little faster than DPTree".into(),
            check: Check::Beats {
                subjects: s(&["fastfair"]),
                rivals: s(&["dptree"]),
                cases: SCANS.iter().map(|(n, _)| Case::new("micro", *n)).collect(),
                metric: Metric::MopsPerSec,
                min_share: 1.0,
                paper: "DPTree at most 1.1x slower than FAST&FAIR".into(),
            },
        },
        Claim {
            source: "§4.2 space".into(),
            claim: "DPTree takes more memory per pair than FAST&FAIR and FPTree".into(),
            check: Check::Beats {
                subjects: s(&["fastfair", "fptree"]),
                rivals: s(&["dptree"]),
                cases: micro(""),
                metric: Metric::BytesPerRecord,
                min_share: 1.0,
                paper: "1.7 GB against 1.26/1.28 GB after 50M inserts (about 34% more)".into(),
            },
        },
        Claim {
            source: "§4.2 space".into(),
            claim: "WORT takes the most memory per pair".into(),
            check: Check::Beats {
                subjects: s(&["dptree", "fastfair", "fptree"]),
                rivals: s(&["wort"]),
                cases: micro(""),
                metric: Metric::BytesPerRecord,
                min_share: 1.0,
                paper: "WORT 6.02 GB after 50M inserts".into(),
            },
        },
        Claim {
            source: "Fig. 12".into(),
            claim: "DPTree has the highest throughput on InsertOnly, ReadOnly, ReadUpdate and Mixed at every thread count".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["fastfair", "fptree"]),
                cases: mix_cases(&[MIXES[0], MIXES[1], MIXES[2], MIXES[4]]),
                metric: Metric::MopsPerSec,
                min_share: 1.0,
                paper: "up to 1.36x (InsertOnly), 1.32-1.7x (ReadOnly), 1.7-5.07x (ReadUpdate); highest on Mixed".into(),
            },
        },
        Claim {
            source: "Fig. 12d".into(),
            claim: "FAST&FAIR has the highest ScanInsert throughput".into(),
            check: Check::Beats {
                subjects: s(&["fastfair"]),
                rivals: s(&["dptree", "fptree"]),
                cases: mix_cases(&[MIXES[3]]),
                metric: Metric::MopsPerSec,
                min_share: 1.0,
                paper: "FAST&FAIR highest on scans (sorted leaves); DPTree similar".into(),
            },
        },
        Claim {
            source: "Fig. 13".into(),
            claim: "DPTree recovers faster than FPTree at every data size (one thread)".into(),
            check: Check::Beats {
                subjects: s(&["dptree"]),
                rivals: s(&["fptree"]),
                cases: rec_cases,
                metric: Metric::RecoverySecs,
                min_share: 1.0,
                paper: "1.8-5.5x less recovery time".into(),
            },
        },
    ];
    if let (Some(&t1), Some(&tmax)) = (threads.first(), threads.last()) {
        if tmax > t1 {
            claims.push(Claim {
                source: "Fig. 12b".into(),
                claim: format!("DPTree's ReadOnly throughput scales almost linearly with threads ({t1} to {tmax})"),
                check: Check::Ratio {
                    engines: s(&["dptree"]),
                    num: Case::new(format!("read-only-t{tmax}"), "dptree-read-only"),
                    num_metric: Metric::MopsPerSec,
                    den: Case::new(format!("read-only-t{t1}"), "dptree-read-only"),
                    den_metric: Metric::MopsPerSec,
                    min: 0.75 * (tmax / t1) as f64,
                    paper: "27.3x on 32 threads (FAST&FAIR 23.9x, FPTree 21.6x)".into(),
                },
            });
        }
    }
    Built {
        engines: vec!["dptree", "fastfair", "fptree", "wort"],
        experiments: p.experiments,
        figures,
        claims,
        notes: p.notes,
    }
}
