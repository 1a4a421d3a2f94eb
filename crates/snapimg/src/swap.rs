//! The swap region of a lazy image: where it lies on the store, the one set of rules
//! capture and resume check it against, its swap header page, and the check that it is
//! still as its capture left it ([`check_region`], which the device's resume and the
//! restorer both make before restoring a lazy image).

use crate::kstream::PAGE_SIZE;
use crate::verity::{self, SwapVerity};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Smallest swap region of a lazy image, in pages (the kernel refuses smaller swap areas).
pub const MIN_SWAP_PAGES: u64 = 10;
/// Bytes of the UUID in the region's swap header page.
pub const UUID_LEN: usize = 16;
/// The signature the kernel looks for in the last bytes of a swap area's first page.
pub const SWAP_MAGIC: &[u8; 10] = b"SWAPSPACE2";
/// Where the UUID lies in the swap header page (`union swap_header`'s `sws_uuid`).
const UUID_AT: core::ops::Range<usize> = 1036..1036 + UUID_LEN;

/// The swap header page (`union swap_header`, include/linux/swap.h): version 1, last page,
/// no bad pages, a UUID, and the [`SWAP_MAGIC`] in the page's last 10 bytes.
pub fn swap_header(pages: u64, uuid: &[u8; UUID_LEN]) -> Vec<u8> {
    let mut p = vec![0u8; PAGE_SIZE];
    p[1024..1028].copy_from_slice(&1u32.to_le_bytes());
    let last = u32::try_from(pages - 1).unwrap_or(u32::MAX);
    p[1028..1032].copy_from_slice(&last.to_le_bytes());
    p[UUID_AT].copy_from_slice(uuid);
    p[1052..1060].copy_from_slice(b"snapboot");
    p[PAGE_SIZE - SWAP_MAGIC.len()..].copy_from_slice(SWAP_MAGIC);
    p
}

/// Why a lazy image's swap region is not the one its capture left: resume's and the
/// restorer's refusal of the image (each prefixes "lazy image: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegionMismatch {
    /// The region is not inside the raw region the store gave the image.
    #[error(
        "swap region at byte {offset} ({bytes} bytes) is not the image's own region of the store"
    )]
    Outside { offset: u64, bytes: u64 },
    /// The swap header is not the one capture wrote.
    #[error(
        "swap region at byte {at} no longer holds this image's swap area (header overwritten)"
    )]
    Header { at: u64 },
    /// The verity tree's top block does not hash to the root the description records.
    #[error("the verity tree at byte {at} does not hash to the image's root (the swap region was overwritten or damaged)")]
    Verity { at: u64 },
}

/// Checks that a lazy image's swap `region` is still as its capture left it, reading two
/// pages at most: it lies inside `own`, the raw region the store gave the image (byte
/// offset and length on the store's device; `None`: the image has none); its first page
/// carries the swap signature and the region's UUID; and the verity tree's top block (for
/// a one-block area, the block itself) hashes to the recorded root. Every other block is
/// checked by the kernel as it is paged in. `read(what, at, page)` fills `page` from byte
/// `at` of the store's device (`what`: "swap region" or "verity tree", for its error).
pub fn check_region<E: From<RegionMismatch>>(
    region: &SwapRegion,
    own: Option<(u64, u64)>,
    mut read: impl FnMut(&'static str, u64, &mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    if !own.is_some_and(|(start, len)| region.inside(start, len)) {
        return Err(RegionMismatch::Outside {
            offset: region.offset,
            bytes: region.bytes,
        }
        .into());
    }
    let mut page = vec![0u8; PAGE_SIZE];
    read("swap region", region.offset, &mut page)?;
    if &page[PAGE_SIZE - SWAP_MAGIC.len()..] != SWAP_MAGIC || page[UUID_AT] != region.uuid {
        return Err(RegionMismatch::Header { at: region.offset }.into());
    }
    if let Some(v) = &region.verity {
        let top = if verity::levels(v.data_blocks) == 0 {
            0
        } else {
            v.hash_start
        };
        let at = region.offset + top * PAGE_SIZE as u64;
        read("verity tree", at, &mut page)?;
        if !verity::top_matches(v, &page) {
            return Err(RegionMismatch::Verity { at }.into());
        }
    }
    Ok(())
}

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

    #[test]
    fn swap_header_layout_matches_the_kernel() {
        let uuid = [7u8; UUID_LEN];
        let p = swap_header(1000, &uuid);
        assert_eq!(p.len(), 4096);
        assert_eq!(&p[4086..], b"SWAPSPACE2");
        assert_eq!(u32::from_le_bytes(p[1024..1028].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(p[1028..1032].try_into().unwrap()), 999);
        assert_eq!(u32::from_le_bytes(p[1032..1036].try_into().unwrap()), 0);
        assert_eq!(&p[1036..1052], &uuid);
        assert!(p[..1024].iter().all(|&b| b == 0), "boot bits stay clear");
    }

    /// A store device of 40 pages whose region (pages 4..40) holds a swap area of 20
    /// data blocks (the header and 19 pages) and its verity tree at block 30.
    fn device() -> (Vec<u8>, SwapRegion) {
        let page = PAGE_SIZE as u64;
        let uuid = [3u8; UUID_LEN];
        let mut dev = vec![0u8; 40 * PAGE_SIZE];
        let area = 4 * PAGE_SIZE;
        dev[area..area + PAGE_SIZE].copy_from_slice(&swap_header(20, &uuid));
        for (k, b) in dev[area + PAGE_SIZE..area + 20 * PAGE_SIZE]
            .iter_mut()
            .enumerate()
        {
            *b = (k % 251) as u8;
        }
        let salt = [5u8; 32];
        let data = dev[area..area + 20 * PAGE_SIZE].to_vec();
        let (tree, root) = verity::build(20, &salt, |i, b: &mut [u8]| {
            b.copy_from_slice(&data[i as usize * PAGE_SIZE..][..PAGE_SIZE]);
            Ok::<(), ()>(())
        })
        .unwrap();
        dev[area + 30 * PAGE_SIZE..][..tree.len()].copy_from_slice(&tree);
        let region = SwapRegion {
            offset: 4 * page,
            bytes: 36 * page,
            used_pages: 12,
            uuid,
            verity: Some(SwapVerity {
                data_blocks: 20,
                hash_start: 30,
                root,
                salt,
            }),
        };
        (dev, region)
    }

    #[derive(Debug, PartialEq)]
    enum Failed {
        Read(&'static str, u64),
        Mismatch(RegionMismatch),
    }

    impl From<RegionMismatch> for Failed {
        fn from(m: RegionMismatch) -> Self {
            Failed::Mismatch(m)
        }
    }

    fn check_on(dev: &[u8], r: &SwapRegion, own: Option<(u64, u64)>) -> Result<(), Failed> {
        check_region(r, own, |what, at, page: &mut [u8]| {
            let at_us = at as usize;
            let src = dev
                .get(at_us..at_us + page.len())
                .ok_or(Failed::Read(what, at))?;
            page.copy_from_slice(src);
            Ok(())
        })
    }

    #[test]
    fn the_region_check_names_an_outside_region_a_header_a_tree_or_a_read() {
        let page = PAGE_SIZE as u64;
        let (mut dev, r) = device();
        let own = Some((4 * page, 36 * page));
        assert_eq!(check_on(&dev, &r, own), Ok(()));
        let outside = Failed::Mismatch(RegionMismatch::Outside {
            offset: 4 * page,
            bytes: 36 * page,
        });
        assert_eq!(check_on(&dev, &r, None), Err(outside));
        assert!(check_on(&dev, &r, Some((5 * page, 40 * page))).is_err());
        let other = SwapRegion {
            uuid: [4; UUID_LEN],
            ..r
        };
        let header = Failed::Mismatch(RegionMismatch::Header { at: 4 * page });
        assert_eq!(check_on(&dev, &other, own), Err(header));
        // 20 blocks' digests fit one hash block: the tree is that block, at region block 30.
        dev[(34 * page) as usize + 7] ^= 1;
        let tree = Failed::Mismatch(RegionMismatch::Verity { at: 34 * page });
        assert_eq!(check_on(&dev, &r, own), Err(tree));
        let beyond = SwapRegion {
            offset: 1 << 20,
            ..r
        };
        assert_eq!(
            check_on(&dev, &beyond, Some((0, 1 << 30))),
            Err(Failed::Read("swap region", 1 << 20))
        );
        let text = RegionMismatch::Header { at: 4096 }.to_string();
        assert!(
            text.contains("no longer holds this image's swap area"),
            "{text}"
        );
    }
}
