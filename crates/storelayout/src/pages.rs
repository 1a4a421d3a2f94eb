//! An image's page list (every page in stream order: zero, or a slot of a chunk, with the
//! caller's description of the image), its checks against the catalog, and the dedupe table.

use crate::catalog::{Catalog, ChunkRec, ImageRec};
use crate::codec::decode;
use crate::damage::{Damage, ReadError};
use crate::superblock::Page;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

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

/// Checks the stored bytes of `rec`'s page list (sealed or not) against the catalog's
/// checksum of them.
pub fn check_page_list_bytes(rec: &ImageRec, stored: &[u8]) -> Result<(), Damage> {
    if blake3::hash(stored).as_bytes() != &rec.meta_hash {
        return Err(Damage::PageListChecksum {
            image: rec.name.clone(),
        });
    }
    Ok(())
}

/// Decodes `rec`'s page list from its bytes in the clear (checked, or opened when sealed),
/// checking that it names `rec`.
pub fn parse_page_list(rec: &ImageRec, plain: &[u8]) -> Result<ImageMeta, Damage> {
    let meta: ImageMeta = decode(plain, &format!("page list of image `{}`", rec.name))?;
    if meta.name != rec.name {
        return Err(Damage::PageListName {
            image: rec.name.clone(),
            named: meta.name,
        });
    }
    Ok(meta)
}

/// Checks one entry of `rec`'s page list, slot `slot` of chunk `chunk`, against the
/// catalog's record of that chunk (`None`: the catalog has none); returns the record.
pub fn check_page_ref<'c>(
    rec: &ImageRec,
    chunk: u64,
    slot: u16,
    found: Option<&'c ChunkRec>,
) -> Result<&'c ChunkRec, Damage> {
    let c = found.ok_or_else(|| Damage::MissingChunk {
        image: rec.name.clone(),
        chunk,
    })?;
    if rec.sealed.is_some() && !c.sealed {
        return Err(Damage::UnsealedChunk {
            image: rec.name.clone(),
            chunk,
        });
    }
    if slot >= c.pages {
        return Err(Damage::SlotOutside {
            image: rec.name.clone(),
            chunk,
            slot,
            pages: c.pages,
        });
    }
    Ok(c)
}

/// The page list of image `rec` of `catalog`, for a reader without a device key: refused
/// when the image is encrypted; else its `stored` bytes checked against the catalog's
/// checksum, decoded, and every entry checked against the catalog's chunks.
pub fn read_page_list(
    catalog: &Catalog,
    rec: &ImageRec,
    stored: &[u8],
) -> Result<ImageMeta, ReadError> {
    if let Some(key) = rec.sealed {
        return Err(ReadError::SealedImage {
            image: rec.name.clone(),
            key,
        });
    }
    check_page_list_bytes(rec, stored)?;
    let meta = parse_page_list(rec, stored)?;
    for p in &meta.pages {
        if let PageRef::At { chunk, slot } = *p {
            check_page_ref(rec, chunk, slot, catalog.chunk(chunk))?;
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Extent, ImageStats};
    use crate::keyid::KeyId;
    use std::string::ToString;
    use std::vec;

    fn chunk(id: u64, pages: u16) -> ChunkRec {
        ChunkRec {
            id,
            cluster: 2,
            offset: 0,
            stored_len: 10,
            pages,
            lz4: false,
            hash: [0; 32],
            refs: 1,
            sealed: false,
        }
    }

    /// A catalog with one image `a` whose page list is `pages`, and that list's bytes.
    fn image(pages: Vec<PageRef>) -> (Catalog, Vec<u8>) {
        let meta = ImageMeta {
            name: "a".into(),
            user: vec![1, 2, 3],
            pages,
        };
        let bytes = crate::codec::encode(&meta, "page list").unwrap();
        let rec = ImageRec {
            name: "a".into(),
            generation: 1,
            pinned: false,
            created_unix: 0,
            meta: Extent {
                cluster: 3,
                len: bytes.len() as u64,
            },
            meta_hash: *blake3::hash(&bytes).as_bytes(),
            chunks: vec![1, 2],
            stats: ImageStats::default(),
            signature: Vec::new(),
            raw: None,
            sealed: None,
        };
        let catalog = Catalog {
            images: vec![rec],
            chunks: vec![chunk(1, 4), chunk(2, 1)],
            ..Catalog::default()
        };
        (catalog, bytes)
    }

    fn read(catalog: &Catalog, bytes: &[u8]) -> Result<ImageMeta, ReadError> {
        read_page_list(catalog, &catalog.images[0], bytes)
    }

    #[test]
    fn a_page_list_is_checked_decoded_and_every_entry_found() {
        let pages = vec![
            PageRef::Zero,
            PageRef::At { chunk: 1, slot: 3 },
            PageRef::At { chunk: 2, slot: 0 },
        ];
        let (catalog, bytes) = image(pages.clone());
        let meta = read(&catalog, &bytes).unwrap();
        assert_eq!((meta.pages, meta.user), (pages, vec![1, 2, 3]));
        let mut bad = bytes.clone();
        bad[1] ^= 1;
        let e = read(&catalog, &bad).unwrap_err().to_string();
        assert_eq!(
            e,
            "store is damaged: page list of image `a`: checksum mismatch"
        );
    }

    #[test]
    fn missing_chunks_slots_outside_and_sealed_images_are_refused() {
        for (r, want) in [
            (
                PageRef::At { chunk: 3, slot: 0 },
                "image `a` refers to chunk 3, which the catalog does not have",
            ),
            (
                PageRef::At { chunk: 1, slot: 4 },
                "image `a` refers to slot 4 of chunk 1, which holds 4",
            ),
        ] {
            let (catalog, bytes) = image(vec![PageRef::Zero, r]);
            let e = read(&catalog, &bytes).unwrap_err().to_string();
            assert_eq!(e, format!("store is damaged: {want}"));
        }
        let (mut catalog, bytes) = image(vec![PageRef::Zero]);
        catalog.images[0].sealed = Some(KeyId([0xab; 16]));
        assert!(matches!(
            read(&catalog, &bytes),
            Err(ReadError::SealedImage { .. })
        ));
        let rec = &catalog.images[0];
        assert!(matches!(
            check_page_ref(rec, 1, 0, catalog.chunk(1)),
            Err(Damage::UnsealedChunk { chunk: 1, .. })
        ));
        let other = ImageRec {
            name: "b".into(),
            ..rec.clone()
        };
        assert!(matches!(
            parse_page_list(&other, &bytes),
            Err(Damage::PageListName { .. })
        ));
    }
}
