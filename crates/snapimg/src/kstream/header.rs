//! The stream's header page (`struct swsusp_info`), its PFN index and page numbering, the
//! page producer interface, and the errors of a stream: everything the parser and the
//! synthetic producer share. The page itself and the header page's byte layout are
//! `super::page`'s.

use super::arch::{ArchRecord, X86_64_RESTORE_MAGIC};
use super::page::{le_u64, offsets, Page, PAGE_SIZE};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use serde::Serialize;
use thiserror::Error;

/// PFN entries per meta page (`PAGE_SIZE / sizeof(unsigned long)`).
pub const PFNS_PER_PAGE: u64 = (PAGE_SIZE / 8) as u64;
/// `BM_END_OF_MAP` (`~0UL`): terminates the PFN list inside a meta page.
pub const PFN_END_OF_MAP: u64 = u64::MAX;
/// `ENCODED_PFN_ZERO_FLAG` of newer kernels: the page is all zeros and has no
/// data page in the stream.
pub const PFN_ZERO_FLAG: u64 = 1 << 63;
/// PFNs at or above this are rejected (52-bit physical addresses).
pub const PFN_LIMIT: u64 = 1 << 40;

/// A physical page frame number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Pfn(pub u64);

/// A number of 4 KiB pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct PageCount(pub u64);

impl PageCount {
    /// The count as a plain integer.
    pub fn get(self) -> u64 {
        self.0
    }
    /// Size in bytes, saturating.
    pub fn bytes(self) -> u64 {
        self.0.saturating_mul(PAGE_SIZE as u64)
    }
    /// Meta pages the kernel needs to list `self` PFNs (`DIV_ROUND_UP(n * 8, PAGE_SIZE)`).
    pub fn meta_pages_for(self) -> PageCount {
        PageCount(self.0.div_ceil(PFNS_PER_PAGE))
    }
}

impl fmt::Display for PageCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Why a stream was rejected. Every variant carries the numbers involved.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// Page 0 starts with none of the records snapboot knows.
    #[error("page 0 is not a hibernation header: magic at offset 24 is {magic:#018x} (x86_64 wants {X86_64_RESTORE_MAGIC:#018x}), bytes 0..65 are not an arm64 uts version (\"#...\", NUL-terminated, zeros after) and there is no \"Linux\" utsname")]
    UnknownArch {
        /// The u64 found where the x86 magic lives.
        magic: u64,
    },
    /// `image_pages` is zero: the kernel never produces an empty image.
    #[error("header says image_pages=0: the kernel never produces an empty image")]
    NoDataPages,
    /// `pages` must be at least `image_pages + 1`.
    #[error(
        "header page counts are inconsistent: pages={pages} must exceed image_pages={image_pages}"
    )]
    PageCounts {
        /// `swsusp_info.pages`.
        pages: u64,
        /// `swsusp_info.image_pages`.
        image_pages: u64,
    },
    /// The PFN index has too few pages to list every data page.
    #[error("PFN index of {meta_pages} pages cannot list {image_pages} data pages (needs at least {needed})")]
    MetaTooSmall {
        /// `pages - image_pages - 1`.
        meta_pages: u64,
        /// `swsusp_info.image_pages`.
        image_pages: u64,
        /// `DIV_ROUND_UP(image_pages * 8, 4096)`.
        needed: u64,
    },
    /// The PFN index would list more pages than the machine has.
    #[error("PFN index of {meta_pages} pages is larger than a machine with num_physpages={num_physpages} needs")]
    MetaTooLarge {
        /// `pages - image_pages - 1`.
        meta_pages: u64,
        /// `swsusp_info.num_physpages`.
        num_physpages: u64,
    },
    /// `size` is not `pages * 4096`.
    #[error("header size field {size} is not pages={pages} * 4096")]
    SizeMismatch {
        /// `swsusp_info.size`.
        size: u64,
        /// `swsusp_info.pages`.
        pages: u64,
    },
    /// `size` is `pages` times a larger page: the image kernel does not use 4 KiB pages.
    #[error("header size field {size} is pages={pages} * {page_size}: the image kernel uses {} KiB pages, snapboot supports 4 KiB pages only", page_size / 1024)]
    PageSize {
        /// `swsusp_info.size`.
        size: u64,
        /// `swsusp_info.pages`.
        pages: u64,
        /// The page size `size / pages` gives (16 KiB or 64 KiB).
        page_size: u64,
    },
    /// More data pages than physical pages.
    #[error("image_pages={image_pages} exceeds num_physpages={num_physpages}")]
    ImageLargerThanRam {
        /// `swsusp_info.image_pages`.
        image_pages: u64,
        /// `swsusp_info.num_physpages`.
        num_physpages: u64,
    },
    /// A PFN beyond any plausible physical address.
    #[error("PFN index entry {entry} is {pfn:#x}, beyond any physical page")]
    PfnOutOfRange {
        /// Raw entry value.
        pfn: u64,
        /// Entry number across the whole index.
        entry: u64,
    },
    /// PFNs must be strictly ascending (the kernel walks a bitmap).
    #[error("PFN index entry {entry} is {pfn:#x}, not above the previous {previous:#x}")]
    PfnNotIncreasing {
        /// PFN (flag bit removed).
        pfn: u64,
        /// Previous PFN.
        previous: u64,
        /// Entry number across the whole index.
        entry: u64,
    },
    /// The PFN index lists a different number of data pages than the header.
    #[error("PFN index lists {listed} data pages but the header says image_pages={image_pages}")]
    PfnCount {
        /// Data PFNs (bit 63 clear) found in the index.
        listed: u64,
        /// `swsusp_info.image_pages`.
        image_pages: u64,
    },
    /// A page was pushed after the stream was complete.
    #[error("stream was already complete after {pages} pages; got one more")]
    PastEnd {
        /// Pages in the complete stream.
        pages: u64,
    },
    /// The stream ended early.
    #[error("stream ended after {received} of {expected} pages")]
    Incomplete {
        /// Pages received.
        received: u64,
        /// `swsusp_info.pages` (0 if the header never arrived).
        expected: u64,
    },
}

/// `struct swsusp_info` as found in page 0 of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamHeader {
    /// Arch record (x86_64) or utsname (generic).
    pub arch: ArchRecord,
    /// `num_physpages`: present pages of the image kernel's machine. The
    /// restoring kernel refuses the image ("memory size") if its own differs.
    pub num_physpages: PageCount,
    /// `cpus` (unused by current kernels, zero).
    pub cpus: i32,
    /// `image_pages`: data pages in the stream.
    pub image_pages: PageCount,
    /// `pages`: total pages in the stream (header + meta + data).
    pub pages: PageCount,
    /// `size`: `pages * 4096`.
    pub size: u64,
}

impl StreamHeader {
    /// Parse and validate page 0 of a stream.
    pub fn parse(page: &Page) -> Result<Self, StreamError> {
        let arch = ArchRecord::decode(page).ok_or(StreamError::UnknownArch {
            magic: le_u64(page, offsets::X86_MAGIC),
        })?;
        let mut cpus = [0u8; 4];
        cpus.copy_from_slice(&page[offsets::CPUS..offsets::CPUS + 4]);
        let header = StreamHeader {
            arch,
            num_physpages: PageCount(le_u64(page, offsets::NUM_PHYSPAGES)),
            cpus: i32::from_le_bytes(cpus),
            image_pages: PageCount(le_u64(page, offsets::IMAGE_PAGES)),
            pages: PageCount(le_u64(page, offsets::PAGES)),
            size: le_u64(page, offsets::SIZE),
        };
        header.validate()?;
        Ok(header)
    }

    /// Check the counts against each other (what `load_header()` relies on).
    pub fn validate(&self) -> Result<(), StreamError> {
        let (image, pages, phys) = (self.image_pages.0, self.pages.0, self.num_physpages.0);
        if image == 0 {
            return Err(StreamError::NoDataPages);
        }
        if pages <= image {
            return Err(StreamError::PageCounts {
                pages,
                image_pages: image,
            });
        }
        if pages.checked_mul(PAGE_SIZE as u64) != Some(self.size) {
            if let Some(page_size) = [16 << 10, 64 << 10]
                .into_iter()
                .find(|&p| pages.checked_mul(p) == Some(self.size))
            {
                return Err(StreamError::PageSize {
                    size: self.size,
                    pages,
                    page_size,
                });
            }
            return Err(StreamError::SizeMismatch {
                size: self.size,
                pages,
            });
        }
        if image > phys {
            return Err(StreamError::ImageLargerThanRam {
                image_pages: image,
                num_physpages: phys,
            });
        }
        let meta = self.meta_pages().0;
        let needed = self.image_pages.meta_pages_for().0;
        if meta < needed {
            return Err(StreamError::MetaTooSmall {
                meta_pages: meta,
                image_pages: image,
                needed,
            });
        }
        if meta > self.num_physpages.meta_pages_for().0.max(needed) {
            return Err(StreamError::MetaTooLarge {
                meta_pages: meta,
                num_physpages: phys,
            });
        }
        Ok(())
    }

    /// Pages of PFN index: `pages - image_pages - 1`, as `load_header()` computes it.
    pub fn meta_pages(&self) -> PageCount {
        PageCount(
            self.pages
                .0
                .saturating_sub(self.image_pages.0)
                .saturating_sub(1),
        )
    }

    /// What page `index` of this stream is, or `None` past the end.
    pub fn kind_of(&self, index: u64) -> Option<PageKind> {
        let meta = self.meta_pages().0;
        match index {
            0 => Some(PageKind::Header),
            i if i <= meta => Some(PageKind::Meta { index: i - 1 }),
            i if i < self.pages.0 => Some(PageKind::Data {
                index: i - 1 - meta,
            }),
            _ => None,
        }
    }

    /// A header with `arch` for `image_pages` data pages, counted as a 6.1 kernel counts
    /// them (meta pages = `DIV_ROUND_UP(image_pages * 8, 4096)`).
    pub fn with_counts(arch: ArchRecord, image_pages: u64, num_physpages: u64) -> Self {
        let meta = PageCount(image_pages).meta_pages_for().0;
        let pages = image_pages + meta + 1;
        StreamHeader {
            arch,
            num_physpages: PageCount(num_physpages),
            cpus: 0,
            image_pages: PageCount(image_pages),
            pages: PageCount(pages),
            size: pages * PAGE_SIZE as u64,
        }
    }

    /// A header as a 6.1 x86_64 kernel would produce it for `image_pages` data pages.
    pub fn x86_64(image_pages: u64, num_physpages: u64, e820_checksum: u64) -> Self {
        let arch = ArchRecord::X86_64 {
            jump_address: 0xffff_ffff_8100_0000,
            jump_address_phys: 0x0100_0000,
            cr3: 0x0200_0000,
            magic: X86_64_RESTORE_MAGIC,
            e820_checksum,
        };
        Self::with_counts(arch, image_pages, num_physpages)
    }

    /// A header as a 6.1 arm64 kernel (4 KiB pages, 48-bit VA, QEMU virt's RAM at 1 GiB)
    /// would produce it for `image_pages` data pages, hibernated on CPU `sleep_cpu_mpidr`.
    pub fn arm64(
        image_pages: u64,
        num_physpages: u64,
        uts_version: &str,
        sleep_cpu_mpidr: u64,
    ) -> Self {
        let arch = ArchRecord::Arm64 {
            uts_version: uts_version.into(),
            ttbr1_el1: 0x4213_a000,
            reenter_kernel: 0xffff_8000_0802_1000,
            hyp_stub_vectors: 0x4020_0800,
            sleep_cpu_mpidr,
        };
        Self::with_counts(arch, image_pages, num_physpages)
    }

    /// Encode as page 0 of a stream (zero-filled like `init_header()`).
    pub fn encode(&self) -> Box<Page> {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        let put =
            |p: &mut Page, off: usize, v: u64| p[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self.arch.encode_into(&mut page);
        put(&mut page, offsets::NUM_PHYSPAGES, self.num_physpages.0);
        page[offsets::CPUS..offsets::CPUS + 4].copy_from_slice(&self.cpus.to_le_bytes());
        put(&mut page, offsets::IMAGE_PAGES, self.image_pages.0);
        put(&mut page, offsets::PAGES, self.pages.0);
        put(&mut page, offsets::SIZE, self.size);
        page
    }
}

/// Cursor-style source of a stream, like the kernel's `snapshot_read_next()`:
/// each call fills `buf` with the next page, `Ok(false)` means the end.
pub trait PageProducer {
    /// Error type of the source.
    type Error;
    /// Fill `buf` with the next page; `Ok(false)` once the stream is over.
    fn next_page(&mut self, buf: &mut Page) -> Result<bool, Self::Error>;
}

/// A [`PageProducer`] over a stream held in memory (trailing partial page ignored).
#[derive(Debug, Clone)]
pub struct SliceStream<'a> {
    pages: core::slice::ChunksExact<'a, u8>,
}

impl<'a> SliceStream<'a> {
    /// Produce the pages of `bytes` in order.
    pub fn new(bytes: &'a [u8]) -> Self {
        SliceStream {
            pages: bytes.chunks_exact(PAGE_SIZE),
        }
    }
}

impl PageProducer for SliceStream<'_> {
    type Error = core::convert::Infallible;
    fn next_page(&mut self, buf: &mut Page) -> Result<bool, Self::Error> {
        match self.pages.next() {
            Some(p) => {
                buf.copy_from_slice(p);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Drain a producer into one byte vector (tests and small tools).
pub fn collect_stream<P: PageProducer>(producer: &mut P) -> Result<Vec<u8>, P::Error> {
    let mut out = Vec::new();
    let mut buf = [0u8; PAGE_SIZE];
    while producer.next_page(&mut buf)? {
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// What a page of the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Page 0, `struct swsusp_info`.
    Header,
    /// Meta page number `index` (0-based) of the PFN index.
    Meta {
        /// 0-based meta page number.
        index: u64,
    },
    /// Data page number `index` (0-based).
    Data {
        /// 0-based data page number.
        index: u64,
    },
}
