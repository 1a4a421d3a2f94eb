//! The `/dev/snapshot` ioctls (include/uapi/linux/suspend_ioctls.h, magic `'3'`), as safe
//! methods of a handle that can only be made by opening `/dev/snapshot` itself.
//!
//! [`crate::snapshot::SnapshotDev`] builds the hibernation and restore sequences on top.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;

/// The device node.
pub const SNAPSHOT_DEV: &str = "/dev/snapshot";

nix::ioctl_none!(
    /// `SNAPSHOT_FREEZE`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/snapshot` (the request code means this only there).
    ioc_freeze,
    b'3',
    1
);
nix::ioctl_none!(
    /// `SNAPSHOT_UNFREEZE`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/snapshot`.
    ioc_unfreeze,
    b'3',
    2
);
nix::ioctl_none!(
    /// `SNAPSHOT_ATOMIC_RESTORE`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/snapshot` in restore mode. On success the whole memory
    /// of the system is replaced by the loaded image's, and execution continues in the
    /// imaged process at its own `SNAPSHOT_CREATE_IMAGE` call.
    ioc_atomic_restore,
    b'3',
    4
);
// SNAPSHOT_CREATE_IMAGE is declared _IOW('3', 17, int), yet the kernel writes the int
// (put_user): so the wrapper takes a `*mut` pointer and passes the _IOW request code as is.
nix::ioctl_readwrite_bad!(
    /// `SNAPSHOT_CREATE_IMAGE`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open `/dev/snapshot` in hibernation mode, and `data` must point to
    /// a live, writable `c_int` that nothing else accesses until the call returns.
    ioc_create_image,
    nix::request_code_write!(b'3', 17, std::mem::size_of::<libc::c_int>()),
    libc::c_int
);

/// Which side of a hibernation the device was opened for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read-only: freeze, create an image, read its page stream.
    Hibernate,
    /// Write-only: write a page stream, freeze, atomically restore.
    Restore,
}

/// An open `/dev/snapshot`.
#[derive(Debug)]
pub struct SnapshotFd {
    file: File,
}

impl SnapshotFd {
    /// Opens [`SNAPSHOT_DEV`] in `mode`.
    pub fn open(mode: Mode) -> std::io::Result<Self> {
        let file = match mode {
            Mode::Hibernate => OpenOptions::new().read(true).open(SNAPSHOT_DEV)?,
            Mode::Restore => OpenOptions::new().write(true).open(SNAPSHOT_DEV)?,
        };
        Ok(Self { file })
    }

    /// `SNAPSHOT_FREEZE`: freezes user space (all tasks but the caller).
    pub fn freeze(&self) -> nix::Result<()> {
        // SAFETY: the fd is an open /dev/snapshot (only `open` makes a SnapshotFd) and
        // SNAPSHOT_FREEZE takes no argument, so no memory of ours is touched.
        unsafe { ioc_freeze(self.file.as_raw_fd()) }.map(drop)
    }

    /// `SNAPSHOT_UNFREEZE`: thaws user space and frees any image the kernel holds.
    pub fn unfreeze(&self) -> nix::Result<()> {
        // SAFETY: as in `freeze`: an open /dev/snapshot, an ioctl without argument.
        unsafe { ioc_unfreeze(self.file.as_raw_fd()) }.map(drop)
    }

    /// `SNAPSHOT_CREATE_IMAGE`: creates the image (user space must be frozen). Returns the
    /// kernel's `in_suspend` flag: `true` in the original system, `false` when execution
    /// continues here after a restore of this image.
    pub fn create_image(&self) -> nix::Result<bool> {
        let mut in_suspend: libc::c_int = 0;
        // SAFETY: an open /dev/snapshot; the kernel writes one int through the pointer
        // (put_user in snapshot_ioctl), which points to a live local that outlives the call.
        unsafe { ioc_create_image(self.file.as_raw_fd(), &mut in_suspend) }?;
        Ok(in_suspend != 0)
    }

    /// `SNAPSHOT_ATOMIC_RESTORE`: replaces the running kernel's memory with the loaded image.
    /// Returns only when the kernel refused (`Ok` means it returned without restoring).
    pub fn atomic_restore(&self) -> nix::Result<()> {
        // SAFETY: an open /dev/snapshot; the ioctl takes no argument. If it succeeds this
        // process's memory is replaced by the image's as a whole, which Rust cannot observe
        // as a partial write: execution resumes in the imaged process at its own
        // SNAPSHOT_CREATE_IMAGE call, with that process's consistent state.
        unsafe { ioc_atomic_restore(self.file.as_raw_fd()) }.map(drop)
    }

    /// Reads from the image's page stream (the kernel moves at most one page per call).
    pub fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read(buf)
    }

    /// Writes to the page stream of an image to restore.
    pub fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }

    /// `writev`: the kernel takes each slice through the device's `write` in turn (at most
    /// a page each) and stops at the first short one.
    pub fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.file.write_vectored(bufs)
    }
}
