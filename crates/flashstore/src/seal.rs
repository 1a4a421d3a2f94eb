//! Sealed (encrypted and authenticated) images. A store unlocked with a [`DeviceKey`] seals
//! everything an image it writes holds: every chunk and the page list (which carries the
//! caller's description) are XChaCha20-Poly1305 ciphertexts, and the dedupe table names the
//! image's pages by a keyed hash, so the store says nothing of their contents to someone
//! without the key. A sealed chunk or page list that opens under the key was written by a
//! holder of the key: the tag authenticates an image the device captured itself.
//!
//! ```text
//! sealed chunk / page list on the medium
//! +-------------------+--------------------------------------+-----------------+
//! | nonce (24, random)| ciphertext (LZ4 block or raw pages,   | Poly1305 tag    |
//! |                   |  or the postcard page list)           | (16)            |
//! +-------------------+--------------------------------------+-----------------+
//! associated data (not stored, rebuilt from the catalog):
//!   chunk:     "chunk" | id (u64 LE) | pages (u16 LE) | lz4 (u8)
//!   page list: "page list" | image name
//! ```
//!
//! The device key never reaches the medium. Three keys are derived from it (BLAKE3 in
//! key-derivation mode, each with its own context): the AEAD key, the dedupe hash key and
//! the key's public id (16 bytes, kept in the catalog with every sealed image and every key
//! slot, so a store can say which key an image needs before anything is decrypted). Nonces
//! are random per chunk: a capture that crashed and is retried reuses chunk ids, never a
//! nonce. What is not hidden: the catalog (image names, sizes, chunk count and placement),
//! and a lazy image's swap region unless the caller encrypts it (docs/store.md, "Encrypted
//! images").

use crate::error::StoreError;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use storelayout::Damage;
use storelayout::KeyId;
use storelayout::{ChunkRec, Page};
use zeroize::Zeroizing;

/// Nonce bytes in front of every sealed structure.
pub const NONCE_BYTES: usize = 24;
/// Tag bytes after it.
pub const TAG_BYTES: usize = 16;
/// What sealing adds to a structure's length.
pub const SEAL_OVERHEAD: usize = NONCE_BYTES + TAG_BYTES;

const AEAD_CONTEXT: &str = "snapboot flashstore 2026-11 sealed image aead key";
const DEDUPE_CONTEXT: &str = "snapboot flashstore 2026-11 sealed image dedupe key";
const ID_CONTEXT: &str = "snapboot flashstore 2026-11 device key id";

/// The 32-byte key a device seals its images with. Wiped when dropped; never written to
/// the medium.
pub struct DeviceKey {
    aead: XChaCha20Poly1305,
    dedupe: Zeroizing<[u8; 32]>,
    id: KeyId,
}

impl std::fmt::Debug for DeviceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceKey({})", self.id)
    }
}

impl DeviceKey {
    /// The key whose secret is `secret` (wiped by the caller's `Zeroizing`).
    pub fn new(secret: &Zeroizing<[u8; 32]>) -> Self {
        let aead_key = Zeroizing::new(blake3::derive_key(AEAD_CONTEXT, &secret[..]));
        let mut id = [0u8; 16];
        id.copy_from_slice(&blake3::derive_key(ID_CONTEXT, &secret[..])[..16]);
        DeviceKey {
            aead: XChaCha20Poly1305::new((&*aead_key).into()),
            dedupe: Zeroizing::new(blake3::derive_key(DEDUPE_CONTEXT, &secret[..])),
            id: KeyId(id),
        }
    }

    /// Its public id.
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// The dedupe key of a page under this key: a keyed BLAKE3, truncated to 128 bits.
    pub fn page_key(&self, p: &Page) -> [u8; 16] {
        let mut k = [0u8; 16];
        k.copy_from_slice(&blake3::keyed_hash(&self.dedupe, p).as_bytes()[..16]);
        k
    }

    fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut nonce = [0u8; NONCE_BYTES];
        fill_random(&mut nonce)?;
        let ct = self
            .aead
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plain, aad })
            .map_err(|_| StoreError::Geometry("a structure too large to seal".into()))?;
        let mut out = Vec::with_capacity(NONCE_BYTES + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let (nonce, ct) = sealed.split_at(NONCE_BYTES);
        self.aead
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad })
            .ok()
    }

    /// Seals the stored bytes of chunk `id` (LZ4 block or raw pages).
    pub(crate) fn seal_chunk(
        &self,
        id: u64,
        pages: u16,
        lz4: bool,
        plain: &[u8],
    ) -> Result<Vec<u8>, StoreError> {
        self.seal(&chunk_aad(id, pages, lz4), plain)
    }

    /// Opens a sealed chunk: its LZ4 block or raw pages, or why not.
    pub(crate) fn open_chunk(&self, c: &ChunkRec, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.open(&chunk_aad(c.id, c.pages, c.lz4), sealed)
            .ok_or_else(|| {
                Damage::ChunkSeal {
                    chunk: c.id,
                    cluster: c.cluster,
                }
                .into()
            })
    }

    /// Seals image `name`'s page list.
    pub(crate) fn seal_page_list(&self, name: &str, plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.seal(&page_list_aad(name), plain)
    }

    /// Opens image `name`'s sealed page list.
    pub(crate) fn open_page_list(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.open(&page_list_aad(name), sealed).ok_or_else(|| {
            Damage::PageListSeal {
                image: name.into(),
                key: self.id,
            }
            .into()
        })
    }
}

fn chunk_aad(id: u64, pages: u16, lz4: bool) -> Vec<u8> {
    let mut a = b"chunk".to_vec();
    a.extend_from_slice(&id.to_le_bytes());
    a.extend_from_slice(&pages.to_le_bytes());
    a.push(u8::from(lz4));
    a
}

fn page_list_aad(name: &str) -> Vec<u8> {
    let mut a = b"page list".to_vec();
    a.extend_from_slice(name.as_bytes());
    a
}

/// Fills `b` from the kernel's random source.
pub(crate) fn fill_random(b: &mut [u8]) -> Result<(), StoreError> {
    let mut filled = 0;
    while filled < b.len() {
        filled += rustix::rand::getrandom(&mut b[filled..], rustix::rand::GetRandomFlags::empty())
            .map_err(|e| StoreError::Io {
                context: "reading random bytes for a nonce".into(),
                source: e.into(),
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> DeviceKey {
        DeviceKey::new(&Zeroizing::new([b; 32]))
    }

    fn rec(id: u64, pages: u16, lz4: bool) -> ChunkRec {
        ChunkRec {
            id,
            cluster: 3,
            offset: 0,
            stored_len: 0,
            pages,
            lz4,
            hash: [0; 32],
            refs: 1,
            sealed: true,
        }
    }

    #[test]
    fn a_chunk_opens_under_its_key_and_id_only() {
        let k = key(1);
        let plain = vec![7u8; 5000];
        let s = k.seal_chunk(9, 2, true, &plain).unwrap();
        assert_eq!(s.len(), plain.len() + SEAL_OVERHEAD);
        assert!(
            !s.windows(64).any(|w| w == &plain[..64]),
            "plaintext visible"
        );
        assert_eq!(k.open_chunk(&rec(9, 2, true), &s).unwrap(), plain);
        // Another chunk's id, page count or encoding, or another key: refused.
        for r in [rec(10, 2, true), rec(9, 3, true), rec(9, 2, false)] {
            assert!(k.open_chunk(&r, &s).is_err());
        }
        assert!(key(2).open_chunk(&rec(9, 2, true), &s).is_err());
        // Every flipped bit is caught, nonce and tag included.
        for i in (0..s.len()).step_by(97).chain([0, 23, 24, s.len() - 1]) {
            let mut c = s.clone();
            c[i] ^= 0x10;
            let e = k.open_chunk(&rec(9, 2, true), &c).unwrap_err();
            assert!(e.to_string().contains("chunk 9"), "{e}");
        }
        assert!(k
            .open_chunk(&rec(9, 2, true), &s[..SEAL_OVERHEAD - 1])
            .is_err());
    }

    #[test]
    fn nonces_are_fresh_and_page_lists_are_bound_to_their_name() {
        let k = key(3);
        let a = k.seal_page_list("current", b"list").unwrap();
        let b = k.seal_page_list("current", b"list").unwrap();
        assert_ne!(a[..NONCE_BYTES], b[..NONCE_BYTES]);
        assert_eq!(k.open_page_list("current", &a).unwrap(), b"list");
        let e = k.open_page_list("factory", &a).unwrap_err().to_string();
        assert!(
            e.contains("factory") && e.contains(&k.id().to_string()),
            "{e}"
        );
    }

    #[test]
    fn keys_have_distinct_ids_and_page_keys() {
        let (a, b) = (key(4), key(5));
        assert_ne!(a.id(), b.id());
        assert_eq!(a.id(), key(4).id());
        assert_eq!(a.id().to_string().len(), 32);
        let p = [9u8; storelayout::PAGE];
        assert_ne!(a.page_key(&p), b.page_key(&p));
        assert_ne!(a.page_key(&p), storelayout::page_key(&p));
        assert_eq!(format!("{a:?}"), format!("DeviceKey({})", a.id()));
    }
}
