//! What runs on the device: the guest's second-stage init and `ready` hook, capture and
//! resume through `/dev/snapshot`, and the steps that follow a restore.
//!
//! Every `unsafe` block and every raw ioctl or syscall lives in `sys`; everything else is
//! safe code, which `deny(unsafe_code)` enforces.

#![deny(unsafe_code)]

pub mod binding;
pub mod boot;
pub mod bootloader;
pub mod capture;
pub mod capture_mounts;
pub mod devicekey;
pub mod devicetree;
pub mod dm;
pub mod guest;
pub mod handover;
pub mod install;
pub mod kernel_check;
pub mod kernel_config;
pub mod kernel_native;
pub mod lazy;
pub mod lifecycle;
pub mod locate;
pub mod lockdown;
pub mod memory;
/// Partition tables, read as the kernel reads them (its own crate: the restorer reads them too).
pub use parttable;
pub mod profile;
pub mod restore;
pub mod resume;
pub mod settings;
pub mod snapshot;
pub mod status;
pub mod store;
#[allow(unsafe_code)]
mod sys;
pub mod system;
pub mod zram;
