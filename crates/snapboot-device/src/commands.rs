//! The device's commands (`start`, `ready`, `capture`, `resume`, `check`, `config`, `image`,
//! `store`) and the fast paths taken before any command line is parsed.

use anyhow::Result;
use clap::Subcommand;
use std::ffi::OsString;
use std::process::ExitCode;

use crate::bootcmd;
use crate::exit::Exit;
use crate::imagecmd;
use crate::lifecyclecmd;
use crate::systemcmd::{self, InstallArgs, MemoryCmd, ProfileCmd};

// The device binary's command line (`snapboot` on the device); the man pages and shell
// completions of the Debian package are generated from it (crates/docgen).
/// Snapshot boot for Linux, the device's commands.
#[derive(clap::Parser, Debug)]
#[command(
    name = "snapboot",
    version,
    about = "Snapshot boot for Linux: capture the running system once it is ready, and \
             restore it at power-on instead of booting it",
    after_help = crate::DEVICE_EXIT_HELP
)]
pub struct DeviceCli {
    /// The command.
    #[command(subcommand)]
    pub cmd: DeviceCmd,
}

/// Commands that run on the device (and, for `image` and `store`, on a store file anywhere).
/// Their help is the device's: the host tool lists them too, so nothing here names the
/// host's board, benches or builds.
#[derive(Subcommand, Debug)]
pub enum DeviceCmd {
    /// For a system whose init is snapboot (`rdinit=/bin/snapboot`): start the application
    /// as the child of PID 1.
    Start {
        /// Environment for the application, KEY=VALUE.
        #[arg(long)]
        env: Vec<String>,
        /// The application's start command.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// The application is ready (its ready point): print the ready marker; capture to the
    /// configured store when this boot asks for it (snapboot.capture), or when an update
    /// made the images stale.
    Ready,
    /// Freeze, create the hibernation image and write it to the store.
    Capture(bootcmd::CaptureArgs),
    /// (initramfs) Validate the store's image and restore it; on any failure print the
    /// reason and return so the cold boot continues.
    Resume(bootcmd::ResumeArgs),
    /// Whether this device can snapshot-boot, each requirement met or not with what to do,
    /// one a line: the running kernel (its config, from /boot/config-RELEASE or
    /// /proc/config.gz; its lockdown state; whether it offers hibernation), the root
    /// (read-only, or an overlay whose writes go to tmpfs), the configured store (there, a
    /// store, its size against the RAM), the initramfs (/bin/snapboot, the root's
    /// /etc/snapboot files unchanged, the store's drivers, the device key for
    /// `encrypt = key`), the capture unit (enabled, after the application) and the boot
    /// loader's capture entry. Exit status 7 when something blocks.
    Check(crate::checkcmd::CheckArgs),
    /// The config file /etc/snapboot/snapboot.conf (snapboot.conf(5)): check it and
    /// show the settings in effect; print its man page, default file or docs table.
    #[command(subcommand)]
    Config(crate::configcmd::ConfigCmd),
    /// What this boot did: restored (which image, which unconfirmed restore), cold
    /// or fallback (why), the re-capture after an update, timings (/run/snapboot/status);
    /// with --history, the last boots from the store's boot log, which survives reboots.
    /// Exit status 0 when restored, 4 when not (also when resume did not run on this boot);
    /// with --history, 0 once shown.
    Status(lifecyclecmd::StatusArgs),
    /// (restored) The restored system works: reset the crash-loop guard's count of the
    /// restored image. The application's health check runs it (snapboot.confirm=app);
    /// snapboot runs it with --after-boot-complete or --after-up for the other modes.
    Confirm(lifecyclecmd::ConfirmArgs),
    /// (restored; snapboot runs it after a restore with snapboot.watchdog) Feed the hardware
    /// watchdog the restoring boot armed, every third of TIMEOUT seconds, until the restore
    /// is confirmed (then stop it) or its confirmation fails (then let it reset the
    /// machine).
    FeedWatchdog {
        /// The watchdog's timeout, seconds.
        timeout: u32,
    },
    /// An update changed the system: mark every stored image stale, so the next boot does
    /// not try them and captures a new one (the kernel and initramfs update hooks run
    /// `snapboot invalidate --if-configured`).
    Invalidate(lifecyclecmd::InvalidateArgs),
    /// Images on a store.
    #[command(subcommand)]
    Image(ImageCmd),
    /// The store: named images, dedupe across images, gc, fsck, signatures.
    #[command(subcommand)]
    Store(crate::storecmd::StoreCmd),
    /// The kernel pack a restore kernel hands cold boots to (`snapboot.coldkernel=`).
    #[command(subcommand)]
    KernelPack(crate::packcmd::KernelPackCmd),
    /// (GRUB) The restore kernel as GRUB's default entry: install it (with the
    /// records it reads and the stock kernel's pack for refusals) or remove it.
    #[command(subcommand)]
    RestoreKernel(crate::restorecmd::RestoreKernelCmd),
    /// (restored from a lazy image) The application's working set: record which
    /// swapped-out pages it touched since the restore, for the next capture.
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// Deferred memory (`snapboot.defermem`): add the RAM the system did not boot
    /// with, and show what is online.
    #[command(subcommand)]
    Memory(MemoryCmd),
    /// Put snapboot into a system without the snapboot package, at the
    /// administrator's paths (/usr/local/sbin, /etc): the binary, the initramfs-tools hook
    /// and scripts or the dracut module (resume before the root is mounted), the systemd
    /// units (snapboot-capture.service, enabled) and the update hooks, listed with their
    /// checksums in /etc/snapboot/installed.manifest; then rebuild the initramfs
    /// (`update-initramfs -u` or `dracut -f`). Refused where the package is installed.
    Install(InstallArgs),
}

/// `snapboot image`.
#[derive(Subcommand, Debug)]
pub enum ImageCmd {
    /// Show an image: identity, counts, checksums verified.
    Inspect(imagecmd::InspectArgs),
}

/// Runs a device command.
pub fn dispatch(cmd: DeviceCmd) -> Result<ExitCode> {
    match cmd {
        DeviceCmd::Start { env, cmd } => {
            let code = ondevice::guest::start(&cmd.join(" "), &env)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        DeviceCmd::Ready => bootcmd::ready(),
        DeviceCmd::Capture(a) => bootcmd::capture_cmd(a),
        DeviceCmd::Resume(a) => bootcmd::resume_cmd(a),
        DeviceCmd::Check(a) => crate::checkcmd::check(a),
        DeviceCmd::Config(c) => crate::configcmd::config(c),
        DeviceCmd::Status(a) => lifecyclecmd::status(a),
        DeviceCmd::Confirm(a) => lifecyclecmd::confirm(a),
        DeviceCmd::FeedWatchdog { timeout } => {
            ondevice::watchdog::feed_until_confirmed(timeout);
            Ok(crate::exit::Exit::Success.into())
        }
        DeviceCmd::Invalidate(a) => lifecyclecmd::invalidate(a),
        DeviceCmd::Image(ImageCmd::Inspect(a)) => imagecmd::inspect(a),
        DeviceCmd::Store(c) => crate::storecmd::store(c),
        DeviceCmd::KernelPack(c) => crate::packcmd::kernel_pack(c),
        DeviceCmd::RestoreKernel(c) => crate::restorecmd::restore_kernel(c),
        DeviceCmd::Profile(c) => systemcmd::profile(c),
        DeviceCmd::Memory(c) => systemcmd::memory(c),
        DeviceCmd::Install(a) => systemcmd::install(a),
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
        return Some(bootcmd::resume_cmd(bootcmd::ResumeArgs::from_cmdline()));
    }
    if argv == ["resume", "--from-cmdline", "--before-udev"] {
        return Some(bootcmd::resume_cmd(
            bootcmd::ResumeArgs::from_cmdline_before_udev(),
        ));
    }
    if argv == ["config", "words"] {
        return Some(crate::configcmd::words());
    }
    None
}

/// The exit code for a command's result: 1 with the reason on stderr for an error.
pub fn exit(result: Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("snapboot: {e:#}");
            Exit::Failed.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    type Cli = DeviceCli;

    /// The fast path for `/init`'s call must mean what clap would parse.
    #[test]
    fn the_init_fast_path_means_what_the_command_line_says() {
        let cli = Cli::try_parse_from(["snapboot", "resume", "--from-cmdline"]).unwrap();
        match cli.cmd {
            DeviceCmd::Resume(a) => assert_eq!(a, bootcmd::ResumeArgs::from_cmdline()),
            other => panic!("parsed as {other:?}"),
        }
        let words = ["snapboot", "resume", "--from-cmdline", "--before-udev"];
        match Cli::try_parse_from(words).unwrap().cmd {
            DeviceCmd::Resume(a) => {
                assert_eq!(a, bootcmd::ResumeArgs::from_cmdline_before_udev())
            }
            other => panic!("parsed as {other:?}"),
        }
        let argv: Vec<OsString> = vec!["image".into(), "inspect".into()];
        assert!(
            fast_path(&argv).is_none(),
            "only the boot path is taken early"
        );
    }

    #[test]
    fn capture_takes_a_store_or_the_next_boot_but_not_both() {
        let parse = |w: &[&str]| Cli::try_parse_from(w.iter().copied());
        assert!(
            parse(&["snapboot", "capture"]).is_ok(),
            "the configured store"
        );
        assert!(parse(&["snapboot", "capture", "--next-boot"]).is_ok());
        assert!(parse(&["snapboot", "capture", "--store", "/dev/vdb"]).is_ok());
        let both = ["snapboot", "capture", "--next-boot", "--store", "/dev/vdb"];
        assert!(parse(&both).is_err(), "the capture entry names the store");
        let dir = ["snapboot", "capture", "--boot-directory", "/boot"];
        assert!(parse(&dir).is_err(), "--boot-directory is for --next-boot");
    }
}
