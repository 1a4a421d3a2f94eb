//! The read side's units of work: a *batch* is a run of chunks, consecutive in the order the
//! stream first needs them and adjacent on the medium, read with one request and then
//! checked (or opened) and decompressed chunk by chunk. Batches are what the reader's
//! workers take in turn ([`crate::ImageReader::stream`]); each reports what it cost.
//!
//! ```text
//!  first-use order:  c7 c8 c9 | c3 | c10 c11 ...      (c3 lies elsewhere on the medium)
//!  medium:           [c7][c8][c9]  ...  [c3]  ...  [c10][c11]
//!  batches:          one request       one request  one request (each <= BATCH_BYTES)
//! ```

use crate::error::StoreError;
use crate::medium::Medium;
use crate::store::Store;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use storelayout::ChunkRec;

/// Stored bytes one read request fetches at most: adjacent chunks are read together up to
/// this, so an image laid out in order is read in requests of 1.75 to 2 MiB (large enough
/// for eMMC and UFS to stream; small enough that a few batches in flight per CPU stay a
/// small share of the RAM the image needs).
pub const BATCH_BYTES: u64 = 2 << 20;

/// Where a reader's time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkTimes {
    /// Reading stored bytes from the medium: wall time with at least one read in flight.
    pub read: Duration,
    /// Checking their checksum, or opening them (decrypting and authenticating) when
    /// sealed, summed over the workers.
    pub check: Duration,
    /// Decompressing them, summed over the workers.
    pub decode: Duration,
}

/// What a reader read, and where its time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Chunks read (a chunk read twice counts twice).
    pub chunks: u64,
    /// Bytes read from the medium (the few alignment bytes between adjacent chunks of a
    /// request included).
    pub bytes: u64,
    /// Read requests made of the medium.
    pub requests: u64,
    /// Bytes read in requests of at least `bootstatus::LARGE_REQUEST` (1 MiB).
    pub large_bytes: u64,
    /// Bytes the chunks decompressed to.
    pub decoded: u64,
    /// The time of each step.
    pub times: ChunkTimes,
}

impl ReadStats {
    /// Adds `o`'s counts; the read time is the [`ReadClock`]'s, kept apart.
    pub(crate) fn add(&mut self, o: &ReadStats) {
        self.chunks += o.chunks;
        self.bytes += o.bytes;
        self.requests += o.requests;
        self.large_bytes += o.large_bytes;
        self.decoded += o.decoded;
        self.times.check += o.times.check;
        self.times.decode += o.times.decode;
    }
}

/// A request of at least this many bytes counts as large (`bootstatus::LARGE_REQUEST`).
const LARGE: u64 = 1 << 20;

/// Bytes between two chunks a request reads through rather than end there: the unused tail
/// of a cluster (a chunk that did not fit went to the next one) and sector padding. Reading
/// them costs less than a request of its own; they count as bytes read.
pub const GAP_BYTES: u64 = 64 << 10;

/// Chunks read with one request: from byte `at` of the medium, `len` bytes; each chunk at
/// its offset into them. `at` is `None` when the first chunk's place is itself damaged:
/// reading the batch then says why.
#[derive(Debug, Clone)]
pub(crate) struct Batch {
    pub(crate) at: Option<u64>,
    pub(crate) len: u64,
    pub(crate) chunks: Vec<(ChunkRec, usize)>,
}

/// Groups `chunks` (in first-use order) into batches: a chunk joins the batch before it when
/// it starts where that one ends or at most [`GAP_BYTES`] after, and the batch stays within
/// [`BATCH_BYTES`].
pub(crate) fn plan<M: Medium>(
    store: &Store<M>,
    chunks: impl Iterator<Item = ChunkRec>,
) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    for c in chunks {
        let place = store.sb.chunk_place(&c).ok();
        let len = u64::from(c.stored_len);
        if let (Some(at), Some(b)) = (place, out.last_mut()) {
            if let Some(start) = b.at {
                let end = start + b.len;
                if (end..=end + GAP_BYTES).contains(&at) && at + len - start <= BATCH_BYTES {
                    b.chunks.push((c, (at - start) as usize));
                    b.len = at + len - start;
                    continue;
                }
            }
        }
        out.push(Batch {
            at: place,
            len,
            chunks: vec![(c, 0)],
        });
    }
    out
}

/// The medium's busy time: the wall time during which at least one read is in flight, so
/// reads of several workers that overlap count once.
#[derive(Debug, Default)]
pub(crate) struct ReadClock {
    state: Mutex<(u32, Option<Instant>, Duration)>,
}

impl ReadClock {
    fn start(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.0 == 0 {
            s.1 = Some(Instant::now());
        }
        s.0 += 1;
    }

    fn stop(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = s.0.saturating_sub(1);
        if s.0 == 0 {
            if let Some(t) = s.1.take() {
                s.2 += t.elapsed();
            }
        }
    }

    /// The busy time so far.
    pub(crate) fn busy(&self) -> Duration {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2
    }
}

/// Buffers a reader reuses: the batches' stored bytes and the chunks' decompressed pages.
/// A restore decodes hundreds of megabytes in pieces of a few hundred kilobytes; taking a
/// fresh zeroed allocation for each costs the kernel a page fault and a cleared page per
/// 4 KiB, and the allocator an unmap (a TLB shootdown on every CPU) when it is given back.
/// A buffer is never read before it is overwritten whole: a read fills the stored bytes, and
/// an unpack fills every byte of a chunk or fails ([`ChunkRec::unpack_into`]).
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    stored: Mutex<Vec<Vec<u8>>>,
    raw: Mutex<Vec<Vec<u8>>>,
}

impl Buffers {
    /// A buffer of `len` bytes for a batch's stored bytes.
    fn stored(&self, len: usize) -> Vec<u8> {
        take(&self.stored, len)
    }

    /// A buffer of `len` bytes for a chunk's pages.
    fn raw(&self, len: usize) -> Vec<u8> {
        take(&self.raw, len)
    }

    /// Gives a chunk's pages back once no page of it is needed any more.
    pub(crate) fn give_raw(&self, v: Vec<u8>) {
        self.raw.lock().unwrap_or_else(|e| e.into_inner()).push(v);
    }

    fn give_stored(&self, v: Vec<u8>) {
        self.stored
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(v);
    }
}

/// A pooled buffer resized to `len` (only bytes beyond its old length are zeroed), or a new one.
fn take(pool: &Mutex<Vec<Vec<u8>>>, len: usize) -> Vec<u8> {
    let reused = pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
    match reused {
        Some(mut v) => {
            v.resize(len, 0);
            v
        }
        None => vec![0u8; len],
    }
}

/// A batch read, every chunk checked (or opened) and decompressed: each chunk's pages by
/// its id, and what it cost.
pub(crate) struct Decoded {
    pub(crate) chunks: Vec<(u64, Vec<u8>)>,
    pub(crate) stats: ReadStats,
}

/// Reads batch `b` of `store` with one request, then checks and decompresses its chunks in
/// order, into buffers from `bufs`; the first damaged one says why.
pub(crate) fn decode<M: Medium>(
    store: &Store<M>,
    b: &Batch,
    clock: &ReadClock,
    bufs: &Buffers,
) -> Result<Decoded, StoreError> {
    let mut stored = bufs.stored(b.len as usize);
    let out = decode_into(store, b, clock, bufs, &mut stored);
    bufs.give_stored(stored);
    out
}

fn decode_into<M: Medium>(
    store: &Store<M>,
    b: &Batch,
    clock: &ReadClock,
    bufs: &Buffers,
    stored: &mut [u8],
) -> Result<Decoded, StoreError> {
    let first = &b.chunks[0].0;
    let at = match b.at {
        Some(at) => at,
        None => store.sb.chunk_place(first)?,
    };
    clock.start();
    let read = store.medium.read_at(stored, at);
    clock.stop();
    read.map_err(StoreError::io(format!(
        "reading chunks {} to {} ({} bytes at byte {at})",
        first.id,
        b.chunks[b.chunks.len() - 1].0.id,
        b.len
    )))?;
    let mut stats = ReadStats {
        chunks: b.chunks.len() as u64,
        bytes: b.len,
        requests: 1,
        large_bytes: if b.len >= LARGE { b.len } else { 0 },
        ..ReadStats::default()
    };
    let mut chunks = Vec::with_capacity(b.chunks.len());
    for (c, off) in &b.chunks {
        let bytes = &stored[*off..*off + c.stored_len as usize];
        let t = Instant::now();
        let raw = if c.sealed {
            let key = store
                .key
                .as_ref()
                .ok_or(StoreError::LockedChunk { chunk: c.id })?;
            let opened = key.open_chunk(c, bytes);
            stats.times.check += t.elapsed();
            let t = Instant::now();
            let raw = c.unpack(opened?)?;
            stats.times.decode += t.elapsed();
            raw
        } else {
            let checked = c.check_stored(store.catalog.check, bytes);
            stats.times.check += t.elapsed();
            checked?;
            let t = Instant::now();
            let mut raw = bufs.raw(c.raw_len());
            c.unpack_into(bytes, &mut raw)?;
            stats.times.decode += t.elapsed();
            raw
        };
        stats.decoded += raw.len() as u64;
        chunks.push((c.id, raw));
    }
    Ok(Decoded { chunks, stats })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pooled_buffer_is_reused_at_the_length_asked_and_zeroed_only_where_it_grows() {
        let b = Buffers::default();
        let mut first = b.raw(8);
        first.fill(7);
        let at = first.as_ptr();
        b.give_raw(first);
        // Shorter: the same allocation, its first bytes as they were (the caller overwrites).
        let shorter = b.raw(4);
        assert_eq!((shorter.as_ptr(), shorter.as_slice()), (at, &[7u8; 4][..]));
        b.give_raw(shorter);
        // Longer: what it held stays, what it gained is zero.
        let longer = b.raw(12);
        assert_eq!(longer.len(), 12);
        assert_eq!(&longer[..4], &[7u8; 4]);
        assert_eq!(&longer[4..], &[0u8; 8]);
        // The two pools are apart: a batch's buffer is never a chunk's.
        b.give_raw(longer);
        assert_eq!(b.stored(3), vec![0u8; 3]);
        assert_eq!(b.raw.lock().unwrap().len(), 1);
    }
}
