//! Streaming, parallel image writer.
//!
//! [`Writer::push_page`] takes the kernel's pages one at a time, as capture
//! reads them from `/dev/snapshot`. On the calling thread each page is
//! checked by a [`StreamParser`], then classified: all-zero (flagged in the
//! page index), a duplicate of an earlier page (XXH3-128 match *and* equal
//! bytes; the earlier page must still be held in the current chunk or in the
//! bounded cache of recent chunks, otherwise the page is simply stored
//! again), or unique (appended to the current chunk). A full chunk goes to
//! the worker pool for compression; finished chunks are written in order as
//! they come back, with at most `2 * max(threads, 1)` in flight.
//!
//! [`Writer::commit`] writes the last chunks, the page index and the offset
//! table, syncs, then publishes the header and syncs again (see `store`):
//! until then the previous image stays the newest.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::codec::{Compression, Encoder};
use crate::error::ImageError;
use crate::header::Header;
use crate::index::{
    self, chunk_hash, entry, ChunkEntry, Layout, DEFAULT_CACHE_BYTES, DEFAULT_CHUNK_PAGES,
    MAX_CHUNK_PAGES,
};
use crate::info::{CaptureMeta, ImageInfo};
use crate::kstream::{Page, PageCount, PageKind, StreamParser, PAGE_SIZE};
use crate::layout::{Slot, HASH_LEN};
use crate::pool::default_threads;
use crate::pool::{Pool, WorkerLost};
use crate::store::{Device, Store};
use crate::swap::SwapRegion;

const ZERO_PAGE: Page = [0u8; PAGE_SIZE];

/// How [`Writer`] builds an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// Chunk compression.
    pub compression: Compression,
    /// Unique pages per chunk, 1..=[`MAX_CHUNK_PAGES`].
    pub chunk_pages: u32,
    /// Compression threads; 0 compresses on the calling thread. At most
    /// `2 * max(threads, 1)` chunks are in flight.
    pub threads: usize,
    /// Bytes of recent raw chunks kept to compare dedupe candidates with: a
    /// page whose earlier twin is no longer held is stored again.
    pub dedupe_cache_bytes: usize,
    /// Lazy image: the swap region reserved at the end of the target area
    /// (from [`crate::Store::plan_swap`]). The image must then fit in front
    /// of it (`swap.offset - area_offset` bytes), and the header records it.
    pub swap: Option<SwapRegion>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            compression: Compression::Lz4,
            chunk_pages: DEFAULT_CHUNK_PAGES,
            threads: default_threads(),
            dedupe_cache_bytes: DEFAULT_CACHE_BYTES,
            swap: None,
        }
    }
}

impl WriteOptions {
    /// Error with [`ImageError::BadOptions`] if a value is out of range, or
    /// [`ImageError::BadSwapRegion`] (see [`SwapRegion::check`]). Whether the
    /// region lies inside the target area is checked by
    /// [`crate::Store::writer_with`], which knows the area.
    pub fn check(&self) -> Result<(), ImageError> {
        if self.chunk_pages == 0 || self.chunk_pages > MAX_CHUNK_PAGES {
            return Err(ImageError::BadOptions {
                reason: format!(
                    "chunk_pages is {}, must be 1..={MAX_CHUNK_PAGES}",
                    self.chunk_pages
                ),
            });
        }
        let (code, level) = self.compression.code();
        if Compression::from_code(code, level).is_none() {
            return Err(ImageError::BadOptions {
                reason: format!("zstd level {level} is not supported"),
            });
        }
        if let Some(swap) = &self.swap {
            swap.check()?;
        }
        Ok(())
    }
}

impl<D: Device> Store<D> {
    /// Start writing a new image (default [`WriteOptions`]:
    /// LZ4, 32-page chunks, one worker per CPU) into the slot not holding the
    /// newest header.
    ///
    /// Nothing is written until the first page (the stream header) arrives.
    pub fn writer(&mut self, meta: CaptureMeta) -> Result<Writer<'_, D>, ImageError> {
        self.writer_with(meta, WriteOptions::default())
    }

    /// [`Store::writer`] with explicit options.
    pub fn writer_with(
        &mut self,
        meta: CaptureMeta,
        opts: WriteOptions,
    ) -> Result<Writer<'_, D>, ImageError> {
        opts.check()?;
        let (slot, generation, area) = self.prepare_write(&meta)?;
        if let Some(swap) = &opts.swap {
            self.check_swap_in_area(swap, slot, area)?;
        }
        Ok(Writer::new(self, meta, slot, generation, area, opts))
    }

    /// A lazy image's region must lie inside the area the image goes to.
    fn check_swap_in_area(
        &self,
        swap: &SwapRegion,
        slot: Slot,
        area: u64,
    ) -> Result<(), ImageError> {
        let area_end = area + self.area_capacity();
        let inside = swap.offset >= area && matches!(swap.end(), Some(end) if end <= area_end);
        if !inside {
            return Err(ImageError::BadSwapRegion {
                reason: format!(
                    "bytes {}..{} are not inside area {slot} (bytes {area}..{area_end}), \
                     where the next image goes (use Store::plan_swap)",
                    swap.offset,
                    swap.offset.saturating_add(swap.bytes)
                ),
            });
        }
        Ok(())
    }
}

/// A compressed chunk, ready to be written.
struct Stored {
    bytes: Vec<u8>,
    raw_len: usize,
}

type Job = Arc<Vec<u8>>;
type Done = Result<Stored, String>;

/// Writes one image into a [`Store`]; see the module docs.
pub struct Writer<'s, D: Device> {
    store: &'s mut Store<D>,
    meta: CaptureMeta,
    slot: Slot,
    generation: u64,
    area_offset: u64,
    /// Bytes of the area the image may use: up to the swap region of a lazy
    /// image, else the whole area.
    room: u64,
    opts: WriteOptions,
    parser: StreamParser,
    stream_header_hash: [u8; HASH_LEN],
    layout: Option<Layout>,
    /// Encoded page index entries, one per stream page so far.
    index: Vec<u64>,
    /// Stream page of each unique page.
    unique_at: Vec<u64>,
    /// XXH3-128 of a page → unique page holding it (the newest copy).
    seen: HashMap<u128, u64>,
    /// Raw bytes of the chunk being filled.
    chunk: Vec<u8>,
    /// Raw bytes of recent chunks already handed to the pool, oldest first,
    /// with the number of the first one.
    recent: VecDeque<Arc<Vec<u8>>>,
    recent_first: u64,
    recent_bytes: usize,
    pool: Pool<Job, Done>,
    chunks_submitted: u64,
    table: Vec<ChunkEntry>,
    data_written: u64,
    zero_pages: u64,
    dup_pages: u64,
}

impl<D: Device> fmt::Debug for Writer<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("slot", &self.slot)
            .field("generation", &self.generation)
            .field("opts", &self.opts)
            .field("pages", &self.index.len())
            .field("chunks_written", &self.table.len())
            .finish_non_exhaustive()
    }
}

fn worker_err(e: WorkerLost) -> ImageError {
    ImageError::Worker {
        reason: format!("compression: {e}"),
    }
}

impl<'s, D: Device> Writer<'s, D> {
    pub(crate) fn new(
        store: &'s mut Store<D>,
        meta: CaptureMeta,
        slot: Slot,
        generation: u64,
        area_offset: u64,
        opts: WriteOptions,
    ) -> Self {
        let room = match &opts.swap {
            Some(swap) => swap.offset.saturating_sub(area_offset),
            None => store.area_capacity(),
        };
        let compression = opts.compression;
        let pool = Pool::new(opts.threads, move || {
            let mut enc = Encoder::new(compression);
            Box::new(move |raw: Job| {
                enc.encode(&raw).map(|bytes| Stored {
                    bytes,
                    raw_len: raw.len(),
                })
            })
        });
        Writer {
            store,
            meta,
            slot,
            generation,
            area_offset,
            room,
            opts,
            parser: StreamParser::new(),
            stream_header_hash: [0; HASH_LEN],
            layout: None,
            index: Vec::new(),
            unique_at: Vec::new(),
            seen: HashMap::new(),
            chunk: Vec::new(),
            recent: VecDeque::new(),
            recent_first: 0,
            recent_bytes: 0,
            pool,
            chunks_submitted: 0,
            table: Vec::new(),
            data_written: 0,
            zero_pages: 0,
            dup_pages: 0,
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

    /// Options in use.
    pub fn options(&self) -> &WriteOptions {
        &self.opts
    }

    /// Bytes of the area the image may use: in front of the swap region of a
    /// lazy image ([`WriteOptions::swap`]), else the whole area.
    pub fn room(&self) -> u64 {
        self.room
    }

    fn chunk_pages(&self) -> u64 {
        u64::from(self.opts.chunk_pages)
    }

    /// Accept the next page of the kernel stream.
    ///
    /// The first page must be the stream header; if even the page index and
    /// offset table cannot fit the area (for a lazy image: the part in front
    /// of the swap region, [`Writer::room`]) this fails with
    /// [`ImageError::TooLarge`] before anything is written. Then the target
    /// slot is cleared and chunks are written as they are compressed; if they
    /// outgrow that room, [`ImageError::OutOfSpace`] (the previous image is
    /// untouched).
    pub fn push_page(&mut self, page: &Page) -> Result<(), ImageError> {
        let kind = self.parser.push_page(page)?;
        if kind == PageKind::Header {
            self.start(page)?;
        }
        let i = self.index.len() as u64;
        if page == &ZERO_PAGE {
            self.index.push(entry::zero());
            self.zero_pages += 1;
            return Ok(());
        }
        let hash = xxhash_rust::xxh3::xxh3_128(page);
        if let Some(&u) = self.seen.get(&hash) {
            if self.unique_page(u) == Some(&page[..]) {
                self.index.push(entry::dup(self.unique_at[u as usize]));
                self.dup_pages += 1;
                return Ok(());
            }
        }
        let u = self.unique_at.len() as u64;
        let cp = self.chunk_pages();
        self.unique_at.push(i);
        self.seen.insert(hash, u);
        self.index.push(entry::data(u / cp, u % cp));
        self.chunk.extend_from_slice(page);
        if self.chunk.len() as u64 == cp * PAGE_SIZE as u64 {
            self.submit_chunk()?;
        }
        Ok(())
    }

    fn start(&mut self, page: &Page) -> Result<(), ImageError> {
        let pages = self.parser.header().map_or(0, |h| h.pages.0);
        let layout =
            Layout::new(pages, self.opts.chunk_pages).ok_or_else(|| ImageError::Inconsistent {
                reason: format!("stream of {pages} pages is too large"),
            })?;
        let available = self.room;
        let needed = layout.data_offset().saturating_add(1);
        if needed > available {
            return Err(ImageError::TooLarge { needed, available });
        }
        self.store.clear_slot(self.slot)?;
        self.stream_header_hash = *blake3::hash(page).as_bytes();
        self.layout = Some(layout);
        let cap = usize::try_from(pages).unwrap_or(0).min(1 << 24);
        self.index.reserve(cap);
        self.chunk
            .reserve_exact(self.opts.chunk_pages as usize * PAGE_SIZE);
        Ok(())
    }

    /// Raw bytes of unique page `u`, if still held.
    fn unique_page(&self, u: u64) -> Option<&[u8]> {
        let cp = self.chunk_pages();
        let (k, s) = (u / cp, (u % cp) as usize * PAGE_SIZE);
        let chunk: &[u8] = if k == self.chunks_submitted {
            &self.chunk
        } else {
            let back = k.checked_sub(self.recent_first)?;
            self.recent.get(usize::try_from(back).ok()?)?
        };
        chunk.get(s..s + PAGE_SIZE)
    }

    fn submit_chunk(&mut self) -> Result<(), ImageError> {
        let cap = self.opts.chunk_pages as usize * PAGE_SIZE;
        let raw = Arc::new(std::mem::replace(&mut self.chunk, Vec::with_capacity(cap)));
        self.recent.push_back(Arc::clone(&raw));
        self.recent_bytes += raw.len();
        while self.recent_bytes > self.opts.dedupe_cache_bytes {
            let Some(old) = self.recent.pop_front() else {
                break;
            };
            self.recent_bytes -= old.len();
            self.recent_first += 1;
        }
        self.pool.submit(raw).map_err(worker_err)?;
        self.chunks_submitted += 1;
        while let Some(done) = self.pool.try_take_next().map_err(worker_err)? {
            self.write_chunk(done)?;
        }
        let max = 2 * self.pool.threads().max(1) as u64;
        while self.pool.in_flight() >= max {
            match self.pool.take_next().map_err(worker_err)? {
                Some(done) => self.write_chunk(done)?,
                None => break,
            }
        }
        Ok(())
    }

    fn write_chunk(&mut self, done: Done) -> Result<(), ImageError> {
        let k = self.table.len();
        let stored = done.map_err(|reason| ImageError::Worker {
            reason: format!("compressing chunk {k}: {reason}"),
        })?;
        let data_offset = self.layout.map_or(0, |l| l.data_offset());
        let end = data_offset
            .saturating_add(self.data_written)
            .saturating_add(stored.bytes.len() as u64);
        let available = self.room;
        if end > available {
            return Err(ImageError::OutOfSpace {
                written: end,
                pages: self.parser.pages_consumed().0,
                total: self.parser.header().map_or(0, |h| h.pages.0),
                available,
            });
        }
        let at = self.area_offset + data_offset + self.data_written;
        self.store.write_at(
            at,
            &stored.bytes,
            &format!("writing chunk {k} of the image"),
        )?;
        let too_big = || ImageError::Inconsistent {
            reason: format!("chunk {k} is larger than 4 GiB"),
        };
        self.table.push(ChunkEntry {
            offset: self.data_written,
            stored_len: u32::try_from(stored.bytes.len()).map_err(|_| too_big())?,
            raw_len: u32::try_from(stored.raw_len).map_err(|_| too_big())?,
            hash: chunk_hash(&stored.bytes),
        });
        self.data_written += stored.bytes.len() as u64;
        Ok(())
    }

    /// Finish: write the remaining chunks, the page index and offset table,
    /// sync, publish the header, sync.
    ///
    /// Fails with [`crate::StreamError::Incomplete`] if the stream was not
    /// complete; the previous image then stays the newest.
    pub fn commit(mut self) -> Result<ImageInfo, ImageError> {
        let stream = self.parser.finish()?.clone();
        let layout = self.layout.ok_or_else(|| ImageError::Inconsistent {
            reason: "stream header missing".into(),
        })?;
        if !self.chunk.is_empty() {
            self.submit_chunk()?;
        }
        while let Some(done) = self.pool.take_next().map_err(worker_err)? {
            self.write_chunk(done)?;
        }
        let unique = self.unique_at.len() as u64;
        let chunk_count = unique.div_ceil(self.chunk_pages());
        if self.table.len() as u64 != chunk_count || self.index.len() as u64 != stream.pages.0 {
            return Err(ImageError::Inconsistent {
                reason: format!(
                    "wrote {} chunks for {unique} unique pages, expected {chunk_count}",
                    self.table.len()
                ),
            });
        }
        let meta = index::encode(&layout, &self.index, &self.table).ok_or_else(|| {
            ImageError::Inconsistent {
                reason: "page index larger than memory".into(),
            }
        })?;
        let meta_hash = *blake3::hash(&meta).as_bytes();
        self.store.write_at(
            self.area_offset,
            &meta,
            "writing the page index and offset table",
        )?;
        self.store.sync()?;

        let header = Header {
            generation: self.generation,
            flags: 0,
            created_unix: self.meta.created_unix,
            area_offset: self.area_offset,
            image_bytes: layout.data_offset() + self.data_written,
            stream_pages: stream.pages.0,
            image_pages: stream.image_pages.0,
            meta_pages: stream.meta_pages().0,
            num_physpages: stream.num_physpages.0,
            arch_magic: stream.arch.x86_magic().unwrap_or(0),
            e820_checksum: stream.arch.e820_checksum().unwrap_or(0),
            chunk_pages: self.opts.chunk_pages,
            chunk_count,
            identity: self.meta.identity.clone(),
            stream_header_hash: self.stream_header_hash,
            index_hash: meta_hash,
            compression: self.opts.compression,
            index_bytes: layout.index_bytes,
            table_bytes: layout.table_bytes,
            data_bytes: self.data_written,
            zero_pages: self.zero_pages,
            dup_pages: self.dup_pages,
            unique_pages: unique,
            swap: self.opts.swap,
            binding: self.meta.binding.clone(),
        };
        let bytes = header.encode()?;
        let what = format!("writing header slot {}", self.slot);
        self.store.write_at(self.slot.offset(), &bytes, &what)?;
        self.store.sync()?;
        Ok(header.info(self.slot))
    }
}
