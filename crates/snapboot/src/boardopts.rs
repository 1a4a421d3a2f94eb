//! The board options every command that powers the board on shares (`board run`, `board
//! capture`, `bench cold`, `bench compare`), and the run options they make.

use anyhow::Result;
use board::run_options::{parse_mem_mib, Disk, KernelImage};
use board::{Accel, RunOptions};
use bundle::Bundle;
use clap::{Args, ValueEnum};
use hostkernel::restore_kernel::{boot_kernel, BootKernel, KernelChoice};
use std::path::PathBuf;
use std::time::Duration;

/// `--firmware`: how the PC loads its kernel.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirmwareArg {
    /// QEMU loads the kernel (PVH vmlinux, or the bzImage).
    Direct,
    /// UEFI firmware (OVMF) boots GRUB from the disk's ESP, GRUB the kernel (debian workload).
    Uefi,
}

/// `--store-on`: the device the store is on.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreOnArg {
    /// A virtio disk (`/dev/vdb`).
    Virtio,
    /// An SD card on an SD host controller (`/dev/mmcblk0`, found by its label), read by
    /// U-Boot's MMC driver: the arm64 board, with `scripts/u-boot-mmc.sh`'s U-Boot.
    Sd,
}

/// Accelerator choice.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum AccelArg {
    Auto,
    Tcg,
    Kvm,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct BoardOpts {
    /// The board a built-in workload name means: x86_64 (the PC) or arm64 (booted by
    /// U-Boot). A bundle directory names its own.
    #[arg(long, default_value = "x86_64", value_parser = arch_parser())]
    arch: guestarch::Arch,
    /// Guest memory, e.g. 512M or 1G (default: the workload's).
    #[arg(long)]
    mem: Option<String>,
    /// Deferred memory: the board's total RAM (e.g. 16G). It boots with --mem; the guest
    /// adds the rest after ready or restored (virtio-mem, `snapboot.defermem`).
    #[arg(long)]
    max_mem: Option<String>,
    /// Virtual CPUs (1 to 64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    smp: u32,
    /// Extra kernel command-line words.
    #[arg(long, allow_hyphen_values = true)]
    cmdline: Vec<String>,
    /// Extra disk image (read-write), attached as /dev/vdb, /dev/vdc, ...
    #[arg(long)]
    disk: Vec<PathBuf>,
    /// Where the store (`--store`) is: a virtio disk, or an SD card (the arm64 board;
    /// the store is made with a label and a power-of-two size, as a card has). Give it on
    /// every boot of the store.
    #[arg(long, value_enum, default_value = "virtio")]
    store_on: StoreOnArg,
    /// A hardware watchdog on the board (QEMU's i6300esb on the PCI bus), and a reset by it
    /// resets the board, which boots again, instead of ending the run. Give it on every
    /// boot of an image (the device is part of the machine); `snapboot.watchdog=S` arms it
    /// across each restore.
    #[arg(long)]
    watchdog: bool,
    /// Accelerator (auto: KVM only with real vmx/svm).
    #[arg(long, value_enum, default_value = "auto")]
    accel: AccelArg,
    /// How the PC loads its kernel: direct (QEMU loads it) or uefi (OVMF, then GRUB from a
    /// GPT disk's ESP, with snapboot's GRUB entries; the debian workload). Give it on every
    /// boot of an image: the firmware is part of the machine the image restores onto.
    #[arg(long, value_enum, default_value = "direct")]
    firmware: FirmwareArg,
    /// Boot the compressed bzImage instead of the uncompressed vmlinux.
    #[arg(long, conflicts_with = "restore_kernel")]
    bzimage: bool,
    /// Boot the restore kernel (`board restore-kernel`) instead of the bundle's kernel, on
    /// every boot (an error when none is built): it restores the bundle kernel's images,
    /// and hands every boot it cannot restore to the bundle's kernel (kexec from the
    /// board's kernel pack), which boots cold. `board run --store` uses it by default.
    #[arg(long)]
    restore_kernel: bool,
    /// Give the board a TPM 2.0 (a software TPM, swtpm) whose state persists in DIR
    /// (created if missing): a key sealed to it in one boot unseals in the next; another
    /// DIR is another TPM. Give it on every boot of an image, capture and restore alike:
    /// the TPM is part of the machine the image restores onto.
    #[arg(long, value_name = "DIR")]
    tpm: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Encrypted images on every boot (`snapboot.encrypt=`): tpm (a key sealed to the
    /// board's TPM, --tpm), tpm:PCR+PCR or key (the bundle's --device-key).
    #[arg(long, value_name = "tpm|tpm:PCR+PCR|key", value_parser = encrypt_parser)]
    encrypt: Option<bootparams::Encrypt>,
}

fn encrypt_parser(s: &str) -> Result<bootparams::Encrypt, String> {
    bootparams::Encrypt::parse(s).ok_or_else(|| format!("{s}: expected tpm, tpm:PCR+PCR... or key"))
}

impl BoardOpts {
    /// The board a built-in workload name means.
    pub(crate) fn arch(&self) -> guestarch::Arch {
        self.arch
    }

    /// `--encrypt`, if given.
    pub(crate) fn encrypt(&self) -> Option<&bootparams::Encrypt> {
        self.encrypt.as_ref()
    }

    /// Whether --mem was given.
    pub(crate) fn mem_given(&self) -> bool {
        self.mem.is_some()
    }

    /// The kernel these flags ask for; `stock_kernel` is `board run --stock-kernel`.
    pub(crate) fn kernel_choice(&self, stock_kernel: bool) -> KernelChoice {
        if self.restore_kernel {
            KernelChoice::Restore
        } else if stock_kernel || self.bzimage {
            KernelChoice::Stock
        } else {
            KernelChoice::Default
        }
    }

    /// Run options for a boot that is not a snapshot boot (cold, capture, benchmarks): the
    /// stock kernel unless --restore-kernel.
    pub(crate) fn to_run_options(&self, bundle: &Bundle) -> Result<RunOptions> {
        let (o, _) = self.to_run_options_for(bundle, self.kernel_choice(false), false)?;
        Ok(o)
    }

    /// Run options for a boot with the kernel `choice`, a snapshot boot or not
    /// ([`boot_kernel`]), and the kernel picked.
    pub(crate) fn to_run_options_for(
        &self,
        bundle: &Bundle,
        choice: KernelChoice,
        snapshot_boot: bool,
    ) -> Result<(RunOptions, BootKernel)> {
        let mut o = RunOptions::for_bundle(bundle);
        if let Some(m) = &self.mem {
            o.mem_mib = parse_mem_mib(m)?;
        }
        if let Some(m) = &self.max_mem {
            let max = parse_mem_mib(m)?;
            board::run_options::check_max_mem(o.mem_mib, max)?;
            o.max_mem_mib = Some(max);
        }
        o.smp = self.smp;
        o.cmdline = self.cmdline.clone();
        o.disks = self
            .disk
            .iter()
            .map(|p| Disk {
                path: p.clone(),
                readonly: false,
                sd: false,
            })
            .collect();
        o.tpm = self.tpm.clone();
        o.store_on_sd = self.store_on == StoreOnArg::Sd;
        o.watchdog = self.watchdog;
        match self.accel {
            AccelArg::Auto => {}
            AccelArg::Tcg => o.accel = Accel::Tcg,
            AccelArg::Kvm => o.accel = Accel::Kvm,
        }
        if self.bzimage {
            o.kernel = KernelImage::BzImage;
        }
        if self.firmware == FirmwareArg::Uefi {
            o.firmware = board::run_options::Firmware::Uefi;
        }
        let release = &bundle.kernel.release;
        // On the UEFI PC the restore kernel is GRUB's restore-kernel entry (crate board's
        // uefi module), the default as on the PVH board.
        let kernel = boot_kernel(choice, snapshot_boot, release, || {
            hostkernel::restore_kernel::cached(
                &bundle::home::restore_kernel_cache(),
                &bundle.kernel,
            )
        })?;
        if let BootKernel::Restore { vmlinux, .. } = &kernel {
            o.kernel = KernelImage::Restore(vmlinux.clone());
        }
        o.timeout = Duration::from_secs(self.timeout);
        if let Some(e) = &self.encrypt {
            o.params.encrypt = e.clone();
        }
        Ok((o, kernel))
    }
}

/// `--arch`: the board's architectures, listed by clap.
pub fn arch_parser() -> impl clap::builder::TypedValueParser<Value = guestarch::Arch> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(guestarch::Arch::ALL.map(guestarch::Arch::name))
        .try_map(|s| s.parse::<guestarch::Arch>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        board: BoardOpts,
    }

    fn choice(args: &[&str], stock_kernel: bool) -> KernelChoice {
        let cmd = Cmd::try_parse_from(std::iter::once("run").chain(args.iter().copied()));
        cmd.unwrap().board.kernel_choice(stock_kernel)
    }

    #[test]
    fn the_flags_name_the_kernel_and_nothing_means_the_default() {
        assert_eq!(choice(&[], false), KernelChoice::Default);
        assert_eq!(choice(&[], true), KernelChoice::Stock);
        assert_eq!(choice(&["--bzimage"], false), KernelChoice::Stock);
        assert_eq!(choice(&["--restore-kernel"], false), KernelChoice::Restore);
        assert!(Cmd::try_parse_from(["run", "--bzimage", "--restore-kernel"]).is_err());
    }

    #[test]
    fn tpm_names_the_state_directory_and_is_off_without_it() {
        let b = |args: &[&str]| {
            Cmd::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
                .unwrap()
                .board
        };
        assert_eq!(b(&["--tpm", "t/a"]).tpm, Some(PathBuf::from("t/a")));
        assert_eq!(b(&[]).tpm, None);
        assert!(
            Cmd::try_parse_from(["run", "--tpm"]).is_err(),
            "DIR is required"
        );
    }
}
