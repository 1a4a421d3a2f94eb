//! The machine's physical memory layout an image was captured under, and the check that
//! refuses an image when the layout at resume differs, naming the first range that does.
//!
//! x86's hibernation header carries a checksum of the firmware's e820 map and the kernel
//! refuses a changed one itself; arm64's header has nothing of the kind, and an image
//! restored under another layout (captured after a direct kernel boot, restored after
//! U-Boot, which reserves memory and moves the device tree) hangs the kernel instead of
//! being refused. So snapboot records the layout on every architecture:
//!
//! * `ram`: the top-level "System RAM" ranges of `/proc/iomem` (the RAM the firmware or
//!   device tree describes, before the kernel's own reservations of this boot);
//! * `reserved`: what the boot device tree reserves: its `/memreserve/` entries and the
//!   `reg` of each `/reserved-memory` child (empty without a device tree, as on x86);
//! * `efi_runtime`: the firmware regions UEFI runtime services use, at the virtual addresses
//!   the kernel gave them (x86_64: `/sys/firmware/efi/runtime-map/N`; empty on a boot without
//!   EFI runtime services). The kernel hands the firmware that map once per boot
//!   (`SetVirtualAddressMap`) and an image kernel calls the firmware through it after a
//!   restore, so a boot whose firmware was given another map must not restore the image.
//!
//! The lists are kept sorted, so equal layouts compare equal whatever order they were read in.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A range of physical addresses: `size` bytes from `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PhysRange {
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
}

impl PhysRange {
    /// The range from `first` to `last`, both included (as `/proc/iomem` writes them).
    pub fn inclusive(first: u64, last: u64) -> Self {
        PhysRange {
            base: first,
            size: last.saturating_sub(first).saturating_add(1),
        }
    }
}

impl fmt::Display for PhysRange {
    /// `first-last` in hex, both included, as `/proc/iomem` shows it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.size {
            0 => write!(f, "{:#x} (empty)", self.base),
            n => write!(f, "{:#x}-{:#x}", self.base, self.base.saturating_add(n - 1)),
        }
    }
}

/// A firmware region UEFI runtime services use, as the kernel mapped it (x86_64: /sys/firmware/efi/runtime-map/N).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EfiRuntimeRegion {
    /// Physical address of its first byte (`phys_addr`).
    pub phys: u64,
    /// The virtual address the kernel gave it in `SetVirtualAddressMap` (`virt_addr`).
    pub virt: u64,
    /// 4 KiB pages (`num_pages`).
    pub pages: u64,
    /// The UEFI memory type (`type`: 5 runtime services code, 6 runtime services data,
    /// 11 memory-mapped I/O, ...).
    pub kind: u32,
    /// The UEFI attribute bits (`attribute`; bit 63 is `EFI_MEMORY_RUNTIME`).
    pub attribute: u64,
}

impl EfiRuntimeRegion {
    /// Whether it is loader or boot-services memory (UEFI types 1-4) that the kernel
    /// marked runtime to keep it (`efi_mem_reserve`), not a region the firmware uses at
    /// runtime.
    pub fn kernel_kept(&self) -> bool {
        (1..=4).contains(&self.kind)
    }
}

impl fmt::Display for EfiRuntimeRegion {
    /// `phys 0x… virt 0x… pages N`: what the firmware is told about the region.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "phys {:#x} virt {:#x} pages {}",
            self.phys, self.virt, self.pages
        )
    }
}

/// The physical memory layout of a boot (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryMap {
    /// Top-level "System RAM" ranges of `/proc/iomem`, ascending.
    pub ram: Vec<PhysRange>,
    /// The boot device tree's `/memreserve/` entries and `/reserved-memory` ranges, ascending.
    pub reserved: Vec<PhysRange>,
    /// The EFI runtime regions as the kernel mapped them, ascending by `phys` (empty: this
    /// boot has no EFI runtime services).
    pub efi_runtime: Vec<EfiRuntimeRegion>,
}

/// The first range or region in which the layout at resume differs from the capture's.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum MemoryMapMismatch {
    /// A reservation the image records lies outside RAM and is not this boot's (checked
    /// before any kernel: only the boot loader's handoff may be missing, and it is RAM).
    #[error(
        "memory layout differs from the capture's: reserved range {range} at capture is not on this boot, and is not RAM the boot loader handed the kernel"
    )]
    NotHandoff {
        /// The image's range.
        range: PhysRange,
    },
    /// A RAM or reserved range differs.
    #[error(
        "memory layout differs from the capture's: {kind} range {index} was {} at capture, is {} on this boot",
        show(.image),
        show(.running)
    )]
    Range {
        /// `System RAM` or `reserved`.
        kind: &'static str,
        /// Position of the range in its sorted list.
        index: usize,
        /// The image's range (`None`: the image has fewer ranges).
        image: Option<PhysRange>,
        /// This boot's range (`None`: this boot has fewer ranges).
        running: Option<PhysRange>,
    },
    /// The firmware's runtime services were given another map on this boot than the image
    /// kernel gave them (or have none here, or had none then).
    #[error(
        "EFI runtime map differs from the capture's: region {index} was {} at capture, is {} on this boot",
        show(.image),
        show(.running)
    )]
    EfiRuntime {
        /// Position of the region in its sorted list.
        index: usize,
        /// The image's region (`None`: the image kernel had fewer regions).
        image: Option<EfiRuntimeRegion>,
        /// This boot's region (`None`: this boot has fewer).
        running: Option<EfiRuntimeRegion>,
    },
    /// The image kernel called the firmware's runtime services in virtual mode, and this
    /// boot's kernel has none (built with `CONFIG_EFI_DISABLE_RUNTIME`, booted with
    /// `efi=noruntime`): the firmware was never given the image kernel's map.
    #[error(
        "EFI runtime map differs from the capture's: the image kernel mapped {regions} firmware regions for EFI runtime services, this boot's kernel runs without them (the firmware is not in the virtual mode the image expects)"
    )]
    EfiRuntimeOff {
        /// Regions in the image's map.
        regions: usize,
    },
}

fn show<T: fmt::Display>(item: &Option<T>) -> String {
    item.as_ref()
        .map_or_else(|| "absent".into(), |r| r.to_string())
}

/// The first position at which two sorted lists differ, with both items there.
fn first_difference<T: Copy + PartialEq>(
    image: &[T],
    running: &[T],
) -> Option<(usize, Option<T>, Option<T>)> {
    let longest = image.len().max(running.len());
    (0..longest)
        .find(|&i| image.get(i) != running.get(i))
        .map(|i| (i, image.get(i).copied(), running.get(i).copied()))
}

impl MemoryMap {
    /// The layout of `ram` and `reserved` ranges, in any order, without EFI runtime regions.
    pub fn new(mut ram: Vec<PhysRange>, mut reserved: Vec<PhysRange>) -> Self {
        ram.sort_unstable();
        reserved.sort_unstable();
        MemoryMap {
            ram,
            reserved,
            efi_runtime: Vec::new(),
        }
    }

    /// The same layout with the EFI runtime regions `regions`, in any order.
    pub fn with_efi_runtime(mut self, mut regions: Vec<EfiRuntimeRegion>) -> Self {
        regions.sort_unstable();
        self.efi_runtime = regions;
        self
    }

    /// Compares the layout an image records (`self`) with what a program sees before any
    /// kernel (the arm64 restorer, from the device tree U-Boot hands it): the same RAM;
    /// every reservation of this boot (the firmware's) recorded by the image; and the
    /// image's other reservations inside RAM: what the loader reserved for the kernel it
    /// booted (the device tree blob it put there), which the image's pages carry.
    pub fn check_before_kernel(&self, running: &MemoryMap) -> Result<(), MemoryMapMismatch> {
        if let Some((index, image, running)) = first_difference(&self.ram, &running.ram) {
            return Err(MemoryMapMismatch::Range {
                kind: "System RAM",
                index,
                image,
                running,
            });
        }
        if let Some((index, r)) = running
            .reserved
            .iter()
            .enumerate()
            .find(|(_, r)| !self.reserved.contains(r))
        {
            return Err(MemoryMapMismatch::Range {
                kind: "reserved",
                index,
                image: None,
                running: Some(*r),
            });
        }
        let in_ram = |r: &PhysRange| {
            self.ram
                .iter()
                .any(|m| r.base >= m.base && r.base + r.size <= m.base + m.size)
        };
        match self
            .reserved
            .iter()
            .find(|r| !running.reserved.contains(r) && !in_ram(r))
        {
            Some(&range) => Err(MemoryMapMismatch::NotHandoff { range }),
            None => Ok(()),
        }
    }

    /// Compares the layout an image records (`self`) with this boot's, naming the first
    /// range that differs (RAM, then reserved ranges, then EFI runtime regions).
    pub fn check_against(&self, running: &MemoryMap) -> Result<(), MemoryMapMismatch> {
        for (kind, image, now) in [
            ("System RAM", &self.ram, &running.ram),
            ("reserved", &self.reserved, &running.reserved),
        ] {
            if let Some((index, image, running)) = first_difference(image, now) {
                return Err(MemoryMapMismatch::Range {
                    kind,
                    index,
                    image,
                    running,
                });
            }
        }
        if running.efi_runtime.is_empty() && !self.efi_runtime.is_empty() {
            return Err(MemoryMapMismatch::EfiRuntimeOff {
                regions: self.efi_runtime.len(),
            });
        }
        // The firmware's own runtime regions only: the kernel also marks runtime what it
        // keeps of loader and boot-services memory (`efi_mem_reserve`: the ESRT, ...), whose
        // size differs from boot to boot (16 or 17 pages of the same table on the UEFI PC,
        // 2026-11-28) and which the firmware never reads at runtime.
        let firmware = |m: &MemoryMap| -> Vec<EfiRuntimeRegion> {
            m.efi_runtime
                .iter()
                .filter(|r| !r.kernel_kept())
                .copied()
                .collect()
        };
        match first_difference(&firmware(self), &firmware(running)) {
            Some((index, image, running)) => Err(MemoryMapMismatch::EfiRuntime {
                index,
                image,
                running,
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(base: u64, size: u64) -> PhysRange {
        PhysRange { base, size }
    }

    fn virt() -> MemoryMap {
        MemoryMap::new(
            vec![r(0x4000_0000, 0x2000_0000)],
            vec![r(0x5e00_0000, 0x10_0000), r(0x4800_0000, 0x1000)],
        )
    }

    #[test]
    fn before_any_kernel_only_the_loader_s_handoff_in_ram_may_be_missing() {
        // The capture's boot had U-Boot's device tree reservation; the restorer's tree
        // (the same firmware) has the firmware's only.
        let mut captured = virt();
        captured.reserved.push(r(0x5d6e_0000, 0x6c_6000));
        let captured = MemoryMap::new(captured.ram, captured.reserved);
        assert_eq!(captured.check_before_kernel(&virt()), Ok(()));
        // Another firmware reservation on this boot is a difference.
        let mut more = virt();
        more.reserved.push(r(0x4400_0000, 0x1000));
        assert!(matches!(
            captured.check_before_kernel(&more),
            Err(MemoryMapMismatch::Range {
                kind: "reserved",
                ..
            })
        ));
        // Another RAM size is one.
        let small = MemoryMap::new(vec![r(0x4000_0000, 0x1000_0000)], virt().reserved);
        assert!(matches!(
            captured.check_before_kernel(&small),
            Err(MemoryMapMismatch::Range {
                kind: "System RAM",
                ..
            })
        ));
        // A missing reservation outside RAM is not the loader's.
        let mut outside = virt();
        outside.reserved.push(r(0x1000, 0x1000));
        let outside = MemoryMap::new(outside.ram, outside.reserved);
        let e = outside.check_before_kernel(&virt()).unwrap_err();
        assert!(
            e.to_string().contains("not RAM the boot loader handed"),
            "{e}"
        );
    }

    #[test]
    fn the_same_layout_passes_in_any_order() {
        let mut same = virt();
        same.reserved.reverse();
        assert_eq!(MemoryMap::new(same.ram, same.reserved), virt());
        assert_eq!(virt().check_against(&virt()), Ok(()));
        assert_eq!(r(0x4000_0000, 0x1000).to_string(), "0x40000000-0x40000fff");
        assert_eq!(PhysRange::inclusive(0x1000, 0x9fbff), r(0x1000, 0x9ec00));
    }

    #[test]
    fn the_first_differing_range_is_named_with_both_values() {
        // U-Boot reserves a range of its own below the device tree's.
        let mut uboot = virt();
        uboot.reserved.insert(0, r(0x4400_0000, 0x1000));
        let e = virt().check_against(&uboot).unwrap_err();
        assert_eq!(
            e.to_string(),
            "memory layout differs from the capture's: reserved range 0 was \
             0x48000000-0x48000fff at capture, is 0x44000000-0x44000fff on this boot"
        );
        let mut less_ram = virt();
        less_ram.ram[0].size /= 2;
        let e = virt().check_against(&less_ram).unwrap_err().to_string();
        assert!(
            e.contains("System RAM range 0 was 0x40000000-0x5fffffff"),
            "{e}"
        );
        let mut fewer = virt();
        fewer.reserved.pop();
        let e = virt().check_against(&fewer).unwrap_err();
        let MemoryMapMismatch::Range { index, running, .. } = e else {
            panic!("{e}");
        };
        assert_eq!((index, running), (1, None));
        assert!(e.to_string().contains("is absent on this boot"), "{e}");
    }

    /// Two regions of OVMF's runtime map as x86_64 Linux maps them (code, then data).
    fn efi(phys: u64, virt: u64, pages: u64, kind: u32) -> EfiRuntimeRegion {
        EfiRuntimeRegion {
            phys,
            virt,
            pages,
            kind,
            attribute: 0x8000_0000_0000_000f,
        }
    }

    fn uefi_pc() -> MemoryMap {
        MemoryMap::new(vec![r(0x10_0000, 0x3f00_0000)], vec![]).with_efi_runtime(vec![
            efi(0x3f5e_c000, 0xffff_fffe_ff5e_c000, 0x4c, 6),
            efi(0x3f4e_0000, 0xffff_fffe_ff4e_0000, 0x20, 5),
        ])
    }

    #[test]
    fn the_efi_runtime_map_is_kept_sorted_by_physical_address() {
        let m = uefi_pc();
        assert_eq!(m.efi_runtime[0].phys, 0x3f4e_0000);
        assert_eq!(m.efi_runtime[1].phys, 0x3f5e_c000);
        assert_eq!(m.check_against(&uefi_pc()), Ok(()));
        // No runtime regions on either side (a PVH boot, arm64 without EFI): equal.
        assert_eq!(virt().check_against(&virt()), Ok(()));
    }

    /// What the kernel keeps of boot-services memory (here 16 pages at capture, 17 on this
    /// boot, as on the UEFI PC on 2026-11-28) is not the firmware's: not compared.
    #[test]
    fn what_the_kernel_keeps_of_boot_services_memory_is_not_compared() {
        let kept = |pages| efi(0x3deb_d000, 0xffff_fffe_fdab_d000, pages, 4);
        let mut capture = uefi_pc();
        capture.efi_runtime.insert(0, kept(16));
        let mut now = uefi_pc();
        now.efi_runtime.insert(0, kept(17));
        assert!(kept(16).kernel_kept() && !uefi_pc().efi_runtime[0].kernel_kept());
        assert_eq!(capture.check_against(&now), Ok(()));
        assert_eq!(capture.check_against(&uefi_pc()), Ok(()));
    }

    #[test]
    fn an_efi_region_at_another_virtual_address_is_named_with_both_values() {
        let mut moved = uefi_pc();
        moved.efi_runtime[1].virt -= 0x20_0000;
        let e = uefi_pc().check_against(&moved).unwrap_err();
        assert_eq!(
            e.to_string(),
            "EFI runtime map differs from the capture's: region 1 was phys 0x3f5ec000 virt \
             0xfffffffeff5ec000 pages 76 at capture, is phys 0x3f5ec000 virt 0xfffffffeff3ec000 \
             pages 76 on this boot"
        );
        // This boot has one region less: the image's last is named, this boot's is absent.
        let mut fewer = uefi_pc();
        fewer.efi_runtime.pop();
        let e = uefi_pc().check_against(&fewer).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryMapMismatch::EfiRuntime {
                    index: 1,
                    running: None,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("was phys 0x3f5ec000 virt 0xfffffffeff5ec000 pages 76 at capture, is absent on this boot"),
            "{e}"
        );
        // A boot whose kernel runs without EFI runtime services (a restore kernel built
        // with them off): said as such.
        let mut none = uefi_pc();
        none.efi_runtime.clear();
        let e = uefi_pc().check_against(&none).unwrap_err();
        assert_eq!(e, MemoryMapMismatch::EfiRuntimeOff { regions: 2 });
        assert!(
            e.to_string().contains("mapped 2 firmware regions for EFI runtime services, this boot's kernel runs without them"),
            "{e}"
        );
        // An image kernel without runtime services restored where they run: a difference.
        let e = none.check_against(&uefi_pc()).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryMapMismatch::EfiRuntime {
                    index: 0,
                    image: None,
                    ..
                }
            ),
            "{e}"
        );
        // A region of another size with the same addresses is a difference too.
        let mut bigger = uefi_pc();
        bigger.efi_runtime[0].pages += 1;
        let e = uefi_pc().check_against(&bigger).unwrap_err();
        assert!(
            matches!(e, MemoryMapMismatch::EfiRuntime { index: 0, .. }),
            "{e}"
        );
        // A RAM difference is named before the runtime map's.
        let mut both = moved.clone();
        both.ram[0].size /= 2;
        let e = uefi_pc().check_against(&both).unwrap_err();
        assert!(
            matches!(
                e,
                MemoryMapMismatch::Range {
                    kind: "System RAM",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_memory_map_with_efi_regions_round_trips() {
        let m = uefi_pc();
        let bytes = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<MemoryMap>(&bytes).unwrap(), m);
    }
}
