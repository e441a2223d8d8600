//! Charts in the style of the papers' figures: grouped bars (one group per
//! workload or setting, one bar per engine) and lines (thread scaling,
//! record counts), written as PNG and SVG with plotters.
//!
//! # Fonts
//! The PNG backend draws text with `ab_glyph` from a font compiled into the
//! binary (DejaVu Sans, `plot/DejaVuSans.ttf`, under the Bitstream Vera
//! licence in `plot/DejaVuSans-LICENSE`), so no system font library or font
//! file is needed at run time. The SVG backend writes text as `<text>`
//! elements that the viewer renders.
//!
//! # From report to chart
//! A [`Figure`] names what to plot: cases (experiment and phase) and a
//! [`Metric`]. [`Figure::resolve`] reads the medians out of a
//! [`SuiteReport`] into a [`Chart`] of plain numbers, one series per engine
//! (and per series suffix for lines). Cases with no value (an engine that
//! did not run, a skipped experiment) leave gaps.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontStyle;

use super::report::fmt_num;
use super::summary::SuiteReport;
use super::verdict::{Case, Metric};
use super::{BenchError, BenchResult};
use crate::error::Error;

/// DejaVu Sans (Bitstream Vera licence, see `plot/DejaVuSans-LICENSE`).
static FONT: &[u8] = include_bytes!("plot/DejaVuSans.ttf");
/// The font family name the charts use.
const FAMILY: &str = "sans-serif";

/// Colours of the series, in order (the colour-blind-safe Okabe-Ito
/// palette, with grey for its yellow, which is faint on white).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(110, 110, 110),
    RGBColor(0, 0, 0),
];

/// One bar group of a [`Figure::Bars`]: a case and the figure read there.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The group's label under the x axis.
    pub label: String,
    /// Where.
    pub case: Case,
    /// What.
    pub metric: Metric,
}

/// One line (per engine) of a [`Figure::Lines`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Added to the engine's name in the legend (empty: the engine alone).
    pub suffix: String,
    /// What.
    pub metric: Metric,
    /// One case per x value.
    pub cases: Vec<Case>,
}

/// What to plot.
#[derive(Debug, Clone, PartialEq)]
pub enum Figure {
    /// Grouped bars: one group per case, one bar per engine.
    Bars {
        /// File name stem.
        id: String,
        /// Title (with the paper's figure number for presets).
        title: String,
        /// The y axis title.
        y_label: String,
        /// The groups.
        bars: Vec<Bar>,
    },
    /// Lines over categorical x values: one line per engine and [`Line`].
    Lines {
        /// File name stem.
        id: String,
        /// Title.
        title: String,
        /// The x axis title.
        x_label: String,
        /// The y axis title.
        y_label: String,
        /// The x values' labels.
        x: Vec<String>,
        /// The lines.
        lines: Vec<Line>,
    },
}

/// Which kind of chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    /// Grouped bars.
    Bars,
    /// Lines with markers.
    Lines,
}

/// A chart as plain numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File name stem.
    pub id: String,
    /// Title.
    pub title: String,
    /// Bars or lines.
    pub kind: ChartKind,
    /// x axis title.
    pub x_label: String,
    /// y axis title.
    pub y_label: String,
    /// The groups (bars) or x values (lines).
    pub categories: Vec<String>,
    /// (name, one value per category).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

impl Figure {
    /// Bars of one metric: (group label, case) pairs.
    pub fn bars(
        id: impl Into<String>,
        title: impl Into<String>,
        metric: Metric,
        cases: Vec<(String, Case)>,
    ) -> Figure {
        Figure::Bars {
            id: id.into(),
            title: title.into(),
            y_label: metric.label().into(),
            bars: cases
                .into_iter()
                .map(|(label, case)| Bar {
                    label,
                    case,
                    metric,
                })
                .collect(),
        }
    }

    /// Lines of one metric: x labels, and (suffix, cases) per line.
    pub fn lines(
        id: impl Into<String>,
        title: impl Into<String>,
        x_label: impl Into<String>,
        metric: Metric,
        x: Vec<String>,
        lines: Vec<(String, Vec<Case>)>,
    ) -> Figure {
        Figure::Lines {
            id: id.into(),
            title: title.into(),
            x_label: x_label.into(),
            y_label: metric.label().into(),
            x,
            lines: lines
                .into_iter()
                .map(|(suffix, cases)| Line {
                    suffix,
                    metric,
                    cases,
                })
                .collect(),
        }
    }

    /// The file name stem.
    pub fn id(&self) -> &str {
        match self {
            Figure::Bars { id, .. } | Figure::Lines { id, .. } => id,
        }
    }

    /// Reads the figure's numbers out of `report`: one series per engine
    /// (and per line).
    pub fn resolve(&self, report: &SuiteReport) -> Chart {
        let value = |case: &Case, engine: &str, metric: Metric| {
            report
                .experiment(&case.exp)
                .and_then(|x| metric.value(x, engine, &case.phase))
        };
        match self {
            Figure::Bars {
                id,
                title,
                y_label,
                bars,
            } => Chart {
                id: id.clone(),
                title: title.clone(),
                kind: ChartKind::Bars,
                x_label: String::new(),
                y_label: y_label.clone(),
                categories: bars.iter().map(|b| b.label.clone()).collect(),
                series: report
                    .engines
                    .iter()
                    .map(|e| {
                        (
                            e.clone(),
                            bars.iter().map(|b| value(&b.case, e, b.metric)).collect(),
                        )
                    })
                    .collect(),
            },
            Figure::Lines {
                id,
                title,
                x_label,
                y_label,
                x,
                lines,
            } => Chart {
                id: id.clone(),
                title: title.clone(),
                kind: ChartKind::Lines,
                x_label: x_label.clone(),
                y_label: y_label.clone(),
                categories: x.clone(),
                series: report
                    .engines
                    .iter()
                    .flat_map(|e| {
                        lines.iter().map(move |l| {
                            let name = if l.suffix.is_empty() {
                                e.clone()
                            } else {
                                format!("{e} {}", l.suffix)
                            };
                            (
                                name,
                                l.cases.iter().map(|c| value(c, e, l.metric)).collect(),
                            )
                        })
                    })
                    .collect(),
            },
        }
    }
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and known to parse (tested below); if it
        // did not, the PNGs would lack text but still be written.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// Width and height of a chart, in pixels: wide enough for its groups.
fn size_of(c: &Chart) -> (u32, u32) {
    let per_group = match c.kind {
        ChartKind::Bars => (28 * c.series.len() as u32).max(90),
        ChartKind::Lines => 90,
    };
    let w = (170 + per_group * c.categories.len() as u32).clamp(640, 4000);
    (w, 480)
}

/// Writes `chart` as `DIR/ID.png` and `DIR/ID.svg`; returns the paths.
pub fn write_chart(dir: &Path, chart: &Chart) -> BenchResult<Vec<PathBuf>> {
    register_font();
    let stem: String = chart
        .id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let size = size_of(chart);
    let fail = |path: &Path, e: String| {
        BenchError::failed(
            "plot",
            Error::io(
                format!("write {}", path.display()),
                std::io::Error::other(e),
            ),
        )
    };
    // The backends report a file they cannot write in their own words, so
    // each file is created here first: an I/O error then reads as one.
    for path in [&png, &svg] {
        std::fs::File::create(path).map_err(|e| {
            BenchError::failed("plot", Error::io(format!("write {}", path.display()), e))
        })?;
    }
    let drawn = (|| {
        {
            let root = BitMapBackend::new(&png, size).into_drawing_area();
            draw(&root, chart).map_err(|e| fail(&png, e))?;
            root.present().map_err(|e| fail(&png, e.to_string()))?;
        }
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(&root, chart).map_err(|e| fail(&svg, e))?;
        root.present().map_err(|e| fail(&svg, e.to_string()))
    })();
    if let Err(e) = drawn {
        // No empty or half-drawn figure is left behind.
        let _ = std::fs::remove_file(&png);
        let _ = std::fs::remove_file(&svg);
        return Err(e);
    }
    Ok(vec![png, svg])
}

/// Writes every figure's chart into `dir` (created if needed); returns the
/// files written.
pub fn write_figures(
    dir: &Path,
    figures: &[Figure],
    report: &SuiteReport,
) -> BenchResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| {
        BenchError::failed("plot", Error::io(format!("create {}", dir.display()), e))
    })?;
    let mut files = Vec::new();
    for f in figures {
        let chart = f.resolve(report);
        if chart
            .series
            .iter()
            .all(|(_, v)| v.iter().all(Option::is_none))
        {
            continue; // nothing measured (skipped experiments)
        }
        files.extend(write_chart(dir, &chart)?);
    }
    Ok(files)
}

fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// Splits a label into at most two lines at a space near the middle.
fn two_lines(s: &str, max: usize) -> Vec<String> {
    if s.chars().count() <= max {
        return vec![s.to_string()];
    }
    let mid = s.len() / 2;
    let split = s
        .char_indices()
        .filter(|(_, c)| *c == ' ' || *c == '/')
        .map(|(i, _)| i)
        .min_by_key(|&i| i.abs_diff(mid));
    match split {
        Some(i) => vec![s[..i].trim().to_string(), s[i..].trim().to_string()],
        None => vec![s.to_string()],
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let n = c.categories.len().max(1);
    let ymax = c
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .fold(0.0f64, |m, &v| m.max(v));
    let ymax = if ymax > 0.0 { ymax * 1.18 } else { 1.0 };
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, font(18.0))
        .margin(16)
        .x_label_area_size(if c.x_label.is_empty() { 48 } else { 66 })
        .y_label_area_size(78)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .x_label_formatter(&|_| String::new())
        .y_label_formatter(&|v| if *v == 0.0 { "0".into() } else { fmt_num(*v) })
        .y_desc(c.y_label.as_str())
        .axis_desc_style(font(14.0))
        .label_style(font(12.0))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    let series_n = c.series.len().max(1);
    match c.kind {
        ChartKind::Bars => {
            let group = 0.8;
            let w = group / series_n as f64;
            let labels = n * series_n <= 48;
            for (s, (name, values)) in c.series.iter().enumerate() {
                let colour = PALETTE[s % PALETTE.len()];
                let bars: Vec<_> = values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (i, v)))
                    .collect();
                let x0 = |i: usize| i as f64 + (1.0 - group) / 2.0 + s as f64 * w;
                chart
                    .draw_series(bars.iter().map(|&(i, v)| {
                        Rectangle::new([(x0(i), 0.0), (x0(i) + w, v)], colour.filled())
                    }))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                    });
                chart
                    .draw_series(bars.iter().map(|&(i, v)| {
                        Rectangle::new([(x0(i), 0.0), (x0(i) + w, v)], BLACK.stroke_width(1))
                    }))
                    .map_err(e)?;
                if labels {
                    chart
                        .draw_series(bars.iter().map(|&(i, v)| {
                            Text::new(
                                fmt_num(v),
                                (x0(i) + w / 2.0, v),
                                font(10.0).pos(Pos::new(HPos::Center, VPos::Bottom)),
                            )
                        }))
                        .map_err(e)?;
                }
            }
        }
        ChartKind::Lines => {
            for (s, (name, values)) in c.series.iter().enumerate() {
                let colour = PALETTE[s % PALETTE.len()];
                let points: Vec<(f64, f64)> = values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (i as f64 + 0.5, v)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))
                    .map_err(e)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2))
                    });
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                    .map_err(e)?;
            }
        }
    }
    chart
        .configure_series_labels()
        // Bars: the legend over the last group; lines mostly rise to the
        // right, so theirs goes to the upper left.
        .position(match c.kind {
            ChartKind::Bars => SeriesLabelPosition::UpperRight,
            ChartKind::Lines => SeriesLabelPosition::UpperLeft,
        })
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(font(12.0))
        .draw()
        .map_err(e)?;
    // Category labels under the x axis, centred on their group.
    let (_, axis_y) = chart.backend_coord(&(0.0, 0.0));
    let max_chars = (size_of(c).0 as usize / n / 8).max(6);
    for (i, label) in c.categories.iter().enumerate() {
        let (x, _) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        for (line, text) in two_lines(label, max_chars).iter().enumerate() {
            root.draw(&Text::new(
                text.clone(),
                (x, axis_y + 8 + 15 * line as i32),
                font(12.0).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(e)?;
        }
    }
    if !c.x_label.is_empty() {
        let (x_mid, _) = chart.backend_coord(&(n as f64 / 2.0, 0.0));
        root.draw(&Text::new(
            c.x_label.clone(),
            (x_mid, axis_y + 42),
            font(14.0).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_font_parses() {
        assert!(plotters::style::register_font("pmindex-test", FontStyle::Normal, FONT).is_ok());
    }

    #[test]
    fn labels_split_near_the_middle() {
        assert_eq!(two_lines("short", 10), ["short"]);
        assert_eq!(
            two_lines("Dictionary 300/100", 10),
            ["Dictionary", "300/100"]
        );
        assert_eq!(two_lines("unbreakablelabel", 5), ["unbreakablelabel"]);
    }

    #[test]
    fn charts_are_written_as_png_and_svg_with_text() {
        let dir = std::env::temp_dir().join(format!("pmindex-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for kind in [ChartKind::Bars, ChartKind::Lines] {
            let chart = Chart {
                id: format!("t-{kind:?}"),
                title: "Fig. 0: a test".into(),
                kind,
                x_label: "threads".into(),
                y_label: "throughput (Mops/s)".into(),
                categories: vec!["1".into(), "2".into(), "4".into()],
                series: vec![
                    ("pmlog".into(), vec![Some(1.0), Some(1.8), None]),
                    ("other".into(), vec![Some(0.5), Some(1.0), Some(1.9)]),
                ],
            };
            let files = write_chart(&dir, &chart).unwrap();
            assert_eq!(files.len(), 2);
            let png = std::fs::read(&files[0]).unwrap();
            assert_eq!(&png[1..4], b"PNG");
            let svg = std::fs::read_to_string(&files[1]).unwrap();
            assert!(svg.contains("<svg") && svg.contains("Fig. 0: a test"));
            assert!(svg.contains("pmlog"), "legend text in the SVG");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
