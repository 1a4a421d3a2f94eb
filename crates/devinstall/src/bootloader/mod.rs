//! The device's boot loader, as far as snapboot asks anything of it: that the next boot, and
//! only the next, boots the capture entry (`snapboot capture --next-boot`). That boot captures
//! an image at the ready point; the boot loader has already dropped the request, so a capture
//! that fails is not retried on every boot, and the boots after it are the normal ones, which
//! restore.
//!
//! ```text
//!   GRUB     next_entry=snapboot-capture in grubenv (what `grub-reboot` writes); GRUB's
//!            default entry clears it when it boots it           (grub.rs, guest/grub/)
//!   U-Boot   snapboot_once=capture in its environment (fw_setenv, or the `ubootenv`
//!            partition); boot.scr clears it and saves before booting the capture entry
//!                                                               (uboot.rs, guest/u-boot/)
//! ```
//!
//! On GRUB it also sets up the restore kernel as the default entry (`snapboot restore-kernel
//! install`, restore_kernel.rs): the kernel, the records the entry and the restore kernel
//! read; the refusals go to the stock kernel through its kernel pack.

pub mod grub;
pub mod restore_kernel;
pub mod uboot;

use std::path::{Path, PathBuf};

/// A boot loader snapboot knows how to ask for a one-time capture boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loader {
    /// GRUB, whose environment block is this `grubenv` file.
    Grub {
        /// The environment block.
        grubenv: PathBuf,
    },
    /// U-Boot, with the place its next-boot request is written.
    Uboot(uboot::EnvTarget),
}

/// Where a GRUB keeps its environment: `BOOT_DIR/grub/grubenv`, the boot directories tried
/// in this order (the ESP, when the root is read-only and GRUB's prefix is there; then
/// Debian's /boot).
pub const GRUB_BOOT_DIRS: &[&str] = &["/boot/efi", "/boot"];

/// Why no boot loader was found or asked.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// No boot loader snapboot knows was found.
    #[error(
        "no boot loader found to ask for a capture: no grub/grubenv under {tried} (is the ESP \
         mounted?), no /{} with fw_setenv and no GPT partition named {}",
        uboot::FW_ENV_CONFIG,
        uboot::ENV_PARTLABEL
    )]
    NotFound {
        /// The GRUB boot directories looked in.
        tried: String,
    },
    /// GRUB's environment block could not be read or written.
    #[error(transparent)]
    Grub(#[from] grub::GrubEnvError),
    /// U-Boot's environment could not be written.
    #[error(transparent)]
    Uboot(#[from] uboot::UbootError),
}

impl Loader {
    /// The boot loader of the system under `root` (`/` on the device): GRUB, found by its
    /// environment block in `boot_dir` when given, else in [`GRUB_BOOT_DIRS`]; else U-Boot,
    /// found by `/etc/fw_env.config` or a partition named `ubootenv`.
    pub fn detect(root: &Path, boot_dir: Option<&Path>) -> Result<Self, LoaderError> {
        let dirs: Vec<PathBuf> = match boot_dir {
            Some(d) => vec![d.to_path_buf()],
            None => GRUB_BOOT_DIRS.iter().map(PathBuf::from).collect(),
        };
        for d in &dirs {
            let rel = d.strip_prefix("/").unwrap_or(d);
            let grubenv = root.join(rel).join("grub/grubenv");
            if grubenv.is_file() {
                return Ok(Loader::Grub { grubenv });
            }
        }
        if boot_dir.is_none() {
            if let Some(t) = uboot::EnvTarget::detect_in(root) {
                return Ok(Loader::Uboot(t));
            }
        }
        Err(LoaderError::NotFound {
            tried: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Asks for one capture boot next time; returns what was written where.
    pub fn request_capture(&self) -> Result<String, LoaderError> {
        match self {
            Loader::Grub { grubenv } => {
                grub::set_next_entry(grubenv, grub::CAPTURE_ENTRY)?;
                Ok(format!(
                    "next boot: GRUB entry {} (next_entry in {}); the boot after it restores",
                    grub::CAPTURE_ENTRY,
                    grubenv.display()
                ))
            }
            Loader::Uboot(t) => Ok(t.request_capture()?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grub_is_found_by_its_environment_on_the_esp_first() {
        let d = tempfile::tempdir().unwrap();
        let err = Loader::detect(d.path(), Some(Path::new("/boot")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("under /boot "), "{err}");
        for dir in ["boot/grub", "boot/efi/grub"] {
            std::fs::create_dir_all(d.path().join(dir)).unwrap();
            std::fs::write(d.path().join(dir).join("grubenv"), grub::empty_block()).unwrap();
        }
        assert_eq!(
            Loader::detect(d.path(), None).unwrap(),
            Loader::Grub {
                grubenv: d.path().join("boot/efi/grub/grubenv")
            }
        );
        assert_eq!(
            Loader::detect(d.path(), Some(Path::new("/boot"))).unwrap(),
            Loader::Grub {
                grubenv: d.path().join("boot/grub/grubenv")
            }
        );
        let asked = Loader::detect(d.path(), None)
            .unwrap()
            .request_capture()
            .unwrap();
        assert!(asked.contains("snapboot-capture"), "{asked}");
    }
}
