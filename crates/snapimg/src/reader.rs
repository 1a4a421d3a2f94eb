//! The reader [`crate::Store::reader`] returns: one type for every format version.

use crate::kstream::{Page, PageProducer, PAGE_SIZE};
use crate::v1::{Device, ImageError, ImageInfo};
use crate::{v1, v2};

/// Reads one image out of a store, whatever its format version.
///
/// Streams the kernel's pages in order through [`PageProducer::next_page`]
/// (every page checked before it is handed out), gives random access with
/// [`Reader::page_at`], and checks everything with [`Reader::verify_all`].
#[derive(Debug)]
pub enum Reader<'s, D: Device> {
    /// A format version 1 image (uncompressed).
    V1(Box<v1::Reader<'s, D>>),
    /// A format version 2 image (zero pages, dedupe, compressed chunks).
    V2(Box<v2::Reader<'s, D>>),
}

impl<D: Device> Reader<'_, D> {
    /// What the header says about this image (`verified` after [`Reader::verify_all`]).
    pub fn info(&self) -> &ImageInfo {
        match self {
            Reader::V1(r) => r.info(),
            Reader::V2(r) => r.info(),
        }
    }

    /// Container format version of the image.
    pub fn format_version(&self) -> u32 {
        self.info().format_version
    }

    /// Set threads and caches for a version 2 image (no effect on version 1).
    pub fn with_options(self, opts: v2::ReadOptions) -> Self {
        match self {
            Reader::V2(r) => Reader::V2(Box::new(r.with_options(opts))),
            other => other,
        }
    }

    /// Read and check every checksum and the stream structure, then rewind.
    ///
    /// Call this before writing anything to the kernel.
    pub fn verify_all(&mut self) -> Result<&ImageInfo, ImageError> {
        match self {
            Reader::V1(r) => r.verify_all(),
            Reader::V2(r) => r.verify_all(),
        }
    }

    /// Start streaming again from page 0.
    pub fn rewind(&mut self) {
        match self {
            Reader::V1(r) => r.rewind(),
            Reader::V2(r) => r.rewind(),
        }
    }

    /// Fill `buf` with stream page `index` (checked), without moving the
    /// streaming position.
    pub fn page_at(&mut self, index: u64, buf: &mut Page) -> Result<(), ImageError> {
        match self {
            Reader::V1(r) => r.page_at(index, buf),
            Reader::V2(r) => r.page_at(index, buf),
        }
    }
}

impl<D: Device> PageProducer for Reader<'_, D> {
    type Error = ImageError;

    fn next_page(&mut self, buf: &mut Page) -> Result<bool, ImageError> {
        match self {
            Reader::V1(r) => r.next_page(buf),
            Reader::V2(r) => r.next_page(buf),
        }
    }
}

/// What the readers of both format versions share, so that whole-image verification is
/// written once.
pub(crate) trait VersionReader: PageProducer<Error = ImageError> {
    /// Back to page 0 with a fresh stream parser.
    fn restart(&mut self);
    /// Check that the stream parser saw a complete, well-formed stream.
    fn finish_stream(&mut self) -> Result<(), ImageError>;
    /// The image's description, to mark it verified.
    fn info_mut(&mut self) -> &mut ImageInfo;
}

/// Reads every page (each checked as it is handed out) and the stream structure, rewinds,
/// and marks the image verified.
pub(crate) fn verify_all<R: VersionReader>(r: &mut R) -> Result<&ImageInfo, ImageError> {
    r.restart();
    let result = read_through(r);
    r.restart();
    result?;
    let info = r.info_mut();
    info.verified = true;
    Ok(info)
}

fn read_through<R: VersionReader>(r: &mut R) -> Result<(), ImageError> {
    let mut page = [0u8; PAGE_SIZE];
    while r.next_page(&mut page)? {}
    r.finish_stream()
}
