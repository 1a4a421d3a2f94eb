//! What runs on the device: the guest's second-stage init and `ready` hook, capture and
//! resume through `/dev/snapshot`, and the steps that follow a restore.
//!
//! The kernel interfaces it drives (`/dev/snapshot`, device-mapper, the syscalls, what `/proc`
//! and `/sys` report) are `devsys`'s, where every `unsafe` block lives; this crate is safe
//! code, which `deny(unsafe_code)` enforces.

#![deny(unsafe_code)]

pub mod after_restore;
pub mod baseline;
pub mod binding;
pub mod boot;
pub mod capture;
pub mod capture_mounts;
pub mod command_store;
pub mod device_check;
pub mod devicekey;
pub mod guest;
pub mod handover;
pub mod hooks;
pub mod kernel_native;
pub mod lazy;
pub mod lifecycle;
pub mod markers;
pub mod memory;
pub mod profile;
pub mod resume;
pub mod rollback;
pub mod settings;
pub mod status;
pub mod store;
pub mod watchdog;
pub mod zram;
