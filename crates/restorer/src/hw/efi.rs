//! The EFI application's side of the firmware: every call into UEFI boot and runtime
//! services, and the CPU state the restorer takes over when it leaves them. The types are
//! `r-efi`'s; what is unsafe about them (raw tables the firmware owns, calls that are valid
//! only until `ExitBootServices`) stays in this file.
//!
//! The entry (`efi_main`, below) moves onto the restorer's own stack (in its image's
//! `.bss`) before any Rust code runs, so nothing the restorer keeps lies in memory the
//! firmware owns: once boot services are gone, all that memory is free RAM and image pages
//! may be placed there. Leaving the firmware ([`Firmware::exit`]) then takes over the CPU:
//! interrupts off, the restorer's GDT (the kernel's selectors) and identity page tables for
//! the first 4 GiB, also in its image.

use alloc::string::String;
use alloc::vec::Vec;
use core::arch::{asm, global_asm};
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use r_efi::efi;
use r_efi::protocols::{block_io, loaded_image};
use restorer::disk::{check_read, Disk, DiskError, DiskMut, Span};
use restorer::efimap::Descriptor;

// The entry: save the firmware's callee-saved registers and stack, switch to the
// restorer's stack, turn interrupts off ([`firmware_call`] says why), call
// `efi_start(image, system_table)` (both still in %rcx and %rdx, the EFI calling
// convention), and return its status on the firmware's stack with interrupts on again. `efi_bail`
// returns from `efi_main` with the status in %rcx from anywhere (a panic before the
// restorer left boot services).
#[cfg(target_arch = "x86_64")]
global_asm!(
    r#"
    .section .text
    .globl efi_main
efi_main:
    push %rbx
    push %rbp
    push %rdi
    push %rsi
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, efi_firmware_rsp(%rip)
    lea efi_stack_top(%rip), %rsp
    sub $32, %rsp
    cli
    call efi_start
efi_return:
    mov efi_firmware_rsp(%rip), %rsp
    sti
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rsi
    pop %rdi
    pop %rbp
    pop %rbx
    ret

    .globl efi_bail
efi_bail:
    mov %rcx, %rax
    jmp efi_return

    .section .rodata
    .balign 16
    /* The kernel's selectors: code 0x10, data 0x18, so the image kernel's GDT fits ours. */
efi_gdt:
    .quad 0, 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
efi_gdt_end:
    .globl efi_gdt_desc
efi_gdt_desc:
    .word efi_gdt_end - efi_gdt - 1
    .quad efi_gdt

    .section .bss
    .balign 16
efi_firmware_rsp: .skip 8
    .balign 4096
efi_stack: .skip 1048576
efi_stack_top:
"#,
    options(att_syntax)
);

// The arm64 entry: U-Boot loads the program anywhere (its PE file has no base
// relocations), so the entry first applies the ELF's own R_AARCH64_RELATIVE relocations
// for where it runs (the program is linked at 0 as a static PIE; `__rela_start` to
// `__rela_end`, crates/restorer/link-efi-arm64.ld), then saves the firmware's callee-saved
// registers and stack, moves to the restorer's stack, masks interrupts and calls
// `efi_start(image, system_table)` (x0, x1). `efi_bail` returns from `efi_main` with the
// status in x0 from anywhere.
#[cfg(target_arch = "aarch64")]
global_asm!(
    r#"
    .section .text
    .globl efi_main
efi_main:
    stp x29, x30, [sp, #-96]!
    stp x19, x20, [sp, #16]
    stp x21, x22, [sp, #32]
    stp x23, x24, [sp, #48]
    stp x25, x26, [sp, #64]
    stp x27, x28, [sp, #80]
    mov x19, x0
    mov x20, x1
    adrp x9, __image_start
    add x9, x9, :lo12:__image_start
    adrp x10, __rela_start
    add x10, x10, :lo12:__rela_start
    adrp x11, __rela_end
    add x11, x11, :lo12:__rela_end
    adrp x15, efi_relocated
    add x15, x15, :lo12:efi_relocated
    ldr x16, [x15]
    cbnz x16, 3f
1:  cmp x10, x11
    b.hs 2f
    ldp x12, x13, [x10]
    ldr x14, [x10, #16]
    add x10, x10, #24
    cmp x13, #1027
    b.ne 1b
    add x14, x14, x9
    str x14, [x12, x9]
    b 1b
2:  mov x16, #1
    str x16, [x15]
3:  adrp x9, efi_firmware_sp
    add x9, x9, :lo12:efi_firmware_sp
    mov x10, sp
    str x10, [x9]
    adrp x9, efi_stack_top
    add x9, x9, :lo12:efi_stack_top
    mov sp, x9
    msr daifset, #0xf
    mov x0, x19
    mov x1, x20
    bl efi_start
efi_return:
    adrp x9, efi_firmware_sp
    add x9, x9, :lo12:efi_firmware_sp
    ldr x10, [x9]
    mov sp, x10
    ldp x19, x20, [sp, #16]
    ldp x21, x22, [sp, #32]
    ldp x23, x24, [sp, #48]
    ldp x25, x26, [sp, #64]
    ldp x27, x28, [sp, #80]
    ldp x29, x30, [sp], #96
    ret

    .globl efi_bail
efi_bail:
    b efi_return

    .section .data
    .balign 8
efi_relocated: .quad 0

    .section .bss
    .balign 16
efi_firmware_sp: .skip 8
    .balign 4096
efi_stack: .skip 1048576
efi_stack_top:
"#
);

extern "efiapi" {
    fn efi_bail(status: usize) -> !;
}

#[cfg(target_arch = "x86_64")]
extern "C" {
    static efi_gdt_desc: u8;
}

/// Why a firmware call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: EFI status {status:#x}")]
pub struct EfiError {
    /// The service.
    pub call: &'static str,
    /// Its status (the error bit set).
    pub status: usize,
}

fn check(call: &'static str, s: efi::Status) -> Result<(), EfiError> {
    if s.is_error() {
        Err(EfiError {
            call,
            status: s.as_usize(),
        })
    } else {
        Ok(())
    }
}

/// Runs `call`, a call into boot services, with interrupts on, and turns them off again
/// when it returns.
///
/// The restorer is built for the x86_64 System V ABI, whose functions that call nothing
/// may keep data in the 128 bytes below the stack pointer (the red zone); the precompiled
/// `core` does too. The firmware's timer interrupt, taken on the restorer's stack while
/// boot services run, writes exactly there: the EFI soak lost a catalog checksum that way
/// (`checksum mismatch in chunk 441` on a clean store, twice read, 1 restore in 15). So the
/// restorer's own code runs with interrupts off (the entry turns them off) and the firmware
/// gets them only inside its calls, whose frames (calls in them) keep nothing below the
/// stack pointer. Once boot services are gone they stay off.
#[cfg(target_arch = "x86_64")]
fn firmware_call<R>(call: impl FnOnce() -> R) -> R {
    if !boot_services_running() {
        return call();
    }
    // SAFETY: setting the interrupt flag while boot services run, as the firmware expects
    // at TPL_APPLICATION; this frame calls out, so nothing live lies below the stack.
    unsafe { asm!("sti", options(nomem, nostack)) };
    let r = call();
    // SAFETY: clearing the interrupt flag: the restorer's code runs without interrupts.
    unsafe { asm!("cli", options(nomem, nostack)) };
    r
}

/// Runs `call`, a call into boot services. On arm64 there is no red zone (AAPCS64), and
/// U-Boot's EFI services poll instead of taking interrupts: they stay masked throughout.
#[cfg(target_arch = "aarch64")]
fn firmware_call<R>(call: impl FnOnce() -> R) -> R {
    call()
}

/// Whether boot services still run (cleared by [`Firmware::exit`]): the Block I/O disks
/// refuse every request once they are gone.
static BOOT_SERVICES: AtomicBool = AtomicBool::new(false);
/// The runtime services table, for a reset from anywhere (0: none).
static RUNTIME: AtomicUsize = AtomicUsize::new(0);
/// The system table, for the console while boot services run (0: none).
static SYSTEM: AtomicUsize = AtomicUsize::new(0);

/// Writes `b` through the firmware's console (`ConOut`) while boot services run: the arm64
/// program's console until the device tree names its UART.
#[cfg(target_arch = "aarch64")]
pub fn con_out(b: u8) {
    let st = SYSTEM.load(Ordering::Acquire) as *mut efi::SystemTable;
    if st.is_null() || !boot_services_running() {
        return;
    }
    let mut text = [u16::from(b), 0];
    // SAFETY: the firmware's text output protocol while boot services run, given a
    // NUL-terminated UCS-2 string.
    unsafe {
        let out = (*st).con_out;
        if !out.is_null() {
            ((*out).output_string)(out, text.as_mut_ptr());
        }
    }
}

/// Whether boot services still run.
pub fn boot_services_running() -> bool {
    BOOT_SERVICES.load(Ordering::Acquire)
}

/// Returns from `efi_main` to the loader with `status` (a refusal before boot services were
/// left: the loader boots its next entry).
pub fn return_to_loader(status: efi::Status) -> ! {
    // SAFETY: boot services run (the caller checked), so the loader's stack and registers
    // that `efi_main` saved are intact; `efi_bail` restores them and returns there.
    unsafe { efi_bail(status.as_usize()) }
}

/// Resets the PC through the firmware's runtime services (valid in physical mode, before
/// the virtual address map is set), or through the reset control register (0xCF9) when
/// there are none; halts if neither worked.
pub fn reset() -> ! {
    let rt = RUNTIME.load(Ordering::Acquire) as *mut efi::RuntimeServices;
    if !rt.is_null() {
        // SAFETY: the firmware's runtime services table, called in physical mode (the
        // restorer calls SetVirtualAddressMap last, right before entering the image).
        unsafe {
            ((*rt).reset_system)(
                efi::RESET_COLD,
                efi::Status::ABORTED,
                0,
                core::ptr::null_mut(),
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    super::port::outb(0xcf9, 0x06);
    loop {
        // SAFETY: halting with interrupts off stops the CPU; nothing else runs.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            asm!("cli; hlt", options(nomem, nostack))
        }
        // SAFETY: waiting for an interrupt that is masked stops the CPU; nothing else runs.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            asm!("msr daifset, #0xf", "wfi", options(nomem, nostack))
        }
    }
}

/// The firmware's clock (`GetTime`, a runtime service, called in physical mode), as
/// seconds since the epoch; `None` without one or once the virtual map is set.
#[cfg(target_arch = "aarch64")]
pub fn now() -> Option<u64> {
    let rt = RUNTIME.load(Ordering::Acquire) as *mut efi::RuntimeServices;
    if rt.is_null() {
        return None;
    }
    // SAFETY: `Time` is plain numbers, valid all zero; GetTime is called through the
    // firmware's runtime services table in physical mode and writes only `t`.
    let (s, t) = unsafe {
        let mut t: efi::Time = core::mem::zeroed();
        let s = firmware_call(|| ((*rt).get_time)(&mut t, core::ptr::null_mut()));
        (s, t)
    };
    if s.is_error() || !(2000..2100).contains(&t.year) {
        return None;
    }
    restorer::rtc::Registers {
        fields: [
            t.second,
            t.minute,
            t.hour,
            t.day,
            t.month,
            (t.year - 2000) as u8,
        ],
        status_b: restorer::rtc::BINARY_24H,
    }
    .unix()
}

/// The firmware while boot services run.
pub struct Firmware {
    image: efi::Handle,
    st: *mut efi::SystemTable,
    bs: *mut efi::BootServices,
}

/// The UEFI memory map and the key `ExitBootServices` needs.
pub struct MemoryMap {
    /// The descriptors.
    pub descriptors: Vec<Descriptor>,
    /// `GetMemoryMap`'s map key.
    pub key: usize,
    /// Bytes per descriptor as the firmware lays them out.
    pub descriptor_size: usize,
    /// The descriptors' version.
    pub version: u32,
}

impl Firmware {
    /// The firmware as `efi_main` was given it.
    ///
    /// # Safety
    /// `image` and `st` are what the firmware passed to the entry, and boot services have
    /// not been left.
    pub unsafe fn new(image: efi::Handle, st: *mut efi::SystemTable) -> Self {
        // SAFETY: the caller's contract: the system table is the firmware's.
        let (bs, rt) = unsafe { ((*st).boot_services, (*st).runtime_services) };
        RUNTIME.store(rt as usize, Ordering::Release);
        SYSTEM.store(st as usize, Ordering::Release);
        BOOT_SERVICES.store(true, Ordering::Release);
        Firmware { image, st, bs }
    }

    fn bs(&self) -> &efi::BootServices {
        // SAFETY: boot services run while a `Firmware` lives (`exit` consumes it).
        unsafe { &*self.bs }
    }

    fn protocol<T>(&self, handle: efi::Handle, guid: &efi::Guid) -> Result<*mut T, EfiError> {
        let mut p: *mut c_void = core::ptr::null_mut();
        let mut g = *guid;
        // The firmware: HandleProtocol with a valid handle and GUID, writing one pointer.
        let s = firmware_call(|| (self.bs().handle_protocol)(handle, &mut g, &mut p));
        check("HandleProtocol", s)?;
        Ok(p.cast())
    }

    /// The restorer's loaded image: where it lies and the options it was started with
    /// (GRUB's `chainloader` passes the words after the file name; a boot entry its
    /// optional data), as text.
    pub fn loaded_image(&self) -> Result<LoadedImage, EfiError> {
        let li: *mut loaded_image::Protocol =
            self.protocol(self.image, &loaded_image::PROTOCOL_GUID)?;
        // SAFETY: the firmware's loaded image protocol of this image; its options are
        // `load_options_size` bytes of UCS-2.
        let (base, size, options) = unsafe {
            let li = &*li;
            let n = li.load_options_size as usize / 2;
            let words: &[u16] = if li.load_options.is_null() || n == 0 {
                &[]
            } else {
                core::slice::from_raw_parts(li.load_options as *const u16, n)
            };
            (li.image_base as u64, li.image_size, words.to_vec())
        };
        let text: String = char::decode_utf16(options.iter().copied().take_while(|&c| c != 0))
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect();
        Ok(LoadedImage {
            base,
            size,
            options: text,
        })
    }

    /// The device tree the firmware installed in its configuration table (U-Boot's
    /// `bootefi` passes the board's), as bytes; `None` without one.
    #[cfg(target_arch = "aarch64")]
    pub fn device_tree(&self) -> Option<&'static [u8]> {
        // SAFETY: the system table's configuration table holds `number_of_table_entries`
        // entries while boot services run; a device tree entry points at a blob whose
        // header says its size, and the firmware keeps it for the life of the program.
        unsafe {
            let st = &*self.st;
            let tables =
                core::slice::from_raw_parts(st.configuration_table, st.number_of_table_entries);
            let t = tables
                .iter()
                .find(|t| t.vendor_guid == efi::DTB_TABLE_GUID)?;
            let p = t.vendor_table as *const u8;
            let head = core::slice::from_raw_parts(p, 8);
            let size = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
            Some(core::slice::from_raw_parts(p, size.clamp(8, 16 << 20)))
        }
    }

    /// `pages` pages of loader data below 4 GiB, zeroed by the caller if needed.
    pub fn allocate_below_4g(&self, pages: usize) -> Result<u64, EfiError> {
        let mut at: efi::PhysicalAddress = 0xffff_ffff;
        // The firmware: AllocatePages writing the address of the pages it hands out.
        let s = firmware_call(|| {
            (self.bs().allocate_pages)(efi::ALLOCATE_MAX_ADDRESS, efi::LOADER_DATA, pages, &mut at)
        });
        check("AllocatePages", s)?;
        Ok(at)
    }

    /// Gives back pages of [`Firmware::allocate_below_4g`].
    pub fn free(&self, at: u64, pages: usize) {
        // The firmware: pages this program allocated and no longer uses.
        let _ = firmware_call(|| (self.bs().free_pages)(at, pages));
    }

    /// The memory map now, read into a buffer of the restorer's heap (which changes
    /// nothing in the map: the heap's pages were allocated before).
    pub fn memory_map(&self) -> Result<MemoryMap, EfiError> {
        let mut size = 0usize;
        let (mut key, mut dsize, mut version) = (0usize, 0usize, 0u32);
        // The firmware: a first call with no buffer asks for the size.
        let s = firmware_call(|| {
            (self.bs().get_memory_map)(
                &mut size,
                core::ptr::null_mut(),
                &mut key,
                &mut dsize,
                &mut version,
            )
        });
        if s != efi::Status::BUFFER_TOO_SMALL {
            check("GetMemoryMap", s)?;
        }
        let mut buf: Vec<u64> = alloc::vec![0; (size + 16 * 64) / 8 + 1];
        let mut len = buf.len() * 8;
        // The firmware: GetMemoryMap into `buf`, `len` bytes, 8-aligned.
        let s = firmware_call(|| {
            (self.bs().get_memory_map)(
                &mut len,
                buf.as_mut_ptr().cast(),
                &mut key,
                &mut dsize,
                &mut version,
            )
        });
        check("GetMemoryMap", s)?;
        let stride = dsize.max(core::mem::size_of::<efi::MemoryDescriptor>());
        let bytes = buf.as_ptr().cast::<u8>();
        let descriptors = (0..len / stride)
            .map(|i| {
                // SAFETY: descriptor `i` of the map the firmware wrote, `stride` apart.
                let d = unsafe {
                    core::ptr::read_unaligned(bytes.add(i * stride).cast::<efi::MemoryDescriptor>())
                };
                Descriptor {
                    kind: d.r#type,
                    phys: d.physical_start,
                    pages: d.number_of_pages,
                    attribute: d.attribute,
                }
            })
            .collect();
        Ok(MemoryMap {
            descriptors,
            key,
            descriptor_size: stride,
            version,
        })
    }

    /// The firmware's whole disks (no partitions, media present), in its handle order,
    /// which on the board is the kernel's `vda`, `vdb`, … order (one controller per disk,
    /// enumerated in PCI order).
    pub fn disks(&self) -> Result<Vec<BlockDisk>, EfiError> {
        let mut n = 0usize;
        let mut handles: *mut efi::Handle = core::ptr::null_mut();
        let mut guid = block_io::PROTOCOL_GUID;
        // The firmware: LocateHandleBuffer by protocol, writing a pool buffer of `n` handles.
        let s = firmware_call(|| {
            (self.bs().locate_handle_buffer)(
                efi::BY_PROTOCOL,
                &mut guid,
                core::ptr::null_mut(),
                &mut n,
                &mut handles,
            )
        });
        check("LocateHandleBuffer(Block I/O)", s)?;
        let mut out = Vec::new();
        for i in 0..n {
            // SAFETY: `handles` holds `n` handles.
            let h = unsafe { *handles.add(i) };
            let Ok(p) = self.protocol::<block_io::Protocol>(h, &block_io::PROTOCOL_GUID) else {
                continue;
            };
            // SAFETY: the protocol the firmware returned and its media record.
            let m = unsafe { *(*p).media };
            if m.logical_partition || !m.media_present {
                continue;
            }
            let bytes = (m.last_block + 1) * u64::from(m.block_size);
            out.push(BlockDisk {
                io: p,
                media: m.media_id,
                block: m.block_size,
                align: m.io_align.max(1),
                read_only: m.read_only,
                bytes,
                span: Span {
                    offset: 0,
                    size: bytes,
                },
            });
        }
        // The firmware: the pool buffer LocateHandleBuffer allocated.
        let _ = firmware_call(|| (self.bs().free_pool)(handles.cast()));
        Ok(out)
    }

    /// Leaves boot services with the map whose key is `key` (read again and retried once
    /// if the map changed since), then takes over the CPU: interrupts off, the restorer's
    /// GDT and selectors, its identity page tables. Returns the runtime services, still in
    /// physical mode.
    pub fn exit(self, key: usize) -> Result<Runtime, (Firmware, EfiError)> {
        // The firmware: ExitBootServices with this image's handle and the latest map key.
        let mut s = firmware_call(|| (self.bs().exit_boot_services)(self.image, key));
        if s == efi::Status::INVALID_PARAMETER {
            // The map changed (an event allocated memory): read it again, and try once more.
            match self.memory_map() {
                // The firmware: as above, with the new key.
                Ok(m) => s = firmware_call(|| (self.bs().exit_boot_services)(self.image, m.key)),
                Err(e) => return Err((self, e)),
            }
        }
        if let Err(e) = check("ExitBootServices", s) {
            return Err((self, e));
        }
        BOOT_SERVICES.store(false, Ordering::Release);
        take_over_cpu();
        // SAFETY: the system table stays valid (runtime services data) after the exit.
        let rt = unsafe { (*self.st).runtime_services };
        Ok(Runtime { rt })
    }
}

/// The restorer's loaded image.
pub struct LoadedImage {
    /// Where the firmware put it.
    pub base: u64,
    /// Its bytes.
    pub size: u64,
    /// Its load options as text.
    pub options: String,
}

/// Identity page tables for the first 4 GiB (2 MiB pages): PML4, PDPT, four PDs.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(4096))]
struct Tables([[u64; 512]; 6]);

#[cfg(target_arch = "x86_64")]
static mut TABLES: Tables = Tables([[0; 512]; 6]);

/// On arm64 the restorer keeps U-Boot's identity map (the MMU stays on while pages are
/// placed; `crate::cpu` keeps the tables' pages busy) and only masks interrupts.
#[cfg(target_arch = "aarch64")]
fn take_over_cpu() {
    // SAFETY: masking every exception class; nothing of the firmware runs any more.
    unsafe { asm!("msr daifset, #0xf", options(nomem, nostack)) };
}

/// Interrupts off, the restorer's GDT with the kernel's selectors (code 0x10, data 0x18),
/// and its identity page tables: from here on nothing of the firmware's is used but its
/// runtime services.
#[cfg(target_arch = "x86_64")]
fn take_over_cpu() {
    // SAFETY: the tables are this program's, in its image's .bss, written before they are
    // loaded; one CPU, interrupts off from the first instruction.
    unsafe {
        asm!("cli", options(nomem, nostack));
        let t = &mut *core::ptr::addr_of_mut!(TABLES);
        let base = t.0.as_ptr() as u64;
        t.0[0][0] = (base + 4096) | 3;
        for g in 0..4u64 {
            t.0[1][g as usize] = (base + 4096 * (2 + g)) | 3;
            for i in 0..512u64 {
                t.0[2 + g as usize][i as usize] = ((g << 30) | (i << 21)) | 0x83;
            }
        }
        asm!(
            "lgdt [{gdt}]",
            "push 0x10",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov {tmp:e}, 0x18",
            "mov ds, {tmp:e}",
            "mov es, {tmp:e}",
            "mov ss, {tmp:e}",
            "xor {tmp:e}, {tmp:e}",
            "mov fs, {tmp:e}",
            "mov gs, {tmp:e}",
            "mov cr3, {pml4}",
            gdt = in(reg) core::ptr::addr_of!(efi_gdt_desc),
            pml4 = in(reg) base,
            tmp = out(reg) _,
        );
    }
}

/// The runtime services once boot services are gone, in physical mode.
pub struct Runtime {
    rt: *mut efi::RuntimeServices,
}

impl Runtime {
    /// Switches the runtime services to virtual mode with `map` (each runtime region and
    /// the virtual address the image kernel gave it), laid out as the firmware's own map
    /// (`descriptor_size`, `version`). Called once, last before entering the image.
    pub fn set_virtual_map(
        &self,
        map: &[(Descriptor, u64)],
        descriptor_size: usize,
        version: u32,
    ) -> Result<(), EfiError> {
        let stride = descriptor_size.max(core::mem::size_of::<efi::MemoryDescriptor>());
        let mut buf: Vec<u64> = alloc::vec![0; (map.len() * stride).div_ceil(8)];
        let bytes = buf.as_mut_ptr().cast::<u8>();
        for (i, (d, virt)) in map.iter().enumerate() {
            let md = efi::MemoryDescriptor {
                r#type: d.kind,
                physical_start: d.phys,
                virtual_start: *virt,
                number_of_pages: d.pages,
                attribute: d.attribute,
            };
            // SAFETY: descriptor `i` of `buf`, which holds `map.len()` of `stride` bytes.
            unsafe { core::ptr::write_unaligned(bytes.add(i * stride).cast(), md) };
        }
        // SAFETY: SetVirtualAddressMap in physical mode, after ExitBootServices, with a map
        // of this boot's runtime regions; the identity tables map the firmware's regions.
        let s = unsafe {
            ((*self.rt).set_virtual_address_map)(
                map.len() * stride,
                stride,
                version,
                buf.as_mut_ptr().cast(),
            )
        };
        check("SetVirtualAddressMap", s)?;
        // From here on the runtime services may only be called through the image kernel's
        // mappings: no reset through them.
        RUNTIME.store(0, Ordering::Release);
        Ok(())
    }
}

/// A whole disk through the firmware's Block I/O protocol (512-byte blocks), usable while
/// boot services run; a clone reads the same disk.
#[derive(Clone)]
pub struct BlockDisk {
    io: *mut block_io::Protocol,
    media: u32,
    block: u32,
    align: u32,
    read_only: bool,
    bytes: u64,
    span: Span,
}

impl BlockDisk {
    /// From now on reads and writes only `span` of the whole disk (a store in a partition).
    pub fn narrow(&mut self, span: Span) {
        self.span = span;
    }

    fn request(&mut self, offset: u64, len: usize, write: bool) -> Result<u64, DiskError> {
        let at = self.span.place(offset, len)?;
        check_read(at, len, self.bytes)?;
        if !boot_services_running() {
            return Err(DiskError::Closed);
        }
        if self.block != 512 {
            return Err(DiskError::BlockSize(self.block));
        }
        if write && self.read_only {
            return Err(DiskError::ReadOnly);
        }
        Ok(at)
    }

    /// `f(buffer)` on `buf` when it meets the disk's alignment, else on an aligned copy.
    fn aligned(
        &self,
        buf: &mut [u8],
        copy_in: bool,
        f: impl FnOnce(*mut c_void) -> efi::Status,
    ) -> efi::Status {
        let align = self.align as usize;
        if (buf.as_ptr() as usize).is_multiple_of(align) {
            return f(buf.as_mut_ptr().cast());
        }
        let mut bounce = alloc::vec![0u8; buf.len() + align];
        let off = bounce.as_ptr().align_offset(align);
        let b = &mut bounce[off..off + buf.len()];
        if copy_in {
            b.copy_from_slice(buf);
        }
        let s = f(b.as_mut_ptr().cast());
        if !copy_in {
            buf.copy_from_slice(b);
        }
        s
    }
}

fn device_error(at: u64, s: efi::Status) -> DiskError {
    DiskError::Device {
        sector: at / 512,
        status: (s.as_usize() & 0xff) as u8,
    }
}

impl Disk for BlockDisk {
    fn size(&self) -> u64 {
        self.span.size
    }

    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let at = self.request(offset, buf.len(), false)?;
        let (io, media, len) = (self.io, self.media, buf.len());
        let s = self.aligned(buf, false, |p| {
            // SAFETY: ReadBlocks of whole 512-byte blocks inside the disk into an aligned
            // buffer of `len` bytes, boot services running (checked in `request`).
            firmware_call(|| unsafe { ((*io).read_blocks)(io, media, at / 512, len, p) })
        });
        if s.is_error() {
            return Err(device_error(at, s));
        }
        Ok(())
    }
}

impl DiskMut for BlockDisk {
    fn write(&mut self, offset: u64, buf: &[u8]) -> Result<(), DiskError> {
        let at = self.request(offset, buf.len(), true)?;
        let (io, media, len) = (self.io, self.media, buf.len());
        let mut copy = buf.to_vec();
        let s = self.aligned(&mut copy, true, |p| {
            // SAFETY: WriteBlocks of whole blocks inside the disk from an aligned buffer of
            // `len` bytes, boot services running.
            firmware_call(|| unsafe { ((*io).write_blocks)(io, media, at / 512, len, p) })
        });
        if s.is_error() {
            return Err(device_error(at, s));
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DiskError> {
        if !boot_services_running() {
            return Err(DiskError::Closed);
        }
        // SAFETY: FlushBlocks on the firmware's protocol, boot services running.
        let s = firmware_call(|| unsafe { ((*self.io).flush_blocks)(self.io) });
        if s.is_error() {
            return Err(device_error(0, s));
        }
        Ok(())
    }
}
