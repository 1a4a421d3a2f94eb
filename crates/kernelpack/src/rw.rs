//! Writing and reading whole packs through `std::io`, and finding a kernel's release (what
//! needs `std`; the restorer reads packs with [`crate::Header`] alone).

use crate::header::{
    padded, Header, PackError, Payload, Release, HEADER_LEN, MAX_INITRD, MAX_KERNEL, MAX_SUMMARY,
};
use std::io::{Read, Seek, SeekFrom, Write};

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> PackError {
    move |source| PackError::Io { what, source }
}

/// The release of a kernel kexec can load: an x86 bzImage (from its setup header) or an
/// arm64 `Image` (from its `Linux version RELEASE (` banner).
pub fn kernel_release(kernel: &[u8]) -> Result<String, PackError> {
    if kernel.get(56..60) == Some(b"ARM\x64") {
        return arm64_release(kernel);
    }
    let head = &kernel[..kernel.len().min(crate::VERSION_HEAD)];
    let hdr = crate::bzimage::SetupHeader::parse(head).map_err(|_| PackError::NotAKernel)?;
    // A bzImage whose version string cannot be read is still one kexec loads: its pack
    // records no release.
    Ok(hdr.release(head).unwrap_or_default().to_string())
}

/// `uname -r` and `uname -v` from an arm64 `Image`'s banner (the uncompressed kernel holds
/// it as text: `Linux version RELEASE (builder) (compiler) #1 SMP ...`, up to its newline);
/// `None` for a bzImage or without a banner. A 6.1 kernel holds two: `init/version.c`'s weak
/// one, built before the build number was known (`# SMP ...`), and the one the kernel
/// prints (`#1 SMP ...`): the first whose version has its number wins, else the first.
fn arm64_banner(kernel: &[u8]) -> Option<(String, String)> {
    if kernel.get(56..60) != Some(b"ARM\x64") {
        return None;
    }
    let needle = b"Linux version ";
    let mut banners = kernel
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .filter_map(|(at, _)| {
            let rest = &kernel[at + needle.len()..];
            let end = rest.iter().take(512).position(|&b| b == b'\n' || b == 0)?;
            let line = std::str::from_utf8(&rest[..end]).ok()?;
            let (release, version) = crate::bzimage::uname_of(line)?;
            let well_formed = release.starts_with(|c: char| c.is_ascii_digit())
                && line[release.len()..].starts_with(" (");
            well_formed.then(|| (release.to_string(), version.to_string()))
        });
    let first = banners.next()?;
    let numbered = |v: &str| v.as_bytes().get(1).is_some_and(u8::is_ascii_digit);
    if numbered(&first.1) {
        return Some(first);
    }
    Some(banners.find(|(_, v)| numbered(v)).unwrap_or(first))
}

/// `uname -v` of an arm64 `Image` (see [`arm64_banner`]).
fn arm64_uts_version(kernel: &[u8]) -> Option<String> {
    arm64_banner(kernel).map(|(_, v)| v)
}

/// The release in an arm64 `Image`'s banner.
fn arm64_release(kernel: &[u8]) -> Result<String, PackError> {
    arm64_banner(kernel)
        .map(|(r, _)| r)
        .ok_or(PackError::NotAKernel)
}

impl Header {
    /// The header for these payloads, laid out one after the other.
    pub fn new(kernel: &[u8], initrd: &[u8]) -> Result<Header, PackError> {
        let release = kernel_release(kernel)?;
        let uts_version = arm64_uts_version(kernel).unwrap_or_default();
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
            release: Release::new(&release),
            summary: (0, 0, [0; 32]),
            uts_version: Release::new(&uts_version),
        })
    }
}

/// Writes a pack of `kernel` (a bzImage) and `initrd`; returns its header.
pub fn write<W: Write>(w: W, kernel: &[u8], initrd: &[u8]) -> Result<Header, PackError> {
    write_with_summary(w, kernel, initrd, None)
}

/// Writes a pack of `kernel`, `initrd` and, after them, the restorer's `summary` of the
/// initramfs (the `restorer` crate's `stockinit::summary` makes it); returns its header.
pub fn write_with_summary<W: Write>(
    mut w: W,
    kernel: &[u8],
    initrd: &[u8],
    summary: Option<&[u8]>,
) -> Result<Header, PackError> {
    let mut h = Header::new(kernel, initrd)?;
    if let Some(s) = summary {
        let len = s.len() as u64;
        if len > MAX_SUMMARY {
            let (what, max) = ("initramfs summary", MAX_SUMMARY);
            return Err(PackError::TooLarge { what, len, max });
        }
        let at = h.initrd_offset + padded(h.initrd_len);
        h.summary = (at, len, *blake3::hash(s).as_bytes());
    }
    let pad = |len: u64| vec![0u8; (padded(len) - len) as usize];
    w.write_all(&h.encode()).map_err(io("writing the header"))?;
    w.write_all(kernel).map_err(io("writing the kernel"))?;
    w.write_all(&pad(h.kernel_len))
        .map_err(io("writing the kernel"))?;
    w.write_all(initrd).map_err(io("writing the initramfs"))?;
    w.write_all(&pad(h.initrd_len))
        .map_err(io("writing the initramfs"))?;
    if let Some(s) = summary {
        w.write_all(s)
            .map_err(io("writing the initramfs summary"))?;
        w.write_all(&pad(h.summary.1))
            .map_err(io("writing the initramfs summary"))?;
    }
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
    /// The restorer's summary of the initramfs, if the pack carries one.
    pub summary: Option<Vec<u8>>,
}

fn read_payload<R: Read + Seek>(r: &mut R, h: &Header, p: Payload) -> Result<Vec<u8>, PackError> {
    let (what, len) = (p.name(), h.len(p));
    r.seek(SeekFrom::Start(h.offset(p))).map_err(io(what))?;
    let mut data = Vec::with_capacity(len as usize);
    r.take(len).read_to_end(&mut data).map_err(io(what))?;
    if data.len() as u64 != len {
        return Err(PackError::Truncated {
            what,
            got: data.len() as u64,
            len,
        });
    }
    h.check(p, [data.as_slice()])?;
    Ok(data)
}

/// Reads and checks a whole pack.
pub fn read<R: Read + Seek>(mut r: R) -> Result<Pack, PackError> {
    let mut block = vec![0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut block[got..]) {
            Ok(0) => return Err(PackError::ShortHeader(got)),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(PackError::Io {
                    what: "reading the header",
                    source,
                })
            }
        }
    }
    let header = Header::decode(&block)?;
    let kernel = read_payload(&mut r, &header, Payload::Kernel)?;
    let initrd = read_payload(&mut r, &header, Payload::Initramfs)?;
    let summary = if header.has_summary() {
        Some(read_payload(&mut r, &header, Payload::Summary)?)
    } else {
        None
    };
    Ok(Pack {
        header,
        kernel,
        initrd,
        summary,
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
