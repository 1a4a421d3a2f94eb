//! The x86_64 side of [`crate::cpu`].

use super::entry::NotEntered;
use crate::phys::{put, Identity};
use core::arch::{asm, global_asm};
use restorer::image::Entry;
use restorer::safepages::{Busy, LastCopy, SafePages};
use restorer::telemetry::Rate;

// The relocatable last copy loop (asm/last_copy.s, placed by [`prepare`]).
global_asm!(include_str!("../asm/last_copy.s"), options(att_syntax));

extern "C" {
    // The last copy loop's bounds (asm/last_copy.s).
    static last_copy: u8;
    static last_copy_end: u8;
}

/// Nothing the platform adds on x86_64: the image's header says where to go.
pub(crate) struct Target;

/// The way in, in safe pages: the temporary page tables and the relocated loop.
pub(crate) struct Jump {
    pml4: u64,
    code: u64,
    cr3: u64,
    jump_address: u64,
}

/// The CPU's time-stamp counter.
pub(crate) fn cycles() -> u64 {
    // SAFETY: reading the time-stamp counter has no side effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// How fast [`cycles`] counts: what the CPU says (CPUID leaf 0x15, the TSC's ratio to its
/// crystal with the crystal's rate; else leaf 0x16, the base frequency), else what a
/// hypervisor says (leaf 0x40000010, the TSC's kHz), else measured once against the PIT
/// ([`crate::hw::pit`], 10 ms); `None` when none of them gives a plausible rate. Each leaf
/// is read only when the CPU lists it: above the highest, Intel CPUs answer with the
/// highest basic leaf's values. Under QEMU's TCG the TSC counts at the host's rate, and
/// none of these leaves is offered: the PIT, which QEMU keeps on the host's clock, says it.
/// Learnt once, then kept (the PIT's 10 ms are spent once, whoever asks first: starting the
/// other CPUs, waiting for them, the throughput line).
pub(crate) fn cycle_rate() -> Option<Rate> {
    use core::sync::atomic::Ordering;
    use restorer::telemetry::RateSource;
    const SOURCES: [RateSource; 4] = [
        RateSource::CpuidCrystal,
        RateSource::CpuidBase,
        RateSource::Hypervisor,
        RateSource::Pit,
    ];
    match RATE.load(Ordering::Acquire) {
        NOT_LEARNT => {}
        NO_RATE => return None,
        v => {
            return Some(Rate {
                hz: v >> 2,
                source: SOURCES[(v & 3) as usize],
            })
        }
    }
    let rate = learn_rate();
    let v = rate.map_or(NO_RATE, |r| {
        let source = SOURCES.iter().position(|&s| s == r.source).unwrap_or(3);
        (r.hz << 2) | source as u64
    });
    RATE.store(v, Ordering::Release);
    rate
}

/// [`cycle_rate`] once learnt: the rate's Hz above its source's index in two bits, or
/// [`NOT_LEARNT`], or [`NO_RATE`] when there is none.
static RATE: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(NOT_LEARNT);
const NOT_LEARNT: u64 = 0;
const NO_RATE: u64 = u64::MAX;

/// [`cycle_rate`], asked of the CPU, the hypervisor or the PIT.
fn learn_rate() -> Option<Rate> {
    use core::arch::x86_64::{__cpuid, CpuidResult};
    // CPUID has no side effect, and every x86_64 CPU has it (the intrinsic is safe).
    let cpuid = |leaf: u32| -> CpuidResult { __cpuid(leaf) };
    let basic = cpuid(0).eax;
    let from_cpu = || {
        let crystal = (basic >= 0x15).then(|| cpuid(0x15));
        let from_crystal = crystal.and_then(|r| Rate::from_cpuid_15(r.eax, r.ebx, r.ecx));
        from_crystal.or_else(|| (basic >= 0x16).then(|| Rate::from_cpuid_16(cpuid(0x16).eax))?)
    };
    let from_hypervisor = || {
        // CPUID.1:ECX bit 31: a hypervisor is there, and 0x40000000 says its highest leaf.
        let hypervisor = cpuid(1).ecx & (1 << 31) != 0;
        let highest = if hypervisor {
            cpuid(0x4000_0000).eax
        } else {
            0
        };
        (0x4000_0010..=0x4000_00ff)
            .contains(&highest)
            .then(|| Rate::from_hypervisor(cpuid(0x4000_0010).eax))?
    };
    from_cpu().or_else(from_hypervisor).or_else(|| {
        Rate::from_pit(
            crate::hw::pit::time(cycles)?,
            u64::from(crate::hw::pit::TICKS),
        )
    })
}

/// Pages written for the image need nothing more on x86 (coherent caches).
pub(crate) fn written(_addr: u64, _len: u64) {}

/// Temporary page tables in safe pages (all of the first 4 GiB identity in 2 MiB pages,
/// and the image kernel's text around `jump_address` -> `jump_address_phys`) and the last
/// copy loop relocated to a safe page.
pub(crate) fn prepare(
    entry: &Entry,
    _target: Target,
    safe: &mut SafePages,
    mem: &mut Identity,
) -> Result<Jump, NotEntered> {
    let Entry::X86_64 {
        jump_address: ja,
        jump_address_phys,
        cr3,
    } = *entry
    else {
        return Err(NotEntered::Entry(
            "the image is not an x86_64 kernel's".into(),
        ));
    };
    let pml4 = safe.take(mem)?;
    let pdpt = safe.take(mem)?;
    put(pml4, pdpt | 3);
    for g in 0..4u64 {
        let pd = safe.take(mem)?;
        put(pdpt + 8 * g, pd | 3);
        for i in 0..512u64 {
            put(pd + 8 * i, ((g << 30) | (i << 21)) | 0x83);
        }
    }
    let (l4, l3, l2) = ((ja >> 39) & 511, (ja >> 30) & 511, (ja >> 21) & 511);
    let hi_pdpt = if l4 == 0 { pdpt } else { safe.take(mem)? };
    if l4 != 0 {
        put(pml4 + 8 * l4, hi_pdpt | 3);
    }
    let hi_pd = safe.take(mem)?;
    put(hi_pdpt + 8 * l3, hi_pd | 3);
    put(hi_pd + 8 * l2, (jump_address_phys & !0x1f_ffff) | 0x83);
    let code = safe.take(mem)?;
    // The symbols delimiting `last_copy`, which is shorter than a page.
    let (lc, lc_end) = (
        core::ptr::addr_of!(last_copy) as u64,
        core::ptr::addr_of!(last_copy_end) as u64,
    );
    // SAFETY: copies the loop's bytes into the fresh safe page `code`.
    unsafe {
        core::ptr::copy_nonoverlapping(lc as *const u8, code as *mut u8, (lc_end - lc) as usize)
    };
    Ok(Jump {
        pml4,
        code,
        cr3,
        jump_address: ja,
    })
}

/// Switches to the temporary tables and runs the last copy loop, which overwrites this
/// program's pages and enters the image kernel with its CR3.
///
/// # Safety
/// Every page of the image is in place or listed in `last`; nothing of this program is
/// used after the call.
pub(crate) unsafe fn enter(jump: Jump, last: &LastCopy, _busy: &Busy) -> ! {
    // SAFETY: the temporary tables map this code, its stack and the loop identity; the
    // loop then overwrites this program's pages and enters the image kernel with its CR3,
    // never returning. Interrupts are off since the entry.
    unsafe {
        asm!(
            "mov cr3, {t}",
            "jmp {c}",
            t = in(reg) jump.pml4,
            c = in(reg) jump.code,
            in("rdi") last.head,
            in("rsi") jump.cr3,
            in("rdx") jump.jump_address,
            options(noreturn)
        )
    }
}

/// The image kernel's entry, for the console.
pub(crate) fn describe(jump: &Jump) -> u64 {
    jump.jump_address
}

/// `memcpy`, `memset`, `memmove` and `memcmp` for the code the compiler emits: no libc
/// here.
pub(crate) mod mem {
    /// Copies 32 bytes per step through four general registers, then the rest with `rep
    /// movsb`. Plain (uncompressed) chunks are copied with it whole, and the chunks that go
    /// through the buffer page by page. Under QEMU's TCG `rep movsb` costs an emulated step
    /// per byte, and SSE moves are slower still: restoring `app` on the board, page placing
    /// took 1.9-2.7 s with this loop (and the zeroing below), 2.2-3.4 s with `rep movsb`,
    /// 3.2-3.5 s with 16-byte SSE moves (three interleaved boots each, 2026-11-27).
    #[no_mangle]
    pub(crate) unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract for memcpy (valid, non-overlapping ranges); the
        // loop and the tail touch exactly `n` bytes of each.
        unsafe {
            core::arch::asm!(
                "2:",
                "cmp rcx, 32",
                "jb 3f",
                "mov rax, [rsi]",
                "mov rdx, [rsi + 8]",
                "mov r8, [rsi + 16]",
                "mov r9, [rsi + 24]",
                "mov [rdi], rax",
                "mov [rdi + 8], rdx",
                "mov [rdi + 16], r8",
                "mov [rdi + 24], r9",
                "add rsi, 32",
                "add rdi, 32",
                "sub rcx, 32",
                "jmp 2b",
                "3:",
                "rep movsb",
                inout("rdi") d => _,
                inout("rsi") s => _,
                inout("rcx") n => _,
                out("rax") _,
                out("rdx") _,
                out("r8") _,
                out("r9") _,
                options(nostack)
            )
        };
        d
    }

    /// Eight bytes a store at a time, then the rest byte by byte: under TCG every iteration
    /// of a `rep` costs alike, and `rep stosb` zeroed a fresh 8 MiB buffer in ~0.2 s.
    #[no_mangle]
    unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
        let pattern = u64::from(c as u8) * 0x0101_0101_0101_0101;
        // SAFETY: the caller's contract for memset (a valid range): `n / 8` words then
        // `n % 8` bytes cover exactly `[d, d + n)`.
        unsafe {
            core::arch::asm!(
                "rep stosq",
                "mov rcx, {rest}",
                "rep stosb",
                rest = in(reg) n % 8,
                inout("rdi") d => _,
                inout("rcx") n / 8 => _,
                in("rax") pattern,
                options(nostack)
            )
        };
        d
    }
}
