//! Where the kernel pack is (the stock kernel and its initramfs, `kernelpack`'s format) and
//! what the restorer reads of it before any image: the kernel's `uname -r` and `uname -v`
//! (an image must have been captured on that kernel) and the initramfs whole (its trust
//! rule and boot setup, `crate::stockinit`). Both programs use it: the PVH one over its
//! virtio disks, the EFI one over the firmware's Block I/O disks.
//!
//! `snapboot.coldkernel=` names the pack: a whole disk (`/dev/vdX`), or a GPT partition
//! (`PARTLABEL=`, `PARTUUID=`, as `snapboot.store=` names one); without it, the first whole
//! disk whose first sector starts with the pack's magic.

use crate::disk::{Disk, DiskError, DiskSet, Part, Span, SECTOR};
use crate::gpt::{self, PartAddress};
use crate::virtio::{vd_index, vd_letter};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use bootparams::StoreAddress;
use kernelpack::{cmdline, Header, PackError, Payload};

/// Why the pack could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PackReadError {
    /// `snapboot.coldkernel=` names a disk that is not there.
    #[error("snapboot.coldkernel names /dev/vd{letter}, but there are {disks} disks")]
    NoSuchDisk {
        /// The disk's letter.
        letter: char,
        /// Disks found.
        disks: usize,
    },
    /// `snapboot.coldkernel=` names a partition that is not there (or not one).
    #[error("snapboot.coldkernel={address}: {why}")]
    NoPartition {
        /// The address as written.
        address: String,
        /// Why it names none.
        why: String,
    },
    /// The pack's kernel has no version string naming the header's release.
    #[error("the kernel in the pack on {name} has no version string of release {release}")]
    Version {
        /// Where the pack is.
        name: String,
        /// The release the pack's header names.
        release: kernelpack::Release,
    },
    /// No disk starts with the pack's magic.
    #[error("no kernel pack on any of the {0} disks")]
    NoPack(usize),
    /// A read failed.
    #[error("reading the {what} from {name}: {error}")]
    Disk {
        /// What was read.
        what: &'static str,
        /// Where the pack is.
        name: String,
        /// Why it failed.
        error: DiskError,
    },
    /// The pack is damaged or not one.
    #[error("kernel pack on {name}: {error}")]
    Pack {
        /// Where the pack is.
        name: String,
        /// What is wrong.
        error: PackError,
    },
}

/// Where the pack lies: bytes `span` of disk `disk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackAt {
    /// The disk (`vda` is 0).
    pub disk: usize,
    /// The pack's bytes on it.
    pub span: Span,
    /// Its name in messages (`/dev/vdb`, `vda3`).
    pub name: String,
}

/// Finds the pack among the first `count` disks of `disks` (see the module docs); reads
/// first sectors into `scratch` (at least one sector).
pub fn locate<S: DiskSet>(
    disks: &mut S,
    count: usize,
    cmd: &str,
    scratch: &mut [u8],
) -> Result<PackAt, PackReadError> {
    let whole = |disks: &mut S, i: usize| {
        disks.disk(i).map(|d| PackAt {
            disk: i,
            span: Span {
                offset: 0,
                size: d.size(),
            },
            name: alloc::format!("/dev/vd{}", vd_letter(i)),
        })
    };
    if let Some(value) = cmdline::value_of(cmd, cmdline::COLDKERNEL) {
        if let Some(i) = vd_index(value) {
            return whole(disks, i).ok_or(PackReadError::NoSuchDisk {
                letter: vd_letter(i),
                disks: count,
            });
        }
        // A numbered partition of a virtio disk (`/dev/vda3`: the arm64 board's pack).
        if let Some((i, Some(number))) = crate::virtio::vd_part(value) {
            let disk = disks.disk(i).ok_or(PackReadError::NoSuchDisk {
                letter: vd_letter(i),
                disks: count,
            })?;
            let span =
                crate::gpt::numbered(disk, number).ok_or_else(|| PackReadError::NoPartition {
                    address: value.to_string(),
                    why: alloc::format!("the disk has no GPT partition {number}"),
                })?;
            return Ok(PackAt {
                disk: i,
                span,
                name: value.trim_start_matches("/dev/").to_string(),
            });
        }
        if let Ok(address) = StoreAddress::parse(value) {
            if let Some(want) = PartAddress::of(&address) {
                let found =
                    gpt::find(disks, count, want).map_err(|e| PackReadError::NoPartition {
                        address: value.to_string(),
                        why: e.to_string(),
                    })?;
                return Ok(PackAt {
                    disk: found.disk,
                    span: found.span,
                    name: found.name(),
                });
            }
        }
    }
    let sector = &mut scratch[..SECTOR as usize];
    for i in 0..count {
        let found = disks
            .disk(i)
            .is_some_and(|d| d.read(0, sector).is_ok() && sector[..8] == kernelpack::MAGIC);
        if found {
            return whole(disks, i).ok_or(PackReadError::NoPack(count));
        }
    }
    Err(PackReadError::NoPack(count))
}

/// The pack's bytes as a disk of their own.
pub fn part<'d, S: DiskSet>(
    disks: &'d mut S,
    at: &PackAt,
) -> Result<Part<&'d mut S::Disk>, PackReadError> {
    let disk = disks.disk(at.disk).ok_or(PackReadError::NoPack(at.disk))?;
    Ok(Part {
        disk,
        span: at.span,
    })
}

/// Reads `buf.len()` bytes (whole sectors) of `what` at `offset` of the pack at `name`.
pub fn read<D: Disk>(
    d: &mut D,
    name: &str,
    what: &'static str,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), PackReadError> {
    d.read(offset, buf).map_err(|error| PackReadError::Disk {
        what,
        name: name.to_string(),
        error,
    })
}

/// The kernel this PC boots cold: the kernel pack's, by `uname -r` and `uname -v`, which an
/// image must have been captured on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockKernel {
    /// `uname -r`.
    pub release: String,
    /// `uname -v`.
    pub version: String,
}

/// Reads the kernel pack's header and its kernel's version string (checked against the
/// header's release); the payloads are checked only when the cold boot reads them.
pub fn stock_kernel<S: DiskSet>(
    disks: &mut S,
    count: usize,
    cmd: &str,
) -> Result<StockKernel, PackReadError> {
    let (at, h) = header(disks, count, cmd)?;
    // An arm64 pack's writer recorded `uname -v` from the kernel's banner.
    if !h.uts_version.as_str().is_empty() {
        return Ok(StockKernel {
            release: h.release.as_str().into(),
            version: h.uts_version.as_str().into(),
        });
    }
    let mut d = part(disks, &at)?;
    let mut buf = alloc::vec![0u8; kernelpack::VERSION_HEAD];
    let n = (kernelpack::VERSION_HEAD as u64).min(h.kernel_len.next_multiple_of(SECTOR));
    read(
        &mut d,
        &at.name,
        "kernel's version",
        h.kernel_offset,
        &mut buf[..n as usize],
    )?;
    let version = kernelpack::bzimage_version(&buf[..n as usize]).ok();
    match version.and_then(kernelpack::uname_of) {
        Some((release, version)) if release == h.release.as_str() => Ok(StockKernel {
            release: release.into(),
            version: version.into(),
        }),
        _ => Err(PackReadError::Version {
            name: at.name.clone(),
            release: h.release,
        }),
    }
}

/// Finds the pack and reads its header: where it is and what the header says.
fn header<S: DiskSet>(
    disks: &mut S,
    count: usize,
    cmd: &str,
) -> Result<(PackAt, Header), PackReadError> {
    let mut head = alloc::vec![0u8; kernelpack::HEADER_LEN];
    let at = locate(disks, count, cmd, &mut head)?;
    let mut d = part(disks, &at)?;
    read(&mut d, &at.name, "kernel pack header", 0, &mut head)?;
    let h = Header::decode(&head).map_err(|error| PackReadError::Pack {
        name: at.name.clone(),
        error,
    })?;
    Ok((at, h))
}

/// Reads payload `p` of the pack at `at` whole and checks it against the header.
fn payload<S: DiskSet>(
    disks: &mut S,
    at: &PackAt,
    h: &Header,
    p: Payload,
) -> Result<Vec<u8>, PackReadError> {
    let mut d = part(disks, at)?;
    let len = h.len(p);
    let mut bytes = alloc::vec![0u8; len.next_multiple_of(SECTOR) as usize];
    read(&mut d, &at.name, p.name(), h.offset(p), &mut bytes)?;
    bytes.truncate(len as usize);
    h.check(p, [&bytes[..]])
        .map_err(|error| PackReadError::Pack {
            name: at.name.clone(),
            error,
        })?;
    Ok(bytes)
}

/// A pack's initramfs summary and the BLAKE3 of the initramfs its header names.
pub type Summary = (Vec<u8>, [u8; 32]);

/// Reads the kernel pack's initramfs summary (`crate::stockinit`'s module docs), checked
/// against the pack's header, with the initramfs BLAKE3 the header holds; `None` when the
/// pack has none.
pub fn stock_summary<S: DiskSet>(
    disks: &mut S,
    count: usize,
    cmd: &str,
) -> Result<Option<Summary>, PackReadError> {
    let (at, h) = header(disks, count, cmd)?;
    if !h.has_summary() {
        return Ok(None);
    }
    let bytes = payload(disks, &at, &h, Payload::Summary)?;
    Ok(Some((bytes, h.initrd_hash)))
}

/// Reads the kernel pack's initramfs whole, checked against the pack's BLAKE3: what the
/// restorer takes its trust rule and boot setup from (`crate::stockinit`) when the pack
/// carries no summary of it ([`stock_summary`]).
pub fn stock_initramfs<S: DiskSet>(
    disks: &mut S,
    count: usize,
    cmd: &str,
) -> Result<Vec<u8>, PackReadError> {
    let (at, h) = header(disks, count, cmd)?;
    payload(disks, &at, &h, Payload::Initramfs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;
    use kernelpack::{Header, Release};
    use parttable::testdisk::gpt;

    struct Set<'a>(Vec<MemDisk<'a>>);

    impl<'a> DiskSet for Set<'a> {
        type Disk = MemDisk<'a>;
        fn disk(&mut self, index: usize) -> Option<&mut MemDisk<'a>> {
            self.0.get_mut(index)
        }
    }

    /// The header of an arm64 pack whose writer read `uname -v` from the kernel's banner.
    fn arm64_header() -> [u8; kernelpack::HEADER_LEN] {
        Header {
            kernel_offset: 4096,
            kernel_len: 4096,
            initrd_offset: 8192,
            initrd_len: 4096,
            kernel_hash: [1; 32],
            initrd_hash: [2; 32],
            release: Release::new("6.1.0-56-arm64"),
            summary: (0, 0, [0; 32]),
            uts_version: Release::new("#1 SMP Debian 6.1.192-2 (2026-11-16)"),
        }
        .encode()
    }

    /// The arm64 board names its pack by a numbered partition (`/dev/vda3`); the kernel's
    /// `uname -v` comes from the pack's header (the banner lies megabytes into an arm64
    /// `Image`); a partition the disk does not have is named.
    #[test]
    fn an_arm64_pack_in_a_numbered_partition_gives_its_kernel_s_uname() {
        let u1 = "5c3a0f6e-1d2b-4c8e-9f00-0123456789ab";
        let u3 = "00112233-4455-6677-8899-aabbccddeeff";
        let mut d = gpt(&[Some((u1, "boot", 34)), None, Some((u3, "coldkernel", 256))]);
        d[256 * 512..264 * 512].copy_from_slice(&arm64_header());
        let mut set = Set(vec![MemDisk(&d)]);
        let k = stock_kernel(&mut set, 1, "console=ttyAMA0 snapboot.coldkernel=/dev/vda3").unwrap();
        assert_eq!(k.release, "6.1.0-56-arm64");
        assert_eq!(k.version, "#1 SMP Debian 6.1.192-2 (2026-11-16)");
        let e = stock_kernel(&mut set, 1, "snapboot.coldkernel=/dev/vda2").unwrap_err();
        assert!(e.to_string().contains("no GPT partition 2"), "{e}");
        let e = stock_kernel(&mut set, 1, "snapboot.coldkernel=/dev/vdb3").unwrap_err();
        assert!(e.to_string().contains("/dev/vdb"), "{e}");
    }
}
