//! The boot setup an image is bound to ([`snapimg::BootSetup`]), computed from the kernel
//! pack's initramfs: its manifest ([`snapimg::listing`]: every regular file and symbolic link
//! of the archive as the kernel unpacks it, by content, outside what is mounted before resume
//! and the distributions' scratch places) and the GNU build id of the snapboot binary that
//! runs resume ([`snapimg::build_id`]).
//!
//! The device computes the same manifest from its running root (`ondevice::binding`), where
//! the distribution's `/init` may already have created directories, mounted filesystems and
//! written its scratch files; the manifest leaves all of those out, so the capture boot, the
//! stock kernel's resume, the restore kernel's and this one agree on an unchanged initramfs,
//! and a changed file is named in the refusal.

use alloc::vec::Vec;
use initramfs::{Entry, Kind, Root};
use snapimg::build_id::build_id;
use snapimg::listing::{self, EntryHasher, FileDigest};
use snapimg::BootSetup;

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

/// The manifest's digest of an entry of the root, if the manifest covers it.
fn entry_digest(e: &Entry) -> Option<FileDigest> {
    if !listing::covered(e.path) {
        return None;
    }
    let digest = match e.kind() {
        Kind::Regular => {
            let mut h = EntryHasher::file(e.mode);
            h.update(e.data());
            h.finish()
        }
        Kind::Symlink => EntryHasher::symlink(e.data()),
        Kind::Dir | Kind::Other => return None,
    };
    Some(FileDigest {
        path: e.path.into(),
        digest,
    })
}

/// The boot setup of the initramfs whose root is `root` (see the module header).
pub fn boot_setup(root: &Root) -> Result<BootSetup, SetupError> {
    if root.get("init").is_none() {
        return Err(SetupError::NoInit);
    }
    let manifest: Vec<FileDigest> = root.iter().filter_map(|e| entry_digest(&e)).collect();
    let (path, exe) = SNAPBOOT_PATHS
        .iter()
        .find_map(|p| root.get(p).map(|e| (*p, e)))
        .ok_or(SetupError::NoSnapboot)?;
    let id = build_id(exe.data()).map_err(|_| SetupError::NoBuildId(path))?;
    Ok(BootSetup::new(manifest, id.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use initramfs::testing::archive;
    use initramfs::unpack;
    use snapimg::build_id::testing::{elf, note};
    use snapimg::build_id::NT_GNU_BUILD_ID;

    #[test]
    fn the_manifest_is_the_archives_files_and_links_outside_mounts_and_scratch() {
        let exe = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[7; 20]));
        let bytes = archive(&[
            ("bin", 0o040755, b""),
            ("bin/snapboot", 0o100755, &exe),
            ("bin/sh", 0o120777, b"busybox"),
            ("dev", 0o040755, b""),
            ("dev/console", 0o020600, b""),
            ("init", 0o100755, b"#!/bin/sh\n"),
            ("proc", 0o040755, b""),
            ("run/x", 0o100644, b"x"),
            ("tmp", 0o040755, b""),
            ("tmp/scratch", 0o100644, b"s"),
        ]);
        let s = boot_setup(&unpack(&bytes).unwrap()).unwrap();
        assert_eq!(s.snapboot_build_id, [7; 20]);
        let paths: Vec<&str> = s.manifest.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["bin/sh", "bin/snapboot", "init"]);
        let mut init = EntryHasher::file(0o755);
        init.update(b"#!/bin/sh\n");
        assert_eq!(s.manifest[2].digest, init.finish());
        assert_eq!(s.manifest[0].digest, EntryHasher::symlink(b"busybox"));
        // The device lists the same root to the same boot setup (ondevice::binding's test
        // walks a directory; here the same entries through the same functions).
        assert_eq!(s, BootSetup::new(s.manifest.clone(), alloc::vec![7; 20]));

        let no_snapboot = archive(&[("init", 0o100755, b"x")]);
        assert_eq!(
            boot_setup(&unpack(&no_snapboot).unwrap()),
            Err(SetupError::NoSnapboot)
        );
    }
}
