//! What makes an image trusted, by resume's rule: when the initramfs carries a public key
//! (`/etc/snapboot/image.pub`, `ondevice::store::PUBLIC_KEY_FILE`), only images signed with
//! it restore; without one, any image that passes the other checks does. The restorer has
//! no initramfs of its own: it reads the one in the kernel pack, the stock kernel's, whose
//! resume would judge the same image ([`Trust::of_initramfs`]). The digest is the store's
//! ([`storelayout::signed_digest`]), the signature check and its reasons `imagekey`'s.

use crate::cpio::{Entry, S_IFMT};
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use imagekey::PublicKey;
use storelayout::{Catalog, DigestError, ImageRec};

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

/// The trust rule of one boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// No public key: images need no signature.
    Any,
    /// Images must carry a signature this key verifies.
    SignedBy(PublicKey),
}

impl Trust {
    /// The rule of the initramfs whose entries are `entries`.
    pub fn of_initramfs(entries: &BTreeMap<&str, Entry>) -> Result<Trust, KeyFileError> {
        let Some(e) = entries.get(PUBLIC_KEY_PATH) else {
            return Ok(Trust::Any);
        };
        if e.mode & S_IFMT != 0o100000 {
            return Err(KeyFileError::NotAFile(e.mode));
        }
        let text =
            core::str::from_utf8(e.data).map_err(|_| KeyFileError::Format("not text".into()))?;
        PublicKey::from_text(text)
            .map(Trust::SignedBy)
            .map_err(KeyFileError::Format)
    }

    /// Checks `rec` of a store with `catalog` before anything of it is read; the reason is
    /// resume's.
    pub fn check(&self, catalog: &Catalog, rec: &ImageRec) -> Result<(), String> {
        let Trust::SignedBy(key) = self else {
            return Ok(());
        };
        let digest = storelayout::signed_digest(catalog, rec).map_err(|e| match e {
            DigestError::Damaged(d) => alloc::format!("store is damaged: {d}"),
            other => other.to_string(),
        })?;
        key.verify(&digest, &rec.signature)
            .map_err(|e| e.to_string())
    }

    /// What the console says of the rule.
    pub fn describe(&self) -> String {
        match self {
            Trust::Any => "no public key: images need no signature".into(),
            Trust::SignedBy(k) => alloc::format!("images must be signed by key {}", k.id()),
        }
    }
}
