//! The board's busybox, the shell and tools of the initramfs and of the `shell` root, for
//! each architecture: the host's busybox-static on x86_64 (the host is an x86_64 Debian),
//! Debian's arm64 busybox-static, unpacked by [`crate::foreign`], on arm64.
//!
//! The applet list comes from the host's busybox (`--list-full`), since an arm64 busybox
//! cannot run here. Debian builds busybox-static from one configuration for every
//! architecture, so the same source version has the same applets; the arm64 binary is
//! taken only when its source version is the host's, and when its applet name table (the
//! names, sorted, NUL-separated, which busybox keeps verbatim) is exactly the host's list.

use crate::foreign;
use crate::workload_error::WorkloadError;
use guestarch::Arch;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The host's busybox-static binary.
pub const BUSYBOX: &str = "/bin/busybox";

/// Debian's package of the static busybox.
pub const PACKAGE: &str = "busybox-static";

/// A busybox binary for the board and the applets it offers.
#[derive(Debug, Clone)]
pub struct Busybox {
    /// The binary on the host.
    pub path: PathBuf,
    /// Full paths of its applets (`/bin/sh`, `/sbin/switch_root`, ...).
    pub applets: Vec<String>,
}

impl Busybox {
    /// The busybox of `arch`; a foreign one is unpacked under `debs` ([`foreign::unpack`]).
    pub fn for_arch(arch: Arch, debs: &Path) -> Result<Self, WorkloadError> {
        let host = Path::new(BUSYBOX);
        if !host.is_file() {
            return Err(WorkloadError::Missing {
                what: "busybox (package busybox-static)".into(),
                path: host.to_path_buf(),
            });
        }
        let applets = busybox_applets()?;
        if arch == Arch::X86_64 {
            return Ok(Self {
                path: host.to_path_buf(),
                applets,
            });
        }
        let tree = foreign::unpack(&[PACKAGE], arch, debs)?;
        let path = tree.root.join(BUSYBOX.trim_start_matches('/'));
        let foreign_version = tree
            .package(PACKAGE)
            .map(|p| p.source_version.clone())
            .unwrap_or_default();
        let host_version = host_source_version()?;
        if foreign_version != host_version {
            return Err(WorkloadError::BusyboxApplets {
                path,
                reason: format!(
                    "its source version {foreign_version} is not the host's {host_version}, \
                     whose applet list is the one known (install the host's busybox-static \
                     of the same version)"
                ),
            });
        }
        let binary = fs::read(&path).map_err(|source| WorkloadError::Io {
            path: path.clone(),
            source,
        })?;
        if Arch::of_elf(&binary) != Some(arch) {
            return Err(WorkloadError::BusyboxApplets {
                path,
                reason: format!("it is not an {arch} program"),
            });
        }
        if !has_applet_table(&binary, &applets) {
            return Err(WorkloadError::BusyboxApplets {
                path,
                reason: "its applet name table is not the host busybox's".into(),
            });
        }
        Ok(Self { path, applets })
    }
}

/// Whether `binary` holds the name table of exactly `applets` (full paths, in busybox's
/// order): the names NUL-separated between two NULs.
pub fn has_applet_table(binary: &[u8], applets: &[String]) -> bool {
    let mut table = vec![0u8];
    for a in applets {
        table.extend_from_slice(a.rsplit('/').next().unwrap_or_default().as_bytes());
        table.push(0);
    }
    table.push(0);
    !applets.is_empty() && binary.windows(table.len()).any(|w| w == table.as_slice())
}

/// The source version of the host's busybox-static (`dpkg-query`).
fn host_source_version() -> Result<String, WorkloadError> {
    let cmd = format!("dpkg-query -W -f ${{source:Version}} {PACKAGE}");
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${source:Version}", PACKAGE])
        .output()
        .map_err(|e| WorkloadError::Command {
            cmd: cmd.clone(),
            reason: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(WorkloadError::Command {
            cmd,
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Full paths of the applets the host's busybox offers (`/bin/sh`, `/sbin/switch_root`, ...).
pub fn busybox_applets() -> Result<Vec<String>, WorkloadError> {
    let out = Command::new(BUSYBOX)
        .arg("--list-full")
        .output()
        .map_err(|e| WorkloadError::Command {
            cmd: format!("{BUSYBOX} --list-full"),
            reason: e.to_string(),
        })?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| format!("/{}", l.trim().trim_start_matches('/')))
        .filter(|l| l.len() > 1)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applet_table_must_be_exactly_the_list() {
        let list: Vec<String> = ["/usr/bin/[", "/usr/bin/[[", "/sbin/acpid", "/bin/ash"]
            .map(String::from)
            .into();
        let binary = b"\x7fELF..\x00[\x00[[\x00acpid\x00ash\x00\x00/var/log".to_vec();
        assert!(has_applet_table(&binary, &list));
        assert!(
            !has_applet_table(&binary, &list[..3]),
            "a missing applet is told"
        );
        let more = b"\x00[\x00[[\x00acpid\x00arp\x00ash\x00\x00".to_vec();
        assert!(!has_applet_table(&more, &list), "an extra applet is told");
        assert!(!has_applet_table(&binary, &[]));
    }

    #[test]
    fn the_host_busybox_holds_its_own_table() {
        // The x86_64 board's busybox; the README's set-up installs it.
        let bb = fs::read(BUSYBOX).unwrap();
        let applets = busybox_applets().unwrap();
        assert!(applets.iter().any(|a| a == "/bin/sh"), "{applets:?}");
        assert!(has_applet_table(&bb, &applets));
    }
}
