//! What the restorer takes from the kernel pack's initramfs (the stock kernel's, whose
//! resume would judge the same images): its settings file (`snapboot.conf`), the trust rule
//! ([`Trust`]: a public key or none) and the boot setup images must be bound to
//! ([`crate::bootsetup`]). All come from one
//! read of its cpio archive ([`crate::cpio`]); an initramfs the restorer cannot read
//! refuses every image, since which ones resume would trust is then unknown.

use crate::bootsetup::{boot_setup, SetupError};
use crate::cpio::{entries, CpioError};
use crate::trust::{of_initramfs, KeyFileError};
use admission::Trust;
use alloc::string::String;
use snapimg::BootSetup;

/// Why the initramfs tells nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StockInitError {
    /// Its archive cannot be read.
    #[error("{0}; which images its resume would trust is unknown")]
    Cpio(#[from] CpioError),
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
        let e = entries(bytes)?;
        let config_path = bootparams::config::CONFIG_PATH.trim_start_matches('/');
        let config = match e.get(config_path) {
            None => None,
            Some(f) => Some(
                core::str::from_utf8(f.data)
                    .map_err(|_| StockInitError::ConfigNotText)?
                    .into(),
            ),
        };
        Ok(StockInit {
            trust: of_initramfs(&e)?,
            boot_setup: boot_setup(&e)?,
            config,
        })
    }
}
