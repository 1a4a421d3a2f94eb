//! The PVH start info (`hvm_start_info`, Xen's `arch-x86/hvm/start_info.h`) the firmware
//! hands the restorer in `%ebx`: its modules, command line, ACPI RSDP and memory map.
//!
//! ```text
//! offset  size  field
//! 0       4     magic 0x336ec578
//! 4       4     version (1: the memory map fields exist)
//! 8       4     flags
//! 12      4     nr_modules
//! 16      8     modlist_paddr   (16-byte entries: paddr, size, cmdline_paddr, reserved)
//! 24      8     cmdline_paddr   (NUL-terminated)
//! 32      8     rsdp_paddr
//! 40      8     memmap_paddr    (24-byte entries: addr, size, type, reserved)
//! 48      4     memmap_entries
//! 52      4     reserved
//! ```

use crate::e820::Entry;

/// The start info's first word.
pub const MAGIC: u32 = 0x336E_C578;
/// Bytes of the start info (version 1).
pub const LEN: usize = 56;
/// Bytes of a memory map entry.
pub const MEMMAP_ENTRY: usize = 24;

/// Why the start info cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StartInfoError {
    /// The magic is not the start info's.
    #[error("start info: magic {0:#x}")]
    Magic(u32),
    /// Version 0 has no memory map.
    #[error("start info: version {0} has no memory map")]
    Version(u32),
}

/// What the start info says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartInfo {
    /// Modules.
    pub modules: u32,
    /// Where their list is.
    pub modlist: u64,
    /// Where the command line is (0: none).
    pub cmdline: u64,
    /// Where the ACPI RSDP is (0: not given).
    pub rsdp: u64,
    /// Where the memory map is.
    pub memmap: u64,
    /// Its entries.
    pub memmap_entries: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl StartInfo {
    /// Reads the start info's bytes.
    pub fn decode(b: &[u8; LEN]) -> Result<StartInfo, StartInfoError> {
        let magic = u32_at(b, 0);
        if magic != MAGIC {
            return Err(StartInfoError::Magic(magic));
        }
        let version = u32_at(b, 4);
        if version < 1 {
            return Err(StartInfoError::Version(version));
        }
        Ok(StartInfo {
            modules: u32_at(b, 12),
            modlist: u64_at(b, 16),
            cmdline: u64_at(b, 24),
            rsdp: u64_at(b, 32),
            memmap: u64_at(b, 40),
            memmap_entries: u32_at(b, 48),
        })
    }
}

/// One memory map entry from its bytes.
pub fn memmap_entry(b: &[u8; MEMMAP_ENTRY]) -> Entry {
    Entry {
        addr: u64_at(b, 0),
        size: u64_at(b, 8),
        kind: u32_at(b, 16),
    }
}

/// The command line in `bytes` (read from `cmdline_paddr`): up to the first NUL, if it is
/// UTF-8.
pub fn cmdline(bytes: &[u8]) -> Option<&str> {
    let end = bytes.iter().position(|&b| b == 0)?;
    core::str::from_utf8(&bytes[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&1u32.to_le_bytes());
        b[16..24].copy_from_slice(&0x6000u64.to_le_bytes());
        b[24..32].copy_from_slice(&0x7000u64.to_le_bytes());
        b[32..40].copy_from_slice(&0xF_5A00u64.to_le_bytes());
        b[40..48].copy_from_slice(&0x8000u64.to_le_bytes());
        b[48..52].copy_from_slice(&5u32.to_le_bytes());
        b
    }

    #[test]
    fn the_fields_are_where_xen_puts_them() {
        assert_eq!(
            StartInfo::decode(&info()),
            Ok(StartInfo {
                modules: 1,
                modlist: 0x6000,
                cmdline: 0x7000,
                rsdp: 0xF_5A00,
                memmap: 0x8000,
                memmap_entries: 5,
            })
        );
        let mut b = info();
        b[0] ^= 1;
        assert_eq!(StartInfo::decode(&b), Err(StartInfoError::Magic(MAGIC ^ 1)));
        let mut b = info();
        b[4] = 0;
        assert_eq!(StartInfo::decode(&b), Err(StartInfoError::Version(0)));
    }

    #[test]
    fn memory_map_entries_and_the_command_line_read_back() {
        let mut e = [0u8; MEMMAP_ENTRY];
        e[..8].copy_from_slice(&0x10_0000u64.to_le_bytes());
        e[8..16].copy_from_slice(&0x1FF0_0000u64.to_le_bytes());
        e[16..20].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(
            memmap_entry(&e),
            Entry {
                addr: 0x10_0000,
                size: 0x1FF0_0000,
                kind: 1
            }
        );
        assert_eq!(
            cmdline(b"console=ttyS0 quiet\0junk"),
            Some("console=ttyS0 quiet")
        );
        assert_eq!(cmdline(b"no end"), None);
        assert_eq!(cmdline(b"\xff\0"), None);
    }
}
