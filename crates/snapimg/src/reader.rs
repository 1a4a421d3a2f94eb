//! Image reader: in-order streaming with parallel read-ahead, and random access.
//!
//! Opening an image reads the page index and offset table (their BLAKE3 is
//! checked against the header) and validates every entry: data entries must
//! number the unique pages consecutively, duplicates must point back at a
//! data entry, chunks must be contiguous and of the size their pages need.
//! All sizes are bounded by the store size before anything is allocated.
//!
//! Streaming ([`PageProducer::next_page`]) keeps up to `2 * max(threads, 1)`
//! chunks in flight: workers read them (with `pread` on a shared handle when
//! the device has one, else the caller reads them), check the XXH3-128 of
//! the stored bytes *before* decompressing, and decompress; pages come out in
//! stream order while the next chunks are being read and decompressed.
//! Pages that later duplicates point at are kept in a bounded cache; a
//! duplicate whose page is not cached is fetched again through the
//! random-access path. Every page also goes through a [`StreamParser`].
//!
//! [`Reader::next_run`] hands out the same checked pages as runs borrowed from the
//! reader's buffers (decompressed chunk, zero page, duplicate cache), so resume gives the
//! kernel a run per `writev` without copying pages first. [`Reader::stage_times`] says where
//! the time went: reading, checking, decompressing.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::codec::{Compression, Decoder};
use crate::error::ImageError;
use crate::header::Header;
use crate::index::{
    chunk_hash, decode_index, decode_table, ChunkEntry, Entry, Layout, DEFAULT_CACHE_BYTES,
};
use crate::info::ImageInfo;
use crate::kstream::{Page, PageProducer, StreamHeader, StreamParser, PAGE_SIZE};
use crate::layout::Slot;
use crate::pool::default_threads;
use crate::pool::Pool;
use crate::store::{Device, ReadAt, Store};

/// How [`Reader`] streams an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Decompression threads; 0 reads and decompresses on the calling
    /// thread. Read-ahead is `2 * max(threads, 1)` chunks.
    pub threads: usize,
    /// Bytes of pages kept for later duplicates while streaming; a duplicate
    /// whose page is not held is fetched again (slower, still correct).
    pub dup_cache_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            threads: default_threads(),
            dup_cache_bytes: DEFAULT_CACHE_BYTES,
        }
    }
}

impl<D: Device> Store<D> {
    /// A reader for the newest image (see [`Store::newest`]).
    pub fn reader(&mut self) -> Result<Reader<'_, D>, ImageError> {
        let slot = self.newest()?.slot;
        self.reader_for(slot)
    }

    /// A reader for the image in `slot`, newest or not: explicit fallback.
    pub fn reader_for(&mut self, slot: Slot) -> Result<Reader<'_, D>, ImageError> {
        let header = match self.read_header(slot)? {
            None => return Err(self.no_image()?),
            Some(Err(e)) => return Err(e),
            Some(Ok(h)) => h,
        };
        if header.invalidated() {
            return Err(ImageError::Invalidated {
                generation: header.generation,
                slot,
            });
        }
        Reader::new(self, slot, header)
    }
}

/// Where a worker gets a chunk's stored bytes.
enum Source {
    /// Already read by the caller.
    Bytes(Vec<u8>),
    /// To be read at this absolute offset.
    At(Arc<dyn ReadAt>, u64),
}

struct Job {
    src: Source,
    chunk: ChunkEntry,
    kind: Compression,
}

/// Why a chunk could not be produced.
enum Fault {
    Read(std::io::Error),
    Checksum,
    Decode(String),
}

type Done = Result<(Vec<u8>, StageTimes), Fault>;

/// Where the time of reading chunks went: summed over chunks (and over workers, so the sum
/// can exceed the wall time when several threads decompress).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Reading stored bytes from the device.
    pub read: Duration,
    /// Checking the stored bytes' checksum.
    pub check: Duration,
    /// Decompressing.
    pub decode: Duration,
    /// Stored bytes read.
    pub bytes: u64,
}

impl std::ops::AddAssign for StageTimes {
    fn add_assign(&mut self, o: Self) {
        self.read += o.read;
        self.check += o.check;
        self.decode += o.decode;
        self.bytes += o.bytes;
    }
}

fn run_job(job: Job, dec: &mut Decoder) -> Done {
    let mut times = StageTimes::default();
    let t = Instant::now();
    let stored = match job.src {
        Source::Bytes(b) => b,
        Source::At(dev, at) => {
            let mut b = vec![0u8; job.chunk.stored_len as usize];
            dev.read_exact_at(&mut b, at).map_err(Fault::Read)?;
            b
        }
    };
    let t1 = Instant::now();
    times.read = t1 - t;
    times.bytes = stored.len() as u64;
    if chunk_hash(&stored) != job.chunk.hash {
        return Err(Fault::Checksum);
    }
    let t2 = Instant::now();
    times.check = t2 - t1;
    let mut raw = vec![0u8; job.chunk.raw_len as usize];
    dec.decode(job.kind, &stored, &mut raw)
        .map_err(Fault::Decode)?;
    times.decode = t2.elapsed();
    Ok((raw, times))
}

/// State of an in-order pass.
struct Stream {
    pool: Pool<Job, Done>,
    next_submit: u64,
    current: Option<(u64, Vec<u8>)>,
    /// Remaining duplicate references per unique page still to be streamed.
    refs: HashMap<u64, u32>,
    cache: HashMap<u64, Box<Page>>,
    cache_bytes: usize,
    /// Cached pages to drop at the next run (their last duplicate is in the current one).
    release: Vec<u64>,
}

/// Reads one image out of a [`Store`]; see the module docs.
pub struct Reader<'s, D: Device> {
    store: &'s mut Store<D>,
    header: Header,
    info: ImageInfo,
    kind: Compression,
    entries: Vec<Entry>,
    chunks: Vec<ChunkEntry>,
    data_start: u64,
    dup_refs: HashMap<u64, u32>,
    shared: Option<Arc<dyn ReadAt>>,
    opts: ReadOptions,
    stream: Option<Stream>,
    cur: u64,
    parser: StreamParser,
    random: Option<(u64, Vec<u8>)>,
    decoder: Decoder,
    times: StageTimes,
}

impl<D: Device> fmt::Debug for Reader<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reader")
            .field("info", &self.info)
            .field("opts", &self.opts)
            .field("cur", &self.cur)
            .finish_non_exhaustive()
    }
}

fn bad(reason: String) -> ImageError {
    ImageError::Inconsistent { reason }
}

impl<'s, D: Device> Reader<'s, D> {
    pub(crate) fn new(
        store: &'s mut Store<D>,
        slot: Slot,
        header: Header,
    ) -> Result<Self, ImageError> {
        // Header::decode checked the sums and sizes for overflow; the
        // store must hold the image and, for a lazy image, its swap region.
        let end = header.store_end();
        if end > store.size {
            return Err(ImageError::Truncated {
                expected: end,
                actual: store.size,
            });
        }
        let kind = header.compression;
        let layout = Layout::new(header.stream_pages, header.chunk_pages)
            .ok_or_else(|| bad("layout overflows".into()))?;
        let meta_len = usize::try_from(layout.data_offset())
            .map_err(|_| bad("page index larger than memory".into()))?;
        let mut meta = vec![0u8; meta_len];
        store.read_at(
            header.area_offset,
            &mut meta,
            "reading the page index and offset table",
        )?;
        if blake3::hash(&meta).as_bytes() != &header.index_hash {
            return Err(ImageError::ChecksumMismatch {
                section: "page index and offset table".into(),
            });
        }
        let (index, table) = meta.split_at(layout.index_bytes as usize);
        let entries = decode_index(&header.counts(), index)?;
        let chunks = decode_table(&header.counts(), table)?;
        let mut dup_refs: HashMap<u64, u32> = HashMap::new();
        let cp = u64::from(header.chunk_pages);
        for e in &entries {
            if let Entry::Stored { k, s, dup: true } = *e {
                *dup_refs.entry(k * cp + s).or_default() += 1;
            }
        }
        let info = header.info(slot);
        let shared = store.dev.shared_reader();
        Ok(Reader {
            data_start: header.area_offset + layout.data_offset(),
            store,
            header,
            info,
            kind,
            entries,
            chunks,
            dup_refs,
            shared,
            opts: ReadOptions::default(),
            stream: None,
            cur: 0,
            parser: StreamParser::new(),
            random: None,
            decoder: Decoder::new(),
            times: StageTimes::default(),
        })
    }

    /// Use these threads and cache sizes (takes effect at the next pass).
    pub fn with_options(mut self, opts: ReadOptions) -> Self {
        self.opts = opts;
        self.stream = None;
        self
    }

    /// Where reading, checking and decompressing the chunks handed out so far spent their
    /// time (read time of chunks the caller read itself included).
    pub fn stage_times(&self) -> StageTimes {
        self.times
    }

    /// What the header says about this image (`verified` after [`Reader::verify_all`]).
    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    /// Read and check every chunk and the stream structure, then rewind.
    ///
    /// Call this before writing anything to the kernel.
    pub fn verify_all(&mut self) -> Result<&ImageInfo, ImageError> {
        self.rewind();
        let result = self.read_through();
        self.rewind();
        result?;
        self.info.verified = true;
        Ok(&self.info)
    }

    /// Every page in order (each checked as it is handed out), then the stream structure.
    fn read_through(&mut self) -> Result<(), ImageError> {
        let mut page = [0u8; PAGE_SIZE];
        while self.next_page(&mut page)? {}
        self.parser.finish()?;
        Ok(())
    }

    /// Start streaming again from page 0.
    pub fn rewind(&mut self) {
        self.cur = 0;
        self.stream = None;
        self.parser = StreamParser::new();
    }

    /// Section name of chunk `k`: "chunk 17 (stream pages a..b)", the range
    /// spanning the stream pages stored in it.
    fn section(&self, k: u64) -> String {
        let mut first = None;
        let mut last = 0;
        for (i, e) in self.entries.iter().enumerate() {
            if let Entry::Stored {
                k: ek, dup: false, ..
            } = *e
            {
                if ek == k {
                    first.get_or_insert(i);
                    last = i;
                }
            }
        }
        let a = first.unwrap_or(0);
        format!("chunk {k} (stream pages {a}..{})", last + 1)
    }

    fn fault(&self, k: u64, f: Fault) -> ImageError {
        match f {
            Fault::Read(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                ImageError::Truncated {
                    expected: self.header.area_offset + self.header.image_bytes,
                    actual: self.store.size,
                }
            }
            Fault::Read(source) => ImageError::Io {
                context: format!("reading {}", self.section(k)),
                source,
            },
            Fault::Checksum => ImageError::ChecksumMismatch {
                section: self.section(k),
            },
            Fault::Decode(reason) => ImageError::Decompress {
                section: self.section(k),
                reason,
            },
        }
    }

    /// A job for chunk `k`, reading its bytes now unless workers can.
    fn job(&mut self, k: u64, allow_shared: bool) -> Result<Job, ImageError> {
        let chunk = self.chunks[k as usize];
        let at = self.data_start + chunk.offset;
        let src = match &self.shared {
            Some(dev) if allow_shared => Source::At(Arc::clone(dev), at),
            _ => {
                let t = Instant::now();
                let mut b = vec![0u8; chunk.stored_len as usize];
                self.store
                    .read_at(at, &mut b, &format!("reading chunk {k} of the image"))?;
                self.times.read += t.elapsed();
                Source::Bytes(b)
            }
        };
        Ok(Job {
            src,
            chunk,
            kind: self.kind,
        })
    }

    /// Raw bytes of chunk `k` through the random-access path (one chunk cached).
    fn load_random(&mut self, k: u64) -> Result<&[u8], ImageError> {
        if self.random.as_ref().map(|r| r.0) != Some(k) {
            self.random = None;
            let job = self.job(k, false)?;
            let (raw, times) = run_job(job, &mut self.decoder).map_err(|f| self.fault(k, f))?;
            self.times += times;
            self.random = Some((k, raw));
        }
        Ok(self.random.as_ref().map_or(&[][..], |r| &r.1[..]))
    }

    /// Fill `buf` with stream page `index`, checked (its chunk's checksum,
    /// and the stream header hash for page 0), without moving the streaming
    /// position. Random access for on-demand paging.
    pub fn page_at(&mut self, index: u64, buf: &mut Page) -> Result<(), ImageError> {
        let pages = self.header.stream_pages;
        let Some(&e) = self.entries.get(index as usize).filter(|_| index < pages) else {
            return Err(ImageError::PageOutOfRange { index, pages });
        };
        match e {
            Entry::Zero => buf.fill(0),
            Entry::Stored { k, s, .. } => {
                let current = self.stream.as_ref().and_then(|st| st.current.as_ref());
                let page = match current.filter(|c| c.0 == k) {
                    Some((_, raw)) => slot_of(raw, s),
                    None => slot_of(self.load_random(k)?, s),
                };
                let page = page.ok_or_else(|| bad(format!("chunk {k} has no slot {s}")))?;
                buf.copy_from_slice(page);
            }
        }
        if index == 0 {
            self.check_stream_header(buf)?;
        }
        Ok(())
    }

    fn check_stream_header(&self, buf: &Page) -> Result<(), ImageError> {
        if blake3::hash(buf).as_bytes() != &self.header.stream_header_hash {
            return Err(ImageError::ChecksumMismatch {
                section: "stream header".into(),
            });
        }
        Ok(())
    }

    fn start_stream(&mut self) -> Stream {
        let pool = Pool::new(self.opts.threads, || {
            let mut dec = Decoder::new();
            Box::new(move |job: Job| run_job(job, &mut dec))
        });
        Stream {
            pool,
            next_submit: 0,
            current: None,
            refs: self.dup_refs.clone(),
            cache: HashMap::new(),
            cache_bytes: 0,
            release: Vec::new(),
        }
    }

    /// Keep the read-ahead window full.
    fn fill(&mut self, st: &mut Stream) -> Result<(), ImageError> {
        let max = 2 * st.pool.threads().max(1) as u64;
        while st.next_submit < self.chunks.len() as u64 && st.pool.in_flight() < max {
            let job = self.job(st.next_submit, st.pool.threads() > 0)?;
            st.pool.submit(job).map_err(|e| ImageError::Worker {
                reason: format!("decompression: {e}"),
            })?;
            st.next_submit += 1;
        }
        Ok(())
    }

    /// Make chunk `k` (the next one in order) current.
    fn advance(&mut self, st: &mut Stream, k: u64) -> Result<(), ImageError> {
        self.fill(st)?;
        let done = st.pool.take_next().map_err(|e| ImageError::Worker {
            reason: format!("decompression: {e}"),
        })?;
        let expect = st.current.as_ref().map_or(0, |c| c.0 + 1);
        let raw = match done {
            Some(Ok((raw, times))) if expect == k => {
                self.times += times;
                raw
            }
            Some(Err(f)) => return Err(self.fault(expect, f)),
            _ => return Err(bad(format!("chunk {k} requested out of order"))),
        };
        // Refill right away so reading and decompression go on while the
        // consumer copies this chunk's pages.
        self.fill(st)?;
        let cp = u64::from(self.header.chunk_pages);
        for s in 0..(raw.len() / PAGE_SIZE) as u64 {
            let u = k * cp + s;
            if st.refs.contains_key(&u) && st.cache_bytes + PAGE_SIZE <= self.opts.dup_cache_bytes {
                if let Some(page) = slot_of(&raw, s) {
                    st.cache.insert(u, Box::new(*page));
                    st.cache_bytes += PAGE_SIZE;
                }
            }
        }
        st.current = Some((k, raw));
        Ok(())
    }

    /// The next run of checked pages of the kernel stream, at most `max` (at least one),
    /// borrowed from the reader's buffers until the next call; empty at the end of the
    /// stream. A run never spans two chunks' buffers, so it is at most a chunk's pages plus
    /// zero pages and duplicates. Every page is checked exactly as [`PageProducer::next_page`]
    /// checks it (its chunk's checksum before any of its pages, page 0 against the stream
    /// header hash, every page through the stream parser); a writer can hand the run to the
    /// kernel without copying it first (`writev`).
    pub fn next_run(&mut self, max: usize) -> Result<Vec<&Page>, ImageError> {
        let mut st = match self.stream.take() {
            Some(st) => st,
            None => self.start_stream(),
        };
        let planned = self.plan_run(&mut st, max.max(1));
        self.stream = Some(st);
        let srcs = planned?;
        let Some(st) = self.stream.as_ref() else {
            return Ok(Vec::new());
        };
        let mut run = Vec::with_capacity(srcs.len());
        for src in srcs {
            let page = resolve(st, &self.random, src)
                .ok_or_else(|| bad(format!("stream page {} lost its buffer", self.cur)))?;
            if self.cur == 0 && blake3::hash(page).as_bytes() != &self.header.stream_header_hash {
                return Err(ImageError::ChecksumMismatch {
                    section: "stream header".into(),
                });
            }
            self.parser.push_page(page)?;
            if self.cur == 0 {
                if let Some(s) = self.parser.header() {
                    cross_check(&self.header, s)?;
                }
            }
            self.cur += 1;
            run.push(page);
        }
        Ok(run)
    }

    /// Where the next run's pages are, loading the chunk they need (see [`Reader::next_run`]).
    fn plan_run(&mut self, st: &mut Stream, max: usize) -> Result<Vec<Src>, ImageError> {
        // Cached pages whose last duplicate went out in the previous run.
        for u in st.release.drain(..) {
            if st.cache.remove(&u).is_some() {
                st.cache_bytes -= PAGE_SIZE;
            }
        }
        let cp = u64::from(self.header.chunk_pages);
        let mut srcs = Vec::new();
        let mut i = self.cur as usize;
        while srcs.len() < max {
            let Some(&e) = self.entries.get(i) else {
                break;
            };
            let current = st.current.as_ref().map(|c| c.0);
            let src = match e {
                Entry::Zero => Src::Zero,
                Entry::Stored { k, s, dup: false } => {
                    if current != Some(k) {
                        if !srcs.is_empty() {
                            break;
                        }
                        self.advance(st, k)?;
                    }
                    Src::Current(s)
                }
                Entry::Stored { k, s, dup: true } => {
                    let u = k * cp + s;
                    let src = if st.cache.contains_key(&u) {
                        Src::Cached(u)
                    } else if current == Some(k) {
                        Src::Current(s)
                    } else {
                        // Not held: read its chunk again, alone in its run (the
                        // random-access buffer holds one chunk).
                        if !srcs.is_empty() {
                            break;
                        }
                        self.load_random(k)?;
                        Src::Random(s)
                    };
                    if let Some(n) = st.refs.get_mut(&u) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            st.refs.remove(&u);
                            st.release.push(u);
                        }
                    }
                    if matches!(src, Src::Random(_)) {
                        srcs.push(src);
                        break;
                    }
                    src
                }
            };
            srcs.push(src);
            i += 1;
        }
        Ok(srcs)
    }
}

/// Where a page of a run lives until the next run.
#[derive(Debug, Clone, Copy)]
enum Src {
    Zero,
    /// Slot of the current chunk.
    Current(u64),
    /// Unique page number in the duplicate cache.
    Cached(u64),
    /// Slot of the chunk in the random-access buffer.
    Random(u64),
}

static ZERO_PAGE: Page = [0u8; PAGE_SIZE];

fn slot_of(raw: &[u8], s: u64) -> Option<&Page> {
    let at = usize::try_from(s).ok()?.checked_mul(PAGE_SIZE)?;
    raw.get(at..at + PAGE_SIZE)
        .and_then(|p| <&Page>::try_from(p).ok())
}

/// The page `src` names; `None` only if the plan and the buffers disagree (a bug, reported
/// as an inconsistent image rather than handing out a wrong page).
fn resolve<'a>(st: &'a Stream, random: &'a Option<(u64, Vec<u8>)>, src: Src) -> Option<&'a Page> {
    match src {
        Src::Zero => Some(&ZERO_PAGE),
        Src::Current(s) => slot_of(&st.current.as_ref()?.1, s),
        Src::Cached(u) => st.cache.get(&u).map(|p| &**p),
        Src::Random(s) => slot_of(&random.as_ref()?.1, s),
    }
}

impl<D: Device> PageProducer for Reader<'_, D> {
    type Error = ImageError;

    /// Fill `buf` with the next checked page of the kernel stream.
    fn next_page(&mut self, buf: &mut Page) -> Result<bool, ImageError> {
        match self.next_run(1)?.first() {
            Some(page) => {
                buf.copy_from_slice(&page[..]);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The stream header page must agree with the image header's copy of its counts.
fn cross_check(h: &Header, s: &StreamHeader) -> Result<(), ImageError> {
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
