//! The UEFI memory map, as the EFI restorer reads it before it leaves boot services, and
//! what the restorer derives from it:
//!
//! * the e820 table the image kernel got from its loader ([`Loader`]): its EFI stub (Linux
//!   6.1, `drivers/firmware/efi/libstub/x86-stub.c`, `setup_e820`) or GRUB's own Linux
//!   loader (GRUB 2.06 `loader/i386/linux.c` over `mmap/efi/mmap.c`, which Debian's GRUB
//!   uses on the board: it exits boot services itself and fills the table). Both map each
//!   descriptor's type to an e820 type (loader, boot-services and conventional memory are
//!   RAM; runtime data, MMIO and reserved memory are reserved; ACPI reclaim, NVS, unusable
//!   and persistent memory keep their kinds) and merge a descriptor into the previous entry
//!   when it has the same type and starts where that one ends; they differ in runtime code
//!   (the stub: reserved; GRUB: its own type 20) and in types they do not know (the stub
//!   leaves them out, GRUB reserves them). The kernel then sanitizes the table
//!   (`e820::Table::from_efi`). The image's header carries the checksum of that table as
//!   the capture boot's kernel built it: the loader's own allocations differ from boot to
//!   boot, but they are RAM like the free memory around them, so the same firmware with the
//!   same RAM gives the same table;
//! * the firmware's runtime regions (descriptors with `EFI_MEMORY_RUNTIME`), which the image
//!   kernel mapped at virtual addresses of its own and capture recorded: [`virtual_map`]
//!   pairs this boot's regions with the recorded ones, or says which differs, so the
//!   restorer can call `SetVirtualAddressMap` with exactly the image kernel's map.

use crate::e820::{Entry, Table, MAX_ENTRIES, RAM, RESERVED};
use alloc::vec::Vec;
use snapimg::EfiRuntimeRegion as Recorded;

/// `EFI_MEMORY_RUNTIME`: the region is used by runtime services.
pub const ATTR_RUNTIME: u64 = 1 << 63;
/// `EFI_MEMORY_SP`: specific-purpose memory.
const ATTR_SP: u64 = 1 << 18;

/// The UEFI memory types the conversion distinguishes.
mod kind {
    pub const RESERVED: u32 = 0;
    pub const LOADER_CODE: u32 = 1;
    pub const LOADER_DATA: u32 = 2;
    pub const BOOT_CODE: u32 = 3;
    pub const BOOT_DATA: u32 = 4;
    pub const RUNTIME_CODE: u32 = 5;
    pub const RUNTIME_DATA: u32 = 6;
    pub const CONVENTIONAL: u32 = 7;
    pub const UNUSABLE: u32 = 8;
    pub const ACPI_RECLAIM: u32 = 9;
    pub const ACPI_NVS: u32 = 10;
    pub const MMIO: u32 = 11;
    pub const MMIO_PORT: u32 = 12;
    pub const PAL_CODE: u32 = 13;
    pub const PERSISTENT: u32 = 14;
}

/// e820 types besides RAM and reserved (`E820_TYPE_*`).
mod e820_kind {
    pub const ACPI: u32 = 3;
    pub const NVS: u32 = 4;
    pub const UNUSABLE: u32 = 5;
    pub const PMEM: u32 = 7;
    pub const SOFT_RESERVED: u32 = 0xefff_ffff;
}

/// One descriptor of the UEFI memory map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// `EFI_MEMORY_TYPE`.
    pub kind: u32,
    /// First byte.
    pub phys: u64,
    /// 4 KiB pages.
    pub pages: u64,
    /// `EFI_MEMORY_*` attribute bits.
    pub attribute: u64,
}

impl Descriptor {
    /// Whether runtime services use the region.
    pub fn is_runtime(&self) -> bool {
        self.attribute & ATTR_RUNTIME != 0
    }

    /// Its bytes.
    fn bytes(&self) -> u64 {
        self.pages.saturating_mul(4096)
    }
}

/// Who turned the UEFI memory map into the kernel's e820 table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loader {
    /// The kernel's EFI stub; `soft_reserve`: whether the kernel honours `EFI_MEMORY_SP`
    /// (`CONFIG_EFI_SOFT_RESERVE`).
    Stub {
        /// Specific-purpose memory is soft reserved.
        soft_reserve: bool,
    },
    /// GRUB's own Linux loader.
    Grub,
}

/// GRUB's type for runtime services code (`GRUB_MEMORY_CODE`).
const GRUB_CODE: u32 = 20;

/// The e820 type `loader` gives a descriptor (`None`: it leaves it out).
pub fn e820_type(d: &Descriptor, loader: Loader) -> Option<u32> {
    let soft_reserve = matches!(loader, Loader::Stub { soft_reserve: true });
    Some(match d.kind {
        kind::RUNTIME_CODE if loader == Loader::Grub => GRUB_CODE,
        kind::RESERVED
        | kind::RUNTIME_CODE
        | kind::RUNTIME_DATA
        | kind::MMIO
        | kind::MMIO_PORT
        | kind::PAL_CODE => RESERVED,
        kind::UNUSABLE => e820_kind::UNUSABLE,
        kind::ACPI_RECLAIM => e820_kind::ACPI,
        kind::LOADER_CODE
        | kind::LOADER_DATA
        | kind::BOOT_CODE
        | kind::BOOT_DATA
        | kind::CONVENTIONAL => {
            if soft_reserve && d.attribute & ATTR_SP != 0 {
                e820_kind::SOFT_RESERVED
            } else {
                RAM
            }
        }
        kind::ACPI_NVS => e820_kind::NVS,
        kind::PERSISTENT => e820_kind::PMEM,
        _ if loader == Loader::Grub => RESERVED,
        _ => return None,
    })
}

/// Why the memory map gives no table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// More entries than the boot parameters hold.
    #[error(
        "the firmware's memory map makes {0} e820 entries; the restorer follows at most {MAX_ENTRIES}"
    )]
    TooMany(usize),
}

/// The loader's entries for `map` (in the map's order, neighbours of one type merged).
pub fn e820_entries(map: &[Descriptor], loader: Loader) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for d in map {
        let Some(kind) = e820_type(d, loader) else {
            continue;
        };
        if let Some(prev) = out.last_mut() {
            if prev.kind == kind && prev.addr.wrapping_add(prev.size) == d.phys {
                prev.size += d.bytes();
                continue;
            }
        }
        out.push(Entry {
            addr: d.phys,
            size: d.bytes(),
            kind,
        });
    }
    out
}

/// The kernel's `e820_table_firmware` for `map` as `loader` makes it (see the module docs).
pub fn table(map: &[Descriptor], loader: Loader) -> Result<Table, MapError> {
    let entries = e820_entries(map, loader);
    let n = entries.len();
    Table::from_efi(entries).ok_or(MapError::TooMany(n))
}

/// The runtime regions the kernel counts as RAM (boot-services or loader memory that the
/// firmware marked `EFI_MEMORY_RUNTIME`): nothing may be written there before the runtime
/// services have their virtual map. `[start, end)` each.
pub fn runtime_in_ram(map: &[Descriptor]) -> Vec<(u64, u64)> {
    map.iter()
        .filter(|d| d.is_runtime())
        .filter(|d| e820_type(d, Loader::Grub) == Some(RAM))
        .map(|d| (d.phys, d.phys + d.bytes()))
        .collect()
}

/// Why this boot's runtime regions are not the image kernel's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeMismatch {
    /// A region differs, or one list is longer.
    #[error(
        "the firmware's runtime regions differ from the capture's: region {index} was {} at capture, is {} on this boot",
        show_recorded(.image),
        show_now(.now)
    )]
    Region {
        /// Position in the lists (ascending by physical address).
        index: usize,
        /// The recorded region.
        image: Option<Recorded>,
        /// This boot's.
        now: Option<Descriptor>,
    },
}

fn show_recorded(r: &Option<Recorded>) -> alloc::string::String {
    match r {
        Some(r) => alloc::format!(
            "{:#x} ({} pages, type {}) at {:#x}",
            r.phys,
            r.pages,
            r.kind,
            r.virt
        ),
        None => "absent".into(),
    }
}

fn show_now(d: &Option<Descriptor>) -> alloc::string::String {
    match d {
        Some(d) => alloc::format!("{:#x} ({} pages, type {})", d.phys, d.pages, d.kind),
        None => "absent".into(),
    }
}

/// The map to pass to `SetVirtualAddressMap`: the image kernel's runtime regions, each
/// with the virtual address it gave it, as that kernel passed them at capture. Each must
/// be this boot's:
///
/// * a region the firmware marks `EFI_MEMORY_RUNTIME` now must be a recorded one with the
///   same start, pages, type and attributes, and each such recorded region must be there;
/// * the kernel also marks runtime what it keeps of boot-services or loader memory
///   (`efi_mem_reserve`: the ESRT, the TPM event log, ...): a recorded region the firmware
///   does not mark now must lie inside one of its descriptors of the same type.
///
/// The index in a mismatch counts the regions in ascending order of physical address.
pub fn virtual_map(
    map: &[Descriptor],
    recorded: &[Recorded],
) -> Result<Vec<(Descriptor, u64)>, RuntimeMismatch> {
    let mut image = recorded.to_vec();
    image.sort_unstable_by_key(|r| r.phys);
    let mut out = Vec::with_capacity(image.len());
    for (index, r) in image.iter().enumerate() {
        let same_start = map.iter().find(|d| d.phys == r.phys && d.is_runtime());
        let fits = match same_start {
            Some(d) => d.pages == r.pages && d.kind == r.kind && d.attribute == r.attribute,
            // Kept by the kernel: inside a descriptor of its type that the firmware does
            // not use at runtime.
            None => map.iter().any(|d| {
                !d.is_runtime()
                    && d.kind == r.kind
                    && KERNEL_KEEPS.contains(&d.kind)
                    && d.phys <= r.phys
                    && r.phys + r.pages * 4096 <= d.phys + d.bytes()
            }),
        };
        if !fits {
            let containing = map
                .iter()
                .find(|d| d.phys <= r.phys && r.phys < d.phys + d.bytes())
                .copied();
            return Err(RuntimeMismatch::Region {
                index,
                image: Some(*r),
                now: same_start.copied().or(containing),
            });
        }
        out.push((
            Descriptor {
                kind: r.kind,
                phys: r.phys,
                pages: r.pages,
                attribute: r.attribute,
            },
            r.virt,
        ));
    }
    // Every region the firmware uses at runtime now was mapped by the image kernel.
    let mut now: Vec<Descriptor> = map.iter().filter(|d| d.is_runtime()).copied().collect();
    now.sort_unstable_by_key(|d| d.phys);
    if let Some(d) = now.iter().find(|d| !image.iter().any(|r| r.phys == d.phys)) {
        return Err(RuntimeMismatch::Region {
            index: image.iter().filter(|r| r.phys < d.phys).count(),
            image: None,
            now: Some(*d),
        });
    }
    Ok(out)
}

/// Memory types whose parts the kernel keeps and marks runtime itself.
const KERNEL_KEEPS: [u32; 4] = [
    kind::LOADER_CODE,
    kind::LOADER_DATA,
    kind::BOOT_CODE,
    kind::BOOT_DATA,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn d(kind: u32, phys: u64, pages: u64, attribute: u64) -> Descriptor {
        Descriptor {
            kind,
            phys,
            pages,
            attribute,
        }
    }

    const WB: u64 = 0xf;

    /// A map shaped like OVMF's on the board's q35 PC (abridged): loader, boot-services and
    /// free memory merge into RAM runs; runtime data, NVS and MMIO stay apart.
    fn ovmf() -> Vec<Descriptor> {
        vec![
            d(kind::BOOT_CODE, 0, 1, WB),
            d(kind::CONVENTIONAL, 0x1000, 0x9f, WB),
            d(kind::CONVENTIONAL, 0x10_0000, 0x700, WB),
            d(kind::ACPI_NVS, 0x80_0000, 8, WB),
            d(kind::CONVENTIONAL, 0x80_8000, 0x10, WB),
            d(kind::LOADER_DATA, 0x81_8000, 0x100, WB),
            d(kind::BOOT_DATA, 0x91_8000, 0x100, WB),
            d(kind::RUNTIME_DATA, 0xa1_8000, 0x20, WB | ATTR_RUNTIME),
            d(kind::RUNTIME_CODE, 0xa3_8000, 0x10, WB | ATTR_RUNTIME),
            d(kind::CONVENTIONAL, 0xa4_8000, 0x100, WB),
            d(kind::MMIO, 0xffc0_0000, 0x400, 1 | ATTR_RUNTIME),
            d(99, 0xfee0_0000, 1, 0),
        ]
    }

    #[test]
    fn the_stub_merges_ram_and_keeps_runtime_apart() {
        let stub = Loader::Stub { soft_reserve: true };
        let t = table(&ovmf(), stub).unwrap();
        let e = |addr, size, kind| Entry { addr, size, kind };
        assert_eq!(
            t.entries(),
            &[
                e(0, 0xa_0000, RAM),
                e(0x10_0000, 0x70_0000, RAM),
                e(0x80_0000, 0x8000, e820_kind::NVS),
                e(0x80_8000, 0x21_0000, RAM),
                e(0xa1_8000, 0x3_0000, RESERVED),
                e(0xa4_8000, 0x10_0000, RAM),
                e(0xffc0_0000, 0x40_0000, RESERVED),
            ]
        );
        // The loader's allocations are RAM like the memory around them: another boot's
        // loader, taking other pages, gives the same table.
        let mut other = ovmf();
        other[5].kind = kind::CONVENTIONAL;
        other[6].kind = kind::LOADER_CODE;
        assert_eq!(table(&other, stub).unwrap().checksum(), t.checksum());
        // Another RAM size does not.
        let mut less = ovmf();
        less[9].pages = 0x80;
        assert_ne!(table(&less, stub).unwrap().checksum(), t.checksum());
        // GRUB's loader types runtime code apart, and reserves what it does not know.
        let g = table(&ovmf(), Loader::Grub).unwrap();
        assert_eq!(
            &g.entries()[4..6],
            &[
                e(0xa1_8000, 0x2_0000, RESERVED),
                e(0xa3_8000, 0x1_0000, GRUB_CODE)
            ]
        );
        assert!(g.entries().contains(&e(0xfee0_0000, 0x1000, RESERVED)));
        assert_ne!(g.checksum(), t.checksum());
    }

    #[test]
    fn what_the_kernel_kept_of_boot_services_memory_is_mapped_as_recorded() {
        let map = ovmf();
        let mut rec = recorded(&map, 0xffff_fffe_ffe0_0000);
        // The kernel marked a part of boot-services data runtime (efi_mem_reserve).
        let kept = Recorded {
            phys: 0x92_0000,
            virt: 0xffff_fffe_fd00_0000,
            pages: 4,
            kind: kind::BOOT_DATA,
            attribute: WB | ATTR_RUNTIME,
        };
        rec.push(kept);
        let v = virtual_map(&map, &rec).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].0.phys, 0x92_0000);
        assert_eq!(v[0].1, 0xffff_fffe_fd00_0000);
        assert!(v[0].0.is_runtime());
        // Not inside boot-services data on this boot (here it is free memory): refused.
        let mut other = rec.clone();
        other.last_mut().unwrap().phys = 0xa4_9000;
        let e = virtual_map(&map, &other).unwrap_err().to_string();
        assert!(
            e.contains("region 2 was 0xa49000 (4 pages, type 4)")
                && e.contains("is 0xa48000 (256 pages, type 7)"),
            "{e}"
        );
    }

    #[test]
    fn runtime_data_in_boot_services_memory_is_kept_apart() {
        let mut map = ovmf();
        // OVMF marks a boot-services data region for runtime use.
        map.push(d(kind::BOOT_DATA, 0x3deb_d000, 17, WB | ATTR_RUNTIME));
        assert_eq!(
            runtime_in_ram(&map),
            vec![(0x3deb_d000, 0x3deb_d000 + 17 * 4096)]
        );
    }

    #[test]
    fn specific_purpose_memory_is_soft_reserved_only_when_the_kernel_honours_it() {
        let map = [d(kind::CONVENTIONAL, 0x1000_0000, 0x100, WB | ATTR_SP)];
        let stub = |soft_reserve| Loader::Stub { soft_reserve };
        assert_eq!(
            e820_type(&map[0], stub(true)),
            Some(e820_kind::SOFT_RESERVED)
        );
        assert_eq!(e820_type(&map[0], stub(false)), Some(RAM));
        assert_eq!(e820_type(&map[0], Loader::Grub), Some(RAM));
    }

    #[test]
    fn too_many_entries_are_refused_with_the_count() {
        let map: Vec<Descriptor> = (0..200u64)
            .map(|i| d(kind::CONVENTIONAL + (i % 2) as u32, i * 0x2000, 1, WB))
            .collect();
        let stub = Loader::Stub { soft_reserve: true };
        assert_eq!(table(&map, stub).unwrap_err(), MapError::TooMany(200));
    }

    fn recorded(map: &[Descriptor], base: u64) -> Vec<Recorded> {
        map.iter()
            .filter(|d| d.is_runtime())
            .enumerate()
            .map(|(i, d)| Recorded {
                phys: d.phys,
                virt: base - (i as u64) * 0x20_0000,
                pages: d.pages,
                kind: d.kind,
                attribute: d.attribute,
            })
            .collect()
    }

    #[test]
    fn the_virtual_map_takes_the_recorded_addresses() {
        let map = ovmf();
        let mut rec = recorded(&map, 0xffff_fffe_ffe0_0000);
        rec.reverse();
        let v = virtual_map(&map, &rec).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].0.phys, 0xa1_8000);
        assert_eq!(v[0].1, 0xffff_fffe_ffe0_0000);
        assert_eq!(v[2].0.kind, kind::MMIO);
        assert_eq!(v[2].1, 0xffff_fffe_ffe0_0000 - 0x40_0000);
    }

    #[test]
    fn another_runtime_layout_is_refused_naming_the_region() {
        let map = ovmf();
        let rec = recorded(&map, 0xffff_fffe_ffe0_0000);
        let mut moved = map.clone();
        moved[8].pages = 0x11;
        let e = virtual_map(&moved, &rec).unwrap_err().to_string();
        assert!(
            e.contains("region 1 was 0xa38000 (16 pages, type 5) at 0xfffffffeffc00000")
                && e.contains("is 0xa38000 (17 pages, type 5) on this boot"),
            "{e}"
        );
        let e = virtual_map(&map, &rec[..2]).unwrap_err().to_string();
        assert!(
            e.contains("region 2 was absent at capture, is 0xffc00000 (1024 pages, type 11)"),
            "{e}"
        );
        // No runtime regions recorded and none now: nothing to map.
        let plain = [d(kind::CONVENTIONAL, 0, 16, WB)];
        assert_eq!(virtual_map(&plain, &[]).unwrap(), vec![]);
    }
}
