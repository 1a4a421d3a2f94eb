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
//!   `reg` of each `/reserved-memory` child (empty without a device tree, as on x86).
//!
//! Both lists are kept sorted, so equal layouts compare equal whatever order they were read in.

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

/// The physical memory layout of a boot (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryMap {
    /// Top-level "System RAM" ranges of `/proc/iomem`, ascending.
    pub ram: Vec<PhysRange>,
    /// The boot device tree's `/memreserve/` entries and `/reserved-memory` ranges, ascending.
    pub reserved: Vec<PhysRange>,
}

/// The first range in which the layout at resume differs from the capture's.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "memory layout differs from the capture's: {kind} range {index} was {} at capture, is {} on this boot",
    show(.image),
    show(.running)
)]
pub struct MemoryMapMismatch {
    /// `System RAM` or `reserved`.
    pub kind: &'static str,
    /// Position of the range in its sorted list.
    pub index: usize,
    /// The image's range (`None`: the image has fewer ranges).
    pub image: Option<PhysRange>,
    /// This boot's range (`None`: this boot has fewer ranges).
    pub running: Option<PhysRange>,
}

fn show(range: &Option<PhysRange>) -> String {
    range.map_or_else(|| "absent".into(), |r| r.to_string())
}

impl MemoryMap {
    /// The layout of `ram` and `reserved` ranges, in any order.
    pub fn new(mut ram: Vec<PhysRange>, mut reserved: Vec<PhysRange>) -> Self {
        ram.sort_unstable();
        reserved.sort_unstable();
        MemoryMap { ram, reserved }
    }

    /// Compares the layout an image records (`self`) with this boot's, naming the first
    /// range that differs (RAM before reserved ranges).
    pub fn check_against(&self, running: &MemoryMap) -> Result<(), MemoryMapMismatch> {
        for (kind, image, now) in [
            ("System RAM", &self.ram, &running.ram),
            ("reserved", &self.reserved, &running.reserved),
        ] {
            let longest = image.len().max(now.len());
            if let Some(index) = (0..longest).find(|&i| image.get(i) != now.get(i)) {
                return Err(MemoryMapMismatch {
                    kind,
                    index,
                    image: image.get(index).copied(),
                    running: now.get(index).copied(),
                });
            }
        }
        Ok(())
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
        assert_eq!((e.index, e.running), (1, None));
        assert!(e.to_string().contains("is absent on this boot"), "{e}");
    }
}
