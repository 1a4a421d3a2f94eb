//! Resume: first thing in the initramfs, before any filesystem is mounted. Find the image on
//! the store, validate it, stream its pages into `/dev/snapshot`, freeze, atomically restore.
//!
//! Every check happens before the kernel is asked to restore anything: the kernel's lockdown
//! state first (lockdown disables hibernation, [`crate::lockdown`]), the store by its magic, then per image (newest first, or those asked for) its signature when a key is
//! configured, its description (kernel identity, RAM size, memory layout, binding, swap
//! region, stream length) up front, the stream's header page (arm64: the kernel build and
//! the CPU it names) before the first page, and each chunk's checksum before any of its
//! pages is handed to the kernel. Pages handed over sit in the boot kernel's own buffers until
//! `SNAPSHOT_ATOMIC_RESTORE`; if a later chunk fails, closing the device discards them and
//! the next image is tried, or the cold boot continues with nothing restored.
//!
//! The image stays on the store (semi-permanent), unless `once` is set.

use crate::binding::{
    observe, observe_this_boot, record_boot_setup, BindingError, BOOT_SETUP_FILE,
};
use crate::devicetree::{boot_device_tree, DeviceTreeError};
use crate::guest::print_marker;
use crate::snapshot::{SnapshotDev, SnapshotError};
use crate::status::{ImageRef, Outcome, Refusal, Refused};
use crate::store::StoreUseError;
use crate::system::{check_running_page_size, running_identity, UnsupportedPageSize};
use bootparams::StoreAddress;
use boottrace::error_chain as chain;
use boottrace::Marker;
use snapimg::{BindingMismatch, BootSetup, Identity, Incompat, Page, StreamHeader, PAGE_SIZE};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most pages handed to the kernel per `writev`: a run never spans chunks, so this only
/// caps runs of zero and duplicate pages.
const RUN_PAGES: usize = 256;

/// Resume settings.
#[derive(Debug, Clone)]
pub struct ResumeOptions {
    /// The store's address.
    pub store: StoreAddress,
    /// Invalidate the image before restoring it (boot it once).
    pub once: bool,
    /// How long to wait for the store's device to appear.
    pub wait: Duration,
    /// This boot's setup, as [`observe_and_record_boot`] saw it (`None`: observe it here).
    pub boot_setup: Option<BootSetup>,
    /// Images to try first, in order (then the others, newest first).
    pub images: Vec<String>,
    /// The public key images must be signed for (`None`: look for
    /// [`crate::store::PUBLIC_KEY_FILE`]).
    pub public_key: Option<PathBuf>,
    /// Whether images are encrypted, and with which device key (`snapboot.encrypt=`).
    pub key: crate::devicekey::KeyConfig,
    /// The crash-loop guard's limit: an image restored this many times without a
    /// confirmation is skipped (`snapboot.attempts`).
    pub attempts: u32,
    /// When this boot's resume started (for the status's timings).
    pub started: Option<Instant>,
}

/// Why the image was not restored. The cold boot continues in every case.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The running kernel's pages are not the 4 KiB snapboot's images are made of.
    #[error("refusing to resume")]
    PageSize(#[source] UnsupportedPageSize),
    /// This machine's boot device tree (its reserved memory and CPUs) cannot be read.
    #[error("cannot read this machine's memory layout")]
    DeviceTree(#[source] DeviceTreeError),
    /// The image's first page is not a hibernation header snapboot can check.
    #[error("the image's stream header")]
    Header(#[source] snapimg::StreamError),
    /// The kernel is locked down, which disables hibernation.
    #[error("refusing to resume")]
    Lockdown(#[source] crate::lockdown::LockedDown),
    /// The image belongs to another kernel or machine.
    #[error("image does not fit this system")]
    Incompatible(#[from] Incompat),
    /// The swap region a lazy image pages from is not the image's own, or not as the
    /// capture left it.
    #[error("lazy image")]
    SwapRegion(#[source] crate::lazy::RegionError),
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
    /// The store or one of its images is unusable.
    #[error(transparent)]
    Store(#[from] StoreUseError),
    /// The configured public key cannot be read: no image is trusted.
    #[error("the public key images must be signed for")]
    Key(#[source] imagekey::KeyError),
    /// The image's page list and its description disagree on the stream's length.
    #[error("the image's page list holds {listed} pages, its description says the kernel's stream had {described}")]
    PageCount { listed: u64, described: u64 },
    /// The device key cannot be had: no encrypted image can be opened (the reason, with
    /// its causes: it is the same for every image).
    #[error("no device key to open the images with: {0}")]
    DeviceKey(String),
    /// The image is in the clear, and this device restores encrypted images only.
    #[error(
        "the image is not encrypted, and this device restores only images encrypted with its \
         device key (snapboot.encrypt={encrypt}): it was written by something else than this \
         device's captures"
    )]
    Clear { encrypt: String },
    /// The image is encrypted with another key than the device's.
    #[error(
        "the image is encrypted with device key {image}, this device's key is {device}: it \
         was captured under another key (the key changed, or the store comes from another \
         device)"
    )]
    ForeignKey {
        image: flashstore::KeyId,
        device: flashstore::KeyId,
    },
    /// The store has no image.
    #[error("store {store}: the store holds no image")]
    NoImage {
        /// The store's address and device.
        store: String,
    },
    /// Every image of the store was refused; each reason in turn.
    #[error("store {store}: no image on the store can be restored: {}", refused.iter().map(|r| format!("{}: {}", r.image, r.why)).collect::<Vec<_>>().join("; "))]
    NoneRestorable {
        /// The store's address and device.
        store: String,
        /// Each image in the order tried, with why it was refused.
        refused: Vec<Refused>,
    },
    /// The store's boot log says not to try it: stale (an update), or restored
    /// `snapboot.attempts` times without a confirmation (the crash-loop guard).
    #[error(transparent)]
    Guard(#[from] flashstore::Guarded),
    /// The restore attempt could not be recorded on the store, so the crash-loop guard
    /// could not count it.
    #[error("cannot record the restore attempt on the store")]
    Record(#[source] flashstore::StoreError),
}

impl ResumeError {
    /// The kind of refusal this is, for what the boot does next (see
    /// [`crate::status::recapture_after`]).
    pub fn refusal(&self) -> Refusal {
        match self {
            ResumeError::Incompatible(_)
            | ResumeError::Mismatch(_)
            | ResumeError::Unbound
            | ResumeError::Header(snapimg::StreamError::UnknownArch { .. }) => Refusal::Changed,
            // An image description of another format version: snapboot was updated.
            ResumeError::Store(StoreUseError::Description(_)) => Refusal::Changed,
            ResumeError::Guard(flashstore::Guarded::Stale { .. }) => Refusal::Stale,
            ResumeError::Guard(flashstore::Guarded::CrashLoop { .. }) => Refusal::CrashLoop,
            ResumeError::Store(StoreUseError::Key(_)) | ResumeError::Clear { .. } => {
                Refusal::Untrusted
            }
            ResumeError::DeviceKey(_) | ResumeError::ForeignKey { .. } => Refusal::Key,
            ResumeError::Store(StoreUseError::Image(
                flashstore::StoreError::Locked { .. } | flashstore::StoreError::WrongKey { .. },
            )) => Refusal::Key,
            ResumeError::Store(_)
            | ResumeError::Header(_)
            | ResumeError::PageCount { .. }
            | ResumeError::SwapRegion(_) => Refusal::Damaged,
            _ => Refusal::Other,
        }
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
        Marker::ResumeBound,
        Some(&format!(
            "{} device(s), command line, boot setup checked in {:.3} s",
            image.devices.len(),
            t.elapsed().as_secs_f64()
        )),
    );
    Ok(())
}

/// Hands every page of `src` to a fresh `/dev/snapshot` and reports the `resume-loaded`
/// marker; `check_header` sees page 0 first, and the device is opened only if it passes.
/// On error the device is closed, which discards what it was given.
fn load<M: flashstore::Medium>(
    src: &mut flashstore::ImageReader<'_, M>,
    what: &str,
    check_header: impl FnOnce(&Page) -> Result<(), ResumeError>,
) -> Result<SnapshotDev, ResumeError> {
    let started = Instant::now();
    let (mut read_time, mut write_time) = (Duration::ZERO, Duration::ZERO);
    let mut slowest = (Duration::ZERO, 0u64);
    let mut check_header = Some(check_header);
    let mut dev = None;
    let mut t = Instant::now();
    loop {
        let run = src
            .next_run(RUN_PAGES)
            .map_err(|e| ResumeError::Store(e.into()))?;
        let now = Instant::now();
        read_time += now - t;
        t = now;
        let Some(page0) = run.first() else {
            break;
        };
        let dev = match &mut dev {
            Some(dev) => dev,
            None => {
                if let Some(check) = check_header.take() {
                    check(page0)?;
                }
                t = Instant::now();
                dev.insert(SnapshotDev::open_restore()?)
            }
        };
        let first = dev.pages();
        dev.write_pages(&run)?;
        let now = Instant::now();
        if now - t > slowest.0 {
            slowest = (now - t, first);
        }
        write_time += now - t;
        t = now;
    }
    let dev = dev.ok_or(ResumeError::Header(snapimg::StreamError::Incomplete {
        received: 0,
        expected: 0,
    }))?;
    let secs = started.elapsed().as_secs_f64();
    print_marker(
        Marker::ResumeLoaded,
        Some(&format!(
            "{what}{} pages ({:.1} MiB) in {secs:.2} s (read+verify {:.2} s, kernel writes {:.2} s; \
             {}; slowest kernel write {:.3} s at stream page {})",
            dev.pages(),
            (dev.pages() * PAGE_SIZE as u64) as f64 / 1048576.0,
            read_time.as_secs_f64(),
            write_time.as_secs_f64(),
            stages(src),
            slowest.0.as_secs_f64(),
            slowest.1
        )),
    );
    Ok(dev)
}

/// Where a reader's time went, for the `resume-loaded` marker.
fn stages<M: flashstore::Medium>(r: &flashstore::ImageReader<'_, M>) -> String {
    let t = r.times;
    format!(
        "{} chunks, {:.1} MiB read in {:.2} s, checked in {:.2} s, decompressed in {:.2} s",
        r.chunks_read,
        r.bytes_read as f64 / 1048576.0,
        t.read.as_secs_f64(),
        t.check.as_secs_f64(),
        t.decode.as_secs_f64()
    )
}

/// What this boot checks every image against, observed once.
struct Expected {
    /// The image kernel this system's images must have been made by, with this machine's
    /// RAM and memory layout.
    identity: Identity,
    /// MPIDRs of this machine's CPUs (empty: not known).
    cpus: Vec<u64>,
}

impl Expected {
    fn observe() -> Result<Self, ResumeError> {
        let dt = boot_device_tree().map_err(ResumeError::DeviceTree)?;
        let record = std::fs::read_to_string(crate::system::IMAGE_KERNEL_RECORD).ok();
        Ok(Expected {
            identity: crate::system::image_kernel(running_identity(&dt), record.as_deref()),
            cpus: dt.cpus,
        })
    }

    /// Refuses a stream whose header page the restoring kernel would not take (see
    /// [`snapimg::ArchRecord::check_restorable`]).
    fn check_header(&self, page0: &Page) -> Result<(), ResumeError> {
        let header = StreamHeader::parse(page0).map_err(ResumeError::Header)?;
        Ok(header
            .arch
            .check_restorable(&self.identity.version, &self.cpus)?)
    }
}

fn try_resume(o: &ResumeOptions) -> Result<std::convert::Infallible, ResumeError> {
    print_marker(Marker::ResumeStart, Some(&o.store.to_string()));
    crate::lockdown::check_running().map_err(ResumeError::Lockdown)?;
    resume_store(o)
}

/// Freezes and jumps into the loaded image; returns only if the kernel did not restore.
fn restore(mut dev: SnapshotDev) -> Result<std::convert::Infallible, ResumeError> {
    dev.freeze()?;
    let err = dev.atomic_restore();
    let _ = dev.unfreeze();
    Err(err.into())
}

/// Restores from the store: the images in [`crate::store::candidates`] order, each checked
/// (signature when a key is configured, kernel, binding, every chunk as it is read) and the
/// first that passes restored. Each refused image is named with its reason on the console.
fn resume_store(o: &ResumeOptions) -> Result<std::convert::Infallible, ResumeError> {
    check_running_page_size().map_err(ResumeError::PageSize)?;
    let expected = Expected::observe()?;
    let key_path = o
        .public_key
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::store::PUBLIC_KEY_FILE));
    let key = crate::store::configured_key(&key_path).map_err(ResumeError::Key)?;
    // Read-write: the restore attempt is recorded on the store before the kernel takes over.
    let (mut store, at) = crate::store::open_address(&o.store, o.wait, true)?;
    let order = crate::store::candidates(store.images(), &o.images);
    if order.is_empty() {
        return Err(ResumeError::NoImage {
            store: at.to_string(),
        });
    }
    let log = store.boot_log().map_err(ResumeError::Record)?;
    // Without the device key no encrypted image opens: each is refused with why.
    let t_key = Instant::now();
    let no_key = crate::devicekey::unlock(&mut store, &o.key)
        .err()
        .map(|e| chain(&e));
    let trust = Trust {
        public: key.as_ref(),
        encrypt: &o.key.encrypt,
        device: store.key_id(),
        key_secs: t_key.elapsed().as_secs_f64(),
    };
    let mut refused = Vec::new();
    for name in order {
        let t = Instant::now();
        let loaded = match &no_key {
            Some(why) => Err(ResumeError::DeviceKey(why.clone())),
            None => guard(&store, &name, &log, o)
                .and_then(|()| load_flash_image(&store, &at.path, &name, &trust, &expected, o)),
        };
        match loaded {
            Ok(dev) => {
                let load_secs = t.elapsed().as_secs_f64();
                let generation = store.image(&name).map_or(0, |r| r.generation);
                if o.once {
                    store.remove(&name).map_err(StoreUseError::from)?;
                }
                match record_attempt(&mut store, (&name, generation), o, &refused, load_secs) {
                    Ok(()) => {
                        drop(store);
                        return restore(dev);
                    }
                    Err(e) => refused.push(refuse(&name, &e)),
                }
            }
            Err(e) => refused.push(refuse(&name, &e)),
        }
    }
    Err(ResumeError::NoneRestorable {
        store: at.to_string(),
        refused,
    })
}

/// Names a refused image on the console and keeps its reason.
fn refuse(name: &str, e: &ResumeError) -> Refused {
    let why = chain(e);
    print_marker(Marker::ImageRefused, Some(&format!("{name}: {why}")));
    Refused {
        image: name.into(),
        kind: e.refusal(),
        why,
    }
}

/// What the store's boot log says against trying image `name` at all: marked stale by an
/// update, or restored `snapboot.attempts` times without a confirmation.
fn guard(
    store: &flashstore::Store<std::fs::File>,
    name: &str,
    log: &flashstore::BootLog,
    o: &ResumeOptions,
) -> Result<(), ResumeError> {
    let Some(rec) = store.image(name) else {
        return Ok(());
    };
    Ok(log.guard(name, rec.generation, o.attempts)?)
}

/// Counts this restore of `name` in the store's boot log, with what the restored system
/// reports as its status (it reads it back: its own memory is the capture's).
fn record_attempt(
    store: &mut flashstore::Store<std::fs::File>,
    (name, generation): (&str, u64),
    o: &ResumeOptions,
    refused: &[Refused],
    load_secs: f64,
) -> Result<(), ResumeError> {
    let started = o.started;
    store
        .update_boot_log(|log| {
            let attempt = log.attempt(name, generation, crate::status::now_unix());
            let mut s = crate::status::new(Outcome::Restored, &bootparams::BootParams::default());
            s.attempts = o.attempts;
            s.image = Some(ImageRef {
                name: name.into(),
                generation,
            });
            s.attempt = Some(attempt);
            s.refused = refused.to_vec();
            s.timings.load = Some(load_secs);
            s.timings.resume = started.map(|t| t.elapsed().as_secs_f64());
            log.last_boot = crate::status::to_boot_log(&s);
        })
        .map_err(ResumeError::Record)
}

/// What makes an image trusted here: the factory's signature (a public key in the
/// initramfs), and where images are encrypted, the device key they must be encrypted with.
struct Trust<'a> {
    public: Option<&'a imagekey::PublicKey>,
    encrypt: &'a bootparams::Encrypt,
    /// The key the store is unlocked with.
    device: Option<flashstore::KeyId>,
    /// How long getting it took (unsealing it, or reading the key file).
    key_secs: f64,
}

impl Trust<'_> {
    /// Checks `rec` before anything of it is read: encrypted with the device's key where
    /// images are encrypted (its tag then authenticates it as the device's own capture, and
    /// a signature is checked only if it has one); otherwise signed when a public key is
    /// configured. Returns what was checked, for the console.
    fn check(
        &self,
        store: &flashstore::Store<std::fs::File>,
        rec: &flashstore::ImageRec,
    ) -> Result<String, ResumeError> {
        if self.encrypt.on() {
            let device = self.device.ok_or_else(|| ResumeError::Clear {
                encrypt: self.encrypt.word(),
            })?;
            match rec.sealed {
                None => {
                    return Err(ResumeError::Clear {
                        encrypt: self.encrypt.word(),
                    })
                }
                Some(k) if k != device => return Err(ResumeError::ForeignKey { image: k, device }),
                Some(_) => {}
            }
            let how = format!(
                ", encrypted with the device key ({} in {:.3} s)",
                match self.encrypt {
                    bootparams::Encrypt::KeyFile => "read",
                    _ => "unsealed",
                },
                self.key_secs
            );
            return match self.public {
                Some(key) if !rec.signature.is_empty() => {
                    crate::store::check_signature(store, rec, key)?;
                    Ok(how + ", signature checked")
                }
                _ => Ok(how),
            };
        }
        match self.public {
            Some(key) => {
                crate::store::check_signature(store, rec, key)?;
                Ok(", signature checked".into())
            }
            None => Ok(String::new()),
        }
    }
}

/// Checks image `name` of `store` (on `device`) and hands its pages to the kernel.
fn load_flash_image(
    store: &flashstore::Store<std::fs::File>,
    device: &Path,
    name: &str,
    trust: &Trust<'_>,
    expected: &Expected,
    o: &ResumeOptions,
) -> Result<SnapshotDev, ResumeError> {
    let rec = store
        .image(name)
        .ok_or_else(|| StoreUseError::from(flashstore::StoreError::NoImage(name.into())))?;
    let checked = trust.check(store, rec)?;
    let mut reader = store
        .reader(name)
        .map_err(|e| ResumeError::Store(e.into()))?;
    let d = snapimg::Description::decode(reader.user()).map_err(StoreUseError::from)?;
    if reader.pages() != d.stream_pages {
        return Err(ResumeError::PageCount {
            listed: reader.pages(),
            described: d.stream_pages,
        });
    }
    d.identity.check_against(&expected.identity)?;
    check_binding(d.binding().map_err(StoreUseError::from)?.as_ref(), o)?;
    if let Some(sw) = &d.swap {
        crate::lazy::check_region(device, sw, store.raw_region(rec))
            .map_err(ResumeError::SwapRegion)?;
    }
    load(
        &mut reader,
        &format!("image {name} (generation {}{checked}): ", rec.generation),
        |page0| expected.check_header(page0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use snapimg::{ArchRecord, MemoryMap, StreamError};

    const VERSION: &str = "#1 SMP Debian 6.1.192-2 (2026-11-16)";

    fn expected(version: &str, cpus: Vec<u64>) -> Expected {
        Expected {
            identity: Identity {
                release: "6.1.0-56-arm64".into(),
                version: version.into(),
                machine: "aarch64".into(),
                ram_bytes: 512 << 20,
                memory: MemoryMap::default(),
            },
            cpus,
        }
    }

    fn arm64_page0(version: &str, mpidr: u64) -> Box<Page> {
        StreamHeader::arm64(100, 131072, version, mpidr).encode()
    }

    #[test]
    fn an_arm64_header_of_another_kernel_or_cpu_is_refused_as_incompatible() {
        let e = expected(VERSION, vec![0, 1]);
        assert!(e.check_header(&arm64_page0(VERSION, 1)).is_ok());
        let other = e.check_header(&arm64_page0("#2 SMP Debian", 1));
        assert!(
            matches!(
                other,
                Err(ResumeError::Incompatible(Incompat::HeaderKernel { .. }))
            ),
            "{other:?}"
        );
        let cpu = e.check_header(&arm64_page0(VERSION, 0x100));
        assert!(
            matches!(
                cpu,
                Err(ResumeError::Incompatible(Incompat::NoSleepCpu {
                    mpidr: 0x100,
                    ..
                }))
            ),
            "{cpu:?}"
        );
        let text = chain(&cpu.unwrap_err());
        assert!(
            text.contains("MPIDR 0x100") && text.contains("0x0, 0x1"),
            "{text}"
        );
    }

    #[test]
    fn key_refusals_read_as_one_sentence_and_have_their_kinds() {
        let k = |b: u8| flashstore::KeyId([b; 16]);
        let clear = ResumeError::Clear {
            encrypt: "tpm".into(),
        };
        let foreign = ResumeError::ForeignKey {
            image: k(1),
            device: k(2),
        };
        for (e, kind) in [(&clear, Refusal::Untrusted), (&foreign, Refusal::Key)] {
            let text = e.to_string();
            assert!(!text.contains("  "), "{text}");
            assert_eq!(e.refusal(), kind);
        }
        assert!(foreign.to_string().contains(&format!(
            "device key {}, this device's key is {}",
            k(1),
            k(2)
        )));
    }

    #[test]
    fn a_page_0_that_is_no_header_is_refused_and_x86_passes() {
        let e = expected(VERSION, vec![0]);
        let garbage = e.check_header(&[0xa5; PAGE_SIZE]);
        assert!(
            matches!(
                garbage,
                Err(ResumeError::Header(StreamError::UnknownArch { .. }))
            ),
            "{garbage:?}"
        );
        let x86 = StreamHeader::x86_64(100, 131072, 7);
        assert!(matches!(x86.arch, ArchRecord::X86_64 { .. }));
        assert!(e.check_header(&x86.encode()).is_ok());
    }
}
