//! Capture: freeze the system at the application's ready point, have the kernel create the
//! hibernation image, and stream its pages into a snapboot image on the store.
//!
//! `SNAPSHOT_CREATE_IMAGE` returns twice. In the original system it returns `Created`: the
//! pages are read and committed, then the board powers off (or thaws and carries on). In a
//! system restored from this image it returns `Restored`: capture thaws user space and tells
//! its caller, so the application knows it was snapshot-booted.

use crate::guest::print_marker;
use crate::restore::{after_restore, RestoreReport};
use crate::snapshot::{CreateResult, SnapshotDev, SnapshotError};
use crate::system::{parse_mounts, running_identity, writable_block_mounts};
use snapimg::{CaptureMeta, ImageError, ImageInfo, Store, PAGE_SIZE};
use std::path::PathBuf;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// What to do once the image is safely on the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Power the board off (the usual semi-permanent capture).
    PowerOff,
    /// Thaw and let the application continue.
    Continue,
}

/// Capture settings.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The store: a block device or file.
    pub store: PathBuf,
    /// After the image is written.
    pub then: Then,
    /// Capture even with writable block-backed filesystems mounted.
    pub force: bool,
}

/// Errors of capture; each says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A writable, block-backed filesystem is mounted.
    #[error("refusing to capture: {device} is mounted read-write on {target}; its contents would be rolled back at every snapshot boot (unmount it, or --force)")]
    WritableMount { device: String, target: String },
    /// The store could not be used.
    #[error("store {path}: {err}")]
    Store { path: PathBuf, err: ImageError },
    /// A `/dev/snapshot` step failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Powering off failed.
    #[error("image written, but power-off failed: {0}")]
    PowerOff(std::io::Error),
}

/// The result of a capture call.
#[derive(Debug)]
pub enum CaptureOutcome {
    /// The image is on the store (only with [`Then::Continue`]).
    Captured(ImageInfo),
    /// This is the restored system; post-restore steps ran.
    Restored(RestoreReport),
}

/// Runs a capture; see the module docs.
pub fn capture(o: &CaptureOptions) -> Result<CaptureOutcome, CaptureError> {
    if !o.force {
        let mounts =
            parse_mounts(&std::fs::read_to_string("/proc/self/mounts").unwrap_or_default());
        if let Some(m) = writable_block_mounts(&mounts).into_iter().next() {
            return Err(CaptureError::WritableMount {
                device: m.source,
                target: m.target,
            });
        }
    }
    let store_err = |err| CaptureError::Store {
        path: o.store.clone(),
        err,
    };
    // Clean page cache is not worth storing: write back and drop it (the kernel would
    // otherwise copy it into the image).
    rustix::fs::sync();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
    let meta = CaptureMeta {
        identity: running_identity(),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let mut store = Store::open(&o.store, true).map_err(store_err)?;
    print_marker("capture-start", Some(&o.store.display().to_string()));
    let started = Instant::now();
    let mut dev = SnapshotDev::open_hibernate()?;
    dev.freeze()?;
    if dev.create_image()? == CreateResult::Restored {
        dev.unfreeze()?;
        drop(dev);
        // The store's cached blocks in this image predate the write of the image itself.
        crate::restore::flush_block_cache(&o.store);
        return Ok(CaptureOutcome::Restored(after_restore()));
    }
    let info = {
        let mut w = store.writer(meta).map_err(store_err)?;
        let mut page = [0u8; PAGE_SIZE];
        while dev.read_page(&mut page)? {
            w.push_page(&page).map_err(store_err)?;
        }
        w.commit().map_err(store_err)?
    };
    let secs = started.elapsed().as_secs_f64();
    let bytes = dev.pages() * PAGE_SIZE as u64;
    print_marker(
        "capture-done",
        Some(&format!(
            "{} pages ({:.1} MiB) in {secs:.2} s, generation {}",
            dev.pages(),
            bytes as f64 / 1048576.0,
            info.generation
        )),
    );
    match o.then {
        Then::Continue => {
            dev.unfreeze()?;
            Ok(CaptureOutcome::Captured(info))
        }
        Then::PowerOff => {
            print_marker("poweroff", Some("after capture"));
            rustix::fs::sync();
            // SNAPSHOT_POWER_OFF only acts when platform (ACPI S4) support was requested,
            // which is why it "returns without powering off"; a plain power-off is what the
            // image needs: it is complete and synced.
            let err = rustix::system::reboot(rustix::system::RebootCommand::PowerOff)
                .err()
                .map(std::io::Error::from)
                .unwrap_or_else(|| std::io::Error::other("reboot returned"));
            Err(CaptureError::PowerOff(err))
        }
    }
}
