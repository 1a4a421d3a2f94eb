//! The x86_64 PC powered on into UEFI firmware (Debian's OVMF), which boots GRUB from the
//! EFI system partition of a GPT disk; GRUB boots the `debian` workload's kernel with the
//! entries snapboot ships (`guest/grub/42_snapboot`). The timeline starts at power-on, so the
//! firmware's and GRUB's time are part of every measured boot, as on a PC.
//!
//! ```text
//! pflash 0  OVMF_CODE_4M.fd (read-only)  virtio disk 0 (vda, read-write):
//! pflash 1  the bundle's copy of          GPT | 1 esp (FAT)                 | 2 root   | 3 snapboot-pack | 4 snapstore |
//!           OVMF_VARS_4M.fd                   |  EFI/BOOT/BOOTX64.EFI GRUB  | squashfs |  (raw) the      | the store   |
//!                                             |  vmlinuz  initrd.img        |          |  kernel pack    | (3 x RAM)   |
//!                                             |  grub/grub.cfg grub/grubenv |          |                 |             |
//!                                             |  snapboot-restore-kernel    |          |                 |             |
//!                                             |  bundle.id                  |          |                 |             |
//!                                        an A/B disk ([`ensure_ab_disk`]) goes on after partition 4:
//!                                             | 5 root-b            | 6 rauc-update (FAT32) |
//!                                             |  slot B's root: zero |  update.raucb: the    |
//!                                             |  until RAUC installs |  RAUC bundle          |
//!                                             |  an update into it   |  (`crate::rauc`)      |
//!                                        virtio disk 1… the run's extra disks
//! ```
//!
//! The variable store (`uefi-vars.fd` in the bundle) is made once, by a first boot of the
//! firmware into GRUB (`settle_vars`): OVMF's first boot on an empty store hands the kernel
//! another EFI runtime map than the boots after it, and no capture may be on that boot.
//!
//! GRUB is `\EFI\BOOT\BOOTX64.EFI`, the removable-media path the firmware boots without a boot
//! entry in its variables; its prefix is the ESP's `/grub`, where `grubenv` is writable (the
//! root is a read-only squashfs). Each run writes only `grub.cfg`: the header a Debian
//! grub.cfg has (load `grubenv`, boot `next_entry` once), then what `42_snapboot` writes for
//! the run's command line: the normal entry and the capture entry. A capture run
//! (`snapboot.capture` in its words) boots the capture entry through `next_entry`, as
//! `snapboot capture --next-boot` on the device does. A run on the restore kernel is what a
//! device has after `snapboot restore-kernel install` (which cannot run on the read-only
//! root): the restore kernel on the ESP, the stock kernel's pack in partition 3 (the bundle's
//! `coldkernel.pack`, written with the disk), and 42_snapboot's restore-kernel entry, the
//! default.
//!
//! The store is the disk's fourth partition, named [`STORE_NAME`], as on a PC with one disk;
//! the `debian` root's `/etc/snapboot/snapboot.conf` names it (`store = PARTLABEL=snapstore`),
//! so no kernel word does. A run with a store (`--store DISK`) boots DISK, the PC's whole
//! disk, made on the first capture from the bundle's disk (ESP and root, built once per
//! bundle and rebuilt when its kernel, initramfs or root is newer) with an empty store in
//! partition 4. The ESP's `bundle.id` says which build of the bundle a disk carries: a
//! capture onto an older one makes it anew (a new installation), a snapshot boot refuses it.
//! A run without a store boots the bundle's disk, which has no store partition.
//!
//! An A/B disk ([`ensure_ab_disk`]) is a store disk with two partitions more, for RAUC
//! (`crate::rauc`): slot B's root ([`ROOT_B_NAME`], [`ROOT_B_PARTITION`]; slot A's is
//! partition 2) and the update's ([`UPDATE_NAME`]). A run on it writes RAUC's slot selection
//! as grub.cfg ([`grub_cfg_ab`]): GRUB picks the slot from `ORDER`, `A_OK`/`A_TRY`,
//! `B_OK`/`B_TRY` in the grubenv, which RAUC's grub backend edits in the running root. Its
//! images are the re-captures of each slot's cold boot, named by the slot's entry; a capture
//! run, the restore kernel and the EFI restorer are refused there ([`AbRefusal`]).
//!
//! The files are put on the FAT partitions with mtools (`mcopy -i disk@@offset`): no mounts.

use crate::partdisk::{format_store_in, gpt_disk, DiskError, GptPartition, Placed};
pub use crate::rauc::grub_cfg_ab;
use crate::run_options::{kernel_cmdline, virtio_disks, KernelImage, RunOptions};
use bundle::bundle::Bundle;
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's OVMF: the firmware's code (package `ovmf`).
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
/// Debian's OVMF: the firmware's variables as shipped, copied once per bundle.
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// GRUB's EFI modules (package `grub-efi-amd64-bin`).
pub const GRUB_EFI_MODULES: &str = "/usr/lib/grub/x86_64-efi";
/// The root partition as the kernel sees it.
pub const ROOT_PARTITION: &str = "/dev/vda2";
/// The ESP's partition name (`PARTLABEL=`).
pub const ESP_NAME: &str = "esp";
/// The ESP's size: fixed, so the root partition starts at the same sector whatever the
/// kernel's size (an image restores only onto the partitions it was captured with).
pub const ESP_BYTES: u64 = 64 << 20;
/// The ESP starts at 1 MiB (`crate::partdisk`).
const ESP_OFFSET: u64 = 1 << 20;
/// The store partition's name (`PARTLABEL=`), which the root's config file names.
pub const STORE_NAME: &str = "snapstore";
/// The store's own label on a disk this board makes.
const STORE_LABEL: &str = "uefi-pc";
/// The ESP's file naming the build of the bundle a disk was made from.
const BUNDLE_ID: &str = "::/bundle.id";
/// GPT's type of an EFI system partition.
const ESP_TYPE: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
/// The modules built into GRUB's image: it reads the ESP, its environment and grub.cfg,
/// boots Linux through the EFI handover and chainloads the EFI restorer. Part of the
/// bundle's build id: another list makes the disk anew.
const GRUB_MODULES: &[&str] = &[
    "part_gpt",
    "fat",
    "normal",
    "configfile",
    "linux",
    "chain",
    "loadenv",
    "echo",
    "test",
];
/// The kernel pack's partition as the restore kernel sees it (`snapboot.coldkernel=`).
pub const PACK_PARTITION: &str = "/dev/vda3";
/// The kernel pack partition's name.
pub const PACK_NAME: &str = "snapboot-pack";
/// The kernel pack's partition as the EFI restorer finds it (`snapboot.coldkernel=`).
pub const PACK_ADDRESS: &str = "PARTLABEL=snapboot-pack";
/// The EFI restorer's directory on the ESP.
pub const RESTORER_DIR_ON_ESP: &str = "::/EFI/snapboot";
/// The EFI restorer on the ESP, as GRUB sees it.
pub const RESTORER_ON_ESP: &str = "/EFI/snapboot/restorer.efi";
/// The restore kernel on the ESP, as GRUB sees it.
pub const RESTORE_KERNEL_ON_ESP: &str = "/snapboot-restore-kernel";
/// The restore kernel's entry id (42_snapboot writes it, the default).
pub const RESTORE_ENTRY: &str = devinstall::bootloader::restore_kernel::ENTRY;
/// The normal entry's id (`42_snapboot` on a board).
pub const NORMAL_ENTRY: &str = "snapboot";
/// The capture entry's id.
pub const CAPTURE_ENTRY: &str = "snapboot-capture";
/// GRUB's entries as shipped (installed by `snapboot install` as /etc/grub.d/42_snapboot).
pub const GRUB_SNIPPET: &str = include_str!("../../../guest/grub/42_snapboot");
/// GRUB's environment on the ESP (`load_env`, `save_env`; RAUC's `grubenv=`).
const GRUBENV: &str = "::/grub/grubenv";
/// The run's grub.cfg on the ESP.
const GRUB_CFG: &str = "::/grub/grub.cfg";
/// Slot B's root partition's name on an A/B disk: its presence makes a disk A/B.
pub const ROOT_B_NAME: &str = "root-b";
/// Slot B's root partition as the kernel sees it (slot A's is [`ROOT_PARTITION`]).
pub const ROOT_B_PARTITION: &str = crate::rauc::SLOTS[1].root;
/// The name of an A/B disk's partition holding the RAUC bundle (FAT32, [`UPDATE_FILE`]).
pub const UPDATE_NAME: &str = "rauc-update";
/// The RAUC bundle on the update partition.
pub const UPDATE_FILE: &str = "::/update.raucb";
/// The grubenv an A/B disk starts with: slot A first and good, slot B never booted.
pub const AB_GRUBENV: [&str; 5] = ["ORDER=A B", "A_OK=1", "A_TRY=0", "B_OK=0", "B_TRY=0"];
const MIB: u64 = 1 << 20;

/// Why the UEFI board could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum UefiError {
    /// Only the Debian workloads name their root on the command line.
    #[error(
        "--firmware uefi boots the Debian workloads only (debian, debian-dracut, \
         debian-dracut-systemd, debian-overlayroot; workload {0}: its /init expects the root at /dev/vda)"
    )]
    Workload(String),
    /// A file of the firmware or of GRUB is missing.
    #[error("{} not found (package {package}; `make deps`)", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A snapshot boot of a disk that carries an older build of the bundle.
    #[error(
        "{} carries another build of the bundle ({have}; the bundle is {want}): capture \
         onto it again, which makes it anew",
        disk.display()
    )]
    StaleDisk {
        /// The PC's disk.
        disk: PathBuf,
        /// The build it carries.
        have: String,
        /// The bundle's.
        want: String,
    },
    /// The disk has no partition of that name (the store's, slot B's, the update's).
    #[error("{} has no partition named {name}: {reason}", disk.display())]
    NoPartition {
        /// The PC's disk.
        disk: PathBuf,
        /// The partition's name.
        name: String,
        /// What its table says.
        reason: String,
    },
    /// A run an A/B disk does not take.
    #[error("{} is an A/B disk (it has a partition named {ROOT_B_NAME}): {refusal}", disk.display())]
    AbRun {
        /// The PC's disk.
        disk: PathBuf,
        /// Why not.
        refusal: AbRefusal,
    },
    /// The restore kernel's build kept no bzImage (GRUB boots that, not the vmlinux).
    #[error(
        "{}: no bzImage beside the restore kernel (`snapboot board restore-kernel` builds it)",
        .0.display()
    )]
    NoRestoreBzImage(PathBuf),
    /// A host tool failed.
    #[error("`{cmd}` failed: {reason}")]
    Tool {
        /// The command line.
        cmd: String,
        /// Its status and error output.
        reason: String,
    },
    /// The partition table.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// Reading or writing a file.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Why a run does not boot an A/B disk ([`UefiError::AbRun`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AbRefusal {
    /// The restore kernel: out of scope on A/B (its entry is not in RAUC's slot selection).
    #[error(
        "its grub.cfg is RAUC's slot selection, which boots each slot's stock kernel: \
         the restore kernel is not supported there"
    )]
    RestoreKernel,
    /// The EFI restorer: likewise.
    #[error(
        "its grub.cfg is RAUC's slot selection, which boots each slot's stock kernel: \
         the EFI restorer is not supported there"
    )]
    Restorer,
    /// A capture run: a slot's image is the re-capture of its cold boot.
    #[error(
        "a capture run has no capture entry there: each slot's image is the re-capture of \
         its cold boot (recapture on, the run without `{capture}`)",
        capture = bootparams::key::CAPTURE
    )]
    Capture,
    /// The disk carries another build of the bundle.
    #[error(
        "it carries another build of the bundle ({have}; the bundle is {want}): make it \
         again (`ensure_ab_disk`)"
    )]
    Stale {
        /// The build it carries.
        have: String,
        /// The bundle's.
        want: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> UefiError + '_ {
    move |source| UefiError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs a host tool; a failure carries its status and error output.
fn tool(cmd: &mut Command) -> Result<Vec<u8>, UefiError> {
    hostcmd::output(cmd).map_err(|f| UefiError::Tool {
        cmd: f.cmd,
        reason: f.reason,
    })
}

/// An mtools command on the FAT filesystem at byte `offset` of `disk` (`-i disk@@offset`).
fn mtools_at(program: &str, disk: &Path, offset: u64) -> Command {
    let mut c = Command::new(program);
    c.env("MTOOLS_SKIP_CHECK", "1")
        .arg("-i")
        .arg(format!("{}@@{offset}", disk.display()));
    c
}

/// An mtools command on the ESP inside `disk`.
fn mtools(program: &str, disk: &Path) -> Command {
    mtools_at(program, disk, ESP_OFFSET)
}

/// Copies `src` to `dest` (`::/path`) on the FAT filesystem at byte `offset` of `disk`,
/// replacing it.
fn put_at(disk: &Path, offset: u64, src: &Path, dest: &str) -> Result<(), UefiError> {
    tool(
        mtools_at("mcopy", disk, offset)
            .arg("-o")
            .arg(src)
            .arg(dest),
    )
    .map(|_| ())
}

/// Copies `src` to `dest` (`::/path`) on the ESP of `disk`, replacing it.
fn put(disk: &Path, src: &Path, dest: &str) -> Result<(), UefiError> {
    put_at(disk, ESP_OFFSET, src, dest)
}

/// Makes the FAT32 filesystem image `path` of `bytes` (whole KiB) labelled `label`.
fn fat_image(path: &Path, label: &str, bytes: u64) -> Result<(), UefiError> {
    tool(
        Command::new("mkfs.vfat")
            .args(["-F", "32", "-n", label, "-C"])
            .arg(path)
            .arg((bytes / 1024).to_string()),
    )
    .map(|_| ())
}

fn need(path: &str, package: &'static str) -> Result<(), UefiError> {
    if Path::new(path).exists() {
        Ok(())
    } else {
        Err(UefiError::Missing {
            path: path.into(),
            package,
        })
    }
}

/// Which build of the bundle a disk carries (`bundle.id` on the ESP): a BLAKE3 of the
/// kernel, the initramfs, the root and the kernel pack, so a rebuild that writes the same files again keeps
/// the disks made from them.
fn bundle_id(bundle: &Bundle) -> Result<String, UefiError> {
    let mut h = blake3::Hasher::new();
    for p in [
        bundle.bzimage(),
        bundle.initramfs(),
        bundle.rootfs(),
        bundle.kernel_pack(),
    ] {
        let mut f = fs::File::open(&p).map_err(io(&p))?;
        std::io::copy(&mut f, &mut h).map_err(io(&p))?;
    }
    h.update(GRUB_MODULES.join(" ").as_bytes());
    Ok(format!("blake3:{}", &h.finalize().to_hex()[..32]))
}

/// The build of the bundle the disk `disk` carries (its ESP's `bundle.id`), or why none.
fn carried_id(disk: &Path) -> String {
    tool(mtools("mtype", disk).arg(BUNDLE_ID))
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_else(|e| format!("unreadable: {e}"))
}

/// The bundle's UEFI disk (ESP and root), built unless one of the bundle's build is there.
pub fn ensure_disk(bundle: &Bundle) -> Result<PathBuf, UefiError> {
    Ok(bundle_disk(bundle)?.0)
}

/// [`ensure_disk`], and the bundle's build it carries.
fn bundle_disk(bundle: &Bundle) -> Result<(PathBuf, String), UefiError> {
    let disk = bundle.dir.join("uefi-disk.img");
    let build = bundle_id(bundle)?;
    if disk.is_file() && carried_id(&disk) == build {
        return Ok((disk, build));
    }
    need(GRUB_EFI_MODULES, "grub-efi-amd64-bin")?;
    let work = tempfile::Builder::new()
        .prefix("snapboot-uefi-")
        .tempdir_in(&bundle.dir)
        .map_err(io(&bundle.dir))?;
    let w = work.path();
    let grub = w.join("BOOTX64.EFI");
    tool(
        Command::new("grub-mkimage")
            .args([
                "-O",
                "x86_64-efi",
                "-p",
                "/grub",
                "-d",
                GRUB_EFI_MODULES,
                "-o",
            ])
            .arg(&grub)
            .args(GRUB_MODULES),
    )?;
    let env = w.join("grubenv");
    tool(Command::new("grub-editenv").arg(&env).arg("create"))?;
    let id = w.join("bundle.id");
    fs::write(&id, &build).map_err(io(&id))?;

    let bytes = |p: &Path| fs::metadata(p).map(|m| m.len()).map_err(io(p));
    let root_bytes = bytes(&bundle.rootfs())?;
    let pack_bytes = bytes(&bundle.kernel_pack())?;
    let tmp = bundle.dir.join("uefi-disk.img.tmp");
    let placed = pc_disk(&tmp, root_bytes, pack_bytes, &[])?;
    let esp = w.join("esp.img");
    fat_image(&esp, "ESP", ESP_BYTES)?;
    for (src, at) in [
        (&esp, &placed[0]),
        (&bundle.rootfs(), &placed[1]),
        (&bundle.kernel_pack(), &placed[2]),
    ] {
        let mut from = fs::File::open(src).map_err(io(src))?;
        copy_into(&mut from, src, &tmp, at.offset)?;
    }
    tool(mtools("mmd", &tmp).args(["::/EFI", "::/EFI/BOOT", "::/grub"]))?;
    put(&tmp, &grub, "::/EFI/BOOT/BOOTX64.EFI")?;
    put(&tmp, &bundle.bzimage(), "::/vmlinuz")?;
    put(&tmp, &bundle.initramfs(), "::/initrd.img")?;
    put(&tmp, &env, GRUBENV)?;
    put(&tmp, &id, BUNDLE_ID)?;
    fs::rename(&tmp, &disk).map_err(io(&disk))?;
    Ok((disk, build))
}

/// Writes the PC's partition table at `path`: the ESP, the root of `root_bytes`, the kernel
/// pack's partition of `pack_bytes`, then `more` (the store; on an A/B disk slot B's root and
/// the update after it). The same sizes place the partitions at the same sectors, so the
/// bundle's disk and every store disk made from it agree on the first three.
fn pc_disk(
    path: &Path,
    root_bytes: u64,
    pack_bytes: u64,
    more: &[GptPartition],
) -> Result<Vec<Placed>, UefiError> {
    let mut parts = vec![
        GptPartition {
            name: ESP_NAME.into(),
            uuid: "0e5f1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b".into(),
            bytes: ESP_BYTES,
        },
        GptPartition {
            name: "root".into(),
            uuid: "7a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d".into(),
            bytes: root_bytes,
        },
        GptPartition {
            name: PACK_NAME.into(),
            uuid: "3c5e7a9b-1d2f-4e6a-8b0c-9d1e2f3a4b5c".into(),
            bytes: pack_bytes,
        },
    ];
    parts.extend_from_slice(more);
    let placed = gpt_disk(path, &parts)?;
    tool(
        Command::new("sfdisk")
            .args(["--quiet", "--part-type"])
            .arg(path)
            .args(["1", ESP_TYPE]),
    )?;
    Ok(placed)
}

/// `path` with `.tmp` after its name: where a disk is made before it replaces `path`.
fn tmp_beside(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Makes the PC's disk with its store at `path` (replacing any file there): the ESP of the
/// bundle's disk `template`, the bundle's root and kernel pack, an empty store of
/// `store_bytes` in partition 4, then the partitions `more`, left zero. Where each
/// partition is.
fn write_store_disk(
    bundle: &Bundle,
    template: &Path,
    path: &Path,
    store_bytes: u64,
    more: &[GptPartition],
) -> Result<Vec<Placed>, UefiError> {
    let root = bundle.rootfs();
    let root_bytes = fs::metadata(&root).map_err(io(&root))?.len();
    let pack = bundle.kernel_pack();
    let pack_bytes = fs::metadata(&pack).map_err(io(&pack))?.len();
    let mut after_pack = vec![GptPartition {
        name: STORE_NAME.into(),
        uuid: "3f9c2e4a-8b1d-4c6e-a5f7-2d8e9b0c1a3f".into(),
        bytes: store_bytes,
    }];
    after_pack.extend_from_slice(more);
    let placed = pc_disk(path, root_bytes, pack_bytes, &after_pack)?;
    let mut esp = fs::File::open(template).map_err(io(template))?;
    esp.seek(SeekFrom::Start(ESP_OFFSET))
        .map_err(io(template))?;
    copy_into(&mut esp.take(ESP_BYTES), template, path, placed[0].offset)?;
    for (src, at) in [(&root, &placed[1]), (&pack, &placed[2])] {
        let mut from = fs::File::open(src).map_err(io(src))?;
        copy_into(&mut from, src, path, at.offset)?;
    }
    format_store_in(path, &placed[3], STORE_LABEL)?;
    Ok(placed)
}

/// The PC's disk with its store at `disk` for a run of `bundle`: kept when it carries the
/// bundle's build; made anew from the bundle's disk (its ESP and root copied, an empty
/// store of `store_bytes` in partition 4) when it is missing, or for a capture when it
/// carries another build; refused for a snapshot boot then.
pub fn ensure_store_disk(
    bundle: &Bundle,
    disk: &Path,
    capture: bool,
    store_bytes: u64,
) -> Result<(), UefiError> {
    let (template, want) = bundle_disk(bundle)?;
    if disk.exists() {
        let have = carried_id(disk);
        if have == want {
            return Ok(());
        }
        if !capture {
            return Err(UefiError::StaleDisk {
                disk: disk.to_path_buf(),
                have,
                want,
            });
        }
    }
    let tmp = tmp_beside(disk);
    write_store_disk(bundle, &template, &tmp, store_bytes, &[])?;
    fs::rename(&tmp, disk).map_err(io(disk))
}

/// Bytes of slot B's root partition for a root of `root_bytes`: room for an update's larger
/// root, a quarter more and at least 32 MiB more, in whole MiB.
pub fn root_b_bytes(root_bytes: u64) -> u64 {
    (root_bytes + (root_bytes / 4).max(32 * MIB)).div_ceil(MIB) * MIB
}

/// Bytes of the update partition for a RAUC bundle of `update_bytes`: the bundle and 16 MiB
/// for the filesystem, at least 64 MiB, in whole MiB.
pub fn update_partition_bytes(update_bytes: u64) -> u64 {
    (update_bytes + 16 * MIB).max(64 * MIB).div_ceil(MIB) * MIB
}

/// Makes the A/B PC's disk at `disk` for RAUC, always anew: the store disk a capture makes
/// ([`ensure_store_disk`]: the same partitions 1 to 4 at the same sectors, the store empty,
/// sized for the bundle's RAM), then slot B's root ([`ROOT_B_NAME`], zero, sized by
/// [`root_b_bytes`]) and the update partition ([`UPDATE_NAME`]: FAT32 holding `update`, the
/// RAUC bundle, as [`UPDATE_FILE`]). Its grubenv has RAUC's variables ([`AB_GRUBENV`]).
pub fn ensure_ab_disk(bundle: &Bundle, disk: &Path, update: &Path) -> Result<(), UefiError> {
    let (template, _) = bundle_disk(bundle)?;
    let bytes = |p: &Path| fs::metadata(p).map(|m| m.len()).map_err(io(p));
    let root_b = GptPartition {
        name: ROOT_B_NAME.into(),
        uuid: "9d4e6f8a-2b3c-4d5e-8f6a-1b2c3d4e5f6a".into(),
        bytes: root_b_bytes(bytes(&bundle.rootfs())?),
    };
    let update_part = GptPartition {
        name: UPDATE_NAME.into(),
        uuid: "5b7d9f1a-3c4e-4a6b-9d8e-2f3a4b5c6d7e".into(),
        bytes: update_partition_bytes(bytes(update)?),
    };
    let tmp = tmp_beside(disk);
    let store_bytes = crate::run_options::store_size(bundle.workload.mem_mib);
    let placed = write_store_disk(bundle, &template, &tmp, store_bytes, &[root_b, update_part])?;
    let mut env = vec!["set"];
    env.extend(AB_GRUBENV);
    edit_grubenv(&tmp, &env)?;
    let near = match disk.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let work = tempfile::Builder::new()
        .prefix("snapboot-ab-")
        .tempdir_in(near)
        .map_err(io(near))?;
    let fat = work.path().join("update.img");
    fat_image(&fat, "UPDATE", placed[5].bytes)?;
    let mut from = fs::File::open(&fat).map_err(io(&fat))?;
    copy_into(&mut from, &fat, &tmp, placed[5].offset)?;
    put_update(&tmp, update)?;
    fs::rename(&tmp, disk).map_err(io(disk))
}

/// Copies the RAUC bundle `update` onto the update partition of the A/B disk `disk`, as
/// [`UPDATE_FILE`], replacing it.
pub fn put_update(disk: &Path, update: &Path) -> Result<(), UefiError> {
    let at = partition(disk, UPDATE_NAME)?;
    put_at(disk, at.offset, update, UPDATE_FILE)
}

/// Whether `disk` is an A/B disk: it has a partition named [`ROOT_B_NAME`]. A disk whose
/// table cannot be read is not.
pub fn is_ab_disk(disk: &Path) -> bool {
    partition(disk, ROOT_B_NAME).is_ok()
}

/// Where the partition named `name` of the PC's disk `disk` is (`sfdisk --json`).
pub fn partition(disk: &Path, name: &str) -> Result<Placed, UefiError> {
    let missing = |reason: String| UefiError::NoPartition {
        disk: disk.to_path_buf(),
        name: name.to_string(),
        reason,
    };
    let out = tool(Command::new("sfdisk").arg("--json").arg(disk))?;
    let table: serde_json::Value =
        serde_json::from_slice(&out).map_err(|e| missing(format!("sfdisk --json: {e}")))?;
    let parts = table["partitiontable"]["partitions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let part = parts
        .iter()
        .find(|p| p["name"] == name)
        .ok_or_else(|| missing(format!("{} partitions", parts.len())))?;
    let sector = |k: &str| part[k].as_u64().map(|n| n * 512);
    match (sector("start"), sector("size")) {
        (Some(offset), Some(bytes)) => Ok(Placed { offset, bytes }),
        _ => Err(missing(format!("no start or size: {part}"))),
    }
}

/// Where the store partition of the PC's disk `disk` is.
pub fn store_partition(disk: &Path) -> Result<Placed, UefiError> {
    partition(disk, STORE_NAME)
}

/// Opens the store in the PC's disk `disk`, read-only unless `rw`: what a boot wrote there.
pub fn open_store(
    disk: &Path,
    rw: bool,
) -> Result<flashstore::Store<flashstore::Window<fs::File>>, UefiError> {
    let at = store_partition(disk)?;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(rw)
        .open(disk)
        .map_err(io(disk))?;
    flashstore::Store::open(flashstore::Window::new(f, at.offset, at.bytes)).map_err(|e| {
        UefiError::Disk(DiskError::Format {
            path: disk.to_path_buf(),
            offset: at.offset,
            source: e,
        })
    })
}

/// Writes what `from` (read from the file `src`) holds into `disk` at byte `offset`.
fn copy_into(from: &mut impl Read, src: &Path, disk: &Path, offset: u64) -> Result<(), UefiError> {
    let mut to = fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .map_err(io(disk))?;
    to.seek(SeekFrom::Start(offset)).map_err(io(disk))?;
    std::io::copy(from, &mut to).map_err(io(src))?;
    to.flush().map_err(io(disk))
}

/// The head of the board's grub.cfg, as Debian's `00_header` writes it: the environment
/// loaded, `next_entry` booted once and cleared (`boot_once` set), else the normal entry; no
/// menu wait. 42_snapboot's restore-kernel entry, after it, makes itself the default unless
/// `boot_once`.
pub fn grub_header() -> String {
    format!(
        "# Written by snapboot's board for one run: 00_header's part, then 42_snapboot's.\n\
         if [ -s $prefix/grubenv ]; then\n  load_env\nfi\n\
         if [ \"${{next_entry}}\" ] ; then\n   set default=\"${{next_entry}}\"\n   \
         set next_entry=\n   save_env next_entry\n   set boot_once=true\n\
         else\n   set default=\"{NORMAL_ENTRY}\"\nfi\n\
         set timeout=0\n"
    )
}

/// The last line of the board's grub.cfg: which entry GRUB boots, on the console.
pub(crate) const GRUB_TAIL: &str = "echo \"grub: booting ${default}\"\n";

/// The restoring entry of a run besides the normal one, the default.
#[derive(Debug, Clone, Copy)]
pub enum RestoreEntry<'a> {
    /// The restore kernel as GRUB sees it, and the kernel pack's device.
    Kernel {
        /// The restore kernel on the ESP.
        linux: &'a str,
        /// `snapboot.coldkernel=`.
        pack: &'a str,
    },
    /// The EFI restorer as GRUB sees it, and the kernel pack's address.
    Restorer {
        /// The EFI application on the ESP.
        efi: &'a str,
        /// `snapboot.coldkernel=`.
        pack: &'a str,
    },
}

/// The run's grub.cfg: [`grub_header`], then the entries `42_snapboot` writes for `words`
/// (the kernel command line without `snapboot.capture`) and, given one, the restore kernel's
/// entry, run as grub-mkconfig runs it; then the line naming the entry booted.
pub fn grub_cfg(words: &str, restore: Option<RestoreEntry>) -> Result<String, UefiError> {
    let mut sh = Command::new("sh");
    sh.args(["-c", GRUB_SNIPPET, "42_snapboot"])
        .env("SNAPBOOT_GRUB_LINUX", "/vmlinuz")
        .env("SNAPBOOT_GRUB_INITRD", "/initrd.img")
        .env("GRUB_CMDLINE_LINUX", words)
        .env_remove("GRUB_CMDLINE_LINUX_DEFAULT")
        .env_remove("GRUB_DEVICE")
        .env_remove("GRUB_DEVICE_UUID")
        .env_remove("SNAPBOOT_GRUB_RESTORE_LINUX")
        .env_remove("SNAPBOOT_GRUB_RESTORER")
        .env_remove("SNAPBOOT_GRUB_COLDKERNEL");
    match restore {
        Some(RestoreEntry::Kernel { linux, pack }) => {
            sh.env("SNAPBOOT_GRUB_RESTORE_LINUX", linux)
                .env("SNAPBOOT_GRUB_COLDKERNEL", pack);
        }
        Some(RestoreEntry::Restorer { efi, pack }) => {
            sh.env("SNAPBOOT_GRUB_RESTORER", efi)
                .env("SNAPBOOT_GRUB_COLDKERNEL", pack);
        }
        None => {}
    }
    let out = tool(&mut sh)?;
    Ok(format!(
        "{}{}{GRUB_TAIL}",
        grub_header(),
        String::from_utf8_lossy(&out)
    ))
}

/// The run's kernel words for GRUB, and whether the run captures: the PC's words with the
/// root on its partition, and `snapboot.capture` taken out (the capture entry adds it).
pub fn grub_words(cmdline: &str) -> (String, bool) {
    let mut capture = false;
    let words: Vec<String> = cmdline
        .split_whitespace()
        .filter(|w| {
            let c = *w == bootparams::key::CAPTURE;
            capture |= c;
            !c
        })
        .map(|w| match w.strip_prefix("root=") {
            Some("/dev/vda") => format!("root={ROOT_PARTITION}"),
            _ => w.to_string(),
        })
        .collect();
    (words.join(" "), capture)
}

/// Runs `grub-editenv` with `args` on the host's copy of the ESP's grubenv of `disk`, and
/// puts it back.
fn edit_grubenv(disk: &Path, args: &[&str]) -> Result<(), UefiError> {
    let dir = tempfile::tempdir().map_err(io(Path::new("/tmp")))?;
    let env = dir.path().join("grubenv");
    tool(mtools("mcopy", disk).arg(GRUBENV).arg(&env))?;
    tool(Command::new("grub-editenv").arg(&env).args(args))?;
    put(disk, &env, GRUBENV)
}

/// Sets `next_entry` in the ESP's grubenv (`grub-reboot` on the host's copy of it), or
/// with `None` unsets it (no request: the default entry boots).
pub fn set_next_entry(disk: &Path, entry: Option<&str>) -> Result<(), UefiError> {
    match entry {
        Some(e) => edit_grubenv(disk, &["set", &format!("next_entry={e}")]),
        None => edit_grubenv(disk, &["unset", "next_entry"]),
    }
}

/// The variables of the ESP's grubenv of `disk` (GRUB's environment block: `NAME=value`
/// lines, `#` comment and padding).
pub fn grubenv_vars(disk: &Path) -> Result<BTreeMap<String, String>, UefiError> {
    let out = tool(mtools("mtype", disk).arg(GRUBENV))?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// Reads a variable of the ESP's grubenv (none when unset).
pub fn grubenv_var(disk: &Path, name: &str) -> Result<Option<String>, UefiError> {
    Ok(grubenv_vars(disk)?.remove(name))
}

/// The PC of a run: OVMF's code, the variable store `vars`, `disk` and the run's disks.
fn pc(opts: &RunOptions, vars: &Path, disk: &Path) -> Command {
    let mut c = crate::run_options::pc_machine(opts);
    c.arg("-drive").arg(format!(
        "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
    ));
    c.arg("-drive").arg(format!(
        "if=pflash,format=raw,unit=1,file={}",
        vars.display()
    ));
    virtio_disks(&mut c, disk, true, opts);
    c
}

/// Makes the PC's variable store `vars`: a copy of OVMF's empty one, booted once. OVMF's
/// first boot on an empty store (it writes its boot options) leaves the firmware's runtime
/// memory elsewhere than every boot after it (measured: its first EFI runtime region 63
/// pages at 0x3e5e2000, then 17 pages at 0x3debd000), so the kernel's EFI runtime map
/// differs and an image captured on that boot is refused by every later one. The boot runs
/// the firmware into GRUB on `disk` with a grub.cfg that only says so on the console (each
/// run writes its own); then QEMU is stopped, and the store kept.
fn settle_vars(opts: &RunOptions, disk: &Path, vars: &Path) -> Result<(), UefiError> {
    const SETTLED: &str = "snapboot: firmware variables settled";
    let partial = vars.with_extension(format!("fd.partial.{}", std::process::id()));
    fs::copy(OVMF_VARS, &partial).map_err(io(&partial))?;
    let dir = tempfile::tempdir().map_err(io(Path::new("/tmp")))?;
    let cfg = dir.path().join("grub.cfg");
    fs::write(&cfg, format!("echo \"{SETTLED}\"\n")).map_err(io(&cfg))?;
    put(disk, &cfg, GRUB_CFG)?;
    let mut c = pc(opts, &partial, disk);
    c.args(["-serial", "stdio", "-monitor", "none"]);
    c.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let failed = |reason: String| UefiError::Tool {
        cmd: "qemu-system-x86_64 (the firmware's first boot, settling its variable store)".into(),
        reason,
    };
    let mut child = c.spawn().map_err(|e| failed(e.to_string()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = out.read(&mut buf) {
                seen.extend_from_slice(&buf[..n]);
                if String::from_utf8_lossy(&seen).contains(SETTLED) {
                    let _ = tx.send(());
                    return;
                }
            }
        });
    }
    let reached = rx.recv_timeout(std::time::Duration::from_secs(120)).is_ok();
    // SIGTERM: QEMU stops cleanly, its flash writes in the file.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    if !reached {
        let _ = fs::remove_file(&partial);
        return Err(failed(format!("GRUB did not say {SETTLED:?} within 120 s")));
    }
    fs::rename(&partial, vars).map_err(io(vars))
}

/// Why a run (`kernel`, a capture run or not) does not boot the A/B disk `disk`, if it does
/// not: the restore kernel, the EFI restorer, a capture run, another build of the bundle.
fn ab_refusal(
    bundle: &Bundle,
    disk: &Path,
    kernel: &KernelImage,
    capture: bool,
) -> Result<Option<AbRefusal>, UefiError> {
    Ok(match kernel {
        KernelImage::Restore(_) => Some(AbRefusal::RestoreKernel),
        KernelImage::Restorer { .. } => Some(AbRefusal::Restorer),
        _ if capture => Some(AbRefusal::Capture),
        _ => {
            let want = bundle_id(bundle)?;
            let have = carried_id(disk);
            (have != want).then_some(AbRefusal::Stale { have, want })
        }
    })
}

/// The restoring entry of a run on `kernel`, its program put on the ESP of `disk`.
fn restore_entry(
    disk: &Path,
    kernel: &KernelImage,
) -> Result<Option<RestoreEntry<'static>>, UefiError> {
    Ok(match kernel {
        KernelImage::Restore(vmlinux) => {
            let bz = hostkernel::restore_kernel::bzimage_beside(vmlinux);
            if !bz.is_file() {
                return Err(UefiError::NoRestoreBzImage(bz));
            }
            put(disk, &bz, &format!("::{RESTORE_KERNEL_ON_ESP}"))?;
            Some(RestoreEntry::Kernel {
                linux: RESTORE_KERNEL_ON_ESP,
                pack: PACK_PARTITION,
            })
        }
        KernelImage::Restorer { elf } => {
            // `mmd` fails when the directory is there: its result does not matter.
            let _ = tool(mtools("mmd", disk).arg(RESTORER_DIR_ON_ESP));
            put(disk, elf, &format!("::{RESTORER_ON_ESP}"))?;
            Some(RestoreEntry::Restorer {
                efi: RESTORER_ON_ESP,
                pack: PACK_ADDRESS,
            })
        }
        _ => None,
    })
}

/// The QEMU command of one run on the UEFI PC. On an A/B disk ([`is_ab_disk`]) the run's
/// grub.cfg is RAUC's slot selection ([`grub_cfg_ab`]), and the runs it does not take are
/// refused ([`AbRefusal`]).
pub fn command(
    bundle: &Bundle,
    opts: &RunOptions,
    base_cmdline: &str,
) -> Result<Command, UefiError> {
    if !bundle.workload.init.is_debian() {
        return Err(UefiError::Workload(bundle.workload.name.clone()));
    }
    need(OVMF_CODE, "ovmf")?;
    need(OVMF_VARS, "ovmf")?;
    let vars = bundle.dir.join("uefi-vars.fd");
    // The stock kernel's words: the restore kernel's entry adds its own two.
    let mut stock = opts.clone();
    stock.kernel = KernelImage::Vmlinux;
    let cmdline = kernel_cmdline(bundle, &stock, base_cmdline, "");
    let (words, capture) = grub_words(&cmdline);
    let ab = opts.boot_disk.as_deref().is_some_and(is_ab_disk);
    let disk = match &opts.boot_disk {
        Some(d) if ab => {
            if let Some(refusal) = ab_refusal(bundle, d, &opts.kernel, capture)? {
                return Err(UefiError::AbRun {
                    disk: d.clone(),
                    refusal,
                });
            }
            d.clone()
        }
        Some(d) => {
            let bytes = crate::run_options::store_size(opts.mem_mib);
            ensure_store_disk(bundle, d, capture, bytes)?;
            d.clone()
        }
        None => ensure_disk(bundle)?,
    };
    if !vars.is_file() {
        settle_vars(opts, &disk, &vars)?;
    }
    let text = if ab {
        let words: Vec<String> = words.split_whitespace().map(str::to_string).collect();
        grub_cfg_ab(&words, GRUB_TAIL)
    } else {
        grub_cfg(&words, restore_entry(&disk, &opts.kernel)?)?
    };
    let cfg_dir = tempfile::tempdir().map_err(io(Path::new("/tmp")))?;
    let cfg = cfg_dir.path().join("grub.cfg");
    fs::write(&cfg, text).map_err(io(&cfg))?;
    put(&disk, &cfg, GRUB_CFG)?;
    if capture {
        set_next_entry(&disk, Some(CAPTURE_ENTRY))?;
    }

    Ok(pc(opts, &vars, &disk))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debian_root_names_this_store_partition() {
        assert_eq!(
            bundle::debian::STORE_ADDRESS,
            format!("PARTLABEL={STORE_NAME}")
        );
    }

    #[test]
    fn the_capture_word_becomes_the_capture_entry_and_the_root_its_partition() {
        let (words, capture) =
            grub_words("console=ttyS0 root=/dev/vda rootfstype=squashfs snapboot.capture x");
        assert_eq!(words, "console=ttyS0 root=/dev/vda2 rootfstype=squashfs x");
        assert!(capture);
        let (words, capture) = grub_words("root=/dev/vdb snapboot.store=/dev/vdb");
        assert_eq!(words, "root=/dev/vdb snapboot.store=/dev/vdb");
        assert!(!capture);
    }

    /// Whether the tools that make the PC's disks are missing (the test is skipped then).
    fn disk_tools_missing() -> bool {
        let tools = [
            "grub-mkimage",
            "grub-editenv",
            "mkfs.vfat",
            "mcopy",
            "sfdisk",
        ];
        if !Path::new(GRUB_EFI_MODULES).is_dir()
            || tools
                .iter()
                .any(|t| Command::new(t).arg("--version").output().is_err())
        {
            eprintln!("no GRUB EFI modules, grub-common, mtools, dosfstools or sfdisk: skipped");
            return true;
        }
        false
    }

    /// A bundle in `dir` whose kernel, initramfs, root (3 MiB of 0x5a) and pack are filler.
    fn filler_bundle(dir: &Path) -> Bundle {
        let mut b = crate::testutil::bundle();
        b.dir = dir.to_path_buf();
        for (p, bytes) in [
            (b.bzimage(), 4096),
            (b.initramfs(), 4096),
            (b.rootfs(), 3 << 20),
            (b.kernel_pack(), 1 << 20),
        ] {
            fs::write(p, vec![0x5a; bytes]).unwrap();
        }
        b
    }

    #[test]
    fn a_capture_makes_the_pcs_disk_with_an_empty_store_which_a_new_build_replaces() {
        if disk_tools_missing() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let b = filler_bundle(dir.path());
        let disk = dir.path().join("pc.img");
        let store_bytes = 16 << 20;
        ensure_store_disk(&b, &disk, true, store_bytes).unwrap();
        let part = store_partition(&disk).unwrap();
        assert_eq!(part.bytes, store_bytes);
        assert_eq!(
            part.offset,
            (1 << 20) + ESP_BYTES + (3 << 20) + (1 << 20),
            "after the ESP, the root and the kernel pack"
        );
        let s = open_store(&disk, false).unwrap();
        assert!(s.images().is_empty());
        assert_eq!(s.label(), STORE_LABEL);
        drop(s);
        // The root and the ESP's files are the bundle's.
        let root = fs::read(&disk).unwrap()[(1 << 20) + ESP_BYTES as usize..][..3 << 20].to_vec();
        assert_eq!(root, vec![0x5a; 3 << 20]);
        assert!(grubenv_var(&disk, "next_entry").unwrap().is_none());

        // A snapshot boot of the same build keeps the disk (and so its store), also after
        // a rebuild that wrote the same files again.
        let stamp = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
        let made = stamp(&disk);
        fs::write(b.rootfs(), vec![0x5a; 3 << 20]).unwrap();
        ensure_store_disk(&b, &disk, false, store_bytes).unwrap();
        assert_eq!(stamp(&disk), made);

        // A new build of the bundle: refused for a snapshot boot, made anew by a capture.
        fs::write(b.rootfs(), vec![0xa5; 2 << 20]).unwrap();
        let err = ensure_store_disk(&b, &disk, false, store_bytes).unwrap_err();
        assert!(matches!(err, UefiError::StaleDisk { .. }), "{err}");
        assert!(err.to_string().contains("capture onto it again"), "{err}");
        ensure_store_disk(&b, &disk, true, store_bytes).unwrap();
        assert_eq!(
            store_partition(&disk).unwrap().offset,
            (1 << 20) + ESP_BYTES + (2 << 20) + (1 << 20)
        );
        ensure_store_disk(&b, &disk, false, store_bytes).unwrap();
    }

    #[test]
    fn slot_bs_root_and_the_update_partition_have_room_in_whole_mib() {
        assert_eq!(root_b_bytes(3 << 20), 35 << 20, "at least 32 MiB more");
        assert_eq!(root_b_bytes(400 << 20), 500 << 20, "a quarter more");
        assert_eq!(root_b_bytes((400 << 20) + 1), 501 << 20);
        assert_eq!(update_partition_bytes(1), 64 << 20);
        assert_eq!(update_partition_bytes(100 << 20), 116 << 20);
        assert_eq!(update_partition_bytes((100 << 20) + 1), 117 << 20);
    }

    #[test]
    fn an_ab_disk_is_the_store_disk_with_slot_b_and_the_update_and_refuses_other_runs() {
        if disk_tools_missing() || Command::new("mtype").arg("--version").output().is_err() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut b = filler_bundle(dir.path());
        // A small store: its size is the bundle's RAM's, as a capture makes it.
        b.workload.mem_mib = 16;
        let update = dir.path().join("update.raucb");
        let payload: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&update, &payload).unwrap();
        let store_disk = dir.path().join("pc.img");
        let store_bytes = crate::run_options::store_size(16);
        ensure_store_disk(&b, &store_disk, true, store_bytes).unwrap();
        assert!(!is_ab_disk(&store_disk));

        let disk = dir.path().join("ab.img");
        ensure_ab_disk(&b, &disk, &update).unwrap();
        assert!(is_ab_disk(&disk));
        let out = Command::new("sfdisk")
            .arg("--json")
            .arg(&disk)
            .output()
            .unwrap();
        let table: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<&str> = table["partitiontable"]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                ESP_NAME,
                "root",
                PACK_NAME,
                STORE_NAME,
                ROOT_B_NAME,
                UPDATE_NAME
            ]
        );
        // Partitions 1 to 4 where the store disk has them: images restore across both.
        for name in [ESP_NAME, "root", PACK_NAME, STORE_NAME] {
            assert_eq!(
                partition(&disk, name).unwrap(),
                partition(&store_disk, name).unwrap(),
                "{name}"
            );
        }
        let s = open_store(&disk, false).unwrap();
        assert!(s.images().is_empty());
        assert_eq!(s.label(), STORE_LABEL);
        drop(s);
        let store = store_partition(&disk).unwrap();
        let b_root = partition(&disk, ROOT_B_NAME).unwrap();
        assert_eq!(b_root.offset, store.offset + store.bytes);
        assert_eq!(b_root.bytes, root_b_bytes(3 << 20));
        let bytes = fs::read(&disk).unwrap();
        let at = |p: &Placed| &bytes[p.offset as usize..][..p.bytes as usize];
        assert!(at(&b_root).iter().all(|&x| x == 0), "slot B starts zero");
        let upd = partition(&disk, UPDATE_NAME).unwrap();
        assert_eq!(upd.offset, b_root.offset + b_root.bytes);
        assert_eq!(upd.bytes, 64 << 20);
        // Partition 6 is FAT32 labelled UPDATE holding the bundle.
        let listing = tool(mtools_at("mdir", &disk, upd.offset).arg("::/")).unwrap();
        let listing = String::from_utf8_lossy(&listing);
        assert!(listing.contains("UPDATE"), "{listing}");
        assert!(listing.to_lowercase().contains("update.raucb"), "{listing}");
        let copied = tool(mtools_at("mtype", &disk, upd.offset).arg(UPDATE_FILE)).unwrap();
        assert!(copied == payload, "update.raucb differs from the bundle");
        drop(bytes);

        // RAUC's grubenv: slot A first and good.
        let env = grubenv_vars(&disk).unwrap();
        for want in AB_GRUBENV {
            let (k, v) = want.split_once('=').unwrap();
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}: {env:?}");
        }
        assert_eq!(grubenv_var(&disk, "ORDER").unwrap().as_deref(), Some("A B"));
        assert!(grubenv_var(&disk, "next_entry").unwrap().is_none());

        // A normal run boots it; the restore kernel, the restorer and a capture run do not.
        let vmlinux = KernelImage::Vmlinux;
        assert_eq!(ab_refusal(&b, &disk, &vmlinux, false).unwrap(), None);
        let capture = ab_refusal(&b, &disk, &vmlinux, true).unwrap().unwrap();
        assert_eq!(capture, AbRefusal::Capture);
        let restore = KernelImage::Restore(PathBuf::from("/k/vmlinux"));
        assert_eq!(
            ab_refusal(&b, &disk, &restore, false).unwrap(),
            Some(AbRefusal::RestoreKernel)
        );
        let restorer = KernelImage::Restorer {
            elf: PathBuf::from("/r.elf"),
        };
        assert_eq!(
            ab_refusal(&b, &disk, &restorer, false).unwrap(),
            Some(AbRefusal::Restorer)
        );
        let err = UefiError::AbRun {
            disk: disk.clone(),
            refusal: capture,
        }
        .to_string();
        assert!(err.contains("is an A/B disk"), "{err}");
        assert!(err.contains("re-capture of its cold boot"), "{err}");
        // Another build of the bundle: refused, to be made again.
        fs::write(b.rootfs(), vec![0xa5; 3 << 20]).unwrap();
        let stale = ab_refusal(&b, &disk, &vmlinux, false).unwrap();
        assert!(matches!(stale, Some(AbRefusal::Stale { .. })), "{stale:?}");

        // Made anew, always: the bundle replaced too.
        fs::write(&update, b"another").unwrap();
        ensure_ab_disk(&b, &disk, &update).unwrap();
        let copied = tool(mtools_at("mtype", &disk, upd.offset).arg(UPDATE_FILE)).unwrap();
        assert_eq!(copied, b"another");
        assert_eq!(ab_refusal(&b, &disk, &vmlinux, false).unwrap(), None);
    }

    #[test]
    fn both_entries_come_from_the_snippet_and_differ_only_in_the_capture_word() {
        let cfg = grub_cfg("console=ttyS0 root=/dev/vda2 snapboot.store=/dev/vdb", None).unwrap();
        assert!(cfg.contains("save_env next_entry"), "{cfg}");
        let linux: Vec<&str> = cfg
            .lines()
            .filter(|l| l.trim_start().starts_with("linux"))
            .collect();
        assert_eq!(
            linux,
            [
                "\tlinux\t/vmlinuz console=ttyS0 root=/dev/vda2 snapboot.store=/dev/vdb",
                "\tlinux\t/vmlinuz console=ttyS0 root=/dev/vda2 snapboot.store=/dev/vdb \
                 snapboot.capture"
            ]
        );
        for id in [NORMAL_ENTRY, CAPTURE_ENTRY] {
            assert!(cfg.contains(&format!("--id {id} {{")), "{id}: {cfg}");
        }
        assert!(cfg.contains(&format!("set default=\"{NORMAL_ENTRY}\"")));
        assert!(!cfg.contains(RESTORE_ENTRY), "{cfg}");
        assert!(cfg.ends_with(GRUB_TAIL), "{cfg}");
    }

    #[test]
    fn the_efi_restorers_entry_chainloads_it_with_the_normal_words_and_falls_back() {
        let words = "console=ttyS0 root=/dev/vda2";
        let cfg = grub_cfg(
            words,
            Some(RestoreEntry::Restorer {
                efi: RESTORER_ON_ESP,
                pack: PACK_ADDRESS,
            }),
        )
        .unwrap();
        assert!(
            cfg.contains(&format!(
                "\tchainloader\t{RESTORER_ON_ESP} {words} snapboot.coldkernel={PACK_ADDRESS}\n"
            )),
            "{cfg}"
        );
        let choose = "if [ -z \"${boot_once}\" ]; then\n\tset default=\"snapboot-restorer\"\n\tset fallback=\"0\"\nfi\n";
        assert!(cfg.contains(choose), "{cfg}");
        // The normal entry, the fallback, is still there, with the same words.
        assert!(cfg.contains(&format!("--id {NORMAL_ENTRY} {{")), "{cfg}");
        assert!(
            cfg.contains(&format!("\tlinux\t/vmlinuz {words}\n")),
            "{cfg}"
        );
    }

    #[test]
    fn the_restore_kernels_entry_is_the_default_unless_an_entry_was_chosen_once() {
        let words = "console=ttyS0 root=/dev/vda2 snapboot.store=/dev/vdb";
        let cfg = grub_cfg(
            words,
            Some(RestoreEntry::Kernel {
                linux: RESTORE_KERNEL_ON_ESP,
                pack: PACK_PARTITION,
            }),
        )
        .unwrap();
        let linux: Vec<&str> = cfg
            .lines()
            .filter(|l| l.trim_start().starts_with("linux"))
            .collect();
        assert_eq!(
            linux[2],
            format!(
                "\tlinux\t{RESTORE_KERNEL_ON_ESP} {words} rdinit=/bin/snapboot \
                 snapboot.coldkernel={PACK_PARTITION}"
            )
        );
        // Its initramfs is the stock kernel's: the one the images are bound to.
        let initrds = cfg.matches("\tinitrd\t/initrd.img\n").count();
        assert_eq!(initrds, 3, "{cfg}");
        assert!(cfg.contains(&format!("--id {RESTORE_ENTRY} {{")), "{cfg}");
        // Every title is one quoted word to GRUB: a quote inside one ends the whole file's
        // parse there, and GRUB boots what was read before it.
        for line in cfg.lines().filter(|l| l.starts_with("menuentry ")) {
            assert_eq!(line.matches('\'').count(), 2, "{line}");
        }
        let choose =
            format!("if [ -z \"${{boot_once}}\" ]; then\n\tset default=\"{RESTORE_ENTRY}\"\nfi\n");
        assert!(cfg.contains(&choose), "{cfg}");
        // After the header's choice, before GRUB boots.
        assert!(cfg.find(&choose) > cfg.find("set boot_once=true"));
        assert!(cfg.ends_with(GRUB_TAIL), "{cfg}");
    }
}
