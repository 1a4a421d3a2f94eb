//! What `snapboot install` looks at in the system before it writes anything: which
//! initramfs generator and init system it has, whether the snapboot package is installed,
//! and which package owns a path, all read from the root's own files (dpkg's database in
//! `var/lib/dpkg`), so a root tree being built answers as the running system does.

use super::files::Generator;
use super::STORE_MODULES_PATH;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The Debian package's name.
pub const PACKAGE: &str = "snapboot";

/// The initramfs generator of the system at `root`: initramfs-tools when its hook functions
/// are there, else dracut when its module directory is.
pub fn generator(root: &Path) -> Option<Generator> {
    if root
        .join("usr/share/initramfs-tools/hook-functions")
        .is_file()
    {
        Some(Generator::InitramfsTools)
    } else if root.join("usr/lib/dracut/modules.d").is_dir() {
        Some(Generator::Dracut)
    } else {
        None
    }
}

/// Whether the system at `root` has systemd (its manager binary).
pub fn has_systemd(root: &Path) -> bool {
    ["usr/lib/systemd/systemd", "lib/systemd/systemd"]
        .iter()
        .any(|p| root.join(p).is_file())
}

/// Whether dpkg's database at `root` says the package is installed (`Status: install ok
/// installed`, or any state but `not-installed` and `config-files`: its files are there).
pub fn package_installed(root: &Path, package: &str) -> bool {
    let Ok(status) = fs::read_to_string(root.join("var/lib/dpkg/status")) else {
        return false;
    };
    status.split("\n\n").any(|para| {
        let field = |name: &str| {
            para.lines()
                .find_map(|l| l.strip_prefix(name).map(str::trim))
                .unwrap_or("")
        };
        field("Package:") == package
            && !field("Status:").is_empty()
            && !field("Status:").ends_with(" not-installed")
            && !field("Status:").ends_with(" config-files")
    })
}

/// How snapboot came into the system at a root: what its hints tell the administrator to
/// run depends on it (the package's files are dpkg's; `snapboot install` keeps a manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installation {
    /// The Debian package (/usr/sbin/snapboot, the hook in /usr/share/initramfs-tools).
    Package,
    /// `snapboot install` (/etc/snapboot/installed.manifest).
    Command,
    /// Neither: a root built another way (the board's), or snapboot not installed.
    Neither,
}

impl Installation {
    /// How snapboot came into the system at `root`.
    pub fn of(root: &Path) -> Self {
        if package_installed(root, PACKAGE) {
            Self::Package
        } else if root.join(super::manifest::MANIFEST_PATH).is_file() {
            Self::Command
        } else {
            Self::Neither
        }
    }

    /// What to run so the initramfs loads the store's drivers `modules` (before udev) for
    /// `store`, as this installation does it; `rebuild` is the generator's rebuild command.
    pub fn store_modules_fix(self, store: &str, modules: &[String], rebuild: &str) -> String {
        let listed = match modules {
            [] => "the store's drivers".to_string(),
            m => m.join(" "),
        };
        match self {
            Self::Command => format!(
                "`snapboot install --store {store}` lists its drivers in \
                 /{STORE_MODULES_PATH} and rebuilds the initramfs"
            ),
            Self::Package | Self::Neither => {
                format!("list {listed} in /{STORE_MODULES_PATH}, one a line, and run `{rebuild}`")
            }
        }
    }

    /// What to run so the capture unit starts after the application `app` (a unit name, or
    /// a placeholder) is ready.
    pub fn capture_after_fix(self, app: &str) -> String {
        match self {
            Self::Command => format!("`snapboot install --after {app}`"),
            Self::Package | Self::Neither => format!(
                "`systemctl edit {}` with `[Unit]` `After={app}` `Wants={app}`",
                super::files::CAPTURE_UNIT_NAME
            ),
        }
    }
}

/// The packages owning each of `paths` (absolute in the installed system), as `dpkg -S`
/// says it, from the file lists in `root/var/lib/dpkg/info`. Paths no package owns are
/// left out.
pub fn owners(root: &Path, paths: &[PathBuf]) -> HashMap<PathBuf, String> {
    let mut found = HashMap::new();
    let Ok(dir) = fs::read_dir(root.join("var/lib/dpkg/info")) else {
        return found;
    };
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(package) = name.strip_suffix(".list") else {
            continue;
        };
        let Ok(list) = fs::read_to_string(entry.path()) else {
            continue;
        };
        for line in list.lines() {
            if let Some(p) = paths.iter().find(|p| p.as_os_str() == line) {
                let package = package.split(':').next().unwrap_or(package);
                found.insert(p.clone(), package.to_string());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installation_is_the_package_the_manifest_or_neither_and_its_fixes_match() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Installation::of(d.path()), Installation::Neither);
        let manifest = d.path().join(super::super::manifest::MANIFEST_PATH);
        fs::create_dir_all(manifest.parent().unwrap()).unwrap();
        fs::write(&manifest, "").unwrap();
        assert_eq!(Installation::of(d.path()), Installation::Command);
        let command = Installation::Command.store_modules_fix("PARTLABEL=s", &[], "x");
        assert!(
            command.starts_with("`snapboot install --store PARTLABEL=s`"),
            "{command}"
        );
        let status = d.path().join("var/lib/dpkg/status");
        fs::create_dir_all(status.parent().unwrap()).unwrap();
        fs::write(&status, "Package: snapboot\nStatus: install ok installed\n").unwrap();
        assert_eq!(Installation::of(d.path()), Installation::Package);
        let modules = ["virtio_pci".to_string(), "virtio_blk".to_string()];
        let package =
            Installation::Package.store_modules_fix("PARTLABEL=s", &modules, "update-initramfs -u");
        assert_eq!(
            package,
            "list virtio_pci virtio_blk in /etc/snapboot/store-modules, one a line, and run \
             `update-initramfs -u`"
        );
        assert!(!Installation::Package
            .capture_after_fix("app.service")
            .contains("snapboot install"));
        assert!(Installation::Command
            .capture_after_fix("app.service")
            .contains("--after app.service"));
    }

    #[test]
    fn dpkg_s_and_dpkg_status_are_read_from_the_root() {
        let d = tempfile::tempdir().unwrap();
        let info = d.path().join("var/lib/dpkg/info");
        fs::create_dir_all(&info).unwrap();
        fs::write(
            info.join("snapboot.list"),
            "/.\n/usr/sbin\n/usr/sbin/snapboot\n",
        )
        .unwrap();
        fs::write(info.join("base-files:amd64.list"), "/etc/os-release\n").unwrap();
        let asked = vec![
            PathBuf::from("/usr/sbin/snapboot"),
            PathBuf::from("/etc/os-release"),
            PathBuf::from("/usr/local/sbin/snapboot"),
        ];
        let o = owners(d.path(), &asked);
        assert_eq!(o.len(), 2, "{o:?}");
        assert_eq!(o[&asked[0]], "snapboot");
        assert_eq!(o[&asked[1]], "base-files");
        assert!(!package_installed(d.path(), PACKAGE));
        let status = d.path().join("var/lib/dpkg/status");
        fs::write(
            &status,
            "Package: snapboot\nStatus: deinstall ok config-files\n\n",
        )
        .unwrap();
        assert!(!package_installed(d.path(), PACKAGE));
        fs::write(
            &status,
            "Package: zstd\nStatus: install ok installed\n\nPackage: snapboot\nStatus: install ok installed\nVersion: 0.1.0\n",
        )
        .unwrap();
        assert!(package_installed(d.path(), PACKAGE));
    }

    #[test]
    fn the_generator_is_the_one_whose_files_are_there() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(generator(d.path()), None);
        fs::create_dir_all(d.path().join("usr/lib/dracut/modules.d")).unwrap();
        assert_eq!(generator(d.path()), Some(Generator::Dracut));
        fs::create_dir_all(d.path().join("usr/share/initramfs-tools")).unwrap();
        fs::write(
            d.path().join("usr/share/initramfs-tools/hook-functions"),
            "",
        )
        .unwrap();
        assert_eq!(generator(d.path()), Some(Generator::InitramfsTools));
        assert!(!has_systemd(d.path()));
    }
}
