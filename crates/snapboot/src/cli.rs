//! Command-line definitions and dispatch. Exit codes: 0 success, 1 error (with a one-line
//! reason on stderr), 2 usage error (clap), 3 the board ran but did not become usable
//! (panic, hang, exit).

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Snapshot boot for Linux.
#[derive(Parser, Debug)]
#[command(name = "snapboot", version, about, after_help = snapboot_device::HOST_EXIT_HELP)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The QEMU board: kernel, bundle, power-on.
    #[command(subcommand)]
    Board(BoardCmd),
    /// Record a real board's serial console with host timestamps (grabserial-style).
    Trace(crate::tracecmd::TraceArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    #[command(flatten)]
    Device(snapboot_device::DeviceCmd),
    /// Keys for signed images.
    #[command(subcommand)]
    Key(snapboot_device::KeyCmd),
    /// Boot graph, phases, initcalls and the advisor's cheap wins, from boot logs.
    Analyze(crate::analyzecmd::AnalyzeArgs),
    /// Can snapshot boot work with this kernel? Which boot-time options are set?
    CheckKernel(crate::analyzecmd::CheckKernelArgs),
}

#[derive(Subcommand, Debug)]
enum BoardCmd {
    /// Download the distribution kernel (never installed on the host) into the cache.
    FetchKernel {
        /// The board's architecture.
        #[arg(long, default_value = "x86_64", value_parser = crate::boardopts::arch_parser())]
        arch: guestarch::Arch,
        /// Meta package whose dependency is the kernel (default: the architecture's,
        /// linux-image-amd64 or linux-image-arm64:arm64).
        #[arg(long)]
        meta: Option<String>,
    },
    /// Build the restore kernel: a small kernel from the distribution's own source, only to
    /// restore images of the fetched kernel (cached; a few minutes the first time).
    RestoreKernel {
        /// The board's architecture (arm64 cross-compiles with gcc-aarch64-linux-gnu).
        #[arg(long, default_value = "x86_64", value_parser = crate::boardopts::arch_parser())]
        arch: guestarch::Arch,
        /// Parallel compile jobs (default: one per CPU).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Build a guest bundle: vmlinux, initramfs, root filesystem.
    Build(crate::boardcmd::BuildArgs),
    /// Build the Debian package snapboot_VERSION_ARCH.deb from the board's device binary
    /// (dpkg-deb; `make deb`).
    Deb {
        /// The package's architecture (amd64 from x86_64, arm64 from the cross-built binary).
        #[arg(long, default_value = "x86_64", value_parser = crate::boardopts::arch_parser())]
        arch: guestarch::Arch,
        /// Directory the package is written to.
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
    },
    /// Power the board on.
    Run(crate::boardcmd::RunArgs),
    /// Cold-boot with capture requested: the image is taken at ready, then the board powers off.
    Capture(crate::boardcmd::BoardCaptureArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// N cold boots: median/min/max of each milestone and of TTI.
    Cold(crate::benchcmd::ColdArgs),
    /// Cold boot vs kernel-native hibernation resume vs snapboot, N boots each.
    Compare(crate::benchcmd::CompareArgs),
    /// Re-captures onto a store: bytes written per capture with full, selective and
    /// no storage dedupe, and restore time of the last image against a fresh store.
    Recapture(crate::benchcmd::RecaptureArgs),
    /// Lazy images by how much they page out (`--lazy SIZE`), each also re-captured with
    /// its working-set profile: TTI and first request of each, restored in turn.
    Lazy(crate::benchcmd::LazyArgs),
    /// Deferred memory by board size: each size booting with all its RAM and (above --mem,
    /// default 512M) booting with --mem and adding the rest after ready or restored; cold
    /// and snapshot boots, time to the initramfs, TTI and time until all RAM is online.
    Memory(crate::benchcmd::MemoryArgs),
    /// One image restored again and again (re-captured every --recapture-every): every
    /// restore checked (restored, state checksum, clock, fresh RNG) with its TTI; failures
    /// are counted with their reasons and the run goes on.
    Endurance(crate::benchcmd::EnduranceArgs),
}

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Board(BoardCmd::FetchKernel { arch, meta }) => {
            crate::boardcmd::fetch_kernel(arch, meta.as_deref())
        }
        Cmd::Board(BoardCmd::RestoreKernel { arch, jobs }) => {
            crate::boardcmd::restore_kernel(arch, jobs)
        }
        Cmd::Board(BoardCmd::Build(a)) => crate::boardcmd::build(a),
        Cmd::Board(BoardCmd::Deb { arch, out }) => {
            let deb = bundle::debpkg::build(&bundle::home::device_binary(arch)?, arch, &out)?;
            println!("{}", deb.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Board(BoardCmd::Run(a)) => crate::boardcmd::run(a),
        Cmd::Trace(a) => crate::tracecmd::trace(a),
        Cmd::Bench(BenchCmd::Cold(a)) => crate::benchcmd::cold(a),
        Cmd::Bench(BenchCmd::Compare(a)) => crate::benchcmd::compare(a),
        Cmd::Bench(BenchCmd::Recapture(a)) => crate::benchcmd::recapture(a),
        Cmd::Bench(BenchCmd::Lazy(a)) => crate::benchcmd::lazy(a),
        Cmd::Bench(BenchCmd::Memory(a)) => crate::benchcmd::memory(a),
        Cmd::Bench(BenchCmd::Endurance(a)) => crate::benchcmd::endurance(a),
        Cmd::Device(c) => snapboot_device::dispatch(c),
        Cmd::Key(c) => snapboot_device::key(c),
        Cmd::Analyze(a) => crate::analyzecmd::analyze(a),
        Cmd::CheckKernel(a) => crate::analyzecmd::check_kernel(a),
        Cmd::Board(BoardCmd::Capture(a)) => crate::boardcmd::board_capture(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The host tool parses the device's commands as the device binary does.
    #[test]
    fn the_device_commands_are_part_of_the_host_tool() {
        let cli = Cli::try_parse_from(["snapboot", "resume", "--from-cmdline"]).unwrap();
        match cli.cmd {
            Cmd::Device(snapboot_device::DeviceCmd::Resume(a)) => {
                assert_eq!(a, snapboot_device::ResumeArgs::from_cmdline())
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["snapboot", "store", "ls", "/dev/null"]).is_ok());
        assert!(Cli::try_parse_from(["snapboot", "key", "gen", "/tmp/k"]).is_ok());
        match Cli::try_parse_from(["snapboot", "profile", "record", "--wait", "2.5"])
            .unwrap()
            .cmd
        {
            Cmd::Device(snapboot_device::DeviceCmd::Profile(
                snapboot_device::ProfileCmd::Record { wait },
            )) => assert_eq!(wait, 2.5),
            other => panic!("parsed as {other:?}"),
        }
        assert!(
            Cli::try_parse_from(["snapboot", "capture", "--store", "/dev/vdb", "--no-verity"])
                .is_err(),
            "--no-verity needs --lazy"
        );
        assert!(Cli::try_parse_from([
            "snapboot",
            "capture",
            "--store",
            "/dev/vdb",
            "--lazy",
            "--no-verity",
            "--profile",
            "prefetch"
        ])
        .is_ok());
    }
}
