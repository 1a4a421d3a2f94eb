//! Where the restorer keeps what must survive until the last copy. Pages of the image that
//! land on the restorer's own memory (its program, heap and buffers: the [`Busy`] range)
//! cannot be written before the restorer stops running; they go to *safe pages* (RAM the
//! image does not use, outside the busy range, above 1 MiB: [`SafePages`]) and are listed
//! for the last copy loop ([`LastCopy`]), which moves them to their places after the
//! restorer's last instruction. The page tables the jump needs are safe pages too.
//!
//! ```text
//! LastCopy list, one safe page a node:
//!   [count][next][from0][to0][from1][to1] ... (255 pairs at most) ──► next node ──► 0
//! ```
//!
//! Physical memory is reached through [`PhysMem`]: identity mapped on the PC (the
//! program's), a fake in the tests below.

use crate::e820::Table;

/// Bytes of a page.
pub const PAGE: u64 = 4096;
/// The first PFN a safe page may have (1 MiB: below it lie firmware and the PVH data).
const FIRST_SAFE_PFN: u64 = 0x100;
/// Pairs a node of the last-copy list holds: (4096 - 16) / 16.
pub const PAIRS_PER_NODE: u64 = 255;

/// Physical memory as placing pages sees it.
pub trait PhysMem {
    /// Fills the page at `addr` with zeros.
    fn zero_page(&mut self, addr: u64);
    /// The `u64` at `addr`.
    fn read_u64(&self, addr: u64) -> u64;
    /// Writes `value` at `addr`.
    fn write_u64(&mut self, addr: u64, value: u64);
}

/// Why a page could not be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// Every page that could be a safe page is taken.
    #[error("no free page left for the restore")]
    NoSafePage,
    /// The image lists a PFN that is not RAM of this machine, or lists it twice.
    #[error("PFN {0:#x} is not RAM of this machine, or listed twice")]
    NotRam(u64),
}

/// Most ranges a [`Busy`] holds.
pub const MAX_BUSY: usize = 8;

/// The physical ranges `[start, end)` in use until the last copy: the restorer's program,
/// its heap and its buffers (one range under PVH, where they follow each other; the EFI
/// program's image, heap and read buffer lie where the firmware allocated them, and the
/// firmware's runtime data in memory the kernel counts as RAM must stay as it is until
/// the runtime services have their virtual map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    ranges: [(u64, u64); MAX_BUSY],
    len: usize,
}

impl Busy {
    /// The one range `[start, end)`.
    pub fn one(start: u64, end: u64) -> Self {
        let mut b = Busy {
            ranges: [(0, 0); MAX_BUSY],
            len: 0,
        };
        b.ranges[0] = (start, end);
        b.len = 1;
        b
    }

    /// Adds `[start, end)`; `false` (and nothing added) when [`MAX_BUSY`] are held.
    pub fn add(&mut self, start: u64, end: u64) -> bool {
        match self.ranges.get_mut(self.len) {
            Some(r) => {
                *r = (start, end);
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// The ranges `[start, end)`.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges[..self.len]
    }

    /// Whether page `pfn` overlaps a range.
    pub fn holds(&self, pfn: u64) -> bool {
        let a = pfn * PAGE;
        self.ranges[..self.len]
            .iter()
            .any(|&(start, end)| a + PAGE > start && a < end)
    }
}

/// The PFNs the image has a page at, one bit each, over a caller's bitmap.
pub struct ImagePages<'a> {
    bits: &'a mut [u64],
}

impl<'a> ImagePages<'a> {
    /// An empty set over `bits` (cleared), for PFNs below `64 * bits.len()`.
    pub fn new(bits: &'a mut [u64]) -> Self {
        bits.fill(0);
        ImagePages { bits }
    }

    /// How many PFNs the set can hold.
    pub fn pfns(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    /// Whether the image has a page at `pfn`.
    pub fn holds(&self, pfn: u64) -> bool {
        self.bits
            .get((pfn / 64) as usize)
            .is_some_and(|w| w & (1 << (pfn % 64)) != 0)
    }

    /// Adds `pfn`, a page of the image: refused when it is not RAM of `table`, beyond the
    /// set, or already in it.
    pub fn add(&mut self, pfn: u64, table: &Table) -> Result<(), PlaceError> {
        if !table.is_ram_page(pfn) || pfn >= self.pfns() || self.holds(pfn) {
            return Err(PlaceError::NotRam(pfn));
        }
        self.bits[(pfn / 64) as usize] |= 1 << (pfn % 64);
        Ok(())
    }
}

/// Hands out safe pages, zeroed, lowest first.
pub struct SafePages<'a> {
    next: u64,
    table: &'a Table,
    busy: Busy,
    image: &'a ImagePages<'a>,
    /// Pages handed out so far.
    pub used: u64,
}

impl<'a> SafePages<'a> {
    /// Safe pages of `table`'s RAM that `image` and `busy` leave.
    pub fn new(table: &'a Table, busy: Busy, image: &'a ImagePages<'a>) -> Self {
        SafePages {
            next: FIRST_SAFE_PFN,
            table,
            busy,
            image,
            used: 0,
        }
    }

    /// The next safe page's address, zeroed through `mem`.
    pub fn take(&mut self, mem: &mut impl PhysMem) -> Result<u64, PlaceError> {
        while self.next < self.image.pfns() {
            let pfn = self.next;
            self.next += 1;
            if self.table.is_ram_page(pfn) && !self.image.holds(pfn) && !self.busy.holds(pfn) {
                self.used += 1;
                let a = pfn * PAGE;
                mem.zero_page(a);
                return Ok(a);
            }
        }
        Err(PlaceError::NoSafePage)
    }
}

/// The lowest page a CPU's start-up code may take below 1 MiB (the first 32 KiB hold the
/// real-mode interrupt table, the BIOS data area and what boot loaders keep there).
const FIRST_LOW_PFN: u64 = 0x8;
/// The end of conventional memory (640 KiB): a start-up IPI's vector names a page below.
const LOW_END_PFN: u64 = 0xa0;

/// A page below 640 KiB for the other CPUs' real-mode start-up code (x86: a start-up IPI
/// names the page it starts a CPU at): the lowest whole RAM page of `table` from 32 KiB up
/// that overlaps none of `avoid` (firmware data the kernel counts as RAM). The image's page
/// there is written last, by the last copy: the page is the restorer's until then (a busy
/// range).
pub fn low_page(table: &Table, avoid: &[(u64, u64)]) -> Option<u64> {
    (FIRST_LOW_PFN..LOW_END_PFN)
        .find(|&pfn| {
            let a = pfn * PAGE;
            table.is_ram_page(pfn) && !avoid.iter().any(|&(s, e)| a + PAGE > s && a < e)
        })
        .map(|pfn| pfn * PAGE)
}

/// The highest run of `pages` consecutive pages of `table`'s RAM, from 1 MiB up and
/// below what `image` can hold, that neither `image` nor `busy` holds: where a buffer can
/// lie while the image's pages are placed without any of them landing on it. Its address,
/// or `None` when no run is that long.
pub fn free_run(table: &Table, image: &ImagePages, busy: &Busy, pages: u64) -> Option<u64> {
    if pages == 0 {
        return None;
    }
    let limit = image.pfns();
    let mut best: Option<u64> = None;
    for e in table
        .entries()
        .iter()
        .filter(|e| e.kind == crate::e820::RAM)
    {
        let first = e.addr.div_ceil(PAGE).max(FIRST_SAFE_PFN);
        let end = ((e.addr + e.size) / PAGE).min(limit);
        // From the top of the entry down: `run` free pages end at `top`.
        let (mut top, mut run) = (end, 0u64);
        let mut pfn = end;
        while pfn > first {
            pfn -= 1;
            if image.holds(pfn) || busy.holds(pfn) {
                (top, run) = (pfn, 0);
                continue;
            }
            run += 1;
            if run == pages {
                let at = top - pages;
                if best.is_none_or(|b| at > b / PAGE) {
                    best = Some(at * PAGE);
                }
                break;
            }
        }
    }
    best
}

/// The list of (source, destination) pages the last copy loop moves, in safe pages.
#[derive(Debug, Default)]
pub struct LastCopy {
    /// The first node (0: the list is empty).
    pub head: u64,
    cur: u64,
    /// Pairs listed.
    pub count: u64,
}

impl LastCopy {
    /// Lists the page at `from` (a safe page) for `to`.
    pub fn push(
        &mut self,
        safe: &mut SafePages,
        mem: &mut impl PhysMem,
        from: u64,
        to: u64,
    ) -> Result<(), PlaceError> {
        if self.cur == 0 || mem.read_u64(self.cur) == PAIRS_PER_NODE {
            let next = safe.take(mem)?;
            if self.cur == 0 {
                self.head = next;
            } else {
                mem.write_u64(self.cur + 8, next);
            }
            self.cur = next;
        }
        let k = mem.read_u64(self.cur);
        mem.write_u64(self.cur + 16 + 16 * k, from);
        mem.write_u64(self.cur + 24 + 16 * k, to);
        mem.write_u64(self.cur, k + 1);
        self.count += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e820::{Entry, RAM, RESERVED};
    use alloc::collections::BTreeMap;
    use alloc::vec;
    use alloc::vec::Vec;

    /// Physical memory as a map of the words written; zeroed pages are remembered.
    #[derive(Default)]
    struct FakeMem {
        words: BTreeMap<u64, u64>,
        zeroed: Vec<u64>,
    }

    impl PhysMem for FakeMem {
        fn zero_page(&mut self, addr: u64) {
            assert_eq!(addr % PAGE, 0, "a page's address");
            self.words.retain(|a, _| *a < addr || *a >= addr + PAGE);
            self.zeroed.push(addr);
        }
        fn read_u64(&self, addr: u64) -> u64 {
            self.words.get(&addr).copied().unwrap_or(0)
        }
        fn write_u64(&mut self, addr: u64, value: u64) {
            self.words.insert(addr, value);
        }
    }

    /// RAM below 640 KiB and from 1 MiB to 4 MiB, a reserved hole at 2 MiB (one page).
    fn table() -> Table {
        let e = |addr, size, kind| Entry { addr, size, kind };
        Table::from_pvh([
            e(0, 0x9_f000, RAM),
            e(0x10_0000, 0x10_0000, RAM),
            e(0x20_0000, 0x1000, RESERVED),
            e(0x20_1000, 0x1f_f000, RAM),
        ])
    }

    #[test]
    fn safe_pages_skip_the_image_the_busy_range_and_what_is_not_ram() {
        let t = table();
        let mut bits = vec![0u64; 16]; // 1024 PFNs: 4 MiB
        let mut image = ImagePages::new(&mut bits);
        image.add(0x100, &t).unwrap();
        assert_eq!(
            image.add(0x100, &t),
            Err(PlaceError::NotRam(0x100)),
            "twice"
        );
        assert_eq!(
            image.add(0x200, &t),
            Err(PlaceError::NotRam(0x200)),
            "reserved"
        );
        assert_eq!(
            image.add(0x400, &t),
            Err(PlaceError::NotRam(0x400)),
            "beyond RAM"
        );
        let busy = Busy::one(0x10_1000, 0x10_3000);
        let mut mem = FakeMem::default();
        let mut safe = SafePages::new(&t, busy, &image);
        // 0x100 is the image's, 0x101 and 0x102 are busy.
        assert_eq!(safe.take(&mut mem), Ok(0x10_3000));
        assert_eq!(safe.take(&mut mem), Ok(0x10_4000));
        assert_eq!(mem.zeroed, [0x10_3000, 0x10_4000]);
        // The reserved page at 2 MiB is never handed out; the pool runs out at 4 MiB.
        let mut all = Vec::new();
        while let Ok(a) = safe.take(&mut mem) {
            all.push(a);
        }
        assert!(!all.contains(&0x20_0000));
        assert_eq!(all.last(), Some(&0x3f_f000));
        assert_eq!(safe.take(&mut mem), Err(PlaceError::NoSafePage));
        assert_eq!(safe.used as usize, 2 + all.len());
    }

    #[test]
    fn the_last_copy_list_fills_a_node_then_chains_the_next() {
        let t = table();
        let mut bits = vec![0u64; 16];
        let image = ImagePages::new(&mut bits);
        let busy = Busy::one(0, 0);
        let mut mem = FakeMem::default();
        let mut safe = SafePages::new(&t, busy, &image);
        let mut last = LastCopy::default();
        let n = PAIRS_PER_NODE + 2;
        for i in 0..n {
            last.push(&mut safe, &mut mem, 0x1000 * i, 0x8000_0000 + 0x1000 * i)
                .unwrap();
        }
        assert_eq!(last.count, n);
        // Walk the list as the last copy loop does.
        let mut pairs = Vec::new();
        let mut node = last.head;
        let mut nodes = 0;
        while node != 0 {
            nodes += 1;
            let count = mem.read_u64(node);
            for k in 0..count {
                pairs.push((
                    mem.read_u64(node + 16 + 16 * k),
                    mem.read_u64(node + 24 + 16 * k),
                ));
            }
            node = mem.read_u64(node + 8);
        }
        assert_eq!(nodes, 2);
        assert_eq!(pairs.len() as u64, n);
        assert!(pairs
            .iter()
            .enumerate()
            .all(|(i, &(f, to))| f == 0x1000 * i as u64 && to == 0x8000_0000 + f));
    }

    #[test]
    fn the_low_page_is_ram_below_640_kib_clear_of_what_is_avoided() {
        let t = table();
        assert_eq!(low_page(&t, &[]), Some(0x8000));
        assert_eq!(low_page(&t, &[(0x7000, 0x9800)]), Some(0xa000));
        let e = |addr, size, kind| Entry { addr, size, kind };
        // No RAM below 640 KiB at all (or only the first 32 KiB).
        let high = Table::from_pvh([e(0, 0x8000, RAM), e(0x10_0000, 0x10_0000, RAM)]);
        assert_eq!(low_page(&high, &[]), None);
        // The last whole page below the EBDA.
        let t = Table::from_pvh([e(0x9_e000, 0x1c00, RAM), e(0x9_fc00, 0x400, RESERVED)]);
        assert_eq!(low_page(&t, &[]), Some(0x9_e000));
    }

    #[test]
    fn a_free_run_is_the_highest_that_the_image_and_the_busy_ranges_leave() {
        let t = table();
        let mut bits = vec![0u64; 16]; // 1024 PFNs: 4 MiB
        let mut image = ImagePages::new(&mut bits);
        // The image has 0x3f0 and 0x3f8: the top run of 7 pages is 0x3f9..=0x3ff.
        image.add(0x3f0, &t).unwrap();
        image.add(0x3f8, &t).unwrap();
        let busy = Busy::one(0x10_0000, 0x18_0000);
        assert_eq!(free_run(&t, &image, &busy, 7), Some(0x3f9 * PAGE));
        assert_eq!(free_run(&t, &image, &busy, 1), Some(0x3ff * PAGE));
        // 8 pages fit neither above 0x3f8 nor between the image's two: below 0x3f0.
        assert_eq!(free_run(&t, &image, &busy, 8), Some(0x3e8 * PAGE));
        // The reserved page at 2 MiB splits the RAM: 0x201..0x3f0 is the longest run.
        assert_eq!(free_run(&t, &image, &busy, 0x1ef), Some(0x201 * PAGE));
        assert_eq!(free_run(&t, &image, &busy, 0x1f0), None);
        // Below 2 MiB only 0x180..0x200 is free of the busy range: 0x80 pages, but the
        // higher run wins.
        assert_eq!(free_run(&t, &image, &busy, 0x80), Some(0x370 * PAGE));
        let mut none = [0u64; 16];
        let all = ImagePages::new(&mut none);
        let mut tight = Busy::one(0x10_0000, 0x18_0000);
        tight.add(0x20_1000, 0x40_0000);
        assert_eq!(free_run(&t, &all, &tight, 0x80), Some(0x180 * PAGE));
        assert_eq!(free_run(&t, &all, &tight, 0x81), None);
        assert_eq!(free_run(&t, &image, &busy, 0x200), None);
        assert_eq!(free_run(&t, &image, &busy, 0), None);
    }
}
