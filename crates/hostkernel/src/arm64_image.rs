//! The arm64 kernel `Image`: what Debian ships as `/boot/vmlinuz-*` is that Image compressed
//! with gzip, and both U-Boot's `booti` and QEMU's `-kernel` want it uncompressed, as does
//! `kexec_file_load` on arm64. The board gunzips it once, on the host.
//!
//! The Image's 64-byte header (Documentation/arm64/booting.rst), little-endian:
//!
//! ```text
//! offset  size  field
//!      0     4  code0 (with an EFI stub: "MZ" and a branch)
//!      4     4  code1
//!      8     8  text_offset
//!     16     8  image_size   (effective size, bss included)
//!     24     8  flags
//!     32     8  res2, res3 (reserved)
//!     48     8  res4 (reserved)
//!     56     4  magic        "ARM\x64"
//!     60     4  res5 (offset of the PE header with an EFI stub)
//! ```

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

/// Offset of the magic in the Image header.
pub const MAGIC_OFFSET: usize = 56;
/// The Image header's magic, `ARM\x64`.
pub const MAGIC: [u8; 4] = *b"ARM\x64";
/// The largest uncompressed Image the board accepts (a distribution Image is about 33 MiB).
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

/// Why a file is not (or does not hold) an arm64 Image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The gzip stream is damaged.
    #[error("gzip: {0}")]
    Gzip(#[source] std::io::Error),
    /// The decompressed data is larger than any kernel.
    #[error("more than {max} bytes once decompressed: not a kernel")]
    TooLarge {
        /// [`MAX_IMAGE_BYTES`].
        max: u64,
    },
    /// The data has no Image header magic at offset 56.
    #[error(
        "no arm64 Image magic \"ARM\\x64\" at offset {MAGIC_OFFSET} of {len} bytes (found {found})"
    )]
    NoMagic {
        /// Bytes examined.
        len: usize,
        /// What is at the magic's place, in hex (empty when the data is shorter).
        found: String,
    },
}

/// Whether `data` starts with an arm64 Image header.
pub fn is_image(data: &[u8]) -> bool {
    data.get(MAGIC_OFFSET..MAGIC_OFFSET + 4) == Some(&MAGIC[..])
}

/// The header's `image_size`: the bytes the kernel occupies once running, bss included
/// (0 on kernels older than 3.17).
pub fn image_size(data: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(16..24)?.try_into().ok()?))
}

/// The uncompressed Image in `data`: `data` itself when it already is one, else the gzip
/// stream decompressed; either way the header magic is checked.
pub fn uncompressed(data: &[u8]) -> Result<Vec<u8>, ImageError> {
    let image = if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(data.len() * 3);
        flate2::read::GzDecoder::new(data)
            .take(MAX_IMAGE_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(ImageError::Gzip)?;
        if out.len() as u64 > MAX_IMAGE_BYTES {
            return Err(ImageError::TooLarge {
                max: MAX_IMAGE_BYTES,
            });
        }
        out
    } else {
        data.to_vec()
    };
    if !is_image(&image) {
        let found = image
            .get(MAGIC_OFFSET..MAGIC_OFFSET + 4)
            .unwrap_or_default()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(ImageError::NoMagic {
            len: image.len(),
            found,
        });
    }
    Ok(image)
}

/// Writes the uncompressed Image of `data` to `out` (through a temporary file: never half an
/// Image) and returns it.
pub fn write_uncompressed(data: &[u8], out: &Path) -> Result<Vec<u8>, UnpackError> {
    let image = uncompressed(data).map_err(UnpackError::Image)?;
    let tmp = out.with_extension("tmp");
    let write = |p: &Path| -> std::io::Result<()> {
        let mut f = fs::File::create(p)?;
        f.write_all(&image)?;
        f.sync_all()
    };
    write(&tmp).map_err(|e| UnpackError::Io(tmp.clone(), e))?;
    fs::rename(&tmp, out).map_err(|e| UnpackError::Io(out.to_path_buf(), e))?;
    Ok(image)
}

/// Why [`write_uncompressed`] failed.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The input holds no Image.
    #[error(transparent)]
    Image(ImageError),
    /// The output could not be written.
    #[error("{}", .0.display())]
    Io(std::path::PathBuf, #[source] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic Image: header with the magic and `image_size`, then `body`.
    fn image(body: &[u8]) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..2].copy_from_slice(b"MZ");
        h[16..24].copy_from_slice(&0x0200_0000u64.to_le_bytes());
        h[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(&MAGIC);
        h.extend_from_slice(body);
        h
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn a_gzipped_image_is_decompressed_and_its_header_read() {
        let img = image(&b"Linux version 6.1.0-56-arm64 (x) #1 SMP\n".repeat(50));
        let out = uncompressed(&gzip(&img)).unwrap();
        assert_eq!(out, img);
        assert!(is_image(&out));
        assert_eq!(image_size(&out), Some(0x0200_0000));
        assert_eq!(
            uncompressed(&img).unwrap(),
            img,
            "already uncompressed: kept"
        );
    }

    #[test]
    fn gzip_of_something_else_is_refused_naming_what_is_at_the_magic() {
        let mut not = image(b"body");
        not[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(b"\x7fELF");
        let err = uncompressed(&gzip(&not)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no arm64 Image magic \"ARM\\x64\" at offset 56 of 68 bytes (found 7f 45 4c 46)"
        );
        let short = uncompressed(&gzip(b"tiny")).unwrap_err();
        assert!(
            matches!(short, ImageError::NoMagic { len: 4, ref found } if found.is_empty()),
            "{short}"
        );
    }

    #[test]
    fn a_damaged_gzip_stream_is_a_gzip_error() {
        let mut gz = gzip(&image(&[7u8; 4096]));
        let n = gz.len();
        gz.truncate(n / 2);
        assert!(matches!(uncompressed(&gz), Err(ImageError::Gzip(_))));
    }

    #[test]
    fn the_uncompressed_image_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let img = image(b"kernel");
        let out = dir.path().join("Image");
        assert_eq!(write_uncompressed(&gzip(&img), &out).unwrap(), img);
        assert_eq!(fs::read(&out).unwrap(), img);
        assert!(!dir.path().join("Image.tmp").exists());
        assert!(write_uncompressed(b"plain junk", &dir.path().join("J")).is_err());
        assert!(!dir.path().join("J").exists(), "nothing written for junk");
    }
}
