//! Workloads: the systems the board boots. A workload is a root filesystem tree plus the
//! command that starts its application and a probe that proves the system is usable.
//!
//! The built-in `shell` and `app` workloads are assembled into a staging tree exactly like a
//! user's own `--rootfs DIR --start CMD`; nothing else in snapboot knows their internals.

use crate::busybox::Busybox;
use crate::python::stage_python;
use crate::workload_error::{io, WorkloadError};
use guestarch::Arch;
use serde::{Deserialize, Serialize};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

/// The `app` workload's program, embedded so the snapboot binary is self-contained.
pub const APP_PY: &str = include_str!("../../../guest/app/app.py");

/// The `shell` workload's `recapture` command (`/bin/recapture`), embedded likewise.
pub const SHELL_RECAPTURE: &str = include_str!("../../../guest/shell/recapture");

/// How the runner proves the system is usable: text typed on the console after the ready
/// marker, and a regular expression its answer must match.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Probe {
    /// Line typed on the console.
    pub send: String,
    /// Regex a console line must match to count as the answer.
    pub expect: String,
}

/// A system to boot.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Workload {
    /// Name shown in reports.
    pub name: String,
    /// The application's start command (run in the new root by `snapboot start`).
    pub start: String,
    /// Extra environment for the application.
    pub env: Vec<String>,
    /// The usability probe.
    pub probe: Probe,
    /// Guest memory this workload wants by default, in MiB.
    pub mem_mib: u32,
    /// Who boots the root: the board's own `/init` and `snapboot start`, or a distribution's
    /// initramfs and init system.
    #[serde(default)]
    pub init: InitKind,
    /// Whether the application answers `recapture` typed on its console by taking a new
    /// image of the running system (`snapboot ready` again) and printing
    /// `snapboot: @capture-done` or `@capture-failed` on the way. The benchmarks' profiled
    /// lazy images are made that way; a workload without it gets no such method.
    #[serde(default)]
    pub recapture: bool,
    /// Whether a restore that answers on the console already proves the workload alive (a
    /// shell: there is no application to die), so the board captures it with
    /// `snapboot.confirm=restored`; every other workload keeps snapboot's default, which
    /// waits for proof.
    #[serde(default)]
    pub alive_when_restored: bool,
}

/// The kernel device of the arm64 board's root filesystem: the second partition of its boot
/// disk (the board's `bootdisk` lays it out; the boot disk is the first virtio disk).
pub const ARM64_ROOT_PARTITION: &str = "/dev/vda2";

/// The kernel device of the board's root filesystem: the x86_64 PC's is a disk of its own,
/// the arm64 board's a partition of its boot disk.
pub fn root_device(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "/dev/vda",
        Arch::Arm64 => ARM64_ROOT_PARTITION,
    }
}

/// How a workload's system starts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InitKind {
    /// The board's generated `/init` mounts the root and `snapboot start` (PID 1) runs
    /// the application.
    #[default]
    Board,
    /// A Debian root with systemd as PID 1 and an initramfs made by initramfs-tools
    /// (`crate::debian`).
    Debian,
    /// The same Debian root with its initramfs made by dracut instead (snapboot's dracut
    /// module in it).
    #[serde(rename = "debian-dracut")]
    DebianDracut,
    /// The same again with systemd in the initramfs as well (dracut's `systemd` and
    /// `dracut-systemd` modules: Debian's default once systemd is installed), where
    /// snapboot's hooks run as dracut's services.
    #[serde(rename = "debian-dracut-systemd")]
    DebianDracutSystemd,
    /// [`InitKind::Debian`] as an installed system has it: its root a writable ext4
    /// filesystem, made read-only by Debian's `overlayroot` (the root mounted read-only
    /// under an overlay whose upper layer is a tmpfs), not by a squashfs image.
    #[serde(rename = "debian-overlayroot")]
    DebianOverlayroot,
}

impl InitKind {
    /// Kernel command-line words the board of `arch` adds for this kind of system.
    pub fn kernel_args(self, arch: Arch) -> Vec<String> {
        match self {
            InitKind::Board => vec![],
            InitKind::Debian
            | InitKind::DebianDracut
            | InitKind::DebianDracutSystemd
            | InitKind::DebianOverlayroot => vec![
                format!("root={}", root_device(arch)),
                format!("rootfstype={}", self.root_fstype()),
                "ro".into(),
            ],
        }
    }

    /// Whether the system is a Debian root built by `crate::debian`.
    pub fn is_debian(self) -> bool {
        matches!(
            self,
            InitKind::Debian
                | InitKind::DebianDracut
                | InitKind::DebianDracutSystemd
                | InitKind::DebianOverlayroot
        )
    }

    /// The root filesystem's type: the board's squashfs image, or an installed system's
    /// ext4 ([`InitKind::DebianOverlayroot`]).
    pub fn root_fstype(self) -> &'static str {
        match self {
            InitKind::DebianOverlayroot => "ext4",
            _ => "squashfs",
        }
    }
}

/// Checks one `KEY=VALUE` entry of the application's environment ([`Workload::env`]):
/// KEY of letters, digits and `_`, not starting with a digit.
fn check_env_entry(entry: &str) -> Result<(), WorkloadError> {
    let key = entry.split_once('=').map(|(k, _)| k).unwrap_or("");
    let mut chars = key.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(WorkloadError::BadEnv {
            entry: entry.to_string(),
            reason: "not KEY=VALUE with KEY of letters, digits and _ (not starting with a digit)"
                .into(),
        })
    }
}

impl Workload {
    /// The value `key` has in the application's environment ([`Workload::env`]): its last
    /// entry, as `snapboot start` sets them in order.
    pub fn env_value(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(key)?.strip_prefix('='))
    }

    /// Adds `entries` (`KEY=VALUE`, each checked) to the application's environment, after
    /// the workload's own, so an entry for a key it sets already wins. Only for a system the
    /// board's `/init` starts (`snapboot start` sets them); a Debian workload's application
    /// is a systemd service, which has its unit's own `Environment=`.
    pub fn add_env(&mut self, entries: &[String]) -> Result<(), WorkloadError> {
        for e in entries {
            check_env_entry(e)?;
            if self.init.is_debian() {
                return Err(WorkloadError::BadEnv {
                    entry: e.clone(),
                    reason: format!(
                        "the {} workload's application is a systemd service with its unit's own \
                         environment; --env is for the board's own init (shell, app, --rootfs)",
                        self.name
                    ),
                });
            }
        }
        self.env.extend(entries.iter().cloned());
        Ok(())
    }

    /// The built-in `shell` workload: usable when a shell answers on the console, where
    /// `recapture` is a command of its root ([`SHELL_RECAPTURE`]).
    pub fn shell() -> Self {
        Self {
            name: "shell".into(),
            start: "/bin/sh -c 'snapboot ready; exec /bin/sh'".into(),
            env: vec![],
            probe: Probe {
                send: "echo probe-$((6*7))".into(),
                expect: "^probe-42$".into(),
            },
            mem_mib: 512,
            init: InitKind::Board,
            recapture: true,
            alive_when_restored: true,
        }
    }

    /// The built-in `app` workload: Debian's python3 building a large in-memory state.
    pub fn app() -> Self {
        Self {
            name: "app".into(),
            start: "/usr/bin/python3 /opt/app/app.py".into(),
            env: vec!["APP_READY_CMD=snapboot ready".into()],
            probe: Probe {
                send: "ping".into(),
                expect: r"^pong \d+$".into(),
            },
            mem_mib: 1024,
            init: InitKind::Board,
            recapture: true,
            alive_when_restored: false,
        }
    }

    /// The built-in `debian` workload: `app`'s program as a systemd service in a Debian
    /// root built from Debian's packages (`crate::debian`), at a quarter of its scale.
    pub fn debian() -> Self {
        Self {
            name: "debian".into(),
            start: String::new(),
            env: vec![],
            probe: Probe {
                send: "ping".into(),
                expect: r"^pong \d+$".into(),
            },
            mem_mib: 1024,
            init: InitKind::Debian,
            recapture: true,
            alive_when_restored: false,
        }
    }

    /// The built-in `debian-dracut` workload: [`Workload::debian`] with its initramfs made
    /// by dracut (and snapboot's dracut module) instead of initramfs-tools.
    pub fn debian_dracut() -> Self {
        Self {
            name: "debian-dracut".into(),
            init: InitKind::DebianDracut,
            ..Self::debian()
        }
    }

    /// The built-in `debian-dracut-systemd` workload: [`Workload::debian_dracut`] with
    /// systemd in the initramfs too.
    pub fn debian_dracut_systemd() -> Self {
        Self {
            name: "debian-dracut-systemd".into(),
            init: InitKind::DebianDracutSystemd,
            ..Self::debian()
        }
    }

    /// The built-in `debian-overlayroot` workload: [`Workload::debian`] on an ext4 root that
    /// Debian's `overlayroot` keeps read-only.
    pub fn debian_overlayroot() -> Self {
        Self {
            name: "debian-overlayroot".into(),
            init: InitKind::DebianOverlayroot,
            ..Self::debian()
        }
    }

    /// A built-in workload by name.
    pub fn builtin(name: &str) -> Result<Self, WorkloadError> {
        match name {
            "shell" => Ok(Self::shell()),
            "app" => Ok(Self::app()),
            "debian" => Ok(Self::debian()),
            "debian-dracut" => Ok(Self::debian_dracut()),
            "debian-dracut-systemd" => Ok(Self::debian_dracut_systemd()),
            "debian-overlayroot" => Ok(Self::debian_overlayroot()),
            other => Err(WorkloadError::Unknown(other.into())),
        }
    }

    /// Assembles a built-in workload's root filesystem tree for `arch` into `stage`, with
    /// `busybox` ([`Busybox::for_arch`]); a foreign architecture's Debian packages are
    /// unpacked under `debs`.
    pub fn stage_builtin(
        &self,
        stage: &Path,
        arch: Arch,
        busybox: &Busybox,
        debs: &Path,
    ) -> Result<(), WorkloadError> {
        stage_base(stage, busybox)?;
        if self.name == "shell" {
            let cmd = stage.join("bin/recapture");
            fs::write(&cmd, SHELL_RECAPTURE).map_err(io(&cmd))?;
            make_executable(&cmd)?;
        }
        if self.name == "app" {
            stage_python(stage, arch, debs)?;
            let app = stage.join("opt/app");
            fs::create_dir_all(&app).map_err(io(&app))?;
            fs::write(app.join("app.py"), APP_PY).map_err(io(&app))?;
        }
        if arch != Arch::X86_64 {
            // No `ldd` vouched for a foreign root's libraries: every program's are checked
            // here, so a missing one fails the build by name rather than the boot.
            crate::dynlink::check_root(stage, arch)?;
        }
        Ok(())
    }
}

/// A minimal root: busybox with its applets, and the mount points the board uses.
fn stage_base(stage: &Path, busybox: &Busybox) -> Result<(), WorkloadError> {
    for d in [
        "bin", "sbin", "dev", "proc", "sys", "run", "tmp", "etc", "root",
    ] {
        let p = stage.join(d);
        fs::create_dir_all(&p).map_err(io(&p))?;
    }
    let dst = stage.join("bin/busybox");
    fs::copy(&busybox.path, &dst).map_err(io(&dst))?;
    for applet in &busybox.applets {
        let link = stage.join(applet.trim_start_matches('/'));
        if link.exists() || link.symlink_metadata().is_ok() {
            continue;
        }
        if let Some(parent) = link.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        symlink("/bin/busybox", &link).map_err(io(&link))?;
    }
    let passwd = stage.join("etc/passwd");
    fs::write(&passwd, "root:x:0:0:root:/root:/bin/sh\n").map_err(io(&passwd))?;
    Ok(())
}

/// Makes sure a staged or user tree has the mount points the board needs.
pub fn check_tree(root: &Path) -> Result<(), WorkloadError> {
    let bad = |reason: String| {
        Err(WorkloadError::BadTree {
            root: root.to_path_buf(),
            reason,
        })
    };
    if !root.is_dir() {
        return bad("no such directory".into());
    }
    let missing: Vec<String> = ["run", "dev", "proc", "sys"]
        .iter()
        .filter(|d| !root.join(d).is_dir())
        .map(|d| format!("/{d}"))
        .collect();
    if !missing.is_empty() {
        return bad(format!(
            "the empty mount-point directories {} are missing (create them: the board mounts \
             /dev, /proc, /sys and a tmpfs on /run there)",
            missing.join(" ")
        ));
    }
    Ok(())
}

/// Marks a file executable.
pub fn make_executable(path: &Path) -> Result<(), WorkloadError> {
    let mut perm = fs::metadata(path).map_err(io(path))?.permissions();
    perm.set_mode(0o755);
    fs::set_permissions(path, perm).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn builtins_are_known_and_others_are_refused() {
        assert_eq!(Workload::builtin("shell").unwrap().name, "shell");
        assert!(Workload::builtin("app").unwrap().env[0].starts_with("APP_READY_CMD="));
        let err = Workload::builtin("nope").unwrap_err().to_string();
        assert!(err.contains("nope") && err.contains("--rootfs"), "{err}");
        let probe = Workload::shell().probe;
        let re = regex::Regex::new(&probe.expect).unwrap();
        assert!(re.is_match("probe-42") && !re.is_match(&probe.send));
    }

    #[test]
    fn every_builtin_answers_recapture_and_a_user_workload_says_so_itself() {
        for name in ["shell", "app", "debian"] {
            assert!(Workload::builtin(name).unwrap().recapture, "{name}");
        }
        // A bundle.json written before the field: no claim it cannot keep.
        let mut v = serde_json::to_value(Workload::shell()).unwrap();
        v.as_object_mut().unwrap().remove("recapture");
        let old: Workload = serde_json::from_value(v).unwrap();
        assert!(!old.recapture);
    }

    /// Runs the shell workload's `recapture` with a stand-in `snapboot` that exits `status`.
    fn shell_recapture(status: u8) -> std::process::Output {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("snapboot");
        fs::write(
            &fake,
            format!("#!/bin/sh\necho \"snapboot $*\"\nexit {status}\n"),
        )
        .unwrap();
        make_executable(&fake).unwrap();
        let script = dir.path().join("recapture");
        fs::write(&script, SHELL_RECAPTURE).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        Command::new("/bin/sh")
            .arg(&script)
            .env("PATH", path)
            .output()
            .unwrap()
    }

    #[test]
    fn the_shell_recapture_runs_snapboot_ready_and_says_how_it_went() {
        let ok = shell_recapture(0);
        assert!(ok.status.success());
        assert_eq!(
            String::from_utf8_lossy(&ok.stdout),
            "snapboot ready\nrecaptured\n"
        );
        let failed = shell_recapture(2);
        assert_eq!(failed.status.code(), Some(1));
        assert_eq!(
            String::from_utf8_lossy(&failed.stdout),
            "snapboot ready\nrecapture failed: snapboot ready exited with status 2\n"
        );
    }

    #[test]
    fn tree_without_mount_points_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let err = check_tree(d.path()).unwrap_err().to_string();
        assert!(err.contains("/run"), "{err}");
    }

    #[test]
    fn rootfs_tree_errors_name_the_real_problem() {
        let err = check_tree(Path::new("/nonexistent/dir"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "root filesystem tree /nonexistent/dir: no such directory (README, \"Your own application\")"
        );
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("dev")).unwrap();
        let err = check_tree(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("mount-point directories /run /proc /sys are missing"),
            "{err}"
        );
        for d in ["run", "proc", "sys"] {
            fs::create_dir(dir.path().join(d)).unwrap();
        }
        assert!(check_tree(dir.path()).is_ok());
    }

    #[test]
    fn the_applications_environment_takes_key_value_entries_and_the_last_one_counts() {
        let mut w = Workload::app();
        assert_eq!(w.env_value("APP_SCALE"), None);
        assert_eq!(w.env_value("APP_READY_CMD"), Some("snapboot ready"));
        w.env.push("APP_SCALE=0.25".into());
        w.env.push("APP_SCALE=0.5".into());
        assert_eq!(w.env_value("APP_SCALE"), Some("0.5"));
        assert_eq!(w.env_value("APP"), None, "a key's prefix is not the key");
        for good in ["APP_SCALE=0.25", "_X=", "a1=b=c"] {
            assert!(check_env_entry(good).is_ok(), "{good}");
        }
        for bad in ["APP_SCALE", "=1", "1A=2", "A-B=1", "A B=1", ""] {
            let e = check_env_entry(bad).unwrap_err().to_string();
            assert!(e.contains("not KEY=VALUE"), "{bad}: {e}");
        }
        let mut w = Workload::app();
        w.add_env(&["APP_SCALE=0.25".into()]).unwrap();
        assert_eq!(w.env_value("APP_SCALE"), Some("0.25"));
        let e = w.add_env(&["APP SCALE=1".into()]).unwrap_err().to_string();
        assert!(e.contains("--env \"APP SCALE=1\""), "{e}");
        let mut d = Workload::debian();
        let e = d
            .add_env(&["APP_SCALE=0.1".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("systemd service"), "{e}");
        assert!(d.env.is_empty(), "nothing added after a refusal");
    }
}
