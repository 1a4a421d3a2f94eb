//! Catalogs of stores an older snapboot wrote (superblock versions 1 and 2): the same
//! structures without sealing (no sealed chunks or images, no key slots). Read into today's
//! [`Catalog`]; the next commit writes it in today's format (superblock version 3).

use crate::error::StoreError;
use crate::layout::{decode, Catalog, ChunkCheck, ChunkRec, Extent, ImageRec, ImageStats};
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

/// The catalog in `bytes`, written under superblock format `version`.
pub(crate) fn decode_catalog(bytes: &[u8], version: u32) -> Result<Catalog, StoreError> {
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
#[cfg(test)]
pub(crate) fn encode_v2(c: &Catalog) -> Vec<u8> {
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
    postcard::to_stdvec(&v2).expect("a catalog encodes")
}
