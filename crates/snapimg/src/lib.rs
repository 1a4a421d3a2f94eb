//! What a snapboot image is, independent of where it is stored: pure format code with no
//! device policy and no I/O.
//!
//! * [`kstream`] understands the page stream the kernel hands out through `/dev/snapshot`
//!   (`struct swsusp_info`, the PFN index, the data pages) and can check and regenerate it.
//! * [`description`]: what is kept with an image besides its pages: the kernel and machine
//!   ([`Identity`], with its [`MemoryMap`]), what it is bound to ([`Binding`]), the stream's size and a lazy
//!   image's [`SwapRegion`]. Resume checks all of it before the first page.
//! * [`fingerprint`]: how a block device an image is bound to is fingerprinted;
//!   [`listing`]: how the initramfs's files are listed for the binding; [`build_id`]: how
//!   the snapboot binary it names is identified.
//! * [`verity`] builds and checks the dm-verity tree of a lazy image's swap region.
//!
//! The pages themselves go into the store (crate `flashstore`): chunking, compression,
//! checksums and dedupe live there, once. docs/image-format.md specifies both.
//!
//! `no_std` with `alloc`, so the freestanding restorer reads an image's description, its
//! binding and its stream header with this same code; feature `std` (on by default) only
//! turns on the standard library's side of the dependencies.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod binding;
pub mod build_id;
pub mod description;
pub mod fingerprint;
pub mod identity;
pub mod kstream;
pub mod listing;
pub mod memory_map;
pub mod swap;
pub mod verity;

pub use binding::{
    bound_cmdline, hex, Binding, BindingError, BindingMismatch, BootSetup, BoundDevice, Difference,
};
pub use description::{Description, DescriptionError, RollbackStamp, DESCRIPTION_VERSION};
pub use identity::{Identity, Incompat};
pub use kstream::{
    collect_stream, synthetic_stream, ArchRecord, Page, PageCount, PageKind, PageProducer, Pfn,
    Phase, SliceStream, StreamError, StreamHeader, StreamParser, SyntheticStream, PAGE_SIZE,
};
pub use memory_map::{EfiRuntimeRegion, MemoryMap, MemoryMapMismatch, PhysRange};
pub use swap::{
    check_region, swap_header, BadSwapRegion, RegionMismatch, SwapRegion, MIN_SWAP_PAGES,
    SWAP_MAGIC, UUID_LEN,
};
pub use verity::SwapVerity;
