//! Device-mapper through its control device, `/dev/mapper/control`: create a device, load a
//! table, suspend and resume it, remove it. The ioctls and their buffer layout are in
//! `sys::dm`, with the table line ([`Target`]) and the error ([`DmError`]) they take and give;
//! this module turns them into the steps snapboot needs and names the call and the device when
//! one fails.

use crate::sys::dm::{
    encode_table, target_msg_payload, Cmd, ControlFd, Reply, Request, CONTROL_PATH,
    DM_BUFFER_FULL_FLAG, DM_READONLY_FLAG, DM_SUSPEND_FLAG,
};
use crate::sys::NodeKind;
use std::path::{Path, PathBuf};

pub use crate::sys::dm::{DmError, Target};
pub use crate::sys::DevNum;

/// Sectors are 512 bytes in device-mapper tables.
pub const SECTOR: u64 = 512;

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
        self.load_with(name, targets, false)
    }

    fn load_with(&self, name: &str, targets: &[Target], readonly: bool) -> Result<(), DmError> {
        let mut r = Request::new(name, &encode_table(targets)?)?;
        if readonly {
            r.set_flags(DM_READONLY_FLAG);
        }
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
        self.create_flagged(name, targets, false)
    }

    /// [`Control::create_with`], the table read-only (as `verity` requires).
    pub fn create_readonly(
        &self,
        name: &str,
        targets: &[Target],
    ) -> Result<(DevNum, PathBuf), DmError> {
        self.create_flagged(name, targets, true)
    }

    fn create_flagged(
        &self,
        name: &str,
        targets: &[Target],
        readonly: bool,
    ) -> Result<(DevNum, PathBuf), DmError> {
        let dev = self.create(name)?;
        let done = self
            .load_with(name, targets, readonly)
            .and_then(|()| self.resume(name));
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

    /// Sends `message` to the device's targets (`dmsetup message NAME 0 MESSAGE`) and
    /// returns the answer, if the target gave one.
    pub fn message(&self, name: &str, message: &str) -> Result<Option<String>, DmError> {
        let mut r = Request::with_room(name, &target_msg_payload(0, message), 256 * 1024)?;
        let reply = self.call(Cmd::TargetMsg, "message", name, &mut r)?;
        if reply.flags & DM_BUFFER_FULL_FLAG != 0 {
            return Err(DmError::TooLong {
                what: "answer to message",
                value: message.into(),
            });
        }
        Ok(r.data_out())
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

/// Per-area I/O counters of a device (device-mapper statistics, `@stats_*` messages;
/// Documentation/admin-guide/device-mapper/statistics.rst): created over the whole device
/// in `areas` equal areas, deleted on drop.
pub struct Stats<'a> {
    ctl: &'a Control,
    name: String,
    id: u64,
}

/// One area's counters, as `@stats_print` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AreaCounters {
    /// First sector of the area.
    pub start: u64,
    /// Sectors in the area.
    pub len: u64,
    /// Sectors read.
    pub read_sectors: u64,
    /// Sectors written.
    pub write_sectors: u64,
}

impl<'a> Stats<'a> {
    /// Starts counting on `name` in `areas` areas.
    pub fn create(ctl: &'a Control, name: &str, areas: u32) -> Result<Self, DmError> {
        let answer = ctl.message(name, &format!("@stats_create - /{areas}"))?;
        let id = answer
            .as_deref()
            .map(str::trim)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| DmError::TooLong {
                what: "answer to @stats_create",
                value: answer.unwrap_or_default(),
            })?;
        Ok(Stats {
            ctl,
            name: name.into(),
            id,
        })
    }

    /// Every area's counters so far.
    pub fn areas(&self) -> Result<Vec<AreaCounters>, DmError> {
        let text = self
            .ctl
            .message(&self.name, &format!("@stats_print {}", self.id))?
            .unwrap_or_default();
        Ok(parse_stats(&text))
    }
}

impl Drop for Stats<'_> {
    fn drop(&mut self) {
        let _ = self
            .ctl
            .message(&self.name, &format!("@stats_delete {}", self.id));
    }
}

/// Parses `@stats_print` lines: `START+LEN reads merged sectors ms writes merged sectors ...`.
pub fn parse_stats(text: &str) -> Vec<AreaCounters> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (start, len) = f.next()?.split_once('+')?;
            let n: Vec<u64> = f.take(7).map(|x| x.parse().ok()).collect::<Option<_>>()?;
            if n.len() != 7 {
                return None;
            }
            Some(AreaCounters {
                start: start.parse().ok()?,
                len: len.parse().ok()?,
                read_sectors: n[2],
                write_sectors: n[6],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lines_give_sectors_read_and_written() {
        let t = "0+2048 3 0 24 1 10 2 80 5 0 6 6 0 0 0 0 0 0 0\n\
                 2048+2048 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n\
                 bogus line\n";
        let a = parse_stats(t);
        assert_eq!(a.len(), 2);
        assert_eq!(
            a[0],
            AreaCounters {
                start: 0,
                len: 2048,
                read_sectors: 24,
                write_sectors: 80
            }
        );
        assert_eq!((a[1].start, a[1].write_sectors), (2048, 0));
    }
}
