//! The boot setup an image is bound to ([`snapimg::BootSetup`]), computed from the kernel
//! pack's initramfs: BLAKE3 of `/init`, BLAKE3 of the file listing ([`snapimg::listing`]),
//! and the GNU build id of the snapboot binary that runs resume ([`snapimg::build_id`]).
//!
//! The device computes it from its running root, which is not the cpio archive alone: the
//! kernel unpacks its own built-in initramfs first (a kernel built without
//! `CONFIG_INITRAMFS_SOURCE`, as Debian's, adds `/dev`, `/dev/console` and `/root`), and the
//! board's `/init` mounts devtmpfs, proc, sysfs and a tmpfs on `/dev`, `/proc`, `/sys` and
//! `/run` before resume runs, which the listing skips as other filesystems. The listing
//! here follows both ([`snapimg::listing::EARLY_MOUNTS`], [`KERNEL_BUILTIN_DIRS`]); on the board's
//! bundle it matches what the device records exactly. An initramfs whose `/init` mounts or
//! creates anything else before resume lists differently: its images are refused (the
//! binding differs), never restored wrongly.

use alloc::string::String;
use alloc::vec::Vec;
use initramfs::{Entry, Root};
use snapimg::build_id::build_id;
use snapimg::listing::{self, Kind};
use snapimg::BootSetup;

/// Directories of the kernel's built-in initramfs outside those mounts (`/root`, mode 0700).
pub const KERNEL_BUILTIN_DIRS: &[&str] = &["root"];
/// Where the initramfs may hold the snapboot binary that runs resume, in the order looked.
pub const SNAPBOOT_PATHS: &[&str] = &[
    "bin/snapboot",
    "sbin/snapboot",
    "usr/bin/snapboot",
    "usr/sbin/snapboot",
];

/// Why the boot setup cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// No `/init`.
    #[error("the initramfs has no /init")]
    NoInit,
    /// No snapboot binary where resume's would be.
    #[error("the initramfs has no snapboot binary (looked at {SNAPBOOT_PATHS:?})")]
    NoSnapboot,
    /// The snapboot binary carries no GNU build id.
    #[error("/{0} in the initramfs has no GNU build id note")]
    NoBuildId(&'static str),
}

/// The listing's line for a cpio entry.
fn line(path: &str, e: &Entry) -> String {
    match e.kind() {
        initramfs::Kind::Dir => listing::line(path, Kind::Dir),
        initramfs::Kind::Symlink => {
            listing::line(path, Kind::Symlink(&String::from_utf8_lossy(e.data())))
        }
        _ => listing::line(
            path,
            Kind::File {
                size: e.data().len() as u64,
                mode: e.mode,
            },
        ),
    }
}

/// The boot setup of the initramfs whose root is `root` (see the module header).
pub fn boot_setup(root: &Root) -> Result<BootSetup, SetupError> {
    let init = root.get("init").ok_or(SetupError::NoInit)?;
    let mut lines: Vec<String> = root
        .iter()
        .filter(|e| !listing::mounted_early(e.path))
        .map(|e| line(e.path, &e))
        .collect();
    for d in KERNEL_BUILTIN_DIRS {
        if root.get(d).is_none() {
            lines.push(listing::line(d, Kind::Dir));
        }
    }
    let (path, exe) = SNAPBOOT_PATHS
        .iter()
        .find_map(|p| root.get(p).map(|e| (*p, e)))
        .ok_or(SetupError::NoSnapboot)?;
    let id = build_id(exe.data()).map_err(|_| SetupError::NoBuildId(path))?;
    Ok(BootSetup {
        init: *blake3::hash(init.data()).as_bytes(),
        files: listing::digest(&mut lines),
        snapboot_build_id: id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use initramfs::testing::archive;
    use initramfs::unpack;
    use snapimg::build_id::testing::{elf, note};
    use snapimg::build_id::NT_GNU_BUILD_ID;

    #[test]
    fn the_listing_skips_what_init_mounts_over_and_adds_the_kernels_root() {
        let exe = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[7; 20]));
        let bytes = archive(&[
            ("bin", 0o040755, b""),
            ("bin/snapboot", 0o100755, &exe),
            ("bin/sh", 0o120777, b"busybox"),
            ("dev", 0o040755, b""),
            ("dev/console", 0o020600, b""),
            ("init", 0o100755, b"#!/bin/sh\n"),
            ("proc", 0o040755, b""),
            ("tmp", 0o040755, b""),
        ]);
        let s = boot_setup(&unpack(&bytes).unwrap()).unwrap();
        assert_eq!(s.init, *blake3::hash(b"#!/bin/sh\n").as_bytes());
        assert_eq!(s.snapboot_build_id, [7; 20]);
        // What the device lists in that root: the lines ondevice::binding writes.
        let want = alloc::format!(
            "d bin\nd root\nd tmp\nf bin/snapboot {} 100755\nf init 10 100755\nl bin/sh busybox\n",
            exe.len()
        );
        assert_eq!(s.files, *blake3::hash(want.as_bytes()).as_bytes());
        let no_snapboot = archive(&[("init", 0o100755, b"x")]);
        assert_eq!(
            boot_setup(&unpack(&no_snapboot).unwrap()),
            Err(SetupError::NoSnapboot)
        );
    }
}
