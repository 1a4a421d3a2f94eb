//! The restorer's hardware access: port I/O ([`port`], the only place it happens), PCI
//! configuration space through it ([`pci`]), the virtio disks ([`virtio`]) of the PVH
//! program, the clock ([`rtc`]) and, in the EFI application, the firmware's services
//! ([`efi`]).

#[cfg(feature = "efi")]
pub mod efi;
#[cfg(not(feature = "efi"))]
pub mod pci;
pub mod port;
pub mod rtc;
#[cfg(not(feature = "efi"))]
pub mod virtio;

/// The CPU's time-stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: reading the time-stamp counter has no side effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}
