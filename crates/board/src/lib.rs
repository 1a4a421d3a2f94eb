//! The snapboot board: a QEMU machine shaped like an embedded device.
//!
//! It owns everything host-side that turns a stock distribution kernel and a root filesystem
//! tree into a bootable *guest bundle*, and the runner that powers the bundle on, records the
//! serial console with host timestamps and measures time-to-interactive.

pub mod app_state;
pub mod bench;
pub mod bootdisk;
pub mod bundle;
pub mod busybox;
pub mod capture;
pub mod debian;
pub mod debpkg;
pub mod dynlink;
pub mod foreign;
pub mod home;
pub mod initramfs;
pub mod native;
pub mod partdisk;
pub mod python;
pub mod qemu;
pub mod restorer_boot;
pub mod run_options;
#[cfg(test)]
mod testutil;
pub mod tpm;
pub mod uboot;
pub mod uefi;
pub mod virt;
pub mod workload;
pub mod workload_error;

pub use bench::{BenchError, BootError};
pub use bundle::{BuildOptions, Bundle, BundleError};
pub use capture::CaptureBootError;
pub use home::HomeError;
pub use qemu::{RunError, RunResult};
pub use run_options::{Accel, RunOptions};
pub use workload::{Probe, Workload};
