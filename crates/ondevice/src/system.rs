//! Facts about the running system that capture and resume compare: the kernel's identity,
//! the RAM size, the kernel command line and the mounted filesystems.

use snapimg::Identity;
use std::path::Path;

/// The running kernel and machine. RAM is the sum of the firmware's "System RAM" ranges in
/// `/proc/iomem`, which does not depend on what the kernel reserved during this boot.
pub fn running_identity() -> Identity {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let iomem = std::fs::read_to_string("/proc/iomem").unwrap_or_default();
    let ram = match system_ram_bytes(&iomem) {
        0 => meminfo_total().unwrap_or(0),
        n => n,
    };
    Identity {
        release: s(u.release()),
        version: s(u.version()),
        machine: s(u.machine()),
        ram_bytes: ram,
    }
}

/// Sum of the top-level `System RAM` ranges of an `/proc/iomem` text.
pub fn system_ram_bytes(iomem: &str) -> u64 {
    iomem
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(": System RAM"))
        .filter_map(|l| {
            let (range, _) = l.split_once(" : ")?;
            let (a, b) = range.split_once('-')?;
            let a = u64::from_str_radix(a.trim(), 16).ok()?;
            let b = u64::from_str_radix(b.trim(), 16).ok()?;
            Some(b.saturating_sub(a) + 1)
        })
        .sum()
}

fn meminfo_total() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The running kernel's command line.
pub fn kernel_cmdline() -> String {
    std::fs::read_to_string("/proc/cmdline").unwrap_or_default()
}

/// A mounted filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Source device.
    pub source: String,
    /// Mount point.
    pub target: String,
    /// Filesystem type.
    pub fstype: String,
    /// Mounted read-write.
    pub rw: bool,
}

/// Parses `/proc/self/mounts` text.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (source, target, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some(Mount {
                source: source.into(),
                target: target.replace("\\040", " "),
                fstype: fstype.into(),
                rw: opts.split(',').any(|o| o == "rw"),
            })
        })
        .collect()
}

/// Writable filesystems backed by a block device: their state at capture would be restored
/// over whatever was written to them later, so capture refuses while they are mounted.
pub fn writable_block_mounts(mounts: &[Mount]) -> Vec<Mount> {
    mounts
        .iter()
        .filter(|m| m.rw && m.source.starts_with("/dev/") && Path::new(&m.source).exists())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_ram_sums_top_level_ranges_only() {
        let iomem = "00000000-00000fff : Reserved\n00001000-0009fbff : System RAM\n\
                     00100000-3ffdffff : System RAM\n  01000000-01e00000 : Kernel code\n";
        assert_eq!(system_ram_bytes(iomem), 0x9ec00 + 0x3fee0000);
    }

    #[test]
    fn writable_block_mounts_are_found() {
        let m = parse_mounts(
            "/dev/vda / squashfs ro,relatime 0 0\nproc /proc proc rw 0 0\n\
             /dev/null /data ext4 rw,relatime 0 0\n",
        );
        let w = writable_block_mounts(&m);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].target, "/data");
    }
}
