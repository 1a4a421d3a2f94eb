//! The restorer: a freestanding program started in place of a kernel, with the command
//! line a stock boot would get, that restores a snapboot image without any kernel before
//! it. Two ways in, one program:
//!
//! * **PVH** (`src/pvhboot.rs`, the default build): the PC's firmware (QEMU's `-kernel`) enters
//!   it in 32-bit protected mode with the PVH start info; it finds the store on the PC's
//!   virtio disks and its fallback is a cold boot of the stock kernel from the kernel pack
//!   ([`fallback`]).
//! * **EFI** (`src/efiboot.rs`, the `efi` feature): an EFI application that GRUB chainloads (or
//!   the firmware starts from a boot entry); it reads through the firmware's Block I/O,
//!   checks everything while boot services run, and a refusal returns to the loader, which
//!   boots its fallback entry.
//!
//! Both choose and check an image as resume does (`restorer::image`: its signature when the
//! kernel pack's initramfs carries a public key, page list, description, the kernel of the
//! kernel pack, the initramfs, command line and disks it is bound to, the stream header,
//! the e820 checksum, RAM), read its chunks in disk order (each checked before it is
//! unpacked) and write every page to its PFN (pages whose PFN the restorer's own memory
//! holds go to free "safe" pages and are copied last by a relocated loop), then jump to the
//! image kernel's `restore_registers` with `%r9` = its CR3. See docs/design.md.
#![no_std]
#![no_main]

extern crate alloc;

use core::fmt::Write;

/// The console: COM1 on the PC, the device tree's PL011 on arm64 ([`hw::pl011`]).
struct Serial;

#[cfg(target_arch = "x86_64")]
const COM1: u16 = 0x3f8;

impl Write for Serial {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.byte(b'\r');
            }
            self.byte(b);
        }
        Ok(())
    }
}

impl Serial {
    /// Sets COM1 to 115200 8N1 (the EFI program keeps the firmware's setting).
    #[cfg(not(feature = "efi"))]
    fn init() {
        use hw::port::outb;
        for (off, v) in [
            (1, 0x00),
            (3, 0x80),
            (0, 0x01),
            (1, 0x00),
            (3, 0x03),
            (2, 0xc7),
        ] {
            outb(COM1 + off, v);
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn byte(&self, b: u8) {
        use hw::port::{inb, outb};
        while inb(COM1 + 5) & 0x20 == 0 {}
        outb(COM1, b);
    }

    #[cfg(target_arch = "aarch64")]
    fn byte(&self, b: u8) {
        hw::pl011::byte(b);
    }
}

macro_rules! say {
    ($($t:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(
            &mut $crate::Serial,
            format_args!("{}\n", format_args!($($t)*)),
        );
    }};
}

#[cfg(feature = "efi")]
mod efiboot;
/// The panic handler and `_Unwind_Resume` of a program, in its platform module (`pvhboot`,
/// `efiboot`): a panic is a refusal like any other, so it prints the bug and goes to the
/// platform's fallback (`$after_panic`); nothing unwinds (`$give_up` if it were tried).
macro_rules! panic_items {
    ($after_panic:ident, $give_up:ident) => {
        /// Named by the precompiled `alloc`'s landing pads (built for unwinding); never
        /// called: panics abort, so nothing unwinds.
        #[no_mangle]
        extern "C" fn _Unwind_Resume() -> ! {
            $give_up()
        }

        #[panic_handler]
        fn panic(info: &core::panic::PanicInfo) -> ! {
            say!("snapboot-restorer: refused: bug: {info}");
            $after_panic()
        }
    };
}
pub(crate) use panic_items;

mod cpu;
#[cfg(not(feature = "efi"))]
mod fallback;
mod flow;
mod hw;
mod phys;
#[cfg(not(feature = "efi"))]
mod pvhboot;
mod smp;

/// The restorer's heap: a bump allocator over the RAM right after its own image, growing
/// up to [`heap::LIMIT`]. Nothing is freed; the high-water mark is where the restorer's
/// memory ends, and image pages bound for below it are placed last (like the restorer's
/// own pages).
mod heap {
    use core::alloc::{GlobalAlloc, Layout};
    use core::sync::atomic::{AtomicU64, Ordering};

    /// Most bytes the heap may take (PVH: it grows from the image's end).
    #[cfg(not(feature = "efi"))]
    pub const LIMIT: u64 = 256 << 20;

    /// The next free byte (0: not yet set up).
    static NEXT: AtomicU64 = AtomicU64::new(0);
    /// Where the heap ends.
    static END: AtomicU64 = AtomicU64::new(0);

    /// Starts the heap at `start` (page aligned), ending at `end`.
    pub fn init(start: u64, end: u64) {
        NEXT.store(start, Ordering::Relaxed);
        END.store(end, Ordering::Relaxed);
    }

    /// The first byte after everything handed out so far.
    pub fn top() -> u64 {
        NEXT.load(Ordering::Relaxed)
    }

    /// Where the heap ends now.
    pub fn end() -> u64 {
        END.load(Ordering::Relaxed)
    }

    /// Ends the heap at `end` (at or above its top): the EFI program stops using the rest;
    /// the PVH program keeps it inside the busy range while pages are placed, then gives
    /// the rest back.
    pub fn end_at(end: u64) {
        END.store(end.max(top()), Ordering::Relaxed);
    }

    struct Bump;

    // SAFETY: hands out disjoint, aligned ranges of RAM that nothing else uses (above the
    // restorer's image, below `END`, which `init` checked is RAM); one CPU, no interrupts
    // (the other CPUs that decode chunks, `crate::smp`, never allocate).
    unsafe impl GlobalAlloc for Bump {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let next = NEXT.load(Ordering::Relaxed);
            let at = next.next_multiple_of(layout.align() as u64);
            match at.checked_add(layout.size() as u64) {
                Some(end) if next != 0 && end <= END.load(Ordering::Relaxed) => {
                    NEXT.store(end, Ordering::Relaxed);
                    at as *mut u8
                }
                _ => core::ptr::null_mut(),
            }
        }

        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
    }

    #[global_allocator]
    static HEAP: Bump = Bump;
}

/// Named by the precompiled `core` (built for unwinding); never called: panics abort.
#[no_mangle]
extern "C" fn rust_eh_personality() {}
