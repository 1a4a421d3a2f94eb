//! Reading an image back in stream order. Chunks are read in the order the stream first
//! needs them, adjacent ones together ([`crate::pipeline`]'s batches), each checked before it
//! is decompressed, and kept only while pages still to come need it. [`ImageReader::stream`]
//! reads, checks and decompresses on several CPUs while the caller takes the pages in order.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::pipeline::{self, Batch, Buffers, ChunkTimes, Decoded, ReadClock, ReadStats};
use crate::store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Condvar, Mutex};
use storelayout::pages::check_page_ref;
use storelayout::{ChunkRec, Damage, ImageMeta, Page, PageRef, PAGE};

/// Stored bytes the reader asks the medium to fetch ahead of the batch it is loading.
const READ_AHEAD: u64 = 8 << 20;

/// Batches each worker of [`ImageReader::stream`] may decode ahead of the pages taken.
const AHEAD_PER_WORKER: usize = 2;

/// What a zero page reads as.
static ZERO_PAGE: Page = [0; PAGE];

/// Streams one image's pages.
pub struct ImageReader<'s, M: Medium> {
    store: &'s Store<M>,
    meta: ImageMeta,
    plan: Plan,
    cursor: Cursor,
}

/// What the reader's workers share: the batches in the order the stream needs them, and
/// the medium's clock.
struct Plan {
    batches: Vec<Batch>,
    /// The batch of each chunk.
    batch_of: HashMap<u64, usize>,
    clock: ReadClock,
    /// The buffers the workers decode into, given back as chunks are released.
    bufs: Buffers,
}

/// Where the stream is: the pages handed out, the chunks loaded and still needed.
struct Cursor {
    /// Uses still to come per chunk.
    uses: HashMap<u64, u32>,
    /// The next batch to load, and how far read-ahead advice has been given
    /// ([`Medium::will_need`]).
    next_batch: usize,
    advised: usize,
    cache: HashMap<u64, Vec<u8>>,
    /// Chunks the last run used for the last time: dropped at the next call, once the
    /// caller no longer borrows them.
    release: Vec<u64>,
    cur: usize,
    stats: ReadStats,
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
                    order.push(chunks[&chunk]);
                }
                *n += 1;
            }
        }
        let batches = pipeline::plan(self, order.into_iter());
        let batch_of = batches
            .iter()
            .enumerate()
            .flat_map(|(i, b)| b.chunks.iter().map(move |(c, _)| (c.id, i)))
            .collect();
        Ok(ImageReader {
            store: self,
            meta,
            plan: Plan {
                batches,
                batch_of,
                clock: ReadClock::default(),
                bufs: Buffers::default(),
            },
            cursor: Cursor {
                uses,
                next_batch: 0,
                advised: 0,
                cache: HashMap::new(),
                release: Vec::new(),
                cur: 0,
                stats: ReadStats::default(),
            },
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

    /// What was read so far, and where the time went.
    pub fn stats(&self) -> ReadStats {
        let mut s = self.cursor.stats;
        s.times.read = self.plan.clock.busy();
        s
    }

    /// Read requests the image takes: one per batch.
    pub fn requests(&self) -> usize {
        self.plan.batches.len()
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
    /// whose chunk is not loaded yet, so each call reads at most one batch, on this thread.
    pub fn next_run(&mut self, max: usize) -> Result<Vec<&Page>, StoreError> {
        let (store, plan) = (self.store, &self.plan);
        let mut load =
            |i: usize| pipeline::decode(store, &plan.batches[i], &plan.clock, &plan.bufs);
        self.cursor.run(&self.meta, plan, store, max, &mut load)
    }
}

impl<M: Medium + Sync> ImageReader<'_, M> {
    /// Hands every page still to come to `sink`, in stream order, in runs of at most `max`,
    /// while `workers` threads read, check and decompress the batches ahead of it (at most
    /// [`AHEAD_PER_WORKER`] each); with one worker, this thread does it all. Returns the
    /// first error: a damaged or unreadable batch (the batches before it were handed over
    /// whole), or the sink's.
    pub fn stream<E: From<StoreError>>(
        &mut self,
        workers: usize,
        max: usize,
        mut sink: impl FnMut(&[&Page]) -> Result<(), E>,
    ) -> Result<(), E> {
        if workers <= 1 {
            loop {
                let run = self.next_run(max)?;
                if run.is_empty() {
                    return Ok(());
                }
                sink(&run)?;
            }
        }
        let (store, plan, meta, cursor) = (self.store, &self.plan, &self.meta, &mut self.cursor);
        let total = plan.batches.len();
        let window = workers * AHEAD_PER_WORKER;
        let claimed = AtomicUsize::new(cursor.next_batch);
        let stop = AtomicBool::new(false);
        // The batches taken so far: a worker waits before decoding one too far ahead.
        let taken = (Mutex::new(cursor.next_batch), Condvar::new());
        std::thread::scope(|s| {
            let (tx, rx) = mpsc::channel::<(usize, Result<Decoded, StoreError>)>();
            for _ in 0..workers {
                let tx = tx.clone();
                let (claimed, stop, taken) = (&claimed, &stop, &taken);
                s.spawn(move || loop {
                    let i = claimed.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return;
                    }
                    {
                        let mut t = taken.0.lock().unwrap_or_else(|e| e.into_inner());
                        while i >= *t + window && !stop.load(Ordering::Relaxed) {
                            t = taken.1.wait(t).unwrap_or_else(|e| e.into_inner());
                        }
                    }
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let r = pipeline::decode(store, &plan.batches[i], &plan.clock, &plan.bufs);
                    if tx.send((i, r)).is_err() {
                        return;
                    }
                });
            }
            drop(tx);
            let mut ready: HashMap<usize, Result<Decoded, StoreError>> = HashMap::new();
            let mut load = |i: usize| loop {
                if let Some(r) = ready.remove(&i) {
                    *taken.0.lock().unwrap_or_else(|e| e.into_inner()) = i + 1;
                    taken.1.notify_all();
                    return r;
                }
                match rx.recv() {
                    Ok((j, r)) => {
                        ready.insert(j, r);
                    }
                    Err(_) => {
                        return Err(StoreError::io(format!("decoding batch {i}"))(
                            std::io::Error::other("every worker stopped before it"),
                        ))
                    }
                }
            };
            let out = loop {
                let run = match cursor.run(meta, plan, store, max, &mut load) {
                    Ok(run) => run,
                    Err(e) => break Err(e.into()),
                };
                if run.is_empty() {
                    break Ok(());
                }
                if let Err(e) = sink(&run) {
                    break Err(e);
                }
            };
            // Workers still waiting for room stop; those decoding finish their batch and
            // find nobody listening.
            stop.store(true, Ordering::Relaxed);
            taken.1.notify_all();
            out
        })
    }
}

impl Cursor {
    /// [`ImageReader::next_run`], with batch `i` loaded by `load(i)`.
    fn run<'a, M: Medium>(
        &'a mut self,
        meta: &'a ImageMeta,
        plan: &Plan,
        store: &Store<M>,
        max: usize,
        load: &mut dyn FnMut(usize) -> Result<Decoded, StoreError>,
    ) -> Result<Vec<&'a Page>, StoreError> {
        for id in self.release.drain(..) {
            if let Some(v) = self.cache.remove(&id) {
                plan.bufs.give_raw(v);
            }
        }
        let start = self.cur;
        let mut end = start;
        while end < meta.pages.len() && end - start < max.max(1) {
            if let PageRef::At { chunk, .. } = meta.pages[end] {
                if !self.cache.contains_key(&chunk) {
                    if end > start {
                        break;
                    }
                    // Chunks are loaded in first-use order and dropped after their last
                    // use, so a chunk not loaded is the first of the next batch.
                    let i = self.next_batch;
                    if plan.batch_of.get(&chunk) != Some(&i) {
                        return Err(Damage::Overused { chunk }.into());
                    }
                    self.next_batch += 1;
                    self.advise_ahead(plan, store);
                    let d = load(i)?;
                    self.stats.add(&d.stats);
                    self.cache.extend(d.chunks);
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
        Ok(meta.pages[start..end]
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

    /// Keeps read-ahead advice about [`READ_AHEAD`] stored bytes ahead of the batches loaded
    /// so far, topped up once less than half of that is left.
    fn advise_ahead<M: Medium>(&mut self, plan: &Plan, store: &Store<M>) {
        let start = self.advised.max(self.next_batch);
        let pending: u64 = plan.batches[self.next_batch.min(start)..start]
            .iter()
            .map(|b| b.len)
            .sum();
        if pending >= READ_AHEAD / 2 {
            return;
        }
        let mut pending = pending;
        self.advised = start;
        while self.advised < plan.batches.len() && pending < READ_AHEAD {
            let b = &plan.batches[self.advised];
            if let Some(at) = b.at {
                store.medium.will_need(at, b.len);
            }
            pending += b.len;
            self.advised += 1;
        }
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

impl<M: Medium> Store<M> {
    /// The bytes of the medium holding `rec`'s chunks: from the first byte of the lowest to
    /// the last of the highest (`None`: the image has only zero pages). What a plain
    /// sequential read of the image covers: the medium's baseline for its restore.
    pub fn extent(&self, rec: &storelayout::ImageRec) -> Result<Option<(u64, u64)>, StoreError> {
        let wanted: std::collections::HashSet<u64> = rec.chunks.iter().copied().collect();
        let mut span: Option<(u64, u64)> = None;
        for c in self
            .catalog
            .chunks
            .iter()
            .filter(|c| wanted.contains(&c.id))
        {
            let at = self.sb.chunk_place(c)?;
            let end = at + u64::from(c.stored_len);
            span = Some(span.map_or((at, end), |(s, e)| (s.min(at), e.max(end))));
        }
        Ok(span.map(|(s, e)| (s, e - s)))
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
