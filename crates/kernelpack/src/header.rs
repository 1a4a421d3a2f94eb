//! The pack's header (see the crate's documentation for its layout), its errors, and the
//! payload checks: what reading a pack needs, with or without `std`.

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
    #[error(
        "kernel pack header is inconsistent: initramfs summary at {at:#x}, before the \
         initramfs's end {initrd_end:#x} or not on a 4096-byte boundary"
    )]
    SummaryLayout { at: u64, initrd_end: u64 },
    #[error("kernel pack {what} checksum mismatch")]
    Checksum {
        /// Kernel or initramfs.
        what: &'static str,
    },
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
    /// What the restorer takes from the initramfs, taken out when the pack was written
    /// (optional: the restorer reads the initramfs itself without it).
    Summary,
}

impl Payload {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Payload::Kernel => "kernel",
            Payload::Initramfs => "initramfs",
            Payload::Summary => "initramfs summary",
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
    /// Where the initramfs summary starts (after the initramfs), its length (0: the pack
    /// has none) and its BLAKE3.
    pub summary: (u64, u64, [u8; 32]),
    /// The kernel's `uname -v`, when its writer read it from an arm64 `Image`'s banner
    /// (which lies megabytes into the kernel; a bzImage's is in its first 64 KiB): empty
    /// when not recorded.
    pub uts_version: Release,
}

/// The most bytes an initramfs summary may take.
pub const MAX_SUMMARY: u64 = 1 << 20;
const SUMMARY_AT: usize = 0xB0;
const UTS_VERSION_AT: usize = 0x100;

/// `len` rounded up to whole header lengths (payloads start on them).
pub(crate) fn padded(len: u64) -> u64 {
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
        let (at, len, hash) = self.summary;
        b[SUMMARY_AT..SUMMARY_AT + 8].copy_from_slice(&at.to_le_bytes());
        b[SUMMARY_AT + 8..SUMMARY_AT + 16].copy_from_slice(&len.to_le_bytes());
        b[SUMMARY_AT + 16..SUMMARY_AT + 48].copy_from_slice(&hash);
        let v = self.uts_version.as_str().as_bytes();
        b[UTS_VERSION_AT..UTS_VERSION_AT + v.len()].copy_from_slice(v);
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
            summary: (
                u64_at(SUMMARY_AT),
                u64_at(SUMMARY_AT + 8),
                b[SUMMARY_AT + 16..SUMMARY_AT + 48]
                    .try_into()
                    .unwrap_or_default(),
            ),
            uts_version: Release::from_field(&b[UTS_VERSION_AT..UTS_VERSION_AT + RELEASE_LEN]),
        };
        if u32_at(12) as usize != HEADER_LEN {
            return Err(PackError::HeaderLength(u32_at(12)));
        }
        for (what, len, max) in [
            ("kernel", h.kernel_len, MAX_KERNEL),
            ("initramfs", h.initrd_len, MAX_INITRD),
            ("initramfs summary", h.summary.1, MAX_SUMMARY),
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
        let initrd_end = h.initrd_offset + padded(h.initrd_len);
        let summary_ok = h.summary.0 >= initrd_end
            && h.summary.0.is_multiple_of(HEADER_LEN as u64)
            && h.summary.0.checked_add(padded(h.summary.1)).is_some();
        if h.summary.1 > 0 && !summary_ok {
            return Err(PackError::SummaryLayout {
                at: h.summary.0,
                initrd_end,
            });
        }
        Ok(h)
    }

    /// Bytes the whole pack takes.
    pub fn total_len(&self) -> u64 {
        let initrd_end = self.initrd_offset + padded(self.initrd_len);
        match self.summary {
            (at, len, _) if len > 0 => at + padded(len),
            _ => initrd_end,
        }
    }

    /// Whether the pack carries an initramfs summary.
    pub fn has_summary(&self) -> bool {
        self.summary.1 > 0
    }

    /// Where `p` starts in the pack.
    pub fn offset(&self, p: Payload) -> u64 {
        match p {
            Payload::Kernel => self.kernel_offset,
            Payload::Initramfs => self.initrd_offset,
            Payload::Summary => self.summary.0,
        }
    }

    /// Bytes of `p`.
    pub fn len(&self, p: Payload) -> u64 {
        match p {
            Payload::Kernel => self.kernel_len,
            Payload::Initramfs => self.initrd_len,
            Payload::Summary => self.summary.1,
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
            Payload::Summary => &self.summary.2,
        };
        if h.finalize().as_bytes() != want {
            return Err(PackError::Checksum { what: p.name() });
        }
        Ok(())
    }
}
