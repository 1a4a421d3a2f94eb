//! Chunk compression and decompression, one context per worker thread.
//!
//! A chunk whose compressed form would not be smaller than its raw bytes is
//! stored raw (stored length = raw length), so the data of an image never
//! exceeds its unique pages.

use serde::Serialize;

/// How chunks are compressed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Compression {
    /// Stored raw: zero pages and duplicates still cost nothing, unique pages are read as
    /// they are. Fastest where the CPU is slower than the storage.
    None,
    /// LZ4 block format (`lz4_flex`): fastest to decompress, the default.
    #[default]
    Lz4,
    /// zstd at `level` (1..=22; negative levels are faster): smaller, slower.
    Zstd {
        /// zstd compression level.
        level: i32,
    },
}

impl Compression {
    /// The header's compressor code and level.
    pub(crate) fn code(self) -> (u32, i32) {
        match self {
            Compression::None => (0, 0),
            Compression::Lz4 => (1, 0),
            Compression::Zstd { level } => (2, level),
        }
    }

    /// Decode the header's compressor code and level.
    pub(crate) fn from_code(code: u32, level: i32) -> Option<Self> {
        match (code, level) {
            (0, 0) => Some(Compression::None),
            (1, 0) => Some(Compression::Lz4),
            (2, l) if (-131072..=22).contains(&l) => Some(Compression::Zstd { level: l }),
            _ => None,
        }
    }

    /// `none`, `lz4` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd { .. } => "zstd",
        }
    }

    /// The zstd level, if zstd.
    pub fn level(self) -> Option<i32> {
        match self {
            Compression::None | Compression::Lz4 => None,
            Compression::Zstd { level } => Some(level),
        }
    }
}

/// Compresses chunks; keeps a zstd context between chunks.
pub(crate) struct Encoder {
    kind: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    buf: Vec<u8>,
}

impl Encoder {
    /// An encoder for `kind`.
    pub fn new(kind: Compression) -> Self {
        let zstd = match kind {
            Compression::Zstd { level } => zstd::bulk::Compressor::new(level).ok(),
            Compression::None | Compression::Lz4 => None,
        };
        Encoder {
            kind,
            zstd,
            buf: Vec::new(),
        }
    }

    /// The bytes to store for `raw`: compressed, or `raw` itself if that is
    /// not smaller.
    pub fn encode(&mut self, raw: &[u8]) -> Result<Vec<u8>, String> {
        let n = match self.kind {
            Compression::None => return Ok(raw.to_vec()),
            Compression::Lz4 => {
                self.buf
                    .resize(lz4_flex::block::get_maximum_output_size(raw.len()), 0);
                lz4_flex::block::compress_into(raw, &mut self.buf)
                    .map_err(|e| format!("lz4: {e}"))?
            }
            Compression::Zstd { .. } => {
                let c = self
                    .zstd
                    .as_mut()
                    .ok_or_else(|| "zstd context could not be created".to_string())?;
                self.buf
                    .resize(zstd::zstd_safe::compress_bound(raw.len()), 0);
                c.compress_to_buffer(raw, &mut self.buf[..])
                    .map_err(|e| format!("zstd: {e}"))?
            }
        };
        if n >= raw.len() {
            Ok(raw.to_vec())
        } else {
            Ok(self.buf[..n].to_vec())
        }
    }
}

/// Decompresses chunks; keeps a zstd context between chunks.
pub(crate) struct Decoder {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Decoder {
    /// A decoder (creates its zstd context on first use).
    pub fn new() -> Self {
        Decoder { zstd: None }
    }

    /// Decode `stored` into `out`, which must come out exactly full.
    pub fn decode(
        &mut self,
        kind: Compression,
        stored: &[u8],
        out: &mut [u8],
    ) -> Result<(), String> {
        if stored.len() == out.len() {
            out.copy_from_slice(stored);
            return Ok(());
        }
        let n = match kind {
            Compression::None => {
                return Err(format!(
                    "uncompressed chunk of {} bytes, the offset table says {}",
                    stored.len(),
                    out.len()
                ))
            }
            Compression::Lz4 => {
                lz4_flex::block::decompress_into(stored, out).map_err(|e| format!("lz4: {e}"))?
            }
            Compression::Zstd { .. } => {
                if self.zstd.is_none() {
                    self.zstd = Some(
                        zstd::bulk::Decompressor::new()
                            .map_err(|e| format!("zstd context: {e}"))?,
                    );
                }
                let d = self
                    .zstd
                    .as_mut()
                    .ok_or_else(|| "zstd context missing".to_string())?;
                d.decompress_to_buffer(stored, out)
                    .map_err(|e| format!("zstd: {e}"))?
            }
        };
        if n != out.len() {
            return Err(format!(
                "decompressed to {n} bytes, the offset table says {}",
                out.len()
            ));
        }
        Ok(())
    }
}
