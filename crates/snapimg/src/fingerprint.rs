//! How a block device an image is bound to ([`crate::BoundDevice`]) is fingerprinted: its
//! size and a fixed set of its blocks, hashed with BLAKE3. Capture and resume read the
//! blocks from the device file (crate `ondevice`), the restorer from its disk; the plan and
//! the digest are this module's, so all of them compute the same fingerprint.
//!
//! The plan reads the first and last 64 KiB of a device (where filesystems keep their
//! superblocks, UUIDs and build times) and [`SAMPLES`] evenly spaced 4 KiB blocks between
//! them: about 0.4 MiB, cheap enough for every power-on. It catches a rebuilt or replaced
//! filesystem (a new superblock) and most content changes; an in-place edit that touches
//! none of the sampled blocks and no superblock is not caught (docs/real-boards.md).

use alloc::vec;
use alloc::vec::Vec;

/// Bytes read at each end of a device.
pub const END_BYTES: u64 = 64 << 10;
/// Evenly spaced 4 KiB blocks sampled between the ends.
pub const SAMPLES: u64 = 62;

/// Byte offsets of the blocks the fingerprint reads from a device of `size` bytes, with
/// their lengths: both ends and [`SAMPLES`] blocks between (all of a small device).
pub fn sample_plan(size: u64) -> Vec<(u64, u64)> {
    if size <= 2 * END_BYTES + SAMPLES * 4096 {
        return vec![(0, size)];
    }
    let mut plan = vec![(0, END_BYTES)];
    for i in 1..=SAMPLES {
        let at = (size / (SAMPLES + 1) * i) & !4095;
        plan.push((at, 4096));
    }
    plan.push(((size - END_BYTES) & !4095, END_BYTES));
    plan
}

/// The fingerprint of a device of `size` bytes: BLAKE3 over the size and every block of
/// [`sample_plan`] with its offset; `read(at, buf)` fills `buf` from byte `at` of the device
/// (an error stops it).
pub fn device_digest<E>(
    size: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<[u8; 32], E> {
    let mut h = blake3::Hasher::new();
    h.update(&size.to_le_bytes());
    let mut buf = Vec::new();
    for (at, len) in sample_plan(size) {
        buf.resize(len as usize, 0);
        read(at, &mut buf)?;
        h.update(&at.to_le_bytes());
        h.update(&buf);
    }
    Ok(*h.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_plan_covers_both_ends_in_bounds() {
        assert_eq!(sample_plan(8192), vec![(0, 8192)]);
        let size = 100 << 20;
        let plan = sample_plan(size);
        assert_eq!(plan.len() as u64, SAMPLES + 2);
        assert_eq!(plan[0], (0, END_BYTES));
        assert_eq!(plan.last().copied(), Some((size - END_BYTES, END_BYTES)));
        assert!(plan
            .iter()
            .all(|(at, len)| at % 4096 == 0 && at + len <= size));
    }

    #[test]
    fn the_digest_covers_the_size_and_every_sampled_block_only() {
        let data: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        let digest = |d: &[u8]| {
            device_digest(d.len() as u64, |at, b: &mut [u8]| {
                let at = at as usize;
                b.copy_from_slice(&d[at..at + b.len()]);
                Ok::<(), ()>(())
            })
            .unwrap()
        };
        let a = digest(&data);
        let mut changed = data.clone();
        changed[10] ^= 1;
        assert_ne!(digest(&changed), a, "a superblock byte");
        let (sampled, _) = sample_plan(data.len() as u64)[5];
        let mut changed = data.clone();
        changed[sampled as usize + 9] ^= 1;
        assert_ne!(digest(&changed), a, "a sampled block");
        let mut changed = data.clone();
        changed[sampled as usize + 4096 + 9] ^= 1;
        assert_eq!(digest(&changed), a, "between samples");
        assert_ne!(digest(&data[..data.len() - 4096]), a, "the size");
        let failed = device_digest(1 << 20, |_, _| Err("bad sector"));
        assert_eq!(failed, Err("bad sector"));
    }
}
