//! The store's and the image's formats as the restorer reads them: crate `storelayout` (the
//! superblocks, the catalog, an image's page list, its chunks) and crate `snapimg` (the
//! image's description, its binding, the stream's header page), the code the device's
//! resume reads them with, so that both check an image alike and refuse it in the same words.
//! This module reads a store's committed state from a [`Disk`]; the checks are theirs.

use crate::disk::{Disk, DiskError, SECTOR};
use alloc::vec;
use alloc::vec::Vec;
pub use storelayout::Committed;

/// Why a store's committed state cannot be read: the store's one opening sequence
/// (`storelayout::open_committed`) over a disk.
pub type OpenStoreError = storelayout::OpenError<DiskError>;

/// The store in the `len` bytes at byte `at` of a disk, read through `storelayout`'s read-at
/// shape (whole sectors around each read).
struct OnDisk<'d, D> {
    disk: &'d mut D,
    at: u64,
}

impl<D: Disk> storelayout::ReadAt for OnDisk<'_, D> {
    type Error = DiskError;
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let b = read_bytes(self.disk, self.at, offset, buf.len())?;
        buf.copy_from_slice(&b);
        Ok(())
    }
}

/// The committed state of the store in the `len` bytes at byte `at` of `disk`.
pub fn open_store(disk: &mut impl Disk, at: u64, len: u64) -> Result<Committed, OpenStoreError> {
    storelayout::open_committed(&mut OnDisk { disk, at }, len)
}

/// The `len` bytes at byte `offset` of the store at byte `at` of `disk` (`at` on a sector):
/// the whole sectors around them are read.
pub fn read_bytes(
    disk: &mut impl Disk,
    at: u64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, DiskError> {
    let start = at + offset;
    let first = start - start % SECTOR;
    let skip = (start - first) as usize;
    let mut b = vec![0u8; (skip + len).next_multiple_of(SECTOR as usize)];
    disk.read(first, &mut b)?;
    b.truncate(skip + len);
    b.drain(..skip);
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;
    use flashstore::{Compression, FormatOptions, MemMedium, Store, WriteOptions};
    use snapimg::{Description, Identity, MemoryMap, StreamHeader, PAGE_SIZE};
    use storelayout::{open_chunk, read_page_list, PageRef, ReadError};

    /// A store at byte 4096 of a disk holding one image of a synthetic kernel stream, with
    /// its description; and that stream.
    fn disk() -> (Vec<u8>, Vec<u8>) {
        let mut store = Store::format(MemMedium::new(8 << 20), FormatOptions::default()).unwrap();
        let stream = snapimg::synthetic_stream(300, 7);
        let identity = Identity {
            release: "6.1.0-56-amd64".into(),
            version: "#1 SMP".into(),
            machine: "x86_64".into(),
            ram_bytes: 1 << 30,
            memory: MemoryMap::default(),
        };
        let pages = (stream.len() / PAGE_SIZE) as u64;
        let d = Description::new(identity, 1, None, pages, None, (None, None)).unwrap();
        let opts = WriteOptions {
            compression: Compression::Lz4,
            ..WriteOptions::default()
        };
        let mut w = store.writer("current", opts).unwrap();
        for p in stream.chunks_exact(PAGE_SIZE) {
            w.push_page(p.try_into().unwrap()).unwrap();
        }
        w.commit(d.encode()).unwrap();
        let mut disk = vec![0u8; 4096];
        disk.extend_from_slice(&store.into_medium().bytes);
        (disk, stream)
    }

    #[test]
    fn the_restorer_reads_back_what_the_store_wrote_with_the_same_checks() {
        let (bytes, stream) = disk();
        let mut d = MemDisk(&bytes);
        let store = open_store(&mut d, 4096, 8 << 20).unwrap();
        let (sb, catalog) = (&store.superblock, &store.catalog);
        let rec = catalog.newest().unwrap();
        let (at, n) = sb.extent_place(rec.meta, "page list").unwrap();
        let meta = read_page_list(catalog, rec, &read_bytes(&mut d, 4096, at, n).unwrap()).unwrap();
        let desc = Description::decode(&meta.user).unwrap();
        assert_eq!(desc.stream_pages, meta.pages.len() as u64);
        let mut out = vec![0u8; 64 * PAGE_SIZE];
        let mut back = Vec::new();
        for p in &meta.pages {
            match *p {
                PageRef::Zero => back.extend_from_slice(&[0; PAGE_SIZE]),
                PageRef::At { chunk, slot } => {
                    let c = catalog.chunk(chunk).unwrap();
                    let at = sb.chunk_place(c).unwrap();
                    let stored = read_bytes(&mut d, 4096, at, c.stored_len as usize).unwrap();
                    open_chunk(catalog.check, c, &stored, &mut out).unwrap();
                    let s = usize::from(slot) * PAGE_SIZE;
                    back.extend_from_slice(&out[s..s + PAGE_SIZE]);
                }
            }
        }
        assert_eq!(back, stream);
        let header = StreamHeader::parse(back[..PAGE_SIZE].try_into().unwrap()).unwrap();
        assert_eq!(header.pages.get(), desc.stream_pages);
    }

    #[test]
    fn a_damaged_chunk_and_a_missing_store_are_refused_in_the_store_s_words() {
        let (mut bytes, _) = disk();
        let store = open_store(&mut MemDisk(&bytes), 4096, 8 << 20).unwrap();
        let c = store.catalog.chunks[0];
        let at = 4096 + store.superblock.chunk_place(&c).unwrap() as usize;
        bytes[at + 5] ^= 1;
        let stored = read_bytes(
            &mut MemDisk(&bytes),
            4096,
            at as u64 - 4096,
            c.stored_len as usize,
        );
        let mut out = vec![0u8; c.raw_len()];
        let e = open_chunk(store.catalog.check, &c, &stored.unwrap(), &mut out).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::Damaged(storelayout::Damage::ChunkChecksum { .. })
            ),
            "{e}"
        );
        let e = open_store(&mut MemDisk(&[0; 1 << 20]), 0, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), flashstore::StoreError::NotAStore.to_string());
        let e = open_store(&mut MemDisk(&bytes), 4096, 4 << 20).unwrap_err();
        assert!(matches!(e, OpenStoreError::Truncated { .. }), "{e}");
    }
}
