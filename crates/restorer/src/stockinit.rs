//! What the restorer takes from the kernel pack's initramfs (the stock kernel's, whose
//! resume would judge the same images): its settings file (`snapboot.conf`), the trust rule
//! ([`Trust`]: a public key or none) and the boot setup images must be bound to
//! ([`crate::bootsetup`]). All come from one
//! read of its archive, unpacked as the kernel would (crate `initramfs`: uncompressed,
//! zstd, gzip or lz4); an initramfs the restorer cannot read refuses every image, since
//! which ones resume would trust is then unknown.
//!
//! The same three, taken out when the pack is written, ride in the pack as its initramfs
//! summary ([`summary`], [`StockInit::of_summary`]), so a restore need not unpack the
//! initramfs (a second under TCG, most of the EFI restorer's own time):
//!
//! ```text
//! offset  size  field
//! 0          8  magic "SBINITS\0"
//! 8         32  BLAKE3 of the initramfs it was taken from (the pack header's)
//! 40         4  length of /etc/snapboot/image.pub, little endian (0xFFFFFFFF: none), the file
//! ...        4  length of snapboot.conf (0xFFFFFFFF: none), the file
//! ...        4  length of the boot setup, its encoding (snapimg::BootSetup::to_bytes)
//! ```
//!
//! The key and the settings are kept as the files' bytes and read by the same code as from
//! the archive, so the summary's rule is the archive's.

use crate::bootsetup::{boot_setup, SetupError};
use crate::trust::{of_initramfs, KeyFileError};
use admission::Trust;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;
use initramfs::{ArchiveError, Root, Segment};
use snapimg::BootSetup;

/// The most a compressed initramfs may unpack to here: the restorer's heap (256 MiB, nothing
/// freed) also holds the restore's catalog, page list, plan and buffers. Debian's
/// initramfs-tools archive unpacks to about 20 MiB.
pub const UNPACKED_LIMIT: usize = 128 << 20;

/// The segments of an initramfs for the console: `zstd 7.2 MiB -> 19.4 MiB`, an
/// uncompressed archive as `cpio 0.1 MiB`, joined by ` + `.
pub fn describe(segments: &[Segment]) -> String {
    let mut out = String::new();
    for (i, s) in segments.iter().enumerate() {
        let sep = if i == 0 { "" } else { " + " };
        let len = crate::units::Mib(s.len as u64);
        let _ = match s.compression {
            None => write!(out, "{sep}cpio {len} MiB"),
            Some(c) => write!(
                out,
                "{sep}{c} {len} MiB -> {} MiB",
                crate::units::Mib(s.unpacked as u64)
            ),
        };
    }
    out
}

/// Why the initramfs tells nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StockInitError {
    /// Its archive cannot be read.
    #[error("{0}; which images its resume would trust is unknown")]
    Archive(#[from] ArchiveError),
    /// Its public key file is not one.
    #[error(transparent)]
    Key(#[from] KeyFileError),
    /// Its boot setup cannot be computed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// Its settings file is not text.
    #[error(
        "{} in the initramfs is not UTF-8 text",
        bootparams::config::CONFIG_PATH
    )]
    ConfigNotText,
    /// The pack's summary of it is not one, or of another initramfs.
    #[error("the kernel pack's initramfs summary: {0}")]
    Summary(String),
}

/// The summary's first bytes.
pub const SUMMARY_MAGIC: [u8; 8] = *b"SBINITS\0";
const NONE: u32 = u32::MAX;

/// The initramfs summary of `initrd` (module docs): what a pack writer puts beside it
/// (`kernelpack::write_with_summary`). An initramfs the restorer could not read has none
/// (the error says why; the restorer then reads the archive and refuses for that reason).
pub fn summary(initrd: &[u8]) -> Result<Vec<u8>, StockInitError> {
    let root = initramfs::unpack_with_limit(initrd, UNPACKED_LIMIT)?;
    let stock = StockInit::of(&root)?;
    let key = crate::trust::key_file(&root)?;
    let setup = stock
        .boot_setup
        .to_bytes()
        .map_err(|e| StockInitError::Summary(e.to_string()))?;
    let mut out = Vec::with_capacity(64 + setup.len());
    out.extend_from_slice(&SUMMARY_MAGIC);
    out.extend_from_slice(blake3::hash(initrd).as_bytes());
    for field in [
        key,
        stock.config.as_deref().map(str::as_bytes),
        Some(&setup[..]),
    ] {
        match field {
            None => out.extend_from_slice(&NONE.to_le_bytes()),
            Some(b) => {
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    Ok(out)
}

/// The stock initramfs's rules for images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockInit {
    /// Which images are trusted.
    pub trust: Trust,
    /// The boot setup an image must be bound to.
    pub boot_setup: BootSetup,
    /// The text of its settings file ([`bootparams::config::CONFIG_PATH`]), if it has one:
    /// the device's settings under the command line, as its resume reads them.
    pub config: Option<String>,
}

impl StockInit {
    /// Reads the initramfs `bytes` (checked against the pack's BLAKE3 by the caller).
    pub fn read(bytes: &[u8]) -> Result<StockInit, StockInitError> {
        Self::of(&initramfs::unpack_with_limit(bytes, UNPACKED_LIMIT)?)
    }

    /// The rules a pack's initramfs summary (module docs) carries for the initramfs whose
    /// BLAKE3 is `initrd_hash` (the pack header's).
    pub fn of_summary(b: &[u8], initrd_hash: &[u8; 32]) -> Result<StockInit, StockInitError> {
        let bad = |why: &str| StockInitError::Summary(why.into());
        if b.get(..8) != Some(&SUMMARY_MAGIC[..]) {
            return Err(bad("no summary here (magic)"));
        }
        if b.get(8..40) != Some(&initrd_hash[..]) {
            return Err(bad("taken from another initramfs than the pack's"));
        }
        let mut at = 40;
        let mut field = || -> Result<Option<&[u8]>, StockInitError> {
            let len = b
                .get(at..at + 4)
                .map(|l| u32::from_le_bytes(l.try_into().unwrap_or_default()))
                .ok_or_else(|| bad("cut short"))?;
            at += 4;
            if len == NONE {
                return Ok(None);
            }
            let data = b
                .get(at..at + len as usize)
                .ok_or_else(|| bad("cut short"))?;
            at += len as usize;
            Ok(Some(data))
        };
        let key = field()?;
        let config = field()?;
        let setup = field()?.ok_or_else(|| bad("no boot setup"))?;
        if at != b.len() {
            return Err(bad("bytes after its end"));
        }
        let config = match config {
            None => None,
            Some(c) => Some(
                core::str::from_utf8(c)
                    .map_err(|_| StockInitError::ConfigNotText)?
                    .into(),
            ),
        };
        Ok(StockInit {
            trust: crate::trust::of_key_file(key)?,
            boot_setup: BootSetup::from_bytes(setup)
                .map_err(|e| StockInitError::Summary(e.to_string()))?,
            config,
        })
    }

    /// The rules of the unpacked initramfs `root`.
    pub fn of(root: &Root) -> Result<StockInit, StockInitError> {
        let config = match root.get(bootparams::config::CONFIG_PATH) {
            None => None,
            Some(f) => Some(
                core::str::from_utf8(f.data())
                    .map_err(|_| StockInitError::ConfigNotText)?
                    .into(),
            ),
        };
        Ok(StockInit {
            trust: of_initramfs(root)?,
            boot_setup: boot_setup(root)?,
            config,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board's Debian initramfs (initramfs-tools, zstd; `snapboot board build
    /// --workload debian`) is read whole: its trust rule and boot setup come out.
    #[test]
    fn the_debian_initramfs_is_read() {
        let home = std::env::var("SNAPBOOT_HOME").unwrap_or_else(|_| ".snapboot".into());
        let file = std::path::Path::new(&home).join("bundles/debian/initramfs.cpio");
        let Ok(bytes) = std::fs::read(&file) else {
            println!("skipped: no {}", file.display());
            return;
        };
        let t = std::time::Instant::now();
        let stock = StockInit::read(&bytes).unwrap();
        println!(
            "{}: read in {:.1} ms: {} (boot setup: {} files, manifest {:02x?}…)",
            file.display(),
            t.elapsed().as_secs_f64() * 1e3,
            stock.trust.describe(),
            stock.boot_setup.manifest.len(),
            &stock.boot_setup.files[..4],
        );
        let init = stock.boot_setup.manifest.iter().any(|f| f.path == "init");
        assert!(init, "the manifest covers /init");
        let hash = *blake3::hash(&bytes).as_bytes();
        let s = summary(&bytes).unwrap();
        let t = std::time::Instant::now();
        assert_eq!(StockInit::of_summary(&s, &hash).unwrap(), stock);
        println!(
            "its summary: {} bytes, read in {:.2} ms",
            s.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }

    /// A small initramfs with snapboot, a key file (when `key`) and settings.
    fn small(key: Option<&str>) -> Vec<u8> {
        use snapimg::build_id::testing::{elf, note};
        let exe = elf(&note(
            b"GNU\0",
            snapimg::build_id::NT_GNU_BUILD_ID,
            &[3; 20],
        ));
        let mut files: Vec<(&str, u32, &[u8])> = vec![
            ("bin/snapboot", 0o100755, &exe),
            (
                "etc/snapboot/snapboot.conf",
                0o100644,
                b"store = PARTLABEL=snapstore\n",
            ),
            ("init", 0o100755, b"#!/bin/sh\n"),
        ];
        if let Some(k) = key {
            files.push((crate::trust::PUBLIC_KEY_PATH, 0o100644, k.as_bytes()));
        }
        initramfs::testing::archive(&files)
    }

    /// The summary gives what the archive gives: settings, trust rule, boot setup; for
    /// another initramfs or damaged, it is refused with the reason.
    #[test]
    fn the_summary_reads_as_the_archive() {
        // RFC 8032's first test key.
        let key = "snapboot-image-public-key ed25519 d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\n";
        for key in [None, Some(key)] {
            let initrd = small(key);
            let hash = *blake3::hash(&initrd).as_bytes();
            let s = summary(&initrd).unwrap();
            let read = StockInit::read(&initrd).unwrap();
            assert_eq!(StockInit::of_summary(&s, &hash).unwrap(), read);
            assert_eq!(read.trust.key.is_some(), key.is_some());
            assert!(read.config.is_some());

            let other = [9u8; 32];
            let e = StockInit::of_summary(&s, &other).unwrap_err().to_string();
            assert!(e.contains("another initramfs"), "{e}");
            for cut in [0, 8, 41, s.len() - 1] {
                assert!(
                    StockInit::of_summary(&s[..cut], &hash).is_err(),
                    "cut at {cut}"
                );
            }
            let mut longer = s.clone();
            longer.push(0);
            let e = StockInit::of_summary(&longer, &hash)
                .unwrap_err()
                .to_string();
            assert!(e.contains("bytes after its end"), "{e}");
        }
        // An initramfs the restorer cannot read has no summary, for the archive's reason.
        let e = summary(b"\xfd7zXZ\0\0\0").unwrap_err().to_string();
        assert!(e.contains("xz-compressed"), "{e}");
    }

    #[test]
    fn the_console_names_each_segment() {
        let s = |at, len, compression, unpacked| Segment {
            at,
            len,
            compression,
            unpacked,
        };
        let segs = [
            s(0, 100 << 10, None, 100 << 10),
            s(
                100 << 10,
                7 << 20,
                Some(initramfs::Compression::Zstd),
                19 << 20,
            ),
        ];
        assert_eq!(describe(&segs), "cpio 0.1 MiB + zstd 7.0 MiB -> 19.0 MiB");
    }

    #[test]
    fn an_unreadable_initramfs_says_why() {
        let e = StockInit::read(b"\xfd7zXZ\0\0\0").unwrap_err().to_string();
        assert!(
            e.starts_with("its archive at byte 0 is xz-compressed: not supported")
                && e.ends_with("which images its resume would trust is unknown"),
            "{e}"
        );
    }
}
