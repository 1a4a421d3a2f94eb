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
    Corrupt(String),
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
    /// A name that cannot be stored.
    #[error("bad image name `{0}`: 1 to 64 characters of [A-Za-z0-9._-]")]
    BadName(String),
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
    #[error("store format version {found} (this build reads {reads})")]
    Version { found: u32, reads: u32 },
    /// The superblock's checksum does not match.
    #[error("superblock checksum mismatch")]
    Checksum,
    /// A geometry no store can have.
    #[error("impossible geometry: {cluster_blocks} blocks per cluster, {clusters} clusters")]
    Geometry { cluster_blocks: u32, clusters: u64 },
}
