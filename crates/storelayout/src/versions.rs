//! The catalog a superblock names, read in the format of the superblock's version: today's
//! (3), or that of the stores an older snapboot wrote (superblock versions 1 and 2): the same
//! structures without sealing (no sealed chunks or images, no key slots). An older catalog is
//! read into today's [`Catalog`]; the next commit writes it in today's format.

use crate::catalog::{Catalog, ChunkCheck, ChunkRec, Extent, ImageRec, ImageStats};
use crate::codec::decode;
use crate::damage::Damage;
use crate::superblock::Superblock;
use alloc::string::String;
use alloc::vec::Vec;
use serde::Deserialize;

#[derive(Deserialize)]
struct ChunkRecV2 {
    id: u64,
    cluster: u64,
    offset: u32,
    stored_len: u32,
    pages: u16,
    lz4: bool,
    hash: [u8; 32],
    refs: u32,
}

#[derive(Deserialize)]
struct ImageRecV2 {
    name: String,
    generation: u64,
    pinned: bool,
    created_unix: u64,
    meta: Extent,
    meta_hash: [u8; 32],
    chunks: Vec<u64>,
    stats: ImageStats,
    signature: Vec<u8>,
    raw: Option<Extent>,
}

#[derive(Deserialize)]
struct CatalogV2 {
    next_chunk: u64,
    images: Vec<ImageRecV2>,
    chunks: Vec<ChunkRecV2>,
    dedupe: Option<(Extent, [u8; 32])>,
    trimmed: Vec<u64>,
    check: ChunkCheck,
}

/// The catalog `sb` names, from its stored `bytes`: checked against the superblock's BLAKE3,
/// then decoded in the format of the superblock's version.
pub fn decode_catalog(sb: &Superblock, bytes: &[u8]) -> Result<Catalog, Damage> {
    if blake3::hash(bytes).as_bytes() != &sb.catalog_hash {
        return Err(Damage::CatalogChecksum);
    }
    decode_version(bytes, sb.version)
}

/// The catalog in `bytes`, written under superblock format `version` (its checksum already
/// checked).
fn decode_version(bytes: &[u8], version: u32) -> Result<Catalog, Damage> {
    if version >= 3 {
        return decode(bytes, "catalog");
    }
    let old: CatalogV2 = decode(bytes, "catalog (format 2)")?;
    Ok(Catalog {
        next_chunk: old.next_chunk,
        images: old
            .images
            .into_iter()
            .map(|i| ImageRec {
                name: i.name,
                generation: i.generation,
                pinned: i.pinned,
                created_unix: i.created_unix,
                meta: i.meta,
                meta_hash: i.meta_hash,
                chunks: i.chunks,
                stats: i.stats,
                signature: i.signature,
                raw: i.raw,
                sealed: None,
            })
            .collect(),
        chunks: old
            .chunks
            .into_iter()
            .map(|c| ChunkRec {
                id: c.id,
                cluster: c.cluster,
                offset: c.offset,
                stored_len: c.stored_len,
                pages: c.pages,
                lz4: c.lz4,
                hash: c.hash,
                refs: c.refs,
                sealed: false,
            })
            .collect(),
        dedupe: old.dedupe,
        trimmed: old.trimmed,
        check: old.check,
        key_slots: Vec::new(),
    })
}

/// Today's catalog in format 2, as an older snapboot wrote it (for tests that read old
/// stores). Sealed images and key slots have no place in it.
#[cfg(any(test, feature = "old-writers"))]
pub fn encode_v2(c: &Catalog) -> Vec<u8> {
    /// A format-2 chunk record: id, cluster, offset, stored length, pages, LZ4, hash, refs.
    type ChunkV2 = (u64, u64, u32, u32, u16, bool, [u8; 32], u32);
    #[derive(serde::Serialize)]
    struct C<'a> {
        next_chunk: u64,
        images: Vec<I<'a>>,
        chunks: Vec<ChunkV2>,
        dedupe: Option<(Extent, [u8; 32])>,
        trimmed: &'a [u64],
        check: ChunkCheck,
    }
    #[derive(serde::Serialize)]
    struct I<'a> {
        name: &'a str,
        generation: u64,
        pinned: bool,
        created_unix: u64,
        meta: Extent,
        meta_hash: [u8; 32],
        chunks: &'a [u64],
        stats: ImageStats,
        signature: &'a [u8],
        raw: Option<Extent>,
    }
    let v2 = C {
        next_chunk: c.next_chunk,
        images: c
            .images
            .iter()
            .map(|i| I {
                name: &i.name,
                generation: i.generation,
                pinned: i.pinned,
                created_unix: i.created_unix,
                meta: i.meta,
                meta_hash: i.meta_hash,
                chunks: &i.chunks,
                stats: i.stats,
                signature: &i.signature,
                raw: i.raw,
            })
            .collect(),
        chunks: c
            .chunks
            .iter()
            .map(|x| {
                (
                    x.id,
                    x.cluster,
                    x.offset,
                    x.stored_len,
                    x.pages,
                    x.lz4,
                    x.hash,
                    x.refs,
                )
            })
            .collect(),
        dedupe: c.dedupe,
        trimmed: &c.trimmed,
        check: c.check,
    };
    postcard::to_allocvec(&v2).expect("a catalog encodes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superblock::{Label, VERSION};
    use std::string::ToString;

    fn chunk(id: u64) -> ChunkRec {
        ChunkRec {
            id,
            cluster: 2,
            offset: 0,
            stored_len: 10,
            pages: 1,
            lz4: false,
            hash: [0; 32],
            refs: 1,
            sealed: false,
        }
    }

    #[test]
    fn a_catalog_is_checked_against_its_superblock_and_finds_its_chunks() {
        let c = Catalog {
            next_chunk: 9,
            chunks: [1, 4, 8].map(chunk).to_vec(),
            ..Catalog::default()
        };
        let bytes = crate::codec::encode(&c, "catalog").unwrap();
        let sb = Superblock {
            cluster_blocks: 64,
            clusters: 10,
            generation: 1,
            catalog: Extent {
                cluster: 1,
                len: bytes.len() as u64,
            },
            catalog_hash: *blake3::hash(&bytes).as_bytes(),
            label: Label::default(),
            version: VERSION,
        };
        let back = decode_catalog(&sb, &bytes).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.chunk(4).map(|c| c.id), Some(4));
        assert_eq!(back.chunk(5), None);
        let mut bad = bytes.clone();
        bad[0] ^= 1;
        assert!(matches!(
            decode_catalog(&sb, &bad),
            Err(Damage::CatalogChecksum)
        ));
        let short = &bytes[..bytes.len() - 1];
        let sb = Superblock {
            catalog_hash: *blake3::hash(short).as_bytes(),
            ..sb
        };
        let e = decode_catalog(&sb, short).unwrap_err().to_string();
        assert!(e.starts_with("the catalog does not parse"), "{e}");
    }

    #[test]
    fn a_format_2_catalog_reads_as_today_s_without_sealing() {
        let c = Catalog {
            next_chunk: 3,
            images: std::vec![ImageRec {
                name: "a".into(),
                generation: 2,
                pinned: true,
                created_unix: 5,
                meta: Extent { cluster: 4, len: 9 },
                meta_hash: [1; 32],
                chunks: std::vec![2],
                stats: ImageStats::default(),
                signature: Vec::new(),
                raw: None,
                sealed: None,
            }],
            chunks: std::vec![ChunkRec {
                id: 2,
                cluster: 3,
                offset: 0,
                stored_len: 7,
                pages: 1,
                lz4: true,
                hash: [2; 32],
                refs: 1,
                sealed: false,
            }],
            check: ChunkCheck::Blake3,
            ..Catalog::default()
        };
        assert_eq!(decode_version(&encode_v2(&c), 2).unwrap(), c);
        assert_eq!(decode_version(&encode_v2(&c), 1).unwrap(), c);
    }
}
