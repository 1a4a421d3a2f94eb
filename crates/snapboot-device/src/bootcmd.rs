//! The boot's commands: `snapboot ready` (the application's ready point), `snapboot capture`
//! and `snapboot resume`. They parse arguments; [`ondevice::boot`] decides and acts.

use anyhow::{Context, Result};
use bootparams::StoreAddress;
use bootparams::{parse_reclaim, parse_size};
use boottrace::{error_chain as chain, Marker};
use clap::{Args, ValueEnum};
use ondevice::boot::{Ready, ResumeRequest};
use ondevice::capture::{capture, CaptureOptions, CaptureOutcome, Then};
use ondevice::guest::print_marker;
use std::path::PathBuf;
use std::process::ExitCode;

/// After the image is written.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ThenArg {
    /// Power off.
    Poweroff,
    /// Thaw and continue running.
    Continue,
}

/// `snapboot capture`.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// The store to write the image to: a device (or file) path, PARTUUID=, PARTLABEL= or
    /// LABEL= (default: the configured one, `store =` in /etc/snapboot/snapboot.conf or
    /// `snapboot.store=` on the kernel command line).
    #[arg(long)]
    store: Option<StoreAddress>,
    /// Capture on the next boot instead of now: the boot loader boots its capture entry
    /// once (GRUB: `next_entry=snapboot-capture` in grubenv, as `grub-reboot` sets it;
    /// U-Boot: `snapboot_once=capture` with `fw_setenv`, or in the `ubootenv` partition),
    /// whose `snapboot.capture` takes the image at the ready point; the boot after it is the
    /// normal one, which restores. Reboot to capture.
    #[arg(long, conflicts_with = "store")]
    next_boot: bool,
    /// With --next-boot: the directory holding GRUB's `grub/grubenv` (default: the first of
    /// /boot/efi, /boot that has one).
    #[arg(long, value_name = "DIR", requires = "next_boot")]
    boot_directory: Option<PathBuf>,
    /// What to do after the image is written.
    #[arg(long, value_enum, default_value = "poweroff")]
    then: ThenArg,
    /// Capture even with writable block-backed filesystems mounted.
    #[arg(long)]
    force: bool,
    /// Keep the page cache (to measure what dropping it saves).
    #[arg(long)]
    keep_caches: bool,
    /// Chunk compression.
    #[arg(long, value_enum, default_value = "lz4")]
    compress: CompressArg,
    /// Lazy image: page user memory out to a swap region in the store first, so the image
    /// holds only what stays resident (max, or how much to page out, e.g. 96M).
    #[arg(long, num_args = 0..=1, default_missing_value = "max", value_name = "HOW_MUCH")]
    lazy: Option<String>,
    #[arg(long, value_name = "SIZE", requires = "lazy", help = swap_size_help())]
    swap_size: Option<String>,
    /// Lazy image without a dm-verity tree: page-ins are not verified.
    #[arg(long, requires = "lazy")]
    no_verity: bool,
    /// Re-capture from a restored lazy system: eager keeps the pages touched since the
    /// restore in the image, prefetch reads them back right after each restore, off ignores
    /// them.
    #[arg(long, value_enum, default_value = "eager", requires = "lazy")]
    profile: ProfileArg,
    /// The image's name.
    #[arg(long, default_value = ondevice::store::DEFAULT_IMAGE)]
    image: String,
    /// Storage dedupe against the store's other images: off, full, selective,
    /// selective:USE or selective:USE:RUN (default: selective:90, which references an old
    /// chunk only when the image uses 90 % of it).
    #[arg(long, value_parser = bootparams::dedupe_value)]
    dedupe: Option<flashstore::Dedupe>,
    /// Pin the image (captures and gc leave it alone until unpinned).
    #[arg(long)]
    pin: bool,
    /// Sign the image with this secret key (`snapboot key gen`); the store must checksum
    /// chunks with BLAKE3 (`snapboot store init --checksum blake3`).
    #[arg(long, value_name = "SECRET_KEY")]
    sign_key: Option<PathBuf>,
    /// Encrypt the image with the device key: `tpm` (a key sealed to the TPM, kept in the
    /// store; `tpm:7+14` also binds it to those SHA-256 PCRs) or `key` (the key file
    /// /etc/snapboot/device.key). The same word as `snapboot.encrypt=`.
    #[arg(long, value_name = "tpm|tpm:PCR+PCR|key", value_parser = parse_encrypt)]
    encrypt: Option<bootparams::Encrypt>,
    /// Every restore of the image prints how long each device's restore took (the kernel's
    /// pm_print_times), for `snapboot analyze`.
    #[arg(long)]
    pm_times: bool,
}

/// `--swap-size`'s help: its default is the setting's (`snapboot.swapsize`), from the table.
fn swap_size_help() -> String {
    format!(
        "Size of the lazy image's swap region (default: {})",
        bootparams::settings::SWAPSIZE_DEFAULT
    )
}

/// What a lazy re-capture does with the pages touched since the restore
/// (`snapboot capture --profile`, `snapboot.profile=`).
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ProfileArg {
    /// Keep them in the image.
    Eager,
    /// Page them out first and read them back right after each restore.
    Prefetch,
    /// Ignore them.
    Off,
}

impl From<ProfileArg> for bootparams::ProfileMode {
    fn from(p: ProfileArg) -> Self {
        match p {
            ProfileArg::Eager => Self::Eager,
            ProfileArg::Prefetch => Self::Prefetch,
            ProfileArg::Off => Self::Off,
        }
    }
}

/// Chunk compression of `snapboot capture --compress`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CompressArg {
    /// LZ4 (a chunk that does not shrink is stored as it is).
    Lz4,
    /// None.
    None,
}

/// `snapboot resume`.
#[derive(Args, Debug, PartialEq)]
pub struct ResumeArgs {
    /// The store holding the image: a device path, PARTUUID=, PARTLABEL= or LABEL=.
    #[arg(long, required_unless_present = "from_cmdline")]
    store: Option<StoreAddress>,
    /// Invalidate the image as it is restored (boot it once).
    #[arg(long)]
    once: bool,
    /// Take the settings from the kernel command line (snapboot.store=, snapboot.once);
    /// does nothing when snapboot.capture is set.
    #[arg(long)]
    from_cmdline: bool,
    /// Run before udev (initramfs-tools' init-top, right after the essential drivers are
    /// loaded): when the store does not appear in time (1 s when the initramfs loaded the
    /// store's drivers, 0.1 s otherwise), or the boot asks for the kernel's own resume or
    /// for `snapboot.afterudev`, exit with status 3 and do nothing, so that the boot script
    /// tries again after udev.
    #[arg(long, requires = "from_cmdline")]
    before_udev: bool,
}

impl ResumeArgs {
    /// The request this command line makes of the device's boot.
    fn request(self) -> ResumeRequest {
        if self.from_cmdline {
            ResumeRequest::FromCmdline {
                before_udev: self.before_udev,
            }
        } else {
            ResumeRequest::Store {
                store: self.store.unwrap_or_else(|| StoreAddress::path("")),
                once: self.once,
            }
        }
    }

    /// `snapboot resume --from-cmdline`, what the board's `/init` runs.
    pub fn from_cmdline() -> Self {
        Self {
            store: None,
            once: false,
            from_cmdline: true,
            before_udev: false,
        }
    }

    /// `snapboot resume --from-cmdline --before-udev`, what initramfs-tools' init-top
    /// script runs.
    pub fn from_cmdline_before_udev() -> Self {
        Self {
            before_udev: true,
            ..Self::from_cmdline()
        }
    }
}

/// The application's ready hook (`snapboot ready`): the device's boot decides and captures
/// ([`ondevice::boot::run_ready`]); prints `restored` on the restored side so the
/// application's script can tell.
pub fn ready() -> Result<ExitCode> {
    match ondevice::boot::run_ready()? {
        Ready::Restored => println!("restored"),
        Ready::Running(Some(generation)) => println!("captured generation {generation}"),
        Ready::Running(None) => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Lazy-capture settings from the `--lazy` and `--swap-size` flags (the same values as
/// `snapboot.lazy` and `snapboot.swapsize`).
fn lazy_options(
    reclaim: &str,
    region: Option<&str>,
    verity: bool,
    profile: ProfileArg,
) -> Result<ondevice::lazy::LazyOptions> {
    let reclaim = parse_reclaim(reclaim)
        .with_context(|| format!("lazy={reclaim}: expected max or a size such as 96M"))?;
    let region_bytes = match region {
        None => None,
        Some(r) => Some(
            parse_size(r)
                .with_context(|| format!("swap size {r}: expected a size such as 512M"))?,
        ),
    };
    Ok(ondevice::lazy::LazyOptions {
        reclaim,
        region_bytes,
        verity,
        profile: profile.into(),
    })
}

fn parse_encrypt(s: &str) -> Result<bootparams::Encrypt, String> {
    bootparams::Encrypt::parse(s).ok_or_else(|| format!("{s}: expected tpm, tpm:PCR+PCR... or key"))
}

fn run_capture(o: &CaptureOptions) -> Result<ExitCode> {
    match capture(o) {
        Ok(CaptureOutcome::Restored(_)) => println!("restored"),
        Ok(CaptureOutcome::Captured(generation)) => println!("captured generation {generation}"),
        Err(e) => {
            print_marker(Marker::CaptureFailed, Some(&chain(&e)));
            return Err(e.into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot capture`.
pub fn capture_cmd(a: CaptureArgs) -> Result<ExitCode> {
    if a.next_boot {
        return next_boot_capture(a.boot_directory.as_deref());
    }
    let store = ondevice::command_store::from_system(a.store)?;
    store.locate()?;
    let mut o = CaptureOptions::new(store.address);
    o.then = match a.then {
        ThenArg::Poweroff => Then::PowerOff,
        ThenArg::Continue => Then::Continue,
    };
    o.force = a.force;
    o.drop_caches = !a.keep_caches;
    o.compression = match a.compress {
        CompressArg::Lz4 => flashstore::Compression::Lz4,
        CompressArg::None => flashstore::Compression::None,
    };
    if let Some(l) = &a.lazy {
        o.lazy = Some(lazy_options(
            l,
            a.swap_size.as_deref(),
            !a.no_verity,
            a.profile,
        )?);
    }
    anyhow::ensure!(
        flashstore::valid_name(&a.image),
        "--image {}: 1 to 64 characters of A-Z a-z 0-9 . _ -",
        a.image
    );
    o.image = a.image;
    o.dedupe = a.dedupe;
    o.pin = a.pin;
    o.sign_key = a.sign_key;
    o.pm_times = a.pm_times;
    if let Some(e) = a.encrypt {
        o.key = ondevice::devicekey::KeyConfig::new(e);
    }
    run_capture(&o)
}

/// `snapboot capture --next-boot`: the boot loader's capture entry, once.
fn next_boot_capture(boot_dir: Option<&std::path::Path>) -> Result<ExitCode> {
    let loader = devinstall::bootloader::Loader::detect(std::path::Path::new("/"), boot_dir)?;
    println!("{}", loader.request_capture()?);
    Ok(ExitCode::SUCCESS)
}

/// `snapboot resume`: returns only when the image was not restored
/// ([`ondevice::boot::run_resume`] says what it does), with its exit status.
pub fn resume_cmd(a: ResumeArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(ondevice::boot::run_resume(a.request())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every `capture` flag that is also a setting states the setting's default, as the
    /// settings table (snapboot.conf(5)) writes it: clap's default value, or the help's
    /// `(default: …)`.
    #[test]
    fn capture_flags_state_the_settings_defaults() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: CaptureArgs,
        }
        let cmd = Cli::command();
        let mut checked = Vec::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let Some(s) = bootparams::settings::setting(&long.replace('-', "")) else {
                continue;
            };
            // A command's store defaults to the configured one, which is the setting.
            if s.is_flag() || long == "store" {
                continue;
            }
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            // The table's default up to its first `;` or parenthesis: the value itself.
            let value = s
                .default
                .split([';', '('])
                .next()
                .unwrap_or_default()
                .trim();
            match arg.get_default_values() {
                [d] => assert_eq!(d.to_str(), Some(value), "--{long}"),
                [] if help.contains("default: ") => assert!(
                    help.contains(&format!("default: {}", s.default))
                        || help.contains(&format!("default: {value},")),
                    "--{long}: {help:?} does not say the table's default {:?}",
                    s.default
                ),
                [] => continue,
                more => panic!("--{long}: defaults {more:?}"),
            }
            checked.push(long);
        }
        checked.sort_unstable();
        assert_eq!(
            checked,
            [
                "compress",
                "dedupe",
                "image",
                "profile",
                "swap-size",
                "then"
            ]
        );
    }
}
