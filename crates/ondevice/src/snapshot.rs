//! The one home of the kernel's userspace hibernation interface, `/dev/snapshot`
//! (Documentation/power/userland-swsusp.rst): thin `unsafe` ioctl wrappers, and a safe
//! [`SnapshotDev`] above them.
//!
//! Opening the device read-only enters *hibernation* mode (freeze, create an image, read its
//! page stream); opening it write-only enters *restore* mode (write a page stream, freeze,
//! atomically restore). The kernel moves at most one page per `read`/`write` call.

use snapimg::{Page, PAGE_SIZE};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// The device node.
pub const SNAPSHOT_DEV: &str = "/dev/snapshot";

// Opcodes from include/uapi/linux/suspend_ioctls.h (magic '3').
nix::ioctl_none!(ioc_freeze, b'3', 1);
nix::ioctl_none!(ioc_unfreeze, b'3', 2);
nix::ioctl_none!(ioc_atomic_restore, b'3', 4);
nix::ioctl_write_int_bad!(ioc_platform_support, nix::request_code_none!(b'3', 15));
nix::ioctl_write_ptr!(ioc_create_image, b'3', 17, libc::c_int);
nix::ioctl_write_int_bad!(ioc_pref_image_size, nix::request_code_none!(b'3', 18));

/// Errors of `/dev/snapshot` operations; each names the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The device could not be opened.
    #[error("cannot open {SNAPSHOT_DEV}: {0} (kernel needs CONFIG_HIBERNATION_SNAPSHOT_DEV, no lockdown, root)")]
    Open(std::io::Error),
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
    file: File,
    frozen: bool,
    pages: u64,
}

impl SnapshotDev {
    /// Opens the device for hibernation (reading an image out of the kernel).
    pub fn open_hibernate() -> Result<Self, SnapshotError> {
        Self::open(OpenOptions::new().read(true), Path::new(SNAPSHOT_DEV))
    }

    /// Opens the device for restore (writing an image into the kernel).
    pub fn open_restore() -> Result<Self, SnapshotError> {
        Self::open(OpenOptions::new().write(true), Path::new(SNAPSHOT_DEV))
    }

    fn open(o: &OpenOptions, p: &Path) -> Result<Self, SnapshotError> {
        let file = o.open(p).map_err(SnapshotError::Open)?;
        Ok(Self {
            file,
            frozen: false,
            pages: 0,
        })
    }

    fn fd(&self) -> libc::c_int {
        self.file.as_raw_fd()
    }

    /// Freezes user space (all tasks but the caller).
    pub fn freeze(&mut self) -> Result<(), SnapshotError> {
        // SAFETY: `fd` is an open /dev/snapshot; SNAPSHOT_FREEZE takes no argument.
        unsafe { ioc_freeze(self.fd()) }.map_err(|errno| SnapshotError::Ioctl {
            call: "SNAPSHOT_FREEZE",
            errno,
        })?;
        self.frozen = true;
        Ok(())
    }

    /// Thaws user space and frees any image the kernel holds.
    pub fn unfreeze(&mut self) -> Result<(), SnapshotError> {
        // SAFETY: `fd` is an open /dev/snapshot; SNAPSHOT_UNFREEZE takes no argument.
        unsafe { ioc_unfreeze(self.fd()) }.map_err(|errno| SnapshotError::Ioctl {
            call: "SNAPSHOT_UNFREEZE",
            errno,
        })?;
        self.frozen = false;
        Ok(())
    }

    /// Whether user space is frozen by this handle.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Tells the kernel whether to use the platform's (ACPI S4) hibernation hooks.
    pub fn set_platform_support(&mut self, on: bool) -> Result<(), SnapshotError> {
        // SAFETY: `fd` is an open /dev/snapshot; the argument is a plain integer flag.
        unsafe { ioc_platform_support(self.fd(), libc::c_int::from(on)) }
            .map(|_| ())
            .map_err(|errno| SnapshotError::Ioctl {
                call: "SNAPSHOT_PLATFORM_SUPPORT",
                errno,
            })
    }

    /// The image size the kernel should aim for when it frees memory before the snapshot.
    pub fn set_preferred_image_size(&mut self, bytes: u64) -> Result<(), SnapshotError> {
        let arg = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd` is an open /dev/snapshot; the argument is passed by value.
        unsafe { ioc_pref_image_size(self.fd(), arg) }
            .map(|_| ())
            .map_err(|errno| SnapshotError::Ioctl {
                call: "SNAPSHOT_PREF_IMAGE_SIZE",
                errno,
            })
    }

    /// Creates the image (user space must be frozen). Returns twice: now with `Created`,
    /// and again after a restore of this image with `Restored`.
    pub fn create_image(&mut self) -> Result<CreateResult, SnapshotError> {
        let mut in_suspend: libc::c_int = 0;
        // SAFETY: the kernel writes one int through the pointer (put_user); it points to a
        // live local that outlives the call.
        unsafe { ioc_create_image(self.fd(), &mut in_suspend as *mut libc::c_int) }.map_err(
            |errno| SnapshotError::Ioctl {
                call: "SNAPSHOT_CREATE_IMAGE",
                errno,
            },
        )?;
        Ok(if in_suspend != 0 {
            CreateResult::Created
        } else {
            CreateResult::Restored
        })
    }

    /// Reads the next page of the image's stream; `Ok(false)` at its end.
    pub fn read_page(&mut self, page: &mut Page) -> Result<bool, SnapshotError> {
        let mut filled = 0;
        while filled < PAGE_SIZE {
            match self.file.read(&mut page[filled..]) {
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
        let mut done = 0;
        while done < PAGE_SIZE {
            match self.file.write(&page[done..]) {
                Ok(0) => {
                    return Err(SnapshotError::Stream {
                        op: "write",
                        page: self.pages,
                        source: std::io::ErrorKind::WriteZero.into(),
                    })
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(SnapshotError::Stream {
                        op: "write",
                        page: self.pages,
                        source,
                    })
                }
            }
        }
        self.pages += 1;
        Ok(())
    }

    /// Pages moved so far.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Replaces the running kernel's memory with the loaded image. Only returns on failure
    /// (user space stays frozen then; call [`SnapshotDev::unfreeze`]).
    pub fn atomic_restore(&mut self) -> SnapshotError {
        // SAFETY: `fd` is an open /dev/snapshot in restore mode with a fully loaded image
        // and frozen user space; SNAPSHOT_ATOMIC_RESTORE takes no argument.
        match unsafe { ioc_atomic_restore(self.fd()) } {
            Ok(_) => SnapshotError::Ioctl {
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

impl Drop for SnapshotDev {
    fn drop(&mut self) {
        if self.frozen {
            let _ = self.unfreeze();
        }
    }
}
