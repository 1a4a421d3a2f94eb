//! `snapboot bench cold` and `snapboot bench compare`: the flags, then `board::bench` does
//! the boots and makes the [`boottrace::report::BenchReport`] (median and spread of every
//! milestone and of TTI per method), which is printed and written as JSON.

use crate::boardopts::BoardOpts;
use crate::output::{progress, publish, report_runs};
use anyhow::{bail, Result};
use board::bench::{self, MethodRuns};
use board::home::bundle_or_build;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// Arguments of `snapboot bench compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// Boots per method.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Working directory for the store and swap images (default: SNAPBOOT_HOME/bench).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Write an HTML report with one boot of each method side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    /// Leave out the restore-kernel methods even when a restore kernel is built.
    #[arg(long)]
    no_restore_kernel: bool,
    #[command(flatten)]
    board: BoardOpts,
}

/// `snapboot bench cold`: N cold boots with the workload's probe.
pub fn cold(a: ColdArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!(board::BenchError::NoRuns);
    }
    let bundle = bundle_or_build(&a.workload)?;
    let opts = a.board.to_run_options(&bundle)?;
    let pb = progress(a.runs as u64, "cold boots");
    let timelines = bench::cold(&bundle, &opts, a.runs, &mut || pb.inc(1));
    pb.finish_and_clear();
    let timelines = timelines?;
    if let Some(p) = &a.analyze {
        let runs = timelines
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("cold #{}", i + 1), t.clone()))
            .collect();
        report_runs(runs, p)?;
    }
    let cold = MethodRuns {
        method: "cold",
        timelines,
        image_bytes: None,
        stored_bytes: None,
    };
    let methods = vec![cold.summary()];
    publish("cold", &bundle, &opts, a.runs, methods, a.json.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// `snapboot bench compare`: cold, kernel-native resume, snapboot and lazy snapboot, and
/// both snapboot images restored by the restore kernel when one is built.
pub fn compare(a: CompareArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!(board::BenchError::NoRuns);
    }
    let bundle = bundle_or_build(&a.workload)?;
    let opts = a.board.to_run_options(&bundle)?;
    let work = a
        .workdir
        .clone()
        .unwrap_or_else(|| board::home::home().join("bench"));
    let restore_kernel = if a.no_restore_kernel {
        None
    } else {
        let k = board::restore_kernel::cached(
            &board::home::restore_kernel_cache(),
            &bundle.kernel.release,
        );
        if k.is_none() {
            eprintln!(
                "snapboot: no restore kernel built for {}: its methods are left out \
                 (`snapboot board restore-kernel` builds it)",
                bundle.kernel.release
            );
        }
        k.map(|k| k.vmlinux)
    };
    let pb = progress(
        bench::compare_steps(a.runs, restore_kernel.is_some()),
        "compare",
    );
    let methods = bench::compare(
        &bundle,
        &opts,
        &work,
        a.runs,
        restore_kernel.as_deref(),
        &mut || pb.inc(1),
    );
    pb.finish_and_clear();
    let methods = methods?;

    if let Some(p) = &a.analyze {
        let runs = methods
            .iter()
            .filter_map(|m| {
                m.timelines
                    .first()
                    .map(|t| (m.method.to_string(), t.clone()))
            })
            .collect();
        report_runs(runs, p)?;
    }
    let methods = methods.iter().map(MethodRuns::summary).collect();
    publish(
        "compare",
        &bundle,
        &opts,
        a.runs,
        methods,
        a.json.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}
