//! The kernel's hibernation page stream, as read from `/dev/snapshot`.
//!
//! After `SNAPSHOT_CREATE_IMAGE`, `read()` on `/dev/snapshot` yields a stream
//! of 4096-byte pages produced by `snapshot_read_next()` in
//! `kernel/power/snapshot.c`; on resume the same stream is written back and
//! consumed by `snapshot_write_next()`. For x86_64 (64-bit little-endian
//! `unsigned long`) the stream is:
//!
//! 1. one header page, `struct swsusp_info` (`kernel/power/power.h`), whose
//!    first 40 bytes are overwritten by the x86 `struct restore_data_record`
//!    (`arch/x86/power/hibernate.c`) because x86 selects
//!    `CONFIG_ARCH_HIBERNATION_HEADER`. The utsname is therefore *not* in the
//!    stream on x86: snapboot records kernel identity itself. arm64 selects it
//!    too and writes its `struct arch_hibernate_hdr` there instead, which holds
//!    the image kernel's `uname -v` (module `arch` draws both records);
//! 2. `pages - image_pages - 1` meta pages: the PFN index, 512 `unsigned long`
//!    PFNs per page in ascending order, terminated by `~0UL` when the page has
//!    room. (Kernels with the zero-page optimisation also list all-zero pages
//!    with bit 63 set; those have no data page. On 6.1 no entry has that bit.);
//! 3. `image_pages` data pages, one per PFN without bit 63, in index order.
//!
//! [`StreamParser`] checks a stream page by page as capture reads it, and the
//! [`PageProducer`] trait is the cursor-style interface (like the kernel's
//! `snapshot_read_next()`) restore uses to regenerate it.

mod arch;
mod header;
mod page;
mod parser;
mod synthetic;

pub use arch::{ArchRecord, ARM64_UTS_VERSION_LEN, MPIDR_HWID_MASK, X86_64_RESTORE_MAGIC};
pub use header::*;
pub use page::{offsets, Page, PAGE_SIZE};
pub use parser::{index_entries, Phase, StreamParser};
pub use synthetic::{synthetic_stream, SyntheticStream};

#[cfg(test)]
mod tests;
