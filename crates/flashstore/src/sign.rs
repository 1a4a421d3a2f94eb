//! What a signature covers, and setting one. The store stays out of cryptography: it hands
//! out a 32-byte digest that pins down everything a restore reads of an image (its name, its
//! page list with the caller's description, and the checksum, size and encoding of every
//! chunk it references), and stores whatever signature bytes the caller computed over it.
//! A signed image whose page list or any referenced chunk changes no longer matches its
//! digest; the chunk and page-list checksums tie the bytes on the medium to the digest, which
//! is why only stores whose chunks carry BLAKE3 ([`ChunkCheck::Blake3`]) can sign.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::reader::{read_chunk, read_stored};
use crate::store::Store;
use std::collections::{BTreeSet, HashMap};
use storelayout::Damage;
use storelayout::{ChunkCheck, ChunkRec, ImageRec};

/// Domain separation: a digest of this store format's images and nothing else.
const CONTEXT: &str = "snapboot flashstore 2026-11 image signature v1";

impl<M: Medium> Store<M> {
    /// The digest a signature of `rec` covers. Fails when `rec` refers to a chunk the
    /// catalog does not have.
    pub fn signed_digest(&self, rec: &ImageRec) -> Result<[u8; 32], StoreError> {
        if self.catalog.check != ChunkCheck::Blake3 {
            return Err(StoreError::NotSignable(self.catalog.check.name()));
        }
        let chunks: HashMap<u64, &ChunkRec> =
            self.catalog.chunks.iter().map(|c| (c.id, c)).collect();
        let mut h = blake3::Hasher::new_derive_key(CONTEXT);
        h.update(&(rec.name.len() as u64).to_le_bytes());
        h.update(rec.name.as_bytes());
        h.update(&rec.meta_hash);
        match rec.raw {
            None => h.update(&[0]),
            Some(e) => h
                .update(&[1])
                .update(&e.cluster.to_le_bytes())
                .update(&e.len.to_le_bytes()),
        };
        h.update(&(rec.chunks.len() as u64).to_le_bytes());
        for id in &rec.chunks {
            let c = chunks.get(id).ok_or_else(|| {
                StoreError::from(Damage::MissingChunk {
                    image: rec.name.clone(),
                    chunk: *id,
                })
            })?;
            h.update(&c.id.to_le_bytes());
            h.update(&c.hash);
            h.update(&c.stored_len.to_le_bytes());
            h.update(&c.pages.to_le_bytes());
            h.update(&[u8::from(c.lz4)]);
            if c.sealed {
                // Only sealed chunks add a byte: digests of images in the clear are
                // unchanged from the first version.
                h.update(b"sealed");
            }
        }
        if let Some(k) = rec.sealed {
            h.update(b"sealed with").update(&k.0);
        }
        Ok(*h.finalize().as_bytes())
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
