//! The flash-aware image store of seed 003 ("NAND flash aware hibernation-based boot"), made
//! real: a store on a file, partition or raw device, in clusters of 4 KiB blocks;
//! log-structured (new data goes into idle clusters, nothing committed is overwritten, one
//! commit is atomic); named images, pinned ones GC never touches; page dedupe across images,
//! selective by default so restores stay sequential; usage counts, GC with discard, fsck.
//! docs/store.md draws the layout.

mod compact;
mod error;
mod fsck;
mod layout;
mod medium;
mod reader;
mod sign;
mod store;
mod writer;

pub use compact::CompactReport;
pub use error::StoreError;
pub use fsck::FsckReport;
pub use layout::{
    page_key, Catalog, ChunkCheck, ChunkRec, Extent, ImageRec, ImageStats, Page, PageRef,
    SuperblockError, BLOCK, DEFAULT_CHUNK_PAGES, DEFAULT_CLUSTER_BLOCKS, LEGACY_MAGIC, MAGIC, PAGE,
};
pub use medium::{FailingMedium, Medium, MemMedium};
pub use reader::{ChunkTimes, ImageReader, ReadCost};
pub use store::{valid_name, FormatOptions, GcReport, Store, Usage};
pub use writer::{Committed, Compression, Dedupe, ImageWriter, WriteOptions, DEFAULT_MIN_USE};

#[cfg(test)]
mod tests;
