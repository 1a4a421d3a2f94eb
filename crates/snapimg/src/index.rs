//! The page index and the offset table: the two regions at the front of an image area
//! that say where every stream page is. Encoded by the writer and decoded (and validated)
//! by the reader, here in one place.
//!
//! ```text
//! area offset          contents
//! 0                    page index     (stream_pages x 8 bytes, zero-padded to a page)
//! index_bytes          offset table   (ceil(stream_pages / chunk_pages) x 32 bytes, padded)
//! index + table bytes  chunk data     (chunks back to back, data_bytes in total)
//! ```

use crate::error::ImageError;
use crate::kstream::PAGE_SIZE;

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

/// A resolved page index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entry {
    /// All-zero page, not stored.
    Zero,
    /// Stored in chunk `k`, slot `s`; `dup` if an earlier page stored it.
    Stored { k: u64, s: u64, dup: bool },
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

/// The page index and offset table of an image, encoded into the `layout.data_offset()`
/// bytes at the front of its area (padding zero).
pub(crate) fn encode(layout: &Layout, index: &[u64], table: &[ChunkEntry]) -> Option<Vec<u8>> {
    let mut meta = vec![0u8; usize::try_from(layout.data_offset()).ok()?];
    let (index_region, table_region) = meta.split_at_mut(usize::try_from(layout.index_bytes).ok()?);
    if index.len() * INDEX_ENTRY_LEN as usize > index_region.len()
        || table.len() * TABLE_ENTRY_LEN as usize > table_region.len()
    {
        return None;
    }
    for (out, e) in index_region
        .chunks_exact_mut(INDEX_ENTRY_LEN as usize)
        .zip(index)
    {
        out.copy_from_slice(&e.to_le_bytes());
    }
    for (out, e) in table_region
        .chunks_exact_mut(TABLE_ENTRY_LEN as usize)
        .zip(table)
    {
        e.encode(out);
    }
    Some(meta)
}

fn bad(reason: String) -> ImageError {
    ImageError::Inconsistent { reason }
}

/// What the header says the page index and offset table must describe (checked
/// against every entry when they are decoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Pages of the kernel stream: one index entry each.
    pub stream_pages: u64,
    /// Unique pages per chunk.
    pub chunk_pages: u32,
    /// Chunks: one offset table entry each.
    pub chunk_count: u64,
    /// Entries flagged zero.
    pub zero_pages: u64,
    /// Entries pointing at an earlier page.
    pub dup_pages: u64,
    /// Entries stored in chunks.
    pub unique_pages: u64,
    /// Bytes of chunk data the table must cover.
    pub data_bytes: u64,
}

/// Decode and validate the page index.
pub(crate) fn decode_index(h: &Counts, index: &[u8]) -> Result<Vec<Entry>, ImageError> {
    let pages = h.stream_pages as usize;
    let cp = u64::from(h.chunk_pages);
    let mut out = Vec::with_capacity(pages);
    let (mut unique, mut zero, mut dup) = (0u64, 0u64, 0u64);
    for (i, raw) in index.chunks_exact(8).enumerate() {
        let e = crate::kstream::le_u64(raw, 0);
        if i >= pages {
            if e != 0 {
                return Err(bad(format!("page index padding entry {i} is not zero")));
            }
            continue;
        }
        let payload = e & entry::PAYLOAD;
        let resolved = match e >> entry::KIND_SHIFT {
            entry::DATA => {
                let (k, s) = (payload >> entry::SLOT_BITS, payload & 0xFFFF);
                if (k, s) != (unique / cp, unique % cp) {
                    return Err(bad(format!(
                        "page index entry {i}: chunk {k} slot {s}, expected unique page {unique}"
                    )));
                }
                unique += 1;
                Entry::Stored { k, s, dup: false }
            }
            entry::ZERO if payload == 0 && i > 0 => {
                zero += 1;
                Entry::Zero
            }
            entry::DUP if (payload as usize) < i => match out[payload as usize] {
                Entry::Stored { k, s, dup: false } => {
                    dup += 1;
                    Entry::Stored { k, s, dup: true }
                }
                _ => {
                    return Err(bad(format!(
                        "page index entry {i}: duplicate of page {payload}, which is not stored"
                    )))
                }
            },
            _ => return Err(bad(format!("page index entry {i} is invalid: {e:#018x}"))),
        };
        out.push(resolved);
    }
    let v = h;
    if out.len() != pages || (unique, zero, dup) != (v.unique_pages, v.zero_pages, v.dup_pages) {
        return Err(bad(format!(
            "page index has {unique} unique, {zero} zero, {dup} duplicate pages; header says {}, {}, {}",
            v.unique_pages, v.zero_pages, v.dup_pages
        )));
    }
    Ok(out)
}

/// Decode and validate the offset table.
pub(crate) fn decode_table(h: &Counts, table: &[u8]) -> Result<Vec<ChunkEntry>, ImageError> {
    let cp = u64::from(h.chunk_pages);
    let count = h.chunk_count as usize;
    let mut out = Vec::with_capacity(count);
    let mut next = 0u64;
    for (k, raw) in table.chunks_exact(TABLE_ENTRY_LEN as usize).enumerate() {
        if k >= count {
            if raw.iter().any(|&b| b != 0) {
                return Err(bad(format!("offset table padding entry {k} is not zero")));
            }
            continue;
        }
        let c = ChunkEntry::decode(raw);
        let pages = cp.min(h.unique_pages - k as u64 * cp);
        let raw_len = pages * PAGE_SIZE as u64;
        if c.offset != next
            || u64::from(c.raw_len) != raw_len
            || c.stored_len == 0
            || c.stored_len > c.raw_len
        {
            return Err(bad(format!(
                "offset table entry {k}: offset {} ({next} expected), {} stored of {} bytes ({raw_len} expected)",
                c.offset, c.stored_len, c.raw_len
            )));
        }
        next += u64::from(c.stored_len);
        out.push(c);
    }
    if out.len() != count || next != h.data_bytes {
        return Err(bad(format!(
            "offset table covers {next} bytes in {} chunks; header says {} in {count}",
            out.len(),
            h.data_bytes
        )));
    }
    Ok(out)
}
