//! The image store's format on the medium, and the pure checks of reading it: what the
//! store (crate `flashstore`), resume and the freestanding restorer share, so that all three
//! read the store with one implementation. `no_std` with `alloc`; no I/O: the caller reads
//! the bytes (at the offsets this crate computes) and hands them in.
//!
//! * [`superblock`]: geometry, the label, the two superblocks and which one is committed;
//! * [`catalog`]: the catalog (images, chunks, key slots); [`versions`]: reading it, checked
//!   against the superblock, in the format of the superblock's version (older ones included);
//! * [`pages`]: an image's page list and the dedupe table;
//! * [`chunk`]: checking and unpacking one stored chunk;
//! * [`bootlog`]: the boot log beside the superblocks (restore attempts, the crash-loop
//!   guard, the last boot's record) and which of its two slots to read and write;
//! * [`signed`]: the digest an image's signature covers;
//! * [`name`]: what may name an image; [`policy`]: a capture's compression and dedupe;
//! * [`damage`]: what can be wrong with the bytes; [`codec`]: their encoding.
//!
//! docs/store.md draws the layout.
#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod bootlog;
pub mod catalog;
pub mod chunk;
pub mod codec;
pub mod damage;
pub mod keyid;
pub mod name;
pub mod open;
pub mod pages;
pub mod policy;
pub mod signed;
pub mod superblock;
pub mod versions;

pub use bootlog::{
    boot_log_slots, Attempts, BootLog, BootLogError, Guarded, NewestLog, SlotWrite, BOOTLOG_HEADER,
    BOOTLOG_MAGIC, BOOTLOG_MAX_PAYLOAD, HISTORY_MAX,
};
pub use catalog::{Catalog, ChunkCheck, ChunkRec, Extent, ImageRec, ImageStats, KeySlot};
pub use chunk::open_chunk;
pub use codec::{decode, encode};
pub use damage::{Damage, ReadError};
pub use keyid::KeyId;
pub use name::{check_image_name, valid_name, BadImageName, IMAGE_NAME_CHARS, IMAGE_NAME_MAX};
pub use open::{open_committed, read_superblock, Committed, OpenError, ReadAt};
pub use pages::{page_key, read_page_list, DedupeTable, ImageMeta, PageRef};
pub use policy::{Compression, Dedupe, DEFAULT_MIN_USE};
pub use signed::{signed_digest, DigestError};
pub use superblock::{
    committed_superblock, BadLabel, Label, NoStore, Page, Superblock, SuperblockError, BLOCK,
    DEFAULT_CHUNK_PAGES, DEFAULT_CLUSTER_BLOCKS, LABEL_BYTES, LEGACY_MAGIC, MAGIC, OLDEST_VERSION,
    PAGE, VERSION,
};
pub use versions::decode_catalog;
