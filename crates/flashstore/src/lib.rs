//! The device's one image store, on a file, partition or raw device, in clusters of 4 KiB
//! blocks: opened by its magic only; log-structured (new data goes into idle clusters,
//! nothing committed is overwritten, one commit is atomic); named images, pinned ones GC never
//! touches; the image writer and reader (zero pages, page dedupe within and across images,
//! selective by default so restores stay sequential, chunks compressed with LZ4 or not and
//! checksummed); raw regions for lazy images; usage counts, GC with discard, fsck. Its design
//! follows LG's "NAND flash aware hibernation-based boot"; docs/store.md draws the layout.
//! The format itself, and the pure checks of reading it, are crate `storelayout`'s (the
//! freestanding restorer reads the store with them too); they are re-exported here.

mod bootlog;
mod compact;
mod error;
mod fsck;
mod medium;
mod pipeline;
mod reader;
mod seal;
mod sign;
mod store;
mod writer;

pub use bootlog::update_boot_log;
pub use compact::CompactReport;
pub use error::StoreError;
pub use fsck::FsckReport;
pub use medium::{FailingMedium, Medium, MemMedium, Window};
pub use pipeline::{ChunkTimes, ReadStats, BATCH_BYTES, GAP_BYTES};
pub use reader::{ImageReader, ReadCost};
pub use seal::{DeviceKey, SEAL_OVERHEAD};
pub use store::{read_label, valid_name, FormatOptions, GcReport, Store, Usage};
pub use storelayout::{
    page_key, Attempts, BootLog, Catalog, ChunkCheck, ChunkRec, Damage, DedupeTable, Extent,
    Guarded, ImageMeta, ImageRec, ImageStats, KeyId, KeySlot, Label, Page, PageRef, Superblock,
    SuperblockError, BLOCK, BOOTLOG_MAGIC, BOOTLOG_MAX_PAYLOAD, DEFAULT_CHUNK_PAGES,
    DEFAULT_CLUSTER_BLOCKS, LABEL_BYTES, LEGACY_MAGIC, MAGIC, PAGE,
};
pub use writer::{Committed, Compression, Dedupe, ImageWriter, WriteOptions, DEFAULT_MIN_USE};

#[cfg(test)]
mod tests;
