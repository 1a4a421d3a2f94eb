//! The device's kernel interfaces: every `unsafe` block and every raw ioctl or syscall of
//! snapboot's device side lives in [`sys`]; the modules beside it are the safe layer over
//! `/dev/snapshot`, device-mapper, lockdown, the boot device tree, the EFI runtime map, the block devices a store
//! address names (and whether more are still appearing), and what `/proc` and `/sys` say
//! about the running system (its online CPUs included).
//!
//! Everything outside `sys` is safe code, which `deny(unsafe_code)` enforces.

#![deny(unsafe_code)]

pub mod cpus;
pub mod devicetree;
pub mod dm;
pub mod efi_runtime;
pub mod locate;
pub mod lockdown;
pub mod settle;
pub mod snapshot;
#[allow(unsafe_code)]
pub mod sys;
pub mod system;
pub mod watchdog;
