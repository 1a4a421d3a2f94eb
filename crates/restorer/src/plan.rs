//! Where every page of an image goes. The store keeps an image's pages in stream order as
//! references into chunks (or "all zero"); the kernel's PFN index says which physical page
//! each data page belongs to. The plan turns both into copies grouped by chunk, in the
//! order the chunks lie on the disk, so each chunk is read and decompressed once and the
//! disk is read front to back, whatever the stream order and however much the image
//! dedupes.

use alloc::vec::Vec;

/// One page to place: slot `slot` of chunk `chunk` goes to `pfn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Where the chunk lies: (cluster, byte offset in it); the sort key.
    pub at: (u64, u32),
    /// The chunk's id.
    pub chunk: u64,
    /// The page's slot in the chunk.
    pub slot: u16,
    /// The physical page it goes to.
    pub pfn: u64,
}

/// The image's pages, as copies from chunks and pages to zero.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Copies, grouped by chunk in disk order.
    pub targets: Vec<Target>,
    /// Pages that are all zero.
    pub zeros: Vec<u64>,
}

impl Plan {
    /// The copies grouped by chunk: each group is one chunk's targets.
    pub fn by_chunk(&self) -> impl Iterator<Item = &[Target]> {
        self.targets.chunk_by(|a, b| a.chunk == b.chunk)
    }
}

/// The first PFN of a run of `pages` consecutive PFNs that a chunk's `group` of targets
/// fills slot by slot (slot i to PFN first + i, each slot once): such a chunk can be
/// unpacked straight into its pages, with no copy. `None` for any other group.
pub fn in_place(group: &[Target], pages: u16) -> Option<u64> {
    let first = group.first()?.pfn;
    let whole = group.len() == usize::from(pages)
        && group
            .iter()
            .enumerate()
            .all(|(i, t)| usize::from(t.slot) == i && t.pfn == first + i as u64);
    whole.then_some(first)
}

/// Why an image's pages cannot be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// The page list's data pages and the PFN index's data entries differ in number.
    Count {
        /// Data pages in the page list.
        pages: u64,
        /// PFN index entries with a data page.
        pfns: u64,
    },
    /// A page names a chunk the catalog does not have.
    Chunk {
        /// Its data page number.
        page: u64,
        /// The chunk id.
        chunk: u64,
    },
}

impl core::fmt::Display for PlanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            PlanError::Count { pages, pfns } => write!(
                f,
                "the page list has {pages} data pages, the kernel's PFN index {pfns}"
            ),
            PlanError::Chunk { page, chunk } => {
                write!(
                    f,
                    "data page {page} is in chunk {chunk}, which the catalog lacks"
                )
            }
        }
    }
}

/// The plan for an image whose data pages are `data` (stream order: `None` for all zero,
/// else (chunk, slot)) and whose PFN index is `pfns` ((PFN, listed as zero without a data
/// page)). `locate` gives a chunk's place on the disk.
pub fn plan(
    data: impl IntoIterator<Item = Option<(u64, u16)>>,
    pfns: impl IntoIterator<Item = (u64, bool)>,
    locate: impl Fn(u64) -> Option<(u64, u32)>,
) -> Result<Plan, PlanError> {
    let mut plan = Plan::default();
    let mut data = data.into_iter();
    let (mut page, mut listed) = (0u64, 0u64);
    for (pfn, zero_listed) in pfns {
        if zero_listed {
            plan.zeros.push(pfn);
            continue;
        }
        listed += 1;
        match data.next() {
            Some(None) => plan.zeros.push(pfn),
            Some(Some((chunk, slot))) => {
                let at = locate(chunk).ok_or(PlanError::Chunk { page, chunk })?;
                plan.targets.push(Target {
                    at,
                    chunk,
                    slot,
                    pfn,
                });
            }
            None => continue,
        }
        page += 1;
    }
    let pages = page + data.count() as u64;
    if pages != listed {
        return Err(PlanError::Count {
            pages,
            pfns: listed,
        });
    }
    plan.targets.sort_unstable_by_key(|t| (t.at, t.slot, t.pfn));
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locate(chunk: u64) -> Option<(u64, u32)> {
        // Chunk 9 lies before chunk 3 on the disk; chunk 5 does not exist.
        match chunk {
            3 => Some((7, 0)),
            9 => Some((2, 4096)),
            _ => None,
        }
    }

    #[test]
    fn pages_are_grouped_by_chunk_in_disk_order() {
        let data = [Some((3, 0)), None, Some((9, 1)), Some((3, 1)), Some((3, 0))];
        let pfns = [
            (0x100, false),
            (0x101, false),
            (0x150, true),
            (0x200, false),
            (0x201, false),
            (0x300, false),
        ];
        let p = plan(data, pfns, locate).unwrap();
        assert_eq!(p.zeros, vec![0x101, 0x150]);
        let order: Vec<(u64, u16, u64)> =
            p.targets.iter().map(|t| (t.chunk, t.slot, t.pfn)).collect();
        assert_eq!(
            order,
            vec![(9, 1, 0x200), (3, 0, 0x100), (3, 0, 0x300), (3, 1, 0x201)]
        );
        let groups: Vec<usize> = p.by_chunk().map(|g| g.len()).collect();
        assert_eq!(groups, vec![1, 3]);
    }

    #[test]
    fn a_chunk_filling_consecutive_pages_slot_by_slot_is_unpacked_in_place() {
        let t = |slot, pfn| Target {
            at: (1, 0),
            chunk: 4,
            slot,
            pfn,
        };
        assert_eq!(
            in_place(&[t(0, 0x200), t(1, 0x201), t(2, 0x202)], 3),
            Some(0x200)
        );
        // A slot missing, a gap, a slot used twice, slots out of order: copied instead.
        assert_eq!(in_place(&[t(0, 0x200), t(1, 0x201)], 3), None);
        assert_eq!(in_place(&[t(0, 0x200), t(1, 0x202), t(2, 0x203)], 3), None);
        assert_eq!(in_place(&[t(0, 0x200), t(0, 0x201), t(1, 0x202)], 3), None);
        assert_eq!(in_place(&[t(1, 0x200), t(0, 0x201)], 2), None);
        assert_eq!(in_place(&[], 0), None);
    }

    #[test]
    fn counts_that_differ_and_unknown_chunks_are_refused() {
        let two = [(0x100, false), (0x101, false)];
        assert_eq!(
            plan([Some((3, 0))], two, locate),
            Err(PlanError::Count { pages: 1, pfns: 2 })
        );
        assert_eq!(
            plan([Some((3, 0)), None, None], two, locate),
            Err(PlanError::Count { pages: 3, pfns: 2 })
        );
        assert_eq!(
            plan([None, Some((5, 0))], two, locate),
            Err(PlanError::Chunk { page: 1, chunk: 5 })
        );
    }
}
