//! The GNU build id of the snapboot binary an image is bound to ([`crate::BootSetup`]): the
//! one reader of it, for the device (its own `/proc/self/exe`, read piece by piece) and the
//! restorer (the binary in the kernel pack's initramfs, in memory).
//!
//! ```text
//! ELF64 little endian                     a note (4-byte aligned)
//! 0x00  "\x7fELF", class 2, data 1        0x0  u32 namesz      0x8  u32 type (3: NT_GNU_BUILD_ID)
//! 0x20  u64 e_phoff                       0xC  name ("GNU\0"), padded to 4
//! 0x36  u16 e_phentsize                   ...  desc: the build id, padded to 4
//! 0x38  u16 e_phnum
//! program header: u32 p_type (4: PT_NOTE) at 0x00, u64 p_offset at 0x08, u64 p_filesz at 0x20
//! ```
//!
//! The id is the desc of the first `NT_GNU_BUILD_ID` note of owner `GNU` in the `PT_NOTE`
//! segments; what is read is capped ([`MAX_HEADERS`], [`MAX_NOTES`]) before it is allocated.

use alloc::vec;
use alloc::vec::Vec;
use core::convert::Infallible;

/// ELF note type of a GNU build id.
pub const NT_GNU_BUILD_ID: u32 = 3;
/// Program header type of notes.
pub const PT_NOTE: u32 = 4;
/// The most bytes of program headers read.
pub const MAX_HEADERS: u64 = 64 << 10;
/// The most bytes of one note segment read.
pub const MAX_NOTES: u64 = 64 << 10;
const ELF64_LE: &[u8; 6] = b"\x7fELF\x02\x01";

/// Why an ELF file's build id could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BuildIdError<E> {
    /// Reading the file failed.
    #[error(transparent)]
    Read(E),
    /// Not a 64-bit little-endian ELF file.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// The file ends inside a part it says it has.
    #[error("the ELF file ends inside its {what} ({len} bytes at {offset:#x})")]
    Truncated {
        /// Which part.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Its bytes.
        len: u64,
    },
    /// A part is larger than what is read of it.
    #[error("the ELF file's {what} at {offset:#x} is {len} bytes, more than the {max} read")]
    TooLarge {
        /// Which part.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Its bytes.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// No build id note.
    #[error("no GNU build id note")]
    NoNote,
}

/// The `N` bytes at `at` of `b`, for a little-endian number (the caller checked the length).
fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    core::array::from_fn(|i| b[at + i])
}

/// Reads `len` bytes at `offset` (at most `max`) through `read_at`.
fn read<E>(
    read_at: &mut impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
    what: &'static str,
    offset: u64,
    len: u64,
    max: u64,
) -> Result<Vec<u8>, BuildIdError<E>> {
    if len > max {
        return Err(BuildIdError::TooLarge {
            what,
            offset,
            len,
            max,
        });
    }
    let mut buf = vec![0u8; len as usize];
    let mut got = 0;
    while got < buf.len() {
        let at = offset.checked_add(got as u64);
        let n = match at {
            Some(at) => read_at(at, &mut buf[got..]).map_err(BuildIdError::Read)?,
            None => 0,
        };
        if n == 0 {
            return Err(BuildIdError::Truncated { what, offset, len });
        }
        got += n;
    }
    Ok(buf)
}

/// The build id in one note segment's bytes, if a note there is one; `Err` when a note
/// runs past the segment.
fn in_notes(mut notes: &[u8]) -> Result<Option<&[u8]>, ()> {
    while notes.len() >= 12 {
        let namesz = u32::from_le_bytes(le(notes, 0)) as usize;
        let descsz = u32::from_le_bytes(le(notes, 4)) as usize;
        let kind = u32::from_le_bytes(le(notes, 8));
        let name_end = 12usize.checked_add(namesz).ok_or(())?;
        let desc_at = name_end.next_multiple_of(4);
        let desc_end = desc_at.checked_add(descsz).ok_or(())?;
        let name = notes.get(12..name_end).ok_or(())?;
        let desc = notes.get(desc_at..desc_end).ok_or(())?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Ok(Some(desc));
        }
        notes = &notes[desc_end.next_multiple_of(4).min(notes.len())..];
    }
    Ok(None)
}

/// The GNU build id of the ELF file that `read_at(offset, buf)` reads (returning the bytes
/// it put in `buf`, 0 at the end of the file, like `pread`): only the ELF header, the
/// program headers and the note segments are read.
pub fn read_build_id<E>(
    mut read_at: impl FnMut(u64, &mut [u8]) -> Result<usize, E>,
) -> Result<Vec<u8>, BuildIdError<E>> {
    let eh = read(&mut read_at, "ELF header", 0, 0x40, 0x40)?;
    if eh[..6] != *ELF64_LE {
        return Err(BuildIdError::NotElf64);
    }
    let phoff = u64::from_le_bytes(le(&eh, 0x20));
    let phentsize = usize::from(u16::from_le_bytes(le(&eh, 0x36)));
    let phnum = usize::from(u16::from_le_bytes(le(&eh, 0x38)));
    if phentsize < 0x28 && phnum > 0 {
        return Err(BuildIdError::NotElf64);
    }
    let len = (phentsize * phnum) as u64;
    let ph = read(&mut read_at, "program headers", phoff, len, MAX_HEADERS)?;
    for h in ph.chunks_exact(phentsize.max(1)) {
        if u32::from_le_bytes(le(h, 0)) != PT_NOTE {
            continue;
        }
        let (offset, len) = (
            u64::from_le_bytes(le(h, 0x08)),
            u64::from_le_bytes(le(h, 0x20)),
        );
        let notes = read(&mut read_at, "notes", offset, len, MAX_NOTES)?;
        match in_notes(&notes) {
            Ok(Some(id)) => return Ok(id.to_vec()),
            Ok(None) => {}
            Err(()) => {
                return Err(BuildIdError::Truncated {
                    what: "notes",
                    offset,
                    len,
                })
            }
        }
    }
    Err(BuildIdError::NoNote)
}

/// The GNU build id of the ELF file `elf` (see [`read_build_id`]).
pub fn build_id(elf: &[u8]) -> Result<Vec<u8>, BuildIdError<Infallible>> {
    read_build_id(|at, buf| {
        let rest = usize::try_from(at)
            .ok()
            .and_then(|at| elf.get(at..))
            .unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    })
}

/// Building ELF files for tests: the smallest ELF64 with one `PT_NOTE` segment.
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;

    /// A minimal ELF64 with one `PT_NOTE` segment holding `notes`.
    pub fn elf(notes: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 0x38];
        b[..6].copy_from_slice(ELF64_LE);
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

    /// One note: owner `name`, type `kind`, `desc`, each padded to 4 bytes.
    pub fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&kind.to_le_bytes());
        for part in [name, desc] {
            n.extend_from_slice(part);
            n.resize(n.len().next_multiple_of(4), 0);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{elf, note};
    use super::*;

    #[test]
    fn the_build_id_is_the_gnu_note_and_nothing_else() {
        let mut notes = note(b"Xen\0", NT_GNU_BUILD_ID, &[9; 8]);
        notes.extend(note(b"GNU\0", 1, &[0; 16]));
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20]));
        assert_eq!(build_id(&elf(&notes)).unwrap(), [0xab; 20]);
        assert!(matches!(
            build_id(&elf(&note(b"GNU\0", 1, &[1; 4]))),
            Err(BuildIdError::NoNote)
        ));
        assert!(matches!(
            build_id(b"#!/bin/sh\n"),
            Err(BuildIdError::Truncated {
                what: "ELF header",
                ..
            })
        ));
        assert!(matches!(
            build_id(&[b'#'; 0x40]),
            Err(BuildIdError::NotElf64)
        ));
        let mut cut = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]));
        cut.truncate(cut.len() - 10);
        let e = build_id(&cut).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the ELF file ends inside its notes (36 bytes at 0x78)"
        );
    }

    #[test]
    fn a_note_cut_short_inside_its_segment_is_refused() {
        let mut n = note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        n[4..8].copy_from_slice(&200u32.to_le_bytes());
        assert!(matches!(
            build_id(&elf(&n)),
            Err(BuildIdError::Truncated { what: "notes", .. })
        ));
    }

    #[test]
    fn what_is_read_is_capped_and_read_piece_by_piece() {
        let mut big = elf(&[]);
        big[0x60..0x68].copy_from_slice(&(MAX_NOTES + 1).to_le_bytes());
        assert!(matches!(
            build_id(&big),
            Err(BuildIdError::TooLarge { what: "notes", .. })
        ));
        // A reader that hands out 7 bytes at a time, and one that fails.
        let file = elf(&note(b"GNU\0", NT_GNU_BUILD_ID, &[5; 20]));
        let id = read_build_id(|at, buf: &mut [u8]| {
            let rest = &file[(at as usize).min(file.len())..];
            let n = rest.len().min(buf.len()).min(7);
            buf[..n].copy_from_slice(&rest[..n]);
            Ok::<_, Infallible>(n)
        });
        assert_eq!(id.unwrap(), [5; 20]);
        let failed = read_build_id(|_, _: &mut [u8]| Err::<usize, _>("disk gone"));
        assert!(matches!(failed, Err(BuildIdError::Read("disk gone"))));
    }
}
