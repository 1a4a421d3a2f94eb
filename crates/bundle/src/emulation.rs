//! Running the programs of a root of another architecture on the host: Debian's
//! `qemu-user-static` registered with the kernel's `binfmt_misc`, so that mmdebstrap's
//! maintainer scripts and the `chroot` steps of `crate::debian` (apt, depmod, mkinitramfs)
//! run the arm64 root's own programs on an x86_64 host.
//!
//! ```text
//!   /proc/sys/fs/binfmt_misc            mounted here when it is not (root)
//!     register                          <- the line of /usr/lib/binfmt.d/qemu-aarch64.conf
//!     qemu-aarch64                      "enabled", interpreter /usr/libexec/qemu-binfmt/…
//! ```
//!
//! The package's line has the `F` flag: the kernel opens the interpreter when it is
//! registered, so a chroot needs no copy of it. Debian registers it at install time only
//! where systemd (or binfmt-support) runs; a build host or CI container has neither, so
//! the build registers it itself, once per host boot.

use guestarch::Arch;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the kernel's `binfmt_misc` filesystem is mounted.
pub const BINFMT_DIR: &str = "/proc/sys/fs/binfmt_misc";

/// Where Debian's `qemu-user-static` keeps its registrations (systemd-binfmt's format).
pub const BINFMT_CONF_DIR: &str = "/usr/lib/binfmt.d";

/// The Debian package with the user-mode emulators and their registrations.
pub const PACKAGE: &str = "qemu-user-static";

/// Why the host cannot run another architecture's programs.
#[derive(Debug, thiserror::Error)]
pub enum EmulationError {
    /// The emulator's registration is not installed.
    #[error("{} not found: install the package {PACKAGE} (README set-up) to run {arch} programs on this host", .conf.display())]
    NotInstalled {
        /// The registration file looked for.
        conf: PathBuf,
        /// The architecture.
        arch: Arch,
    },
    /// `binfmt_misc` is not mounted and could not be.
    #[error("mounting binfmt_misc on {BINFMT_DIR} (needs root): {0}")]
    Mount(String),
    /// The registration file has no line to register.
    #[error("{} has no registration line", .0.display())]
    NoLine(PathBuf),
    /// The kernel refused the registration, or it did not take.
    #[error("registering {name} with binfmt_misc: {reason}")]
    Register {
        /// The entry's name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// The `binfmt_misc` entry qemu-user-static registers for `arch` (`qemu-aarch64`).
pub fn entry_name(arch: Arch) -> String {
    format!("qemu-{}", arch.uname_machine())
}

/// The registration line of a binfmt.d file: its first line that is not blank or a comment.
pub fn register_line(conf: &str) -> Option<&str> {
    conf.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
}

/// Whether an entry's file under [`BINFMT_DIR`] says it is enabled.
pub fn is_enabled(entry: &str) -> bool {
    entry.lines().next().map(str::trim) == Some("enabled")
}

/// Makes sure the host runs `arch`'s programs: nothing to do for the host's own
/// architecture or an entry already enabled; otherwise mounts `binfmt_misc` if needed and
/// registers (or enables) qemu-user-static's entry.
pub fn ensure(arch: Arch) -> Result<(), EmulationError> {
    if Arch::host() == Some(arch) {
        return Ok(());
    }
    let name = entry_name(arch);
    let dir = Path::new(BINFMT_DIR);
    let entry = dir.join(&name);
    if fs::read_to_string(&entry).is_ok_and(|t| is_enabled(&t)) {
        return Ok(());
    }
    let conf = Path::new(BINFMT_CONF_DIR).join(format!("{name}.conf"));
    let text = fs::read_to_string(&conf).map_err(|_| EmulationError::NotInstalled {
        conf: conf.clone(),
        arch,
    })?;
    let line = register_line(&text).ok_or_else(|| EmulationError::NoLine(conf.clone()))?;
    if !dir.join("register").exists() {
        let out = Command::new("mount")
            .args(["-t", "binfmt_misc", "binfmt_misc", BINFMT_DIR])
            .output()
            .map_err(|e| EmulationError::Mount(e.to_string()))?;
        if !out.status.success() {
            return Err(EmulationError::Mount(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
    }
    let register = |path: &Path, text: &str| {
        fs::write(path, text).map_err(|e| EmulationError::Register {
            name: name.clone(),
            reason: format!("writing {}: {e}", path.display()),
        })
    };
    if entry.exists() {
        register(&entry, "1")?;
    } else {
        register(&dir.join("register"), line)?;
    }
    match fs::read_to_string(&entry) {
        Ok(t) if is_enabled(&t) => Ok(()),
        Ok(t) => Err(EmulationError::Register {
            name,
            reason: format!("the entry says {:?}", t.lines().next().unwrap_or_default()),
        }),
        Err(e) => Err(EmulationError::Register {
            reason: format!("{}: {e}", entry.display()),
            name,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_line_is_the_first_that_is_not_a_comment() {
        let conf = "# qemu-user-static\n\n:qemu-aarch64:M::\\x7fELF:\\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF\n";
        assert_eq!(
            register_line(conf),
            Some(":qemu-aarch64:M::\\x7fELF:\\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OPF")
        );
        assert_eq!(register_line("# nothing\n\n"), None);
    }

    #[test]
    fn an_entry_is_enabled_by_its_first_line() {
        assert!(is_enabled(
            "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\n"
        ));
        assert!(!is_enabled("disabled\ninterpreter /x\n"));
        assert!(!is_enabled(""));
    }

    #[test]
    fn the_entry_is_named_after_the_kernels_machine() {
        assert_eq!(entry_name(Arch::Arm64), "qemu-aarch64");
    }

    #[test]
    fn the_hosts_own_architecture_needs_nothing() {
        if let Some(host) = Arch::host() {
            ensure(host).unwrap();
        }
    }
}
