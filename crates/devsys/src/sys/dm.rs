//! The device-mapper control ioctls (`include/uapi/linux/dm-ioctl.h`) and the buffer they
//! exchange with the kernel, as safe calls on a handle that can only be made by opening
//! `/dev/mapper/control`. [`crate::dm`] builds devices and tables on top.
//!
//! The `devicemapper` crate would be the natural choice, but its `-sys` crate needs
//! libdevmapper (pkg-config) and libclang at build time, and snapboot has to be one static
//! binary that runs in an initramfs; the part of the interface snapboot uses is five ioctls
//! on one `#[repr(C)]` struct, written out here.
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

use super::DevNum;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use zeroize::{Zeroize, Zeroizing};

/// Errors of device-mapper calls; each names the call and the device.
#[derive(Debug, thiserror::Error)]
pub enum DmError {
    /// The control device is missing: no device-mapper in this kernel.
    #[error("device-mapper is not available ({path}); load the dm-mod module")]
    NoControl {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
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
    #[error("cannot make device node {path}")]
    Node {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
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

/// The control device's node.
pub const CONTROL_PATH: &str = "/dev/mapper/control";

const DM_NAME_LEN: usize = 128;
const DM_UUID_LEN: usize = 129;
const DM_MAX_TYPE_NAME: usize = 16;
const DM_IOCTL_TYPE: u8 = 0xfd;
/// `DM_SUSPEND_FLAG`: with [`Cmd::DevSuspend`], suspend (without it: resume).
pub const DM_SUSPEND_FLAG: u32 = 1 << 1;
/// `DM_BUFFER_FULL_FLAG`: the reply did not fit (with [`Cmd::DevStatus`]: no such device).
pub const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;
/// `DM_READONLY_FLAG`: load the table read-only (a `verity` target requires it).
pub const DM_READONLY_FLAG: u32 = 1 << 0;
/// The reply carries a string at `data_start` (a target message's answer).
pub const DM_DATA_OUT_FLAG: u32 = 1 << 16;

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

/// Declares one device-mapper ioctl, all of which share the same contract.
macro_rules! dm_ioctl {
    ($name:ident, $nr:expr, $cmd:literal) => {
        nix::ioctl_readwrite!(
            #[doc = concat!("`", $cmd, "`.")]
            ///
            /// # Safety
            ///
            /// `fd` must be an open `/dev/mapper/control`, and `data` must point to a buffer
            /// of at least `data->data_size` bytes, 8-byte aligned, starting with an
            /// initialised `dm_ioctl`, that nothing else accesses until the call returns
            /// (the kernel reads and writes up to `data_size` bytes of it).
            $name,
            DM_IOCTL_TYPE,
            $nr,
            DmIoctl
        );
    };
}
dm_ioctl!(dm_version, 0, "DM_VERSION");
dm_ioctl!(dm_dev_create, 3, "DM_DEV_CREATE");
dm_ioctl!(dm_dev_remove, 4, "DM_DEV_REMOVE");
dm_ioctl!(dm_dev_suspend, 6, "DM_DEV_SUSPEND");
dm_ioctl!(dm_dev_status, 7, "DM_DEV_STATUS");
dm_ioctl!(dm_table_load, 9, "DM_TABLE_LOAD");
dm_ioctl!(dm_target_msg, 14, "DM_TARGET_MSG");

/// The device-mapper commands snapboot uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    /// `DM_VERSION`: checks the interface version.
    Version,
    /// `DM_DEV_CREATE`: a new device without a table.
    DevCreate,
    /// `DM_DEV_REMOVE`.
    DevRemove,
    /// `DM_DEV_SUSPEND`: suspend with [`DM_SUSPEND_FLAG`], resume without.
    DevSuspend,
    /// `DM_DEV_STATUS`.
    DevStatus,
    /// `DM_TABLE_LOAD`: the payload is the table (see [`encode_table`]).
    TableLoad,
    /// `DM_TARGET_MSG`: the payload is [`target_msg_payload`]; the answer, if any, comes
    /// back at `data_start` ([`Request::data_out`]).
    TargetMsg,
}

/// What the kernel wrote back into the request's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// `dm_ioctl.flags`.
    pub flags: u32,
    /// `dm_ioctl.dev`: the device's number.
    pub dev: DevNum,
}

/// The payload of `DM_TARGET_MSG`: `struct dm_target_msg` (the sector, then the message,
/// NUL-terminated).
pub fn target_msg_payload(sector: u64, message: &str) -> Vec<u8> {
    let mut p = sector.to_ne_bytes().to_vec();
    p.extend_from_slice(message.as_bytes());
    p.push(0);
    p
}

/// An ioctl buffer: `struct dm_ioctl` followed by a payload, 8-byte aligned. Wiped when
/// dropped: a table load may carry a `crypt` target's key.
pub struct Request {
    words: Vec<u64>,
}

impl Drop for Request {
    fn drop(&mut self) {
        self.words.zeroize();
    }
}

impl Request {
    /// A request for the device `name` carrying `payload` after the header.
    pub fn new(name: &str, payload: &[u8]) -> Result<Self, DmError> {
        Self::with_room(name, payload, 16 * 1024)
    }

    /// A request whose buffer has at least `room` bytes (for answers longer than 16 KiB).
    pub fn with_room(name: &str, payload: &[u8], room: usize) -> Result<Self, DmError> {
        if name.is_empty() || name.len() >= DM_NAME_LEN || name.contains('/') {
            return Err(DmError::TooLong {
                what: "name",
                value: name.into(),
            });
        }
        // Room for replies (status, version) even when we send nothing.
        let size = (IOCTL_SIZE + payload.len()).max(room).next_multiple_of(8);
        let data_size = u32::try_from(size).map_err(|_| DmError::TooLong {
            what: "table",
            value: format!("{} bytes", payload.len()),
        })?;
        let mut r = Request {
            words: vec![0u64; size / 8],
        };
        let mut head = DmIoctl {
            version: [4, 0, 0],
            data_size,
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
        *r.head_mut() = head;
        r.bytes_mut()[IOCTL_SIZE..IOCTL_SIZE + payload.len()].copy_from_slice(payload);
        Ok(r)
    }

    /// Sets `dm_ioctl.flags`.
    pub fn set_flags(&mut self, flags: u32) {
        self.head_mut().flags = flags;
    }

    /// Sets `dm_ioctl.target_count` (how many target specs the payload holds).
    pub fn set_target_count(&mut self, n: u32) {
        self.head_mut().target_count = n;
    }

    /// The string the kernel put at `data_start`, when the reply says it did.
    pub fn data_out(&mut self) -> Option<String> {
        let h = *self.head_mut();
        if h.flags & DM_DATA_OUT_FLAG == 0 {
            return None;
        }
        let start = h.data_start as usize;
        let bytes = self.bytes_mut();
        let tail = bytes.get(start..)?;
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        Some(String::from_utf8_lossy(&tail[..end]).into_owned())
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

/// Serialises table lines into `dm_target_spec` records, the payload of [`Cmd::TableLoad`].
///
/// A table may carry a secret (a `crypt` target's key): the records are written into one
/// allocation of their final size (no copy left behind by a reallocation) that is wiped when
/// dropped.
pub fn encode_table(targets: &[Target]) -> Result<Zeroizing<Vec<u8>>, DmError> {
    let params_len = |t: &Target| (t.params.len() + 1).next_multiple_of(8);
    let total = targets.iter().map(|t| SPEC_SIZE + params_len(t)).sum();
    let mut out = Zeroizing::new(Vec::with_capacity(total));
    for t in targets {
        if t.kind.len() >= DM_MAX_TYPE_NAME {
            return Err(DmError::TooLong {
                what: "target type",
                value: t.kind.clone(),
            });
        }
        let params_len = params_len(t);
        let next = SPEC_SIZE + params_len;
        let mut kind = [0u8; DM_MAX_TYPE_NAME];
        kind[..t.kind.len()].copy_from_slice(t.kind.as_bytes());
        out.extend_from_slice(&t.start.to_ne_bytes());
        out.extend_from_slice(&t.length.to_ne_bytes());
        out.extend_from_slice(&0i32.to_ne_bytes());
        out.extend_from_slice(&(next as u32).to_ne_bytes());
        out.extend_from_slice(&kind);
        out.extend_from_slice(t.params.as_bytes());
        let end = out.len() + params_len - t.params.len();
        out.resize(end, 0);
    }
    debug_assert_eq!(out.len(), total);
    Ok(out)
}

/// An open device-mapper control device.
pub struct ControlFd {
    file: File,
}

impl ControlFd {
    /// Opens [`CONTROL_PATH`] (the node must exist).
    pub fn open() -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(CONTROL_PATH)?;
        Ok(Self { file })
    }

    /// Issues `cmd` with `req`; the kernel's reply is written back into `req`.
    pub fn ioctl(&self, cmd: Cmd, req: &mut Request) -> nix::Result<Reply> {
        let fd = self.file.as_raw_fd();
        let head: *mut DmIoctl = req.head_mut();
        // SAFETY: `fd` is /dev/mapper/control (only `open` makes a ControlFd). `head` points
        // at a buffer of `data_size` bytes (set in Request::new, never changed) that starts
        // with an initialised dm_ioctl; the kernel reads and writes at most data_size bytes
        // of it, and `req` is mutably borrowed for the whole call, so the buffer outlives
        // it and nothing else accesses it meanwhile.
        unsafe {
            match cmd {
                Cmd::Version => dm_version(fd, head),
                Cmd::DevCreate => dm_dev_create(fd, head),
                Cmd::DevRemove => dm_dev_remove(fd, head),
                Cmd::DevSuspend => dm_dev_suspend(fd, head),
                Cmd::DevStatus => dm_dev_status(fd, head),
                Cmd::TableLoad => dm_table_load(fd, head),
                Cmd::TargetMsg => dm_target_msg(fd, head),
            }
        }?;
        let h = *req.head_mut();
        Ok(Reply {
            flags: h.flags,
            dev: DevNum::from_dev_t(h.dev),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(Request::new("snapboot-swap", &[]).is_ok());
        assert!(Request::new("", &[]).is_err());
        assert!(Request::new("a/b", &[]).is_err());
        assert!(Request::new(&"n".repeat(128), &[]).is_err());
    }

    #[test]
    fn request_header_carries_name_sizes_and_payload() {
        let mut r = Request::new("snapboot-swap", b"payload").unwrap();
        r.set_flags(DM_SUSPEND_FLAG);
        r.set_target_count(2);
        let h = *r.head_mut();
        assert_eq!(h.version, [4, 0, 0]);
        assert_eq!(h.data_start as usize, IOCTL_SIZE);
        assert_eq!(h.data_size as usize, r.words.len() * 8);
        assert!(h.data_size >= 16 * 1024, "room for the kernel's reply");
        assert_eq!((h.flags, h.target_count), (DM_SUSPEND_FLAG, 2));
        assert_eq!(&h.name[..14], b"snapboot-swap\0");
        assert_eq!(&r.bytes_mut()[IOCTL_SIZE..IOCTL_SIZE + 7], b"payload");
    }
}
