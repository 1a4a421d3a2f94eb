//! The boot setup's file listing ([`crate::binding::BootSetup::files`]): one line per entry
//! of the initramfs, its path relative to the root and its kind (`d` a directory, `l` a
//! symbolic link and its target, `f` anything else with its size and mode in octal, the
//! file type bits included), sorted bytewise and hashed with BLAKE3, each line ended by a
//! newline. The device lists its running root (`ondevice::binding`); the restorer lists the
//! kernel pack's cpio archive; both through [`line`] and [`digest`].

use alloc::format;
use alloc::string::String;

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

/// Whether `path` (relative, no leading `/`) lies on a filesystem mounted before resume,
/// the mount point included.
pub fn mounted_early(path: &str) -> bool {
    let top = path.split('/').next().unwrap_or(path);
    EARLY_MOUNTS.iter().any(|m| &m.dir[1..] == top)
}

/// What an entry is, as the listing tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A directory.
    Dir,
    /// A symbolic link to this target.
    Symlink(&'a str),
    /// Anything else (a regular file, a device node): its size and its full mode.
    File {
        /// Bytes.
        size: u64,
        /// `st_mode`: type and permission bits.
        mode: u32,
    },
}

/// The listing's line for the entry at `path` (relative, no leading `/`).
pub fn line(path: &str, kind: Kind) -> String {
    match kind {
        Kind::Dir => format!("d {path}"),
        Kind::Symlink(to) => format!("l {path} {to}"),
        Kind::File { size, mode } => format!("f {path} {size} {mode:o}"),
    }
}

/// BLAKE3 of the listing `lines`, sorted first.
pub fn digest(lines: &mut [String]) -> [u8; 32] {
    lines.sort();
    let mut h = blake3::Hasher::new();
    for l in lines.iter() {
        h.update(l.as_bytes());
        h.update(b"\n");
    }
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_mounted_before_resume_is_skipped_by_its_top_directory() {
        for p in ["dev", "dev/console", "proc/1", "sys", "run/snapboot"] {
            assert!(mounted_early(p), "{p}");
        }
        for p in ["devices", "root", "bin/sh", "init", "running"] {
            assert!(!mounted_early(p), "{p}");
        }
    }
    use alloc::vec;

    #[test]
    fn lines_name_the_kind_and_the_digest_ignores_order() {
        assert_eq!(line("bin", Kind::Dir), "d bin");
        assert_eq!(line("bin/sh", Kind::Symlink("busybox")), "l bin/sh busybox");
        assert_eq!(
            line(
                "init",
                Kind::File {
                    size: 3041,
                    mode: 0o100755
                }
            ),
            "f init 3041 100755"
        );
        let mut a = vec![String::from("f init 1 100755"), String::from("d bin")];
        let mut b = vec![String::from("d bin"), String::from("f init 1 100755")];
        assert_eq!(digest(&mut a), digest(&mut b));
        assert_eq!(
            digest(&mut a),
            *blake3::hash(b"d bin\nf init 1 100755\n").as_bytes()
        );
    }
}
