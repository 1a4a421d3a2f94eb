//! The board's kernels, host side: a stock Debian kernel fetched without being installed and
//! decompressed once for QEMU (`kernel`, `arm64_image`), the modules it ships (`modules`),
//! and the restore kernel built from its source (`restore_kernel`, checked against its
//! configuration fragment by `kernel_config` and stamped by `version_stamp`).

pub mod arm64_image;
pub mod kernel;
pub mod kernel_config;
pub mod modules;
pub mod restore_kernel;
pub mod version_stamp;

pub use kernel::{KernelError, KernelInfo};
