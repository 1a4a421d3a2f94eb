//! Capture on the board: a cold boot with `snapboot.capture` and a store attached, which
//! takes the image at the ready point and powers off.

use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

use boottrace::{Marker, Outcome, Timeline};
use flashstore::{ChunkCheck, FormatOptions, Store, StoreError};

use crate::qemu::{RunError, Session};
use crate::run_options::{Disk, RunOptions};
use bundle::bundle::Bundle;

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
    CreateFile {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The new store file could not be formatted.
    #[error("formatting store {}", path.display())]
    Format {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
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
    /// A store for an SD card whose size QEMU's SD card refuses.
    #[error(
        "store {} is {bytes} bytes: an SD card's size is a power of two (capture into a new \
         store with --store-on sd)",
        path.display()
    )]
    SdCardSize {
        /// The store.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A store for an SD card that cannot be found by its label.
    #[error(
        "store {} has no label, and the SD card's store is found by its label (LABEL=): \
         capture into a new store with --store-on sd",
        path.display()
    )]
    SdStoreLabel {
        /// The store.
        path: PathBuf,
    },
    /// The store file could not be read.
    #[error("reading store {}", path.display())]
    Read {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The store file is not a store.
    #[error("opening store {}", path.display())]
    Open {
        /// The store.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
}

/// The label of a store the board puts on an SD card (`--store-on sd`): the device and
/// the restorer find it by `snapboot.store=LABEL=sdstore`, as a board whose card is
/// `mmcblk0` or `mmcblk1` depending on its controllers would.
pub const SD_STORE_LABEL: &str = "sdstore";

pub use crate::run_options::store_size;

/// Creates a new, empty store file of `bytes` (sparse) at `path` with chunk checksums
/// `check`, replacing any file there, as `snapboot store init --size` does on a device.
pub fn create_store(
    path: &Path,
    bytes: u64,
    check: ChunkCheck,
) -> Result<Store<std::fs::File>, CaptureBootError> {
    create_labelled_store(path, bytes, check, "")
}

/// The store a capture creates for the board `opts` describe ([`create_store`]): the
/// [`store_size`] of its RAM, or on an SD card (`store_on_sd`) the next power of two and
/// the label [`SD_STORE_LABEL`].
pub fn create_store_for(
    opts: &RunOptions,
    path: &Path,
    check: ChunkCheck,
) -> Result<Store<std::fs::File>, CaptureBootError> {
    let bytes = store_size(opts.mem_mib);
    if opts.store_on_sd {
        create_labelled_store(path, bytes.next_power_of_two(), check, SD_STORE_LABEL)
    } else {
        create_store(path, bytes, check)
    }
}

/// [`create_store`] with the store's `label` (empty: none).
fn create_labelled_store(
    path: &Path,
    bytes: u64,
    check: ChunkCheck,
    label: &str,
) -> Result<Store<std::fs::File>, CaptureBootError> {
    let _ = std::fs::remove_file(path);
    let io = |source| CaptureBootError::CreateFile {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io)?;
    f.set_len(bytes).map_err(io)?;
    let label = flashstore::Label::new(label).map_err(|e| CaptureBootError::Format {
        path: path.to_path_buf(),
        source: StoreError::from(e),
    })?;
    let opts = FormatOptions {
        check,
        label,
        ..FormatOptions::default()
    };
    Store::format(f, opts).map_err(|source| CaptureBootError::Format {
        path: path.to_path_buf(),
        source,
    })
}

/// Attaches `store` as `/dev/vdb` and names it in the boot parameters. For a capture the
/// file is created when missing; for a snapshot boot it must exist. On the UEFI PC `store`
/// is the PC's whole disk instead, whose store partition the root's config file names
/// (`crate::uefi`; a capture makes the disk when missing).
pub fn attach_store(
    opts: &mut RunOptions,
    store: &Path,
    capture: bool,
) -> Result<(), CaptureBootError> {
    if !store.exists() && !capture {
        return Err(CaptureBootError::NoStore(store.to_path_buf()));
    }
    // Before the UEFI PC's own disk: the PC refuses an SD card by name when it starts.
    if opts.store_on_sd {
        return attach_sd_store(opts, store, capture);
    }
    if opts.firmware == crate::run_options::Firmware::Uefi {
        opts.boot_disk = Some(store.to_path_buf());
        opts.params.store = None;
        opts.params.capture = capture;
        return Ok(());
    }
    if !store.exists() {
        create_store(store, store_size(opts.mem_mib), ChunkCheck::Xxh3)?;
    }
    opts.disks.insert(
        0,
        Disk {
            path: store.to_path_buf(),
            readonly: false,
            sd: false,
        },
    );
    opts.params.store = Some(bootparams::StoreAddress::path("/dev/vdb"));
    opts.params.capture = capture;
    Ok(())
}

/// [`attach_store`] on an SD card: the store made (labelled [`SD_STORE_LABEL`], its size
/// the next power of two, as an SD card's is) or checked to be one, attached as the
/// board's SD card and named by its label.
fn attach_sd_store(
    opts: &mut RunOptions,
    store: &Path,
    capture: bool,
) -> Result<(), CaptureBootError> {
    let label = if store.exists() {
        let read = |source| CaptureBootError::Read {
            path: store.to_path_buf(),
            source,
        };
        let f = std::fs::File::open(store).map_err(read)?;
        let bytes = f.metadata().map_err(read)?.len();
        if !bytes.is_power_of_two() {
            return Err(CaptureBootError::SdCardSize {
                path: store.to_path_buf(),
                bytes,
            });
        }
        // The superblocks alone, as the device's search by label reads them.
        let label = flashstore::read_label(&f).map_err(|source| CaptureBootError::Open {
            path: store.to_path_buf(),
            source,
        })?;
        if label.is_empty() {
            return Err(CaptureBootError::SdStoreLabel {
                path: store.to_path_buf(),
            });
        }
        label
    } else {
        create_store_for(opts, store, ChunkCheck::Xxh3)?;
        SD_STORE_LABEL.to_string()
    };
    opts.disks.push(Disk {
        path: store.to_path_buf(),
        readonly: false,
        sd: true,
    });
    opts.params.store = Some(bootparams::StoreAddress::Label(label));
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
    capture_boot_attached(bundle, &opts)
}

/// [`capture_boot`] onto the store `opts` already attach and name: a store in a partition,
/// or behind other disks (`opts.params.store` any address, `opts.disks` holding it).
pub fn capture_boot_attached(
    bundle: &Bundle,
    opts: &RunOptions,
) -> Result<Timeline, CaptureBootError> {
    let mut opts = opts.clone();
    opts.params.capture = true;
    let mut s = Session::start(bundle, &opts).map_err(CaptureBootError::Boot)?;
    let res = s.wait_for_marker(CAPTURE_END, "the capture to finish", opts.timeout);
    end_capture(s, res)
}

/// The markers that end a capture: the image is written, or it is not.
const CAPTURE_END: &[Marker] = &[Marker::CaptureDone, Marker::CaptureFailed];

/// Ends a capture boot from the console line that decided it: the device's capture result,
/// or (re-capture) a cold-boot fallback. Waits for the power-off after a written image.
fn end_capture(
    mut s: Session,
    decided: Result<(Marker, String, f64), RunError>,
) -> Result<Timeline, CaptureBootError> {
    let (marker, line) = match decided {
        Ok((marker, line, _)) => (marker, line),
        Err(e) => {
            s.finish(Outcome::Exited {
                reason: e.to_string(),
            });
            return Err(CaptureBootError::Boot(e));
        }
    };
    if marker != Marker::CaptureDone {
        s.finish(Outcome::Exited {
            reason: line.clone(),
        });
        return Err(if marker == Marker::Fallback {
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
/// workload answers: [`bundle::Workload::recapture`]) and waits for the new image and the
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
    let res = s
        .wait_for_marker(
            &[Marker::Restored, Marker::Fallback],
            "the restored marker",
            opts.timeout,
        )
        .and_then(|(marker, line, t)| {
            if marker == Marker::Fallback {
                return Ok(Some((marker, line, t)));
            }
            s.send(change)?;
            s.wait_for(answer, "the answer to the change", opts.timeout)?;
            Ok(None)
        });
    match res.transpose() {
        // A fallback or a failed boot decided the capture already.
        Some(decided) => end_capture(s, decided),
        None => recapture_now(s, opts.timeout),
    }
}

/// Has the application of a restored board (a session past its `restored` marker)
/// re-capture itself: types `recapture` and waits up to `timeout` for the new image and the
/// power-off. The session ends here.
pub fn recapture_now(mut s: Session, timeout: Duration) -> Result<Timeline, CaptureBootError> {
    let res = s
        .send("recapture")
        .and_then(|_| s.wait_for_marker(CAPTURE_END, "the re-capture to finish", timeout));
    end_capture(s, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_holds_two_images_as_large_as_ram_and_a_swap_region() {
        assert_eq!(store_size(512), 3 << 29);
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
        let s = Store::open(std::fs::File::open(&store).unwrap()).unwrap();
        assert!(s.images().is_empty(), "a new, empty store");
        assert_eq!(opts.disks[0].path, store);
        assert_eq!(
            opts.params.render(),
            ["snapboot.store=/dev/vdb", "snapboot.capture"]
        );
    }

    #[test]
    fn on_the_uefi_pc_the_store_is_the_pcs_disk_and_the_config_file_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("pc.img");
        let mut opts = test_opts();
        opts.firmware = crate::run_options::Firmware::Uefi;
        assert!(matches!(
            attach_store(&mut opts, &disk, false),
            Err(CaptureBootError::NoStore(_))
        ));
        attach_store(&mut opts, &disk, true).unwrap();
        assert!(
            !disk.exists(),
            "the board makes the disk from the bundle's, not a store file"
        );
        assert_eq!(opts.boot_disk.as_deref(), Some(disk.as_path()));
        assert!(opts.disks.is_empty());
        assert_eq!(opts.params.render(), ["snapboot.capture"]);
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

    /// On an SD card: a new store is a power of two and labelled, attached as the card and
    /// named by its label; a store a card cannot be (its size) or that nothing can find
    /// (no label) is refused with the reason.
    #[test]
    fn a_store_on_an_sd_card_is_a_power_of_two_found_by_its_label() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("sd.store");
        let mut opts = test_opts();
        opts.store_on_sd = true;
        attach_store(&mut opts, &store, true).unwrap();
        let bytes = std::fs::metadata(&store).unwrap().len();
        assert_eq!(bytes, store_size(opts.mem_mib).next_power_of_two());
        assert!(bytes.is_power_of_two() && bytes >= store_size(opts.mem_mib));
        let s = Store::open(std::fs::File::open(&store).unwrap()).unwrap();
        assert_eq!(s.label(), SD_STORE_LABEL);
        assert_eq!(opts.disks.len(), 1);
        assert!(opts.disks[0].sd && opts.disks[0].path == store);
        assert_eq!(
            opts.params.render(),
            ["snapboot.store=LABEL=sdstore", "snapboot.capture"]
        );
        // The same store again, for a restore.
        let mut again = test_opts();
        again.store_on_sd = true;
        attach_store(&mut again, &store, false).unwrap();
        assert_eq!(again.params.render(), ["snapboot.store=LABEL=sdstore"]);

        // A store made for a virtio disk: 3x RAM is no power of two.
        let plain = dir.path().join("plain.store");
        create_store(&plain, store_size(128), ChunkCheck::Xxh3).unwrap();
        let mut o = test_opts();
        o.store_on_sd = true;
        let e = attach_store(&mut o, &plain, false).unwrap_err();
        assert!(
            matches!(e, CaptureBootError::SdCardSize { bytes, .. } if bytes == 3 << 27),
            "{e}"
        );
        assert!(e.to_string().contains("power of two"), "{e}");
        // A power of two without a label: nothing would find it.
        let unlabelled = dir.path().join("unlabelled.store");
        create_store(&unlabelled, 1 << 29, ChunkCheck::Xxh3).unwrap();
        let e = attach_store(&mut o, &unlabelled, false).unwrap_err();
        assert!(matches!(e, CaptureBootError::SdStoreLabel { .. }), "{e}");
        assert!(o.disks.is_empty(), "nothing attached after a refusal");
    }

    fn test_opts() -> RunOptions {
        RunOptions {
            mem_mib: 128,
            max_mem_mib: None,
            smp: 1,
            accel: crate::run_options::Accel::Tcg,
            kernel: crate::run_options::KernelImage::Vmlinux,
            firmware: crate::run_options::Firmware::Direct,
            params: bootparams::BootParams::default(),
            cmdline: Vec::new(),
            disks: Vec::new(),
            tpm: None,
            boot_disk: None,
            acpi_tables: Vec::new(),
            store_on_sd: false,
            watchdog: false,
            timeout: Duration::from_secs(1),
            echo: false,
        }
    }
}
