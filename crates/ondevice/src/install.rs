//! `snapboot install`: puts snapboot into a Debian-style system (initramfs-tools and
//! systemd), on the running system or into a root tree being built.
//!
//! ```text
//!   ROOT/usr/sbin/snapboot                                    the static binary
//!   ROOT/usr/share/initramfs-tools/hooks/snapboot             copies it into the initramfs
//!   ROOT/usr/share/initramfs-tools/scripts/init-top/snapboot  resume before udev
//!   ROOT/usr/share/initramfs-tools/scripts/local-premount/snapboot
//!                                                             resume after udev, when the
//!                                                             store's driver comes with it
//!   ROOT/usr/share/initramfs-tools/scripts/local-bottom/snapboot  timeline marker
//!   ROOT/usr/lib/systemd/system/snapboot-capture.service      snapshot point (`ready`)
//!   ROOT/usr/lib/systemd/system/snapboot-restored.target      started after every restore
//!   ROOT/usr/lib/systemd/system/snapboot-cold.target          ... at every other ready point
//!   ROOT/usr/lib/systemd/system/snapboot-fallback.target      ... when a restore was refused
//!   ROOT/etc/kernel/postinst.d/zz-snapboot                    an update marks images stale
//!   ROOT/etc/initramfs/post-update.d/snapboot                 (`snapboot invalidate`)
//!   ROOT/etc/grub.d/42_snapboot           GRUB's capture entry (`snapboot-capture`)
//!   ROOT/etc/default/grub.d/snapboot.cfg  /etc/snapboot/cmdline's words on every entry
//!   ROOT/etc/systemd/system/multi-user.target.wants/snapboot-capture.service  (enabled)
//!   ROOT/etc/systemd/system/snapboot-capture.service.d/after.conf  with --after UNIT
//!   ROOT/etc/snapboot/store-modules   with --store DEV or --store-module M: the drivers
//!                                     the hook loads before udev, so the store is there
//! ```
//!
//! The cold boot is left as it is: the boot script returns whenever no image is restored.
//! The initramfs is not rebuilt here; `update-initramfs -u` (or `mkinitramfs`) does that.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// The capture unit, as shipped.
pub const CAPTURE_UNIT: &str = include_str!("../../../guest/systemd/snapboot-capture.service");
/// The target started after every restore.
pub const RESTORED_TARGET: &str = include_str!("../../../guest/systemd/snapboot-restored.target");
/// The target started on every boot that was not restored.
pub const COLD_TARGET: &str = include_str!("../../../guest/systemd/snapboot-cold.target");
/// The target started on a boot whose restore was refused.
pub const FALLBACK_TARGET: &str = include_str!("../../../guest/systemd/snapboot-fallback.target");
/// The kernel package's post-install hook: marks the images stale.
pub const KERNEL_POSTINST: &str = include_str!("../../../guest/update-hooks/kernel-postinst");
/// update-initramfs's post-update hook: marks the images stale.
pub const INITRAMFS_POST_UPDATE: &str =
    include_str!("../../../guest/update-hooks/initramfs-post-update");
/// The initramfs-tools hook.
pub const HOOK: &str = include_str!("../../../guest/initramfs-tools/hooks/snapboot");
/// The initramfs-tools boot script that resumes after udev, when the early one could not.
pub const BOOT_SCRIPT: &str =
    include_str!("../../../guest/initramfs-tools/scripts/local-premount/snapboot");
/// The initramfs-tools script that prints the `init` marker and resumes before udev.
pub const INIT_MARKER: &str =
    include_str!("../../../guest/initramfs-tools/scripts/init-top/snapboot");
/// The initramfs-tools script that prints the `root-mounted` marker.
pub const ROOT_MARKER: &str =
    include_str!("../../../guest/initramfs-tools/scripts/local-bottom/snapboot");

/// Name of the capture unit.
pub const CAPTURE_UNIT_NAME: &str = "snapboot-capture.service";
/// Name of the target started after a restore.
pub const RESTORED_TARGET_NAME: &str = "snapboot-restored.target";
/// Name of the target started at the ready point of every boot that was not restored.
pub const COLD_TARGET_NAME: &str = "snapboot-cold.target";
/// Name of the target started at the ready point of a boot whose restore was refused.
pub const FALLBACK_TARGET_NAME: &str = "snapboot-fallback.target";
/// Where the binary goes (the units and the hook name it).
pub const BINARY_PATH: &str = "usr/sbin/snapboot";
const UNIT_DIR: &str = "usr/lib/systemd/system";
const HOOK_PATH: &str = "usr/share/initramfs-tools/hooks/snapboot";
const SCRIPT_PATH: &str = "usr/share/initramfs-tools/scripts/local-premount/snapboot";
const INIT_MARKER_PATH: &str = "usr/share/initramfs-tools/scripts/init-top/snapboot";
const ROOT_MARKER_PATH: &str = "usr/share/initramfs-tools/scripts/local-bottom/snapboot";
const KERNEL_POSTINST_PATH: &str = "etc/kernel/postinst.d/zz-snapboot";
const INITRAMFS_POST_UPDATE_PATH: &str = "etc/initramfs/post-update.d/snapboot";
/// GRUB's capture entry, for grub-mkconfig (`update-grub`).
pub const GRUB_SNIPPET: &str = include_str!("../../../guest/grub/42_snapboot");
/// What grub-mkconfig adds to every entry's command line (the store's words).
pub const GRUB_DEFAULTS: &str = include_str!("../../../guest/grub/snapboot.cfg");
const GRUB_SNIPPET_PATH: &str = "etc/grub.d/42_snapboot";
const GRUB_DEFAULTS_PATH: &str = "etc/default/grub.d/snapboot.cfg";
const WANTS_DIR: &str = "etc/systemd/system/multi-user.target.wants";
const DROPIN_DIR: &str = "etc/systemd/system/snapboot-capture.service.d";

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

fn io_err<'a>(
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

/// Where the store's modules are recorded, in the root and in the initramfs.
pub const STORE_MODULES_PATH: &str = "etc/snapboot/store-modules";

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
fn valid_module_name(name: &str) -> bool {
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

/// Installs the files. Returns the paths written, in order.
pub fn install(o: &InstallOptions) -> Result<Vec<PathBuf>, InstallError> {
    if !o.root.is_dir() {
        return Err(InstallError::NoRoot(o.root.clone()));
    }
    if let Some(bad) = o.after.iter().find(|u| !valid_unit_name(u)) {
        return Err(InstallError::BadUnit(bad.clone()));
    }
    if let Some(bad) = o.store_modules.iter().find(|m| !valid_module_name(m)) {
        return Err(InstallError::BadModule(bad.clone()));
    }
    let exe = fs::read(&o.binary).map_err(io_err("read", &o.binary))?;
    if !kernelpack::is_static_elf(&exe) {
        return Err(InstallError::NotStatic(o.binary.clone()));
    }
    let mut written = Vec::new();
    let mut put = |rel: &str, data: &[u8], mode: u32| -> Result<(), InstallError> {
        let path = o.root.join(rel);
        write_replacing(&path, data, mode)?;
        written.push(path);
        Ok(())
    };
    put(BINARY_PATH, &exe, 0o755)?;
    put(HOOK_PATH, HOOK.as_bytes(), 0o755)?;
    put(SCRIPT_PATH, BOOT_SCRIPT.as_bytes(), 0o755)?;
    put(INIT_MARKER_PATH, INIT_MARKER.as_bytes(), 0o755)?;
    put(ROOT_MARKER_PATH, ROOT_MARKER.as_bytes(), 0o755)?;
    put(
        &format!("{UNIT_DIR}/{CAPTURE_UNIT_NAME}"),
        CAPTURE_UNIT.as_bytes(),
        0o644,
    )?;
    for (name, text) in [
        (RESTORED_TARGET_NAME, RESTORED_TARGET),
        (COLD_TARGET_NAME, COLD_TARGET),
        (FALLBACK_TARGET_NAME, FALLBACK_TARGET),
    ] {
        put(&format!("{UNIT_DIR}/{name}"), text.as_bytes(), 0o644)?;
    }
    put(KERNEL_POSTINST_PATH, KERNEL_POSTINST.as_bytes(), 0o755)?;
    put(
        INITRAMFS_POST_UPDATE_PATH,
        INITRAMFS_POST_UPDATE.as_bytes(),
        0o755,
    )?;
    put(GRUB_SNIPPET_PATH, GRUB_SNIPPET.as_bytes(), 0o755)?;
    put(GRUB_DEFAULTS_PATH, GRUB_DEFAULTS.as_bytes(), 0o644)?;
    let dropin = format!("{DROPIN_DIR}/after.conf");
    if o.after.is_empty() {
        remove_if_there(&o.root.join(&dropin))?;
    } else {
        put(&dropin, after_dropin(&o.after).as_bytes(), 0o644)?;
    }
    if o.store_modules.is_empty() {
        remove_if_there(&o.root.join(STORE_MODULES_PATH))?;
    } else {
        let list: String = o.store_modules.iter().map(|m| format!("{m}\n")).collect();
        put(STORE_MODULES_PATH, list.as_bytes(), 0o644)?;
    }
    // Enabled the way `systemctl enable` does it, which also works in a tree that is not
    // running.
    let wants = o.root.join(WANTS_DIR);
    fs::create_dir_all(&wants).map_err(io_err("create", &wants))?;
    let link = wants.join(CAPTURE_UNIT_NAME);
    let _ = fs::remove_file(&link);
    symlink(format!("/{UNIT_DIR}/{CAPTURE_UNIT_NAME}"), &link).map_err(io_err("link", &link))?;
    written.push(link);
    Ok(written)
}

fn remove_if_there(path: &Path) -> Result<(), InstallError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// Writes `data` to `path` through a temporary file and a rename, so a power cut leaves
/// the old file or the new one, never a torn one.
fn write_replacing(path: &Path, data: &[u8], mode: u32) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let tmp = path.with_extension("snapboot-new");
    fs::write(&tmp, data).map_err(io_err("write", &tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of", &tmp))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("rename into", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// busybox-static from the host (the board needs it anyway), as the static binary.
    fn a_static_binary() -> Vec<u8> {
        fs::read("/bin/busybox").expect("busybox-static (README set-up)")
    }

    #[test]
    fn unit_names_are_checked() {
        for ok in ["app.service", "my-app@1.service", "data.mount", "x.target"] {
            assert!(valid_unit_name(ok), "{ok}");
        }
        for bad in ["app", ".service", "a b.service", "a;rm.service", "app.exe"] {
            assert!(!valid_unit_name(bad), "{bad}");
        }
    }

    #[test]
    fn install_writes_enables_and_orders_and_is_repeatable() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("snapboot");
        fs::write(&bin, a_static_binary()).unwrap();
        let root = d.path().join("root");
        fs::create_dir(&root).unwrap();
        let mut o = InstallOptions {
            root: root.clone(),
            binary: bin,
            after: vec!["app.service".into()],
            store_modules: vec!["virtio_pci".into(), "virtio_blk".into()],
        };
        let written = install(&o).unwrap();
        assert_eq!(written.len(), 16, "{written:?}");
        let modules = fs::read_to_string(root.join(STORE_MODULES_PATH)).unwrap();
        assert_eq!(modules, "virtio_pci\nvirtio_blk\n");
        let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(KERNEL_POSTINST_PATH), 0o755);
        let hook = fs::read_to_string(root.join(INITRAMFS_POST_UPDATE_PATH)).unwrap();
        assert!(hook.contains("snapboot invalidate"), "{hook}");
        assert_eq!(mode(BINARY_PATH), 0o755);
        assert_eq!(mode(HOOK_PATH), 0o755);
        assert_eq!(mode(SCRIPT_PATH), 0o755);
        // grub-mkconfig runs only the executable scripts of /etc/grub.d.
        assert_eq!(mode(GRUB_SNIPPET_PATH), 0o755);
        let unit = fs::read_to_string(root.join(UNIT_DIR).join(CAPTURE_UNIT_NAME)).unwrap();
        assert!(
            unit.contains("ExecStart=/usr/sbin/snapboot ready"),
            "{unit}"
        );
        let link = fs::read_link(root.join(WANTS_DIR).join(CAPTURE_UNIT_NAME)).unwrap();
        assert_eq!(
            link,
            Path::new("/usr/lib/systemd/system/snapboot-capture.service")
        );
        let dropin = fs::read_to_string(root.join(DROPIN_DIR).join("after.conf")).unwrap();
        assert!(
            dropin.contains("\nAfter=app.service\nRequires=app.service\n"),
            "{dropin}"
        );
        // Again, without --after and modules: the drop-in and the list go, the rest stays.
        o.after.clear();
        o.store_modules.clear();
        assert_eq!(install(&o).unwrap().len(), 14);
        assert!(!root.join(DROPIN_DIR).join("after.conf").exists());
        assert!(!root.join(STORE_MODULES_PATH).exists());
        assert!(root.join(BINARY_PATH).exists());
        let leftovers: Vec<_> = walk(&root)
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with("snapboot-new"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn bad_input_is_refused_with_the_reason_and_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("snapboot");
        fs::write(&bin, b"#!/bin/sh\necho dynamic\n").unwrap();
        let root = d.path().join("root");
        fs::create_dir(&root).unwrap();
        let o = |after: &[&str], binary: &Path, root: &Path| InstallOptions {
            root: root.to_path_buf(),
            binary: binary.to_path_buf(),
            after: after.iter().map(|s| s.to_string()).collect(),
            store_modules: Vec::new(),
        };
        let e = install(&o(&[], &bin, &root)).unwrap_err();
        assert!(matches!(e, InstallError::NotStatic(_)), "{e}");
        let e = install(&o(&["app"], &bin, &root)).unwrap_err();
        assert!(e.to_string().contains("--after \"app\""), "{e}");
        let e = install(&o(&[], &bin, &d.path().join("missing"))).unwrap_err();
        assert!(matches!(e, InstallError::NoRoot(_)), "{e}");
        let mut bad_module = o(&[], &bin, &root);
        bad_module.store_modules = vec!["virtio_blk; reboot".into()];
        let e = install(&bad_module).unwrap_err();
        assert!(e.to_string().contains("--store-module"), "{e}");
        assert!(walk(&root).is_empty());
    }

    #[test]
    fn shipped_scripts_resume_before_the_root_and_name_the_binary() {
        assert!(BOOT_SCRIPT.contains("/bin/snapboot resume --from-cmdline"));
        assert!(BOOT_SCRIPT.starts_with("#!/bin/sh\n"));
        assert!(HOOK.contains("copy_file binary /usr/sbin/snapboot /bin/snapboot"));
        assert!(RESTORED_TARGET.contains("StopWhenUnneeded=yes"));
        assert!(INIT_MARKER.contains(&boottrace::Marker::Init.line(None)));
        // Before udev, or after it when the early try says so (and only then).
        assert!(INIT_MARKER.contains("/bin/snapboot resume --from-cmdline --before-udev"));
        let after_udev = crate::boot::EXIT_AFTER_UDEV;
        assert!(INIT_MARKER.contains(&format!("[ $? -eq {after_udev} ] || : > {RESUME_DONE}")));
        assert!(BOOT_SCRIPT.contains(&format!("[ -e {RESUME_DONE} ] && exit 0")));
        assert!(ROOT_MARKER.contains(&boottrace::Marker::RootMounted.line(None)));
        assert!(CAPTURE_UNIT.contains("TimeoutStartSec=infinity"));
    }

    /// A sysfs tree as the board has it: /dev/vdb3, a partition of vdb, on virtio_blk
    /// (module) on virtio_pci (module) on a PCI bus whose driver is built in.
    #[test]
    fn store_driver_modules_walks_from_the_partition_to_the_bus() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("sys");
        let pci = sys.join("devices/pci0000:00/0000:00:03.0");
        let disk = pci.join("virtio1/block/vdb");
        fs::create_dir_all(disk.join("vdb3")).unwrap();
        for m in ["virtio_blk", "virtio_pci", "unused"] {
            fs::create_dir_all(sys.join("module").join(m)).unwrap();
        }
        let driver = |dev: &Path, bus: &str, name: &str, module: Option<&str>| {
            let dir = sys.join("bus").join(bus).join("drivers").join(name);
            fs::create_dir_all(&dir).unwrap();
            if let Some(m) = module {
                symlink(sys.join("module").join(m), dir.join("module")).unwrap();
            }
            symlink(&dir, dev.join("driver")).unwrap();
        };
        driver(
            &pci.join("virtio1"),
            "virtio",
            "virtio_blk",
            Some("virtio_blk"),
        );
        driver(&pci, "pci", "virtio-pci", Some("virtio_pci"));
        driver(&sys.join("devices/pci0000:00"), "pci", "bus", None);
        fs::create_dir_all(sys.join("class/block")).unwrap();
        symlink(disk.join("vdb3"), sys.join("class/block/vdb3")).unwrap();
        let dev = d.path().join("dev");
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("vdb3"), b"").unwrap();
        symlink(dev.join("vdb3"), dev.join("store")).unwrap();

        let m = store_driver_modules(&sys, &dev.join("store")).unwrap();
        assert_eq!(m, ["virtio_pci", "virtio_blk"]);
        fs::write(dev.join("sda"), b"").unwrap();
        let e = store_driver_modules(&sys, &dev.join("sda")).unwrap_err();
        assert!(matches!(e, InstallError::NotBlock(_)), "{e}");
    }

    const RESUME_DONE: &str = "/run/snapboot/resume-done";

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
