//! Device-mapper through its control device, `/dev/mapper/control`: create a device, load a
//! table, suspend and resume it, remove it.
//!
//! This is the one home of snapboot's device-mapper `unsafe`. The `devicemapper` crate would
//! be the natural choice, but its `-sys` crate needs libdevmapper (pkg-config) and libclang at
//! build time, and snapboot has to be one static binary that runs in an initramfs; the part of
//! the interface snapboot uses is five ioctls on one `#[repr(C)]` struct
//! (`include/uapi/linux/dm-ioctl.h`), written out here.
//!
//! ```text
//! ioctl buffer (data_size bytes)
//! +---------------------------+ 0
//! | struct dm_ioctl (312)     |  version 4.0.0, data_size, data_start = 312, name, flags, dev
//! +---------------------------+ 312 = data_start
//! | struct dm_target_spec (40)|  sector_start, length, status, next, target_type[16]
//! | params, NUL, pad to 8     |  "253:0 0" ...
//! +---------------------------+ next (relative to this spec)
//! | ... one per target        |
//! +---------------------------+
//! ```

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Sectors are 512 bytes in device-mapper tables.
pub const SECTOR: u64 = 512;

const DM_NAME_LEN: usize = 128;
const DM_UUID_LEN: usize = 129;
const DM_MAX_TYPE_NAME: usize = 16;
const DM_IOCTL_TYPE: u8 = 0xfd;
const DM_VERSION_CMD: u8 = 0;
const DM_DEV_CREATE_CMD: u8 = 3;
const DM_DEV_REMOVE_CMD: u8 = 4;
const DM_DEV_SUSPEND_CMD: u8 = 6;
const DM_DEV_STATUS_CMD: u8 = 7;
const DM_TABLE_LOAD_CMD: u8 = 9;
const DM_SUSPEND_FLAG: u32 = 1 << 1;
const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;

#[repr(C)]
#[derive(Clone, Copy)]
struct DmIoctl {
    version: [u32; 3],
    data_size: u32,
    data_start: u32,
    target_count: u32,
    open_count: i32,
    flags: u32,
    event_nr: u32,
    padding: u32,
    dev: u64,
    name: [u8; DM_NAME_LEN],
    uuid: [u8; DM_UUID_LEN],
    data: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DmTargetSpec {
    sector_start: u64,
    length: u64,
    status: i32,
    next: u32,
    target_type: [u8; DM_MAX_TYPE_NAME],
}

const IOCTL_SIZE: usize = std::mem::size_of::<DmIoctl>();
const SPEC_SIZE: usize = std::mem::size_of::<DmTargetSpec>();
const _: () = assert!(IOCTL_SIZE == 312);
const _: () = assert!(SPEC_SIZE == 40);

nix::ioctl_readwrite!(dm_version, DM_IOCTL_TYPE, DM_VERSION_CMD, DmIoctl);
nix::ioctl_readwrite!(dm_dev_create, DM_IOCTL_TYPE, DM_DEV_CREATE_CMD, DmIoctl);
nix::ioctl_readwrite!(dm_dev_remove, DM_IOCTL_TYPE, DM_DEV_REMOVE_CMD, DmIoctl);
nix::ioctl_readwrite!(dm_dev_suspend, DM_IOCTL_TYPE, DM_DEV_SUSPEND_CMD, DmIoctl);
nix::ioctl_readwrite!(dm_dev_status, DM_IOCTL_TYPE, DM_DEV_STATUS_CMD, DmIoctl);
nix::ioctl_readwrite!(dm_table_load, DM_IOCTL_TYPE, DM_TABLE_LOAD_CMD, DmIoctl);

/// Errors of device-mapper calls; each names the call and the device.
#[derive(Debug, thiserror::Error)]
pub enum DmError {
    /// The control device is missing: no device-mapper in this kernel.
    #[error("device-mapper is not available ({path}: {err}); load the dm-mod module")]
    NoControl { path: PathBuf, err: std::io::Error },
    /// An ioctl failed.
    #[error("device-mapper {call} of {name}: {err}")]
    Ioctl {
        call: &'static str,
        name: String,
        err: nix::Error,
    },
    /// A name or table line does not fit the interface.
    #[error("device-mapper {what} too long: {value:?}")]
    TooLong { what: &'static str, value: String },
    /// A device node could not be made.
    #[error("device node {path}: {err}")]
    Node { path: PathBuf, err: std::io::Error },
}

/// One line of a table: `start length type params`, in sectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// First sector of the mapped device this line covers.
    pub start: u64,
    /// Sectors covered.
    pub length: u64,
    /// Target type: `linear`, `snapshot`, `verity`, ...
    pub kind: String,
    /// The target's parameters, as `dmsetup table` prints them.
    pub params: String,
}

/// A block device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNum {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl DevNum {
    /// From the kernel's huge (glibc-style) encoding used by `dm_ioctl.dev`.
    fn from_huge(dev: u64) -> Self {
        DevNum {
            major: (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32,
            minor: (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32,
        }
    }

    /// The device number of a block device node or a `/sys/block/NAME/dev` string.
    pub fn of_path(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let md = std::fs::metadata(path)?;
        if !md.file_type().is_block_device() {
            return Err(std::io::Error::other(format!(
                "{} is not a block device",
                path.display()
            )));
        }
        let rdev = md.rdev();
        Ok(DevNum::from_huge(rdev))
    }

    /// Parses `MAJOR:MINOR` (as in `/sys/block/*/dev`).
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.trim().split_once(':')?;
        Some(DevNum {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }

    /// Makes (or replaces) a block device node for this number at `path`.
    pub fn mknod(&self, path: &Path) -> Result<(), DmError> {
        let err = |err| DmError::Node {
            path: path.to_path_buf(),
            err,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let _ = std::fs::remove_file(path);
        nix::sys::stat::mknod(
            path,
            nix::sys::stat::SFlag::S_IFBLK,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(u64::from(self.major), u64::from(self.minor)),
        )
        .map_err(|e| err(std::io::Error::from(e)))
    }
}

impl std::fmt::Display for DevNum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// An open device-mapper control device.
pub struct Control {
    file: File,
}

/// The ioctl buffer: `struct dm_ioctl` followed by a payload, 8-byte aligned.
struct Buffer {
    words: Vec<u64>,
}

impl Buffer {
    fn new(name: &str, payload: &[u8]) -> Result<Self, DmError> {
        if name.is_empty() || name.len() >= DM_NAME_LEN || name.contains('/') {
            return Err(DmError::TooLong {
                what: "name",
                value: name.into(),
            });
        }
        // Room for replies (status, version) even when we send nothing.
        let size = (IOCTL_SIZE + payload.len())
            .max(16 * 1024)
            .next_multiple_of(8);
        let mut b = Buffer {
            words: vec![0u64; size / 8],
        };
        let mut head = DmIoctl {
            version: [4, 0, 0],
            data_size: size as u32,
            data_start: IOCTL_SIZE as u32,
            target_count: 0,
            open_count: 0,
            flags: 0,
            event_nr: 0,
            padding: 0,
            dev: 0,
            name: [0; DM_NAME_LEN],
            uuid: [0; DM_UUID_LEN],
            data: [0; 7],
        };
        head.name[..name.len()].copy_from_slice(name.as_bytes());
        *b.head_mut() = head;
        b.bytes_mut()[IOCTL_SIZE..IOCTL_SIZE + payload.len()].copy_from_slice(payload);
        Ok(b)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.words.len() * 8;
        // SAFETY: the Vec<u64> owns `len` initialised bytes; u8 has no alignment or validity
        // requirements, and the returned slice borrows `self` mutably, so nothing aliases it.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), len) }
    }

    fn head_mut(&mut self) -> &mut DmIoctl {
        // SAFETY: the buffer is at least IOCTL_SIZE bytes and 8-byte aligned (Vec<u64>), which
        // satisfies DmIoctl's size and alignment; every bit pattern is a valid DmIoctl (plain
        // integers and byte arrays); the &mut borrows self, so it is unique.
        unsafe { &mut *self.words.as_mut_ptr().cast::<DmIoctl>() }
    }
}

/// Serialises table lines into `dm_target_spec` records.
fn encode_table(targets: &[Target]) -> Result<Vec<u8>, DmError> {
    let mut out = Vec::new();
    for t in targets {
        if t.kind.len() >= DM_MAX_TYPE_NAME {
            return Err(DmError::TooLong {
                what: "target type",
                value: t.kind.clone(),
            });
        }
        let params_len = (t.params.len() + 1).next_multiple_of(8);
        let next = SPEC_SIZE + params_len;
        let mut kind = [0u8; DM_MAX_TYPE_NAME];
        kind[..t.kind.len()].copy_from_slice(t.kind.as_bytes());
        out.extend_from_slice(&t.start.to_ne_bytes());
        out.extend_from_slice(&t.length.to_ne_bytes());
        out.extend_from_slice(&0i32.to_ne_bytes());
        out.extend_from_slice(&(next as u32).to_ne_bytes());
        out.extend_from_slice(&kind);
        let mut p = t.params.as_bytes().to_vec();
        p.resize(params_len, 0);
        out.extend_from_slice(&p);
    }
    Ok(out)
}

type IoctlFn = unsafe fn(i32, *mut DmIoctl) -> nix::Result<i32>;

impl Control {
    /// Opens `/dev/mapper/control`, making the node from `/sys` if devtmpfs did not.
    pub fn open() -> Result<Self, DmError> {
        let path = Path::new("/dev/mapper/control");
        if !path.exists() {
            // misc device 10:236 on every kernel; its number is also in /sys.
            let num = std::fs::read_to_string("/sys/class/misc/device-mapper/dev")
                .ok()
                .and_then(|s| DevNum::parse(&s));
            if let Some(n) = num {
                let _ = std::fs::create_dir_all("/dev/mapper");
                let _ = nix::sys::stat::mknod(
                    path,
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o600),
                    nix::sys::stat::makedev(u64::from(n.major), u64::from(n.minor)),
                );
            }
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|err| DmError::NoControl {
                path: path.to_path_buf(),
                err,
            })?;
        let c = Control { file };
        let mut b = Buffer::new("version", &[])?;
        c.call("version", "-", dm_version, &mut b)?;
        Ok(c)
    }

    fn call(
        &self,
        what: &'static str,
        name: &str,
        f: IoctlFn,
        b: &mut Buffer,
    ) -> Result<DmIoctl, DmError> {
        let fd = self.file.as_raw_fd();
        let head = b.head_mut() as *mut DmIoctl;
        // SAFETY: `head` points at a buffer of `data_size` bytes (set in Buffer::new) that
        // starts with an initialised dm_ioctl; the kernel reads and writes at most data_size
        // bytes of it, and the buffer outlives the call.
        let r = unsafe { f(fd, head) };
        r.map_err(|err| DmError::Ioctl {
            call: what,
            name: name.into(),
            err,
        })?;
        Ok(*b.head_mut())
    }

    /// Creates an empty device (no table yet) and returns its number.
    pub fn create(&self, name: &str) -> Result<DevNum, DmError> {
        let mut b = Buffer::new(name, &[])?;
        let h = self.call("create", name, dm_dev_create, &mut b)?;
        Ok(DevNum::from_huge(h.dev))
    }

    /// Loads `targets` as the device's inactive table (made live by [`Control::resume`]).
    pub fn load(&self, name: &str, targets: &[Target]) -> Result<(), DmError> {
        let payload = encode_table(targets)?;
        let mut b = Buffer::new(name, &payload)?;
        b.head_mut().target_count = targets.len() as u32;
        self.call("table load", name, dm_table_load, &mut b)?;
        Ok(())
    }

    /// Suspends the device: waits for in-flight I/O, then holds new I/O.
    pub fn suspend(&self, name: &str) -> Result<(), DmError> {
        let mut b = Buffer::new(name, &[])?;
        b.head_mut().flags = DM_SUSPEND_FLAG;
        self.call("suspend", name, dm_dev_suspend, &mut b)?;
        Ok(())
    }

    /// Resumes the device, swapping in a loaded table if there is one.
    pub fn resume(&self, name: &str) -> Result<(), DmError> {
        let mut b = Buffer::new(name, &[])?;
        self.call("resume", name, dm_dev_suspend, &mut b)?;
        Ok(())
    }

    /// Removes the device (it must not be open).
    pub fn remove(&self, name: &str) -> Result<(), DmError> {
        let mut b = Buffer::new(name, &[])?;
        self.call("remove", name, dm_dev_remove, &mut b)?;
        Ok(())
    }

    /// The device's number, or `None` if no device has this name.
    pub fn find(&self, name: &str) -> Result<Option<DevNum>, DmError> {
        let mut b = Buffer::new(name, &[])?;
        match self.call("status", name, dm_dev_status, &mut b) {
            Ok(h) if h.flags & DM_BUFFER_FULL_FLAG == 0 => Ok(Some(DevNum::from_huge(h.dev))),
            Ok(_) => Ok(None),
            Err(DmError::Ioctl {
                err: nix::Error::ENXIO,
                ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates `name` with `targets` live, and a node for it at `/dev/mapper/NAME`.
    pub fn create_with(
        &self,
        name: &str,
        targets: &[Target],
    ) -> Result<(DevNum, PathBuf), DmError> {
        let dev = self.create(name)?;
        let done = self.load(name, targets).and_then(|()| self.resume(name));
        if let Err(e) = done {
            let _ = self.remove(name);
            return Err(e);
        }
        let node = PathBuf::from(format!("/dev/mapper/{name}"));
        dev.mknod(&node)?;
        Ok((dev, node))
    }

    /// Replaces the live table of `name`: suspend (flushing I/O), load, resume.
    pub fn reload(&self, name: &str, targets: &[Target]) -> Result<(), DmError> {
        self.suspend(name)?;
        if let Err(e) = self.load(name, targets) {
            let _ = self.resume(name);
            return Err(e);
        }
        self.resume(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_dev_numbers_decode() {
        // glibc makedev(253, 0) and makedev(259, 70000)
        assert_eq!(
            DevNum::from_huge(0xfd00),
            DevNum {
                major: 253,
                minor: 0
            }
        );
        let enc = |ma: u64, mi: u64| {
            ((ma & 0xffff_f000) << 32)
                | ((ma & 0xfff) << 8)
                | ((mi & 0xffff_ff00) << 12)
                | (mi & 0xff)
        };
        assert_eq!(
            DevNum::from_huge(enc(259, 70000)),
            DevNum {
                major: 259,
                minor: 70000
            }
        );
        assert_eq!(
            DevNum::parse("253:4\n").map(|d| d.to_string()),
            Some("253:4".into())
        );
        assert_eq!(DevNum::parse("x"), None);
    }

    #[test]
    fn table_lines_are_padded_and_chained() {
        let t = vec![
            Target {
                start: 0,
                length: 8,
                kind: "linear".into(),
                params: "254:16 2048".into(),
            },
            Target {
                start: 8,
                length: 16,
                kind: "zero".into(),
                params: String::new(),
            },
        ];
        let b = encode_table(&t).unwrap();
        // first spec: 40 bytes + "254:16 2048\0" (12) padded to 16
        let next = u32::from_ne_bytes(b[20..24].try_into().unwrap()) as usize;
        assert_eq!(next, 56);
        assert_eq!(&b[24..30], b"linear");
        assert_eq!(&b[40..51], b"254:16 2048");
        assert_eq!(b[51], 0);
        let second = &b[next..];
        assert_eq!(u64::from_ne_bytes(second[0..8].try_into().unwrap()), 8);
        assert_eq!(&second[24..28], b"zero");
        assert_eq!(b.len() % 8, 0);
        let long = Target {
            start: 0,
            length: 1,
            kind: "x".repeat(16),
            params: String::new(),
        };
        assert!(matches!(
            encode_table(&[long]),
            Err(DmError::TooLong { .. })
        ));
    }

    #[test]
    fn names_are_checked() {
        assert!(Buffer::new("snapboot-swap", &[]).is_ok());
        assert!(Buffer::new("", &[]).is_err());
        assert!(Buffer::new("a/b", &[]).is_err());
        assert!(Buffer::new(&"n".repeat(128), &[]).is_err());
    }
}
