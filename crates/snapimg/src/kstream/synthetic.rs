//! Synthetic hibernation streams for tests.
//!
//! [`SyntheticStream`] builds a stream shaped like what a 6.1 x86_64 kernel
//! emits (x86 restore record, exact `DIV_ROUND_UP` meta pages, ascending
//! PFNs terminated by `~0UL`, data pages) from a seed, deterministically and
//! lazily, so tests can exercise capture and restore without a kernel;
//! [`SyntheticStream::with_arch`] gives it another arch record (arm64's).

use super::arch::ArchRecord;
use super::header::{
    PageCount, PageKind, PageProducer, Pfn, StreamHeader, PFNS_PER_PAGE, PFN_END_OF_MAP,
};
use super::page::{Page, PAGE_SIZE};
use alloc::vec;
use alloc::vec::Vec;

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A deterministic, valid-looking stream of `image_pages` data pages.
#[derive(Debug, Clone)]
pub struct SyntheticStream {
    header: StreamHeader,
    pfns: Vec<u64>,
    seed: u64,
    cur: u64,
}

impl SyntheticStream {
    /// Build the stream for `image_pages` (at least 1) data pages from `seed`.
    pub fn new(image_pages: u64, seed: u64) -> Self {
        let image_pages = image_pages.max(1);
        let mut state = seed;
        let mut pfn = 0x100 + splitmix(&mut state) % 64;
        let mut pfns = Vec::with_capacity(usize::try_from(image_pages).unwrap_or(0));
        for _ in 0..image_pages {
            pfns.push(pfn);
            pfn += 1 + splitmix(&mut state) % 4;
        }
        let header = StreamHeader::x86_64(image_pages, pfn + 1024, seed & 0xffff_ffff);
        SyntheticStream {
            header,
            pfns,
            seed,
            cur: 0,
        }
    }

    /// The same stream with `arch` at the start of its header page (the counts and pages
    /// stay as they are).
    pub fn with_arch(mut self, arch: ArchRecord) -> Self {
        self.header.arch = arch;
        self
    }

    /// The whole stream as bytes (header + PFN index + data). Test helper: holds
    /// everything in memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        let pages = usize::try_from(self.pages().0).unwrap_or(0);
        let mut out = vec![0u8; pages * PAGE_SIZE];
        for (i, chunk) in out.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let page: &mut Page = chunk.try_into().expect("chunks are PAGE_SIZE long");
            self.page(i as u64, page);
        }
        out
    }

    /// The header page's contents.
    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// PFN of data page `index`.
    pub fn pfn(&self, index: u64) -> Option<Pfn> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.pfns.get(i))
            .map(|&p| Pfn(p))
    }

    /// Total pages in the stream.
    pub fn pages(&self) -> PageCount {
        self.header.pages
    }

    /// Fill `buf` with page `index` of the stream; `false` past the end.
    pub fn page(&self, index: u64, buf: &mut Page) -> bool {
        match self.header.kind_of(index) {
            None => false,
            Some(PageKind::Header) => {
                *buf = *self.header.encode();
                true
            }
            Some(PageKind::Meta { index: m }) => {
                buf.fill(0);
                let first = m * PFNS_PER_PAGE;
                for (slot, entry) in buf.chunks_exact_mut(8).zip(first..) {
                    let value = self.pfn(entry).map_or(PFN_END_OF_MAP, |p| p.0);
                    slot.copy_from_slice(&value.to_le_bytes());
                    if value == PFN_END_OF_MAP {
                        break;
                    }
                }
                true
            }
            Some(PageKind::Data { index: d }) => {
                let mut state = self.seed ^ d.wrapping_mul(0xA076_1D64_78BD_642F);
                if d % 7 == 3 {
                    // Mostly-zero pages, as real memory has many.
                    buf.fill(0);
                    buf[..8].copy_from_slice(&d.to_le_bytes());
                } else {
                    for word in buf.chunks_exact_mut(8) {
                        word.copy_from_slice(&splitmix(&mut state).to_le_bytes());
                    }
                }
                true
            }
        }
    }
}

impl PageProducer for SyntheticStream {
    type Error = core::convert::Infallible;
    fn next_page(&mut self, buf: &mut Page) -> Result<bool, Self::Error> {
        let more = self.page(self.cur, buf);
        if more {
            self.cur += 1;
        }
        Ok(more)
    }
}

/// The whole synthetic stream for `image_pages` data pages as bytes
/// (header + PFN index + data). Test helper: holds everything in memory.
pub fn synthetic_stream(image_pages: u64, seed: u64) -> Vec<u8> {
    SyntheticStream::new(image_pages, seed).to_bytes()
}
