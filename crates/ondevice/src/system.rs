//! Facts about the running system that capture and resume compare: the kernel's identity,
//! the RAM size, the kernel command line and the mounted filesystems.

use crate::devicetree::BootDeviceTree;
use snapimg::{Identity, MemoryMap, PhysRange, PAGE_SIZE};
use std::path::Path;

/// The running kernel and machine. RAM is the sum of the firmware's "System RAM" ranges in
/// `/proc/iomem`, which does not depend on what the kernel reserved during this boot; the
/// memory layout is those ranges and what the boot device tree `dt` reserves.
pub fn running_identity(dt: &BootDeviceTree) -> Identity {
    let u = rustix::system::uname();
    let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    let iomem = std::fs::read_to_string("/proc/iomem").unwrap_or_default();
    let ram = system_ram_ranges(&iomem);
    let ram_bytes = match ram.iter().map(|r| r.size).sum() {
        0 => meminfo_total().unwrap_or(0),
        n => n,
    };
    Identity {
        release: s(u.release()),
        version: s(u.version()),
        machine: s(u.machine()),
        ram_bytes,
        memory: MemoryMap::new(ram, dt.reserved.clone()),
    }
}

/// `uname -r` of the running kernel.
pub fn running_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// A kernel whose pages are not 4 KiB (arm64 with 16K or 64K pages).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[error("this kernel uses {} KiB pages ({found} bytes): snapboot supports 4 KiB pages only, not a 16K or 64K page kernel", .found / 1024)]
pub struct UnsupportedPageSize {
    /// The kernel's page size in bytes.
    pub found: usize,
}

/// Refuses a page size other than the stream's 4 KiB.
pub fn check_page_size(found: usize) -> Result<(), UnsupportedPageSize> {
    if found == PAGE_SIZE {
        Ok(())
    } else {
        Err(UnsupportedPageSize { found })
    }
}

/// Refuses the running kernel unless its pages are 4 KiB (`sysconf(_SC_PAGESIZE)`).
pub fn check_running_page_size() -> Result<(), UnsupportedPageSize> {
    check_page_size(rustix::param::page_size())
}

pub use bootparams::RESTORE_KERNEL_SUFFIX;

/// Where the initramfs records the kernel its images come from.
pub const IMAGE_KERNEL_RECORD: &str = "/etc/snapboot/image-kernel";

/// The identity an image must have to be restored here. On the kernel that makes the
/// images it is `running`. On a restore kernel (its release ends in
/// [`RESTORE_KERNEL_SUFFIX`]) it is the image kernel recorded in the initramfs, with
/// `running`'s RAM and memory layout: the restore kernel hands over to that kernel, on this
/// machine.
pub fn image_kernel(running: Identity, record: Option<&str>) -> Identity {
    if !running.release.ends_with(RESTORE_KERNEL_SUFFIX) {
        return running;
    }
    let field = |key: &str| {
        record?
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    match (field("release"), field("version"), field("machine")) {
        (Some(release), Some(version), Some(machine)) => Identity {
            release,
            version,
            machine,
            ram_bytes: running.ram_bytes,
            memory: running.memory,
        },
        _ => running,
    }
}

/// The top-level `System RAM` ranges of an `/proc/iomem` text, in its order.
pub fn system_ram_ranges(iomem: &str) -> Vec<PhysRange> {
    iomem
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(": System RAM"))
        .filter_map(|l| {
            let (range, _) = l.split_once(" : ")?;
            let (a, b) = range.split_once('-')?;
            let a = u64::from_str_radix(a.trim(), 16).ok()?;
            let b = u64::from_str_radix(b.trim(), 16).ok()?;
            Some(PhysRange::inclusive(a, b))
        })
        .collect()
}

/// Sum of the top-level `System RAM` ranges of an `/proc/iomem` text.
pub fn system_ram_bytes(iomem: &str) -> u64 {
    system_ram_ranges(iomem).iter().map(|r| r.size).sum()
}

fn meminfo_total() -> Option<u64> {
    meminfo_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, "MemTotal")
}

/// A `/proc/meminfo` field (`MemTotal`, `MemFree`, ...) in bytes.
pub fn meminfo_bytes(meminfo: &str, field: &str) -> Option<u64> {
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Memory in use (`MemTotal` less `MemFree`): what a hibernation image can hold at most.
pub fn used_memory() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some(meminfo_bytes(&m, "MemTotal")?.saturating_sub(meminfo_bytes(&m, "MemFree")?))
}

/// The running kernel's command line.
pub fn kernel_cmdline() -> String {
    std::fs::read_to_string("/proc/cmdline").unwrap_or_default()
}

/// Waits up to `wait` for `path` to exist (devtmpfs creates nodes asynchronously).
pub fn wait_for_node(path: &Path, wait: std::time::Duration) -> bool {
    let end = std::time::Instant::now() + wait;
    loop {
        if path.exists() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
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
    fn meminfo_fields_are_read_in_bytes() {
        let m = "MemTotal:        1004412 kB\nMemFree:          812000 kB\nMemAvailable:  900 kB\n";
        assert_eq!(meminfo_bytes(m, "MemTotal"), Some(1004412 * 1024));
        assert_eq!(meminfo_bytes(m, "MemFree"), Some(812000 * 1024));
        assert_eq!(meminfo_bytes(m, "Mem"), None);
        assert_eq!(meminfo_bytes(m, "SwapTotal"), None);
    }

    #[test]
    fn a_restore_kernel_restores_the_recorded_image_kernel() {
        let running = |release: &str| Identity {
            release: release.into(),
            version: "#1 restore".into(),
            machine: "x86_64".into(),
            ram_bytes: 512 << 20,
            memory: MemoryMap::new(vec![PhysRange::inclusive(0x1000, 0x1fff_ffff)], vec![]),
        };
        let record = "release=6.1.0-56-amd64\nversion=#1 SMP Debian\nmachine=x86_64\n";
        let stock = running("6.1.0-56-amd64");
        assert_eq!(image_kernel(stock.clone(), Some(record)), stock);
        let restore = running("6.1.192-snapboot-restore");
        let want = Identity {
            release: "6.1.0-56-amd64".into(),
            version: "#1 SMP Debian".into(),
            machine: "x86_64".into(),
            ram_bytes: 512 << 20,
            memory: MemoryMap::new(vec![PhysRange::inclusive(0x1000, 0x1fff_ffff)], vec![]),
        };
        assert_eq!(image_kernel(restore.clone(), Some(record)), want);
        // Without a (complete) record the restore kernel is only itself: nothing matches it.
        assert_eq!(image_kernel(restore.clone(), None), restore);
        assert_eq!(image_kernel(restore.clone(), Some("release=x\n")), restore);
    }

    #[test]
    fn system_ram_sums_top_level_ranges_only() {
        let iomem = "00000000-00000fff : Reserved\n00001000-0009fbff : System RAM\n\
                     00100000-3ffdffff : System RAM\n  01000000-01e00000 : Kernel code\n";
        assert_eq!(system_ram_bytes(iomem), 0x9ec00 + 0x3fee0000);
        assert_eq!(
            system_ram_ranges(iomem),
            vec![
                PhysRange::inclusive(0x1000, 0x9fbff),
                PhysRange::inclusive(0x10_0000, 0x3ffd_ffff)
            ]
        );
    }

    #[test]
    fn only_4k_pages_are_supported() {
        assert_eq!(check_page_size(4096), Ok(()));
        for found in [16384, 65536] {
            let e = check_page_size(found).unwrap_err();
            assert_eq!(e, UnsupportedPageSize { found });
            assert!(
                e.to_string()
                    .contains(&format!("uses {} KiB pages", found / 1024)),
                "{e}"
            );
        }
        assert_eq!(check_running_page_size(), Ok(()));
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
