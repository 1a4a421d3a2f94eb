//! The Debian package `snapboot_VERSION_ARCH.deb`, built from a static device binary with
//! `dpkg-deb` alone (no debhelper, so `make deb` needs nothing beyond dpkg), holding the
//! files `devinstall::install::files` lists at their package paths:
//!
//! ```text
//!   /usr/sbin/snapboot                             the static device binary
//!   /usr/share/initramfs-tools/{hooks,scripts/*}/snapboot
//!   /usr/lib/dracut/modules.d/90snapboot/          the dracut module
//!   /usr/lib/systemd/system/snapboot-*             units (the capture enabled by postinst)
//!   /etc/kernel/postinst.d/zz-snapboot             conffiles: update hooks, configuration
//!   /etc/initramfs/post-update.d/snapboot
//!   /etc/snapboot/snapboot.conf
//!   /usr/share/man/man8/snapboot*.8.gz             crates/docgen (clap_mangen)
//!   /usr/share/man/man5/snapboot.conf.5.gz         the settings table (bootparams::config)
//!   /usr/share/{bash-completion,zsh,fish}/...      crates/docgen (clap_complete)
//!   /usr/share/doc/snapboot/{copyright,changelog.gz}
//!   /usr/share/doc/snapboot/README.Debian          the steps to a restoring device
//!   /usr/share/lintian/overrides/snapboot          each with its reason
//!   DEBIAN/ control conffiles md5sums postinst postrm triggers
//! ```
//!
//! The initramfs is rebuilt through the `update-initramfs` trigger, which initramfs-tools and
//! dracut both take, once at the end of the dpkg run (packaging/deb/postinst says more).

use devinstall::install::files::{BINARY_PATH, SHIPPED};
use guestarch::Arch;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package's name.
pub const PACKAGE: &str = "snapboot";
/// Its version: the workspace's (a native package, so no Debian revision).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

const POSTINST: &str = include_str!("../../../packaging/deb/postinst");
const POSTRM: &str = include_str!("../../../packaging/deb/postrm");
const TRIGGERS: &str = include_str!("../../../packaging/deb/triggers");
const COPYRIGHT: &str = include_str!("../../../packaging/deb/copyright");
const CHANGELOG: &str = include_str!("../../../packaging/deb/changelog");
const LINTIAN_OVERRIDES: &str = include_str!("../../../packaging/deb/lintian-overrides");
/// What the package installed and the steps from there to a restoring device (postinst
/// points at it while no store is named).
const README_DEBIAN: &str = include_str!("../../../packaging/deb/README.Debian");

/// Why the package could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DebError {
    /// The binary is not a static executable of the package's architecture.
    #[error("{path} is not a static {arch} executable (found: {found})")]
    WrongBinary {
        /// The binary.
        path: PathBuf,
        /// The package's architecture.
        arch: Arch,
        /// What it is.
        found: String,
    },
    /// The man pages or completions could not be written.
    #[error("man pages and completions")]
    Docs(#[source] anyhow::Error),
    /// A host command failed.
    #[error("`{cmd}` failed: {reason}")]
    Command {
        /// The command.
        cmd: String,
        /// Status and the end of its error output.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DebError + '_ {
    move |source| DebError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The package's file name.
pub fn file_name(arch: Arch) -> String {
    format!("{PACKAGE}_{VERSION}_{}.deb", arch.debian())
}

/// The control file. `installed_kib`: the unpacked size (dpkg's `Installed-Size`).
pub fn control(arch: Arch, installed_kib: u64) -> String {
    format!(
        "Package: {PACKAGE}\n\
         Version: {VERSION}\n\
         Architecture: {arch}\n\
         Maintainer: snapboot developers <snapboot@example.org>\n\
         Installed-Size: {installed_kib}\n\
         Depends: systemd, initramfs-tools | dracut\n\
         Section: admin\n\
         Priority: optional\n\
         Description: snapshot boot: restore a booted system from an image\n \
         snapboot captures the running system once it is ready (a systemd unit is the\n \
         snapshot point) and, at every later power-on, restores that image from the\n \
         initramfs before the root filesystem is mounted, instead of booting cold.\n \
         .\n \
         This package holds the static snapboot binary, the initramfs-tools hook and\n \
         scripts, a dracut module, the systemd units, and the kernel and initramfs\n \
         update hooks that mark stored images stale.\n",
        arch = arch.debian()
    )
}

fn put(stage: &Path, rel: &str, data: &[u8], mode: u32) -> Result<(), DebError> {
    let p = stage.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(io(d))?;
    }
    fs::write(&p, data).map_err(io(&p))?;
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).map_err(io(&p))
}

/// gzip -9n: no name and no time in the header, so the same input makes the same bytes.
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(data).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

fn run(cmd: &mut Command) -> Result<Vec<u8>, DebError> {
    hostcmd::output(cmd).map_err(|f| DebError::Command {
        cmd: f.cmd,
        reason: f.reason,
    })
}

/// Every regular file under `dir`, relative to it, sorted.
fn files_under(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) -> Result<(), DebError> {
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let p = e.map_err(io(dir))?.path();
        if p.is_dir() {
            files_under(&p, base, out)?;
        } else {
            out.push(p.strip_prefix(base).unwrap_or(&p).to_path_buf());
        }
    }
    out.sort();
    Ok(())
}

/// Fills `stage` with the package's tree (and its DEBIAN directory) for `binary`.
pub fn stage(binary: &Path, arch: Arch, stage: &Path) -> Result<(), DebError> {
    let exe = fs::read(binary).map_err(io(binary))?;
    let found = Arch::of_elf(&exe);
    if found != Some(arch) || !kernelpack::is_static_elf(&exe) {
        return Err(DebError::WrongBinary {
            path: binary.to_path_buf(),
            arch,
            found: match found {
                Some(a) if a == arch => "a dynamically linked one".into(),
                Some(a) => format!("{} executable", a.name()),
                None => "not an ELF executable".into(),
            },
        });
    }
    put(stage, BINARY_PATH, &exe, 0o755)?;
    for f in SHIPPED {
        put(stage, f.package, f.text.as_bytes(), f.mode)?;
    }
    let pages = docgen::write_man_pages(stage).map_err(DebError::Docs)?;
    for page in pages {
        let text = fs::read(&page).map_err(io(&page))?;
        let mut gz = page.clone().into_os_string();
        gz.push(".gz");
        fs::write(&gz, gzip(&text)).map_err(io(&page))?;
        fs::remove_file(&page).map_err(io(&page))?;
    }
    docgen::write_completions(stage).map_err(DebError::Docs)?;
    let doc = "usr/share/doc/snapboot";
    put(
        stage,
        &format!("{doc}/copyright"),
        COPYRIGHT.as_bytes(),
        0o644,
    )?;
    put(
        stage,
        &format!("{doc}/changelog.gz"),
        &gzip(CHANGELOG.as_bytes()),
        0o644,
    )?;
    put(
        stage,
        &format!("{doc}/README.Debian"),
        README_DEBIAN.as_bytes(),
        0o644,
    )?;
    put(
        stage,
        "usr/share/lintian/overrides/snapboot",
        LINTIAN_OVERRIDES.as_bytes(),
        0o644,
    )?;

    let mut files = Vec::new();
    files_under(stage, stage, &mut files)?;
    let mut sums = String::new();
    let mut bytes = 0u64;
    for f in &files {
        let data = fs::read(stage.join(f)).map_err(io(f))?;
        bytes += data.len() as u64;
        sums.push_str(&format!("{:x}  {}\n", md5::compute(&data), f.display()));
    }
    let conffiles: String = SHIPPED
        .iter()
        .filter(|f| f.conffile())
        .map(|f| format!("/{}\n", f.package))
        .collect();
    let dirs = files.iter().flat_map(|f| f.ancestors().skip(1)).count() as u64;
    let kib = bytes.div_ceil(1024) + dirs;
    put(
        stage,
        "DEBIAN/control",
        control(arch, kib).as_bytes(),
        0o644,
    )?;
    put(stage, "DEBIAN/md5sums", sums.as_bytes(), 0o644)?;
    put(stage, "DEBIAN/conffiles", conffiles.as_bytes(), 0o644)?;
    put(stage, "DEBIAN/triggers", TRIGGERS.as_bytes(), 0o644)?;
    put(stage, "DEBIAN/postinst", POSTINST.as_bytes(), 0o755)?;
    put(stage, "DEBIAN/postrm", POSTRM.as_bytes(), 0o755)?;
    // Directories as dpkg expects them whatever the umask.
    let mut all = Vec::new();
    dirs_under(stage, &mut all)?;
    for d in all {
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).map_err(io(&d))?;
    }
    Ok(())
}

fn dirs_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), DebError> {
    out.push(dir.to_path_buf());
    for e in fs::read_dir(dir).map_err(io(dir))? {
        let p = e.map_err(io(dir))?.path();
        if p.is_dir() && !p.is_symlink() {
            dirs_under(&p, out)?;
        }
    }
    Ok(())
}

/// Builds `out_dir/snapboot_VERSION_ARCH.deb` from the static device binary `binary`
/// (`dpkg-deb --build`, files owned by root). Returns its path.
pub fn build(binary: &Path, arch: Arch, out_dir: &Path) -> Result<PathBuf, DebError> {
    fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    let tmp = tempfile::Builder::new()
        .prefix(".snapboot-deb-")
        .tempdir_in(out_dir)
        .map_err(io(out_dir))?;
    let root = tmp.path().join("root");
    stage(binary, arch, &root)?;
    let deb = out_dir.join(file_name(arch));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&root)
        .arg(&deb))?;
    Ok(deb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_file_names_what_a_system_needs() {
        let c = control(Arch::Arm64, 4200);
        assert!(c.contains("\nArchitecture: arm64\n"), "{c}");
        assert!(
            c.contains("\nDepends: systemd, initramfs-tools | dracut\n"),
            "{c}"
        );
        assert!(c.contains("\nInstalled-Size: 4200\n"), "{c}");
        assert_eq!(
            file_name(Arch::X86_64),
            format!("snapboot_{VERSION}_amd64.deb")
        );
        // postinst points at the README.Debian the package ships.
        assert!(POSTINST.contains("/usr/share/doc/snapboot/README.Debian"));
        // The changelog's version is the package's.
        assert!(
            CHANGELOG.starts_with(&format!("snapboot ({VERSION}) ")),
            "{CHANGELOG}"
        );
    }

    /// Every command line README.Debian shows (an indented line starting `snapboot `, up to
    /// two spaces or a `#`) is one the device binary takes.
    #[test]
    fn the_readme_debian_commands_are_the_binarys() {
        use clap::Parser;
        let commands: Vec<&str> = README_DEBIAN
            .lines()
            .filter(|l| l.starts_with(' '))
            .map(|l| l.trim_start())
            .filter(|l| l.starts_with("snapboot "))
            .map(|l| l.split("  ").next().unwrap_or(l))
            .map(|l| l.split('#').next().unwrap_or(l).trim_end())
            .collect();
        assert!(commands.len() >= 4, "{commands:?}");
        for c in commands {
            let parsed = snapboot_device::DeviceCli::try_parse_from(c.split_whitespace());
            assert!(
                parsed.is_ok(),
                "README.Debian: `{c}`: {}",
                parsed.unwrap_err()
            );
        }
    }

    #[test]
    fn the_tree_has_every_file_at_its_package_path_and_compressed_pages() {
        let d = tempfile::tempdir().unwrap();
        let stage_dir = d.path().join("root");
        // busybox-static: a static x86_64 executable the host has (README set-up).
        stage(Path::new("/bin/busybox"), Arch::X86_64, &stage_dir).unwrap();
        for f in SHIPPED {
            assert!(stage_dir.join(f.package).is_file(), "{}", f.package);
        }
        let man = stage_dir.join("usr/share/man/man8");
        assert!(man.join("snapboot.8.gz").is_file());
        assert!(man.join("snapboot-install.8.gz").is_file());
        assert!(!man.join("snapboot.8").exists());
        let readme = fs::read_to_string(stage_dir.join("usr/share/doc/snapboot/README.Debian"));
        assert!(readme.unwrap().contains("update-initramfs -u"));
        assert!(stage_dir
            .join("usr/share/man/man5/snapboot.conf.5.gz")
            .is_file());
        let conffiles = fs::read_to_string(stage_dir.join("DEBIAN/conffiles")).unwrap();
        assert!(
            conffiles.contains("/etc/snapboot/snapboot.conf\n"),
            "{conffiles}"
        );
        assert!(!conffiles.contains("/usr/"), "{conffiles}");
        let sums = fs::read_to_string(stage_dir.join("DEBIAN/md5sums")).unwrap();
        assert!(sums.contains("  usr/sbin/snapboot\n"), "{sums}");
        assert!(!sums.contains("DEBIAN"), "{sums}");
        let e = stage(Path::new("/bin/sh"), Arch::X86_64, &d.path().join("x")).unwrap_err();
        assert!(matches!(e, DebError::WrongBinary { .. }), "{e}");
    }
}
