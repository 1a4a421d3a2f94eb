//! What both snapboot binaries share: the commands that run on the device. `snapboot` (the
//! host tool: board, bench, analysis, and everything below) and `snapboot-device` (the small
//! static binary the board puts in the initramfs and every image carries) parse them alike.

pub mod device;
pub mod guestcmd;
pub mod storecmd;
