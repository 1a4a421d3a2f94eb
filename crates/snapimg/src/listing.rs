//! The boot setup's manifest ([`crate::binding::BootSetup::manifest`]): what the boot loader
//! handed the kernel as its initramfs, as the kernel unpacks it, and not what a particular
//! `/init` did with it before snapboot ran. One line per regular file and symbolic link of the
//! archive: its path (relative, no leading `/`) and a BLAKE3 digest of its kind, permission
//! bits and content (a link: its target), sorted bytewise by path.
//!
//! Every restoring path computes it the same way, through this module:
//!
//! ```text
//!  capture boot, resume on the stock kernel   the running root after the distribution's
//!  (initramfs-tools, dracut, the board)       /init ran: files and links on the root's own
//!                                             filesystem (ondevice::binding)
//!  resume on the restore kernel               the running root as the kernel unpacked it
//!  (rdinit=/bin/snapboot)                     (snapboot mounts /dev, /proc, /sys, /run)
//!  the restorer                               the kernel pack's initramfs archive, unpacked
//!                                             as the kernel does (crate restorer)
//! ```
//!
//! They agree because the manifest leaves out what differs between them and is not the
//! archive's: directories (each `/init` creates its own: `/tmp`, `/var/lock`, mount points),
//! device nodes, FIFOs and sockets (the kernel's built-in `/dev/console`), whatever lies where
//! a filesystem is mounted before resume ([`EARLY_MOUNTS`]), and the few places a
//! distribution's `/init` writes before resume runs ([`SCRATCH`]). A changed, added or
//! removed file anywhere else changes the manifest, and [`diff`] names it.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use xxhash_rust::xxh3::Xxh3;

/// A filesystem the board's `/init` (and snapboot itself, when it is the first process)
/// mounts before resume runs. The device's listing of its running root skips each of them
/// as another filesystem; the restorer's listing of the cpio archive skips the same
/// directories. One table, so the three cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyMount {
    /// `mount`'s source.
    pub source: &'static str,
    /// Where (absolute).
    pub dir: &'static str,
    /// The filesystem type.
    pub fstype: &'static str,
    /// Its options (`-o`; empty: none).
    pub data: &'static str,
}

/// What is mounted before resume, in order: devtmpfs on `/dev`, proc, sysfs, and a tmpfs on
/// `/run` (the boot setup record goes there and moves into the root later).
pub const EARLY_MOUNTS: [EarlyMount; 4] = [
    EarlyMount {
        source: "devtmpfs",
        dir: "/dev",
        fstype: "devtmpfs",
        data: "",
    },
    EarlyMount {
        source: "proc",
        dir: "/proc",
        fstype: "proc",
        data: "",
    },
    EarlyMount {
        source: "sysfs",
        dir: "/sys",
        fstype: "sysfs",
        data: "",
    },
    EarlyMount {
        source: "tmpfs",
        dir: "/run",
        fstype: "tmpfs",
        data: "mode=0755,size=32m",
    },
];

/// Where a distribution's `/init` writes files before snapboot's resume runs, relative to
/// the root: dracut's shell `/init` keeps its scratch in `/tmp` (`export.orig`), the kernel
/// command line's extra words in `/etc/cmdline.d`, links `/var/log` to its log in `/run`
/// (`dracut-lib.sh`: `ln -sfn /run/initramfs/log /var/log`), and puts its `wait_for_dev`
/// scripts in the initqueue and emergency hook directories (under `usr/lib`, with `lib` a
/// link to it on a merged-`/usr` system, or under `lib`). With systemd as the initramfs's
/// init (dracut's `systemd` module) systemd writes the boot's transient `/etc/machine-id`
/// before any hook runs; snapboot as the first process (the restore kernel) finds the
/// archive's. initramfs-tools' `/init` writes no file outside `/run` and the filesystems it
/// mounts. The manifest covers nothing below these.
pub const SCRATCH: &[&str] = &[
    "tmp",
    "etc/machine-id",
    "etc/cmdline.d",
    "var/log",
    "usr/lib/dracut/hooks/initqueue",
    "usr/lib/dracut/hooks/emergency",
    "lib/dracut/hooks/initqueue",
    "lib/dracut/hooks/emergency",
];

/// Whether `path` (relative, no leading `/`) lies on a filesystem mounted before resume,
/// the mount point included.
pub fn mounted_early(path: &str) -> bool {
    let top = path.split('/').next().unwrap_or(path);
    EARLY_MOUNTS.iter().any(|m| &m.dir[1..] == top)
}

/// Whether `path` lies below one of the [`SCRATCH`] directories (or is one).
pub fn in_scratch(path: &str) -> bool {
    SCRATCH.iter().any(|s| {
        path.strip_prefix(s)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether the manifest covers a regular file or symbolic link at `path`.
pub fn covered(path: &str) -> bool {
    !path.is_empty() && !mounted_early(path) && !in_scratch(path)
}

/// Bytes of an entry's digest in the manifest.
pub const ENTRY_DIGEST: usize = 16;

/// One file of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileDigest {
    /// Relative to the root, no leading `/`.
    pub path: String,
    /// BLAKE3 (truncated) of its kind, permission bits and content ([`EntryHasher`]).
    pub digest: [u8; ENTRY_DIGEST],
}

/// Computes one entry's digest: a regular file's from its permission bits and its bytes,
/// fed in any number of pieces; a symbolic link's from its target. XXH3-128, the store's
/// chunk checksum: it tells a changed file from an unchanged one (the binding says which
/// system an image belongs to; what may restore is the signature's and the sealing's job),
/// and it is what makes hashing every file of the initramfs at every boot affordable:
/// BLAKE3 over Debian's 19.5 MB initramfs took 1.8 s of an emulated CPU (TCG) at resume.
pub struct EntryHasher(Xxh3);

impl EntryHasher {
    /// A regular file with `mode` (only the permission bits, `0o7777`, count).
    pub fn file(mode: u32) -> EntryHasher {
        let mut h = Xxh3::new();
        h.update(b"f");
        h.update(&(mode & 0o7777).to_le_bytes());
        EntryHasher(h)
    }

    /// More of the file's bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The file's digest.
    pub fn finish(&self) -> [u8; ENTRY_DIGEST] {
        self.0.digest128().to_le_bytes()
    }

    /// A symbolic link's digest, from its target.
    pub fn symlink(target: &[u8]) -> [u8; ENTRY_DIGEST] {
        let mut h = Xxh3::new();
        h.update(b"l");
        h.update(target);
        h.digest128().to_le_bytes()
    }
}

/// Sorts `files` by path and returns the manifest's digest: BLAKE3 over each path, a NUL and
/// its entry digest, in that order.
pub fn digest(files: &mut [FileDigest]) -> [u8; 32] {
    files.sort();
    of_sorted(files)
}

/// The digest of a manifest already sorted by path.
pub fn of_sorted(files: &[FileDigest]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    for f in files {
        h.update(f.path.as_bytes());
        h.update(&[0]);
        h.update(&f.digest);
    }
    *h.finalize().as_bytes()
}

/// How two manifests differ, each list by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestDiff {
    /// In both, with other content, permissions or kind.
    pub changed: Vec<String>,
    /// Only in the image's.
    pub only_image: Vec<String>,
    /// Only in this boot's.
    pub only_now: Vec<String>,
}

/// Most paths [`ManifestDiff::describe`] names per list.
pub const NAMED: usize = 6;

impl ManifestDiff {
    /// Whether they are the same.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.only_image.is_empty() && self.only_now.is_empty()
    }

    /// Every difference, the first [`NAMED`] paths of each kind by name:
    /// `changed: /init, /usr/bin/snapboot; only in the image: /x; only in this boot: /y and 3
    /// more`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (what, list) in [
            ("changed", &self.changed),
            ("only in the image", &self.only_image),
            ("only in this boot", &self.only_now),
        ] {
            if list.is_empty() {
                continue;
            }
            let named: Vec<String> = list.iter().take(NAMED).map(|p| format!("/{p}")).collect();
            let mut s = format!("{what}: {}", named.join(", "));
            if list.len() > NAMED {
                s.push_str(&format!(" and {} more", list.len() - NAMED));
            }
            parts.push(s);
        }
        parts.join("; ")
    }
}

/// Compares the image's manifest with this boot's; both sorted by path.
pub fn diff(image: &[FileDigest], now: &[FileDigest]) -> ManifestDiff {
    let mut d = ManifestDiff::default();
    let (mut i, mut j) = (0, 0);
    while i < image.len() || j < now.len() {
        match (image.get(i), now.get(j)) {
            (Some(a), Some(b)) if a.path == b.path => {
                if a.digest != b.digest {
                    d.changed.push(a.path.clone());
                }
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.path < b.path => {
                d.only_image.push(a.path.clone());
                i += 1;
            }
            (Some(a), None) => {
                d.only_image.push(a.path.clone());
                i += 1;
            }
            (_, Some(b)) => {
                d.only_now.push(b.path.clone());
                j += 1;
            }
            (None, None) => break,
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn what_is_mounted_before_resume_is_skipped_by_its_top_directory() {
        for p in ["dev", "dev/console", "proc/1", "sys", "run/snapboot"] {
            assert!(mounted_early(p), "{p}");
            assert!(!covered(p), "{p}");
        }
        for p in ["devices", "root", "bin/sh", "init", "running"] {
            assert!(!mounted_early(p), "{p}");
            assert!(covered(p), "{p}");
        }
    }

    #[test]
    fn scratch_is_skipped_below_its_directories_only() {
        for p in [
            "tmp/export.orig",
            "etc/cmdline.d/99-cmdline-ask.conf",
            "usr/lib/dracut/hooks/initqueue/finished/devexists-\\x2fdev\\x2fvda.sh",
            "usr/lib/dracut/hooks/emergency/80-x.sh",
            "var/log",
            "etc/machine-id",
        ] {
            assert!(in_scratch(p), "{p}");
            assert!(!covered(p), "{p}");
        }
        for p in [
            "tmpfiles",
            "etc/cmdline",
            "etc/machine-info",
            "usr/lib/dracut/hooks/pre-udev/10-snapboot-init.sh",
            "etc/snapboot/snapboot.conf",
        ] {
            assert!(covered(p), "{p}");
        }
    }

    fn fd(path: &str, d: u8) -> FileDigest {
        FileDigest {
            path: path.into(),
            digest: [d; ENTRY_DIGEST],
        }
    }

    #[test]
    fn entries_differ_by_content_permissions_and_kind_and_the_digest_ignores_order() {
        let mut a = EntryHasher::file(0o100755);
        a.update(b"#!/bin/sh\n");
        let mut split = EntryHasher::file(0o755);
        split.update(b"#!/bin");
        split.update(b"/sh\n");
        assert_eq!(
            a.finish(),
            split.finish(),
            "type bits and pieces do not count"
        );
        let mut other_mode = EntryHasher::file(0o644);
        other_mode.update(b"#!/bin/sh\n");
        assert_ne!(a.finish(), other_mode.finish());
        let mut link_like = EntryHasher::file(0o777);
        link_like.update(b"busybox");
        assert_ne!(EntryHasher::symlink(b"busybox"), link_like.finish());

        let mut x = vec![fd("init", 1), fd("bin/sh", 2)];
        let mut y = vec![fd("bin/sh", 2), fd("init", 1)];
        assert_eq!(digest(&mut x), digest(&mut y));
        assert_eq!(x, y);
        y[1].digest = [3; ENTRY_DIGEST];
        assert_ne!(of_sorted(&x), of_sorted(&y));
    }

    #[test]
    fn the_diff_names_changed_missing_and_added_files() {
        let image = vec![fd("a", 1), fd("b", 2), fd("c", 3), fd("init", 4)];
        let now = vec![fd("a", 1), fd("b", 9), fd("d", 5), fd("init", 4)];
        let d = diff(&image, &now);
        assert_eq!(d.changed, ["b"]);
        assert_eq!(d.only_image, ["c"]);
        assert_eq!(d.only_now, ["d"]);
        assert_eq!(
            d.describe(),
            "changed: /b; only in the image: /c; only in this boot: /d"
        );
        assert!(diff(&image, &image).is_empty());
        let many: Vec<FileDigest> = (0..9u8).map(|i| fd(&format!("m{i}"), i)).collect();
        let d = diff(&[], &many);
        assert_eq!(
            d.describe(),
            "only in this boot: /m0, /m1, /m2, /m3, /m4, /m5 and 3 more"
        );
    }
}
