//! Where a cold boot puts the stock kernel's parts in RAM: all in usable RAM of the memory
//! map, at or above `free_from` (what is below may be the restorer's own memory) and below
//! 4 GiB (the restorer's identity map).
//!
//! ```text
//! free_from                pref_address (16 MiB)                      initrd_addr_max / 4 GiB
//! | zero page | command line | setup |..| kernel: init_size bytes |....| initramfs |  ACPI ..
//!   lowest free pages                   lowest kernel_alignment-     highest pages that fit
//!                                       aligned address >= pref      (as other loaders do)
//! ```
//!
//! A kernel that is not relocatable goes exactly to `pref_address`, or is refused.

use crate::bzimage::{BootError, SetupHeader};
use crate::e820::{Entry, RAM};

/// The end of what the restorer's page tables map.
pub const LIMIT: u64 = 1 << 32;
const PAGE: u64 = 4096;

/// Bytes of the parts to place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// The command line with its NUL.
    pub cmdline: u64,
    /// The protected-mode kernel as read (whole sectors).
    pub kernel: u64,
    /// The initramfs as read (whole sectors).
    pub initrd: u64,
}

/// Where each part goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The zero page.
    pub zero_page: u64,
    /// The command line.
    pub cmdline: u64,
    /// The bzImage's setup sectors (read for the header and the checksum, not run).
    pub setup: u64,
    /// The protected-mode kernel (its 64-bit entry is 0x200 further).
    pub kernel: u64,
    /// Bytes kept free for the kernel from there: `init_size` or what was read, if more.
    pub kernel_bytes: u64,
    /// The initramfs.
    pub initrd: u64,
}

fn align_up(v: u64, a: u64) -> Option<u64> {
    Some(v.checked_add(a - 1)? & !(a - 1))
}

fn ram(map: &[Entry]) -> impl Iterator<Item = (u64, u64)> + '_ {
    map.iter()
        .filter(|e| e.kind == RAM)
        .map(|e| (e.addr, e.addr.saturating_add(e.size)))
}

fn overlaps((s, e): (u64, u64), a: u64, end: u64) -> bool {
    a < e && s < end
}

/// Whether `[a, a + size)` lies inside one RAM entry.
fn in_ram(map: &[Entry], a: u64, size: u64) -> bool {
    ram(map).any(|(s, e)| s <= a && a + size <= e)
}

/// Which end of the allowed range a search starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// The lowest place.
    Bottom,
    /// The highest place (as loaders put the initramfs).
    Top,
}

/// A `size`-byte range `[a, a + size)` with `a` `align`-aligned, inside `[lo, hi)` and one
/// RAM entry, clear of `avoid`: the lowest or the highest there is.
struct Want<'a> {
    lo: u64,
    hi: u64,
    size: u64,
    align: u64,
    avoid: &'a [(u64, u64)],
}

impl<'a> Want<'a> {
    /// Somewhere in `[lo, hi)`; its size comes next.
    fn from(lo: u64, hi: u64) -> Want<'a> {
        Want {
            lo,
            hi,
            size: 0,
            align: 1,
            avoid: &[],
        }
    }

    /// `size` bytes, `align`-aligned, clear of `avoid`.
    fn sized(self, size: u64, align: u64, avoid: &'a [(u64, u64)]) -> Want<'a> {
        Want {
            size,
            align,
            avoid,
            ..self
        }
    }

    /// [`Want::find`], or the refusal naming `what`.
    fn place(&self, map: &[Entry], from: From, what: &'static str) -> Result<u64, BootError> {
        self.find(map, from).ok_or(BootError::NoRoom {
            what,
            bytes: self.size,
            align: self.align,
            from: self.lo,
            to: self.hi,
        })
    }

    fn find(&self, map: &[Entry], from: From) -> Option<u64> {
        // The lowest start still possible (from the bottom) or the highest end (from the top).
        let mut bound = match from {
            From::Bottom => self.lo,
            From::Top => self.hi,
        };
        loop {
            let a = match from {
                From::Bottom => align_up(bound, self.align)?,
                From::Top => bound.checked_sub(self.size)? & !(self.align - 1),
            };
            let end = a.checked_add(self.size)?;
            if a < self.lo || end > self.hi {
                return None;
            }
            let blocker = self.avoid.iter().find(|r| overlaps(**r, a, end));
            bound = match (from, blocker) {
                (_, None) if in_ram(map, a, self.size) => return Some(a),
                (From::Bottom, Some(&(_, e))) => e,
                (From::Top, Some(&(s, _))) => s,
                // Not in one RAM entry: the next entry's start, or the previous one's end.
                (From::Bottom, None) => ram(map).map(|(s, _)| s).filter(|&s| s > a).min()?,
                (From::Top, None) => ram(map).map(|(_, e)| e).filter(|&e| e < end).max()?,
            };
        }
    }
}

/// Places the zero page, command line, setup sectors, kernel and initramfs of the bzImage
/// with header `hdr` in the RAM of `map` (sanitized) from `free_from` up.
pub fn place(
    map: &[Entry],
    free_from: u64,
    hdr: &SetupHeader,
    sizes: &Sizes,
) -> Result<Placement, BootError> {
    let kernel_bytes =
        align_up(u64::from(hdr.init_size).max(sizes.kernel), PAGE).unwrap_or(u64::MAX);
    let align = u64::from(hdr.kernel_alignment);
    let (kernel, what) = if hdr.relocatable {
        (Want::from(hdr.pref_address.max(free_from), LIMIT), "kernel")
    } else {
        // Exactly at pref_address: the only aligned place in a range of the kernel's size.
        let at = hdr.pref_address;
        let end = at.saturating_add(kernel_bytes).min(LIMIT);
        (
            Want::from(at.max(free_from), end),
            "kernel (not relocatable)",
        )
    };
    let kernel = kernel
        .sized(kernel_bytes, align, &[])
        .place(map, From::Bottom, what)?;
    let kernel_range = (kernel, kernel + kernel_bytes);
    let cmdline_bytes = align_up(sizes.cmdline, PAGE).unwrap_or(u64::MAX);
    let low_bytes = PAGE + cmdline_bytes + align_up(hdr.setup_bytes(), PAGE).unwrap_or(u64::MAX);
    let zero_page = Want::from(free_from, LIMIT)
        .sized(low_bytes, PAGE, &[kernel_range])
        .place(map, From::Bottom, "zero page, command line and setup")?;
    let low_range = (zero_page, zero_page + low_bytes);
    let initrd_end = (u64::from(hdr.initrd_addr_max) + 1).min(LIMIT);
    let initrd = Want::from(free_from, initrd_end)
        .sized(sizes.initrd, PAGE, &[kernel_range, low_range])
        .place(map, From::Top, "initramfs")?;
    Ok(Placement {
        zero_page,
        cmdline: zero_page + PAGE,
        setup: zero_page + PAGE + cmdline_bytes,
        kernel,
        kernel_bytes,
        initrd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bzimage::tests::head;
    use crate::e820::{Table, RESERVED};

    fn e(addr: u64, size: u64, kind: u32) -> Entry {
        Entry { addr, size, kind }
    }

    fn hdr() -> SetupHeader {
        crate::bzimage::parse(&head()).unwrap()
    }

    const SIZES: Sizes = Sizes {
        cmdline: 300,
        kernel: 8 << 20,
        initrd: 8_011_776,
    };

    /// q35 with 512 MiB (the board), the restorer's memory below 2 MiB.
    fn board() -> Table {
        Table::from_pvh([
            e(0, 0x9_FC00, RAM),
            e(0x9_FC00, 0x400, RESERVED),
            e(0xF_0000, 0x1_0000, RESERVED),
            e(0x10_0000, 0x1FEE_0000, RAM),
            e(0x1FFE_0000, 0x2_0000, RESERVED),
            e(0xB000_0000, 0x1000_0000, RESERVED),
        ])
    }

    #[test]
    fn on_the_board_the_kernel_goes_to_16_mib_and_the_initramfs_to_the_top() {
        let p = place(board().entries(), 0x20_0000, &hdr(), &SIZES).unwrap();
        assert_eq!(
            p,
            Placement {
                zero_page: 0x20_0000,
                cmdline: 0x20_1000,
                setup: 0x20_2000,
                kernel: 0x100_0000,
                kernel_bytes: 0x3F9_8000,
                initrd: (0x1FFE_0000 - 8_011_776) & !0xFFF,
            }
        );
    }

    /// Everything stays at or above free_from, whatever the kernel prefers.
    #[test]
    fn nothing_goes_below_free_from() {
        let p = place(board().entries(), 0x130_0000, &hdr(), &SIZES).unwrap();
        assert_eq!(p.zero_page, 0x130_0000);
        assert_eq!(
            p.kernel, 0x140_0000,
            "next 2 MiB boundary after the low pages"
        );
        let p = place(board().entries(), 0x100_0000, &hdr(), &SIZES).unwrap();
        assert_eq!(p.kernel, 0x100_0000);
        assert_eq!(p.zero_page, 0x100_0000 + 0x3F9_8000, "after the kernel");
    }

    /// Parts skip holes and reserved ranges, and refuse with what did not fit.
    #[test]
    fn holes_are_skipped_and_a_full_map_is_refused_with_the_part() {
        let map = Table::from_pvh([
            e(0x10_0000, 0xF0_0000, RAM),
            e(0x100_0000, 0x1000, RESERVED),
            e(0x200_0000, 0x800_0000, RAM),
        ]);
        let p = place(map.entries(), 0x20_0000, &hdr(), &SIZES).unwrap();
        assert_eq!(p.kernel, 0x200_0000);
        assert_eq!(p.initrd, (0xA00_0000 - 8_011_776) & !0xFFF);
        let small = Table::from_pvh([e(0x10_0000, 0x400_0000, RAM)]);
        assert_eq!(
            place(small.entries(), 0x20_0000, &hdr(), &SIZES),
            Err(BootError::NoRoom {
                what: "kernel",
                bytes: 0x3F9_8000,
                align: 0x20_0000,
                from: 0x100_0000,
                to: LIMIT,
            })
        );
    }

    #[test]
    fn the_initramfs_respects_initrd_addr_max_and_the_kernel_its_alignment() {
        let big = Table::from_pvh([e(0x10_0000, 0xBFF0_0000, RAM)]);
        let mut h = hdr();
        h.initrd_addr_max = 0x37FF_FFFF;
        h.kernel_alignment = 0x100_0000;
        let p = place(big.entries(), 0x110_0000, &h, &SIZES).unwrap();
        assert!(p.initrd + SIZES.initrd <= 0x3800_0000);
        assert_eq!(p.initrd % 4096, 0);
        assert_eq!(p.kernel, 0x200_0000);
    }

    #[test]
    fn a_fixed_kernel_goes_to_pref_address_or_is_refused() {
        let mut h = hdr();
        h.relocatable = false;
        let p = place(board().entries(), 0x20_0000, &h, &SIZES).unwrap();
        assert_eq!(p.kernel, 0x100_0000);
        assert!(matches!(
            place(board().entries(), 0x200_0000, &h, &SIZES),
            Err(BootError::NoRoom {
                what: "kernel (not relocatable)",
                ..
            })
        ));
    }

    #[test]
    fn the_search_walks_down_and_up_across_entries() {
        let map = [
            e(0x1000, 0x3000, RAM),
            e(0x10_000, 0x2000, RAM),
            e(0x20_000, 0x1000, RAM),
        ];
        let search = |lo, size, avoid: &[(u64, u64)], from| {
            Want::from(lo, 0x100_000)
                .sized(size, 0x1000, avoid)
                .find(&map, from)
        };
        assert_eq!(search(0, 0x2000, &[], From::Bottom), Some(0x1000));
        assert_eq!(search(0, 0x3000, &[], From::Bottom), Some(0x1000));
        let first = [(0x1000, 0x3000)];
        assert_eq!(search(0, 0x2000, &first, From::Bottom), Some(0x10_000));
        assert_eq!(search(0, 0x4000, &[], From::Bottom), None);
        assert_eq!(search(0, 0x1000, &[], From::Top), Some(0x20_000));
        assert_eq!(search(0, 0x2000, &[], From::Top), Some(0x10_000));
        let second = [(0x11_000, 0x12_000)];
        assert_eq!(search(0, 0x2000, &second, From::Top), Some(0x2000));
        assert_eq!(search(0x2000, 0x3000, &[], From::Top), None);
    }
}
