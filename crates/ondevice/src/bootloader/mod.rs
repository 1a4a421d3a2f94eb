//! The device's boot loader, as far as snapboot asks anything of it: choose the capture entry
//! for the next boot only (`snapboot capture --next-boot`), so that boot captures an image at
//! the ready point and the boot after it is the normal one again, which restores it.

pub mod grub;

use std::path::{Path, PathBuf};

/// A boot loader snapboot knows how to ask for a one-time capture boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loader {
    /// GRUB, whose environment block is this `grubenv` file.
    Grub {
        /// The environment block.
        grubenv: PathBuf,
    },
}

/// Where a GRUB keeps its environment: `BOOT_DIR/grub/grubenv`, the boot directories tried
/// in this order (the ESP, when the root is read-only and GRUB's prefix is there; then
/// Debian's /boot).
pub const GRUB_BOOT_DIRS: &[&str] = &["/boot/efi", "/boot"];

/// Why no boot loader was found or asked.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// No boot loader snapboot knows was found.
    #[error("no boot loader found: no grub/grubenv under {tried} (is the ESP mounted?)")]
    NotFound {
        /// The boot directories looked in.
        tried: String,
    },
    /// GRUB's environment block could not be read or written.
    #[error(transparent)]
    Grub(#[from] grub::GrubEnvError),
}

impl Loader {
    /// The boot loader of the system under `root` (`/` on the device): GRUB, found by its
    /// environment block in `boot_dir` when given, else in [`GRUB_BOOT_DIRS`].
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
        Err(LoaderError::NotFound {
            tried: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// Boots the entry `id` on the next boot only, then the default entry again.
    pub fn boot_once(&self, id: &str) -> Result<(), LoaderError> {
        match self {
            Loader::Grub { grubenv } => grub::set_next_entry(grubenv, id)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grub_is_found_by_its_environment_on_the_esp_first() {
        let d = tempfile::tempdir().unwrap();
        let err = Loader::detect(d.path(), None).unwrap_err().to_string();
        assert!(err.contains("/boot/efi, /boot"), "{err}");
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
    }
}
