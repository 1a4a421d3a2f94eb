//! snapboot image container, format version 1, and the store shared by all versions.
//!
//! This module also hosts what every format version shares: the [`Store`]
//! (slots, areas, atomic publication, invalidation), the header slot, the
//! errors and [`ImageInfo`]. [`Store::writer`] writes format version 2
//! ([`crate::v2`]); [`Store::writer_v1`] still writes version 1, and
//! [`Store::reader`] reads both.
//!
//! A *store* is a plain file or a raw block device of fixed size holding two
//! 4 KiB header slots (A at 0, B at 4096) and two image areas (A, B) of equal
//! size after them. Slot A describes the image in area A, slot B the one in
//! area B. A new image is always written into the area of the slot that does
//! *not* hold the newest header: that slot is zeroed first, the image is
//! written and synced, then the new header (generation + 1) is written into
//! the slot and synced. A power cut at any point leaves the previous newest
//! header and its area untouched. Readers take the valid header with the
//! highest generation and never fall back to an older one on their own
//! (`Store::reader_for` exists for explicit fallback).
//!
//! Inside an area: the kernel's stream header page, its PFN index pages, its
//! data pages, then a table of BLAKE3 hashes, one per chunk of up to 256
//! pages (1 MiB). The header holds the hash of the stream header page, the
//! hash of that table, and a BLAKE3 checksum of itself. The full layout is in
//! `docs/image-format.md`.

pub(crate) mod header;
pub(crate) mod reader;
mod store;
mod writer;

#[cfg(test)]
mod tests;

use serde::Serialize;
use std::fmt;
use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use thiserror::Error;

use crate::kstream::StreamError;

pub use header::{ImageInfo, ImageStats, SlotState, StreamCounts, SwapInfo};
pub use reader::Reader;
pub use store::Store;
pub use writer::Writer;

/// Magic at offset 0 of a header slot.
pub const MAGIC: [u8; 8] = *b"SNAPBOOT";
/// The format version this module reads and writes (the store reads 1 and 2).
pub const FORMAT_VERSION: u32 = 1;
/// Size of one header slot.
pub const SLOT_SIZE: u64 = 4096;
/// Offset of the first image area (after both slots).
pub const AREAS_START: u64 = 2 * SLOT_SIZE;
/// Stream pages per checksummed chunk (1 MiB).
pub const CHUNK_PAGES: u32 = 256;
/// Length of every BLAKE3 hash stored (full 256-bit output).
pub const HASH_LEN: usize = 32;
/// Header flag: the image was invalidated (boot-once image already used).
pub const FLAG_INVALIDATED: u64 = 1;
/// Longest identity string accepted (the kernel's utsname fields hold 64).
pub const MAX_IDENTITY_LEN: usize = 64;
/// Smallest store: both slots plus two areas of 16 pages.
pub const MIN_STORE_SIZE: u64 = AREAS_START + 2 * 16 * 4096;

/// Which header slot (and area).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Slot {
    /// Slot at offset 0, area right after the slots.
    A,
    /// Slot at offset 4096, second area.
    B,
}

impl Slot {
    /// Both slots in order.
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];
    /// Byte offset of the slot in the store.
    pub fn offset(self) -> u64 {
        match self {
            Slot::A => 0,
            Slot::B => SLOT_SIZE,
        }
    }
    /// The other slot.
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Slot::A => "A",
            Slot::B => "B",
        })
    }
}

/// The kernel and machine an image belongs to, as recorded at capture and as
/// found at resume (`uname -r`, `uname -v`, `uname -m`, the firmware's RAM size).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    pub binding: Option<crate::Binding>,
}

/// Why an image cannot be restored on the running system.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Incompat {
    /// A kernel identity field differs.
    #[error("kernel {field} differs: image was captured on {image:?}, running {running:?}")]
    KernelMismatch {
        /// `release`, `version` or `machine`.
        field: &'static str,
        /// Value in the image.
        image: String,
        /// Value of the running system.
        running: String,
    },
    /// RAM size differs.
    #[error(
        "RAM size differs: image was captured with {image} bytes, running with {running} bytes"
    )]
    RamMismatch {
        /// Bytes recorded in the image.
        image: u64,
        /// Bytes of the running system.
        running: u64,
    },
}

/// Everything that can go wrong with a store or an image, with a reason a
/// user can read.
#[derive(Debug, Error)]
pub enum ImageError {
    /// The device failed.
    #[error("I/O error while {context}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Neither slot holds a valid header.
    #[error("no snapboot image in the store ({reason})")]
    NoImage {
        /// Per-slot reasons, e.g. "slot A: empty; slot B: checksum mismatch in header".
        reason: String,
    },
    /// A slot does not start with `SNAPBOOT`.
    #[error("not a snapboot header: magic is {found:?}, want \"SNAPBOOT\"")]
    BadMagic {
        /// The 8 bytes found, escaped.
        found: String,
    },
    /// A header of a format version this build does not read.
    #[error(
        "image format version {found} is not supported (this build reads versions {FORMAT_VERSION} and {})",
        crate::v2::FORMAT_VERSION
    )]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
    },
    /// A checksum does not match.
    #[error("checksum mismatch in {section}")]
    ChecksumMismatch {
        /// "header", "stream header", "chunk table", "pfn index",
        /// "chunk 17 (pages 4352..4608)" (data page numbers).
        section: String,
    },
    /// The store ends before the image does.
    #[error("store is truncated: the image needs {expected} bytes of store, it has {actual}")]
    Truncated {
        /// Bytes needed.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The image does not fit into an area.
    #[error("image needs {needed} bytes, store area has {available}")]
    TooLarge {
        /// Bytes the image needs.
        needed: u64,
        /// Bytes of one area (of a lazy image: the part in front of its swap region).
        available: u64,
    },
    /// The store cannot even hold the two slots and minimal areas.
    #[error("store of {size} bytes is too small, need at least {min}")]
    StoreTooSmall {
        /// Store size.
        size: u64,
        /// [`MIN_STORE_SIZE`].
        min: u64,
    },
    /// The newest image was invalidated (boot-once already used).
    #[error(
        "image generation {generation} in slot {slot} was invalidated (its one boot was used)"
    )]
    Invalidated {
        /// Its generation.
        generation: u64,
        /// Its slot.
        slot: Slot,
    },
    /// Header fields contradict each other or the stream.
    #[error("image is inconsistent: {reason}")]
    Inconsistent {
        /// What contradicts what.
        reason: String,
    },
    /// The kernel stream is malformed.
    #[error("invalid kernel stream")]
    Stream(#[from] StreamError),
    /// The image belongs to another kernel or machine.
    #[error(transparent)]
    Incompat(#[from] Incompat),
    /// An identity string is too long to record.
    #[error("{field} is {len} bytes long, the image format allows at most {MAX_IDENTITY_LEN}")]
    FieldTooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// A write was attempted on a store opened read-only.
    #[error("store was opened read-only")]
    ReadOnly,
    /// A compressed image outgrew its area while being written (v2); the
    /// previous image is untouched.
    #[error("image does not fit: {written} bytes needed after {pages} of {total} stream pages, store area has {available}")]
    OutOfSpace {
        /// Bytes of the area the image needs at least.
        written: u64,
        /// Stream pages accepted when it ran out.
        pages: u64,
        /// Stream pages in total.
        total: u64,
        /// Bytes of one area (of a lazy image: the part in front of its swap region).
        available: u64,
    },
    /// A chunk passed its checksum but does not decompress to its size (v2).
    #[error("{section} does not decompress: {reason}")]
    Decompress {
        /// "chunk 17 (stream pages 4352..4608)".
        section: String,
        /// What the decompressor said.
        reason: String,
    },
    /// `page_at` was asked for a page past the end of the stream.
    #[error("stream page {index} requested, the image has {pages} pages")]
    PageOutOfRange {
        /// Requested stream page.
        index: u64,
        /// Pages in the stream.
        pages: u64,
    },
    /// Writer or reader options out of range.
    #[error("invalid options: {reason}")]
    BadOptions {
        /// Which option and why.
        reason: String,
    },
    /// A lazy image's swap region cannot be used: misaligned, too small, too
    /// large for the area, or not inside the area the next image goes to.
    #[error("invalid swap region: {reason}")]
    BadSwapRegion {
        /// What is wrong, with the numbers (and what would fit).
        reason: String,
    },
    /// A compression or decompression worker thread failed.
    #[error("worker thread failed: {reason}")]
    Worker {
        /// What happened.
        reason: String,
    },
    /// The target area overlaps the current image (store was resized).
    #[error(
        "area of slot {slot} overlaps the current image (store resized?); re-format the store"
    )]
    Overlap {
        /// Target slot.
        slot: Slot,
    },
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ImageError {
    let context = context.into();
    move |source| ImageError::Io { context, source }
}

/// Compare an image with the running system, naming the first field that differs.
pub fn check_compat(image: &ImageInfo, running: &Identity) -> Result<(), Incompat> {
    let im = &image.identity;
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

/// The digest of one data chunk, as stored in the chunk table: XXH3-128 (little-endian) in
/// the first 16 bytes, zero in the other 16. Chunks are checked at every power-on, so the
/// checksum must be cheap where the CPU is slow (an XXH3 pass costs a fraction of a BLAKE3
/// pass without SIMD, as on the TCG board); it detects corruption, and the chunk table
/// itself is covered by the header's BLAKE3.
pub fn chunk_digest(data: &[u8]) -> [u8; HASH_LEN] {
    let mut out = [0u8; HASH_LEN];
    out[..16].copy_from_slice(&xxhash_rust::xxh3::xxh3_128(data).to_le_bytes());
    out
}

/// Positional reads that several threads may issue at once (`pread`).
pub trait ReadAt: Send + Sync {
    /// Fill `buf` from byte `offset`, or fail (`UnexpectedEof` past the end).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

/// What a store lives on: a file, a block device, or memory in tests.
pub trait Device: Read + Write + Seek {
    /// Make written data durable (`fdatasync` for files and block devices).
    fn sync(&mut self) -> io::Result<()>;
    /// Size in bytes (seeking to the end works for block devices too).
    fn size(&mut self) -> io::Result<u64> {
        self.seek(SeekFrom::End(0))
    }
    /// A handle that worker threads can read from concurrently, if the device
    /// has one (files and block devices: a duplicated descriptor used with
    /// `pread`). Without it, the reader reads on the calling thread.
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        None
    }
}

impl Device for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        let dup = self.try_clone().ok()?;
        Some(Arc::new(dup))
    }
}

impl Device for Cursor<Vec<u8>> {
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<D: Device + ?Sized> Device for &mut D {
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }
    fn size(&mut self) -> io::Result<u64> {
        (**self).size()
    }
    fn shared_reader(&self) -> Option<Arc<dyn ReadAt>> {
        (**self).shared_reader()
    }
}

/// Section name of chunk `k` of a stream with `meta` index pages and
/// `data` data pages, `chunk` pages per chunk (chunks are numbered index
/// first, then data; data chunks are named by data page numbers).
pub(crate) fn chunk_section(k: u64, meta: u64, data: u64, chunk: u64) -> String {
    let meta_chunks = meta.div_ceil(chunk);
    if k < meta_chunks {
        if meta_chunks == 1 {
            "pfn index".to_string()
        } else {
            let a = k * chunk;
            format!(
                "pfn index part {k} (index pages {a}..{})",
                (a + chunk).min(meta)
            )
        }
    } else {
        let d = k - meta_chunks;
        format!(
            "chunk {d} (pages {}..{})",
            d * chunk,
            ((d + 1) * chunk).min(data)
        )
    }
}
