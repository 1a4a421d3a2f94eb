//! The PVH entry: the PC's firmware (QEMU's `-kernel`) starts the restorer in 32-bit
//! protected mode with `%ebx` = `hvm_start_info` (asm/pvh_entry.s builds identity page
//! tables and enters long mode); it finds the store on the PC's virtio disks
//! (`snapboot.store=/dev/vdX`, `LABEL=`, `PARTUUID=` or `PARTLABEL=`). Any refusal is
//! printed on COM1, then the stock kernel boots cold from the kernel pack
//! ([`crate::fallback`]); if that fails too, the machine powers off.
//!
//! On one CPU the store is read through a small window while pages are placed. When the
//! MADT lists other CPUs (`crate::cpu::Apic`), every chunk of the image is read first,
//! into RAM the image leaves free ([`read_all`]), and the other CPUs check and unpack
//! chunks with the boot CPU (`crate::smp`); without room for that, the window streams as
//! on one CPU.

use crate::cpu::{Cpus, OneCpu};
use crate::flow::{
    __image_end, __image_start, decide, keep_fallback, place, restore_from, Ahead, Asked, Disks,
    Load, NotRestored, Phase, MAX_PAGES, PAGE, WINDOW,
};
use crate::hw::port::outw;
use crate::hw::virtio;
use crate::{fallback, heap, Serial};
use admission::Refused;
use alloc::string::ToString;
use core::arch::{asm, global_asm};
use restorer::disk::Span;
use restorer::e820::Table;
use restorer::image::{self, DiskSet};
use restorer::safepages::Busy;
use restorer::window::Window;
use storelayout::SlotWrite;

global_asm!(include_str!("asm/pvh_entry.s"), options(att_syntax));

/// Heap kept inside the busy range while pages are placed, for what `place` allocates
/// after them (the throughput line: a few hundred bytes).
const AFTER_PLACING: u64 = 16 << 10;
/// Heap kept besides when other CPUs decode: the chunk and job lists (a few dozen bytes a
/// chunk, [`PER_CHUNK`]), each other CPU's stack and slot (`crate::smp`: 64 KiB,
/// [`PER_CPU`]), and a chunk read again when it failed its checksum.
const FOR_HELPERS: u64 = 1 << 20;
const PER_CHUNK: u64 = 256;
const PER_CPU: u64 = 80 << 10;

impl Disks for virtio::Disks {
    fn count(&self) -> usize {
        self.len()
    }

    fn part(&mut self, index: usize, span: Span) -> usize {
        if let Some(d) = self.get_mut(index) {
            d.narrow(span);
        }
        index
    }
}

/// Powers the PC off (q35: ACPI PM1a control at 0x604, sleep type 5 is 0) and halts if
/// that did not work.
pub fn give_up() -> ! {
    outw(0x604, 0x2000);
    loop {
        // SAFETY: halting with interrupts off stops the CPU; nothing else runs.
        unsafe { asm!("cli; hlt", options(nomem, nostack)) }
    }
}

/// After a panic: the cold boot, unless it was the cold boot that panicked.
pub fn after_panic() -> ! {
    if !FALLING_BACK.swap(true, core::sync::atomic::Ordering::Relaxed) {
        cold_boot();
    }
    give_up()
}

/// What the firmware handed over, copied before anything else (`HANDED_SET` once it is): a
/// refused image may have overwritten the RAM the firmware put it in (its pages hold the
/// capture boot's command line there), so the cold boot uses this copy.
static mut HANDED: core::mem::MaybeUninit<fallback::Handed> = core::mem::MaybeUninit::uninit();
static HANDED_SET: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The copy of what the firmware handed over, once taken.
fn handed() -> Option<&'static fallback::Handed> {
    // SAFETY: written once in `restorer_main` before HANDED_SET is set, never again; one
    // CPU, no interrupts.
    HANDED_SET
        .load(core::sync::atomic::Ordering::Acquire)
        .then(|| unsafe { (*core::ptr::addr_of!(HANDED)).assume_init_ref() })
}
/// Set once the cold boot started: a panic in it powers off.
static FALLING_BACK: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The fallback after a refusal: the stock kernel, booted cold from the kernel pack; prints
/// why and returns only if that failed.
fn cold_boot() {
    // Nothing the refused restore used is needed any more: all RAM above the restorer's
    // image is free for the cold boot (its heap included).
    let image_end = core::ptr::addr_of!(__image_end) as u64;
    let Some(handed) = handed() else {
        say!("snapboot-restorer: cold boot failed: no start info");
        return;
    };
    let Err(e) = fallback::cold_boot(handed, image_end, &mut Serial);
    say!("snapboot-restorer: cold boot failed: {e}");
}

#[no_mangle]
extern "C" fn restorer_main(start_info: u32) -> ! {
    Serial::init();
    say!("snapboot-restorer: started");
    match fallback::read_start_info(u64::from(start_info)) {
        Ok(h) => {
            // SAFETY: the only write, before HANDED_SET is set; one CPU, no interrupts.
            unsafe { (*core::ptr::addr_of_mut!(HANDED)).write(h) };
            HANDED_SET.store(true, core::sync::atomic::Ordering::Release);
        }
        Err(e) => {
            say!("snapboot-restorer: refused: start info: {e}");
            give_up()
        }
    }
    // The ACPI tables' root, for the PC's other CPUs.
    let rsdp = crate::cpu::pvh_rsdp(u64::from(start_info));
    let Err(why) = restore(handed().expect("just copied"), rsdp);
    say!("snapboot-restorer: refused: {why}");
    FALLING_BACK.store(true, core::sync::atomic::Ordering::Relaxed);
    cold_boot();
    give_up()
}

fn restore(handed: &fallback::Handed, rsdp: u64) -> Result<core::convert::Infallible, NotRestored> {
    let cmdline = handed.cmdline();
    let table = &Table::from_pvh(handed.map[..handed.entries].iter().copied());
    if table.ram_end() > (MAX_PAGES as u64) * PAGE {
        return Err(NotRestored::RamAbove4G(table.ram_end()));
    }
    // A linker-script symbol; only its address is used.
    let img_end = core::ptr::addr_of!(__image_end) as u64;
    heap::init(
        img_end,
        table.ram_run_end(img_end).min(img_end + heap::LIMIT),
    );
    // The other CPUs, started at the lowest free RAM page below 640 KiB.
    let page = restorer::safepages::low_page(table, &[]);
    let cpus: alloc::boxed::Box<dyn Cpus> = crate::cpu::helpers(rsdp, page);
    let mut disks = virtio::disks().map_err(|e| NotRestored::Store(e.to_string()))?;
    let (store, mut decided) = decide(&mut disks, cmdline)?;
    let params = decided.params.clone();
    let address = params.store.as_ref().expect("decide found the store");
    let asked = Asked {
        address,
        images: &params.images,
        cmdline,
        cpus: &[],
        online_cpus: None,
        boot_path: None,
    };
    let at = decided.at;
    // Buffers for the chunks, taken before the busy range is fixed.
    let mut window_buf = alloc::vec![0u8; WINDOW];
    let mut scratch = alloc::vec![0u8; store.most_raw()];
    let img_start = core::ptr::addr_of!(__image_start) as u64;
    let mut enter = |disks: &mut virtio::Disks, chosen: &image::Chosen, attempt: &SlotWrite| {
        // What is allocated once pages are placed (the throughput line) comes from heap
        // inside the busy range: above it, it could land on a page just placed.
        let heap_end = heap::end();
        // Other CPUs: the stretches of the store to read, found while the heap is whole,
        // and room kept for what decoding on every CPU allocates.
        let runs = if cpus.others().is_empty() {
            None
        } else {
            match crate::flow::chunk_runs(&store, chosen) {
                Ok(runs) => Some(runs),
                Err(why) => return why,
            }
        };
        let helpers = if runs.is_some() {
            let chunks = chosen.plan.by_chunk().count() as u64;
            FOR_HELPERS + chunks * PER_CHUNK + cpus.others().len() as u64 * PER_CPU
        } else {
            0
        };
        heap::end_at((heap::top() + AFTER_PLACING + helpers).min(heap_end));
        let mut busy = Busy::one(img_start, heap::end().next_multiple_of(PAGE));
        // Every chunk read first, in RAM the image leaves free; else the window streams.
        let all = match runs {
            None => None,
            Some(runs) => match read_all(disks, at, chosen, table, runs, &mut busy) {
                Ok(Ok(all)) => Some(all),
                Ok(Err(why)) => {
                    heap::end_at(heap_end);
                    return why;
                }
                Err(why) => {
                    say!(
                        "snapboot-restorer: decoding on this CPU alone, not on the other {}: {why}",
                        cpus.others().len()
                    );
                    None
                }
            },
        };
        let (mut streamed, mut held);
        let (window, ahead, helpers): (&mut Window, _, &dyn Cpus) = match all {
            Some((window, load)) => {
                held = window;
                (&mut held, Ahead::Read(load), &*cpus)
            }
            None => {
                streamed = Window::new(&mut window_buf);
                (&mut streamed, Ahead::Nothing, &OneCpu)
            }
        };
        let Err(why) = place(
            chosen,
            &store,
            disks,
            at,
            table,
            (busy, crate::cpu::Target, helpers),
            (window, &mut scratch, ahead),
            |disks: &mut virtio::Disks| {
                // The crash-loop guard's count, as resume records it: after every check,
                // before the image kernel takes over. Written from the buffer encoded
                // before the busy range was fixed: the write allocates nothing.
                let disk = disks
                    .get_mut(at)
                    .ok_or_else(|| Refused::Unreadable("the store's disk is gone".into()))?;
                restorer::bootrecord::write(disk, attempt)
                    .map_err(|e| Refused::Unrecorded(e.to_string()))?;
                say!(
                    "snapboot-restorer: restore attempt recorded in the store's boot log (slot {})",
                    attempt.slot
                );
                disks.reset_all();
                Ok(())
            },
        );
        // Refused: the heap is the next image's checks' again.
        heap::end_at(heap_end);
        why
    };
    let Err(why) = restore_from(
        &mut disks,
        &store,
        &mut decided,
        &admission::Memory::E820 {
            checksum: table.checksum(),
            also: None,
            ram_pages: table.ram_pages(),
        },
        &asked,
        &mut enter,
    );
    keep_fallback(&mut disks, at, &store, &decided.record, &why);
    Err(why)
}

/// Every chunk of `chosen` read from disk `at` in one request per stretch of the store
/// (`runs`) into RAM below 4 GiB that no page of the image lands on and `busy` leaves
/// (added to it: no safe page is taken there): the window the other CPUs check and decode
/// from, and the load phase so far. `Err` (the window then streams) when there is no such
/// room; `Ok(Err)` refuses the image (the store unreadable).
fn read_all(
    disks: &mut virtio::Disks,
    at: usize,
    chosen: &image::Chosen,
    table: &Table,
    runs: restorer::window::Runs,
    busy: &mut Busy,
) -> Result<Result<(Window<'static>, Load), Refused>, alloc::string::String> {
    let (bytes, count) = (runs.bytes(), runs.0.len());
    // A page more: a stretch is read in whole sectors.
    let len = bytes.next_multiple_of(PAGE) + PAGE;
    let buf_at = crate::flow::free_for_buffer(chosen, table, busy, len)?;
    if !busy.add(buf_at, buf_at + len) {
        return Err("no room for another busy range".into());
    }
    // SAFETY: `len` bytes of RAM below 4 GiB (identity mapped) that no page of the image
    // lands on and nothing of the restorer uses (`free_for_buffer`), busy from here on: no
    // safe page is taken there; read into, then read by the CPUs that decode, until the
    // image is entered or refused.
    let buf: &'static mut [u8] =
        unsafe { core::slice::from_raw_parts_mut(buf_at as *mut u8, len as usize) };
    let mut window = Window::new(buf);
    let mut load = Load::new(crate::flow::cycles());
    let Some(disk) = disks.disk(at) else {
        return Ok(Err(Refused::Unreadable("the store's disk is gone".into())));
    };
    if let Err(e) = window.fill_runs(disk, runs) {
        return Ok(Err(Refused::Unreadable(alloc::format!(
            "reading its {} MiB in {count} runs: {e}",
            bytes >> 20
        ))));
    }
    load.spent
        .add(Phase::Read, load.start, crate::flow::cycles());
    say!(
        "snapboot-restorer: read {} MiB of chunks in {count} runs to {buf_at:#x}",
        bytes >> 20
    );
    Ok(Ok((window, load)))
}

crate::panic_items!(after_panic, give_up);
