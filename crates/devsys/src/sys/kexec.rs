//! `kexec_file_load(2)` and `reboot(LINUX_REBOOT_CMD_KEXEC)`: load a kernel and its initramfs
//! from file descriptors, then jump into it.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Loads `kernel` (a bzImage) and `initrd` for a later [`exec`], with this command line.
/// The kernel reads both files itself and checks the bzImage's header.
pub fn load_file(
    kernel: BorrowedFd<'_>,
    initrd: BorrowedFd<'_>,
    cmdline: &CStr,
) -> std::io::Result<()> {
    let len = cmdline.to_bytes_with_nul().len() as libc::c_ulong;
    // SAFETY: kexec_file_load takes two open file descriptors (borrowed, so open for the
    // whole call), the command line's length including its NUL and a pointer to it (a live
    // `CStr`, which the kernel only reads), and flags (none). It touches no memory of ours
    // beyond the command line.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kexec_file_load,
            kernel.as_raw_fd(),
            initrd.as_raw_fd(),
            len,
            cmdline.as_ptr(),
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Jumps into the kernel [`load_file`] loaded. Returns only if the kernel refused.
pub fn exec() -> std::io::Error {
    match rustix::system::reboot(rustix::system::RebootCommand::Kexec) {
        Ok(()) => std::io::Error::other("reboot(KEXEC) returned"),
        Err(e) => e.into(),
    }
}
