//! A device's life between updates: the restored system confirms its restore (the
//! crash-loop guard's other half), an update marks the images stale, and the ready point
//! of a boot that found them stale or changed captures a new one and goes on.
//!
//! ```text
//! resume:      attempt n of image I counted in the store's boot log ─► restore
//! restored:    status from the boot log ─► confirm=restored: confirmed at once ──►
//!                                           │                  count of I back to 0
//!                                           ├─ boot-complete (auto under systemd):
//!                                           │  boot-complete.target reached again ──► confirm
//!                                           ├─ up (auto otherwise): still up after
//!                                           │  snapboot.grace seconds ──► confirm
//!                                           └─ app: the app's `snapboot confirm`
//!              a restored system that dies or hangs before that never confirms
//! next resume: I has `snapboot.attempts` unconfirmed restores ─► skipped, cold boot
//!
//! update:      `snapboot invalidate` (kernel postinst.d, initramfs post-update.d hooks)
//!              ─► every image up to the store's generation is stale
//! next boot:   images refused as stale or changed ─► cold boot ─► ready point: capture,
//!              go on ─► the power-on after restores the updated system
//! ```

use crate::command_store::{CommandStore, CommandStoreError};
use crate::status::{BootStatus, ImageRef, Outcome, PastBoot, Recapture};
use crate::store::StoreUseError;
use bootparams::{BootParams, Confirm};
use boottrace::error_chain as chain;
use std::path::Path;
use std::time::Duration;

/// How long the restored system's status waits for the store's device (it runs right
/// after the restore, while devices are resuming). `snapboot confirm` and `invalidate` run
/// on a settled system, or in a chroot at an update, and never wait.
const WAIT: Duration = Duration::from_secs(2);

/// Why a confirmation or an invalidation failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The restored system's command line names no store.
    #[error(
        "no store: the restored system's command line has no {}= and {} names none",
        bootparams::key::STORE,
        bootparams::config::CONFIG_PATH
    )]
    NoStore,
    /// The command's store is not known or not there.
    #[error(transparent)]
    Store(#[from] CommandStoreError),
    /// This boot's status cannot be read.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// This boot was not restored, so there is nothing to confirm.
    #[error("nothing to confirm: this boot was not restored (outcome {0})")]
    NotRestored(&'static str),
    /// The store or its boot log cannot be used.
    #[error(transparent)]
    Use(#[from] StoreUseError),
    /// The restore this confirmation waited for is not this boot's any more: a capture took
    /// the waiting confirmation into its image, and that image was restored since.
    #[error(
        "another restore began while this confirmation waited (a capture took it into its \
         image): it confirms nothing"
    )]
    Superseded,
    /// systemd did not reach `boot-complete.target` again after the restore.
    #[error("{BOOT_COMPLETE} was not reached after the restore: {0}")]
    NotComplete(String),
}

/// systemd's target for "this boot works": units that check the system's health order
/// themselves before it and are required by it (systemd.special(7)).
pub const BOOT_COMPLETE: &str = "boot-complete.target";

/// Whether systemd runs this system (its runtime directory is there).
pub fn under_systemd() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Right after a restore (the restored system's command line is its capture's): reads the
/// status the restoring boot left in the store's boot log, confirms the restore there when
/// `snapboot.confirm=restored`, adds this boot to the store's history, and returns the
/// status to write. Never fails the restore: what cannot be read is the status's reason.
pub fn restored_status(params: &BootParams) -> BootStatus {
    let mode = params.confirm.resolve(under_systemd());
    let confirm = mode == Confirm::Restored;
    let finish = |kept: Option<BootStatus>| {
        let mut s = kept.unwrap_or_else(|| {
            let mut s = crate::status::new(Outcome::Restored, params);
            s.reason = Some("the restoring boot left no status in the store's boot log".into());
            s
        });
        s.outcome = Outcome::Restored;
        s.confirm_by = mode.word().into();
        s.grace = (mode == Confirm::Up).then_some(params.grace);
        s.confirmed = confirm && s.image.is_some();
        s.kernel = devsys::system::running_release();
        s.written_unix = crate::status::now_unix();
        s
    };
    let kept = params
        .store
        .clone()
        .ok_or(LifecycleError::NoStore)
        .and_then(|store| {
            Ok(crate::store::update_boot_log(&store, WAIT, |log| {
                let s = finish(crate::status::from_boot_log(&std::mem::take(
                    &mut log.last_boot,
                )));
                if let (true, Some(ImageRef { name, generation })) = (confirm, &s.image) {
                    log.confirm(name, *generation);
                }
                crate::status::remember(log, &s);
                s
            })?)
        });
    kept.unwrap_or_else(|e| {
        let mut s = crate::status::new(Outcome::Restored, params);
        s.reason = Some(format!(
            "the store's boot log cannot be read, the restore is not confirmed: {}",
            chain(&e)
        ));
        s
    })
}

/// The last `n` boots the store's history holds, newest first (the store given, or the
/// one the device's settings name: [`CommandStore`]). A record this snapboot cannot read
/// is left out.
pub fn history(store: &CommandStore, n: usize) -> Result<Vec<PastBoot>, LifecycleError> {
    let (s, at) = store.open(false)?;
    let log = s.boot_log().map_err(|source| StoreUseError::Store {
        store: at.to_string(),
        source,
    })?;
    Ok(log
        .history
        .iter()
        .rev()
        .filter_map(|b| PastBoot::decode(b))
        .take(n)
        .collect())
}

/// `snapboot confirm`: the application's health check passed on a restored system, so
/// the crash-loop guard's count of its image starts again; then the confirmed.d hooks run
/// ([`crate::hooks`]). Returns the image confirmed.
pub fn confirm(store: &CommandStore) -> Result<ImageRef, LifecycleError> {
    let mut status = crate::status::read()?;
    let Some(image) = status
        .image
        .clone()
        .filter(|_| status.outcome == Outcome::Restored)
    else {
        return Err(LifecycleError::NotRestored(status.outcome.word()));
    };
    let at = store.locate()?;
    crate::store::update_located_boot_log(&at, |log| log.confirm(&image.name, image.generation))?;
    status.confirmed = true;
    crate::status::write_to(&status, Path::new(crate::status::STATUS_FILE))?;
    crate::hooks::after_confirmation(&status, &status.confirm_by);
    Ok(image)
}

/// What proves a restored system alive before `snapboot confirm` writes the confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The application's own health check ran the command: nothing more to wait for.
    Asked,
    /// systemd reaches [`BOOT_COMPLETE`] again: the target is restarted, so the units it
    /// requires (the health checks) run anew on the restored system.
    BootComplete,
    /// The system stays up this many seconds.
    Up(u32),
}

impl Proof {
    /// What the `confirmed` marker says proved the restore.
    pub fn said(self) -> String {
        match self {
            Proof::Asked => "snapboot confirm".into(),
            Proof::BootComplete => format!("{BOOT_COMPLETE} reached after the restore"),
            Proof::Up(s) => format!("up {s} s after the restore"),
        }
    }
}

/// Waits for `proof`, then confirms this boot's restore ([`confirm`]). A restored system
/// that dies or hangs meanwhile never gets here: its restore stays unconfirmed.
pub fn confirm_after(store: &CommandStore, proof: Proof) -> Result<ImageRef, LifecycleError> {
    let before = crate::status::read()?;
    match proof {
        Proof::Asked => {}
        Proof::BootComplete => reach_boot_complete()?,
        Proof::Up(secs) => std::thread::sleep(Duration::from_secs(secs.into())),
    }
    if !same_restore(&before, &crate::status::read()?) {
        return Err(LifecycleError::Superseded);
    }
    confirm(store)
}

/// Whether two readings of this boot's status are of the same restore: the same image and
/// attempt, with the restoring boot's own measurements (resume's and the load's seconds,
/// which every restore measures anew). Not the time it was written: every write (a
/// confirmation's too) stamps it anew.
pub fn same_restore(a: &BootStatus, b: &BootStatus) -> bool {
    a.image == b.image
        && a.attempt == b.attempt
        && a.timings.resume == b.timings.resume
        && a.timings.load == b.timings.load
}

/// Restarts [`BOOT_COMPLETE`] and waits for the job: it fails when a unit it requires
/// (a health check) fails or cannot start. The target is restarted, not started: one reached
/// before the capture would still be active in the restored system, and would prove nothing.
fn reach_boot_complete() -> Result<(), LifecycleError> {
    let out = std::process::Command::new("systemctl")
        .args(["restart", BOOT_COMPLETE])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| LifecycleError::NotComplete(format!("systemctl: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let failed = std::process::Command::new("systemctl")
        .args([
            "list-units",
            "--failed",
            "--plain",
            "--no-legend",
            "--no-pager",
        ])
        .output()
        .map(|o| failed_units(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_default();
    Err(LifecycleError::NotComplete(not_complete_reason(
        &out.status.to_string(),
        String::from_utf8_lossy(&out.stderr).trim(),
        &failed,
    )))
}

/// The unit names of `systemctl list-units --failed --plain --no-legend`.
fn failed_units(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Why the target was not reached, in one line: systemctl's status and words, and the
/// units that failed.
fn not_complete_reason(status: &str, stderr: &str, failed: &[String]) -> String {
    let mut why = format!("systemctl restart {BOOT_COMPLETE}: {status}");
    if !stderr.is_empty() {
        why += &format!(" ({})", stderr.replace('\n', " "));
    }
    if !failed.is_empty() {
        why += &format!("; failed units: {}", failed.join(", "));
    }
    why
}

/// `snapboot invalidate`: marks every image now on the store stale (after an update), so
/// the next boot does not try them and captures a new one. Returns the generation they
/// were marked through. The store is looked for as the disks are now, never waited for.
///
/// Where this device's TPM keeps an image's rollback counter, it is raised too: a stale
/// image is then refused as a rollback even if an older copy of the store (whose boot log
/// does not say stale) is written back. Returns the images whose counter was raised.
pub fn invalidate(store: &CommandStore) -> Result<(u64, Vec<String>), LifecycleError> {
    let (mut s, at) = store.open(true)?;
    let through = s.generation();
    s.update_boot_log(|log| log.stale_through = through)
        .map_err(|source| StoreUseError::Store {
            store: at.to_string(),
            source,
        })?;
    let names: Vec<String> = s.images().iter().map(|r| r.name.clone()).collect();
    drop(s);
    Ok((through, crate::rollback::raise_kept(&names)))
}

/// The status of this boot, when it plans a re-capture at the ready point.
pub fn planned_recapture() -> Option<BootStatus> {
    crate::status::read()
        .ok()
        .filter(|s| s.recapture == Recapture::Planned)
}

/// Records how the re-capture `status` planned went (`Ok`: the generation of the image),
/// in the status file.
pub fn record_recapture(mut status: BootStatus, image: &str, result: Result<u64, String>) {
    status.recapture = match result {
        Ok(generation) => Recapture::Captured(ImageRef {
            name: image.into(),
            generation,
        }),
        Err(why) => Recapture::Failed(why),
    };
    crate::status::write(&status);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{to_boot_log, ImageRef};
    use bootparams::StoreAddress;

    /// `store` as a command is given it.
    fn given(store: &StoreAddress) -> CommandStore {
        CommandStore {
            address: store.clone(),
            origin: crate::command_store::Origin::Given,
        }
    }

    /// A formatted store in a file under `dir`, and its address.
    fn store_file(dir: &Path) -> StoreAddress {
        let path = dir.join("s.store");
        drop(crate::store::tests::file_store(dir));
        StoreAddress::path(path.to_str().unwrap())
    }

    #[test]
    fn every_boot_with_a_store_is_kept_in_its_history_newest_first() {
        let d = tempfile::tempdir().unwrap();
        let store = store_file(d.path());
        let params = BootParams {
            store: Some(store.clone()),
            confirm: Confirm::Restored,
            ..BootParams::default()
        };
        assert!(history(&given(&store), 10).unwrap().is_empty());
        // A boot that fell back keeps itself.
        let mut fallback = crate::status::new(Outcome::Fallback, &params);
        fallback.reason = Some("no image on the store can be restored".into());
        crate::boot::keep_in_history(&params, &fallback);
        // A restore: the restoring boot leaves its status, the restored system keeps it.
        let mut restoring = crate::status::new(Outcome::Restored, &params);
        restoring.image = Some(ImageRef {
            name: "current".into(),
            generation: 3,
        });
        restoring.attempt = Some(1);
        crate::store::update_boot_log(&store, WAIT, |log| {
            log.last_boot = to_boot_log(&restoring);
        })
        .unwrap();
        let restored = restored_status(&params);
        assert!(restored.confirmed, "{restored:?}");
        let boots = history(&given(&store), 10).unwrap();
        let seen: Vec<_> = boots
            .iter()
            .map(|b| (b.outcome, b.image.clone(), b.reason.clone()))
            .collect();
        assert_eq!(
            seen,
            [
                (Outcome::Restored, restoring.image.clone(), None),
                (
                    Outcome::Fallback,
                    None,
                    Some("no image on the store can be restored".into())
                ),
            ]
        );
        assert!(boots[0].unix > 1_700_000_000, "{}", boots[0].unix);
        assert_eq!(history(&given(&store), 1).unwrap().len(), 1);
        // A boot without a store keeps nothing anywhere.
        crate::boot::keep_in_history(&BootParams::default(), &fallback);
        assert_eq!(history(&given(&store), 10).unwrap().len(), 2);
    }

    /// The default confirmation waits for proof: `auto` is boot-complete under systemd and
    /// `up` with the grace otherwise, and neither confirms at the restore itself.
    #[test]
    fn by_default_a_restore_is_not_confirmed_until_the_system_proves_itself() {
        let d = tempfile::tempdir().unwrap();
        let store = store_file(d.path());
        let params = BootParams {
            store: Some(store.clone()),
            grace: 7,
            ..BootParams::default()
        };
        let mut restoring = crate::status::new(Outcome::Restored, &params);
        restoring.image = Some(ImageRef {
            name: "current".into(),
            generation: 3,
        });
        restoring.attempt = Some(2);
        crate::store::update_boot_log(&store, WAIT, |log| {
            log.attempt("current", 3, 1);
            log.attempt("current", 3, 2);
            log.last_boot = to_boot_log(&restoring);
        })
        .unwrap();
        let restored = restored_status(&params);
        assert!(!restored.confirmed, "{restored:?}");
        assert_eq!(restored.attempt, Some(2));
        if under_systemd() {
            assert_eq!(restored.confirm_by, "boot-complete");
            assert!(restored
                .marker_text()
                .ends_with("until boot-complete.target"));
        } else {
            assert_eq!(
                (restored.confirm_by.as_str(), restored.grace),
                ("up", Some(7))
            );
            assert!(restored
                .marker_text()
                .ends_with("restore 2 of 2 unconfirmed until up 7 s"));
        }
        // The store's count is not reset: the next resume sees two unconfirmed restores.
        let count =
            crate::store::update_boot_log(&store, WAIT, |log| log.unconfirmed("current", 3));
        assert_eq!(count.unwrap(), 2);
    }

    #[test]
    fn a_boot_complete_target_not_reached_says_why_and_names_the_failed_units() {
        let listing = "snapboot-app.service loaded failed failed snapboot's app workload\n\
                       app-check.service loaded failed failed health check\n";
        let failed = failed_units(listing);
        assert_eq!(failed, ["snapboot-app.service", "app-check.service"]);
        assert_eq!(
            not_complete_reason(
                "exit status: 1",
                "A dependency job for boot-complete.target failed.\nSee 'journalctl -xe'.",
                &failed
            ),
            "systemctl restart boot-complete.target: exit status: 1 (A dependency job for \
             boot-complete.target failed. See 'journalctl -xe'.); failed units: \
             snapboot-app.service, app-check.service"
        );
        assert_eq!(
            LifecycleError::NotComplete(not_complete_reason("exit status: 1", "", &[])).to_string(),
            "boot-complete.target was not reached after the restore: systemctl restart \
             boot-complete.target: exit status: 1"
        );
        assert_eq!(Proof::Up(15).said(), "up 15 s after the restore");
        // A confirmation a capture took into its image wakes up in a later restore.
        let params = BootParams::default();
        let mut first = crate::status::new(Outcome::Restored, &params);
        first.written_unix = 100;
        first.timings.load = Some(0.481);
        first.timings.resume = Some(0.612);
        first.image = Some(ImageRef {
            name: "current".into(),
            generation: 2,
        });
        // Confirmed and written again a second later: the same restore.
        let mut confirmed = first.clone();
        confirmed.confirmed = true;
        confirmed.written_unix = 101;
        assert!(same_restore(&first, &confirmed));
        // The same image restored again, even at the same attempt: another restore.
        let mut later = first.clone();
        later.timings.load = Some(0.502);
        assert!(!same_restore(&first, &later));
        later.timings.load = first.timings.load;
        later.image = Some(ImageRef {
            name: "current".into(),
            generation: 3,
        });
        assert!(!same_restore(&first, &later));
        assert_eq!(failed_units(""), Vec::<String>::new());
    }
}
