//! `--preset hart`: the evaluation of Pan, Xie and Song, "HART: a
//! hash-assisted adaptive radix tree for persistent memory", §IV.
//!
//! | paper | experiment ids | what |
//! |---|---|---|
//! | Fig. 4–7 | `dict@W/R`, `seq@W/R`, `rand@W/R` | insertion, search, update, deletion; Dictionary, Sequential, Random; 300/100, 300/300, 600/300 |
//! | Fig. 8 | `records-N` | the four operations against the record count, Random, 300/100 |
//! | Fig. 9 | `ri@W/R`, `rmw@W/R`, `wi@W/R` | Read-Intensive, Read-Modified-Write, Write-Intensive mixes (uniform), Random keys |
//! | Fig. 10a | `range@W/R` | one range query of 100,000 records under Sequential |
//! | Fig. 10b | `seq@300/100` | DRAM and PM per record under Sequential |
//! | Fig. 10c | `records-N` | build time against recovery time, Random, 300/100 |
//! | Fig. 10d | `threads-T` | the four operations on 1, 2, ... threads, Random, 300/100 |
//!
//! The paper's scales (§IV-A): Dictionary is its 466,544 words; Sequential
//! and Random have 100 million records at 300/100 and 1 million at the
//! other latencies; Fig. 8 and 10c go from 1 to 100 million records;
//! Fig. 10d uses 100 million records and up to 16 threads. The mixes'
//! record counts are not stated; the full scale uses 1 million.
//!
//! The paper compares HART with WOART, FPTree and ART+CoW (project ids
//! `woart`, `fptree`, `art-cow`).

use super::{exp, latency, short_count, Built, Planner, PresetCtx, SEARCH_MANY_BATCH};
use crate::bench::dist::ScanLen;
use crate::bench::experiment::PhaseSpec;
use crate::bench::keys::KeyKind;
use crate::bench::mix::Mix;
use crate::bench::plot::{Bar, Figure, Line};
use crate::bench::verdict::{Case, Check, Claim, Metric};

/// The paper's three PM write/read latencies (§IV-A).
const LATENCIES: [(u32, u32); 3] = [(300, 100), (300, 300), (600, 300)];
/// The paper's Dictionary: 466,544 words (§IV-A).
const PAPER_WORDS: u64 = 466_544;

fn lat_label((w, r): (u32, u32)) -> String {
    format!("{w}/{r}")
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub(super) fn build(ctx: &PresetCtx) -> Built {
    let mut p = Planner::new(ctx);
    let basic = || {
        vec![
            PhaseSpec::Load,
            PhaseSpec::Search,
            PhaseSpec::SearchMany {
                batch: SEARCH_MANY_BATCH,
            },
            PhaseSpec::Update,
            PhaseSpec::Delete,
        ]
    };
    let workloads = [
        ("dict", KeyKind::Dictionary),
        ("seq", KeyKind::SeqString),
        ("rand", KeyKind::RandString),
    ];

    // Fig. 4-7: the four basic operations.
    let quick_n = 50_000;
    for (tag, keys) in workloads {
        for l in LATENCIES {
            let records = if keys == KeyKind::Dictionary {
                let words = p.dictionary_words().unwrap_or(PAPER_WORDS);
                p.scale(quick_n.min(words), PAPER_WORDS.min(words))
            } else {
                let n = p.scale(
                    quick_n,
                    if l == (300, 100) {
                        100_000_000
                    } else {
                        1_000_000
                    },
                );
                p.records(n, keys, 8)
            };
            p.add(exp(
                format!("{tag}@{}", lat_label(l)),
                format!("Fig. 4-7: the four basic operations, {} keys", keys.label()),
                keys,
                records,
                8,
                1,
                latency(l.0, l.1),
                basic(),
            ));
        }
    }

    // Fig. 8 and 10c: record counts, Random, 300/100, with recovery.
    let counts: Vec<u64> = p
        .scale(
            vec![10_000, 30_000, 100_000],
            vec![1_000_000, 10_000_000, 100_000_000],
        )
        .into_iter()
        .map(|n| p.records(n, KeyKind::RandString, 8))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    for &n in &counts {
        p.add(exp(
            format!("records-{}", short_count(n)),
            "Fig. 8 and 10c: the basic operations and recovery against the record count",
            KeyKind::RandString,
            n,
            8,
            1,
            latency(300, 100),
            vec![
                PhaseSpec::Load,
                PhaseSpec::Recover,
                PhaseSpec::Search,
                PhaseSpec::Update,
                PhaseSpec::Delete,
            ],
        ));
    }

    // Fig. 9: the three mixes, uniform, Random keys.
    let mixes = [
        ("ri", "hart-read-intensive"),
        ("rmw", "hart-rmw"),
        ("wi", "hart-write-intensive"),
    ];
    let mix_n = p.scale(50_000, 1_000_000);
    for (tag, name) in mixes {
        let mix = Mix::named(name).expect("the HART mixes are named mixes");
        for l in LATENCIES {
            let n = p.records(mix_n, KeyKind::RandString, 8);
            p.add(exp(
                format!("{tag}@{}", lat_label(l)),
                format!("Fig. 9: {} ({})", mix.label, mix.describe()),
                KeyKind::RandString,
                n,
                8,
                1,
                latency(l.0, l.1),
                vec![PhaseSpec::Load, PhaseSpec::mix(mix.clone(), n, None, 1)],
            ));
        }
    }

    // Fig. 10a: a range query of 100,000 records under Sequential.
    for l in LATENCIES {
        let n = p.scale(
            quick_n,
            if l == (300, 100) {
                100_000_000
            } else {
                1_000_000
            },
        );
        let n = p.records(n, KeyKind::SeqString, 8);
        let len = p.scale(10_000, 100_000).min(n);
        p.add(exp(
            format!("range@{}", lat_label(l)),
            format!("Fig. 10a: range queries of {len} records, Sequential keys"),
            KeyKind::SeqString,
            n,
            8,
            1,
            latency(l.0, l.1),
            vec![
                PhaseSpec::Load,
                PhaseSpec::Scan {
                    name: "range".into(),
                    count: 20,
                    len: ScanLen::Fixed { len },
                },
            ],
        ));
    }

    // Fig. 10d: threads, Random, 300/100.
    let threads: Vec<usize> = p.scale(vec![1, 2], vec![1, 2, 4, 8, 16]);
    let most = threads.iter().copied().max().unwrap_or(1);
    if most > ctx.cpus {
        p.notes.push(format!(
            "Fig. 10d: this machine has {} CPUs; runs with more threads than CPUs measure \
             time slicing, not scaling (the paper used 8 cores with 2 hyper-threads each)",
            ctx.cpus
        ));
    } else if most == ctx.cpus {
        p.notes.push(format!(
            "Fig. 10d: {most} threads use every CPU of this machine, so any other load on it \
             shows in the scaling figures"
        ));
    }
    let thread_n = p.scale(quick_n, 100_000_000);
    let thread_n = p.records(thread_n, KeyKind::RandString, 8);
    for &t in &threads {
        p.add(exp(
            format!("threads-{t}"),
            "Fig. 10d: the basic operations on several threads",
            KeyKind::RandString,
            thread_n,
            8,
            t,
            latency(300, 100),
            basic(),
        ));
    }

    let lat_cases = |tags: &[&str], lats: &[(u32, u32)], phase: &str| -> Vec<Case> {
        tags.iter()
            .flat_map(|t| {
                lats.iter()
                    .map(move |&l| Case::new(format!("{t}@{}", lat_label(l)), phase))
            })
            .collect()
    };
    let all_wl = ["dict", "seq", "rand"];
    let rivals = s(&["woart", "fptree", "art-cow"]);

    let mut figures = Vec::new();
    for (fig, phase, what) in [
        ("4", "insert", "insertion"),
        ("5", "search", "search"),
        ("6", "update", "update"),
        ("7", "delete", "deletion"),
    ] {
        figures.push(Figure::bars(
            format!("hart-fig{fig}-{phase}"),
            format!("HART Fig. {fig}: {what}, average time per operation"),
            Metric::NsPerOp,
            workloads
                .iter()
                .flat_map(|(tag, keys)| {
                    LATENCIES.iter().map(move |&l| {
                        (
                            format!("{} {}", keys.label(), lat_label(l)),
                            Case::new(format!("{tag}@{}", lat_label(l)), phase),
                        )
                    })
                })
                .collect(),
        ));
    }
    let count_ids: Vec<String> = counts
        .iter()
        .map(|n| format!("records-{}", short_count(*n)))
        .collect();
    let by_count =
        |phase: &str| -> Vec<Case> { count_ids.iter().map(|id| Case::new(id, phase)).collect() };
    let count_labels: Vec<String> = counts.iter().map(|n| short_count(*n)).collect();
    figures.push(Figure::lines(
        "hart-fig8-records",
        "HART Fig. 8: the basic operations against the record count (Random, 300/100)",
        "records",
        Metric::NsPerOp,
        count_labels.clone(),
        ["insert", "search", "update", "delete"]
            .iter()
            .map(|ph| (ph.to_string(), by_count(ph)))
            .collect(),
    ));
    figures.push(Figure::bars(
        "hart-fig9-mixes",
        "HART Fig. 9: mixed workloads (uniform), average time per operation",
        Metric::NsPerOp,
        mixes
            .iter()
            .flat_map(|(tag, name)| {
                LATENCIES.iter().map(move |&l| {
                    (
                        format!("{} {}", tag.to_uppercase(), lat_label(l)),
                        Case::new(format!("{tag}@{}", lat_label(l)), *name),
                    )
                })
            })
            .collect(),
    ));
    figures.push(Figure::bars(
        "hart-fig10a-range",
        "HART Fig. 10a: range query (Sequential), time per query",
        Metric::NsPerOp,
        LATENCIES
            .iter()
            .map(|&l| {
                (
                    lat_label(l),
                    Case::new(format!("range@{}", lat_label(l)), "range"),
                )
            })
            .collect(),
    ));
    figures.push(Figure::Bars {
        id: "hart-fig10b-memory".into(),
        title: "HART Fig. 10b: memory per record (Sequential)".into(),
        y_label: "bytes per record".into(),
        bars: vec![
            Bar {
                label: "DRAM".into(),
                case: Case::new("seq@300/100", ""),
                metric: Metric::DramPerRecord,
            },
            Bar {
                label: "PM".into(),
                case: Case::new("seq@300/100", ""),
                metric: Metric::PmPerRecord,
            },
        ],
    });
    figures.push(Figure::Lines {
        id: "hart-fig10c-recovery".into(),
        title: "HART Fig. 10c: build and recovery time (Random, 300/100)".into(),
        x_label: "records".into(),
        y_label: "time (s)".into(),
        x: count_labels,
        lines: vec![
            Line {
                suffix: "build".into(),
                metric: Metric::BuildSecs,
                cases: by_count(""),
            },
            Line {
                suffix: "recovery".into(),
                metric: Metric::RecoverySecs,
                cases: by_count(""),
            },
        ],
    });
    figures.push(Figure::lines(
        "hart-fig10d-threads",
        "HART Fig. 10d: throughput against threads (Random, 300/100)",
        "threads",
        Metric::MopsPerSec,
        threads.iter().map(|t| t.to_string()).collect(),
        ["insert", "search", "update", "delete"]
            .iter()
            .map(|ph| {
                (
                    ph.to_string(),
                    threads
                        .iter()
                        .map(|t| Case::new(format!("threads-{t}"), *ph))
                        .collect(),
                )
            })
            .collect(),
    ));

    let beats =
        |subjects: &[&str], rivals: &[String], cases: Vec<Case>, metric, min_share, paper: &str| {
            Check::Beats {
                subjects: s(subjects),
                rivals: rivals.to_vec(),
                cases,
                metric,
                min_share,
                paper: paper.into(),
            }
        };
    let high = [(300, 300), (600, 300)];
    let (first, last) = (
        count_ids.first().cloned().unwrap_or_default(),
        count_ids.last().cloned().unwrap_or_default(),
    );
    let mut claims = vec![
        Claim {
            source: "Fig. 4".into(),
            claim: "HART inserts faster than WOART, FPTree and ART+CoW under every workload and latency".into(),
            check: beats(&["hart"], &rivals, lat_cases(&all_wl, &LATENCIES, "insert"), Metric::NsPerOp, 1.0,
                "1.4x-4.0x faster than WOART, 1.9x-4.0x than FPTree; ART+CoW slowest in most cases"),
        },
        Claim {
            source: "Fig. 5".into(),
            claim: "HART searches faster than its competitors at 300/300 and 600/300".into(),
            check: beats(&["hart"], &rivals, lat_cases(&all_wl, &high, "search"), Metric::NsPerOp, 1.0,
                "HART best at 300/300 and 600/300 on all three workloads"),
        },
        Claim {
            source: "Fig. 5".into(),
            claim: "WOART searches faster than HART at 300/100 (PM reads as fast as DRAM)".into(),
            check: beats(&["woart"], &s(&["hart"]), lat_cases(&all_wl, &[(300, 100)], "search"), Metric::NsPerOp, 1.0,
                "WOART better at 300/100: HART's larger DRAM footprint lowers the cache hit rate"),
        },
        Claim {
            source: "Fig. 6".into(),
            claim: "HART updates faster than FPTree in all cases".into(),
            check: beats(&["hart"], &s(&["fptree"]), lat_cases(&all_wl, &LATENCIES, "update"), Metric::NsPerOp, 1.0,
                "HART outperforms FPTree in all cases"),
        },
        Claim {
            source: "Fig. 6".into(),
            claim: "HART updates faster than WOART and ART+CoW in most cases".into(),
            check: beats(&["hart"], &s(&["woart", "art-cow"]), lat_cases(&all_wl, &LATENCIES, "update"), Metric::NsPerOp, 0.5,
                "HART outperforms WOART and ART+CoW in most cases"),
        },
        Claim {
            source: "Fig. 7".into(),
            claim: "FPTree deletes fastest under Dictionary".into(),
            check: beats(&["fptree"], &s(&["hart", "woart", "art-cow"]), lat_cases(&["dict"], &LATENCIES, "delete"), Metric::NsPerOp, 1.0,
                "FPTree best under Dictionary (a small data set keeps it shallow)"),
        },
        Claim {
            source: "Fig. 7".into(),
            claim: "HART deletes faster than FPTree under Sequential and Random".into(),
            check: beats(&["hart"], &s(&["fptree"]), lat_cases(&["seq", "rand"], &LATENCIES, "delete"), Metric::NsPerOp, 1.0,
                "FPTree worst under Random and Sequential (1 million records or more)"),
        },
        Claim {
            source: "Fig. 8a".into(),
            claim: "HART's insertion time grows least with the record count (Random, 300/100)".into(),
            check: Check::MoreSensitive {
                subjects: s(&["woart", "fptree", "art-cow"]),
                rivals: s(&["hart"]),
                from: vec![Case::new(&first, "insert")],
                to: vec![Case::new(&last, "insert")],
                metric: Metric::NsPerOp,
                paper: "HART exhibits a much better scalability in terms of insertion from 1 to 100 million records".into(),
            },
        },
        Claim {
            source: "Fig. 9".into(),
            claim: "HART beats WOART and FPTree in all three mixes, except Read-Modify-Write at 300/100".into(),
            check: beats(&["hart"], &s(&["woart", "fptree"]), {
                let mut c = lat_cases(&["ri"], &LATENCIES, "hart-read-intensive");
                c.extend(lat_cases(&["rmw"], &high, "hart-rmw"));
                c.extend(lat_cases(&["wi"], &LATENCIES, "hart-write-intensive"));
                c
            }, Metric::NsPerOp, 1.0, "2.0x-2.6x faster than WOART, 2.4x-5.7x than FPTree"),
        },
        Claim {
            source: "Fig. 9b".into(),
            claim: "WOART and ART+CoW beat HART on Read-Modify-Write at 300/100".into(),
            check: beats(&["woart", "art-cow"], &s(&["hart"]), lat_cases(&["rmw"], &[(300, 100)], "hart-rmw"), Metric::NsPerOp, 1.0,
                "the one exception in Fig. 9"),
        },
        Claim {
            source: "Fig. 10a".into(),
            claim: "FPTree answers range queries faster than HART".into(),
            check: beats(&["fptree"], &s(&["hart"]), lat_cases(&["range"], &LATENCIES, "range"), Metric::NsPerOp, 1.0,
                "HART 2.6x, 2.3x, 2.3x slower than FPTree at 300/100, 300/300, 600/300"),
        },
        Claim {
            source: "Fig. 10a".into(),
            claim: "HART answers range queries faster than WOART and ART+CoW when PM reads are slower than DRAM".into(),
            check: beats(&["hart"], &s(&["woart", "art-cow"]), lat_cases(&["range"], &high, "range"), Metric::NsPerOp, 1.0,
                "HART much better at 300/300 and 600/300"),
        },
        Claim {
            source: "Fig. 10b".into(),
            claim: "HART uses more DRAM per record than FPTree (Sequential)".into(),
            check: beats(&["fptree"], &s(&["hart"]), vec![Case::new("seq@300/100", "")], Metric::DramPerRecord, 1.0,
                "HART consumes much more DRAM (NODE256s for 62-character keys, and the hash table)"),
        },
        Claim {
            source: "Fig. 10b".into(),
            claim: "FPTree uses more PM per record than HART (Sequential)".into(),
            check: beats(&["hart"], &s(&["fptree"]), vec![Case::new("seq@300/100", "")], Metric::PmPerRecord, 1.0,
                "FPTree's fingerprints and uncoalesced leaves take more PM"),
        },
        Claim {
            source: "Fig. 10c".into(),
            claim: "HART recovers faster than it builds (Random, 300/100)".into(),
            check: Check::Ratio {
                engines: s(&["hart"]),
                num: Case::new(&last, ""),
                num_metric: Metric::BuildSecs,
                den: Case::new(&last, ""),
                den_metric: Metric::RecoverySecs,
                min: 1.0,
                paper: "recovery 2.4x faster than build on average, 1 to 100 million records".into(),
            },
        },
        Claim {
            source: "Fig. 10c".into(),
            claim: "FPTree recovers faster than HART".into(),
            check: beats(&["fptree"], &s(&["hart"]), by_count(""), Metric::RecoverySecs, 1.0,
                "FPTree's recovery much shorter (one insertion per leaf of many records)"),
        },
    ];
    if threads.contains(&2) {
        for (phase, paper) in [("insert", "1.96x"), ("search", "1.94x")] {
            let paper =
                format!("{paper} on 2 threads (insert/search/update/delete: 1.96/1.94/1.93/1.93x)");
            claims.push(Claim {
                source: "Fig. 10d".into(),
                claim: format!("HART's {phase} throughput nearly doubles on 2 threads"),
                check: Check::Ratio {
                    engines: s(&["hart"]),
                    num: Case::new("threads-2", phase),
                    num_metric: Metric::MopsPerSec,
                    den: Case::new("threads-1", phase),
                    den_metric: Metric::MopsPerSec,
                    min: 1.5,
                    paper,
                },
            });
        }
    }
    if threads.contains(&8) {
        claims.push(Claim {
            source: "Fig. 10d".into(),
            claim: "HART's search throughput grows about 7x on 8 threads".into(),
            check: Check::Ratio {
                engines: s(&["hart"]),
                num: Case::new("threads-8", "search"),
                num_metric: Metric::MopsPerSec,
                den: Case::new("threads-1", "search"),
                den_metric: Metric::MopsPerSec,
                min: 5.0,
                paper: "7.18/7.30/7.13/7.09x for insert/search/update/delete on 8 threads".into(),
            },
        });
    }
    Built {
        engines: vec!["hart", "woart", "fptree", "art-cow"],
        experiments: p.experiments,
        figures,
        claims,
        notes: p.notes,
    }
}
