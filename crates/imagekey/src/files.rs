//! Key files: generating, reading and writing secret, public and device keys, and signing.

use crate::public::{hex, parse_key_line, unhex32, PUBLIC_TAG, SCHEME, SECRET_TAG};
use crate::{PublicKey, SignatureError};
use ed25519_dalek::{Signer, SigningKey};
use std::io::Write;
use std::path::{Path, PathBuf};

const DEVICE_TAG: &str = "snapboot-device-key";
const DEVICE_SCHEME: &str = "xchacha20poly1305";

/// What can go wrong with keys and signatures.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A key file could not be read or written.
    #[error("{what} {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A key file does not hold a key of the expected kind.
    #[error("{path} is not a snapboot {kind} key: {why}")]
    Format {
        path: PathBuf,
        kind: &'static str,
        why: String,
    },
    /// The system's random source failed.
    #[error("no randomness for a new key")]
    Random(#[source] std::io::Error),
    /// The signature does not make the image trusted.
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

/// A signing key. Its bytes are wiped when dropped (`zeroize`).
pub struct SecretKey(SigningKey);

/// Reads a key file: one line `TAG ed25519 HEX`.
fn read_key(path: &Path, tag: &str, kind: &'static str) -> Result<[u8; 32], KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        what: "reading key",
        path: path.into(),
        source,
    })?;
    let bad = |why: String| KeyError::Format {
        path: path.into(),
        kind,
        why,
    };
    parse_key_line(&text, tag).map_err(bad)
}

/// Writes `line` to a new file (never over an existing key), readable by its owner only
/// when `private`.
fn write_new(path: &Path, line: &str, private: bool) -> Result<(), KeyError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| KeyError::Io {
        what: "writing key",
        path: path.into(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .map_err(io)?;
    f.write_all(line.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

impl SecretKey {
    /// A new key from the kernel's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        let mut filled = 0;
        while filled < seed.len() {
            filled +=
                rustix::rand::getrandom(&mut seed[filled..], rustix::rand::GetRandomFlags::empty())
                    .map_err(|e| KeyError::Random(e.into()))?;
        }
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Reads a secret key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        Ok(SecretKey(SigningKey::from_bytes(&read_key(
            path, SECRET_TAG, "secret",
        )?)))
    }

    /// Writes the key to a new file, mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let line = format!("{SECRET_TAG} {SCHEME} {}\n", hex(self.0.as_bytes()));
        write_new(path, &line, true)
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The 64-byte signature of `digest`.
    pub fn sign(&self, digest: &[u8; 32]) -> Vec<u8> {
        self.0.sign(digest).to_bytes().to_vec()
    }
}

impl PublicKey {
    /// Reads a public key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            what: "reading key",
            path: path.into(),
            source,
        })?;
        PublicKey::from_text(&text).map_err(|why| KeyError::Format {
            path: path.into(),
            kind: "public",
            why,
        })
    }

    /// Writes the key to a new file.
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        write_new(
            path,
            &format!("{PUBLIC_TAG} {SCHEME} {}\n", hex(self.0.as_bytes())),
            false,
        )
    }
}

/// A device key file: the 32-byte secret images are encrypted with on a device without a
/// TPM (`snapboot.encrypt=key`), one line `snapboot-device-key xchacha20poly1305 <64 hex>`.
/// Weaker than a TPM-sealed key: whoever reads the initramfs reads the key.
pub struct DeviceSecret(zeroize::Zeroizing<[u8; 32]>);

impl std::fmt::Debug for DeviceSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceSecret(..)")
    }
}

impl DeviceSecret {
    /// A new secret from the kernel's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut b = zeroize::Zeroizing::new([0u8; 32]);
        let mut filled = 0;
        while filled < 32 {
            filled +=
                rustix::rand::getrandom(&mut b[filled..], rustix::rand::GetRandomFlags::empty())
                    .map_err(|e| KeyError::Random(e.into()))?;
        }
        Ok(DeviceSecret(b))
    }

    /// The secret whose bytes are `b`.
    pub fn from_bytes(b: zeroize::Zeroizing<[u8; 32]>) -> Self {
        DeviceSecret(b)
    }

    /// Reads a device key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = zeroize::Zeroizing::new(std::fs::read_to_string(path).map_err(|source| {
            KeyError::Io {
                what: "reading device key",
                path: path.into(),
                source,
            }
        })?);
        let bad = |why: &str| KeyError::Format {
            path: path.into(),
            kind: "device",
            why: why.into(),
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            [t, s, h] if *t == DEVICE_TAG && *s == DEVICE_SCHEME => unhex32(h)
                .map(|b| DeviceSecret(zeroize::Zeroizing::new(b)))
                .ok_or_else(|| bad("the key is not 64 hex digits")),
            _ => Err(bad(&format!(
                "expected one line `{DEVICE_TAG} {DEVICE_SCHEME} <64 hex digits>`"
            ))),
        }
    }

    /// Writes it to a new file, mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), KeyError> {
        let line = zeroize::Zeroizing::new(format!(
            "{DEVICE_TAG} {DEVICE_SCHEME} {}\n",
            hex(&self.0[..])
        ));
        write_new(path, &line, true)
    }

    /// The secret.
    pub fn bytes(&self) -> &zeroize::Zeroizing<[u8; 32]> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only_and_only_for_its_digest() {
        let k = SecretKey::generate().unwrap();
        let other = SecretKey::generate().unwrap();
        assert_ne!(k.public(), other.public());
        let d = [7u8; 32];
        let sig = k.sign(&d);
        assert_eq!(sig.len(), 64);
        k.public().verify(&d, &sig).unwrap();
        let mut d2 = d;
        d2[31] ^= 1;
        assert!(matches!(
            k.public().verify(&d2, &sig),
            Err(SignatureError::BadSignature { .. })
        ));
        assert!(matches!(
            other.public().verify(&d, &sig),
            Err(SignatureError::BadSignature { .. })
        ));
        let mut flipped = sig.clone();
        flipped[10] ^= 4;
        assert!(k.public().verify(&d, &flipped).is_err());
        assert!(matches!(
            k.public().verify(&d, &[]),
            Err(SignatureError::Unsigned)
        ));
        assert!(k.public().verify(&d, &sig[..63]).is_err());
    }

    #[test]
    fn keys_round_trip_through_files_and_wrong_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (sp, pp) = (dir.path().join("k.secret"), dir.path().join("k.pub"));
        let k = SecretKey::generate().unwrap();
        k.save(&sp).unwrap();
        k.public().save(&pp).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&sp).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // Never over an existing key.
        assert!(k.save(&sp).is_err());
        let back = SecretKey::load(&sp).unwrap();
        assert_eq!(back.public(), k.public());
        assert_eq!(PublicKey::load(&pp).unwrap(), k.public());
        let d = [1u8; 32];
        PublicKey::load(&pp)
            .unwrap()
            .verify(&d, &back.sign(&d))
            .unwrap();

        let e = PublicKey::load(&sp).unwrap_err().to_string();
        assert!(e.contains("it is a snapboot-image-secret-key"), "{e}");
        std::fs::write(
            dir.path().join("bad"),
            "snapboot-image-public-key ed25519 abc\n",
        )
        .unwrap();
        let e = PublicKey::load(&dir.path().join("bad"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not 64 hex digits"), "{e}");
        let e = PublicKey::load(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, KeyError::Io { .. }));
    }

    #[test]
    fn a_device_key_round_trips_and_other_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("device.key");
        let k = DeviceSecret::generate().unwrap();
        k.save(&p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(DeviceSecret::load(&p).unwrap().bytes()[..], k.bytes()[..]);
        assert!(k.save(&p).is_err(), "never over an existing key");
        let s = d.path().join("s");
        SecretKey::generate().unwrap().save(&s).unwrap();
        let e = DeviceSecret::load(&s).unwrap_err().to_string();
        assert!(e.contains("is not a snapboot device key"), "{e}");
        let e = DeviceSecret::load(&d.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("reading device key"), "{e}");
    }
}
