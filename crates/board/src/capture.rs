//! Capture on the board: a cold boot with `snapboot.capture` and a store attached, which
//! takes the image at the ready point and powers off.

use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

use boottrace::{Outcome, Timeline};
use snapimg::{ImageError, Store};

use crate::bundle::Bundle;
use crate::qemu::{Disk, RunError, RunOptions, Session};

/// Why a capture boot produced no image.
#[derive(Debug, Error)]
pub enum CaptureBootError {
    /// A snapshot boot was asked for without a store.
    #[error(
        "no store at {}: capture an image first with `snapboot board capture BUNDLE --store {}`",
        .0.display(),
        .0.display()
    )]
    NoStore(PathBuf),
    /// The store file could not be created.
    #[error("creating store {}", path.display())]
    CreateStore {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: ImageError,
    },
    /// The board did not get to the end of the capture.
    #[error("capture boot failed")]
    Boot(#[source] RunError),
    /// The device reported a failed capture.
    #[error("capture failed in the guest: {0}")]
    Guest(String),
    /// A re-capture was asked of a workload that does not answer `recapture`: nothing would
    /// ever capture, so the board is not powered on.
    #[error(
        "workload `{0}` does not answer `recapture` on its console, so it cannot re-capture \
         itself (a --rootfs workload that does is built with `board build --recapture`)"
    )]
    NoRecapture(String),
    /// A re-capture needs a restored system, but the board cold-booted.
    #[error("the image was not restored, so there is nothing to re-capture: {0}")]
    NotRestored(String),
    /// The image was written, but the board kept running.
    #[error("image written, but the board did not power off")]
    NoPowerOff(#[source] RunError),
}

/// Bytes a store needs for a guest of `mem_mib`: two areas that each hold an image as large
/// as RAM, plus the header slots.
pub fn store_size(mem_mib: u32) -> u64 {
    2 * (u64::from(mem_mib) << 20) + (1 << 20)
}

/// Attaches `store` as `/dev/vdb` and names it in the boot parameters. For a capture the
/// file is created when missing; for a snapshot boot it must exist.
pub fn attach_store(
    opts: &mut RunOptions,
    store: &Path,
    capture: bool,
) -> Result<(), CaptureBootError> {
    if !store.exists() {
        if !capture {
            return Err(CaptureBootError::NoStore(store.to_path_buf()));
        }
        Store::create_file(store, store_size(opts.mem_mib)).map_err(|source| {
            CaptureBootError::CreateStore {
                path: store.to_path_buf(),
                source,
            }
        })?;
    }
    opts.disks.insert(
        0,
        Disk {
            path: store.to_path_buf(),
            readonly: false,
        },
    );
    opts.params.store = Some("/dev/vdb".into());
    opts.params.capture = capture;
    Ok(())
}

/// Boots cold with capture requested and waits for the image and the power-off. A capture
/// failure the device reports ends the run at once with the device's reason.
pub fn capture_boot(
    bundle: &Bundle,
    opts: &RunOptions,
    store: &Path,
) -> Result<Timeline, CaptureBootError> {
    let mut opts = opts.clone();
    attach_store(&mut opts, store, true)?;
    let mut s = Session::start(bundle, &opts).map_err(CaptureBootError::Boot)?;
    let done = Regex::new(r"snapboot: @capture-(done|failed)").expect("a valid regex");
    let res = s.wait_for(&done, "the capture to finish", opts.timeout);
    end_capture(s, res)
}

/// Ends a capture boot from the console line that decided it: the device's capture result,
/// or (re-capture) a cold-boot fallback. Waits for the power-off after a written image.
fn end_capture(
    mut s: Session,
    decided: Result<(String, f64), RunError>,
) -> Result<Timeline, CaptureBootError> {
    let line = match decided {
        Ok((line, _)) => line,
        Err(e) => {
            s.finish(Outcome::Exited {
                reason: e.to_string(),
            });
            return Err(CaptureBootError::Boot(e));
        }
    };
    if line.contains("@fallback") || line.contains("@capture-failed") {
        s.finish(Outcome::Exited {
            reason: line.clone(),
        });
        return Err(if line.contains("@fallback") {
            CaptureBootError::NotRestored(line)
        } else {
            CaptureBootError::Guest(line)
        });
    }
    let powered_off = s.wait_exit(Duration::from_secs(60));
    let tl = s.finish(Outcome::PoweredOff);
    powered_off.map_err(CaptureBootError::NoPowerOff)?;
    Ok(tl)
}

/// Snapshot-boots the image in `store` (the boot parameters name it), changes the restored
/// application's state with `change` (a console query, answered by a line matching
/// `answer`), then has the application re-capture (`recapture`, which every built-in
/// workload answers: [`crate::Workload::recapture`]) and waits for the new image and the
/// power-off; a workload that does not answer it is refused before the board powers on. The restored system keeps the capture boot's
/// settings (its kernel command line is the captured one), so the new image goes to the
/// same store under the same name. This is a device re-capturing after a small change
/// without a cold boot.
pub fn recapture_boot(
    bundle: &Bundle,
    opts: &RunOptions,
    store: &Path,
    change: &str,
    answer: &Regex,
) -> Result<Timeline, CaptureBootError> {
    if !bundle.workload.recapture {
        return Err(CaptureBootError::NoRecapture(bundle.workload.name.clone()));
    }
    let mut opts = opts.clone();
    attach_store(&mut opts, store, false)?;
    let mut s = Session::start(bundle, &opts).map_err(CaptureBootError::Boot)?;
    let restored = Regex::new(r"snapboot: @(restored|fallback)\b").expect("a valid regex");
    let done = Regex::new(r"snapboot: @capture-(done|failed)").expect("a valid regex");
    let res = s
        .wait_for(&restored, "the restored marker", opts.timeout)
        .and_then(|(line, t)| {
            if line.contains("@fallback") {
                return Ok((line, t));
            }
            s.send(change)?;
            s.wait_for(answer, "the answer to the change", opts.timeout)?;
            s.send("recapture")?;
            s.wait_for(&done, "the re-capture to finish", opts.timeout)
        });
    end_capture(s, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_holds_two_images_as_large_as_ram() {
        assert_eq!(store_size(512), (1 << 30) + (1 << 20));
    }

    #[test]
    fn a_snapshot_boot_needs_an_existing_store_and_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("none.store");
        let mut opts = test_opts();
        let err = attach_store(&mut opts, &store, false).unwrap_err();
        assert!(err.to_string().starts_with("no store at "), "{err}");
        assert!(!store.exists() && opts.disks.is_empty() && opts.params.store.is_none());
    }

    #[test]
    fn a_capture_creates_the_store_and_asks_for_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("new.store");
        let mut opts = test_opts();
        attach_store(&mut opts, &store, true).unwrap();
        assert_eq!(
            std::fs::metadata(&store).unwrap().len(),
            store_size(opts.mem_mib)
        );
        assert_eq!(opts.disks[0].path, store);
        assert_eq!(
            opts.params.render(),
            ["snapboot.store=/dev/vdb", "snapboot.capture"]
        );
    }

    #[test]
    fn a_workload_that_cannot_recapture_is_refused_before_the_board_powers_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("image.store");
        let mut bundle = crate::testutil::bundle();
        bundle.workload.name = "kiosk".into();
        bundle.workload.recapture = false;
        let answer = Regex::new("^probe-42$").unwrap();
        let err =
            recapture_boot(&bundle, &test_opts(), &store, "echo probe-42", &answer).unwrap_err();
        assert!(matches!(err, CaptureBootError::NoRecapture(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "workload `kiosk` does not answer `recapture` on its console, so it cannot \
             re-capture itself (a --rootfs workload that does is built with `board build \
             --recapture`)"
        );
    }

    fn test_opts() -> RunOptions {
        RunOptions {
            mem_mib: 128,
            max_mem_mib: None,
            smp: 1,
            accel: crate::qemu::Accel::Tcg,
            kernel: crate::qemu::KernelImage::Vmlinux,
            params: bootparams::BootParams::default(),
            cmdline: Vec::new(),
            disks: Vec::new(),
            timeout: Duration::from_secs(1),
            echo: false,
        }
    }
}
