//! `snapboot bench cold`, and what every benchmark shares: each writes one
//! [`BenchReport`] (boottrace's JSON contract: median and spread of every milestone and of
//! TTI per method) and shows progress while the board boots.

use crate::boardopts::BoardOpts;
use anyhow::{bail, Context, Result};
use board::home::bundle_or_build;
use board::qemu::run_probe;
use board::{Bundle, RunOptions};
use boottrace::report::{summarize, BenchReport, MethodResult};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

/// Arguments of `snapboot bench cold`.
#[derive(Args, Debug)]
pub struct ColdArgs {
    /// Built-in workload name or bundle directory (built on first use if missing).
    #[arg(long, default_value = "shell")]
    workload: String,
    /// Number of boots.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HTML boot-analysis report with every run side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    #[command(flatten)]
    board: BoardOpts,
}

/// Builds the report of a benchmark run, prints it and writes its JSON to `json`.
pub fn publish(
    bench: &str,
    bundle: &Bundle,
    opts: &RunOptions,
    runs: usize,
    methods: Vec<MethodResult>,
    json: Option<&Path>,
) -> Result<BenchReport> {
    let report = BenchReport {
        bench: bench.into(),
        workload: bundle.workload.name.clone(),
        kernel: bundle.kernel.release.clone(),
        accel: format!("{:?}", opts.accel).to_lowercase(),
        mem_mib: opts.mem_mib,
        finished_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        runs,
        methods,
    };
    print!("{}", report.table());
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

/// A progress bar on stderr for `total` boots.
pub fn progress(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

/// `snapboot bench cold`: N cold boots with the workload's probe.
pub fn cold(a: ColdArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let bundle = bundle_or_build(&a.workload)?;
    let opts = a.board.to_run_options(&bundle)?;
    let pb = progress(a.runs as u64, "cold boots");
    let mut timelines = Vec::new();
    for i in 0..a.runs {
        let res = run_probe(&bundle, &opts, &bundle.workload.probe)?;
        if let Some(e) = res.error {
            pb.finish_and_clear();
            bail!("cold boot {} of {} failed: {e}", i + 1, a.runs);
        }
        timelines.push(res.timeline);
        pb.inc(1);
    }
    pb.finish_and_clear();
    if let Some(p) = &a.analyze {
        let runs = timelines
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("cold #{}", i + 1), t.clone()))
            .collect();
        crate::analyzecmd::report_runs(runs, p)?;
    }
    publish(
        "cold",
        &bundle,
        &opts,
        a.runs,
        vec![summarize("cold", &timelines)],
        a.json.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}
