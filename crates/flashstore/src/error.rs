//! What can go wrong with a store; every variant says what and where. What is wrong with
//! its bytes ([`Damage`]) and with its superblocks ([`NoStore`], [`SuperblockError`]) is
//! crate `storelayout`'s, whose words these are.

use storelayout::{BadLabel, Damage, KeyId, NoStore, SuperblockError};

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
    #[error("{}", NoStore::NotAStore)]
    NotAStore,
    /// The two-slot store of an older snapboot.
    #[error("{}", NoStore::Legacy)]
    LegacyStore,
    /// Both superblocks are damaged.
    #[error("{}", NoStore::Damaged { first: first.clone(), second: second.clone() })]
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
    #[error("{}", storelayout::DigestError::NotSignable(.0))]
    NotSignable(&'static str),
    /// A label that cannot be stored.
    #[error(transparent)]
    BadLabel(#[from] BadLabel),
    /// A name that cannot be stored.
    #[error("bad image name `{0}`: 1 to 64 characters of [A-Za-z0-9._-]")]
    BadName(String),
    /// The image is sealed and the store is not unlocked with a device key.
    #[error("image `{image}` is encrypted with device key {key}, and no device key is at hand to open it")]
    Locked { image: String, key: KeyId },
    /// A sealed chunk is to be read and the store is not unlocked.
    #[error("chunk {chunk} is encrypted, and no device key is at hand to open it")]
    LockedChunk { chunk: u64 },
    /// The image is sealed with another key than the one the store is unlocked with.
    #[error("image `{image}` is encrypted with device key {key}, not with this device's key {have}: it was captured under another key (the key was changed, or the store comes from another device)")]
    WrongKey {
        image: String,
        key: KeyId,
        have: KeyId,
    },
}

impl StoreError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Io { context, source }
    }
}

impl From<NoStore> for StoreError {
    fn from(e: NoStore) -> Self {
        match e {
            NoStore::NotAStore => StoreError::NotAStore,
            NoStore::Legacy => StoreError::LegacyStore,
            NoStore::Damaged { first, second } => StoreError::NoSuperblock { first, second },
        }
    }
}
