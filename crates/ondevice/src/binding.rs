//! Observing what an image is bound to ([`snapimg::Binding`]): the boot setup (recorded by
//! `snapboot resume` in the initramfs at every boot, kept in `/run` for the capture that may
//! follow), the kernel command line, and the block devices mounted at capture, each
//! fingerprinted by its size and a fixed set of its blocks ([`snapimg::fingerprint`]: the
//! plan and the digest, which the restorer shares; here the blocks are read from the file).

pub use snapimg::fingerprint::{sample_plan, END_BYTES, SAMPLES};
use snapimg::listing::{self, EntryHasher, FileDigest};
use snapimg::{Binding, BootSetup, BoundDevice};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `snapboot resume` records the boot setup for a later capture.
pub const BOOT_SETUP_FILE: &str = "/run/snapboot/boot-setup";
/// Why the binding could not be observed or recorded.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// A file or device could not be read.
    #[error("cannot read {path}")]
    Read {
        /// What was read.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
    /// The boot setup record could not be written.
    #[error("cannot record the boot setup in {path}")]
    Write {
        /// The record's path.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
    /// The capture found no boot setup record.
    #[error(
        "the boot setup is unknown: {BOOT_SETUP_FILE} is missing (`snapboot resume` must run in \
         the initramfs with a tmpfs on /run that is moved into the root, docs/real-boards.md)"
    )]
    NoBootSetup,
    /// The boot setup record is damaged.
    #[error("{BOOT_SETUP_FILE} is damaged: {0}")]
    BadBootSetup(String),
    /// The binding does not fit the image header.
    #[error(transparent)]
    Encode(#[from] snapimg::BindingError),
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> BindingError + '_ {
    move |source| BindingError::Read {
        path: path.to_path_buf(),
        source,
    }
}

/// A block-device mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockMount {
    /// Device major number.
    pub major: u32,
    /// Device minor number.
    pub minor: u32,
    /// Mount point.
    pub mount: String,
    /// Filesystem type.
    pub fstype: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The block-backed mounts of a mountinfo text, one per device (its first mount point,
/// the root filesystem first). Mounts of major 0 (tmpfs, proc, overlay...) are skipped.
pub fn block_mounts(mountinfo: &str) -> Vec<BlockMount> {
    let mut out: Vec<BlockMount> = Vec::new();
    for m in devsys::system::parse_mountinfo(mountinfo) {
        if m.major == 0 || out.iter().any(|b| (b.major, b.minor) == (m.major, m.minor)) {
            continue;
        }
        out.push(BlockMount {
            major: m.major,
            minor: m.minor,
            read_only: !m.rw(),
            mount: m.target,
            fstype: m.fstype,
        });
    }
    out.sort_by_key(|m| m.mount != "/");
    out
}

/// The kernel's name of block device `major:minor` (`DEVNAME` in its sysfs uevent).
pub fn device_name(sys: &Path, major: u32, minor: u32) -> Option<String> {
    let uevent = fs::read_to_string(sys.join(format!("dev/block/{major}:{minor}/uevent"))).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

/// Size and fingerprint of a device or file ([`snapimg::fingerprint::device_digest`]).
pub fn fingerprint(path: &Path) -> Result<(u64, [u8; 32]), BindingError> {
    let mut f = File::open(path).map_err(read_err(path))?;
    let size = f.seek(SeekFrom::End(0)).map_err(read_err(path))?;
    let digest = snapimg::fingerprint::device_digest(size, |at, buf| f.read_exact_at(buf, at))
        .map_err(read_err(path))?;
    Ok((size, digest))
}

/// The GNU build id of an ELF file (the running snapboot: `/proc/self/exe`), read without
/// loading the whole file ([`snapimg::build_id`]).
pub fn build_id(exe: &Path) -> Result<Vec<u8>, BindingError> {
    use snapimg::build_id::{read_build_id, BuildIdError};
    use std::os::unix::fs::FileExt;
    let f = File::open(exe).map_err(read_err(exe))?;
    read_build_id(|at, buf| f.read_at(buf, at)).map_err(|e| {
        let source = match e {
            BuildIdError::Read(source) => source,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        };
        BindingError::Read {
            path: exe.to_path_buf(),
            source,
        }
    })
}

/// The boot setup of the initramfs at `root`: its manifest ([`snapimg::listing`]: every
/// regular file and symbolic link below `root` on the same filesystem, by content; mount
/// points such as /dev, /proc, /sys and /run are other filesystems, directories and the
/// distributions' scratch places are not in it) and the build id of `exe`.
pub fn boot_setup(root: &Path, exe: &Path) -> Result<BootSetup, BindingError> {
    let dev = fs::metadata(root).map_err(read_err(root))?.dev();
    let mut manifest = Vec::new();
    let mut buf = vec![0u8; 128 << 10];
    list(root, root, dev, &mut buf, &mut manifest)?;
    Ok(BootSetup::new(manifest, build_id(exe)?))
}

fn list(
    root: &Path,
    dir: &Path,
    dev: u64,
    buf: &mut [u8],
    out: &mut Vec<FileDigest>,
) -> Result<(), BindingError> {
    for entry in fs::read_dir(dir).map_err(read_err(dir))? {
        let entry = entry.map_err(read_err(dir))?;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(read_err(&path))?;
        if meta.dev() != dev {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let ft = meta.file_type();
        if ft.is_dir() {
            if !listing::in_scratch(&rel) {
                list(root, &path, dev, buf, out)?;
            }
            continue;
        }
        if !listing::covered(&rel) {
            continue;
        }
        let digest = if ft.is_symlink() {
            let to = fs::read_link(&path).map_err(read_err(&path))?;
            EntryHasher::symlink(to.as_os_str().as_bytes())
        } else if ft.is_file() {
            let mut h = EntryHasher::file(meta.mode());
            let mut f = File::open(&path).map_err(read_err(&path))?;
            loop {
                let n = f.read(buf).map_err(read_err(&path))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
            h.finish()
        } else {
            continue;
        };
        out.push(FileDigest { path: rel, digest });
    }
    Ok(())
}

/// Writes the boot setup record for a later capture (creating its directory).
pub fn record_boot_setup(setup: &BootSetup, path: &Path) -> Result<(), BindingError> {
    let werr = |source| BindingError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(werr)?;
    }
    fs::write(path, setup.to_bytes()?).map_err(werr)
}

/// Reads the record [`record_boot_setup`] wrote.
pub fn read_boot_setup(path: &Path) -> Result<BootSetup, BindingError> {
    let bytes = match fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(BindingError::NoBootSetup),
        Err(e) => return Err(read_err(path)(e)),
    };
    BootSetup::from_bytes(&bytes).map_err(|e| BindingError::BadBootSetup(e.to_string()))
}

/// The boot setup of the initramfs this process runs in (`/`, with snapboot itself at
/// `/proc/self/exe`): what `snapboot resume` observes at every boot, checks an image
/// against, and records in [`BOOT_SETUP_FILE`] for a capture later in the same boot.
pub fn observe_this_boot() -> Result<BootSetup, BindingError> {
    boot_setup(Path::new("/"), Path::new("/proc/self/exe"))
}

/// The binding of the running system, recorded at capture: the boot setup from
/// [`BOOT_SETUP_FILE`], the command line, and every block device mounted read-only in
/// `mountinfo`, found under `dev` by the names `sys` gives. A device mounted read-write
/// (capture refuses those unless forced) changes after capture by definition and is left out.
pub fn at_capture(
    setup: BootSetup,
    cmdline: &str,
    mountinfo: &str,
    sys: &Path,
    dev: &Path,
) -> Result<Binding, BindingError> {
    let mut devices = Vec::new();
    for m in block_mounts(mountinfo).into_iter().filter(|m| m.read_only) {
        let name = device_name(sys, m.major, m.minor).ok_or_else(|| BindingError::Read {
            path: sys.join(format!("dev/block/{}:{}/uevent", m.major, m.minor)),
            source: io::Error::new(io::ErrorKind::NotFound, "no DEVNAME for the mounted device"),
        })?;
        let (bytes, digest) = fingerprint(&dev.join(&name))?;
        devices.push(BoundDevice {
            mount: m.mount,
            device: name,
            fstype: m.fstype,
            bytes,
            digest,
        });
    }
    Ok(Binding {
        boot_setup: setup,
        cmdline: snapimg::bound_cmdline(cmdline),
        devices,
    })
}

/// What the running boot has of everything `image` is bound to. A device that does not
/// appear under `dev` within `wait` is reported with size 0 and an all-zero digest, which
/// [`Binding::check`] names as missing; a device that cannot be read is an error.
pub fn observe(
    image: &Binding,
    setup: BootSetup,
    cmdline: &str,
    dev: &Path,
    wait: Duration,
) -> Result<Binding, BindingError> {
    let mut devices = Vec::new();
    for d in &image.devices {
        let path = dev.join(&d.device);
        let (bytes, digest) = if devsys::system::wait_for_node(&path, wait) {
            fingerprint(&path)?
        } else {
            (0, [0; 32])
        };
        devices.push(BoundDevice {
            bytes,
            digest,
            ..d.clone()
        });
    }
    Ok(Binding {
        boot_setup: setup,
        cmdline: snapimg::bound_cmdline(cmdline),
        devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const MOUNTINFO: &str = "\
22 1 254:0 / / ro,relatime - squashfs /dev/vda ro,errors=continue
23 22 0:5 / /dev rw,nosuid - devtmpfs devtmpfs rw,size=10240k
24 22 0:21 / /proc rw,nosuid - proc proc rw
25 22 0:22 / /run rw,nosuid - tmpfs tmpfs rw,size=32768k
26 22 254:32 / /mnt/my\\040data ro - ext4 /dev/vdc ro
27 22 254:32 / /mnt/again ro - ext4 /dev/vdc ro
";

    #[test]
    fn block_mounts_are_the_block_devices_root_first() {
        let m = block_mounts(MOUNTINFO);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].major, m[0].minor, m[0].mount.as_str()), (254, 0, "/"));
        assert_eq!(m[0].fstype, "squashfs");
        assert!(m[0].read_only && m[1].read_only);
        assert!(!block_mounts("30 1 8:1 / /data rw,noatime - ext4 /dev/sda1 rw\n")[0].read_only);
        assert_eq!(
            (m[1].mount.as_str(), m[1].fstype.as_str()),
            ("/mnt/my data", "ext4")
        );
    }

    #[test]
    fn fingerprint_changes_with_a_sampled_block_and_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("disk");
        let data: Vec<u8> = (0..(4u32 << 20))
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        fs::write(&p, &data).unwrap();
        let (size, a) = fingerprint(&p).unwrap();
        assert_eq!(size, 4 << 20);
        assert_eq!(fingerprint(&p).unwrap().1, a, "stable");
        let mut changed = data.clone();
        changed[10] ^= 1; // inside the superblock area
        fs::write(&p, &changed).unwrap();
        assert_ne!(fingerprint(&p).unwrap().1, a);
        fs::write(&p, &data).unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(&[0; 4096])
            .unwrap();
        assert_ne!(fingerprint(&p).unwrap(), (size, a));
    }

    #[test]
    fn boot_setup_names_changed_added_and_removed_files_and_skips_the_rest() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("init"), "#!/bin/sh\nexec app one\n").unwrap();
        fs::create_dir(root.join("lib")).unwrap();
        fs::write(root.join("lib/mod.ko"), [1, 2, 3]).unwrap();
        symlink("lib", root.join("lib64")).unwrap();
        let exe = std::env::current_exe().unwrap();
        let a = boot_setup(root, &exe).unwrap();
        assert!(
            !a.snapboot_build_id.is_empty(),
            "test binaries carry a build id"
        );
        let paths: Vec<&str> = a.manifest.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["init", "lib/mod.ko", "lib64"]);
        // What an /init creates before resume is not the archive's: directories, mount
        // points, scratch files.
        for d in ["proc", "sys", "var/lock", "tmp", "etc/cmdline.d"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("tmp/export.orig"), "x").unwrap();
        fs::write(root.join("etc/cmdline.d/99.conf"), "x").unwrap();
        assert_eq!(boot_setup(root, &exe).unwrap(), a);

        let same_size = |s: &BootSetup| a.files != s.files;
        fs::write(root.join("lib/mod.ko"), [1, 2, 4]).unwrap();
        let b = boot_setup(root, &exe).unwrap();
        assert!(same_size(&b), "content counts, not only the size");
        let d = snapimg::listing::diff(&a.manifest, &b.manifest);
        assert_eq!(d.describe(), "changed: /lib/mod.ko");
        fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o700)).unwrap();
        fs::write(root.join("etc/new.conf"), "y").unwrap();
        fs::remove_file(root.join("lib64")).unwrap();
        let c = boot_setup(root, &exe).unwrap();
        let d = snapimg::listing::diff(&a.manifest, &c.manifest);
        assert_eq!(
            d.describe(),
            "changed: /init, /lib/mod.ko; only in the image: /lib64; only in this boot: /etc/new.conf"
        );

        let rec = root.join("run/snapboot/boot-setup");
        assert!(matches!(
            read_boot_setup(&rec),
            Err(BindingError::NoBootSetup)
        ));
        record_boot_setup(&c, &rec).unwrap();
        assert_eq!(read_boot_setup(&rec).unwrap(), c);
        fs::write(&rec, "init=zz\n").unwrap();
        assert!(read_boot_setup(&rec)
            .unwrap_err()
            .to_string()
            .contains("damaged"));
    }

    #[test]
    fn capture_and_resume_observations_agree_and_a_changed_device_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        let dev = dir.path().join("dev");
        fs::create_dir_all(sys.join("dev/block/254:0")).unwrap();
        fs::write(
            sys.join("dev/block/254:0/uevent"),
            "MAJOR=254\nMINOR=0\nDEVNAME=vda\n",
        )
        .unwrap();
        fs::create_dir_all(&dev).unwrap();
        fs::write(dev.join("vda"), vec![5u8; 1 << 20]).unwrap();
        let setup = BootSetup::new(Vec::new(), vec![3; 20]);
        let cmd = "console=ttyS0 snapboot.capture snapboot.store=/dev/vdb ro";
        let mi = "22 1 254:0 / / ro - squashfs /dev/vda ro\n";
        let img = at_capture(setup.clone(), cmd, mi, &sys, &dev).unwrap();
        assert_eq!(img.devices[0].device, "vda");
        assert_eq!(img.cmdline, vec!["console=ttyS0", "ro"]);
        let w = Duration::from_millis(10);
        let now = observe(
            &img,
            setup.clone(),
            "console=ttyS0 snapboot.store=/dev/vdb ro",
            &dev,
            w,
        )
        .unwrap();
        assert_eq!(img.check(&now), Ok(()));
        fs::write(dev.join("vda"), vec![6u8; 1 << 20]).unwrap();
        let now = observe(&img, setup.clone(), "console=ttyS0 ro", &dev, w).unwrap();
        let msg = img.check(&now).unwrap_err().to_string();
        assert!(
            msg.starts_with("root filesystem / (vda) differs (content"),
            "{msg}"
        );
        fs::remove_file(dev.join("vda")).unwrap();
        let now = observe(&img, setup, "console=ttyS0 ro", &dev, w).unwrap();
        assert!(img
            .check(&now)
            .unwrap_err()
            .to_string()
            .contains("/dev/vda is missing"));
    }
}
