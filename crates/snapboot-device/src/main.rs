//! `snapboot-device`: the device's half of snapboot, as the small static binary the board
//! installs as `/bin/snapboot` in the initramfs (and every image carries). It has the
//! commands that run on the device and nothing of the host's board, bench or analysis, so
//! the kernel unpacks, and the restore path maps, a fraction of the full tool.

use clap::Parser;
use snapboot_device::{dispatch, exit, fast_path, DeviceCli};
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(result) = fast_path(&argv) {
        return exit(result);
    }
    exit(dispatch(DeviceCli::parse().cmd))
}
