//! What `snapboot install` is asked to do ([`InstallOptions`]), why it can fail
//! ([`InstallError`]), and the small pieces the plan and the CLI share: unit and module name
//! checks, the `--after` drop-in, the store's driver modules read from sysfs.

use super::manifest;
use std::fs;
use std::path::{Path, PathBuf};

/// Where the store's modules are recorded, in the root and in the initramfs.
pub const STORE_MODULES_PATH: &str = "etc/snapboot/store-modules";
/// The drop-in that orders the capture after the application (`--after`).
pub const DROPIN_PATH: &str = "etc/systemd/system/snapboot-capture.service.d/after.conf";
/// Where the enabled capture unit's link goes.
pub const WANTS_DIR: &str = "etc/systemd/system/multi-user.target.wants";

/// Why an install failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The root is not a directory.
    #[error("{0} is not a directory")]
    NoRoot(PathBuf),
    /// A unit name given to `--after` is not one.
    #[error(
        "--after {0:?}: expected a systemd unit name such as myapp.service (letters, digits, \
         and :-_.@\\, with a type suffix)"
    )]
    BadUnit(String),
    /// `--store` does not name a block device the kernel knows.
    #[error("{0} is not a block device in /sys/class/block")]
    NotBlock(PathBuf),
    /// A module name given to `--store-module` is not one.
    #[error("--store-module {0:?}: expected a kernel module name such as virtio_blk")]
    BadModule(String),
    /// The binary to install is not a static executable.
    #[error("{0} is not a static executable: the initramfs has no libraries for it")]
    NotStatic(PathBuf),
    /// The snapboot package is installed: it owns snapboot's files.
    #[error(
        "the snapboot package is installed (dpkg): it has put snapboot in already, and \
         `snapboot install` is for systems without it, so it does nothing here; the store's \
         drivers go in /{STORE_MODULES_PATH} (then `update-initramfs -u`), the application \
         the capture waits for in `systemctl edit snapboot-capture.service` \
         (`snapboot check` says what is missing)"
    )]
    PackageInstalled,
    /// Neither initramfs-tools nor dracut makes this system's initramfs.
    #[error(
        "neither initramfs-tools (usr/share/initramfs-tools/hook-functions) nor dracut \
         (usr/lib/dracut/modules.d) is installed: nothing would put snapboot into the \
         initramfs, which restores the images (apt install initramfs-tools)"
    )]
    NoGenerator,
    /// The system has no systemd.
    #[error(
        "systemd is not installed (no lib/systemd/systemd): the capture point is a systemd \
         unit"
    )]
    NoSystemd,
    /// A path the install would write belongs to a package.
    #[error("{path} belongs to the package {package} (dpkg -S): not overwriting it")]
    OwnedByPackage {
        /// The path.
        path: PathBuf,
        /// Its package.
        package: String,
    },
    /// A file is there that no earlier `snapboot install` wrote.
    #[error(
        "{0} is there already and was not written by `snapboot install` (not in \
         /etc/snapboot/installed.manifest): move it away first"
    )]
    NotOurs(PathBuf),
    /// `--uninstall` without a manifest.
    #[error("nothing to uninstall: {manifest} is not there (snapboot install writes it)")]
    NotInstalled {
        /// Where the manifest would be.
        manifest: PathBuf,
    },
    /// The manifest is damaged.
    #[error("{path}")]
    BadManifest {
        /// The manifest.
        path: PathBuf,
        /// The line that is wrong.
        #[source]
        source: manifest::BadManifest,
    },
    /// Reading or writing a file failed.
    #[error("cannot {step} {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io_err<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

/// What to install where.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// The system's root (`/` on the device, or a tree being built).
    pub root: PathBuf,
    /// The snapboot binary to copy (normally the running one).
    pub binary: PathBuf,
    /// Units the capture waits for (`After=` and `Requires=`): the application.
    pub after: Vec<String>,
    /// Kernel modules the store's device needs, loaded by the initramfs before udev
    /// (`store-modules`); empty: none recorded (the file is removed).
    pub store_modules: Vec<String>,
}

/// The kernel modules whose drivers stand between `dev` (`/dev/mmcblk0p3`, `/dev/vdb`) and
/// the bus, read from sysfs under `sys` (`/sys`): the `driver/module` of the device and of
/// every parent, outermost first (`virtio_pci`, `virtio_blk`). Built-in drivers have no
/// module and are left out, so the list may be empty.
pub fn store_driver_modules(sys: &Path, dev: &Path) -> Result<Vec<String>, InstallError> {
    let node = fs::canonicalize(dev).map_err(io_err("find", dev))?;
    let name = node
        .file_name()
        .ok_or_else(|| InstallError::NotBlock(dev.to_path_buf()))?;
    let class = sys.join("class/block").join(name);
    let mut at = fs::canonicalize(&class).map_err(|_| InstallError::NotBlock(dev.to_path_buf()))?;
    let devices = fs::canonicalize(sys.join("devices")).map_err(io_err("read", sys))?;
    let mut modules: Vec<String> = Vec::new();
    while at.starts_with(&devices) && at != devices {
        if let Ok(module) = fs::canonicalize(at.join("driver/module")) {
            if let Some(m) = module.file_name().and_then(|m| m.to_str()) {
                if !modules.iter().any(|x| x == m) {
                    modules.push(m.to_string());
                }
            }
        }
        if !at.pop() {
            break;
        }
    }
    modules.reverse();
    Ok(modules)
}

/// Whether `name` can be a kernel module name.
pub(crate) fn valid_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `name` looks like a systemd unit name (`systemd.unit(5)`'s character set and a
/// known type suffix).
pub fn valid_unit_name(name: &str) -> bool {
    const TYPES: &[&str] = &[
        ".service",
        ".socket",
        ".target",
        ".mount",
        ".path",
        ".timer",
        ".device",
        ".scope",
        ".slice",
        ".swap",
        ".automount",
    ];
    let Some(stem) = TYPES.iter().find_map(|t| name.strip_suffix(t)) else {
        return false;
    };
    !stem.is_empty()
        && name.len() <= 255
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ":-_.@\\".contains(c))
}

/// The drop-in that orders the capture after the application (and fails it when the
/// application does not start, instead of capturing a system without it).
pub fn after_dropin(units: &[String]) -> String {
    let list = units.join(" ");
    format!(
        "# Written by `snapboot install --after`: capture only once the application is ready.\n\
         [Unit]\nAfter={list}\nRequires={list}\n"
    )
}
