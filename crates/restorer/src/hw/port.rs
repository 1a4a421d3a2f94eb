//! Port I/O, the one place the restorer reaches devices' registers: COM1, the ACPI power
//! control, PCI configuration (0xCF8/0xCFC), the virtio disks' I/O BARs and the PIT's
//! channel 2 (0x42, 0x43, 0x61). The restorer is
//! the only software running and drives each of these devices alone, so a port access
//! cannot disturb anyone else's state: the wrappers are safe functions.

// The EFI program reaches only COM1, the clock and the reset register.
#![cfg_attr(feature = "efi", allow(dead_code))]

use core::arch::asm;

/// Writes a byte to `port`.
pub fn outb(port: u16, v: u8) {
    // SAFETY: port I/O touches no memory this program owns; the devices are the restorer's
    // alone (module header).
    unsafe { asm!("out dx, al", in("dx") port, in("al") v, options(nostack, preserves_flags)) }
}

/// Reads a byte from `port`.
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: as in `outb`.
    unsafe { asm!("in al, dx", in("dx") port, out("al") v, options(nostack, preserves_flags)) }
    v
}

/// Writes a 16-bit word to `port`.
pub fn outw(port: u16, v: u16) {
    // SAFETY: as in `outb`.
    unsafe { asm!("out dx, ax", in("dx") port, in("ax") v, options(nostack, preserves_flags)) }
}

/// Reads a 16-bit word from `port`.
pub fn inw(port: u16) -> u16 {
    let v: u16;
    // SAFETY: as in `outb`.
    unsafe { asm!("in ax, dx", in("dx") port, out("ax") v, options(nostack, preserves_flags)) }
    v
}

/// Writes a 32-bit word to `port`.
pub fn outl(port: u16, v: u32) {
    // SAFETY: as in `outb`.
    unsafe { asm!("out dx, eax", in("dx") port, in("eax") v, options(nostack, preserves_flags)) }
}

/// Reads a 32-bit word from `port`.
pub fn inl(port: u16) -> u32 {
    let v: u32;
    // SAFETY: as in `outb`.
    unsafe { asm!("in eax, dx", in("dx") port, out("eax") v, options(nostack, preserves_flags)) }
    v
}
