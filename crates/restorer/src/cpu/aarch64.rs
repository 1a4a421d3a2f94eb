//! The arm64 side of [`crate::cpu`]: the restorer runs under U-Boot's identity map (MMU
//! and data cache on) while it places pages, cleaning each written page to the point of
//! coherency; then the relocated last copy loop (asm/last_copy_arm64.s) cleans what it
//! will overwrite, turns the MMU off, copies the deferred pages and branches to the image
//! kernel's `cpu_resume` (physical): the entry a CPU takes when it comes back from a PSCI
//! CPU_SUSPEND, which sets the CPU up from scratch (`init_kernel_el`, `__cpu_setup`), turns
//! the MMU on with the image's `swapper_pg_dir` and continues in `_cpu_resume` with the
//! context the image kernel saved when it hibernated. The image kernel's own resume then
//! runs (`syscore_resume`: the GIC's CPU-PM notifiers write its distributor and CPU
//! interface back from what they saved at hibernation; every device's `restore`).

use super::entry::NotEntered;
use crate::phys::{put, Identity, PAGE};
use core::arch::{asm, global_asm};
use restorer::image::Entry;
use restorer::safepages::{Busy, LastCopy, SafePages};
use restorer::telemetry::Rate;

global_asm!(include_str!("../asm/last_copy_arm64.s"));

extern "C" {
    // The last copy loop's bounds (asm/last_copy_arm64.s).
    static last_copy_a64: u8;
    static last_copy_a64_end: u8;
}

/// MPIDR's affinity bits.
pub(crate) const MPIDR_AFFINITY: u64 = 0xff_00ff_ffff;
/// Where in the loop's page the busy ranges are written.
const BUSY_AT: u64 = 2048;

/// Where the image kernel is entered: `cpu_resume`'s physical address, which the image's
/// header does not carry (capture records where it lies, from the image kernel's symbols).
pub(crate) struct Target {
    /// Physical address of `cpu_resume`.
    pub(crate) cpu_resume: u64,
}

/// The way in: the relocated loop and the entry.
pub(crate) struct Jump {
    code: u64,
    cpu_resume: u64,
}

/// The generic timer's virtual count.
pub(crate) fn cycles() -> u64 {
    let v: u64;
    // SAFETY: reading CNTVCT_EL0 has no side effect.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// How fast [`cycles`] counts: CNTFRQ_EL0, the generic timer's frequency, which the
/// firmware sets (QEMU's virt board: 62.5 MHz, 1 GHz on newer machine versions); `None`
/// when it reads as no plausible rate (left unset).
pub(crate) fn cycle_rate() -> Option<Rate> {
    let v: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effect.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) v, options(nomem, nostack)) };
    Rate::from_cntfrq(v)
}

/// Bytes of the smallest data cache line (CTR_EL0.DminLine).
pub(crate) fn line() -> u64 {
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effect.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    4 << ((ctr >> 16) & 0xf)
}

/// Cleans and invalidates `[addr, addr + len)` to the point of coherency: the image kernel
/// reads it with the MMU off first. (The last copy loop's `dsb sy` completes them all
/// before the MMU goes off.)
pub(crate) fn written(addr: u64, len: u64) {
    let step = line();
    let mut a = addr & !(step - 1);
    while a < addr + len {
        // SAFETY: a cache maintenance operation by address on identity-mapped RAM; it
        // changes no data.
        unsafe { asm!("dc civac, {}", in(reg) a, options(nostack)) };
        a += step;
    }
}

/// The current exception level (1 or 2).
pub(crate) fn el() -> u64 {
    let v: u64;
    // SAFETY: reading CurrentEL has no side effect.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) v, options(nomem, nostack)) };
    (v >> 2) & 3
}

/// This CPU's MPIDR affinity.
pub(crate) fn mpidr() -> u64 {
    let v: u64;
    // SAFETY: reading MPIDR_EL1 has no side effect.
    unsafe { asm!("mrs {}, mpidr_el1", out(reg) v, options(nomem, nostack)) };
    v & MPIDR_AFFINITY
}

/// The firmware's translation tables (the identity map the restorer runs under until the
/// last copy turns the MMU off): the range their pages span, to keep busy. Refused when
/// the map is not one this code reads (a 4 KiB granule), or the pages lie far apart.
pub(crate) fn firmware_tables() -> Result<(u64, u64), alloc::string::String> {
    let (ttbr, tcr): (u64, u64);
    // SAFETY: reading the current level's TTBR0 and TCR has no side effect.
    unsafe {
        if el() == 2 {
            asm!("mrs {}, ttbr0_el2", "mrs {}, tcr_el2", out(reg) ttbr, out(reg) tcr, options(nomem, nostack));
        } else {
            asm!("mrs {}, ttbr0_el1", "mrs {}, tcr_el1", out(reg) ttbr, out(reg) tcr, options(nomem, nostack));
        }
    }
    if (tcr >> 14) & 3 != 0 {
        return Err(alloc::format!(
            "the firmware's translation granule is not 4 KiB (TCR {tcr:#x})"
        ));
    }
    let va_bits = 64 - (tcr & 0x3f);
    let start = match va_bits {
        40.. => 0,
        31..=39 => 1,
        _ => 2,
    };
    const ADDR: u64 = 0x0000_ffff_ffff_f000;
    let root = ttbr & ADDR & !0xfff;
    let (mut lo, mut hi) = (root, root + PAGE);
    let mut stack = alloc::vec![(root, start)];
    let mut tables = 0;
    while let Some((table, level)) = stack.pop() {
        tables += 1;
        if tables > 4096 {
            return Err("the firmware's translation tables have more than 4096 pages".into());
        }
        lo = lo.min(table);
        hi = hi.max(table + PAGE);
        if level == 3 {
            continue;
        }
        for i in 0..512 {
            // SAFETY: a descriptor of a translation table the CPU walks now, identity
            // mapped.
            let d = unsafe { core::ptr::read_volatile((table + 8 * i) as *const u64) };
            if d & 3 == 3 && level < 3 {
                stack.push((d & ADDR, level + 1));
            }
        }
    }
    if hi - lo > 64 << 20 {
        return Err(alloc::format!(
            "the firmware's translation tables span {:#x}-{:#x}, more than 64 MiB",
            lo,
            hi
        ));
    }
    Ok((lo, hi))
}

/// Checks the image suits this CPU and relocates the last copy loop to a safe page.
pub(crate) fn prepare(
    entry: &Entry,
    target: Target,
    safe: &mut SafePages,
    mem: &mut Identity,
) -> Result<Jump, NotEntered> {
    let Entry::Arm64 {
        hyp_stub_vectors,
        sleep_cpu_mpidr,
        ..
    } = *entry
    else {
        return Err(NotEntered::Entry(
            "the image is not an arm64 kernel's".into(),
        ));
    };
    let here = mpidr();
    if sleep_cpu_mpidr & MPIDR_AFFINITY != here {
        return Err(NotEntered::Entry(alloc::format!(
            "the image hibernated on the CPU with MPIDR {sleep_cpu_mpidr:#x}; the restorer runs on {here:#x}"
        )));
    }
    let (image_el2, now) = (hyp_stub_vectors != 0, el());
    if image_el2 != (now == 2) {
        return Err(NotEntered::Entry(alloc::format!(
            "the image kernel was booted at EL{}, the restorer runs at EL{now}",
            if image_el2 { 2 } else { 1 }
        )));
    }
    let code = safe.take(mem)?;
    let (lc, lc_end) = (
        core::ptr::addr_of!(last_copy_a64) as u64,
        core::ptr::addr_of!(last_copy_a64_end) as u64,
    );
    if lc_end - lc > BUSY_AT {
        return Err(NotEntered::Entry(
            "the last copy loop is larger than its room".into(),
        ));
    }
    // SAFETY: copies the loop's bytes into the fresh safe page `code`.
    unsafe {
        core::ptr::copy_nonoverlapping(lc as *const u8, code as *mut u8, (lc_end - lc) as usize)
    };
    Ok(Jump {
        code,
        cpu_resume: target.cpu_resume,
    })
}

/// Writes the busy ranges beside the loop, makes its page visible to instruction fetches
/// with the MMU on and off, and runs it.
///
/// # Safety
/// Every page of the image is in place or listed in `last`; nothing of this program is
/// used after the call.
pub(crate) unsafe fn enter(jump: Jump, last: &LastCopy, busy: &Busy) -> ! {
    let ranges = busy.ranges();
    for (i, &(start, end)) in ranges.iter().enumerate() {
        put(jump.code + BUSY_AT + 16 * i as u64, start);
        put(jump.code + BUSY_AT + 16 * i as u64 + 8, end);
    }
    written(jump.code, PAGE);
    // SAFETY: the loop's page is cleaned to the point of coherency (the barrier completes
    // that and every page's cleaning before); the instruction cache is invalidated so its
    // bytes are fetched; the loop then never returns.
    unsafe {
        asm!(
            "dsb sy",
            "ic iallu",
            "dsb nsh",
            "isb",
            "br {c}",
            c = in(reg) jump.code,
            in("x0") last.head,
            in("x1") jump.cpu_resume,
            in("x2") line(),
            in("x3") jump.code + BUSY_AT,
            in("x4") ranges.len() as u64,
            options(noreturn)
        )
    }
}

/// The image kernel's entry, for the console.
pub(crate) fn describe(jump: &Jump) -> u64 {
    jump.cpu_resume
}

/// `memcpy` and `memset`: 16 bytes a step through a register pair, then byte by byte.
pub(crate) mod mem {
    #[no_mangle]
    pub(crate) unsafe extern "C" fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        // SAFETY: the caller's contract for memcpy (valid, non-overlapping ranges); the
        // loop and the tail touch exactly `n` bytes of each.
        unsafe {
            core::arch::asm!(
                "2:",
                "cmp {n}, #16",
                "b.lo 3f",
                "ldp {a}, {b}, [{s}], #16",
                "stp {a}, {b}, [{d}], #16",
                "sub {n}, {n}, #16",
                "b 2b",
                "3:",
                "cbz {n}, 4f",
                "ldrb {a:w}, [{s}], #1",
                "strb {a:w}, [{d}], #1",
                "sub {n}, {n}, #1",
                "b 3b",
                "4:",
                d = inout(reg) d => _,
                s = inout(reg) s => _,
                n = inout(reg) n => _,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack)
            )
        };
        d
    }

    #[no_mangle]
    unsafe extern "C" fn memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
        let pattern = u64::from(c as u8) * 0x0101_0101_0101_0101;
        // SAFETY: the caller's contract for memset (a valid range): the loop and the tail
        // write exactly `[d, d + n)`.
        unsafe {
            core::arch::asm!(
                "2:",
                "cmp {n}, #16",
                "b.lo 3f",
                "stp {v}, {v}, [{d}], #16",
                "sub {n}, {n}, #16",
                "b 2b",
                "3:",
                "cbz {n}, 4f",
                "strb {v:w}, [{d}], #1",
                "sub {n}, {n}, #1",
                "b 3b",
                "4:",
                d = inout(reg) d => _,
                n = inout(reg) n => _,
                v = in(reg) pattern,
                options(nostack)
            )
        };
        d
    }
}
