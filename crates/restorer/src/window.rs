//! Reading a store through one large buffer. The restorer reads an image's chunks in the
//! order they lie on the disk, so one big read fills the window and serves the next
//! chunks from memory: few, large device requests instead of one per chunk.
//!
//! The EFI restorer reads every chunk before it leaves the firmware: [`Runs`] are the
//! stretches of the disk its chunks lie in (neighbours closer than [`Runs::GAP`] read as
//! one), and [`Window::fill_runs`] reads them all into one buffer, which then serves every
//! chunk with no device left to ask.
//!
//! The window counts what it asks of the disk ([`Window::requests`], the throughput's
//! reads): the PVH program's window is refilled in fixed-size pieces (the whole buffer, or
//! up to the disk's end), so its bytes are what the disk transferred, chunks or not, and
//! the EFI program's runs include the gaps merged into them; a read the disk's driver
//! splits ([`Disk::request_limit`]: the PC's virtio disks) counts as the requests the
//! device was given.

use crate::disk::{Disk, DiskError, SECTOR};
use crate::telemetry::Requests;
use alloc::vec::Vec;

/// Stretches of a disk, ascending and apart: `(offset, len)`, whole sectors each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs(pub Vec<(u64, u64)>);

impl Runs {
    /// Neighbouring pieces closer than this are read as one run (the gap with them).
    pub const GAP: u64 = 1 << 20;

    /// The runs covering `pieces` (`(offset, len)` each, any order), sector aligned.
    pub fn of(mut pieces: Vec<(u64, u64)>) -> Self {
        pieces.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (offset, len) in pieces {
            let start = offset - offset % SECTOR;
            let end = (offset + len).next_multiple_of(SECTOR);
            match runs.last_mut() {
                Some((s, l)) if start <= *s + *l + Self::GAP => *l = (*l).max(end - *s),
                _ => runs.push((start, end - start)),
            }
        }
        Runs(runs)
    }

    /// Bytes of all runs.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|r| r.1).sum()
    }
}

/// A window onto a disk: `buf` holds the disk's bytes from `start`, `filled` of them; or,
/// filled by [`Window::fill_runs`], the bytes of each of `runs`, one after the other.
pub struct Window<'b> {
    buf: &'b mut [u8],
    start: u64,
    filled: usize,
    runs: Runs,
    /// The requests made of the disk and their bytes (the module's header says what
    /// counts), for the console's summary and the throughput.
    pub requests: Requests,
}

impl<'b> Window<'b> {
    /// An empty window over `buf`, whose length must be whole sectors.
    pub fn new(buf: &'b mut [u8]) -> Self {
        Window {
            buf,
            start: 0,
            filled: 0,
            runs: Runs::default(),
            requests: Requests::default(),
        }
    }

    /// Reads every run of `runs` from `disk` into the buffer, one request each, the runs one
    /// after the other; from then on [`Window::get`] serves what they hold and nothing else.
    /// The buffer must hold [`Runs::bytes`].
    pub fn fill_runs<D: Disk>(&mut self, disk: &mut D, runs: Runs) -> Result<(), DiskError> {
        let mut at = 0usize;
        for &(offset, len) in &runs.0 {
            let end = at + len as usize;
            let dest = self.buf.get_mut(at..end).ok_or(DiskError::Range {
                offset,
                len,
                size: disk.size(),
            })?;
            disk.read(offset, dest)?;
            self.requests.add(len, disk.request_limit());
            at = end;
        }
        self.runs = runs;
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset` of `disk` into `buf`, past the window (a chunk
    /// read once more on its own), counted with the window's requests.
    pub fn read_beside<D: Disk>(
        &mut self,
        disk: &mut D,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), DiskError> {
        disk.read(offset, buf)?;
        self.requests.add(buf.len() as u64, disk.request_limit());
        Ok(())
    }

    /// The bytes at `offset`, `len` of them, where a filled run holds them, to write: a
    /// chunk read again over a copy the buffer holds wrongly.
    pub fn held_mut(&mut self, offset: u64, len: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(len as u64)?;
        let mut at = 0u64;
        for &(start, run) in &self.runs.0 {
            if offset >= start && end <= start + run {
                let from = (at + offset - start) as usize;
                return self.buf.get_mut(from..from + len);
            }
            at += run;
        }
        None
    }

    /// The `len` bytes at `offset`, where a filled run holds them (nothing is read): the
    /// EFI program's chunks, handed to several CPUs at once.
    pub fn held(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len as u64)?;
        let mut at = 0u64;
        for &(start, run) in &self.runs.0 {
            if offset >= start && end <= start + run {
                let from = (at + offset - start) as usize;
                return self.buf.get(from..from + len);
            }
            at += run;
        }
        None
    }

    /// The `len` bytes at `offset` on `disk`, from the window when it holds them, else
    /// after refilling it from the sector holding `offset`. `len` must fit the window
    /// less one sector.
    pub fn get<D: Disk>(
        &mut self,
        disk: &mut D,
        offset: u64,
        len: usize,
    ) -> Result<&[u8], DiskError> {
        let end = offset.checked_add(len as u64).ok_or(DiskError::Range {
            offset,
            len: len as u64,
            size: disk.size(),
        })?;
        if !self.runs.0.is_empty() {
            let mut at = 0u64;
            for &(start, run) in &self.runs.0 {
                if offset >= start && end <= start + run {
                    let from = (at + offset - start) as usize;
                    return Ok(&self.buf[from..from + len]);
                }
                at += run;
            }
            return Err(DiskError::Range {
                offset,
                len: len as u64,
                size: disk.size(),
            });
        }
        let held = offset >= self.start && end <= self.start + self.filled as u64;
        if !held {
            let start = offset - offset % SECTOR;
            if (end - start) as usize > self.buf.len() || end > disk.size() {
                return Err(DiskError::Range {
                    offset,
                    len: len as u64,
                    size: disk.size().min(start + self.buf.len() as u64),
                });
            }
            // As much as the buffer holds, but never past the disk's end.
            let room = (disk.size() - start).min(self.buf.len() as u64);
            let n = (room - room % SECTOR) as usize;
            disk.read(start, &mut self.buf[..n])?;
            self.start = start;
            self.filled = n;
            self.requests.add(n as u64, disk.request_limit());
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + len])
    }
}

/// Where two copies of the same bytes differ: what the console reports when a chunk read
/// into the window fails its checksum and reads right again (a bad read or a buffer
/// written after the read tell themselves apart by the shape of this).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// The first differing byte.
    pub first: usize,
    /// The last differing byte.
    pub last: usize,
    /// How many bytes differ.
    pub count: usize,
    /// The 512-byte sectors (counted from the start of the copies) with a difference.
    pub sectors: usize,
}

impl Mismatch {
    /// The differences between `held` and `fresh` (of one length), if any.
    pub fn of(held: &[u8], fresh: &[u8]) -> Option<Mismatch> {
        let mut m: Option<Mismatch> = None;
        let mut last_sector = usize::MAX;
        for (i, _) in held
            .iter()
            .zip(fresh)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
        {
            let sector = i / SECTOR as usize;
            let new_sector = usize::from(sector != last_sector);
            last_sector = sector;
            match &mut m {
                None => {
                    m = Some(Mismatch {
                        first: i,
                        last: i,
                        count: 1,
                        sectors: 1,
                    })
                }
                Some(m) => {
                    m.last = i;
                    m.count += 1;
                    m.sectors += new_sector;
                }
            }
        }
        m
    }
}

impl core::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} bytes differ in {} sectors, bytes {}..={}",
            self.count, self.sectors, self.first, self.last
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;

    #[test]
    fn sequential_reads_are_served_from_one_fill() {
        let bytes: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 251) as u8).collect();
        let mut disk = MemDisk(&bytes);
        let mut buf = vec![0u8; 16 * 1024];
        let mut w = Window::new(&mut buf);
        let expect = |o: usize, n: usize| bytes[o..o + n].to_vec();
        assert_eq!(w.get(&mut disk, 100, 300).unwrap(), &expect(100, 300)[..]);
        assert_eq!(
            w.get(&mut disk, 5000, 1000).unwrap(),
            &expect(5000, 1000)[..]
        );
        assert_eq!(w.requests.count, 1);
        // Past the window: refilled from the sector holding the offset.
        assert_eq!(
            w.get(&mut disk, 16000, 2000).unwrap(),
            &expect(16000, 2000)[..]
        );
        assert_eq!(w.requests.count, 2);
        // Near the disk's end the fill stops at the end.
        assert_eq!(
            w.get(&mut disk, 65000, 536).unwrap(),
            &expect(65000, 536)[..]
        );
        assert_eq!(w.requests.bytes, 16384 * 2 + (65536 - 64512));
        assert_eq!(w.requests.large_bytes, 0);
    }

    /// A disk whose driver splits reads into requests of at most `.1` bytes.
    struct Split<'a>(MemDisk<'a>, u64);

    impl Disk for Split<'_> {
        fn size(&self) -> u64 {
            self.0.size()
        }

        fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
            self.0.read(offset, buf)
        }

        fn request_limit(&self) -> Option<u64> {
            Some(self.1)
        }
    }

    #[test]
    fn requests_are_the_ones_the_device_gets() {
        let bytes = vec![3u8; 6 << 20];
        let mut disk = Split(MemDisk(&bytes), 1536 << 10);
        let mut buf = vec![0u8; 4 << 20];
        let mut w = Window::new(&mut buf);
        // One fill of the whole window: 1.5 + 1.5 + 1 MiB, each large.
        w.get(&mut disk, 0, 4096).unwrap();
        assert_eq!(w.requests.count, 3);
        assert_eq!(
            (w.requests.bytes, w.requests.large_bytes),
            (4 << 20, 4 << 20)
        );
        // The next fill stops at the disk's end: 1.5 MiB and a small 512 KiB.
        w.get(&mut disk, 4 << 20, 4096).unwrap();
        assert_eq!(w.requests.count, 5);
        assert_eq!(w.requests.bytes, 6 << 20);
        assert_eq!(w.requests.large_bytes, (4 << 20) + (1536 << 10));
        // A read beside the window is counted too.
        let mut again = vec![0u8; 1024];
        w.read_beside(&mut disk, 512, &mut again).unwrap();
        assert_eq!((w.requests.count, w.requests.bytes), (6, (6 << 20) + 1024));
        assert!(w.requests.large_bytes <= w.requests.bytes);
    }

    #[test]
    fn runs_merge_close_pieces_and_serve_only_what_they_hold() {
        let runs = Runs::of(vec![
            (5 << 20, 1000),
            (100, 300),
            (600, 100),
            (3 << 20, 512),
        ]);
        // 100..700 are one sector; 3 MiB is more than a gap away, 5 MiB too.
        assert_eq!(runs.0, vec![(0, 1024), (3 << 20, 512), (5 << 20, 1024)]);
        assert_eq!(runs.bytes(), 2560);
        let bytes: Vec<u8> = (0..6 << 20u32).map(|i| (i % 251) as u8).collect();
        let mut disk = MemDisk(&bytes);
        let mut buf = vec![0u8; 2560];
        let mut w = Window::new(&mut buf);
        w.fill_runs(&mut disk, runs).unwrap();
        assert_eq!(w.requests.count, 3);
        let at = |o: usize, n: usize| bytes[o..o + n].to_vec();
        assert_eq!(w.get(&mut disk, 600, 100).unwrap(), &at(600, 100)[..]);
        assert_eq!(
            w.get(&mut disk, 5 << 20, 1000).unwrap(),
            &at(5 << 20, 1000)[..]
        );
        assert_eq!(
            w.get(&mut disk, 3 << 20, 512).unwrap(),
            &at(3 << 20, 512)[..]
        );
        // Outside every run: refused, the disk is not asked.
        assert!(w.get(&mut disk, 2 << 20, 10).is_err());
        assert_eq!(w.requests.count, 3);
        // A held stretch is writable where it lies; one past a run's end is not held.
        w.held_mut(600, 100).unwrap().fill(0xee);
        assert_eq!(w.get(&mut disk, 600, 100).unwrap(), &[0xee; 100][..]);
        assert_eq!(w.get(&mut disk, 500, 100).unwrap(), &at(500, 100)[..]);
        assert!(w.held_mut(1000, 100).is_none());
        // Read without asking the disk, as `get` serves them; nothing outside the runs.
        assert_eq!(w.held(3 << 20, 512).unwrap(), &at(3 << 20, 512)[..]);
        assert_eq!(w.held(600, 100).unwrap(), &[0xee; 100][..]);
        assert!(w.held(1000, 100).is_none() && w.held(2 << 20, 10).is_none());
        assert_eq!(w.requests.count, 3);
    }

    #[test]
    fn too_long_or_past_the_end_is_refused() {
        let bytes = vec![7u8; 8192];
        let mut disk = MemDisk(&bytes);
        let mut buf = vec![0u8; 4096];
        let mut w = Window::new(&mut buf);
        assert!(w.get(&mut disk, 0, 4096).is_ok());
        assert!(matches!(
            w.get(&mut disk, 100, 4096),
            Err(DiskError::Range { .. })
        ));
        assert!(matches!(
            w.get(&mut disk, 8000, 500),
            Err(DiskError::Range { .. })
        ));
    }

    #[test]
    fn mismatches_say_where_and_how_much() {
        let a = vec![0u8; 2048];
        assert_eq!(Mismatch::of(&a, &a), None);
        let mut b = a.clone();
        b[10] = 1;
        b[11] = 1;
        b[1500] = 9;
        let m = Mismatch::of(&a, &b).unwrap();
        assert_eq!(
            m,
            Mismatch {
                first: 10,
                last: 1500,
                count: 3,
                sectors: 2
            }
        );
        assert_eq!(
            m.to_string(),
            "3 bytes differ in 2 sectors, bytes 10..=1500"
        );
    }
}
