//! The dm-verity hash tree over a lazy image's swap area (docs/image-format.md, "Lazy
//! images").
//!
//! The restored kernel reads swapped-out pages back from the store long after the image
//! itself was checked. So that a damaged block fails loudly instead of handing the
//! application wrong bytes, capture builds a dm-verity tree (format version 1, SHA-256,
//! 4096-byte data and hash blocks, salt hashed first) over the swap area and reads it back
//! through a `verity` target; its root hash and salt are in the image's description, which
//! the store's catalog checksum and an image's signed digest cover.
//!
//! The tree is laid out the way the kernel's `verity_ctr` expects on the hash device,
//! starting at `hash_start` (in 4096-byte blocks), the top level first:
//!
//! ```text
//!   | level L-1 (1 block) | level L-2 | ... | level 0: one digest per data block |
//!   level i block j holds the digests of blocks j*128 .. j*128+127 of level i-1
//!   (level -1 = the data); each block is zero padded; root = H(salt || top block)
//! ```

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use sha2::{Digest, Sha256};

/// Bytes of a data or hash block.
pub const BLOCK: usize = 4096;
/// Bytes of a SHA-256 digest.
pub const DIGEST: usize = 32;
/// Digests in one hash block.
const PER_BLOCK: u64 = (BLOCK / DIGEST) as u64;
const PER_BLOCK_BITS: u32 = PER_BLOCK.trailing_zeros();

/// What the kernel's verity target needs besides the devices, as the image's description
/// keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SwapVerity {
    /// Data blocks covered, from the start of the swap area (block 0 is its header page).
    pub data_blocks: u64,
    /// First block of the tree, counted from the start of the region.
    pub hash_start: u64,
    /// The root digest.
    pub root: [u8; DIGEST],
    /// The salt hashed in front of every block.
    pub salt: [u8; DIGEST],
}

impl SwapVerity {
    /// The `verity` target's parameters for a table line, with the data and hash device
    /// both `dev` (a device whose block 0 is the region's first block).
    pub fn table_params(&self, dev: &str) -> String {
        format!(
            "1 {dev} {dev} {BLOCK} {BLOCK} {} {} sha256 {} {}",
            self.data_blocks,
            self.hash_start,
            hex(&self.root),
            hex(&self.salt)
        )
    }

    /// One data block under each block of the tree's lowest level: reading these through
    /// the verity target makes the kernel read and check every block of the tree once.
    pub fn one_block_per_hash_block(&self) -> impl Iterator<Item = u64> {
        (0..self.data_blocks).step_by(PER_BLOCK as usize)
    }

    /// Blocks of the tree.
    pub fn tree_blocks(&self) -> u64 {
        tree_blocks(self.data_blocks)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Levels of the tree over `data_blocks` blocks, as `verity_ctr` computes them.
pub fn levels(data_blocks: u64) -> u32 {
    let mut levels = 0u32;
    if data_blocks > 0 {
        while PER_BLOCK_BITS * levels < 64 && (data_blocks - 1) >> (PER_BLOCK_BITS * levels) != 0 {
            levels += 1;
        }
    }
    levels
}

/// Blocks of level `level` of the tree over `data_blocks` blocks.
fn level_blocks(data_blocks: u64, level: u32) -> u64 {
    let shift = PER_BLOCK_BITS * (level + 1);
    if shift >= 64 {
        return 1;
    }
    data_blocks.div_ceil(1u64 << shift)
}

/// Blocks the whole tree over `data_blocks` blocks takes.
pub fn tree_blocks(data_blocks: u64) -> u64 {
    (0..levels(data_blocks))
        .map(|l| level_blocks(data_blocks, l))
        .sum()
}

/// The largest number of data blocks that, with their tree, fit `region_blocks`.
pub fn data_blocks_fitting(region_blocks: u64) -> u64 {
    // The tree is under 1/127 of the data: start there and step down to the exact fit.
    let mut d = region_blocks.saturating_sub(region_blocks.div_ceil(PER_BLOCK - 1) + 1);
    while d < region_blocks && d + 1 + tree_blocks(d + 1) <= region_blocks {
        d += 1;
    }
    while d > 0 && d + tree_blocks(d) > region_blocks {
        d -= 1;
    }
    d
}

fn hash_block(salt: &[u8; DIGEST], block: &[u8]) -> [u8; DIGEST] {
    let mut h = Sha256::new();
    h.update(salt);
    h.update(block);
    h.finalize().into()
}

/// Builds the tree over `data_blocks` blocks that `read` supplies in order (`read(i, buf)`
/// fills `buf` with block `i`; an error stops the build). Returns the tree, the way it goes
/// onto the hash device (top level first), and the root digest.
pub fn build<E>(
    data_blocks: u64,
    salt: &[u8; DIGEST],
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<(Vec<u8>, [u8; DIGEST]), E> {
    let mut block = vec![0u8; BLOCK];
    // Level 0: the digest of every data block.
    let mut digests = Vec::with_capacity(data_blocks as usize);
    for i in 0..data_blocks {
        read(i, &mut block)?;
        digests.push(hash_block(salt, &block));
    }
    let levels = levels(data_blocks);
    if levels == 0 {
        let root = digests.first().copied().unwrap_or([0; DIGEST]);
        return Ok((Vec::new(), root));
    }
    let mut stored: Vec<Vec<u8>> = Vec::with_capacity(levels as usize);
    for _ in 0..levels {
        let mut level = Vec::new();
        let mut next = Vec::new();
        for group in digests.chunks(PER_BLOCK as usize) {
            let mut b = vec![0u8; BLOCK];
            for (k, d) in group.iter().enumerate() {
                b[k * DIGEST..(k + 1) * DIGEST].copy_from_slice(d);
            }
            next.push(hash_block(salt, &b));
            level.extend_from_slice(&b);
        }
        stored.push(level);
        digests = next;
    }
    debug_assert_eq!(digests.len(), 1);
    let tree: Vec<u8> = stored.into_iter().rev().flatten().collect();
    Ok((tree, digests[0]))
}

/// Checks the top block of a tree against the root: `top` is the tree's first block (or,
/// for a one-block area, the data block itself). A cheap guard that the tree on the store
/// is the one the image was made with.
pub fn top_matches(v: &SwapVerity, top: &[u8]) -> bool {
    top.len() == BLOCK && hash_block(&v.salt, top) == v.root
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(i: u64, b: &mut [u8]) -> Result<(), ()> {
        b.fill(0);
        b[..8].copy_from_slice(&i.to_le_bytes());
        b[100] = (i * 7) as u8;
        Ok(())
    }

    #[test]
    fn levels_and_sizes_follow_the_kernel() {
        assert_eq!(levels(0), 0);
        assert_eq!(levels(1), 0);
        assert_eq!(levels(2), 1);
        assert_eq!(levels(128), 1);
        assert_eq!(levels(129), 2);
        assert_eq!(levels(128 * 128), 2);
        assert_eq!(levels(128 * 128 + 1), 3);
        assert_eq!(tree_blocks(128), 1);
        assert_eq!(tree_blocks(129), 2 + 1);
        assert_eq!(tree_blocks(40_000), 313 + 3 + 1);
    }

    #[test]
    fn the_fit_leaves_room_for_the_tree_and_no_more() {
        for region in [10u64, 129, 130, 131, 1000, 16_384, 16_513, 131_072, 1 << 20] {
            let d = data_blocks_fitting(region);
            assert!(d + tree_blocks(d) <= region, "{region}");
            assert!(
                d + 1 + tree_blocks(d + 1) > region,
                "{region}: {d} is not the largest"
            );
        }
    }

    #[test]
    fn a_two_level_tree_is_laid_out_top_first_and_rooted_in_the_top_block() {
        let salt = [9u8; DIGEST];
        let n = 300; // 3 level-0 blocks, 1 level-1 block
        let (tree, root) = build(n, &salt, data).unwrap();
        assert_eq!(tree.len(), (1 + 3) * BLOCK);
        let mut b = vec![0u8; BLOCK];
        // Level 0 starts at block 1; its second block holds data block 128's digest first.
        data(128, &mut b).unwrap();
        assert_eq!(&tree[2 * BLOCK..2 * BLOCK + DIGEST], &hash_block(&salt, &b));
        // Data block 299 is the 44th digest of level 0's third block, then zero padding.
        data(299, &mut b).unwrap();
        let at = 3 * BLOCK + 43 * DIGEST;
        assert_eq!(&tree[at..at + DIGEST], &hash_block(&salt, &b));
        assert!(tree[at + DIGEST..4 * BLOCK].iter().all(|&x| x == 0));
        // The top block holds the digests of the three level-0 blocks.
        for k in 0..3 {
            let child = &tree[(1 + k) * BLOCK..(2 + k) * BLOCK];
            assert_eq!(
                &tree[k * DIGEST..(k + 1) * DIGEST],
                &hash_block(&salt, child)
            );
        }
        let v = SwapVerity {
            data_blocks: n,
            hash_start: 400,
            root,
            salt,
        };
        assert!(top_matches(&v, &tree[..BLOCK]));
        let mut bad = tree[..BLOCK].to_vec();
        bad[5] ^= 1;
        assert!(!top_matches(&v, &bad));
        assert_eq!(v.tree_blocks(), 4);
    }

    #[test]
    fn every_data_byte_changes_the_root_and_the_salt_does_too() {
        let salt = [1u8; DIGEST];
        let (_, root) = build(200, &salt, data).unwrap();
        let (_, flipped) = build(200, &salt, |i, b: &mut [u8]| {
            data(i, b)?;
            if i == 150 {
                b[4000] ^= 0x10;
            }
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_ne!(root, flipped);
        let (_, other_salt) = build(200, &[2u8; DIGEST], data).unwrap();
        assert_ne!(root, other_salt);
        // One block: no tree, the root is the block's own digest.
        let (tree, one) = build(1, &salt, data).unwrap();
        assert!(tree.is_empty());
        let mut b = vec![0u8; BLOCK];
        data(0, &mut b).unwrap();
        assert_eq!(one, hash_block(&salt, &b));
    }

    #[test]
    fn a_read_error_stops_the_build() {
        let r = build(10, &[0; DIGEST], |i, _b: &mut [u8]| {
            if i == 4 {
                Err("bad block 4")
            } else {
                Ok(())
            }
        });
        assert_eq!(r.unwrap_err(), "bad block 4");
    }

    #[test]
    fn the_table_line_names_both_devices_and_hex_digests() {
        let v = SwapVerity {
            data_blocks: 1000,
            hash_start: 4000,
            root: [0xab; DIGEST],
            salt: [0x01; DIGEST],
        };
        let p = v.table_params("254:3");
        assert!(
            p.starts_with("1 254:3 254:3 4096 4096 1000 4000 sha256 abab"),
            "{p}"
        );
        assert!(p.ends_with(&"01".repeat(32)), "{p}");
    }

    #[test]
    fn one_block_per_hash_block_covers_every_lowest_level_block() {
        let v = SwapVerity {
            data_blocks: 300,
            hash_start: 400,
            root: [0; DIGEST],
            salt: [0; DIGEST],
        };
        let blocks: Vec<u64> = v.one_block_per_hash_block().collect();
        assert_eq!(blocks, vec![0, 128, 256]);
        assert_eq!(blocks.len() as u64, level_blocks(300, 0));
    }
}
