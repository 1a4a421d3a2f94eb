//! The boot log on a medium: the store's reads and writes of the two slots beside the
//! superblocks. The format, the choice of the newest slot and of the slot a write goes to
//! are crate `storelayout`'s ([`storelayout::bootlog`]: attempts, the crash-loop guard,
//! staleness, the last boot's record), shared with the freestanding restorer; a write goes
//! to the slot the newest valid log is not in and is synced, so a torn write leaves the
//! previous log. The log is never part of a commit: capture, gc and compaction leave it
//! alone.

use crate::error::StoreError;
use crate::medium::Medium;
use crate::store::{newest_superblock, Store};
use storelayout::{BootLog, BootLogError, NewestLog};

impl From<BootLogError> for StoreError {
    fn from(e: BootLogError) -> Self {
        match e {
            BootLogError::Encode(d) => StoreError::Corrupt(d),
            other => StoreError::Geometry(other.to_string()),
        }
    }
}

/// The newest valid slot's log (an empty log when neither is valid) and the slot's index.
fn read_slots<M: Medium>(medium: &M, cluster_blocks: u32) -> Result<NewestLog, StoreError> {
    NewestLog::read(cluster_blocks, |i, at, b| {
        medium
            .read_at(b, at)
            .map_err(StoreError::io(format!("reading boot log slot {i}")))
    })
}

/// Writes `log` with the next sequence number into the slot the newest one is not in, and
/// syncs.
fn write_slots<M: Medium>(
    medium: &mut M,
    cluster_blocks: u32,
    log: &BootLog,
) -> Result<(), StoreError> {
    let w = read_slots(medium, cluster_blocks)?.next(log, cluster_blocks)?;
    medium
        .write_at(&w.block, w.at)
        .map_err(StoreError::io(format!("writing boot log slot {}", w.slot)))?;
    medium
        .sync()
        .map_err(StoreError::io("syncing the boot log"))
}

/// Reads and changes the boot log of the store on `medium` without reading its catalog
/// (what a restored system does to confirm its restore: four blocks read, one written).
/// The medium must hold a whole store (a valid superblock, and as many bytes as it
/// describes): nothing else is ever written, a truncated store included.
pub fn update_boot_log<M: Medium, T>(
    medium: &mut M,
    change: impl FnOnce(&mut BootLog) -> T,
) -> Result<T, StoreError> {
    let sb = newest_superblock(medium)?;
    let len = medium
        .size()
        .map_err(StoreError::io("reading the store's size"))?;
    let needed = sb.store_bytes();
    if needed > len {
        return Err(StoreError::Truncated { needed, len });
    }
    let cluster_blocks = sb.cluster_blocks;
    let mut log = read_slots(medium, cluster_blocks)?.log;
    let out = change(&mut log);
    write_slots(medium, cluster_blocks, &log)?;
    Ok(out)
}

impl<M: Medium> Store<M> {
    /// The boot log (empty when none was ever written).
    pub fn boot_log(&self) -> Result<BootLog, StoreError> {
        Ok(read_slots(&self.medium, self.sb.cluster_blocks)?.log)
    }

    /// Writes `log` as the newest boot log and syncs. Counts of images the catalog no
    /// longer holds are dropped first.
    pub fn write_boot_log(&mut self, log: &BootLog) -> Result<(), StoreError> {
        let mut log = log.clone();
        log.keep_only(&self.catalog);
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
    use storelayout::{BLOCK, BOOTLOG_HEADER};

    fn store() -> Store<MemMedium> {
        Store::format(MemMedium::new(64 << 20), FormatOptions::default()).unwrap()
    }

    #[test]
    fn a_truncated_store_is_refused_and_left_as_it_is() {
        let s = store();
        let mut cut = MemMedium {
            bytes: s.medium.bytes[..32 << 20].to_vec(),
        };
        let before = cut.bytes.clone();
        let e = update_boot_log(&mut cut, |l| l.stale_through = 9).unwrap_err();
        assert!(matches!(e, StoreError::Truncated { .. }), "{e}");
        assert!(cut.bytes == before, "a truncated store was written");
        // The whole store takes the change.
        let mut whole = s.medium.clone();
        update_boot_log(&mut whole, |l| l.stale_through = 9).unwrap();
    }

    #[test]
    fn a_store_without_a_boot_log_reads_an_empty_one() {
        let s = store();
        assert_eq!(s.boot_log().unwrap(), BootLog::default());
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
        let slot = read_slots(s.medium(), s.sb.cluster_blocks).unwrap().slot;
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
                st == 7 || (st == 8 && torn > BOOTLOG_HEADER + 32),
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
