//! What can be wrong with a store's bytes: each a structure and its numbers, so a caller can
//! tell one from another without reading the message; and why an image cannot be read
//! without a device key.

use crate::keyid::KeyId;
use alloc::string::String;

/// What is damaged in a store: each a structure and its numbers, so a caller can tell one
/// from another without reading the message.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// A structure could not be encoded (a store bug, not damage on the medium).
    #[error("cannot encode the {what}: {reason}")]
    Encode {
        what: String,
        reason: postcard::Error,
    },
    /// A structure's bytes do not parse.
    #[error("the {what} does not parse: {reason}")]
    Parse {
        what: String,
        reason: postcard::Error,
    },
    /// The catalog's bytes are not what the superblock's checksum says.
    #[error("catalog checksum mismatch")]
    CatalogChecksum,
    /// The dedupe table's bytes are not what the catalog's checksum says.
    #[error("dedupe table checksum mismatch")]
    DedupeChecksum,
    /// An image's page list is not what the catalog's checksum says.
    #[error("page list of image `{image}`: checksum mismatch")]
    PageListChecksum { image: String },
    /// An image's page list names another image.
    #[error("page list of image `{image}` names image `{named}`")]
    PageListName { image: String, named: String },
    /// An image refers to a chunk the catalog does not have.
    #[error("image `{image}` refers to chunk {chunk}, which the catalog does not have")]
    MissingChunk { image: String, chunk: u64 },
    /// An image refers to a slot past the end of a chunk.
    #[error("image `{image}` refers to slot {slot} of chunk {chunk}, which holds {pages}")]
    SlotOutside {
        image: String,
        chunk: u64,
        slot: u16,
        pages: u16,
    },
    /// A page list refers to a slot a chunk's bytes do not reach.
    #[error("page list refers to slot {slot} of chunk {chunk}, which is shorter")]
    SlotShort { chunk: u64, slot: u16 },
    /// A chunk is read more often than the image's page list uses it.
    #[error("chunk {chunk} used more often than counted")]
    Overused { chunk: u64 },
    /// A chunk's bytes run past its cluster.
    #[error("chunk {chunk} lies outside its cluster {cluster}")]
    ChunkOutside { chunk: u64, cluster: u64 },
    /// A sealed chunk does not open under the device key.
    #[error("chunk {chunk} (cluster {cluster}) does not authenticate under the device key: altered after it was written, or sealed with another key")]
    ChunkSeal { chunk: u64, cluster: u64 },
    /// A sealed page list does not open under the device key.
    #[error("page list of image `{image}` does not authenticate under device key {key}: altered after it was written, or sealed with another key")]
    PageListSeal { image: String, key: KeyId },
    /// A sealed image refers to a chunk that is not sealed (its catalog record was altered).
    #[error("image `{image}` is encrypted but refers to chunk {chunk}, which is not: the catalog was altered")]
    UnsealedChunk { image: String, chunk: u64 },
    /// A chunk's bytes are not what its checksum says.
    #[error("checksum mismatch in chunk {chunk} (cluster {cluster})")]
    ChunkChecksum { chunk: u64, cluster: u64 },
    /// An uncompressed chunk holds another number of bytes than its pages.
    #[error("chunk {chunk} holds {stored} bytes, {pages} pages need {needed}")]
    ChunkSize {
        chunk: u64,
        stored: usize,
        pages: u16,
        needed: usize,
    },
    /// A compressed chunk does not decompress.
    #[error("chunk {chunk} does not decompress: {reason}")]
    Decompress {
        chunk: u64,
        reason: lz4_flex::block::DecompressError,
    },
    /// A compressed chunk decompresses to another number of bytes than its pages.
    #[error("chunk {chunk} decompresses to {got} bytes, not {needed}")]
    DecompressedSize {
        chunk: u64,
        got: usize,
        needed: usize,
    },
    /// A structure's extent lies outside the store.
    #[error("the {what} lies outside the store (clusters {start}..{end} of {clusters})")]
    ExtentOutside {
        what: String,
        start: u64,
        end: u64,
        clusters: u64,
    },
    /// A structure's length does not fit in memory.
    #[error("the {what} is impossibly large")]
    TooLarge { what: String },
    /// A raw region overlaps a cluster in use.
    #[error("raw region at cluster {start} overlaps cluster {cluster}, which is in use")]
    RawOverlap { start: u64, cluster: u64 },
}

/// Why an image cannot be read from its stored bytes by a reader without a device key (the
/// restorer): it is damaged, encrypted, or the caller's buffer is too small.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The image is encrypted: only the device's own resume, which holds the key, opens it.
    #[error("image `{image}` is encrypted with device key {key}: only the device's own resume, which holds the key, can open it")]
    SealedImage {
        /// The image's name.
        image: String,
        /// The key it is sealed with.
        key: KeyId,
    },
    /// A chunk is encrypted (only an encrypted image references one).
    #[error("chunk {chunk} is encrypted: only the device's own resume, which holds the key, can open it")]
    SealedChunk {
        /// The chunk's id.
        chunk: u64,
    },
    /// The buffer given for a chunk's pages is shorter than they are.
    #[error("chunk {chunk} holds {needed} bytes of pages, the buffer for them {len}")]
    Buffer {
        /// The chunk's id.
        chunk: u64,
        /// Its pages times 4096.
        needed: usize,
        /// Bytes of the buffer.
        len: usize,
    },
    /// The bytes are damaged.
    #[error("store is damaged: {0}")]
    Damaged(#[from] Damage),
}
