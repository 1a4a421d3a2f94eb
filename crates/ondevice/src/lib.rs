//! What runs on the device: the guest's second-stage init and `ready` hook, capture and
//! resume through `/dev/snapshot`, and the steps that follow a restore.

pub mod binding;
pub mod capture;
pub mod dm;
pub mod guest;
pub mod kernel_native;
pub mod lazy;
pub mod restore;
pub mod resume;
pub mod serial;
pub mod snapshot;
pub mod system;
pub mod zram;
