//! The baseline snapboot is measured against: the kernel's own hibernation to a swap
//! partition ("software resume"). Hibernate with `echo disk > /sys/power/state`,
//! resume by writing the swap device's number to `/sys/power/resume` in the initramfs.
//!
//! Only the benchmark uses this; snapboot's own path goes through `/dev/snapshot`.

use crate::guest::print_marker;
use boottrace::Marker;
use devsys::sys::swap::swapon;
use devsys::sys::DevNum;
use std::path::Path;

/// Errors of the kernel-native path.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
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

/// `MAJOR:MINOR` of the swap device, as `/sys/power/resume` takes it.
fn resume_device(dev: &Path) -> Result<String, NativeError> {
    DevNum::of_path(dev)
        .map(|n| n.to_string())
        .map_err(sys(format!("swap device {}", dev.display())))
}

/// Hibernates the whole system to the swap device `dev` and powers off. Returns after the
/// system was resumed from that image (or with the reason it could not hibernate).
pub fn hibernate(dev: &Path) -> Result<(), NativeError> {
    let numbers = resume_device(dev)?;
    match swapon(dev, None) {
        // EBUSY: it is on already.
        Err(e) if e.raw_os_error() != Some(libc::EBUSY) => {
            return Err(sys(format!("swapon {}", dev.display()))(e));
        }
        _ => {}
    }
    std::fs::write("/sys/power/resume", &numbers).map_err(sys("write /sys/power/resume"))?;
    std::fs::write("/sys/power/disk", "shutdown").map_err(sys("write /sys/power/disk"))?;
    print_marker(Marker::CaptureStart, Some("kernel-native hibernation"));
    std::fs::write("/sys/power/state", "disk").map_err(sys("write disk to /sys/power/state"))?;
    Ok(())
}

/// Asks the kernel to resume from the swap device `dev`. Returns only when there was no
/// image to resume (the kernel continues the cold boot).
pub fn resume(dev: &Path) -> Result<(), NativeError> {
    let numbers = resume_device(dev)?;
    print_marker(
        Marker::ResumeStart,
        Some(&format!("kernel-native from {}", dev.display())),
    );
    std::fs::write("/sys/power/resume", &numbers).map_err(sys("write /sys/power/resume"))
}
