//! Kernel lockdown, which disables hibernation: with lockdown at `integrity` or above the
//! kernel refuses `/dev/snapshot` (open fails with EPERM), so nothing can be captured or
//! restored. The running state is the bracketed word of `/sys/kernel/security/lockdown`
//! (`none [integrity] confidentiality`); no such file means no lockdown LSM. Capture and
//! resume ask [`check_running`] before they open `/dev/snapshot`.
//!
//! Lockdown comes from `lockdown=` on the command line, from a kernel built with
//! `CONFIG_LOCK_DOWN_KERNEL_FORCE_*`, or from UEFI Secure Boot on kernels that lock down
//! under it (Debian's, Ubuntu's, Fedora's: `CONFIG_LOCK_DOWN_IN_EFI_SECURE_BOOT`). It can be
//! raised at run time, never lowered.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Where securityfs is mounted.
pub const SECURITYFS: &str = "/sys/kernel/security";
/// The lockdown LSM's file in securityfs.
pub const LOCKDOWN_FILE: &str = "/sys/kernel/security/lockdown";

/// The kernel's lockdown state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lockdown {
    /// No lockdown LSM in this kernel (no lockdown file).
    Absent,
    /// The LSM is there, lockdown is off.
    None,
    /// Integrity: no changes to the running kernel (unsigned modules, kexec, hibernation).
    Integrity,
    /// Confidentiality: integrity, and no reading kernel memory either.
    Confidentiality,
}

impl Lockdown {
    /// Whether the kernel refuses hibernation in this state.
    pub fn blocks_hibernation(self) -> bool {
        matches!(self, Lockdown::Integrity | Lockdown::Confidentiality)
    }
}

impl fmt::Display for Lockdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lockdown::Absent => "no lockdown LSM",
            Lockdown::None => "none",
            Lockdown::Integrity => "integrity",
            Lockdown::Confidentiality => "confidentiality",
        })
    }
}

/// Why the lockdown state is not known.
#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
    /// The file does not name one state in brackets.
    #[error(
        "{LOCKDOWN_FILE} says {0:?}: expected one of none, integrity, confidentiality in brackets"
    )]
    Unparsable(String),
}

/// The state in a lockdown file's text (`none [integrity] confidentiality`).
pub fn parse(text: &str) -> Result<Lockdown, LockdownError> {
    let word = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'));
    match word {
        Some("none") => Ok(Lockdown::None),
        Some("integrity") => Ok(Lockdown::Integrity),
        Some("confidentiality") => Ok(Lockdown::Confidentiality),
        _ => Err(LockdownError::Unparsable(text.trim().to_string())),
    }
}

/// The state in `path`; a missing file is [`Lockdown::Absent`].
pub fn read(path: &Path) -> Result<Lockdown, LockdownError> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Lockdown::Absent),
        Err(source) => Err(LockdownError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The running kernel's state. In an initramfs securityfs is usually not mounted yet: it is
/// mounted on [`SECURITYFS`] for the read and unmounted again.
pub fn running() -> Result<Lockdown, LockdownError> {
    let file = Path::new(LOCKDOWN_FILE);
    if file.exists() || !Path::new(SECURITYFS).is_dir() {
        return read(file);
    }
    use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
    if mount(
        "securityfs",
        SECURITYFS,
        "securityfs",
        MountFlags::empty(),
        "",
    )
    .is_err()
    {
        return read(file);
    }
    let state = read(file);
    let _ = unmount(SECURITYFS, UnmountFlags::empty());
    state
}

/// Hibernation is disabled by lockdown: the reason capture and resume give, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kernel lockdown is '{0}': the kernel disables hibernation (/dev/snapshot), so nothing can \
     be captured or restored. Lockdown cannot be lowered while running; boot without it: \
     drop `lockdown=` from the command line, or turn UEFI Secure Boot off (Debian's kernels \
     lock down under Secure Boot, and `lockdown=none` does not undo that), or boot a kernel \
     built without CONFIG_LOCK_DOWN_IN_EFI_SECURE_BOOT and signed with your own key"
)]
pub struct LockedDown(pub Lockdown);

/// Refuses when `state` disables hibernation.
pub fn check(state: Lockdown) -> Result<(), LockedDown> {
    if state.blocks_hibernation() {
        Err(LockedDown(state))
    } else {
        Ok(())
    }
}

/// Refuses when the running kernel is locked down. A state that cannot be read is not a
/// refusal: `/dev/snapshot` itself says no if it must.
pub fn check_running() -> Result<(), LockedDown> {
    running().map_or(Ok(()), check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bracketed_word_is_the_state() {
        let cases = [
            ("[none] integrity confidentiality\n", Lockdown::None),
            ("none [integrity] confidentiality\n", Lockdown::Integrity),
            (
                "none integrity [confidentiality]\n",
                Lockdown::Confidentiality,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
        for bad in ["", "none integrity confidentiality\n", "[weird]\n"] {
            assert!(
                matches!(parse(bad), Err(LockdownError::Unparsable(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_missing_file_is_no_lsm_and_only_integrity_and_above_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("lockdown");
        assert_eq!(read(&file).unwrap(), Lockdown::Absent);
        std::fs::write(&file, "none [integrity] confidentiality\n").unwrap();
        let state = read(&file).unwrap();
        let why = check(state).unwrap_err().to_string();
        assert!(why.starts_with("kernel lockdown is 'integrity'"), "{why}");
        assert!(why.contains("Secure Boot"), "{why}");
        assert!(check(Lockdown::Confidentiality).is_err());
        assert_eq!(check(Lockdown::None), Ok(()));
        assert_eq!(check(Lockdown::Absent), Ok(()));
    }
}
