//! The architecture-specific start of the header page: which record the image kernel's
//! `arch_hibernation_header_save()` wrote there (x86_64, arm64), or the generic utsname of
//! architectures without one; how to tell them apart, decode and encode them; and the checks
//! only snapboot can make for arm64 before the first page reaches the kernel.
//!
//! arm64 (`arch/arm64/kernel/hibernate.c`, 6.1), natural alignment, little-endian:
//!
//! ```text
//! offset  size  struct arch_hibernate_hdr
//! ------  ----  --------------------------------------------------------------
//! 0x00      65  invariants.uts_version  (`uname -v` of the image kernel, NUL-terminated)
//! 0x41       7  padding (zero)
//! 0x48       8  ttbr1_el1               (phys. address of the image kernel's swapper_pg_dir)
//! 0x50       8  reenter_kernel          (virt. address of _cpu_resume)
//! 0x58       8  __hyp_stub_vectors      (phys. address, 0 without EL2)
//! 0x60       8  sleep_cpu_mpidr         (MPIDR affinity of the CPU that hibernated)
//! 0x68          end
//! ```
//!
//! The restoring arm64 kernel refuses an image whose `uts_version` is not its own and one
//! whose sleep CPU it cannot find; it has no check of the memory layout (see
//! [`crate::MemoryMap`]).

use super::page::{le_u64, offsets, Page};
use crate::identity::Incompat;
use alloc::string::String;
use serde::Serialize;

/// `RESTORE_MAGIC` of `arch/x86/power/hibernate.c` for `CONFIG_X86_64`.
pub const X86_64_RESTORE_MAGIC: u64 = 0x2345_6789_ABCD_EF02;
/// Bytes of arm64's `invariants.uts_version` (`__NEW_UTS_LEN + 1`).
pub const ARM64_UTS_VERSION_LEN: usize = 65;
/// The MPIDR bits a CPU's device-tree `reg` and the kernel's `cpu_logical_map()` hold
/// (`MPIDR_HWID_BITMASK`: Aff3 and Aff2..Aff0).
pub const MPIDR_HWID_MASK: u64 = 0xff_00ff_ffff;

const _: () = assert!(ARM64_UTS_VERSION_LEN.next_multiple_of(8) == offsets::ARM64_TTBR1_EL1);

/// The architecture-specific part of the header page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ArchRecord {
    /// x86_64 `struct restore_data_record`.
    X86_64 {
        /// Virtual address of `restore_registers` in the image kernel.
        jump_address: u64,
        /// Physical address of `restore_registers`.
        jump_address_phys: u64,
        /// Image kernel's CR3 with PCID bits cleared.
        cr3: u64,
        /// [`X86_64_RESTORE_MAGIC`].
        magic: u64,
        /// crc32 of the firmware e820 table (the restoring kernel rejects
        /// the image if its memory map differs).
        e820_checksum: u64,
    },
    /// arm64 `struct arch_hibernate_hdr`.
    Arm64 {
        /// `uname -v` of the image kernel; the restoring kernel must have the same.
        uts_version: String,
        /// Physical address of the image kernel's page tables (`swapper_pg_dir`).
        ttbr1_el1: u64,
        /// Virtual address the restored kernel re-enters at (`_cpu_resume`).
        reenter_kernel: u64,
        /// Physical address of `__hyp_stub_vectors` (0 when booted without EL2).
        hyp_stub_vectors: u64,
        /// MPIDR of the CPU that hibernated: the restore runs on it.
        sleep_cpu_mpidr: u64,
    },
    /// Architectures without an arch header: the generic utsname + version.
    Utsname {
        /// `uts.sysname`.
        sysname: String,
        /// `uts.release`.
        release: String,
        /// `uts.version`.
        version: String,
        /// `uts.machine`.
        machine: String,
        /// `LINUX_VERSION_CODE` of the image kernel.
        version_code: u32,
    },
}

fn cstr(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The arm64 `uts_version` in `field` (65 bytes): printable ASCII starting with `#`, a NUL,
/// and only zeros after it, as `strscpy()` into a zeroed page leaves it. `None` otherwise.
fn arm64_uts_version(field: &[u8]) -> Option<String> {
    let end = field.iter().position(|&b| b == 0)?;
    let (text, rest) = field.split_at(end);
    let printable = text.iter().all(|b| (0x20..0x7f).contains(b));
    (text.first() == Some(&b'#') && printable && rest.iter().all(|&b| b == 0))
        .then(|| String::from_utf8_lossy(text).into_owned())
}

fn put(page: &mut Page, off: usize, v: u64) {
    page[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Copies at most `room - 1` bytes of `s` to `page[off..]`, leaving room for the NUL.
fn put_str(page: &mut Page, off: usize, room: usize, s: &str) {
    let n = s.len().min(room - 1);
    page[off..off + n].copy_from_slice(&s.as_bytes()[..n]);
}

impl ArchRecord {
    /// Which record page 0 starts with: the x86_64 magic first, then an arm64 uts version,
    /// then a generic utsname. `None`: none of them.
    pub fn decode(page: &Page) -> Option<Self> {
        let magic = le_u64(page, offsets::X86_MAGIC);
        if magic == X86_64_RESTORE_MAGIC {
            return Some(ArchRecord::X86_64 {
                jump_address: le_u64(page, offsets::X86_JUMP_ADDRESS),
                jump_address_phys: le_u64(page, offsets::X86_JUMP_ADDRESS_PHYS),
                cr3: le_u64(page, offsets::X86_CR3),
                magic,
                e820_checksum: le_u64(page, offsets::X86_E820_CHECKSUM),
            });
        }
        if let Some(uts_version) = arm64_uts_version(&page[..ARM64_UTS_VERSION_LEN]) {
            return Some(ArchRecord::Arm64 {
                uts_version,
                ttbr1_el1: le_u64(page, offsets::ARM64_TTBR1_EL1),
                reenter_kernel: le_u64(page, offsets::ARM64_REENTER_KERNEL),
                hyp_stub_vectors: le_u64(page, offsets::ARM64_HYP_STUB_VECTORS),
                sleep_cpu_mpidr: le_u64(page, offsets::ARM64_SLEEP_CPU_MPIDR),
            });
        }
        if page.starts_with(b"Linux\0") {
            let field = |i: usize| cstr(&page[i * 65..(i + 1) * 65]);
            let mut code = [0u8; 4];
            code.copy_from_slice(&page[offsets::VERSION_CODE..offsets::VERSION_CODE + 4]);
            return Some(ArchRecord::Utsname {
                sysname: field(0),
                release: field(2),
                version: field(3),
                machine: field(4),
                version_code: u32::from_le_bytes(code),
            });
        }
        None
    }

    /// Writes the record over the start of a zero-filled header page.
    pub fn encode_into(&self, page: &mut Page) {
        match self {
            ArchRecord::X86_64 {
                jump_address,
                jump_address_phys,
                cr3,
                magic,
                e820_checksum,
            } => {
                put(page, offsets::X86_JUMP_ADDRESS, *jump_address);
                put(page, offsets::X86_JUMP_ADDRESS_PHYS, *jump_address_phys);
                put(page, offsets::X86_CR3, *cr3);
                put(page, offsets::X86_MAGIC, *magic);
                put(page, offsets::X86_E820_CHECKSUM, *e820_checksum);
            }
            ArchRecord::Arm64 {
                uts_version,
                ttbr1_el1,
                reenter_kernel,
                hyp_stub_vectors,
                sleep_cpu_mpidr,
            } => {
                put_str(page, 0, ARM64_UTS_VERSION_LEN, uts_version);
                put(page, offsets::ARM64_TTBR1_EL1, *ttbr1_el1);
                put(page, offsets::ARM64_REENTER_KERNEL, *reenter_kernel);
                put(page, offsets::ARM64_HYP_STUB_VECTORS, *hyp_stub_vectors);
                put(page, offsets::ARM64_SLEEP_CPU_MPIDR, *sleep_cpu_mpidr);
            }
            ArchRecord::Utsname {
                sysname,
                release,
                version,
                machine,
                version_code,
            } => {
                for (i, s) in [(0, sysname), (2, release), (3, version), (4, machine)] {
                    put_str(page, i * 65, 65, s);
                }
                page[offsets::VERSION_CODE..offsets::VERSION_CODE + 4]
                    .copy_from_slice(&version_code.to_le_bytes());
            }
        }
    }

    /// The x86 restore magic, if this is an x86_64 record.
    pub fn x86_magic(&self) -> Option<u64> {
        match self {
            ArchRecord::X86_64 { magic, .. } => Some(*magic),
            _ => None,
        }
    }

    /// The x86 e820 checksum, if this is an x86_64 record.
    pub fn e820_checksum(&self) -> Option<u64> {
        match self {
            ArchRecord::X86_64 { e820_checksum, .. } => Some(*e820_checksum),
            _ => None,
        }
    }

    /// The checks the restoring kernel makes of an arm64 record, made before any page is
    /// written, so a refusal is a clean cold boot: `version` is the `uname -v` the image
    /// must have been made by (the kernel that restores it); `cpus` are the MPIDRs of this
    /// machine's CPUs (empty: not known, e.g. an ACPI machine, and the kernel's own check
    /// stands). x86_64 and generic records pass: their kernels refuse cleanly themselves.
    pub fn check_restorable(&self, version: &str, cpus: &[u64]) -> Result<(), Incompat> {
        let ArchRecord::Arm64 {
            uts_version,
            sleep_cpu_mpidr,
            ..
        } = self
        else {
            return Ok(());
        };
        if uts_version != version {
            return Err(Incompat::HeaderKernel {
                image: uts_version.clone(),
                running: version.into(),
            });
        }
        let want = sleep_cpu_mpidr & MPIDR_HWID_MASK;
        if !cpus.is_empty() && !cpus.iter().any(|&c| c & MPIDR_HWID_MASK == want) {
            return Err(Incompat::NoSleepCpu {
                mpidr: *sleep_cpu_mpidr,
                cpus: cpus.to_vec(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PAGE_SIZE;

    const VERSION: &str = "#1 SMP Debian 6.1.192-2 (2026-11-16)";

    fn arm64() -> ArchRecord {
        ArchRecord::Arm64 {
            uts_version: VERSION.into(),
            ttbr1_el1: 0x4213_a000,
            reenter_kernel: 0xffff_8000_0802_1000,
            hyp_stub_vectors: 0x4020_0800,
            sleep_cpu_mpidr: 0x1,
        }
    }

    #[test]
    fn arm64_record_sits_at_the_kernel_offsets() {
        let mut page = [0u8; PAGE_SIZE];
        arm64().encode_into(&mut page);
        assert_eq!(&page[..VERSION.len()], VERSION.as_bytes());
        assert!(page[VERSION.len()..72].iter().all(|&b| b == 0));
        assert_eq!(le_u64(&page, 72), 0x4213_a000);
        assert_eq!(le_u64(&page, 80), 0xffff_8000_0802_1000);
        assert_eq!(le_u64(&page, 88), 0x4020_0800);
        assert_eq!(le_u64(&page, 96), 1);
        assert_eq!(ArchRecord::decode(&page), Some(arm64()));
    }

    #[test]
    fn bytes_that_are_not_a_uts_version_are_no_arm64_record() {
        let mut good = [0u8; PAGE_SIZE];
        arm64().encode_into(&mut good);
        let mut no_hash = good;
        no_hash[0] = b'1';
        let mut unprintable = good;
        unprintable[3] = 0x07;
        let mut no_nul = good;
        no_nul[..65].fill(b'#');
        let mut junk_after_nul = good;
        junk_after_nul[60] = b'x';
        for page in [no_hash, unprintable, no_nul, junk_after_nul, [0; PAGE_SIZE]] {
            assert_eq!(ArchRecord::decode(&page), None);
        }
    }

    #[test]
    fn arm64_checks_name_the_kernel_and_the_missing_cpu() {
        let r = arm64();
        assert_eq!(r.check_restorable(VERSION, &[0, 1, 2, 3]), Ok(()));
        // Bits outside the affinity fields (MPIDR.U, bit 31) do not tell CPUs apart.
        assert_eq!(r.check_restorable(VERSION, &[0x8000_0001]), Ok(()));
        assert_eq!(r.check_restorable(VERSION, &[]), Ok(()));
        let e = r.check_restorable("#2 SMP", &[1]).unwrap_err().to_string();
        assert!(e.contains(VERSION) && e.contains("#2 SMP"), "{e}");
        let e = r
            .check_restorable(VERSION, &[0, 0x100])
            .unwrap_err()
            .to_string();
        assert!(e.contains("MPIDR 0x1") && e.contains("0x0, 0x100"), "{e}");
        // x86_64 records are the kernel's to check.
        let x86 = ArchRecord::X86_64 {
            jump_address: 0,
            jump_address_phys: 0,
            cr3: 0,
            magic: X86_64_RESTORE_MAGIC,
            e820_checksum: 0,
        };
        assert_eq!(x86.check_restorable("#2", &[]), Ok(()));
    }
}
