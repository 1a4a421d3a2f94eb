//! The store's boot log, kept by the restorer as a restoring boot keeps it (the device's
//! resume): the crash-loop guard's count and the status the next kernel reads back.
//!
//! ```text
//! store opened ─► boot log read (the newest of its two slots)
//! each candidate: stale? restored `snapboot.attempts` times unconfirmed? ─► refused by
//!                 the one rule (crate `admission`, the guard is its first check)
//!                 checked ─► the attempt counted and the status `restored` (image, count,
//!                 earlier refusals) encoded now, written and flushed after the last page
//!                 is placed, just before the image kernel is entered ─► the restored
//!                 system reads it back and confirms it (or its application does)
//! all refused:    the status `fallback` (reason, each refusal, re-capture policy) ─► the
//!                 stock kernel booted cold reads it back (`snapboot.handedover`)
//! ```
//!
//! Every write goes to the slot the newest log is not in ([`storelayout::NewestLog::next`]),
//! so a power cut during it leaves the previous log. The format is crate `storelayout`'s and
//! the status crate `bootstatus`'s: the same code the device keeps them with.

use crate::disk::{Disk, DiskError, DiskMut};
use crate::image::Store;
use alloc::string::String;
use alloc::vec::Vec;
use bootstatus::{
    recapture_after, to_boot_log, BootStatus, Held, ImageRef, Outcome, RecapturePolicy,
    RefusalRecord,
};
use storelayout::{BootLog, BootLogError, ImageRec, NewestLog, SlotWrite};

/// What the status names as the kernel that wrote it (the next kernel writes its own).
const WRITER: &str = bootstatus::RESTORER;

/// Why the boot log cannot be kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// Reading or writing its slots failed.
    #[error("boot log slot at byte {at}: {error}")]
    Disk {
        /// The slot's byte offset.
        at: u64,
        /// Why.
        error: DiskError,
    },
    /// The log does not fit the store, or does not encode.
    #[error(transparent)]
    Format(#[from] BootLogError),
}

/// The boot log as this boot found it, and what this boot refused so far.
pub struct BootRecord {
    newest: NewestLog,
    cluster_blocks: u32,
    /// The crash-loop guard's limit (`snapboot.attempts`).
    pub limit: u32,
    /// Each image refused so far, in order.
    pub refused: Vec<RefusalRecord>,
}

impl BootRecord {
    /// Reads the boot log of `store` on `disk`; `limit` is the crash-loop guard's
    /// (`snapboot.attempts`, read by `bootparams`).
    pub fn read<D: Disk>(disk: &mut D, store: &Store, limit: u32) -> Result<Self, KeepError> {
        let cluster_blocks = store.sb.cluster_blocks;
        let newest = NewestLog::read(cluster_blocks, |_, at, b| {
            disk.read(at, b)
                .map_err(|error| KeepError::Disk { at, error })
        })?;
        Ok(BootRecord {
            newest,
            cluster_blocks,
            limit,
            refused: Vec::new(),
        })
    }

    /// The log as read and the crash-loop guard's limit: what the one rule's guard reads
    /// ([`admission::Rules::log`]).
    pub fn guard(&self) -> (&BootLog, u32) {
        (&self.newest.log, self.limit)
    }

    /// Keeps the refusal of image `name`.
    pub fn refuse(&mut self, name: &str, why: &admission::Refused) {
        self.refused.push(why.record(name));
    }

    /// A status of this boot with nothing known yet.
    fn status(&self, outcome: Outcome) -> BootStatus {
        let mut s = BootStatus::new(outcome, self.limit, "restored", WRITER.into());
        s.refused = self.refused.clone();
        s
    }

    /// The log `change` makes of the one read, with the counts of images `store` no longer
    /// holds dropped, as the write that makes it the newest.
    fn next(
        &self,
        store: &Store,
        change: impl FnOnce(&mut BootLog),
    ) -> Result<SlotWrite, BootLogError> {
        let mut log = self.newest.log.clone();
        change(&mut log);
        log.keep_only(&store.catalog);
        self.newest.next(&log, self.cluster_blocks)
    }

    /// The write that counts this restore of `rec` (at `unix` seconds by the PC's clock; 0:
    /// none) and
    /// leaves the restored system its status: what resume records before the kernel takes
    /// over.
    pub fn attempt(
        &self,
        store: &Store,
        rec: &ImageRec,
        unix: u64,
    ) -> Result<SlotWrite, BootLogError> {
        self.next(store, |log| {
            let mut s = self.status(Outcome::Restored);
            s.image = Some(ImageRef {
                name: rec.name.clone(),
                generation: rec.generation,
            });
            s.attempt = Some(log.attempt(&rec.name, rec.generation, unix));
            log.last_boot = to_boot_log(&s);
        })
    }

    /// The write that leaves the stock kernel the status of this boot's fallback: `reason`,
    /// each refusal, and whether the system is to be captured again (`store_empty`: the
    /// store holds no image); what a restore kernel leaves before it hands over.
    pub fn fallback(
        &self,
        store: &Store,
        reason: String,
        store_empty: bool,
    ) -> Result<SlotWrite, BootLogError> {
        self.next(store, |log| {
            let mut s = self.status(Outcome::Fallback);
            s.reason = Some(reason);
            // The stock kernel applies its own settings to a planned re-capture
            // (`snapboot.norecapture`, signed images): the restorer knows neither.
            s.recapture = recapture_after(
                &s.refused,
                Held::empty_if(store_empty),
                RecapturePolicy::DEFAULT,
            );
            log.last_boot = to_boot_log(&s);
        })
    }
}

/// Writes `w` and flushes it to the medium.
pub fn write<D: DiskMut>(disk: &mut D, w: &SlotWrite) -> Result<(), KeepError> {
    let at = w.at;
    let fail = |error| KeepError::Disk { at, error };
    disk.write(at, &w.block).map_err(fail)?;
    disk.flush().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDiskMut;
    use admission::Refused as Why;
    use bootstatus::Refusal;
    use flashstore::{FormatOptions, MemMedium, Store as Writer, WriteOptions};

    /// A store written by flashstore with images `names` (one page each), its boot log
    /// changed by `change` the way the device changes it.
    fn store(names: &[&str], change: impl FnOnce(&mut BootLog)) -> Vec<u8> {
        let mut s = Writer::format(MemMedium::new(4 << 20), FormatOptions::default()).unwrap();
        for name in names {
            let mut w = s.writer(name, WriteOptions::default()).unwrap();
            w.push_page(&[7; 4096]).unwrap();
            w.commit(Vec::new()).unwrap();
        }
        s.update_boot_log(change).unwrap();
        s.into_medium().bytes
    }

    /// What the guard says of `rec`.
    fn guard(r: &BootRecord, rec: &ImageRec) -> Result<(), storelayout::Guarded> {
        let (log, limit) = r.guard();
        log.guard(&rec.name, rec.generation, limit)
    }

    /// The newest image of `s`.
    fn newest(s: &Store) -> ImageRec {
        s.candidates::<&str>(&[])[0].image().unwrap().clone()
    }

    fn opened(bytes: &mut [u8], limit: u32) -> (Store, BootRecord) {
        let mut d = MemDiskMut::new(bytes);
        let s = Store::open(&mut d).unwrap();
        let r = BootRecord::read(&mut d, &s, limit).unwrap();
        (s, r)
    }

    /// The boot log flashstore reads back from `bytes`.
    fn device_log(bytes: &[u8]) -> BootLog {
        let s = Writer::open(MemMedium {
            bytes: bytes.to_vec(),
        })
        .unwrap();
        s.boot_log().unwrap()
    }

    /// The boot log flashstore reads back from `bytes`, and the status it holds.
    fn device_view(bytes: &[u8]) -> (BootLog, BootStatus) {
        let log = device_log(bytes);
        let status = bootstatus::from_boot_log(&log.last_boot).expect("a status");
        (log, status)
    }

    #[test]
    fn an_attempt_is_counted_where_the_device_counts_it_and_the_guard_stops_the_third() {
        let mut bytes = store(&["current"], |_| {});
        for n in 1..=2u32 {
            let (s, r) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
            let rec = newest(&s);
            guard(&r, &rec).unwrap();
            let w = r.attempt(&s, &rec, 1_700_000_000).unwrap();
            let mut d = MemDiskMut::new(&mut bytes);
            write(&mut d, &w).unwrap();
            assert_eq!(d.flushes, 1);
            let (log, status) = device_view(&bytes);
            assert_eq!(log.unconfirmed("current", rec.generation), n);
            assert_eq!(status.outcome, Outcome::Restored);
            assert_eq!(status.attempt, Some(n));
            assert_eq!(status.attempts, bootstatus::DEFAULT_ATTEMPTS);
            assert_eq!(status.image.unwrap().name, "current");
        }
        let (s, r) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
        let e = guard(&r, &newest(&s)).unwrap_err();
        assert_eq!(Why::Guard(e.clone()).kind(), Refusal::CrashLoop);
        assert_eq!(
            e.to_string(),
            "crash-loop guard: restored 2 times without a confirmation from the restored \
             system (limit snapboot.attempts=2); skipped until it is captured again"
        );
        // A higher limit on the command line lets it through; a confirmation resets it.
        let (s, r) = opened(&mut bytes, 3);
        assert!(guard(&r, &newest(&s)).is_ok());
        let mut confirmed = store(&["current"], |_| {});
        let (s, r) = opened(&mut confirmed, bootstatus::DEFAULT_ATTEMPTS);
        let rec = newest(&s);
        write(
            &mut MemDiskMut::new(&mut confirmed),
            &r.attempt(&s, &rec, 0).unwrap(),
        )
        .unwrap();
        let mut m = Writer::open(MemMedium {
            bytes: confirmed.clone(),
        })
        .unwrap();
        m.update_boot_log(|l| l.confirm("current", rec.generation))
            .unwrap();
        let (s, r) = opened(&mut m.into_medium().bytes, bootstatus::DEFAULT_ATTEMPTS);
        assert!(guard(&r, &newest(&s)).is_ok());
    }

    #[test]
    fn a_stale_image_is_refused_with_resume_s_reason() {
        let mut bytes = store(&["current"], |l| l.stale_through = 100);
        let (s, r) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
        let e = guard(&r, &newest(&s)).unwrap_err();
        assert_eq!(Why::Guard(e.clone()).kind(), Refusal::Stale);
        assert!(
            e.to_string().starts_with(
                "the image is stale: an update marked every image up to store generation 100"
            ),
            "{e}"
        );
    }

    #[test]
    fn the_fallback_status_carries_each_refusal_and_the_recapture_policy() {
        let mut bytes = store(&["current", "factory"], |l| {
            l.attempt("gone", 9, 1);
        });
        let (s, mut r) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
        r.refuse(
            "current",
            &Why::Damaged("checksum mismatch in chunk 3".into()),
        );
        let w = r
            .fallback(&s, "no image restores: current: ...".into(), false)
            .unwrap();
        write(&mut MemDiskMut::new(&mut bytes), &w).unwrap();
        let (log, status) = device_view(&bytes);
        assert_eq!(status.outcome, Outcome::Fallback);
        assert_eq!(
            status.reason.as_deref(),
            Some("no image restores: current: ...")
        );
        assert_eq!(status.refused[0].kind, Refusal::Damaged);
        assert_eq!(status.recapture, bootstatus::Recapture::No);
        // The count of an image the store no longer holds is dropped, as the device does.
        assert!(log.attempts.is_empty(), "{:?}", log.attempts);
        // A changed system is captured again (the stock kernel's settings permitting).
        r.refuse(
            "factory",
            &Why::Incompatible(snapimg::Incompat::RamMismatch {
                image: 1,
                running: 2,
            }),
        );
        let (s2, _) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
        let w = r.fallback(&s2, "y".into(), false).unwrap();
        write(&mut MemDiskMut::new(&mut bytes), &w).unwrap();
        assert_eq!(
            device_view(&bytes).1.recapture,
            bootstatus::Recapture::Planned
        );
    }

    #[test]
    fn a_write_never_goes_to_the_slot_of_the_newest_log() {
        let mut bytes = store(&["current"], |l| l.stale_through = 0);
        let (s, r) = opened(&mut bytes, bootstatus::DEFAULT_ATTEMPTS);
        let before = bytes[..4 * 4096].to_vec();
        let slot = r.newest.slot.expect("flashstore wrote a log");
        let w = r.attempt(&s, &newest(&s), 0).unwrap();
        assert_ne!(w.slot, slot);
        write(&mut MemDiskMut::new(&mut bytes), &w).unwrap();
        let kept = 8192 + 4096 * slot;
        assert_eq!(bytes[kept..kept + 4096], before[kept..kept + 4096]);
        // A torn write (its header and a few bytes landed) leaves the log flashstore wrote.
        let mut torn = bytes.clone();
        let at = w.at as usize;
        torn[at + 24..at + 4096].copy_from_slice(&before[at + 24..at + 4096]);
        assert_eq!(device_log(&torn).seq, r.newest.log.seq);
    }
}
