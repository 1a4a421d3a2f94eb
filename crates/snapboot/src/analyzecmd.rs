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
    /// Kernel .config or config.gz (default: /proc/config.gz).
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

/// `snapboot check-kernel`: exit 0 when snapshot boot can work, 1 when a blocker was found.
pub fn check_kernel(a: CheckKernelArgs) -> Result<ExitCode> {
    let cfg = load_config(a.config.as_deref())?;
    let checks = check_config(&cfg);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            println!(
                "{:<8} {:<40} {:<12} {}",
                c.verdict.to_string(),
                c.option,
                c.value,
                c.reason
            );
        }
    }
    let blocked = checks.iter().any(|c| c.verdict == Verdict::Blocker);
    if !a.json {
        println!(
            "{}",
            if blocked {
                "snapshot boot cannot work with this kernel (see BLOCKER lines)"
            } else {
                "snapshot boot can work with this kernel"
            }
        );
    }
    Ok(if blocked {
        snapboot_device::Exit::Blocked.into()
    } else {
        ExitCode::SUCCESS
    })
}
