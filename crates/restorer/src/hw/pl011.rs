//! The arm64 console: the PL011 UART the device tree's `/chosen` `stdout-path` names, at
//! its physical address (identity mapped as device memory by U-Boot, and plain physical
//! once the MMU is off). Until [`set`] names one, output goes to the firmware's console.

use core::sync::atomic::{AtomicU64, Ordering};

/// The UART's registers (0: none).
static BASE: AtomicU64 = AtomicU64::new(0);
/// Data register.
const DR: u64 = 0x00;
/// Flag register; bit 5: the transmit FIFO is full.
const FR: u64 = 0x18;
const TXFF: u32 = 1 << 5;

/// Uses the PL011 at `base`.
pub fn set(base: u64) {
    BASE.store(base, Ordering::Relaxed);
}

/// Writes `b`, waiting while the FIFO is full.
pub fn byte(b: u8) {
    let base = BASE.load(Ordering::Relaxed);
    if base == 0 {
        super::efi::con_out(b);
        return;
    }
    // SAFETY: the PL011's flag and data registers, which the device tree names, mapped as
    // device memory; reading FR and writing DR have no effect beyond sending the byte.
    unsafe {
        while core::ptr::read_volatile((base + FR) as *const u32) & TXFF != 0 {}
        core::ptr::write_volatile((base + DR) as *mut u32, u32::from(b));
    }
}
