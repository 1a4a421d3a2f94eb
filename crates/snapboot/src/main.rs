//! `snapboot`: snapshot boot for Linux. A thin command line over the library crates; the same
//! static binary runs on the host (board, bench, analysis) and inside the guest (start, ready).

mod analyzecmd;
mod benchcmd;
mod boardcmd;
mod boardopts;
mod cli;
mod guestcmd;
mod output;
mod storecmd;
mod tracecmd;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The board's `/init` runs exactly this on every boot, before anything else: skip
    // building the whole command line (clap constructs every subcommand and its help first,
    // which costs 0.05-0.1 s of an emulated CPU translating code that runs once).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if argv.is_empty() && std::process::id() == 1 {
        // Started by the kernel as its first process (`rdinit=/bin/snapboot`).
        guestcmd::early_init();
    }
    let result = if argv == ["resume", "--from-cmdline"] {
        guestcmd::resume_cmd(guestcmd::ResumeArgs::from_cmdline())
    } else {
        cli::dispatch(cli::Cli::parse())
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("snapboot: {e:#}");
            ExitCode::from(1)
        }
    }
}
