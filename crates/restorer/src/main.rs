//! The restorer: started by the PC's firmware through the PVH entry (32-bit protected mode,
//! paging off, `%ebx` = `hvm_start_info`) with a restore pack as its module. It checks the
//! image as the restoring kernel would (magic, e820 checksum, RAM size, every PFN in RAM,
//! the pack's checksum), writes every page to its PFN (pages whose PFN the restorer or the
//! unread pack still occupies go to free "safe" pages and are copied last by a relocated
//! loop), and jumps to the image kernel's `restore_registers` with `%r9` = its CR3. Any
//! refusal is printed on COM1, then the stock kernel boots cold from the kernel pack
//! ([`fallback`]); if that fails too, the machine powers off. See docs/design.md.
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::fmt::Write;
use hw::port::{inb, outb, outw};
use restorer::e820::{Entry, Table};
use restorer::pack::{Checksum, PackHeader, PAGE, X86_RESTORE_MAGIC, ZERO_FLAG};

// The PVH note QEMU looks for, the 32-bit entry that builds identity page tables for the
// first 4 GiB (2 MiB pages), enables PAE, long mode, NX and SSE and calls `restorer_main`,
// and the relocatable last copy loop.
global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .balign 4
    .long 4, 8, 18          /* name size, desc size, XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start

    .section .text.pvh, "ax"
    .code32
    .globl pvh_start
pvh_start:
    cli
    cld
    mov %ebx, %esi
    /* zero .bss (page tables, stack, bitmap) */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    shr $2, %ecx
    xor %eax, %eax
    rep stosl
    /* PML4[0] -> PDPT; PDPT[0..4] -> PD0..3; PDs: 2 MiB pages */
    mov $boot_pdpt, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $3, %eax
    mov $boot_pdpt, %edi
    mov $4, %ecx
1:  mov %eax, (%edi)
    add $4096, %eax
    add $8, %edi
    loop 1b
    mov $boot_pd, %edi
    mov $0x83, %eax
    xor %edx, %edx
    mov $2048, %ecx
2:  mov %eax, (%edi)
    mov %edx, 4(%edi)
    add $0x200000, %eax
    adc $0, %edx
    add $8, %edi
    loop 2b
    /* CR4: PAE | OSFXSR | OSXMMEXCPT */
    mov %cr4, %eax
    or $0x620, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    /* EFER: LME | NXE */
    mov $0xC0000080, %ecx
    rdmsr
    or $0x900, %eax
    wrmsr
    /* CR0: PG | MP, EM off */
    mov %cr0, %eax
    or $0x80000002, %eax
    and $0xFFFFFFFB, %eax
    mov %eax, %cr0
    lgdt boot_gdt_desc
    ljmp $0x10, $long_entry

    .code64
long_entry:
    mov $0x18, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $boot_stack_top, %rsp
    mov %esi, %edi
    call restorer_main
3:  hlt
    jmp 3b

    .section .rodata
    .balign 16
    /* The kernel's selectors: code 0x10, data 0x18, so the image kernel's GDT fits ours. */
boot_gdt:
    .quad 0, 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
boot_gdt_end:
boot_gdt_desc:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .bss
    .balign 4096
boot_pml4: .skip 4096
boot_pdpt: .skip 4096
boot_pd: .skip 4 * 4096
boot_stack: .skip 65536
boot_stack_top:

    /* last_copy(list = rdi, image cr3 = rsi, jump address = rdx): copies the deferred
       pages (a list of pages: count, next, then count (source, destination) pairs) and
       enters the image kernel. Position independent: it runs from a safe page. */
    .section .text
    .globl last_copy, last_copy_end
last_copy:
    mov %rsi, %r9
    mov %rdx, %r10
    mov %rdi, %r11
4:  test %r11, %r11
    jz 7f
    mov (%r11), %r8
    lea 16(%r11), %rax
5:  test %r8, %r8
    jz 6f
    mov (%rax), %rsi
    mov 8(%rax), %rdi
    mov $512, %ecx
    rep movsq
    add $16, %rax
    dec %r8
    jmp 5b
6:  mov 8(%r11), %r11
    jmp 4b
7:  jmp *%r10
last_copy_end:
    "#,
    options(att_syntax)
);

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
    static last_copy: u8;
    static last_copy_end: u8;
}

/// COM1.
struct Serial;

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
    fn init() {
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

    fn byte(&self, b: u8) {
        while inb(COM1 + 5) & 0x20 == 0 {}
        outb(COM1, b);
    }
}

macro_rules! say {
    ($($t:tt)*) => {{ let _ = writeln!(Serial, $($t)*); }};
}

mod fallback;
mod hw;

/// Powers the PC off (q35: ACPI PM1a control at 0x604, sleep type 5 is 0) and halts if
/// that did not work.
fn power_off() -> ! {
    outw(0x604, 0x2000);
    loop {
        // SAFETY: halting with interrupts off stops the CPU; nothing else runs.
        unsafe { asm!("cli; hlt", options(nomem, nostack)) }
    }
}

/// Named by the precompiled `core` (built for unwinding); never called: panics abort.
#[no_mangle]
extern "C" fn rust_eh_personality() {}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    say!("snapboot-restorer: refused: bug: {info}");
    power_off()
}

/// Reads the `u64` at physical address `a` (identity mapped).
fn rd64(a: u64) -> u64 {
    // SAFETY: callers pass addresses inside the start info the firmware handed over,
    // which lies in the identity-mapped first 4 GiB; unaligned reads are allowed.
    unsafe { core::ptr::read_unaligned(a as *const u64) }
}

fn rd32(a: u64) -> u32 {
    // SAFETY: as in `rd64`.
    unsafe { core::ptr::read_unaligned(a as *const u32) }
}

/// Why the image is not restored.
enum Refusal {
    StartInfo(&'static str),
    Pack(restorer::pack::PackError),
    Magic(u64),
    E820 { image: u64, here: u32 },
    RamAbove4G(u64),
    PhysPages { image: u64, here: u64 },
    PackChecksum { stored: u64, computed: u64 },
    Pfn { pfn: u64, entry: u64 },
    DataPages { listed: u64, header: u64 },
    NoSafePage,
}

impl core::fmt::Display for Refusal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refusal::StartInfo(what) => write!(f, "start info: {what}"),
            Refusal::Pack(e) => write!(f, "{e}"),
            Refusal::Magic(m) => write!(f, "arch header magic {m:#x} is not x86_64's"),
            Refusal::E820 { image, here } => write!(
                f,
                "memory map: image's e820 checksum {image:#x}, this machine's {here:#x}"
            ),
            Refusal::RamAbove4G(end) => write!(f, "RAM ends at {end:#x}, above 4 GiB"),
            Refusal::PhysPages { image, here } => write!(
                f,
                "memory size: the image kernel had {image} pages, this machine {here} of RAM"
            ),
            Refusal::PackChecksum { stored, computed } => {
                write!(f, "pack checksum {computed:#x}, header says {stored:#x}")
            }
            Refusal::Pfn { pfn, entry } => {
                write!(
                    f,
                    "PFN {pfn:#x} (entry {entry}) is not RAM or not increasing"
                )
            }
            Refusal::DataPages { listed, header } => {
                write!(f, "{listed} data pages listed, header says {header}")
            }
            Refusal::NoSafePage => write!(f, "no free page left for the restore"),
        }
    }
}

const MAX_PAGES: usize = 1 << 20;
/// Image PFNs (bit set: the image has a page there); 4 GiB of RAM at most.
static mut IN_IMAGE: [u64; MAX_PAGES / 64] = [0; MAX_PAGES / 64];

fn in_image(pfn: u64) -> bool {
    // SAFETY: one CPU, no interrupts: nothing else touches the bitmap.
    unsafe { (*core::ptr::addr_of!(IN_IMAGE))[(pfn / 64) as usize] & (1 << (pfn % 64)) != 0 }
}

fn mark_in_image(pfn: u64) {
    // SAFETY: as in `in_image`.
    unsafe { (*core::ptr::addr_of_mut!(IN_IMAGE))[(pfn / 64) as usize] |= 1 << (pfn % 64) }
}

/// Physical ranges `[start, end)` in use until the last copy: the restorer and the pack.
struct Busy([(u64, u64); 2]);

impl Busy {
    fn holds(&self, pfn: u64) -> bool {
        let a = pfn * PAGE;
        self.0.iter().any(|&(s, e)| a + PAGE > s && a < e)
    }
}

/// Hands out pages the image does not use, outside the busy ranges, above 1 MiB.
struct SafePages<'a> {
    next: u64,
    table: &'a Table,
    busy: &'a Busy,
    used: u64,
}

impl SafePages<'_> {
    fn take(&mut self) -> Result<u64, Refusal> {
        while self.next < MAX_PAGES as u64 {
            let pfn = self.next;
            self.next += 1;
            if self.table.is_ram_page(pfn) && !in_image(pfn) && !self.busy.holds(pfn) {
                self.used += 1;
                let a = pfn * PAGE;
                zero_page(a);
                return Ok(a);
            }
        }
        Err(Refusal::NoSafePage)
    }
}

fn zero_page(a: u64) {
    // SAFETY: `a` is a whole RAM page no live data uses (a safe page or an image page
    // being written), identity mapped.
    unsafe {
        asm!("rep stosq", inout("rdi") a => _, inout("rcx") 512u64 => _, in("rax") 0u64, options(nostack))
    }
}

fn copy_page(from: u64, to: u64) {
    // SAFETY: both are whole identity-mapped RAM pages that do not overlap: `from` in the
    // pack, `to` a page the image owns or a safe page.
    unsafe {
        asm!("rep movsq", inout("rsi") from => _, inout("rdi") to => _, inout("rcx") 512u64 => _, options(nostack))
    }
}

fn put(a: u64, v: u64) {
    // SAFETY: `a` lies in a safe page this program allocated.
    unsafe { core::ptr::write(a as *mut u64, v) }
}

#[no_mangle]
extern "C" fn restorer_main(start_info: u32) -> ! {
    Serial::init();
    say!("snapboot-restorer: started");
    let Err(why) = restore(u64::from(start_info));
    say!("snapboot-restorer: refused: {why}");
    // Nothing the refused restore used is needed any more: all RAM above the restorer's
    // image is free for the cold boot.
    let image_end = core::ptr::addr_of!(__image_end) as u64;
    let Err(e) = fallback::cold_boot(u64::from(start_info), image_end, &mut Serial);
    say!("snapboot-restorer: cold boot failed: {e}");
    power_off()
}

fn restore(si: u64) -> Result<core::convert::Infallible, Refusal> {
    if rd32(si) != 0x336e_c578 {
        return Err(Refusal::StartInfo("bad magic"));
    }
    if rd32(si + 4) < 1 {
        return Err(Refusal::StartInfo("version 0 has no memory map"));
    }
    if rd32(si + 12) < 1 {
        return Err(Refusal::StartInfo("no module (the restore pack)"));
    }
    let modlist = rd64(si + 16);
    let (pack_at, pack_len) = (rd64(modlist), rd64(modlist + 8));
    let (memmap, n) = (rd64(si + 40), u64::from(rd32(si + 48)));
    let table = Table::from_pvh((0..n).map(|i| Entry {
        addr: rd64(memmap + 24 * i),
        size: rd64(memmap + 24 * i + 8),
        kind: rd32(memmap + 24 * i + 16),
    }));
    // SAFETY: QEMU loaded the module there, in RAM below 4 GiB, and nothing writes it
    // before the last data page is read (pages bound for it are deferred).
    let pack = unsafe { core::slice::from_raw_parts(pack_at as *const u8, pack_len as usize) };
    let h = PackHeader::decode(pack).map_err(Refusal::Pack)?;
    if h.restore_magic != X86_RESTORE_MAGIC {
        return Err(Refusal::Magic(h.restore_magic));
    }
    let here = table.checksum();
    if h.e820_checksum != u64::from(here) {
        return Err(Refusal::E820 {
            image: h.e820_checksum,
            here,
        });
    }
    if table.ram_end() > (MAX_PAGES as u64) * PAGE {
        return Err(Refusal::RamAbove4G(table.ram_end()));
    }
    if h.num_physpages > table.ram_pages() {
        return Err(Refusal::PhysPages {
            image: h.num_physpages,
            here: table.ram_pages(),
        });
    }
    let mut sum = Checksum::default();
    sum.update(&pack[PAGE as usize..]);
    if sum.value() != h.checksum {
        return Err(Refusal::PackChecksum {
            stored: h.checksum,
            computed: sum.value(),
        });
    }
    let list = &pack[PAGE as usize..PAGE as usize + 8 * h.entries as usize];
    let pfns = || {
        list.chunks_exact(8).map(|c| {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            u64::from_le_bytes(w)
        })
    };
    let (mut prev, mut data) = (None, 0u64);
    for (entry, raw) in pfns().enumerate() {
        let pfn = raw & !ZERO_FLAG;
        if !table.is_ram_page(pfn) || prev.is_some_and(|p| pfn <= p) {
            return Err(Refusal::Pfn {
                pfn,
                entry: entry as u64,
            });
        }
        prev = Some(pfn);
        data += u64::from(raw & ZERO_FLAG == 0);
        mark_in_image(pfn);
    }
    if data != h.data_pages {
        return Err(Refusal::DataPages {
            listed: data,
            header: h.data_pages,
        });
    }
    // Linker-script symbols; only their addresses are used.
    let (img_start, img_end) = (
        core::ptr::addr_of!(__image_start) as u64,
        core::ptr::addr_of!(__image_end) as u64,
    );
    let busy = Busy([(img_start, img_end), (pack_at, pack_at + pack_len)]);
    let mut safe = SafePages {
        next: 0x100,
        table: &table,
        busy: &busy,
        used: 0,
    };
    say!(
        "snapboot-restorer: image checked: {} pages ({} data), e820 {here:#x}; restoring",
        h.entries,
        h.data_pages
    );

    // Temporary page tables in safe pages: all of the first 4 GiB identity (2 MiB pages)
    // and the image kernel's text around jump_address -> jump_address_phys.
    let pml4 = safe.take()?;
    let pdpt = safe.take()?;
    put(pml4, pdpt | 3);
    for g in 0..4u64 {
        let pd = safe.take()?;
        put(pdpt + 8 * g, pd | 3);
        for i in 0..512u64 {
            put(pd + 8 * i, ((g << 30) | (i << 21)) | 0x83);
        }
    }
    let ja = h.jump_address;
    let (l4, l3, l2) = ((ja >> 39) & 511, (ja >> 30) & 511, (ja >> 21) & 511);
    let hi_pdpt = if l4 == 0 { pdpt } else { safe.take()? };
    if l4 != 0 {
        put(pml4 + 8 * l4, hi_pdpt | 3);
    }
    let hi_pd = safe.take()?;
    put(hi_pdpt + 8 * l3, hi_pd | 3);
    put(hi_pd + 8 * l2, (h.jump_address_phys & !0x1f_ffff) | 0x83);

    // The last copy loop, relocated to a safe page.
    let code = safe.take()?;
    // The symbols delimiting `last_copy`, which is shorter than a page.
    let (lc, lc_end) = (
        core::ptr::addr_of!(last_copy) as u64,
        core::ptr::addr_of!(last_copy_end) as u64,
    );
    // SAFETY: copies the loop's bytes into the fresh safe page `code`.
    unsafe {
        core::ptr::copy_nonoverlapping(lc as *const u8, code as *mut u8, (lc_end - lc) as usize)
    };

    // Every page to its place; the ones landing on the restorer or the pack go to safe
    // pages, listed for the last copy.
    let (mut head, mut cur, mut deferred) = (0u64, 0u64, 0u64);
    let mut src = pack_at + h.data_offset();
    for raw in pfns() {
        let dst = (raw & !ZERO_FLAG) * PAGE;
        let zero = raw & ZERO_FLAG != 0;
        if busy.holds(dst / PAGE) {
            let page = safe.take()?;
            if !zero {
                copy_page(src, page);
            }
            if cur == 0 || rd64(cur) == 255 {
                let next = safe.take()?;
                if cur == 0 {
                    head = next;
                } else {
                    put(cur + 8, next);
                }
                cur = next;
            }
            let k = rd64(cur);
            put(cur + 16 + 16 * k, page);
            put(cur + 24 + 16 * k, dst);
            put(cur, k + 1);
            deferred += 1;
        } else if zero {
            zero_page(dst);
        } else {
            copy_page(src, dst);
        }
        if !zero {
            src += PAGE;
        }
    }
    say!(
        "snapboot-restorer: {deferred} pages deferred, {} safe pages; entering the image at {ja:#x}",
        safe.used
    );
    // SAFETY: the temporary tables map this code, its stack and the loop identity; the
    // loop then overwrites this program's pages and enters the image kernel with its CR3,
    // never returning. Interrupts are off since the PVH entry.
    unsafe {
        asm!(
            "mov cr3, {t}",
            "jmp {c}",
            t = in(reg) pml4,
            c = in(reg) code,
            in("rdi") head,
            in("rsi") h.cr3,
            in("rdx") ja,
            options(noreturn)
        )
    }
}

/// `memcpy`, `memset`, `memmove` and `memcmp` for the code the compiler emits: no libc
/// here.
mod mem {
    #[no_mangle]
    unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract for memcpy (valid, non-overlapping ranges).
        unsafe {
            core::arch::asm!("rep movsb", inout("rdi") d => _, inout("rsi") s => _, inout("rcx") n => _, options(nostack))
        };
        d
    }

    #[no_mangle]
    unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        if (d as usize) <= (s as usize) {
            // SAFETY: a forward copy is right when the destination starts first.
            unsafe { memcpy(d, s, n) }
        } else {
            for i in (0..n).rev() {
                // SAFETY: the caller's contract for memmove: both ranges valid.
                unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
            }
            d
        }
    }

    #[no_mangle]
    unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract for memset (a valid range).
        unsafe {
            core::arch::asm!("rep stosb", inout("rdi") d => _, inout("rcx") n => _, in("al") c as u8, options(nostack))
        };
        d
    }

    #[no_mangle]
    unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        for i in 0..n {
            // SAFETY: the caller's contract for memcmp (valid ranges).
            let (x, y) = unsafe {
                (
                    core::ptr::read_volatile(a.add(i)),
                    core::ptr::read_volatile(b.add(i)),
                )
            };
            if x != y {
                return i32::from(x) - i32::from(y);
            }
        }
        0
    }

    #[no_mangle]
    unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: same contract as memcmp.
        unsafe { memcmp(a, b, n) }
    }
}
