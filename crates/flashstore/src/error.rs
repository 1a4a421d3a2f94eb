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
    /// Neither superblock is valid: not a store, or both copies are damaged.
    #[error("no valid superblock: {0}")]
    NoStore(String),
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
