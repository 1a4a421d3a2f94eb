//! What the restorer takes from the kernel pack's initramfs (the stock kernel's, whose
//! resume would judge the same images): the trust rule ([`Trust`]: a public key or none)
//! and the boot setup images must be bound to ([`crate::bootsetup`]). Both come from one
//! read of its cpio archive ([`crate::cpio`]); an initramfs the restorer cannot read
//! refuses every image, since which ones resume would trust is then unknown.

use crate::bootsetup::{boot_setup, SetupError};
use crate::cpio::{entries, CpioError};
use crate::trust::{of_initramfs, KeyFileError};
use admission::Trust;
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
}

/// The stock initramfs's rules for images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockInit {
    /// Which images are trusted.
    pub trust: Trust,
    /// The boot setup an image must be bound to.
    pub boot_setup: BootSetup,
}

impl StockInit {
    /// Reads the initramfs `bytes` (checked against the pack's BLAKE3 by the caller).
    pub fn read(bytes: &[u8]) -> Result<StockInit, StockInitError> {
        let e = entries(bytes)?;
        Ok(StockInit {
            trust: of_initramfs(&e)?,
            boot_setup: boot_setup(&e)?,
        })
    }
}
