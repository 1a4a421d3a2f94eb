//! `snapboot check`: whether the running kernel can snapshot-boot (its config, its lockdown
//! state, whether it offers hibernation), each requirement met or not with what to do; and
//! the table both it and the host's `check-kernel` print.

use anyhow::Result;
use kernelcheck::check::{KernelCheck, Verdict};
use std::process::ExitCode;

use crate::exit::Exit;

/// `snapboot check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Print JSON: the config read (`config`, null when none was found) and the checks.
    #[arg(long)]
    pub json: bool,
}

/// Prints `checks` as a table, one line each, and the verdict; returns [`Exit::Blocked`]
/// when a blocker was found, success otherwise.
pub fn print_checks(checks: &[KernelCheck]) -> ExitCode {
    for c in checks {
        println!(
            "{:<8} {:<40} {:<12} {}",
            c.verdict.to_string(),
            c.option,
            c.value,
            c.reason
        );
    }
    let blocked = checks.iter().any(|c| c.verdict == Verdict::Blocker);
    if blocked {
        println!("snapshot boot cannot work with this kernel (see BLOCKER lines)");
    } else {
        println!("snapshot boot can work with this kernel");
    }
    status(blocked)
}

/// The exit status for a check.
pub fn status(blocked: bool) -> ExitCode {
    if blocked {
        Exit::Blocked.into()
    } else {
        ExitCode::SUCCESS
    }
}

/// `snapboot check`: exit 0 when snapshot boot can work, [`Exit::Blocked`] otherwise.
pub fn check(a: CheckArgs) -> Result<ExitCode> {
    let report = kernelcheck::check::running();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(status(report.blocked()));
    }
    match &report.config {
        Some(p) => println!("kernel config: {}", p.display()),
        None => println!("kernel config: not found"),
    }
    Ok(print_checks(&report.checks))
}
