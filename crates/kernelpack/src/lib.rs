//! The kernel pack: the stock kernel (an x86 bzImage or an arm64 Image) and its initramfs in one checked container,
//! written to a raw partition or a file.
//!
//! A restore kernel can restore an image but cannot boot the system cold: it has no modules,
//! no root filesystem driver, nothing of the application's kernel. When it cannot restore
//! (no image, a damaged one, one for another kernel or machine), it reads the kernel pack and
//! hands the cold boot to the stock kernel with `kexec_file_load`. The pack needs no
//! filesystem, so the restore kernel needs no filesystem driver to find it.
//!
//! ```text
//! offset  size  field
//! 0x000      8  magic "SBKPACK\0"
//! 0x008      4  format version (1), little endian like every number here
//! 0x00C      4  header length (4096)
//! 0x010      8  kernel offset (a multiple of 4096)
//! 0x018      8  kernel length in bytes
//! 0x020      8  initramfs offset (a multiple of 4096, after the kernel)
//! 0x028      8  initramfs length in bytes
//! 0x030     32  BLAKE3 of the kernel
//! 0x050     32  BLAKE3 of the initramfs
//! 0x070     64  the kernel's release (bzImage: setup header; Image: banner), NUL-padded
//! 0x0B0  ....   zero
//! 0xFE0     32  BLAKE3 of bytes 0x000..0xFE0
//! 0x1000 ....   kernel, zero padding to 4096, initramfs, zero padding to 4096
//! ```
//!
//! Reading checks the magic, then the version, then the header checksum, caps both lengths
//! before allocating, and checks each payload's BLAKE3: a pack that fails any check is never
//! handed to the kernel.
//!
//! Without the default `std` feature (the restorer, `no_std`), the header's decoding, the
//! payload checks and the cold boot's command line ([`cmdline`]) are what is left: reading
//! and writing packs through `std::io` need `std`.
#![cfg_attr(not(feature = "std"), no_std)]

pub mod cmdline;
#[cfg(feature = "std")]
mod rw;

#[cfg(feature = "std")]
pub use rw::{bzimage_release, is_static_elf, kernel_release, read, write, Pack};

use thiserror::Error;

/// The first eight bytes of a pack.
pub const MAGIC: [u8; 8] = *b"SBKPACK\0";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the header; payloads start at multiples of it.
pub const HEADER_LEN: usize = 4096;
/// The largest kernel a pack may hold.
pub const MAX_KERNEL: u64 = 256 << 20;
/// The largest initramfs a pack may hold.
pub const MAX_INITRD: u64 = 1 << 30;
const RELEASE_AT: usize = 0x70;
/// Bytes the header keeps of the kernel's release.
pub const RELEASE_LEN: usize = 64;
const HASH_AT: usize = 0xFE0;

/// Why a pack could not be written or read.
#[derive(Debug, Error)]
pub enum PackError {
    /// Reading or writing failed.
    #[cfg(feature = "std")]
    #[error("{what}")]
    Io {
        /// What was being read or written.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel is neither an x86 bzImage (`HdrS` setup header) nor an arm64 `Image`
    /// (`ARM\x64` at byte 56) with its `Linux version` banner.
    #[error(
        "the kernel is neither a bzImage (no HdrS setup header) nor an arm64 Image with a \
         `Linux version` banner"
    )]
    NotAKernel,
    /// The first bytes are not a pack's.
    #[error("no kernel pack here (magic {0:02x?})")]
    NotAPack([u8; 8]),
    /// A pack of another format version.
    #[error(
        "kernel pack format version {0} is not supported (this build reads version {VERSION})"
    )]
    Version(u32),
    /// The header does not match its checksum.
    #[error("kernel pack header checksum mismatch")]
    HeaderChecksum,
    /// Fewer bytes than a header.
    #[error("kernel pack header is {0} bytes, expected {HEADER_LEN}: the pack is truncated")]
    ShortHeader(usize),
    /// The header's length field is not [`HEADER_LEN`].
    #[error("kernel pack header says its length is {0}, expected {HEADER_LEN}")]
    HeaderLength(u32),
    /// The payloads overlap the header or each other.
    #[error(
        "kernel pack header is inconsistent: kernel at {kernel_offset:#x}+{kernel_len:#x}, \
         initramfs at {initrd_offset:#x}"
    )]
    Layout {
        /// Where the kernel starts.
        kernel_offset: u64,
        /// Its length.
        kernel_len: u64,
        /// Where the initramfs starts.
        initrd_offset: u64,
    },
    /// A payload ends past the end of what holds the pack.
    #[error("{what} ends after {got} of {len} bytes: the pack is truncated")]
    Truncated {
        /// Kernel or initramfs.
        what: &'static str,
        /// Bytes there.
        got: u64,
        /// Bytes the header says.
        len: u64,
    },
    /// A payload is larger than a pack may hold.
    #[error("{what} of {len} bytes is larger than the {max} bytes a kernel pack may hold")]
    TooLarge {
        /// Kernel or initramfs.
        what: &'static str,
        /// Its length.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// A payload does not match its checksum.
    #[error("kernel pack {what} checksum mismatch")]
    Checksum {
        /// Kernel or initramfs.
        what: &'static str,
    },
}

/// Bytes from a bzImage's start that hold its version string: the setup sectors (at most
/// 64 of 512 bytes, which is what the 16-bit pointer at 0x20E can reach).
pub const VERSION_HEAD: usize = 0x10200;

/// The version string a bzImage's setup header points at (`6.1.0-56-amd64
/// (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-11-16)`),
/// read from the kernel's first bytes `head`; `None` when `head` is not a bzImage's start
/// or the string does not end inside it.
pub fn bzimage_version(head: &[u8]) -> Option<&str> {
    if head.get(0x202..0x206) != Some(b"HdrS") {
        return None;
    }
    let ptr = usize::from(u16::from_le_bytes([head[0x20E], head[0x20F]])) + 0x200;
    let text = head.get(ptr..)?;
    let end = text.iter().take(256).position(|&b| b == 0)?;
    core::str::from_utf8(&text[..end]).ok()
}

/// `uname -r` and `uname -v` of a kernel from its version string: the first word, and
/// what follows the builder's `(user@host) ` (it starts with `#`).
pub fn uname_of(version: &str) -> Option<(&str, &str)> {
    let release = version.split_whitespace().next()?;
    let at = version.find(") #")?;
    Some((release, &version[at + 2..]))
}

/// A kernel's release as the header keeps it: at most [`RELEASE_LEN`] bytes of UTF-8, held
/// without an allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Release {
    bytes: [u8; RELEASE_LEN],
    len: usize,
}

impl Release {
    /// `text`, cut to the whole characters that fit in [`RELEASE_LEN`] bytes.
    pub fn new(text: &str) -> Release {
        let mut len = text.len().min(RELEASE_LEN);
        while !text.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0u8; RELEASE_LEN];
        bytes[..len].copy_from_slice(&text.as_bytes()[..len]);
        Release { bytes, len }
    }

    /// The header's NUL-padded field, up to its first NUL and its first byte that is not
    /// UTF-8.
    fn from_field(field: &[u8]) -> Release {
        let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
        let text = match core::str::from_utf8(&field[..end]) {
            Ok(t) => t,
            Err(e) => core::str::from_utf8(&field[..e.valid_up_to()]).unwrap_or_default(),
        };
        Release::new(text)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl core::fmt::Display for Release {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::fmt::Debug for Release {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<str> for Release {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Release {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One of the two things a pack holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The kernel (bzImage or arm64 `Image`).
    Kernel,
    /// Its initramfs.
    Initramfs,
}

impl Payload {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Payload::Kernel => "kernel",
            Payload::Initramfs => "initramfs",
        }
    }
}

/// What a pack's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Where the kernel starts.
    pub kernel_offset: u64,
    /// Its length.
    pub kernel_len: u64,
    /// Where the initramfs starts.
    pub initrd_offset: u64,
    /// Its length.
    pub initrd_len: u64,
    /// BLAKE3 of the kernel.
    pub kernel_hash: [u8; 32],
    /// BLAKE3 of the initramfs.
    pub initrd_hash: [u8; 32],
    /// The kernel's release.
    pub release: Release,
}

fn padded(len: u64) -> u64 {
    len.div_ceil(HEADER_LEN as u64) * HEADER_LEN as u64
}

impl Header {
    /// The header block.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        for (at, v) in [
            (0x10, self.kernel_offset),
            (0x18, self.kernel_len),
            (0x20, self.initrd_offset),
            (0x28, self.initrd_len),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        b[0x30..0x50].copy_from_slice(&self.kernel_hash);
        b[0x50..0x70].copy_from_slice(&self.initrd_hash);
        let r = self.release.as_str().as_bytes();
        b[RELEASE_AT..RELEASE_AT + r.len()].copy_from_slice(r);
        let h = blake3::hash(&b[..HASH_AT]);
        b[HASH_AT..].copy_from_slice(h.as_bytes());
        b
    }

    /// Reads a header block: magic, version, checksum, then the layout's sanity.
    pub fn decode(b: &[u8]) -> Result<Header, PackError> {
        if b.len() < HEADER_LEN {
            return Err(PackError::ShortHeader(b.len()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let magic: [u8; 8] = b[0..8].try_into().unwrap_or_default();
        if magic != MAGIC {
            return Err(PackError::NotAPack(magic));
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(PackError::Version(version));
        }
        if blake3::hash(&b[..HASH_AT]).as_bytes() != &b[HASH_AT..HEADER_LEN] {
            return Err(PackError::HeaderChecksum);
        }
        let h = Header {
            kernel_offset: u64_at(0x10),
            kernel_len: u64_at(0x18),
            initrd_offset: u64_at(0x20),
            initrd_len: u64_at(0x28),
            kernel_hash: b[0x30..0x50].try_into().unwrap_or_default(),
            initrd_hash: b[0x50..0x70].try_into().unwrap_or_default(),
            release: Release::from_field(&b[RELEASE_AT..RELEASE_AT + RELEASE_LEN]),
        };
        if u32_at(12) as usize != HEADER_LEN {
            return Err(PackError::HeaderLength(u32_at(12)));
        }
        for (what, len, max) in [
            ("kernel", h.kernel_len, MAX_KERNEL),
            ("initramfs", h.initrd_len, MAX_INITRD),
        ] {
            if len > max {
                return Err(PackError::TooLarge { what, len, max });
            }
        }
        let kernel_end = h.kernel_offset.checked_add(h.kernel_len);
        if h.kernel_offset < HEADER_LEN as u64
            || kernel_end.is_none_or(|end| h.initrd_offset < end)
            || h.initrd_offset.checked_add(padded(h.initrd_len)).is_none()
        {
            return Err(PackError::Layout {
                kernel_offset: h.kernel_offset,
                kernel_len: h.kernel_len,
                initrd_offset: h.initrd_offset,
            });
        }
        Ok(h)
    }

    /// Bytes the whole pack takes.
    pub fn total_len(&self) -> u64 {
        self.initrd_offset + padded(self.initrd_len)
    }

    /// Where `p` starts in the pack.
    pub fn offset(&self, p: Payload) -> u64 {
        match p {
            Payload::Kernel => self.kernel_offset,
            Payload::Initramfs => self.initrd_offset,
        }
    }

    /// Bytes of `p`.
    pub fn len(&self, p: Payload) -> u64 {
        match p {
            Payload::Kernel => self.kernel_len,
            Payload::Initramfs => self.initrd_len,
        }
    }

    /// Checks `p`'s BLAKE3 against the header; `pieces` are its bytes, in order (a reader
    /// that put the payload in two places hashes both without copying).
    pub fn check<'a>(
        &self,
        p: Payload,
        pieces: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), PackError> {
        let mut h = blake3::Hasher::new();
        for piece in pieces {
            h.update(piece);
        }
        let want = match p {
            Payload::Kernel => &self.kernel_hash,
            Payload::Initramfs => &self.initrd_hash,
        };
        if h.finalize().as_bytes() != want {
            return Err(PackError::Checksum { what: p.name() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
