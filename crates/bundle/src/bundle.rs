//! The guest bundle: everything one board boot needs, in one directory.
//!
//! ```text
//! BUNDLE/
//!   bundle.json      manifest (this module's `Bundle`): kernel, workload, files, cmdline
//!   vmlinux          uncompressed ELF kernel, booted through its PVH entry
//!   bzImage          the kernel as shipped (for the compressed-boot baseline)
//!   initramfs.cpio   busybox + static snapboot + modules + /init (uncompressed newc)
//!   rootfs.img       read-only root filesystem (squashfs) with the workload
//! ```

use crate::busybox::Busybox;
use crate::initramfs::{InitScript, Initramfs};
use crate::workload::{check_tree, Workload};
use crate::workload_error::WorkloadError;
use guestarch::Arch;
use hostkernel::kernel::{extract_vmlinux, KernelError, KernelInfo};
use hostkernel::modules::{read_module, ModuleError, ModuleTree};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::workload::ARM64_ROOT_PARTITION;

/// Where the initramfs carries the public key of signed images (`ondevice::flash`'s
/// `PUBLIC_KEY_FILE`, without the leading `/`).
pub const IMAGE_PUBLIC_KEY: &str = "etc/snapboot/image.pub";
/// Where the initramfs keeps a device key file (ondevice::devicekey::DEVICE_KEY_FILE).
pub const DEVICE_KEY: &str = "etc/snapboot/device.key";

/// Modules the board's initramfs loads: the virtio PCI transport and block device and the
/// root filesystem's driver, and the virtio RNG (fresh entropy after a restore). Dependencies (virtio_ring, virtio, ...) are resolved in order.
pub const BOARD_MODULES: &[&str] = &["virtio_pci", "virtio_blk", "squashfs", "virtio_rng"];

/// Modules a lazy capture needs (device-mapper snapshot over the swap region, dm-verity
/// checking every page read back from it, zram for the snapshot's copy-on-write store and
/// zram's default compressor, built in on some kernels and a module on others); `/init`
/// loads them only when the command line has `snapboot.lazy`.
pub const LAZY_MODULES: &[&str] = &["dm_mod", "dm_snapshot", "dm_verity", "zram", "lzo_rle"];

/// Modules an encrypted lazy capture needs besides [`LAZY_MODULES`]: dm-crypt and its cipher
/// (`ondevice::lazy::CIPHER`; AES itself is built into Debian's kernel). The kernel would
/// ask modprobe for the cipher's template, which the board's roots do not have, so `/init`
/// loads them all when the command line has `snapboot.lazy` and `snapboot.encrypt=`.
pub const LAZY_CRYPT_MODULES: &[&str] = &[
    "dm_crypt", // xts builds on ecb (a soft dependency: the module names none).
    "ecb", "xts",
];

/// Modules the board's initramfs loads when the machine has an SD host controller on PCI
/// (QEMU's `sdhci-pci`, where `board … --store-on sd` puts the store): the controller's
/// driver and the MMC block device (`/dev/mmcblk0`), dependencies resolved in order.
pub const SD_MODULES: &[&str] = &["sdhci_pci", "mmc_block"];

/// Modules the board's initramfs loads when the machine has QEMU's i6300esb watchdog on PCI
/// (`board … --watchdog`): its driver, before resume, which arms it across the restore
/// (`snapboot.watchdog`); dependencies resolved in order.
pub const WATCHDOG_MODULES: &[&str] = &["i6300esb"];

/// Modules the booted system loads later, not at boot: virtio-mem, which adds deferred
/// memory after ready or restored (`snapboot.defermem`). The initramfs copies them to
/// `/run/snapboot/modules`, which outlives the switch to the root filesystem.
pub const LATE_MODULES: &[&str] = &["virtio_mem"];

/// Modules the built-in workloads' roots carry in `/lib/modules/NAME.ko` (dependencies first)
/// and nothing loads at boot: FAT and its default code pages, so a test can `insmod` them and
/// mount an ESP-style vfat disk (capture remounts it read-only around the image).
pub const ROOT_MODULES: &[&str] = &["vfat", "nls_cp437", "nls_ascii"];

/// Where the initramfs records the kernel its images come from (`release=`, `version=`,
/// `machine=` lines).
pub const IMAGE_KERNEL_RECORD: &str = "etc/snapboot/image-kernel";

/// Errors while building or loading a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Kernel extraction failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Module resolution failed.
    #[error(transparent)]
    Module(#[from] ModuleError),
    /// Workload assembly failed.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The Debian root or its initramfs could not be built.
    #[error(transparent)]
    Debian(#[from] crate::debian::DebianError),
    /// The snapboot binary to embed is not statically linked.
    #[error("{0} is dynamically linked; the initramfs needs a static snapboot (build with the workspace's .cargo/config.toml)")]
    NotStatic(PathBuf),
    /// The snapboot binary is for another architecture than the kernel.
    #[error("{path} is a {found} binary; the {arch} board needs snapboot-device built for {arch}")]
    WrongArch {
        /// The binary.
        path: PathBuf,
        /// What it is built for.
        found: String,
        /// The kernel's, and so the board's, architecture.
        arch: Arch,
    },
    /// mksquashfs failed.
    #[error("building the root filesystem failed: {0}")]
    Rootfs(String),
    /// A file the build adds to a user's root ([`mksquashfs_adding`]) cannot go there.
    #[error("cannot add /{path} to the root image of {}: {reason}", root.display())]
    AddToRoot {
        /// The user's tree.
        root: PathBuf,
        /// Where the file goes, relative to the root's top.
        path: String,
        /// Why not.
        reason: String,
    },
    /// The bundle directory is not a bundle.
    #[error("{path} is not a snapboot bundle: {reason}")]
    NotABundle { path: PathBuf, reason: String },
    /// The kernel pack (stock kernel and initramfs, for a restore kernel's fallback).
    #[error("kernel pack {}", path.display())]
    Pack {
        path: PathBuf,
        #[source]
        source: kernelpack::PackError,
    },
    /// Filesystem error.
    #[error("{path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the initramfs and the root keep the config file, relative to their top.
fn config_path() -> &'static str {
    bootparams::config::CONFIG_PATH.trim_start_matches('/')
}

/// Copies `src` to `dst` in a staged root, with `mode`.
fn stage_file(dst: &Path, src: &Path, mode: u32) -> Result<(), BundleError> {
    if let Some(d) = dst.parent() {
        fs::create_dir_all(d).map_err(io(d))?;
    }
    fs::copy(src, dst).map_err(io(src))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dst, fs::Permissions::from_mode(mode)).map_err(io(dst))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BundleError + '_ {
    move |source| BundleError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Inputs of a bundle build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The kernel to boot.
    pub kernel: KernelInfo,
    /// The system to boot.
    pub workload: Workload,
    /// A user's root filesystem tree; `None` assembles the built-in workload's tree.
    pub rootfs_dir: Option<PathBuf>,
    /// The static snapboot binary to put in the initramfs.
    pub snapboot_bin: PathBuf,
    /// A public key (`snapboot key gen`) to put in the initramfs: resume then restores
    /// only images signed for it.
    pub image_key: Option<PathBuf>,
    /// A device key file (`snapboot key device`) to put in the initramfs (resume reads it)
    /// and in the root (a capture reads it; a `rootfs_dir`'s image gets it added, the tree
    /// itself untouched: [`mksquashfs_adding`]): images are encrypted with it under
    /// `snapboot.encrypt=key`.
    pub device_key: Option<PathBuf>,
    /// A config file (`snapboot.conf(5)`) to put in the initramfs (resume reads it) and in
    /// the root (the ready point reads it; added to a `rootfs_dir`'s image like
    /// `device_key`), as it is: one that does not parse makes the board boot cold saying why.
    pub config: Option<PathBuf>,
    /// Output directory.
    pub out: PathBuf,
    /// Where what outlives one build is kept: the debian workload's base root, made once
    /// (`home::debian_cache()`).
    pub cache_dir: PathBuf,
    /// Where Debian's packages of a foreign architecture are downloaded and unpacked: the
    /// busybox and python of a kernel's architecture that is not the host's
    /// (`home::debs_cache(arch)`).
    pub debs_dir: PathBuf,
}

/// A built bundle (the manifest `bundle.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Bundle {
    /// Where the bundle lives (not serialized; set on load).
    #[serde(skip)]
    pub dir: PathBuf,
    /// The kernel it was built from.
    pub kernel: KernelInfo,
    /// The workload it boots.
    pub workload: Workload,
    /// Modules in the initramfs, in load order.
    pub modules: Vec<String>,
    /// Root filesystem type.
    pub rootfs_type: String,
    /// Bytes of the initramfs and of the root filesystem image.
    pub initramfs_bytes: u64,
    /// Bytes of the root filesystem image.
    pub rootfs_bytes: u64,
    /// BLAKE3 of the snapboot binary inside the initramfs and of the built-in `app`
    /// program ([`build_id`]): a bundle built by another snapboot runs that other snapboot
    /// (or an older app) on the board.
    #[serde(default)]
    pub snapboot_blake3: String,
}

impl Bundle {
    /// The uncompressed kernel.
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    /// The compressed kernel as shipped (x86_64); the arm64 `Image` is shipped uncompressed.
    pub fn bzimage(&self) -> PathBuf {
        match self.kernel.arch {
            Arch::X86_64 => self.dir.join("bzImage"),
            Arch::Arm64 => self.kernel_image(),
        }
    }
    /// The kernel the board boots: the ELF `vmlinux` (x86_64, PVH entry) or the arm64 `Image`
    /// (U-Boot `booti`).
    pub fn kernel_image(&self) -> PathBuf {
        kernel_image_in(&self.dir, self.kernel.arch)
    }
    /// The initramfs archive.
    pub fn initramfs(&self) -> PathBuf {
        self.dir.join("initramfs.cpio")
    }
    /// The root filesystem image.
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.img")
    }
    /// The kernel pack: bzImage and initramfs in one checked file, which a restore kernel
    /// reads (as a raw disk) to hand a cold boot to the stock kernel.
    pub fn kernel_pack(&self) -> PathBuf {
        self.dir.join("coldkernel.pack")
    }

    /// Writes the kernel pack from the bundle's bzImage and initramfs, unless it is there
    /// and newer than both. Written to a temporary file and renamed: never half a pack.
    pub fn ensure_kernel_pack(&self) -> Result<PathBuf, BundleError> {
        let pack = self.kernel_pack();
        let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
        // A pack an older snapboot wrote for an arm64 kernel lacks the kernel's `uname -v`
        // in its header (the restorer reads it there): written again.
        let complete = || {
            let mut head = vec![0u8; kernelpack::HEADER_LEN];
            fs::File::open(&pack)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
                .ok()
                .and_then(|()| kernelpack::Header::decode(&head).ok())
                .is_some_and(|h| {
                    self.kernel.arch != guestarch::Arch::Arm64 || !h.uts_version.as_str().is_empty()
                })
        };
        if let Some(t) = modified(&pack) {
            if [self.bzimage(), self.initramfs()]
                .iter()
                .all(|p| modified(p).is_some_and(|s| s <= t))
                && complete()
            {
                return Ok(pack);
            }
        }
        let kernel = fs::read(self.bzimage()).map_err(io(&self.bzimage()))?;
        let initrd = fs::read(self.initramfs()).map_err(io(&self.initramfs()))?;
        let tmp = self.dir.join("coldkernel.pack.tmp");
        let f = fs::File::create(&tmp).map_err(io(&tmp))?;
        let mut w = std::io::BufWriter::new(f);
        // The restorer's summary of the initramfs rides in the pack (an initramfs it
        // cannot read has none: the restorer then reads it and says why it cannot).
        let summary = restorer::stockinit::summary(&initrd).ok();
        kernelpack::write_with_summary(&mut w, &kernel, &initrd, summary.as_deref()).map_err(
            |source| BundleError::Pack {
                path: pack.clone(),
                source,
            },
        )?;
        let f = w.into_inner().map_err(|e| BundleError::Io {
            path: tmp.clone(),
            source: e.into_error(),
        })?;
        f.sync_all().map_err(io(&tmp))?;
        fs::rename(&tmp, &pack).map_err(io(&pack))?;
        Ok(pack)
    }

    /// Whether the bundle carries exactly the snapboot binary at `exe` (and this
    /// snapboot's `app` program).
    pub fn carries(&self, exe: &Path) -> bool {
        fs::read(exe)
            .map(|b| build_id(&b) == self.snapboot_blake3)
            .unwrap_or(false)
    }

    /// Loads `dir/bundle.json` and checks the files it names are there.
    pub fn load(dir: &Path) -> Result<Self, BundleError> {
        let manifest = dir.join("bundle.json");
        let text = fs::read_to_string(&manifest).map_err(|e| BundleError::NotABundle {
            path: dir.to_path_buf(),
            reason: format!("cannot read bundle.json: {e} (build one with `snapboot board build`)"),
        })?;
        let mut b: Bundle = serde_json::from_str(&text).map_err(|e| BundleError::NotABundle {
            path: dir.to_path_buf(),
            reason: format!("bundle.json: {e}"),
        })?;
        b.dir = dir.to_path_buf();
        for f in [b.kernel_image(), b.initramfs(), b.rootfs()] {
            if !f.is_file() {
                return Err(BundleError::NotABundle {
                    path: dir.to_path_buf(),
                    reason: format!("{} is missing", f.display()),
                });
            }
        }
        Ok(b)
    }

    /// Builds a bundle.
    pub fn build(opts: &BuildOptions) -> Result<Self, BundleError> {
        let out = &opts.out;
        fs::create_dir_all(out).map_err(io(out))?;
        let snapboot = fs::read(&opts.snapboot_bin).map_err(io(&opts.snapboot_bin))?;
        if !is_static_elf(&snapboot) {
            return Err(BundleError::NotStatic(opts.snapboot_bin.clone()));
        }
        let found = Arch::of_elf(&snapboot);
        if found != Some(opts.kernel.arch) {
            return Err(BundleError::WrongArch {
                path: opts.snapboot_bin.clone(),
                found: found.map_or("foreign".into(), |a| a.to_string()),
                arch: opts.kernel.arch,
            });
        }
        if opts.workload.init.is_debian() {
            return Self::build_debian(opts, &snapboot);
        }

        let tree = ModuleTree::open(&opts.kernel.modules_dir)?;
        let modules = tree.resolve(BOARD_MODULES)?;
        let lazy_modules: Vec<_> = tree
            .resolve(LAZY_MODULES)?
            .into_iter()
            .filter(|l| !modules.iter().any(|m| m.name == l.name))
            .collect();
        let lazy_crypt_modules: Vec<_> = tree
            .resolve(LAZY_CRYPT_MODULES)?
            .into_iter()
            .filter(|l| {
                !modules
                    .iter()
                    .chain(&lazy_modules)
                    .any(|m| m.name == l.name)
            })
            .collect();
        let sd_modules: Vec<_> = tree
            .resolve(SD_MODULES)?
            .into_iter()
            .filter(|l| !modules.iter().any(|m| m.name == l.name))
            .collect();
        let watchdog_modules: Vec<_> = tree
            .resolve(WATCHDOG_MODULES)?
            .into_iter()
            .filter(|l| !modules.iter().any(|m| m.name == l.name))
            .collect();
        let late_modules: Vec<_> = tree
            .resolve(LATE_MODULES)?
            .into_iter()
            .filter(|l| !modules.iter().any(|m| m.name == l.name))
            .collect();
        let mut ir = Initramfs::new();
        let debs = &opts.debs_dir;
        let busybox = Busybox::for_arch(opts.kernel.arch, debs)?;
        let bb = fs::read(&busybox.path).map_err(io(&busybox.path))?;
        ir.file("bin/busybox", 0o755, bb);
        for applet in &busybox.applets {
            let name = applet.rsplit('/').next().unwrap_or_default();
            if !name.is_empty() && name != "busybox" {
                ir.symlink(&format!("bin/{name}"), "busybox");
            }
        }
        let snapboot_blake3 = build_id(&snapboot);
        ir.file("bin/snapboot", 0o755, snapboot);
        for m in modules
            .iter()
            .chain(&lazy_modules)
            .chain(&lazy_crypt_modules)
            .chain(&sd_modules)
            .chain(&watchdog_modules)
            .chain(&late_modules)
        {
            ir.file(
                &format!("lib/modules/{}.ko", m.name),
                0o644,
                read_module(&m.path)?,
            );
        }
        let script = InitScript {
            modules: modules.iter().map(|m| m.name.clone()).collect(),
            lazy_modules: lazy_modules.iter().map(|m| m.name.clone()).collect(),
            lazy_crypt_modules: lazy_crypt_modules.iter().map(|m| m.name.clone()).collect(),
            sd_modules: sd_modules.iter().map(|m| m.name.clone()).collect(),
            watchdog_modules: watchdog_modules.iter().map(|m| m.name.clone()).collect(),
            late_modules: late_modules.iter().map(|m| m.name.clone()).collect(),
            root_dev: crate::workload::root_device(opts.kernel.arch).into(),
            root_fs: "squashfs".into(),
            start: opts.workload.start.clone(),
            env: opts.workload.env.clone(),
        };
        ir.file("init", 0o755, script.render().into_bytes());
        if let Some(k) = &opts.image_key {
            let key = fs::read(k).map_err(io(k))?;
            ir.file(IMAGE_PUBLIC_KEY, 0o644, key);
        }
        if let Some(k) = &opts.device_key {
            let key = fs::read(k).map_err(io(k))?;
            ir.file(DEVICE_KEY, 0o600, key);
        }
        if let Some(c) = &opts.config {
            ir.file(config_path(), 0o644, fs::read(c).map_err(io(c))?);
        }
        // The kernel this bundle's images come from, for a restore kernel booting this same
        // initramfs (its own uname differs; devsys::system::image_kernel reads this).
        if let Some(record) = image_kernel_record(opts)? {
            ir.file(IMAGE_KERNEL_RECORD, 0o644, record.into_bytes());
        }
        let ir_path = out.join("initramfs.cpio");
        let f = fs::File::create(&ir_path).map_err(io(&ir_path))?;
        ir.write_to(std::io::BufWriter::new(f))
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .map_err(io(&ir_path))?;

        let rootfs_img = out.join("rootfs.img");
        match &opts.rootfs_dir {
            Some(dir) => {
                check_tree(dir)?;
                // A capture runs in the root, after the initramfs is gone: it reads the
                // device key and the config file from the same paths there. Added to the
                // image, the user's tree left as it is.
                let mut files = Vec::new();
                if let Some(k) = &opts.device_key {
                    files.push(AddedFile {
                        path: DEVICE_KEY,
                        src: k,
                        mode: 0o600,
                    });
                }
                if let Some(c) = &opts.config {
                    files.push(AddedFile {
                        path: config_path(),
                        src: c,
                        mode: 0o644,
                    });
                }
                mksquashfs_adding(dir, &rootfs_img, &files)?;
            }
            None => {
                let stage = out.join("stage");
                let _ = fs::remove_dir_all(&stage);
                opts.workload
                    .stage_builtin(&stage, opts.kernel.arch, &busybox, debs)?;
                let lib = stage.join("lib/modules");
                fs::create_dir_all(&lib).map_err(io(&lib))?;
                for m in tree.resolve(ROOT_MODULES)? {
                    let dst = lib.join(format!("{}.ko", m.name));
                    fs::write(&dst, read_module(&m.path)?).map_err(io(&dst))?;
                }
                // A capture runs in the root, after the initramfs is gone: it reads the
                // device key and the config file from the same paths there.
                if let Some(k) = &opts.device_key {
                    stage_file(&stage.join(DEVICE_KEY), k, 0o600)?;
                }
                if let Some(c) = &opts.config {
                    stage_file(&stage.join(config_path()), c, 0o644)?;
                }
                mksquashfs(&stage, &rootfs_img)?;
                let _ = fs::remove_dir_all(&stage);
            }
        }
        Self::finish(opts, script.modules, snapboot_blake3)
    }

    /// The shipped kernel, the manifest and the kernel pack, once `vmlinux`, the initramfs
    /// and the root are in `opts.out`.
    fn finish(
        opts: &BuildOptions,
        modules: Vec<String>,
        snapboot_blake3: String,
    ) -> Result<Self, BundleError> {
        let out = &opts.out;
        if opts.kernel.arch == Arch::X86_64 {
            fs::copy(&opts.kernel.bzimage, out.join("bzImage"))
                .map_err(io(&opts.kernel.bzimage))?;
        }
        let size = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let bundle = Bundle {
            dir: out.clone(),
            kernel: opts.kernel.clone(),
            workload: opts.workload.clone(),
            modules,
            rootfs_type: opts.workload.init.root_fstype().into(),
            initramfs_bytes: size(&out.join("initramfs.cpio")),
            rootfs_bytes: size(&out.join("rootfs.img")),
            snapboot_blake3,
        };
        bundle.ensure_kernel_pack()?;
        let manifest = out.join("bundle.json");
        let json = serde_json::to_string_pretty(&bundle).unwrap_or_default();
        fs::write(&manifest, json).map_err(io(&manifest))?;
        Ok(bundle)
    }

    /// The `debian` workload's bundle: a Debian root and the initramfs its own
    /// initramfs-tools makes, with snapboot installed into it (`crate::debian`).
    fn build_debian(opts: &BuildOptions, snapboot: &[u8]) -> Result<Self, BundleError> {
        let out = &opts.out;
        let stage = out.join("stage");
        let app_py = crate::workload::APP_PY;
        // The kernel its images come from, for a restore kernel (the hook copies it in).
        let record = image_kernel_record(opts)?;
        crate::debian::build(&crate::debian::DebianBuild {
            image_kernel: record.as_deref(),
            modules_dir: &opts.kernel.modules_dir,
            release: &opts.kernel.release,
            config: opts.kernel.config.as_deref(),
            snapboot_bin: &opts.snapboot_bin,
            app_py,
            cache_dir: &opts.cache_dir,
            stage: &stage,
            initramfs: &out.join("initramfs.cpio"),
            arch: opts.kernel.arch,
            generator: crate::debian::generator_of(opts.workload.init),
            initramfs_systemd: opts.workload.init == crate::workload::InitKind::DebianDracutSystemd,
            overlayroot: opts.workload.init == crate::workload::InitKind::DebianOverlayroot,
        })?;
        let rootfs_img = out.join("rootfs.img");
        let made = match opts.workload.init.root_fstype() {
            "ext4" => mkext4(&stage, &rootfs_img),
            _ => mksquashfs(&stage, &rootfs_img),
        };
        let _ = fs::remove_dir_all(&stage);
        made?;
        let modules = crate::debian::INITRAMFS_MODULES
            .iter()
            .map(|m| m.to_string())
            .collect();
        Self::finish(opts, modules, build_id(snapboot))
    }
}

pub use kernelpack::is_static_elf;

/// What a bundle is built from besides the kernel and the workload's name: the device's
/// snapboot binary and the workload files embedded in this snapboot (the `app` program,
/// the `shell` workload's `recapture`).
pub fn build_id(snapboot: &[u8]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(snapboot);
    h.update(crate::workload::APP_PY.as_bytes());
    h.update(crate::workload::SHELL_RECAPTURE.as_bytes());
    h.finalize().to_hex().to_string()
}

/// Extracts `vmlinux` into the bundle and returns the record of the kernel its images come
/// from (`release=`, `version=`, `machine=` lines), for a restore kernel booting the same
/// initramfs (its own uname differs; devsys::system::image_kernel reads it).
fn image_kernel_record(opts: &BuildOptions) -> Result<Option<String>, BundleError> {
    let arch = opts.kernel.arch;
    let kernel = kernel_image_in(&opts.out, arch);
    match arch {
        Arch::X86_64 => extract_vmlinux(&opts.kernel.bzimage, &kernel)?,
        Arch::Arm64 => {
            fs::copy(&opts.kernel.bzimage, &kernel).map_err(io(&opts.kernel.bzimage))?;
        }
    }
    let image = fs::read(&kernel).map_err(io(&kernel))?;
    Ok(
        hostkernel::kernel::uts_version(&image, &opts.kernel.release).map(|version| {
            devinstall::bootloader::restore_kernel::image_kernel_record(
                &devinstall::bootloader::restore_kernel::Uname {
                    release: opts.kernel.release.clone(),
                    version,
                    machine: arch.uname_machine().to_string(),
                },
            )
        }),
    )
}

/// Where a bundle keeps the kernel the board boots.
fn kernel_image_in(dir: &Path, arch: Arch) -> PathBuf {
    match arch {
        Arch::X86_64 => dir.join("vmlinux"),
        Arch::Arm64 => dir.join("Image"),
    }
}

/// Makes an installed system's root filesystem image of the tree `src`: ext4, with room
/// to spare (a quarter more than the tree, at least 64 MiB), as an installer leaves it.
pub fn mkext4(src: &Path, img: &Path) -> Result<(), BundleError> {
    let _ = fs::remove_file(img);
    let du = Command::new("du")
        .args(["-s", "-B1M"])
        .arg(src)
        .output()
        .map_err(|e| BundleError::Rootfs(format!("du: {e}")))?;
    let used: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BundleError::Rootfs(format!("du -s {}: no size", src.display())))?;
    let mib = used + (used / 4).max(64);
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-E", "root_owner=0:0", "-d"])
        .arg(src)
        .arg(img)
        .arg(format!("{mib}M"))
        .output()
        .map_err(|e| BundleError::Rootfs(format!("mkfs.ext4 (package e2fsprogs): {e}")))?;
    if !out.status.success() {
        return Err(BundleError::Rootfs(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

/// Makes the board's read-only root filesystem image of the tree `src` (squashfs, LZ4).
pub fn mksquashfs(src: &Path, img: &Path) -> Result<(), BundleError> {
    squash(src, img, Vec::new())
}

/// A host file put into a root image at `path` (relative to the root's top, no leading
/// `/`), owned by root, with `mode`.
#[derive(Debug, Clone, Copy)]
pub struct AddedFile<'a> {
    /// Where it goes in the root.
    pub path: &'a str,
    /// The host file it is read from.
    pub src: &'a Path,
    /// Its permission bits.
    pub mode: u32,
}

/// Makes the board's root image of a user's tree `src` ([`mksquashfs`]) with `files` in
/// it, leaving `src` as it is (neither changed nor copied: it may be large, and it is
/// not ours). The files are mksquashfs pseudo definitions (`PATH f MODE 0 0 cat SRC`),
/// with a `d` definition for each directory above them that `src` lacks.
///
/// A file `src` already has at one of those paths is left out of the image (`-e`): ours
/// wins, since the initramfs carries ours, a capture in the root must read the key and
/// settings a resume in the initramfs reads, and the command line named ours. A
/// directory above one that is in `src` but is not a directory (a symlink `etc`, say) is
/// refused: mksquashfs would silently drop the file. mksquashfs also stores a file whose
/// command fails as an empty one and goes on (only `-exit-on-error` stops it, and that
/// would also stop at any file of `src` a non-root build cannot read), so each file is
/// read back from the image (`unsquashfs -cat`) and compared.
pub fn mksquashfs_adding(src: &Path, img: &Path, files: &[AddedFile]) -> Result<(), BundleError> {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let refuse = |f: &AddedFile, reason: String| BundleError::AddToRoot {
        root: src.to_path_buf(),
        path: f.path.to_string(),
        reason,
    };
    let (mut dirs, mut defs, mut excluded) = (Vec::new(), Vec::new(), Vec::new());
    for f in files {
        let parents: Vec<_> = Path::new(f.path).ancestors().skip(1).collect();
        for d in parents
            .into_iter()
            .rev()
            .filter(|d| !d.as_os_str().is_empty())
        {
            match fs::symlink_metadata(src.join(d)) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    let why = format!("/{} is not a directory in it", d.display());
                    return Err(refuse(f, why));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if !dirs.contains(&d) {
                        dirs.push(d);
                        defs.push(OsString::from(format!("{} d 755 0 0", d.display())));
                    }
                }
                Err(e) => return Err(io(&src.join(d))(e)),
            }
        }
        if fs::symlink_metadata(src.join(f.path)).is_ok() {
            excluded.push(f.path);
        }
        // The command runs under `sh -c`: the path single-quoted, each `'` as `'\''`.
        let mut def = format!("{} f {:o} 0 0 cat '", f.path, f.mode).into_bytes();
        for &b in f.src.as_os_str().as_bytes() {
            def.extend_from_slice(if b == b'\'' {
                b"'\\''"
            } else {
                std::slice::from_ref(&b)
            });
        }
        def.push(b'\'');
        defs.push(OsString::from_vec(def));
    }
    let mut args = Vec::new();
    for d in defs {
        args.extend([OsString::from("-p"), d]);
    }
    // `-e` takes the rest of the command line; a relative path is taken in `src`.
    if !excluded.is_empty() {
        args.push("-e".into());
        args.extend(excluded.into_iter().map(OsString::from));
    }
    squash(src, img, args)?;
    for f in files {
        let want = fs::read(f.src).map_err(io(f.src))?;
        let got = Command::new("unsquashfs")
            .arg("-cat")
            .arg(img)
            .arg(f.path)
            .output()
            .map_err(|e| refuse(f, format!("unsquashfs (package squashfs-tools): {e}")))?;
        if !got.status.success() {
            let why = format!(
                "mksquashfs left it out (unsquashfs -cat: {})",
                String::from_utf8_lossy(&got.stderr).trim()
            );
            return Err(refuse(f, why));
        }
        if got.stdout != want {
            let why = format!(
                "mksquashfs stored {} bytes, not the {} of {}",
                got.stdout.len(),
                want.len(),
                f.src.display()
            );
            return Err(refuse(f, why));
        }
    }
    Ok(())
}

/// Runs mksquashfs on `src` with the board's options, then `extra` (an `-e` list last).
fn squash(src: &Path, img: &Path, extra: Vec<std::ffi::OsString>) -> Result<(), BundleError> {
    let _ = fs::remove_file(img);
    let out = Command::new("mksquashfs")
        .arg(src)
        .arg(img)
        .args([
            "-noappend",
            "-all-root",
            "-comp",
            "lz4",
            "-quiet",
            "-no-progress",
        ])
        .args(extra)
        .output()
        .map_err(|e| BundleError::Rootfs(format!("mksquashfs (package squashfs-tools): {e}")))?;
    if !out.status.success() {
        return Err(BundleError::Rootfs(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_check_tells_static_from_dynamic() {
        let ls = fs::read("/bin/ls").unwrap();
        assert!(!is_static_elf(&ls), "/bin/ls is dynamic");
        if let Ok(bb) = fs::read(crate::busybox::BUSYBOX) {
            assert!(is_static_elf(&bb), "busybox-static is static");
        }
        assert!(!is_static_elf(b"#!/bin/sh\n"));
    }

    /// Whether a squashfs tool is installed (package squashfs-tools).
    fn have(tool: &str) -> bool {
        Command::new(tool).arg("-version").output().is_ok()
    }

    /// `unsquashfs -lls`'s line for `path` in `img`: mode string first, name last.
    fn listed(img: &Path, path: &str) -> Option<String> {
        let out = Command::new("unsquashfs")
            .arg("-lls")
            .arg(img)
            .output()
            .unwrap();
        let name = format!("squashfs-root/{path}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .map(str::to_string)
    }

    #[test]
    fn a_users_root_gets_the_device_key_and_config_untouched() {
        if !have("mksquashfs") {
            eprintln!("skipped: no mksquashfs (package squashfs-tools)");
            return;
        }
        assert!(
            have("unsquashfs"),
            "mksquashfs is installed but unsquashfs is not: install squashfs-tools whole"
        );
        let t = tempfile::tempdir().unwrap();
        // The key in a directory whose name the shell would otherwise mangle.
        let keys = t.path().join("it's a $dir");
        fs::create_dir(&keys).unwrap();
        let (key, conf) = (keys.join("device.key"), keys.join("snapboot.conf"));
        fs::write(&key, b"\x00secret'\n").unwrap();
        fs::write(&conf, "snapboot.encrypt = key\n").unwrap();
        let files = [
            AddedFile {
                path: DEVICE_KEY,
                src: &key,
                mode: 0o600,
            },
            AddedFile {
                path: config_path(),
                src: &conf,
                mode: 0o644,
            },
        ];
        let cat = |img: &Path, path: &str| {
            let out = Command::new("unsquashfs")
                .arg("-cat")
                .arg(img)
                .arg(path)
                .output()
                .unwrap();
            out.stdout
        };

        // A root without /etc: the directories are made, the files are in at their paths.
        let bare = t.path().join("bare");
        fs::create_dir_all(bare.join("bin")).unwrap();
        let img = t.path().join("bare.img");
        mksquashfs_adding(&bare, &img, &files).unwrap();
        let line = listed(&img, DEVICE_KEY).expect("the key is in the image");
        assert!(line.starts_with("-rw------- root/root "), "{line}");
        let line = listed(&img, config_path()).expect("the config is in the image");
        assert!(line.starts_with("-rw-r--r-- root/root "), "{line}");
        let line = listed(&img, "etc/snapboot").unwrap();
        assert!(line.starts_with("drwxr-xr-x "), "{line}");
        assert_eq!(cat(&img, DEVICE_KEY), fs::read(&key).unwrap());
        assert_eq!(cat(&img, config_path()), fs::read(&conf).unwrap());
        assert!(
            !bare.join("etc").exists(),
            "the user's tree is left as it is"
        );

        // A root with a key of its own: ours wins in the image, theirs stays in the tree.
        let own = t.path().join("own");
        fs::create_dir_all(own.join("etc/snapboot")).unwrap();
        fs::write(own.join(DEVICE_KEY), "theirs").unwrap();
        fs::write(own.join("etc/hostname"), "board").unwrap();
        let img = t.path().join("own.img");
        mksquashfs_adding(&own, &img, &files).unwrap();
        assert_eq!(cat(&img, DEVICE_KEY), fs::read(&key).unwrap());
        assert!(listed(&img, DEVICE_KEY).unwrap().starts_with("-rw------- "));
        assert_eq!(cat(&img, "etc/hostname"), b"board");
        assert_eq!(fs::read(own.join(DEVICE_KEY)).unwrap(), b"theirs");

        // A root whose /etc is a symlink: refused, saying why.
        let linked = t.path().join("linked");
        fs::create_dir_all(linked.join("usr/etc")).unwrap();
        std::os::unix::fs::symlink("usr/etc", linked.join("etc")).unwrap();
        let err = mksquashfs_adding(&linked, &t.path().join("linked.img"), &files)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/etc is not a directory"), "{err}");
    }

    #[test]
    fn loading_a_non_bundle_says_why() {
        let d = tempfile::tempdir().unwrap();
        let err = Bundle::load(d.path()).unwrap_err().to_string();
        assert!(err.contains("bundle.json"), "{err}");
    }
}
