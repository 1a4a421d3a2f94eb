//! Every way a store or an image can fail, with a reason a user can read.
//!
//! Messages never repeat their `#[source]`: a caller that wants the whole chain walks
//! `source()`.

use std::io;
use thiserror::Error;

use crate::kstream::StreamError;
use crate::layout::{Slot, FORMAT_VERSION, MAX_IDENTITY_LEN};

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
        "image format version {found} is not supported (this build reads version {FORMAT_VERSION})"
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
        /// [`crate::MIN_STORE_SIZE`].
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
    /// A compressed image outgrew its area while being written; the
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
    /// A chunk passed its checksum but does not decompress to its size.
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
