//! One stored chunk: up to a few dozen pages, LZ4-block compressed together or stored raw,
//! checksummed as the catalog says. Reading one is: its checksum over the stored bytes
//! first, then unpacking, checking that exactly its pages come out.

use crate::catalog::{ChunkCheck, ChunkRec};
use crate::damage::{Damage, ReadError};
use crate::superblock::PAGE;
use alloc::vec;
use alloc::vec::Vec;

impl ChunkRec {
    /// Bytes of its pages.
    pub fn raw_len(&self) -> usize {
        usize::from(self.pages) * PAGE
    }

    /// Checks the chunk's `stored` bytes against its checksum (`check`: the store's).
    pub fn check_stored(&self, check: ChunkCheck, stored: &[u8]) -> Result<(), Damage> {
        if check.digest(stored) != self.hash {
            return Err(Damage::ChunkChecksum {
                chunk: self.id,
                cluster: self.cluster,
            });
        }
        Ok(())
    }

    /// Its pages from its `stored` bytes in the clear (checked, or opened when sealed); the
    /// stored bytes themselves, without a copy, when they are not compressed.
    pub fn unpack(&self, stored: Vec<u8>) -> Result<Vec<u8>, Damage> {
        if !self.lz4 {
            self.check_raw_len(stored.len())?;
            return Ok(stored);
        }
        let mut raw = vec![0u8; self.raw_len()];
        self.unpack_into(&stored, &mut raw)?;
        Ok(raw)
    }

    /// Unpacks `stored` into `out`, which holds exactly [`ChunkRec::raw_len`] bytes; the
    /// caller checked `stored` first ([`ChunkRec::check_stored`]).
    pub fn unpack_into(&self, stored: &[u8], out: &mut [u8]) -> Result<(), Damage> {
        if !self.lz4 {
            self.check_raw_len(stored.len())?;
            out.copy_from_slice(stored);
            return Ok(());
        }
        let n =
            lz4_flex::block::decompress_into(stored, out).map_err(|reason| Damage::Decompress {
                chunk: self.id,
                reason,
            })?;
        if n != out.len() {
            return Err(Damage::DecompressedSize {
                chunk: self.id,
                got: n,
                needed: out.len(),
            });
        }
        Ok(())
    }

    /// An uncompressed chunk's stored bytes must be its pages.
    fn check_raw_len(&self, stored: usize) -> Result<(), Damage> {
        if stored != self.raw_len() {
            return Err(Damage::ChunkSize {
                chunk: self.id,
                stored,
                pages: self.pages,
                needed: self.raw_len(),
            });
        }
        Ok(())
    }
}

/// Opens chunk `c` for a reader without a device key: refused when sealed; else its
/// `stored` bytes checked (`check`: the store's chunk checksum) and unpacked into the
/// first [`ChunkRec::raw_len`] bytes of `out`. Returns that length.
pub fn open_chunk(
    check: ChunkCheck,
    c: &ChunkRec,
    stored: &[u8],
    out: &mut [u8],
) -> Result<usize, ReadError> {
    if c.sealed {
        return Err(ReadError::SealedChunk { chunk: c.id });
    }
    let needed = c.raw_len();
    let len = out.len();
    let out = out.get_mut(..needed).ok_or(ReadError::Buffer {
        chunk: c.id,
        needed,
        len,
    })?;
    c.check_stored(check, stored)?;
    c.unpack_into(stored, out)?;
    Ok(needed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    fn pages(n: u16) -> Vec<u8> {
        (0..usize::from(n) * PAGE)
            .map(|i| (i / 1000) as u8)
            .collect()
    }

    fn rec(check: ChunkCheck, stored: &[u8], pages: u16, lz4: bool) -> ChunkRec {
        ChunkRec {
            id: 5,
            cluster: 2,
            offset: 0,
            stored_len: stored.len() as u32,
            pages,
            lz4,
            hash: check.digest(stored),
            refs: 1,
            sealed: false,
        }
    }

    #[test]
    fn compressed_and_raw_chunks_open_into_the_buffer_under_either_checksum() {
        let raw = pages(3);
        let packed = lz4_flex::block::compress(&raw);
        for check in [ChunkCheck::Xxh3, ChunkCheck::Blake3] {
            for (stored, lz4) in [(&packed, true), (&raw, false)] {
                let c = rec(check, stored, 3, lz4);
                let mut out = vec![0xffu8; 4 * PAGE];
                assert_eq!(open_chunk(check, &c, stored, &mut out).unwrap(), 3 * PAGE);
                assert_eq!(&out[..3 * PAGE], &raw[..]);
                assert_eq!(c.unpack(stored.clone()).unwrap(), raw);
            }
        }
    }

    #[test]
    fn damage_a_short_buffer_and_sealing_are_named() {
        let raw = pages(2);
        let packed = lz4_flex::block::compress(&raw);
        let check = ChunkCheck::Xxh3;
        let c = rec(check, &packed, 2, true);
        let mut out = vec![0u8; 2 * PAGE];
        let mut bad = packed.clone();
        bad[3] ^= 1;
        let e = open_chunk(check, &c, &bad, &mut out)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "store is damaged: checksum mismatch in chunk 5 (cluster 2)"
        );
        let e = open_chunk(check, &c, &packed, &mut out[..PAGE]).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::Buffer {
                    needed: 8192,
                    len: 4096,
                    ..
                }
            ),
            "{e}"
        );
        let sealed = ChunkRec { sealed: true, ..c };
        let e = open_chunk(check, &sealed, &packed, &mut out).unwrap_err();
        assert!(matches!(e, ReadError::SealedChunk { chunk: 5 }), "{e}");
        // Three pages recorded, two come out.
        let more = ChunkRec { pages: 3, ..c };
        let mut out = vec![0u8; 3 * PAGE];
        let e = open_chunk(check, &more, &packed, &mut out)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "store is damaged: chunk 5 decompresses to 8192 bytes, not 12288"
        );
        let flat = rec(check, &raw, 3, false);
        let e = flat.unpack(raw.clone()).unwrap_err().to_string();
        assert_eq!(e, "chunk 5 holds 8192 bytes, 3 pages need 12288");
    }
}
