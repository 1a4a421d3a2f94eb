//! The memory map a PVH-booted x86_64 kernel derives from the firmware, and its checksum.
//!
//! The image kernel stored a CRC32 of its `e820_table_firmware` in the image's arch header
//! and a restoring kernel refuses the image if its own differs. Under PVH that table is
//! built (Linux 6.1, `arch/x86/platform/pvh/enlighten.c`, `arch/x86/kernel/e820.c`) as:
//! the start info's memory map entries in order, then the legacy ISA hole
//! (0xa0000..0x100000, reserved) appended while fewer than 127 entries, then sanitized
//! (sorted change points; where entries overlap the larger type wins; neighbours of one
//! type merge except persistent memory types; empty results dropped). The checksum is the
//! standard reflected CRC32 of the 4-byte entry count followed by the packed 20-byte
//! entries (`u64 addr, u64 size, u32 type`).

/// Entries the kernel's boot parameters hold (`E820_MAX_ENTRIES_ZEROPAGE`).
pub const MAX_ENTRIES: usize = 128;
/// Usable RAM.
pub const RAM: u32 = 1;
/// Reserved.
pub const RESERVED: u32 = 2;
/// Types the kernel never merges with a neighbour (`E820_TYPE_PMEM`, `E820_TYPE_PRAM`).
const NO_MERGE: [u32; 2] = [7, 12];
const ISA_START: u64 = 0xa_0000;
const ISA_END: u64 = 0x10_0000;

/// One region.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// `E820_TYPE_*`.
    pub kind: u32,
}

/// A memory map of at most [`MAX_ENTRIES`] entries.
#[derive(Debug, Clone)]
pub struct Table {
    len: usize,
    entries: [Entry; MAX_ENTRIES],
}

#[derive(Clone, Copy)]
struct ChangePoint {
    addr: u64,
    entry: usize,
    start: bool,
}

impl Table {
    /// The table the kernel makes of a PVH start info's memory map (`memmap`, in order;
    /// entries past [`MAX_ENTRIES`] are dropped as the kernel's copy would overflow).
    pub fn from_pvh(memmap: impl IntoIterator<Item = Entry>) -> Self {
        let mut t = Table {
            len: 0,
            entries: [Entry::default(); MAX_ENTRIES],
        };
        for e in memmap.into_iter().take(MAX_ENTRIES) {
            t.entries[t.len] = e;
            t.len += 1;
        }
        if t.len < MAX_ENTRIES - 1 {
            t.entries[t.len] = Entry {
                addr: ISA_START,
                size: ISA_END - ISA_START,
                kind: RESERVED,
            };
            t.len += 1;
        }
        t.sanitize();
        t
    }

    /// The table an x86_64 kernel's EFI stub and `e820__memory_setup` make of the UEFI
    /// memory map (`crate::efimap`): `memmap`'s entries, already converted and merged by
    /// the stub's rules, then sanitized as above; no ISA hole is added (the UEFI map says
    /// what lies there). `None` when the stub would need more than [`MAX_ENTRIES`] (it
    /// then passes the rest in setup data, which the restorer does not follow).
    pub fn from_efi(memmap: impl IntoIterator<Item = Entry>) -> Option<Self> {
        let mut t = Table {
            len: 0,
            entries: [Entry::default(); MAX_ENTRIES],
        };
        for e in memmap {
            *t.entries.get_mut(t.len)? = e;
            t.len += 1;
        }
        t.sanitize();
        Some(t)
    }

    /// The entries.
    pub fn entries(&self) -> &[Entry] {
        &self.entries[..self.len]
    }

    /// Removes overlaps the way `e820__update_table` does. Left alone (as the kernel
    /// leaves it) with fewer than two entries or an entry wrapping around.
    fn sanitize(&mut self) {
        let old = self.entries;
        let old = &old[..self.len];
        if old.len() < 2 || old.iter().any(|e| e.addr.checked_add(e.size).is_none()) {
            return;
        }
        let mut points = [ChangePoint {
            addr: 0,
            entry: 0,
            start: false,
        }; 2 * MAX_ENTRIES];
        let mut n = 0;
        for (i, e) in old.iter().enumerate().filter(|(_, e)| e.size != 0) {
            points[n] = ChangePoint {
                addr: e.addr,
                entry: i,
                start: true,
            };
            points[n + 1] = ChangePoint {
                addr: e.addr + e.size,
                entry: i,
                start: false,
            };
            n += 2;
        }
        let points = &mut points[..n];
        // By address; at one address, starts before ends (so touching entries of one
        // type merge instead of leaving a gap).
        points.sort_unstable_by_key(|p| (p.addr, !p.start));
        let mut open = [false; MAX_ENTRIES];
        let mut out = [Entry::default(); MAX_ENTRIES];
        let mut len = 0;
        let (mut last_kind, mut last_addr) = (0u32, 0u64);
        for p in points.iter() {
            open[p.entry] = p.start;
            let kind = old
                .iter()
                .zip(open.iter())
                .filter(|(_, &o)| o)
                .map(|(e, _)| e.kind)
                .max()
                .unwrap_or(0);
            if kind == last_kind && !NO_MERGE.contains(&kind) {
                continue;
            }
            if last_kind != 0 {
                out[len].size = p.addr - last_addr;
                if out[len].size != 0 {
                    len += 1;
                    if len >= MAX_ENTRIES {
                        break;
                    }
                }
            }
            if kind != 0 {
                out[len].addr = p.addr;
                out[len].kind = kind;
                last_addr = p.addr;
            }
            last_kind = kind;
        }
        self.entries = out;
        self.len = len;
    }

    /// The checksum the image kernel wrote into its arch header.
    pub fn checksum(&self) -> u32 {
        let mut c = Crc32::new();
        c.update(&(self.len as u32).to_le_bytes());
        for e in self.entries() {
            c.update(&e.addr.to_le_bytes());
            c.update(&e.size.to_le_bytes());
            c.update(&e.kind.to_le_bytes());
        }
        c.finish()
    }

    /// Whether the whole page `pfn` is usable RAM.
    pub fn is_ram_page(&self, pfn: u64) -> bool {
        let (start, end) = (pfn << 12, (pfn + 1) << 12);
        self.entries()
            .iter()
            .any(|e| e.kind == RAM && e.addr <= start && end <= e.addr + e.size)
    }

    /// Whole pages of usable RAM.
    pub fn ram_pages(&self) -> u64 {
        self.entries()
            .iter()
            .filter(|e| e.kind == RAM)
            .map(|e| ((e.addr + e.size) >> 12).saturating_sub(e.addr.div_ceil(4096)))
            .sum()
    }

    /// The end of the usable RAM region holding byte `addr` (`addr` itself when none
    /// does): how far memory from `addr` on may be used without a gap.
    pub fn ram_run_end(&self, addr: u64) -> u64 {
        self.entries()
            .iter()
            .find(|e| e.kind == RAM && e.addr <= addr && addr < e.addr + e.size)
            .map_or(addr, |e| e.addr + e.size)
    }

    /// The end of the highest usable RAM region.
    pub fn ram_end(&self) -> u64 {
        self.entries()
            .iter()
            .filter(|e| e.kind == RAM)
            .map(|e| e.addr + e.size)
            .max()
            .unwrap_or(0)
    }
}

/// CRC32 (reflected, polynomial 0xEDB88320, initial and final inversion), bitwise: the
/// table is small and this runs once per restore.
struct Crc32(u32);

impl Crc32 {
    fn new() -> Self {
        Crc32(!0)
    }

    fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u32::from(b);
            for _ in 0..8 {
                let mask = (self.0 & 1).wrapping_neg();
                self.0 = (self.0 >> 1) ^ (0xEDB8_8320 & mask);
            }
        }
    }

    fn finish(&self) -> u32 {
        !self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(addr: u64, size: u64, kind: u32) -> Entry {
        Entry { addr, size, kind }
    }

    #[test]
    fn crc32_is_the_standard_one() {
        let mut c = Crc32::new();
        c.update(b"123456789");
        assert_eq!(c.finish(), 0xCBF4_3926);
    }

    /// QEMU's q35 memory map for 512 MiB (PVH start info): the ISA hole splits low RAM
    /// and the reserved entries stay as they are.
    #[test]
    fn the_isa_hole_splits_low_ram() {
        let t = Table::from_pvh([
            e(0, 0x2000_0000, RAM),
            e(0xfeff_c000, 0x4000, RESERVED),
            e(0xb000_0000, 0x1000_0000, RESERVED),
        ]);
        assert_eq!(
            t.entries(),
            &[
                e(0, 0xa_0000, RAM),
                e(0xa_0000, 0x6_0000, RESERVED),
                e(0x10_0000, 0x2000_0000 - 0x10_0000, RAM),
                e(0xb000_0000, 0x1000_0000, RESERVED),
                e(0xfeff_c000, 0x4000, RESERVED),
            ]
        );
        assert_eq!(t.ram_pages(), 0xa0 + 0x2_0000 - 0x100);
        assert!(t.is_ram_page(0x9f) && !t.is_ram_page(0xa0) && t.is_ram_page(0x100));
        assert!(!t.is_ram_page(0x2_0000));
    }

    /// Touching entries of one type merge; empty entries vanish; persistent memory never
    /// merges.
    #[test]
    fn neighbours_merge_except_persistent_memory() {
        let t = Table::from_pvh([
            e(0x10_0000, 0x10_0000, RAM),
            e(0x20_0000, 0x10_0000, RAM),
            e(0x40_0000, 0, RAM),
            e(0x100_0000, 0x1000, 7),
            e(0x100_1000, 0x1000, 7),
        ]);
        assert_eq!(
            t.entries(),
            &[
                e(0xa_0000, 0x6_0000, RESERVED),
                e(0x10_0000, 0x20_0000, RAM),
                e(0x100_0000, 0x1000, 7),
                e(0x100_1000, 0x1000, 7),
            ]
        );
    }

    /// The checksum covers the count and the packed entries, as the kernel lays them out.
    #[test]
    fn a_ram_run_ends_where_its_region_ends() {
        let t = Table::from_pvh([e(0x100000, 0x1000_0000, RAM), e(0x1010_0000, 0x1000, 2)]);
        assert_eq!(t.ram_run_end(0x20_0000), 0x1010_0000);
        assert_eq!(t.ram_run_end(0x1010_0000), 0x1010_0000);
    }

    #[test]
    fn the_checksum_covers_count_and_packed_entries() {
        let t = Table::from_pvh([e(0, 0x2000_0000, RAM)]);
        let mut bytes = (t.entries().len() as u32).to_le_bytes().to_vec();
        for x in t.entries() {
            bytes.extend_from_slice(&x.addr.to_le_bytes());
            bytes.extend_from_slice(&x.size.to_le_bytes());
            bytes.extend_from_slice(&x.kind.to_le_bytes());
        }
        assert_eq!(bytes.len(), 4 + 20 * 3);
        let mut c = Crc32::new();
        c.update(&bytes);
        assert_eq!(t.checksum(), c.finish());
        let other = Table::from_pvh([e(0, 0x1000_0000, RAM)]);
        assert_ne!(t.checksum(), other.checksum());
    }
}
