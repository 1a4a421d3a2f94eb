//! The device's half of snapboot: the commands that run on the device (`start`, `ready`,
//! `capture`, `resume`, `check`, `config`, `image`, `store`, `key`, `profile`, `memory`, `install`, `restore-kernel`),
//! parsed here and carried out by the `ondevice` crate. `snapboot-device`, the small static
//! binary the board puts in the initramfs and every image carries, is this crate's binary;
//! the host tool `snapboot` has the same commands through this library.

mod bootcmd;
mod checkcmd;
mod commands;
mod configcmd;
mod exit;
mod imagecmd;
mod lifecyclecmd;
mod packcmd;
mod restorecmd;
mod storecmd;
mod systemcmd;

pub use bootcmd::{CaptureArgs, ResumeArgs};
pub use checkcmd::{print_checks, status as check_status, CheckArgs};
pub use commands::{dispatch, exit, fast_path, DeviceCli, DeviceCmd, ImageCmd};
pub use configcmd::ConfigCmd;
pub use exit::{Exit, Tool, DEVICE_EXIT_HELP, HOST_EXIT_HELP};
pub use storecmd::{key, KeyCmd, StoreCmd};
pub use systemcmd::{InstallArgs, MemoryCmd, ProfileCmd};
