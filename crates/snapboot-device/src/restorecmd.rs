//! `snapboot restore-kernel`: the restore kernel as GRUB's default entry on the device
//! (`devinstall::bootloader::restore_kernel` has the files and their checks). `install` puts the
//! kernel in /boot, writes the image kernel's record and 42_snapboot's, rebuilds the stock
//! kernel's initramfs (which then carries the record), writes that kernel and initramfs as
//! the kernel pack to the pack partition, and runs `update-grub`; `remove` undoes it all but
//! the pack partition.

use anyhow::{Context, Result};
use bootparams::StoreAddress;
use clap::{Args, Subcommand};
use devinstall::bootloader::restore_kernel::{self as rk, Uname};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `snapboot restore-kernel`.
#[derive(Subcommand, Debug)]
pub enum RestoreKernelCmd {
    /// Make the restore kernel KERNEL (a bzImage or arm64 Image whose release ends in
    /// -snapboot-restore) GRUB's default entry: /boot/snapboot-restore-kernel, the records
    /// /etc/snapboot/image-kernel and /etc/snapboot/restore-kernel, the running (stock)
    /// kernel's initramfs rebuilt, its kernel pack written to --pack, then `update-grub`.
    /// Run it on the stock kernel whose images the restore kernel restores, and again after
    /// a kernel update.
    Install(InstallArgs),
    /// Take the restore kernel's entry out: its kernel and records removed, the initramfs
    /// rebuilt, `update-grub`. The pack partition is left as it is.
    Remove,
}

/// `snapboot restore-kernel install`.
#[derive(Args, Debug)]
pub struct InstallArgs {
    /// The restore kernel: a small kernel built from the stock kernel's source to restore
    /// its images (its release ends in -snapboot-restore; docs/real-boards.md, "A restore
    /// kernel on a real board").
    kernel: PathBuf,
    /// The raw partition for the kernel pack, what a refusal boots (cold): a device path,
    /// PARTUUID=, PARTLABEL= or LABEL=; the entry names it by its kernel name.
    #[arg(long)]
    pack: StoreAddress,
}

/// Runs `snapboot restore-kernel`.
pub fn restore_kernel(cmd: RestoreKernelCmd) -> Result<ExitCode> {
    let root = Path::new("/");
    let stock = Uname::running();
    match cmd {
        RestoreKernelCmd::Install(a) => {
            let pack = devsys::locate::resolve(&a.pack, std::time::Duration::ZERO)
                .with_context(|| format!("pack partition {}", a.pack))?;
            let (kernel, initrd) = rk::stock_files(root, &stock)?;
            let w = rk::write_files(root, &a.kernel, &stock, &pack.path)?;
            for p in &w.paths {
                println!("wrote {}", p.display());
            }
            rebuild_initramfs(root, &stock.release)?;
            crate::packcmd::write_pack(&kernel, &initrd, &pack.path)?;
            update_grub()?;
            println!(
                "GRUB's default entry {}: restore kernel {}, refusals boot {} cold from {}",
                rk::ENTRY,
                w.release,
                stock.release,
                pack.path.display()
            );
        }
        RestoreKernelCmd::Remove => {
            for p in rk::remove_files(root)? {
                println!("removed {}", p.display());
            }
            rebuild_initramfs(root, &stock.release)?;
            update_grub()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds the initramfs of kernel `release` with the system's generator.
fn rebuild_initramfs(root: &Path, release: &str) -> Result<()> {
    let g = devinstall::install::system::generator(root)
        .context("no initramfs-tools or dracut: the initramfs cannot carry the record")?;
    run(&g.rebuild_release_command(release))
}

/// `update-grub`, or what to run instead where there is none.
fn update_grub() -> Result<()> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("update-grub").is_file()));
    if found {
        run(&["update-grub".to_string()])
    } else {
        println!("no update-grub: run grub-mkconfig -o GRUB's grub.cfg");
        Ok(())
    }
}

fn run(cmd: &[String]) -> Result<()> {
    println!("running {}", cmd.join(" "));
    let status = std::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .status()
        .with_context(|| format!("cannot run {}", cmd[0]))?;
    anyhow::ensure!(status.success(), "`{}` failed: {status}", cmd.join(" "));
    Ok(())
}
