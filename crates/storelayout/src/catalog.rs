//! The catalog: the map of everything committed (named images, live chunks, key slots),
//! written once per commit into idle clusters and named by the superblock with its BLAKE3.

use crate::keyid::KeyId;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// A device key wrapped by something only the device can undo (a TPM-sealed blob), kept in
/// the catalog so the store carries its own key, unreadable elsewhere. Opaque to the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySlot {
    /// The key it wraps.
    pub id: KeyId,
    /// How it is wrapped (`tpm2`, ...): the caller's vocabulary.
    pub kind: String,
    /// The wrapped key.
    pub wrapped: Vec<u8>,
}

/// Contiguous clusters from `cluster`, holding `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Extent {
    /// First cluster.
    pub cluster: u64,
    /// Bytes stored from the start of that cluster.
    pub len: u64,
}

impl Extent {
    /// Clusters it spans.
    pub fn clusters(&self, cluster_bytes: u64) -> core::ops::Range<u64> {
        self.cluster..self.cluster + self.len.div_ceil(cluster_bytes).max(1)
    }
}

/// A stored chunk: up to `chunk_pages` pages, compressed together, inside one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRec {
    /// Never reused within a store.
    pub id: u64,
    /// Cluster holding it.
    pub cluster: u64,
    /// Byte offset inside the cluster.
    pub offset: u32,
    /// Bytes stored.
    pub stored_len: u32,
    /// Pages it holds.
    pub pages: u16,
    /// LZ4 block (else stored raw).
    pub lz4: bool,
    /// BLAKE3 of the stored bytes, checked before anything is decompressed.
    pub hash: [u8; 32],
    /// Images referencing it (the usage count).
    pub refs: u32,
    /// Sealed under a device key (flashstore's `seal`): its stored bytes are nonce, ciphertext
    /// and tag, and `hash` is the checksum of those.
    pub sealed: bool,
}

/// What an image cost and saved: its pages after zero-page and in-image dedupe
/// (`unique_pages`), what it had to store after dedupe against the other images
/// (`new_pages`), and the compressed bytes it wrote (`stored_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ImageStats {
    /// Pages of the stream.
    pub pages: u64,
    /// All-zero pages (not stored).
    pub zero_pages: u64,
    /// Pages left after in-image dedupe (distinct non-zero pages of this image).
    pub unique_pages: u64,
    /// Pages this image had to store after storage dedupe against the other images.
    pub new_pages: u64,
    /// Pages it references in chunks other images wrote.
    pub shared_pages: u64,
    /// Bytes of the chunks this image wrote (compressed).
    pub stored_bytes: u64,
}

/// A named image in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRec {
    /// Its name (`current`, `factory`, ...).
    pub name: String,
    /// Store generation that committed it (newer images have higher ones).
    pub generation: u64,
    /// A pinned image is never replaced, removed or collected.
    pub pinned: bool,
    /// Seconds since the epoch at commit.
    pub created_unix: u64,
    /// Its page list.
    pub meta: Extent,
    /// BLAKE3 of the page list's bytes.
    pub meta_hash: [u8; 32],
    /// Chunks it references (sorted), for usage counts without reading page lists.
    pub chunks: Vec<u64>,
    /// What it cost.
    pub stats: ImageStats,
    /// A signature over flashstore's `Store::signed_digest` (empty: unsigned). The store does
    /// not know the scheme; snapboot uses Ed25519.
    pub signature: Vec<u8>,
    /// A raw region the image owns besides its chunks (a lazy image's swap area): written
    /// by the caller before the commit, never moved, freed with the image.
    pub raw: Option<Extent>,
    /// The device key its page list and every chunk it references are sealed with (none:
    /// stored in the clear).
    pub sealed: Option<KeyId>,
}

/// The map of everything committed, rewritten (elsewhere) at every commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Catalog {
    /// Next chunk id.
    pub next_chunk: u64,
    /// Named images, in commit order.
    pub images: Vec<ImageRec>,
    /// Every live chunk, sorted by id.
    pub chunks: Vec<ChunkRec>,
    /// Where the dedupe table is, and its BLAKE3 (read at capture only).
    pub dedupe: Option<(Extent, [u8; 32])>,
    /// Idle clusters already discarded (sorted): gc does not discard them again.
    pub trimmed: Vec<u64>,
    /// How every chunk is checksummed.
    pub check: ChunkCheck,
    /// Device keys wrapped for this device (a TPM-sealed key), opaque to the store.
    pub key_slots: Vec<KeySlot>,
}

/// How chunks are checksummed (chosen when the store is formatted, the same for every chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ChunkCheck {
    /// XXH3-128: catches corruption at memory speed, but is no defence against a deliberate
    /// change; stores with it cannot sign images.
    #[default]
    Xxh3,
    /// BLAKE3: cryptographic, so a signature over the chunk checksums covers the data.
    /// Several times slower to check than XXH3 (much more so in an emulator).
    Blake3,
}

impl ChunkCheck {
    /// The checksum of `b` (XXH3-128 fills the first 16 bytes).
    pub fn digest(self, b: &[u8]) -> [u8; 32] {
        match self {
            ChunkCheck::Blake3 => *blake3::hash(b).as_bytes(),
            ChunkCheck::Xxh3 => {
                let mut out = [0u8; 32];
                out[..16].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(b).to_le_bytes());
                out
            }
        }
    }

    /// `xxh3` or `blake3`.
    pub fn name(self) -> &'static str {
        match self {
            ChunkCheck::Xxh3 => "xxh3",
            ChunkCheck::Blake3 => "blake3",
        }
    }
}

impl Catalog {
    /// The live chunk `id` (the chunks are sorted by id).
    pub fn chunk(&self, id: u64) -> Option<&ChunkRec> {
        self.chunks
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &self.chunks[i])
    }

    /// The most recently committed image.
    pub fn newest(&self) -> Option<&ImageRec> {
        self.images.iter().max_by_key(|i| i.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_span_whole_clusters() {
        let e = Extent { cluster: 3, len: 1 };
        assert_eq!(e.clusters(4096), 3..4);
        let e = Extent {
            cluster: 3,
            len: 8193,
        };
        assert_eq!(e.clusters(4096), 3..6);
        let e = Extent { cluster: 3, len: 0 };
        assert_eq!(e.clusters(4096), 3..4);
    }
}
