//! [`StreamParser`]: checks a stream page by page as capture reads it or restore
//! regenerates it.

use serde::Serialize;

use super::header::{
    PageCount, PageKind, StreamError, StreamHeader, PFN_END_OF_MAP, PFN_LIMIT, PFN_ZERO_FLAG,
};
use super::page::{le_u64, Page};

/// The entries of one page of the PFN index, up to its end marker: each PFN, and whether
/// it is listed as all zero without a data page ([`PFN_ZERO_FLAG`]). What a restorer
/// places pages by; [`StreamParser`] checks the same entries.
pub fn index_entries(page: &Page) -> impl Iterator<Item = (u64, bool)> + '_ {
    page.chunks_exact(8)
        .map(|c| le_u64(c, 0))
        .take_while(|&raw| raw != PFN_END_OF_MAP)
        .map(|raw| (raw & !PFN_ZERO_FLAG, raw & PFN_ZERO_FLAG != 0))
}

/// Where a stream parser or producer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Expecting page 0.
    Header,
    /// Inside the PFN index.
    Meta,
    /// Inside the data pages.
    Data,
    /// All `pages` seen.
    Done,
}

/// Checks a stream page by page: Header → Meta → Data → Done.
///
/// After an error the parser's state is unspecified; discard it.
#[derive(Debug, Clone, Default)]
pub struct StreamParser {
    header: Option<StreamHeader>,
    consumed: u64,
    entries: u64,
    data_listed: u64,
    zero_listed: u64,
    prev_pfn: Option<u64>,
}

impl StreamParser {
    /// A parser expecting page 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consume the next page of the stream.
    pub fn push_page(&mut self, page: &Page) -> Result<PageKind, StreamError> {
        let Some(header) = &self.header else {
            self.header = Some(StreamHeader::parse(page)?);
            self.consumed = 1;
            return Ok(PageKind::Header);
        };
        let kind = header.kind_of(self.consumed).ok_or(StreamError::PastEnd {
            pages: header.pages.0,
        })?;
        if let PageKind::Meta { index } = kind {
            let image_pages = header.image_pages.0;
            let last = index + 1 == header.meta_pages().0;
            self.scan_meta(page)?;
            if last && self.data_listed != image_pages {
                return Err(StreamError::PfnCount {
                    listed: self.data_listed,
                    image_pages,
                });
            }
        }
        self.consumed += 1;
        Ok(kind)
    }

    fn scan_meta(&mut self, page: &Page) -> Result<(), StreamError> {
        for (pfn, zero) in index_entries(page) {
            let entry = self.entries;
            self.entries += 1;
            if pfn >= PFN_LIMIT {
                let raw = if zero { pfn | PFN_ZERO_FLAG } else { pfn };
                return Err(StreamError::PfnOutOfRange { pfn: raw, entry });
            }
            if let Some(previous) = self.prev_pfn.filter(|&p| pfn <= p) {
                return Err(StreamError::PfnNotIncreasing {
                    pfn,
                    previous,
                    entry,
                });
            }
            self.prev_pfn = Some(pfn);
            if zero {
                self.zero_listed += 1;
            } else {
                self.data_listed += 1;
            }
        }
        Ok(())
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        match &self.header {
            None => Phase::Header,
            Some(h) => match h.kind_of(self.consumed) {
                Some(PageKind::Meta { .. }) => Phase::Meta,
                Some(_) => Phase::Data,
                None => Phase::Done,
            },
        }
    }

    /// The parsed header, once page 0 was pushed.
    pub fn header(&self) -> Option<&StreamHeader> {
        self.header.as_ref()
    }

    /// Pages consumed so far.
    pub fn pages_consumed(&self) -> PageCount {
        PageCount(self.consumed)
    }

    /// All-zero pages listed in the index with [`PFN_ZERO_FLAG`] (0 on 6.1).
    pub fn zero_pages_listed(&self) -> PageCount {
        PageCount(self.zero_listed)
    }

    /// The header if the whole stream was consumed, else [`StreamError::Incomplete`].
    pub fn finish(&self) -> Result<&StreamHeader, StreamError> {
        match &self.header {
            Some(h) if self.consumed == h.pages.0 => Ok(h),
            h => Err(StreamError::Incomplete {
                received: self.consumed,
                expected: h.as_ref().map_or(0, |h| h.pages.0),
            }),
        }
    }
}
