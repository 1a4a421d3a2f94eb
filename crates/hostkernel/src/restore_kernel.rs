//! The restore kernel: a small kernel built from the distribution's own kernel source, only
//! to restore hibernation images that the distribution's kernel made (on x86_64 the image
//! need not be restored by the kernel that made it: arch/x86/power/hibernate.c carries the
//! image kernel's entry point and page tables in the image header).
//!
//! It is `make allnoconfig` plus the architecture's fragment (`kernel/restore.config` for
//! x86_64, `kernel/restore-arm64.config` for arm64, cross-compiled with
//! `aarch64-linux-gnu-gcc`), everything built in. Its release string is its own
//! (`…-snapboot-restore`): what the image must match is recorded separately, never forged into
//! `uname -r`. arm64 is stricter: arch/arm64/kernel/hibernate.c restores only images whose
//! uts version (`uname -v`) is the restoring kernel's, so the arm64 build is stamped with the
//! stock kernel's ([`crate::version_stamp`]) and the result checked. A build is cached under a
//! key of the source package version, the fragment and the compiler (and, for arm64, the
//! architecture and the stamped version), and is never on the resume path.
//!
//! ```text
//! apt-get download linux-source-X.Y  ->  CACHE/source/linux-source-X.Y_V_all.deb
//!   usr/src/linux-source-X.Y.tar.xz, streamed  ->  CACHE/source/linux-source-X.Y_V_all/
//!                                                 (unpacked once, for every architecture)
//! make O=CACHE/build-KEY allnoconfig KCONFIG_ALLCONFIG=FRAGMENT
//!                       ->  .config (every fragment line checked;
//!                                    arm64: the uts version words checked)
//! make O=CACHE/build-KEY vmlinux | Image  ->  CACHE/restore-KEY/vmlinux | Image + restore.json
//!                           (arm64: the Image's uts version checked against the stock one)
//! ```
//!
//! The source tree stays unpacked beside its package (about 1.3 GB for 6.1): each
//! architecture builds out of tree (`make O=`), so the second build does not unpack again.

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use thiserror::Error;

use crate::kernel::{banner_release, run, uts_version, KernelError, KernelInfo};
use crate::kernel_config::missing;
use crate::version_stamp::{check_built, StampError, VersionMismatch, VersionStamp, WordsMismatch};
use guestarch::Arch;

/// The x86_64 configuration fragment, applied on top of `allnoconfig`.
pub const FRAGMENT: &str = include_str!("../kernel/restore.config");
/// The arm64 configuration fragment, applied on top of `ARCH=arm64 allnoconfig`.
pub const FRAGMENT_ARM64: &str = include_str!("../kernel/restore-arm64.config");

/// The configuration fragment of `arch`'s restore kernel.
pub fn fragment(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => FRAGMENT,
        Arch::Arm64 => FRAGMENT_ARM64,
    }
}

/// What the build of `arch` makes and keeps, and where the kernel's build system leaves it:
/// the ELF vmlinux QEMU boots through PVH (x86_64), the uncompressed Image that U-Boot's
/// booti, QEMU's -kernel and kexec_file_load take (arm64).
pub fn product(arch: Arch) -> (&'static str, &'static str) {
    match arch {
        Arch::X86_64 => ("vmlinux", "vmlinux"),
        Arch::Arm64 => ("Image", "arch/arm64/boot/Image"),
    }
}

/// What the build of `arch` keeps beside its [`product`], and where the kernel's build
/// system leaves it: x86_64's bzImage, which the board boots instead of the vmlinux when it
/// has a TPM ([`bzimage_beside`]).
pub fn extra_products(arch: Arch) -> &'static [(&'static str, &'static str)] {
    match arch {
        Arch::X86_64 => &[("bzImage", "arch/x86/boot/bzImage")],
        Arch::Arm64 => &[],
    }
}

/// The bzImage an x86_64 restore kernel build keeps beside its vmlinux `image`. The board
/// boots it when it has a TPM: QEMU's PVH loader puts the initramfs over the firmware's
/// ACPI tables then (`board::tpm`), the bzImage's loader does not.
pub fn bzimage_beside(image: &Path) -> PathBuf {
    image.with_file_name("bzImage")
}

/// Why no restore kernel could be built.
#[derive(Debug, Error)]
pub enum RestoreKernelError {
    /// A host step (apt-get, dpkg-deb, tar, make) failed.
    #[error(transparent)]
    Step(#[from] KernelError),
    /// `make allnoconfig` did not give the fragment's values (a dependency is missing or the
    /// source is of another version).
    #[error("the restore kernel's configuration lacks what the fragment asks for: {}", .0.join(", "))]
    Config(Vec<String>),
    /// The stock kernel's uts version is not known (arm64 needs it to stamp the build).
    #[error("the uts version of the {arch} kernel {release} is not known: fetch it again with `snapboot board fetch-kernel --arch {arch}`")]
    NoVersion {
        /// The stock kernel's architecture.
        arch: Arch,
        /// Its release.
        release: String,
    },
    /// The stock kernel's uts version cannot be reproduced by a build.
    #[error(transparent)]
    Stamp(#[from] StampError),
    /// The configuration would give other uts version words than the stock kernel's.
    #[error(transparent)]
    Words(#[from] WordsMismatch),
    /// The built kernel's uts version is not the stock kernel's.
    #[error(transparent)]
    Version(#[from] VersionMismatch),
    /// A file of the build could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RestoreKernelError + '_ {
    move |source| RestoreKernelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A built restore kernel.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestoreKernel {
    /// The uncompressed kernel ([`product`]): x86_64's ELF vmlinux QEMU boots (PVH),
    /// arm64's Image.
    #[serde(alias = "vmlinux")]
    pub image: PathBuf,
    /// The architecture it runs on (records from before arm64 are x86_64).
    #[serde(default)]
    pub arch: Arch,
    /// Its own `uname -r`.
    pub release: String,
    /// Its `uname -v`, when read after the build (arm64: the stock kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The source package and version it was built from.
    pub source: String,
    /// Seconds the build took (configure + compile), when it was built.
    pub build_secs: f64,
}

/// The cache key of a build: BLAKE3 of its parts, 16 hex digits. The parts are the source
/// package file name (it carries the version), the fragment and the compiler's version; an
/// arm64 build adds the architecture and the uts version it is stamped with. (x86_64 keeps
/// its three parts, so that restore kernels built before arm64 existed are still found.)
pub fn cache_key(parts: &[&str]) -> String {
    let mut h = blake3::Hasher::new();
    for part in parts {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex()[..16].to_string()
}

/// The source package for a distribution kernel release: `6.1.0-56-amd64` → `linux-source-6.1`.
pub fn source_package(image_release: &str) -> Option<String> {
    let mut parts = image_release.split(['.', '-']);
    let (major, minor) = (parts.next()?, parts.next()?);
    (major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok())
        .then(|| format!("linux-source-{major}.{minor}"))
}

/// The uts version an arm64 restore kernel has to be stamped with (the stock kernel's), or
/// `None` for x86_64, which needs none.
fn stock_stamp(stock: &KernelInfo) -> Result<Option<(VersionStamp, &str)>, RestoreKernelError> {
    if stock.arch == Arch::X86_64 {
        return Ok(None);
    }
    let version = stock
        .version
        .as_deref()
        .ok_or_else(|| RestoreKernelError::NoVersion {
            arch: stock.arch,
            release: stock.release.clone(),
        })?;
    Ok(Some((VersionStamp::parse(version)?, version)))
}

/// The first line of the (cross) compiler's `--version`.
fn compiler(arch: Arch) -> Result<String, KernelError> {
    let gcc = format!("{}gcc", arch.kbuild().1);
    let out = run(Command::new(gcc).arg("--version"))?;
    Ok(out.lines().next().unwrap_or("").to_string())
}

/// The cache key of `stock`'s restore kernel built from `deb_name` with `compiler`.
fn key_of(
    stock: &KernelInfo,
    deb_name: &str,
    compiler: &str,
) -> Result<String, RestoreKernelError> {
    let fragment = fragment(stock.arch);
    Ok(match stock_stamp(stock)? {
        None => cache_key(&[deb_name, fragment, compiler]),
        Some((_, version)) => {
            cache_key(&[deb_name, fragment, compiler, stock.arch.name(), version])
        }
    })
}

/// `make` of the source `tree` for `arch` into the build directory `out` (`O=`; `ARCH=` and
/// `CROSS_COMPILE=` when cross-compiling).
fn make(tree: &Path, out: &Path, arch: Arch) -> Command {
    let mut cmd = Command::new("make");
    let (karch, cross) = arch.kbuild();
    if !cross.is_empty() {
        cmd.arg(format!("ARCH={karch}"))
            .arg(format!("CROSS_COMPILE={cross}"));
    }
    cmd.arg("-s")
        .arg(format!("O={}", out.display()))
        .current_dir(tree);
    cmd
}

/// The restore kernel already built in `cache` for the stock kernel `stock` with this
/// fragment and compiler, if any.
pub fn cached(cache: &Path, stock: &KernelInfo) -> Option<RestoreKernel> {
    let pkg = source_package(&stock.release)?;
    let deb = find_deb(&cache.join("source"), &pkg)?;
    let deb_name = deb.file_name()?.to_string_lossy().into_owned();
    let key = key_of(stock, &deb_name, &compiler(stock.arch).ok()?).ok()?;
    let text = fs::read_to_string(cache.join(format!("restore-{key}/restore.json"))).ok()?;
    serde_json::from_str::<RestoreKernel>(&text)
        .ok()
        .filter(|k| k.image.is_file())
}

/// Builds (or reuses from `cache`) the restore kernel for the distribution kernel `stock`,
/// with `jobs` parallel compile jobs. Progress goes to stderr.
pub fn build(
    cache: &Path,
    stock: &KernelInfo,
    jobs: usize,
) -> Result<RestoreKernel, RestoreKernelError> {
    let arch = stock.arch;
    let pkg = source_package(&stock.release).ok_or_else(|| {
        RestoreKernelError::Step(KernelError::Command {
            cmd: "restore kernel".into(),
            reason: format!(
                "cannot tell the source package of release {:?}",
                stock.release
            ),
        })
    })?;
    let stamp = stock_stamp(stock)?;
    let dl = cache.join("source");
    fs::create_dir_all(&dl).map_err(io_err(&dl))?;
    let deb = match find_deb(&dl, &pkg) {
        Some(d) => d,
        None => {
            eprintln!("snapboot: downloading {pkg} (the distribution's kernel source)");
            run(Command::new("apt-get")
                .args(["download", "-q", &pkg])
                .current_dir(&dl))?;
            find_deb(&dl, &pkg).ok_or(KernelError::Missing {
                what: "downloaded kernel source .deb",
                path: dl.clone(),
            })?
        }
    };
    let deb_name = deb
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(k) = cached(cache, stock) {
        return Ok(k);
    }
    let key = key_of(stock, &deb_name, &compiler(arch)?)?;
    let out = cache.join(format!("restore-{key}"));
    let record = out.join("restore.json");
    let t = Instant::now();
    let tree = source_tree(&deb, &dl)?;
    let work = cache.join(format!("build-{key}"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(io_err(&work))?;
    let fragment_text = fragment(arch);
    let fragment_path = work.join("restore.config");
    fs::write(&fragment_path, fragment_text).map_err(io_err(&fragment_path))?;
    run(make(&tree, &work, arch)
        .arg("allnoconfig")
        .arg(format!("KCONFIG_ALLCONFIG={}", fragment_path.display())))?;
    let config_path = work.join(".config");
    let config = fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
    let lacking = missing(fragment_text, &config);
    if !lacking.is_empty() {
        return Err(RestoreKernelError::Config(lacking));
    }
    if let Some((stamp, _)) = &stamp {
        stamp.check_config(&config)?;
    }
    let (name, built_at) = product(arch);
    eprintln!("snapboot: compiling the {arch} restore kernel ({jobs} jobs, a few minutes)");
    let mut compile = make(&tree, &work, arch);
    compile.arg(format!("-j{}", jobs.max(1))).arg(name);
    compile.args(extra_products(arch).iter().map(|(extra, _)| extra));
    // init/Makefile prefers KBUILD_BUILD_VERSION_TIMESTAMP to KBUILD_BUILD_TIMESTAMP.
    compile.env_remove("KBUILD_BUILD_VERSION_TIMESTAMP");
    for (var, value) in stamp.iter().flat_map(|(s, _)| s.make_vars()) {
        compile.arg(format!("{var}={value}"));
    }
    run(&mut compile)?;
    let release = run(make(&tree, &work, arch).arg("kernelrelease"))?
        .trim()
        .to_string();
    let built = work.join(built_at);
    let version = match &stamp {
        None => None,
        Some((_, stock_version)) => {
            let data = fs::read(&built).map_err(io_err(&built))?;
            let version = banner_release(&data).and_then(|r| uts_version(&data, &r));
            check_built(version.as_deref(), stock_version)?;
            version
        }
    };
    fs::create_dir_all(&out).map_err(io_err(&out))?;
    let image = out.join(name);
    fs::copy(&built, &image).map_err(io_err(&image))?;
    for (extra, extra_at) in extra_products(arch) {
        let kept = out.join(extra);
        fs::copy(work.join(extra_at), &kept).map_err(io_err(&kept))?;
    }
    let config_out = out.join("config");
    fs::write(&config_out, &config).map_err(io_err(&config_out))?;
    let k = RestoreKernel {
        image,
        arch,
        release,
        version,
        source: deb_name.trim_end_matches(".deb").to_string(),
        build_secs: t.elapsed().as_secs_f64(),
    };
    let json = serde_json::to_string_pretty(&k).unwrap_or_default();
    fs::write(&record, json).map_err(io_err(&record))?;
    let _ = fs::remove_dir_all(&work);
    Ok(k)
}

fn find_deb(dir: &Path, pkg: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb")
            })
        })
}

/// Marks a source tree as wholly unpacked (a tree without it is a cut-off unpack).
const UNPACKED: &str = ".snapboot-unpacked";

/// The kernel source tree of the source package `deb`, unpacked once into `dir` (beside
/// the package, in a directory named after it) and shared by the builds of every
/// architecture. The package's `usr/src/linux-source-*.tar.*` is streamed from the package
/// into `tar`, never written out whole. An unpack runs into a directory of this process's
/// own and is renamed into place when complete, so a cut-off unpack is redone and two at
/// once both end in one whole tree.
fn source_tree(deb: &Path, dir: &Path) -> Result<PathBuf, RestoreKernelError> {
    let stem = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let unpacked = dir.join(&stem);
    if !unpacked.join(UNPACKED).is_file() {
        let _ = fs::remove_dir_all(&unpacked);
        let listing = run(Command::new("dpkg-deb").arg("-c").arg(deb))?;
        let member = source_member(&listing).ok_or(KernelError::Missing {
            what: "usr/src/linux-source-*.tar.* in the source package",
            path: deb.to_path_buf(),
        })?;
        eprintln!("snapboot: unpacking {member} from {stem}.deb (once, for every architecture)");
        let partial = dir.join(format!("{stem}.partial.{}", std::process::id()));
        let _ = fs::remove_dir_all(&partial);
        fs::create_dir_all(&partial).map_err(io_err(&partial))?;
        stream_member(deb, member, &partial)?;
        let mark = partial.join(UNPACKED);
        fs::write(&mark, member).map_err(io_err(&mark))?;
        if let Err(e) = fs::rename(&partial, &unpacked) {
            // Another unpack finished first: its tree is as good as this one.
            let _ = fs::remove_dir_all(&partial);
            if !unpacked.join(UNPACKED).is_file() {
                return Err(io_err(&unpacked)(e));
            }
        }
    }
    fs::read_dir(&unpacked)
        .map_err(io_err(&unpacked))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join("Makefile").is_file())
        .ok_or_else(|| {
            RestoreKernelError::Step(KernelError::Missing {
                what: "kernel source tree",
                path: unpacked.clone(),
            })
        })
}

/// The source tarball's member name in `dpkg-deb -c`'s listing of a source package.
fn source_member(listing: &str) -> Option<&str> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .find(|name| name.starts_with("./usr/src/") && name.contains(".tar."))
}

/// `tar`'s flag for the compressor a tarball's name ends with.
fn decompress_flag(name: &str) -> Option<&'static str> {
    [
        (".tar.xz", "--xz"),
        (".tar.gz", "--gzip"),
        (".tar.bz2", "--bzip2"),
        (".tar.zst", "--zstd"),
    ]
    .into_iter()
    .find(|(end, _)| name.ends_with(end))
    .map(|(_, flag)| flag)
}

/// Streams `member` (a compressed tarball) out of the package `deb` into `tar`, which
/// unpacks it in `into`: `dpkg-deb --fsys-tarfile | tar -xO member | tar -x`.
fn stream_member(deb: &Path, member: &str, into: &Path) -> Result<(), RestoreKernelError> {
    use std::process::Stdio;
    let flag = decompress_flag(member).ok_or_else(|| KernelError::Command {
        cmd: format!("unpacking {member}"),
        reason: "not a .tar.xz, .tar.gz, .tar.bz2 or .tar.zst".into(),
    })?;
    let spawn = |cmd: &mut Command, what: &str| {
        cmd.spawn().map_err(|e| KernelError::Command {
            cmd: what.to_string(),
            reason: e.to_string(),
        })
    };
    let mut fsys = spawn(
        Command::new("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(deb)
            .stdout(Stdio::piped()),
        "dpkg-deb --fsys-tarfile",
    )?;
    let mut pick = spawn(
        Command::new("tar")
            .args(["-xO", "-f", "-", member])
            .stdin(fsys.stdout.take().map_or(Stdio::null(), Stdio::from))
            .stdout(Stdio::piped()),
        "tar -xO",
    )?;
    let mut unpack = spawn(
        Command::new("tar")
            .args(["-x", flag, "-f", "-", "-C"])
            .arg(into)
            .stdin(pick.stdout.take().map_or(Stdio::null(), Stdio::from)),
        "tar -x",
    )?;
    // Every stage is waited for; the last one that failed is named, since a stage that
    // dies makes the ones before it fail on a broken pipe.
    let mut failed = None;
    for (child, what) in [
        (&mut fsys, "dpkg-deb --fsys-tarfile"),
        (&mut pick, "tar -xO"),
        (&mut unpack, "tar -x"),
    ] {
        match child.wait() {
            Ok(status) if status.success() => {}
            Ok(status) => failed = Some((what, status.to_string())),
            Err(e) => failed = Some((what, e.to_string())),
        }
    }
    if let Some((what, reason)) = failed {
        return Err(KernelError::Command {
            cmd: format!("{what} ({member} of {})", deb.display()),
            reason,
        }
        .into());
    }
    Ok(())
}

/// Which kernel the user asked a board run to boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// A snapshot boot restores with the restore kernel when one is built for the bundle's
    /// kernel (the fast path); every other boot (cold, capture) is the stock kernel's.
    #[default]
    Default,
    /// The stock kernel, whatever the boot (`--stock-kernel`, `--bzimage`).
    Stock,
    /// The restore kernel, whatever the boot (`--restore-kernel`); an error when none is
    /// built.
    Restore,
}

/// The kernel a board run boots, as [`boot_kernel`] picks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootKernel {
    /// The bundle's own (stock) kernel.
    Stock,
    /// The stock kernel for a snapshot boot that would restore with the restore kernel by
    /// default, but none is built for `release`.
    StockNoRestoreKernel {
        /// The bundle's kernel release.
        release: String,
    },
    /// A restore kernel.
    Restore {
        /// Its vmlinux.
        vmlinux: PathBuf,
        /// Whether it was picked by default (not asked for by name).
        by_default: bool,
    },
}

impl BootKernel {
    /// A one-line note for the user when the pick was the default's: which kernel restores,
    /// and how to get the other.
    pub fn note(&self) -> Option<String> {
        match self {
            BootKernel::Stock
            | BootKernel::Restore {
                by_default: false, ..
            } => None,
            BootKernel::StockNoRestoreKernel { release } => Some(format!(
                "restoring with the stock kernel: no restore kernel built for {release} \
                 (`snapboot board restore-kernel` builds it, once; snapshot boots then use it)"
            )),
            BootKernel::Restore { .. } => Some(
                "restoring with the restore kernel (--stock-kernel restores with the stock \
                 kernel)"
                    .into(),
            ),
        }
    }
}

/// `--restore-kernel` without a restore kernel built.
#[derive(Debug, Error)]
#[error("no restore kernel built for {release}: run `snapboot board restore-kernel`")]
pub struct NotBuilt {
    /// The bundle's kernel release.
    pub release: String,
}

/// The kernel a board run of a bundle whose kernel is `release` boots: `choice`, for a
/// snapshot boot (a store attached, no capture) or not. `built` finds the restore kernel
/// built for `release` ([`cached`]); it is asked only when the answer depends on it.
pub fn boot_kernel(
    choice: KernelChoice,
    snapshot_boot: bool,
    release: &str,
    built: impl FnOnce() -> Option<RestoreKernel>,
) -> Result<BootKernel, NotBuilt> {
    match choice {
        KernelChoice::Stock => Ok(BootKernel::Stock),
        KernelChoice::Default if !snapshot_boot => Ok(BootKernel::Stock),
        KernelChoice::Restore => match built() {
            Some(k) => Ok(BootKernel::Restore {
                vmlinux: k.image,
                by_default: false,
            }),
            None => Err(NotBuilt {
                release: release.to_string(),
            }),
        },
        KernelChoice::Default => Ok(match built() {
            Some(k) => BootKernel::Restore {
                vmlinux: k.image,
                by_default: true,
            },
            None => BootKernel::StockNoRestoreKernel {
                release: release.to_string(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernelpack::kconfig::{self, Value};

    fn built() -> Option<RestoreKernel> {
        Some(RestoreKernel {
            image: PathBuf::from("/rk/vmlinux"),
            arch: Arch::X86_64,
            release: "6.1.192-snapboot-restore".into(),
            version: None,
            source: "linux-source-6.1_6.1.192-2_all.deb".into(),
            build_secs: 200.0,
        })
    }

    /// A source package like Debian's: `usr/src/linux-source-9.9.tar.xz` holding a tree
    /// with a Makefile.
    fn source_deb(dir: &Path) -> PathBuf {
        let pkg = dir.join("pkg");
        let tree = dir.join("linux-source-9.9");
        fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
        fs::create_dir_all(pkg.join("usr/src")).unwrap();
        fs::create_dir_all(tree.join("kernel")).unwrap();
        fs::write(tree.join("Makefile"), "VERSION = 9\n").unwrap();
        fs::write(tree.join("kernel/power.c"), "int x;\n").unwrap();
        fs::write(
            pkg.join("DEBIAN/control"),
            "Package: linux-source-9.9\nVersion: 9.9.1-1\nArchitecture: all\n\
             Maintainer: t <t@t>\nDescription: t\n",
        )
        .unwrap();
        run(Command::new("tar")
            .args(["-cJf"])
            .arg(pkg.join("usr/src/linux-source-9.9.tar.xz"))
            .arg("-C")
            .arg(dir)
            .arg("linux-source-9.9"))
        .unwrap();
        let deb = dir.join("linux-source-9.9_9.9.1-1_all.deb");
        run(Command::new("dpkg-deb")
            .args(["-Zxz", "--build"])
            .arg(&pkg)
            .arg(&deb))
        .unwrap();
        deb
    }

    #[test]
    fn the_source_is_unpacked_once_and_a_cut_off_unpack_is_redone() {
        let dir = tempfile::tempdir().unwrap();
        let deb = source_deb(dir.path());
        let cache = dir.path().join("source");
        fs::create_dir_all(&cache).unwrap();
        let tree = source_tree(&deb, &cache).unwrap();
        assert_eq!(
            tree,
            cache.join("linux-source-9.9_9.9.1-1_all/linux-source-9.9")
        );
        assert_eq!(
            fs::read_to_string(tree.join("kernel/power.c")).unwrap(),
            "int x;\n"
        );
        // The second build finds the tree: a file put there stays (nothing unpacked again).
        fs::write(tree.join("kept"), "").unwrap();
        assert_eq!(source_tree(&deb, &cache).unwrap(), tree);
        assert!(tree.join("kept").is_file());
        // An unpack cut off before its end (no mark) is thrown away and done again.
        fs::remove_file(tree.parent().unwrap().join(UNPACKED)).unwrap();
        fs::remove_file(tree.join("kernel/power.c")).unwrap();
        assert_eq!(source_tree(&deb, &cache).unwrap(), tree);
        assert!(tree.join("kernel/power.c").is_file() && !tree.join("kept").exists());
        // No partial directory is left behind.
        let left: Vec<_> = fs::read_dir(&cache)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".partial."))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn a_package_without_a_source_tarball_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let deb = source_deb(dir.path());
        assert_eq!(
            source_member(&run(Command::new("dpkg-deb").arg("-c").arg(&deb)).unwrap()),
            Some("./usr/src/linux-source-9.9.tar.xz")
        );
        assert_eq!(
            decompress_flag("./usr/src/linux-source-9.9.tar.xz"),
            Some("--xz")
        );
        assert_eq!(decompress_flag("./usr/src/linux-source-9.9.tar.lz"), None);
        assert_eq!(
            source_member("drwxr-xr-x root/root 0 2026-11-26 17:12 ./usr/src/\n"),
            None
        );
        let bogus = dir.path().join("bogus_1_all.deb");
        fs::write(&bogus, "not a package").unwrap();
        let e = source_tree(&bogus, dir.path()).unwrap_err().to_string();
        assert!(e.contains("dpkg-deb"), "{e}");
    }

    #[test]
    fn a_snapshot_boot_restores_with_the_restore_kernel_by_default_when_one_is_built() {
        let k = boot_kernel(KernelChoice::Default, true, "6.1.0-56-amd64", built).unwrap();
        assert_eq!(
            k,
            BootKernel::Restore {
                vmlinux: PathBuf::from("/rk/vmlinux"),
                by_default: true
            }
        );
        assert_eq!(
            k.note().unwrap(),
            "restoring with the restore kernel (--stock-kernel restores with the stock kernel)"
        );
    }

    #[test]
    fn without_a_restore_kernel_a_snapshot_boot_takes_the_stock_kernel_and_says_how_to_build_one() {
        let k = boot_kernel(KernelChoice::Default, true, "6.1.0-56-amd64", || None).unwrap();
        assert_eq!(
            k,
            BootKernel::StockNoRestoreKernel {
                release: "6.1.0-56-amd64".into()
            }
        );
        let note = k.note().unwrap();
        assert!(
            note.contains("no restore kernel built for 6.1.0-56-amd64")
                && note.contains("`snapboot board restore-kernel`")
                && !note.contains('\n'),
            "{note}"
        );
    }

    #[test]
    fn cold_and_capture_boots_and_stock_kernel_runs_never_look_for_a_restore_kernel() {
        let never = || -> Option<RestoreKernel> { panic!("looked for a restore kernel") };
        for (choice, snapshot) in [
            (KernelChoice::Default, false),
            (KernelChoice::Stock, true),
            (KernelChoice::Stock, false),
        ] {
            let k = boot_kernel(choice, snapshot, "6.1.0-56-amd64", never).unwrap();
            assert_eq!(k, BootKernel::Stock, "{choice:?} snapshot={snapshot}");
            assert_eq!(k.note(), None);
        }
    }

    #[test]
    fn an_explicit_restore_kernel_is_used_on_any_boot_and_refused_when_not_built() {
        for snapshot in [false, true] {
            let k = boot_kernel(KernelChoice::Restore, snapshot, "6.1.0-56-amd64", built);
            assert!(
                matches!(
                    k,
                    Ok(BootKernel::Restore {
                        by_default: false,
                        ..
                    })
                ),
                "{k:?}"
            );
            assert_eq!(k.unwrap().note(), None, "asked for by name: nothing to say");
        }
        let err = boot_kernel(KernelChoice::Restore, true, "6.1.0-56-amd64", || None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no restore kernel built for 6.1.0-56-amd64: run `snapboot board restore-kernel`"
        );
    }

    #[test]
    fn the_project_fragment_asks_for_what_restoring_needs() {
        let on = |name| kconfig::value(FRAGMENT, name) == Some(Value::Yes);
        for need in [
            "HIBERNATION",
            "HIBERNATION_SNAPSHOT_DEV",
            "PVH",
            "VIRTIO_BLK",
            "X86_5LEVEL",
            "PNP",
            "TCG_TIS",
            "TCG_CRB",
            // The UEFI PC: runtime services on, and the map kexec hands the stock kernel.
            "EFI",
            "EFI_RUNTIME_MAP",
        ] {
            assert!(on(need), "{need}");
        }
        assert!(!on("EFI_DISABLE_RUNTIME"));
        assert_eq!(kconfig::value(FRAGMENT, "MODULES"), Some(Value::NotSet));
        // devsys::system::RESTORE_KERNEL_SUFFIX recognises a restore kernel by this.
        assert_eq!(
            kconfig::value(FRAGMENT, "LOCALVERSION"),
            Some(Value::Str(bootparams::RESTORE_KERNEL_SUFFIX))
        );
    }

    fn arm64_stock(version: Option<&str>) -> KernelInfo {
        KernelInfo {
            release: "6.1.0-56-arm64".into(),
            bzimage: PathBuf::from("/k/vmlinuz"),
            modules_dir: PathBuf::from("/k/modules"),
            config: None,
            source: "linux-image-6.1.0-56-arm64:arm64".into(),
            arch: Arch::Arm64,
            image: Some(PathBuf::from("/k/Image")),
            version: version.map(str::to_string),
        }
    }

    #[test]
    fn an_arm64_key_names_the_architecture_and_the_stamped_version() {
        let deb = "linux-source-6.1_6.1.192-2_all.deb";
        let v1 = "#1 SMP Debian 6.1.192-2 (2026-11-16)";
        let arm = key_of(&arm64_stock(Some(v1)), deb, "gcc 12").unwrap();
        assert_eq!(
            arm,
            cache_key(&[deb, FRAGMENT_ARM64, "gcc 12", "arm64", v1])
        );
        let v2 = "#1 SMP Debian 6.1.193-1 (2026-12-01)";
        assert_ne!(arm, key_of(&arm64_stock(Some(v2)), deb, "gcc 12").unwrap());
        let mut x86 = arm64_stock(None);
        x86.arch = Arch::X86_64;
        assert_eq!(
            key_of(&x86, deb, "gcc 12").unwrap(),
            cache_key(&[deb, FRAGMENT, "gcc 12"]),
            "x86_64's key is what it was before arm64"
        );
        let err = key_of(&arm64_stock(None), deb, "gcc 12").unwrap_err();
        assert!(matches!(err, RestoreKernelError::NoVersion { .. }), "{err}");
        assert!(
            err.to_string().contains("fetch-kernel --arch arm64"),
            "{err}"
        );
        let cut = key_of(&arm64_stock(Some("#1 SMP")), deb, "gcc 12").unwrap_err();
        assert!(matches!(cut, RestoreKernelError::Stamp(_)), "{cut}");
    }

    #[test]
    fn the_arm64_fragment_asks_for_what_restoring_and_the_stamp_need() {
        let on = |name| kconfig::value(FRAGMENT_ARM64, name) == Some(Value::Yes);
        for need in [
            "HIBERNATION",
            "HIBERNATION_SNAPSHOT_DEV",
            "SUSPEND",
            "ARM_PSCI_FW",
            "PCI_HOST_GENERIC",
            "VIRTIO_BLK",
            "SERIAL_AMBA_PL011_CONSOLE",
            "RTC_DRV_PL031",
            "KEXEC_FILE",
            "ARM64_VA_BITS_48",
            "TCG_TIS",
        ] {
            assert!(on(need), "{need}");
        }
        // Debian's arm64 kernel is "#1 SMP Debian ...": the fragment's words must be SMP.
        let stamp = VersionStamp::parse("#1 SMP Debian 6.1.192-2 (2026-11-16)").unwrap();
        assert_eq!(stamp.check_config(FRAGMENT_ARM64), Ok(()));
        assert_eq!(
            kconfig::value(FRAGMENT_ARM64, "LOCALVERSION"),
            Some(Value::Str(bootparams::RESTORE_KERNEL_SUFFIX))
        );
        assert_eq!(fragment(Arch::Arm64), FRAGMENT_ARM64);
        assert_eq!(product(Arch::Arm64), ("Image", "arch/arm64/boot/Image"));
        assert_eq!(product(Arch::X86_64).0, "vmlinux");
        assert_eq!(extra_products(Arch::Arm64), &[]);
        assert_eq!(
            bzimage_beside(Path::new("/rk/restore-1/vmlinux")),
            PathBuf::from("/rk/restore-1/bzImage")
        );
        assert_eq!(extra_products(Arch::X86_64)[0].0, "bzImage");
    }

    #[test]
    fn a_restore_record_from_before_arm64_loads_as_x86_64() {
        let old = r#"{"vmlinux":"/rk/vmlinux","release":"6.1.192-snapboot-restore","source":"s","build_secs":200.0}"#;
        let k: RestoreKernel = serde_json::from_str(old).unwrap();
        assert_eq!(
            (k.image, k.arch, k.version),
            (PathBuf::from("/rk/vmlinux"), Arch::X86_64, None)
        );
    }

    #[test]
    fn keys_and_packages() {
        let deb = "linux-source-6.1_6.1.192-2_all.deb";
        let a = cache_key(&[deb, "F", "gcc 12"]);
        assert_eq!(a.len(), 16);
        assert_ne!(
            a,
            cache_key(&["linux-source-6.1_6.1.193-1_all.deb", "F", "gcc 12"])
        );
        assert_ne!(a, cache_key(&[deb, "F2", "gcc 12"]));
        assert_ne!(
            cache_key(&["ab", "c"]),
            cache_key(&["a", "bc"]),
            "parts are delimited"
        );
        assert_eq!(
            source_package("6.1.0-56-amd64").as_deref(),
            Some("linux-source-6.1")
        );
        assert_eq!(
            source_package("6.12.9+bpo-amd64").as_deref(),
            Some("linux-source-6.12")
        );
        assert_eq!(source_package("custom"), None);
    }
}
