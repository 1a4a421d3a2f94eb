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

use std::io::{Read, Seek, SeekFrom, Write};
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
const RELEASE_LEN: usize = 64;
const HASH_AT: usize = 0xFE0;

/// Why a pack could not be written or read.
#[derive(Debug, Error)]
pub enum PackError {
    /// Reading or writing failed.
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
    /// The header's layout cannot be right.
    #[error("kernel pack header is inconsistent: {0}")]
    Layout(String),
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

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> PackError {
    move |source| PackError::Io { what, source }
}

/// The release of a kernel kexec can load: an x86 bzImage (from its setup header) or an
/// arm64 `Image` (from its `Linux version RELEASE (` banner).
pub fn kernel_release(kernel: &[u8]) -> Result<String, PackError> {
    if kernel.get(56..60) == Some(b"ARM\x64") {
        return arm64_release(kernel);
    }
    bzimage_release(kernel)
}

/// The release in an arm64 `Image`'s banner (the uncompressed kernel holds it as text).
fn arm64_release(kernel: &[u8]) -> Result<String, PackError> {
    let needle = b"Linux version ";
    kernel
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .find_map(|(at, _)| {
            let rest = &kernel[at + needle.len()..];
            let end = rest.iter().take(128).position(|&b| b == b' ')?;
            let release = std::str::from_utf8(&rest[..end]).ok()?;
            let well_formed = !release.is_empty()
                && release.starts_with(|c: char| c.is_ascii_digit())
                && rest.get(end + 1) == Some(&b'(');
            well_formed.then(|| release.to_string())
        })
        .ok_or(PackError::NotAKernel)
}

/// The release string a bzImage's setup header points at (`6.1.0-56-amd64`), if it is a
/// bzImage. Errors with [`PackError::NotAKernel`] if it is not one.
pub fn bzimage_release(kernel: &[u8]) -> Result<String, PackError> {
    if kernel.len() < 0x210 || &kernel[0x202..0x206] != b"HdrS" {
        return Err(PackError::NotAKernel);
    }
    let ptr = u16::from_le_bytes([kernel[0x20E], kernel[0x20F]]) as usize + 0x200;
    let text = kernel.get(ptr..).unwrap_or_default();
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    let version = String::from_utf8_lossy(&text[..end.min(256)]);
    // "6.1.0-56-amd64 (debian-kernel@lists.debian.org) #1 SMP ..." -> its first word.
    Ok(version.split_whitespace().next().unwrap_or("").to_string())
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
    pub release: String,
}

fn padded(len: u64) -> u64 {
    len.div_ceil(HEADER_LEN as u64) * HEADER_LEN as u64
}

impl Header {
    /// The header for these payloads, laid out one after the other.
    pub fn new(kernel: &[u8], initrd: &[u8]) -> Result<Header, PackError> {
        let release = kernel_release(kernel)?;
        for (what, len, max) in [
            ("kernel", kernel.len() as u64, MAX_KERNEL),
            ("initramfs", initrd.len() as u64, MAX_INITRD),
        ] {
            if len > max {
                return Err(PackError::TooLarge { what, len, max });
            }
        }
        let kernel_offset = HEADER_LEN as u64;
        Ok(Header {
            kernel_offset,
            kernel_len: kernel.len() as u64,
            initrd_offset: kernel_offset + padded(kernel.len() as u64),
            initrd_len: initrd.len() as u64,
            kernel_hash: *blake3::hash(kernel).as_bytes(),
            initrd_hash: *blake3::hash(initrd).as_bytes(),
            release: release.chars().take(RELEASE_LEN).collect(),
        })
    }

    /// The header block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
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
        let r = self.release.as_bytes();
        let n = r.len().min(RELEASE_LEN);
        b[RELEASE_AT..RELEASE_AT + n].copy_from_slice(&r[..n]);
        let h = blake3::hash(&b[..HASH_AT]);
        b[HASH_AT..].copy_from_slice(h.as_bytes());
        b
    }

    /// Reads a header block: magic, version, checksum, then the layout's sanity.
    pub fn decode(b: &[u8]) -> Result<Header, PackError> {
        if b.len() < HEADER_LEN {
            return Err(PackError::Layout(format!(
                "header is {} bytes, expected {HEADER_LEN}",
                b.len()
            )));
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
            release: {
                let r = &b[RELEASE_AT..RELEASE_AT + RELEASE_LEN];
                let end = r.iter().position(|&c| c == 0).unwrap_or(RELEASE_LEN);
                String::from_utf8_lossy(&r[..end]).into_owned()
            },
        };
        if u32_at(12) as usize != HEADER_LEN {
            return Err(PackError::Layout(format!("header length {}", u32_at(12))));
        }
        for (what, len, max) in [
            ("kernel", h.kernel_len, MAX_KERNEL),
            ("initramfs", h.initrd_len, MAX_INITRD),
        ] {
            if len > max {
                return Err(PackError::TooLarge { what, len, max });
            }
        }
        let kernel_end = h.kernel_offset + h.kernel_len;
        if h.kernel_offset < HEADER_LEN as u64 || h.initrd_offset < kernel_end {
            return Err(PackError::Layout(format!(
                "kernel at {:#x}+{:#x}, initramfs at {:#x}",
                h.kernel_offset, h.kernel_len, h.initrd_offset
            )));
        }
        Ok(h)
    }

    /// Bytes the whole pack takes.
    pub fn total_len(&self) -> u64 {
        self.initrd_offset + padded(self.initrd_len)
    }
}

/// Writes a pack of `kernel` (a bzImage) and `initrd`; returns its header.
pub fn write<W: Write>(mut w: W, kernel: &[u8], initrd: &[u8]) -> Result<Header, PackError> {
    let h = Header::new(kernel, initrd)?;
    let pad = |len: u64| vec![0u8; (padded(len) - len) as usize];
    w.write_all(&h.encode()).map_err(io("writing the header"))?;
    w.write_all(kernel).map_err(io("writing the kernel"))?;
    w.write_all(&pad(h.kernel_len))
        .map_err(io("writing the kernel"))?;
    w.write_all(initrd).map_err(io("writing the initramfs"))?;
    w.write_all(&pad(h.initrd_len))
        .map_err(io("writing the initramfs"))?;
    w.flush().map_err(io("writing the pack"))?;
    Ok(h)
}

/// A pack read back and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pack {
    /// Its header.
    pub header: Header,
    /// The kernel (bzImage).
    pub kernel: Vec<u8>,
    /// The initramfs.
    pub initrd: Vec<u8>,
}

fn read_payload<R: Read + Seek>(
    r: &mut R,
    what: &'static str,
    offset: u64,
    len: u64,
    hash: &[u8; 32],
) -> Result<Vec<u8>, PackError> {
    r.seek(SeekFrom::Start(offset)).map_err(io(what))?;
    let mut data = Vec::with_capacity(len as usize);
    r.take(len).read_to_end(&mut data).map_err(io(what))?;
    if data.len() as u64 != len {
        return Err(PackError::Layout(format!(
            "{what} ends after {} of {len} bytes: the pack is truncated",
            data.len()
        )));
    }
    if blake3::hash(&data).as_bytes() != hash {
        return Err(PackError::Checksum { what });
    }
    Ok(data)
}

/// Reads and checks a whole pack.
pub fn read<R: Read + Seek>(mut r: R) -> Result<Pack, PackError> {
    let mut block = vec![0u8; HEADER_LEN];
    r.read_exact(&mut block)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                PackError::Layout("shorter than a header: the pack is truncated".into())
            }
            _ => PackError::Io {
                what: "reading the header",
                source,
            },
        })?;
    let header = Header::decode(&block)?;
    let kernel = read_payload(
        &mut r,
        "kernel",
        header.kernel_offset,
        header.kernel_len,
        &header.kernel_hash,
    )?;
    let initrd = read_payload(
        &mut r,
        "initramfs",
        header.initrd_offset,
        header.initrd_len,
        &header.initrd_hash,
    )?;
    Ok(Pack {
        header,
        kernel,
        initrd,
    })
}

/// Whether `data` is an ELF executable without a dynamic loader (a binary an initramfs can
/// carry without its libraries).
pub fn is_static_elf(data: &[u8]) -> bool {
    use object::Object;
    match object::File::parse(data) {
        Ok(f) => f.section_by_name(".interp").is_none(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
