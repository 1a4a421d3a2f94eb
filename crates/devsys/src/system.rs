//! Facts about the running system that capture and resume compare: the kernel's identity,
//! the RAM size, the kernel command line and the mounted filesystems.

use crate::devicetree::BootDeviceTree;
use snapimg::{EfiRuntimeRegion, Identity, MemoryMap, PhysRange, PAGE_SIZE};
use std::path::Path;

/// The running kernel and machine. RAM is the sum of the firmware's "System RAM" ranges in
/// `/proc/iomem`, which does not depend on what the kernel reserved during this boot; the
/// memory layout is those ranges, what the boot device tree `dt` reserves and the EFI
/// runtime map `efi_runtime` ([`crate::efi_runtime::read_runtime_map`]).
pub fn running_identity(dt: &BootDeviceTree, efi_runtime: Vec<EfiRuntimeRegion>) -> Identity {
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
        memory: MemoryMap::new(ram, dt.reserved.clone()).with_efi_runtime(efi_runtime),
    }
}

/// arm64: the physical address of the running kernel's MMU-off resume entry
/// (`cpu_resume`, the address a CPU returns to from PSCI CPU_SUSPEND), which a restorer
/// enters a restored image at: `/proc/iomem`'s "Kernel code" starts at `_stext`'s physical
/// address, and `/proc/kallsyms` gives both symbols' virtual addresses (the kernel image is
/// mapped linearly, so their distance is the same in both). `None` on another
/// architecture, or when the symbols' addresses are hidden (`kptr_restrict`, not root).
pub fn resume_entry() -> Option<u64> {
    if !cfg!(target_arch = "aarch64") {
        return None;
    }
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let iomem = std::fs::read_to_string("/proc/iomem").ok()?;
    resume_entry_of(&kallsyms, &iomem)
}

/// [`resume_entry`] from the two files' text.
pub fn resume_entry_of(kallsyms: &str, iomem: &str) -> Option<u64> {
    let symbol = |name: &str| {
        kallsyms.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            let (addr, kind, sym) = (w.next()?, w.next()?, w.next()?);
            (sym == name && kind.eq_ignore_ascii_case("t"))
                .then(|| u64::from_str_radix(addr, 16).ok())
                .flatten()
        })
    };
    let (entry, stext) = (symbol("cpu_resume")?, symbol("_stext")?);
    if stext == 0 || entry < stext {
        return None;
    }
    let code = iomem.lines().find_map(|l| {
        let (range, what) = l.trim_start().split_once(" : ")?;
        (what == "Kernel code")
            .then(|| u64::from_str_radix(range.split_once('-')?.0.trim(), 16).ok())
            .flatten()
    })?;
    code.checked_add(entry - stext)
}

/// How the running arm64 kernel was booted, as an image records it (`Description::
/// boot_path`): `U-Boot VERSION, booti` or `..., EFI` when U-Boot booted it (it writes its
/// version into the device tree's `/chosen`), `no U-Boot, ...` otherwise; `None` on a
/// machine without a device tree (x86).
pub fn boot_path() -> Option<String> {
    if !cfg!(target_arch = "aarch64") {
        return None;
    }
    let chosen = Path::new(crate::devicetree::LIVE_TREE).join("chosen");
    let uboot = std::fs::read(chosen.join("u-boot,version")).ok();
    Some(boot_path_of(
        uboot.as_deref(),
        Path::new("/sys/firmware/efi").exists(),
    ))
}

/// [`boot_path`] from `/chosen/u-boot,version`'s bytes and whether the kernel has EFI.
pub fn boot_path_of(uboot_version: Option<&[u8]>, efi: bool) -> String {
    let how = if efi { "EFI" } else { "booti" };
    match uboot_version {
        Some(v) => {
            let v = String::from_utf8_lossy(v);
            format!("U-Boot {}, {how}", v.trim_end_matches('\0'))
        }
        None => format!("no U-Boot, {}", if efi { "EFI" } else { "direct" }),
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

/// udev's daemon by its process name (`/proc/PID/comm`): systemd's `systemd-udevd`, or
/// eudev's and older udev's `udevd`.
pub fn is_udevd(comm: &str) -> bool {
    matches!(comm.trim_end(), "systemd-udevd" | "udevd")
}

/// Whether udev's daemon runs now, from the process list under `proc` (`/proc`): what
/// tells a resume before udev from one after it. Its control socket does not: systemd in
/// an initramfs listens on it before the daemon starts.
pub fn udevd_running(proc: &Path) -> bool {
    let Ok(dir) = std::fs::read_dir(proc) else {
        return false;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| is_udevd(&c)))
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

/// A mounted filesystem, one line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Device major number (0: not block-backed, e.g. tmpfs, proc, overlay).
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Source, as the filesystem names it (`/dev/vda1`, `tmpfs`).
    pub source: String,
    /// Mount point.
    pub target: String,
    /// Filesystem type.
    pub fstype: String,
    /// The mount's own options (`rw,nosuid,relatime`); `rw` or `ro` comes first.
    pub options: String,
    /// The filesystem's options (an overlay's `lowerdir=…,upperdir=…`).
    pub super_options: String,
}

impl Mount {
    /// Mounted read-write.
    pub fn rw(&self) -> bool {
        self.options.split(',').any(|o| o == "rw")
    }
}

/// Parses `/proc/self/mountinfo` text (`ID PARENT MAJ:MIN ROOT TARGET OPTIONS [TAGS] - TYPE
/// SOURCE SUPER_OPTIONS`); lines that do not have that shape are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            let (major, minor) = f.get(2)?.split_once(':')?;
            Some(Mount {
                major: major.parse().ok()?,
                minor: minor.parse().ok()?,
                source: unescape(f.get(sep + 2)?),
                target: unescape(f.get(4)?),
                fstype: (*f.get(sep + 1)?).to_string(),
                options: (*f.get(5)?).to_string(),
                super_options: f.get(sep + 3).map_or(String::new(), |o| unescape(o)),
            })
        })
        .collect()
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn udevd_is_found_by_its_process_name() {
        use super::{is_udevd, udevd_running};
        assert!(is_udevd("systemd-udevd\n") && is_udevd("udevd\n"));
        assert!(!is_udevd("udevadm\n") && !is_udevd("snapboot\n"));
        let d = tempfile::tempdir().unwrap();
        let proc_ = d.path();
        for (pid, comm) in [("1", "init\n"), ("42", "snapboot\n")] {
            std::fs::create_dir(proc_.join(pid)).unwrap();
            std::fs::write(proc_.join(pid).join("comm"), comm).unwrap();
        }
        // Not a process: a directory whose name is not a number.
        std::fs::create_dir(proc_.join("self-udevd")).unwrap();
        std::fs::write(proc_.join("self-udevd/comm"), "systemd-udevd\n").unwrap();
        assert!(!udevd_running(proc_));
        std::fs::create_dir(proc_.join("77")).unwrap();
        std::fs::write(proc_.join("77/comm"), "systemd-udevd\n").unwrap();
        assert!(udevd_running(proc_));
        assert!(!udevd_running(&proc_.join("missing")));
    }

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
    fn mountinfo_lines_are_parsed_with_escapes() {
        let m = parse_mountinfo(
            "22 1 254:0 / / ro,relatime - squashfs /dev/vda ro\n\
             25 22 0:22 / /run rw,nosuid - tmpfs tmpfs rw,size=32768k\n\
             30 22 254:32 / /mnt/my\\040data rw,noatime shared:5 - vfat /dev/vdc rw,fmask=0022\n\
             not a mountinfo line\n",
        );
        assert_eq!(m.len(), 3);
        assert!(!m[0].rw() && m[1].rw() && m[2].rw());
        assert_eq!((m[1].major, m[1].source.as_str()), (0, "tmpfs"));
        assert_eq!(
            (
                m[2].major,
                m[2].minor,
                m[2].target.as_str(),
                m[2].fstype.as_str()
            ),
            (254, 32, "/mnt/my data", "vfat")
        );
        assert_eq!(m[2].options, "rw,noatime");
    }
}
