//! The 4 KiB header slot (format versions 1 and 2): encoding, decoding and validation.
//!
//! Both versions share the slot layout; version 2 reuses the chunk fields
//! (`chunk_pages`, `chunk_count`, and `chunk_table_hash` as the hash of the page
//! index and offset table) and adds its fields in the area that is reserved
//! (zero) in version 1. All integers are little-endian. The last 32 bytes of the slot are a
//! BLAKE3 hash of the first 4064; this position is fixed for every format
//! version so that a damaged version field is reported as a checksum
//! mismatch, not as an unknown version. Decoding checks, in order: all-zero
//! (empty slot), magic, checksum, version, then the consistency of every
//! count and offset with checked arithmetic, so later code can trust them.

use serde::Serialize;
use std::fmt;

use super::{
    Identity, ImageError, Slot, AREAS_START, FLAG_INVALIDATED, FORMAT_VERSION, HASH_LEN, MAGIC,
    MAX_IDENTITY_LEN, SLOT_SIZE,
};
use crate::binding::Binding;
use crate::kstream::{PAGE_SIZE, PFNS_PER_PAGE};
use crate::v2::{self, Compression, SwapRegion, MIN_SWAP_PAGES};

/// Field offsets inside a header slot (see docs/image-format.md).
pub(crate) mod off {
    pub const MAGIC: usize = 0x000;
    pub const VERSION: usize = 0x008;
    pub const HEADER_SIZE: usize = 0x00C;
    pub const GENERATION: usize = 0x010;
    pub const FLAGS: usize = 0x018;
    pub const CREATED: usize = 0x020;
    pub const AREA_OFFSET: usize = 0x028;
    pub const IMAGE_BYTES: usize = 0x030;
    pub const STREAM_PAGES: usize = 0x038;
    pub const IMAGE_PAGES: usize = 0x040;
    pub const META_PAGES: usize = 0x048;
    pub const NUM_PHYSPAGES: usize = 0x050;
    pub const RAM_BYTES: usize = 0x058;
    pub const ARCH_MAGIC: usize = 0x060;
    pub const E820: usize = 0x068;
    /// Reserved (was LINUX_VERSION_CODE, never filled; written as zero).
    #[allow(dead_code)]
    pub const VERSION_CODE: usize = 0x070;
    pub const CHUNK_PAGES: usize = 0x074;
    pub const CHUNK_COUNT: usize = 0x078;
    pub const RELEASE: usize = 0x080;
    pub const UTS_VERSION: usize = 0x0C8;
    pub const MACHINE: usize = 0x110;
    pub const STRING_LEN: usize = 72;
    pub const STREAM_HEADER_HASH: usize = 0x158;
    pub const CHUNK_TABLE_HASH: usize = 0x178;
    pub const RESERVED: usize = 0x198;
    // Version 2 only (reserved in version 1).
    pub const COMPRESSOR: usize = 0x198;
    pub const LEVEL: usize = 0x19C;
    pub const INDEX_BYTES: usize = 0x1A0;
    pub const TABLE_BYTES: usize = 0x1A8;
    pub const DATA_BYTES: usize = 0x1B0;
    pub const ZERO_PAGES: usize = 0x1B8;
    pub const DUP_PAGES: usize = 0x1C0;
    pub const UNIQUE_PAGES: usize = 0x1C8;
    // Version 2, lazy images (all zero in a full image).
    pub const SWAP_OFFSET: usize = 0x1D0;
    pub const SWAP_BYTES: usize = 0x1D8;
    pub const SWAP_USED_PAGES: usize = 0x1E0;
    pub const SWAP_UUID: usize = 0x1E8;
    pub const UUID_LEN: usize = 16;
    pub const V2_RESERVED: usize = 0x1F8;
    // Version 2: the image's binding (crate::binding), length then record; 0 = none.
    pub const BINDING_LEN: usize = 0x1F8;
    pub const BINDING: usize = 0x200;
    pub const CHECKSUM: usize = 0xFE0;
}

const _: () = assert!(off::RELEASE + off::STRING_LEN == off::UTS_VERSION);
const _: () = assert!(off::MACHINE + off::STRING_LEN == off::STREAM_HEADER_HASH);
const _: () = assert!(off::CHUNK_TABLE_HASH + HASH_LEN == off::RESERVED);
const _: () = assert!(off::UNIQUE_PAGES + 8 == off::SWAP_OFFSET);
const _: () = assert!(off::SWAP_OFFSET + 8 == off::SWAP_BYTES);
const _: () = assert!(off::SWAP_BYTES + 8 == off::SWAP_USED_PAGES);
const _: () = assert!(off::SWAP_USED_PAGES + 8 == off::SWAP_UUID);
const _: () =
    assert!(off::SWAP_UUID + off::UUID_LEN == off::V2_RESERVED && off::V2_RESERVED < off::CHECKSUM);
const _: () = assert!(off::CHECKSUM + HASH_LEN == SLOT_SIZE as usize);
const _: () = assert!(off::BINDING_LEN + 4 <= off::BINDING && off::BINDING < off::CHECKSUM);
/// Bytes the header slot has for the binding record.
pub(crate) const BINDING_ROOM: usize = off::CHECKSUM - off::BINDING;
const _: () = assert!(off::STRING_LEN > MAX_IDENTITY_LEN);

/// Fields only format version 2 has (all zero in a version 1 header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct V2Fields {
    /// 1 = LZ4 block, 2 = zstd.
    pub compressor: u32,
    /// zstd level (0 for LZ4).
    pub level: i32,
    /// Bytes of the page index region (padded to a page).
    pub index_bytes: u64,
    /// Bytes of the offset table region (padded to a page).
    pub table_bytes: u64,
    /// Bytes of chunk data after the two regions.
    pub data_bytes: u64,
    /// Stream pages flagged zero.
    pub zero_pages: u64,
    /// Stream pages pointing at an earlier identical page.
    pub dup_pages: u64,
    /// Stream pages stored in chunks.
    pub unique_pages: u64,
    /// Lazy image: byte offset of the swap region in the store (0: full image).
    pub swap_offset: u64,
    /// Lazy image: bytes of the swap region (0: full image).
    pub swap_bytes: u64,
    /// Lazy image: pages the kernel had swapped out into the region at capture.
    pub swap_used_pages: u64,
    /// Lazy image: the UUID in the region's swap header page.
    pub swap_uuid: [u8; off::UUID_LEN],
}

impl V2Fields {
    /// The compressor, if the code is known.
    pub fn compression(&self) -> Option<Compression> {
        Compression::from_code(self.compressor, self.level)
    }

    /// The swap region of a lazy image, `None` for a full image.
    pub fn swap(&self) -> Option<SwapRegion> {
        (self.swap_bytes != 0).then_some(SwapRegion {
            offset: self.swap_offset,
            bytes: self.swap_bytes,
            used_pages: self.swap_used_pages,
            uuid: self.swap_uuid,
        })
    }

    /// Record `swap` (or clear the swap fields).
    pub fn set_swap(&mut self, swap: Option<SwapRegion>) {
        let r = swap.unwrap_or(SwapRegion {
            offset: 0,
            bytes: 0,
            used_pages: 0,
            uuid: [0; off::UUID_LEN],
        });
        self.swap_offset = r.offset;
        self.swap_bytes = r.bytes;
        self.swap_used_pages = r.used_pages;
        self.swap_uuid = r.uuid;
    }
}

/// A decoded, validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub format_version: u32,
    pub generation: u64,
    pub flags: u64,
    pub created_unix: u64,
    pub area_offset: u64,
    pub image_bytes: u64,
    pub stream_pages: u64,
    pub image_pages: u64,
    pub meta_pages: u64,
    pub num_physpages: u64,
    pub arch_magic: u64,
    pub e820_checksum: u64,
    pub chunk_pages: u32,
    pub chunk_count: u64,
    pub identity: Identity,
    pub stream_header_hash: [u8; HASH_LEN],
    pub chunk_table_hash: [u8; HASH_LEN],
    pub v2: V2Fields,
    /// What the image is bound to (version 2; `None` in images written before bindings).
    pub binding: Option<Binding>,
}

fn get_u64(b: &[u8], o: usize) -> u64 {
    crate::kstream::le_u64(b, o)
}

fn get_u32(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}

fn get_hash(b: &[u8], o: usize) -> [u8; HASH_LEN] {
    let mut a = [0u8; HASH_LEN];
    a.copy_from_slice(&b[o..o + HASH_LEN]);
    a
}

fn get_str(b: &[u8], o: usize) -> String {
    let field = &b[o..o + off::STRING_LEN];
    let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Lowercase hex of a hash.
pub(crate) fn hex(h: &[u8]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

fn inconsistent(reason: String) -> ImageError {
    ImageError::Inconsistent { reason }
}

/// Chunks for `pages` pages.
pub(crate) fn chunks_for(pages: u64, chunk_pages: u64) -> u64 {
    pages.div_ceil(chunk_pages)
}

/// Bytes of the chunk hash table, padded to whole pages.
pub(crate) fn table_bytes(chunk_count: u64) -> Option<u64> {
    chunk_count
        .checked_mul(HASH_LEN as u64)?
        .checked_next_multiple_of(PAGE_SIZE as u64)
}

/// Bytes an image of these counts occupies in an area.
pub(crate) fn image_bytes_for(stream_pages: u64, chunk_count: u64) -> Option<u64> {
    stream_pages
        .checked_mul(PAGE_SIZE as u64)?
        .checked_add(table_bytes(chunk_count)?)
}

/// Identity strings must fit their fields and contain no NUL.
pub(crate) fn check_identity(id: &Identity) -> Result<(), ImageError> {
    for (field, s) in [
        ("release", &id.release),
        ("version", &id.version),
        ("machine", &id.machine),
    ] {
        if s.len() > MAX_IDENTITY_LEN || s.as_bytes().contains(&0) {
            return Err(ImageError::FieldTooLong {
                field,
                len: s.len(),
            });
        }
    }
    Ok(())
}

impl Header {
    /// Whether the boot-once flag is set.
    pub fn invalidated(&self) -> bool {
        self.flags & FLAG_INVALIDATED != 0
    }

    /// Encode into a full slot, checksum included.
    pub fn encode(&self) -> Result<Vec<u8>, ImageError> {
        let mut b = vec![0u8; SLOT_SIZE as usize];
        let put = |b: &mut Vec<u8>, o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut b, off::GENERATION, self.generation);
        put(&mut b, off::FLAGS, self.flags);
        put(&mut b, off::CREATED, self.created_unix);
        put(&mut b, off::AREA_OFFSET, self.area_offset);
        put(&mut b, off::IMAGE_BYTES, self.image_bytes);
        put(&mut b, off::STREAM_PAGES, self.stream_pages);
        put(&mut b, off::IMAGE_PAGES, self.image_pages);
        put(&mut b, off::META_PAGES, self.meta_pages);
        put(&mut b, off::NUM_PHYSPAGES, self.num_physpages);
        put(&mut b, off::RAM_BYTES, self.identity.ram_bytes);
        put(&mut b, off::ARCH_MAGIC, self.arch_magic);
        put(&mut b, off::E820, self.e820_checksum);
        put(&mut b, off::CHUNK_COUNT, self.chunk_count);
        b[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC);
        b[off::VERSION..off::VERSION + 4].copy_from_slice(&self.format_version.to_le_bytes());
        if self.format_version == v2::FORMAT_VERSION {
            let v = &self.v2;
            b[off::COMPRESSOR..off::COMPRESSOR + 4].copy_from_slice(&v.compressor.to_le_bytes());
            b[off::LEVEL..off::LEVEL + 4].copy_from_slice(&v.level.to_le_bytes());
            for (o, x) in [
                (off::INDEX_BYTES, v.index_bytes),
                (off::TABLE_BYTES, v.table_bytes),
                (off::DATA_BYTES, v.data_bytes),
                (off::ZERO_PAGES, v.zero_pages),
                (off::DUP_PAGES, v.dup_pages),
                (off::UNIQUE_PAGES, v.unique_pages),
                (off::SWAP_OFFSET, v.swap_offset),
                (off::SWAP_BYTES, v.swap_bytes),
                (off::SWAP_USED_PAGES, v.swap_used_pages),
            ] {
                b[o..o + 8].copy_from_slice(&x.to_le_bytes());
            }
            b[off::SWAP_UUID..off::SWAP_UUID + off::UUID_LEN].copy_from_slice(&v.swap_uuid);
            if let Some(binding) = &self.binding {
                let rec = binding
                    .encode(BINDING_ROOM)
                    .map_err(|e| inconsistent(e.to_string()))?;
                b[off::BINDING_LEN..off::BINDING_LEN + 4]
                    .copy_from_slice(&(rec.len() as u32).to_le_bytes());
                b[off::BINDING..off::BINDING + rec.len()].copy_from_slice(&rec);
            }
        }
        b[off::HEADER_SIZE..off::HEADER_SIZE + 4]
            .copy_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
        b[off::CHUNK_PAGES..off::CHUNK_PAGES + 4].copy_from_slice(&self.chunk_pages.to_le_bytes());
        check_identity(&self.identity)?;
        let id = &self.identity;
        for (o, s) in [
            (off::RELEASE, &id.release),
            (off::UTS_VERSION, &id.version),
            (off::MACHINE, &id.machine),
        ] {
            b[o..o + s.len()].copy_from_slice(s.as_bytes());
        }
        b[off::STREAM_HEADER_HASH..off::STREAM_HEADER_HASH + HASH_LEN]
            .copy_from_slice(&self.stream_header_hash);
        b[off::CHUNK_TABLE_HASH..off::CHUNK_TABLE_HASH + HASH_LEN]
            .copy_from_slice(&self.chunk_table_hash);
        let sum = blake3::hash(&b[..off::CHECKSUM]);
        b[off::CHECKSUM..].copy_from_slice(sum.as_bytes());
        Ok(b)
    }

    /// Decode a slot. `Ok(None)` for an all-zero (empty) slot.
    pub fn decode(b: &[u8]) -> Result<Option<Header>, ImageError> {
        if b.len() != SLOT_SIZE as usize {
            return Err(inconsistent(format!("header slot is {} bytes", b.len())));
        }
        if b.iter().all(|&c| c == 0) {
            return Ok(None);
        }
        if b[..8] != MAGIC {
            return Err(ImageError::BadMagic {
                found: b[..8].escape_ascii().to_string(),
            });
        }
        if blake3::hash(&b[..off::CHECKSUM]).as_bytes()[..] != b[off::CHECKSUM..] {
            return Err(ImageError::ChecksumMismatch {
                section: "header".into(),
            });
        }
        let version = get_u32(b, off::VERSION);
        if version != FORMAT_VERSION && version != v2::FORMAT_VERSION {
            return Err(ImageError::UnsupportedVersion { found: version });
        }
        let v2 = if version == v2::FORMAT_VERSION {
            V2Fields {
                compressor: get_u32(b, off::COMPRESSOR),
                level: get_u32(b, off::LEVEL) as i32,
                index_bytes: get_u64(b, off::INDEX_BYTES),
                table_bytes: get_u64(b, off::TABLE_BYTES),
                data_bytes: get_u64(b, off::DATA_BYTES),
                zero_pages: get_u64(b, off::ZERO_PAGES),
                dup_pages: get_u64(b, off::DUP_PAGES),
                unique_pages: get_u64(b, off::UNIQUE_PAGES),
                swap_offset: get_u64(b, off::SWAP_OFFSET),
                swap_bytes: get_u64(b, off::SWAP_BYTES),
                swap_used_pages: get_u64(b, off::SWAP_USED_PAGES),
                swap_uuid: {
                    let mut u = [0u8; off::UUID_LEN];
                    u.copy_from_slice(&b[off::SWAP_UUID..off::SWAP_UUID + off::UUID_LEN]);
                    u
                },
            }
        } else {
            V2Fields::default()
        };
        let binding_len = get_u32(b, off::BINDING_LEN) as usize;
        let binding = if version != v2::FORMAT_VERSION || binding_len == 0 {
            None
        } else if binding_len > BINDING_ROOM {
            return Err(inconsistent(format!(
                "binding of {binding_len} bytes, the slot has room for {BINDING_ROOM}"
            )));
        } else {
            let rec = &b[off::BINDING..off::BINDING + binding_len];
            Some(Binding::decode(rec).map_err(|e| inconsistent(e.to_string()))?)
        };
        let h = Header {
            format_version: version,
            generation: get_u64(b, off::GENERATION),
            flags: get_u64(b, off::FLAGS),
            created_unix: get_u64(b, off::CREATED),
            area_offset: get_u64(b, off::AREA_OFFSET),
            image_bytes: get_u64(b, off::IMAGE_BYTES),
            stream_pages: get_u64(b, off::STREAM_PAGES),
            image_pages: get_u64(b, off::IMAGE_PAGES),
            meta_pages: get_u64(b, off::META_PAGES),
            num_physpages: get_u64(b, off::NUM_PHYSPAGES),
            arch_magic: get_u64(b, off::ARCH_MAGIC),
            e820_checksum: get_u64(b, off::E820),
            chunk_pages: get_u32(b, off::CHUNK_PAGES),
            chunk_count: get_u64(b, off::CHUNK_COUNT),
            identity: Identity {
                release: get_str(b, off::RELEASE),
                version: get_str(b, off::UTS_VERSION),
                machine: get_str(b, off::MACHINE),
                ram_bytes: get_u64(b, off::RAM_BYTES),
            },
            stream_header_hash: get_hash(b, off::STREAM_HEADER_HASH),
            chunk_table_hash: get_hash(b, off::CHUNK_TABLE_HASH),
            v2,
            binding,
        };
        h.check_consistency(get_u32(b, off::HEADER_SIZE))?;
        Ok(Some(h))
    }

    fn check_consistency(&self, header_size: u32) -> Result<(), ImageError> {
        if u64::from(header_size) != SLOT_SIZE {
            return Err(inconsistent(format!(
                "header size field is {header_size}, want 4096"
            )));
        }
        if self.image_pages == 0 || self.meta_pages < self.image_pages.div_ceil(PFNS_PER_PAGE) {
            return Err(inconsistent(format!(
                "{} index pages cannot list {} data pages",
                self.meta_pages, self.image_pages
            )));
        }
        let total = self
            .image_pages
            .checked_add(self.meta_pages)
            .and_then(|n| n.checked_add(1));
        if total != Some(self.stream_pages) {
            return Err(inconsistent(format!(
                "stream pages {} != 1 + index pages {} + data pages {}",
                self.stream_pages, self.meta_pages, self.image_pages
            )));
        }
        if self.format_version == v2::FORMAT_VERSION {
            self.check_v2()?;
        } else {
            self.check_v1()?;
        }
        if self.area_offset < AREAS_START || self.area_offset & (PAGE_SIZE as u64 - 1) != 0 {
            return Err(inconsistent(format!(
                "area offset {} is not a page after the slots",
                self.area_offset
            )));
        }
        if self.area_offset.checked_add(self.image_bytes).is_none() {
            return Err(inconsistent("area offset + image size overflows".into()));
        }
        Ok(())
    }

    fn check_v1(&self) -> Result<(), ImageError> {
        if self.chunk_pages == 0 || self.chunk_pages > 4096 {
            return Err(inconsistent(format!(
                "chunk size of {} pages",
                self.chunk_pages
            )));
        }
        let cp = u64::from(self.chunk_pages);
        let chunks = chunks_for(self.meta_pages, cp) + chunks_for(self.image_pages, cp);
        if chunks != self.chunk_count {
            return Err(inconsistent(format!(
                "chunk count {} but the page counts need {chunks}",
                self.chunk_count
            )));
        }
        if image_bytes_for(self.stream_pages, chunks) != Some(self.image_bytes) {
            return Err(inconsistent(format!(
                "image size {} bytes does not match its page counts",
                self.image_bytes
            )));
        }
        Ok(())
    }

    fn check_v2(&self) -> Result<(), ImageError> {
        let v = &self.v2;
        if v.compression().is_none() {
            return Err(inconsistent(format!(
                "unknown compressor {} (level {})",
                v.compressor, v.level
            )));
        }
        if self.chunk_pages == 0 || self.chunk_pages > v2::MAX_CHUNK_PAGES {
            return Err(inconsistent(format!(
                "chunk size of {} pages",
                self.chunk_pages
            )));
        }
        let counted = v
            .zero_pages
            .checked_add(v.dup_pages)
            .and_then(|n| n.checked_add(v.unique_pages));
        if counted != Some(self.stream_pages) || v.unique_pages == 0 {
            return Err(inconsistent(format!(
                "zero {} + duplicate {} + unique {} pages != stream pages {}",
                v.zero_pages, v.dup_pages, v.unique_pages, self.stream_pages
            )));
        }
        let cp = u64::from(self.chunk_pages);
        if chunks_for(v.unique_pages, cp) != self.chunk_count {
            return Err(inconsistent(format!(
                "chunk count {} but {} unique pages need {}",
                self.chunk_count,
                v.unique_pages,
                chunks_for(v.unique_pages, cp)
            )));
        }
        let layout = v2::Layout::new(self.stream_pages, self.chunk_pages);
        if layout.map(|l| (l.index_bytes, l.table_bytes)) != Some((v.index_bytes, v.table_bytes)) {
            return Err(inconsistent(format!(
                "index/table sizes {}/{} do not match {} stream pages",
                v.index_bytes, v.table_bytes, self.stream_pages
            )));
        }
        let max_data = v.unique_pages.checked_mul(PAGE_SIZE as u64);
        if v.data_bytes < self.chunk_count || !matches!(max_data, Some(m) if v.data_bytes <= m) {
            return Err(inconsistent(format!(
                "{} bytes of chunk data for {} chunks of {} unique pages",
                v.data_bytes, self.chunk_count, v.unique_pages
            )));
        }
        let total = v
            .index_bytes
            .checked_add(v.table_bytes)
            .and_then(|n| n.checked_add(v.data_bytes));
        if total != Some(self.image_bytes) {
            return Err(inconsistent(format!(
                "image size {} bytes != index + table + data",
                self.image_bytes
            )));
        }
        self.check_swap()
    }

    /// The swap region of a lazy image (all four fields zero for a full image).
    fn check_swap(&self) -> Result<(), ImageError> {
        let v = &self.v2;
        let page = PAGE_SIZE as u64;
        if v.swap_bytes == 0 {
            if v.swap_offset != 0 || v.swap_used_pages != 0 || v.swap_uuid != [0; off::UUID_LEN] {
                return Err(inconsistent(format!(
                    "swap_bytes is 0 (full image) but swap_offset {}, swap_used_pages {} \
                     or swap_uuid {} is not zero",
                    v.swap_offset,
                    v.swap_used_pages,
                    hex(&v.swap_uuid)
                )));
            }
            return Ok(());
        }
        if (v.swap_offset | v.swap_bytes) & (page - 1) != 0 {
            return Err(inconsistent(format!(
                "swap_offset {} or swap_bytes {} is not a multiple of 4096",
                v.swap_offset, v.swap_bytes
            )));
        }
        let pages = v.swap_bytes / page;
        if pages < MIN_SWAP_PAGES {
            return Err(inconsistent(format!(
                "swap_bytes {} is less than {MIN_SWAP_PAGES} pages",
                v.swap_bytes
            )));
        }
        if v.swap_used_pages >= pages {
            return Err(inconsistent(format!(
                "swap_used_pages {} >= the {pages} pages of swap_bytes {}",
                v.swap_used_pages, v.swap_bytes
            )));
        }
        let image_end = self.area_offset.checked_add(self.image_bytes);
        if !matches!(image_end, Some(end) if v.swap_offset >= end) {
            return Err(inconsistent(format!(
                "swap_offset {} overlaps the image (area_offset {} + image_bytes {})",
                v.swap_offset, self.area_offset, self.image_bytes
            )));
        }
        if v.swap_offset.checked_add(v.swap_bytes).is_none() {
            return Err(inconsistent(format!(
                "swap_offset {} + swap_bytes {} overflows",
                v.swap_offset, v.swap_bytes
            )));
        }
        Ok(())
    }

    /// Bytes of store this image needs: up to the end of the image in its
    /// area, or of its swap region if that ends later. A reader requires
    /// `store_end() <= store size` ([`ImageError::Truncated`]).
    pub fn store_end(&self) -> u64 {
        let image = self.area_offset.saturating_add(self.image_bytes);
        match self.v2.swap() {
            Some(s) if self.format_version == v2::FORMAT_VERSION => {
                image.max(s.offset.saturating_add(s.bytes))
            }
            _ => image,
        }
    }

    /// Public view of this header.
    pub fn info(&self, slot: Slot) -> ImageInfo {
        ImageInfo {
            format_version: self.format_version,
            slot,
            generation: self.generation,
            created_unix: self.created_unix,
            invalidated: self.invalidated(),
            identity: self.identity.clone(),
            binding: self.binding.clone(),
            stream: StreamCounts {
                pages: self.stream_pages,
                image_pages: self.image_pages,
                meta_pages: self.meta_pages,
                num_physpages: self.num_physpages,
                arch_magic: self.arch_magic,
                e820_checksum: self.e820_checksum,
            },
            area_offset: self.area_offset,
            image_bytes: self.image_bytes,
            chunk_pages: self.chunk_pages,
            chunk_count: self.chunk_count,
            stream_header_blake3: hex(&self.stream_header_hash),
            chunk_table_blake3: hex(&self.chunk_table_hash),
            stats: self.stats(),
            swap: (self.format_version == v2::FORMAT_VERSION)
                .then(|| self.v2.swap())
                .flatten()
                .map(|r| SwapInfo::from(&r)),
            verified: false,
        }
    }

    fn stats(&self) -> ImageStats {
        let raw_bytes = self.stream_pages.saturating_mul(PAGE_SIZE as u64);
        let (zero, dup, unique, stored, compressor, level) =
            match (self.format_version, self.v2.compression()) {
                (v2::FORMAT_VERSION, Some(c)) => (
                    self.v2.zero_pages,
                    self.v2.dup_pages,
                    self.v2.unique_pages,
                    self.v2.data_bytes,
                    c.name(),
                    c.level(),
                ),
                _ => (0, 0, self.stream_pages, raw_bytes, "none", None),
            };
        let a = unique.saturating_mul(PAGE_SIZE as u64);
        ImageStats {
            raw_pages: self.stream_pages,
            zero_pages: zero,
            duplicate_pages: dup,
            unique_pages: unique,
            raw_bytes,
            stored_bytes: stored,
            a_dedupe_bytes: a,
            compressor,
            level,
            chunk_count: self.chunk_count,
        }
    }
}

/// Space figures of an image, for `snapboot image inspect`.
///
/// A, B and C follow the seed's naming: A is what remains after in-memory
/// dedupe and zero-page removal, B after dedupe against the store (not done
/// yet: B = A), C what is actually stored after compression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageStats {
    /// Pages of the kernel stream (header + PFN index + data).
    pub raw_pages: u64,
    /// All-zero pages, flagged in the page index and not stored.
    pub zero_pages: u64,
    /// Pages identical to an earlier page, stored once.
    pub duplicate_pages: u64,
    /// Pages stored in chunks (raw - zero - duplicate).
    pub unique_pages: u64,
    /// Bytes of the kernel stream (`raw_pages * 4096`).
    pub raw_bytes: u64,
    /// Bytes of chunk data actually stored (compressed; v1: the raw stream).
    pub stored_bytes: u64,
    /// A: bytes after in-memory dedupe and zero removal (`unique_pages * 4096`).
    pub a_dedupe_bytes: u64,
    /// `none` (v1), `lz4` or `zstd`.
    pub compressor: &'static str,
    /// zstd level, if zstd.
    pub level: Option<i32>,
    /// Checksummed chunks (v2: compressed chunks of unique pages).
    pub chunk_count: u64,
}

/// The kernel stream's counts as recorded in the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamCounts {
    /// `swsusp_info.pages`: total stream pages.
    pub pages: u64,
    /// `swsusp_info.image_pages`: data pages.
    pub image_pages: u64,
    /// PFN index pages (`pages - image_pages - 1`).
    pub meta_pages: u64,
    /// `swsusp_info.num_physpages`.
    pub num_physpages: u64,
    /// x86 `RESTORE_MAGIC` from the arch record, 0 on other arches.
    pub arch_magic: u64,
    /// x86 e820 crc32 from the arch record, 0 on other arches.
    pub e820_checksum: u64,
}

/// What `snapboot image inspect` shows about one image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageInfo {
    /// Container format version.
    pub format_version: u32,
    /// Header slot (and area) holding the image.
    pub slot: Slot,
    /// Generation: higher is newer.
    pub generation: u64,
    /// Capture time, unix seconds.
    pub created_unix: u64,
    /// The boot-once flag was set: the image will not be restored.
    pub invalidated: bool,
    /// Kernel and machine of the capture.
    pub identity: Identity,
    /// Kernel stream counts.
    pub stream: StreamCounts,
    /// Byte offset of the image area in the store.
    pub area_offset: u64,
    /// Bytes of the image in its area (v1: stream + chunk table; v2: index + table + chunks).
    pub image_bytes: u64,
    /// Pages per checksummed chunk (v2: unique pages per compressed chunk).
    pub chunk_pages: u32,
    /// Chunks (v1: index chunks + data chunks; v2: compressed chunks).
    pub chunk_count: u64,
    /// BLAKE3 of the stream header page, hex.
    pub stream_header_blake3: String,
    /// BLAKE3 of the chunk table (v2: of the page index and offset table), hex.
    pub chunk_table_blake3: String,
    /// Page, dedupe and compression figures.
    pub stats: ImageStats,
    /// Lazy image: the swap region the kernel pages the rest of memory in
    /// from after restore. `None` for full images (and version 1).
    pub swap: Option<SwapInfo>,
    /// What the image is bound to besides kernel and RAM (`None`: an image written before
    /// bindings existed, which resume refuses).
    pub binding: Option<Binding>,
    /// Every checksum was verified (by `Reader::verify_all`).
    pub verified: bool,
}

/// The swap region of a lazy image, as [`ImageInfo`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwapInfo {
    /// Byte offset of the region in the store.
    pub offset: u64,
    /// Bytes of the region (whole pages).
    pub bytes: u64,
    /// Pages the kernel had swapped out into the region at capture.
    pub used_pages: u64,
    /// UUID written into the region's swap header page, in the standard
    /// 8-4-4-4-12 form (lowercase hex, bytes in order, as `blkid` shows it).
    pub uuid: String,
}

impl From<&SwapRegion> for SwapInfo {
    fn from(r: &SwapRegion) -> Self {
        SwapInfo {
            offset: r.offset,
            bytes: r.bytes,
            used_pages: r.used_pages,
            uuid: format_uuid(&r.uuid),
        }
    }
}

impl SwapInfo {
    /// The 16 UUID bytes back from [`SwapInfo::uuid`] (hyphens optional);
    /// all zero if the string is not 32 hex digits.
    pub fn uuid_bytes(&self) -> [u8; off::UUID_LEN] {
        parse_uuid(&self.uuid).unwrap_or([0; off::UUID_LEN])
    }

    /// The region as a [`SwapRegion`].
    pub fn region(&self) -> SwapRegion {
        SwapRegion {
            offset: self.offset,
            bytes: self.bytes,
            used_pages: self.used_pages,
            uuid: self.uuid_bytes(),
        }
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, bytes in order.
pub(crate) fn format_uuid(u: &[u8; off::UUID_LEN]) -> String {
    let h = hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn parse_uuid(s: &str) -> Option<[u8; off::UUID_LEN]> {
    let digits: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
    if digits.len() != 2 * off::UUID_LEN || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut out = [0u8; off::UUID_LEN];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// What a header slot holds.
#[derive(Debug)]
pub enum SlotState {
    /// The store is too short to hold this slot.
    Missing,
    /// All zeros: never written, or cleared.
    Empty,
    /// Something that is not a valid header.
    Invalid(ImageError),
    /// A valid header (possibly invalidated: see [`ImageInfo::invalidated`]).
    Valid(Box<ImageInfo>),
}

impl fmt::Display for SlotState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlotState::Missing => f.write_str("missing (store too short)"),
            SlotState::Empty => f.write_str("empty"),
            SlotState::Invalid(e) => write!(f, "invalid: {e}"),
            SlotState::Valid(i) if i.invalidated => {
                write!(f, "generation {} (invalidated)", i.generation)
            }
            SlotState::Valid(i) => write!(f, "generation {}", i.generation),
        }
    }
}
