//! What the restorer reads its input from: a disk, as whole 512-byte sectors at byte
//! offsets ([`Disk`]), or a part of one ([`Span`], [`Part`]: a partition); and the one it
//! writes, the store's boot log ([`DiskMut`]: whole sectors, then a flush). The PC's virtio
//! disks implement both in the restorer; tests use [`MemDisk`] and [`MemDiskMut`].

/// Bytes of a sector: every read and write starts and ends on one.
pub const SECTOR: u64 = 512;

/// Why a read, a write or a flush failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskError {
    /// The request does not start or end on a sector.
    Unaligned {
        /// Byte offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
    },
    /// The request ends past the disk's end.
    Range {
        /// Byte offset asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Bytes the disk has.
        size: u64,
    },
    /// The device reported an error (a virtio status, ...).
    Device {
        /// First sector of the failed request.
        sector: u64,
        /// The device's status byte.
        status: u8,
    },
    /// The device did not finish a request in time (it is reset and used no more).
    Timeout {
        /// First sector of the request.
        sector: u64,
    },
    /// A write to a disk the device offers read-only.
    ReadOnly,
    /// The firmware's disk services are gone (the EFI restorer left boot services).
    Closed,
    /// The disk's blocks are not 512 bytes (the firmware's Block I/O reads whole blocks).
    BlockSize(u32),
}

impl core::fmt::Display for DiskError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            DiskError::Unaligned { offset, len } => write!(
                f,
                "request of {len} bytes at byte {offset} is not whole {SECTOR}-byte sectors"
            ),
            DiskError::Range { offset, len, size } => write!(
                f,
                "request of {len} bytes at byte {offset} ends past the disk's {size} bytes"
            ),
            DiskError::Device { sector, status } => {
                write!(
                    f,
                    "the disk failed the request at sector {sector} (status {status})"
                )
            }
            DiskError::Timeout { sector } => {
                write!(f, "the disk did not answer the request at sector {sector}")
            }
            DiskError::ReadOnly => f.write_str("the disk is read-only"),
            DiskError::Closed => {
                f.write_str("the firmware's disk services are closed (boot services were left)")
            }
            DiskError::BlockSize(n) => write!(
                f,
                "the disk's blocks are {n} bytes; the restorer reads disks of {SECTOR}-byte blocks"
            ),
        }
    }
}

/// A disk the restorer reads.
pub trait Disk {
    /// Its size in bytes.
    fn size(&self) -> u64;

    /// Fills `buf` from byte `offset`; both `offset` and `buf.len()` must be whole sectors.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError>;

    /// The most bytes one request to the device carries, when [`Disk::read`] splits a
    /// longer read into requests of this size, the last one shorter (the PC's virtio disks:
    /// the device's limits and the driver's); `None`: a read is one request as far as the
    /// restorer sees (the firmware's Block I/O, whose driver may split it further; memory).
    /// What the throughput's request count follows.
    fn request_limit(&self) -> Option<u64> {
        None
    }
}

impl<D: Disk + ?Sized> Disk for &mut D {
    fn size(&self) -> u64 {
        (**self).size()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        (**self).read(offset, buf)
    }

    fn request_limit(&self) -> Option<u64> {
        (**self).request_limit()
    }
}

/// The PC's disks, `vda` first: the store's and the ones an image is bound to.
pub trait DiskSet {
    /// A disk.
    type Disk: Disk;
    /// Disk `index` (`vda` is 0), if there is one.
    fn disk(&mut self, index: usize) -> Option<&mut Self::Disk>;
}

/// A disk the restorer also writes: the store's, for its boot log.
pub trait DiskMut: Disk {
    /// Writes `buf` at byte `offset`; both `offset` and `buf.len()` must be whole sectors.
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DiskError>;

    /// Returns once every write before it is on the medium (a power cut keeps it).
    fn flush(&mut self) -> Result<(), DiskError>;
}

/// Checks a read or a write against the sector size and the disk's size: what every
/// [`Disk`] does first.
pub fn check_read(offset: u64, len: usize, size: u64) -> Result<(), DiskError> {
    let len = len as u64;
    if !offset.is_multiple_of(SECTOR) || !len.is_multiple_of(SECTOR) {
        return Err(DiskError::Unaligned { offset, len });
    }
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(DiskError::Range { offset, len, size });
    }
    Ok(())
}

/// A disk held in memory (tests; a store file read by the host).
pub struct MemDisk<'a>(pub &'a [u8]);

impl Disk for MemDisk<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        check_read(offset, buf.len(), self.size())?;
        let at = offset as usize;
        buf.copy_from_slice(&self.0[at..at + buf.len()]);
        Ok(())
    }
}

/// A disk held in memory that is written too (tests), counting its flushes.
pub struct MemDiskMut<'a> {
    /// Its bytes.
    pub bytes: &'a mut [u8],
    /// Flushes so far.
    pub flushes: u32,
}

impl<'a> MemDiskMut<'a> {
    /// A disk over `bytes`, never flushed yet.
    pub fn new(bytes: &'a mut [u8]) -> Self {
        MemDiskMut { bytes, flushes: 0 }
    }
}

impl Disk for MemDiskMut<'_> {
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        MemDisk(self.bytes).read(offset, buf)
    }
}

impl DiskMut for MemDiskMut<'_> {
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        check_read(offset, buf.len(), self.size())?;
        let at = offset as usize;
        self.bytes[at..at + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DiskError> {
        self.flushes += 1;
        Ok(())
    }
}

/// A part of a disk: `size` bytes from byte `offset` (a partition), read as a disk of its
/// own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Its first byte on the disk.
    pub offset: u64,
    /// Its bytes.
    pub size: u64,
}

impl Span {
    /// Where on the disk a read of `len` bytes at byte `at` of the span goes: checked like
    /// any read ([`check_read`]) against the span's end.
    pub fn place(&self, at: u64, len: usize) -> Result<u64, DiskError> {
        check_read(at, len, self.size)?;
        Ok(self.offset + at)
    }
}

/// A disk seen through a [`Span`] of it.
pub struct Part<D> {
    /// The whole disk.
    pub disk: D,
    /// The part read.
    pub span: Span,
}

impl<D: Disk> Disk for Part<D> {
    fn size(&self) -> u64 {
        self.span.size
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let at = self.span.place(offset, buf.len())?;
        self.disk.read(at, buf)
    }

    fn request_limit(&self) -> Option<u64> {
        self.disk.request_limit()
    }
}

impl<D: DiskMut> DiskMut for Part<D> {
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let at = self.span.place(offset, buf.len())?;
        self.disk.write(at, buf)
    }

    fn flush(&mut self) -> Result<(), DiskError> {
        self.disk.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_reads_its_own_bytes_only() {
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i / 512) as u8).collect();
        let span = Span {
            offset: 1024,
            size: 2048,
        };
        let mut p = Part {
            disk: MemDisk(&bytes),
            span,
        };
        assert_eq!(p.size(), 2048);
        let mut buf = [0u8; 512];
        p.read(512, &mut buf).unwrap();
        assert_eq!(
            buf, [3u8; 512],
            "byte 512 of the part is byte 1536 of the disk"
        );
        assert_eq!(
            p.read(2048, &mut buf),
            Err(DiskError::Range {
                offset: 2048,
                len: 512,
                size: 2048
            })
        );
    }

    #[test]
    fn reads_and_writes_whole_sectors_inside_the_disk_only() {
        let bytes: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let mut d = MemDisk(&bytes);
        let mut buf = [0u8; 1024];
        d.read(512, &mut buf).unwrap();
        assert_eq!(buf[0], (512 % 256) as u8);
        assert_eq!(buf[1023], ((512 + 1023) % 256) as u8);
        assert_eq!(
            d.read(100, &mut buf),
            Err(DiskError::Unaligned {
                offset: 100,
                len: 1024
            })
        );
        assert_eq!(
            d.read(3584, &mut buf),
            Err(DiskError::Range {
                offset: 3584,
                len: 1024,
                size: 4096
            })
        );
        let mut w = bytes.clone();
        let mut m = MemDiskMut::new(&mut w);
        m.write(1024, &[7; 512]).unwrap();
        m.flush().unwrap();
        assert_eq!(
            m.write(1000, &[7; 512]),
            Err(DiskError::Unaligned {
                offset: 1000,
                len: 512
            })
        );
        assert_eq!(
            (m.bytes[1024], m.bytes[1535], m.bytes[1536], m.flushes),
            (7, 7, 0, 1)
        );
        assert_eq!(
            d.read(u64::MAX - 511, &mut buf[..512]),
            Err(DiskError::Range {
                offset: u64::MAX - 511,
                len: 512,
                size: 4096
            })
        );
    }
}
