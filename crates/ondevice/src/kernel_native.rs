//! The baseline snapboot is measured against: the kernel's own hibernation to a swap
//! partition ("software resume" in seed 000). Hibernate with `echo disk > /sys/power/state`,
//! resume by writing the swap device's number to `/sys/power/resume` in the initramfs.
//!
//! Only the benchmark uses this; snapboot's own path goes through `/dev/snapshot`.

use crate::guest::print_marker;
use std::ffi::CString;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Errors of the kernel-native path.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The swap device is missing or not a block device.
    #[error("{0} is not a block device")]
    NotBlock(String),
    /// A sysfs write or syscall failed.
    #[error("{what}")]
    Sys {
        what: String,
        source: std::io::Error,
    },
}

fn sys(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> NativeError {
    let what = what.into();
    move |source| NativeError::Sys { what, source }
}

/// `MAJOR:MINOR` of a block device node.
pub fn dev_numbers(dev: &Path) -> Result<String, NativeError> {
    let m = std::fs::metadata(dev).map_err(sys(format!("stat {}", dev.display())))?;
    if !m.file_type().is_block_device() {
        return Err(NativeError::NotBlock(dev.display().to_string()));
    }
    let rdev = m.rdev();
    Ok(format!("{}:{}", libc::major(rdev), libc::minor(rdev)))
}

/// Hibernates the whole system to the swap device `dev` and powers off. Returns after the
/// system was resumed from that image (or with the reason it could not hibernate).
pub fn hibernate(dev: &Path) -> Result<(), NativeError> {
    let numbers = dev_numbers(dev)?;
    let c = CString::new(dev.as_os_str().as_encoded_bytes())
        .map_err(|e| sys("device path")(std::io::Error::other(e)))?;
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call; flags 0.
    if unsafe { libc::swapon(c.as_ptr(), 0) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(sys(format!("swapon {}", dev.display()))(e));
        }
    }
    std::fs::write("/sys/power/resume", &numbers).map_err(sys("write /sys/power/resume"))?;
    std::fs::write("/sys/power/disk", "shutdown").map_err(sys("write /sys/power/disk"))?;
    print_marker("capture-start", Some("kernel-native hibernation"));
    std::fs::write("/sys/power/state", "disk").map_err(sys("write disk to /sys/power/state"))?;
    Ok(())
}

/// Asks the kernel to resume from the swap device `dev`. Returns only when there was no
/// image to resume (the kernel continues the cold boot).
pub fn resume(dev: &Path) -> Result<(), NativeError> {
    let numbers = dev_numbers(dev)?;
    print_marker(
        "resume-start",
        Some(&format!("kernel-native from {}", dev.display())),
    );
    std::fs::write("/sys/power/resume", &numbers).map_err(sys("write /sys/power/resume"))
}
