//! What an image's signature covers: a 32-byte BLAKE3 digest (keyed by a context string, so
//! it is a digest of this format's images and nothing else) over everything a restore reads
//! of the image: its name, its page list's checksum, its raw region, and the checksum, size
//! and encoding of every chunk it references. The page-list and chunk checksums tie the
//! bytes on the medium to the digest, which is why only stores whose chunks carry BLAKE3
//! ([`ChunkCheck::Blake3`]) can sign. The store (which sets signatures), resume and the
//! restorer (which check them) compute it here; the signature scheme is theirs.

use crate::catalog::{Catalog, ChunkCheck, ImageRec};
use crate::damage::Damage;
use alloc::string::ToString;

/// Domain separation: a digest of this store format's images and nothing else.
const CONTEXT: &str = "snapboot flashstore 2026-11 image signature v1";

/// Why an image has no digest to sign or check.
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    /// The store's chunk checksums are not cryptographic (the check's name).
    #[error(
        "this store checksums chunks with {0}, which a forger can match: signed images need a \
         store made with BLAKE3 chunk checksums (`snapboot store init --checksum blake3`)"
    )]
    NotSignable(&'static str),
    /// The image refers to a chunk the catalog does not have.
    #[error(transparent)]
    Damaged(#[from] Damage),
}

/// The digest a signature of `rec` (an image of `catalog`) covers.
pub fn signed_digest(catalog: &Catalog, rec: &ImageRec) -> Result<[u8; 32], DigestError> {
    if catalog.check != ChunkCheck::Blake3 {
        return Err(DigestError::NotSignable(catalog.check.name()));
    }
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
    for &id in &rec.chunks {
        let c = catalog.chunk(id).ok_or_else(|| Damage::MissingChunk {
            image: rec.name.to_string(),
            chunk: id,
        })?;
        h.update(&c.id.to_le_bytes());
        h.update(&c.hash);
        h.update(&c.stored_len.to_le_bytes());
        h.update(&c.pages.to_le_bytes());
        h.update(&[u8::from(c.lz4)]);
        if c.sealed {
            // Only sealed chunks add a byte: digests of images in the clear are unchanged
            // from the first version.
            h.update(b"sealed");
        }
    }
    if let Some(k) = rec.sealed {
        h.update(b"sealed with").update(&k.0);
    }
    Ok(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{ChunkRec, Extent, ImageStats};
    use alloc::vec;
    use alloc::vec::Vec;

    fn chunk(id: u64) -> ChunkRec {
        ChunkRec {
            id,
            cluster: 1,
            offset: 0,
            stored_len: 4096,
            pages: 1,
            lz4: false,
            hash: [id as u8; 32],
            refs: 1,
            sealed: false,
        }
    }

    fn image(chunks: Vec<u64>) -> ImageRec {
        ImageRec {
            name: "current".into(),
            generation: 1,
            pinned: false,
            created_unix: 0,
            meta: Extent {
                cluster: 2,
                len: 100,
            },
            meta_hash: [9; 32],
            chunks,
            stats: ImageStats::default(),
            signature: vec![],
            raw: None,
            sealed: None,
        }
    }

    #[test]
    fn the_digest_covers_the_chunks_and_needs_blake3_chunk_checksums() {
        let mut catalog = Catalog {
            check: ChunkCheck::Blake3,
            chunks: vec![chunk(1), chunk(2)],
            ..Catalog::default()
        };
        let rec = image(vec![1, 2]);
        let d = signed_digest(&catalog, &rec).unwrap();
        // What is not read at a restore (generation, pin, signature) is not covered.
        let mut same = rec.clone();
        same.generation = 7;
        same.pinned = true;
        same.signature = vec![1; 64];
        assert_eq!(signed_digest(&catalog, &same).unwrap(), d);
        // A chunk's checksum is.
        catalog.chunks[1].hash[0] ^= 1;
        assert_ne!(signed_digest(&catalog, &rec).unwrap(), d);
        let missing = image(vec![1, 3]);
        assert!(matches!(
            signed_digest(&catalog, &missing),
            Err(DigestError::Damaged(Damage::MissingChunk { chunk: 3, .. }))
        ));
        catalog.check = ChunkCheck::Xxh3;
        let e = signed_digest(&catalog, &rec).unwrap_err().to_string();
        assert!(
            e.starts_with("this store checksums chunks with xxh3"),
            "{e}"
        );
    }
}
