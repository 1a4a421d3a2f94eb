//! The PVH start info (`hvm_start_info`, Xen's `arch-x86/hvm/start_info.h`) the firmware
//! hands the restorer in `%ebx`: its modules, command line, ACPI RSDP and memory map; and
//! what the restorer reads of the ACPI tables that RSDP leads to (the EFI program's comes
//! from the firmware's configuration table): the MADT's local APIC ids, the PC's CPUs
//! ([`madt`]).
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

/// The RSDP's signature.
pub const RSDP_SIGNATURE: &[u8; 8] = b"RSD PTR ";
/// Bytes of an ACPI 1.0 RSDP (revision 0), which its checksum covers.
const RSDP_V1: usize = 20;
/// Bytes of an ACPI 2.0 RSDP (revision 2 and later), which its extended checksum covers.
const RSDP_V2: usize = 36;
/// Bytes of every ACPI table's header (signature, length, revision, checksum, OEM ids).
pub const SDT_HEADER: usize = 36;
/// The most bytes a table the restorer reads may have (a MADT of 64 CPUs has ~600).
const MAX_TABLE: u32 = 1 << 20;

/// Why the ACPI tables do not say which CPUs the PC has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcpiError {
    /// The firmware gave no RSDP, and none lies in the BIOS area.
    #[error("the firmware gave no ACPI RSDP")]
    NoRsdp,
    /// Bytes at an address could not be read (beyond what is mapped).
    #[error("{len} bytes at {at:#x} cannot be read")]
    Unreadable {
        /// The address.
        at: u64,
        /// The bytes wanted.
        len: usize,
    },
    /// The RSDP is not one.
    #[error("the RSDP at {at:#x}: {why}")]
    Rsdp {
        /// Its address.
        at: u64,
        /// What is wrong.
        why: &'static str,
    },
    /// A table is not what its reference says.
    #[error("ACPI table {sig} at {at:#x}: {why}")]
    Table {
        /// Its signature as read (or wanted).
        sig: alloc::string::String,
        /// Its address.
        at: u64,
        /// What is wrong.
        why: alloc::string::String,
    },
    /// The root table lists no MADT.
    #[error("no MADT (\"APIC\") among the {0} tables the {1} lists")]
    NoMadt(usize, &'static str),
}

/// The PC's interrupt controllers as the MADT lists them, as far as starting CPUs needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Madt {
    /// The local APICs' physical address (the 32-bit field, or its 64-bit override).
    pub lapic: u64,
    /// The APIC ids of the CPUs that are enabled, in the MADT's order, each once.
    pub cpus: alloc::vec::Vec<u32>,
    /// Entries of CPUs that are not enabled (not present, or to be hot-plugged).
    pub disabled: usize,
}

/// Where an RSDP lies in `area` (the BIOS read-only area, 0xE0000 to 0xFFFFF, at `base`):
/// the first 16-byte boundary with its signature and a right checksum.
pub fn find_rsdp(area: &[u8], base: u64) -> Option<u64> {
    (0..area.len().saturating_sub(RSDP_V1 - 1))
        .step_by(16)
        .find(|&i| {
            let b = &area[i..i + RSDP_V1];
            &b[..8] == RSDP_SIGNATURE && sum(b) == 0
        })
        .map(|i| base + i as u64)
}

fn sum(b: &[u8]) -> u8 {
    b.iter().fold(0u8, |a, &x| a.wrapping_add(x))
}

fn signature(b: &[u8]) -> alloc::string::String {
    b.iter()
        .take(4)
        .map(|&c| if c.is_ascii_graphic() { c as char } else { '?' })
        .collect()
}

/// The MADT of the tables the RSDP at `rsdp` leads to (the XSDT when the RSDP has one,
/// else the RSDT), every table's checksum checked; `read(at, len)` gives the `len` bytes of
/// physical memory at `at` (`None` beyond what can be read).
pub fn madt<'m>(
    rsdp: u64,
    read: &dyn Fn(u64, usize) -> Option<&'m [u8]>,
) -> Result<Madt, AcpiError> {
    let bytes = |at: u64, len: usize| read(at, len).ok_or(AcpiError::Unreadable { at, len });
    let head = bytes(rsdp, RSDP_V1)?;
    let bad = |why| AcpiError::Rsdp { at: rsdp, why };
    if &head[..8] != RSDP_SIGNATURE {
        return Err(bad("no \"RSD PTR \" signature"));
    }
    if sum(head) != 0 {
        return Err(bad("its checksum is wrong"));
    }
    let revision = head[15];
    let rsdt = u64::from(u32_at(head, 16));
    let xsdt = if revision >= 2 {
        let full = bytes(rsdp, RSDP_V2)?;
        let len = (u32_at(full, 20) as usize).max(RSDP_V2);
        if sum(bytes(rsdp, len)?) != 0 {
            return Err(bad("its extended checksum is wrong"));
        }
        u64_at(full, 24)
    } else {
        0
    };
    let (root, sig, entry) = if xsdt != 0 {
        (xsdt, b"XSDT", 8)
    } else {
        (rsdt, b"RSDT", 4)
    };
    let root_bytes = table(root, sig, &bytes)?;
    let refs = &root_bytes[SDT_HEADER..];
    let count = refs.len() / entry;
    for i in 0..count {
        let r = &refs[i * entry..][..entry];
        let at = if entry == 8 {
            u64_at(r, 0)
        } else {
            u64::from(u32_at(r, 0))
        };
        if at == 0 || &bytes(at, SDT_HEADER)?[..4] != b"APIC" {
            continue;
        }
        return parse_madt(at, table(at, b"APIC", &bytes)?);
    }
    Err(AcpiError::NoMadt(
        count,
        if entry == 8 { "XSDT" } else { "RSDT" },
    ))
}

/// The whole table at `at`, which must carry signature `sig` and a right checksum.
fn table<'m>(
    at: u64,
    sig: &[u8; 4],
    bytes: &dyn Fn(u64, usize) -> Result<&'m [u8], AcpiError>,
) -> Result<&'m [u8], AcpiError> {
    let head = bytes(at, SDT_HEADER)?;
    let bad = |why: alloc::string::String| AcpiError::Table {
        sig: signature(&head[..4]),
        at,
        why,
    };
    if &head[..4] != sig {
        return Err(bad(alloc::format!(
            "the reference wants {}",
            signature(sig)
        )));
    }
    let len = u32_at(head, 4);
    if !(SDT_HEADER as u32..=MAX_TABLE).contains(&len) {
        return Err(bad(alloc::format!("length {len}")));
    }
    let all = bytes(at, len as usize)?;
    match sum(all) {
        0 => Ok(all),
        s => Err(bad(alloc::format!("its {len} bytes sum to {s:#x}, not 0"))),
    }
}

/// The MADT's bytes (`all`, at `at`, checked): the local APIC address and the CPUs.
fn parse_madt(at: u64, all: &[u8]) -> Result<Madt, AcpiError> {
    let bad = |why: alloc::string::String| AcpiError::Table {
        sig: "APIC".into(),
        at,
        why,
    };
    if all.len() < SDT_HEADER + 8 {
        return Err(bad(alloc::format!("{} bytes, too short", all.len())));
    }
    let mut m = Madt {
        lapic: u64::from(u32_at(all, SDT_HEADER)),
        cpus: alloc::vec::Vec::new(),
        disabled: 0,
    };
    let mut off = SDT_HEADER + 8;
    while off + 2 <= all.len() {
        let (kind, len) = (all[off], usize::from(all[off + 1]));
        if len < 2 || off + len > all.len() {
            return Err(bad(alloc::format!(
                "entry of type {kind} at byte {off} has length {len}"
            )));
        }
        let e = &all[off..off + len];
        // Type 0: processor local APIC (id u8, flags u32); 9: processor local x2APIC (id
        // u32, flags u32); 5: the local APICs' 64-bit address. Flags bit 0: enabled.
        let cpu = match (kind, len) {
            (0, 8..) => Some((u32::from(e[3]), u32_at(e, 4))),
            (9, 16..) => Some((u32_at(e, 4), u32_at(e, 8))),
            (5, 12..) => {
                m.lapic = u64_at(e, 4);
                None
            }
            (0 | 9 | 5, _) => {
                return Err(bad(alloc::format!(
                    "entry of type {kind} at byte {off} is {len} bytes, too short"
                )))
            }
            _ => None,
        };
        if let Some((id, flags)) = cpu {
            if flags & 1 == 0 {
                m.disabled += 1;
            } else if !m.cpus.contains(&id) {
                m.cpus.push(id);
            }
        }
        off += len;
    }
    Ok(m)
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

    /// Physical memory of a test: tables at their addresses.
    struct Mem(Vec<(u64, Vec<u8>)>);

    impl Mem {
        fn read(&self, at: u64, len: usize) -> Option<&[u8]> {
            self.0.iter().find_map(|(base, b)| {
                let off = usize::try_from(at.checked_sub(*base)?).ok()?;
                b.get(off..off.checked_add(len)?)
            })
        }
    }

    /// Sets byte `at` of `b` so that all of `b` sums to 0.
    fn fix(b: &mut [u8], at: usize) {
        b[at] = 0;
        b[at] = 0u8.wrapping_sub(sum(b));
    }

    fn sdt(sig: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut t = vec![0u8; SDT_HEADER];
        t[..4].copy_from_slice(sig);
        t[4..8].copy_from_slice(&((SDT_HEADER + body.len()) as u32).to_le_bytes());
        t[8] = 1;
        t.extend_from_slice(body);
        fix(&mut t, 9);
        t
    }

    fn rsdp(revision: u8, rsdt: u32, xsdt: u64) -> Vec<u8> {
        let mut r = vec![0u8; RSDP_V2];
        r[..8].copy_from_slice(RSDP_SIGNATURE);
        r[15] = revision;
        r[16..20].copy_from_slice(&rsdt.to_le_bytes());
        r[20..24].copy_from_slice(&(RSDP_V2 as u32).to_le_bytes());
        r[24..32].copy_from_slice(&xsdt.to_le_bytes());
        fix(&mut r[..RSDP_V1], 8);
        fix(&mut r, 32);
        if revision < 2 {
            r.truncate(RSDP_V1);
        }
        r
    }

    /// A MADT as QEMU's q35 with 4 CPUs, one of them not present, writes it, plus an
    /// x2APIC entry, an I/O APIC and the address override.
    fn madt_bytes() -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0xFEE0_0000u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes()); // PCAT_COMPAT
        for (uid, id, flags) in [(0u8, 0u8, 1u32), (1, 1, 1), (2, 2, 0), (3, 1, 1)] {
            body.extend_from_slice(&[0, 8, uid, id]);
            body.extend_from_slice(&flags.to_le_bytes());
        }
        // I/O APIC: type 1, 12 bytes.
        body.extend_from_slice(&[1, 12, 0, 0, 0, 0, 0xC0, 0xFE, 0, 0, 0, 0]);
        // x2APIC 0x100, enabled.
        body.extend_from_slice(&[9, 16, 0, 0]);
        body.extend_from_slice(&0x100u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&4u32.to_le_bytes());
        // Local APIC address override.
        body.extend_from_slice(&[5, 12, 0, 0]);
        body.extend_from_slice(&0xFEE0_0000u64.to_le_bytes());
        sdt(b"APIC", &body)
    }

    fn pc(revision: u8) -> Mem {
        let facp = sdt(b"FACP", &[0u8; 16]);
        let xsdt: Vec<u8> = [0x7000u64, 0x8000]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        let rsdt: Vec<u8> = [0x7000u32, 0x8000]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        Mem(vec![
            (0xF_5A00, rsdp(revision, 0x6000, 0x5000)),
            (0x5000, sdt(b"XSDT", &xsdt)),
            (0x6000, sdt(b"RSDT", &rsdt)),
            (0x7000, facp),
            (0x8000, madt_bytes()),
        ])
    }

    #[test]
    fn the_madt_lists_the_enabled_cpus_once_through_the_xsdt_or_the_rsdt() {
        for revision in [0, 2] {
            let mem = pc(revision);
            let m = madt(0xF_5A00, &|a, l| mem.read(a, l)).unwrap();
            assert_eq!(
                m,
                Madt {
                    lapic: 0xFEE0_0000,
                    cpus: vec![0, 1, 0x100],
                    disabled: 1,
                }
            );
        }
    }

    #[test]
    fn broken_tables_are_refused_with_where_and_why() {
        let read = |mem: &Mem| {
            let mem = Mem(mem.0.clone());
            madt(0xF_5A00, &|a, l| mem.read(a, l))
                .map(|_| ())
                .unwrap_err()
        };
        // No RSDP there, or a wrong checksum.
        let mut mem = pc(2);
        mem.0[0].1[0] = b'X';
        assert!(matches!(read(&mem), AcpiError::Rsdp { at: 0xF_5A00, .. }));
        let mut mem = pc(2);
        mem.0[0].1[30] ^= 1;
        assert_eq!(
            read(&mem),
            AcpiError::Rsdp {
                at: 0xF_5A00,
                why: "its extended checksum is wrong"
            }
        );
        // A MADT byte changed: its checksum.
        let mut mem = pc(2);
        mem.0[4].1[50] ^= 1;
        let e = read(&mem);
        assert!(
            e.to_string().starts_with("ACPI table APIC at 0x8000: its ")
                && e.to_string().contains("bytes sum to 0x"),
            "{e}"
        );
        // An entry of length 0 would loop forever: refused.
        let mut mem = pc(2);
        let t = &mut mem.0[4].1;
        t[SDT_HEADER + 9] = 0;
        fix(t, 9);
        assert_eq!(
            read(&mem).to_string(),
            "ACPI table APIC at 0x8000: entry of type 0 at byte 44 has length 0"
        );
        // No MADT among the tables.
        let mut mem = pc(2);
        mem.0.pop();
        mem.0.push((0x8000, sdt(b"HPET", &[0u8; 20])));
        assert_eq!(read(&mem), AcpiError::NoMadt(2, "XSDT"));
        // A table beyond what can be read.
        let mut mem = pc(0);
        mem.0.retain(|(a, _)| *a != 0x6000);
        assert_eq!(
            read(&mem),
            AcpiError::Unreadable {
                at: 0x6000,
                len: SDT_HEADER
            }
        );
    }

    #[test]
    fn the_rsdp_is_found_on_a_16_byte_boundary_of_the_bios_area() {
        let mut area = vec![0u8; 0x2_0000];
        // A signature with a wrong checksum first, then the real one.
        area[0x100..0x108].copy_from_slice(RSDP_SIGNATURE);
        area[0x100 + 8] = 1;
        area[0x5A00..0x5A00 + RSDP_V1].copy_from_slice(&rsdp(0, 0x6000, 0)[..]);
        assert_eq!(find_rsdp(&area, 0xE_0000), Some(0xE_5A00));
        assert_eq!(find_rsdp(&area[..0x5A00], 0xE_0000), None);
    }
}
