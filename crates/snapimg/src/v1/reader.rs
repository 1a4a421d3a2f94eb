//! Image reader: yields the kernel stream page by page for restore.
//!
//! Every page handed out has been checksummed first: the stream header page
//! against the header's hash, every other page as part of its chunk, whose
//! hash is checked against the chunk table before any page of the chunk is
//! yielded. The chunk table itself is checked against the header when the
//! reader is created. Pages also go through a [`StreamParser`], so a stream
//! that checksums fine but is structurally wrong is still refused.
//!
//! Restore is all-or-nothing: call [`Reader::verify_all`] before writing the
//! first page to `/dev/snapshot`. Memory use is one chunk (1 MiB) plus the
//! chunk table, both bounded by the store size.

use super::header::{chunks_for, Header};
use super::{chunk_section, Device, ImageError, ImageInfo, Slot, Store, HASH_LEN};
use crate::kstream::{Page, PageProducer, StreamHeader, StreamParser, PAGE_SIZE};

/// Reads one image out of a [`Store`]; see the module docs.
#[derive(Debug)]
pub struct Reader<'s, D: Device> {
    store: &'s mut Store<D>,
    header: Header,
    info: ImageInfo,
    chunk_hashes: Vec<[u8; HASH_LEN]>,
    cur: u64,
    buf: Vec<u8>,
    buf_start: u64,
    buf_pages: u64,
    parser: StreamParser,
}

impl<'s, D: Device> Reader<'s, D> {
    pub(crate) fn new(
        store: &'s mut Store<D>,
        slot: Slot,
        header: Header,
    ) -> Result<Self, ImageError> {
        // Header::decode checked the sums for overflow (and the v2 sizes); the
        // store must hold the image and, for a lazy image, its swap region.
        let end = header.store_end();
        if end > store.size {
            return Err(ImageError::Truncated {
                expected: end,
                actual: store.size,
            });
        }
        let stream_bytes = header.stream_pages * PAGE_SIZE as u64;
        let table_len = usize::try_from(header.image_bytes - stream_bytes).map_err(|_| {
            ImageError::Inconsistent {
                reason: "chunk table larger than memory".into(),
            }
        })?;
        let mut table = vec![0u8; table_len];
        store.read_at(
            header.area_offset + stream_bytes,
            &mut table,
            "reading the chunk table",
        )?;
        if blake3::hash(&table).as_bytes() != &header.chunk_table_hash {
            return Err(ImageError::ChecksumMismatch {
                section: "chunk table".into(),
            });
        }
        let chunk_hashes = table
            .chunks_exact(HASH_LEN)
            .take(usize::try_from(header.chunk_count).unwrap_or(usize::MAX))
            .map(|c| {
                let mut h = [0u8; HASH_LEN];
                h.copy_from_slice(c);
                h
            })
            .collect();
        let info = header.info(slot);
        Ok(Reader {
            store,
            header,
            info,
            chunk_hashes,
            cur: 0,
            buf: Vec::new(),
            buf_start: 0,
            buf_pages: 0,
            parser: StreamParser::new(),
        })
    }

    /// What the header says about this image (`verified` after [`Reader::verify_all`]).
    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    /// Read and check every checksum and the stream structure, then rewind.
    ///
    /// Call this before writing anything to the kernel.
    pub fn verify_all(&mut self) -> Result<&ImageInfo, ImageError> {
        crate::reader::verify_all(self)
    }

    /// Fill `buf` with stream page `index`, checked like a streamed page (its
    /// chunk's checksum, or the stream header hash), without moving the
    /// streaming position. Random access for on-demand paging.
    pub fn page_at(&mut self, index: u64, buf: &mut Page) -> Result<(), ImageError> {
        let pages = self.header.stream_pages;
        if index >= pages {
            return Err(ImageError::PageOutOfRange { index, pages });
        }
        if index == 0 {
            return self.read_stream_header(buf);
        }
        if !(self.buf_start..self.buf_start + self.buf_pages).contains(&index) {
            self.load_chunk(index)?;
        }
        let at = (index - self.buf_start) as usize * PAGE_SIZE;
        buf.copy_from_slice(&self.buf[at..at + PAGE_SIZE]);
        Ok(())
    }

    fn read_stream_header(&mut self, buf: &mut Page) -> Result<(), ImageError> {
        self.store
            .read_at(self.header.area_offset, buf, "reading the stream header")?;
        if blake3::hash(buf).as_bytes() != &self.header.stream_header_hash {
            return Err(ImageError::ChecksumMismatch {
                section: "stream header".into(),
            });
        }
        Ok(())
    }

    /// Start again from page 0.
    pub fn rewind(&mut self) {
        self.cur = 0;
        self.buf_pages = 0;
        self.parser = StreamParser::new();
    }

    /// (chunk number, first stream page, pages) of the chunk holding stream page `i >= 1`.
    fn chunk_of(&self, i: u64) -> (u64, u64, u64) {
        let cp = u64::from(self.header.chunk_pages);
        let meta = self.header.meta_pages;
        if i <= meta {
            let k = (i - 1) / cp;
            (k, 1 + k * cp, cp.min(meta - k * cp))
        } else {
            let kd = (i - 1 - meta) / cp;
            let pages = cp.min(self.header.image_pages - kd * cp);
            (chunks_for(meta, cp) + kd, 1 + meta + kd * cp, pages)
        }
    }

    fn load_chunk(&mut self, i: u64) -> Result<(), ImageError> {
        let (k, start, pages) = self.chunk_of(i);
        self.buf_pages = 0;
        self.buf.resize(pages as usize * PAGE_SIZE, 0);
        let offset = self.header.area_offset + start * PAGE_SIZE as u64;
        self.store.read_at(
            offset,
            &mut self.buf,
            &format!("reading chunk {k} of the image"),
        )?;
        let expected = self.chunk_hashes.get(k as usize);
        if expected != Some(&super::chunk_digest(&self.buf)) {
            let cp = u64::from(self.header.chunk_pages);
            let section = chunk_section(k, self.header.meta_pages, self.header.image_pages, cp);
            return Err(ImageError::ChecksumMismatch { section });
        }
        self.buf_start = start;
        self.buf_pages = pages;
        Ok(())
    }

    fn cross_check(&self, s: &StreamHeader) -> Result<(), ImageError> {
        cross_check(&self.header, s)
    }
}

/// The stream header page must agree with the image header's copy of its counts.
pub(crate) fn cross_check(h: &Header, s: &StreamHeader) -> Result<(), ImageError> {
    let pairs = [
        ("pages", s.pages.0, h.stream_pages),
        ("image_pages", s.image_pages.0, h.image_pages),
        ("num_physpages", s.num_physpages.0, h.num_physpages),
        ("arch magic", s.arch.x86_magic().unwrap_or(0), h.arch_magic),
        (
            "e820 checksum",
            s.arch.e820_checksum().unwrap_or(0),
            h.e820_checksum,
        ),
    ];
    for (field, stream, header) in pairs {
        if stream != header {
            return Err(ImageError::Inconsistent {
                reason: format!(
                    "stream header {field} is {stream:#x}, image header says {header:#x}"
                ),
            });
        }
    }
    Ok(())
}

impl<D: Device> crate::reader::VersionReader for Reader<'_, D> {
    fn restart(&mut self) {
        self.rewind();
    }
    fn finish_stream(&mut self) -> Result<(), ImageError> {
        self.parser.finish().map(|_| ()).map_err(ImageError::from)
    }
    fn info_mut(&mut self) -> &mut ImageInfo {
        &mut self.info
    }
}

impl<D: Device> PageProducer for Reader<'_, D> {
    type Error = ImageError;

    /// Fill `buf` with the next verified page of the kernel stream.
    fn next_page(&mut self, buf: &mut Page) -> Result<bool, ImageError> {
        let i = self.cur;
        if i >= self.header.stream_pages {
            return Ok(false);
        }
        if i == 0 {
            self.read_stream_header(buf)?;
        } else {
            if !(self.buf_start..self.buf_start + self.buf_pages).contains(&i) {
                self.load_chunk(i)?;
            }
            let at = (i - self.buf_start) as usize * PAGE_SIZE;
            buf.copy_from_slice(&self.buf[at..at + PAGE_SIZE]);
        }
        self.parser.push_page(buf)?;
        if i == 0 {
            if let Some(s) = self.parser.header() {
                self.cross_check(s)?;
            }
        }
        self.cur += 1;
        Ok(true)
    }
}
