//! `snapboot install`: puts snapboot into a system that has initramfs-tools (or dracut)
//! and systemd but not the snapboot package, at the paths left to the administrator
//! (/usr/local/sbin, /etc; the table in [`files`]), on the running system or into a root tree
//! being built; `--uninstall` takes it out again. The Debian package ships the same files
//! at the distribution's paths (`snapboot board deb`).
//!
//! ```text
//!   plan      what will be written, decided first (`--dry-run` prints it): refused when the
//!             package is installed, a path is a package's (dpkg -S), or a file is there
//!             that no earlier install wrote
//!   apply     the files (each through a rename), the capture unit enabled (a wants link),
//!             and ROOT/etc/snapboot/installed.manifest: every path with its checksum
//!   uninstall what the manifest lists, unless changed since (kept, with a warning)
//!   + ROOT/etc/systemd/system/snapboot-capture.service.d/after.conf  with --after UNIT
//!   + ROOT/etc/snapboot/store-modules   with --store DEV or --store-module M: the drivers
//!                                       the initramfs loads before udev, so the store is there
//! ```
//!
//! The cold boot is left as it is: the boot script returns whenever no image is restored.
//! The initramfs is rebuilt by the command (`update-initramfs -u` or `dracut -f`), not here.

pub mod files;
pub mod manifest;
mod options;
mod plan;
pub mod system;

pub use files::{
    Generator, BINARY_PATH, BOOT_SCRIPT, CAPTURE_UNIT, CAPTURE_UNIT_NAME, COLD_TARGET,
    COLD_TARGET_NAME, CONFIRM_UNIT, CONFIRM_UNIT_NAME, FALLBACK_TARGET, FALLBACK_TARGET_NAME, HOOK,
    INITRAMFS_POST_UPDATE, INIT_MARKER, KERNEL_POSTINST, RESTORED_TARGET, RESTORED_TARGET_NAME,
    ROOT_MARKER,
};
pub use options::{
    after_dropin, store_driver_modules, valid_unit_name, InstallError, InstallOptions, DROPIN_PATH,
    STORE_MODULES_PATH, WANTS_DIR,
};
pub use plan::{apply, plan, uninstall, Content, Plan, Planned, Uninstalled};

#[cfg(test)]
mod tests;
