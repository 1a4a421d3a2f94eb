//! Geometry, the store's label and its two superblocks (blocks 0 and 1 of cluster 0, the
//! only structures rewritten in place), and which of them holds the committed state.

use crate::catalog::{ChunkRec, Extent, ImageRec};
use crate::damage::Damage;
use alloc::string::String;
use alloc::vec::Vec;

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
const SB_LABEL: core::ops::Range<usize> = 0x50..0x70;

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
    pub fn new(s: &str) -> Result<Self, BadLabel> {
        let ok = s.len() <= LABEL_BYTES && !s.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok {
            return Err(BadLabel(s.into()));
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
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    /// Reads the zero-padded label field of a superblock.
    fn decode(field: &[u8]) -> Result<Self, SuperblockError> {
        let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        let text = core::str::from_utf8(&field[..end]).map_err(|_| SuperblockError::Label)?;
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
    /// how the catalog it names is encoded (before 3: [`crate::versions`]).
    pub version: u32,
}

impl Superblock {
    /// Bytes per cluster.
    pub fn cluster_bytes(&self) -> u64 {
        u64::from(self.cluster_blocks) * BLOCK
    }

    /// Byte offset of extent `e` on the medium.
    pub fn raw_offset(&self, e: Extent) -> u64 {
        e.cluster * self.cluster_bytes()
    }

    /// The raw region image `rec` owns besides its chunks (a lazy image's swap area), as
    /// byte offset and length on the medium; `None` if it owns none.
    pub fn raw_region(&self, rec: &ImageRec) -> Option<(u64, u64)> {
        rec.raw.map(|e| (self.raw_offset(e), e.len))
    }

    /// The superblock's block ([`VERSION`]): fields, then the BLAKE3 of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; BLOCK as usize];
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
    #[cfg(any(test, feature = "old-writers"))]
    pub fn encode_old(&self, version: u32) -> Vec<u8> {
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

/// Why a superblock block is not a valid superblock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    /// Fewer bytes than a superblock.
    #[error("short block of {len} bytes")]
    Short { len: usize },
    /// Not the store's magic.
    #[error("no store magic")]
    NoMagic,
    /// The header of an older snapboot's two-slot store.
    #[error("a two-slot store of an older snapboot")]
    Legacy,
    /// Another format version.
    #[error("store format version {found} (this build reads {oldest} to {newest})")]
    Version {
        found: u32,
        oldest: u32,
        newest: u32,
    },
    /// The label field is not a label (checked after the checksum: written so by a bug).
    #[error("the label field holds no valid label")]
    Label,
    /// The superblock's checksum does not match.
    #[error("superblock checksum mismatch")]
    Checksum,
    /// A geometry no store can have.
    #[error("impossible geometry: {cluster_blocks} blocks per cluster, {clusters} clusters")]
    Geometry { cluster_blocks: u32, clusters: u64 },
}

/// A text that cannot be a store label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad store label {0:?}: at most 32 bytes of UTF-8, no spaces or control characters")]
pub struct BadLabel(pub String);

/// Why a medium holds no store that can be read: neither superblock is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoStore {
    /// Neither superblock block carries the store's magic: nothing here was made by
    /// `snapboot store init`.
    #[error("no snapboot store here (neither superblock has the store's magic); `snapboot store init` makes one, losing what the device holds")]
    NotAStore,
    /// The two-slot store of an older snapboot.
    #[error("a two-slot store of an older snapboot, which this one no longer reads: make a new store with `snapboot store init` and capture again")]
    Legacy,
    /// Both superblocks are damaged.
    #[error("no valid superblock (first: {first}; second: {second})")]
    Damaged {
        /// Why block 0 is not a superblock.
        first: SuperblockError,
        /// Why block 1 is not a superblock.
        second: SuperblockError,
    },
}

/// The committed superblock of a store whose blocks 0 and 1 are `first` and `second`: the
/// valid one with the highest generation (the first on a tie), or why there is none.
pub fn committed_superblock(first: &[u8], second: &[u8]) -> Result<Superblock, NoStore> {
    match (Superblock::decode(first), Superblock::decode(second)) {
        (Ok(a), Ok(b)) if b.generation > a.generation => Ok(b),
        (Ok(a), _) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(first), Err(second)) => Err(match (first, second) {
            (SuperblockError::NoMagic, SuperblockError::NoMagic) => NoStore::NotAStore,
            (SuperblockError::Legacy, _) | (_, SuperblockError::Legacy) => NoStore::Legacy,
            (first, second) => NoStore::Damaged { first, second },
        }),
    }
}

impl Superblock {
    /// Bytes of the store it describes (clusters times cluster bytes, saturating).
    pub fn store_bytes(&self) -> u64 {
        self.clusters.saturating_mul(self.cluster_bytes())
    }

    /// Where the `what` stored in extent `e` is on the medium: its byte offset and length,
    /// checked to lie inside the store (after cluster 0).
    pub fn extent_place(&self, e: Extent, what: &str) -> Result<(u64, usize), Damage> {
        let end = e.clusters(self.cluster_bytes()).end;
        if e.cluster == 0 || end > self.clusters {
            return Err(Damage::ExtentOutside {
                what: what.into(),
                start: e.cluster,
                end,
                clusters: self.clusters,
            });
        }
        let len = usize::try_from(e.len).map_err(|_| Damage::TooLarge { what: what.into() })?;
        Ok((e.cluster * self.cluster_bytes(), len))
    }

    /// The byte offset of chunk `c`'s stored bytes on the medium, checked to lie inside
    /// its cluster, itself inside the store.
    pub fn chunk_place(&self, c: &ChunkRec) -> Result<u64, Damage> {
        let cb = self.cluster_bytes();
        if c.cluster == 0
            || c.cluster >= self.clusters
            || u64::from(c.offset) + u64::from(c.stored_len) > cb
        {
            return Err(Damage::ChunkOutside {
                chunk: c.id,
                cluster: c.cluster,
            });
        }
        Ok(c.cluster * cb + u64::from(c.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;
    use std::vec::Vec;

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
            assert!(matches!(Label::new(bad), Err(BadLabel(_))), "{bad}");
        }
    }

    #[test]
    fn the_newest_valid_superblock_is_committed_and_refusals_name_both_blocks() {
        let old = Superblock {
            generation: 6,
            ..sb()
        }
        .encode();
        let new = sb().encode();
        assert_eq!(committed_superblock(&old, &new), Ok(sb()));
        assert_eq!(committed_superblock(&new, &old), Ok(sb()));
        let mut torn = new.clone();
        torn[100] ^= 1;
        assert_eq!(committed_superblock(&old, &torn).unwrap().generation, 6);
        let zero = [0u8; BLOCK as usize];
        assert_eq!(committed_superblock(&zero, &zero), Err(NoStore::NotAStore));
        let mut legacy = zero;
        legacy[..8].copy_from_slice(LEGACY_MAGIC);
        assert_eq!(committed_superblock(&zero, &legacy), Err(NoStore::Legacy));
        assert_eq!(
            committed_superblock(&torn, &zero).unwrap_err().to_string(),
            "no valid superblock (first: superblock checksum mismatch; second: no store magic)"
        );
    }

    #[test]
    fn extents_and_chunks_are_placed_inside_the_store_only() {
        let s = sb();
        let cb = s.cluster_bytes();
        assert_eq!(s.store_bytes(), 100 * cb);
        let e = Extent {
            cluster: 5,
            len: 1234,
        };
        assert_eq!(s.extent_place(e, "catalog").unwrap(), (5 * cb, 1234));
        for bad in [
            Extent { cluster: 0, len: 1 },
            Extent {
                cluster: 99,
                len: cb + 1,
            },
        ] {
            let err = s.extent_place(bad, "catalog").unwrap_err().to_string();
            assert!(
                err.starts_with("the catalog lies outside the store"),
                "{err}"
            );
        }
        let c = ChunkRec {
            id: 3,
            cluster: 7,
            offset: 4096,
            stored_len: 100,
            pages: 1,
            lz4: false,
            hash: [0; 32],
            refs: 1,
            sealed: false,
        };
        assert_eq!(s.chunk_place(&c).unwrap(), 7 * cb + 4096);
        for bad in [
            ChunkRec { cluster: 100, ..c },
            ChunkRec {
                offset: cb as u32 - 99,
                ..c
            },
        ] {
            assert!(matches!(
                s.chunk_place(&bad),
                Err(Damage::ChunkOutside { chunk: 3, .. })
            ));
        }
        let v: Vec<u8> = s.encode();
        assert_eq!(v.len(), BLOCK as usize);
    }
}
