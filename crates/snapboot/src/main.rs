//! `snapboot`: snapshot boot for Linux. A thin command line over the library crates; the same
//! static binary runs on the host (board, bench, analysis) and has the device's commands too
//! (`snapboot-device`, the binary the board puts on the device, has only those).

mod analyzecmd;
mod benchcmd;
mod boardcmd;
mod boardopts;
mod cli;
mod output;
mod tracecmd;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The board's boot path (first process, `/init`'s resume) skips clap.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(result) = snapboot_device::fast_path(&argv) {
        return snapboot_device::exit(result);
    }
    snapboot_device::exit(cli::dispatch(cli::Cli::parse()))
}
