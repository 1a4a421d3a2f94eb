//! The arm64 board's boot disk, partitioned like an i.MX-class device's eMMC: U-Boot's
//! distro boot finds `boot.scr` on the first partition (`guest/u-boot/boot.cmd`, compiled
//! with `mkimage`), which boots `snapboot/extlinux.conf`'s label: the one U-Boot's
//! environment names (`crate::uboot`), or `capture` once when the device asked for it in the
//! `ubootenv` partition (`snapboot capture --next-boot`). With `snapboot_restorer=yes` in
//! U-Boot's environment the script first starts the restorer (`snapboot/restorer.efi`, an EFI
//! application, `bootefi`) with the command line as its load options; when it refuses it
//! returns to the script, which boots the label as always. The root filesystem and the kernel
//! pack (the stock kernel and initramfs a restore kernel hands a cold boot to) are
//! partitions of the same disk.
//!
//! ```text
//! GPT | 1 boot (ext4)             | 2 root      | 3 coldkernel    | 4 ubootenv       | GPT
//!     |  Image          stock     |  squashfs   |  raw pack       |  1 MiB: U-Boot   |
//!     |  restore/Image  restore   |             |                 |  env area (CRC,  |
//!     |  initrd         all       |             |                 |  vars; none: no  |
//!     |  boot.scr                 |             |                 |  request)        |
//!     |  snapboot/extlinux.conf   |             |                 |                  |
//!     |  snapboot/restorer.efi    |             |                 |                  |
//! 0   1 MiB                                                                  end-1 MiB
//! ```
//!
//! Built once per bundle and restore kernel (rebuilt when one of its inputs changes),
//! attached read-only: the run's command line and label live in U-Boot's environment. A
//! run that lets the device ask for a capture boots a writable copy
//! (`RunOptions::boot_disk`).

use crate::uboot::CMDLINE_VAR;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Partition alignment and the room left for each GPT.
const MIB: u64 = 1 << 20;
/// The boot partition's size, the same whichever kernels it holds: a restored kernel keeps
/// the partition table it booted with, so the root partition must start at the same
/// sector whether the stock kernel or the restore kernel restores it (measured: with the
/// boot partition sized to its files, the root moved by 5 MiB between the two disks and
/// the restored system read squashfs garbage). A device's partition table is fixed too.
pub const BOOT_PARTITION_BYTES: u64 = 128 * MIB;
/// Room on the boot partition besides its files (ext4's own structures).
const BOOT_SLACK: u64 = 8 * MIB;

/// The kernel device of the kernel pack partition as the board's kernels see it (the boot
/// disk is the first virtio disk; the root, partition 2, is the bundle's
/// `ARM64_ROOT_PARTITION`, which its `/init` mounts).
pub const PACK_PARTITION: &str = "/dev/vda3";
/// The partition of the device's next-boot request (a U-Boot environment area): its
/// number, which `boot.scr` reads, and its GPT name, which the device looks for.
pub const ENV_PARTITION_NUMBER: u32 = 4;
/// The next-boot request partition's GPT name.
pub const ENV_PARTITION_NAME: &str = "ubootenv";
/// Bytes of the next-boot request partition.
const ENV_PARTITION_BYTES: u64 = MIB;
/// Where the arm64 restorer (an EFI application) lies on the boot partition.
pub const RESTORER_FILE: &str = "/snapboot/restorer.efi";
/// The boot script's source.
const BOOT_CMD: &str = include_str!("../../../guest/u-boot/boot.cmd");
/// The layout this code builds: a disk of another layout is rebuilt.
const LAYOUT: u32 = 3;

/// Why the boot disk could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BootDiskError {
    /// A host tool failed.
    #[error("`{cmd}` failed: {reason} (package {package}; `make deps`)")]
    Tool {
        /// The command.
        cmd: String,
        /// Its error output.
        reason: String,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// The kernels and initramfs do not fit the boot partition.
    #[error("the boot partition's files need {bytes} bytes, it has room for {room}")]
    BootTooSmall {
        /// Bytes of the files.
        bytes: u64,
        /// Bytes they may take.
        room: u64,
    },
    /// The request partition's empty environment could not be made.
    #[error("the {ENV_PARTITION_NAME} partition's environment")]
    Env(#[from] ubootenv::EnvError),
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BootDiskError + '_ {
    move |source| BootDiskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What a boot disk was built from: a disk is reused while these are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Inputs {
    /// The fixed boot partition's size: a disk of another layout is rebuilt.
    boot_partition: u64,
    /// [`LAYOUT`].
    layout: u32,
    files: Vec<(PathBuf, u64, u128)>,
}

impl Inputs {
    fn of(paths: &[&Path]) -> Result<Self, BootDiskError> {
        let mut files = Vec::new();
        for p in paths {
            let m = fs::metadata(p).map_err(io_err(p))?;
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            files.push((p.to_path_buf(), m.len(), t));
        }
        Ok(Inputs {
            boot_partition: BOOT_PARTITION_BYTES,
            layout: LAYOUT,
            files,
        })
    }
}

/// `snapboot/extlinux.conf` of the boot partition: one label per kernel, the command line
/// from U-Boot's environment, and the capture entry `boot.scr` boots once when asked.
pub fn extlinux_conf(with_restore: bool) -> String {
    let mut s =
        String::from("# Written by snapboot: the arm64 board's boot menu.\ndefault stock\n");
    let mut label = |name: &str, kernel: &str, extra: &str| {
        s.push_str(&format!(
            "label {name}\n  kernel {kernel}\n  initrd /initrd\n  append ${{{CMDLINE_VAR}}}{extra}\n"
        ));
    };
    label("stock", "/Image", "");
    if with_restore {
        label("restore", "/restore/Image", "");
    }
    label(
        "capture",
        "/Image",
        &format!(" {}", bootparams::key::CAPTURE),
    );
    s
}

/// One partition of the disk to be: its GPT name and the file holding its contents.
struct Part<'a> {
    name: &'a str,
    file: &'a Path,
}

/// The sfdisk script of partitions of these sizes (bytes, whole MiB), 1 MiB aligned.
fn sfdisk_script(parts: &[(&str, u64)]) -> String {
    let mut s = String::from("label: gpt\nunit: sectors\n");
    let mut at = MIB;
    for (name, bytes) in parts {
        s.push_str(&format!(
            "start={}, size={}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name={name}\n",
            at / 512,
            bytes / 512
        ));
        at += bytes;
    }
    s
}

fn round_mib(n: u64) -> u64 {
    n.div_ceil(MIB) * MIB
}

/// The files a boot disk is made of (a bundle's, `bundle::bundle::Bundle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootFiles {
    /// The stock kernel's Image (boot partition).
    pub kernel: PathBuf,
    /// The initramfs both kernels boot with (boot partition).
    pub initrd: PathBuf,
    /// The root filesystem image (root partition).
    pub root: PathBuf,
    /// The kernel pack (coldkernel partition).
    pub pack: PathBuf,
}

/// The boot disk of `files` with the stock kernel and, when given, a restore kernel, kept in
/// `dir` (the bundle's directory): built unless an up-to-date one is there.
pub fn ensure(
    dir: &Path,
    files: &BootFiles,
    restore: Option<&Path>,
    restorer: Option<&Path>,
) -> Result<PathBuf, BootDiskError> {
    let BootFiles {
        kernel,
        initrd,
        root,
        pack,
    } = files;
    let mut inputs: Vec<&Path> = vec![kernel, initrd, root, pack];
    inputs.extend(restore);
    inputs.extend(restorer);
    let want = Inputs::of(&inputs)?;
    let name = match (restore, restorer) {
        (_, Some(_)) => "bootdisk-restorer",
        (Some(_), None) => "bootdisk-restore",
        (None, None) => "bootdisk",
    };
    let disk = dir.join(format!("{name}.img"));
    let stamp = dir.join(format!("{name}.json"));
    let have: Option<Inputs> = fs::read_to_string(&stamp)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    if have.as_ref() == Some(&want) && disk.is_file() {
        return Ok(disk);
    }
    // A work directory of this build's own: tests boot the same bundle from several threads,
    // and two that find the disk stale build it at once (the one renamed last stays).
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = dir.join(format!("{name}.work.{}.{nth}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let tree = work.join("boot");
    fs::create_dir_all(tree.join("snapboot")).map_err(io_err(&tree))?;
    let mut boot_bytes = 0;
    let mut place = |src: &Path, dst: &str| -> Result<(), BootDiskError> {
        let to = tree.join(dst);
        if let Some(d) = to.parent() {
            fs::create_dir_all(d).map_err(io_err(d))?;
        }
        if fs::hard_link(src, &to).is_err() {
            fs::copy(src, &to).map_err(io_err(src))?;
        }
        boot_bytes += fs::metadata(&to).map_err(io_err(&to))?.len();
        Ok(())
    };
    place(kernel, "Image")?;
    place(initrd, "initrd")?;
    if let Some(rk) = restore {
        place(rk, "restore/Image")?;
    }
    if let Some(r) = restorer {
        place(r, RESTORER_FILE.trim_start_matches('/'))?;
    }
    let conf = tree.join("snapboot/extlinux.conf");
    fs::write(&conf, extlinux_conf(restore.is_some())).map_err(io_err(&conf))?;
    let cmd = work.join("boot.cmd");
    fs::write(&cmd, BOOT_CMD).map_err(io_err(&cmd))?;
    tool(
        Command::new("mkimage")
            .args([
                "-A", "arm64", "-O", "linux", "-T", "script", "-C", "none", "-d",
            ])
            .arg(&cmd)
            .arg(tree.join("boot.scr")),
        "u-boot-tools",
    )?;
    let boot_img = work.join("boot.ext4");
    if boot_bytes + BOOT_SLACK > BOOT_PARTITION_BYTES {
        return Err(BootDiskError::BootTooSmall {
            bytes: boot_bytes,
            room: BOOT_PARTITION_BYTES - BOOT_SLACK,
        });
    }
    let boot_size = BOOT_PARTITION_BYTES;
    let env_img = work.join("ubootenv.img");
    fs::write(&env_img, no_request()?).map_err(io_err(&env_img))?;
    tool(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", "boot", "-d"])
            .arg(&tree)
            .arg(&boot_img)
            .arg(format!("{}k", boot_size / 1024)),
        "e2fsprogs",
    )?;
    let parts = [
        Part {
            name: "boot",
            file: &boot_img,
        },
        Part {
            name: "root",
            file: root,
        },
        Part {
            name: "coldkernel",
            file: pack,
        },
        Part {
            name: ENV_PARTITION_NAME,
            file: &env_img,
        },
    ];
    let mut sizes = Vec::new();
    for p in &parts {
        let len = fs::metadata(p.file).map_err(io_err(p.file))?.len();
        sizes.push((p.name, round_mib(len)));
    }
    // Whatever the ext4 image came to, the partition is the fixed size.
    sizes[0].1 = BOOT_PARTITION_BYTES;
    let total = MIB + sizes.iter().map(|(_, b)| b).sum::<u64>() + MIB;
    let tmp = work.join("disk.img");
    let f = fs::File::create(&tmp).map_err(io_err(&tmp))?;
    f.set_len(total).map_err(io_err(&tmp))?;
    drop(f);
    let mut sfdisk = Command::new("sfdisk");
    sfdisk
        .args(["-q", "--no-reread", "--no-tell-kernel"])
        .arg(&tmp);
    tool_with_input(&mut sfdisk, &sfdisk_script(&sizes), "fdisk")?;
    let mut out = fs::OpenOptions::new()
        .write(true)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    let mut at = MIB;
    for (p, (_, size)) in parts.iter().zip(&sizes) {
        use std::io::Seek;
        out.seek(std::io::SeekFrom::Start(at))
            .map_err(io_err(&tmp))?;
        let mut src = fs::File::open(p.file).map_err(io_err(p.file))?;
        std::io::copy(&mut src, &mut out).map_err(io_err(p.file))?;
        at += size;
    }
    out.sync_all().map_err(io_err(&tmp))?;
    drop(out);
    fs::rename(&tmp, &disk).map_err(io_err(&disk))?;
    let json = serde_json::to_string(&want).unwrap_or_default();
    fs::write(&stamp, json).map_err(io_err(&stamp))?;
    let _ = fs::remove_dir_all(&work);
    Ok(disk)
}

/// The request partition with no request: a valid environment area without variables, so
/// `boot.scr`'s `env import -c` takes it in silence (zeros fail its CRC check, and U-Boot
/// would print "bad CRC, import failed" on every normal boot; a damaged area still does).
pub fn no_request() -> Result<Vec<u8>, ubootenv::EnvError> {
    let mut part = ubootenv::Env::default().to_area(devinstall::bootloader::uboot::AREA_BYTES)?;
    part.resize(ENV_PARTITION_BYTES as usize, 0);
    Ok(part)
}

fn tool(cmd: &mut Command, package: &'static str) -> Result<(), BootDiskError> {
    tool_with_input(cmd, "", package)
}

fn tool_with_input(
    cmd: &mut Command,
    input: &str,
    package: &'static str,
) -> Result<(), BootDiskError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let fail = |reason: String| BootDiskError::Tool {
        cmd: shown.clone(),
        reason,
        package,
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extlinux_has_a_label_per_kernel_and_takes_the_command_line_from_the_environment() {
        let c = extlinux_conf(true);
        assert!(c.contains("default stock\n"));
        assert!(c.contains(
            "label stock\n  kernel /Image\n  initrd /initrd\n  append ${snapboot_cmdline}\n"
        ));
        assert!(c.contains("label restore\n  kernel /restore/Image\n"));
        assert!(c.contains(
            "label capture\n  kernel /Image\n  initrd /initrd\n  append ${snapboot_cmdline} snapboot.capture\n"
        ));
        assert!(!extlinux_conf(false).contains("restore"));
    }

    #[test]
    fn the_boot_script_reads_the_request_partition_and_boots_the_menu_it_is_written_beside() {
        assert!(BOOT_CMD.contains(&format!(
            "part start ${{devtype}} ${{devnum}} {ENV_PARTITION_NUMBER} snapboot_envblk"
        )));
        assert!(BOOT_CMD.contains("/snapboot/extlinux.conf\n"));
        assert!(BOOT_CMD.contains("setenv pxe_label_override capture"));
        // Cleared by writing back a whole area (its size in blocks) without the variable.
        let area = devinstall::bootloader::uboot::AREA_BYTES;
        assert!(BOOT_CMD.contains(&format!(
            "env export -c -s {area:#x} ${{kernel_addr_r}} snapboot_once; then"
        )));
        assert!(BOOT_CMD.contains(&format!(
            "write ${{kernel_addr_r}} ${{snapboot_envblk}} {:#x}; then",
            area / 512
        )));
        let clear = BOOT_CMD.find("write ${kernel_addr_r}").unwrap();
        assert!(
            clear < BOOT_CMD.find("sysboot").unwrap(),
            "cleared before booting"
        );
    }

    #[test]
    fn a_new_disk_asks_for_nothing_in_an_environment_u_boot_takes() {
        use devinstall::bootloader::uboot::{requested, AREA_BYTES};
        let part = no_request().unwrap();
        assert_eq!(part.len() as u64, ENV_PARTITION_BYTES);
        let env = ubootenv::Env::from_area(&part, AREA_BYTES).unwrap();
        assert!(env.is_empty(), "{env:?}");
        assert!(!requested(&part));
        // The device's request goes into it and reads back; one flipped byte is refused.
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("ubootenv");
        fs::write(&dev, &part).unwrap();
        devinstall::bootloader::uboot::write_request(&dev).unwrap();
        let mut written = fs::read(&dev).unwrap();
        assert!(requested(&written));
        written[AREA_BYTES - 1] ^= 0x80;
        assert!(matches!(
            ubootenv::Env::from_area(&written, AREA_BYTES),
            Err(ubootenv::EnvError::Crc { .. })
        ));
    }

    #[test]
    fn the_empty_area_is_what_mkenvimage_makes_of_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("no-request.env");
        let area = devinstall::bootloader::uboot::AREA_BYTES;
        let mut mkenvimage = Command::new("mkenvimage");
        mkenvimage.args(["-s", &format!("{area:#x}"), "-p", "0", "-o"]);
        match mkenvimage.arg(&out).arg("/dev/null").status() {
            Ok(made) if made.success() => {}
            _ => return eprintln!("no mkenvimage (u-boot-tools): skipped"),
        }
        assert_eq!(fs::read(&out).unwrap(), no_request().unwrap()[..area]);
    }

    #[test]
    fn partitions_are_aligned_and_back_to_back() {
        let s = sfdisk_script(&[
            ("boot", 40 * MIB),
            ("root", 3 * MIB),
            ("coldkernel", 35 * MIB),
        ]);
        let starts: Vec<&str> = s.lines().filter_map(|l| l.split(", ").next()).collect();
        assert_eq!(
            &starts[2..],
            ["start=2048", "start=83968", "start=90112"],
            "{s}"
        );
        assert!(s.contains("name=coldkernel"));
        assert_eq!(round_mib(1), MIB);
        assert_eq!(round_mib(MIB), MIB);
    }
}
