//! The 4 KiB v1 header slot: encoding, decoding and validation.
//!
//! All integers are little-endian. The last 32 bytes of the slot are a
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
use crate::kstream::{PAGE_SIZE, PFNS_PER_PAGE};

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
    pub const CHECKSUM: usize = 0xFE0;
}

const _: () = assert!(off::RELEASE + off::STRING_LEN == off::UTS_VERSION);
const _: () = assert!(off::MACHINE + off::STRING_LEN == off::STREAM_HEADER_HASH);
const _: () = assert!(off::CHUNK_TABLE_HASH + HASH_LEN == off::RESERVED);
const _: () = assert!(off::CHECKSUM + HASH_LEN == SLOT_SIZE as usize);
const _: () = assert!(off::STRING_LEN > MAX_IDENTITY_LEN);

/// A decoded, validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
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
        let mut put = |o: usize, v: u64| b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        put(off::GENERATION, self.generation);
        put(off::FLAGS, self.flags);
        put(off::CREATED, self.created_unix);
        put(off::AREA_OFFSET, self.area_offset);
        put(off::IMAGE_BYTES, self.image_bytes);
        put(off::STREAM_PAGES, self.stream_pages);
        put(off::IMAGE_PAGES, self.image_pages);
        put(off::META_PAGES, self.meta_pages);
        put(off::NUM_PHYSPAGES, self.num_physpages);
        put(off::RAM_BYTES, self.identity.ram_bytes);
        put(off::ARCH_MAGIC, self.arch_magic);
        put(off::E820, self.e820_checksum);
        put(off::CHUNK_COUNT, self.chunk_count);
        b[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC);
        b[off::VERSION..off::VERSION + 4].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[off::HEADER_SIZE..off::HEADER_SIZE + 4]
            .copy_from_slice(&(SLOT_SIZE as u32).to_le_bytes());
        let code = self.identity.version_code.unwrap_or(0);
        b[off::VERSION_CODE..off::VERSION_CODE + 4].copy_from_slice(&code.to_le_bytes());
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
        if version != FORMAT_VERSION {
            return Err(ImageError::UnsupportedVersion { found: version });
        }
        let code = get_u32(b, off::VERSION_CODE);
        let h = Header {
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
                version_code: (code != 0).then_some(code),
                ram_bytes: get_u64(b, off::RAM_BYTES),
            },
            stream_header_hash: get_hash(b, off::STREAM_HEADER_HASH),
            chunk_table_hash: get_hash(b, off::CHUNK_TABLE_HASH),
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
        if self.chunk_pages == 0 || self.chunk_pages > 4096 {
            return Err(inconsistent(format!(
                "chunk size of {} pages",
                self.chunk_pages
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

    /// Public view of this header.
    pub fn info(&self, slot: Slot) -> ImageInfo {
        ImageInfo {
            format_version: FORMAT_VERSION,
            slot,
            generation: self.generation,
            created_unix: self.created_unix,
            invalidated: self.invalidated(),
            identity: self.identity.clone(),
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
            verified: false,
        }
    }
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
    /// Bytes of the image in its area (stream + chunk table).
    pub image_bytes: u64,
    /// Pages per checksummed chunk.
    pub chunk_pages: u32,
    /// Chunks (index chunks + data chunks).
    pub chunk_count: u64,
    /// BLAKE3 of the stream header page, hex.
    pub stream_header_blake3: String,
    /// BLAKE3 of the chunk table, hex.
    pub chunk_table_blake3: String,
    /// Every checksum was verified (by `Reader::verify_all`).
    pub verified: bool,
}

/// What a header slot holds.
#[derive(Debug)]
pub enum SlotState {
    /// The store is too short to hold this slot.
    Missing,
    /// All zeros: never written, or cleared.
    Empty,
    /// Something that is not a valid v1 header.
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
