//! What an image is and what it belongs to, as callers see it: the identity recorded at
//! capture, the report `snapboot image inspect` prints, and the state of a header slot.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::binding::Binding;
use crate::error::{ImageError, Incompat};
use crate::layout::{Slot, MAX_IDENTITY_LEN};
use crate::swap::{SwapRegion, UUID_LEN};

/// The kernel and machine an image belongs to, as recorded at capture and as
/// found at resume (`uname -r`, `uname -v`, `uname -m`, the firmware's RAM size).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `uname -r`.
    pub release: String,
    /// `uname -v` (build number and date: distinguishes rebuilds).
    pub version: String,
    /// `uname -m`.
    pub machine: String,
    /// RAM size in bytes (capture and resume must use the same source,
    /// snapboot sums the "System RAM" ranges of /proc/iomem).
    pub ram_bytes: u64,
}

/// What the capture side knows besides the stream itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureMeta {
    /// The running kernel and machine.
    pub identity: Identity,
    /// Creation time, unix seconds.
    pub created_unix: u64,
    /// What the image is bound to besides kernel and RAM (format version 2 records it).
    pub binding: Option<Binding>,
}

/// Compare an image with the running system, naming the first field that differs.
pub fn check_compat(image: &ImageInfo, running: &Identity) -> Result<(), Incompat> {
    check_identity_compat(&image.identity, running)
}

/// Compare the identity an image records with the running system's (any store format).
pub fn check_identity_compat(im: &Identity, running: &Identity) -> Result<(), Incompat> {
    for (field, a, b) in [
        ("release", &im.release, &running.release),
        ("version", &im.version, &running.version),
        ("machine", &im.machine, &running.machine),
    ] {
        if a != b {
            return Err(Incompat::KernelMismatch {
                field,
                image: a.clone(),
                running: b.clone(),
            });
        }
    }
    if im.ram_bytes != running.ram_bytes {
        return Err(Incompat::RamMismatch {
            image: im.ram_bytes,
            running: running.ram_bytes,
        });
    }
    Ok(())
}

/// Identity strings must fit their header fields and contain no NUL.
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
    /// Bytes of chunk data actually stored (after compression).
    pub stored_bytes: u64,
    /// A: bytes after in-memory dedupe and zero removal (`unique_pages * 4096`).
    pub a_dedupe_bytes: u64,
    /// `none`, `lz4` or `zstd`.
    pub compressor: &'static str,
    /// zstd level, if zstd.
    pub level: Option<i32>,
    /// Compressed chunks of unique pages.
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
    /// Bytes of the image in its area: page index + offset table + chunk data.
    pub image_bytes: u64,
    /// Unique pages per compressed chunk.
    pub chunk_pages: u32,
    /// Compressed chunks.
    pub chunk_count: u64,
    /// BLAKE3 of the stream header page, hex.
    pub stream_header_blake3: String,
    /// BLAKE3 of the page index and offset table, hex (the JSON name predates format 2).
    pub chunk_table_blake3: String,
    /// Page, dedupe and compression figures.
    pub stats: ImageStats,
    /// Lazy image: the swap region the kernel pages the rest of memory in
    /// from after restore. `None` for full images.
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
    /// The dm-verity tree page-ins are checked against; `None`: not verified.
    pub verity: Option<VerityInfo>,
}

/// A lazy image's dm-verity tree, as [`ImageInfo`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerityInfo {
    /// Data blocks (pages) covered from the start of the swap area.
    pub data_blocks: u64,
    /// First block of the tree in the region.
    pub hash_start: u64,
    /// Root digest (SHA-256), hex.
    pub root: String,
    /// Salt, hex.
    pub salt: String,
}

impl From<&SwapRegion> for SwapInfo {
    fn from(r: &SwapRegion) -> Self {
        SwapInfo {
            offset: r.offset,
            bytes: r.bytes,
            used_pages: r.used_pages,
            uuid: format_uuid(&r.uuid),
            verity: r.verity.as_ref().map(|v| VerityInfo {
                data_blocks: v.data_blocks,
                hash_start: v.hash_start,
                root: crate::binding::hex(&v.root),
                salt: crate::binding::hex(&v.salt),
            }),
        }
    }
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 || !b.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl SwapInfo {
    /// The 16 UUID bytes back from [`SwapInfo::uuid`] (hyphens optional);
    /// all zero if the string is not 32 hex digits.
    pub fn uuid_bytes(&self) -> [u8; UUID_LEN] {
        parse_uuid(&self.uuid).unwrap_or([0; UUID_LEN])
    }

    /// The region as a [`SwapRegion`].
    pub fn region(&self) -> SwapRegion {
        SwapRegion {
            offset: self.offset,
            bytes: self.bytes,
            used_pages: self.used_pages,
            uuid: self.uuid_bytes(),
            verity: self.verity.as_ref().and_then(|v| {
                Some(crate::verity::SwapVerity {
                    data_blocks: v.data_blocks,
                    hash_start: v.hash_start,
                    root: unhex32(&v.root)?,
                    salt: unhex32(&v.salt)?,
                })
            }),
        }
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, bytes in order.
pub(crate) fn format_uuid(u: &[u8; UUID_LEN]) -> String {
    let h = crate::binding::hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn parse_uuid(s: &str) -> Option<[u8; UUID_LEN]> {
    let digits: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
    if digits.len() != 2 * UUID_LEN || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut out = [0u8; UUID_LEN];
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
