//! The `debian` workload: a systemd-based Debian system built from Debian's own packages,
//! with its initramfs made by Debian's initramfs-tools, and snapboot put in the way a user
//! puts it into their device (its Debian package, with apt; then `mkinitramfs`).
//!
//! ```text
//!   mmdebstrap (host, Debian's mirror) --> SNAPBOOT_HOME/debian/base-<key>.tar  (cached)
//!        |  (arm64: Debian's arm64 packages, their maintainer scripts run under
//!        |   qemu-user through binfmt_misc, `crate::emulation`; base-<release>-arm64-<key>.tar)
//!        |  unpacked into BUNDLE/stage
//!        v
//!   stage: + the bundle kernel's modules the board needs (depmod)
//!          + /opt/app/app.py and snapboot-app.service (Type=notify; the console's reader)
//!          + read-only root: fstab tmpfs mounts, machine-id, masked gettys on the console
//!          + apt-get install /tmp/snapboot_VERSION_ARCH.deb (`crate::debpkg`), the capture
//!            ordered after the application, the store's modules listed, the store named
//!            in /etc/snapboot/snapboot.conf (the UEFI PC's partition; `board::uefi`)
//!          + x86_64 initramfs-tools: RAUC's A/B set-up and the board's device queries
//!            (guest/rauc/; inert unless GRUB boots it with rauc.slot=)
//!          + chroot stage mkinitramfs  --> BUNDLE/initramfs.cpio (initramfs-tools' archive)
//!        |  mksquashfs
//!        v
//!   BUNDLE/rootfs.img; the board boots it with root=/dev/vda rootfstype=squashfs ro
//! ```
//!
//! The board's own `/init` and `snapboot start` take no part: systemd is PID 1, and
//! initramfs-tools' boot script runs `snapboot resume` before the root is mounted.
//!
//! Every `chroot` step runs the root's own programs: on the arm64 board's root that is
//! arm64 apt, depmod and mkinitramfs under qemu-user, so the root and its initramfs are what
//! a device running that Debian would make itself. The root device (`root=`) and the console
//! the application owns are the board's (`workload::root_device`, `Arch::serial_console`).

use crate::emulation::EmulationError;
use crate::workload::InitKind;
use devinstall::install::Generator;
use guestarch::Arch;
use hostkernel::modules::{ModuleError, ModuleTree};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Packages of the root besides Debian's `minbase` variant (Essential and apt).
pub const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "initramfs-tools",
    "busybox",
    "kmod",
    "python3",
    "procps",
    "zstd",
];

/// [`PACKAGES`] for a root whose initramfs `g` makes: dracut takes initramfs-tools' place
/// (the two conflict).
pub fn packages(g: Generator) -> Vec<&'static str> {
    PACKAGES
        .iter()
        .map(|&p| match (p, g) {
            ("initramfs-tools", Generator::Dracut) => "dracut",
            _ => p,
        })
        .collect()
}

/// The packages mmdebstrap includes in the base root of `arch` whose initramfs `g` makes:
/// [`packages`], and RAUC's ([`crate::rauc_root::RAUC_PACKAGES`]) for the UEFI PC's root.
pub fn root_packages(g: Generator, arch: Arch) -> Vec<&'static str> {
    let mut p = packages(g);
    if crate::rauc_root::rauc_root(arch, g) {
        p.extend(crate::rauc_root::RAUC_PACKAGES);
    }
    p
}

/// The initramfs generator of a Debian workload.
pub fn generator_of(init: InitKind) -> Generator {
    match init {
        InitKind::DebianDracut | InitKind::DebianDracutSystemd => Generator::Dracut,
        _ => Generator::InitramfsTools,
    }
}

/// dracut's modules for the board's initramfs: a generic image with what a block root
/// needs, and with `systemd`, systemd as the initramfs's init (dracut's `dracut-systemd`
/// runs the hooks, snapboot's too, as services).
pub fn dracut_modules(systemd: bool) -> String {
    let mut m = vec![
        "base",
        "fs-lib",
        "rootfs-block",
        "udev-rules",
        "kernel-modules",
    ];
    if systemd {
        m.extend([
            "systemd",
            "systemd-initrd",
            "systemd-udevd",
            "systemd-journald",
            "dracut-systemd",
        ]);
    }
    m.push("snapboot");
    format!(" {} ", m.join(" "))
}

/// The application's unit (in the root's /etc/systemd/system).
pub const APP_UNIT: &str = "snapboot-app.service";

/// snapboot's capture unit (installed by `snapboot install`); the application's
/// `recapture` query restarts it, which captures again.
const CAPTURE_UNIT: &str = "snapboot-capture.service";

/// Modules the initramfs loads to find the store and the root (`MODULES=list`).
pub const INITRAMFS_MODULES: &[&str] = &["virtio_pci", "virtio_blk", "squashfs"];

/// Modules the running system needs: the initramfs' ones, the RNG, lazy capture's
/// device-mapper stack (dm-crypt too) and zram, deferred memory's virtio-mem, ext4 for the data disk
/// (a module in Debian's kernel), the ESP's FAT and efivarfs.
pub const ROOT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_blk",
    "squashfs",
    "virtio_rng",
    "dm_mod",
    "dm_snapshot",
    "dm_verity",
    // An encrypted lazy capture's dm-crypt and its cipher (modprobe loads them on demand).
    "dm_crypt",
    "ecb",
    "xts",
    "zram",
    "lzo_rle",
    "virtio_mem",
    "ext4",
    // ext4's checksums (a soft dependency modules.dep does not list).
    "crc32c_generic",
    // The UEFI board's ESP (FAT; its code page and character sets), mounted at /boot/efi
    // to edit GRUB's environment (`snapboot capture --next-boot`).
    "vfat",
    "nls_cp437",
    "nls_ascii",
    "nls_utf8",
    // RAUC's update bundle (a squashfs with dm-verity) is set up on
    // a loop device (`install_rauc`): a module in Debian's kernel.
    "loop",
    // The UEFI board's EFI variables (/sys/firmware/efi/efivars, which systemd mounts): a
    // module in Debian's kernel; the `efivar` query calls the firmware through it.
    "efivarfs",
];

/// Scale of the application's state: a quarter of `app`'s, so a cold boot under TCG stays
/// within a CI budget while the state is still tens of MiB.
pub const APP_SCALE: &str = "0.25";

/// Label of the optional data disk (`mkfs.ext4 -L snapdata`).
pub const DATA_LABEL: &str = "snapdata";

/// The data partition's mount unit: started on every boot after the capture point, by
/// `snapboot-restored.target` after a restore and by `snapboot-cold.target` at the ready
/// point of any other boot (after its capture, if it takes one); skipped (not failed) on a
/// board without the disk. `What=` is the label, which mount(8) resolves, not the
/// `/dev/disk/by-label/` link: a device path makes systemd queue a job for the device unit
/// with the mount's, and on a board without the disk that job waited out the device
/// timeout (90 s) before the condition was even checked, so the system stayed `starting`
/// (measured after a restore: `dev-disk-by\x2dlabel-snapdata.device` start running,
/// data.mount and snapboot-restored.target waiting). The disk is there long before the
/// capture point, so nothing needs to wait for it.
pub const DATA_MOUNT: &str = "\
[Unit]
Description=Writable data (label snapdata), mounted on every boot after the capture point
ConditionPathExists=/dev/disk/by-label/snapdata

[Mount]
What=LABEL=snapdata
Where=/data
Type=ext4

[Install]
WantedBy=snapboot-restored.target snapboot-cold.target
";

/// Appends a line to `/data/boots` on every boot after the capture point and reports the
/// count and the boot's outcome on the console (`snapboot-data: SOURCE FSTYPE boots=N
/// outcome: O`, the first line of `snapboot status`).
pub const DATA_LOG_SERVICE: &str = "\
[Unit]
Description=Count the boots on the data partition
Requires=data.mount
After=data.mount
ConditionPathExists=/dev/disk/by-label/snapdata

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'date +%%s >> /data/boots && sync && echo \"snapboot-data: $$(findmnt -n -o SOURCE,FSTYPE /data) boots=$$(wc -l < /data/boots) $$(/usr/sbin/snapboot status | head -n 1)\" > /dev/console'

[Install]
WantedBy=snapboot-restored.target snapboot-cold.target
";

/// Why the Debian root could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DebianError {
    /// A host tool is missing.
    #[error("{tool} not found: install the package {package} (README set-up)")]
    MissingTool {
        /// The command.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A host command failed.
    #[error("`{cmd}` failed: {reason}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status and the end of its error output.
        reason: String,
    },
    /// Module resolution failed.
    #[error(transparent)]
    Module(#[from] ModuleError),
    /// The host cannot run the root's programs.
    #[error(transparent)]
    Emulation(#[from] EmulationError),
    /// snapboot's package could not be built.
    #[error("the snapboot package")]
    Package(#[from] crate::debpkg::DebError),
    /// The package's config file has no commented-out store line to fill in.
    #[error("{0} has no `#store = ` line")]
    NoStoreLine(String),
    /// Filesystem error.
    #[error("{path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DebianError + '_ {
    move |source| DebianError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs a host command; a failure carries its status and the last lines of its stderr.
fn run(cmd: &mut Command) -> Result<(), DebianError> {
    hostcmd::output(cmd)
        .map(drop)
        .map_err(|f| DebianError::Command {
            cmd: f.cmd,
            reason: f.reason,
        })
}

fn need(tool: &'static str, package: &'static str) -> Result<(), DebianError> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(DebianError::MissingTool { tool, package })
    }
}

/// The host's Debian release name (`VERSION_CODENAME` of /etc/os-release): the guest
/// kernel comes from the same release.
pub fn host_codename(os_release: &str) -> Option<String> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// The cache key of a base root: release, package list and architecture (the x86_64 PC's
/// key names none, as before the arm64 root: its cached tarball stays valid).
pub fn base_key(codename: &str, packages: &[&str], arch: Arch) -> String {
    let mut text = format!("{codename} minbase {}", packages.join(","));
    if arch != Arch::X86_64 {
        text.push_str(&format!(" {}", arch.debian()));
    }
    blake3::hash(text.as_bytes()).to_hex()[..16].to_string()
}

/// The file name of a cached base root (`base-bookworm-KEY.tar`, `base-bookworm-arm64-KEY.tar`).
pub fn base_name(codename: &str, packages: &[&str], arch: Arch) -> String {
    let key = base_key(codename, packages, arch);
    match arch {
        Arch::X86_64 => format!("base-{codename}-{key}.tar"),
        _ => format!("base-{codename}-{}-{key}.tar", arch.debian()),
    }
}

/// The base root of `arch` as a tarball, built with mmdebstrap once and kept in
/// `cache_dir`. A foreign architecture's packages are configured by their own maintainer
/// scripts under qemu-user (`crate::emulation`), as mmdebstrap does on such a host.
pub fn base_tarball(
    cache_dir: &Path,
    packages: &[&str],
    arch: Arch,
) -> Result<PathBuf, DebianError> {
    let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
    let codename = host_codename(&os).unwrap_or_else(|| "bookworm".into());
    let tar = cache_dir.join(base_name(&codename, packages, arch));
    if tar.is_file() {
        return Ok(tar);
    }
    need("mmdebstrap", "mmdebstrap")?;
    crate::emulation::ensure(arch)?;
    fs::create_dir_all(cache_dir).map_err(io(cache_dir))?;
    // This process's own: two builds at once each write theirs; either result is the same.
    let partial = tar.with_extension(format!("tar.partial.{}", std::process::id()));
    let _ = fs::remove_file(&partial);
    eprintln!(
        "snapboot: building the Debian {codename} {} root with mmdebstrap (once; cached in {})",
        arch.debian(),
        cache_dir.display()
    );
    let started = std::time::Instant::now();
    run(Command::new("mmdebstrap")
        .args([
            "--variant=minbase",
            "--mode=root",
            "--format=tar",
            "--quiet",
        ])
        .arg(format!("--architectures={}", arch.debian()))
        .arg(format!("--include={}", packages.join(",")))
        // No documentation or translations on a device.
        .arg("--dpkgopt=path-exclude=/usr/share/{doc,man,info,locale}/*")
        .arg("--dpkgopt=path-include=/usr/share/locale/locale.alias")
        .arg(&codename)
        .arg(&partial)
        .arg("http://deb.debian.org/debian"))?;
    fs::rename(&partial, &tar).map_err(io(&tar))?;
    eprintln!(
        "snapboot: the Debian {codename} {} root built in {:.0} s",
        arch.debian(),
        started.elapsed().as_secs_f64()
    );
    Ok(tar)
}

/// What [`build`] needs.
#[derive(Debug, Clone)]
pub struct DebianBuild<'a> {
    /// The unpacked kernel's modules directory (`lib/modules/<release>`).
    pub modules_dir: &'a Path,
    /// The kernel release.
    pub release: &'a str,
    /// The kernel's build configuration (mkinitramfs checks its compressor against it).
    pub config: Option<&'a Path>,
    /// The static snapboot binary to install.
    pub snapboot_bin: &'a Path,
    /// The application program.
    pub app_py: &'a str,
    /// The record of the image kernel for restore kernels (`/etc/snapboot/image-kernel`).
    pub image_kernel: Option<&'a str>,
    /// Where the base root tarball is cached.
    pub cache_dir: &'a Path,
    /// The staging directory (emptied first, left for the caller to squash and remove).
    pub stage: &'a Path,
    /// Where the initramfs goes.
    pub initramfs: &'a Path,
    /// The root's architecture (the kernel's): its packages, its console.
    pub arch: Arch,
    /// What makes the initramfs.
    pub generator: Generator,
    /// dracut: systemd in the initramfs too (its `systemd` and `dracut-systemd` modules).
    pub initramfs_systemd: bool,
    /// An installed system's root: ext4, kept read-only by Debian's `overlayroot`
    /// ([`OVERLAYROOT_CONF`]), instead of the board's squashfs with tmpfs mounts.
    pub overlayroot: bool,
}

/// `/etc/overlayroot.conf` of a root `overlayroot` keeps read-only: the root filesystem
/// mounted read-only at `/media/root-ro`, a tmpfs at `/media/root-rw` for every write, the
/// overlay of the two as `/` (overlayroot's init-bottom script, initramfs-tools).
pub const OVERLAYROOT_CONF: &str = "overlayroot=\"tmpfs\"\n";

/// The kernel modules an `overlayroot` root needs besides [`ROOT_MODULES`]: the overlay
/// filesystem (its hook puts it into the initramfs).
pub const OVERLAYROOT_MODULES: &[&str] = &["overlay"];

/// The fstab of an installed system whose root is the board's ext4 disk: nothing but the
/// root, as the installer writes it (overlayroot rewrites it in the overlay).
pub const INSTALLED_FSTAB: &str =
    "# Written by snapboot for the board: an installed system's root.\n\
/dev/vda / ext4 errors=remount-ro 0 1\n";

/// Builds the root tree in `stage` and its initramfs.
pub fn build(b: &DebianBuild) -> Result<(), DebianError> {
    need("chroot", "coreutils")?;
    // The chroot steps run the root's programs, a cached root's too.
    crate::emulation::ensure(b.arch)?;
    let tar = base_tarball(b.cache_dir, &root_packages(b.generator, b.arch), b.arch)?;
    let stage = b.stage;
    let _ = fs::remove_dir_all(stage);
    fs::create_dir_all(stage).map_err(io(stage))?;
    run(Command::new("tar")
        .args(["--numeric-owner", "-xpf"])
        .arg(&tar)
        .arg("-C")
        .arg(stage))?;
    add_modules(b, stage)?;
    let src = b.config.ok_or_else(|| DebianError::Command {
        cmd: "mkinitramfs".into(),
        reason: format!(
            "the kernel {} comes without its config (boot/config-{}), which mkinitramfs reads",
            b.release, b.release
        ),
    })?;
    let config = stage.join(format!("boot/config-{}", b.release));
    fs::copy(src, &config).map_err(io(src))?;
    configure(b, stage)?;
    esp_mount_point(stage)?;
    install_package(b, stage)?;
    if crate::rauc_root::rauc_root(b.arch, b.generator) {
        crate::rauc_root::install_rauc(stage).map_err(|e| DebianError::Io {
            path: e.path,
            source: e.source,
        })?;
    }
    if b.overlayroot {
        install_overlayroot(stage)?;
    }
    let inside = format!("/boot/initrd.img-{}", b.release);
    make_initramfs(b, stage, &inside)?;
    let made = stage.join(inside.trim_start_matches('/'));
    fs::copy(&made, b.initramfs).map_err(io(&made))?;
    fs::remove_file(&made).map_err(io(&made))?;
    Ok(())
}

/// The initramfs, made in the root by its generator: initramfs-tools' mkinitramfs, or dracut
/// told to make a generic image with the board's drivers and the modules a block root needs.
fn make_initramfs(b: &DebianBuild, stage: &Path, inside: &str) -> Result<(), DebianError> {
    let mut cmd = Command::new("chroot");
    cmd.arg(stage);
    match b.generator {
        Generator::InitramfsTools => cmd.args(["mkinitramfs", "-o", inside, b.release]),
        Generator::Dracut => {
            write(
                stage,
                "etc/dracut.conf.d/snapboot-board.conf",
                &format!(
                    "# Written by snapboot for the board: not for the build host, the board's \
                     drivers, {}.\n\
                     hostonly=\"no\"\n\
                     drivers=\" {} \"\n\
                     dracutmodules=\"{}\"\n\
                     compress=\"zstd\"\n",
                    if b.initramfs_systemd {
                        "systemd in the initramfs"
                    } else {
                        "no systemd in the initramfs"
                    },
                    INITRAMFS_MODULES.join(" "),
                    dracut_modules(b.initramfs_systemd)
                ),
            )?;
            cmd.args(["dracut", "--force", "--kver", b.release, inside])
        }
    };
    run(&mut cmd)
}

/// Debian's `overlayroot`, installed with apt from Debian's mirror (the root's own
/// sources; the host's resolver for the while) and switched on, as README.Debian tells an
/// administrator: the root stays an ext4 filesystem that is never written, and the
/// initramfs (its hook, rebuilt next) mounts the overlay. The board's squashfs roots need
/// none of it.
fn install_overlayroot(stage: &Path) -> Result<(), DebianError> {
    let resolv = stage.join("etc/resolv.conf");
    let kept = fs::read(&resolv).ok();
    let _ = fs::remove_file(&resolv);
    fs::copy("/etc/resolv.conf", &resolv).map_err(io(Path::new("/etc/resolv.conf")))?;
    let installed = run(Command::new("chroot")
        .arg(stage)
        .args(["apt-get", "-q", "update"]))
    .and_then(|()| {
        run(Command::new("chroot")
            .arg(stage)
            .args([
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "overlayroot",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    });
    let _ = fs::remove_file(&resolv);
    if let Some(k) = kept {
        fs::write(&resolv, k).map_err(io(&resolv))?;
    }
    installed?;
    run(Command::new("chroot").arg(stage).args(["apt-get", "clean"]))?;
    let lists = stage.join("var/lib/apt/lists");
    if lists.is_dir() {
        for e in fs::read_dir(&lists).map_err(io(&lists))?.flatten() {
            if e.path().is_file() {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    write(stage, "etc/overlayroot.conf", OVERLAYROOT_CONF)?;
    write(stage, "etc/fstab", INSTALLED_FSTAB)?;
    esp_mount_point(stage)?;
    // initramfs-tools' module list: the ext4 root's driver too.
    write(
        stage,
        "etc/initramfs-tools/modules",
        &format!(
            "{}\n",
            INITRAMFS_MODULES
                .iter()
                .chain(&["ext4", "crc32c_generic"])
                .copied()
                .collect::<Vec<_>>()
                .join("\n")
        ),
    )
}

/// snapboot goes in the way the documentation tells a user to put it in: its Debian package
/// (built here from the board's device binary), installed with apt; then what the
/// administrator configures: the capture waits for the application, and the initramfs
/// loads the store's drivers before udev (the store is a virtio disk; on a device
/// `snapboot install --store /dev/mmcblk0p3` finds these).
fn install_package(b: &DebianBuild, stage: &Path) -> Result<(), DebianError> {
    let tmp = stage.join("tmp");
    let deb = crate::debpkg::build(b.snapboot_bin, b.arch, &tmp)?;
    let inside = Path::new("/tmp").join(deb.file_name().unwrap_or_default());
    run(Command::new("chroot")
        .arg(stage)
        .args(["apt-get", "install", "-y", "-q", "--no-install-recommends"])
        .arg(&inside)
        .env("DEBIAN_FRONTEND", "noninteractive"))?;
    fs::remove_file(&deb).map_err(io(&deb))?;
    let conf = stage.join(bootparams::config::CONFIG_PATH.trim_start_matches('/'));
    let text = fs::read_to_string(&conf).map_err(io(&conf))?;
    let named = name_the_store(&text, STORE_ADDRESS)
        .ok_or_else(|| DebianError::NoStoreLine(bootparams::config::CONFIG_PATH.into()))?;
    fs::write(&conf, named).map_err(io(&conf))?;
    write(
        stage,
        devinstall::install::DROPIN_PATH,
        &devinstall::install::after_dropin(&[APP_UNIT.to_string()]),
    )?;
    write(
        stage,
        devinstall::install::STORE_MODULES_PATH,
        "virtio_pci\nvirtio_blk\n",
    )
}

/// The store the root's config file names, as docs/real-boards.md has a PC's administrator
/// write it: the UEFI PC's store partition (`board::uefi::STORE_NAME`). The PVH board names
/// its store disk on the kernel command line, which overrides the file.
pub const STORE_ADDRESS: &str = "PARTLABEL=snapstore";

/// The package's default config file with its commented-out `store` line set to `address`
/// (`sed -i 's/^#store = .*/store = ADDRESS/'`); none without such a line.
fn name_the_store(text: &str, address: &str) -> Option<String> {
    let mut found = false;
    let lines: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix("#store = ") {
            Some(_) if !found => {
                found = true;
                format!("store = {address}")
            }
            _ => l.to_string(),
        })
        .collect();
    found.then(|| lines.join("\n") + "\n")
}

/// The bundle kernel's modules the board needs, with their dependencies, in the root's
/// `/lib/modules/<release>`, indexed by the root's own depmod.
fn add_modules(b: &DebianBuild, stage: &Path) -> Result<(), DebianError> {
    let tree = ModuleTree::open(b.modules_dir)?;
    let dest = stage.join("lib/modules").join(b.release);
    let mut wanted = ROOT_MODULES.to_vec();
    if b.overlayroot {
        wanted.extend(OVERLAYROOT_MODULES);
    }
    for m in tree.resolve(&wanted)? {
        let rel = m.path.strip_prefix(b.modules_dir).unwrap_or(&m.path);
        let to = dest.join(rel);
        if let Some(p) = to.parent() {
            fs::create_dir_all(p).map_err(io(p))?;
        }
        fs::copy(&m.path, &to).map_err(io(&m.path))?;
    }
    for f in [
        "modules.order",
        "modules.builtin",
        "modules.builtin.modinfo",
    ] {
        let src = b.modules_dir.join(f);
        if src.is_file() {
            fs::copy(&src, dest.join(f)).map_err(io(&src))?;
        }
    }
    run(Command::new("chroot")
        .arg(stage)
        .args(["depmod", "-a", b.release]))
}

pub(crate) fn write(stage: &Path, rel: &str, text: &str) -> Result<(), DebianError> {
    let p = stage.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(io(d))?;
    }
    fs::write(&p, text).map_err(io(&p))
}

pub(crate) fn link(stage: &Path, rel: &str, target: &str) -> Result<(), DebianError> {
    let p = stage.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(io(d))?;
    }
    let _ = fs::remove_file(&p);
    symlink(target, &p).map_err(io(&p))
}

/// `/boot/efi`, where the UEFI board's ESP (GPT name `esp`) is mounted on demand (`mount
/// /boot/efi`; `noauto`: the PVH board has no ESP): GRUB's `grub/grubenv` is there.
fn esp_mount_point(stage: &Path) -> Result<(), DebianError> {
    let dir = stage.join("boot/efi");
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    let fstab = stage.join("etc/fstab");
    let mut text = fs::read_to_string(&fstab).map_err(io(&fstab))?;
    text.push_str("PARTLABEL=esp /boot/efi vfat noauto,umask=0077 0 0\n");
    fs::write(&fstab, text).map_err(io(&fstab))
}

/// The application's `nextboot` query: what a device does before a planned power-off to
/// have its next boot capture. The ESP (GRUB's environment on the UEFI board) is mounted only
/// for the write; the power-off follows a request that was written.
pub const NEXT_BOOT_CMD: &str = "mount /boot/efi && /usr/sbin/snapboot capture --next-boot; \
     s=$?; umount /boot/efi; [ $s = 0 ] && systemctl --no-block poweroff; exit $s";

/// The application's unit: it reads queries from the board's console (`console`, e.g.
/// `ttyS0`) and answers there (the board's probe), and tells systemd when its state is built.
pub fn app_unit(console: &str) -> String {
    format!(
        "[Unit]\n\
         Description=snapboot's app workload: in-memory state, answers queries on the console\n\
         \n\
         [Service]\n\
         Type=notify\n\
         NotifyAccess=main\n\
         Environment=APP_SCALE={APP_SCALE}\n\
         Environment=\"APP_RECAPTURE_CMD=systemctl restart {CAPTURE_UNIT}\"\n\
         Environment=\"APP_NEXT_BOOT_CMD={NEXT_BOOT_CMD}\"\n\
         ExecStart=/usr/bin/python3 /opt/app/app.py\n\
         StandardInput=tty-force\n\
         StandardOutput=tty\n\
         StandardError=journal\n\
         TTYPath=/dev/{console}\n\
         TTYReset=no\n\
         TTYVHangup=no\n\
         TimeoutStartSec=infinity\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n"
    )
}

/// The application's health check, the pattern docs/real-boards.md shows: it runs each time
/// `boot-complete.target` is started (snapboot restarts the target after a restore, to
/// confirm it) and passes when the application is still running a second later. The
/// application answers only on the console, so being up is what this check can see; a real
/// one asks the application (a socket, an HTTP endpoint). `Requisite=` fails the check at
/// once when the application is not running, rather than starting it again.
pub const APP_CHECK_UNIT: &str = "[Unit]\n\
     Description=snapboot's app workload: health check (still running a second after a restore)\n\
     Requisite=snapboot-app.service\n\
     After=snapboot-app.service\n\
     Before=boot-complete.target\n\
     \n\
     [Service]\n\
     Type=oneshot\n\
     ExecStart=/bin/sleep 1\n\
     ExecStart=/bin/systemctl is-active --quiet snapboot-app.service\n\
     \n\
     [Install]\n\
     RequiredBy=boot-complete.target\n";

/// The root's confirmed.d hook.
const CONFIRMED_HOOK: &str = "etc/snapboot/confirmed.d/50-board-console";

/// What it runs: one console line naming the confirmed restore.
const CONFIRMED_HOOK_SCRIPT: &str = "#!/bin/sh\n\
     # snapboot runs this once a restore is confirmed; a device would mark its boot good here.\n\
     echo \"snapboot-board: confirmed.d: $SNAPBOOT_IMAGE generation $SNAPBOOT_GENERATION, \
     confirmed by $SNAPBOOT_CONFIRMED_BY\" > /dev/console\n";

/// The health check's unit name.
pub const APP_CHECK: &str = "snapboot-app-check.service";

/// A read-only root that systemd is content with: tmpfs where the system writes, a fixed
/// machine id, nothing else on the console (the application reads it), no timers of a
/// package manager that cannot write.
fn configure(b: &DebianBuild, stage: &Path) -> Result<(), DebianError> {
    write(stage, "opt/app/app.py", b.app_py)?;
    write(
        stage,
        &format!("etc/systemd/system/{APP_UNIT}"),
        &app_unit(b.arch.serial_console()),
    )?;
    link(
        stage,
        &format!("etc/systemd/system/multi-user.target.wants/{APP_UNIT}"),
        &format!("/etc/systemd/system/{APP_UNIT}"),
    )?;
    write(
        stage,
        &format!("etc/systemd/system/{APP_CHECK}"),
        APP_CHECK_UNIT,
    )?;
    link(
        stage,
        &format!("etc/systemd/system/boot-complete.target.requires/{APP_CHECK}"),
        &format!("/etc/systemd/system/{APP_CHECK}"),
    )?;
    // A confirmed.d hook where a device tells its boot loader that the boot is good (`rauc
    // status mark-good`, `fw_setenv upgrade_available 0`); here it says so on the console.
    write(stage, CONFIRMED_HOOK, CONFIRMED_HOOK_SCRIPT)?;
    let hook = stage.join(CONFIRMED_HOOK);
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).map_err(io(&hook))?;
    // Writable data, the supported pattern: a block filesystem mounted on every boot after
    // the capture point (never at capture, which refuses while one is mounted), here a disk
    // labelled `snapdata` when the board has one, with a service that counts the boots on it.
    fs::create_dir_all(stage.join("data")).map_err(io(&stage.join("data")))?;
    write(stage, "etc/systemd/system/data.mount", DATA_MOUNT)?;
    write(
        stage,
        "etc/systemd/system/snapboot-data-log.service",
        DATA_LOG_SERVICE,
    )?;
    for target in ["snapboot-restored.target", "snapboot-cold.target"] {
        for unit in ["data.mount", "snapboot-data-log.service"] {
            link(
                stage,
                &format!("etc/systemd/system/{target}.wants/{unit}"),
                &format!("/etc/systemd/system/{unit}"),
            )?;
        }
    }
    write(
        stage,
        "etc/fstab",
        "# Written by snapboot: the root is a read-only squashfs; the system writes to tmpfs.\n\
         tmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0\n\
         tmpfs /var/tmp tmpfs mode=1777,nosuid,nodev 0 0\n\
         tmpfs /var/log tmpfs mode=0755,nosuid,nodev 0 0\n\
         tmpfs /var/lib/systemd tmpfs mode=0755,nosuid,nodev 0 0\n\
         tmpfs /var/cache tmpfs mode=0755,nosuid,nodev 0 0\n",
    )?;
    let id = blake3::hash(format!("snapboot-debian {}", b.release).as_bytes()).to_hex();
    write(stage, "etc/machine-id", &format!("{}\n", &id[..32]))?;
    write(stage, "etc/hostname", "snapboot-debian\n")?;
    if let Some(record) = b.image_kernel {
        write(stage, "etc/snapboot/image-kernel", record)?;
    }
    // ConditionNeedsUpdate= units (ldconfig, systemd-hwdb-update...) would try to write
    // /etc and /var; these stamps say the tree is up to date.
    write(stage, "etc/.updated", "")?;
    write(stage, "var/.updated", "")?;
    run(Command::new("chroot")
        .arg(stage)
        .args(["systemctl", "set-default", "multi-user.target"]))?;
    let console_getty = format!("serial-getty@{}.service", b.arch.serial_console());
    for unit in [
        console_getty.as_str(),
        "getty@tty1.service",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
        "dpkg-db-backup.timer",
        "e2scrub_all.timer",
        "fstrim.timer",
    ] {
        link(stage, &format!("etc/systemd/system/{unit}"), "/dev/null")?;
    }
    // initramfs-tools: the board's drivers only, and no kernel-native resume device.
    write(
        stage,
        "etc/initramfs-tools/modules",
        &format!("{}\n", INITRAMFS_MODULES.join("\n")),
    )?;
    write(
        stage,
        "etc/initramfs-tools/conf.d/snapboot-board.conf",
        "# Written by snapboot for the board: its drivers only (etc/initramfs-tools/modules).\n\
         MODULES=list\nRESUME=none\nCOMPRESS=zstd\n",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_comes_from_os_release() {
        let os = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\n";
        assert_eq!(host_codename(os).as_deref(), Some("bookworm"));
        assert_eq!(host_codename("ID=debian\nVERSION_CODENAME=\n"), None);
        assert_eq!(host_codename(""), None);
    }

    #[test]
    fn the_cache_key_follows_release_and_packages() {
        let x86 = Arch::X86_64;
        assert_eq!(
            base_key("bookworm", PACKAGES, x86),
            base_key("bookworm", PACKAGES, x86)
        );
        assert_ne!(
            base_key("bookworm", PACKAGES, x86),
            base_key("trixie", PACKAGES, x86)
        );
        assert_eq!(base_key("bookworm", PACKAGES, x86).len(), 16);
        let dracut = packages(Generator::Dracut);
        assert_ne!(
            base_key("bookworm", &dracut, x86),
            base_key("bookworm", PACKAGES, x86)
        );
        // The arm64 root is another tarball, named for its architecture.
        let arm = base_name("bookworm", PACKAGES, Arch::Arm64);
        assert!(arm.starts_with("base-bookworm-arm64-"), "{arm}");
        assert_ne!(arm, base_name("bookworm", PACKAGES, x86));
        assert!(dracut.contains(&"dracut") && !dracut.contains(&"initramfs-tools"));
    }

    #[test]
    fn only_the_uefi_pc_root_has_rauc() {
        let pc = root_packages(Generator::InitramfsTools, Arch::X86_64);
        for p in crate::rauc_root::RAUC_PACKAGES {
            assert!(pc.contains(p), "{p}: {pc:?}");
        }
        // The arm64 and dracut roots keep their lists, hence their cached tarballs.
        let arm = root_packages(Generator::InitramfsTools, Arch::Arm64);
        assert_eq!(arm, packages(Generator::InitramfsTools));
        assert_eq!(
            root_packages(Generator::Dracut, Arch::X86_64),
            packages(Generator::Dracut)
        );
        assert!(
            !arm.iter()
                .any(|p| crate::rauc_root::RAUC_PACKAGES.contains(p)),
            "{arm:?}"
        );
        assert!(ROOT_MODULES.contains(&"loop"));
    }

    #[test]
    fn dracut_puts_systemd_in_only_when_asked() {
        let plain = dracut_modules(false);
        let sd = dracut_modules(true);
        assert!(!plain.contains("systemd"), "{plain}");
        assert!(
            sd.contains(" systemd ") && sd.contains(" dracut-systemd "),
            "{sd}"
        );
        for m in [&plain, &sd] {
            assert!(m.starts_with(' ') && m.ends_with(" snapboot "), "{m}");
        }
        assert_eq!(
            generator_of(InitKind::DebianDracutSystemd),
            Generator::Dracut
        );
    }

    #[test]
    fn the_app_unit_owns_the_console_and_notifies() {
        let u = app_unit("ttyS0");
        assert!(u.contains("Type=notify\n"), "{u}");
        assert!(u.contains("TTYPath=/dev/ttyS0\n"), "{u}");
        assert!(app_unit("ttyAMA0").contains("TTYPath=/dev/ttyAMA0\n"));
        assert!(u.contains("StandardInput=tty-force\n"), "{u}");
        assert!(u.contains(&format!("APP_SCALE={APP_SCALE}")), "{u}");
        // systemd expands no `$` in Environment=, so the shell gets the command as written.
        assert!(
            u.contains(&format!(
                "Environment=\"APP_NEXT_BOOT_CMD={NEXT_BOOT_CMD}\"\n"
            )),
            "{u}"
        );
        assert!(!NEXT_BOOT_CMD.contains(['"', '%', '\n']), "{NEXT_BOOT_CMD}");
    }

    #[test]
    fn the_root_names_the_store_partition_in_the_packages_config_file() {
        let shipped = bootparams::config::default_file();
        let named = name_the_store(&shipped, STORE_ADDRESS).unwrap();
        let path = bootparams::config::CONFIG_PATH;
        let file = bootparams::config::ConfigFile::parse(path, &named).unwrap();
        let settings = bootparams::config::effective("", Some(file)).unwrap();
        assert_eq!(
            settings.params.store.map(|a| a.to_string()).as_deref(),
            Some(STORE_ADDRESS)
        );
        assert_eq!(name_the_store("store = /dev/vdb\n", STORE_ADDRESS), None);
    }

    #[test]
    fn configure_writes_a_read_only_friendly_root() {
        // Only the parts that need no chroot: everything before `systemctl set-default`.
        let d = tempfile::tempdir().unwrap();
        let b = DebianBuild {
            modules_dir: Path::new("/nonexistent"),
            release: "6.1.0-test",
            config: None,
            snapboot_bin: Path::new("/nonexistent"),
            app_py: "print('app')\n",
            image_kernel: Some("release=6.1.0-test\n"),
            cache_dir: d.path(),
            stage: d.path(),
            initramfs: &d.path().join("initrd"),
            arch: Arch::X86_64,
            generator: Generator::InitramfsTools,
            initramfs_systemd: false,
            overlayroot: false,
        };
        // `systemctl set-default` in a chroot needs root and a real tree: expect that step
        // to be the one that fails here, after the files are written.
        let _ = configure(&b, d.path());
        let fstab = fs::read_to_string(d.path().join("etc/fstab")).unwrap();
        assert!(fstab.contains("tmpfs /var/log tmpfs"), "{fstab}");
        let id = fs::read_to_string(d.path().join("etc/machine-id")).unwrap();
        assert_eq!(id.trim().len(), 32);
        assert!(d.path().join("etc/.updated").is_file());
        let wants = d
            .path()
            .join("etc/systemd/system/multi-user.target.wants")
            .join(APP_UNIT);
        assert!(wants.symlink_metadata().is_ok());
        let hook = d.path().join(CONFIRMED_HOOK);
        let mode = fs::metadata(&hook).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "{mode:o}");
        // Run with a file for the console: the line it writes.
        let console = d.path().join("console");
        let text = fs::read_to_string(&hook).unwrap();
        let script = text.replace("/dev/console", console.to_str().unwrap());
        assert_ne!(script, text, "it writes to /dev/console");
        let ok = Command::new("sh")
            .args(["-c", &script])
            .env("SNAPBOOT_IMAGE", "current")
            .env("SNAPBOOT_GENERATION", "2")
            .env("SNAPBOOT_CONFIRMED_BY", "boot-complete")
            .status()
            .unwrap();
        assert!(ok.success());
        assert_eq!(
            fs::read_to_string(&console).unwrap(),
            "snapboot-board: confirmed.d: current generation 2, confirmed by boot-complete\n"
        );
    }
}
