//! The boot log: what the device's boots did with the store's images, kept beside the
//! superblocks so a boot can record an attempt with one block write instead of a commit.
//!
//! Resume records each restore attempt here *before* the kernel takes over, and the restored
//! system confirms it; an image restored again and again without a confirmation (it restores,
//! then hangs or panics) is skipped once it reaches the limit (the crash-loop guard). An
//! update marks every image committed so far as stale (`stale_through`) with one write, so
//! the first boot after it does not even try them.
//!
//! ```text
//! cluster 0:  block 0  superblock A        block 2  boot log slot 0
//!             block 1  superblock B        block 3  boot log slot 1
//!
//! boot log slot (one 4 KiB block):
//! +--------+--------+--------+------------------------+----------------------+
//! | magic  | seq    | len    | payload (postcard)     | BLAKE3 of the bytes  |
//! | 8 B    | u64 LE | u32 LE | len bytes              | before it: 32 B      |
//! +--------+--------+--------+------------------------+----------------------+
//! ```
//!
//! A write goes to the slot the newest valid one is not in, with the next `seq`, and is
//! synced; a torn write fails its checksum and the other slot still holds the previous log.
//! A store that never had a boot log (zeros, or an older snapboot's store) reads as an
//! empty log. The log is never part of a commit: capture, gc and compaction leave it alone.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::store::{newest_superblock, Store};
use serde::{Deserialize, Serialize};
use storelayout::{decode, encode, BLOCK};

/// Boot log slot magic.
pub const BOOTLOG_MAGIC: &[u8; 8] = b"SBBOOTL\0";
/// The first of the two slots' blocks.
const FIRST_SLOT_BLOCK: u64 = 2;
/// Header bytes before the payload.
const HEADER: usize = 20;
/// Checksum bytes after the payload.
const SUM: usize = 32;
/// Largest payload a slot holds.
pub const BOOTLOG_MAX_PAYLOAD: usize = BLOCK as usize - HEADER - SUM;

/// Restores of one image that no boot has confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempts {
    /// The image's name.
    pub name: String,
    /// The generation that committed it (a re-captured image of the same name starts at 0).
    pub generation: u64,
    /// Restores since the last confirmation.
    pub unconfirmed: u32,
    /// Seconds since the epoch of the latest attempt (the restoring kernel's clock).
    pub last_unix: u64,
}

/// What the boots did: see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BootLog {
    /// Write counter; the newer slot wins.
    #[serde(skip)]
    pub seq: u64,
    /// Images committed at or before this store generation are stale (0: none).
    pub stale_through: u64,
    /// Unconfirmed restores, per image.
    pub attempts: Vec<Attempts>,
    /// The latest boot's own record, opaque to the store (snapboot keeps the outcome of a
    /// boot that another kernel continues: a restore, a restore kernel's hand-over).
    pub last_boot: Vec<u8>,
}

impl BootLog {
    /// Unconfirmed restores of image `name` committed at `generation`.
    pub fn unconfirmed(&self, name: &str, generation: u64) -> u32 {
        self.attempts
            .iter()
            .find(|a| a.name == name && a.generation == generation)
            .map_or(0, |a| a.unconfirmed)
    }

    /// Counts one more restore of `name` at `generation`, at `unix` seconds.
    pub fn attempt(&mut self, name: &str, generation: u64, unix: u64) -> u32 {
        self.attempts
            .retain(|a| a.name != name || a.generation == generation);
        match self.attempts.iter_mut().find(|a| a.name == name) {
            Some(a) => {
                a.unconfirmed = a.unconfirmed.saturating_add(1);
                a.last_unix = unix;
                a.unconfirmed
            }
            None => {
                self.attempts.push(Attempts {
                    name: name.into(),
                    generation,
                    unconfirmed: 1,
                    last_unix: unix,
                });
                1
            }
        }
    }

    /// A restore of `name` at `generation` came up: its count starts again. Returns how many
    /// restores this confirms (0: none was pending).
    pub fn confirm(&mut self, name: &str, generation: u64) -> u32 {
        let n = self.unconfirmed(name, generation);
        self.attempts
            .retain(|a| !(a.name == name && a.generation == generation));
        n
    }

    /// Whether an image committed at `generation` is stale.
    pub fn is_stale(&self, generation: u64) -> bool {
        generation <= self.stale_through
    }

    /// Forgets the counts of images the store no longer has (by name and generation).
    pub fn keep_only(&mut self, images: &[(String, u64)]) {
        self.attempts.retain(|a| {
            images
                .iter()
                .any(|(n, g)| *n == a.name && *g == a.generation)
        });
    }

    fn encode_slot(&self) -> Result<Vec<u8>, StoreError> {
        let payload = encode(self, "boot log")?;
        if payload.len() > BOOTLOG_MAX_PAYLOAD {
            return Err(StoreError::Geometry(format!(
                "the boot log needs {} bytes, a slot holds {BOOTLOG_MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let mut b = vec![0u8; BLOCK as usize];
        b[0..8].copy_from_slice(BOOTLOG_MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b[HEADER..HEADER + payload.len()].copy_from_slice(&payload);
        let end = HEADER + payload.len();
        let sum = blake3::hash(&b[..end]);
        b[end..end + SUM].copy_from_slice(sum.as_bytes());
        Ok(b)
    }

    /// A slot's log, or `None` when it holds none (no magic, torn, damaged).
    fn decode_slot(b: &[u8]) -> Option<BootLog> {
        if b.len() < HEADER + SUM || &b[0..8] != BOOTLOG_MAGIC {
            return None;
        }
        let seq = u64::from_le_bytes(b[8..16].try_into().ok()?);
        let len = u32::from_le_bytes(b[16..20].try_into().ok()?) as usize;
        if len > BOOTLOG_MAX_PAYLOAD || HEADER + len + SUM > b.len() {
            return None;
        }
        let end = HEADER + len;
        if blake3::hash(&b[..end]).as_bytes() != &b[end..end + SUM] {
            return None;
        }
        let mut log: BootLog = decode(&b[HEADER..end], "boot log").ok()?;
        log.seq = seq;
        Some(log)
    }
}

/// The byte offsets of the two slots, for clusters of `cluster_blocks` blocks.
fn slots(cluster_blocks: u32) -> Result<[u64; 2], StoreError> {
    if u64::from(cluster_blocks) < FIRST_SLOT_BLOCK + 2 {
        return Err(StoreError::Geometry(format!(
            "clusters of {cluster_blocks} blocks leave no room for the boot log (it needs 4)"
        )));
    }
    Ok([FIRST_SLOT_BLOCK * BLOCK, (FIRST_SLOT_BLOCK + 1) * BLOCK])
}

/// The newest valid slot's log (an empty log when neither is valid) and the slot's index.
fn read_slots<M: Medium>(
    medium: &M,
    cluster_blocks: u32,
) -> Result<(BootLog, Option<usize>), StoreError> {
    let mut best: Option<(BootLog, usize)> = None;
    for (i, at) in slots(cluster_blocks)?.into_iter().enumerate() {
        let mut b = vec![0u8; BLOCK as usize];
        medium
            .read_at(&mut b, at)
            .map_err(StoreError::io(format!("reading boot log slot {i}")))?;
        if let Some(log) = BootLog::decode_slot(&b) {
            if best.as_ref().is_none_or(|(l, _)| log.seq > l.seq) {
                best = Some((log, i));
            }
        }
    }
    Ok(match best {
        Some((log, i)) => (log, Some(i)),
        None => (BootLog::default(), None),
    })
}

/// Writes `log` with the next sequence number into the slot the newest one is not in, and
/// syncs.
fn write_slots<M: Medium>(
    medium: &mut M,
    cluster_blocks: u32,
    log: &BootLog,
) -> Result<(), StoreError> {
    let (current, slot) = read_slots(medium, cluster_blocks)?;
    let mut log = log.clone();
    log.seq = current.seq + 1;
    let b = log.encode_slot()?;
    let target = match slot {
        Some(0) => 1,
        _ => 0,
    };
    let at = slots(cluster_blocks)?[target];
    medium
        .write_at(&b, at)
        .map_err(StoreError::io(format!("writing boot log slot {target}")))?;
    medium
        .sync()
        .map_err(StoreError::io("syncing the boot log"))
}

/// Reads and changes the boot log of the store on `medium` without reading its catalog
/// (what a restored system does to confirm its restore: four blocks read, one written).
/// The medium must hold a store (a valid superblock): nothing else is ever written.
pub fn update_boot_log<M: Medium, T>(
    medium: &mut M,
    change: impl FnOnce(&mut BootLog) -> T,
) -> Result<T, StoreError> {
    let cluster_blocks = newest_superblock(medium)?.cluster_blocks;
    let (mut log, _) = read_slots(medium, cluster_blocks)?;
    let out = change(&mut log);
    write_slots(medium, cluster_blocks, &log)?;
    Ok(out)
}

impl<M: Medium> Store<M> {
    /// The boot log (empty when none was ever written).
    pub fn boot_log(&self) -> Result<BootLog, StoreError> {
        Ok(read_slots(&self.medium, self.sb.cluster_blocks)?.0)
    }

    /// Writes `log` as the newest boot log and syncs. Counts of images the catalog no
    /// longer holds are dropped first.
    pub fn write_boot_log(&mut self, log: &BootLog) -> Result<(), StoreError> {
        let mut log = log.clone();
        let live: Vec<(String, u64)> = self
            .catalog
            .images
            .iter()
            .map(|i| (i.name.clone(), i.generation))
            .collect();
        log.keep_only(&live);
        write_slots(&mut self.medium, self.sb.cluster_blocks, &log)
    }

    /// Reads the boot log, changes it with `change` and writes it back; returns what
    /// `change` returned.
    pub fn update_boot_log<T>(
        &mut self,
        change: impl FnOnce(&mut BootLog) -> T,
    ) -> Result<T, StoreError> {
        let mut log = self.boot_log()?;
        let out = change(&mut log);
        self.write_boot_log(&log)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::{FailingMedium, MemMedium};
    use crate::store::FormatOptions;

    fn store() -> Store<MemMedium> {
        Store::format(MemMedium::new(64 << 20), FormatOptions::default()).unwrap()
    }

    #[test]
    fn a_store_without_a_boot_log_reads_an_empty_one() {
        let s = store();
        assert_eq!(s.boot_log().unwrap(), BootLog::default());
    }

    #[test]
    fn attempts_count_per_image_and_generation_and_a_confirmation_resets_them() {
        let mut log = BootLog::default();
        assert_eq!(log.attempt("current", 5, 100), 1);
        assert_eq!(log.attempt("current", 5, 101), 2);
        assert_eq!(log.attempt("factory", 2, 102), 1);
        assert_eq!(log.unconfirmed("current", 5), 2);
        // A re-captured image of the same name starts again.
        assert_eq!(log.attempt("current", 9, 103), 1);
        assert_eq!(log.unconfirmed("current", 5), 0);
        assert_eq!(log.confirm("current", 9), 1);
        assert_eq!(log.unconfirmed("current", 9), 0);
        assert_eq!(log.confirm("current", 9), 0);
        assert_eq!(log.unconfirmed("factory", 2), 1);
    }

    #[test]
    fn the_log_survives_reopening_and_alternates_slots() {
        let mut s = store();
        for i in 1..=5u32 {
            s.update_boot_log(|l| {
                l.stale_through = u64::from(i);
                l.last_boot = vec![i as u8; 10];
            })
            .unwrap();
            let s2 = Store::open(s.medium().clone()).unwrap();
            let log = s2.boot_log().unwrap();
            assert_eq!(log.stale_through, u64::from(i));
            assert_eq!(log.seq, u64::from(i));
        }
        // The slots alternate: both hold a valid log, the newer wins.
        let (_, slot) = read_slots(s.medium(), s.sb.cluster_blocks).unwrap();
        assert_eq!(slot, Some(0));
    }

    #[test]
    fn counts_of_images_the_store_lost_are_dropped_on_write() {
        let mut s = store();
        s.update_boot_log(|l| {
            l.attempt("gone", 3, 1);
        })
        .unwrap();
        assert!(s.boot_log().unwrap().attempts.is_empty());
    }

    #[test]
    fn a_torn_or_flipped_slot_leaves_the_previous_log() {
        let mut s = store();
        s.update_boot_log(|l| l.stale_through = 7).unwrap();
        let good = s.medium().clone();
        // A power cut during the write, whatever part of the block lands: the log read back
        // is the old one or the new one.
        for torn in (0..BLOCK as usize).step_by(97) {
            let mut m = Store::open(FailingMedium::new(good.clone(), 0, torn)).unwrap();
            assert!(m.update_boot_log(|l| l.stale_through = 8).is_err());
            let after = Store::open(m.into_medium().inner).unwrap();
            let st = after.boot_log().unwrap().stale_through;
            // Past the checksum the rest of the block is zeros either way: the write landed.
            assert!(
                st == 7 || (st == 8 && torn > HEADER + SUM),
                "torn at {torn}: {st}"
            );
        }
        // A flipped byte in the newest slot: the older one is read.
        let mut s2 = Store::open(good).unwrap();
        s2.update_boot_log(|l| l.stale_through = 9).unwrap();
        let mut m = s2.into_medium();
        let mut b = [0u8; 1];
        m.read_at(&mut b, 3 * BLOCK + 30).unwrap();
        m.write_at(&[b[0] ^ 1], 3 * BLOCK + 30).unwrap();
        assert_eq!(Store::open(m).unwrap().boot_log().unwrap().stale_through, 7);
    }

    #[test]
    fn the_log_is_updated_on_a_bare_medium_and_never_on_one_without_a_store() {
        let s = store();
        let mut m = s.into_medium();
        update_boot_log(&mut m, |l| l.attempt("x", 1, 5)).unwrap();
        let log = update_boot_log(&mut m, |l| l.clone()).unwrap();
        assert_eq!(log.attempts.len(), 1);
        let mut zeros = MemMedium::new(1 << 20);
        let e = update_boot_log(&mut zeros, |l| l.stale_through = 1).unwrap_err();
        assert!(matches!(e, StoreError::NotAStore), "{e}");
        let mut b = vec![0u8; 4 * BLOCK as usize];
        zeros.read_at(&mut b, 0).unwrap();
        assert!(
            b.iter().all(|&x| x == 0),
            "written to a medium without a store"
        );
    }

    #[test]
    fn a_store_with_two_block_clusters_has_no_room_and_says_so() {
        let s = Store::format(
            MemMedium::new(1 << 20),
            FormatOptions {
                cluster_blocks: 2,
                ..FormatOptions::default()
            },
        )
        .unwrap();
        let e = s.boot_log().unwrap_err().to_string();
        assert!(e.contains("no room for the boot log"), "{e}");
    }
}
