//! A disk's partition table, read the way the kernel reads it, for finding a partition by
//! `PARTUUID=` or `PARTLABEL=` before udev (there is no blkid in the initramfs):
//!
//! ```text
//! GPT (UEFI 2.10 §5.3), LBA = the disk's logical block size
//! LBA 0   protective MBR
//! LBA 1   header   0x00 "EFI PART"   0x0c header size   0x10 header CRC32 (of header size
//!                  bytes, this field zero)   0x48 entries' LBA   0x50 entry count
//!                  0x54 entry size   0x58 entries' CRC32
//! LBA 2.. entries  0x00 type GUID (zero: unused)   0x10 unique GUID   0x20 first LBA
//!                  0x28 last LBA   0x38 name, 36 UTF-16LE code units
//!
//! MBR     0x1b8 disk signature (u32 LE)   0x1be four entries of 16 bytes (0x04 type)
//!         0x1fe 0x55 0xaa
//! ```
//!
//! Partition N of a GPT disk is entry N-1 (the kernel numbers them so, skipping unused
//! entries without renumbering). An MBR partition's PARTUUID is the disk signature and the
//! partition number, `SSSSSSSS-PP`, as the kernel forms it, logical partitions included.
//! Only the primary GPT header is read; a disk whose primary header or entries fail their
//! CRC32 has no GPT here.
//!
//! `no_std` with `alloc`: the device finds its store with it (`devsys::locate`), and so
//! does the freestanding restorer on the PC's virtio disks.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use thiserror::Error;

/// What a partition is called in its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionIds {
    /// `PARTUUID=`: the GPT unique GUID or the MBR `SSSSSSSS-PP`, lower case.
    pub uuid: String,
    /// `PARTLABEL=`: the GPT name (MBR partitions have none).
    pub label: Option<String>,
    /// First sector (512 bytes), to check against what the kernel says (GPT only).
    pub start_sector: Option<u64>,
    /// Sectors (512 bytes) it spans, from its first to its last LBA (GPT only).
    pub sectors: Option<u64>,
}

/// A disk's partition table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Table {
    /// GPT: every used entry, by partition number (entry index + 1).
    Gpt(Vec<(u32, PartitionIds)>),
    /// MBR: the disk signature.
    Mbr(u32),
}

/// Why a disk has no partition table snapboot can read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TableError {
    /// Neither a GPT header nor an MBR boot signature.
    #[error("no GPT or MBR partition table")]
    None,
    /// The GPT header's CRC32 does not match.
    #[error("GPT header CRC32 mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc {
        /// In the header.
        stored: u32,
        /// Of the header.
        computed: u32,
    },
    /// The GPT header describes an impossible entry array.
    #[error("GPT header: header size {header_size}, {count} entries of {size} bytes")]
    Geometry {
        /// Header size field.
        header_size: u32,
        /// Entry count.
        count: u32,
        /// Entry size.
        size: u32,
    },
    /// The entries' CRC32 does not match.
    #[error("GPT entries CRC32 mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    EntriesCrc {
        /// In the header.
        stored: u32,
        /// Of the entries.
        computed: u32,
    },
    /// Reading the disk failed.
    #[error("reading {what} at byte {at}: {reason}")]
    Read {
        /// What was being read.
        what: &'static str,
        /// Where.
        at: u64,
        /// The I/O error's text.
        reason: String,
    },
}

/// Most bytes of GPT entries read (the usual 128 entries take 16 KiB).
const MAX_ENTRY_BYTES: u64 = 1 << 20;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// A GUID in its usual text form (the first three fields are stored little-endian).
pub fn guid_text(g: &[u8]) -> String {
    let mut s = format!(
        "{:08x}-{:04x}-{:04x}-",
        u32_at(g, 0),
        u16::from_le_bytes([g[4], g[5]]),
        u16::from_le_bytes([g[6], g[7]])
    );
    for (i, b) in g[8..16].iter().enumerate() {
        if i == 2 {
            s.push('-');
        }
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Reads the partition table of a disk with logical blocks of `lbs` bytes; `read(buf, at)`
/// fills `buf` from byte `at` (whole logical blocks).
pub fn read_table<E: core::fmt::Display>(
    lbs: u64,
    mut read: impl FnMut(&mut [u8], u64) -> Result<(), E>,
) -> Result<Table, TableError> {
    let mut get = |what, len: u64, at: u64| {
        let mut b = vec![0u8; len as usize];
        read(&mut b, at).map_err(|e| TableError::Read {
            what,
            at,
            reason: e.to_string(),
        })?;
        Ok::<_, TableError>(b)
    };
    let header = get("the GPT header", lbs, lbs)?;
    if &header[..8] == b"EFI PART" {
        return read_gpt(lbs, &header, |len, at| {
            // Whole logical blocks are read; the entries are the first `len` bytes.
            let mut b = get("the GPT entries", len.next_multiple_of(lbs), at)?;
            b.truncate(len as usize);
            Ok(b)
        });
    }
    let mbr = get("the MBR", lbs.max(512), 0)?;
    let protective = (0..4).any(|i| mbr[0x1be + 16 * i + 4] == 0xee);
    if mbr[0x1fe..0x200] == [0x55, 0xaa] && !protective {
        return Ok(Table::Mbr(u32_at(&mbr, 0x1b8)));
    }
    Err(TableError::None)
}

fn read_gpt(
    lbs: u64,
    h: &[u8],
    get: impl FnOnce(u64, u64) -> Result<Vec<u8>, TableError>,
) -> Result<Table, TableError> {
    let (header_size, count, size) = (u32_at(h, 0x0c), u32_at(h, 0x50), u32_at(h, 0x54));
    let bytes = u64::from(count) * u64::from(size);
    if !(92..=lbs).contains(&u64::from(header_size))
        || size < 128
        || !size.is_multiple_of(8)
        || bytes > MAX_ENTRY_BYTES
    {
        return Err(TableError::Geometry {
            header_size,
            count,
            size,
        });
    }
    let mut hb = h[..header_size as usize].to_vec();
    hb[0x10..0x14].fill(0);
    let (stored, computed) = (u32_at(h, 0x10), crc32fast::hash(&hb));
    if stored != computed {
        return Err(TableError::HeaderCrc { stored, computed });
    }
    let entries = get(bytes, u64_at(h, 0x48).saturating_mul(lbs))?;
    let (stored, computed) = (u32_at(h, 0x58), crc32fast::hash(&entries));
    if stored != computed {
        return Err(TableError::EntriesCrc { stored, computed });
    }
    let parts = entries
        .chunks_exact(size as usize)
        .enumerate()
        .filter(|(_, e)| e[..16].iter().any(|&b| b != 0))
        .map(|(i, e)| {
            let name: Vec<u16> = e[0x38..0x80]
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .take_while(|&c| c != 0)
                .collect();
            let ids = PartitionIds {
                uuid: guid_text(&e[0x10..0x20]),
                label: Some(String::from_utf16_lossy(&name)),
                start_sector: Some(u64_at(e, 0x20).saturating_mul(lbs / 512)),
                sectors: Some(
                    (u64_at(e, 0x28).saturating_add(1))
                        .saturating_sub(u64_at(e, 0x20))
                        .saturating_mul(lbs / 512),
                ),
            };
            (i as u32 + 1, ids)
        })
        .collect();
    Ok(Table::Gpt(parts))
}

impl Table {
    /// Partition `number`'s ids, as the kernel numbers partitions of this table.
    pub fn partition(&self, number: u32) -> Option<PartitionIds> {
        match self {
            Table::Gpt(parts) => parts
                .iter()
                .find(|(n, _)| *n == number)
                .map(|(_, p)| p.clone()),
            Table::Mbr(sig) => Some(PartitionIds {
                uuid: format!("{sig:08x}-{number:02x}"),
                label: None,
                start_sector: None,
                sectors: None,
            }),
        }
    }
}

/// A GPT disk image in memory, for tests here and in the crates that use this one
/// (feature `testdisk`).
#[cfg(any(test, feature = "testdisk"))]
pub mod testdisk {
    use alloc::string::String;
    use alloc::vec;
    use alloc::vec::Vec;

    /// A GUID whose text form is `text` (8-4-4-4-12).
    pub fn guid(text: &str) -> [u8; 16] {
        let h: String = text.chars().filter(|c| *c != '-').collect();
        let b: Vec<u8> = (0..16)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let mut g = [0u8; 16];
        g[..4].copy_from_slice(&[b[3], b[2], b[1], b[0]]);
        g[4..6].copy_from_slice(&[b[5], b[4]]);
        g[6..8].copy_from_slice(&[b[7], b[6]]);
        g[8..].copy_from_slice(&b[8..]);
        g
    }

    /// A 1 MiB disk of 512-byte sectors with a GPT whose entry `i` (when `Some`) is
    /// (unique GUID text, name, first LBA).
    pub fn gpt(parts: &[Option<(&str, &str, u64)>]) -> Vec<u8> {
        let mut d = vec![0u8; 1 << 20];
        d[0x1be + 4] = 0xee;
        d[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
        let mut entries = vec![0u8; 128 * 128];
        for (i, p) in parts.iter().enumerate() {
            let Some((uuid, name, first)) = p else {
                continue;
            };
            let e = &mut entries[i * 128..(i + 1) * 128];
            e[..16].copy_from_slice(&guid("0fc63daf-8483-4772-8e79-3d69d8477de4"));
            e[16..32].copy_from_slice(&guid(uuid));
            e[32..40].copy_from_slice(&first.to_le_bytes());
            e[40..48].copy_from_slice(&(first + 7).to_le_bytes());
            for (j, c) in name.encode_utf16().enumerate() {
                e[56 + 2 * j..58 + 2 * j].copy_from_slice(&c.to_le_bytes());
            }
        }
        d[1024..1024 + entries.len()].copy_from_slice(&entries);
        let h = &mut d[512..604];
        h[..8].copy_from_slice(b"EFI PART");
        h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
        h[12..16].copy_from_slice(&92u32.to_le_bytes());
        h[0x48..0x50].copy_from_slice(&2u64.to_le_bytes());
        h[0x50..0x54].copy_from_slice(&128u32.to_le_bytes());
        h[0x54..0x58].copy_from_slice(&128u32.to_le_bytes());
        h[0x58..0x5c].copy_from_slice(&crc32fast::hash(&entries).to_le_bytes());
        let crc = crc32fast::hash(h);
        h[0x10..0x14].copy_from_slice(&crc.to_le_bytes());
        d
    }
}

#[cfg(test)]
mod tests {
    use super::testdisk::gpt;
    use super::*;

    fn table(disk: &[u8]) -> Result<Table, TableError> {
        read_table(512, |b, at| {
            let at = at as usize;
            b.copy_from_slice(&disk[at..at + b.len()]);
            Ok::<(), String>(())
        })
    }

    const U1: &str = "5c3a0f6e-1d2b-4c8e-9f00-0123456789ab";
    const U3: &str = "00112233-4455-6677-8899-aabbccddeeff";

    #[test]
    fn gpt_partitions_are_numbered_by_entry_and_named() {
        let d = gpt(&[
            Some((U1, "boot", 2048)),
            None,
            Some((U3, "snapstore", 4096)),
        ]);
        let t = table(&d).unwrap();
        let p1 = t.partition(1).unwrap();
        assert_eq!((p1.uuid.as_str(), p1.label.as_deref()), (U1, Some("boot")));
        assert_eq!(p1.start_sector, Some(2048));
        assert_eq!(p1.sectors, Some(8), "first LBA to last LBA, both included");
        assert_eq!(t.partition(2), None, "an unused entry keeps its number");
        let p3 = t.partition(3).unwrap();
        assert_eq!(
            (p3.uuid.as_str(), p3.label.as_deref()),
            (U3, Some("snapstore"))
        );
    }

    #[test]
    fn damaged_gpt_headers_and_entries_are_refused() {
        let good = gpt(&[Some((U1, "boot", 2048))]);
        let mut d = good.clone();
        d[512 + 0x20] ^= 1;
        assert!(matches!(table(&d), Err(TableError::HeaderCrc { .. })));
        let mut d = good.clone();
        d[1024 + 0x38] ^= 1;
        assert!(matches!(table(&d), Err(TableError::EntriesCrc { .. })));
        let mut d = good;
        d[512 + 0x54] = 0x10;
        assert!(matches!(table(&d), Err(TableError::Geometry { .. })));
    }

    #[test]
    fn an_mbr_partition_is_the_signature_and_its_number() {
        let mut d = vec![0u8; 4096];
        d[0x1b8..0x1bc].copy_from_slice(&0x1234_abcdu32.to_le_bytes());
        d[0x1be + 4] = 0x83;
        d[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
        let t = table(&d).unwrap();
        assert_eq!(t, Table::Mbr(0x1234_abcd));
        assert_eq!(t.partition(5).unwrap().uuid, "1234abcd-05");
        assert_eq!(table(&[0u8; 4096]), Err(TableError::None));
    }
}
