//! The board's guest bundles: everything one board boot needs, in one directory, and the
//! root filesystems that go into it.
//!
//! A bundle (`bundle`) is a kernel from `hostkernel`, an initramfs (`initramfs`) and a root
//! filesystem made from a workload (`workload`): the board's own busybox shell (`busybox`),
//! python with the `app` program (`python`, its libraries found by `dynlink`, arm64 packages
//! unpacked by `foreign`), or a Debian system built from Debian's packages (`debian`) with
//! snapboot's own Debian package in it (`debpkg`); a Debian root of another architecture than
//! the host's runs its programs under qemu-user (`emulation`). `home` keeps kernels and bundles under
//! `$SNAPBOOT_HOME` and turns a name on the command line into a bundle.

pub mod bundle;
pub mod busybox;
pub mod debian;
pub mod debpkg;
pub mod dynlink;
pub mod emulation;
pub mod foreign;
pub mod home;
pub mod initramfs;
pub mod python;
pub mod rauc_root;
pub mod workload;
pub mod workload_error;

pub use bundle::{BuildOptions, Bundle, BundleError};
pub use home::HomeError;
pub use workload::{Probe, Workload};
