//! Physical memory as the restorer's program touches it: identity mapped, whole pages
//! written for the image (zeroed, copied) and the words of the safe pages' lists. The one
//! place besides the CPU's own (`crate::cpu`) and the firmware's (`crate::hw`) where raw
//! addresses are dereferenced.

use core::arch::asm;
use restorer::safepages::PhysMem;

/// Bytes of a page.
pub const PAGE: u64 = 4096;

/// Reads the `u64` at physical address `a` (identity mapped).
pub(crate) fn rd64(a: u64) -> u64 {
    // SAFETY: callers pass addresses inside safe pages the restorer allocated (the last
    // copy's lists), identity mapped; unaligned reads are allowed.
    unsafe { core::ptr::read_unaligned(a as *const u64) }
}

/// Physical memory, identity mapped (the PC: the restorer's page tables; arm64: U-Boot's).
pub(crate) struct Identity;

impl PhysMem for Identity {
    fn zero_page(&mut self, addr: u64) {
        zero_page(addr)
    }
    fn read_u64(&self, addr: u64) -> u64 {
        rd64(addr)
    }
    fn write_u64(&mut self, addr: u64, value: u64) {
        put(addr, value)
    }
}

pub(crate) fn copy_page(from: u64, to: u64) {
    // SAFETY: both are whole identity-mapped RAM pages that do not overlap: `from` in the
    // restorer's chunk buffer, `to` a page the image owns or a safe page. The copy is the
    // restorer's `memcpy`.
    unsafe { core::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, PAGE as usize) }
}

pub(crate) fn put(a: u64, v: u64) {
    // SAFETY: `a` lies in a safe page this program allocated.
    unsafe { core::ptr::write(a as *mut u64, v) }
}

/// Zeroes the page at `a`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn zero_page(a: u64) {
    // SAFETY: `a` is a whole RAM page no live data uses (a safe page or an image page
    // being written), identity mapped. 32 bytes a step from one general register (`rep
    // stosq` is one emulated step per 8 bytes under QEMU's TCG, and SSE stores are slower).
    unsafe {
        asm!(
            "2:",
            "mov [rdi], rax",
            "mov [rdi + 8], rax",
            "mov [rdi + 16], rax",
            "mov [rdi + 24], rax",
            "add rdi, 32",
            "sub rcx, 32",
            "jnz 2b",
            inout("rdi") a => _,
            inout("rcx") PAGE => _,
            in("rax") 0u64,
            options(nostack)
        )
    }
}

/// Zeroes the page at `a`, 64 bytes a step.
#[cfg(target_arch = "aarch64")]
/// Zeroes the page at `a`, 64 bytes a step.
pub(crate) fn zero_page(a: u64) {
    // SAFETY: `a` is a whole RAM page no live data uses (a safe page or an image page
    // being written), identity mapped.
    unsafe {
        asm!(
            "2:",
            "stp xzr, xzr, [{p}]",
            "stp xzr, xzr, [{p}, #16]",
            "stp xzr, xzr, [{p}, #32]",
            "stp xzr, xzr, [{p}, #48]",
            "add {p}, {p}, #64",
            "subs {n}, {n}, #64",
            "b.ne 2b",
            p = inout(reg) a => _,
            n = inout(reg) PAGE => _,
            options(nostack)
        )
    }
}
