//! `pmindex crashtest`: the crash simulator from the command line.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use pmindex::sim::{self, CrashConfig, CrashReport};

use super::error::CliError;
use super::output::{print_json, print_text, Output};

/// Runs the crash test, prints the report, and fails if any image failed.
pub fn run(out: Output, mut cfg: CrashConfig) -> Result<(), CliError> {
    let bar = if !out.json && std::io::stderr().is_terminal() {
        let b = ProgressBar::new(cfg.states as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} images ({per_sec}, eta {eta})",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        b.set_message(format!("crashtest {}", cfg.engine));
        Some(b)
    } else {
        None
    };
    if let Some(b) = &bar {
        let b = b.clone();
        cfg.progress = Some(std::sync::Arc::new(move |n, _| b.set_position(n as u64)));
    }
    let report = sim::run(&cfg)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if out.json {
        print_json(&report)?;
    } else {
        print_text(&text(&report, &cfg))?;
    }
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "{} crash image(s) failed; reproduce with `{}`",
            report.failures.len(),
            report.reproduce
        )))
    }
}

fn text(r: &CrashReport, cfg: &pmindex::sim::CrashConfig) -> String {
    let (eadr, writers) = (cfg.eadr, cfg.writers);
    let mut s = format!(
        "crashtest {}{}: seed {}, {} rounds of {} ops{}\n\
         {} PM events, {} fences, {} crash points{}\n\
         {} distinct crash images recovered and verified ({} of them crashed during recovery), {} duplicates skipped\n\
         {:.1} s, {:.0} images/s\n",
        r.engine,
        if eadr { " (eADR)" } else { "" },
        r.seed,
        r.rounds,
        r.ops,
        match (writers, cfg.shared_keys) {
            (1, false) => String::new(),
            (1, true) => " on one writer, checked as shared keys".to_string(),
            (w, false) => format!(" by each of {w} writers at once"),
            (w, true) => format!(" by each of {w} writers at once, on shared keys"),
        },
        r.events,
        r.fences,
        r.crash_points,
        match (writers > 1, cfg.shared_keys) {
            (false, _) => String::new(),
            (true, false) => format!(
                " ({} with two or more operations in flight)",
                r.overlapping_points
            ),
            (true, true) => format!(
                " ({} with two or more operations in flight, {} of them on one key)",
                r.overlapping_points, r.same_key_points
            ),
        },
        r.images,
        r.recovery_images,
        r.duplicates,
        r.seconds,
        r.images_per_second()
    );
    if r.skipped_fence_points > 0 {
        s.push_str(&format!(
            "{} fence points not crashed: the rounds they were in had more crash points than \
             what was left of --states {} (usually the last round)\n",
            r.skipped_fence_points, cfg.states
        ));
    }
    if r.failures.is_empty() {
        s.push_str("0 failures\n");
        return s;
    }
    s.push_str(&format!("{} FAILURES\n", r.failures.len()));
    for f in &r.failures {
        s.push_str(&format!(
            "  crash point {}: {} ops acknowledged, in flight: {}, image {}: {}\n",
            f.crash_point
                .map_or("live run".to_string(), |p| format!("event {p}")),
            f.acked_ops,
            f.in_flight.as_deref().unwrap_or("none"),
            f.image,
            f.message
        ));
    }
    if let Some(ops) = &r.shrunk {
        s.push_str(&format!("shrunk to {} operation(s):\n", ops.len()));
        for op in ops {
            s.push_str(&format!("  {op}\n"));
        }
    }
    s.push_str(&format!("reproduce: {}\n", r.reproduce));
    if writers > 1 {
        s.push_str("(the writers interleave differently in each run: a rerun may pass)\n");
    }
    s
}
