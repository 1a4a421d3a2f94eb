//! The restorer's hardware access: port I/O ([`port`], the only place it happens), PCI
//! configuration space through it ([`pci`]), the virtio disks ([`virtio`]) and the clock
//! ([`rtc`]).

pub mod pci;
pub mod port;
pub mod rtc;
pub mod virtio;
