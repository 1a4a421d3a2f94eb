//! The PVH entry: the PC's firmware (QEMU's `-kernel`) starts the restorer in 32-bit
//! protected mode with `%ebx` = `hvm_start_info` (asm/pvh_entry.s builds identity page
//! tables and enters long mode); it finds the store on the PC's virtio disks
//! (`snapboot.store=/dev/vdX`, `LABEL=`, `PARTUUID=` or `PARTLABEL=`). Any refusal is
//! printed on COM1, then the stock kernel boots cold from the kernel pack
//! ([`crate::fallback`]); if that fails too, the machine powers off.

use crate::flow::{
    __image_end, __image_start, decide, keep_fallback, place, restore_from, Asked, Disks,
    NotRestored, MAX_PAGES, PAGE, WINDOW,
};
use crate::hw::port::outw;
use crate::hw::virtio;
use crate::{fallback, heap, Serial};
use admission::Refused;
use alloc::string::ToString;
use core::arch::{asm, global_asm};
use restorer::disk::Span;
use restorer::e820::Table;
use restorer::image;
use restorer::safepages::Busy;
use restorer::window::Window;
use storelayout::SlotWrite;

global_asm!(include_str!("asm/pvh_entry.s"), options(att_syntax));

/// Heap kept inside the busy range while pages are placed, for what `place` allocates
/// after them (the throughput line: a few hundred bytes).
const AFTER_PLACING: u64 = 16 << 10;

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
    let Err(why) = restore(handed().expect("just copied"));
    say!("snapboot-restorer: refused: {why}");
    FALLING_BACK.store(true, core::sync::atomic::Ordering::Relaxed);
    cold_boot();
    give_up()
}

fn restore(handed: &fallback::Handed) -> Result<core::convert::Infallible, NotRestored> {
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
    let mut disks = virtio::disks().map_err(|e| NotRestored::Store(e.to_string()))?;
    let (store, mut decided) = decide(&mut disks, cmdline)?;
    let params = decided.params.clone();
    let address = params.store.as_ref().expect("decide found the store");
    let asked = Asked {
        address,
        images: &params.images,
        cmdline,
        cpus: &[],
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
        heap::end_at((heap::top() + AFTER_PLACING).min(heap_end));
        let busy = Busy::one(img_start, heap::end().next_multiple_of(PAGE));
        let mut window = Window::new(&mut window_buf);
        let Err(why) = place(
            chosen,
            &store,
            disks,
            at,
            table,
            (busy, crate::cpu::Target, &crate::cpu::OneCpu),
            (&mut window, &mut scratch, None),
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

crate::panic_items!(after_panic, give_up);
