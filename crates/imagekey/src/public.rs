//! Checking a signature: the public key's text form and Ed25519 verification (strict), with
//! the reasons resume prints. Without std, so the freestanding restorer checks images with
//! the same code as resume.

use alloc::format;
use alloc::string::String;
use ed25519_dalek::{Signature, VerifyingKey};

/// First word of a secret key file.
pub(crate) const SECRET_TAG: &str = "snapboot-image-secret-key";
/// First word of a public key file.
pub(crate) const PUBLIC_TAG: &str = "snapboot-image-public-key";
/// The signature scheme, second word of both.
pub(crate) const SCHEME: &str = "ed25519";

/// Why a signature does not make an image trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The image carries no signature.
    #[error("the image is not signed (a public key is configured: only signed images restore)")]
    Unsigned,
    /// The signature does not match the image and this key.
    #[error("the image's signature does not verify with public key {key}: it was altered after signing, or signed by another key")]
    BadSignature {
        /// The key's short name ([`PublicKey::id`]).
        key: String,
    },
}

/// A key that checks signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(pub(crate) VerifyingKey);

/// Lower-case hex of `b`.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 32 bytes from 64 hex digits.
pub(crate) fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, i) in out.iter_mut().zip((0..64).step_by(2)) {
        *o = u8::from_str_radix(&s[i..i + 2], 16).ok()?;
    }
    Some(out)
}

/// The 32 key bytes of a key file's text, one line `TAG ed25519 HEX`; else why not.
pub(crate) fn parse_key_line(text: &str, tag: &str) -> Result<[u8; 32], String> {
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(t), Some(s), Some(h), None) if t == tag && s == SCHEME => {
            unhex32(h).ok_or_else(|| "the key is not 64 hex digits".into())
        }
        (Some(t), ..) if t == SECRET_TAG || t == PUBLIC_TAG => {
            Err(format!("it is a {t}, not a {tag}"))
        }
        _ => Err(format!(
            "expected one line `{tag} {SCHEME} <64 hex digits>`"
        )),
    }
}

impl PublicKey {
    /// The key a public key file's text holds; else why it holds none.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let bytes = parse_key_line(text, PUBLIC_TAG)?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|e| format!("not a valid Ed25519 point: {e}"))
    }

    /// A short name for messages: the first 16 hex digits of the key.
    pub fn id(&self) -> String {
        hex(&self.0.as_bytes()[..8])
    }

    /// Checks `signature` (empty: none) of `digest`.
    pub fn verify(&self, digest: &[u8; 32], signature: &[u8]) -> Result<(), SignatureError> {
        if signature.is_empty() {
            return Err(SignatureError::Unsigned);
        }
        let bad = || SignatureError::BadSignature { key: self.id() };
        let sig = Signature::from_slice(signature).map_err(|_| bad())?;
        self.0.verify_strict(digest, &sig).map_err(|_| bad())
    }
}
