//! On-medium structures: geometry, the two superblocks, the catalog, an image's page list and
//! the dedupe table. Everything but the superblocks is written once into idle clusters and
//! never overwritten while committed; see docs/store.md for the picture.

use crate::error::{Damage, StoreError, SuperblockError};
use crate::keyid::KeyId;
use serde::{Deserialize, Serialize};

/// Bytes per block; every structure starts on a block.
pub const BLOCK: u64 = 4096;
/// Bytes per page of the kernel's stream.
pub const PAGE: usize = 4096;
/// A page.
pub type Page = [u8; PAGE];
/// Superblock magic.
pub const MAGIC: &[u8; 8] = b"SBFLASH\0";
/// Superblock format version every commit writes (2: with a label; 3: the same block, and
/// the catalog it names is of format 3, with sealed images and key slots).
pub const VERSION: u32 = 3;
/// The oldest superblock format version this build reads (1: without a label).
pub const OLDEST_VERSION: u32 = 1;
/// What the two-slot store of older snapboot releases had at the start of each header slot
/// (blocks 0 and 1): recognised only to refuse it with a way forward.
pub const LEGACY_MAGIC: &[u8; 8] = b"SNAPBOOT";
/// Default cluster size in blocks (256 KiB).
pub const DEFAULT_CLUSTER_BLOCKS: u32 = 64;
/// Default pages per chunk.
pub const DEFAULT_CHUNK_PAGES: u16 = 32;

/// Bytes of a version-1 superblock covered by its checksum, which follows them.
const SB_HASHED_V1: usize = 0x50;
/// Bytes of a version-2 superblock covered by its checksum: the version-1 fields, the label
/// (0x50..0x70, zero-padded) and 16 reserved zero bytes.
const SB_HASHED: usize = 0x80;
/// Where the label is in a version-2 superblock.
const SB_LABEL: std::ops::Range<usize> = 0x50..0x70;

/// Most bytes of a store label.
pub const LABEL_BYTES: usize = SB_LABEL.end - SB_LABEL.start;

/// The store's own name (`snapboot store init --label`, `snapboot.store=LABEL=`): up to
/// [`LABEL_BYTES`] bytes of UTF-8 without whitespace, control characters or `NUL`; empty
/// when the store has none (every version-1 store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Label {
    bytes: [u8; LABEL_BYTES],
    len: u8,
}

impl Label {
    /// A label, if `s` can be one.
    pub fn new(s: &str) -> Result<Self, StoreError> {
        let ok = s.len() <= LABEL_BYTES && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok {
            return Err(StoreError::BadLabel(s.into()));
        }
        let mut bytes = [0u8; LABEL_BYTES];
        bytes[..s.len()].copy_from_slice(s.as_bytes());
        Ok(Label {
            bytes,
            len: s.len() as u8,
        })
    }

    /// The label's text (empty: none).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// Reads the zero-padded label field of a superblock.
    fn decode(field: &[u8]) -> Result<Self, SuperblockError> {
        let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        let text = std::str::from_utf8(&field[..end]).map_err(|_| SuperblockError::Label)?;
        if field[end..].iter().any(|&b| b != 0) {
            return Err(SuperblockError::Label);
        }
        Label::new(text).map_err(|_| SuperblockError::Label)
    }
}

/// One of the two superblocks (blocks 0 and 1 of cluster 0): the only structure rewritten in
/// place. The valid one with the highest generation is the store's committed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    /// Blocks per cluster.
    pub cluster_blocks: u32,
    /// Clusters on the medium, cluster 0 (the superblocks) included.
    pub clusters: u64,
    /// Commit counter; the newer superblock wins.
    pub generation: u64,
    /// Where the catalog is.
    pub catalog: Extent,
    /// BLAKE3 of the catalog's bytes.
    pub catalog_hash: [u8; 32],
    /// The store's label (empty in a version-1 superblock).
    pub label: Label,
    /// The format version it was read as ([`VERSION`] for one this build made): it says
    /// how the catalog it names is encoded (before 3: `crate::legacy`).
    pub version: u32,
}

impl Superblock {
    /// Bytes per cluster.
    pub fn cluster_bytes(&self) -> u64 {
        u64::from(self.cluster_blocks) * BLOCK
    }

    /// The superblock's block ([`VERSION`]): fields, then the BLAKE3 of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.cluster_blocks.to_le_bytes());
        b[16..24].copy_from_slice(&self.clusters.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        b[32..40].copy_from_slice(&self.catalog.cluster.to_le_bytes());
        b[40..48].copy_from_slice(&self.catalog.len.to_le_bytes());
        b[48..80].copy_from_slice(&self.catalog_hash);
        b[SB_LABEL][..usize::from(self.label.len)].copy_from_slice(self.label.as_str().as_bytes());
        let h = blake3::hash(&b[..SB_HASHED]);
        b[SB_HASHED..SB_HASHED + 32].copy_from_slice(h.as_bytes());
        b
    }

    /// The block as an older snapboot wrote it: version 1 (no label, its checksum at 0x50)
    /// or 2 (this layout, naming a catalog of format 2), for tests that read old stores.
    #[cfg(test)]
    pub(crate) fn encode_old(&self, version: u32) -> Vec<u8> {
        let mut b = self.encode();
        b[8..12].copy_from_slice(&version.to_le_bytes());
        let hashed = if version == 1 {
            b[SB_HASHED_V1..].fill(0);
            SB_HASHED_V1
        } else {
            SB_HASHED
        };
        let h = blake3::hash(&b[..hashed]);
        b[hashed..hashed + 32].copy_from_slice(h.as_bytes());
        b
    }

    /// Parses and checks a superblock block of version 1 or 2; the error says why it is not
    /// valid.
    pub fn decode(b: &[u8]) -> Result<Self, SuperblockError> {
        if b.len() < SB_HASHED + 32 {
            return Err(SuperblockError::Short { len: b.len() });
        }
        if &b[0..8] == LEGACY_MAGIC {
            return Err(SuperblockError::Legacy);
        }
        if &b[0..8] != MAGIC {
            return Err(SuperblockError::NoMagic);
        }
        let u32_at = |a: usize| u32::from_le_bytes(b[a..a + 4].try_into().unwrap_or_default());
        let u64_at = |a: usize| u64::from_le_bytes(b[a..a + 8].try_into().unwrap_or_default());
        let version = u32_at(8);
        let hashed = match version {
            1 => SB_HASHED_V1,
            2 | VERSION => SB_HASHED,
            _ => {
                return Err(SuperblockError::Version {
                    found: version,
                    oldest: OLDEST_VERSION,
                    newest: VERSION,
                })
            }
        };
        if blake3::hash(&b[..hashed]).as_bytes() != &b[hashed..hashed + 32] {
            return Err(SuperblockError::Checksum);
        }
        let label = match version {
            1 => Label::default(),
            _ => Label::decode(&b[SB_LABEL])?,
        };
        let mut catalog_hash = [0u8; 32];
        catalog_hash.copy_from_slice(&b[48..80]);
        let sb = Superblock {
            cluster_blocks: u32_at(12),
            clusters: u64_at(16),
            generation: u64_at(24),
            catalog: Extent {
                cluster: u64_at(32),
                len: u64_at(40),
            },
            catalog_hash,
            label,
            version,
        };
        if sb.cluster_blocks < 2 || sb.clusters < 2 {
            return Err(SuperblockError::Geometry {
                cluster_blocks: sb.cluster_blocks,
                clusters: sb.clusters,
            });
        }
        Ok(sb)
    }
}

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
    pub fn clusters(&self, cluster_bytes: u64) -> std::ops::Range<u64> {
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
    /// Sealed under a device key (`crate::seal`): its stored bytes are nonce, ciphertext
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
    /// A signature over [`crate::Store::signed_digest`] (empty: unsigned). The store does
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

/// Where a page of an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PageRef {
    /// All zero.
    Zero,
    /// Slot `slot` of chunk `chunk`.
    At { chunk: u64, slot: u16 },
}

/// An image's page list and the caller's own description of it (identity, binding, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageMeta {
    /// Its name (checked against the catalog's).
    pub name: String,
    /// Opaque to the store.
    pub user: Vec<u8>,
    /// Every page, in stream order.
    pub pages: Vec<PageRef>,
}

/// Page hashes of live chunks: what a new image can reference instead of storing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DedupeTable {
    /// (chunk id, the 128-bit BLAKE3 of each of its pages), sorted by id.
    pub chunks: Vec<(u64, Vec<[u8; 16]>)>,
}

/// The dedupe key of a page: its BLAKE3, truncated to 128 bits.
pub fn page_key(p: &Page) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(&blake3::hash(p).as_bytes()[..16]);
    k
}

pub(crate) fn encode<T: Serialize>(v: &T, what: &str) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(v).map_err(|reason| {
        Damage::Encode {
            what: what.into(),
            reason,
        }
        .into()
    })
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(b: &[u8], what: &str) -> Result<T, StoreError> {
    postcard::from_bytes(b).map_err(|reason| {
        Damage::Parse {
            what: what.into(),
            reason,
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            cluster_blocks: 64,
            clusters: 100,
            generation: 7,
            catalog: Extent {
                cluster: 5,
                len: 1234,
            },
            catalog_hash: [9; 32],
            label: Label::new("factory-α").unwrap(),
            version: VERSION,
        }
    }

    fn every_bit_flip_is_caught(b: &[u8], upto: usize) {
        for i in 0..upto {
            for bit in 0..8 {
                let mut c = b.to_vec();
                c[i] ^= 1 << bit;
                assert!(
                    Superblock::decode(&c).is_err(),
                    "flip of bit {bit} at {i:#x} accepted"
                );
            }
        }
    }

    #[test]
    fn superblock_round_trips_with_its_label_and_every_flip_is_caught() {
        let b = sb().encode();
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), VERSION);
        assert_eq!(Superblock::decode(&b).unwrap(), sb());
        assert_eq!(Superblock::decode(&b).unwrap().label.as_str(), "factory-α");
        every_bit_flip_is_caught(&b, SB_HASHED + 32);
        let unlabelled = Superblock {
            label: Label::default(),
            ..sb()
        };
        assert_eq!(
            Superblock::decode(&unlabelled.encode()).unwrap(),
            unlabelled
        );
        let full = Superblock {
            label: Label::new(&"x".repeat(LABEL_BYTES)).unwrap(),
            ..sb()
        };
        assert_eq!(Superblock::decode(&full.encode()).unwrap(), full);
    }

    #[test]
    fn a_version_1_superblock_reads_with_no_label_and_every_flip_is_caught() {
        let b = sb().encode_old(1);
        let read = Superblock::decode(&b).unwrap();
        assert_eq!(
            read,
            Superblock {
                label: Label::default(),
                version: 1,
                ..sb()
            }
        );
        let v2 = Superblock::decode(&sb().encode_old(2)).unwrap();
        assert_eq!(v2, Superblock { version: 2, ..sb() });
        assert_eq!(read.label.as_str(), "");
        every_bit_flip_is_caught(&b, SB_HASHED_V1 + 32);
    }

    #[test]
    fn other_versions_and_bad_labels_are_refused() {
        let mut b = sb().encode();
        b[8..12].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(
            Superblock::decode(&b),
            Err(SuperblockError::Version {
                found: 4,
                oldest: 1,
                newest: 3
            })
        );
        for bad in ["with space", "tab\there", &"y".repeat(LABEL_BYTES + 1)] {
            assert!(
                matches!(Label::new(bad), Err(StoreError::BadLabel(_))),
                "{bad}"
            );
        }
    }

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
