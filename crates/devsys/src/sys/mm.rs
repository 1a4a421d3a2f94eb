//! Another process's memory: `pidfd_open(2)` and `process_madvise(2)` (through libc, which
//! has the syscall numbers but no wrappers), `process_vm_readv(2)`, and `ptrace(2)`'s seize
//! and interrupt to hold a process still while its memory is written (through nix).

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `MADV_WILLNEED`: start reading the range in (swap-in readahead for anonymous memory).
pub const MADV_WILLNEED: i32 = libc::MADV_WILLNEED;
/// `MADV_PAGEOUT`: reclaim the range now (anonymous pages go to swap).
pub const MADV_PAGEOUT: i32 = libc::MADV_PAGEOUT;

/// Most ranges one `process_madvise` or `process_vm_readv` call takes (`UIO_MAXIOV`).
pub const MAX_IOV: usize = 1024;

/// A process, held by a pidfd so its number cannot be reused under us.
pub struct Pidfd {
    fd: OwnedFd,
    pid: i32,
}

impl Pidfd {
    /// Opens process `pid`.
    pub fn open(pid: i32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags by value and returns a new descriptor or
        // -1; no memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Self { fd, pid })
    }

    /// `process_madvise(advice)` on `ranges` (start address, bytes), at most [`MAX_IOV`] per
    /// call; returns the bytes the kernel advised.
    pub fn madvise(&self, ranges: &[(u64, u64)], advice: i32) -> std::io::Result<u64> {
        let mut done = 0u64;
        for group in ranges.chunks(MAX_IOV) {
            let iov: Vec<libc::iovec> = group
                .iter()
                .map(|&(start, len)| libc::iovec {
                    iov_base: start as usize as *mut libc::c_void,
                    iov_len: len as usize,
                })
                .collect();
            // SAFETY: `iov` is a live array of `iov.len()` iovecs; the kernel only reads it.
            // The addresses in it belong to the other process and are never dereferenced
            // here.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_process_madvise,
                    self.fd.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len(),
                    advice,
                    0u32,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            done += n as u64;
        }
        Ok(done)
    }

    /// Reads `ranges` of the process's memory into a scratch buffer, which makes the kernel
    /// fault every page in (from swap if it is there) and map it. Returns the bytes read.
    pub fn touch(&self, ranges: &[(u64, u64)]) -> std::io::Result<u64> {
        const BUF: u64 = 1 << 20;
        let mut scratch = vec![0u8; BUF as usize];
        let mut done = 0u64;
        // Split into pieces of at most BUF bytes and read them MAX_IOV at a time.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        for &(start, len) in ranges {
            let mut at = start;
            while at < start + len {
                let n = (start + len - at).min(BUF);
                pieces.push((at, n));
                at += n;
            }
        }
        let mut i = 0;
        while i < pieces.len() {
            let mut total = 0u64;
            let mut remote = Vec::new();
            while i < pieces.len() && remote.len() < MAX_IOV && total + pieces[i].1 <= BUF {
                remote.push(nix::sys::uio::RemoteIoVec {
                    base: pieces[i].0 as usize,
                    len: pieces[i].1 as usize,
                });
                total += pieces[i].1;
                i += 1;
            }
            let mut local = [IoSliceMut::new(&mut scratch[..total as usize])];
            let n = nix::sys::uio::process_vm_readv(
                nix::unistd::Pid::from_raw(self.pid),
                &mut local,
                &remote,
            )?;
            done += n as u64;
        }
        Ok(done)
    }
}

/// A process held in a ptrace stop (every thread seized and interrupted, as a checkpointing
/// tool does: the real parent sees nothing, and interrupted system calls restart). Released
/// on drop.
pub struct Stopped {
    tids: Vec<nix::unistd::Pid>,
}

impl Stopped {
    /// Stops every thread of process `pid`.
    pub fn stop(pid: i32) -> std::io::Result<Self> {
        use nix::sys::ptrace;
        use nix::sys::wait::{waitpid, WaitPidFlag};
        let mut held = Stopped { tids: Vec::new() };
        for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let Some(tid) = e?.file_name().to_str().and_then(|t| t.parse::<i32>().ok()) else {
                continue;
            };
            let tid = nix::unistd::Pid::from_raw(tid);
            ptrace::seize(tid, ptrace::Options::empty())?;
            held.tids.push(tid);
            ptrace::interrupt(tid)?;
            waitpid(tid, Some(WaitPidFlag::__WALL))?;
        }
        Ok(held)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for &tid in &self.tids {
            let _ = nix::sys::ptrace::detach(tid, None);
        }
    }
}

/// Writes back, unchanged, the bytes of `ranges` (start address, bytes) of a process held in
/// [`Stopped`]: every page is write-faulted, so it is mapped writable and dirty as it was
/// before it was paged out, and the application's first write to it costs no fault.
pub fn rewrite_in_place(_held: &Stopped, pid: i32, ranges: &[(u64, u64)]) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))?;
    let mut buf = Vec::new();
    let mut done = 0;
    for &(start, len) in ranges {
        buf.resize(len as usize, 0);
        mem.read_exact_at(&mut buf, start)?;
        mem.write_all_at(&buf, start)?;
        done += len;
    }
    Ok(done)
}

/// `mincore(2)` on `[start, start + pages*4096)` of this process: one entry per page, true
/// when the page is in memory (for a file mapping: in the page cache, whoever touched it).
pub fn mincore(start: u64, pages: u64) -> std::io::Result<Vec<bool>> {
    let mut vec = vec![0u8; pages as usize];
    // SAFETY: mincore only inspects the kernel's page tables and page cache for the range
    // (which need not be mapped readable) and writes one byte per page into `vec`, which has
    // exactly `pages` bytes and lives across the call.
    let r = unsafe {
        libc::mincore(
            start as usize as *mut libc::c_void,
            (pages * 4096) as usize,
            vec.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
}

/// Lowers this process to `SCHED_IDLE`: it runs only when nothing else wants the CPU.
pub fn idle_priority() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler only reads the sched_param behind the pointer (a live
    // local) and changes this process's scheduling policy.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
