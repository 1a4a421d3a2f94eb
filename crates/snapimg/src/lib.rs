//! snapboot's image format.
//!
//! Three layers, all pure format code with no device policy:
//!
//! * [`kstream`] understands the page stream the kernel hands out through
//!   `/dev/snapshot` (`struct swsusp_info`, the PFN index, the data pages) and
//!   can check and regenerate it page by page.
//! * [`v1`] is snapboot's container: a fixed-size store (file or block
//!   device) with two header slots and two image areas, written atomically;
//!   format version 1 stores the stream verbatim, checksummed per 1 MiB chunk.
//! * [`v2`] is format version 2 in the same store: zero pages flagged, duplicate
//!   pages stored once, unique pages compressed in independent chunks with an
//!   offset table for random access, compressed and decompressed in parallel.
//!
//! [`Store::writer`] writes version 2; [`Store::reader`] reads both versions.
//! The on-disk layout is specified in `docs/image-format.md`.

pub mod binding;
pub mod kstream;
mod reader;
mod summary;
pub mod v1;
pub mod v2;

pub use binding::{
    bound_cmdline, hex, Binding, BindingError, BindingMismatch, BootSetup, BoundDevice, Difference,
};
pub use kstream::{
    collect_stream, synthetic_stream, ArchRecord, Page, PageCount, PageKind, PageProducer, Pfn,
    Phase, SliceStream, StreamError, StreamHeader, StreamParser, SyntheticStream, PAGE_SIZE,
};
pub use reader::Reader;
pub use v1::{
    check_compat, CaptureMeta, Device, Identity, ImageError, ImageInfo, ImageStats, Incompat,
    ReadAt, Slot, SlotState, Store, StreamCounts, SwapInfo,
};
pub use v2::{Compression, ReadOptions, SwapPlan, SwapRegion, WriteOptions, Writer};
