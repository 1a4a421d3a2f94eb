//! `snapboot install`'s tests: the plan is what is written, the manifest what is removed.

use super::options::valid_unit_name;
use super::*;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// busybox-static from the host (the board needs it anyway), as the static binary.
fn a_static_binary() -> Vec<u8> {
    fs::read("/bin/busybox").expect("busybox-static (README set-up)")
}

/// A root with initramfs-tools and systemd (their marker files only), and the binary.
fn a_system() -> (tempfile::TempDir, InstallOptions) {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("snapboot");
    fs::write(&bin, a_static_binary()).unwrap();
    let root = d.path().join("root");
    for (p, text) in [
        ("usr/share/initramfs-tools/hook-functions", ""),
        ("usr/lib/systemd/systemd", ""),
        ("etc/os-release", "ID=debian\n"),
    ] {
        fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
        fs::write(root.join(p), text).unwrap();
    }
    let o = InstallOptions {
        root,
        binary: bin,
        after: vec!["app.service".into()],
        store_modules: vec!["virtio_pci".into(), "virtio_blk".into()],
    };
    (d, o)
}

fn manifest_paths(root: &Path) -> Vec<PathBuf> {
    let text = fs::read_to_string(root.join(manifest::MANIFEST_PATH)).unwrap();
    manifest::parse(&text)
        .unwrap()
        .into_iter()
        .filter(|r| !matches!(r, manifest::Record::Dir { .. }))
        .map(|r| r.path().to_path_buf())
        .collect()
}

fn in_root(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

#[test]
fn dry_run_lists_exactly_what_install_writes_and_uninstall_removes_it_all() {
    let (_d, o) = a_system();
    let root = o.root.clone();
    let before = walk(&root);
    let p = plan(&o).unwrap();
    assert!(walk(&root) == before, "planning writes nothing");
    let planned: Vec<PathBuf> = p.writes.iter().map(|w| w.path.clone()).collect();
    let (written, changed) = apply(&p).unwrap();
    assert_eq!(written, planned);
    assert!(changed.is_empty());
    assert_eq!(manifest_paths(&root), planned);
    // Nothing outside the administrator's paths, and no package path.
    for w in &written {
        let s = w.to_string_lossy();
        assert!(
            s.starts_with("/etc/") || s.starts_with("/usr/local/"),
            "{s}"
        );
    }
    for want in [
        "/usr/local/sbin/snapboot",
        "/etc/initramfs-tools/hooks/snapboot",
        "/etc/initramfs-tools/scripts/init-top/snapboot",
        "/etc/systemd/system/snapboot-capture.service",
        "/etc/kernel/postinst.d/zz-snapboot",
        "/etc/snapboot/snapboot.conf",
    ] {
        assert!(written.iter().any(|w| w == Path::new(want)), "{want}");
    }
    assert!(!written
        .iter()
        .any(|w| w.to_string_lossy().contains("dracut")));
    let mode = |p: &str| {
        fs::metadata(in_root(&root, p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("/usr/local/sbin/snapboot"), 0o755);
    assert_eq!(mode("/etc/initramfs-tools/hooks/snapboot"), 0o755);
    let unit = fs::read_to_string(in_root(
        &root,
        "/etc/systemd/system/snapboot-capture.service",
    ))
    .unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/sbin/snapboot ready"),
        "{unit}"
    );
    let link = fs::read_link(root.join(WANTS_DIR).join(CAPTURE_UNIT_NAME)).unwrap();
    assert_eq!(
        link,
        Path::new("/etc/systemd/system/snapboot-capture.service")
    );
    let dropin = fs::read_to_string(root.join(DROPIN_PATH)).unwrap();
    assert!(
        dropin.contains("\nAfter=app.service\nRequires=app.service\n"),
        "{dropin}"
    );
    let modules = fs::read_to_string(root.join(STORE_MODULES_PATH)).unwrap();
    assert_eq!(modules, "virtio_pci\nvirtio_blk\n");

    let done = uninstall(&root).unwrap();
    assert!(done.kept.is_empty(), "{:?}", done.kept);
    assert_eq!(walk(&root), before, "uninstall leaves the root as it was");
    let e = uninstall(&root).unwrap_err();
    assert!(matches!(e, InstallError::NotInstalled { .. }), "{e}");
}

#[test]
fn again_without_options_drops_their_files_and_keeps_changed_ones() {
    let (_d, mut o) = a_system();
    let root = o.root.clone();
    apply(&plan(&o).unwrap()).unwrap();
    // The administrator edits the configuration and a hook.
    fs::write(root.join(files::CONFIG_PATH), "# mine\n").unwrap();
    let hook = in_root(&root, "/etc/kernel/postinst.d/zz-snapboot");
    fs::write(&hook, "#!/bin/sh\n# mine\n").unwrap();
    o.after.clear();
    o.store_modules.clear();
    let p = plan(&o).unwrap();
    assert_eq!(p.kept, [Path::new("/").join(files::CONFIG_PATH)]);
    let removed: Vec<&Path> = p.removes.iter().map(|r| r.path()).collect();
    assert_eq!(
        removed,
        [
            Path::new("/").join(DROPIN_PATH),
            Path::new("/").join(STORE_MODULES_PATH)
        ]
    );
    let (written, _) = apply(&p).unwrap();
    assert!(!root.join(DROPIN_PATH).exists());
    assert!(!root.join(STORE_MODULES_PATH).exists());
    assert_eq!(
        fs::read_to_string(root.join(files::CONFIG_PATH)).unwrap(),
        "# mine\n"
    );
    assert_eq!(manifest_paths(&root), written);
    // The hook was ours (in the manifest): the install rewrote it.
    assert!(fs::read_to_string(&hook)
        .unwrap()
        .contains("snapboot invalidate"));
    fs::write(&hook, "#!/bin/sh\n# mine\n").unwrap();
    let done = uninstall(&root).unwrap();
    let kept: Vec<&Path> = done.kept.iter().map(|(p, _)| p.as_path()).collect();
    assert!(
        kept.contains(&Path::new("/etc/kernel/postinst.d/zz-snapboot")),
        "{kept:?}"
    );
    assert!(hook.exists());
    // Not written by this install, so left: the configuration.
    assert!(root.join(files::CONFIG_PATH).exists());
    let leftovers: Vec<_> = walk(&root)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("snapboot-new"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn refusals_say_why_and_write_nothing() {
    let (d, o) = a_system();
    let root = o.root.clone();
    let before = walk(&root);
    // The package is installed.
    let status = root.join("var/lib/dpkg/status");
    fs::create_dir_all(status.parent().unwrap()).unwrap();
    fs::write(&status, "Package: snapboot\nStatus: install ok installed\n").unwrap();
    let e = plan(&o).unwrap_err();
    assert!(
        e.to_string().contains("the snapboot package is installed"),
        "{e}"
    );
    fs::write(&status, "").unwrap();
    // A path a package owns.
    let info = root.join("var/lib/dpkg/info");
    fs::create_dir_all(&info).unwrap();
    fs::write(
        info.join("other.list"),
        "/etc/kernel/postinst.d/zz-snapboot\n",
    )
    .unwrap();
    let e = plan(&o).unwrap_err();
    assert!(
        matches!(&e, InstallError::OwnedByPackage { package, .. } if package == "other"),
        "{e}"
    );
    fs::remove_file(info.join("other.list")).unwrap();
    // A file that no install wrote.
    let foreign = root.join("etc/initramfs-tools/hooks/snapboot");
    fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    fs::write(&foreign, "#!/bin/sh\n").unwrap();
    let e = plan(&o).unwrap_err();
    assert!(matches!(e, InstallError::NotOurs(_)), "{e}");
    fs::remove_dir_all(root.join("etc/initramfs-tools")).unwrap();
    // No systemd; no initramfs generator.
    fs::remove_file(root.join("usr/lib/systemd/systemd")).unwrap();
    let e = plan(&o).unwrap_err();
    assert!(matches!(e, InstallError::NoSystemd), "{e}");
    fs::remove_file(root.join("usr/share/initramfs-tools/hook-functions")).unwrap();
    let e = plan(&o).unwrap_err();
    assert!(e.to_string().contains("neither initramfs-tools"), "{e}");
    // Bad input.
    let script = d.path().join("dynamic");
    fs::write(&script, b"#!/bin/sh\necho dynamic\n").unwrap();
    let with = |f: &dyn Fn(&mut InstallOptions)| {
        let mut x = o.clone();
        f(&mut x);
        plan(&x).unwrap_err()
    };
    let e = with(&|x| x.binary = script.clone());
    assert!(matches!(e, InstallError::NotStatic(_)), "{e}");
    let e = with(&|x| x.after = vec!["app".into()]);
    assert!(e.to_string().contains("--after \"app\""), "{e}");
    let e = with(&|x| x.root = d.path().join("missing"));
    assert!(matches!(e, InstallError::NoRoot(_)), "{e}");
    let e = with(&|x| x.store_modules = vec!["virtio_blk; reboot".into()]);
    assert!(e.to_string().contains("--store-module"), "{e}");
    fs::remove_dir_all(root.join("var")).unwrap();
    fs::write(root.join("usr/share/initramfs-tools/hook-functions"), "").unwrap();
    fs::write(root.join("usr/lib/systemd/systemd"), "").unwrap();
    assert_eq!(walk(&root), before);
}

#[test]
fn a_dracut_system_gets_the_dracut_module_instead() {
    let (_d, o) = a_system();
    let root = o.root.clone();
    fs::remove_file(root.join("usr/share/initramfs-tools/hook-functions")).unwrap();
    fs::create_dir_all(root.join("usr/lib/dracut/modules.d")).unwrap();
    let p = plan(&o).unwrap();
    assert_eq!(p.generator, Generator::Dracut);
    let paths: Vec<String> = p
        .writes
        .iter()
        .map(|w| w.path.display().to_string())
        .collect();
    assert!(paths.contains(&"/usr/lib/dracut/modules.d/90snapboot/module-setup.sh".to_string()));
    assert!(
        !paths.iter().any(|p| p.contains("initramfs-tools")),
        "{paths:?}"
    );
    apply(&p).unwrap();
    uninstall(&root).unwrap();
    assert!(!root.join("usr/lib/dracut/modules.d/90snapboot").exists());
    assert!(
        root.join("usr/lib/dracut/modules.d").is_dir(),
        "dracut's own directory stays"
    );
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
fn shipped_scripts_resume_before_the_root_and_name_the_binary() {
    assert!(BOOT_SCRIPT.contains("/bin/snapboot resume --from-cmdline"));
    assert!(BOOT_SCRIPT.starts_with("#!/bin/sh\n"));
    assert!(HOOK.contains("copy_file binary \"$bin\" /bin/snapboot"));
    assert!(HOOK.contains("for bin in /usr/local/sbin/snapboot /usr/sbin/snapboot"));
    assert!(RESTORED_TARGET.contains("StopWhenUnneeded=yes"));
    assert!(INIT_MARKER.contains(&boottrace::Marker::Init.line(None)));
    // Before udev, or after it when the early try says so (and only then).
    assert!(INIT_MARKER.contains("/bin/snapboot resume --from-cmdline --before-udev"));
    // (That it tests for `resume`'s own status: snapboot-device's exit.rs.)
    assert!(INIT_MARKER.contains(&format!("] || : > {RESUME_DONE}")));
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

/// Every path under `dir`, directories too, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        }
    }
    out.sort();
    out
}

/// The capture unit's ExecStartPre loads lazy capture's modules when `lazy` is in effect,
/// whether the config file or the kernel command line set it: it reads the settings in
/// effect from `snapboot config words`, not /proc/cmdline (a `lazy = max` line in the file
/// was ignored). Run here with stand-ins for the binary and modprobe.
#[test]
fn the_capture_unit_loads_lazy_modules_by_the_settings_in_effect() {
    let line = CAPTURE_UNIT
        .lines()
        .find_map(|l| l.strip_prefix("ExecStartPre=-/bin/sh -c '"))
        .and_then(|l| l.strip_suffix('\''))
        .expect("the capture unit's modprobe line");
    let d = tempfile::tempdir().unwrap();
    let loaded = d.path().join("loaded");
    let run = |words: &str| -> String {
        let _ = fs::remove_file(&loaded);
        let bin = d.path().join("snapboot");
        let modprobe = d.path().join("modprobe");
        fs::write(&bin, format!("#!/bin/sh\necho '{words}'\n")).unwrap();
        fs::write(
            &modprobe,
            format!("#!/bin/sh\necho \"$@\" > {}\n", loaded.display()),
        )
        .unwrap();
        for f in [&bin, &modprobe] {
            fs::set_permissions(f, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let script = line
            .replace("/usr/sbin/snapboot", &bin.display().to_string())
            .replace("/sbin/modprobe", &modprobe.display().to_string());
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{script}: {out:?}");
        fs::read_to_string(&loaded).unwrap_or_default()
    };
    // `lazy = max` in the file renders as the bare word; a size as `=SIZE`.
    let file_max = run("snapboot.store=PARTLABEL=snapstore snapboot.lazy");
    assert!(
        file_max.contains("dm_mod") && file_max.contains("zram"),
        "{file_max}"
    );
    assert!(run("snapboot.lazy=96M").contains("dm_snapshot"));
    assert_eq!(run("snapboot.store=PARTLABEL=snapstore"), "");
    assert_eq!(run(""), "");
}
