//! The `debian` root as a RAUC A/B device, on the UEFI PC (x86_64, initramfs-tools): RAUC
//! and `grub-editenv` in its packages, RAUC's config with two raw root slots, the unit that
//! marks a cold boot's slot good before the capture, the confirmed.d hook that marks a
//! restore's slot good once snapboot confirms it, and the board's device queries
//! (guest/rauc/). Inert unless GRUB boots the root with `rauc.slot=`.
//!
//! ```text
//! cold boot of slot X:  rauc-mark-good.service (before the capture) -> X_OK=1 X_TRY=0
//! restore of slot X:    snapboot confirms -> confirmed.d/60-rauc-mark-good -> same
//! every RAUC call:      rauc-with-esp (mounts the ESP, where grubenv is, for the call only)
//! ```

use devinstall::install::Generator;
use guestarch::Arch;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// What the UEFI PC's root adds for RAUC A/B updates: RAUC (1.8's client needs its D-Bus
/// service, a package of its own) and `grub-editenv`, with which RAUC's `grub` backend
/// writes GRUB's environment. See [`install_rauc`].
pub const RAUC_PACKAGES: &[&str] = &["rauc", "rauc-service", "grub-common"];

/// Whether a root of `arch` whose initramfs `g` makes is a RAUC A/B device: the root the
/// UEFI PC boots (x86_64, initramfs-tools). The arm64 and dracut roots are not, so their
/// package lists, hence their cached base tarballs, stay as they were.
pub fn rauc_root(arch: Arch, g: Generator) -> bool {
    arch == Arch::X86_64 && g == Generator::InitramfsTools
}

/// The unit that marks a cold A/B boot's slot good, before the capture.
pub const RAUC_MARK_GOOD_UNIT: &str = "rauc-mark-good.service";

/// Where the device's queries are (`device NAME` of the application runs `NAME` there).
pub const DEVICE_DIR: &str = "usr/lib/snapboot-board/device.d";

/// RAUC's files in the root (guest/rauc/): path in the root, mode, content.
const RAUC_FILES: &[(&str, u32, &str)] = &[
    (
        "etc/rauc/system.conf",
        0o644,
        include_str!("../../../guest/rauc/system.conf"),
    ),
    (
        "etc/rauc/keyring.pem",
        0o644,
        include_str!("../../../guest/rauc/test-cert.pem"),
    ),
    (
        "usr/local/sbin/rauc-with-esp",
        0o755,
        include_str!("../../../guest/rauc/rauc-with-esp"),
    ),
    (
        "etc/systemd/system/rauc-mark-good.service",
        0o644,
        include_str!("../../../guest/rauc/rauc-mark-good.service"),
    ),
    (
        "etc/snapboot/confirmed.d/60-rauc-mark-good",
        0o755,
        include_str!("../../../guest/rauc/60-rauc-mark-good"),
    ),
    (
        "usr/lib/snapboot-board/device.d/slot",
        0o755,
        include_str!("../../../guest/rauc/device.d/slot"),
    ),
    (
        "usr/lib/snapboot-board/device.d/grubenv",
        0o755,
        include_str!("../../../guest/rauc/device.d/grubenv"),
    ),
    (
        "usr/lib/snapboot-board/device.d/rauc-install",
        0o755,
        include_str!("../../../guest/rauc/device.d/rauc-install"),
    ),
    (
        "usr/lib/snapboot-board/device.d/rauc-mark-bad",
        0o755,
        include_str!("../../../guest/rauc/device.d/rauc-mark-bad"),
    ),
    (
        "usr/lib/snapboot-board/device.d/poweroff",
        0o755,
        include_str!("../../../guest/rauc/device.d/poweroff"),
    ),
];

/// The UEFI PC's root as a RAUC A/B device (slots A and B: /dev/vda2 and /dev/vda5, GRUB's
/// environment on the ESP, the test certificate as keyring), inert unless booted with
/// `rauc.slot=`: a cold boot's slot is marked good by [`RAUC_MARK_GOOD_UNIT`] before the
/// capture, a restore's by a confirmed.d hook once snapboot confirms it. Every RAUC call goes
/// through `rauc-with-esp`, which mounts the ESP for the call only (a capture refuses while
/// it is mounted). Also the board's device queries ([`DEVICE_DIR`]: slot, grubenv,
/// rauc-install, rauc-mark-bad, poweroff).
pub fn install_rauc(stage: &Path) -> Result<(), RootFileError> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RootFileError { path, source }
    };
    for &(rel, mode, text) in RAUC_FILES {
        let p = stage.join(rel);
        if let Some(d) = p.parent() {
            fs::create_dir_all(d).map_err(at(d))?;
        }
        fs::write(&p, text).map_err(at(&p))?;
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).map_err(at(&p))?;
    }
    let wants = stage.join("etc/systemd/system/multi-user.target.wants");
    fs::create_dir_all(&wants).map_err(at(&wants))?;
    let link = wants.join(RAUC_MARK_GOOD_UNIT);
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(format!("/etc/systemd/system/{RAUC_MARK_GOOD_UNIT}"), &link)
        .map_err(at(&link))
}

/// A file of the root that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}", path.display())]
pub struct RootFileError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::debian::APP_UNIT;
    use std::process::Command;

    #[test]
    fn install_rauc_writes_its_files_with_their_modes() {
        let d = tempfile::tempdir().unwrap();
        install_rauc(d.path()).unwrap();
        for (rel, mode) in [
            ("etc/rauc/system.conf", 0o644),
            ("etc/rauc/keyring.pem", 0o644),
            ("usr/local/sbin/rauc-with-esp", 0o755),
            ("etc/systemd/system/rauc-mark-good.service", 0o644),
            ("etc/snapboot/confirmed.d/60-rauc-mark-good", 0o755),
            ("usr/lib/snapboot-board/device.d/slot", 0o755),
            ("usr/lib/snapboot-board/device.d/grubenv", 0o755),
            ("usr/lib/snapboot-board/device.d/rauc-install", 0o755),
            ("usr/lib/snapboot-board/device.d/rauc-mark-bad", 0o755),
            ("usr/lib/snapboot-board/device.d/poweroff", 0o755),
        ] {
            let m = fs::metadata(d.path().join(rel))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(m & 0o7777, mode, "{rel}: {m:o}");
        }
        let read = |rel: &str| fs::read_to_string(d.path().join(rel)).unwrap();
        let conf = read("etc/rauc/system.conf");
        for line in [
            "bootloader=grub",
            "grubenv=/boot/efi/grub/grubenv",
            "device=/dev/vda5",
            "bootname=B",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line}: {conf}");
        }
        assert!(read("etc/rauc/keyring.pem").starts_with("-----BEGIN CERTIFICATE-----"));
        let unit = read("etc/systemd/system/rauc-mark-good.service");
        let capture = devinstall::install::CAPTURE_UNIT_NAME;
        assert!(unit.contains(&format!("\nBefore={capture}\n")), "{unit}");
        assert!(unit.contains(&format!("\nAfter={APP_UNIT}\n")), "{unit}");
        assert!(
            unit.contains("\nConditionKernelCommandLine=rauc.slot\n"),
            "{unit}"
        );
        let wants = d
            .path()
            .join("etc/systemd/system/multi-user.target.wants")
            .join(RAUC_MARK_GOOD_UNIT);
        assert_eq!(
            fs::read_link(wants).unwrap(),
            Path::new("/etc/systemd/system").join(RAUC_MARK_GOOD_UNIT)
        );
    }

    /// Runs the confirmed.d hook with sh, `cmdline` for /proc/cmdline, a stub for
    /// rauc-with-esp (exiting `rauc`) and a file for the console: its status and console.
    fn run_mark_good_hook(cmdline: &str, rauc: i32) -> (i32, String) {
        let d = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = d.path().join(name);
            fs::write(&p, text).unwrap();
            p.to_str().unwrap().to_string()
        };
        let proc_cmdline = file("cmdline", cmdline);
        let stub = file("rauc-with-esp", &format!("#!/bin/sh\nexit {rauc}\n"));
        fs::set_permissions(&stub, fs::Permissions::from_mode(0o755)).unwrap();
        let console = file("console", "");
        let (_, _, text) = RAUC_FILES
            .iter()
            .find(|(rel, _, _)| rel.starts_with("etc/snapboot/confirmed.d/"))
            .unwrap();
        let script = text
            .replace("/proc/cmdline", &proc_cmdline)
            .replace("/usr/local/sbin/rauc-with-esp", &stub)
            .replace("/dev/console", &console);
        assert_ne!(&script, text);
        let status = Command::new("sh")
            .args(["-c", &script])
            .env("SNAPBOOT_IMAGE", "slot-b")
            .status()
            .unwrap();
        (
            status.code().unwrap(),
            fs::read_to_string(&console).unwrap(),
        )
    }

    #[test]
    fn the_mark_good_hook_marks_only_an_a_b_boot() {
        // The stub would fail: not run.
        let cmdline = "root=/dev/vda2 ro quiet\n";
        assert_eq!(run_mark_good_hook(cmdline, 3), (0, String::new()));
        let cmdline = "root=/dev/vda5 rauc.slot=B snapboot.image=slot-b\n";
        assert_eq!(
            run_mark_good_hook(cmdline, 0),
            (
                0,
                "rauc-mark-good: slot B good after snapboot confirmed slot-b\n".into()
            )
        );
        assert_eq!(run_mark_good_hook(cmdline, 3).0, 3);
    }
}
