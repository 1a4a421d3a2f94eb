//! The compressed streams of an initramfs, told apart by their first two bytes as the
//! kernel's `decompress_method` (lib/decompress.c) tells them, and unpacked as its
//! decompressors do: each stream is one zstd frame, one gzip member, or an lz4 legacy
//! frame running to a zero length word or the end; what follows it is the next segment.
//! xz, bzip2, lzma and lzo are named and refused: no maintained decoder of theirs builds
//! without std (`lzma-rs` needs it) and none is written here.
//!
//! ```text
//! zstd  28 b5 2f fd  frame header, blocks, optional XXH64 content checksum (checked)
//! gzip  1f 8b 08     flags, mtime, xfl, os; the name if FNAME; raw deflate;
//!                    CRC32 and size of the data, little-endian (both checked)
//! lz4   02 21 4c 18  then blocks: u32 LE compressed length, an lz4 block of at most
//!                    8 MiB unpacked; the magic again is skipped; a length 0 ends it
//! ```
//!
//! Every decoder stops at the caller's budget of output bytes, so a stream cannot make
//! the caller allocate more than it allowed.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// A compression the kernel can unpack an initramfs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Compression {
    /// gzip (`1f 8b`, and `1f 9e`, which the kernel takes for gzip too).
    Gzip,
    /// bzip2 (`BZ`).
    Bzip2,
    /// The legacy lzma format (`5d 00`).
    Lzma,
    /// xz (`fd 37`).
    Xz,
    /// lzop (`89 4c`).
    Lzo,
    /// lz4's legacy frame (`02 21`).
    Lz4,
    /// zstd (`28 b5`).
    Zstd,
}

/// The kernel's table: the first two bytes of each format.
const MAGIC: &[([u8; 2], Compression)] = &[
    ([0x1f, 0x8b], Compression::Gzip),
    ([0x1f, 0x9e], Compression::Gzip),
    ([0x42, 0x5a], Compression::Bzip2),
    ([0x5d, 0x00], Compression::Lzma),
    ([0xfd, 0x37], Compression::Xz),
    ([0x89, 0x4c], Compression::Lzo),
    ([0x02, 0x21], Compression::Lz4),
    ([0x28, 0xb5], Compression::Zstd),
];

impl Compression {
    /// The compression whose magic `bytes` start with, as the kernel detects it.
    pub fn detect(bytes: &[u8]) -> Option<Compression> {
        let head = bytes.get(..2)?;
        MAGIC.iter().find(|(m, _)| m == head).map(|(_, c)| *c)
    }

    /// Its name, as the kernel's table gives it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Lzma => "lzma",
            Compression::Xz => "xz",
            Compression::Lzo => "lzo",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Whether this crate unpacks it.
    pub fn supported(self) -> bool {
        matches!(
            self,
            Compression::Gzip | Compression::Lz4 | Compression::Zstd
        )
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One stream unpacked.
#[derive(Debug)]
pub(crate) struct Unpacked {
    /// What it unpacked to.
    pub data: Vec<u8>,
    /// Bytes of the input it took.
    pub consumed: usize,
}

/// Why a stream did not unpack.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StreamError {
    /// Not a format decoded here.
    Unsupported,
    /// Its output passed the budget, at this many bytes.
    TooLarge(usize),
    /// Its decoder's complaint.
    Damaged(String),
}

/// Unpacks the one stream at the start of `input` (detected as `format`), taking at most
/// `budget` bytes of output.
pub(crate) fn unpack(
    format: Compression,
    input: &[u8],
    budget: usize,
) -> Result<Unpacked, StreamError> {
    match format {
        Compression::Zstd => zstd(input, budget),
        Compression::Gzip => gzip(input, budget),
        Compression::Lz4 => lz4(input, budget),
        _ => Err(StreamError::Unsupported),
    }
}

/// The output buffer's first capacity: the stream's own word for its size when it has
/// one, else four times the input left (Debian's zstd initramfs unpacks to 2.6 times its
/// size), never more than the budget. Guessing right matters to the restorer, whose heap
/// frees nothing: every regrowth leaves the old buffer behind.
fn capacity(known: Option<u64>, input: usize, budget: usize) -> usize {
    let guess = known.map_or(input.saturating_mul(4), |k| {
        k.min(usize::MAX as u64) as usize
    });
    guess.min(budget)
}

/// The largest zstd window accepted (the kernel's `ZSTD_WINDOWSIZE_MAX`, 128 MiB).
const ZSTD_MAX_WINDOW: u64 = 128 << 20;

fn zstd(input: &[u8], budget: usize) -> Result<Unpacked, StreamError> {
    use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
    let damaged = |e: &dyn fmt::Display| StreamError::Damaged(format!("{e}"));
    let mut src = input;
    let mut dec = FrameDecoder::new();
    dec.set_max_window_size(ZSTD_MAX_WINDOW);
    dec.init(&mut src).map_err(|e| damaged(&e))?;
    let known = Some(dec.content_size()).filter(|&n| n > 0);
    let mut out = Vec::with_capacity(capacity(known, input.len(), budget));
    loop {
        dec.decode_blocks(&mut src, BlockDecodingStrategy::UptoBytes(1 << 20))
            .map_err(|e| damaged(&e))?;
        let finished = dec.is_finished();
        let ready = dec.can_collect();
        if out.len() + ready > budget {
            return Err(StreamError::TooLarge(out.len() + ready));
        }
        dec.collect_to_writer(&mut out).map_err(|e| damaged(&e))?;
        if finished {
            break;
        }
    }
    if let (Some(stored), Some(computed)) =
        (dec.get_checksum_from_data(), dec.get_calculated_checksum())
    {
        if stored != computed {
            return Err(StreamError::Damaged(format!(
                "its content checksum is {stored:#010x}, the data's {computed:#010x}"
            )));
        }
    }
    Ok(Unpacked {
        data: out,
        consumed: input.len() - src.len(),
    })
}

/// gzip's header flag for a stored file name, the one the kernel's `gunzip` skips.
const FNAME: u8 = 0x08;

fn gzip(input: &[u8], budget: usize) -> Result<Unpacked, StreamError> {
    use miniz_oxide::inflate::stream::{inflate, InflateState};
    use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
    let damaged = |why: &str| StreamError::Damaged(why.into());
    if input.len() < 10 || input[..3] != [0x1f, 0x8b, 8] {
        return Err(damaged("not a gzip member with deflate (1f 8b 08)"));
    }
    let flags = input[3];
    if flags & !FNAME != 0 {
        return Err(StreamError::Damaged(format!(
            "header flags {flags:#04x}: the kernel's gunzip reads only FNAME ({FNAME:#04x})"
        )));
    }
    let mut at = 10;
    if flags & FNAME != 0 {
        let nul = input[at..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| damaged("the stored file name runs past the end"))?;
        at += nul + 1;
    }
    let mut state = InflateState::new_boxed(DataFormat::Raw);
    let mut out = Vec::with_capacity(capacity(None, input.len() - at, budget));
    let mut chunk = alloc::vec![0u8; 64 << 10];
    loop {
        let r = inflate(&mut state, &input[at..], &mut chunk, MZFlush::None);
        at += r.bytes_consumed;
        if out.len() + r.bytes_written > budget {
            return Err(StreamError::TooLarge(out.len() + r.bytes_written));
        }
        out.extend_from_slice(&chunk[..r.bytes_written]);
        match r.status {
            Ok(MZStatus::StreamEnd) => break,
            Ok(_) if r.bytes_consumed + r.bytes_written > 0 => {}
            Err(MZError::Data) => return Err(damaged("the deflate data is corrupt")),
            _ if at == input.len() => return Err(damaged("the deflate data is cut short")),
            _ => return Err(damaged("the deflate data is corrupt")),
        }
    }
    let trailer = input
        .get(at..at + 8)
        .ok_or_else(|| damaged("the CRC32 and size trailer is cut short"))?;
    let crc = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let size = u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]);
    let got = crc32fast::hash(&out);
    if crc != got || size != out.len() as u32 {
        return Err(StreamError::Damaged(format!(
            "its trailer says CRC32 {crc:#010x} of {size} bytes, the data has {got:#010x} of {}",
            out.len()
        )));
    }
    Ok(Unpacked {
        data: out,
        consumed: at + 8,
    })
}

/// lz4's legacy frame magic, little-endian.
const LZ4_MAGIC: u32 = 0x184c_2102;
/// The most one legacy block unpacks to (the kernel's `LZ4_DEFAULT_UNCOMPRESSED_CHUNK_SIZE`).
const LZ4_BLOCK: usize = 8 << 20;

fn lz4(input: &[u8], budget: usize) -> Result<Unpacked, StreamError> {
    let word = |at: usize| {
        input
            .get(at..at + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    if word(0) != Some(LZ4_MAGIC) {
        return Err(StreamError::Damaged(
            "no lz4 legacy magic (02 21 4c 18)".into(),
        ));
    }
    let mut out = Vec::with_capacity(capacity(None, input.len(), budget));
    let mut at = 4;
    // As the kernel's unlz4 (with its zero-padding fix): a length word of 0, or fewer than
    // 4 bytes left, ends the frame; the magic again starts another.
    while let Some(len) = word(at).filter(|&n| n != 0) {
        at += 4;
        if len == LZ4_MAGIC {
            continue;
        }
        let block = input.get(at..at + len as usize).ok_or_else(|| {
            StreamError::Damaged(format!(
                "the block at byte {} ({len} bytes) runs past the end",
                at - 4
            ))
        })?;
        let start = out.len();
        let room = LZ4_BLOCK.min(budget - start);
        out.resize(start + room, 0);
        match lz4_flex::block::decompress_into(block, &mut out[start..]) {
            Ok(n) => out.truncate(start + n),
            // With less room than a block may need, a failure is taken for the budget's
            // (a block that is also corrupt is then reported as too large).
            Err(_) if room < LZ4_BLOCK => return Err(StreamError::TooLarge(start + room + 1)),
            Err(e) => {
                return Err(StreamError::Damaged(format!(
                    "the block at byte {}: {e}",
                    at - 4
                )))
            }
        }
        at += len as usize;
    }
    Ok(Unpacked {
        data: out,
        consumed: at,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// `data` as one zstd frame (level 19, with a content checksum).
    pub(crate) fn zstd_of(data: &[u8]) -> Vec<u8> {
        let mut e = zstd::Encoder::new(Vec::new(), 19).unwrap();
        e.include_checksum(true).unwrap();
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// `data` as one gzip member, with a stored file name as `gzip FILE` writes.
    pub(crate) fn gzip_of(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::GzBuilder::new()
            .filename("initrd.cpio")
            .write(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// `data` as an lz4 legacy frame (`lz4 -l`), in blocks of `block` bytes.
    pub(crate) fn lz4_of(data: &[u8], block: usize) -> Vec<u8> {
        let mut out = LZ4_MAGIC.to_le_bytes().to_vec();
        for b in data.chunks(block) {
            let c = lz4_flex::block::compress(b);
            out.extend_from_slice(&(c.len() as u32).to_le_bytes());
            out.extend_from_slice(&c);
        }
        out
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"initramfs "[i % 10] ^ (i / 997) as u8)
            .collect()
    }

    #[test]
    fn formats_are_told_by_the_kernels_two_bytes() {
        let cases: &[(&[u8], Option<Compression>)] = &[
            (&[0x28, 0xb5, 0x2f, 0xfd], Some(Compression::Zstd)),
            (&[0x1f, 0x8b, 8], Some(Compression::Gzip)),
            (&[0x1f, 0x9e], Some(Compression::Gzip)),
            (b"\xfd7zXZ\0", Some(Compression::Xz)),
            (b"BZh9", Some(Compression::Bzip2)),
            (&[0x5d, 0, 0, 0x80], Some(Compression::Lzma)),
            (b"\x89LZO", Some(Compression::Lzo)),
            (&[0x02, 0x21, 0x4c, 0x18], Some(Compression::Lz4)),
            (b"070701", None),
            (&[0x28], None),
        ];
        for (bytes, want) in cases {
            assert_eq!(Compression::detect(bytes), *want, "{bytes:02x?}");
        }
        assert!(!Compression::Xz.supported() && Compression::Zstd.supported());
    }

    #[test]
    fn each_decoder_takes_its_stream_and_leaves_what_follows() {
        let data = text(300_000);
        for (format, mut packed) in [
            (Compression::Zstd, zstd_of(&data)),
            (Compression::Gzip, gzip_of(&data)),
            (Compression::Lz4, lz4_of(&data, 100_000)),
        ] {
            let len = packed.len();
            // lz4's legacy frame runs to a zero length word: padding ends it.
            packed.extend_from_slice(&[0; 8]);
            let u = unpack(format, &packed, usize::MAX).unwrap();
            assert_eq!(u.data, data, "{format}");
            assert_eq!(u.consumed, len, "{format}");
            assert_eq!(Compression::detect(&packed), Some(format));
        }
    }

    #[test]
    fn a_cut_or_corrupt_stream_is_damaged_and_the_budget_holds() {
        let data = text(300_000);
        for (format, packed) in [
            (Compression::Zstd, zstd_of(&data)),
            (Compression::Gzip, gzip_of(&data)),
            (Compression::Lz4, lz4_of(&data, 100_000)),
        ] {
            let cut = &packed[..packed.len() / 2];
            assert!(
                matches!(
                    unpack(format, cut, usize::MAX),
                    Err(StreamError::Damaged(_))
                ),
                "{format} cut"
            );
            let mut bad = packed.clone();
            let last = bad.len() - 9;
            bad[last] ^= 0x55;
            bad[packed.len() / 2] ^= 0xff;
            assert!(
                matches!(
                    unpack(format, &bad, usize::MAX),
                    Err(StreamError::Damaged(_))
                ),
                "{format} corrupt"
            );
            match unpack(format, &packed, 100_000) {
                Err(StreamError::TooLarge(n)) => assert!(n > 100_000, "{format}: {n}"),
                other => panic!("{format}: {other:?}"),
            }
        }
        assert_eq!(
            unpack(Compression::Xz, b"\xfd7zXZ\0", usize::MAX).unwrap_err(),
            StreamError::Unsupported
        );
    }
}
