//! Reading an image back in stream order. Each chunk is read once, its BLAKE3 checked before
//! it is decompressed, and kept only while pages still to come need it.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::store::Store;
use std::collections::HashMap;
use storelayout::pages::check_page_ref;
use storelayout::{ChunkRec, Damage, ImageMeta, Page, PageRef, PAGE};

/// Stored bytes the reader asks the medium to fetch ahead of the chunk it is loading.
const READ_AHEAD: u64 = 8 << 20;

/// What a zero page reads as.
static ZERO_PAGE: Page = [0; PAGE];

/// Streams one image's pages.
pub struct ImageReader<'s, M: Medium> {
    store: &'s Store<M>,
    meta: ImageMeta,
    chunks: HashMap<u64, ChunkRec>,
    /// Uses still to come per chunk.
    uses: HashMap<u64, u32>,
    /// Chunks in the order the stream first needs them, and how far read-ahead advice has
    /// been given ([`Medium::will_need`]).
    order: Vec<u64>,
    advised: usize,
    loaded: usize,
    cache: HashMap<u64, Vec<u8>>,
    /// Chunks the last run used for the last time: dropped at the next call, once the
    /// caller no longer borrows them.
    release: Vec<u64>,
    cur: usize,
    /// Chunks read (a chunk read twice counts twice) and their stored bytes.
    pub chunks_read: u64,
    /// Stored bytes read.
    pub bytes_read: u64,
    /// Time spent reading, checking (BLAKE3) and decompressing chunks.
    pub times: ChunkTimes,
}

/// Where a reader's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkTimes {
    /// Reading stored bytes from the medium.
    pub read: std::time::Duration,
    /// Checking their checksum, or opening them (decrypting and authenticating) when sealed.
    pub check: std::time::Duration,
    /// Decompressing them.
    pub decode: std::time::Duration,
}

impl<M: Medium> Store<M> {
    /// A reader for the image `name`.
    pub fn reader(&self, name: &str) -> Result<ImageReader<'_, M>, StoreError> {
        let rec = self
            .image(name)
            .ok_or_else(|| StoreError::NoImage(name.into()))?;
        let meta = self.image_meta(rec)?;
        let chunks: HashMap<u64, ChunkRec> =
            self.catalog.chunks.iter().map(|c| (c.id, *c)).collect();
        let mut uses: HashMap<u64, u32> = HashMap::new();
        let mut order = Vec::new();
        for p in &meta.pages {
            if let PageRef::At { chunk, slot } = *p {
                check_page_ref(rec, chunk, slot, chunks.get(&chunk))?;
                let n = uses.entry(chunk).or_default();
                if *n == 0 {
                    order.push(chunk);
                }
                *n += 1;
            }
        }
        Ok(ImageReader {
            store: self,
            meta,
            chunks,
            uses,
            order,
            advised: 0,
            loaded: 0,
            cache: HashMap::new(),
            release: Vec::new(),
            cur: 0,
            chunks_read: 0,
            bytes_read: 0,
            times: ChunkTimes::default(),
        })
    }
}

impl<M: Medium> ImageReader<'_, M> {
    /// The caller's description stored with the image.
    pub fn user(&self) -> &[u8] {
        &self.meta.user
    }

    /// Pages in the image.
    pub fn pages(&self) -> u64 {
        self.meta.pages.len() as u64
    }

    /// Fills `buf` with the next page; `Ok(false)` at the end.
    pub fn next_page(&mut self, buf: &mut Page) -> Result<bool, StoreError> {
        let run = self.next_run(1)?;
        match run.first() {
            Some(p) => {
                buf.copy_from_slice(&p[..]);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The next pages in stream order, at most `max`, borrowed from the reader's buffers
    /// (every chunk among them already checked); empty at the end. A run stops before a page
    /// whose chunk is not loaded yet, so each call reads at most one chunk.
    pub fn next_run(&mut self, max: usize) -> Result<Vec<&Page>, StoreError> {
        for id in self.release.drain(..) {
            self.cache.remove(&id);
        }
        let start = self.cur;
        let mut end = start;
        while end < self.meta.pages.len() && end - start < max.max(1) {
            if let PageRef::At { chunk, .. } = self.meta.pages[end] {
                if !self.cache.contains_key(&chunk) {
                    if end > start {
                        break;
                    }
                    let raw = self.load(chunk)?;
                    self.cache.insert(chunk, raw);
                }
                let n = self
                    .uses
                    .get_mut(&chunk)
                    .ok_or_else(|| StoreError::from(Damage::Overused { chunk }))?;
                *n -= 1;
                if *n == 0 {
                    self.uses.remove(&chunk);
                    self.release.push(chunk);
                }
            }
            end += 1;
        }
        self.cur = end;
        let cache = &self.cache;
        Ok(self.meta.pages[start..end]
            .iter()
            .map(|r| match *r {
                PageRef::Zero => &ZERO_PAGE,
                PageRef::At { chunk, slot } => {
                    let at = usize::from(slot) * PAGE;
                    <&Page>::try_from(&cache[&chunk][at..at + PAGE])
                        .expect("a loaded chunk holds every slot the page list names")
                }
            })
            .collect())
    }

    /// Keeps read-ahead advice about [`READ_AHEAD`] stored bytes ahead of the chunks loaded
    /// so far, topped up once less than half of that is left; chunks adjacent on the medium
    /// are advised as one range.
    fn advise_ahead(&mut self) {
        let start = self.advised.max(self.loaded);
        let mut pending: u64 = self.order[self.loaded.min(start)..start]
            .iter()
            .map(|id| u64::from(self.chunks[id].stored_len))
            .sum();
        if pending >= READ_AHEAD / 2 {
            return;
        }
        let cb = self.store.cluster_bytes();
        let mut range: Option<(u64, u64)> = None;
        self.advised = start;
        while self.advised < self.order.len() && pending < READ_AHEAD {
            let c = self.chunks[&self.order[self.advised]];
            let at = c.cluster * cb + u64::from(c.offset);
            let end = at + u64::from(c.stored_len);
            range = match range {
                Some((s, e)) if (e..=e.next_multiple_of(512)).contains(&at) => Some((s, end)),
                Some((s, e)) => {
                    self.store.medium.will_need(s, e - s);
                    Some((at, end))
                }
                None => Some((at, end)),
            };
            pending += u64::from(c.stored_len);
            self.advised += 1;
        }
        if let Some((s, e)) = range {
            self.store.medium.will_need(s, e - s);
        }
    }

    /// Reads, checks and decompresses chunk `id` (the next in first-use order), after
    /// advising the medium of the chunks that follow it.
    fn load(&mut self, id: u64) -> Result<Vec<u8>, StoreError> {
        self.loaded += 1;
        self.advise_ahead();
        let c = self.chunks[&id];
        let raw = read_chunk_timed(self.store, &c, &mut self.times)?;
        self.chunks_read += 1;
        self.bytes_read += u64::from(c.stored_len);
        Ok(raw)
    }
}

/// What a restore of one image reads: every chunk it references, whole.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReadCost {
    /// Chunks the image references.
    pub chunks: u64,
    /// Their stored bytes: what the restore reads, checks and decompresses.
    pub chunk_bytes: u64,
    /// The share of those bytes that holds pages the image uses (each chunk's stored bytes
    /// times the share of its slots the image references).
    pub used_bytes: f64,
}

impl ReadCost {
    /// Stored bytes read per stored byte used (1.0: every chunk is used whole).
    pub fn amplification(&self) -> f64 {
        if self.used_bytes > 0.0 {
            self.chunk_bytes as f64 / self.used_bytes
        } else {
            1.0
        }
    }
}

impl<M: Medium> Store<M> {
    /// What restoring `rec` reads, from its page list (the dedupe policy's effect on the
    /// restore: chunks shared with other images that this one only partly uses).
    pub fn read_cost(&self, rec: &storelayout::ImageRec) -> Result<ReadCost, StoreError> {
        let meta = self.image_meta(rec)?;
        let mut used: HashMap<u64, std::collections::HashSet<u16>> = HashMap::new();
        for p in &meta.pages {
            if let PageRef::At { chunk, slot } = *p {
                used.entry(chunk).or_default().insert(slot);
            }
        }
        let mut cost = ReadCost::default();
        for c in self
            .catalog
            .chunks
            .iter()
            .filter(|c| used.contains_key(&c.id))
        {
            cost.chunks += 1;
            cost.chunk_bytes += u64::from(c.stored_len);
            cost.used_bytes +=
                f64::from(c.stored_len) * used[&c.id].len() as f64 / f64::from(c.pages.max(1));
        }
        Ok(cost)
    }
}

/// A chunk's pages, checked: BLAKE3 of the stored bytes, then the decompressed size.
pub(crate) fn read_chunk<M: Medium>(store: &Store<M>, c: &ChunkRec) -> Result<Vec<u8>, StoreError> {
    read_chunk_timed(store, c, &mut ChunkTimes::default())
}

/// The stored bytes of chunk `c` as they are on the medium, checked against its checksum;
/// the time of reading and of checking is added to `t`.
pub(crate) fn read_stored<M: Medium>(
    store: &Store<M>,
    c: &ChunkRec,
    t: &mut ChunkTimes,
) -> Result<Vec<u8>, StoreError> {
    read_medium(store, c, t, true)
}

/// The bytes of chunk `c` on the medium, checked against its checksum when `check` (a
/// sealed chunk's tag is the stronger check, so its opener skips the checksum).
fn read_medium<M: Medium>(
    store: &Store<M>,
    c: &ChunkRec,
    t: &mut ChunkTimes,
    check: bool,
) -> Result<Vec<u8>, StoreError> {
    use std::time::Instant;
    let at = store.sb.chunk_place(c)?;
    let mut stored = vec![0u8; c.stored_len as usize];
    let t0 = Instant::now();
    store
        .medium
        .read_at(&mut stored, at)
        .map_err(StoreError::io(format!("reading chunk {}", c.id)))?;
    let t1 = Instant::now();
    t.read += t1 - t0;
    if !check {
        return Ok(stored);
    }
    let checked = c.check_stored(store.catalog.check, &stored);
    t.check += t1.elapsed();
    checked?;
    Ok(stored)
}

/// [`read_chunk`], adding the time of each step to `t`.
fn read_chunk_timed<M: Medium>(
    store: &Store<M>,
    c: &ChunkRec,
    t: &mut ChunkTimes,
) -> Result<Vec<u8>, StoreError> {
    let stored = if c.sealed {
        let key = store
            .key
            .as_ref()
            .ok_or(StoreError::LockedChunk { chunk: c.id })?;
        let sealed = read_medium(store, c, t, false)?;
        let t1 = std::time::Instant::now();
        let opened = key.open_chunk(c, &sealed);
        t.check += t1.elapsed();
        opened?
    } else {
        read_stored(store, c, t)?
    };
    let t2 = std::time::Instant::now();
    let raw = c.unpack(stored)?;
    t.decode += t2.elapsed();
    Ok(raw)
}
