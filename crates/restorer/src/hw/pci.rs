//! PCI configuration space through the legacy mechanism (ports 0xCF8/0xCFC), and the walk
//! over every function in the order the kernel enumerates them: each bus's slots and
//! functions in order, then the buses behind its bridges.

use super::port::{inl, inw, outl, outw};
use restorer::pci::{self, Bdf};

/// The dword holding `reg`.
pub fn read32(bdf: Bdf, reg: u8) -> u32 {
    outl(pci::CONFIG_ADDRESS, bdf.config_address(reg));
    inl(pci::CONFIG_DATA)
}

/// The 16-bit register at `reg` (even).
pub fn read16(bdf: Bdf, reg: u8) -> u16 {
    outl(pci::CONFIG_ADDRESS, bdf.config_address(reg));
    inw(pci::CONFIG_DATA + u16::from(reg & 2))
}

/// Writes the 16-bit register at `reg` (even).
pub fn write16(bdf: Bdf, reg: u8, v: u16) {
    outl(pci::CONFIG_ADDRESS, bdf.config_address(reg));
    outw(pci::CONFIG_DATA + u16::from(reg & 2), v);
}

fn header_type(bdf: Bdf) -> u8 {
    (read32(bdf, pci::HEADER) >> 16) as u8
}

/// Bridges nest at most this deep (a PC has one or two levels).
const MAX_DEPTH: u8 = 8;

/// Calls `f` with every function present and its vendor/device dword, in enumeration order.
pub fn for_each_function(f: &mut impl FnMut(Bdf, u32)) {
    scan_bus(0, 0, f);
}

fn functions(bus: u8) -> impl Iterator<Item = (Bdf, u32)> {
    (0..32u8).flat_map(move |dev| {
        let first = Bdf { bus, dev, func: 0 };
        let present = read32(first, pci::ID) as u16 != pci::NO_DEVICE;
        let funcs = match present {
            false => 0,
            true if pci::multifunction(header_type(first)) => 8,
            true => 1,
        };
        (0..funcs).filter_map(move |func| {
            let bdf = Bdf { bus, dev, func };
            let id = read32(bdf, pci::ID);
            (id as u16 != pci::NO_DEVICE).then_some((bdf, id))
        })
    })
}

fn scan_bus(bus: u8, depth: u8, f: &mut impl FnMut(Bdf, u32)) {
    for (bdf, id) in functions(bus) {
        f(bdf, id);
    }
    if depth >= MAX_DEPTH {
        return;
    }
    for (bdf, _) in functions(bus) {
        // A PCI-to-PCI bridge (header type 1): its secondary bus is byte 1 of 0x18.
        if header_type(bdf) & 0x7F == 1 {
            let secondary = (read32(bdf, 0x18) >> 8) as u8;
            if secondary > bus {
                scan_bus(secondary, depth + 1, f);
            }
        }
    }
}

/// Whether the function's MSI-X is enabled (its legacy virtio registers then move by 4).
pub fn msix_enabled(bdf: Bdf) -> bool {
    if read16(bdf, pci::COMMAND + 2) & pci::STATUS_CAPABILITIES == 0 {
        return false;
    }
    let mut at = (read32(bdf, pci::CAPABILITIES) & 0xFC) as u8;
    // A list of at most 48 capabilities (the config space's 192 bytes after the header).
    for _ in 0..48 {
        if at == 0 {
            break;
        }
        let cap = read32(bdf, at);
        if cap as u8 == pci::CAP_MSIX {
            return cap >> 31 & 1 == 1;
        }
        at = ((cap >> 8) & 0xFC) as u8;
    }
    false
}
