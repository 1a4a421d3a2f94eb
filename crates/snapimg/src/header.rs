//! The 4 KiB header slot: encoding, decoding and every consistency check.
//!
//! All integers are little-endian. The last 32 bytes of the slot are a BLAKE3
//! hash of the first 4064; this position is fixed for every format version so
//! that a damaged version field is reported as a checksum mismatch, not as an
//! unknown version. Decoding checks, in order: all-zero (empty slot), magic,
//! checksum, version, then the consistency of every count, size and offset
//! with checked arithmetic, so later code can trust them. The layout is
//! specified in docs/image-format.md §3.

use crate::binding::{hex, Binding};
use crate::codec::Compression;
use crate::error::ImageError;
use crate::index::{Counts, Layout, MAX_CHUNK_PAGES};
use crate::info::{check_identity, Identity, ImageInfo, ImageStats, StreamCounts, SwapInfo};
use crate::kstream::{PAGE_SIZE, PFNS_PER_PAGE};
use crate::layout::{
    Slot, AREAS_START, FLAG_INVALIDATED, FORMAT_VERSION, HASH_LEN, MAGIC, MAX_IDENTITY_LEN,
    SLOT_SIZE,
};
use crate::swap::{SwapRegion, UUID_LEN};
use crate::verity::SwapVerity;

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
    // 0x070..0x074 reserved (zero).
    pub const CHUNK_PAGES: usize = 0x074;
    pub const CHUNK_COUNT: usize = 0x078;
    pub const RELEASE: usize = 0x080;
    pub const UTS_VERSION: usize = 0x0C8;
    pub const MACHINE: usize = 0x110;
    pub const STRING_LEN: usize = 72;
    pub const STREAM_HEADER_HASH: usize = 0x158;
    /// BLAKE3 of the page index and offset table.
    pub const INDEX_HASH: usize = 0x178;
    pub const COMPRESSOR: usize = 0x198;
    pub const LEVEL: usize = 0x19C;
    pub const INDEX_BYTES: usize = 0x1A0;
    pub const TABLE_BYTES: usize = 0x1A8;
    pub const DATA_BYTES: usize = 0x1B0;
    pub const ZERO_PAGES: usize = 0x1B8;
    pub const DUP_PAGES: usize = 0x1C0;
    pub const UNIQUE_PAGES: usize = 0x1C8;
    // Lazy images (all zero in a full image).
    pub const SWAP_OFFSET: usize = 0x1D0;
    pub const SWAP_BYTES: usize = 0x1D8;
    pub const SWAP_USED_PAGES: usize = 0x1E0;
    pub const SWAP_UUID: usize = 0x1E8;
    // The image's binding (crate::binding), length then record; 0 = none.
    pub const BINDING_LEN: usize = 0x1F8;
    pub const BINDING: usize = 0x200;
    // A lazy image's dm-verity tree (crate::verity; all zero: page-ins are not verified).
    pub const VERITY_DATA_BLOCKS: usize = 0xF80;
    pub const VERITY_HASH_START: usize = 0xF88;
    pub const VERITY_ROOT: usize = 0xF90;
    pub const VERITY_SALT: usize = 0xFB0;
    // 0xFD0..0xFE0 reserved (zero).
    pub const CHECKSUM: usize = 0xFE0;
}

const _: () = assert!(off::RELEASE + off::STRING_LEN == off::UTS_VERSION);
const _: () = assert!(off::MACHINE + off::STRING_LEN == off::STREAM_HEADER_HASH);
const _: () = assert!(off::STREAM_HEADER_HASH + HASH_LEN == off::INDEX_HASH);
const _: () = assert!(off::INDEX_HASH + HASH_LEN == off::COMPRESSOR);
const _: () = assert!(off::UNIQUE_PAGES + 8 == off::SWAP_OFFSET);
const _: () = assert!(off::SWAP_OFFSET + 8 == off::SWAP_BYTES);
const _: () = assert!(off::SWAP_BYTES + 8 == off::SWAP_USED_PAGES);
const _: () = assert!(off::SWAP_USED_PAGES + 8 == off::SWAP_UUID);
const _: () = assert!(off::SWAP_UUID + UUID_LEN == off::BINDING_LEN);
const _: () = assert!(off::CHECKSUM + HASH_LEN == SLOT_SIZE as usize);
const _: () =
    assert!(off::BINDING_LEN + 4 <= off::BINDING && off::BINDING < off::VERITY_DATA_BLOCKS);
const _: () = assert!(off::VERITY_SALT + 32 <= off::CHECKSUM);
/// Bytes the header slot has for the binding record.
pub(crate) const BINDING_ROOM: usize = off::VERITY_DATA_BLOCKS - off::BINDING;
const _: () = assert!(off::STRING_LEN > MAX_IDENTITY_LEN);

/// A decoded, validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub generation: u64,
    pub flags: u64,
    pub created_unix: u64,
    /// Byte offset of the image's area in the store.
    pub area_offset: u64,
    /// Bytes of the image in its area: index + table + data.
    pub image_bytes: u64,
    /// Pages of the kernel stream: header page + PFN index + data pages.
    pub stream_pages: u64,
    pub image_pages: u64,
    pub meta_pages: u64,
    pub num_physpages: u64,
    pub arch_magic: u64,
    pub e820_checksum: u64,
    /// Unique pages per compressed chunk.
    pub chunk_pages: u32,
    pub chunk_count: u64,
    pub identity: Identity,
    pub stream_header_hash: [u8; HASH_LEN],
    /// BLAKE3 of the page index and offset table.
    pub index_hash: [u8; HASH_LEN],
    pub compression: Compression,
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
    /// A lazy image's swap region; `None` for a full image.
    pub swap: Option<SwapRegion>,
    /// What the image is bound to (`None` in images written before bindings).
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

fn get_array<const N: usize>(b: &[u8], o: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[o..o + N]);
    a
}

fn get_str(b: &[u8], o: usize) -> String {
    let field = &b[o..o + off::STRING_LEN];
    let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

fn inconsistent(reason: String) -> ImageError {
    ImageError::Inconsistent { reason }
}

impl Header {
    /// Whether the boot-once flag is set.
    pub fn invalidated(&self) -> bool {
        self.flags & FLAG_INVALIDATED != 0
    }

    /// Encode into a full slot, checksum included.
    pub fn encode(&self) -> Result<Vec<u8>, ImageError> {
        check_identity(&self.identity)?;
        let mut b = vec![0u8; SLOT_SIZE as usize];
        let swap = self.swap.unwrap_or(SwapRegion {
            offset: 0,
            bytes: 0,
            used_pages: 0,
            uuid: [0; UUID_LEN],
            verity: None,
        });
        for (o, v) in [
            (off::GENERATION, self.generation),
            (off::FLAGS, self.flags),
            (off::CREATED, self.created_unix),
            (off::AREA_OFFSET, self.area_offset),
            (off::IMAGE_BYTES, self.image_bytes),
            (off::STREAM_PAGES, self.stream_pages),
            (off::IMAGE_PAGES, self.image_pages),
            (off::META_PAGES, self.meta_pages),
            (off::NUM_PHYSPAGES, self.num_physpages),
            (off::RAM_BYTES, self.identity.ram_bytes),
            (off::ARCH_MAGIC, self.arch_magic),
            (off::E820, self.e820_checksum),
            (off::CHUNK_COUNT, self.chunk_count),
            (off::INDEX_BYTES, self.index_bytes),
            (off::TABLE_BYTES, self.table_bytes),
            (off::DATA_BYTES, self.data_bytes),
            (off::ZERO_PAGES, self.zero_pages),
            (off::DUP_PAGES, self.dup_pages),
            (off::UNIQUE_PAGES, self.unique_pages),
            (off::SWAP_OFFSET, swap.offset),
            (off::SWAP_BYTES, swap.bytes),
            (off::SWAP_USED_PAGES, swap.used_pages),
        ] {
            b[o..o + 8].copy_from_slice(&v.to_le_bytes());
        }
        let (compressor, level) = self.compression.code();
        for (o, v) in [
            (off::VERSION, FORMAT_VERSION),
            (off::HEADER_SIZE, SLOT_SIZE as u32),
            (off::CHUNK_PAGES, self.chunk_pages),
            (off::COMPRESSOR, compressor),
            (off::LEVEL, level as u32),
        ] {
            b[o..o + 4].copy_from_slice(&v.to_le_bytes());
        }
        b[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC);
        b[off::SWAP_UUID..off::SWAP_UUID + UUID_LEN].copy_from_slice(&swap.uuid);
        if let Some(v) = &swap.verity {
            b[off::VERITY_DATA_BLOCKS..off::VERITY_DATA_BLOCKS + 8]
                .copy_from_slice(&v.data_blocks.to_le_bytes());
            b[off::VERITY_HASH_START..off::VERITY_HASH_START + 8]
                .copy_from_slice(&v.hash_start.to_le_bytes());
            b[off::VERITY_ROOT..off::VERITY_ROOT + 32].copy_from_slice(&v.root);
            b[off::VERITY_SALT..off::VERITY_SALT + 32].copy_from_slice(&v.salt);
        }
        if let Some(binding) = &self.binding {
            let rec = binding
                .encode(BINDING_ROOM)
                .map_err(|e| inconsistent(e.to_string()))?;
            b[off::BINDING_LEN..off::BINDING_LEN + 4]
                .copy_from_slice(&(rec.len() as u32).to_le_bytes());
            b[off::BINDING..off::BINDING + rec.len()].copy_from_slice(&rec);
        }
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
        b[off::INDEX_HASH..off::INDEX_HASH + HASH_LEN].copy_from_slice(&self.index_hash);
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
        let (compressor, level) = (get_u32(b, off::COMPRESSOR), get_u32(b, off::LEVEL) as i32);
        let compression = Compression::from_code(compressor, level).ok_or_else(|| {
            inconsistent(format!("unknown compressor {compressor} (level {level})"))
        })?;
        let binding_len = get_u32(b, off::BINDING_LEN) as usize;
        let binding = if binding_len == 0 {
            None
        } else if binding_len > BINDING_ROOM {
            return Err(inconsistent(format!(
                "binding of {binding_len} bytes, the slot has room for {BINDING_ROOM}"
            )));
        } else {
            let rec = &b[off::BINDING..off::BINDING + binding_len];
            Some(Binding::decode(rec).map_err(|e| inconsistent(e.to_string()))?)
        };
        let swap = decode_swap(b)?;
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
                ram_bytes: get_u64(b, off::RAM_BYTES),
            },
            stream_header_hash: get_array(b, off::STREAM_HEADER_HASH),
            index_hash: get_array(b, off::INDEX_HASH),
            compression,
            index_bytes: get_u64(b, off::INDEX_BYTES),
            table_bytes: get_u64(b, off::TABLE_BYTES),
            data_bytes: get_u64(b, off::DATA_BYTES),
            zero_pages: get_u64(b, off::ZERO_PAGES),
            dup_pages: get_u64(b, off::DUP_PAGES),
            unique_pages: get_u64(b, off::UNIQUE_PAGES),
            swap,
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
        self.check_sizes()?;
        if self.area_offset < AREAS_START || self.area_offset & (PAGE_SIZE as u64 - 1) != 0 {
            return Err(inconsistent(format!(
                "area offset {} is not a page after the slots",
                self.area_offset
            )));
        }
        let Some(image_end) = self.area_offset.checked_add(self.image_bytes) else {
            return Err(inconsistent("area offset + image size overflows".into()));
        };
        match self.swap {
            Some(s) if s.offset < image_end => Err(inconsistent(format!(
                "swap_offset {} overlaps the image (area_offset {} + image_bytes {})",
                s.offset, self.area_offset, self.image_bytes
            ))),
            _ => Ok(()),
        }
    }

    /// Page counts, chunk count and region sizes agree with each other.
    fn check_sizes(&self) -> Result<(), ImageError> {
        if self.chunk_pages == 0 || self.chunk_pages > MAX_CHUNK_PAGES {
            return Err(inconsistent(format!(
                "chunk size of {} pages",
                self.chunk_pages
            )));
        }
        let counted = self
            .zero_pages
            .checked_add(self.dup_pages)
            .and_then(|n| n.checked_add(self.unique_pages));
        if counted != Some(self.stream_pages) || self.unique_pages == 0 {
            return Err(inconsistent(format!(
                "zero {} + duplicate {} + unique {} pages != stream pages {}",
                self.zero_pages, self.dup_pages, self.unique_pages, self.stream_pages
            )));
        }
        let need = self.unique_pages.div_ceil(u64::from(self.chunk_pages));
        if need != self.chunk_count {
            return Err(inconsistent(format!(
                "chunk count {} but {} unique pages need {need}",
                self.chunk_count, self.unique_pages
            )));
        }
        let layout = Layout::new(self.stream_pages, self.chunk_pages);
        if layout.map(|l| (l.index_bytes, l.table_bytes))
            != Some((self.index_bytes, self.table_bytes))
        {
            return Err(inconsistent(format!(
                "index/table sizes {}/{} do not match {} stream pages",
                self.index_bytes, self.table_bytes, self.stream_pages
            )));
        }
        let max_data = self.unique_pages.checked_mul(PAGE_SIZE as u64);
        if self.data_bytes < self.chunk_count
            || !matches!(max_data, Some(m) if self.data_bytes <= m)
        {
            return Err(inconsistent(format!(
                "{} bytes of chunk data for {} chunks of {} unique pages",
                self.data_bytes, self.chunk_count, self.unique_pages
            )));
        }
        let total = self
            .index_bytes
            .checked_add(self.table_bytes)
            .and_then(|n| n.checked_add(self.data_bytes));
        if total != Some(self.image_bytes) {
            return Err(inconsistent(format!(
                "image size {} bytes != index + table + data",
                self.image_bytes
            )));
        }
        Ok(())
    }

    /// What the page index and offset table must describe.
    pub fn counts(&self) -> Counts {
        Counts {
            stream_pages: self.stream_pages,
            chunk_pages: self.chunk_pages,
            chunk_count: self.chunk_count,
            zero_pages: self.zero_pages,
            dup_pages: self.dup_pages,
            unique_pages: self.unique_pages,
            data_bytes: self.data_bytes,
        }
    }

    /// Bytes of store this image needs: up to the end of the image in its
    /// area, or of its swap region if that ends later. A reader requires
    /// `store_end() <= store size` ([`ImageError::Truncated`]).
    pub fn store_end(&self) -> u64 {
        let image = self.area_offset.saturating_add(self.image_bytes);
        match self.swap {
            Some(s) => image.max(s.offset.saturating_add(s.bytes)),
            None => image,
        }
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
            chunk_table_blake3: hex(&self.index_hash),
            stats: ImageStats {
                raw_pages: self.stream_pages,
                zero_pages: self.zero_pages,
                duplicate_pages: self.dup_pages,
                unique_pages: self.unique_pages,
                raw_bytes: self.stream_pages.saturating_mul(PAGE_SIZE as u64),
                stored_bytes: self.data_bytes,
                a_dedupe_bytes: self.unique_pages.saturating_mul(PAGE_SIZE as u64),
                compressor: self.compression.name(),
                level: self.compression.level(),
                chunk_count: self.chunk_count,
            },
            swap: self.swap.as_ref().map(SwapInfo::from),
            verified: false,
        }
    }
}

/// The verity fields: `None` when all are zero.
fn decode_verity(b: &[u8]) -> Option<SwapVerity> {
    let v = SwapVerity {
        data_blocks: get_u64(b, off::VERITY_DATA_BLOCKS),
        hash_start: get_u64(b, off::VERITY_HASH_START),
        root: get_array(b, off::VERITY_ROOT),
        salt: get_array(b, off::VERITY_SALT),
    };
    let zero = v.data_blocks == 0 && v.hash_start == 0 && v.root == [0; 32] && v.salt == [0; 32];
    (!zero).then_some(v)
}

/// The swap fields: all zero for a full image, else a region that passes
/// [`SwapRegion::problem`].
fn decode_swap(b: &[u8]) -> Result<Option<SwapRegion>, ImageError> {
    let region = SwapRegion {
        offset: get_u64(b, off::SWAP_OFFSET),
        bytes: get_u64(b, off::SWAP_BYTES),
        used_pages: get_u64(b, off::SWAP_USED_PAGES),
        uuid: get_array(b, off::SWAP_UUID),
        verity: decode_verity(b),
    };
    if region.bytes == 0 {
        if region.offset != 0
            || region.used_pages != 0
            || region.uuid != [0; UUID_LEN]
            || region.verity.is_some()
        {
            return Err(inconsistent(format!(
                "swap_bytes is 0 (full image) but swap_offset {}, swap_used_pages {} \
                 or swap_uuid {} is not zero",
                region.offset,
                region.used_pages,
                hex(&region.uuid)
            )));
        }
        return Ok(None);
    }
    match region.problem() {
        None => Ok(Some(region)),
        Some(p) => Err(inconsistent(format!("swap region: {p}"))),
    }
}
