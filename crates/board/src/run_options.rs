//! How to run the board, whichever machine it is (the x86_64 PC of `crate::qemu`, the arm64
//! `virt` machine of `crate::virt`): the run's options (accelerator, kernel image, memory,
//! CPUs, disks) and the parts of the QEMU and kernel command lines both machines build
//! from them the same way.

use bundle::bundle::Bundle;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use thiserror::Error;

/// How QEMU executes guest code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Software emulation: slow, but runs everywhere.
    Tcg,
    /// Hardware virtualisation.
    Kvm,
}

impl Accel {
    /// KVM only when `/dev/kvm` exists *and* the host CPU shows real vmx/svm flags: a nested,
    /// software-emulated `/dev/kvm` without them does not run stock kernels.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self::decide(std::path::Path::new("/dev/kvm").exists(), &cpuinfo)
    }

    fn decide(dev_kvm: bool, cpuinfo: &str) -> Self {
        let hw = cpuinfo
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        if dev_kvm && hw {
            Accel::Kvm
        } else {
            Accel::Tcg
        }
    }
}

/// Which kernel image QEMU boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelImage {
    /// The uncompressed ELF through its PVH entry (default).
    Vmlinux,
    /// The compressed bzImage as shipped (baseline).
    BzImage,
    /// A restore kernel (ELF, PVH; `hostkernel::restore_kernel`) with the bundle's initramfs: it
    /// restores the bundle kernel's images, and cannot boot the root filesystem cold.
    Restore(PathBuf),
    /// The restorer (crates/restorer, an ELF with a PVH entry) in place of the kernel, with
    /// no initramfs: it reads the image from the store on the board's disks, and no kernel
    /// boots before the image (x86_64 only). It gets the command line a restore kernel
    /// would, so its fallback boots the stock kernel as a restore kernel's would.
    Restorer {
        /// The restorer's ELF (`scripts/restorer.sh` prints it).
        elf: PathBuf,
    },
}

/// How the board's kernel is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Firmware {
    /// QEMU loads the kernel itself (`-kernel`: PVH or bzImage; U-Boot on the arm64 board).
    #[default]
    Direct,
    /// The PC's UEFI firmware (OVMF) boots GRUB from the disk's ESP, which boots the kernel
    /// (`crate::uefi`; the `debian` workload).
    Uefi,
}

/// An extra disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Disk {
    /// Backing file.
    pub path: PathBuf,
    /// Attach read-only.
    pub readonly: bool,
    /// An SD card on an SD host controller on PCI (`sdhci-pci`, `/dev/mmcblk0` to the
    /// kernel) instead of a virtio disk: the arm64 board only, the store's disk.
    pub sd: bool,
}

/// How to run the board.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Guest RAM in MiB: what the board boots with.
    pub mem_mib: u32,
    /// Deferred memory: the board's total RAM in MiB when it is more than `mem_mib`. The
    /// rest is a virtio-mem device that the guest plugs after ready or restored
    /// (`snapboot.defermem`).
    pub max_mem_mib: Option<u32>,
    /// Virtual CPUs.
    pub smp: u32,
    /// Accelerator.
    pub accel: Accel,
    /// Kernel image to boot.
    pub kernel: KernelImage,
    /// How it is loaded.
    pub firmware: Firmware,
    /// What snapboot on the device is asked to do (`snapboot.*` words, rendered after the
    /// board's own command line).
    pub params: bootparams::BootParams,
    /// Extra kernel command-line words, appended last.
    pub cmdline: Vec<String>,
    /// Extra virtio disks after the root disk (`/dev/vdb`, ...).
    pub disks: Vec<Disk>,
    /// The board's TPM 2.0 (`crate::tpm`): the directory its state persists in, or none.
    pub tpm: Option<PathBuf>,
    /// The arm64 board: a writable boot disk of the run's own, kept across power-ons (made
    /// from the bundle's when missing), so the device can ask U-Boot for its next boot;
    /// none: the bundle's, read-only. The UEFI PC: its disk with the store partition
    /// (`crate::uefi`, made from the bundle's by a capture); none: the bundle's, no store.
    pub boot_disk: Option<PathBuf>,
    /// ACPI tables the PC's firmware installs besides the machine's own (QEMU's
    /// `-acpitable`, the files whole, headers included): a firmware whose memory map
    /// differs, as after a firmware update or a changed setting (its ACPI memory grows).
    pub acpi_tables: Vec<PathBuf>,
    /// The store on an SD card (`--store-on sd`, the arm64 board): [`Disk::sd`], found by
    /// its label, read by U-Boot's MMC driver (`crate::uboot::u_boot_bin`).
    pub store_on_sd: bool,
    /// A hardware watchdog (QEMU's i6300esb, PCI) whose reset resets the board, which boots
    /// again, rather than ending the run ([`reboot_args`]).
    pub watchdog: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// Copy console output to our stdout as it arrives.
    pub echo: bool,
}

impl RunOptions {
    /// Defaults for a bundle: its workload's memory, one CPU, detected accelerator.
    pub fn for_bundle(bundle: &Bundle) -> Self {
        Self {
            mem_mib: bundle.workload.mem_mib,
            max_mem_mib: None,
            smp: 1,
            accel: Accel::detect(),
            kernel: KernelImage::Vmlinux,
            firmware: Firmware::Direct,
            params: board_params(&bundle.workload),
            cmdline: Vec::new(),
            disks: Vec::new(),
            tpm: None,
            boot_disk: None,
            acpi_tables: Vec::new(),
            store_on_sd: false,
            watchdog: false,
            timeout: Duration::from_secs(300),
            echo: false,
        }
    }

    /// These options for a boot that uses no store, whatever the root's config file names
    /// (`snapboot.store=none` last on the command line): the cold boot and the kernel's own
    /// hibernation, measured as the system boots without snapboot. A Debian root's config
    /// names the UEFI PC's store partition, which the PVH board does not have: without the
    /// word its boots would wait for it and report a fallback.
    pub fn without_store(&self) -> Self {
        let mut o = self.clone();
        o.params.store = None;
        o.cmdline.push(format!(
            "{}={}",
            bootparams::key::STORE,
            bootparams::NO_STORE
        ));
        o
    }
}

/// What the board asks of snapboot for `workload` unless a run says more:
/// - no re-capture after refused images (`snapboot.norecapture`), so a boot that falls back
///   leaves the store as the test or benchmark made it; the runs that exercise the
///   re-capture after an update turn it on;
/// - the confirmation: snapboot's default, with a restored system confirmed once it stayed
///   up [`BOARD_GRACE`] seconds where no systemd proves it (`snapboot.grace`), or at once
///   for a workload a restore already proves alive (a shell: `snapboot.confirm=restored`).
pub fn board_params(workload: &bundle::Workload) -> bootparams::BootParams {
    bootparams::BootParams {
        recapture: false,
        confirm: if workload.alive_when_restored {
            bootparams::Confirm::Restored
        } else {
            bootparams::Confirm::Auto
        },
        grace: BOARD_GRACE,
        ..bootparams::BootParams::default()
    }
}

/// Seconds a restored board without systemd must stay up to be confirmed: enough for an
/// application that dies at its first query after the restore to take the board down
/// first (its init powers off), short enough that a run waits little for it.
pub const BOARD_GRACE: u32 = 3;

/// Bytes of the store a capture creates for a guest of `mem_mib` (a sparse file, or the UEFI
/// PC's store partition): room for two images as large as RAM (a re-capture writes the new
/// one before the old one goes) and a lazy image's swap region.
pub fn store_size(mem_mib: u32) -> u64 {
    3 * (u64::from(mem_mib) << 20)
}

/// Deferred memory is plugged in blocks of this many MiB (Linux memory blocks on x86_64).
pub const DEFER_BLOCK_MIB: u32 = 128;

/// MiB of deferred memory (the virtio-mem device's size), if the options defer any.
pub fn deferred_mib(opts: &RunOptions) -> Option<u32> {
    opts.max_mem_mib
        .filter(|&m| m > opts.mem_mib)
        .map(|m| m - opts.mem_mib)
}

/// Checks a `--max-mem` against the boot memory: more than it, and the difference whole
/// memory blocks (virtio-mem plugs them whole).
pub fn check_max_mem(mem_mib: u32, max_mib: u32) -> Result<(), MemSizeError> {
    let rest = max_mib.checked_sub(mem_mib).filter(|&r| r > 0);
    match rest {
        Some(r) if r.is_multiple_of(DEFER_BLOCK_MIB) => Ok(()),
        _ => Err(MemSizeError::Deferred {
            mem: mem_mib,
            max: max_mib,
        }),
    }
}

/// Smallest guest memory the board boots (Debian's kernel and initramfs need about this).
pub const MIN_MEM_MIB: u32 = 128;

/// A guest memory size that is not one.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemSizeError {
    /// Not a number with a unit, M or G.
    #[error("memory size {0:?}: expected a number with a unit, e.g. 512M or 1G")]
    Syntax(String),
    /// Too small to boot, or too large to count.
    #[error("memory size {0:?}: the board needs at least {MIN_MEM_MIB}M (and at most 4095G)")]
    Range(String),
    /// `--max-mem` is not the boot memory plus whole memory blocks.
    #[error(
        "--max-mem {max}M with --mem {mem}M: the deferred part must be more than 0 and a \
         multiple of {DEFER_BLOCK_MIB}M"
    )]
    Deferred { mem: u32, max: u32 },
}

/// Parses a guest memory size (`512M`, `1G`, MiB without a unit) into MiB.
pub fn parse_mem_mib(s: &str) -> Result<u32, MemSizeError> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('G' | 'g') => (&s[..s.len() - 1], 1024),
        Some('M' | 'm') => (&s[..s.len() - 1], 1),
        _ => return Err(MemSizeError::Syntax(s.into())),
    };
    let n: u32 = num.parse().map_err(|_| MemSizeError::Syntax(s.into()))?;
    match n.checked_mul(mul) {
        Some(mib) if mib >= MIN_MEM_MIB => Ok(mib),
        _ => Err(MemSizeError::Range(s.into())),
    }
}

/// `-m`, `-smp` and, with deferred memory, the virtio-mem device holding the rest of the
/// RAM: the same on both boards.
/// The board's virtio devices after its first disk: the first disk (`vda`: the PC's root,
/// the arm64 board's boot disk; read-only unless `first_writable`), a hardware RNG (so a
/// restored image can reseed the kernel's generator), then the run's disks (`vdb`, ...).
pub(crate) fn virtio_disks(
    c: &mut Command,
    first: &std::path::Path,
    first_writable: bool,
    opts: &RunOptions,
) {
    let ro = if first_writable { "" } else { ",readonly=on" };
    c.arg("-drive")
        .arg(format!("file={},if=virtio,format=raw{ro}", first.display()));
    c.args(["-device", "virtio-rng-pci"]);
    for d in opts.disks.iter().filter(|d| !d.sd) {
        let ro = if d.readonly { ",readonly=on" } else { "" };
        c.arg("-drive").arg(format!(
            "file={},if=virtio,format=raw,cache=unsafe{ro}",
            d.path.display()
        ));
    }
    // SD cards last, each on its own SD host controller: the virtio disks keep their
    // PCI order, and so their names (`vda`, `vdb`, ...) in the kernel and the firmware.
    for (i, d) in opts.disks.iter().filter(|d| d.sd).enumerate() {
        let ro = if d.readonly { ",readonly=on" } else { "" };
        c.arg("-drive").arg(format!(
            "file={},if=none,id=sd{i},format=raw,cache=unsafe{ro}",
            d.path.display()
        ));
        // A controller's SD bus holds one card: QEMU plugs each into the next free one.
        c.args(["-device", "sdhci-pci"]);
        c.args(["-device", &format!("sd-card,drive=sd{i}")]);
    }
}

/// The PC (q35) with the run's accelerator, memory and CPUs, no display, exiting on reboot:
/// what both ways of loading its kernel start from.
pub(crate) fn pc_machine(opts: &RunOptions) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    let accel = match opts.accel {
        Accel::Tcg => "tcg",
        Accel::Kvm => "kvm",
    };
    c.args([
        "-M",
        "q35",
        "-accel",
        accel,
        "-nodefaults",
        "-no-user-config",
    ]);
    if opts.accel == Accel::Kvm {
        c.args(["-cpu", "host"]);
    }
    memory_args(&mut c, opts);
    for t in &opts.acpi_tables {
        c.arg("-acpitable").arg(format!("file={}", t.display()));
    }
    c.args(["-display", "none"]);
    reboot_args(&mut c, opts);
    c
}

/// What a reset does. Without a watchdog the board exits on it (`-no-reboot`): a run that
/// reboots ends rather than loops. With one (`watchdog`: QEMU's i6300esb on the PCI bus)
/// the watchdog's reset resets the board, which boots again by itself, as a real board
/// does; a test follows the boots on one console.
pub(crate) fn reboot_args(c: &mut Command, opts: &RunOptions) {
    if opts.watchdog {
        c.args(["-device", "i6300esb", "-action", "watchdog=reset"]);
    } else {
        c.arg("-no-reboot");
    }
}

pub(crate) fn memory_args(c: &mut Command, opts: &RunOptions) {
    let deferred = deferred_mib(opts);
    let mem = match deferred {
        Some(_) => format!(
            "{}M,maxmem={}M",
            opts.mem_mib,
            opts.max_mem_mib.unwrap_or(0)
        ),
        None => format!("{}M", opts.mem_mib),
    };
    c.args(["-m", &mem, "-smp", &opts.smp.to_string()]);
    if let Some(rest) = deferred {
        // The rest of the RAM: a virtio-mem device that asks for all of it from power-on.
        // The guest takes it when it loads the driver (after ready or restored); until then
        // the kernel, the image and the restore see only the boot memory. In a PCI slot of
        // its own (16): in the first free one it would move the UEFI PC's disk out of slot
        // 2, which the firmware's boot entry names, and the firmware would drop its entry.
        c.args([
            "-object",
            &format!("memory-backend-ram,id=deferred,size={rest}M"),
            "-device",
            &format!(
                "virtio-mem-pci,id=deferred-mem,memdev=deferred,requested-size={rest}M,addr=0x10"
            ),
        ]);
    }
}

/// The kernel command line of a run: the board's console words (`base`), the workload's, a
/// restore kernel's, snapboot's `snapboot.*` words, then the caller's. `cold_kernel` is the
/// device holding the kernel pack a restore kernel hands a cold boot to.
pub fn kernel_cmdline(bundle: &Bundle, opts: &RunOptions, base: &str, cold_kernel: &str) -> String {
    let deferred = deferred_mib(opts);
    let mut params = opts.params.clone();
    if deferred.is_some() {
        params.defer_mem = opts.max_mem_mib.map(|m| u64::from(m) << 20);
    }
    // A restoring program (the restore kernel, the restorer) boots the stock kernel cold
    // from the kernel pack when it refuses the image.
    if matches!(
        opts.kernel,
        KernelImage::Restore(_) | KernelImage::Restorer { .. }
    ) {
        params.cold_kernel = Some(cold_kernel.to_string());
    }
    let mut cmdline = base.to_string();
    for w in bundle.workload.init.kernel_args(bundle.kernel.arch) {
        cmdline.push(' ');
        cmdline.push_str(&w);
    }
    if matches!(opts.kernel, KernelImage::Restore(_)) {
        // snapboot itself is the restore kernel's first process: no shell before resume.
        cmdline.push_str(" rdinit=/bin/snapboot");
    }
    if deferred.is_some() {
        // With memory possible above 4 GiB the kernel sets up a 64 MiB bounce buffer for
        // devices that cannot reach it (swiotlb): measured on the board, +0.2 s of kernel
        // boot and +64 MiB in every image, for nothing, since every device here is virtio
        // and reaches all memory. A board whose devices have 32-bit DMA keeps it.
        cmdline.push_str(" swiotlb=noforce");
    }
    for w in params.render().iter().chain(&opts.cmdline) {
        cmdline.push(' ');
        cmdline.push_str(w);
    }
    cmdline
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SD cards come after the virtio disks, each on its own SD host controller, and
    /// leave the virtio disks' order (their names) as it was.
    #[test]
    fn sd_cards_follow_the_virtio_disks_on_their_own_controllers() {
        let mut o = crate::testutil::opts();
        for (path, sd) in [("/store.img", true), ("/data.img", false)] {
            o.disks.push(Disk {
                path: PathBuf::from(path),
                readonly: false,
                sd,
            });
        }
        let mut c = Command::new("qemu");
        virtio_disks(&mut c, std::path::Path::new("/boot.img"), false, &o);
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |needle: &str| {
            args.iter()
                .position(|a| a.contains(needle))
                .unwrap_or_else(|| panic!("{needle} not in {args:?}"))
        };
        assert!(at("file=/boot.img,if=virtio") < at("file=/data.img,if=virtio"));
        assert!(at("file=/data.img,if=virtio") < at("file=/store.img,if=none,id=sd0"));
        assert!(at("id=sd0") < at("sdhci-pci") && at("sdhci-pci") < at("sd-card,drive=sd0"));
        assert!(
            !args.iter().any(|a| a.contains("/store.img,if=virtio")),
            "{args:?}"
        );
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_mem_mib("512M"), Ok(512));
        assert_eq!(check_max_mem(512, 16384), Ok(()));
        assert!(check_max_mem(512, 512).is_err() && check_max_mem(512, 600).is_err());
        assert!(check_max_mem(1024, 512).is_err());
        assert_eq!(parse_mem_mib("1G"), Ok(1024));
        assert!(
            matches!(parse_mem_mib("256"), Err(MemSizeError::Syntax(_))),
            "a size without a unit is refused"
        );
        assert_eq!(
            parse_mem_mib("lots").unwrap_err().to_string(),
            "memory size \"lots\": expected a number with a unit, e.g. 512M or 1G"
        );
        for small in ["0M", "127M", "9999999G"] {
            assert!(
                matches!(parse_mem_mib(small), Err(MemSizeError::Range(_))),
                "{small}"
            );
        }
    }

    #[test]
    fn kvm_needs_device_and_cpu_flags() {
        let vmx = "flags\t\t: fpu vme vmx sse\n";
        let none = "flags\t\t: fpu vme sse hypervisor\n";
        assert_eq!(Accel::decide(true, vmx), Accel::Kvm);
        assert_eq!(Accel::decide(true, none), Accel::Tcg);
        assert_eq!(Accel::decide(false, vmx), Accel::Tcg);
    }
}
