//! The device's commands (`start`, `ready`, `capture`, `resume`, `image`, `store`) and the
//! fast paths taken before any command line is parsed.

use anyhow::Result;
use clap::Subcommand;
use std::ffi::OsString;
use std::process::ExitCode;

use crate::guestcmd;

/// Commands that run on the device (and, for `image` and `store`, on the host too).
#[derive(Subcommand, Debug)]
pub enum DeviceCmd {
    /// (guest) Second-stage init: start the application as PID 1's child.
    Start {
        /// Environment for the application, KEY=VALUE.
        #[arg(long)]
        env: Vec<String>,
        /// The application's start command.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// (guest) The application is ready: print the ready marker, capture if the kernel
    /// command line asks for it (snapboot.capture snapboot.store=DEV).
    Ready,
    /// (device) Freeze, create the hibernation image and write it to the store.
    Capture(guestcmd::CaptureArgs),
    /// (device, initramfs) Validate the store's image and restore it; on any failure print
    /// the reason and return so the cold boot continues.
    Resume(guestcmd::ResumeArgs),
    /// Images on a store.
    #[command(subcommand)]
    Image(ImageCmd),
    /// The flash store: named images, dedupe across images, gc, fsck, signatures.
    #[command(subcommand)]
    Store(crate::storecmd::StoreCmd),
    /// (device, restored from a lazy image) The application's working set: record which
    /// swapped-out pages it touched since the restore, for the next capture.
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// (device) Deferred memory (`snapboot.defermem`): add the RAM the system did not boot
    /// with, and show what is online.
    #[command(subcommand)]
    Memory(MemoryCmd),
    /// (device) Put snapboot into a Debian-style system: the binary, the initramfs-tools
    /// hook and boot script (resume before the root is mounted) and the systemd units
    /// (snapboot-capture.service, enabled; snapboot-restored.target). Then rebuild the
    /// initramfs (`update-initramfs -u`).
    Install(InstallArgs),
}

/// `snapboot install`.
#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// The system's root: `/` on the device, or a root tree being built.
    #[arg(long, default_value = "/")]
    pub root: std::path::PathBuf,
    /// The application's unit: the capture waits until it is ready (After= and Requires=;
    /// with Type=notify that is its READY=1). Repeatable.
    #[arg(long, value_name = "UNIT")]
    pub after: Vec<String>,
    /// The store's device (`/dev/mmcblk0p3`): its drivers' modules, read from /sys, are
    /// loaded by the initramfs before udev, so the image is restored before udev starts.
    #[arg(long, value_name = "DEV")]
    pub store: Option<std::path::PathBuf>,
    /// A module the store's device needs (repeatable; for a root built elsewhere, where
    /// --store cannot look at the device).
    #[arg(long, value_name = "MODULE")]
    pub store_module: Vec<String>,
}

/// `snapboot memory`.
#[derive(Subcommand, Debug)]
pub enum MemoryCmd {
    /// Add the deferred memory: load its driver, online each block as it arrives, and at
    /// the deadline fix and report whatever is missing (`ready` and `restored` start this
    /// in the background).
    Add,
    /// Memory blocks online and offline, and whether the deferred memory's driver is in.
    Status,
}

/// `snapboot profile`.
#[derive(Subcommand, Debug)]
pub enum ProfileCmd {
    /// Record the pages touched since the restore (after waiting SECS), for the next
    /// capture; without it the next capture takes what was touched until it runs.
    Record {
        /// Seconds to wait first: the window in which the application serves its first
        /// requests.
        #[arg(long, default_value_t = 0.0)]
        wait: f64,
    },
    /// How much of the image's profile, and of the rest of its swapped-out memory, is in
    /// memory now.
    Status,
    /// Read the image's profile back in (what a prefetch-mode image does after restore).
    Prefetch,
    /// After SECS, print the major page faults each process took since the restore: the
    /// memory the eager image lacked (`snapboot.profilecheck` starts it at every restore).
    Faults {
        /// Seconds to wait first.
        #[arg(long, default_value_t = 0)]
        wait: u32,
    },
}

/// `snapboot image`.
#[derive(Subcommand, Debug)]
pub enum ImageCmd {
    /// Show an image: identity, counts, checksums verified.
    Inspect(guestcmd::InspectArgs),
}

/// Runs a device command.
pub fn dispatch(cmd: DeviceCmd) -> Result<ExitCode> {
    match cmd {
        DeviceCmd::Start { env, cmd } => {
            let code = ondevice::guest::start(&cmd.join(" "), &env)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        DeviceCmd::Ready => guestcmd::ready(),
        DeviceCmd::Capture(a) => guestcmd::capture_cmd(a),
        DeviceCmd::Resume(a) => guestcmd::resume_cmd(a),
        DeviceCmd::Image(ImageCmd::Inspect(a)) => guestcmd::inspect(a),
        DeviceCmd::Store(c) => crate::storecmd::store(c),
        DeviceCmd::Profile(c) => guestcmd::profile(c),
        DeviceCmd::Memory(c) => guestcmd::memory(c),
        DeviceCmd::Install(a) => guestcmd::install(a),
    }
}

/// What the boot path runs, taken before clap builds the command line (clap constructs
/// every subcommand and its help first, which costs 0.05-0.1 s of an emulated CPU
/// translating code that runs once). `argv` is without the program name. Returns `None`
/// for everything else.
pub fn fast_path(argv: &[OsString]) -> Option<Result<ExitCode>> {
    if argv.is_empty() && std::process::id() == 1 {
        // Started by the kernel as its first process (`rdinit=/bin/snapboot`).
        ondevice::boot::early_init();
    }
    if argv == ["resume", "--from-cmdline"] {
        return Some(guestcmd::resume_cmd(guestcmd::ResumeArgs::from_cmdline()));
    }
    if argv == ["resume", "--from-cmdline", "--before-udev"] {
        return Some(guestcmd::resume_cmd(
            guestcmd::ResumeArgs::from_cmdline_before_udev(),
        ));
    }
    None
}

/// The exit code for a command's result: 1 with the reason on stderr for an error.
pub fn exit(result: Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("snapboot: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: DeviceCmd,
    }

    /// The fast path for `/init`'s call must mean what clap would parse.
    #[test]
    fn the_init_fast_path_means_what_the_command_line_says() {
        let cli = Cli::try_parse_from(["snapboot", "resume", "--from-cmdline"]).unwrap();
        match cli.cmd {
            DeviceCmd::Resume(a) => assert_eq!(a, guestcmd::ResumeArgs::from_cmdline()),
            other => panic!("parsed as {other:?}"),
        }
        let words = ["snapboot", "resume", "--from-cmdline", "--before-udev"];
        match Cli::try_parse_from(words).unwrap().cmd {
            DeviceCmd::Resume(a) => {
                assert_eq!(a, guestcmd::ResumeArgs::from_cmdline_before_udev())
            }
            other => panic!("parsed as {other:?}"),
        }
        let argv: Vec<OsString> = vec!["image".into(), "inspect".into()];
        assert!(
            fast_path(&argv).is_none(),
            "only the boot path is taken early"
        );
    }
}
