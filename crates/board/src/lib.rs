//! The snapboot board: a QEMU machine shaped like an embedded device.
//!
//! It owns everything host-side that turns a stock distribution kernel and a root filesystem
//! tree into a bootable *guest bundle*, and the runner that powers the bundle on, records the
//! serial console with host timestamps and measures time-to-interactive.

pub mod app_state;
pub mod bench;
pub mod bootdisk;
pub mod capture;
pub mod native;
pub mod partdisk;
pub mod qemu;
pub mod restorer_boot;
pub mod run_options;
#[cfg(test)]
mod testutil;
pub mod tpm;
pub mod uboot;
pub mod uefi;
pub mod virt;

pub use bench::{BenchError, BootError};
pub use capture::CaptureBootError;
pub use qemu::{RunError, RunResult};
pub use run_options::{Accel, RunOptions};
