//! The restorer's hardware access: port I/O ([`port`], the only place it happens), PCI
//! configuration space through it ([`pci`]), and the virtio disks ([`virtio`]).

pub mod pci;
pub mod port;
pub mod virtio;
