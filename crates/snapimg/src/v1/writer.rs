//! Streaming image writer.
//!
//! Capture hands the kernel's pages over one at a time with
//! [`Writer::push_page`]; the writer checks them with a
//! [`StreamParser`], hashes them in chunks of up to [`CHUNK_PAGES`] pages and
//! writes each chunk into the target area as soon as it is complete, so the
//! image never has to fit in RAM. [`Writer::commit`] writes the chunk table,
//! syncs, then publishes the header and syncs again. Dropping a writer
//! without committing leaves the previous image as the newest one.

use super::header::{chunks_for, image_bytes_for, Header};
use super::{CaptureMeta, Device, ImageError, ImageInfo, Slot, Store, CHUNK_PAGES, HASH_LEN};
use crate::kstream::{Page, PageCount, PageKind, StreamParser, PAGE_SIZE};

/// Writes one image into a [`Store`]; see the module docs.
#[derive(Debug)]
pub struct Writer<'s, D: Device> {
    store: &'s mut Store<D>,
    meta: CaptureMeta,
    slot: Slot,
    generation: u64,
    area_offset: u64,
    parser: StreamParser,
    stream_header_hash: [u8; HASH_LEN],
    chunk: Vec<u8>,
    chunk_hashes: Vec<[u8; HASH_LEN]>,
    next_offset: u64,
}

impl<'s, D: Device> Writer<'s, D> {
    pub(crate) fn new(
        store: &'s mut Store<D>,
        meta: CaptureMeta,
        slot: Slot,
        generation: u64,
        area_offset: u64,
    ) -> Self {
        Writer {
            store,
            meta,
            slot,
            generation,
            area_offset,
            parser: StreamParser::new(),
            stream_header_hash: [0; HASH_LEN],
            chunk: Vec::new(),
            chunk_hashes: Vec::new(),
            next_offset: area_offset,
        }
    }

    /// Slot (and area) this image goes to.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Generation the image will get.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Pages accepted so far.
    pub fn pages_written(&self) -> PageCount {
        self.parser.pages_consumed()
    }

    /// Accept the next page of the kernel stream.
    ///
    /// The first page must be the stream header; if the image cannot fit the
    /// area this fails with [`ImageError::TooLarge`] before anything is
    /// written. Then the target slot is cleared (its old image is about to be
    /// overwritten) and pages are written chunk by chunk.
    pub fn push_page(&mut self, page: &Page) -> Result<(), ImageError> {
        let kind = self.parser.push_page(page)?;
        let Some(header) = self.parser.header() else {
            return Err(ImageError::Inconsistent {
                reason: "stream header missing".into(),
            });
        };
        let (meta, data) = (header.meta_pages().0, header.image_pages.0);
        let cp = u64::from(CHUNK_PAGES);
        match kind {
            PageKind::Header => {
                self.store.check_fits(header)?;
                self.store.clear_slot(self.slot)?;
                self.stream_header_hash = *blake3::hash(page).as_bytes();
                self.store
                    .write_at(self.area_offset, page, "writing the stream header")?;
                self.next_offset = self.area_offset + PAGE_SIZE as u64;
                self.chunk.reserve_exact(CHUNK_PAGES as usize * PAGE_SIZE);
            }
            PageKind::Meta { index } => {
                self.chunk.extend_from_slice(page);
                if (index + 1) % cp == 0 || index + 1 == meta {
                    self.flush_chunk()?;
                }
            }
            PageKind::Data { index } => {
                self.chunk.extend_from_slice(page);
                if (index + 1) % cp == 0 || index + 1 == data {
                    self.flush_chunk()?;
                }
            }
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<(), ImageError> {
        let what = format!("writing chunk {} of the image", self.chunk_hashes.len());
        self.store.write_at(self.next_offset, &self.chunk, &what)?;
        self.chunk_hashes.push(super::chunk_digest(&self.chunk));
        self.next_offset += self.chunk.len() as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Finish: write the chunk table, sync, publish the header, sync.
    ///
    /// Fails with [`crate::StreamError::Incomplete`] if the stream was not
    /// complete; the previous image then stays the newest.
    pub fn commit(self) -> Result<ImageInfo, ImageError> {
        let stream = self.parser.finish()?.clone();
        let cp = u64::from(CHUNK_PAGES);
        let meta = stream.meta_pages().0;
        let chunk_count = chunks_for(meta, cp) + chunks_for(stream.image_pages.0, cp);
        if chunk_count != self.chunk_hashes.len() as u64 || !self.chunk.is_empty() {
            return Err(ImageError::Inconsistent {
                reason: format!(
                    "wrote {} chunks, expected {chunk_count}",
                    self.chunk_hashes.len()
                ),
            });
        }
        let image_bytes = image_bytes_for(stream.pages.0, chunk_count).unwrap_or(u64::MAX);
        let table_len = usize::try_from(image_bytes - stream.pages.bytes()).unwrap_or(0);
        let mut table = vec![0u8; table_len];
        for (slot, h) in table.chunks_exact_mut(HASH_LEN).zip(&self.chunk_hashes) {
            slot.copy_from_slice(h);
        }
        let chunk_table_hash = *blake3::hash(&table).as_bytes();
        self.store
            .write_at(self.next_offset, &table, "writing the chunk table")?;
        self.store.sync()?;

        let header = Header {
            format_version: super::FORMAT_VERSION,
            generation: self.generation,
            flags: 0,
            created_unix: self.meta.created_unix,
            area_offset: self.area_offset,
            image_bytes,
            stream_pages: stream.pages.0,
            image_pages: stream.image_pages.0,
            meta_pages: meta,
            num_physpages: stream.num_physpages.0,
            arch_magic: stream.arch.x86_magic().unwrap_or(0),
            e820_checksum: stream.arch.e820_checksum().unwrap_or(0),
            chunk_pages: CHUNK_PAGES,
            chunk_count,
            identity: self.meta.identity.clone(),
            stream_header_hash: self.stream_header_hash,
            chunk_table_hash,
            v2: Default::default(),
            binding: None,
        };
        let bytes = header.encode()?;
        let what = format!("writing header slot {}", self.slot);
        self.store.write_at(self.slot.offset(), &bytes, &what)?;
        self.store.sync()?;
        Ok(header.info(self.slot))
    }
}
