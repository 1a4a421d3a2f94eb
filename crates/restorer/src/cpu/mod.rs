//! What differs between the CPUs the restorer runs on: clearing a page and the
//! compiler's `memcpy` family at the speed TCG allows, the cycle counter and its rate
//! (`cycle_rate`), what a page written for the image needs before another observer reads
//! it, and the way into the image kernel: set up in safe pages before any page is placed
//! ([`prepare`]), taken after the last one ([`enter`]), through the relocated last copy
//! loop.
//!
//! * x86_64 ([`x86_64`]): temporary identity page tables plus the image kernel's text,
//!   then `restore_registers` with the image's CR3.
//! * arm64 ([`aarch64`]): caches cleaned, the MMU off, then the image kernel's MMU-off
//!   entry `cpu_resume`, as after a PSCI CPU_SUSPEND. The other CPUs decode chunks
//!   meanwhile, started and stopped through PSCI ([`psci`], for `crate::smp`).
//! * The PC's other CPUs decode chunks too, started with INIT and start-up IPIs through the
//!   local APIC at real-mode code below 640 KiB, and parked again with INIT ([`apic`]).

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod apic;
mod entry;
mod others;
#[cfg(target_arch = "aarch64")]
mod psci;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::*;
#[cfg(all(target_arch = "x86_64", feature = "efi"))]
pub(crate) use apic::efi_rsdp;
#[cfg(target_arch = "x86_64")]
pub(crate) use apic::helpers;
#[cfg(all(target_arch = "x86_64", not(feature = "efi")))]
pub(crate) use apic::pvh_rsdp;
pub(crate) use entry::NotEntered;
pub(crate) use others::{Cpus, OneCpu};
#[cfg(target_arch = "aarch64")]
pub(crate) use psci::Psci;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::*;

/// `memmove`, `memcmp` and `bcmp` for the code the compiler emits (no libc here); `memcpy`
/// and `memset` are each CPU's, tuned for TCG.
mod mem_common {
    #[no_mangle]
    unsafe extern "C" fn memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
        if (d as usize) <= (s as usize) {
            // SAFETY: a forward copy is right when the destination starts first.
            unsafe { super::mem::memcpy(d, s, n) }
        } else {
            for i in (0..n).rev() {
                // SAFETY: the caller's contract for memmove: both ranges valid.
                unsafe { core::ptr::write_volatile(d.add(i), core::ptr::read_volatile(s.add(i))) };
            }
            d
        }
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
