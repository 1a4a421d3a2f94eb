//! The snapboot board: QEMU machines shaped like embedded devices, and the runner that powers
//! a guest bundle (crate `bundle`) on.
//!
//! The machines: the x86_64 PC entered through PVH (`qemu`) or powered on into UEFI firmware
//! (`uefi`, its GPT disk made by `partdisk`), and the arm64 board booted by U-Boot (`virt`,
//! `uboot`, its disk `bootdisk`), with a software TPM (`tpm`); how to run them
//! (`run_options`). The runner records the serial console with host timestamps and measures
//! time-to-interactive (`qemu`); on it, a capture (`capture`), a boot of the freestanding
//! restorer (`restorer_boot`) and the questions a restored `app` must answer (`app_state`).

pub mod app_state;
pub mod bootdisk;
pub mod capture;
pub mod partdisk;
pub mod qemu;
pub mod rauc;
pub mod restorer_boot;
pub mod run_options;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;
pub mod tpm;
pub mod uboot;
pub mod uefi;
pub mod virt;

pub use capture::CaptureBootError;
pub use qemu::{RunError, RunResult};
pub use run_options::{Accel, RunOptions};
