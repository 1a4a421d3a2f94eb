//! Booting the restorer (crates/restorer) to restore the image of a store: the one place
//! that turns a snapshot boot's options into a restorer boot's. The board stays the one the
//! image was captured on: the store attached as for any snapshot boot (the same disks, so
//! the same devices and firmware memory map; the command line of a restore kernel's boot),
//! and the firmware starts the restorer's ELF through its PVH entry in place of a kernel,
//! with no initramfs. The restorer reads the image from the store on the board's disks
//! itself, and boots the stock kernel from the kernel pack when it refuses. On the UEFI PC
//! (`--firmware uefi`) the restorer is the EFI application instead, on the ESP, which GRUB's
//! default entry chainloads (`crate::uefi`); a refusal returns to GRUB, which boots the
//! stock kernel's entry.

use std::path::Path;
use thiserror::Error;

use crate::capture::{attach_store, CaptureBootError};
use crate::run_options::{KernelImage, RunOptions};
use bundle::bundle::Bundle;
use guestarch::Arch;

/// Why a restorer boot could not be set up.
#[derive(Debug, Error)]
pub enum RestorerBootError {
    /// The board cannot start the restorer (see [`unsupported`]).
    #[error("{0}")]
    Unsupported(&'static str),
    /// The store could not be attached.
    #[error(transparent)]
    Store(#[from] CaptureBootError),
}

/// Why the bundle's board cannot start the restorer, or `None` when it can: it enters
/// x86_64 kernels, through the PC's PVH entry (QEMU's direct kernel load) or as an EFI
/// application GRUB chainloads, and arm64 kernels as an EFI application U-Boot's `bootefi`
/// starts from the boot script (`crate::bootdisk`).
pub fn unsupported(bundle: &Bundle) -> Option<&'static str> {
    match bundle.kernel.arch {
        Arch::X86_64 | Arch::Arm64 => None,
    }
}

/// The options that boot the restorer `elf` (the EFI application with `--firmware uefi`) to restore an image of `store` (the one the
/// restorer chooses, as resume does), from a snapshot boot's `opts` on the bundle's board:
/// ready to power on as often as wanted.
pub fn restorer_options(
    bundle: &Bundle,
    opts: &RunOptions,
    elf: &Path,
    store: &Path,
) -> Result<RunOptions, RestorerBootError> {
    if let Some(why) = unsupported(bundle) {
        return Err(RestorerBootError::Unsupported(why));
    }
    let mut o = opts.clone();
    attach_store(&mut o, store, false)?;
    o.kernel = KernelImage::Restorer {
        elf: elf.to_path_buf(),
    };
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::qemu_command;
    use crate::run_options::Firmware;

    fn args(c: &std::process::Command) -> Vec<String> {
        c.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// A restorer boot is the snapshot boot's board with the restorer in place of the
    /// kernel and no initramfs: the store is `/dev/vdb` and the disks are the same as for
    /// the stock kernel's restore, and the command line is the stock restore's with the
    /// kernel pack named for the fallback's cold boot.
    #[test]
    fn a_restorer_boot_is_the_snapshot_boot_s_board_with_the_restorer_as_kernel() {
        let b = crate::testutil::bundle();
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("shell.store");
        std::fs::write(&store, b"").unwrap();
        let stock = {
            let mut o = crate::testutil::opts();
            attach_store(&mut o, &store, false).unwrap();
            o
        };
        let o = restorer_options(
            &b,
            &crate::testutil::opts(),
            Path::new("/r/restorer"),
            &store,
        )
        .unwrap();
        let (a, s) = (args(&qemu_command(&b, &o)), args(&qemu_command(&b, &stock)));
        let after =
            |a: &[String], flag: &str| a[a.iter().position(|x| x == flag).unwrap() + 1].clone();
        assert_eq!(after(&a, "-kernel"), "/r/restorer");
        assert!(!a.iter().any(|x| x == "-initrd"), "{a:?}");
        let drives = |a: &[String]| -> Vec<String> {
            a.iter()
                .filter(|x| x.starts_with("file="))
                .cloned()
                .collect()
        };
        assert_eq!(drives(&a), drives(&s));
        assert!(
            drives(&a).iter().any(|d| d.contains("shell.store")),
            "{a:?}"
        );
        let stock_words: Vec<String> = after(&s, "-append").split(' ').map(String::from).collect();
        let words: Vec<String> = after(&a, "-append").split(' ').map(String::from).collect();
        let extra: Vec<&String> = words.iter().filter(|w| !stock_words.contains(w)).collect();
        assert!(stock_words.iter().all(|w| words.contains(w)), "{words:?}");
        assert!(
            extra.len() == 1 && extra[0].starts_with("snapboot.coldkernel=/dev/vd"),
            "{extra:?}"
        );
    }

    /// The restorer still prints every line the host reads its phases from
    /// ([`boottrace::RestorerLine`]): it cannot share the host's definition (`no_std`, its
    /// own workspace), so its source is read here.
    #[test]
    fn the_restorer_prints_every_line_the_host_reads() {
        use boottrace::RestorerLine;
        fn sources(dir: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    sources(&path, out);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    out.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        let mut texts = Vec::new();
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../restorer/src"),
            &mut texts,
        );
        let printed: Vec<RestorerLine> = texts
            .iter()
            .flat_map(|t| t.lines())
            .filter_map(|l| RestorerLine::parse(l).map(|(k, _)| k))
            .collect();
        for want in RestorerLine::ALL {
            assert!(
                printed.contains(&want),
                "crates/restorer/src prints no `{want}` line"
            );
        }
    }

    /// Every board starts it: the UEFI PC the EFI application from its disk, the arm64
    /// board the arm64 EFI application its boot script starts (with the store attached as
    /// for any snapshot boot).
    #[test]
    fn the_pc_under_uefi_and_the_arm64_board_start_their_restorers() {
        let b = crate::testutil::bundle();
        let mut o = crate::testutil::opts();
        assert_eq!(unsupported(&b), None);
        o.firmware = Firmware::Uefi;
        assert_eq!(unsupported(&b), None);
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("pc.img");
        std::fs::write(&disk, b"").unwrap();
        let u = restorer_options(&b, &o, Path::new("/r/restorer.efi"), &disk).unwrap();
        assert_eq!(u.boot_disk.as_deref(), Some(disk.as_path()));
        assert!(matches!(u.kernel, KernelImage::Restorer { .. }));
        let mut arm = crate::testutil::bundle();
        arm.kernel.arch = Arch::Arm64;
        assert_eq!(unsupported(&arm), None);
        let store = dir.path().join("shell-arm64.store");
        std::fs::write(&store, b"").unwrap();
        let a = restorer_options(
            &arm,
            &crate::testutil::opts(),
            Path::new("/r/restorer-arm64.efi"),
            &store,
        )
        .unwrap();
        assert!(
            matches!(&a.kernel, KernelImage::Restorer { elf } if elf == Path::new("/r/restorer-arm64.efi"))
        );
        assert!(a.disks.iter().any(|d| d.path == store), "{:?}", a.disks);
        // A Debian root's initramfs (initramfs-tools or dracut, zstd) is read as the kernel
        // unpacks it (crate initramfs): the restorer restores those roots too.
        let mut deb = crate::testutil::bundle();
        deb.workload.init = bundle::workload::InitKind::DebianDracut;
        assert_eq!(unsupported(&deb), None);
    }
}
