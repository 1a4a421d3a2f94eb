//! snapboot's image format.
//!
//! Two layers, both pure format code with no device policy:
//!
//! * [`kstream`] understands the page stream the kernel hands out through
//!   `/dev/snapshot` (`struct swsusp_info`, the PFN index, the data pages) and
//!   can check and regenerate it page by page.
//! * [`v1`] is snapboot's own container: a fixed-size store (file or block
//!   device) with two header slots and two image areas, checksummed per
//!   section and per 1 MiB chunk, written atomically.
//!
//! The on-disk layout is specified in `docs/image-format.md`.

pub mod kstream;
pub mod v1;

pub use kstream::{
    collect_stream, synthetic_stream, ArchRecord, Page, PageCount, PageKind, PageProducer, Pfn,
    Phase, SliceStream, StreamError, StreamHeader, StreamParser, SyntheticStream, PAGE_SIZE,
};
pub use v1::{
    check_compat, CaptureMeta, Device, Identity, ImageError, ImageInfo, Incompat, Reader, Slot,
    SlotState, Store, StreamCounts, Writer,
};
