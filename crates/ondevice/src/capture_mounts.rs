//! Writable filesystems at capture. An image holds the kernel's view of every mounted
//! filesystem; one that is written after the capture would be rolled back under the restored
//! kernel's feet at every snapshot boot, so capture decides per writable block-backed mount
//! ([`plan`]):
//!
//! - FAT-family filesystems ([`REMOUNTED_FSTYPES`]: an EFI system partition, a boot or
//!   firmware partition that nothing writes at run time) are remounted read-only for the
//!   capture (which writes back and freezes their state) and read-write again after it, in
//!   the system that carries on after the capture and in every system restored from the
//!   image, which starts from the state at capture: read-only.
//! - Any other writable block mount is refused, naming it and what to do.
//!
//! The remounts are mount(2) with `MS_REMOUNT` ([`remount`]), keeping the mount's own flags.

use devsys::system::Mount;
use rustix::mount::{mount_remount, MountFlags};

/// Filesystem types capture remounts read-only instead of refusing.
pub const REMOUNTED_FSTYPES: &[&str] = &["vfat", "msdos", "exfat"];

/// Whether a mount's source is a block device, as capture decides it: a device node that
/// is there.
pub fn is_device_source(source: &str) -> bool {
    source.starts_with("/dev/") && std::path::Path::new(source).exists()
}

/// What capture does with the writable block mounts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountPlan {
    /// Remounted read-only for the capture, read-write after.
    pub remount: Vec<Mount>,
    /// Refused (unless forced).
    pub refused: Vec<Mount>,
}

/// Sorts the writable mounts of `mounts` whose source is a device node (`is_device`) into
/// those remounted and those refused; read-only and virtual filesystems need nothing. A
/// device mounted twice is remounted once (the filesystem is read-only in both places).
pub fn plan(mounts: &[Mount], is_device: impl Fn(&str) -> bool) -> MountPlan {
    let mut p = MountPlan::default();
    for m in mounts.iter().filter(|m| m.rw() && is_device(&m.source)) {
        if !REMOUNTED_FSTYPES.contains(&m.fstype.as_str()) {
            p.refused.push(m.clone());
        } else if !p.remount.iter().any(|r| r.source == m.source) {
            p.remount.push(m.clone());
        }
    }
    p
}

/// A remount that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot remount {source_dev} on {target} {}", if *.read_only { "read-only" } else { "read-write" })]
pub struct RemountError {
    /// The device.
    pub source_dev: String,
    /// The mount point.
    pub target: String,
    /// The direction.
    pub read_only: bool,
    /// Why not (EBUSY: a file is open for writing).
    #[source]
    pub err: std::io::Error,
}

/// The mount's own flags from its options, which a remount would otherwise clear.
fn kept_flags(options: &str) -> MountFlags {
    options
        .split(',')
        .map(|o| match o {
            "nosuid" => MountFlags::NOSUID,
            "nodev" => MountFlags::NODEV,
            "noexec" => MountFlags::NOEXEC,
            "noatime" => MountFlags::NOATIME,
            "nodiratime" => MountFlags::NODIRATIME,
            "relatime" => MountFlags::RELATIME,
            "sync" => MountFlags::SYNCHRONOUS,
            "dirsync" => MountFlags::DIRSYNC,
            "lazytime" => MountFlags::LAZYTIME,
            _ => MountFlags::empty(),
        })
        .fold(MountFlags::empty(), |a, b| a | b)
}

/// Remounts `m` read-only or read-write, with its other flags as they were.
pub fn remount(m: &Mount, read_only: bool) -> Result<(), RemountError> {
    let mut flags = kept_flags(&m.options);
    flags.set(MountFlags::RDONLY, read_only);
    mount_remount(m.target.as_str(), flags, "").map_err(|e| RemountError {
        source_dev: m.source.clone(),
        target: m.target.clone(),
        read_only,
        err: e.into(),
    })
}

/// Remounts every mount of `p.remount` read-only; on a failure the ones done are put back.
pub fn remount_read_only(p: &MountPlan) -> Result<(), RemountError> {
    for (i, m) in p.remount.iter().enumerate() {
        if let Err(e) = remount(m, true) {
            let _ = remount_read_write(&p.remount[..i]);
            return Err(e);
        }
    }
    Ok(())
}

/// Remounts `mounts` read-write again; returns the failures (each is also worth a marker).
pub fn remount_read_write(mounts: &[Mount]) -> Vec<RemountError> {
    mounts
        .iter()
        .filter_map(|m| remount(m, false).err())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use devsys::system::parse_mountinfo;

    const MOUNTINFO: &str = "\
22 1 254:0 / / ro,relatime - squashfs /dev/vda ro
25 22 0:22 / /run rw,nosuid,nodev - tmpfs tmpfs rw,size=32768k
30 22 254:16 / /boot/efi rw,relatime - vfat /dev/vdb1 rw,fmask=0077,dmask=0077
31 22 254:16 / /mnt/esp-again rw,relatime - vfat /dev/vdb1 rw,fmask=0077,dmask=0077
32 22 254:17 / /media/card rw,nosuid,nodev - exfat /dev/vdb2 rw
33 22 254:18 / /firmware ro,relatime - vfat /dev/vdb3 ro
34 22 254:32 / /data rw,noatime - ext4 /dev/vdc rw
35 22 0:40 / /home rw,relatime - btrfs /dev/vdd rw
36 22 0:41 / /mnt/share rw - nfs server:/export rw
";

    #[test]
    fn fat_family_mounts_are_remounted_others_refused() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let p = plan(&mounts, |s| s.starts_with("/dev/"));
        let targets = |v: &[Mount]| v.iter().map(|m| m.target.clone()).collect::<Vec<_>>();
        assert_eq!(targets(&p.remount), ["/boot/efi", "/media/card"]);
        assert_eq!(targets(&p.refused), ["/data", "/home"]);
        let none = plan(&mounts, |_| false);
        assert_eq!(none, MountPlan::default(), "no device node, nothing to do");
    }

    #[test]
    fn a_remount_keeps_the_mounts_own_flags() {
        let f = kept_flags("rw,nosuid,nodev,noexec,relatime");
        assert_eq!(
            f,
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC | MountFlags::RELATIME
        );
        assert!(!f.contains(MountFlags::RDONLY));
        let e = RemountError {
            source_dev: "/dev/vdb1".into(),
            target: "/boot/efi".into(),
            read_only: true,
            err: std::io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert_eq!(
            e.to_string(),
            "cannot remount /dev/vdb1 on /boot/efi read-only"
        );
    }
}
