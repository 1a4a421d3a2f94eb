//! What a signature covers, and setting one. The store stays out of cryptography: it hands
//! out a 32-byte digest that pins down everything a restore reads of an image (its name, its
//! page list with the caller's description, and the checksum, size and encoding of every
//! chunk it references; computed by [`storelayout::signed_digest`], which the restorer uses
//! too), and stores whatever signature bytes the caller computed over it.
//! A signed image whose page list or any referenced chunk changes no longer matches its
//! digest; the chunk and page-list checksums tie the bytes on the medium to the digest, which
//! is why only stores whose chunks carry BLAKE3 ([`ChunkCheck::Blake3`]) can sign.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::reader::{read_chunk, read_stored};
use crate::store::Store;
use std::collections::BTreeSet;
use storelayout::{DigestError, ImageRec};

impl<M: Medium> Store<M> {
    /// The digest a signature of `rec` covers ([`storelayout::signed_digest`]). Fails when
    /// the store's chunk checksums are not BLAKE3, or `rec` refers to a chunk the catalog
    /// does not have.
    pub fn signed_digest(&self, rec: &ImageRec) -> Result<[u8; 32], StoreError> {
        storelayout::signed_digest(&self.catalog, rec).map_err(|e| match e {
            DigestError::NotSignable(check) => StoreError::NotSignable(check),
            DigestError::Damaged(d) => StoreError::from(d),
        })
    }

    /// Reads the image `name` whole: its page list and every chunk it references, each
    /// checked against its checksum. Returns the stored bytes read.
    pub fn verify_image(&self, name: &str) -> Result<u64, StoreError> {
        let rec = self
            .image(name)
            .ok_or_else(|| StoreError::NoImage(name.into()))?;
        // A sealed image is opened when its key is at hand; elsewhere (a signing host) its
        // page list and chunks are checked against their checksums, which the signature
        // covers, without opening them.
        let open = self.key_for(rec).is_ok();
        if open {
            self.image_meta(rec)?;
        } else {
            self.page_list_bytes(rec)?;
        }
        let wanted: BTreeSet<u64> = rec.chunks.iter().copied().collect();
        let mut bytes = 0;
        for c in self
            .catalog
            .chunks
            .iter()
            .filter(|c| wanted.contains(&c.id))
        {
            if open || !c.sealed {
                read_chunk(self, c)?;
            } else {
                read_stored(self, c, &mut Default::default())?;
            }
            bytes += u64::from(c.stored_len);
        }
        Ok(bytes)
    }

    /// Stores `signature` (empty: none) with the image `name`, in one commit. The image is
    /// read whole first: a signature is never attached to bytes that do not check out.
    pub fn set_signature(&mut self, name: &str, signature: Vec<u8>) -> Result<(), StoreError> {
        self.verify_image(name)?;
        self.update_image(name, |rec| rec.signature = signature)
    }
}
