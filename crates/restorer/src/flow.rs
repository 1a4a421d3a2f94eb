//! The restore both programs run (`pvhboot`, `efiboot`): the settings, the store and its
//! boot log decided before the first image ([`decide`]), each image checked by the one
//! rule and entered by the platform ([`restore_from`]), and the pages put in place
//! ([`place`]): in place when a chunk fills consecutive pages, else through the chunk
//! buffer, deferred to safe pages and the relocated last copy when the restorer's own
//! memory holds them. Chunks unpacked in place are shared out among every CPU the board
//! has ([`crate::smp`]) when the window holds them all (the EFI program's; the PVH
//! program's when the PC has other CPUs).

use crate::hw;
pub use crate::phys::PAGE;
use crate::phys::{copy_page, zero_page, Identity};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use bootparams::StoreAddress;
use restorer::bootrecord::BootRecord;
use restorer::disk::{DiskMut, Span};
use restorer::e820::Table;
use restorer::image::{self, DiskSet};
use restorer::parallel::{Chunk, Jobs, Pages, Split};
use restorer::safepages::{Busy, ImagePages, LastCopy, PlaceError, SafePages};
pub(crate) use restorer::telemetry::{Load, Phase};
use storelayout::SlotWrite;

/// `uname -m` of the kernels this program restores.
#[cfg(target_arch = "x86_64")]
const MACHINE: &str = "x86_64";
#[cfg(target_arch = "aarch64")]
const MACHINE: &str = "aarch64";

extern "C" {
    // Linker-script symbols.
    pub static __image_start: u8;
    pub static __image_end: u8;
}

/// Why nothing is restored.
pub(crate) enum NotRestored {
    RamAbove4G(u64),
    Store(String),
    NoImage(String),
    Images(Vec<(String, String)>),
    Initramfs(String),
    Settings(String),
    /// The firmware or the machine cannot take the restorer (the EFI program).
    #[cfg_attr(not(feature = "efi"), allow(dead_code))]
    Firmware(String),
}

impl core::fmt::Display for NotRestored {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NotRestored::RamAbove4G(end) => write!(f, "RAM ends at {end:#x}, above 4 GiB"),
            NotRestored::Store(why) => f.write_str(why),
            NotRestored::NoImage(store) => write!(f, "store {store} holds no image"),
            NotRestored::Initramfs(why) => write!(f, "the kernel pack's initramfs: {why}"),
            NotRestored::Settings(why) => write!(f, "snapboot's settings: {why}"),
            NotRestored::Firmware(why) => write!(f, "the firmware: {why}"),
            NotRestored::Images(all) => {
                f.write_str("no image restores: ")?;
                for (i, (name, why)) in all.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{name}: {why}")?;
                }
                Ok(())
            }
        }
    }
}

pub(crate) const MAX_PAGES: usize = 1 << 20;
/// Image PFNs (bit set: the image has a page there); 4 GiB of RAM at most.
pub(crate) static mut IN_IMAGE: [u64; MAX_PAGES / 64] = [0; MAX_PAGES / 64];

/// The disks a program reads: the [`DiskSet`] the image checks use, whose whole disks are
/// numbered as the kernel names them (`vda` is 0), and which can be narrowed to a partition.
pub(crate) trait Disks: DiskSet<Disk: DiskMut> {
    /// How many whole disks there are.
    fn count(&self) -> usize;
    /// A disk that reads and writes only `span` of disk `index` (the store's partition):
    /// its index (the PVH program narrows the virtio disk itself, which then reads as
    /// the partition alone; the EFI program adds a view and leaves the disk whole).
    fn part(&mut self, index: usize, span: Span) -> usize;
}

/// What a boot decided before its first image (besides the store, on disk `at`): its boot log, the
/// kernel pack's initramfs's trust rule and boot setup, its kernel, and what was asked for.
pub(crate) struct Decided {
    pub(crate) at: usize,
    pub(crate) record: BootRecord,
    pub(crate) stock: restorer::stockinit::StockInit,
    pub(crate) kernel: restorer::stockpack::StockKernel,
    pub(crate) params: bootparams::BootParams,
}

/// Reads what every restore needs before its first image: the stock initramfs (its
/// snapboot.conf may name the store), the settings (the command line over that file), the
/// store and its boot log.
pub(crate) fn decide<S: Disks>(
    disks: &mut S,
    cmdline: &str,
) -> Result<(image::Store, Decided), NotRestored> {
    let stock = stock_init(disks, cmdline)?;
    // Before the store's disk is narrowed to its partition: the pack may be on that disk.
    let count = disks.count();
    let kernel = restorer::stockpack::stock_kernel(disks, count, cmdline)
        .map_err(|e| NotRestored::Store(alloc::format!("the kernel this PC boots: {e}")))?;
    let settings = bootparams::config::from_text(cmdline, stock.config.as_deref())
        .map_err(|e| NotRestored::Settings(admission::chain(&e)))?;
    let params = settings.params;
    if !params.resume {
        return Err(NotRestored::Settings(alloc::format!(
            "{} on the kernel command line: nothing is restored this boot",
            bootparams::NORESUME
        )));
    }
    let address = params.store.as_ref().ok_or_else(|| {
        NotRestored::Store(alloc::format!(
            "no snapboot.store= on the command line, and no store = in {}",
            bootparams::config::CONFIG_PATH
        ))
    })?;
    let at = store_disk(disks, address).map_err(NotRestored::Store)?;
    let store = image::Store::open(disks.disk(at).expect("store_disk checked it"))
        .map_err(|e| NotRestored::Store(alloc::format!("store {address}: {e}")))?;
    let record = BootRecord::read(
        disks.disk(at).expect("store_disk checked it"),
        &store,
        params.attempts,
    )
    .map_err(|e| NotRestored::Store(alloc::format!("store {address}: the boot log: {e}")))?;
    Ok((
        store,
        Decided {
            at,
            record,
            stock,
            kernel,
            params,
        },
    ))
}

/// The disk `/dev/vdX` names (the PC names its virtio disks in PCI order), the one whose
/// store carries `LABEL=`, or the disk of the GPT partition `PARTUUID=` or `PARTLABEL=`
/// names (that disk then reads as the partition alone: `restorer::gpt`).
pub(crate) fn store_disk<S: Disks>(disks: &mut S, address: &StoreAddress) -> Result<usize, String> {
    if let Some(want) = restorer::gpt::PartAddress::of(address) {
        let count = disks.count();
        let found = restorer::gpt::find(disks, count, want).map_err(|e| e.to_string())?;
        let at = disks.part(found.disk, found.span);
        say!(
            "snapboot-restorer: store {address} is /dev/{} ({} MiB from byte {})",
            found.name(),
            found.span.size >> 20,
            found.span.offset
        );
        return Ok(at);
    }
    match address {
        StoreAddress::Label(label) => {
            let mut found = None;
            for i in 0..disks.count() {
                let Some(d) = disks.disk(i) else { continue };
                if let Ok(s) = image::Store::open(d) {
                    if s.sb.label.as_str() == label {
                        if found.is_some() {
                            return Err(alloc::format!("two disks hold a store labelled {label}"));
                        }
                        found = Some(i);
                    }
                }
            }
            found.ok_or_else(|| alloc::format!("no disk holds a store labelled {label}"))
        }
        StoreAddress::Path(name) => match restorer::virtio::vd_index(name) {
            Some(i) if i < disks.count() => Ok(i),
            Some(_) => Err(alloc::format!(
                "{address}: the PC has {} disks",
                disks.count()
            )),
            None => Err(alloc::format!(
                "{address}: the restorer finds a store on a whole disk (/dev/vdX), by LABEL=, PARTUUID= or PARTLABEL="
            )),
        },
        // The partition forms were found above.
        StoreAddress::PartUuid(_) | StoreAddress::PartLabel(_) => {
            unreachable!("gpt::PartAddress::of takes every partition form")
        }
    }
}

/// Leaves the stock kernel the status of this fallback in the store's boot log, as a
/// restore kernel does before it hands over; a failure is printed and the fallback goes on.
pub(crate) fn keep_fallback<S: Disks>(
    disks: &mut S,
    at: usize,
    store: &image::Store,
    record: &BootRecord,
    why: &NotRestored,
) {
    let empty = matches!(why, NotRestored::NoImage(_));
    let kept = record
        .fallback(store, why.to_string(), empty)
        .map_err(|e| e.to_string())
        .and_then(|w| {
            let disk = disks.disk(at).ok_or("the store's disk is gone")?;
            restorer::bootrecord::write(disk, &w).map_err(|e| e.to_string())
        });
    if let Err(e) = kept {
        say!("snapboot-restorer: the stock kernel will not know why: {e}");
    }
}

/// What this boot asks for: the store's address, the images to try first (both from
/// `bootparams`: the command line over the stock initramfs's snapboot.conf), and the
/// command line itself.
pub(crate) struct Asked<'a> {
    pub(crate) address: &'a StoreAddress,
    pub(crate) images: &'a [String],
    pub(crate) cmdline: &'a str,
    /// The CPUs an image may have hibernated on (arm64: this one's MPIDR; none on the PC).
    pub(crate) cpus: &'a [u64],
    /// How many CPUs this machine has (arm64: its device tree's, which a kernel booted here
    /// would bring online; `None` on the PC, not counted), which an image is checked
    /// against (`admission::Expected::online_cpus`).
    pub(crate) online_cpus: Option<u32>,
    /// How this boot was started, which an image must have been captured under (arm64;
    /// `None` on the PC, where the e820 checksum and the binding say it).
    pub(crate) boot_path: Option<String>,
}

/// Chooses, checks and restores an image of the decided store, keeping the boot log as
/// resume does: each candidate is refused by the crash-loop guard or its checks, and the
/// attempt of the one entered is counted first. Returns only why nothing was restored.
///
/// `enter` is the platform's: it places the pages of the image that passed and enters it,
/// returning only why it could not (with the disks still usable).
pub(crate) fn restore_from<S: Disks>(
    disks: &mut S,
    store: &image::Store,
    decided: &mut Decided,
    memory: &admission::Memory,
    asked: &Asked,
    enter: &mut dyn FnMut(&mut S, &image::Chosen, &SlotWrite) -> admission::Refused,
) -> Result<core::convert::Infallible, NotRestored> {
    let Decided {
        at,
        record,
        stock,
        kernel,
        ..
    } = decided;
    let at = *at;
    let cmdline = asked.cmdline;
    let run = image::Running {
        expected: admission::Expected {
            release: kernel.release.clone(),
            version: kernel.version.clone(),
            machine: MACHINE.into(),
            memory: memory.clone(),
            cpus: asked.cpus.to_vec(),
            online_cpus: asked.online_cpus,
            boot_path: asked.boot_path.clone(),
        },
        cmdline,
        trust: stock.trust.clone(),
        boot_setup: stock.boot_setup.clone(),
    };
    let candidates = store.candidates(asked.images);
    if candidates.is_empty() {
        return Err(NotRestored::NoImage(asked.address.to_string()));
    }
    for candidate in candidates {
        let name = candidate.name();
        let refuse = |record: &mut BootRecord, why: admission::Refused| {
            say!("snapboot-restorer: image-refused {name}: {why}");
            record.refuse(name, &why);
        };
        let (log, limit) = record.guard();
        let rules = admission::Rules {
            log: (log, limit),
            trust: &run.trust,
            expected: &run.expected,
            // No TPM here: an image stamped with a rollback counter is refused when its stamp
            // cannot be read (`ImageSource::rollback_counter`'s default), unstamped ones are
            // judged as everywhere else.
            rollback: false,
        };
        let chosen = match image::check(disks, at, store, candidate, &run, &rules) {
            Ok(c) => c,
            Err(why) => {
                refuse(record, why);
                continue;
            }
        };
        let rec = candidate.image().expect("checked");
        // The attempt's write is encoded now: nothing is allocated once pages are placed.
        let attempt = match record.attempt(store, rec, hw::now().unwrap_or(0)) {
            Ok(w) => w,
            Err(e) => {
                refuse(record, admission::Refused::Unrecorded(e.to_string()));
                continue;
            }
        };
        let why = enter(disks, &chosen, &attempt);
        refuse(record, why);
    }
    Err(NotRestored::Images(
        record
            .refused
            .iter()
            .map(|r| (r.image.clone(), r.why.clone()))
            .collect(),
    ))
}

/// The trust rule and boot setup of the kernel pack's initramfs ([`restorer::stockinit`]).
pub(crate) fn stock_init<S: Disks>(
    disks: &mut S,
    cmdline: &str,
) -> Result<restorer::stockinit::StockInit, NotRestored> {
    let count = disks.count();
    use restorer::stockinit::{describe, StockInit, StockInitError, UNPACKED_LIMIT};
    // The summary the pack's writer took out of the initramfs, when it has one: the same
    // rules without unpacking the archive. One that cannot be read costs only the time:
    // the archive is read instead.
    match restorer::stockpack::stock_summary(disks, count, cmdline)
        .map_err(|e| e.to_string())
        .and_then(|s| {
            s.map(|(b, hash)| StockInit::of_summary(&b, &hash).map_err(|e| e.to_string()))
                .transpose()
        }) {
        Ok(Some(stock)) => {
            say!(
                "snapboot-restorer: the kernel pack's initramfs summary read: {}",
                stock.trust.describe()
            );
            return Ok(stock);
        }
        Ok(None) => {}
        Err(e) => say!("snapboot-restorer: {e}; reading the initramfs itself"),
    }
    let bytes = restorer::stockpack::stock_initramfs(disks, count, cmdline)
        .map_err(|e| NotRestored::Initramfs(e.to_string()))?;
    let not_read = |e: StockInitError| NotRestored::Initramfs(e.to_string());
    let root =
        initramfs::unpack_with_limit(&bytes, UNPACKED_LIMIT).map_err(|e| not_read(e.into()))?;
    let stock = StockInit::of(&root).map_err(not_read)?;
    say!(
        "snapboot-restorer: the kernel pack's initramfs read ({}): {}",
        describe(root.segments()),
        stock.trust.describe()
    );
    Ok(stock)
}

/// Bytes the store is read in at a time: each refill of the window reads this many (less
/// only at the disk's end), whatever the chunks need of them.
#[cfg(not(feature = "efi"))]
pub(crate) const WINDOW: usize = 4 << 20;

/// Checks the checksum of every chunk of `chosen`, read through `window` from `disk`: the
/// EFI program's step before it leaves boot services (a damaged chunk found later could
/// only reset the PC). The time goes to `load`'s stages (a chunk read again to its read).
#[cfg_attr(not(feature = "efi"), allow(dead_code))]
pub(crate) fn check_chunks<D: restorer::disk::Disk>(
    chosen: &image::Chosen,
    store: &image::Store,
    disk: &mut D,
    window: &mut restorer::window::Window,
    load: &mut Load,
) -> Result<(), admission::Refused> {
    use admission::Refused;
    for group in chosen.plan.by_chunk() {
        let c = store.catalog.chunk(group[0].chunk).ok_or_else(|| {
            Refused::Damaged(alloc::format!("chunk {} left the catalog", group[0].chunk))
        })?;
        let (offset, len) = (store.chunk_at(c)?, c.stored_len as usize);
        let unreadable = |e| Refused::Unreadable(alloc::format!("reading chunk {}: {e}", c.id));
        let t = cycles();
        let stored = window.get(disk, offset, len).map_err(unreadable)?;
        let t = lap(load, Phase::Read, t);
        let checked = c.check_stored(store.catalog.check, stored);
        let t = lap(load, Phase::Check, t);
        let Err(damage) = checked else {
            continue;
        };
        // Read once more on its own before calling the store damaged: a copy that reads
        // right the second time replaces the buffer's, and the console says how the two
        // differed (the soak once saw this on a clean store).
        let start = offset - offset % restorer::disk::SECTOR;
        let end = (offset + len as u64).next_multiple_of(restorer::disk::SECTOR);
        let mut again = alloc::vec![0u8; (end - start) as usize];
        window
            .read_beside(disk, start, &mut again)
            .map_err(unreadable)?;
        let t = lap(load, Phase::Read, t);
        let fresh = &again[(offset - start) as usize..][..len];
        let checked = c.check_stored(store.catalog.check, fresh);
        lap(load, Phase::Check, t);
        if checked.is_err() {
            return Err(Refused::from(damage));
        }
        let held = window.held_mut(offset, len).ok_or_else(|| {
            Refused::Damaged(alloc::format!("chunk {} left the read buffer", c.id))
        })?;
        let how = restorer::window::Mismatch::of(held, fresh);
        say!(
            "snapboot-restorer: chunk {} failed its checksum as read (buffer at {:#x}, disk byte {offset}, {len} bytes: {}) and read right again; the second copy is used",
            c.id,
            held.as_ptr() as usize,
            how.map_or_else(|| "no byte differs now".into(), |m| m.to_string())
        );
        held.copy_from_slice(fresh);
    }
    Ok(())
}

/// Puts every page of `chosen` at its place, counts the attempt in the store's boot log
/// (`attempt`, encoded beforehand) and enters the image kernel; returns only why it could
/// not (a chunk that fails its checksum, a PFN that is not RAM, no safe page left, the
/// boot log not written), having written only pages nothing else uses. `window`: where the
/// store is read through (the EFI program's holds every chunk already); `scratch`: the
/// chunk buffer; `ahead`: what was done with the chunks already ([`Ahead`]); `finish`: the
/// platform's last step before the jump (the PVH program counts the attempt and resets its
/// disks, the EFI program switches the firmware's runtime services to the image kernel's
/// virtual map); `cpus`: the board's other CPUs, which unpack chunks in place too when
/// `window` holds every chunk, and are off again before `finish`.
///
/// Once every page is placed it prints the load phase's throughput, the `throughput`
/// marker ([`restorer::telemetry`]): allocating it must not touch a placed page, so the
/// heap it comes from lies in the busy range (each program keeps some of its heap there).
#[allow(clippy::too_many_arguments)]
pub(crate) fn place<S: Disks>(
    chosen: &image::Chosen,
    store: &image::Store,
    disks: &mut S,
    at: usize,
    table: &Table,
    (busy, target, cpus): (Busy, crate::cpu::Target, &dyn crate::cpu::Cpus),
    (window, scratch, ahead): (&mut restorer::window::Window, &mut [u8], Ahead),
    finish: impl FnOnce(&mut S) -> Result<(), admission::Refused>,
) -> Result<core::convert::Infallible, admission::Refused> {
    use admission::Refused;
    let placing = |e: PlaceError| Refused::NotPlaced(e.to_string());
    // The other CPUs decode when the window holds every chunk; what starting them takes
    // is then the restorer's until they are off again (the image's pages there are
    // written by the last copy).
    let mut busy = busy;
    let held = if cpus.others().is_empty() {
        None
    } else {
        held_chunks(&chosen.plan, store, window)
    };
    let cpus = if held.is_some() {
        let cpus = helpers_busy(cpus, &mut busy);
        cpus.prepare();
        cpus
    } else {
        cpus
    };
    // SAFETY: one CPU, no interrupts, and `place` is the bitmap's only user: no other
    // reference to it lives while this one does.
    let bits = unsafe { &mut *core::ptr::addr_of_mut!(IN_IMAGE) };
    let mut image = ImagePages::new(bits);
    let plan = &chosen.plan;
    let pfns = plan
        .targets
        .iter()
        .map(|t| t.pfn)
        .chain(plan.zeros.iter().copied());
    for pfn in pfns {
        image.add(pfn, table).map_err(placing)?;
    }
    let mut mem = Identity;
    let mut safe = SafePages::new(table, busy, &image);
    let lazy = chosen.swap.map(|sw| {
        alloc::format!(
            ", lazy: {} pages in its swap region at byte {} ({} checked)",
            sw.used_pages,
            sw.offset,
            if sw.verity.is_some() {
                "header and verity tree's top"
            } else {
                "header"
            }
        )
    });
    say!(
        "snapboot-restorer: image checked: {}, {} pages ({} to copy, {} zero){}; restoring",
        chosen.name,
        chosen.stream_pages,
        plan.targets.len(),
        plan.zeros.len(),
        lazy.as_deref().unwrap_or("")
    );

    // The platform's way in, set up in safe pages before any page is placed.
    let jump =
        crate::cpu::prepare(&chosen.entry, target, &mut safe, &mut mem).map_err(|e| match e {
            crate::cpu::NotEntered::Place(e) => placing(e),
            crate::cpu::NotEntered::Entry(why) => Refused::NotPlaced(why),
        })?;

    // Every page to its place; the ones landing on the restorer's memory go to safe pages,
    // listed for the last copy. The load phase starts here unless its chunks were read
    // already.
    let (checked, mut load) = match ahead {
        Ahead::Checked(load) => (true, load),
        Ahead::Read(load) => (false, load),
        Ahead::Nothing => (false, Load::new(cycles())),
    };
    let t = cycles();
    let mut last = LastCopy::default();
    for &pfn in &plan.zeros {
        if busy.holds(pfn) {
            let page = safe.take(&mut mem).map_err(placing)?;
            last.push(&mut safe, &mut mem, page, pfn * PAGE)
                .map_err(placing)?;
        } else {
            zero_page(pfn * PAGE);
            crate::cpu::written(pfn * PAGE, PAGE);
        }
    }
    load.placed_pages += plan.zeros.len() as u64;
    lap(&mut load, Phase::Place, t);
    let disk = disks
        .disk(at)
        .ok_or_else(|| Refused::Unreadable("the store's disk is gone".into()))?;
    let check = store.catalog.check;
    let in_place = match held {
        Some(chunks) => {
            let deferred = (&mut safe, &mut mem, &mut last);
            let state = (scratch, &busy, deferred, &mut load);
            on_every_cpu(chunks, cpus, (!checked).then_some(check), state)?
        }
        None => {
            let deferred = (&mut safe, &mut mem, &mut last);
            let state = (scratch, &busy, deferred, &mut load);
            on_this_cpu(plan, store, disk, window, (checked, check), state)?
        }
    };
    // The load phase ends here; the counter's rate is learnt after (the PIT's 10 ms are
    // not the restore's).
    let end = cycles();
    let rate = crate::cpu::cycle_rate();
    let reads = window.requests;
    say!(
        "snapboot-restorer: {} MiB read in {} requests, {in_place} of {} chunks unpacked in place; {} pages deferred, {} safe pages; time: {}; counter: {}; entering the image at {:#x}",
        reads.bytes >> 20,
        reads.count,
        plan.by_chunk().count(),
        last.count,
        safe.used,
        load.spent,
        Counter(rate),
        crate::cpu::describe(&jump)
    );
    // The `throughput` marker (`boottrace::Marker::Throughput`, which the restorer cannot
    // link: boottrace needs std): `snapboot: @throughput ` and the line.
    let throughput = load.throughput(&reads, end, rate);
    say!(
        "snapboot: @throughput {}",
        restorer::telemetry::detail(&throughput, &load.spent, rate)
    );
    finish(disks)?;
    // SAFETY: every page of the image is in place or listed for the last copy (every
    // other CPU's pages finished, cleaned and the CPU off: `crate::smp::run`), the boot
    // log is written and the platform's last step done; nothing of this program is used
    // after the jump.
    unsafe { crate::cpu::enter(jump, &last, &busy) }
}

/// `cpus`, with the memory starting them takes added to `busy`; the boot CPU alone
/// ([`crate::cpu::OneCpu`], and the console says why) when that memory is the restorer's
/// own already or `busy` has no room for it.
fn helpers_busy<'c>(cpus: &'c dyn crate::cpu::Cpus, busy: &mut Busy) -> &'c dyn crate::cpu::Cpus {
    let Some((start, end)) = cpus.busy() else {
        return cpus;
    };
    let why = if (start / PAGE..end.div_ceil(PAGE)).any(|pfn| busy.holds(pfn)) {
        alloc::format!("starting them takes {start:#x}..{end:#x}, which the restorer uses")
    } else if !busy.add(start, end) {
        alloc::format!(
            "the restorer keeps {} ranges apart already",
            restorer::safepages::MAX_BUSY
        )
    } else {
        return cpus;
    };
    say!(
        "snapboot-restorer: decoding on this CPU alone, not on the other {}: {why}",
        cpus.others().len()
    );
    &crate::cpu::OneCpu
}

/// The stretches of the store the chunks of `chosen` lie in.
pub(crate) fn chunk_runs(
    store: &image::Store,
    chosen: &image::Chosen,
) -> Result<restorer::window::Runs, admission::Refused> {
    let mut pieces = Vec::new();
    for group in chosen.plan.by_chunk() {
        let c = store.catalog.chunk(group[0].chunk).ok_or_else(|| {
            admission::Refused::Damaged(alloc::format!("chunk {} left the catalog", group[0].chunk))
        })?;
        pieces.push((store.chunk_at(c)?, u64::from(c.stored_len)));
    }
    Ok(restorer::window::Runs::of(pieces))
}

/// Where a buffer of `bytes` can lie that no page of `chosen` lands on, outside `busy` and
/// below 4 GiB (`restorer::safepages::free_run`): the PVH program reads every chunk there
/// when other CPUs decode. Why not when the image's pages are not all RAM, or no run of
/// free pages is that long.
#[cfg(not(feature = "efi"))]
pub(crate) fn free_for_buffer(
    chosen: &image::Chosen,
    table: &Table,
    busy: &Busy,
    bytes: u64,
) -> Result<u64, String> {
    // SAFETY: one CPU, no interrupts, and no other reference to the bitmap lives while
    // this one does (`place` fills it again afterwards).
    let bits = unsafe { &mut *core::ptr::addr_of_mut!(IN_IMAGE) };
    let mut image = ImagePages::new(bits);
    let plan = &chosen.plan;
    for pfn in plan
        .targets
        .iter()
        .map(|t| t.pfn)
        .chain(plan.zeros.iter().copied())
    {
        image.add(pfn, table).map_err(|e| e.to_string())?;
    }
    let pages = bytes.div_ceil(PAGE);
    restorer::safepages::free_run(table, &image, busy, pages).ok_or_else(|| {
        alloc::format!(
            "no {} MiB of RAM below 4 GiB that the image leaves free",
            (pages * PAGE) >> 20
        )
    })
}

/// What was done with an image's chunks before [`place`].
pub(crate) enum Ahead {
    /// Nothing: the window reads them as they are placed, the load phase starts there.
    #[cfg_attr(feature = "efi", allow(dead_code))]
    Nothing,
    /// Every chunk is in the window (the PVH program's when other CPUs decode; whichever
    /// CPU unpacks a chunk checks it first), the load phase counted from its first read.
    #[cfg_attr(feature = "efi", allow(dead_code))]
    Read(Load),
    /// Every chunk is in the window and checked ([`check_chunks`]: the EFI program's), the
    /// load phase counted from its first read.
    #[cfg_attr(not(feature = "efi"), allow(dead_code))]
    Checked(Load),
}

/// Where pages bound for the restorer's own memory wait: safe pages, listed for the last
/// copy.
type Deferred<'d, 's> = (&'d mut SafePages<'s>, &'d mut Identity, &'d mut LastCopy);
/// What placing a chunk's pages uses: the chunk buffer, the busy ranges, the deferred
/// pages and the load phase's counts.
type State<'d, 's> = (&'d mut [u8], &'d Busy, Deferred<'d, 's>, &'d mut Load);

/// Every chunk of `plan` with its stored bytes, when `window` holds them all (the EFI
/// program read them before it left the firmware); `None` when one is not held, or not in
/// the catalog (the one-CPU path then says why).
fn held_chunks<'a>(
    plan: &'a restorer::plan::Plan,
    store: &'a image::Store,
    window: &'a restorer::window::Window,
) -> Option<Vec<Chunk<'a>>> {
    plan.by_chunk()
        .map(|group| {
            let rec = store.catalog.chunk(group[0].chunk)?;
            let stored = window.held(store.chunk_at(rec).ok()?, rec.stored_len as usize)?;
            Some(Chunk { group, rec, stored })
        })
        .collect()
}

/// The chunks on every CPU: those unpacked in place are jobs for all ([`crate::smp::run`]),
/// the boot CPU places the others meanwhile; `check`: the store's checksum when the chunks
/// are not checked yet. Returns how many were unpacked in place. A job that failed on any
/// CPU is done again here, to refuse with the one-CPU path's reason (or, when it unpacks
/// right here, because the other CPU's work cannot be trusted).
fn on_every_cpu(
    chunks: Vec<Chunk>,
    cpus: &dyn crate::cpu::Cpus,
    check: Option<storelayout::ChunkCheck>,
    (scratch, busy, (safe, mem, last), load): State,
) -> Result<u64, admission::Refused> {
    use admission::Refused;
    let split = Split::of(chunks, |pfn| !busy.holds(pfn));
    let jobs = Jobs::new(split.jobs, check);
    let rest = &split.rest;
    let (placed, outcome) = crate::smp::run(&jobs, cpus, || {
        for c in rest {
            let t = cycles();
            if let Some(check) = check {
                c.rec.check_stored(check, c.stored).map_err(Refused::from)?;
            }
            let t = lap(load, Phase::Check, t);
            through_scratch(
                c,
                t,
                (
                    &mut *scratch,
                    busy,
                    (&mut *safe, &mut *mem, &mut *last),
                    &mut *load,
                ),
            )?;
        }
        Ok::<(), Refused>(())
    })
    .map_err(|why| Refused::NotPlaced(alloc::format!("decoding on every CPU: {why}")))?;
    for note in &outcome.notes {
        say!("snapboot-restorer: {note}");
    }
    load.add_decoded(&outcome.tally);
    load.workers = outcome.workers;
    placed?;
    if let Some(i) = jobs.failed() {
        let job = jobs.job(i).expect("a failed job is one of the jobs");
        let c = job.chunk;
        if let Some(check) = check {
            c.check_stored(check, job.stored).map_err(Refused::from)?;
        }
        crate::smp::Phys
            .fill(job.to, c.raw_len(), &mut |out| {
                c.unpack_into(job.stored, out)
            })
            .map_err(Refused::from)?;
        // The same bytes unpacked right here: what failed was the other CPU (or the memory
        // it read through), and more jobs may have failed than the lowest one kept. Nothing
        // it placed can be trusted, so the image is not entered.
        return Err(Refused::NotPlaced(alloc::format!(
            "chunk {} failed on another CPU and unpacked right on this one: the other CPUs' pages are not trusted",
            c.id
        )));
    }
    Ok(jobs.len() as u64)
}

/// The chunks on this CPU alone, in plan order, read through `window` from `disk` and
/// checked first unless `checked` already (against `check`). Returns how many were
/// unpacked in place.
fn on_this_cpu<D: DiskMut>(
    plan: &restorer::plan::Plan,
    store: &image::Store,
    disk: &mut D,
    window: &mut restorer::window::Window,
    (checked, check): (bool, storelayout::ChunkCheck),
    (scratch, busy, (safe, mem, last), load): State,
) -> Result<u64, admission::Refused> {
    use admission::Refused;
    let chunk_error = Refused::from;
    let mut in_place = 0u64;
    for group in plan.by_chunk() {
        let c = store.catalog.chunk(group[0].chunk).ok_or_else(|| {
            Refused::Damaged(alloc::format!("chunk {} left the catalog", group[0].chunk))
        })?;
        let t = cycles();
        let stored = window
            .get(disk, store.chunk_at(c)?, c.stored_len as usize)
            .map_err(|e| Refused::Unreadable(alloc::format!("reading chunk {}: {e}", c.id)))?;
        let t = lap(load, Phase::Read, t);
        if !checked {
            c.check_stored(check, stored).map_err(chunk_error)?;
        }
        let t = lap(load, Phase::Check, t);
        let first = restorer::plan::in_place(group, c.pages)
            .filter(|&p| (p..p + u64::from(c.pages)).all(|pfn| !busy.holds(pfn)));
        if let Some(first) = first {
            crate::smp::Phys
                .fill(first * PAGE, c.raw_len(), &mut |out| {
                    c.unpack_into(stored, out)
                })
                .map_err(chunk_error)?;
            lap(load, Phase::Unpack, t);
            load.decoded_bytes += c.raw_len() as u64;
            load.placed_pages += u64::from(c.pages);
            in_place += 1;
            continue;
        }
        let chunk = Chunk {
            group,
            rec: c,
            stored,
        };
        through_scratch(
            &chunk,
            t,
            (
                &mut *scratch,
                busy,
                (&mut *safe, &mut *mem, &mut *last),
                &mut *load,
            ),
        )?;
    }
    Ok(in_place)
}

/// Unpacks chunk `c` into the chunk buffer and copies its pages to their places (to safe
/// pages, for the last copy, when the restorer's memory holds them); the counter read
/// `since` the chunk was checked.
fn through_scratch(
    c: &Chunk,
    since: u64,
    (scratch, busy, (safe, mem, last), load): State,
) -> Result<(), admission::Refused> {
    use admission::Refused;
    let placing = |e: PlaceError| Refused::NotPlaced(e.to_string());
    let buf = scratch.get_mut(..c.rec.raw_len()).ok_or_else(|| {
        Refused::NotPlaced(alloc::format!(
            "chunk {} is larger than any other",
            c.rec.id
        ))
    })?;
    c.rec.unpack_into(c.stored, buf).map_err(Refused::from)?;
    load.decoded_bytes += buf.len() as u64;
    let t = lap(load, Phase::Unpack, since);
    for t in c.group {
        let src = scratch.as_ptr() as u64 + u64::from(t.slot) * PAGE;
        let dst = t.pfn * PAGE;
        if busy.holds(t.pfn) {
            let page = safe.take(mem).map_err(placing)?;
            copy_page(src, page);
            crate::cpu::written(page, PAGE);
            last.push(safe, mem, page, dst).map_err(placing)?;
        } else {
            copy_page(src, dst);
            crate::cpu::written(dst, PAGE);
        }
    }
    load.placed_pages += c.group.len() as u64;
    lap(load, Phase::Place, t);
    Ok(())
}

/// Charges the cycles since `since` to `phase` of `load`; returns now.
fn lap(load: &mut Load, phase: Phase, since: u64) -> u64 {
    load.spent.add(phase, since, cycles())
}

/// The cycle counter's rate for the console, or that it is unknown.
struct Counter(Option<restorer::telemetry::Rate>);

impl core::fmt::Display for Counter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(rate) => write!(f, "{rate}"),
            None => f.write_str("rate unknown, no seconds"),
        }
    }
}

pub(crate) fn cycles() -> u64 {
    crate::cpu::cycles()
}
