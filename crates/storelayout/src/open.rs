//! Opening a store's committed state, the one sequence every reader follows (the device's
//! store, `flashstore::Store::open`, and the freestanding restorer): both superblocks, the
//! committed one ([`committed_superblock`]), the store's length against the medium's, the
//! catalog it names, checked against it ([`decode_catalog`]). The reader supplies the bytes
//! through [`ReadAt`].

use crate::{committed_superblock, decode_catalog, Catalog, Damage, NoStore, Superblock, BLOCK};
use alloc::vec;

/// Reads bytes of a store's medium: the one read-at shape every store reader implements
/// (the device's files and devices, the restorer's disks, memory in tests).
pub trait ReadAt {
    /// Why a read failed.
    type Error;
    /// Fills `buf` from byte `at` of the store.
    fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<(), Self::Error>;
}

/// Why a store's committed state cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum OpenError<E> {
    /// The medium failed a read of `what` (`superblocks`, `catalog`).
    #[error("reading the store's {what}: {error}")]
    Read {
        /// What was being read.
        what: &'static str,
        /// Why.
        error: E,
    },
    /// Neither superblock is valid.
    #[error(transparent)]
    NoStore(#[from] NoStore),
    /// The medium is shorter than the store its superblock describes.
    #[error("store is truncated: its superblock describes {needed} bytes, the device has {len}")]
    Truncated {
        /// Bytes the superblock describes.
        needed: u64,
        /// Bytes the medium has.
        len: u64,
    },
    /// The catalog is damaged.
    #[error("store is damaged: {0}")]
    Damaged(#[from] Damage),
}

/// A store's committed state: the superblock that names it and its catalog.
#[derive(Debug)]
pub struct Committed {
    /// The valid superblock with the highest generation.
    pub superblock: Superblock,
    /// The catalog it names, checked against it.
    pub catalog: Catalog,
}

/// The committed superblock of the store `r` reads.
pub fn read_superblock<R: ReadAt>(r: &mut R) -> Result<Superblock, OpenError<R::Error>> {
    let mut blocks = vec![0u8; 2 * BLOCK as usize];
    r.read_at(0, &mut blocks).map_err(|error| OpenError::Read {
        what: "superblocks",
        error,
    })?;
    let (first, second) = blocks.split_at(BLOCK as usize);
    Ok(committed_superblock(first, second)?)
}

/// The committed state of the store `r` reads, whose medium has `len` bytes.
pub fn open_committed<R: ReadAt>(r: &mut R, len: u64) -> Result<Committed, OpenError<R::Error>> {
    let superblock = read_superblock(r)?;
    let needed = superblock.store_bytes();
    if needed > len {
        return Err(OpenError::Truncated { needed, len });
    }
    let (offset, n) = superblock.extent_place(superblock.catalog, "catalog")?;
    let mut bytes = vec![0u8; n];
    r.read_at(offset, &mut bytes)
        .map_err(|error| OpenError::Read {
            what: "catalog",
            error,
        })?;
    let catalog = decode_catalog(&superblock, &bytes)?;
    Ok(Committed {
        superblock,
        catalog,
    })
}
