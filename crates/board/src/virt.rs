//! The arm64 board: QEMU's `virt` machine with a Cortex-A72, powered on into U-Boot (Debian's
//! `u-boot-qemu`) as its firmware, which boots from the partitioned boot disk
//! (`crate::bootdisk`) the label and command line its environment names (`crate::uboot`).
//! The timeline starts at power-on: U-Boot's time, and its reading of the kernel from the
//! disk, are part of every measured boot, as on a device.
//!
//! ```text
//! pflash 0  U-Boot (-bios)          virtio disk 0  boot disk: boot, root, coldkernel
//! pflash 1  U-Boot's environment    virtio disk 1… the run's extra disks (the store)
//! ```

use crate::bootdisk::{self, BootDiskError, BootFiles, PACK_PARTITION};
use crate::run_options::{
    kernel_cmdline, memory_args, virtio_disks, Accel, KernelImage, RunOptions,
};
use crate::uboot::{self, BootLabel, UbootError};
use bundle::bundle::Bundle;
use std::process::Command;

/// The arm64 board's kernel command line: its PL011 console, reboot (and QEMU exit) on
/// panic, timestamps.
pub const BASE_CMDLINE: &str = "console=ttyAMA0,115200 panic=-1 printk.time=1";

/// The CPU QEMU emulates (the i.MX 8M's Cortex-A53 has no QEMU model with the features
/// Debian's kernel wants under TCG; the A72 runs the same arm64 code).
pub const CPU: &str = "cortex-a72";

/// Why the arm64 board could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum VirtError {
    /// The boot disk.
    #[error(transparent)]
    BootDisk(#[from] BootDiskError),
    /// U-Boot or its environment.
    #[error(transparent)]
    Uboot(#[from] UbootError),
    /// The run's own boot disk could not be made.
    #[error("cannot copy the boot disk to {}", .0.display())]
    BootDiskCopy(std::path::PathBuf, #[source] std::io::Error),
    /// The run's scratch directory.
    #[error("cannot make the run's directory: {0}")]
    RunDir(std::io::Error),
}

/// The QEMU command of one run, and the directory holding the run's U-Boot environment
/// (removed when dropped).
pub fn command(
    bundle: &Bundle,
    opts: &RunOptions,
) -> Result<(Command, tempfile::TempDir), VirtError> {
    let (label, restore, restorer) = match &opts.kernel {
        KernelImage::Restore(image) => (BootLabel::Restore, Some(image.as_path()), None),
        KernelImage::Vmlinux | KernelImage::BzImage => (BootLabel::Stock, None, None),
        // The restorer is started by the boot script; its fallback is the stock kernel.
        KernelImage::Restorer { elf } => (BootLabel::Stock, None, Some(elf.as_path())),
    };
    let files = BootFiles {
        kernel: bundle.kernel_image(),
        initrd: bundle.initramfs(),
        root: bundle.rootfs(),
        pack: bundle.kernel_pack(),
    };
    let disk = bootdisk::ensure(&bundle.dir, &files, restore, restorer)?;
    let defaults = uboot::default_env(&bundle::home::home().join("u-boot"))?;
    let cmdline = kernel_cmdline(bundle, opts, BASE_CMDLINE, PACK_PARTITION);
    let mut env = uboot::board_env(&defaults, label, &cmdline)?;
    if restorer.is_some() {
        env.set(uboot::RESTORER_VAR, "yes")
            .map_err(UbootError::from)?;
    }
    let dir = tempfile::Builder::new()
        .prefix("snapboot-arm64-run-")
        .tempdir()
        .map_err(VirtError::RunDir)?;
    let env_flash = dir.path().join("u-boot-env.img");
    uboot::write_flash(&env, &env_flash)?;

    let mut c = Command::new(guestarch::Arch::Arm64.qemu().0);
    let accel = match opts.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    c.args(["-M", "virt", "-accel", accel, "-cpu", CPU]);
    c.args(["-nodefaults", "-no-user-config"]);
    memory_args(&mut c, opts);
    c.args(["-display", "none"]);
    crate::run_options::reboot_args(&mut c, opts);
    let sd = opts.disks.iter().any(|d| d.sd);
    c.arg("-bios").arg(uboot::u_boot_bin(sd)?);
    c.arg("-drive").arg(format!(
        "if=pflash,unit=1,format=raw,file={}",
        env_flash.display()
    ));
    let disk = match &opts.boot_disk {
        Some(own) => {
            if !own.exists() {
                std::fs::copy(&disk, own).map_err(|e| VirtError::BootDiskCopy(own.clone(), e))?;
            }
            own.clone()
        }
        None => disk,
    };
    virtio_disks(&mut c, &disk, opts.boot_disk.is_some(), opts);
    Ok((c, dir))
}
