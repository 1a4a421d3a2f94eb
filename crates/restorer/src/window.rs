//! Reading a store through one large buffer. The restorer reads an image's chunks in the
//! order they lie on the disk, so one big read fills the window and serves the next
//! chunks from memory: few, large device requests instead of one per chunk.

use crate::disk::{Disk, DiskError, SECTOR};

/// A window onto a disk: `buf` holds the disk's bytes from `start`, `filled` of them.
pub struct Window<'b> {
    buf: &'b mut [u8],
    start: u64,
    filled: usize,
    /// Device reads made, for the console's summary.
    pub reads: u64,
    /// Bytes read from the device.
    pub bytes: u64,
}

impl<'b> Window<'b> {
    /// An empty window over `buf`, whose length must be whole sectors.
    pub fn new(buf: &'b mut [u8]) -> Self {
        Window {
            buf,
            start: 0,
            filled: 0,
            reads: 0,
            bytes: 0,
        }
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
            self.reads += 1;
            self.bytes += n as u64;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + len])
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
        assert_eq!(w.reads, 1);
        // Past the window: refilled from the sector holding the offset.
        assert_eq!(
            w.get(&mut disk, 16000, 2000).unwrap(),
            &expect(16000, 2000)[..]
        );
        assert_eq!(w.reads, 2);
        // Near the disk's end the fill stops at the end.
        assert_eq!(
            w.get(&mut disk, 65000, 536).unwrap(),
            &expect(65000, 536)[..]
        );
        assert_eq!(w.bytes, 16384 * 2 + (65536 - 64512));
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
}
