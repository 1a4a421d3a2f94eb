//! What this boot did, for the system and its applications: `/run/snapboot/status` (JSON),
//! written at every boot, and the decisions that depend on it (re-capture after an update).
//!
//! ```text
//! power-on ─► snapboot resume ──────────────► restored ─► after_restore:   outcome restored
//!               │  (before the kernel takes over:          reads the store's boot log,
//!               │   attempt counted, outcome in the        confirms (or the app does:
//!               │   store's boot log)                      `snapboot confirm`)
//!               ├─ nothing asked ───────────► outcome cold
//!               ├─ refused ─────────────────► outcome fallback, reason, each image's refusal;
//!               │                             re-capture planned when the system changed
//!               └─ restore kernel refused ──► boot log, kexec ─► stock kernel: outcome
//!                                             fallback, read back from the boot log
//! ready point ─► a planned re-capture runs (image taken, the system goes on)
//! ```
//!
//! Every boot with a store also adds itself to the history in the store's boot log
//! ([`remember`]: a boot not restored when resume ends, a restored one in the restored
//! system's first write), which outlives `/run`: `snapboot status --history`.
//!
//! The record itself is crate `bootstatus`'s (re-exported here), which the restorer writes
//! too; this module files it, reads it back and prints its marker.
//!
//! The file is replaced whole (written beside it, then renamed), so a reader never sees half
//! of it. A restored system's `/run` is the capture boot's: `after_restore` writes it again
//! before anything is started.

use bootparams::BootParams;
pub use bootstatus::{
    from_boot_log, recapture_after, to_boot_log, BootStatus, ImageRef, Outcome, PastBoot,
    Recapture, Refusal, RefusalRecord, Timings,
};
use std::path::Path;

/// Where the status is, on every boot.
pub const STATUS_FILE: &str = "/run/snapboot/status";

/// Why the status cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// No status: nothing recorded this boot.
    #[error("no boot status at {0} (snapboot resume did not run on this boot)")]
    Missing(String),
    /// Reading or writing failed.
    #[error("{step} {path}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold a status.
    #[error("{path} is not a boot status")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A status of this boot that came to `outcome`, on the running kernel, with the settings'
/// crash-loop limit and confirmer, and nothing else known yet.
pub fn new(outcome: Outcome, params: &BootParams) -> BootStatus {
    let mut s = BootStatus::new(
        outcome,
        params.attempts,
        params.confirm.word(),
        devsys::system::running_release(),
    );
    s.written_unix = now_unix();
    s
}

/// Writes `status` to `path` whole (a file beside it, then a rename).
pub fn write_to(status: &BootStatus, path: &Path) -> Result<(), StatusError> {
    let io = |step: &'static str| {
        let path = path.display().to_string();
        move |source| StatusError::Io { step, path, source }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("creating the directory of"))?;
    }
    let tmp = path.with_extension("new");
    let mut s = status.clone();
    s.written_unix = now_unix();
    std::fs::write(&tmp, s.to_json() + "\n").map_err(io("writing"))?;
    std::fs::rename(&tmp, path).map_err(io("renaming into place"))
}

/// Writes `status` to [`STATUS_FILE`]; a failure is printed, never fatal to the boot.
pub fn write(status: &BootStatus) {
    if let Err(e) = write_to(status, Path::new(STATUS_FILE)) {
        eprintln!("snapboot: {}", boottrace::error_chain(&e));
    }
}

/// Reads the status at `path`.
pub fn read_from(path: &Path) -> Result<BootStatus, StatusError> {
    let p = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StatusError::Missing(p)),
        Err(source) => {
            return Err(StatusError::Io {
                step: "reading",
                path: p,
                source,
            })
        }
        Ok(t) => t,
    };
    serde_json::from_str(&text).map_err(|source| StatusError::Parse { path: p, source })
}

/// Reads [`STATUS_FILE`].
pub fn read() -> Result<BootStatus, StatusError> {
    read_from(Path::new(STATUS_FILE))
}

/// Adds the boot `status` tells of to the history in the store's boot log `log` (the
/// oldest boots go when it is full).
pub fn remember(log: &mut flashstore::BootLog, status: &BootStatus) {
    log.remember(status.past().encode());
}

/// Prints the `status` marker: the outcome, and for a restore the image and its count.
pub fn print_marker(status: &BootStatus) {
    crate::guest::print_marker(boottrace::Marker::Status, Some(&status.marker_text()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapboot/status");
        let mut s = new(Outcome::Fallback, &BootParams::default());
        s.reason = Some("no image on the store can be restored".into());
        s.refused = vec![RefusalRecord {
            image: "current".into(),
            kind: Refusal::Changed,
            why: "x".into(),
        }];
        write_to(&s, &path).unwrap();
        let back = read_from(&path).unwrap();
        assert_eq!(back.refused, s.refused);
        assert_eq!(back.attempts, bootparams::DEFAULT_ATTEMPTS);
        let json = std::fs::read_to_string(&path).unwrap();
        assert!(json.contains("\"outcome\": \"fallback\""), "{json}");
        assert!(matches!(
            read_from(&dir.path().join("none")),
            Err(StatusError::Missing(_))
        ));
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(read_from(&path), Err(StatusError::Parse { .. })));
    }
}
