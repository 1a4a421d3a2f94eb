//! Capture: freeze the system at the application's ready point, have the kernel create the
//! hibernation image, and stream its pages into a snapboot image on the store.
//!
//! `SNAPSHOT_CREATE_IMAGE` returns twice. In the original system it returns `Created`: the
//! pages are read and committed, then the board powers off (or thaws and carries on). In a
//! system restored from this image it returns `Restored`: capture thaws user space and tells
//! its caller, so the application knows it was snapshot-booted.

use crate::after_restore::{after_restore, RestoreReport};
use crate::capture_mounts::{self, MountPlan, RemountError};
use crate::guest::print_marker;
use crate::lazy::{self, LazyError, LazyOptions, SwapOffError};
use crate::store::StoreUseError;
use bootparams::StoreAddress;
use boottrace::{error_chain as chain, Marker};
use devsys::devicetree::{boot_device_tree, DeviceTreeError};
use devsys::efi_runtime::{read_runtime_map, RUNTIME_MAP};
use devsys::lockdown::LockedDown;
use devsys::snapshot::{CreateResult, SnapshotDev, SnapshotError};
use devsys::system::{
    check_running_page_size, parse_mountinfo, running_identity, UnsupportedPageSize,
};
use flashstore::Compression;
use snapimg::{Description, PAGE_SIZE};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub use bootparams::Then;

/// Capture settings.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The store's address: a block device or file, or how to find one
    /// ([`devsys::locate`], waiting up to [`devsys::locate::NODE_WAIT`] for it).
    pub store: StoreAddress,
    /// After the image is written.
    pub then: Then,
    /// Capture even with writable block-backed filesystems mounted (other than the
    /// FAT-family ones, which are remounted read-only for the capture in any case).
    pub force: bool,
    /// Drop the clean page cache first (default; off only to measure what it saves).
    pub drop_caches: bool,
    /// Compact memory first, so free memory is in whole blocks the kernel skips.
    pub compact: bool,
    /// Chunk compression of the image.
    pub compression: Compression,
    /// Lazy image: page user memory out to a swap region in the store first (see
    /// [`crate::lazy`]); `None` captures everything.
    pub lazy: Option<LazyOptions>,
    /// The image's name.
    pub image: String,
    /// Storage dedupe against the other images (`None`: the store's default).
    pub dedupe: Option<flashstore::Dedupe>,
    /// Pin the image.
    pub pin: bool,
    /// Sign the image with this secret key after committing it.
    pub sign_key: Option<PathBuf>,
    /// Turn the kernel's device PM timing on before the image is taken, so every restore of
    /// it prints how long each device's restore callback ran (`snapboot analyze` reads it).
    pub pm_times: bool,
    /// Whether the image is encrypted, and with which device key (`snapboot.encrypt=`).
    pub key: crate::devicekey::KeyConfig,
}

impl CaptureOptions {
    /// Defaults: power off after, refuse writable mounts, drop caches, compact.
    pub fn new(store: StoreAddress) -> Self {
        Self {
            store,
            then: Then::PowerOff,
            force: false,
            drop_caches: true,
            compact: true,
            compression: Compression::Lz4,
            lazy: None,
            image: crate::store::DEFAULT_IMAGE.into(),
            dedupe: None,
            pin: false,
            sign_key: None,
            pm_times: false,
            key: crate::devicekey::KeyConfig::new(bootparams::Encrypt::Off),
        }
    }
}

/// Errors of capture; each says which step failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The kernel's pages are not the 4 KiB snapboot's images are made of.
    #[error("refusing to capture")]
    PageSize(#[source] UnsupportedPageSize),
    /// The boot device tree, whose reserved memory the image records, cannot be read.
    #[error("cannot record the memory layout")]
    DeviceTree(#[source] DeviceTreeError),
    /// The EFI runtime map, which the image records, cannot be read.
    #[error("cannot record the memory layout")]
    EfiRuntime(#[source] devsys::efi_runtime::BadRegion),
    /// The CPUs online, which the image records, cannot be counted.
    #[error("cannot record the CPUs online")]
    Cpus(#[source] devsys::cpus::CpuCountError),
    /// Deferred memory is online.
    #[error("refusing to capture")]
    Memory(#[source] crate::memory::MemoryError),
    /// The kernel is locked down, which disables hibernation.
    #[error("refusing to capture")]
    Lockdown(#[source] LockedDown),
    /// The device key the image is to be encrypted with is not at hand.
    #[error("refusing to capture an encrypted image")]
    Key(#[source] crate::devicekey::DeviceKeyError),
    /// The image's rollback counter cannot be raised: an image without it would be refused.
    #[error("refusing to capture an image without rollback protection")]
    Rollback(#[source] crate::rollback::RollbackError),
    /// A writable, block-backed filesystem is mounted.
    #[error(
        "refusing to capture: {device} ({fstype}) is mounted read-write on {target}; its \
         contents would be rolled back at every snapshot boot. Mount it read-only, unmount it, \
         or keep writable data off block devices (tmpfs, or a filesystem mounted after each \
         restore); --force (snapboot.force) captures anyway"
    )]
    WritableMount {
        device: String,
        fstype: String,
        target: String,
    },
    /// A hardware watchdog runs with a timeout shorter than a capture may take: nothing
    /// feeds it while every process is frozen (devsys::watchdog::fires_during_capture).
    #[error("refusing to capture: {0}")]
    Watchdog(String),
    /// A FAT-family filesystem could not be remounted read-only for the capture.
    #[error("refusing to capture")]
    Remount(#[source] RemountError),
    /// The store could not be used or could not take the image.
    #[error(transparent)]
    Store(#[from] StoreUseError),
    /// A swap area could not be turned off (every capture needs them all off).
    #[error("swapping off all swap areas before capture")]
    SwapOff(#[source] SwapOffError),
    /// The swap stack of an earlier lazy capture or its restore could not be removed.
    #[error("removing the swap stack of an earlier lazy capture")]
    Teardown(#[source] LazyError),
    /// A `/dev/snapshot` step failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Preparing the swap region of a lazy image failed.
    #[error("preparing the lazy image's swap region")]
    Lazy(#[source] LazyError),
    /// What the image is bound to could not be observed.
    #[error("cannot bind the image to this system")]
    Binding(#[source] crate::binding::BindingError),
    /// Powering off failed.
    #[error("image written, but power-off failed")]
    PowerOff(#[source] std::io::Error),
}

/// The result of a capture call.
#[derive(Debug)]
pub enum CaptureOutcome {
    /// The image is on the store (only with [`Then::Continue`]): its generation.
    Captured(u64),
    /// This is the restored system; post-restore steps ran.
    Restored(RestoreReport),
}

/// What this system is, for the image to be bound to: the boot setup recorded by this boot's
/// `snapboot resume`, the command line, and the read-only block devices mounted now.
fn observe_binding() -> Result<snapimg::Binding, crate::binding::BindingError> {
    use crate::binding::{at_capture, read_boot_setup, BindingError, BOOT_SETUP_FILE};
    use std::path::Path;
    let read = |p: &str| {
        std::fs::read_to_string(p).map_err(|source| BindingError::Read {
            path: p.into(),
            source,
        })
    };
    at_capture(
        read_boot_setup(Path::new(BOOT_SETUP_FILE))?,
        &read("/proc/cmdline")?,
        &read("/proc/self/mountinfo")?,
        Path::new("/sys"),
        Path::new("/dev"),
    )
}

/// The kernel's switch for timing every device PM callback (`CONFIG_PM_SLEEP_DEBUG`); the
/// lines are `KERN_INFO`, on the console at the default log level.
const PM_PRINT_TIMES: &str = "/sys/power/pm_print_times";

/// Turns device PM timing on in the running kernel; the image keeps it on. An error says
/// why it could not, and that the capture goes on without it.
fn enable_pm_times() -> Result<(), String> {
    std::fs::write(PM_PRINT_TIMES, "1\n").map_err(|e| {
        format!("cannot write {PM_PRINT_TIMES} ({e}): a kernel without CONFIG_PM_SLEEP_DEBUG; capturing without device timing")
    })
}

/// The writable mounts capture deals with, from `/proc/self/mountinfo`.
fn mount_plan() -> MountPlan {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    capture_mounts::plan(&parse_mountinfo(&text), capture_mounts::is_device_source)
}

/// Names the mounts of `mounts` for the `remount` marker.
fn mount_list(mounts: &[devsys::system::Mount]) -> String {
    let names: Vec<String> = mounts
        .iter()
        .map(|m| format!("{} ({} on {})", m.source, m.fstype, m.target))
        .collect();
    names.join(", ")
}

/// Runs a capture; see the module docs.
pub fn capture(o: &CaptureOptions) -> Result<CaptureOutcome, CaptureError> {
    check_running_page_size().map_err(CaptureError::PageSize)?;
    devsys::lockdown::check_running().map_err(CaptureError::Lockdown)?;
    let mounts = mount_plan();
    if let (false, Some(m)) = (o.force, mounts.refused.first()) {
        return Err(CaptureError::WritableMount {
            device: m.source.clone(),
            fstype: m.fstype.clone(),
            target: m.target.clone(),
        });
    }
    crate::memory::check_capture().map_err(CaptureError::Memory)?;
    let watchdogs = devsys::watchdog::watchdogs(Path::new(devsys::watchdog::SYSFS));
    if let Some(why) = watchdogs
        .iter()
        .find_map(devsys::watchdog::fires_during_capture)
    {
        return Err(CaptureError::Watchdog(why));
    }
    if o.key.encrypt.on() {
        // The key itself is read only after the snapshot (so the image never holds it);
        // whether it can be is checked now, before anything changes.
        crate::devicekey::check_reachable(&o.key).map_err(CaptureError::Key)?;
    }
    // Observed while the FAT-family mounts are still writable, which leaves them out of the
    // binding: they are written again after the capture.
    let binding = observe_binding().map_err(CaptureError::Binding)?;
    let identity = running_identity(
        &boot_device_tree().map_err(CaptureError::DeviceTree)?,
        read_runtime_map(Path::new(RUNTIME_MAP)).map_err(CaptureError::EfiRuntime)?,
    );
    // The CPUs the kernel freezes and brings back with the image: a machine with fewer
    // refuses it (admission::Expected::online_cpus).
    let online_cpus = devsys::cpus::online_cpus().map_err(CaptureError::Cpus)?;
    // Opened by its magic before anything else: nothing is written to a device that is not
    // a store, and a capture that cannot succeed leaves the system as it was.
    let (store, at) = crate::store::open_address(&o.store, devsys::locate::NODE_WAIT, true)?;
    capture_mounts::remount_read_only(&mounts).map_err(CaptureError::Remount)?;
    if !mounts.remount.is_empty() {
        let list = mount_list(&mounts.remount);
        print_marker(
            Marker::Remount,
            Some(&format!("read-only for the capture: {list}")),
        );
    }
    let taken = take_image(o, store, &at, binding, identity, online_cpus);
    // Both continuations, the system that carries on and every restored one (which starts
    // from the state at capture), get their filesystems back writable.
    if !mounts.remount.is_empty() {
        let failed = capture_mounts::remount_read_write(&mounts.remount);
        let text = if failed.is_empty() {
            format!("read-write again: {}", mount_list(&mounts.remount))
        } else {
            let why: Vec<String> = failed.iter().map(|e| chain(e)).collect();
            format!("left read-only: {}", why.join("; "))
        };
        print_marker(Marker::Remount, Some(&text));
    }
    match taken? {
        Taken::Captured(generation) => Ok(CaptureOutcome::Captured(generation)),
        Taken::Restored => Ok(CaptureOutcome::Restored(after_restore())),
    }
}

/// Which side of `SNAPSHOT_CREATE_IMAGE` [`take_image`] returned on.
enum Taken {
    /// The image is on the store; this system carries on.
    Captured(u64),
    /// This is a system restored from the image.
    Restored,
}

/// Everything of a capture from the writable mounts' remount to the image on the store (and
/// the power-off, when asked for).
fn take_image(
    o: &CaptureOptions,
    mut store: flashstore::Store<std::fs::File>,
    at: &devsys::locate::Located,
    binding: snapimg::Binding,
    identity: snapimg::Identity,
    online_cpus: u32,
) -> Result<Taken, CaptureError> {
    // A lazy re-capture from a restored lazy system: what was touched since the restore is
    // visible only now, before swapoff reads everything back in.
    let profile = match &o.lazy {
        Some(l) if l.profile != lazy::ProfileMode::Off => match crate::profile::for_capture() {
            Ok(p) => p,
            Err(e) => {
                print_marker(Marker::Profile, Some(&format!("not used: {e}")));
                None
            }
        },
        _ => None,
    };
    // The profile names the processes that were touched; this process, which resumes after
    // each restore, joins it with what is in memory of its own (the code the `snapboot
    // ready` of the last restore ran is in that).
    let (profile, touched) = match profile {
        Some(mut p) => {
            let touched = (p.pages(), p.processes(), p.ranges());
            let own = crate::profile::add_own_pages(&mut p);
            (Some(p), Some((touched, own)))
        }
        None => (None, None),
    };
    // An image must not refer to pages in a swap area that the running system goes on
    // rewriting: bring every swapped page back, and drop snapboot's own swap stack from an
    // earlier capture or restore (a lazy capture builds a fresh one in the new area).
    let swapped_off = lazy::swapoff_all().map_err(CaptureError::SwapOff)?;
    if !swapped_off.is_empty() {
        print_marker(Marker::Swapoff, Some(&swapped_off.join(" ")));
    }
    lazy::teardown().map_err(CaptureError::Teardown)?;
    // Clean page cache is not worth storing: write back and drop it (the kernel would
    // otherwise copy it into the image). Free pages are never in the image.
    rustix::fs::sync();
    if o.drop_caches {
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "3\n");
    }
    if o.pm_times {
        match enable_pm_times() {
            Ok(()) => print_marker(
                Marker::PmTimes,
                Some("every restore of this image times its devices"),
            ),
            Err(why) => print_marker(Marker::PmTimes, Some(&why)),
        }
    }
    let created_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The image can take at most the memory in use, uncompressed, plus its swap region.
    let need = devsys::system::used_memory()
        .unwrap_or(u64::MAX)
        .saturating_add(o.lazy.as_ref().and_then(|l| l.region_bytes).unwrap_or(0));
    let reclaimed = crate::store::reclaim_if_low(&mut store, need).map_err(StoreUseError::from)?;
    if let Some(r) = reclaimed {
        println!(
            "snapboot: store low on idle space: compaction emptied {} cluster(s) into {} ({} chunks, {:.1} MiB moved)",
            r.emptied,
            r.filled,
            r.chunks,
            r.bytes as f64 / 1048576.0
        );
    }
    print_marker(Marker::CaptureStart, Some(&at.to_string()));
    let started = Instant::now();
    let mut raw = None;
    let swap = match &o.lazy {
        None => None,
        Some(l) => {
            let page = PAGE_SIZE as u64;
            let bytes = l
                .region_bytes
                .unwrap_or(store.idle_bytes() / bootparams::settings::SWAP_REGION_IDLE_DIVISOR)
                / page
                * page;
            let e = store.reserve_raw(bytes).map_err(StoreUseError::from)?;
            raw = Some(e);
            let place = lazy::RegionPlace {
                offset: store.raw_offset(e),
                bytes,
            };
            let p = lazy::prepare(&at.path, place, l, profile.as_ref(), o.key.encrypt.on())
                .map_err(CaptureError::Lazy)?;
            let mib = |pages: u64| (pages * PAGE_SIZE as u64) as f64 / 1048576.0;
            let mut text = format!(
                "{} pages ({:.1} MiB) paged out to the swap region in {:.2} s; writes after restore go to {}",
                p.region.used_pages,
                mib(p.region.used_pages),
                p.reclaim_secs,
                p.cow
            );
            match &p.region.verity {
                Some(v) => text += &format!("; verity tree over {} pages", v.data_blocks),
                None => text += "; page-ins not verified (snapboot.noverity)",
            }
            print_marker(Marker::Lazy, Some(&text));
            if let (Some(pr), Some(((pages, procs, ranges), own))) = (&profile, touched) {
                let what = match (l.profile, p.kept) {
                    (lazy::ProfileMode::Eager, Some(k)) => format!(
                        "{} of these {} pages kept in memory (eager)",
                        k.present,
                        pr.pages()
                    ),
                    _ => "paged out first, read back after each restore (prefetch)".into(),
                };
                print_marker(
                    Marker::Profile,
                    Some(&format!(
                        "{pages} pages ({:.1} MiB) touched since the restore, {procs} processes, \
                         {ranges} ranges, and {own} pages of snapboot itself: {what}",
                        mib(pages),
                    )),
                );
            }
            Some(p.region)
        }
    };
    if o.compact {
        let _ = std::fs::write("/proc/sys/vm/compact_memory", "1\n");
    }
    let mut dev = SnapshotDev::open_hibernate()?;
    dev.freeze()?;
    if dev.create_image()? == CreateResult::Restored {
        dev.unfreeze()?;
        drop(dev);
        // The store's cached blocks in this image predate the write of the image itself.
        crate::after_restore::flush_block_cache(&at.path);
        return Ok(Taken::Restored);
    }
    // Unlocked only now: the memory the image holds never held the key.
    let unlocked =
        crate::devicekey::unlock_for_capture(&mut store, &o.key).map_err(CaptureError::Key)?;
    // Raised before the commit: from here on every older image of this name is refused.
    let stamp = match o.key.rollback {
        true => Some(crate::rollback::advance(&o.key, &o.image).map_err(CaptureError::Rollback)?),
        false => None,
    };
    let opts = flashstore::WriteOptions {
        compression: o.compression,
        dedupe: o
            .dedupe
            .unwrap_or(flashstore::WriteOptions::default().dedupe),
        pin: o.pin,
        ..flashstore::WriteOptions::default()
    };
    let binding = Some(&binding);
    let c = crate::store::write_image(&mut dev, &mut store, &o.image, opts, raw, |pages| {
        Description::new(
            identity,
            created_unix,
            binding,
            pages,
            swap,
            (devsys::system::resume_entry(), devsys::system::boot_path()),
        )
        .map(|d| d.with_rollback(stamp).with_online_cpus(Some(online_cpus)))
    })?;
    let generation = c.image.generation;
    let st = c.image.stats;
    let mut stored = format!(
        ", image {}: {} zero, {} unique ({} shared with other images), \
         {:.1} MiB of new chunks, {:.1} MiB written",
        o.image,
        st.zero_pages,
        st.unique_pages,
        st.shared_pages,
        st.stored_bytes as f64 / 1048576.0,
        c.written_bytes as f64 / 1048576.0
    );
    if let Some(u) = &unlocked {
        stored.push_str(&format!(", encrypted with {u}"));
    }
    if let Some(st) = stamp {
        stored.push_str(&format!(
            ", rollback counter {:#010x} at {}",
            st.counter, st.value
        ));
    }
    if let Some(k) = &o.sign_key {
        let key = imagekey::SecretKey::load(k).map_err(StoreUseError::from)?;
        let digest = store.signed_digest(&c.image).map_err(StoreUseError::from)?;
        store
            .set_signature(&o.image, key.sign(&digest))
            .map_err(StoreUseError::from)?;
        stored.push_str(&format!(", signed with key {}", key.public().id()));
    }
    let secs = started.elapsed().as_secs_f64();
    let bytes = dev.pages() * PAGE_SIZE as u64;
    print_marker(
        Marker::CaptureDone,
        Some(&format!(
            "{} pages ({:.1} MiB) in {secs:.2} s, generation {generation}{stored}",
            dev.pages(),
            bytes as f64 / 1048576.0,
        )),
    );
    match o.then {
        Then::Continue => {
            dev.unfreeze()?;
            Ok(Taken::Captured(generation))
        }
        Then::PowerOff => {
            print_marker(Marker::Poweroff, Some("after capture"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use devsys::snapshot::SnapshotError;

    fn enomem() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOMEM)
    }

    #[test]
    fn a_failed_swapoff_names_its_step_not_lazy_images() {
        let e = CaptureError::SwapOff(SwapOffError {
            path: "/dev/zram0".into(),
            err: enomem(),
        });
        let text = chain(&e);
        assert!(
            text.starts_with("swapping off all swap areas before capture: swapoff /dev/zram0"),
            "{text}"
        );
        assert!(!text.contains("lazy"), "{text}");
    }

    #[test]
    fn every_cause_is_printed_once_along_the_chain() {
        let cause = enomem().to_string();
        let errors = [
            CaptureError::SwapOff(SwapOffError {
                path: "/dev/zram0".into(),
                err: enomem(),
            }),
            CaptureError::Lazy(LazyError::Io {
                step: "zram disksize",
                path: "/sys/block/zram1".into(),
                err: enomem(),
            }),
            CaptureError::Teardown(LazyError::Dm(devsys::dm::DmError::Node {
                path: "/dev/mapper/snapboot-swap".into(),
                err: enomem(),
            })),
            CaptureError::Snapshot(SnapshotError::Open(enomem())),
            CaptureError::Snapshot(SnapshotError::Stream {
                op: "read",
                page: 7,
                source: enomem(),
            }),
            CaptureError::PowerOff(enomem()),
        ];
        for e in &errors {
            let text = chain(e);
            assert_eq!(text.matches(&cause).count(), 1, "{text}");
        }
    }
}
