//! PCI configuration space as the PC's firmware leaves it: addresses for the legacy
//! configuration mechanism (ports 0xCF8/0xCFC), base address registers, the capability
//! list. The port I/O itself is the restorer binary's (`hw::pci`).

/// The configuration address port.
pub const CONFIG_ADDRESS: u16 = 0xCF8;
/// The configuration data port.
pub const CONFIG_DATA: u16 = 0xCFC;
/// Vendor and device id (low 16 bits vendor).
pub const ID: u8 = 0x00;
/// Command (low 16 bits) and status (high 16 bits).
pub const COMMAND: u8 = 0x04;
/// Command bit: the device answers I/O cycles.
pub const COMMAND_IO: u16 = 1 << 0;
/// Command bit: the device may master the bus (DMA).
pub const COMMAND_MASTER: u16 = 1 << 2;
/// Status bit: the device has a capability list.
pub const STATUS_CAPABILITIES: u16 = 1 << 4;
/// Header type (byte 2 of this register); bit 7: the device has several functions.
pub const HEADER: u8 = 0x0C;
/// The first base address register.
pub const BAR0: u8 = 0x10;
/// The capability list's first entry (low byte).
pub const CAPABILITIES: u8 = 0x34;
/// The MSI-X capability's id.
pub const CAP_MSIX: u8 = 0x11;
/// A vendor id no device has: nothing at this address.
pub const NO_DEVICE: u16 = 0xFFFF;

/// A function's address: bus, device (slot) and function. Ordered as the kernel enumerates
/// the root bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Bdf {
    /// Bus.
    pub bus: u8,
    /// Device (slot), 0..32.
    pub dev: u8,
    /// Function, 0..8.
    pub func: u8,
}

impl Bdf {
    /// The value written to [`CONFIG_ADDRESS`] to reach the dword holding `reg`.
    pub fn config_address(self, reg: u8) -> u32 {
        0x8000_0000
            | u32::from(self.bus) << 16
            | u32::from(self.dev & 31) << 11
            | u32::from(self.func & 7) << 8
            | u32::from(reg & 0xFC)
    }
}

impl core::fmt::Display for Bdf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.dev, self.func)
    }
}

/// What a base address register holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bar {
    /// I/O ports from this one.
    Io(u16),
    /// Memory from this address (the high half read already for a 64-bit register).
    Memory(u64),
}

/// Decodes a base address register: `low` is its dword, `high` the next one, used when
/// `low` says the register is 64 bits wide.
pub fn decode_bar(low: u32, high: u32) -> Bar {
    if low & 1 == 1 {
        return Bar::Io((low & 0xFFFC) as u16);
    }
    let is_64 = (low >> 1) & 3 == 2;
    let base = u64::from(low & !0xF);
    Bar::Memory(if is_64 {
        base | u64::from(high) << 32
    } else {
        base
    })
}

/// Whether a function whose header type is `header` (the byte) has functions 1 to 7.
pub fn multifunction(header: u8) -> bool {
    header & 0x80 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_address_packs_bus_device_function_and_dword() {
        let b = Bdf {
            bus: 1,
            dev: 3,
            func: 2,
        };
        assert_eq!(b.config_address(0x10), 0x8001_1A10);
        assert_eq!(b.config_address(0x13), 0x8001_1A10, "dword aligned");
        assert_eq!(Bdf::default().config_address(0), 0x8000_0000);
        assert_eq!(b.to_string(), "01:03.2");
    }

    #[test]
    fn bars_decode_io_32_and_64_bit_memory() {
        assert_eq!(decode_bar(0xC041, 0), Bar::Io(0xC040));
        assert_eq!(decode_bar(0xFEBF_1000, 0xDEAD), Bar::Memory(0xFEBF_1000));
        assert_eq!(
            decode_bar(0xFE00_000C, 0x1),
            Bar::Memory(0x1_FE00_0000),
            "64-bit prefetchable"
        );
    }

    #[test]
    fn functions_are_ordered_bus_then_slot_then_function() {
        let a = Bdf {
            bus: 0,
            dev: 2,
            func: 7,
        };
        let b = Bdf {
            bus: 0,
            dev: 3,
            func: 0,
        };
        assert!(a < b);
        assert!(multifunction(0x80) && !multifunction(0x00));
    }
}
