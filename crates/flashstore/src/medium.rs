//! What a store lives on: a file or a block device, addressed by byte offset, plus an
//! in-memory medium for tests. `discard` tells the medium a range holds nothing (a hole in
//! a file); on flash that is what lets the FTL erase ahead instead of copying dead data.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Positional I/O on the store's medium.
pub trait Medium {
    /// Fills `buf` from offset `at`.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// Writes `buf` at offset `at`.
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()>;
    /// Makes everything written so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Says `len` bytes at `at` hold nothing any more; reads may then return zeros.
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()>;
    /// Says `len` bytes at `at` will be read soon: a medium that can start reading them in
    /// the background does (advice only; nothing depends on it).
    fn will_need(&self, _at: u64, _len: u64) {}
}

impl Medium for File {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.read_exact_at(buf, at)
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        self.write_all_at(buf, at)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
    fn size(&self) -> io::Result<u64> {
        use std::io::Seek;
        let meta = self.metadata()?;
        if meta.is_file() {
            return Ok(meta.len());
        }
        // A block device: its size is where seeking to the end lands.
        let mut f = self.try_clone()?;
        f.seek(io::SeekFrom::End(0))
    }
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()> {
        let meta = self.metadata()?;
        if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
            return blkdiscard(self, at, len);
        }
        if !meta.is_file() {
            return Ok(());
        }
        use rustix::fs::FallocateFlags;
        rustix::fs::fallocate(
            &*self,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            at,
            len,
        )
        .map_err(io::Error::from)
    }
    fn will_need(&self, at: u64, len: u64) {
        // The kernel queues the reads and returns; on a board the device (or QEMU's I/O
        // thread) then fetches while the CPU checks and decompresses earlier chunks.
        let _ = rustix::fs::fadvise(self, at, len, rustix::fs::Advice::WillNeed);
    }
}

/// `BLKDISCARD` (`_IO(0x12, 119)`): the device may forget `len` bytes at `at`.
const BLKDISCARD: libc::c_ulong = 0x1277;

/// Tells a block device (eMMC, SD, NVMe, virtio with discard) that a range holds nothing.
/// A device that cannot discard says so with `EOPNOTSUPP`, which is not an error here:
/// discard is advice, the store's correctness never depends on it.
fn blkdiscard(f: &File, at: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let range: [u64; 2] = [at, len];
    // SAFETY: BLKDISCARD reads two u64s (start, length) through the pointer, which points
    // at `range`, alive and properly aligned for the whole call; the descriptor is open.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKDISCARD as _, range.as_ptr()) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOTTY) => Ok(()),
        _ => Err(e),
    }
}

/// A store held in memory (tests, and tools that build a store image before writing it).
#[derive(Debug, Clone, Default)]
pub struct MemMedium {
    /// The bytes.
    pub bytes: Vec<u8>,
}

impl MemMedium {
    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        MemMedium {
            bytes: vec![0; len],
        }
    }
}

fn range(len: usize, at: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let a = usize::try_from(at).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    let b = a.checked_add(n).filter(|&b| b <= len);
    b.map(|b| a..b)
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))
}

impl Medium for MemMedium {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let r = range(self.bytes.len(), at, buf.len())?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        let r = range(self.bytes.len(), at, buf.len())?;
        self.bytes[r].copy_from_slice(buf);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()> {
        let n = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let r = range(self.bytes.len(), at, n)?;
        self.bytes[r].fill(0);
        Ok(())
    }
}

impl<M: Medium + ?Sized> Medium for &mut M {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        (**self).read_at(buf, at)
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        (**self).write_at(buf, at)
    }
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }
    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()> {
        (**self).discard(at, len)
    }
}

/// A stretch of another medium (`len` bytes from `offset`), such as a partition of a disk
/// image opened on the host: the store inside sees byte 0 at `offset`, and nothing outside
/// the stretch is read or written.
#[derive(Debug)]
pub struct Window<M> {
    inner: M,
    offset: u64,
    len: u64,
}

impl<M: Medium> Window<M> {
    /// `len` bytes of `inner` from `offset`.
    pub fn new(inner: M, offset: u64, len: u64) -> Self {
        Window { inner, offset, len }
    }

    /// Where `n` bytes at `at` are in the medium underneath.
    fn place(&self, at: u64, n: u64) -> io::Result<u64> {
        match at.checked_add(n) {
            Some(end) if end <= self.len => Ok(self.offset + at),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{n} bytes at {at} lie outside a window of {} bytes",
                    self.len
                ),
            )),
        }
    }
}

impl<M: Medium> Medium for Window<M> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.inner.read_at(buf, self.place(at, buf.len() as u64)?)
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        let at = self.place(at, buf.len() as u64)?;
        self.inner.write_at(buf, at)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.len)
    }
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()> {
        let at = self.place(at, len)?;
        self.inner.discard(at, len)
    }
}

/// A medium that loses power: after `budget` writes every write fails, and the write that
/// exhausts the budget lands only its first `torn` bytes (a torn sector). Discards count as
/// writes. For crash tests.
#[derive(Debug)]
pub struct FailingMedium<M> {
    /// The medium underneath (what survives the "power cut").
    pub inner: M,
    /// Writes left before the cut.
    pub budget: u64,
    /// Bytes of the cut write that still land.
    pub torn: usize,
    /// Writes seen (including failed ones).
    pub writes: u64,
}

impl<M: Medium> FailingMedium<M> {
    /// Cuts power at the `budget`-th write from now (0: the next write fails).
    pub fn new(inner: M, budget: u64, torn: usize) -> Self {
        FailingMedium {
            inner,
            budget,
            torn,
            writes: 0,
        }
    }

    fn spend(&mut self) -> bool {
        self.writes += 1;
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        true
    }
}

fn cut() -> io::Error {
    io::Error::other("power cut (injected)")
}

impl<M: Medium> Medium for FailingMedium<M> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.inner.read_at(buf, at)
    }
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        if self.spend() {
            return self.inner.write_at(buf, at);
        }
        if self.torn > 0 {
            let n = self.torn.min(buf.len());
            self.inner.write_at(&buf[..n], at)?;
            self.torn = 0;
        }
        Err(cut())
    }
    fn sync(&mut self) -> io::Result<()> {
        if self.budget == 0 {
            return Err(cut());
        }
        self.inner.sync()
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn discard(&mut self, at: u64, len: u64) -> io::Result<()> {
        if self.spend() {
            return self.inner.discard(at, len);
        }
        Err(cut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_moves_every_access_and_keeps_inside() {
        let mut w = Window::new(MemMedium::new(100), 10, 50);
        assert_eq!(w.size().unwrap(), 50);
        w.write_at(b"abc", 47).unwrap();
        assert!(w.write_at(b"abcd", 47).is_err());
        assert!(w.discard(40, 11).is_err());
        let mut b = [0u8; 3];
        w.read_at(&mut b, 47).unwrap();
        assert_eq!(&b, b"abc");
        assert_eq!(&w.inner.bytes[57..60], b"abc");
    }
}
