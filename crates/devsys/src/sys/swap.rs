//! Swap areas and locked memory: `swapon(2)` and `swapoff(2)` (neither rustix nor nix wraps
//! them), and `mlockall(2)`/`munlockall(2)` (through rustix) as the [`MemoryLock`] guard.

use std::ffi::CString;
use std::path::Path;

/// `SWAP_FLAG_PREFER` (include/linux/swap.h): the low bits carry a priority.
const SWAP_FLAG_PREFER: libc::c_int = 0x8000;
/// `SWAP_FLAG_PRIO_MASK`: the highest priority.
pub const MAX_PRIORITY: u16 = 0x7fff;

fn c_path(path: &Path) -> std::io::Result<CString> {
    Ok(CString::new(path.as_os_str().as_encoded_bytes())?)
}

/// The `swapflags` of `swapon(2)`: the kernel's default priority, or `prio` (capped at
/// [`MAX_PRIORITY`]).
fn swap_flags(priority: Option<u16>) -> libc::c_int {
    match priority {
        None => 0,
        Some(p) => SWAP_FLAG_PREFER | libc::c_int::from(p.min(MAX_PRIORITY)),
    }
}

/// Turns on the swap area at `path`, with the kernel's default priority or `priority`.
pub fn swapon(path: &Path, priority: Option<u16>) -> std::io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call; the kernel only
    // reads it. The flags are plain integers.
    if unsafe { libc::swapon(c.as_ptr(), swap_flags(priority)) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Turns off the swap area at `path`, reading its pages back into memory.
pub fn swapoff(path: &Path) -> std::io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call; the kernel only
    // reads it.
    if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Keeps all of this process's memory resident, current and future (`mlockall(MCL_CURRENT |
/// MCL_FUTURE)`), until dropped (`munlockall`).
///
/// For a process that must not block on a page fault, e.g. while it holds the swap device
/// suspended. Locks do not nest: dropping any guard unlocks everything, so hold one at a
/// time.
#[derive(Debug)]
#[must_use = "memory is unlocked again when the guard is dropped"]
pub struct MemoryLock {
    _private: (),
}

impl MemoryLock {
    /// Locks the process's memory (needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK).
    pub fn new() -> std::io::Result<Self> {
        use rustix::mm::MlockAllFlags;
        rustix::mm::mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE)?;
        Ok(Self { _private: () })
    }
}

impl Drop for MemoryLock {
    fn drop(&mut self) {
        // munlockall(2) has no failure mode on Linux, and a drop could not report one.
        let _ = rustix::mm::munlockall();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_priorities_encode_as_the_kernel_reads_them() {
        assert_eq!(swap_flags(None), 0);
        assert_eq!(swap_flags(Some(0)), 0x8000);
        assert_eq!(swap_flags(Some(5)), 0x8005);
        assert_eq!(swap_flags(Some(MAX_PRIORITY)), 0xffff);
        assert_eq!(swap_flags(Some(u16::MAX)), 0xffff, "capped at the mask");
    }

    #[test]
    fn paths_with_nul_are_refused_before_any_call() {
        let bad = Path::new("/dev/a\0b");
        assert_eq!(
            swapoff(bad).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
        assert_eq!(
            swapon(bad, None).unwrap_err().kind(),
            std::io::ErrorKind::InvalidInput
        );
    }

    /// `VmLck` of /proc/self/status, in KiB.
    fn locked_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = s.lines().find_map(|l| l.strip_prefix("VmLck:")).unwrap();
        line.trim().trim_end_matches("kB").trim().parse().unwrap()
    }

    #[test]
    fn memory_lock_unlocks_on_drop() {
        // Only this process's own pages are affected, and only while the guard lives.
        match MemoryLock::new() {
            Ok(lock) => {
                assert!(locked_kib() > 0, "memory is locked while the guard lives");
                drop(lock);
                assert_eq!(locked_kib(), 0, "and unlocked when it is dropped");
            }
            // Without CAP_IPC_LOCK, a small RLIMIT_MEMLOCK refuses with ENOMEM (or EPERM
            // when it is 0); nothing may stay locked then.
            Err(e) => {
                assert!(
                    matches!(e.raw_os_error(), Some(libc::ENOMEM | libc::EPERM)),
                    "{e}"
                );
                assert_eq!(locked_kib(), 0);
            }
        }
    }
}
