//! An x86 bzImage's setup header, read as the boot protocol lays it out (Linux's
//! Documentation/arch/x86/boot.rst), without `std`: the one reader of it for every crate.
//! The restorer boots the kernel with it, the board extracts its payload and names its
//! release, the kernel pack records its release.
//!
//! ```text
//! offset  size  field                  offset  size  field
//! 0x1F1      1  setup_sects (0: 4)     0x230      4  kernel_alignment
//! 0x1FE      2  boot_flag 0xAA55       0x234      1  relocatable_kernel
//! 0x201      1  jump: header ends at   0x236      2  xloadflags
//!               0x202 + this byte      0x238      4  cmdline_size
//! 0x202      4  "HdrS"                 0x248      4  payload_offset (after the setup)
//! 0x206      2  boot protocol version  0x24C      4  payload_length
//! 0x20E      2  kernel_version: the    0x258      8  pref_address
//!               version string is at   0x260      4  init_size
//!               0x200 + this, NUL-ended
//! 0x211      1  loadflags
//! 0x22C      4  initrd_addr_max
//! ```
//!
//! [`SetupHeader::parse`] checks the length first, then `HdrS`; it reads every field at its
//! offset and leaves to its callers what they require of them (the restorer: the boot flag
//! and the 64-bit entry).

use thiserror::Error;

/// Where the setup header starts, in the bzImage and in the zero page.
pub const SETUP_HEADER: usize = 0x1F1;
/// Where the header's magic `HdrS` is.
pub const MAGIC_AT: usize = 0x202;
/// The header's magic.
pub const MAGIC: [u8; 4] = *b"HdrS";
/// The boot sector's `boot_flag`.
pub const BOOT_FLAG: u16 = 0xAA55;
/// Bytes a setup header needs from the bzImage's start: through the last field read
/// (`init_size`).
pub const MIN_HEAD: usize = 0x264;
/// Bytes from a bzImage's start that hold its version string: the setup sectors (at most
/// 64 of 512 bytes, which is what the 16-bit pointer at 0x20E can reach).
pub const VERSION_HEAD: usize = 0x10200;
/// The longest version string read (the kernel's is well under: release, builder, uts
/// version).
pub const MAX_VERSION: usize = 256;

/// Why bytes are not a bzImage's setup header, or a field of it cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SetupError {
    /// Fewer bytes than the header needs.
    #[error("{len} bytes are too few for a bzImage's setup header (it needs {need:#x})")]
    Short {
        /// Bytes given.
        len: usize,
        /// Bytes the header needs.
        need: usize,
    },
    /// No `HdrS` at 0x202.
    #[error("the kernel is not a bzImage (no HdrS setup header at 0x202: found {found:02x?})")]
    NoMagic {
        /// The four bytes at 0x202.
        found: [u8; 4],
    },
    /// `kernel_version` is 0: the header points at no version string.
    #[error("the bzImage's setup header points at no version string (kernel_version is 0)")]
    NoVersion,
    /// The version string does not end within [`MAX_VERSION`] bytes or the bytes given.
    #[error(
        "the bzImage's version string at {at:#x} has no end in the {searched} bytes read from there"
    )]
    VersionUnterminated {
        /// Where the string starts.
        at: usize,
        /// Bytes looked at.
        searched: usize,
    },
    /// The version string is not UTF-8.
    #[error("the bzImage's version string at {at:#x} is not UTF-8")]
    VersionNotText {
        /// Where the string starts.
        at: usize,
    },
    /// The payload the header names is not inside the bzImage.
    #[error("the bzImage's payload at {offset:#x}, {len} bytes, ends past its {total} bytes")]
    Payload {
        /// Where the payload starts (after the setup).
        offset: u64,
        /// Its length.
        len: u64,
        /// Bytes of the bzImage.
        total: usize,
    },
}

/// A bzImage's setup header: the fields its readers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupHeader {
    /// Setup sectors after the boot sector (0 means 4).
    pub setup_sects: u8,
    /// The boot sector's flag ([`BOOT_FLAG`] in a bootable image).
    pub boot_flag: u16,
    /// Boot protocol version.
    pub version: u16,
    /// The version string's offset from 0x200 (0: none).
    pub kernel_version: u16,
    /// `loadflags` as the image has them.
    pub loadflags: u8,
    /// The highest address the initramfs may occupy.
    pub initrd_addr_max: u32,
    /// The alignment a relocatable kernel is loaded at.
    pub kernel_alignment: u32,
    /// Whether the kernel may be loaded elsewhere than `pref_address`.
    pub relocatable: bool,
    /// `XLF_*`.
    pub xloadflags: u16,
    /// The longest command line, without its NUL.
    pub cmdline_size: u32,
    /// Where the compressed payload starts, from the end of the setup.
    pub payload_offset: u32,
    /// Its length.
    pub payload_length: u32,
    /// Where the kernel prefers to be loaded.
    pub pref_address: u64,
    /// Bytes from the load address the kernel needs before it reads the memory map.
    pub init_size: u32,
    /// Where the header ends (`0x202 + byte 0x201`).
    pub end: usize,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | u64::from(u32_at(b, at + 4)) << 32
}

impl SetupHeader {
    /// Reads the header from `head`, the bzImage's first bytes: at least [`MIN_HEAD`] and
    /// the whole header (to its `end`), with `HdrS` at 0x202.
    pub fn parse(head: &[u8]) -> Result<SetupHeader, SetupError> {
        let short = |need| SetupError::Short {
            len: head.len(),
            need,
        };
        if head.len() < MIN_HEAD {
            return Err(short(MIN_HEAD));
        }
        let found = [head[0x202], head[0x203], head[0x204], head[0x205]];
        if found != MAGIC {
            return Err(SetupError::NoMagic { found });
        }
        let end = 0x202 + usize::from(head[0x201]);
        if head.len() < end {
            return Err(short(end));
        }
        Ok(SetupHeader {
            setup_sects: head[0x1F1],
            boot_flag: u16_at(head, 0x1FE),
            version: u16_at(head, 0x206),
            kernel_version: u16_at(head, 0x20E),
            loadflags: head[0x211],
            initrd_addr_max: u32_at(head, 0x22C),
            kernel_alignment: u32_at(head, 0x230),
            relocatable: head[0x234] != 0,
            xloadflags: u16_at(head, 0x236),
            cmdline_size: u32_at(head, 0x238),
            payload_offset: u32_at(head, 0x248),
            payload_length: u32_at(head, 0x24C),
            pref_address: u64_at(head, 0x258),
            init_size: u32_at(head, 0x260),
            end,
        })
    }

    /// Bytes before the protected-mode kernel: the boot sector and the setup sectors.
    pub fn setup_bytes(&self) -> u64 {
        let sects = if self.setup_sects == 0 {
            4
        } else {
            self.setup_sects
        };
        (u64::from(sects) + 1) * 512
    }

    /// The compressed kernel inside `kernel`, the whole bzImage this header is of.
    pub fn payload<'a>(&self, kernel: &'a [u8]) -> Result<&'a [u8], SetupError> {
        let offset = self.setup_bytes() + u64::from(self.payload_offset);
        let len = u64::from(self.payload_length);
        let err = SetupError::Payload {
            offset,
            len,
            total: kernel.len(),
        };
        let start = usize::try_from(offset).map_err(|_| err)?;
        let end = start.checked_add(self.payload_length as usize).ok_or(err)?;
        kernel.get(start..end).ok_or(err)
    }

    /// The bytes where the version string starts in `head` (at most [`MAX_VERSION`]) and
    /// where that is.
    fn version_bytes<'a>(&self, head: &'a [u8]) -> Result<(usize, &'a [u8]), SetupError> {
        if self.kernel_version == 0 {
            return Err(SetupError::NoVersion);
        }
        let at = 0x200 + usize::from(self.kernel_version);
        let text = head.get(at..).unwrap_or_default();
        Ok((at, &text[..text.len().min(MAX_VERSION)]))
    }

    /// The version string the header points at (`6.1.0-56-amd64
    /// (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2
    /// (2026-11-16)`), which must end (NUL) inside `head` and [`MAX_VERSION`].
    pub fn version_string<'a>(&self, head: &'a [u8]) -> Result<&'a str, SetupError> {
        let (at, text) = self.version_bytes(head)?;
        word(at, text, |b| b == 0)
    }

    /// The kernel's release (`uname -r`, `6.1.0-56-amd64`): the version string's first
    /// word, which must end (space or NUL) inside `head` and [`MAX_VERSION`]; the rest of
    /// the string need not.
    pub fn release<'a>(&self, head: &'a [u8]) -> Result<&'a str, SetupError> {
        let (at, text) = self.version_bytes(head)?;
        word(at, text, |b| b == 0 || b == b' ')
    }
}

/// The text at `at` (bytes `text`) up to the first byte that `ends`.
fn word(at: usize, text: &[u8], ends: impl Fn(u8) -> bool) -> Result<&str, SetupError> {
    let end = text
        .iter()
        .position(|&b| ends(b))
        .ok_or(SetupError::VersionUnterminated {
            at,
            searched: text.len(),
        })?;
    core::str::from_utf8(&text[..end]).map_err(|_| SetupError::VersionNotText { at })
}

/// The version string of the bzImage whose first bytes are `head` (see
/// [`SetupHeader::version_string`]).
pub fn bzimage_version(head: &[u8]) -> Result<&str, SetupError> {
    SetupHeader::parse(head)?.version_string(head)
}

/// The release of the bzImage whose first bytes are `head` (see [`SetupHeader::release`]).
pub fn bzimage_release(head: &[u8]) -> Result<&str, SetupError> {
    SetupHeader::parse(head)?.release(head)
}

/// `uname -r` and `uname -v` of a kernel from its version string: the first word, and
/// what follows the builder's `(user@host) ` (it starts with `#`).
pub fn uname_of(version: &str) -> Option<(&str, &str)> {
    let release = version.split_whitespace().next()?;
    let at = version.find(") #")?;
    Some((release, &version[at + 2..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VERSION: &str = "6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP \
                           PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)";

    /// The first 0x1000 bytes of a bzImage like Debian's 6.1 (boot protocol 2.15, header
    /// to 0x26C), its version string at 0x800.
    fn head() -> [u8; 0x1000] {
        let mut b = [0u8; 0x1000];
        b[0x1F1] = 39;
        b[0x1FE..0x200].copy_from_slice(&BOOT_FLAG.to_le_bytes());
        b[0x201] = 0x6A;
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x020Fu16.to_le_bytes());
        b[0x20E..0x210].copy_from_slice(&0x600u16.to_le_bytes());
        b[0x211] = 0x81;
        b[0x22C..0x230].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
        b[0x230..0x234].copy_from_slice(&0x20_0000u32.to_le_bytes());
        b[0x234] = 1;
        b[0x236..0x238].copy_from_slice(&0x7Fu16.to_le_bytes());
        b[0x238..0x23C].copy_from_slice(&0x7FFu32.to_le_bytes());
        b[0x248..0x24C].copy_from_slice(&0x10u32.to_le_bytes());
        b[0x24C..0x250].copy_from_slice(&0x20u32.to_le_bytes());
        b[0x258..0x260].copy_from_slice(&0x100_0000u64.to_le_bytes());
        b[0x260..0x264].copy_from_slice(&0x3F9_8000u32.to_le_bytes());
        b[0x800..0x800 + VERSION.len()].copy_from_slice(VERSION.as_bytes());
        b
    }

    #[test]
    fn every_field_reads_at_its_offset() {
        let b = head();
        let h = SetupHeader::parse(&b).unwrap();
        assert_eq!(
            h,
            SetupHeader {
                setup_sects: 39,
                boot_flag: BOOT_FLAG,
                version: 0x020F,
                kernel_version: 0x600,
                loadflags: 0x81,
                initrd_addr_max: 0x7FFF_FFFF,
                kernel_alignment: 0x20_0000,
                relocatable: true,
                xloadflags: 0x7F,
                cmdline_size: 0x7FF,
                payload_offset: 0x10,
                payload_length: 0x20,
                pref_address: 0x100_0000,
                init_size: 0x3F9_8000,
                end: 0x26C,
            }
        );
        assert_eq!(h.setup_bytes(), 40 * 512);
        let mut zero = head();
        zero[0x1F1] = 0;
        assert_eq!(SetupHeader::parse(&zero).unwrap().setup_bytes(), 5 * 512);
    }

    #[test]
    fn the_version_and_release_are_what_the_header_points_at() {
        let b = head();
        assert_eq!(bzimage_version(&b), Ok(VERSION));
        assert_eq!(bzimage_release(&b), Ok("6.1.0-56-amd64"));
        assert_eq!(
            uname_of(VERSION),
            Some((
                "6.1.0-56-amd64",
                "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)"
            ))
        );
        assert_eq!(uname_of("6.1.0 no builder"), None);
    }

    #[test]
    fn short_and_truncated_headers_are_refused_with_their_lengths() {
        let b = head();
        for len in [0, 0x1F1, 0x203, 0x206, 0x20F, 0x210, MIN_HEAD - 1] {
            assert_eq!(
                SetupHeader::parse(&b[..len]),
                Err(SetupError::Short {
                    len,
                    need: MIN_HEAD
                }),
                "{len} bytes"
            );
            assert!(bzimage_version(&b[..len]).is_err());
            assert!(bzimage_release(&b[..len]).is_err());
        }
        assert_eq!(
            SetupHeader::parse(&b[..0x268]),
            Err(SetupError::Short {
                len: 0x268,
                need: 0x26C
            }),
            "the header says it ends at 0x26c"
        );
        assert_eq!(
            SetupError::Short {
                len: 0x210,
                need: MIN_HEAD
            }
            .to_string(),
            "528 bytes are too few for a bzImage's setup header (it needs 0x264)"
        );
    }

    #[test]
    fn a_version_string_cut_off_or_missing_is_an_error_not_a_panic() {
        let b = head();
        let end = 0x800 + VERSION.len();
        assert_eq!(
            bzimage_version(&b[..end]),
            Err(SetupError::VersionUnterminated {
                at: 0x800,
                searched: VERSION.len()
            }),
            "no NUL inside the head"
        );
        assert_eq!(bzimage_release(&b[..end]), Ok("6.1.0-56-amd64"));
        assert_eq!(
            bzimage_release(&b[..0x805]),
            Err(SetupError::VersionUnterminated {
                at: 0x800,
                searched: 5
            })
        );
        assert_eq!(
            bzimage_release(&b[..0x700]),
            Err(SetupError::VersionUnterminated {
                at: 0x800,
                searched: 0
            }),
            "the string starts past the head"
        );
        let mut none = head();
        none[0x20E..0x210].fill(0);
        assert_eq!(bzimage_version(&none), Err(SetupError::NoVersion));
        let mut long = head();
        long[0x800..0x800 + MAX_VERSION + 1].fill(b'x');
        assert_eq!(
            bzimage_release(&long),
            Err(SetupError::VersionUnterminated {
                at: 0x800,
                searched: MAX_VERSION
            })
        );
        let mut bad = head();
        bad[0x801] = 0xFF;
        assert_eq!(
            bzimage_version(&bad),
            Err(SetupError::VersionNotText { at: 0x800 })
        );
    }

    #[test]
    fn no_hdrs_is_not_a_bzimage() {
        let mut b = head();
        b[0x202] = b'X';
        assert_eq!(
            SetupHeader::parse(&b),
            Err(SetupError::NoMagic { found: *b"XdrS" })
        );
        assert_eq!(
            bzimage_release(&[0x7F; 0x1000]).unwrap_err().to_string(),
            "the kernel is not a bzImage (no HdrS setup header at 0x202: found [7f, 7f, 7f, 7f])"
        );
    }

    #[test]
    fn the_payload_is_after_the_setup_and_inside_the_image() {
        let mut k = head().to_vec();
        k[0x1F1] = 3;
        k.truncate(0x800 + 0x10 + 0x20);
        k[0x810..].fill(0xEE);
        let h = SetupHeader::parse(&k).unwrap();
        assert_eq!(h.payload(&k), Ok(&[0xEE; 0x20][..]));
        let total = k.len() - 1;
        assert_eq!(
            h.payload(&k[..total]),
            Err(SetupError::Payload {
                offset: 0x810,
                len: 0x20,
                total
            })
        );
    }
}
