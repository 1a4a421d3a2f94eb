//! How the commands show results, shared by every command that makes them (as
//! [`crate::boardopts`] holds the flags they share): progress on stderr, a benchmark's table
//! and JSON, and the boot-analysis report files. No logic here: what is shown comes from the
//! library crates.

use analyze::{Report, Timeline};
use anyhow::{Context, Result};
use board::RunOptions;
use boottrace::report::{BenchReport, MethodResult};
use bundle::Bundle;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;

/// A progress bar on stderr for `total` steps (it hides itself when stderr is not a terminal).
pub(crate) fn progress(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// Builds the report of a benchmark run (with `notes` on what it left out), prints its
/// table and writes its JSON to `json`.
pub(crate) fn publish(
    bench: &str,
    bundle: &Bundle,
    opts: &RunOptions,
    runs: usize,
    methods: Vec<MethodResult>,
    notes: Vec<String>,
    json: Option<&Path>,
) -> Result<BenchReport> {
    let report = bench::report(bench, bundle, opts, runs, methods, notes);
    print!("{}", report.table());
    if let Some(p) = json {
        bench::write_json(&report, p)?;
    }
    Ok(report)
}

/// Writes an analysis report as HTML and/or SVG.
pub(crate) fn write_report(report: &Report, html: Option<&Path>, svg: Option<&Path>) -> Result<()> {
    if let Some(p) = html {
        std::fs::write(p, report.to_html()).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("snapboot: report written to {}", p.display());
    }
    if let Some(p) = svg {
        std::fs::write(p, report.to_svg()).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Writes the HTML analysis of runs the board just made (`--analyze` on run and bench).
pub(crate) fn report_runs(runs: Vec<(String, Timeline)>, html: &Path) -> Result<()> {
    let report = Report::from_timelines(runs, None);
    write_report(&report, Some(html), None)
}
