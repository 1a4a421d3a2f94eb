//! A hardware watchdog's character device (include/uapi/linux/watchdog.h): opening it starts
//! the watchdog, `WDIOC_SETTIMEOUT` sets its timeout, `WDIOC_KEEPALIVE` (or any write) feeds
//! it, and writing the magic character `V` before the close stops it; a close without it
//! leaves the watchdog running ("watchdog did not stop!"), to reset the machine unless
//! someone opens and feeds it again.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The first watchdog's node.
pub const WATCHDOG0: &str = "/dev/watchdog0";

// WDIOC_KEEPALIVE = _IOR('W', 5, int); WDIOC_SETTIMEOUT = _IOWR('W', 6, int).
nix::ioctl_read!(
    /// `WDIOC_KEEPALIVE`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open watchdog device and `data` point to a writable `int`.
    ioc_keepalive,
    b'W',
    5,
    libc::c_int
);
nix::ioctl_readwrite!(
    /// `WDIOC_SETTIMEOUT`.
    ///
    /// # Safety
    ///
    /// `fd` must be an open watchdog device and `data` point to a readable and writable
    /// `int` (seconds in, the timeout the driver set out).
    ioc_set_timeout,
    b'W',
    6,
    libc::c_int
);

/// A running watchdog, open (which started it).
#[derive(Debug)]
pub struct Watchdog {
    file: File,
    path: PathBuf,
}

impl Watchdog {
    /// Opens `path`, which starts the watchdog with its current timeout. Only one process
    /// may hold it open: `EBUSY` when another does (systemd's `RuntimeWatchdogSec=`).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        Ok(Self {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The node it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the timeout to `secs`; returns the timeout the driver set (it may round).
    pub fn set_timeout(&self, secs: u32) -> std::io::Result<u32> {
        let mut t = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
        // SAFETY: the fd is a watchdog device (only `open` makes a Watchdog); `t` is an int
        // the kernel reads and writes back, live for the call.
        unsafe { ioc_set_timeout(self.file.as_raw_fd(), &mut t) }?;
        Ok(u32::try_from(t).unwrap_or(0))
    }

    /// Feeds it: the countdown starts again.
    pub fn keepalive(&self) -> std::io::Result<()> {
        let mut unused: libc::c_int = 0;
        // SAFETY: the fd is a watchdog device (only `open` makes a Watchdog); the kernel
        // writes nothing it reads back, and `unused` outlives the call anyway.
        unsafe { ioc_keepalive(self.file.as_raw_fd(), &mut unused) }?;
        Ok(())
    }

    /// Stops it: the magic close (`V`, then close). A driver built with `nowayout` keeps
    /// it running regardless.
    pub fn disarm(mut self) -> std::io::Result<()> {
        self.file.write_all(b"V")?;
        self.file.flush()
    }

    /// Closes it running: the machine resets when the timeout runs out, unless someone
    /// opens and feeds it again (the restored system, after the restore).
    pub fn leave_running(self) {
        drop(self.file);
    }
}
