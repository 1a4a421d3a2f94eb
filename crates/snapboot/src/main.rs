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
    let args = cli::Cli::parse();
    match cli::dispatch(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("snapboot: {e:#}");
            ExitCode::from(1)
        }
    }
}
