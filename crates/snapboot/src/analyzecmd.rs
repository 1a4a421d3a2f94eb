//! `snapboot analyze` and `snapboot check-kernel`: boot logs into a report with a boot graph
//! and the advisor's findings; a kernel config into a verdict on snapshot boot.

use crate::output::write_report;
use analyze::{analyze_files, check_config, load_config, Verdict};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// `snapboot analyze`.
#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    /// Timeline JSON, stamped log, raw console capture or dmesg output; several render side
    /// by side on one time axis.
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// Kernel .config (or config.gz) for the config-based rules.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Write a self-contained HTML report.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Write the boot graph as SVG.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `snapboot check-kernel`.
#[derive(Args, Debug)]
pub struct CheckKernelArgs {
    /// Kernel .config or config.gz (default: /proc/config.gz). On the device itself,
    /// `snapboot check` also reads /boot/config-RELEASE and the lockdown state.
    config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `snapboot analyze`.
pub fn analyze(a: AnalyzeArgs) -> Result<ExitCode> {
    let report = analyze_files(&a.logs, a.config.as_deref())?;
    if a.json {
        println!("{}", report.to_json()?);
    } else {
        print!("{}", report.to_text());
    }
    write_report(&report, a.html.as_deref(), a.svg.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

/// `snapboot check-kernel`: exit 0 when snapshot boot can work, [`snapboot_device::Exit::Blocked`]
/// when a blocker was found. The snapshot requirements are the device's (`snapboot check`).
pub fn check_kernel(a: CheckKernelArgs) -> Result<ExitCode> {
    let cfg = load_config(a.config.as_deref())?;
    let checks = check_config(&cfg);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
        let blocked = checks.iter().any(|c| c.verdict == Verdict::Blocker);
        return Ok(snapboot_device::check_status(blocked));
    }
    Ok(snapboot_device::print_checks(&checks))
}
