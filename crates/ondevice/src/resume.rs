//! Resume: first thing in the initramfs, before any filesystem is mounted. Find the image on
//! the store, validate it, stream its pages into `/dev/snapshot`, freeze, atomically restore.
//!
//! Every check happens before the kernel is asked to restore anything: the header, the
//! kernel identity and RAM size up front, and each 1 MiB chunk's checksum before any of its
//! pages is handed to the kernel. Pages handed over sit in the boot kernel's own buffers
//! until `SNAPSHOT_ATOMIC_RESTORE`; if a later chunk fails, closing the device discards
//! them and the cold boot continues with nothing restored.
//!
//! The image is never invalidated (semi-permanent), unless `once` is set.

use crate::binding::{
    observe, observe_this_boot, record_boot_setup, BindingError, BOOT_SETUP_FILE,
};
use crate::guest::print_marker;
use crate::snapshot::{SnapshotDev, SnapshotError};
use crate::system::running_identity;
use snapimg::{
    check_compat, BindingMismatch, BootSetup, ImageError, Incompat, ReadOptions, Store, PAGE_SIZE,
};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most pages handed to the kernel per `writev`: a run never spans chunks, so this only
/// caps runs of zero and duplicate pages.
const RUN_PAGES: usize = 256;

/// Resume settings.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The store device.
    pub store: PathBuf,
    /// Invalidate the image before restoring it (boot it once).
    pub once: bool,
    /// How long to wait for the store's device node to appear.
    pub wait: Duration,
    /// Decompression threads; `None` picks: inline on one CPU (a worker thread there only
    /// adds hand-offs), one per CPU otherwise.
    pub threads: Option<usize>,
    /// This boot's setup, as [`observe_and_record_boot`] saw it (`None`: observe it here).
    pub boot_setup: Option<BootSetup>,
}

/// Why the image was not restored. The cold boot continues in every case.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The store device never appeared.
    #[error("store device {0} not found")]
    NoDevice(PathBuf),
    /// The image is missing, damaged or unreadable.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The image belongs to another kernel or machine.
    #[error("image does not fit this system")]
    Incompatible(#[from] Incompat),
    /// The swap region a lazy image pages from is gone.
    #[error("lazy image: {0}")]
    SwapRegion(String),
    /// The image records nothing of what it is bound to.
    #[error(
        "the image records no root filesystem or boot setup to check (captured by an older \
         snapboot): capture it again"
    )]
    Unbound,
    /// What the image is bound to could not be observed on this boot.
    #[error("cannot check what the image is bound to")]
    Binding(#[source] BindingError),
    /// The image was captured on another system.
    #[error("image was captured on a different system: {0}")]
    Mismatch(BindingMismatch),
    /// The kernel refused a step.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// Waits up to `wait` for `path` to exist (devtmpfs creates nodes asynchronously).
pub fn wait_for_node(path: &Path, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    loop {
        if path.exists() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// First step of `snapboot resume` at every boot, restoring or not: observe this boot's
/// setup (the initramfs's `/init`, its files, snapboot's build id) and record it in
/// [`BOOT_SETUP_FILE`] for a capture later in this boot, which binds its image to it.
pub fn observe_and_record_boot() -> Result<BootSetup, BindingError> {
    let setup = observe_this_boot()?;
    record_boot_setup(&setup, Path::new(BOOT_SETUP_FILE))?;
    Ok(setup)
}

/// Restores the image on the store. Returns only if it was not restored, with the reason.
pub fn resume(o: &ResumeOptions) -> ResumeError {
    match try_resume(o) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// Refuses the image unless everything it is bound to is as it was at capture.
fn check_binding(image: Option<&snapimg::Binding>, o: &ResumeOptions) -> Result<(), ResumeError> {
    let image = image.ok_or(ResumeError::Unbound)?;
    let t = Instant::now();
    let setup = match &o.boot_setup {
        Some(s) => s.clone(),
        None => observe_this_boot().map_err(ResumeError::Binding)?,
    };
    let cmdline = std::fs::read_to_string("/proc/cmdline").map_err(|source| {
        ResumeError::Binding(BindingError::Read {
            path: "/proc/cmdline".into(),
            source,
        })
    })?;
    let running =
        observe(image, setup, &cmdline, Path::new("/dev"), o.wait).map_err(ResumeError::Binding)?;
    image.check(&running).map_err(ResumeError::Mismatch)?;
    print_marker(
        "resume-bound",
        Some(&format!(
            "{} device(s), command line, boot setup checked in {:.3} s",
            image.devices.len(),
            t.elapsed().as_secs_f64()
        )),
    );
    Ok(())
}

fn try_resume(o: &ResumeOptions) -> Result<std::convert::Infallible, ResumeError> {
    print_marker("resume-start", Some(&o.store.display().to_string()));
    if !wait_for_node(&o.store, o.wait) {
        return Err(ResumeError::NoDevice(o.store.clone()));
    }
    let started = Instant::now();
    let (mut read_time, mut write_time) = (Duration::ZERO, Duration::ZERO);
    let stages;
    let mut slowest = (Duration::ZERO, 0u64);
    let mut store = Store::open(&o.store, o.once)?;
    let mut dev = {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = o.threads.unwrap_or(if cpus == 1 { 0 } else { cpus });
        let mut reader = store.reader()?.with_options(ReadOptions {
            threads,
            ..ReadOptions::default()
        });
        let record = std::fs::read_to_string(crate::system::IMAGE_KERNEL_RECORD).ok();
        check_compat(
            reader.info(),
            &crate::system::image_kernel(running_identity(), record.as_deref()),
        )?;
        check_binding(reader.info().binding.as_ref(), o)?;
        if let Some(s) = &reader.info().swap {
            crate::lazy::check_region(&o.store, &s.region()).map_err(ResumeError::SwapRegion)?;
        }
        let mut dev = SnapshotDev::open_restore()?;
        let mut t = Instant::now();
        loop {
            let run = reader.next_run(RUN_PAGES)?;
            let now = Instant::now();
            read_time += now - t;
            t = now;
            if run.is_empty() {
                break;
            }
            let first = dev.pages();
            dev.write_pages(&run)?;
            let now = Instant::now();
            if now - t > slowest.0 {
                slowest = (now - t, first);
            }
            write_time += now - t;
            t = now;
        }
        stages = reader.stage_times();
        dev
    };
    let secs = started.elapsed().as_secs_f64();
    print_marker(
        "resume-loaded",
        Some(&format!(
            "{} pages ({:.1} MiB) in {secs:.2} s (read+verify {:.2} s, kernel writes {:.2} s; \
             {:.1} MiB read in {:.2} s, checked in {:.2} s, decompressed in {:.2} s; \
             slowest kernel write {:.3} s at stream page {})",
            dev.pages(),
            (dev.pages() * PAGE_SIZE as u64) as f64 / 1048576.0,
            read_time.as_secs_f64(),
            write_time.as_secs_f64(),
            stages.bytes as f64 / 1048576.0,
            stages.read.as_secs_f64(),
            stages.check.as_secs_f64(),
            stages.decode.as_secs_f64(),
            slowest.0.as_secs_f64(),
            slowest.1
        )),
    );
    if o.once {
        store.invalidate()?;
    }
    drop(store);
    dev.freeze()?;
    let err = dev.atomic_restore();
    let _ = dev.unfreeze();
    Err(err.into())
}
