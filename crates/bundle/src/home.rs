//! Where snapboot keeps kernels and bundles (`$SNAPBOOT_HOME`, default `./.snapboot`), and
//! how a name on the command line becomes a bundle.

use std::path::{Path, PathBuf};
use thiserror::Error;

use crate::bundle::{BuildOptions, Bundle, BundleError};
use crate::workload::Workload;
use crate::workload_error::WorkloadError;
use guestarch::Arch;
use hostkernel::kernel::{KernelError, KernelInfo};

/// Why no kernel or bundle could be had.
#[derive(Debug, Error)]
pub enum HomeError {
    /// No kernel was fetched and none was named.
    #[error(
        "no kernel fetched yet: run `snapboot board fetch-kernel` or pass --kernel and --modules"
    )]
    NoKernel(#[source] KernelError),
    /// The device binary for the board's architecture is not built.
    #[error(
        "no {arch} snapboot-device at {} (build it with `make build` or scripts/device-arm64.sh)",
        path.display()
    )]
    NoDeviceBinary { arch: Arch, path: PathBuf },
    /// No kernel of a non-default architecture was fetched.
    #[error("no {0} kernel fetched yet: run `snapboot board fetch-kernel --arch {0}`")]
    NoKernelOf(Arch, #[source] KernelError),
    /// The kernel named on the command line is unusable.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A bundle could not be loaded or built.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The workload is unknown.
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// The running snapboot binary cannot be found (it is copied into every bundle).
    #[error("cannot find the running snapboot binary")]
    Exe(#[source] std::io::Error),
    /// The restorer (crates/restorer) is not built where it is looked for.
    #[error(
        "no restorer at {} (an x86_64 ELF): build it with `make build` or scripts/restorer.sh, \
         or name it with ${RESTORER_ENV}",
        path.display()
    )]
    NoRestorer { path: PathBuf },
    /// The EFI restorer is not built where it is looked for.
    #[error(
        "no EFI restorer at {} (a PE32+ EFI application): build it with `make build` or \
         `scripts/restorer.sh efi`, or name it with ${RESTORER_EFI_ENV}",
        path.display()
    )]
    NoEfiRestorer { path: PathBuf },
    /// The arm64 EFI restorer is not built where it is looked for.
    #[error(
        "no arm64 EFI restorer at {} (a PE32+ EFI application): build it with `make build` or \
         `scripts/restorer.sh efi-arm64`, or name it with ${RESTORER_EFI_ARM64_ENV}",
        path.display()
    )]
    NoArm64Restorer { path: PathBuf },
}

/// The environment variable that names the restorer's ELF, when it is not where
/// `scripts/restorer.sh` builds it beside the running binary.
pub const RESTORER_ENV: &str = "SNAPBOOT_RESTORER";
/// The environment variable that names the EFI restorer (`scripts/restorer.sh efi`).
pub const RESTORER_EFI_ENV: &str = "SNAPBOOT_RESTORER_EFI";
/// The environment variable that names the arm64 EFI restorer (`scripts/restorer.sh
/// efi-arm64`).
pub const RESTORER_EFI_ARM64_ENV: &str = "SNAPBOOT_RESTORER_EFI_ARM64";

/// The home directory, absolute (kernel.json and bundle.json record paths below it).
pub fn home() -> PathBuf {
    let h = std::env::var_os("SNAPBOOT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".snapboot"));
    std::path::absolute(&h).unwrap_or(h)
}

/// Where `board fetch-kernel` records the fetched kernel of `arch`: `kernel.json` for x86_64
/// (as before arm64 existed), `kernel-arm64.json` for arm64.
pub fn kernel_record(arch: Arch) -> PathBuf {
    home().join(kernel_record_name(arch))
}

fn kernel_record_name(arch: Arch) -> String {
    match arch {
        Arch::X86_64 => "kernel.json".into(),
        other => format!("kernel-{other}.json"),
    }
}

/// Where the fetched kernel packages of every architecture are unpacked (the package names
/// differ by architecture).
pub fn kernel_cache() -> PathBuf {
    home().join("kernels")
}

/// The kernel to use: `kernel` and `modules` when both are given, else the fetched one.
pub fn kernel(
    kernel: Option<&Path>,
    modules: Option<&Path>,
    arch: Arch,
) -> Result<KernelInfo, HomeError> {
    if let (Some(k), Some(m)) = (kernel, modules) {
        return Ok(KernelInfo::from_paths(k, m)?);
    }
    fetched_kernel(arch)
}

/// The kernel `board fetch-kernel` fetched for `arch`.
pub fn fetched_kernel(arch: Arch) -> Result<KernelInfo, HomeError> {
    KernelInfo::load(&kernel_record(arch)).map_err(|e| match arch {
        Arch::X86_64 => HomeError::NoKernel(e),
        other => HomeError::NoKernelOf(other, e),
    })
}

/// The snapboot binary the board of `arch` puts on the device. x86_64: `snapboot-device`
/// beside the running binary (`cargo build -p snapboot -p snapboot-device` builds both), a
/// fraction of the full tool's size, else the running binary itself, which has the device's
/// commands too. arm64: the cross-built one (`scripts/device-arm64.sh`, `make build`) in
/// `target/arm64`, or `$SNAPBOOT_DEVICE_ARM64`.
pub fn device_binary(arch: Arch) -> Result<PathBuf, HomeError> {
    let exe = std::env::current_exe().map_err(HomeError::Exe)?;
    match arch {
        Arch::X86_64 => Ok(device_binary_beside(&exe)),
        Arch::Arm64 => {
            let path = std::env::var_os("SNAPBOOT_DEVICE_ARM64")
                .map(PathBuf::from)
                .unwrap_or_else(|| cross_built_beside(&exe, arch));
            let head = std::fs::read(&path)
                .map(|b| b.into_iter().take(64).collect::<Vec<u8>>())
                .unwrap_or_default();
            if Arch::of_elf(&head) != Some(arch) {
                return Err(HomeError::NoDeviceBinary { arch, path });
            }
            Ok(path)
        }
    }
}

/// `target/ARCH/TRIPLE/release/snapboot-device` of the workspace whose
/// `target/HOST_TRIPLE/PROFILE/` holds `exe`.
fn cross_built_beside(exe: &Path, arch: Arch) -> PathBuf {
    target_dir_of(exe)
        .join(arch.name())
        .join(arch.rust_target())
        .join("release")
        .join("snapboot-device")
}

/// The `target` directory whose `HOST_TRIPLE/PROFILE/` holds `exe`.
fn target_dir_of(exe: &Path) -> &Path {
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap_or(Path::new("target"))
}

/// The restorer's ELF (crates/restorer, started by the PC's firmware in place of a kernel):
/// `$SNAPBOOT_RESTORER`, else where `scripts/restorer.sh` (`make build`) puts it in the
/// workspace of the running binary, `target/restorer/x86_64-unknown-linux-gnu/restorer/
/// restorer`, the way the arm64 device binary is found. An error naming the path and how
/// to build it when no x86_64 ELF is there.
pub fn restorer_elf() -> Result<PathBuf, HomeError> {
    let exe = std::env::current_exe().map_err(HomeError::Exe)?;
    let path = std::env::var_os(RESTORER_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| restorer_beside(&exe));
    restorer_at(path)
}

/// The restorer a board starts: on the PC the EFI application under UEFI (`uefi`), else
/// the PVH ELF; on the arm64 board the arm64 EFI application U-Boot starts.
pub fn restorer_program(arch: Arch, uefi: bool) -> Result<PathBuf, HomeError> {
    match (arch, uefi) {
        (Arch::Arm64, _) => restorer_efi_arm64(),
        (_, true) => restorer_efi(),
        (_, false) => restorer_elf(),
    }
}

/// The arm64 restorer (`scripts/restorer.sh efi-arm64`): `$SNAPBOOT_RESTORER_EFI_ARM64`,
/// else `target/restorer-efi-arm64/aarch64-unknown-linux-gnu/restorer/restorer.efi` in the
/// workspace of the running binary. An error naming the path and how to build it when no
/// PE file is there.
pub fn restorer_efi_arm64() -> Result<PathBuf, HomeError> {
    efi_program(RESTORER_EFI_ARM64_ENV, "restorer-efi-arm64", Arch::Arm64)
        .map_err(|path| HomeError::NoArm64Restorer { path })
}

/// The restorer as an EFI application (`scripts/restorer.sh efi`, the UEFI PC's):
/// `$SNAPBOOT_RESTORER_EFI`, else `target/restorer-efi/x86_64-unknown-linux-gnu/restorer/
/// restorer.efi` in the workspace of the running binary. An error naming the path and how
/// to build it when no PE file (`MZ`) is there.
pub fn restorer_efi() -> Result<PathBuf, HomeError> {
    efi_program(RESTORER_EFI_ENV, "restorer-efi", Arch::X86_64)
        .map_err(|path| HomeError::NoEfiRestorer { path })
}

/// The PE file `$env` names, else the one `scripts/restorer.sh` builds for `arch` in
/// target directory `dir` beside the running binary; `Err(path)` when no PE file
/// (`MZ`) is there (or the running binary cannot be found: the path is then empty).
fn efi_program(env: &str, dir: &str, arch: Arch) -> Result<PathBuf, PathBuf> {
    let path = match std::env::var_os(env) {
        Some(p) => PathBuf::from(p),
        None => {
            let exe = std::env::current_exe().map_err(|_| PathBuf::new())?;
            target_dir_of(&exe)
                .join(dir)
                .join(arch.rust_target())
                .join("restorer")
                .join("restorer.efi")
        }
    };
    let pe = std::fs::read(&path)
        .map(|b| b.starts_with(b"MZ"))
        .unwrap_or(false);
    if pe {
        Ok(path)
    } else {
        Err(path)
    }
}

/// `path` when it is an x86_64 ELF.
fn restorer_at(path: PathBuf) -> Result<PathBuf, HomeError> {
    let head = std::fs::read(&path)
        .map(|b| b.into_iter().take(64).collect::<Vec<u8>>())
        .unwrap_or_default();
    if Arch::of_elf(&head) != Some(Arch::X86_64) {
        return Err(HomeError::NoRestorer { path });
    }
    Ok(path)
}

/// Where `scripts/restorer.sh` builds the restorer in the workspace whose target directory
/// holds `exe`.
fn restorer_beside(exe: &Path) -> PathBuf {
    target_dir_of(exe)
        .join("restorer")
        .join(Arch::X86_64.rust_target())
        .join("restorer")
        .join("restorer")
}

fn device_binary_beside(exe: &Path) -> PathBuf {
    let device = exe.with_file_name("snapboot-device");
    if exe.file_name() != device.file_name() && device.is_file() {
        device
    } else {
        exe.to_path_buf()
    }
}

/// Where restore kernels are built and cached.
pub fn restore_kernel_cache() -> PathBuf {
    home().join("restore-kernels")
}

/// Where the debian workload's base root is kept between bundle builds.
pub fn debian_cache() -> PathBuf {
    home().join("debian")
}

/// Where Debian's packages of a foreign architecture are downloaded and unpacked
/// (`crate::foreign`), one directory per architecture.
pub fn debs_cache(arch: Arch) -> PathBuf {
    home().join("debs").join(arch.debian())
}

/// Where a built-in workload's bundle for the board of `arch` lives: `bundles/NAME` on the
/// x86_64 PC, `bundles/arm64/NAME` on the arm64 board.
pub fn builtin_bundle_dir(name: &str, arch: Arch) -> PathBuf {
    match arch {
        Arch::X86_64 => home().join("bundles").join(name),
        other => home().join("bundles").join(other.name()).join(name),
    }
}

/// Builds a built-in workload's bundle with the fetched kernel of `arch` and the snapboot
/// device binary for it.
pub fn build_builtin(name: &str, arch: Arch) -> Result<Bundle, HomeError> {
    let kernel = kernel(None, None, arch)?;
    let workload = Workload::builtin(name)?;
    let debs_dir = debs_cache(kernel.arch);
    Ok(Bundle::build(&BuildOptions {
        kernel,
        workload,
        rootfs_dir: None,
        snapboot_bin: device_binary(arch)?,
        image_key: None,
        device_key: None,
        config: None,
        out: builtin_bundle_dir(name, arch),
        cache_dir: debian_cache(),
        debs_dir,
    })?)
}

/// The built-in workload of `b` built again into `out` with the device key file `key` in its
/// initramfs and root (`snapboot.encrypt=key`), for benchmarks that compare encrypted
/// images with the plain ones of `b`.
pub fn build_keyed(b: &Bundle, key: &Path, out: &Path) -> Result<Bundle, HomeError> {
    let arch = b.kernel.arch;
    let workload = Workload::builtin(&b.workload.name)?;
    Ok(Bundle::build(&BuildOptions {
        kernel: b.kernel.clone(),
        workload,
        rootfs_dir: None,
        snapboot_bin: device_binary(arch)?,
        image_key: None,
        device_key: Some(key.to_path_buf()),
        config: None,
        out: out.to_path_buf(),
        cache_dir: debian_cache(),
        debs_dir: debs_cache(arch),
    })?)
}

/// What a bundle argument names: a directory (holding `bundle.json`, or any path with a
/// `/`), else a built-in workload's bundle under the home directory.
pub fn bundle_dir(arg: &str, arch: Arch) -> PathBuf {
    let p = Path::new(arg);
    if p.join("bundle.json").exists() || arg.contains('/') {
        p.to_path_buf()
    } else {
        builtin_bundle_dir(arg, arch)
    }
}

/// A bundle by directory or built-in name. A built-in bundle that carries another snapboot
/// binary is rebuilt (the board runs the snapboot inside the bundle); another directory
/// only gets a warning on stderr.
pub fn resolve_bundle(arg: &str, arch: Arch) -> Result<Bundle, HomeError> {
    let dir = bundle_dir(arg, arch);
    let b = Bundle::load(&dir)?;
    if let Ok(exe) = device_binary(b.kernel.arch) {
        if !b.carries(&exe) {
            if is_builtin_name(arg) {
                eprintln!("snapboot: bundle `{arg}` was built by another snapboot; rebuilding it");
                return build_builtin(arg, b.kernel.arch);
            }
            eprintln!(
                "snapboot: warning: {} was built by another snapboot binary; rebuild it to run this one on the board",
                dir.display()
            );
        }
    }
    Ok(b)
}

/// [`resolve_bundle`], building a missing built-in bundle first.
pub fn bundle_or_build(arg: &str, arch: Arch) -> Result<Bundle, HomeError> {
    match resolve_bundle(arg, arch) {
        Ok(b) => Ok(b),
        Err(_) if is_builtin_name(arg) => {
            eprintln!("snapboot: building the {arch} `{arg}` bundle first");
            build_builtin(arg, arch)
        }
        Err(e) => Err(e),
    }
}

fn is_builtin_name(arg: &str) -> bool {
    !arg.contains('/') && Workload::builtin(arg).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The restorer must be an x86_64 ELF; anything else (missing, an arm64 build, a
    /// script) is refused with the path and how to build it.
    #[test]
    fn the_restorer_is_an_x86_64_elf_or_an_error_that_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let elf = |machine: u16| {
            let mut h = b"\x7fELF".to_vec();
            h.resize(18, 0);
            h.extend_from_slice(&machine.to_le_bytes());
            h.resize(64, 0);
            h
        };
        let x86 = dir.path().join("restorer");
        std::fs::write(&x86, elf(62)).unwrap();
        assert_eq!(restorer_at(x86.clone()).unwrap(), x86);
        let arm = dir.path().join("restorer-arm64");
        std::fs::write(&arm, elf(183)).unwrap();
        for bad in [arm, dir.path().join("missing")] {
            let e = restorer_at(bad.clone()).unwrap_err().to_string();
            assert!(e.contains(&bad.display().to_string()), "{e}");
            assert!(
                e.contains("scripts/restorer.sh") && e.contains("SNAPBOOT_RESTORER"),
                "{e}"
            );
        }
    }

    #[test]
    fn names_and_directories() {
        assert!(is_builtin_name("shell") && is_builtin_name("app"));
        assert!(!is_builtin_name("./shell") && !is_builtin_name("mine"));
        assert_eq!(
            bundle_dir("out/mine", Arch::X86_64),
            PathBuf::from("out/mine")
        );
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("snapboot");
        assert_eq!(
            device_binary_beside(&exe),
            exe,
            "no device binary: the running one"
        );
        std::fs::write(dir.path().join("snapboot-device"), b"").unwrap();
        assert_eq!(
            device_binary_beside(&exe),
            dir.path().join("snapboot-device")
        );
        assert!(bundle_dir("shell", Arch::X86_64).ends_with("bundles/shell"));
        assert!(bundle_dir("shell", Arch::Arm64).ends_with("bundles/arm64/shell"));
        let exe = Path::new("/w/target/x86_64-unknown-linux-gnu/release/snapboot");
        assert_eq!(
            cross_built_beside(exe, Arch::Arm64),
            Path::new("/w/target/arm64/aarch64-unknown-linux-gnu/release/snapboot-device")
        );
        assert!(home().is_absolute());
        assert_eq!(
            restorer_beside(exe),
            Path::new("/w/target/restorer/x86_64-unknown-linux-gnu/restorer/restorer"),
            "where scripts/restorer.sh builds it"
        );
        assert_eq!(kernel_record_name(Arch::X86_64), "kernel.json");
        assert_eq!(kernel_record_name(Arch::Arm64), "kernel-arm64.json");
    }

    #[test]
    fn a_missing_directory_is_not_a_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing-here");
        let err = resolve_bundle(missing.to_str().unwrap(), Arch::X86_64).unwrap_err();
        assert!(matches!(err, HomeError::Bundle(_)), "{err}");
    }
}
