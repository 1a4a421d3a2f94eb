//! A store in a partition: `snapboot.store=PARTUUID=` or `PARTLABEL=` (a
//! `bootparams::StoreAddress`) found in the GPTs of the PC's virtio disks, read as the
//! kernel reads them ([`parttable`], the device's own reader). The store then lives in the
//! partition's [`Span`] of its disk. An MBR partition's `SSSSSSSS-PP` PARTUUID gives no
//! place here (the table reader keeps only an MBR's signature): it is refused with that
//! reason. Partition `N` of `vdX` is `vdXN`, entry `N-1` of its table.

use crate::disk::{Disk, DiskSet, Span, SECTOR};
use crate::virtio::vd_letter;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use parttable::{read_table, Table};

/// A partition named by `snapboot.store=`: an address of a partition form
/// (`PARTUUID=`, `PARTLABEL=`), matched by [`bootparams::StoreAddress::names_partition`],
/// the device's own rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartAddress<'a>(&'a bootparams::StoreAddress);

impl<'a> PartAddress<'a> {
    /// The partition `address` names, if it names one.
    pub fn of(address: &'a bootparams::StoreAddress) -> Option<Self> {
        address
            .names_partition("", None)
            .map(|_| PartAddress(address))
    }
}

/// Where the partition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its disk (`vda` is 0).
    pub disk: usize,
    /// Its number on that disk.
    pub number: u32,
    /// Its bytes on that disk.
    pub span: Span,
}

impl Found {
    /// Its kernel name (`vdb2`).
    pub fn name(&self) -> String {
        format!("vd{}{}", vd_letter(self.disk), self.number)
    }
}

/// Why no one partition is the store's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FindError {
    /// The partition lies partly outside its disk.
    #[error("{name} runs past the end of its disk ({bytes} bytes from byte {offset}, the disk has {disk})")]
    PastEnd {
        /// Its kernel name.
        name: String,
        /// Its bytes.
        bytes: u64,
        /// Where it starts.
        offset: u64,
        /// The disk's bytes.
        disk: u64,
    },
    /// An MBR `SSSSSSSS-PP` PARTUUID: the table reader keeps no place for it.
    #[error("{address}: an MBR partition's PARTUUID gives the restorer no place (it finds GPT partitions only)")]
    Mbr {
        /// The address.
        address: String,
    },
    /// No partition has the address.
    #[error("no GPT partition is {address} (searched: {})", searched.join("; "))]
    None {
        /// The address.
        address: String,
        /// Each disk and partition looked at, with what it has.
        searched: Vec<String>,
    },
    /// Several have it: either could be the wrong one.
    #[error("{address} names {} partitions: {}", names.len(), names.join(", "))]
    Several {
        /// The address.
        address: String,
        /// Their kernel names.
        names: Vec<String>,
    },
}

/// The bytes of partition `number` in the GPT of `disk` (none: no GPT, no such entry, or
/// one that runs past the disk's end).
pub fn numbered<D: Disk>(disk: &mut D, number: u32) -> Option<Span> {
    let size = disk.size();
    let Ok(Table::Gpt(parts)) = read_table(SECTOR, |buf, at| disk.read(at, buf)) else {
        return None;
    };
    let (_, ids) = parts.into_iter().find(|(n, _)| *n == number)?;
    let span = Span {
        offset: ids.start_sector? * SECTOR,
        size: ids.sectors? * SECTOR,
    };
    (span.offset.checked_add(span.size)? <= size).then_some(span)
}

/// Finds the one partition `want` names on the first `count` disks of `disks`; else says
/// why, with what each disk's table holds.
pub fn find<S: DiskSet>(
    disks: &mut S,
    count: usize,
    want: PartAddress,
) -> Result<Found, FindError> {
    let mut found: Vec<Found> = Vec::new();
    let mut searched: Vec<String> = Vec::new();
    for i in 0..count {
        let Some(d) = disks.disk(i) else { continue };
        let size = d.size();
        let table = read_table(SECTOR, |buf, at| d.read(at, buf));
        let parts = match table {
            Ok(Table::Gpt(parts)) => parts,
            Ok(Table::Mbr(sig)) => {
                searched.push(format!("vd{}: MBR {sig:08x}", vd_letter(i)));
                continue;
            }
            Err(e) => {
                searched.push(format!("vd{}: {e}", vd_letter(i)));
                continue;
            }
        };
        for (number, ids) in parts {
            let hit = want.0.names_partition(&ids.uuid, ids.label.as_deref()) == Some(true);
            let name = format!("vd{}{number}", vd_letter(i));
            searched.push(format!(
                "{name}: {}",
                bootparams::partition_ids_text(&ids.uuid, ids.label.as_deref())
            ));
            if !hit {
                continue;
            }
            let (Some(start), Some(sectors)) = (ids.start_sector, ids.sectors) else {
                continue;
            };
            let span = Span {
                offset: start * SECTOR,
                size: sectors * SECTOR,
            };
            if span
                .offset
                .checked_add(span.size)
                .is_none_or(|end| end > size)
            {
                return Err(FindError::PastEnd {
                    name,
                    bytes: span.size,
                    offset: span.offset,
                    disk: size,
                });
            }
            found.push(Found {
                disk: i,
                number,
                span,
            });
        }
    }
    let address = want.0.to_string();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 if matches!(want.0, bootparams::StoreAddress::PartUuid(u) if u.len() == 11) => {
            Err(FindError::Mbr { address })
        }
        0 => Err(FindError::None { address, searched }),
        _ => Err(FindError::Several {
            address,
            names: found.iter().map(Found::name).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{MemDisk, Part};
    use parttable::testdisk::gpt;

    const U1: &str = "5c3a0f6e-1d2b-4c8e-9f00-0123456789ab";
    const U2: &str = "00112233-4455-6677-8899-aabbccddeeff";

    struct Set<'a>(Vec<MemDisk<'a>>);

    /// Finds the partition `address` names.
    fn find_by<S: DiskSet>(disks: &mut S, count: usize, address: &str) -> Result<Found, FindError> {
        let a = bootparams::StoreAddress::parse(address).unwrap();
        find(disks, count, PartAddress::of(&a).unwrap())
    }

    impl<'a> DiskSet for Set<'a> {
        type Disk = MemDisk<'a>;
        fn disk(&mut self, index: usize) -> Option<&mut MemDisk<'a>> {
            self.0.get_mut(index)
        }
    }

    #[test]
    fn a_partition_is_found_by_partuuid_in_any_case_or_by_partlabel() {
        let zeros = vec![0u8; 1 << 20];
        let mut d = gpt(&[Some((U1, "boot", 34)), None, Some((U2, "snapstore", 256))]);
        // Partition 3's sectors (256..=263, `testdisk` makes 8 of them) hold a marker.
        d[256 * 512..264 * 512].fill(0x5a);
        let mut set = Set(vec![MemDisk(&zeros), MemDisk(&d)]);
        let f = find_by(&mut set, 2, "PARTLABEL=snapstore").unwrap();
        assert_eq!(f.name(), "vdb3");
        assert_eq!(
            f.span,
            Span {
                offset: 256 * 512,
                size: 8 * 512
            }
        );
        let upper = U2.to_uppercase();
        let address = bootparams::StoreAddress::parse(&format!("PARTUUID={upper}")).unwrap();
        assert_eq!(
            find(&mut set, 2, PartAddress::of(&address).unwrap()),
            Ok(f.clone())
        );
        // Read through its span, the partition starts with its own bytes.
        let mut p = Part {
            disk: MemDisk(&d),
            span: f.span,
        };
        let mut buf = [0u8; 512];
        p.read(0, &mut buf).unwrap();
        assert_eq!(buf, [0x5a; 512]);
        assert!(p.read(8 * 512, &mut buf).is_err(), "nothing past its end");
    }

    #[test]
    fn a_missing_twice_named_or_mbr_partition_is_refused_with_what_was_searched() {
        let a = gpt(&[Some((U1, "snapstore", 34))]);
        let b = gpt(&[Some((U2, "snapstore", 34))]);
        let zeros = vec![0u8; 1 << 20];
        let mut set = Set(vec![MemDisk(&a), MemDisk(&zeros), MemDisk(&b)]);
        let e = find_by(&mut set, 3, "PARTLABEL=snapstore")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "PARTLABEL=snapstore names 2 partitions: vda1, vdc1");
        let e = find_by(&mut set, 3, "PARTLABEL=other")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("no GPT partition is PARTLABEL=other (searched: vda1: PARTUUID=5c3a0f6e"),
            "{e}"
        );
        assert!(e.contains("vdb: no GPT or MBR partition table"), "{e}");
        let e = find_by(&mut set, 3, "PARTUUID=1234abcd-02")
            .unwrap_err()
            .to_string();
        assert!(e.contains("MBR partition's PARTUUID"), "{e}");
        for other in ["LABEL=x", "/dev/vdb"] {
            let a = bootparams::StoreAddress::parse(other).unwrap();
            assert_eq!(PartAddress::of(&a), None);
        }
    }
}
