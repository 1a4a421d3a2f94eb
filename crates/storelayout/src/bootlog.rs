//! The boot log: what the device's boots did with the store's images, kept beside the
//! superblocks so a boot can record an attempt with one block write instead of a commit.
//! The format, the choice of the newest slot and of the slot a write goes to: the store
//! (crate `flashstore`), resume and the freestanding restorer all keep the log with this
//! code, each doing its own reads and writes.
//!
//! A restoring boot (resume, the restorer) records each restore attempt here *before* the
//! image kernel takes over, and the restored system confirms it; an image restored again and
//! again without a confirmation (it restores, then hangs or panics) is skipped once it
//! reaches the limit (the crash-loop guard). An update marks every image committed so far as
//! stale (`stale_through`) with one write, so the first boot after it does not even try them.
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
//!
//! payload: the log's fields, then (when there is one) the history: the last boots'
//! records, oldest first, as one postcard list of byte strings
//! ```
//!
//! The history follows the fields rather than being one of them so that a snapboot that
//! predates it still reads the log (postcard leaves trailing bytes unread), and a log
//! written before it reads with an empty history. It is bounded: at most [`HISTORY_MAX`]
//! records, and a write drops the oldest until the slot holds the rest.
//!
//! A write goes to the slot the newest valid one is not in, with the next `seq`, and is
//! synced; a torn write fails its checksum and the other slot still holds the previous log.
//! A store that never had a boot log (zeros, or an older snapboot's store) reads as an
//! empty log. The log is never part of a commit: capture, gc and compaction leave it alone.

use crate::catalog::Catalog;
use crate::codec::{decode, encode};
use crate::damage::Damage;
use crate::superblock::BLOCK;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Boot log slot magic.
pub const BOOTLOG_MAGIC: &[u8; 8] = b"SBBOOTL\0";
/// The first of the two slots' blocks.
const FIRST_SLOT_BLOCK: u64 = 2;
/// Header bytes before the payload.
pub const BOOTLOG_HEADER: usize = 20;
/// Checksum bytes after the payload.
const SUM: usize = 32;
/// Largest payload a slot holds.
pub const BOOTLOG_MAX_PAYLOAD: usize = BLOCK as usize - BOOTLOG_HEADER - SUM;
/// Most boots the history keeps (fewer when their records do not fit the slot).
pub const HISTORY_MAX: usize = 64;

/// Why the boot log cannot be kept on a store.
#[derive(Debug, thiserror::Error)]
pub enum BootLogError {
    /// Its clusters are too small to hold the two slots after the superblocks.
    #[error("clusters of {cluster_blocks} blocks leave no room for the boot log (it needs 4)")]
    NoRoom {
        /// Blocks of a cluster.
        cluster_blocks: u32,
    },
    /// The log does not fit one slot.
    #[error("the boot log needs {bytes} bytes, a slot holds {BOOTLOG_MAX_PAYLOAD}")]
    TooLarge {
        /// Bytes of its payload.
        bytes: usize,
    },
    /// The log does not encode.
    #[error(transparent)]
    Encode(#[from] Damage),
}

/// Why the boot log says not to try an image: the refusals of the crash-loop guard and of
/// an update, in the words of every restoring boot (resume, the restorer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Guarded {
    /// `snapboot invalidate` marked it stale (an update changed the system).
    #[error(
        "the image is stale: an update marked every image up to store generation {through} \
         (`snapboot invalidate`), this one is generation {generation}"
    )]
    Stale { generation: u64, through: u64 },
    /// Restored `limit` times and no restored system confirmed it.
    #[error(
        "crash-loop guard: restored {attempts} times without a confirmation from the restored \
         system (limit snapboot.attempts={limit}); skipped until it is captured again"
    )]
    CrashLoop { attempts: u32, limit: u32 },
}

/// Restores of one image that no boot has confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempts {
    /// The image's name.
    pub name: String,
    /// The generation that committed it (a re-captured image of the same name starts at 0).
    pub generation: u64,
    /// Restores since the last confirmation.
    pub unconfirmed: u32,
    /// Seconds since the epoch of the latest attempt (the restoring boot's clock; 0 when it
    /// has none).
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
    /// The last boots' records, oldest first, opaque to the store (what each boot came to);
    /// encoded after the other fields (see the module documentation).
    #[serde(skip)]
    pub history: Vec<Vec<u8>>,
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

    /// What the log says against trying image `name` committed at `generation` at all:
    /// marked stale by an update, or restored `limit` times without a confirmation.
    pub fn guard(&self, name: &str, generation: u64, limit: u32) -> Result<(), Guarded> {
        if self.is_stale(generation) {
            return Err(Guarded::Stale {
                generation,
                through: self.stale_through,
            });
        }
        let attempts = self.unconfirmed(name, generation);
        if attempts >= limit {
            return Err(Guarded::CrashLoop { attempts, limit });
        }
        Ok(())
    }

    /// Whether an image committed at `generation` is stale.
    pub fn is_stale(&self, generation: u64) -> bool {
        generation <= self.stale_through
    }

    /// Forgets the counts of images `catalog` no longer holds (by name and generation):
    /// what every write of the log does first when the catalog is at hand.
    pub fn keep_only(&mut self, catalog: &Catalog) {
        self.attempts.retain(|a| {
            catalog
                .images
                .iter()
                .any(|i| i.name == a.name && i.generation == a.generation)
        });
    }

    /// Adds one boot's record to the history, dropping the oldest beyond [`HISTORY_MAX`].
    pub fn remember(&mut self, record: Vec<u8>) {
        self.history.push(record);
        let over = self.history.len().saturating_sub(HISTORY_MAX);
        self.history.drain(..over);
    }

    /// The payload: the fields, then the newest records of the history that fit the slot
    /// with them.
    fn payload(&self) -> Result<Vec<u8>, BootLogError> {
        let mut payload = encode(self, "boot log")?;
        if payload.len() > BOOTLOG_MAX_PAYLOAD {
            return Err(BootLogError::TooLarge {
                bytes: payload.len(),
            });
        }
        let kept = self.history.len().min(HISTORY_MAX);
        for skip in self.history.len() - kept..self.history.len() {
            let history = encode(&&self.history[skip..], "boot history")?;
            if payload.len() + history.len() <= BOOTLOG_MAX_PAYLOAD {
                payload.extend_from_slice(&history);
                break;
            }
        }
        Ok(payload)
    }

    /// The slot block holding this log with its `seq`.
    pub fn encode_slot(&self) -> Result<Vec<u8>, BootLogError> {
        let payload = self.payload()?;
        let mut b = vec![0u8; BLOCK as usize];
        b[0..8].copy_from_slice(BOOTLOG_MAGIC);
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b[BOOTLOG_HEADER..BOOTLOG_HEADER + payload.len()].copy_from_slice(&payload);
        let end = BOOTLOG_HEADER + payload.len();
        let sum = blake3::hash(&b[..end]);
        b[end..end + SUM].copy_from_slice(sum.as_bytes());
        Ok(b)
    }

    /// A slot's log, or `None` when it holds none (no magic, torn, damaged).
    pub fn decode_slot(b: &[u8]) -> Option<BootLog> {
        if b.len() < BOOTLOG_HEADER + SUM || &b[0..8] != BOOTLOG_MAGIC {
            return None;
        }
        let seq = u64::from_le_bytes(b[8..16].try_into().ok()?);
        let len = u32::from_le_bytes(b[16..20].try_into().ok()?) as usize;
        if len > BOOTLOG_MAX_PAYLOAD || BOOTLOG_HEADER + len + SUM > b.len() {
            return None;
        }
        let end = BOOTLOG_HEADER + len;
        if blake3::hash(&b[..end]).as_bytes() != &b[end..end + SUM] {
            return None;
        }
        let (mut log, rest) = postcard::take_from_bytes::<BootLog>(&b[BOOTLOG_HEADER..end]).ok()?;
        log.seq = seq;
        // A history that does not parse is lost, not the log that guards the images.
        log.history = decode(rest, "boot history").unwrap_or_default();
        Some(log)
    }
}

/// The byte offsets of the two slots, for clusters of `cluster_blocks` blocks.
pub fn boot_log_slots(cluster_blocks: u32) -> Result<[u64; 2], BootLogError> {
    if u64::from(cluster_blocks) < FIRST_SLOT_BLOCK + 2 {
        return Err(BootLogError::NoRoom { cluster_blocks });
    }
    Ok([FIRST_SLOT_BLOCK * BLOCK, (FIRST_SLOT_BLOCK + 1) * BLOCK])
}

/// The boot log as read: the newest valid slot's log (an empty log when neither is valid)
/// and which slot holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewestLog {
    /// The log.
    pub log: BootLog,
    /// Its slot (`None`: no slot holds a valid log).
    pub slot: Option<usize>,
}

impl NewestLog {
    /// Reads both slots of a store with clusters of `cluster_blocks` blocks through
    /// `read(slot, byte offset, block)` and keeps the newest valid one.
    pub fn read<E: From<BootLogError>>(
        cluster_blocks: u32,
        mut read: impl FnMut(usize, u64, &mut [u8]) -> Result<(), E>,
    ) -> Result<NewestLog, E> {
        let mut best = NewestLog::default();
        let mut b = vec![0u8; BLOCK as usize];
        for (i, at) in boot_log_slots(cluster_blocks)?.into_iter().enumerate() {
            read(i, at, &mut b)?;
            if let Some(log) = BootLog::decode_slot(&b) {
                if best.slot.is_none() || log.seq > best.log.seq {
                    best = NewestLog { log, slot: Some(i) };
                }
            }
        }
        Ok(best)
    }

    /// The write that makes `log` the newest: the next `seq`, into the slot this one is not
    /// in (so a power cut during the write leaves this one readable).
    pub fn next(&self, log: &BootLog, cluster_blocks: u32) -> Result<SlotWrite, BootLogError> {
        let mut log = log.clone();
        log.seq = self.log.seq + 1;
        let slot = match self.slot {
            Some(0) => 1,
            _ => 0,
        };
        Ok(SlotWrite {
            slot,
            at: boot_log_slots(cluster_blocks)?[slot],
            block: log.encode_slot()?,
        })
    }
}

/// One write of the boot log: `block` to byte `at` (slot `slot`), then a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotWrite {
    /// The slot written.
    pub slot: usize,
    /// Its byte offset on the medium.
    pub at: u64,
    /// The whole block.
    pub block: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

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

    /// Two slots in memory, read and written through the functions above.
    fn write(disk: &mut [u8], log: &BootLog) -> usize {
        let newest = NewestLog::read(16, |_, at, b: &mut [u8]| {
            b.copy_from_slice(&disk[at as usize..][..b.len()]);
            Ok::<(), BootLogError>(())
        })
        .unwrap();
        let w = newest.next(log, 16).unwrap();
        disk[w.at as usize..][..w.block.len()].copy_from_slice(&w.block);
        w.slot
    }

    fn read(disk: &[u8]) -> NewestLog {
        NewestLog::read(16, |_, at, b: &mut [u8]| {
            b.copy_from_slice(&disk[at as usize..][..b.len()]);
            Ok::<(), BootLogError>(())
        })
        .unwrap()
    }

    #[test]
    fn writes_alternate_slots_and_never_touch_the_newest() {
        let mut disk = vec![0u8; 4 * BLOCK as usize];
        assert_eq!(read(&disk), NewestLog::default());
        let mut slots = Vec::new();
        for i in 1..=4u64 {
            let before = read(&disk);
            let log = BootLog {
                stale_through: i,
                ..BootLog::default()
            };
            let slot = write(&mut disk, &log);
            assert_ne!(Some(slot), before.slot, "wrote over the newest log");
            slots.push(slot);
            let after = read(&disk);
            assert_eq!((after.log.stale_through, after.log.seq), (i, i));
        }
        assert_eq!(slots, [0, 1, 0, 1]);
        // A damaged newest slot: the other one is read, and the next write replaces the
        // damaged one.
        disk[(3 * BLOCK) as usize + 30] ^= 1;
        assert_eq!(read(&disk).log.stale_through, 3);
        assert_eq!(write(&mut disk, &BootLog::default()), 1);
    }

    #[test]
    fn a_log_too_large_for_a_slot_or_a_store_without_room_says_so() {
        let log = BootLog {
            last_boot: vec![7; BOOTLOG_MAX_PAYLOAD],
            ..BootLog::default()
        };
        let e = log.encode_slot().unwrap_err().to_string();
        assert!(e.contains("a slot holds 4044"), "{e}");
        let e = boot_log_slots(2).unwrap_err().to_string();
        assert!(e.contains("no room for the boot log"), "{e}");
    }

    #[test]
    fn the_history_keeps_the_newest_boots_that_fit_and_survives_the_slot() {
        let mut log = BootLog {
            stale_through: 3,
            ..BootLog::default()
        };
        for i in 0..(HISTORY_MAX as u32 + 5) {
            log.remember(i.to_le_bytes().to_vec());
        }
        assert_eq!(log.history.len(), HISTORY_MAX);
        assert_eq!(log.history[0], 5u32.to_le_bytes());
        let back = BootLog::decode_slot(&log.encode_slot().unwrap()).unwrap();
        assert_eq!(back.history, log.history);
        // Records too large for the slot together: the oldest go, the log's fields stay.
        let mut big = log.clone();
        for i in 0..20u8 {
            big.remember(vec![i; 300]);
        }
        let back = BootLog::decode_slot(&big.encode_slot().unwrap()).unwrap();
        assert_eq!(back.stale_through, 3);
        let n = back.history.len();
        assert!((10..20).contains(&n), "{n} records kept");
        assert_eq!(back.history[..], big.history[big.history.len() - n..]);
    }

    /// The log's fields as a snapboot without the history wrote and reads them.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct OldLog {
        stale_through: u64,
        attempts: Vec<Attempts>,
        last_boot: Vec<u8>,
    }

    #[test]
    fn a_log_with_a_history_reads_in_an_older_snapboot_and_an_older_log_reads_here() {
        let mut log = BootLog {
            stale_through: 9,
            last_boot: b"status".to_vec(),
            ..BootLog::default()
        };
        log.attempt("current", 4, 100);
        log.remember(b"boot one".to_vec());
        let payload = log.payload().unwrap();
        let old: OldLog = postcard::from_bytes(&payload).unwrap();
        assert_eq!(
            old,
            OldLog {
                stale_through: 9,
                attempts: log.attempts.clone(),
                last_boot: b"status".to_vec(),
            }
        );
        // Without a history the payload is the older one, byte for byte.
        let mut none = log.clone();
        none.history.clear();
        assert_eq!(none.payload().unwrap(), encode(&old, "old").unwrap());
        let back = BootLog::decode_slot(&none.encode_slot().unwrap()).unwrap();
        assert_eq!((back.stale_through, back.history.len()), (9, 0));
    }
}
