//! snapboot's image format: pure format code with no device policy.
//!
//! * [`kstream`] understands the page stream the kernel hands out through
//!   `/dev/snapshot` (`struct swsusp_info`, the PFN index, the data pages) and
//!   can check and regenerate it page by page.
//! * The [`Store`] is a fixed-size file or block device with two header slots
//!   and two image areas, written so that a power cut never loses the newest
//!   good image. [`Store::writer`] writes an image, [`Store::reader`] reads the
//!   newest one.
//! * An image (format version 2) keeps every stream page's fate in a *page
//!   index*: all-zero pages are flagged and not stored, a page identical to an
//!   earlier one points at it, and every other ("unique") page is stored, in
//!   stream order, in chunks compressed independently (LZ4 by default, zstd or
//!   none as options). An *offset table* gives each chunk's place, size and
//!   XXH3-128, so any page can be found and checked without reading the chunks
//!   before it ([`Reader::page_at`]). Writer and reader compress and decompress
//!   chunks on worker threads.
//! * A *lazy* image also records a [`SwapRegion`]: the last bytes of its own
//!   area, where the kernel paged user memory out just before capture.
//! * A [`Binding`] ties the image to the boot setup, kernel command line and
//!   root filesystem it was captured with.
//!
//! Modules: [`kstream`] (kernel stream), `layout` (constants and slots), `store` (areas,
//! publication),
//! `header` (the slot's encoding and checks), `info` (what callers see),
//! `index` (page index and offset table), `writer`, `reader`, `codec` and
//! `pool` (compression and worker threads), `swap` (the lazy image's region),
//! `error`, [`binding`]. The on-disk layout is specified in
//! `docs/image-format.md`.

pub mod binding;
mod codec;
mod error;
mod header;
mod index;
mod info;
pub mod kstream;
mod layout;
mod pool;
mod reader;
mod store;
mod summary;
mod swap;
pub mod verity;
mod writer;

#[cfg(test)]
mod tests;

pub use binding::{
    bound_cmdline, hex, Binding, BindingError, BindingMismatch, BootSetup, BoundDevice, Difference,
};
pub use codec::Compression;
pub use error::{ImageError, Incompat};
pub use index::{DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_PAGES, MAX_CHUNK_PAGES};
pub use info::{
    check_compat, check_identity_compat, CaptureMeta, Identity, ImageInfo, ImageStats, SlotState,
    StreamCounts, SwapInfo, VerityInfo,
};
pub use kstream::{
    collect_stream, synthetic_stream, ArchRecord, Page, PageCount, PageKind, PageProducer, Pfn,
    Phase, SliceStream, StreamError, StreamHeader, StreamParser, SyntheticStream, PAGE_SIZE,
};
pub use layout::{
    Slot, AREAS_START, FLAG_INVALIDATED, FORMAT_VERSION, HASH_LEN, MAGIC, MAX_IDENTITY_LEN,
    MIN_STORE_SIZE, SLOT_SIZE,
};
pub use pool::default_threads;
pub use reader::{ReadOptions, Reader, StageTimes};
pub use store::{Device, ReadAt, Store};
pub use swap::{SwapPlan, SwapRegion, MIN_SWAP_PAGES, SWAP_IMAGE_RESERVE_PAGES};
pub use verity::SwapVerity;
pub use writer::{WriteOptions, Writer};
