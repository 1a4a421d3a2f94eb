//! The device's boot loader, as far as snapboot asks anything of it: that the next boot, and
//! only the next, boots the capture entry (`snapboot capture --next-boot`). The boot loader
//! clears the request before it boots that entry, so a capture that fails is not retried on
//! every boot; the boots after it are normal ones, which restore.

pub mod uboot;

use std::path::Path;

/// Why no boot loader could be asked.
#[derive(Debug, thiserror::Error)]
pub enum BootloaderError {
    /// Nothing says which boot loader boots this device.
    #[error(
        "no boot loader found to ask for a capture: no {} and no GPT partition named {}",
        uboot::FW_ENV_CONFIG,
        uboot::ENV_PARTLABEL
    )]
    NotFound,
    /// U-Boot's environment.
    #[error(transparent)]
    Uboot(#[from] uboot::UbootError),
}

/// The boot loader that boots this device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loader {
    /// U-Boot, with the place its next-boot request is written.
    Uboot(uboot::EnvTarget),
}

impl Loader {
    /// The boot loader of this device, found from what the system has: for U-Boot,
    /// `/etc/fw_env.config` or a partition named `ubootenv`.
    pub fn detect() -> Result<Self, BootloaderError> {
        Self::detect_in(Path::new("/"))
    }

    /// [`Loader::detect`] with the system's files under `root`.
    pub fn detect_in(root: &Path) -> Result<Self, BootloaderError> {
        match uboot::EnvTarget::detect_in(root) {
            Some(t) => Ok(Loader::Uboot(t)),
            None => Err(BootloaderError::NotFound),
        }
    }

    /// Asks for one capture boot next time; returns what was written where.
    pub fn request_capture(&self) -> Result<String, BootloaderError> {
        match self {
            Loader::Uboot(t) => Ok(t.request_capture()?),
        }
    }
}
