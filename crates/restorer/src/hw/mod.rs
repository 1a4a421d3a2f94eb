//! The restorer's hardware access: port I/O ([`port`], the only place it happens), PCI
//! configuration space through it ([`pci`]), the virtio disks ([`virtio`]) of the PVH
//! program, the clock ([`rtc`]), the PIT that times the TSC ([`pit`]) and, in the EFI
//! application, the firmware's services ([`efi`]); on arm64 the console's PL011
//! ([`pl011`]).

#[cfg(feature = "efi")]
pub mod efi;
#[cfg(not(feature = "efi"))]
pub mod pci;
#[cfg(target_arch = "x86_64")]
pub mod pit;
#[cfg(target_arch = "aarch64")]
pub mod pl011;
#[cfg(target_arch = "x86_64")]
pub mod port;
#[cfg(target_arch = "x86_64")]
pub mod rtc;
#[cfg(not(feature = "efi"))]
pub mod virtio;

/// Seconds since the epoch from the machine's clock (the boot log's stamps); `None`
/// without one.
pub fn now() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    return rtc::now();
    #[cfg(target_arch = "aarch64")]
    return efi::now();
}
