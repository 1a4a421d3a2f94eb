//! Resume: first thing in the initramfs, before any filesystem is mounted. Find the image on
//! the store, validate it, stream its pages into `/dev/snapshot`, freeze, atomically restore.
//!
//! Every check happens before the kernel is asked to restore anything: the kernel's lockdown
//! state first (lockdown disables hibernation, [`devsys::lockdown`]), the store by its magic, then per image (newest first, or those asked for) its signature when a key is
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
use crate::guest::print_marker;
use crate::status::{ImageRef, Outcome, RefusalRecord};
use crate::store::StoreUseError;
use admission::{Admitted, Candidate, Expected, Refused, Rules, Sealing, Trust};
use bootparams::StoreAddress;
use bootstatus::Throughput;
use boottrace::error_chain as chain;
use boottrace::Marker;
use devsys::devicetree::{boot_device_tree, DeviceTreeError};
use devsys::snapshot::{SnapshotDev, SnapshotError};
use devsys::system::{check_running_page_size, running_identity, UnsupportedPageSize};
use flashstore::{Medium, StoreError};
use snapimg::{Binding, BootSetup, Page, StreamHeader, SwapRegion, PAGE_SIZE};
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
    /// The hardware watchdog's timeout across the restore (`snapboot.watchdog`; `None`: it
    /// is not armed).
    pub watchdog: Option<u32>,
    /// When this boot's resume started (for the status's timings).
    pub started: Option<Instant>,
}

/// Why nothing was restored. The cold boot continues in every case. Why each image was
/// refused is the one rule's [`Refused`] (crate `admission`), kept in
/// [`ResumeError::NoneRestorable`].
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The running kernel's pages are not the 4 KiB snapboot's images are made of.
    #[error("refusing to resume")]
    PageSize(#[source] UnsupportedPageSize),
    /// This machine's boot device tree (its reserved memory and CPUs) cannot be read.
    #[error("cannot read this machine's memory layout")]
    DeviceTree(#[source] DeviceTreeError),
    /// This boot's EFI runtime map cannot be read.
    #[error("cannot read this machine's memory layout")]
    EfiRuntime(#[source] devsys::efi_runtime::BadRegion),
    /// The kernel is locked down, which disables hibernation.
    #[error("refusing to resume")]
    Lockdown(#[source] devsys::lockdown::LockedDown),
    /// The kernel refused the restore itself.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The store is unusable.
    #[error(transparent)]
    Store(#[from] StoreUseError),
    /// The configured public key cannot be read: no image is trusted.
    #[error("the public key images must be signed for")]
    Key(#[source] imagekey::KeyError),
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
        refused: Vec<RefusalRecord>,
    },
}

/// First step of `snapboot resume` at every boot, restoring or not: observe this boot's
/// setup (the initramfs's manifest, file by file, and snapboot's build id) and record it in
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

/// What this boot has of everything `image` is bound to: the boot setup (as
/// [`observe_and_record_boot`] saw it, or observed now), the command line, and each bound
/// device, waited for as long as the store is.
fn observe_running(image: &Binding, o: &ResumeOptions) -> Result<Binding, Refused> {
    let unobservable = |e: BindingError| Refused::Unobservable(chain(&e));
    let setup = match &o.boot_setup {
        Some(s) => s.clone(),
        None => observe_this_boot().map_err(unobservable)?,
    };
    let cmdline = std::fs::read_to_string("/proc/cmdline").map_err(|source| {
        unobservable(BindingError::Read {
            path: "/proc/cmdline".into(),
            source,
        })
    })?;
    observe(image, setup, &cmdline, Path::new("/dev"), o.wait).map_err(unobservable)
}

/// What reading an image of the store says, as the one rule words and kinds it.
pub fn refusal(e: StoreError) -> Refused {
    match e {
        StoreError::Corrupt(d) => d.into(),
        StoreError::NoImage(name) => Refused::Missing(name),
        StoreError::BadName(name) => Refused::BadName(name),
        StoreError::NotSignable(check) => Refused::NotSignable(check),
        e @ (StoreError::Locked { .. }
        | StoreError::LockedChunk { .. }
        | StoreError::WrongKey { .. }) => Refused::Sealed(e.to_string()),
        other => Refused::Unreadable(chain(&other)),
    }
}

/// Resume's [`admission::ImageSource`]: the images of a store read through `flashstore`
/// (the reader kept for the pages), and this boot observed by `observe`.
pub struct FlashSource<'s, M: Medium> {
    store: &'s flashstore::Store<M>,
    reader: Option<flashstore::ImageReader<'s, M>>,
    observe: &'s mut dyn FnMut(&Binding) -> Result<Binding, Refused>,
    tpm: Option<&'s crate::devicekey::KeyConfig>,
}

impl<'s, M: Medium> FlashSource<'s, M> {
    /// A source over `store`, observing this boot with `observe`, reading rollback counters
    /// from the TPM `tpm` configures (`None`: this is not the device, and a stamped image
    /// is refused).
    pub fn new(
        store: &'s flashstore::Store<M>,
        observe: &'s mut dyn FnMut(&Binding) -> Result<Binding, Refused>,
        tpm: Option<&'s crate::devicekey::KeyConfig>,
    ) -> Self {
        FlashSource {
            store,
            reader: None,
            observe,
            tpm,
        }
    }

    /// The reader of the image admitted last: its pages, checked chunk by chunk as read.
    pub fn into_reader(self) -> Option<flashstore::ImageReader<'s, M>> {
        self.reader
    }
}

impl<M: Medium> admission::ImageSource for FlashSource<'_, M> {
    fn page_list(&mut self, rec: &flashstore::ImageRec) -> Result<(&[u8], u64), Refused> {
        let r = self.store.reader(&rec.name).map_err(refusal)?;
        let r = self.reader.insert(r);
        Ok((r.user(), r.pages()))
    }

    fn running_binding(&mut self, image: &Binding) -> Result<Binding, Refused> {
        (self.observe)(image)
    }

    fn check_swap_region(
        &mut self,
        rec: &flashstore::ImageRec,
        sw: &SwapRegion,
    ) -> Result<(), Refused> {
        let medium = self.store.medium();
        snapimg::check_region(sw, self.store.raw_region(rec), |what, at, page| {
            medium
                .read_at(page, at)
                .map_err(|e| Refused::SwapRegion(format!("reading the {what} at byte {at}: {e}")))
        })
    }

    fn rollback_counter(&mut self, counter: u32) -> Result<Option<u64>, String> {
        match self.tpm {
            Some(cfg) => crate::rollback::read(cfg, counter),
            None => Err(format!(
                "counter {counter:#010x} is the device's TPM's, and this check runs elsewhere"
            )),
        }
    }
}

/// Admits `candidate` of `store` by the one rule, and checks its stream header as the
/// kernel will see it: what resume does of an image before any page reaches the kernel.
/// Returns the reader of its pages (page 0 checked) and what made it trusted.
pub fn admit_image<'s, M: Medium>(
    store: &'s flashstore::Store<M>,
    candidate: Candidate<'_>,
    rules: &Rules<'_>,
    observe: &'s mut dyn FnMut(&Binding) -> Result<Binding, Refused>,
    tpm: Option<&'s crate::devicekey::KeyConfig>,
) -> Result<(flashstore::ImageReader<'s, M>, Admitted), Refused> {
    let mut src = FlashSource::new(store, observe, tpm);
    let admitted = admission::admit(&mut src, candidate, store.catalog(), rules)?;
    let reader = src.into_reader().expect("admit read the page list");
    Ok((reader, admitted))
}

/// Everything resume checks of one image before the kernel takes a page: the one rule
/// ([`admit_image`]), the stream header, and every chunk's checksum as its pages are read,
/// in the order `snapboot resume` reads them; nothing is handed to a kernel. Returns the
/// pages read. The restorer's driver is held to the same outcomes by
/// crates/restorer/tests/parity.rs.
pub fn check_image<'s, M: Medium>(
    store: &'s flashstore::Store<M>,
    candidate: Candidate<'_>,
    rules: &Rules<'_>,
    observe: &'s mut dyn FnMut(&Binding) -> Result<Binding, Refused>,
) -> Result<u64, Refused> {
    let (mut reader, _) = admit_image(store, candidate, rules, observe, None)?;
    let pages = reader.pages();
    let mut read = 0u64;
    loop {
        let run = reader.next_run(RUN_PAGES).map_err(refusal)?;
        let Some(page0) = run.first() else {
            return Ok(read);
        };
        if read == 0 {
            check_page0(page0, pages, rules.expected)?;
        }
        read += run.len() as u64;
    }
}

/// Checks page 0 of an admitted image of `pages` pages ([`admission::check_header`]).
pub fn check_page0(page0: &Page, pages: u64, expected: &Expected) -> Result<(), Refused> {
    let header = StreamHeader::parse(page0).map_err(Refused::Header)?;
    admission::check_header(&header, pages, expected)
}

/// Why loading stopped: the store's reader, or the kernel or the header check.
enum LoadStop {
    Store(flashstore::StoreError),
    Refused(Refused),
}

impl From<flashstore::StoreError> for LoadStop {
    fn from(e: flashstore::StoreError) -> Self {
        LoadStop::Store(e)
    }
}

/// The CPUs that read, check and decompress the image: every online one this process may
/// run on (the restore kernels are built with SMP for it).
pub fn decode_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Hands every page of `src` to a fresh `/dev/snapshot` while [`decode_workers`] threads
/// read, check and decompress ahead, in stream order; reports the `resume-loaded` and
/// `throughput` markers and returns the device and the throughput. `check_header` sees page 0
/// first, and the device is opened only if it passes. On error the device is closed, which
/// discards what it was given.
fn load<M: flashstore::Medium + Sync>(
    src: &mut flashstore::ImageReader<'_, M>,
    what: &str,
    check_header: impl FnOnce(&Page) -> Result<(), Refused>,
) -> Result<(SnapshotDev, Throughput), Refused> {
    let kernel = |e: SnapshotError| LoadStop::Refused(Refused::NotPlaced(chain(&e)));
    let started = Instant::now();
    let workers = decode_workers();
    let mut place = Duration::ZERO;
    let mut slowest = (Duration::ZERO, 0u64);
    let mut check_header = Some(check_header);
    let mut dev: Option<SnapshotDev> = None;
    let streamed = src.stream(
        workers,
        RUN_PAGES,
        |run: &[&Page]| -> Result<(), LoadStop> {
            let dev = match &mut dev {
                Some(dev) => dev,
                None => {
                    if let Some(check) = check_header.take() {
                        check(run[0]).map_err(LoadStop::Refused)?;
                    }
                    dev.insert(SnapshotDev::open_restore().map_err(kernel)?)
                }
            };
            let t = Instant::now();
            let first = dev.pages();
            dev.write_pages(run).map_err(kernel)?;
            let spent = t.elapsed();
            if spent > slowest.0 {
                slowest = (spent, first);
            }
            place += spent;
            Ok(())
        },
    );
    match streamed {
        Ok(()) => {}
        Err(LoadStop::Store(e)) => return Err(refusal(e)),
        Err(LoadStop::Refused(r)) => return Err(r),
    }
    let dev = dev.ok_or(Refused::Header(snapimg::StreamError::Incomplete {
        received: 0,
        expected: 0,
    }))?;
    let st = src.stats();
    let throughput = Throughput {
        read_bytes: st.bytes,
        requests: st.requests,
        large_bytes: st.large_bytes,
        decoded_bytes: st.decoded,
        placed_bytes: dev.pages() * PAGE_SIZE as u64,
        read_s: st.times.read.as_secs_f64(),
        check_s: st.times.check.as_secs_f64(),
        decode_s: st.times.decode.as_secs_f64(),
        place_s: place.as_secs_f64(),
        wall_s: started.elapsed().as_secs_f64(),
        workers: workers as u32,
    };
    print_marker(
        Marker::ResumeLoaded,
        Some(&format!(
            "{what}{} pages ({:.1} MiB) in {:.2} s ({} chunks; slowest kernel write {:.3} s at \
             stream page {})",
            dev.pages(),
            (dev.pages() * PAGE_SIZE as u64) as f64 / 1048576.0,
            throughput.wall_s,
            st.chunks,
            slowest.0.as_secs_f64(),
            slowest.1
        )),
    );
    print_marker(Marker::Throughput, Some(&throughput.line()));
    Ok((dev, throughput))
}

/// What this boot checks every image against, observed once: the image kernel's identity
/// (the running kernel's, or on a restore kernel the stock kernel's it records), this
/// machine's RAM and memory layout, and its CPUs (the boot device tree's MPIDRs, and how
/// many are online: on the restore kernel too, which is SMP so that it sees them all; a
/// count that cannot be read is not checked).
fn observe_expected() -> Result<Expected, ResumeError> {
    let dt = boot_device_tree().map_err(ResumeError::DeviceTree)?;
    let efi = devsys::efi_runtime::read_runtime_map(Path::new(devsys::efi_runtime::RUNTIME_MAP))
        .map_err(ResumeError::EfiRuntime)?;
    let record = std::fs::read_to_string(devsys::system::IMAGE_KERNEL_RECORD).ok();
    Ok(Expected::observed(
        devsys::system::image_kernel(running_identity(&dt, efi), record.as_deref()),
        dt.cpus,
        devsys::cpus::online_cpus().ok(),
    ))
}

fn try_resume(o: &ResumeOptions) -> Result<std::convert::Infallible, ResumeError> {
    // Whether udev already runs: the early path's whole point, said where it is measured.
    let udev = if devsys::system::udevd_running(std::path::Path::new("/proc")) {
        "after udev"
    } else {
        "before udev"
    };
    print_marker(Marker::ResumeStart, Some(&format!("{} ({udev})", o.store)));
    devsys::lockdown::check_running().map_err(ResumeError::Lockdown)?;
    resume_store(o)
}

/// Freezes and jumps into the loaded image; returns only if the kernel did not restore.
/// With `watchdog`, the hardware watchdog is armed first and left running into the image:
/// the restored system must feed it until its restore is confirmed, or the machine resets
/// (and the attempt, already counted, counts toward the crash-loop guard). A restore that
/// does not happen stops it again, so the cold boot that follows is not reset.
fn restore(
    mut dev: SnapshotDev,
    armed: Option<devsys::watchdog::Watchdog>,
) -> Result<std::convert::Infallible, ResumeError> {
    dev.freeze()?;
    let err = dev.atomic_restore();
    let _ = dev.unfreeze();
    if let Some(w) = armed {
        let _ = w.disarm();
    }
    Err(err.into())
}

/// Arms [`devsys::watchdog::WATCHDOG0`] with `secs` for the restore and says so (the
/// `watchdog` marker); returns it and the timeout the driver set. A watchdog that cannot be
/// armed is said too, and the restore goes on without it (it is a safety net, not a
/// condition of the restore).
fn arm_watchdog(secs: u32) -> Option<(devsys::watchdog::Watchdog, u32)> {
    let path = Path::new(devsys::watchdog::WATCHDOG0);
    let armed = devsys::watchdog::Watchdog::open(path).and_then(|w| {
        let set = w.set_timeout(secs)?;
        w.keepalive()?;
        Ok((w, set))
    });
    match armed {
        Ok((w, set)) => {
            print_marker(
                Marker::Watchdog,
                Some(&format!(
                    "{} armed for {set} s across the restore",
                    path.display()
                )),
            );
            Some((w, set))
        }
        Err(e) => {
            print_marker(
                Marker::Watchdog,
                Some(&format!(
                    "{} not armed: {e}; restoring without it",
                    path.display()
                )),
            );
            None
        }
    }
}

/// Restores from the store: the images in [`crate::store::candidates`] order, each checked
/// (signature when a key is configured, kernel, binding, every chunk as it is read) and the
/// first that passes restored. Each refused image is named with its reason on the console.
fn resume_store(o: &ResumeOptions) -> Result<std::convert::Infallible, ResumeError> {
    check_running_page_size().map_err(ResumeError::PageSize)?;
    let expected = observe_expected()?;
    let key_path = o
        .public_key
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::store::PUBLIC_KEY_FILE));
    let key = crate::store::configured_key(&key_path).map_err(ResumeError::Key)?;
    // Read-write: the restore attempt is recorded on the store before the kernel takes over.
    let (mut store, at) = crate::store::open_address(&o.store, o.wait, true)?;
    let names: Vec<String> = admission::candidates(store.images(), &o.images)
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    if names.is_empty() {
        return Err(ResumeError::NoImage {
            store: at.to_string(),
        });
    }
    let log = store
        .boot_log()
        .map_err(|e| ResumeError::Store(StoreUseError::Image(e)))?;
    // Without the device key no encrypted image opens: each is refused with why.
    let t_key = Instant::now();
    let no_key = crate::devicekey::unlock(&mut store, &o.key)
        .err()
        .map(|e| chain(&e));
    let key_secs = t_key.elapsed().as_secs_f64();
    let trust = Trust {
        key,
        sealing: if o.key.encrypt.on() {
            Sealing::Required {
                word: o.key.encrypt.word(),
                device: store.key_id(),
            }
        } else {
            Sealing::Clear
        },
    };
    let mut refused = Vec::new();
    for name in names {
        let t = Instant::now();
        let rules = Rules {
            log: (&log, o.attempts),
            trust: &trust,
            expected: &expected,
            rollback: o.key.rollback,
        };
        let loaded = match &no_key {
            Some(why) => Err(Refused::DeviceKey(why.clone())),
            None => load_flash_image(&store, &name, o, &rules, key_secs),
        };
        match loaded {
            Ok((dev, throughput)) => {
                let load_secs = t.elapsed().as_secs_f64();
                let generation = store.image(&name).map_or(0, |r| r.generation);
                if o.once {
                    store.remove(&name).map_err(StoreUseError::from)?;
                }
                // Armed before the attempt is recorded, so the restored system reads that
                // it must feed it.
                let armed = o.watchdog.and_then(arm_watchdog);
                let timeout = armed.as_ref().map(|(_, t)| *t);
                let counted = (name.as_str(), generation);
                let measured = (load_secs, throughput);
                match record_attempt(&mut store, counted, o, &refused, measured, timeout) {
                    Ok(()) => {
                        drop(store);
                        return restore(dev, armed.map(|(w, _)| w));
                    }
                    Err(e) => {
                        if let Some((w, _)) = armed {
                            let _ = w.disarm();
                        }
                        refused.push(refuse(&name, &e))
                    }
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
fn refuse(name: &str, why: &Refused) -> RefusalRecord {
    print_marker(Marker::ImageRefused, Some(&format!("{name}: {why}")));
    why.record(name)
}

/// Counts this restore of `name` in the store's boot log, with what the restored system
/// reports as its status (it reads it back: its own memory is the capture's).
fn record_attempt(
    store: &mut flashstore::Store<std::fs::File>,
    (name, generation): (&str, u64),
    o: &ResumeOptions,
    refused: &[RefusalRecord],
    (load_secs, throughput): (f64, Throughput),
    watchdog: Option<u32>,
) -> Result<(), Refused> {
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
            s.throughput = Some(throughput.clone());
            s.timings.resume = started.map(|t| t.elapsed().as_secs_f64());
            s.watchdog = watchdog;
            log.last_boot = crate::status::to_boot_log(&s);
        })
        .map_err(|e| Refused::Unrecorded(chain(&e)))
}

/// Checks image `name` of `store` by the one rule and hands its pages to the kernel.
fn load_flash_image(
    store: &flashstore::Store<std::fs::File>,
    name: &str,
    o: &ResumeOptions,
    rules: &Rules<'_>,
    key_secs: f64,
) -> Result<(SnapshotDev, Throughput), Refused> {
    let rec = store
        .image(name)
        .ok_or_else(|| Refused::Missing(name.into()))?;
    let candidate = Candidate::Image(rec);
    let t = Instant::now();
    let mut observe = |image: &Binding| observe_running(image, o);
    let (mut reader, admitted) = admit_image(store, candidate, rules, &mut observe, Some(&o.key))?;
    let trusted = admitted.trusted;
    print_marker(
        Marker::ResumeBound,
        Some(&format!(
            "{} device(s), command line, boot setup checked in {:.3} s",
            admitted.bound_devices,
            t.elapsed().as_secs_f64()
        )),
    );
    let mut checked = String::new();
    if trusted.sealed {
        checked += &format!(
            ", encrypted with the device key ({} in {key_secs:.3} s)",
            match o.key.encrypt {
                bootparams::Encrypt::KeyFile => "read",
                _ => "unsealed",
            }
        );
    }
    if trusted.signed {
        checked += ", signature checked";
    }
    let pages = reader.pages();
    load(
        &mut reader,
        &format!("image {name} (generation {}{checked}): ", rec.generation),
        |page0| check_page0(page0, pages, rules.expected),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_get_the_rule_s_words_and_kinds() {
        use bootstatus::Refusal;
        let k = |b: u8| flashstore::KeyId([b; 16]);
        let cases = [
            (
                StoreError::NoImage("new".into()),
                Refusal::Other,
                "no image named `new`",
            ),
            (
                StoreError::Corrupt(flashstore::Damage::ChunkChecksum {
                    chunk: 4,
                    cluster: 9,
                }),
                Refusal::Damaged,
                "store is damaged: ",
            ),
            (
                StoreError::WrongKey {
                    image: "current".into(),
                    key: k(1),
                    have: k(2),
                },
                Refusal::Key,
                "image `current` is encrypted with device key",
            ),
        ];
        for (e, kind, text) in cases {
            let r = refusal(e);
            assert_eq!(r.kind(), kind, "{r}");
            assert!(r.to_string().starts_with(text), "{r}");
        }
    }
}
