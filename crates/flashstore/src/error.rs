//! What can go wrong with a store; every variant says what and where.

/// Errors of [`crate::Store`] operations.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading, writing, syncing or discarding failed.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Neither superblock block carries the store's magic: nothing here was made by
    /// `snapboot store init`.
    #[error("no snapboot store here (neither superblock has the store's magic); `snapboot store init` makes one, losing what the device holds")]
    NotAStore,
    /// The two-slot store of an older snapboot.
    #[error("a two-slot store of an older snapboot, which this one no longer reads: make a new store with `snapboot store init` and capture again")]
    LegacyStore,
    /// Both superblocks are damaged.
    #[error("no valid superblock (first: {first}; second: {second})")]
    NoSuperblock {
        first: SuperblockError,
        second: SuperblockError,
    },
    /// The medium is shorter than the store its superblock describes.
    #[error("store is truncated: its superblock describes {needed} bytes, the device has {len}")]
    Truncated { needed: u64, len: u64 },
    /// A structure's checksum or contents do not add up.
    #[error("store is damaged: {0}")]
    Corrupt(#[from] Damage),
    /// The device is too small or the geometry is unusable.
    #[error("bad geometry: {0}")]
    Geometry(String),
    /// Not enough idle clusters for what is being written.
    #[error(
        "store is full: {needed} more cluster(s) needed, {idle} idle (remove an image, then gc)"
    )]
    Full { needed: u64, idle: u64 },
    /// No image of that name.
    #[error("no image named `{0}`")]
    NoImage(String),
    /// The image is pinned and may not be replaced or removed.
    #[error("image `{0}` is pinned (unpin it first)")]
    Pinned(String),
    /// Images on a store whose chunk checksums are not cryptographic cannot be signed.
    #[error(
        "this store checksums chunks with {0}, which a forger can match: signed images need a \
         store made with BLAKE3 chunk checksums (`snapboot store init --checksum blake3`)"
    )]
    NotSignable(&'static str),
    /// A label that cannot be stored.
    #[error("bad store label {0:?}: at most 32 bytes of UTF-8, no spaces or control characters")]
    BadLabel(String),
    /// A name that cannot be stored.
    #[error("bad image name `{0}`: 1 to 64 characters of [A-Za-z0-9._-]")]
    BadName(String),
    /// The image is sealed and the store is not unlocked with a device key.
    #[error("image `{image}` is encrypted with device key {key}, and no device key is at hand to open it")]
    Locked {
        image: String,
        key: crate::keyid::KeyId,
    },
    /// A sealed chunk is to be read and the store is not unlocked.
    #[error("chunk {chunk} is encrypted, and no device key is at hand to open it")]
    LockedChunk { chunk: u64 },
    /// The image is sealed with another key than the one the store is unlocked with.
    #[error("image `{image}` is encrypted with device key {key}, not with this device's key {have}: it was captured under another key (the key was changed, or the store comes from another device)")]
    WrongKey {
        image: String,
        key: crate::keyid::KeyId,
        have: crate::keyid::KeyId,
    },
}

impl StoreError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Io { context, source }
    }
}

/// Why a superblock block is not a valid superblock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuperblockError {
    /// Fewer bytes than a superblock.
    #[error("short block of {len} bytes")]
    Short { len: usize },
    /// Not the store's magic.
    #[error("no store magic")]
    NoMagic,
    /// The header of an older snapboot's two-slot store.
    #[error("a two-slot store of an older snapboot")]
    Legacy,
    /// Another format version.
    #[error("store format version {found} (this build reads {oldest} to {newest})")]
    Version {
        found: u32,
        oldest: u32,
        newest: u32,
    },
    /// The label field is not a label (checked after the checksum: written so by a bug).
    #[error("the label field holds no valid label")]
    Label,
    /// The superblock's checksum does not match.
    #[error("superblock checksum mismatch")]
    Checksum,
    /// A geometry no store can have.
    #[error("impossible geometry: {cluster_blocks} blocks per cluster, {clusters} clusters")]
    Geometry { cluster_blocks: u32, clusters: u64 },
}

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
    PageListSeal {
        image: String,
        key: crate::keyid::KeyId,
    },
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
