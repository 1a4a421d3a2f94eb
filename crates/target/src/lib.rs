//! What runs on the device: the guest's second-stage init, the `ready` hook, and (with the
//! snapshot issue) capture and resume through `/dev/snapshot`.

pub mod guest;
pub mod serial;
