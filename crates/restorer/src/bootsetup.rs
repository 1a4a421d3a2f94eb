//! The boot setup an image is bound to ([`snapimg::BootSetup`]), computed from the kernel
//! pack's initramfs: BLAKE3 of `/init`, BLAKE3 of the file listing ([`snapimg::listing`]),
//! and the GNU build id of the snapboot binary that runs resume.
//!
//! The device computes it from its running root, which is not the cpio archive alone: the
//! kernel unpacks its own built-in initramfs first (a kernel built without
//! `CONFIG_INITRAMFS_SOURCE`, as Debian's, adds `/dev`, `/dev/console` and `/root`), and the
//! board's `/init` mounts devtmpfs, proc, sysfs and a tmpfs on `/dev`, `/proc`, `/sys` and
//! `/run` before resume runs, which the listing skips as other filesystems. The listing
//! here follows both ([`MOUNTED_BEFORE_RESUME`], [`KERNEL_BUILTIN_DIRS`]); on the board's
//! bundle it matches what the device records exactly. An initramfs whose `/init` mounts or
//! creates anything else before resume lists differently: its images are refused (the
//! binding differs), never restored wrongly.

use crate::cpio::{Entry, S_IFDIR, S_IFLNK};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use snapimg::listing::{self, Kind};
use snapimg::BootSetup;

/// Directories the board's `/init` mounts another filesystem on before resume runs.
pub const MOUNTED_BEFORE_RESUME: &[&str] = &["dev", "proc", "sys", "run"];
/// Directories of the kernel's built-in initramfs outside those mounts (`/root`, mode 0700).
pub const KERNEL_BUILTIN_DIRS: &[&str] = &["root"];
/// Where the initramfs may hold the snapboot binary that runs resume, in the order looked.
pub const SNAPBOOT_PATHS: &[&str] = &[
    "bin/snapboot",
    "sbin/snapboot",
    "usr/bin/snapboot",
    "usr/sbin/snapboot",
];

/// Why the boot setup cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// No `/init`.
    #[error("the initramfs has no /init")]
    NoInit,
    /// No snapboot binary where resume's would be.
    #[error("the initramfs has no snapboot binary (looked at {SNAPBOOT_PATHS:?})")]
    NoSnapboot,
    /// The snapboot binary carries no GNU build id.
    #[error("/{0} in the initramfs has no GNU build id note")]
    NoBuildId(&'static str),
}

/// Whether `path` lies on a filesystem mounted before resume (the mount point included).
fn mounted(path: &str) -> bool {
    let top = path.split('/').next().unwrap_or(path);
    MOUNTED_BEFORE_RESUME.contains(&top)
}

/// The listing's line for a cpio entry.
fn line(path: &str, e: &Entry) -> String {
    match e.kind() {
        S_IFDIR => listing::line(path, Kind::Dir),
        S_IFLNK => listing::line(path, Kind::Symlink(&String::from_utf8_lossy(e.data))),
        _ => listing::line(
            path,
            Kind::File {
                size: e.data.len() as u64,
                mode: e.mode,
            },
        ),
    }
}

/// The boot setup of the initramfs whose entries are `entries` (see the module header).
pub fn boot_setup(entries: &BTreeMap<&str, Entry>) -> Result<BootSetup, SetupError> {
    let init = entries.get("init").ok_or(SetupError::NoInit)?;
    let mut lines: Vec<String> = entries
        .iter()
        .filter(|(p, _)| !mounted(p))
        .map(|(p, e)| line(p, e))
        .collect();
    for d in KERNEL_BUILTIN_DIRS {
        if !entries.contains_key(d) {
            lines.push(listing::line(d, Kind::Dir));
        }
    }
    let (path, exe) = SNAPBOOT_PATHS
        .iter()
        .find_map(|p| entries.get(p).map(|e| (*p, e)))
        .ok_or(SetupError::NoSnapboot)?;
    let id = build_id(exe.data).ok_or(SetupError::NoBuildId(path))?;
    Ok(BootSetup {
        init: *blake3::hash(init.data).as_bytes(),
        files: listing::digest(&mut lines),
        snapboot_build_id: id.to_vec(),
    })
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// ELF note type of a GNU build id.
const NT_GNU_BUILD_ID: u32 = 3;
/// Program header type of notes.
const PT_NOTE: u32 = 4;

/// The GNU build id of a 64-bit little-endian ELF file: the `NT_GNU_BUILD_ID` note of owner
/// `GNU` in its `PT_NOTE` segments.
pub fn build_id(elf: &[u8]) -> Option<&[u8]> {
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(elf, 0x20)?).ok()?;
    let phentsize = usize::from(u16_at(elf, 0x36)?);
    let phnum = usize::from(u16_at(elf, 0x38)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(elf, ph)? != PT_NOTE {
            continue;
        }
        let off = usize::try_from(u64_at(elf, ph + 0x08)?).ok()?;
        let len = usize::try_from(u64_at(elf, ph + 0x20)?).ok()?;
        let mut notes = elf.get(off..off.checked_add(len)?)?;
        while notes.len() >= 12 {
            let namesz = u32_at(notes, 0)? as usize;
            let descsz = u32_at(notes, 4)? as usize;
            let kind = u32_at(notes, 8)?;
            let name_end = 12usize.checked_add(namesz)?;
            let desc_at = name_end.next_multiple_of(4);
            let desc_end = desc_at.checked_add(descsz)?;
            let name = notes.get(12..name_end)?;
            let desc = notes.get(desc_at..desc_end)?;
            if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
                return Some(desc);
            }
            notes = notes.get(desc_end.next_multiple_of(4).min(notes.len())..)?;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::{entries, tests::archive};

    /// A minimal ELF64 with one PT_NOTE segment holding `notes`.
    fn elf(notes: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 0x38];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&PT_NOTE.to_le_bytes());
        let at = b.len() as u64;
        b[0x48..0x50].copy_from_slice(&at.to_le_bytes());
        b[0x60..0x68].copy_from_slice(&(notes.len() as u64).to_le_bytes());
        b.extend_from_slice(notes);
        b
    }

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        n.extend_from_slice(name);
        while !n.len().is_multiple_of(4) {
            n.push(0);
        }
        n.extend_from_slice(desc);
        while !n.len().is_multiple_of(4) {
            n.push(0);
        }
        n
    }

    #[test]
    fn the_build_id_is_the_gnu_note_and_nothing_else() {
        let mut notes = note(b"Xen\0", NT_GNU_BUILD_ID, &[9; 8]);
        notes.extend(note(b"GNU\0", 1, &[0; 16]));
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]));
        assert_eq!(build_id(&elf(&notes)), Some(&[0xab; 20][..]));
        assert_eq!(build_id(&elf(&note(b"GNU\0", 1, &[1; 4]))), None);
        assert_eq!(build_id(b"#!/bin/sh\n"), None);
        let mut cut = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]));
        cut.truncate(cut.len() - 10);
        assert_eq!(build_id(&cut), None);
    }

    #[test]
    fn the_listing_skips_what_init_mounts_over_and_adds_the_kernels_root() {
        let exe = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[7; 20]));
        let bytes = archive(&[
            ("bin", 0o040755, b""),
            ("bin/snapboot", 0o100755, &exe),
            ("bin/sh", 0o120777, b"busybox"),
            ("dev", 0o040755, b""),
            ("dev/console", 0o020600, b""),
            ("init", 0o100755, b"#!/bin/sh\n"),
            ("proc", 0o040755, b""),
            ("tmp", 0o040755, b""),
        ]);
        let s = boot_setup(&entries(&bytes).unwrap()).unwrap();
        assert_eq!(s.init, *blake3::hash(b"#!/bin/sh\n").as_bytes());
        assert_eq!(s.snapboot_build_id, [7; 20]);
        // What the device lists in that root: the lines ondevice::binding writes.
        let want = alloc::format!(
            "d bin\nd root\nd tmp\nf bin/snapboot {} 100755\nf init 10 100755\nl bin/sh busybox\n",
            exe.len()
        );
        assert_eq!(s.files, *blake3::hash(want.as_bytes()).as_bytes());
        let no_snapboot = archive(&[("init", 0o100755, b"x")]);
        assert_eq!(
            boot_setup(&entries(&no_snapboot).unwrap()),
            Err(SetupError::NoSnapboot)
        );
    }
}
