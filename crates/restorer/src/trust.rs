//! Where the restorer's trust rule comes from: when the initramfs carries a public key
//! (`/etc/snapboot/image.pub`, `ondevice::store::PUBLIC_KEY_FILE`), only images signed with
//! it restore; without one, any image that passes the other checks does. The restorer has
//! no initramfs of its own: it reads the one in the kernel pack, the stock kernel's, whose
//! resume would judge the same image ([`of_initramfs`]). The rule itself is
//! [`admission::Trust`], the one resume checks.

use admission::{Sealing, Trust};
use alloc::string::String;
use imagekey::PublicKey;
use initramfs::{Kind, Root};

/// Where the initramfs carries the public key images must be signed with (no leading `/`).
pub const PUBLIC_KEY_PATH: &str = "etc/snapboot/image.pub";

/// Why the initramfs's key cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// The key file is not a regular file.
    #[error("/{PUBLIC_KEY_PATH} in the initramfs is not a regular file (mode {0:o})")]
    NotAFile(u32),
    /// It holds no public key.
    #[error("/{PUBLIC_KEY_PATH} in the initramfs is not a snapboot public key: {0}")]
    Format(String),
}

/// The trust rule of the initramfs whose root is `root`: images need the signature
/// of the key it carries, or none; the restorer holds no device key, so encrypted images
/// are never trusted by it (they are refused as sealed when read).
pub fn of_initramfs(root: &Root) -> Result<Trust, KeyFileError> {
    of_key_file(key_file(root)?)
}

/// The bytes of the initramfs's key file, if it has one.
pub fn key_file<'r>(root: &'r Root) -> Result<Option<&'r [u8]>, KeyFileError> {
    let Some(e) = root.get(PUBLIC_KEY_PATH) else {
        return Ok(None);
    };
    if e.kind() != Kind::Regular {
        return Err(KeyFileError::NotAFile(e.mode));
    }
    Ok(Some(e.data()))
}

/// The trust rule of a key file's bytes (`None`: the initramfs has none, any image).
pub fn of_key_file(file: Option<&[u8]>) -> Result<Trust, KeyFileError> {
    let Some(data) = file else {
        return Ok(Trust::ANY);
    };
    let text = core::str::from_utf8(data).map_err(|_| KeyFileError::Format("not text".into()))?;
    let key = PublicKey::from_text(text).map_err(KeyFileError::Format)?;
    Ok(Trust {
        key: Some(key),
        sealing: Sealing::Clear,
    })
}
