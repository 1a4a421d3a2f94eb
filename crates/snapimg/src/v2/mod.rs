//! snapboot image container, format version 2: zero pages, dedupe, compressed chunks.
//!
//! Same store, slots, header slot and atomic publication as version 1 (see
//! [`crate::v1`]); only the image area differs. Every stream page (header
//! page, PFN index and data pages alike) gets one 8-byte entry in a *page
//! index*: all-zero pages are flagged and not stored, a page identical to an
//! earlier one points at that page, and every other ("unique") page is
//! stored, in stream order, in *chunks* of [`DEFAULT_CHUNK_PAGES`] pages that
//! are compressed independently (LZ4 block format by default, zstd as an
//! option). An *offset table* gives each chunk's byte offset, stored length,
//! raw length and an XXH3-128 of its stored bytes, so any page can be found
//! and checked without reading the chunks before it ([`Reader::page_at`]).
//!
//! ```text
//! area offset          contents
//! 0                    page index     (stream_pages x 8 bytes, zero-padded to a page)
//! index_bytes          offset table   (ceil(stream_pages / chunk_pages) x 32 bytes, padded)
//! index + table bytes  chunk data     (chunks back to back, data_bytes in total)
//! ```
//!
//! The writer compresses chunks on worker threads while the caller keeps
//! pushing pages, and writes finished chunks in order; the reader reads
//! ahead, checks and decompresses chunks on worker threads and hands pages
//! out in order. The full layout is in `docs/image-format.md`.
//!
//! A *lazy* image also records a [`SwapRegion`]: the last bytes of its own
//! area, where the kernel paged user memory out to just before capture.
//! [`crate::Store::plan_swap`] reserves it (and clears the target slot), the
//! writer keeps the image in front of it ([`WriteOptions::swap`]), the header
//! records and validates it, and readers require the store to hold it.

mod codec;
mod pool;
mod reader;
mod writer;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod swap_tests;
#[cfg(test)]
pub(crate) mod tests;

use serde::Serialize;

use crate::kstream::PAGE_SIZE;
use crate::v1::{ImageError, Slot};

pub use reader::Reader;
pub use writer::Writer;

/// The format version this module writes.
pub const FORMAT_VERSION: u32 = 2;
/// Unique pages per compressed chunk by default (128 KiB of input).
pub const DEFAULT_CHUNK_PAGES: u32 = 32;
/// Largest chunk accepted (4 MiB of input), so a chunk buffer is always small.
pub const MAX_CHUNK_PAGES: u32 = 1024;
/// Bytes of one page index entry.
pub const INDEX_ENTRY_LEN: u64 = 8;
/// Bytes of one offset table entry.
pub const TABLE_ENTRY_LEN: u64 = 32;
/// Default bound on the bytes of recent chunks the writer keeps for dedupe
/// comparisons (and the reader for pages that duplicates point at).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Smallest swap region of a lazy image, in pages (the kernel refuses smaller swap areas).
pub const MIN_SWAP_PAGES: u64 = 10;
/// Pages of an area [`crate::Store::plan_swap`] always leaves to the image.
pub const SWAP_IMAGE_RESERVE_PAGES: u64 = 64;

/// Page index entry kinds (bits 63..62 of an entry).
pub(crate) mod entry {
    /// Bits holding the kind.
    pub const KIND_SHIFT: u32 = 62;
    /// Stored in chunk `bits 61..16`, slot `bits 15..0`.
    pub const DATA: u64 = 0;
    /// All-zero page, not stored; the other bits are zero.
    pub const ZERO: u64 = 1;
    /// Same bytes as stream page `bits 61..0`, an earlier data entry.
    pub const DUP: u64 = 2;
    /// Mask of the payload bits.
    pub const PAYLOAD: u64 = (1 << KIND_SHIFT) - 1;
    /// Bits of the slot in a data entry.
    pub const SLOT_BITS: u32 = 16;

    /// Entry of a stored page.
    pub fn data(chunk: u64, slot: u64) -> u64 {
        (DATA << KIND_SHIFT) | (chunk << SLOT_BITS) | slot
    }
    /// Entry of an all-zero page.
    pub fn zero() -> u64 {
        ZERO << KIND_SHIFT
    }
    /// Entry of a page equal to stream page `j`.
    pub fn dup(j: u64) -> u64 {
        (DUP << KIND_SHIFT) | j
    }
}

/// How chunks are compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Compression {
    /// Stored raw: zero pages and duplicates still cost nothing, unique pages are read as
    /// they are. Fastest where the CPU is slower than the storage.
    None,
    /// LZ4 block format (`lz4_flex`): fastest to decompress, the default.
    #[default]
    Lz4,
    /// zstd at `level` (1..=22; negative levels are faster): smaller, slower.
    Zstd {
        /// zstd compression level.
        level: i32,
    },
}

impl Compression {
    /// The header's compressor code and level.
    pub(crate) fn code(self) -> (u32, i32) {
        match self {
            Compression::None => (0, 0),
            Compression::Lz4 => (1, 0),
            Compression::Zstd { level } => (2, level),
        }
    }

    /// Decode the header's compressor code and level.
    pub(crate) fn from_code(code: u32, level: i32) -> Option<Self> {
        match (code, level) {
            (0, 0) => Some(Compression::None),
            (1, 0) => Some(Compression::Lz4),
            (2, l) if (-131072..=22).contains(&l) => Some(Compression::Zstd { level: l }),
            _ => None,
        }
    }

    /// `none`, `lz4` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd { .. } => "zstd",
        }
    }

    /// The zstd level, if zstd.
    pub fn level(self) -> Option<i32> {
        match self {
            Compression::None | Compression::Lz4 => None,
            Compression::Zstd { level } => Some(level),
        }
    }
}

/// Worker threads by default: one per available CPU.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How [`Writer`] builds an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Chunk compression.
    pub compression: Compression,
    /// Unique pages per chunk, 1..=[`MAX_CHUNK_PAGES`].
    pub chunk_pages: u32,
    /// Compression threads; 0 compresses on the calling thread. At most
    /// `2 * max(threads, 1)` chunks are in flight.
    pub threads: usize,
    /// Bytes of recent raw chunks kept to compare dedupe candidates with: a
    /// page whose earlier twin is no longer held is stored again.
    pub dedupe_cache_bytes: usize,
    /// Lazy image: the swap region reserved at the end of the target area
    /// (from [`crate::Store::plan_swap`]). The image must then fit in front
    /// of it (`swap.offset - area_offset` bytes), and the header records it.
    pub swap: Option<SwapRegion>,
}

/// The swap region of a lazy image: the last `bytes` of the image's own area,
/// which the kernel paged user memory out to just before capture and pages it
/// back in from after restore (docs/image-format.md §6, "Lazy images").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapRegion {
    /// Byte offset of the region in the store (a multiple of 4096).
    pub offset: u64,
    /// Bytes of the region (a multiple of 4096, at least [`MIN_SWAP_PAGES`] pages).
    pub bytes: u64,
    /// Pages the kernel had swapped out into the region at capture
    /// (less than the region's pages: the first one is the swap header).
    pub used_pages: u64,
    /// The UUID written into the region's swap header page.
    pub uuid: [u8; 16],
}

impl SwapRegion {
    /// Byte offset just past the region, `None` if that overflows.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.bytes)
    }

    /// Error with [`ImageError::BadSwapRegion`] unless the region is page
    /// aligned, at least [`MIN_SWAP_PAGES`] pages, and `used_pages` is
    /// less than its pages (the header checks the same on decoding).
    pub fn check(&self) -> Result<(), ImageError> {
        let page = PAGE_SIZE as u64;
        let bad = |reason: String| Err(ImageError::BadSwapRegion { reason });
        if (self.offset | self.bytes) & (page - 1) != 0 {
            return bad(format!(
                "offset {} and size {} must be multiples of 4096",
                self.offset, self.bytes
            ));
        }
        let pages = self.bytes / page;
        if pages < MIN_SWAP_PAGES {
            return bad(format!(
                "{} bytes ({pages} pages) is smaller than {MIN_SWAP_PAGES} pages",
                self.bytes
            ));
        }
        if self.used_pages >= pages {
            return bad(format!(
                "{} used pages do not fit a region of {pages} pages (one is the swap header)",
                self.used_pages
            ));
        }
        if self.end().is_none() {
            return bad(format!(
                "offset {} + size {} overflows",
                self.offset, self.bytes
            ));
        }
        Ok(())
    }
}

/// Where [`crate::Store::plan_swap`] put the swap region of the next (lazy) image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapPlan {
    /// Slot (and area) the next writer will use; its header was cleared.
    pub slot: Slot,
    /// Byte offset of that area in the store.
    pub area_offset: u64,
    /// Byte offset of the region in the store: `area_offset + area_capacity - bytes`.
    pub offset: u64,
    /// Bytes of the region (whole pages).
    pub bytes: u64,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            compression: Compression::Lz4,
            chunk_pages: DEFAULT_CHUNK_PAGES,
            threads: default_threads(),
            dedupe_cache_bytes: DEFAULT_CACHE_BYTES,
            swap: None,
        }
    }
}

impl WriteOptions {
    /// Error with [`ImageError::BadOptions`] if a value is out of range, or
    /// [`ImageError::BadSwapRegion`] (see [`SwapRegion::check`]). Whether the
    /// region lies inside the target area is checked by
    /// [`crate::Store::writer_with`], which knows the area.
    pub fn check(&self) -> Result<(), ImageError> {
        if self.chunk_pages == 0 || self.chunk_pages > MAX_CHUNK_PAGES {
            return Err(ImageError::BadOptions {
                reason: format!(
                    "chunk_pages is {}, must be 1..={MAX_CHUNK_PAGES}",
                    self.chunk_pages
                ),
            });
        }
        let (code, level) = self.compression.code();
        if Compression::from_code(code, level).is_none() {
            return Err(ImageError::BadOptions {
                reason: format!("zstd level {level} is not supported"),
            });
        }
        if let Some(swap) = &self.swap {
            swap.check()?;
        }
        Ok(())
    }
}

/// How [`Reader`] streams an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Decompression threads; 0 reads and decompresses on the calling
    /// thread. Read-ahead is `2 * max(threads, 1)` chunks.
    pub threads: usize,
    /// Bytes of pages kept for later duplicates while streaming; a duplicate
    /// whose page is not held is fetched again (slower, still correct).
    pub dup_cache_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            threads: default_threads(),
            dup_cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

/// Region sizes of an image area, fixed by the stream's page count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bytes of the page index region.
    pub index_bytes: u64,
    /// Bytes of the offset table region (room for the most chunks possible).
    pub table_bytes: u64,
}

impl Layout {
    /// Layout for `stream_pages` pages in chunks of `chunk_pages`.
    pub fn new(stream_pages: u64, chunk_pages: u32) -> Option<Layout> {
        let page = PAGE_SIZE as u64;
        let max_chunks = stream_pages.div_ceil(u64::from(chunk_pages.max(1)));
        Some(Layout {
            index_bytes: stream_pages
                .checked_mul(INDEX_ENTRY_LEN)?
                .checked_next_multiple_of(page)?,
            table_bytes: max_chunks
                .checked_mul(TABLE_ENTRY_LEN)?
                .checked_next_multiple_of(page)?,
        })
    }

    /// Offset of the chunk data in the area.
    pub fn data_offset(&self) -> u64 {
        self.index_bytes + self.table_bytes
    }
}

/// One offset table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkEntry {
    /// Byte offset from the start of the chunk data.
    pub offset: u64,
    /// Bytes stored; equal to `raw_len` means stored uncompressed.
    pub stored_len: u32,
    /// Bytes after decompression (pages * 4096).
    pub raw_len: u32,
    /// XXH3-128 of the stored bytes.
    pub hash: u128,
}

impl ChunkEntry {
    /// Encode into 32 bytes.
    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..12].copy_from_slice(&self.stored_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        out[16..32].copy_from_slice(&self.hash.to_le_bytes());
    }

    /// Decode 32 bytes.
    pub fn decode(b: &[u8]) -> ChunkEntry {
        let mut h = [0u8; 16];
        h.copy_from_slice(&b[16..32]);
        let u32_at = |o: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(a)
        };
        ChunkEntry {
            offset: crate::kstream::le_u64(b, 0),
            stored_len: u32_at(8),
            raw_len: u32_at(12),
            hash: u128::from_le_bytes(h),
        }
    }
}

/// The checksum of a chunk's stored bytes.
pub(crate) fn chunk_hash(stored: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(stored)
}
