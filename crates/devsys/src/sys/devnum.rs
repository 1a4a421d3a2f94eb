//! Device numbers, `MAJOR:MINOR`: the one place that encodes and decodes them, whether they
//! come from `stat`'s `st_rdev`, from device-mapper's `dm_ioctl.dev`, or from a
//! `/sys/.../dev` file, and the one place that makes device nodes from them.
//!
//! The kernel's `dev_t` has a 12-bit major and a 20-bit minor. User space sees them in the
//! 64-bit glibc encoding (`makedev(3)`), which also decodes the kernel's 32-bit
//! `new_encode_dev`/`huge_encode_dev` form that device-mapper returns: for every number the
//! kernel can hold, the two encodings agree. rustix computes that encoding without `unsafe`.

use rustix::fs::{FileType, Mode, CWD};
use std::path::Path;

/// A device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevNum {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// Which kind of device node [`DevNum::mknod`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A block device (`S_IFBLK`).
    Block,
    /// A character device (`S_IFCHR`).
    Char,
}

impl DevNum {
    /// Decodes a `dev_t` (`st_rdev`, or device-mapper's `dm_ioctl.dev`).
    pub fn from_dev_t(dev: u64) -> Self {
        DevNum {
            major: rustix::fs::major(dev),
            minor: rustix::fs::minor(dev),
        }
    }

    /// Encodes this number as a `dev_t`, as `mknod(2)` takes it.
    pub fn to_dev_t(self) -> u64 {
        rustix::fs::makedev(self.major, self.minor)
    }

    /// The device number of the block device node at `path` (an error says "not a block
    /// device" for anything else; callers name the path).
    pub fn of_path(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let md = std::fs::metadata(path)?;
        if !md.file_type().is_block_device() {
            return Err(std::io::Error::other("not a block device"));
        }
        Ok(DevNum::from_dev_t(md.rdev()))
    }

    /// Parses `MAJOR:MINOR` (as in `/sys/block/*/dev`; surrounding whitespace is ignored).
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.trim().split_once(':')?;
        Some(DevNum {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }

    /// Makes (or replaces) a device node of `kind` for this number at `path`, mode 0600,
    /// creating its parent directories.
    pub fn mknod(self, path: &Path, kind: NodeKind) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(path);
        let file_type = match kind {
            NodeKind::Block => FileType::BlockDevice,
            NodeKind::Char => FileType::CharacterDevice,
        };
        rustix::fs::mknodat(
            CWD,
            path,
            file_type,
            Mode::from_raw_mode(0o600),
            self.to_dev_t(),
        )?;
        Ok(())
    }
}

impl std::fmt::Display for DevNum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `new_encode_dev` (include/linux/kdev_t.h), which `huge_encode_dev` and so
    /// `dm_ioctl.dev` use.
    fn kernel_encode(major: u32, minor: u32) -> u64 {
        u64::from((minor & 0xff) | (major << 8) | ((minor & !0xff) << 12))
    }

    #[test]
    fn numbers_round_trip_through_dev_t_and_text() {
        // Majors up to the kernel's 12 bits, minors up to its 20 bits.
        for (major, minor) in [(0, 0), (8, 1), (253, 0), (259, 70000), (4095, 0xf_ffff)] {
            let d = DevNum { major, minor };
            assert_eq!(DevNum::from_dev_t(d.to_dev_t()), d);
            assert_eq!(DevNum::from_dev_t(kernel_encode(major, minor)), d);
            assert_eq!(DevNum::parse(&d.to_string()), Some(d));
        }
        // Numbers beyond the kernel's range survive the 64-bit encoding too.
        let wide = DevNum {
            major: u32::MAX,
            minor: u32::MAX,
        };
        assert_eq!(DevNum::from_dev_t(wide.to_dev_t()), wide);
    }

    #[test]
    fn dev_t_encoding_is_glibcs() {
        // glibc makedev(253, 0) == 0xfd00; makedev(259, 70000) splits the minor.
        let d = DevNum {
            major: 253,
            minor: 0,
        };
        assert_eq!(d.to_dev_t(), 0xfd00);
        let d = DevNum {
            major: 259,
            minor: 70000,
        };
        // minor 0x11170: low byte 0x70 at bits 0-7, the rest at bits 20+; major 0x103 at bits 8-19.
        assert_eq!(d.to_dev_t(), 0x1111_0370);
        assert_eq!(d.to_dev_t(), kernel_encode(259, 70000));
    }

    #[test]
    fn sysfs_dev_text_parses() {
        assert_eq!(
            DevNum::parse("253:4\n"),
            Some(DevNum {
                major: 253,
                minor: 4
            })
        );
        assert_eq!(DevNum::parse("x"), None);
        assert_eq!(DevNum::parse("1:"), None);
        assert_eq!(DevNum::parse("-1:2"), None);
    }

    #[test]
    fn of_path_refuses_what_is_not_a_block_device() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let err = DevNum::of_path(f.path()).unwrap_err().to_string();
        assert_eq!(err, "not a block device");
        assert!(DevNum::of_path(Path::new("/nonexistent/dev")).is_err());
    }
}
