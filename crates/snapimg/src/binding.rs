//! What an image is bound to besides the kernel and RAM: the boot setup that starts it (the
//! initramfs the boot loader hands over, file by file, and the snapboot in it), the kernel command line, and every
//! block device that was mounted when it was captured (the root filesystem first of all).
//!
//! A restored kernel keeps the page cache, open files and mounts of the system it was
//! captured on; restored onto an updated root filesystem it reads blocks that now hold other
//! data. So an image is only ever restored when everything here is as it was at capture.
//! [`Binding::check`] compares what the image recorded with what the running boot observes
//! and names every difference.
//!
//! The binding is stored in the image's description (the store's checksums and a signature
//! cover it), encoded as below;
//! all integers little-endian, strings UTF-8 with a u16 length prefix:
//!
//! ```text
//! +------+---------------------------------------------------------------+
//! | u8   | encoding version (2)                                          |
//! | 32   | BLAKE3 of the initramfs's manifest (crate::listing)           |
//! | u32  | manifest files, each: string path, 16-byte entry digest       |
//! | u8 n | snapboot build id, n bytes (n <= 64)                          |
//! | u16  | command-line tokens, each a string                            |
//! | u8   | bound devices, each:                                          |
//! |      |   string mount point, string device name, string fs type,    |
//! |      |   u64 size in bytes, 32-byte BLAKE3 of the sampled blocks     |
//! +------+---------------------------------------------------------------+
//! ```

use crate::listing::{self, FileDigest, ENTRY_DIGEST};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use serde::Serialize;

/// Encoding version of the binding record.
pub const BINDING_VERSION: u8 = 2;
/// Most block devices one image can be bound to.
pub const MAX_BOUND_DEVICES: usize = 16;
/// Longest snapboot build id accepted (GNU build ids are 20 bytes).
pub const MAX_BUILD_ID: usize = 64;
/// Most files one manifest may list (Debian's initramfs-tools with `MODULES=most` has a
/// few thousand).
pub const MAX_MANIFEST_FILES: usize = 1 << 16;

/// Kernel command-line parameters that do not belong to the binding: they only steer the
/// boot that restores (console verbosity, snapboot's own `snapboot.*` settings), so an image
/// captured with one of them restores without it and the other way round.
pub const UNBOUND_PARAMS: &[&str] = &[
    "quiet",
    "loglevel",
    "ignore_loglevel",
    "printk.time",
    "no_console_suspend",
    "initcall_debug",
    // Which program of the initramfs runs first (a restore kernel starts snapboot directly).
    "rdinit",
    // The kernel file the boot loader loaded (GRUB puts it first): the restore kernel's entry
    // names another file than the entry the image was captured on. Which kernel the image
    // belongs to is the identity's check, not this word's.
    "BOOT_IMAGE",
];

/// Whether a command-line token takes part in the binding (see [`UNBOUND_PARAMS`]).
pub fn is_bound_param(token: &str) -> bool {
    let key = token.split('=').next().unwrap_or(token);
    !key.starts_with("snapboot.") && !UNBOUND_PARAMS.contains(&key)
}

/// The tokens of a kernel command line that an image is bound to, in order.
pub fn bound_cmdline(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|t| is_bound_param(t))
        .map(str::to_string)
        .collect()
}

/// The boot setup: the initramfs the boot loader handed over, as the kernel unpacked it, file
/// by file ([`crate::listing`]), and the snapboot that runs resume in it. Observed by
/// `snapboot resume` at every boot and by the restorer from the kernel pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootSetup {
    /// BLAKE3 of the manifest ([`crate::listing::of_sorted`]).
    #[serde(serialize_with = "hex32")]
    pub files: [u8; 32],
    /// Every file and link the manifest covers, sorted by path (the image's JSON gives their
    /// number).
    #[serde(serialize_with = "count")]
    pub manifest: Vec<FileDigest>,
    /// The GNU build id of the snapboot binary in the initramfs.
    #[serde(serialize_with = "hex_vec")]
    pub snapboot_build_id: Vec<u8>,
}

/// One block device that was mounted at capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BoundDevice {
    /// Where it was mounted (`/` for the root filesystem).
    pub mount: String,
    /// Kernel device name (`vda`, `mmcblk0p2`): `/dev/NAME` at resume.
    pub device: String,
    /// Filesystem type it was mounted as.
    pub fstype: String,
    /// Size of the device in bytes.
    pub bytes: u64,
    /// BLAKE3 over the device size and a fixed set of its blocks (superblocks at both ends
    /// and evenly spaced samples; docs/image-format.md, "Binding").
    #[serde(serialize_with = "hex32")]
    pub digest: [u8; 32],
}

/// Everything an image is bound to besides kernel identity and RAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// The initramfs that starts the system.
    pub boot_setup: BootSetup,
    /// The command-line tokens that matter ([`bound_cmdline`]).
    pub cmdline: Vec<String>,
    /// Block devices mounted at capture, the root filesystem first.
    pub devices: Vec<BoundDevice>,
}

/// Why a binding cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// The record does not fit the room the header has for it.
    #[error("the image's binding needs {needed} bytes, the header has room for {room}")]
    TooLarge {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes available.
        room: usize,
    },
    /// A field is out of range.
    #[error("binding: {0}")]
    Invalid(String),
}

/// One difference between the image's binding and the running boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What differs, e.g. `root filesystem / (vda)`.
    pub what: String,
    /// How: the image's value against the running one.
    pub how: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} differs ({})", self.what, self.how)
    }
}

/// The image was captured on another system: every difference found, in order of checking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct BindingMismatch(pub Vec<Difference>);

fn join(d: &[Difference]) -> String {
    d.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn short(h: &[u8]) -> String {
    h.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

impl Binding {
    /// Compares the image's binding (`self`) with what the running boot observed. `running`
    /// must have been observed for the same devices (see `ondevice::binding::observe`); a
    /// device the running system lacks has size 0 and an all-zero digest.
    pub fn check(&self, running: &Binding) -> Result<(), BindingMismatch> {
        let mut d = Vec::new();
        let mut diff = |what: String, how: String| d.push(Difference { what, how });
        let (a, b) = (&self.boot_setup, &running.boot_setup);
        if a.snapboot_build_id != b.snapboot_build_id {
            diff(
                "snapboot in the initramfs".into(),
                format!(
                    "build id {} in the image, {} running",
                    hex(&a.snapboot_build_id),
                    hex(&b.snapboot_build_id)
                ),
            );
        }
        if a.files != b.files {
            let d = listing::diff(&a.manifest, &b.manifest);
            let how = if d.is_empty() {
                format!("{} in the image, {} now", short(&a.files), short(&b.files))
            } else {
                d.describe()
            };
            diff("the initramfs".into(), how);
        }
        if self.cmdline != running.cmdline {
            let only = |x: &[String], y: &[String]| {
                let v: Vec<&str> = x
                    .iter()
                    .filter(|t| !y.contains(t))
                    .map(String::as_str)
                    .collect();
                if v.is_empty() {
                    "(order)".to_string()
                } else {
                    v.join(" ")
                }
            };
            diff(
                "kernel command line".into(),
                format!(
                    "image has {}, this boot has {}",
                    only(&self.cmdline, &running.cmdline),
                    only(&running.cmdline, &self.cmdline)
                ),
            );
        }
        for dev in &self.devices {
            let what = format!("{} {} ({})", mount_name(&dev.mount), dev.mount, dev.device);
            match running.devices.iter().find(|r| r.mount == dev.mount) {
                None => diff(what, "not observed".into()),
                Some(r) if r.bytes == 0 && r.digest == [0; 32] => {
                    diff(what, format!("/dev/{} is missing", dev.device));
                }
                Some(r) if r.bytes != dev.bytes => diff(
                    what,
                    format!(
                        "size {} bytes in the image, {} bytes now",
                        dev.bytes, r.bytes
                    ),
                ),
                Some(r) if r.digest != dev.digest => diff(
                    what,
                    format!(
                        "content {} in the image, {} now",
                        short(&dev.digest),
                        short(&r.digest)
                    ),
                ),
                Some(_) => {}
            }
        }
        if d.is_empty() {
            Ok(())
        } else {
            Err(BindingMismatch(d))
        }
    }

    /// Encodes the record; errors if it exceeds `room` bytes or a field is out of range.
    pub fn encode(&self, room: usize) -> Result<Vec<u8>, BindingError> {
        let mut out = vec![BINDING_VERSION];
        self.boot_setup.encode_into(&mut out)?;
        let tokens = u16::try_from(self.cmdline.len())
            .map_err(|_| BindingError::Invalid("too many command-line tokens".into()))?;
        out.extend_from_slice(&tokens.to_le_bytes());
        for t in &self.cmdline {
            put_str(&mut out, t)?;
        }
        if self.devices.len() > MAX_BOUND_DEVICES {
            return Err(BindingError::Invalid(format!(
                "{} mounted block devices, at most {MAX_BOUND_DEVICES}",
                self.devices.len()
            )));
        }
        out.push(self.devices.len() as u8);
        for d in &self.devices {
            put_str(&mut out, &d.mount)?;
            put_str(&mut out, &d.device)?;
            put_str(&mut out, &d.fstype)?;
            out.extend_from_slice(&d.bytes.to_le_bytes());
            out.extend_from_slice(&d.digest);
        }
        if out.len() > room {
            return Err(BindingError::TooLarge {
                needed: out.len(),
                room,
            });
        }
        Ok(out)
    }

    /// Decodes a record written by [`Binding::encode`], checking every length.
    pub fn decode(b: &[u8]) -> Result<Binding, BindingError> {
        let mut c = Cursor::versioned(b)?;
        let boot_setup = BootSetup::decode_from(&mut c)?;
        let tokens = u16::from_le_bytes(c.array()?);
        let cmdline = (0..tokens).map(|_| c.string()).collect::<Result<_, _>>()?;
        let n = usize::from(c.u8()?);
        if n > MAX_BOUND_DEVICES {
            return Err(BindingError::Invalid(format!("{n} bound devices")));
        }
        let mut devices = Vec::with_capacity(n);
        for _ in 0..n {
            devices.push(BoundDevice {
                mount: c.string()?,
                device: c.string()?,
                fstype: c.string()?,
                bytes: u64::from_le_bytes(c.array()?),
                digest: c.hash()?,
            });
        }
        if c.at != b.len() {
            return Err(BindingError::Invalid(format!(
                "{} bytes after the record",
                b.len() - c.at
            )));
        }
        Ok(Binding {
            boot_setup,
            cmdline,
            devices,
        })
    }
}

impl BootSetup {
    /// The boot setup of a `manifest` (sorted here) and snapboot's build id.
    pub fn new(mut manifest: Vec<FileDigest>, snapboot_build_id: Vec<u8>) -> BootSetup {
        let files = listing::digest(&mut manifest);
        BootSetup {
            files,
            manifest,
            snapboot_build_id,
        }
    }

    /// Its encoding alone (the record `snapboot resume` leaves for a capture later in the
    /// boot): the version byte, then the fields as in the binding (module header).
    pub fn to_bytes(&self) -> Result<Vec<u8>, BindingError> {
        let mut out = vec![BINDING_VERSION];
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Reads what [`BootSetup::to_bytes`] wrote, checking every length and the manifest's
    /// digest.
    pub fn from_bytes(b: &[u8]) -> Result<BootSetup, BindingError> {
        let mut c = Cursor::versioned(b)?;
        let s = BootSetup::decode_from(&mut c)?;
        if c.at != b.len() {
            return Err(BindingError::Invalid(format!(
                "{} bytes after the boot setup",
                b.len() - c.at
            )));
        }
        Ok(s)
    }

    fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BindingError> {
        out.extend_from_slice(&self.files);
        if self.manifest.len() > MAX_MANIFEST_FILES {
            return Err(BindingError::Invalid(format!(
                "{} files in the initramfs's manifest, at most {MAX_MANIFEST_FILES}",
                self.manifest.len()
            )));
        }
        out.extend_from_slice(&(self.manifest.len() as u32).to_le_bytes());
        for f in &self.manifest {
            put_str(out, &f.path)?;
            out.extend_from_slice(&f.digest);
        }
        let id = &self.snapboot_build_id;
        if id.len() > MAX_BUILD_ID {
            return Err(BindingError::Invalid(format!(
                "build id of {} bytes, at most {MAX_BUILD_ID}",
                id.len()
            )));
        }
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        Ok(())
    }

    fn decode_from(c: &mut Cursor<'_>) -> Result<BootSetup, BindingError> {
        let files = c.hash()?;
        let n = u32::from_le_bytes(c.array()?) as usize;
        if n > MAX_MANIFEST_FILES {
            return Err(BindingError::Invalid(format!("{n} files in the manifest")));
        }
        let mut manifest = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            manifest.push(FileDigest {
                path: c.string()?,
                digest: c.array::<ENTRY_DIGEST>()?,
            });
        }
        if listing::of_sorted(&manifest) != files
            || manifest.windows(2).any(|w| w[0].path >= w[1].path)
        {
            return Err(BindingError::Invalid(
                "the initramfs's manifest does not match its digest".into(),
            ));
        }
        let id_len = usize::from(c.u8()?);
        if id_len > MAX_BUILD_ID {
            return Err(BindingError::Invalid(format!("build id of {id_len} bytes")));
        }
        Ok(BootSetup {
            files,
            manifest,
            snapboot_build_id: c.take(id_len)?.to_vec(),
        })
    }
}

fn mount_name(mount: &str) -> &'static str {
    if mount == "/" {
        "root filesystem"
    } else {
        "filesystem"
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), BindingError> {
    let n = u16::try_from(s.len())
        .map_err(|_| BindingError::Invalid(format!("string of {} bytes", s.len())))?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor after the version byte, which must be [`BINDING_VERSION`].
    fn versioned(b: &'a [u8]) -> Result<Cursor<'a>, BindingError> {
        let mut c = Cursor { b, at: 0 };
        let version = c.u8()?;
        if version != BINDING_VERSION {
            return Err(BindingError::Invalid(format!(
                "encoding version {version}, this build reads {BINDING_VERSION}"
            )));
        }
        Ok(c)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], BindingError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| BindingError::Invalid(format!("record ends at byte {}", self.at)))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, BindingError> {
        Ok(self.take(1)?[0])
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], BindingError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn hash(&mut self) -> Result<[u8; 32], BindingError> {
        self.array()
    }
    fn string(&mut self) -> Result<String, BindingError> {
        let n = usize::from(u16::from_le_bytes(self.array()?));
        let at = self.at;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| BindingError::Invalid(format!("string at byte {at} is not UTF-8")))
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex32<S: serde::Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(h))
}

fn count<S: serde::Serializer>(m: &[FileDigest], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(m.len() as u64)
}

fn hex_vec<S: serde::Serializer>(h: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(files: &[(&str, u8)]) -> BootSetup {
        let manifest = files
            .iter()
            .map(|(p, d)| FileDigest {
                path: (*p).into(),
                digest: [*d; ENTRY_DIGEST],
            })
            .collect();
        BootSetup::new(manifest, vec![0xab; 20])
    }

    fn sample() -> Binding {
        Binding {
            boot_setup: setup(&[("init", 1), ("bin/snapboot", 2)]),
            cmdline: bound_cmdline(
                "console=ttyS0 quiet snapboot.store=/dev/vdb loglevel=3 root=/dev/vda ro",
            ),
            devices: vec![BoundDevice {
                mount: "/".into(),
                device: "vda".into(),
                fstype: "squashfs".into(),
                bytes: 100 << 20,
                digest: [3; 32],
            }],
        }
    }

    #[test]
    fn boot_steering_words_are_not_bound() {
        assert_eq!(
            bound_cmdline(
                "BOOT_IMAGE=/snapboot-restore-kernel console=ttyS0 rdinit=/bin/snapboot \
                 quiet snapboot.coldkernel=/dev/vdc loglevel=3 initcall_debug root=/dev/vda ro"
            ),
            ["console=ttyS0", "root=/dev/vda", "ro"]
        );
    }

    #[test]
    fn round_trip() {
        let b = sample();
        let enc = b.encode(4096).unwrap();
        assert_eq!(Binding::decode(&enc).unwrap(), b);
        let s = &b.boot_setup;
        assert_eq!(BootSetup::from_bytes(&s.to_bytes().unwrap()).unwrap(), *s);
        let mut more = s.to_bytes().unwrap();
        more.push(0);
        assert!(BootSetup::from_bytes(&more).is_err());
    }

    #[test]
    fn only_params_that_matter_are_bound() {
        assert_eq!(
            sample().cmdline,
            vec!["console=ttyS0", "root=/dev/vda", "ro"]
        );
    }

    #[test]
    fn same_binding_passes_and_every_difference_is_named() {
        let img = sample();
        assert_eq!(img.check(&img.clone()), Ok(()));
        let mut run = img.clone();
        run.devices[0].digest = [4; 32];
        run.cmdline.push("mitigations=off".into());
        run.boot_setup = setup(&[("init", 9), ("bin/snapboot", 2), ("etc/new", 3)]);
        let msg = img.check(&run).unwrap_err().to_string();
        assert!(
            msg.starts_with(
                "the initramfs differs (changed: /init; only in this boot: /etc/new); "
            ),
            "{msg}"
        );
        assert!(
            msg.contains(
                "kernel command line differs (image has (order), this boot has mitigations=off)"
            ),
            "{msg}"
        );
        assert!(msg.contains("root filesystem / (vda) differs (content 030303030303 in the image, 040404040404 now)"), "{msg}");
        let mut run = img.clone();
        run.devices[0].bytes = 1;
        assert!(img
            .check(&run)
            .unwrap_err()
            .to_string()
            .contains("size 104857600 bytes in the image, 1 bytes now"));
        let mut run = img.clone();
        run.devices[0].bytes = 0;
        run.devices[0].digest = [0; 32];
        assert!(img
            .check(&run)
            .unwrap_err()
            .to_string()
            .contains("/dev/vda is missing"));
        let mut run = img.clone();
        run.boot_setup.snapboot_build_id = vec![1, 2];
        assert!(img
            .check(&run)
            .unwrap_err()
            .to_string()
            .starts_with("snapboot in the initramfs differs (build id abababab"));
    }

    #[test]
    fn too_large_and_damaged_records_are_refused() {
        let mut b = sample();
        b.cmdline = vec!["x".repeat(3000)];
        assert!(matches!(
            b.encode(2048),
            Err(BindingError::TooLarge { room: 2048, .. })
        ));
        let enc = sample().encode(4096).unwrap();
        for cut in [0, 1, 40, enc.len() - 1] {
            assert!(Binding::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = enc.clone();
        longer.push(0);
        assert!(Binding::decode(&longer).is_err());
        let mut wrong_digest = enc.clone();
        wrong_digest[1] ^= 1;
        assert!(Binding::decode(&wrong_digest)
            .unwrap_err()
            .to_string()
            .contains("does not match its digest"));
        let mut bad = enc;
        bad[0] = 7;
        assert!(Binding::decode(&bad)
            .unwrap_err()
            .to_string()
            .contains("encoding version 7"));
    }
}
