//! Writes a restore pack (the format: `restorer::pack`) from a store image, for the restorer
//! that runs before any kernel (crates/restorer): the image is read through the store's
//! reader (every chunk's BLAKE3 checked) and its kernel stream through the stream parser
//! (header, PFN list, page counts), then laid out flat.

use restorer::pack::{Checksum, PackHeader, HEADER_FIELDS, PAGE, ZERO_FLAG};
use snapimg::{ArchRecord, StreamParser};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a pack could not be written.
#[derive(Debug, Error)]
pub enum PackWriteError {
    /// The store or its image could not be read.
    #[error("reading image from {path}")]
    Store {
        /// The store.
        path: PathBuf,
        /// What failed.
        #[source]
        source: anyhow::Error,
    },
    /// The store has no image.
    #[error("{0} holds no image")]
    NoImage(PathBuf),
    /// The image's kernel stream is malformed.
    #[error("the image's kernel stream")]
    Stream(#[from] snapimg::StreamError),
    /// Not an x86_64 image.
    #[error("not an x86_64 image: the restorer enters x86_64 kernels only")]
    NotX86,
    /// Writing the pack failed.
    #[error("writing {path}")]
    Write {
        /// The pack.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// What [`write_pack`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackSummary {
    /// The header.
    pub header: PackHeader,
    /// Bytes written.
    pub bytes: u64,
}

/// Lays out a kernel stream (`pages`: header page, PFN pages, data pages) as a pack.
pub fn pack_stream(pages: &[[u8; 4096]]) -> Result<(PackHeader, Vec<u8>), PackWriteError> {
    let mut parser = StreamParser::new();
    let mut pfns: Vec<u64> = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    for p in pages {
        match parser.push_page(p)? {
            snapimg::PageKind::Header => {}
            snapimg::PageKind::Meta { .. } => pfns.extend(
                p.chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .take_while(|&w| w != snapimg::kstream::PFN_END_OF_MAP),
            ),
            _ => data.extend_from_slice(p),
        }
    }
    let sh = parser.finish()?.clone();
    let ArchRecord::X86_64 {
        jump_address,
        jump_address_phys,
        cr3,
        magic,
        e820_checksum,
    } = sh.arch
    else {
        return Err(PackWriteError::NotX86);
    };
    let mut body = Vec::with_capacity(pfns.len() * 8 + data.len() + PAGE as usize);
    for w in &pfns {
        body.extend_from_slice(&w.to_le_bytes());
    }
    body.resize(body.len().div_ceil(PAGE as usize) * PAGE as usize, 0);
    body.extend_from_slice(&data);
    let mut sum = Checksum::default();
    sum.update(&body);
    let header = PackHeader {
        jump_address,
        jump_address_phys,
        cr3,
        restore_magic: magic,
        e820_checksum,
        num_physpages: sh.num_physpages.get(),
        entries: pfns.len() as u64,
        data_pages: pfns.iter().filter(|&&w| w & ZERO_FLAG == 0).count() as u64,
        checksum: sum.value(),
    };
    let mut out = vec![0u8; PAGE as usize];
    out[..HEADER_FIELDS].copy_from_slice(&header.encode());
    out.extend_from_slice(&body);
    Ok((header, out))
}

/// Writes the newest image of the store at `store` as a pack at `out`.
pub fn write_pack(store: &Path, out: &Path) -> Result<PackSummary, PackWriteError> {
    let store_err = |e: anyhow::Error| PackWriteError::Store {
        path: store.to_path_buf(),
        source: e,
    };
    let s = ondevice::store::open_store(store, false).map_err(|e| store_err(e.into()))?;
    let rec = s
        .newest()
        .ok_or_else(|| PackWriteError::NoImage(store.to_path_buf()))?
        .clone();
    let mut r = s.reader(&rec.name).map_err(|e| store_err(e.into()))?;
    let mut pages = Vec::with_capacity(r.pages() as usize);
    let mut page = [0u8; 4096];
    while r.next_page(&mut page).map_err(|e| store_err(e.into()))? {
        pages.push(page);
    }
    let (header, bytes) = pack_stream(&pages)?;
    let write_err = |source| PackWriteError::Write {
        path: out.to_path_buf(),
        source,
    };
    std::fs::File::create(out)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(write_err)?;
    Ok(PackSummary {
        header,
        bytes: bytes.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use restorer::pack::X86_RESTORE_MAGIC;
    use snapimg::SyntheticStream;

    fn pages(bytes: &[u8]) -> Vec<[u8; 4096]> {
        bytes
            .chunks_exact(4096)
            .map(|c| c.try_into().unwrap())
            .collect()
    }

    /// A stream of 600 pages (two PFN pages) becomes a pack the restorer reads back: the
    /// arch header's fields, the PFN list in order, each data page after it in list order.
    #[test]
    fn a_stream_becomes_a_pack_with_its_pfns_and_pages_in_order() {
        let s = SyntheticStream::new(600, 9);
        let stream = pages(&s.to_bytes());
        let (h, bytes) = pack_stream(&stream).unwrap();
        assert_eq!(PackHeader::decode(&bytes), Ok(h));
        assert_eq!(h.restore_magic, X86_RESTORE_MAGIC);
        assert_eq!(h.e820_checksum, 9);
        assert_eq!((h.entries, h.data_pages), (600, 600));
        assert_eq!(h.num_physpages, s.header().num_physpages.get());
        let meta = s.header().meta_pages().get() as usize;
        let list = &bytes[4096..4096 + 8 * 600];
        let index: Vec<u8> = stream[1..1 + meta].concat();
        assert_eq!(list, &index[..8 * 600]);
        let data = &bytes[h.data_offset() as usize..];
        assert_eq!(data, &stream[1 + meta..].concat()[..]);
        let mut sum = Checksum::default();
        sum.update(&bytes[4096..]);
        assert_eq!(sum.value(), h.checksum);
    }

    /// The restorer enters x86_64 kernels only: an arm64 image is refused on the host.
    #[test]
    fn an_arm64_image_is_refused() {
        let s = SyntheticStream::new(10, 1).with_arch(ArchRecord::Arm64 {
            uts_version: "#1 SMP".into(),
            ttbr1_el1: 0,
            reenter_kernel: 0,
            hyp_stub_vectors: 0,
            sleep_cpu_mpidr: 0,
        });
        let err = pack_stream(&pages(&s.to_bytes())).unwrap_err();
        assert!(matches!(err, PackWriteError::NotX86), "{err}");
    }
}
