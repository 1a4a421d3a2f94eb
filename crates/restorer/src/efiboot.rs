//! The EFI application: GRUB chainloads it (`chainloader /EFI/snapboot/restorer.efi WORDS`,
//! the words the stock kernel's entry has) or the firmware starts it from a boot entry.
//! Everything that can refuse an image happens while boot services run, through the
//! firmware's Block I/O (whole disks in the firmware's order, named as the kernel names
//! them: `vda` first), so a refusal returns to the loader (`EFI_LOAD_ERROR`), whose next
//! entry boots the stock kernel, and the stock kernel finds the reason in the store's boot
//! log:
//!
//! 1. the memory map, as the image kernel's EFI stub turns it into e820 (`restorer::efimap`:
//!    its checksum is what the image's header carries), and a heap of loader pages below
//!    4 GiB;
//! 2. the kernel pack's initramfs, the settings, the store and its boot log, and the image
//!    chosen and checked, all as the PVH program does (`crate::decide`,
//!    `crate::restore_from`);
//! 3. every chunk the image needs, read into loader pages in one request per stretch of
//!    the store they lie in (neighbours within 1 MiB merged: `restorer::window::Runs`),
//!    each checked, and the attempt counted in the boot log;
//! 4. `ExitBootServices`, then the CPU taken over (`hw::efi`), the pages placed
//!    (`crate::place`, with the program, its heap and its read buffer as busy ranges; the
//!    board's other CPUs, started through PSCI on arm64 and with INIT and start-up IPIs on
//!    the PC, unpack chunks too) and, last,
//!    the runtime services switched to the image kernel's virtual map
//!    (`SetVirtualAddressMap`) before the jump. A failure after step 4 resets the PC (the
//!    attempt is counted: the crash-loop guard ends a loop).

use crate::cpu::Cpus;
use crate::flow::{
    __image_start, decide, keep_fallback, place, restore_from, Asked, Disks, Load, NotRestored,
    Phase, MAX_PAGES, PAGE,
};
use crate::heap;
use crate::hw::efi::{self, BlockDisk, Firmware};
use admission::Refused;
use alloc::string::ToString;
use alloc::vec::Vec;
use r_efi::efi as uefi;
use restorer::disk::Span;
use restorer::e820::Table;
#[cfg(target_arch = "x86_64")]
use restorer::efimap::Loader;
use restorer::image::{self, DiskSet};
use restorer::safepages::Busy;
use restorer::window::Window;
use storelayout::SlotWrite;

/// The heap's bytes, the most first: the kernel pack's initramfs and its unpacked files,
/// the catalog, the page plan and the chunk buffer. What the checks left unused
/// ([`HEAP_SLACK`] kept) is free RAM for the image's pages once boot services are gone.
const HEAP_TRIES: [u64; 3] = [256 << 20, 128 << 20, 64 << 20];
/// Heap kept beyond its top once an image passed its checks, for what is allocated after
/// (the memory map, the virtual address map, the throughput line once the pages are
/// placed, the checks of another image if this one cannot be read).
const HEAP_SLACK: u64 = 16 << 20;
/// The image kernel's EFI stub as Debian builds it (`CONFIG_EFI_SOFT_RESERVE=y`).
#[cfg(target_arch = "x86_64")]
const STUB: Loader = Loader::Stub { soft_reserve: true };

/// The firmware's whole disks, then views of partitions of them (the store's).
struct EfiDisks {
    list: Vec<BlockDisk>,
    whole: usize,
}

impl DiskSet for EfiDisks {
    type Disk = BlockDisk;

    fn disk(&mut self, index: usize) -> Option<&mut BlockDisk> {
        self.list.get_mut(index)
    }
}

impl Disks for EfiDisks {
    fn count(&self) -> usize {
        self.whole
    }

    fn part(&mut self, index: usize, span: Span) -> usize {
        match self.list.get(index) {
            Some(d) => {
                let mut view = d.clone();
                view.narrow(span);
                self.list.push(view);
                self.list.len() - 1
            }
            None => index,
        }
    }
}

/// After a failure with nowhere to go: reset.
pub fn give_up() -> ! {
    efi::reset()
}

/// After a panic: back to the loader while boot services run (its next entry boots), else
/// a reset.
pub fn after_panic() -> ! {
    if efi::boot_services_running() {
        say!("snapboot-restorer: back to the boot loader: its next entry boots");
        efi::return_to_loader(uefi::Status::ABORTED)
    }
    efi::reset()
}

/// The Rust entry, on the restorer's own stack (`hw::efi`'s `efi_main` moved there).
#[no_mangle]
extern "efiapi" fn efi_start(image: uefi::Handle, st: *mut uefi::SystemTable) -> uefi::Status {
    // SAFETY: the handle and system table the firmware passed to `efi_main`; boot services
    // run.
    let fw = unsafe { Firmware::new(image, st) };
    say!("snapboot-restorer: started (EFI)");
    // The ACPI tables' root, for the PC's other CPUs.
    #[cfg(target_arch = "x86_64")]
    let rsdp = crate::cpu::efi_rsdp(st);
    #[cfg(target_arch = "aarch64")]
    let rsdp = 0;
    let Err(why) = restore(fw, rsdp);
    say!("snapboot-restorer: refused: {why}");
    say!("snapboot-restorer: back to the boot loader: its next entry boots");
    uefi::Status::LOAD_ERROR
}

/// The device tree U-Boot passes, read once: the console it names is used from here on
/// (until then the firmware's console), and the rest is the machine ([`machine`]).
#[cfg(target_arch = "aarch64")]
fn device_tree(fw: &Firmware) -> Result<restorer::fdt::Machine, NotRestored> {
    let blob = fw
        .device_tree()
        .ok_or_else(|| NotRestored::Firmware("no device tree in its configuration table".into()))?;
    let m = restorer::fdt::Fdt::parse(blob).map_err(firmware)?.machine();
    if let Some(restorer::fdt::Uart::Pl011(base)) = m.uart {
        crate::hw::pl011::set(base);
    }
    Ok(m)
}

/// What the image kernel's boot saw of this machine: the RAM pages may go to, the memory
/// the images' checks compare, and the CPUs; and the other CPUs that decode chunks.
struct Machine {
    table: Table,
    memory: admission::Memory,
    cpus: Vec<u64>,
    /// How many CPUs the machine has (arm64: the device tree's; the PC: not counted).
    online_cpus: Option<u32>,
    boot_path: Option<alloc::string::String>,
    helpers: alloc::boxed::Box<dyn Cpus>,
}

/// The PC: the memory map as the image kernel's EFI stub turns it into e820 (its checksum
/// is what the image's header carries); the other CPUs the MADT (from the ACPI tables'
/// root at `rsdp`) lists decode chunks too, started once boot services are gone at a page
/// below 640 KiB that is RAM and no firmware runtime data (else the console says why not).
#[cfg(target_arch = "x86_64")]
fn machine(map: &efi::MemoryMap, rsdp: u64) -> Result<Machine, NotRestored> {
    // The table as the image kernel's stub makes it, and the checksum of GRUB's own: the
    // same RAM either way (runtime code is not RAM to either).
    let table = restorer::efimap::table(&map.descriptors, STUB).map_err(firmware)?;
    let grub = restorer::efimap::table(&map.descriptors, Loader::Grub).map_err(firmware)?;
    let memory = admission::Memory::E820 {
        checksum: table.checksum(),
        also: Some(grub.checksum()),
        ram_pages: table.ram_pages(),
    };
    let runtime = restorer::efimap::runtime_in_ram(&map.descriptors);
    let page = restorer::safepages::low_page(&table, &runtime);
    let helpers: alloc::boxed::Box<dyn Cpus> = crate::cpu::helpers(rsdp, page);
    Ok(Machine {
        table,
        memory,
        cpus: Vec::new(),
        online_cpus: None,
        boot_path: None,
        helpers,
    })
}

/// The arm64 board: the device tree U-Boot passes, which is what the image kernel was
/// booted with (U-Boot's own memory is RAM to a kernel it boots): its RAM, less what it
/// does not map, its reservations (the layout capture recorded), and this CPU (the image
/// is entered on the CPU that hibernated); the other CPUs decode chunks too when PSCI can
/// start them (else the console says why not).
#[cfg(target_arch = "aarch64")]
fn machine(m: restorer::fdt::Machine) -> Result<Machine, NotRestored> {
    // The image kernel's own resume puts a GICv2 back (its CPU-PM notifiers); a GICv3's
    // distributor, redistributors and ITS it leaves as this boot found them.
    match m.gic {
        Some(restorer::fdt::Gic::V2) => {}
        Some(restorer::fdt::Gic::V3) => return Err(NotRestored::Firmware("the machine's interrupt controller is a GICv3, which the stock kernel does not set up again after a restore no kernel came before (GICv2 only)".into())),
        None => return Err(NotRestored::Firmware("the device tree names no GIC the restorer knows".into())),
    }
    let entries = m.ram.iter().map(|r| restorer::e820::Entry {
        addr: r.base,
        size: r.size,
        kind: restorer::e820::RAM,
    });
    let table = Table::from_efi(entries)
        .ok_or_else(|| NotRestored::Firmware("the device tree lists too many RAM ranges".into()))?;
    let ram_bytes = m.ram.iter().map(|r| r.size).sum();
    let memory = admission::Memory::DeviceTree {
        ram_bytes,
        map: snapimg::MemoryMap::new(m.ram, m.reserved),
    };
    // The kernel U-Boot's script boots when the restorer refuses: booti, by this U-Boot.
    let boot_path = match &m.uboot {
        Some(v) => alloc::format!("U-Boot {v}, booti"),
        None => "no U-Boot, direct".into(),
    };
    let helpers: alloc::boxed::Box<dyn Cpus> = match crate::cpu::Psci::of(m.psci, &m.cpus) {
        Ok(psci) => alloc::boxed::Box::new(psci),
        Err(why) => {
            say!(
                "snapboot-restorer: decoding on this CPU alone, not on the board's {}: {why}",
                m.cpus.len()
            );
            alloc::boxed::Box::new(crate::cpu::OneCpu)
        }
    };
    Ok(Machine {
        table,
        memory,
        cpus: alloc::vec![crate::cpu::mpidr()],
        online_cpus: Some(m.cpus.len() as u32),
        boot_path: Some(boot_path),
        helpers,
    })
}

fn firmware(e: impl core::fmt::Display) -> NotRestored {
    NotRestored::Firmware(e.to_string())
}

fn restore(fw: Firmware, rsdp: u64) -> Result<core::convert::Infallible, NotRestored> {
    // The heap first: everything after it allocates (so nothing here may).
    let mut heap_got = None;
    let mut last_error = None;
    for bytes in HEAP_TRIES {
        match fw.allocate_below_4g((bytes / PAGE) as usize) {
            Ok(at) => {
                heap_got = Some((at, bytes));
                break;
            }
            Err(e) => last_error = Some(e),
        }
    }
    let Some((heap_at, heap_bytes)) = heap_got else {
        say!(
            "snapboot-restorer: refused: no heap of {} MiB below 4 GiB: {}",
            HEAP_TRIES[HEAP_TRIES.len() - 1] >> 20,
            last_error.expect("every size was tried")
        );
        efi::return_to_loader(uefi::Status::OUT_OF_RESOURCES)
    };
    heap::init(heap_at, heap_at + heap_bytes);
    #[cfg(target_arch = "aarch64")]
    let tree = device_tree(&fw)?;
    let me = fw.loaded_image().map_err(firmware)?;
    // A linker-script symbol; only its address is used. (The arm64 program relocates
    // itself at its entry.)
    let linked = core::ptr::addr_of!(__image_start) as u64;
    if cfg!(target_arch = "x86_64") && me.base != linked {
        return Err(NotRestored::Firmware(alloc::format!(
            "the restorer was loaded at {:#x}, but it runs only where it is linked, {linked:#x} (that memory was taken)",
            me.base
        )));
    }
    let map = fw.memory_map().map_err(firmware)?;
    let Machine {
        table,
        memory,
        cpus,
        online_cpus,
        boot_path,
        helpers,
    } = {
        #[cfg(target_arch = "x86_64")]
        let m = machine(&map, rsdp)?;
        #[cfg(target_arch = "aarch64")]
        let m = {
            let _ = rsdp;
            machine(tree)?
        };
        m
    };
    if table.ram_end() > (MAX_PAGES as u64) * PAGE {
        return Err(NotRestored::RamAbove4G(table.ram_end()));
    }
    let cmdline = me.options.trim().to_string();
    let list = fw.disks().map_err(firmware)?;
    let mut disks = EfiDisks {
        whole: list.len(),
        list,
    };
    say!(
        "snapboot-restorer: loaded at {:#x}, {} firmware disks, memory map of {} descriptors ({} e820 entries)",
        me.base,
        disks.count(),
        map.descriptors.len(),
        table.entries().len()
    );
    let (store, mut decided) = decide(&mut disks, &cmdline)?;
    let params = decided.params.clone();
    let address = params.store.as_ref().expect("decide found the store");
    let asked = Asked {
        address,
        images: &params.images,
        cmdline: &cmdline,
        cpus: &cpus,
        online_cpus,
        boot_path,
    };
    let at = decided.at;
    let mut scratch = alloc::vec![0u8; store.most_raw()];
    let mut fw = Some(fw);
    let busy_image = (me.base, me.base + me.size.next_multiple_of(PAGE));
    let mut enter = |disks: &mut EfiDisks, chosen: &image::Chosen, attempt: &SlotWrite| {
        let f = fw.take().expect("the firmware is back after every refusal");
        let (f, why) = enter(
            f,
            disks,
            &store,
            at,
            &table,
            chosen,
            attempt,
            (busy_image, (heap_at, heap_at + heap_bytes)),
            &mut scratch,
            &*helpers,
        );
        fw = Some(f);
        why
    };
    let Err(why) = restore_from(
        &mut disks,
        &store,
        &mut decided,
        &memory,
        &asked,
        &mut enter,
    );
    keep_fallback(&mut disks, at, &store, &decided.record, &why);
    Err(why)
}

/// Reads, counts and enters `chosen` (steps 3 and 4 of the module docs); returns the
/// firmware and why not only while boot services run.
#[allow(clippy::too_many_arguments)]
fn enter(
    fw: Firmware,
    disks: &mut EfiDisks,
    store: &image::Store,
    at: usize,
    table: &Table,
    chosen: &image::Chosen,
    attempt: &SlotWrite,
    (program, heap): ((u64, u64), (u64, u64)),
    scratch: &mut [u8],
    cpus: &dyn Cpus,
) -> (Firmware, Refused) {
    // The image passed its checks: the heap ends a little above what they used, so its
    // pages after that are free RAM for the image once boot services are gone. They are
    // given back to the firmware only if it has no room for the read buffer without them:
    // OVMF takes 0.6 s under TCG to free 200 MiB, a sixth of the restorer's time.
    let old_end = heap::end();
    let heap_end = (heap::top() + HEAP_SLACK)
        .next_multiple_of(PAGE)
        .clamp(heap.0, old_end);
    heap::end_at(heap_end);
    let heap = (heap.0, heap_end);
    // The firmware's translation tables stay busy on arm64 (the MMU runs on them until
    // the last copy), and where the image kernel is entered: known before anything is read
    // or counted.
    #[cfg(target_arch = "aarch64")]
    let (firmware_tables, target) =
        match (crate::cpu::firmware_tables(), arm64_target(chosen, table)) {
            (Ok(t), Ok(target)) => (t, target),
            (Err(why), _) | (_, Err(why)) => return (fw, Refused::NotPlaced(why)),
        };
    #[cfg(target_arch = "x86_64")]
    let target = crate::cpu::Target;
    let runs = match crate::flow::chunk_runs(store, chosen) {
        Ok(r) => r,
        Err(why) => return (fw, why),
    };
    let (bytes, count) = (runs.bytes(), runs.0.len());
    let pages = (bytes / PAGE + 1) as usize;
    let allocated = fw.allocate_below_4g(pages).or_else(|e| {
        if heap_end >= old_end {
            return Err(e);
        }
        fw.free(heap_end, ((old_end - heap_end) / PAGE) as usize);
        fw.allocate_below_4g(pages)
    });
    let buf_at = match allocated {
        Ok(a) => a,
        Err(e) => {
            let why = Refused::NotPlaced(alloc::format!(
                "its chunks take {} MiB of the store, and the firmware has no room to read them: {e}",
                bytes >> 20
            ));
            return (fw, why);
        }
    };
    // SAFETY: `pages` pages of loader data the firmware just handed this program, below
    // 4 GiB (identity mapped before and after the exit), used by nothing else.
    let buf = unsafe { core::slice::from_raw_parts_mut(buf_at as *mut u8, pages * PAGE as usize) };
    let mut window = Window::new(buf);
    // The load phase starts with the first chunk read (`place` counts on from here).
    let mut load = Load::new(crate::flow::cycles());
    let Some(disk) = disks.disk(at) else {
        fw.free(buf_at, pages);
        return (fw, Refused::Unreadable("the store's disk is gone".into()));
    };
    if let Err(e) = window.fill_runs(disk, runs) {
        fw.free(buf_at, pages);
        return (
            fw,
            Refused::Unreadable(alloc::format!(
                "reading its {} MiB in {count} runs: {e}",
                bytes >> 20
            )),
        );
    }
    load.spent
        .add(Phase::Read, load.start, crate::flow::cycles());
    // Every chunk checked while a refusal can still go back to the loader.
    if let Err(why) = crate::flow::check_chunks(chosen, store, disk, &mut window, &mut load) {
        fw.free(buf_at, pages);
        return (fw, why);
    }
    say!(
        "snapboot-restorer: read {} MiB of chunks in {count} requests, checked them ({}% of the time reading)",
        bytes >> 20,
        load.spent.of(Phase::Read) * 100 / load.spent.total().max(1)
    );
    // The crash-loop guard's count, as resume records it: after every check, before the
    // image kernel takes over.
    if let Err(e) = restorer::bootrecord::write(disk, attempt) {
        fw.free(buf_at, pages);
        return (fw, Refused::Unrecorded(e.to_string()));
    }
    say!(
        "snapboot-restorer: restore attempt recorded in the store's boot log (slot {})",
        attempt.slot
    );
    let map = match fw.memory_map() {
        Ok(m) => m,
        Err(e) => return (fw, Refused::NotPlaced(e.to_string())),
    };
    // The image kernel's runtime mappings, as capture recorded them: this boot's runtime
    // regions must be the same, each gets the image kernel's virtual address. An image
    // whose kernel ran without runtime services records none: the firmware stays in
    // physical mode, which that kernel never calls.
    let virtual_map = if chosen.efi_runtime.is_empty() {
        Vec::new()
    } else {
        match restorer::efimap::virtual_map(&map.descriptors, &chosen.efi_runtime) {
            Ok(v) => v,
            Err(e) => {
                return (
                    fw,
                    Refused::NotPlaced(alloc::format!("image does not fit this system: {e}")),
                )
            }
        }
    };
    let (size, version) = (map.descriptor_size, map.version);
    // The firmware's runtime data the kernel counts as RAM: busy until the last copy (no
    // safe page there; the image's pages for it are written after SetVirtualAddressMap).
    let runtime_ram = restorer::efimap::runtime_in_ram(&map.descriptors);
    let kept_apart = if cfg!(target_arch = "aarch64") { 4 } else { 3 };
    if runtime_ram.len() > restorer::safepages::MAX_BUSY - kept_apart {
        return (
            fw,
            Refused::NotPlaced(alloc::format!(
                "the firmware keeps runtime data in {} regions of RAM; the restorer keeps at most {} apart",
                runtime_ram.len(),
                restorer::safepages::MAX_BUSY - kept_apart
            )),
        );
    }
    say!("snapboot-restorer: leaving boot services");
    let runtime = match fw.exit(map.key) {
        Ok(r) => r,
        Err((fw, e)) => return (fw, Refused::NotPlaced(e.to_string())),
    };
    let mut busy = Busy::one(program.0, program.1);
    busy.add(heap.0, heap.1);
    busy.add(buf_at, buf_at + pages as u64 * PAGE);
    #[cfg(target_arch = "aarch64")]
    busy.add(firmware_tables.0, firmware_tables.1);
    for (start, end) in runtime_ram {
        busy.add(start, end);
    }
    let Err(why) = place(
        chosen,
        store,
        disks,
        at,
        table,
        (busy, target, cpus),
        // Every chunk was checked before the exit (`check_chunks`), and nothing but this
        // code has run since: no interrupts, the firmware's drivers stopped by the exit.
        // (The soak's checksum failures on a clean store were the firmware's timer writing
        // into the red zone while boot services ran: `hw::efi::firmware_call`.)
        (&mut window, scratch, crate::flow::Ahead::Checked(load)),
        |_: &mut EfiDisks| {
            if virtual_map.is_empty() {
                return Ok(());
            }
            runtime
                .set_virtual_map(&virtual_map, size, version)
                .map_err(|e| Refused::NotPlaced(e.to_string()))?;
            say!(
                "snapboot-restorer: runtime services in virtual mode: {} regions at the image kernel's addresses",
                virtual_map.len()
            );
            Ok(())
        },
    );
    say!("snapboot-restorer: refused after leaving boot services: {why}; resetting");
    efi::reset()
}

/// Where the arm64 image kernel is entered: `cpu_resume`, physical, as capture recorded
/// it; it must lie in this machine's RAM (the image's pages put the kernel there).
#[cfg(target_arch = "aarch64")]
fn arm64_target(
    chosen: &image::Chosen,
    table: &Table,
) -> Result<crate::cpu::Target, alloc::string::String> {
    // The exception level the image kernel ran at (its header's EL2 stub vectors are 0
    // exactly when it ran at EL1) is the one it is entered at.
    if let image::Entry::Arm64 {
        hyp_stub_vectors, ..
    } = chosen.entry
    {
        let (image_el, now) = (if hyp_stub_vectors != 0 { 2 } else { 1 }, crate::cpu::el());
        if image_el != now {
            return Err(alloc::format!(
                "the image kernel was booted at EL{image_el}, the restorer runs at EL{now}"
            ));
        }
    }
    let Some(at) = chosen.resume_entry else {
        return Err("its capture recorded no resume entry (cpu_resume's address: /proc/kallsyms showed none to snapboot, or an older snapboot captured it)".into());
    };
    if !table.is_ram_page(at / PAGE) {
        return Err(alloc::format!(
            "its resume entry {at:#x} is not in this machine's RAM"
        ));
    }
    Ok(crate::cpu::Target { cpu_resume: at })
}

crate::panic_items!(after_panic, give_up);
