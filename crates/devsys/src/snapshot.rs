//! The kernel's userspace hibernation interface, `/dev/snapshot`
//! (Documentation/power/userland-swsusp.rst): [`SnapshotDev`] runs its sequences (freeze,
//! create, read the page stream; write a page stream, freeze, restore) over the ioctl
//! wrappers of `sys::snapshot`, and names the call that failed.
//!
//! Opening the device read-only enters *hibernation* mode (freeze, create an image, read its
//! page stream); opening it write-only enters *restore* mode (write a page stream, freeze,
//! atomically restore). The kernel moves at most one page per `read`/`write` call.

use crate::sys::snapshot::{Mode, SnapshotFd};
use snapimg::{Page, PAGE_SIZE};
use std::io::IoSlice;

/// Most pages handed to the kernel in one `writev` (the kernel's UIO_MAXIOV is 1024).
pub const MAX_IOV: usize = 1024;

pub use crate::sys::snapshot::SNAPSHOT_DEV;

/// Errors of `/dev/snapshot` operations; each names the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The device could not be opened.
    #[error("cannot open {SNAPSHOT_DEV} (kernel needs CONFIG_HIBERNATION_SNAPSHOT_DEV, no lockdown, root)")]
    Open(#[source] std::io::Error),
    /// An ioctl failed.
    #[error("{call} failed: {errno}")]
    Ioctl {
        call: &'static str,
        errno: nix::errno::Errno,
    },
    /// Reading or writing the page stream failed.
    #[error("{op} of stream page {page} failed")]
    Stream {
        op: &'static str,
        page: u64,
        source: std::io::Error,
    },
}

/// What `SNAPSHOT_CREATE_IMAGE` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateResult {
    /// In the original system: the image exists in memory and can be read.
    Created,
    /// In the restored system: execution continues here after a restore.
    Restored,
}

/// An open `/dev/snapshot`.
#[derive(Debug)]
pub struct SnapshotDev {
    fd: SnapshotFd,
    frozen: bool,
    pages: u64,
}

impl SnapshotDev {
    /// Opens the device for hibernation (reading an image out of the kernel).
    pub fn open_hibernate() -> Result<Self, SnapshotError> {
        Self::open(Mode::Hibernate)
    }

    /// Opens the device for restore (writing an image into the kernel).
    pub fn open_restore() -> Result<Self, SnapshotError> {
        Self::open(Mode::Restore)
    }

    fn open(mode: Mode) -> Result<Self, SnapshotError> {
        let fd = SnapshotFd::open(mode).map_err(SnapshotError::Open)?;
        Ok(Self {
            fd,
            frozen: false,
            pages: 0,
        })
    }

    /// Freezes user space (all tasks but the caller).
    pub fn freeze(&mut self) -> Result<(), SnapshotError> {
        self.fd.freeze().map_err(ioctl_err("SNAPSHOT_FREEZE"))?;
        self.frozen = true;
        Ok(())
    }

    /// Thaws user space and frees any image the kernel holds.
    pub fn unfreeze(&mut self) -> Result<(), SnapshotError> {
        self.fd.unfreeze().map_err(ioctl_err("SNAPSHOT_UNFREEZE"))?;
        self.frozen = false;
        Ok(())
    }

    /// Creates the image (user space must be frozen). Returns twice: now with `Created`,
    /// and again after a restore of this image with `Restored`.
    pub fn create_image(&mut self) -> Result<CreateResult, SnapshotError> {
        let in_suspend = self
            .fd
            .create_image()
            .map_err(ioctl_err("SNAPSHOT_CREATE_IMAGE"))?;
        Ok(if in_suspend {
            CreateResult::Created
        } else {
            CreateResult::Restored
        })
    }

    /// Reads the next page of the image's stream; `Ok(false)` at its end.
    pub fn read_page(&mut self, page: &mut Page) -> Result<bool, SnapshotError> {
        let mut filled = 0;
        while filled < PAGE_SIZE {
            match self.fd.read(&mut page[filled..]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => {
                    return Err(SnapshotError::Stream {
                        op: "read",
                        page: self.pages,
                        source: std::io::ErrorKind::UnexpectedEof.into(),
                    })
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(SnapshotError::Stream {
                        op: "read",
                        page: self.pages,
                        source,
                    })
                }
            }
        }
        self.pages += 1;
        Ok(true)
    }

    /// Writes the next page of a stream (looping on short writes).
    pub fn write_page(&mut self, page: &Page) -> Result<(), SnapshotError> {
        self.write_rest(&page[..])?;
        self.pages += 1;
        Ok(())
    }

    /// Writes the next pages of a stream with as few system calls as the kernel allows
    /// (`writev`, up to [`MAX_IOV`] pages per call): the device copies each page straight
    /// from the caller's buffers.
    pub fn write_pages(&mut self, pages: &[&Page]) -> Result<(), SnapshotError> {
        let mut rest = pages;
        while !rest.is_empty() {
            let iov: Vec<IoSlice<'_>> = rest
                .iter()
                .take(MAX_IOV)
                .map(|p| IoSlice::new(&p[..]))
                .collect();
            let written = match self.fd.write_vectored(&iov) {
                Ok(0) => return Err(self.stream_err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.stream_err(e)),
            };
            let (full, part) = (written / PAGE_SIZE, written % PAGE_SIZE);
            self.pages += full as u64;
            rest = &rest[full.min(rest.len())..];
            if part != 0 {
                if let Some((page, tail)) = rest.split_first() {
                    self.write_rest(&page[part..])?;
                    self.pages += 1;
                    rest = tail;
                }
            }
        }
        Ok(())
    }

    /// Writes `buf`, the rest of the current page, looping on short writes.
    fn write_rest(&mut self, buf: &[u8]) -> Result<(), SnapshotError> {
        let mut done = 0;
        while done < buf.len() {
            match self.fd.write(&buf[done..]) {
                Ok(0) => return Err(self.stream_err(std::io::ErrorKind::WriteZero.into())),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.stream_err(e)),
            }
        }
        Ok(())
    }

    fn stream_err(&self, source: std::io::Error) -> SnapshotError {
        SnapshotError::Stream {
            op: "write",
            page: self.pages,
            source,
        }
    }

    /// Pages moved so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Replaces the running kernel's memory with the loaded image. Only returns on failure
    /// (user space stays frozen then; call [`SnapshotDev::unfreeze`]).
    pub fn atomic_restore(&mut self) -> SnapshotError {
        match self.fd.atomic_restore() {
            Ok(()) => SnapshotError::Ioctl {
                call: "SNAPSHOT_ATOMIC_RESTORE (returned without restoring)",
                errno: nix::errno::Errno::UnknownErrno,
            },
            Err(errno) => SnapshotError::Ioctl {
                call: "SNAPSHOT_ATOMIC_RESTORE",
                errno,
            },
        }
    }
}

fn ioctl_err(call: &'static str) -> impl FnOnce(nix::errno::Errno) -> SnapshotError {
    move |errno| SnapshotError::Ioctl { call, errno }
}

impl Drop for SnapshotDev {
    fn drop(&mut self) {
        if self.frozen {
            let _ = self.unfreeze();
        }
    }
}
