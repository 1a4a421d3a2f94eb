//! Why an initramfs does not unpack: one error, whose variant says which step failed and
//! carries the offsets (in the bytes handed in, and in a compressed stream's output).

use crate::compression::Compression;
use alloc::string::String;
use core::fmt;

/// Where an entry lies: a byte of the bytes handed in, or of what a compressed stream
/// starting at a byte of them unpacked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Bytes from the start of its stream.
    pub at: usize,
    /// The compressed stream it lies in and where that starts; `None`: the bytes handed in.
    pub stream: Option<(Compression, usize)>,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.stream {
            None => write!(f, "byte {}", self.at),
            Some((format, start)) => {
                write!(f, "byte {} of the {format} stream at byte {start}", self.at)
            }
        }
    }
}

/// Why the bytes do not unpack to a root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    /// A compressed stream no decoder here reads.
    #[error(
        "its archive at byte {at} is {format}-compressed: not supported by the initramfs \
         reader (it unpacks gzip, zstd and lz4)"
    )]
    Unsupported {
        /// Where the stream starts.
        at: usize,
        /// The compression its magic names.
        format: Compression,
    },
    /// Bytes that start neither an archive, nor a compressed stream, nor padding.
    #[error("byte {at} starts no cpio archive and no compressed stream (magic {magic:02x?})")]
    Unknown {
        /// Where.
        at: usize,
        /// The first bytes found there.
        magic: [u8; 6],
    },
    /// A compressed stream is damaged or cut short.
    #[error("the {format} stream at byte {at} is damaged: {why}")]
    Stream {
        /// Where the stream starts.
        at: usize,
        /// Its compression.
        format: Compression,
        /// What its decoder says.
        why: String,
    },
    /// Decompressing would take more than the limit.
    #[error(
        "the {format} stream at byte {at} unpacks past the limit: {unpacked} bytes, \
         more than the {limit} allowed for the whole initramfs"
    )]
    TooLarge {
        /// Where the stream starts.
        at: usize,
        /// Its compression.
        format: Compression,
        /// The bytes unpacked when it stopped (every stream's so far).
        unpacked: usize,
        /// The limit on every stream's output together.
        limit: usize,
    },
    /// An entry is damaged or cut short, or an archive does not start where one must.
    #[error("the cpio entry at {place} is damaged: {why}")]
    Damaged {
        /// The entry's header.
        place: Place,
        /// What is wrong.
        why: &'static str,
    },
    /// A `070702` entry's data does not sum to its header's check field.
    #[error(
        "the cpio entry at {place} (/{path}) fails its checksum: the header says {want:#010x}, \
         the data sums to {got:#010x}"
    )]
    Checksum {
        /// The entry's header.
        place: Place,
        /// Its path.
        path: String,
        /// The header's check field.
        want: u32,
        /// The sum of its data bytes.
        got: u32,
    },
}
