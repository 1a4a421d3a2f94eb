//! A device's life between updates: the restored system confirms its restore (the
//! crash-loop guard's other half), an update marks the images stale, and the ready point
//! of a boot that found them stale or changed captures a new one and goes on.
//!
//! ```text
//! resume:      attempt n of image I counted in the store's boot log ─► restore
//! restored:    status from the boot log ─► confirmed? ──yes (snapboot.confirm=restored)──►
//!                                           │            count of I back to 0
//!                                           └─no (=app): the app's `snapboot confirm`
//! next resume: I has `snapboot.attempts` unconfirmed restores ─► skipped, cold boot
//!
//! update:      `snapboot invalidate` (kernel postinst.d, initramfs post-update.d hooks)
//!              ─► every image up to the store's generation is stale
//! next boot:   images refused as stale or changed ─► cold boot ─► ready point: capture,
//!              go on ─► the power-on after restores the updated system
//! ```

use crate::status::{BootStatus, ImageRef, Outcome, Recapture};
use crate::store::StoreUseError;
use bootparams::{BootParams, Confirm, StoreAddress};
use boottrace::error_chain as chain;
use std::path::Path;
use std::time::Duration;

/// How long a confirmation or an invalidation waits for the store's device.
const WAIT: Duration = Duration::from_secs(2);

/// Why a confirmation or an invalidation failed.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// No store named and none given.
    #[error("no store: give one, or boot with {}=", bootparams::key::STORE)]
    NoStore,
    /// This boot's status cannot be read.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// This boot was not restored, so there is nothing to confirm.
    #[error("nothing to confirm: this boot was not restored (outcome {0})")]
    NotRestored(&'static str),
    /// The store or its boot log cannot be used.
    #[error(transparent)]
    Store(#[from] StoreUseError),
}

/// The store given, or else the one this boot's command line names.
fn store_of(
    params: &BootParams,
    given: Option<&StoreAddress>,
) -> Result<StoreAddress, LifecycleError> {
    given
        .or(params.store.as_ref())
        .cloned()
        .ok_or(LifecycleError::NoStore)
}

/// Right after a restore (the restored system's command line is its capture's): the status
/// the restoring boot left in the store's boot log, read only (four blocks). Never fails the
/// restore: what cannot be read is the status's reason. [`confirm_restored`] writes, after
/// the application runs again.
pub fn restored_status(params: &BootParams) -> BootStatus {
    let kept = store_of(params, None)
        .and_then(|store| Ok(crate::store::read_boot_log(&store, WAIT)?))
        .map(|log| crate::status::from_boot_log(&log.last_boot));
    let mut s = match kept {
        Ok(Some(s)) => s,
        Ok(None) => {
            let mut s = BootStatus::new(Outcome::Restored, params);
            s.reason = Some("the restoring boot left no status in the store's boot log".into());
            s
        }
        Err(e) => {
            let mut s = BootStatus::new(Outcome::Restored, params);
            s.reason = Some(format!(
                "the store's boot log cannot be read, the restore is not confirmed: {}",
                chain(&e)
            ));
            s
        }
    };
    s.outcome = Outcome::Restored;
    s.confirm_by = params.confirm.word().into();
    s.confirmed = false;
    s.kernel = crate::system::running_release();
    s
}

/// After the restored system runs again: clears the status the restoring boot kept in the
/// store's boot log and, with `snapboot.confirm=restored`, confirms the restore of the
/// status's image there (one block write and a sync, off the path to the `restored`
/// marker). Sets `status.confirmed` when it did; an error is the status's reason.
pub fn confirm_restored(params: &BootParams, status: &mut BootStatus) {
    let confirm = params.confirm == Confirm::Restored;
    let image = status.image.clone();
    let done = store_of(params, None).and_then(|store| {
        Ok(crate::store::update_boot_log(&store, WAIT, |log| {
            log.last_boot.clear();
            match (&image, confirm) {
                (Some(i), true) => {
                    log.confirm(&i.name, i.generation);
                    true
                }
                _ => false,
            }
        })?)
    });
    match done {
        Ok(confirmed) => status.confirmed = confirmed,
        Err(e) => {
            status.reason = Some(format!(
                "the restore could not be confirmed on the store: {}",
                chain(&e)
            ))
        }
    }
}

/// `snapboot confirm`: the application's health check passed on a restored system, so
/// the crash-loop guard's count of its image starts again. Returns the image confirmed.
pub fn confirm(store: Option<&StoreAddress>) -> Result<ImageRef, LifecycleError> {
    let mut status = BootStatus::read()?;
    let Some(image) = status
        .image
        .clone()
        .filter(|_| status.outcome == Outcome::Restored)
    else {
        return Err(LifecycleError::NotRestored(status.outcome.word()));
    };
    let params = BootParams::parse(&crate::system::kernel_cmdline()).unwrap_or_default();
    let store = store_of(&params, store)?;
    crate::store::update_boot_log(&store, WAIT, |log| {
        log.confirm(&image.name, image.generation)
    })?;
    status.confirmed = true;
    status.write_to(Path::new(crate::status::STATUS_FILE))?;
    Ok(image)
}

/// `snapboot invalidate`: marks every image now on the store stale (after an update), so
/// the next boot does not try them and captures a new one. Returns the generation they
/// were marked through.
pub fn invalidate(store: Option<&StoreAddress>) -> Result<u64, LifecycleError> {
    let params = BootParams::parse(&crate::system::kernel_cmdline()).unwrap_or_default();
    let address = store_of(&params, store)?;
    let (mut s, at) = crate::store::open_address(&address, WAIT, true)?;
    let through = s.generation();
    s.update_boot_log(|log| log.stale_through = through)
        .map_err(|source| StoreUseError::Store {
            store: at.to_string(),
            source,
        })?;
    Ok(through)
}

/// The status of this boot, when it plans a re-capture at the ready point.
pub fn planned_recapture() -> Option<BootStatus> {
    BootStatus::read()
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
    status.write();
}
