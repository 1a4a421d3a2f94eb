//! The kernel pack's initramfs as the restorer reads it: one or more uncompressed newc cpio
//! archives one after the other, as the kernel unpacks them (each header starts with
//! `070701` or `070702`; zero bytes between archives are padding; a later entry of the same
//! path replaces an earlier one). A compressed archive (Debian's initramfs-tools packs its
//! main archive with zstd after an uncompressed early one) is named and refused: the
//! restorer has no decompressors.
//!
//! ```text
//! +--------+---------------------------------------------------------------+
//! | 6      | magic "070701" (or "070702": with a checksum the kernel skips) |
//! | 13 x 8 | hex fields: ino, mode, uid, gid, nlink, mtime, filesize,      |
//! |        | devmajor, devminor, rdevmajor, rdevminor, namesize, check     |
//! | n      | name, NUL-terminated; header + name padded to 4 bytes         |
//! | size   | data (a symbolic link's: its target), padded to 4 bytes       |
//! +--------+---------------------------------------------------------------+
//! ... the last entry of an archive is named "TRAILER!!!".
//! ```

use alloc::collections::BTreeMap;

/// Bytes of a newc header before the name.
const HEADER: usize = 110;
/// File type bits of a mode.
pub const S_IFMT: u32 = 0o170000;
/// A directory's type bits.
pub const S_IFDIR: u32 = 0o040000;
/// A symbolic link's type bits.
pub const S_IFLNK: u32 = 0o120000;

/// Why the initramfs cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpioError {
    /// An archive is compressed.
    #[error("its archive at byte {at} is {format}-compressed: the restorer reads only uncompressed newc cpio")]
    Compressed {
        /// Where the compressed archive starts.
        at: usize,
        /// The compression its magic names.
        format: &'static str,
    },
    /// Bytes that start neither an archive nor padding.
    #[error("byte {at} starts no cpio archive (magic {magic:02x?})")]
    Unknown {
        /// Where.
        at: usize,
        /// The first bytes found there.
        magic: [u8; 6],
    },
    /// An entry runs past the end, or its header is not hex.
    #[error("the cpio entry at byte {at} is damaged: {why}")]
    Damaged {
        /// The entry's header.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// One entry: what the kernel makes of it in the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<'a> {
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// Its data: a file's contents, a symbolic link's target.
    pub data: &'a [u8],
}

impl Entry<'_> {
    /// The type bits.
    pub fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }
}

/// The compressions the kernel can unpack, by their magic.
const COMPRESSED: &[(&[u8], &str)] = &[
    (&[0x1f, 0x8b], "gzip"),
    (&[0x1f, 0x9e], "gzip"),
    (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
    (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
    (&[0x5d, 0, 0], "lzma"),
    (b"BZh", "bzip2"),
    (&[0x02, 0x21, 0x4c, 0x18], "lz4"),
    (&[0x89, b'L', b'Z', b'O'], "lzo"),
];

fn hex_field(h: &[u8], i: usize, at: usize) -> Result<usize, CpioError> {
    let f = &h[6 + 8 * i..14 + 8 * i];
    let s = core::str::from_utf8(f).map_err(|_| CpioError::Damaged {
        at,
        why: "a header field is not hex",
    })?;
    usize::from_str_radix(s, 16).map_err(|_| CpioError::Damaged {
        at,
        why: "a header field is not hex",
    })
}

/// The entries of `bytes` by path (relative: no leading `./` or `/`; the root itself is
/// left out), as the kernel would leave them after unpacking every archive in it.
pub fn entries(bytes: &[u8]) -> Result<BTreeMap<&str, Entry<'_>>, CpioError> {
    let mut out = BTreeMap::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest[0] == 0 {
            // Padding between archives, and after the last one.
            at += 1;
            continue;
        }
        if !(rest.starts_with(b"070701") || rest.starts_with(b"070702")) {
            if let Some((_, format)) = COMPRESSED.iter().find(|(m, _)| rest.starts_with(m)) {
                return Err(CpioError::Compressed { at, format });
            }
            let mut magic = [0u8; 6];
            let n = rest.len().min(6);
            magic[..n].copy_from_slice(&rest[..n]);
            return Err(CpioError::Unknown { at, magic });
        }
        let short = |why| CpioError::Damaged { at, why };
        let h = rest
            .get(..HEADER)
            .ok_or(short("the header runs past the end"))?;
        let mode = hex_field(h, 1, at)? as u32;
        let size = hex_field(h, 6, at)?;
        let name_len = hex_field(h, 11, at)?;
        let name = rest
            .get(HEADER..HEADER + name_len)
            .and_then(|n| n.strip_suffix(&[0]))
            .ok_or(short("the name runs past the end or has no NUL"))?;
        let name = core::str::from_utf8(name).map_err(|_| short("the name is not UTF-8"))?;
        let data_at = (HEADER + name_len).next_multiple_of(4);
        let data = rest
            .get(data_at..data_at + size)
            .ok_or(short("the data runs past the end"))?;
        at += (data_at + size).next_multiple_of(4);
        if name == "TRAILER!!!" {
            continue;
        }
        let path = name.trim_start_matches("./").trim_start_matches('/');
        if path.is_empty() || path == "." {
            continue;
        }
        out.insert(path, Entry { mode, data });
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A newc entry.
    pub(crate) fn entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8]) {
        let fields = [
            1,
            mode as usize,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0,
        ];
        out.extend_from_slice(b"070701");
        for f in fields {
            out.extend_from_slice(alloc::format!("{f:08X}").as_bytes());
        }
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        out.extend_from_slice(data);
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
    }

    /// An archive of `files` (name, mode, data) with its trailer.
    pub(crate) fn archive(files: &[(&str, u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, mode, data) in files {
            entry(&mut out, name, *mode, data);
        }
        entry(&mut out, "TRAILER!!!", 0, &[]);
        out
    }

    #[test]
    fn archives_one_after_another_unpack_as_the_kernel_does() {
        let mut bytes = archive(&[
            (".", 0o040755, b""),
            ("bin", 0o040755, b""),
            ("./init", 0o100755, b"#!/bin/sh\n"),
            ("bin/sh", 0o120777, b"busybox"),
        ]);
        bytes.extend_from_slice(&[0; 512]);
        bytes.extend(archive(&[("init", 0o100700, b"exec sh\n")]));
        let e = entries(&bytes).unwrap();
        let names: Vec<&str> = e.keys().copied().collect();
        assert_eq!(names, ["bin", "bin/sh", "init"]);
        // The later archive's /init replaces the first one's.
        assert_eq!(e["init"].data, b"exec sh\n");
        assert_eq!(e["init"].mode, 0o100700);
        assert_eq!(e["bin/sh"].kind(), S_IFLNK);
        assert_eq!(e["bin"].kind(), S_IFDIR);
    }

    #[test]
    fn a_compressed_or_damaged_archive_is_named() {
        let mut bytes = archive(&[("init", 0o100755, b"x")]);
        let second = bytes.len();
        bytes.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3, 4]);
        assert_eq!(
            entries(&bytes).unwrap_err(),
            CpioError::Compressed {
                at: second,
                format: "zstd"
            }
        );
        let e = entries(&[0x1f, 0x8b, 8, 0]).unwrap_err().to_string();
        assert!(e.contains("byte 0 is gzip-compressed"), "{e}");
        let bytes = archive(&[("init", 0o100755, b"0123456789")]);
        let cut = &bytes[..HEADER + 8];
        assert!(matches!(
            entries(cut),
            Err(CpioError::Damaged { at: 0, .. })
        ));
        assert!(matches!(
            entries(b"hello world"),
            Err(CpioError::Unknown { at: 0, .. })
        ));
    }
}
