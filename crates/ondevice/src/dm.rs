//! Device-mapper through its control device, `/dev/mapper/control`: create a device, load a
//! table, suspend and resume it, remove it. The ioctls and their buffer layout are in
//! `sys::dm`; this module turns them into the steps snapboot needs and names the
//! call and the device when one fails.

use crate::sys::dm::{
    encode_table, Cmd, ControlFd, Reply, Request, CONTROL_PATH, DM_BUFFER_FULL_FLAG,
    DM_SUSPEND_FLAG,
};
use crate::sys::NodeKind;
use std::path::{Path, PathBuf};

pub use crate::sys::DevNum;

/// Sectors are 512 bytes in device-mapper tables.
pub const SECTOR: u64 = 512;

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

/// An open device-mapper control device.
pub struct Control {
    fd: ControlFd,
}

impl Control {
    /// Opens `/dev/mapper/control`, making the node from `/sys` if devtmpfs did not.
    pub fn open() -> Result<Self, DmError> {
        let path = Path::new(CONTROL_PATH);
        if !path.exists() {
            // misc device 10:236 on every kernel; its number is also in /sys.
            let num = std::fs::read_to_string("/sys/class/misc/device-mapper/dev")
                .ok()
                .and_then(|s| DevNum::parse(&s));
            if let Some(n) = num {
                // If this fails, opening the node below says so.
                let _ = n.mknod(path, NodeKind::Char);
            }
        }
        let fd = ControlFd::open().map_err(|err| DmError::NoControl {
            path: path.to_path_buf(),
            err,
        })?;
        let c = Control { fd };
        let mut r = Request::new("version", &[])?;
        c.call(Cmd::Version, "version", "-", &mut r)?;
        Ok(c)
    }

    fn call(
        &self,
        cmd: Cmd,
        what: &'static str,
        name: &str,
        r: &mut Request,
    ) -> Result<Reply, DmError> {
        self.fd.ioctl(cmd, r).map_err(|err| DmError::Ioctl {
            call: what,
            name: name.into(),
            err,
        })
    }

    /// Creates an empty device (no table yet) and returns its number.
    pub fn create(&self, name: &str) -> Result<DevNum, DmError> {
        let mut r = Request::new(name, &[])?;
        Ok(self.call(Cmd::DevCreate, "create", name, &mut r)?.dev)
    }

    /// Loads `targets` as the device's inactive table (made live by [`Control::resume`]).
    pub fn load(&self, name: &str, targets: &[Target]) -> Result<(), DmError> {
        let mut r = Request::new(name, &encode_table(targets)?)?;
        let count = u32::try_from(targets.len()).map_err(|_| DmError::TooLong {
            what: "table",
            value: format!("{} targets", targets.len()),
        })?;
        r.set_target_count(count);
        self.call(Cmd::TableLoad, "table load", name, &mut r)?;
        Ok(())
    }

    /// Suspends the device: waits for in-flight I/O, then holds new I/O.
    pub fn suspend(&self, name: &str) -> Result<(), DmError> {
        let mut r = Request::new(name, &[])?;
        r.set_flags(DM_SUSPEND_FLAG);
        self.call(Cmd::DevSuspend, "suspend", name, &mut r)?;
        Ok(())
    }

    /// Resumes the device, swapping in a loaded table if there is one.
    pub fn resume(&self, name: &str) -> Result<(), DmError> {
        let mut r = Request::new(name, &[])?;
        self.call(Cmd::DevSuspend, "resume", name, &mut r)?;
        Ok(())
    }

    /// Removes the device (it must not be open).
    pub fn remove(&self, name: &str) -> Result<(), DmError> {
        let mut r = Request::new(name, &[])?;
        self.call(Cmd::DevRemove, "remove", name, &mut r)?;
        Ok(())
    }

    /// The device's number, or `None` if no device has this name.
    pub fn find(&self, name: &str) -> Result<Option<DevNum>, DmError> {
        let mut r = Request::new(name, &[])?;
        match self.call(Cmd::DevStatus, "status", name, &mut r) {
            Ok(reply) if reply.flags & DM_BUFFER_FULL_FLAG == 0 => Ok(Some(reply.dev)),
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
        dev.mknod(&node, NodeKind::Block)
            .map_err(|err| DmError::Node {
                path: node.clone(),
                err,
            })?;
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
