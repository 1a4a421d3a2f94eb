//! The one home of the device side's kernel interfaces: every `unsafe` block and every raw
//! ioctl or syscall of snapboot on the device lives below this module, behind safe functions
//! and types. The rest of `devsys`, and every device crate above it, is `#![deny(unsafe_code)]`.
//!
//! | module       | kernel interface                                                   |
//! |--------------|--------------------------------------------------------------------|
//! | [`snapshot`] | `/dev/snapshot` ioctls (`SNAPSHOT_FREEZE`, `_CREATE_IMAGE`, ...)   |
//! | [`dm`]       | device-mapper control ioctls and their `struct dm_ioctl` buffer     |
//! | [`random`]   | `RNDADDENTROPY`, `RNDRESEEDCRNG` on `/dev/urandom`; x86 `RDRAND`    |
//! | [`block`]    | `BLKFLSBUF` on block devices                                        |
//! | [`swap`]     | `swapon(2)`, `swapoff(2)`; `mlockall(2)` as the [`MemoryLock`] guard |
//! | [`devnum`]   | `MAJOR:MINOR` device numbers: encoding, decoding, `mknod(2)`        |
//! | [`kexec`]    | `kexec_file_load(2)`, `reboot(LINUX_REBOOT_CMD_KEXEC)`              |
//! | [`mm`]       | `pidfd_open(2)`, `process_madvise(2)`, `process_vm_readv(2)`        |
//! | [`watchdog`] | `WDIOC_SETTIMEOUT`, `WDIOC_KEEPALIVE`, the magic close             |
//!
//! Each wrapper that issues an ioctl takes a handle it opened itself (on the device node the
//! ioctl belongs to), so a request code can never reach a driver that reads it differently.
//! Where rustix or nix already offer a call safely, the wrapper uses them instead of libc.

pub mod block;
pub mod devnum;
pub mod dm;
pub mod kexec;
pub mod mm;
pub mod random;
pub mod snapshot;
pub mod swap;
pub mod watchdog;

pub use devnum::{DevNum, NodeKind};
pub use swap::MemoryLock;
