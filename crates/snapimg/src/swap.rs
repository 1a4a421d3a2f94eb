//! The swap region of a lazy image: where it lies on the store, and the one set of rules
//! capture and resume check it against.

use crate::kstream::PAGE_SIZE;
use crate::verity::SwapVerity;
use alloc::format;
use alloc::string::String;
use serde::{Deserialize, Serialize};

/// Smallest swap region of a lazy image, in pages (the kernel refuses smaller swap areas).
pub const MIN_SWAP_PAGES: u64 = 10;
/// Bytes of the UUID in the region's swap header page.
pub const UUID_LEN: usize = 16;

/// The swap region of a lazy image: a raw region of the store that belongs to the image,
/// which the kernel paged user memory out to just before capture and pages it back in from
/// after restore (docs/image-format.md, "Lazy images").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapRegion {
    /// Byte offset of the region in the store (a multiple of 4096).
    pub offset: u64,
    /// Bytes of the region (a multiple of 4096, at least [`MIN_SWAP_PAGES`] pages).
    pub bytes: u64,
    /// Pages the kernel had swapped out into the region at capture
    /// (less than the region's pages: the first one is the swap header).
    pub used_pages: u64,
    /// The UUID written into the region's swap header page.
    pub uuid: [u8; UUID_LEN],
    /// The dm-verity tree every page-in is checked against; `None`: page-ins are not
    /// verified (an image made with `snapboot.noverity` or by an older snapboot).
    pub verity: Option<SwapVerity>,
}

impl SwapRegion {
    /// Byte offset just past the region, `None` if that overflows.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.bytes)
    }

    /// Error with [`BadSwapRegion`] unless the region is page aligned, at least
    /// [`MIN_SWAP_PAGES`] pages, its end does not overflow, `used_pages` is less than its
    /// pages and its verity tree fits after the data it covers ([`SwapRegion::problem`]).
    pub fn check(&self) -> Result<(), BadSwapRegion> {
        match self.problem() {
            None => Ok(()),
            Some(reason) => Err(BadSwapRegion { reason }),
        }
    }

    /// Whether the region lies inside `[start, start + len)` of the store.
    pub fn inside(&self, start: u64, len: u64) -> bool {
        self.offset >= start
            && self
                .end()
                .is_some_and(|end| start.checked_add(len).is_some_and(|e| end <= e))
    }

    /// The UUID of its swap header in the usual 8-4-4-4-12 form (as `blkid` shows it).
    pub fn uuid_text(&self) -> String {
        let h = crate::binding::hex(&self.uuid);
        format!(
            "{}-{}-{}-{}-{}",
            &h[..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    /// What is wrong with the region, if anything (see [`SwapRegion::check`]).
    pub fn problem(&self) -> Option<String> {
        let page = PAGE_SIZE as u64;
        if (self.offset | self.bytes) & (page - 1) != 0 {
            return Some(format!(
                "offset {} and size {} must be multiples of 4096",
                self.offset, self.bytes
            ));
        }
        let pages = self.bytes / page;
        if pages < MIN_SWAP_PAGES {
            return Some(format!(
                "{} bytes ({pages} pages) is smaller than {MIN_SWAP_PAGES} pages",
                self.bytes
            ));
        }
        if self.used_pages >= pages {
            return Some(format!(
                "{} used pages do not fit a region of {pages} pages (one is the swap header)",
                self.used_pages
            ));
        }
        if self.end().is_none() {
            return Some(format!(
                "offset {} + size {} overflows",
                self.offset, self.bytes
            ));
        }
        if let Some(v) = &self.verity {
            let end = v
                .hash_start
                .checked_add(v.tree_blocks())
                .filter(|&e| e <= pages);
            if v.data_blocks == 0 || v.data_blocks > v.hash_start || end.is_none() {
                return Some(format!(
                    "verity tree over {} blocks at block {} does not fit a region of {pages} pages after its data",
                    v.data_blocks, v.hash_start
                ));
            }
            if v.data_blocks <= self.used_pages {
                return Some(format!(
                    "verity covers {} blocks, fewer than the {} used pages and the header",
                    v.data_blocks, self.used_pages
                ));
            }
        }
        None
    }
}

/// A swap region that breaks one of [`SwapRegion::check`]'s rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid swap region: {reason}")]
pub struct BadSwapRegion {
    /// The rule broken, with its numbers.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(offset: u64, bytes: u64, used_pages: u64) -> SwapRegion {
        SwapRegion {
            offset,
            bytes,
            used_pages,
            uuid: [1; UUID_LEN],
            verity: None,
        }
    }

    #[test]
    fn each_rule_names_its_numbers() {
        let page = PAGE_SIZE as u64;
        assert_eq!(region(page, 16 * page, 15).problem(), None);
        for (r, want) in [
            (
                region(100, 16 * page, 0),
                "offset 100 and size 65536 must be",
            ),
            (
                SwapRegion {
                    verity: Some(SwapVerity {
                        data_blocks: 10,
                        hash_start: 16,
                        root: [0; 32],
                        salt: [0; 32],
                    }),
                    ..region(page, 16 * page, 3)
                },
                "verity tree over 10 blocks at block 16 does not fit a region of 16 pages",
            ),
            (
                SwapRegion {
                    verity: Some(SwapVerity {
                        data_blocks: 3,
                        hash_start: 10,
                        root: [0; 32],
                        salt: [0; 32],
                    }),
                    ..region(page, 16 * page, 3)
                },
                "verity covers 3 blocks, fewer than the 3 used pages",
            ),
            (
                region(page, 9 * page, 0),
                "36864 bytes (9 pages) is smaller than 10 pages",
            ),
            (
                region(page, 16 * page, 16),
                "16 used pages do not fit a region of 16 pages",
            ),
            (region(u64::MAX / page * page, 16 * page, 0), "overflows"),
        ] {
            let p = r.problem().expect("a problem");
            assert!(p.contains(want), "{p}");
            assert_eq!(
                r.check().unwrap_err().to_string(),
                format!("invalid swap region: {p}")
            );
        }
    }

    #[test]
    fn inside_checks_both_ends_and_the_uuid_reads_as_blkid_shows_it() {
        let page = PAGE_SIZE as u64;
        let r = region(4 * page, 16 * page, 3);
        assert!(r.inside(4 * page, 16 * page));
        assert!(r.inside(0, 20 * page));
        assert!(!r.inside(5 * page, 40 * page), "starts before");
        assert!(!r.inside(0, 19 * page), "ends after");
        assert!(!r.inside(u64::MAX - page, 2 * page), "no overflow");
        assert_eq!(r.uuid_text(), "01010101-0101-0101-0101-010101010101");
    }
}
