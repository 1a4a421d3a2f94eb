//! U-Boot: the device asks for one capture boot by setting `snapboot_once=capture` in an
//! environment U-Boot reads at power-on, and U-Boot's boot script (`guest/u-boot/boot.cmd`)
//! clears it before it boots the capture entry.
//!
//! Where the variable goes:
//! - with `/etc/fw_env.config` and `fw_setenv` (Debian's `libubootenv-tool`), into the
//!   environment that file names (U-Boot's own, on a device whose U-Boot keeps it in eMMC or
//!   SPI flash that Linux reaches too);
//! - otherwise snapboot writes a whole environment area itself (`ubootenv`: CRC32, then
//!   NUL-separated variables) to the start of the GPT partition named `ubootenv`, which the
//!   boot script reads with `env import -c`. On the arm64 board this is the only way: Debian's
//!   arm64 kernel has no driver for QEMU `virt`'s CFI flash (`CONFIG_MTD_CFI` and
//!   `CONFIG_MTD_PHYSMAP` are off, so there is no `/dev/mtd*`), and Debian's U-Boot cannot
//!   `saveenv` to it on QEMU 7.2 (the write times out after the erase).

use bootparams::StoreAddress;
use devsys::locate::{resolve, LocateError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use ubootenv::{Env, EnvError};

/// The variable the boot script tests.
pub const ONCE_VAR: &str = "snapboot_once";
/// Its value that asks for the capture entry.
pub const CAPTURE: &str = "capture";
/// `fw_setenv`'s configuration: which device, offset and size hold U-Boot's environment.
pub const FW_ENV_CONFIG: &str = "etc/fw_env.config";
/// The GPT name of the request partition.
pub const ENV_PARTLABEL: &str = "ubootenv";
/// Bytes of the request area (the boot script imports this many; U-Boot `qemu_arm64`'s
/// environment size, so `fw_setenv` can be pointed at the partition with the same size).
pub const AREA_BYTES: usize = 0x40000;

/// Why the request could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UbootError {
    /// `fw_setenv` could not be run or failed.
    #[error("`fw_setenv {ONCE_VAR} {CAPTURE}` failed: {0}")]
    FwSetenv(String),
    /// The request partition was not found.
    #[error("the partition named {ENV_PARTLABEL}")]
    Locate(#[source] LocateError),
    /// The area to write.
    #[error("the request area")]
    Env(#[source] EnvError),
    /// Reading or writing the partition.
    #[error("{}", path.display())]
    Io {
        /// The device.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where the request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvTarget {
    /// U-Boot's own environment, through `fw_setenv` (the device's `/etc/fw_env.config`).
    FwSetenv,
    /// An environment area snapboot writes at the start of the partition named `ubootenv`.
    Partition,
}

impl EnvTarget {
    /// `fw_setenv` when `root` has its configuration and the tool, else the request
    /// partition when there is a partition of that name; none without either.
    pub fn detect_in(root: &Path) -> Option<Self> {
        let tool = ["usr/bin/fw_setenv", "usr/sbin/fw_setenv", "bin/fw_setenv"]
            .iter()
            .any(|p| root.join(p).is_file());
        if tool && root.join(FW_ENV_CONFIG).is_file() {
            return Some(EnvTarget::FwSetenv);
        }
        resolve(
            &StoreAddress::PartLabel(ENV_PARTLABEL.into()),
            Duration::ZERO,
        )
        .is_ok()
        .then_some(EnvTarget::Partition)
    }

    /// Writes `snapboot_once=capture`; returns where.
    pub fn request_capture(&self) -> Result<String, UbootError> {
        match self {
            EnvTarget::FwSetenv => {
                let out = Command::new("fw_setenv")
                    .args([ONCE_VAR, CAPTURE])
                    .output()
                    .map_err(|e| UbootError::FwSetenv(e.to_string()))?;
                if !out.status.success() {
                    return Err(UbootError::FwSetenv(format!(
                        "{}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                Ok(format!(
                    "{ONCE_VAR}={CAPTURE} set in U-Boot's environment (fw_setenv)"
                ))
            }
            EnvTarget::Partition => {
                let part = resolve(
                    &StoreAddress::PartLabel(ENV_PARTLABEL.into()),
                    Duration::from_secs(1),
                )
                .map_err(UbootError::Locate)?;
                write_request(&part.path)?;
                Ok(format!(
                    "{ONCE_VAR}={CAPTURE} written to {} (partition {ENV_PARTLABEL})",
                    part.path.display()
                ))
            }
        }
    }
}

/// Sets the request in the area at the start of `dev`, keeping the other variables of a
/// valid area there (an erased or zeroed one starts empty), and syncs it.
pub fn write_request(dev: &Path) -> Result<(), UbootError> {
    let io = |source| UbootError::Io {
        path: dev.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .map_err(io)?;
    let mut area = vec![0u8; AREA_BYTES];
    f.read_exact(&mut area).map_err(io)?;
    let mut env = Env::from_area(&area, AREA_BYTES).unwrap_or_default();
    env.set(ONCE_VAR, CAPTURE).map_err(UbootError::Env)?;
    let area = env.to_area(AREA_BYTES).map_err(UbootError::Env)?;
    f.seek(SeekFrom::Start(0)).map_err(io)?;
    f.write_all(&area).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Whether the area at the start of `data` (the request partition's bytes) asks for a
/// capture: an area without the variable (the boot script writes one back before the
/// capture boot) or whose CRC does not match (damaged, or never written) asks for nothing.
pub fn requested(data: &[u8]) -> bool {
    Env::from_area(data, AREA_BYTES).is_ok_and(|e| e.get(ONCE_VAR) == Some(CAPTURE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ubootenv");
        let mut data = bytes.to_vec();
        data.resize(1 << 20, 0);
        std::fs::write(&p, data).unwrap();
        (dir, p)
    }

    #[test]
    fn a_zeroed_partition_gets_an_area_with_only_the_request() {
        let (_d, p) = part(&[]);
        assert!(!requested(&std::fs::read(&p).unwrap()));
        write_request(&p).unwrap();
        let data = std::fs::read(&p).unwrap();
        assert!(requested(&data));
        let env = Env::from_area(&data, AREA_BYTES).unwrap();
        assert_eq!(env.len(), 1);
        assert_eq!(&data[4..26], b"snapboot_once=capture\0");
        assert_eq!(data.len(), 1 << 20, "the partition keeps its size");
    }

    #[test]
    fn other_variables_of_a_valid_area_are_kept_and_a_cleared_block_is_no_request() {
        let mut env = Env::default();
        env.set("board_serial", "A17").unwrap();
        let (_d, p) = part(&env.to_area(AREA_BYTES).unwrap());
        write_request(&p).unwrap();
        let data = std::fs::read(&p).unwrap();
        let got = Env::from_area(&data, AREA_BYTES).unwrap();
        assert_eq!(got.get("board_serial"), Some("A17"));
        assert_eq!(got.get(ONCE_VAR), Some(CAPTURE));
        // What boot.cmd does before booting the capture entry: zero the first block.
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all(&[0u8; 512]).unwrap();
        assert!(!requested(&std::fs::read(&p).unwrap()));
    }

    #[test]
    fn fw_setenv_is_chosen_only_with_its_configuration_and_the_tool() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::write(
            root.path().join(FW_ENV_CONFIG),
            "/dev/mmcblk0 0x400000 0x4000\n",
        )
        .unwrap();
        assert_ne!(EnvTarget::detect_in(root.path()), Some(EnvTarget::FwSetenv));
        std::fs::write(root.path().join("usr/bin/fw_setenv"), "").unwrap();
        assert_eq!(EnvTarget::detect_in(root.path()), Some(EnvTarget::FwSetenv));
    }
}
