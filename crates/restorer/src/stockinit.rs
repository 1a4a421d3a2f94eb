//! What the restorer takes from the kernel pack's initramfs (the stock kernel's, whose
//! resume would judge the same images): its settings file (`snapboot.conf`), the trust rule
//! ([`Trust`]: a public key or none) and the boot setup images must be bound to
//! ([`crate::bootsetup`]). All come from one
//! read of its archive, unpacked as the kernel would (crate `initramfs`: uncompressed,
//! zstd, gzip or lz4); an initramfs the restorer cannot read refuses every image, since
//! which ones resume would trust is then unknown.

use crate::bootsetup::{boot_setup, SetupError};
use crate::trust::{of_initramfs, KeyFileError};
use admission::Trust;
use alloc::string::String;
use initramfs::{ArchiveError, Root};
use snapimg::BootSetup;

/// The most a compressed initramfs may unpack to here: the restorer's heap (256 MiB, nothing
/// freed) also holds the restore's catalog, page list, plan and buffers. Debian's
/// initramfs-tools archive unpacks to about 20 MiB.
pub const UNPACKED_LIMIT: usize = 128 << 20;

/// Why the initramfs tells nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StockInitError {
    /// Its archive cannot be read.
    #[error("{0}; which images its resume would trust is unknown")]
    Archive(#[from] ArchiveError),
    /// Its public key file is not one.
    #[error(transparent)]
    Key(#[from] KeyFileError),
    /// Its boot setup cannot be computed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// Its settings file is not text.
    #[error(
        "{} in the initramfs is not UTF-8 text",
        bootparams::config::CONFIG_PATH
    )]
    ConfigNotText,
}

/// The stock initramfs's rules for images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockInit {
    /// Which images are trusted.
    pub trust: Trust,
    /// The boot setup an image must be bound to.
    pub boot_setup: BootSetup,
    /// The text of its settings file ([`bootparams::config::CONFIG_PATH`]), if it has one:
    /// the device's settings under the command line, as its resume reads them.
    pub config: Option<String>,
}

impl StockInit {
    /// Reads the initramfs `bytes` (checked against the pack's BLAKE3 by the caller).
    pub fn read(bytes: &[u8]) -> Result<StockInit, StockInitError> {
        Self::of(&initramfs::unpack_with_limit(bytes, UNPACKED_LIMIT)?)
    }

    /// The rules of the unpacked initramfs `root`.
    pub fn of(root: &Root) -> Result<StockInit, StockInitError> {
        let config = match root.get(bootparams::config::CONFIG_PATH) {
            None => None,
            Some(f) => Some(
                core::str::from_utf8(f.data())
                    .map_err(|_| StockInitError::ConfigNotText)?
                    .into(),
            ),
        };
        Ok(StockInit {
            trust: of_initramfs(root)?,
            boot_setup: boot_setup(root)?,
            config,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board's Debian initramfs (initramfs-tools, zstd; `snapboot board build
    /// --workload debian`) is read whole: its trust rule and boot setup come out.
    #[test]
    fn the_debian_initramfs_is_read() {
        let home = std::env::var("SNAPBOOT_HOME").unwrap_or_else(|_| ".snapboot".into());
        let file = std::path::Path::new(&home).join("bundles/debian/initramfs.cpio");
        let Ok(bytes) = std::fs::read(&file) else {
            println!("skipped: no {}", file.display());
            return;
        };
        let t = std::time::Instant::now();
        let stock = StockInit::read(&bytes).unwrap();
        println!(
            "{}: read in {:.1} ms: {} (boot setup: {} files, manifest {:02x?}…)",
            file.display(),
            t.elapsed().as_secs_f64() * 1e3,
            stock.trust.describe(),
            stock.boot_setup.manifest.len(),
            &stock.boot_setup.files[..4],
        );
        let init = stock.boot_setup.manifest.iter().any(|f| f.path == "init");
        assert!(init, "the manifest covers /init");
    }

    #[test]
    fn an_unreadable_initramfs_says_why() {
        let e = StockInit::read(b"\xfd7zXZ\0\0\0").unwrap_err().to_string();
        assert!(
            e.starts_with("its archive at byte 0 is xz-compressed: not supported")
                && e.ends_with("which images its resume would trust is unknown"),
            "{e}"
        );
    }
}
