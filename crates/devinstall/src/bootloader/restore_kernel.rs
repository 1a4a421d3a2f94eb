//! The restore kernel as GRUB's default entry (`snapboot restore-kernel install`): the files a
//! GRUB system needs for it, their texts and checks decided here, written into a root (`/` on
//! the device, a tree in the tests).
//!
//! ```text
//!   /boot/snapboot-restore-kernel   the restore kernel (not /boot/vmlinuz-*: 10_linux, the
//!                                   kernel's hooks and update-initramfs leave it alone)
//!   /etc/snapboot/image-kernel      release= version= machine= of the stock kernel (`uname`):
//!                                   the initramfs carries it; the restore kernel takes images
//!                                   of that kernel as its own
//!   /etc/snapboot/restore-kernel    release= of that kernel and pack=DEV, for
//!                                   /etc/grub.d/42_snapboot: the entry boots the restore kernel
//!                                   with that kernel's initramfs, `rdinit=/bin/snapboot
//!                                   snapboot.coldkernel=DEV`
//!   DEV (a raw partition)           the kernel pack of /boot/vmlinuz-R and /boot/initrd.img-R,
//!                                   written after the initramfs is rebuilt with the record:
//!                                   what the restore kernel hands a refusal to (kexec, cold)
//! ```
//!
//! The pack device is a kernel name (`/dev/nvme0n1p3`), resolved from any store-style address
//! when the command runs: the restore kernel starts snapboot as its first process, with no udev
//! and so no `/dev/disk/by-*` links.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where the restore kernel goes, relative to the root.
pub const KERNEL_PATH: &str = "boot/snapboot-restore-kernel";
/// The record 42_snapboot reads, relative to the root.
pub const GRUB_RECORD_PATH: &str = "etc/snapboot/restore-kernel";
/// The record of the kernel the images come from, relative to the root (the initramfs
/// carries it at `/etc/snapboot/image-kernel`, [`devsys::system::IMAGE_KERNEL_RECORD`]).
pub const IMAGE_KERNEL_PATH: &str = "etc/snapboot/image-kernel";
/// The id of GRUB's restore-kernel entry (guest/grub/42_snapboot).
pub const ENTRY: &str = "snapboot-restore";

/// The running kernel as `uname` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uname {
    /// `uname -r`.
    pub release: String,
    /// `uname -v`.
    pub version: String,
    /// `uname -m`.
    pub machine: String,
}

impl Uname {
    /// The running kernel's.
    pub fn running() -> Self {
        let u = rustix::system::uname();
        let s = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
        Uname {
            release: s(u.release()),
            version: s(u.version()),
            machine: s(u.machine()),
        }
    }
}

/// Why the restore kernel's entry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RestoreEntryError {
    /// The file given as the restore kernel is not a kernel.
    #[error("{}: not a bzImage or arm64 Image", path.display())]
    NotAKernel {
        /// The file.
        path: PathBuf,
    },
    /// The kernel given is not a restore kernel.
    #[error(
        "{}: kernel {release} is not a restore kernel (its release ends in {})",
        path.display(),
        bootparams::RESTORE_KERNEL_SUFFIX
    )]
    NotARestoreKernel {
        /// The file.
        path: PathBuf,
        /// Its release.
        release: String,
    },
    /// The command runs on the restore kernel: the stock kernel's uname is needed.
    #[error(
        "the running kernel {0} is the restore kernel: run this on the stock kernel whose \
         images it restores"
    )]
    OnRestoreKernel(String),
    /// The stock kernel's own files are not in /boot.
    #[error("{}: the running kernel's {what} is not there", path.display())]
    StockMissing {
        /// Kernel or initramfs.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// Reading or writing a file.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RestoreEntryError + '_ {
    move |source| RestoreEntryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The image kernel's record: what the restore kernel compares an image's kernel with
/// ([`devsys::system::image_kernel`] reads it).
pub fn image_kernel_record(u: &Uname) -> String {
    format!(
        "release={}\nversion={}\nmachine={}\n",
        u.release, u.version, u.machine
    )
}

/// The record 42_snapboot reads: the stock kernel whose initramfs the entry boots, and the
/// pack device.
pub fn grub_record(release: &str, pack: &Path) -> String {
    format!(
        "# Written by `snapboot restore-kernel install`; read by /etc/grub.d/42_snapboot.\n\
         release={release}\npack={}\n",
        pack.display()
    )
}

/// The release of the restore kernel in `data` (the file `path`), refused when it is not one.
pub fn restore_kernel_release(path: &Path, data: &[u8]) -> Result<String, RestoreEntryError> {
    let release = kernelpack::kernel_release(data).map_err(|_| RestoreEntryError::NotAKernel {
        path: path.to_path_buf(),
    })?;
    if !release.ends_with(bootparams::RESTORE_KERNEL_SUFFIX) {
        return Err(RestoreEntryError::NotARestoreKernel {
            path: path.to_path_buf(),
            release,
        });
    }
    Ok(release)
}

/// The stock kernel's bzImage (or Image) and initramfs under `root`, the pack's contents.
pub fn stock_files(root: &Path, stock: &Uname) -> Result<(PathBuf, PathBuf), RestoreEntryError> {
    if stock.release.ends_with(bootparams::RESTORE_KERNEL_SUFFIX) {
        return Err(RestoreEntryError::OnRestoreKernel(stock.release.clone()));
    }
    let kernel = root.join(format!("boot/vmlinuz-{}", stock.release));
    let initrd = root.join(format!("boot/initrd.img-{}", stock.release));
    for (what, path) in [("kernel", &kernel), ("initramfs", &initrd)] {
        if !path.is_file() {
            return Err(RestoreEntryError::StockMissing {
                what,
                path: path.clone(),
            });
        }
    }
    Ok((kernel, initrd))
}

/// What [`write_files`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The restore kernel's release.
    pub release: String,
    /// The files, under the root.
    pub paths: Vec<PathBuf>,
}

/// Writes the restore kernel `kernel` (read from `from`), the image kernel's record for
/// `stock` and 42_snapboot's record naming `pack` under `root`, each through a rename (never
/// half a file). The initramfs and the pack are the caller's (they need the system's tools).
pub fn write_files(
    root: &Path,
    from: &Path,
    stock: &Uname,
    pack: &Path,
) -> Result<Written, RestoreEntryError> {
    let data = fs::read(from).map_err(io(from))?;
    let release = restore_kernel_release(from, &data)?;
    stock_files(root, stock)?;
    let files = [
        (KERNEL_PATH, data, 0o644),
        (
            IMAGE_KERNEL_PATH,
            image_kernel_record(stock).into_bytes(),
            0o644,
        ),
        (
            GRUB_RECORD_PATH,
            grub_record(&stock.release, pack).into_bytes(),
            0o644,
        ),
    ];
    let mut paths = Vec::new();
    for (rel, bytes, mode) in files {
        let path = root.join(rel);
        replace(&path, &bytes, mode)?;
        paths.push(path);
    }
    Ok(Written { release, paths })
}

/// Removes what [`write_files`] wrote under `root`; returns the files that were there.
pub fn remove_files(root: &Path) -> Result<Vec<PathBuf>, RestoreEntryError> {
    let mut removed = Vec::new();
    for rel in [KERNEL_PATH, IMAGE_KERNEL_PATH, GRUB_RECORD_PATH] {
        let path = root.join(rel);
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&path)(e)),
        }
    }
    Ok(removed)
}

/// Writes `bytes` beside `path` and renames it into place.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> Result<(), RestoreEntryError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = path.with_extension("snapboot-new");
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(&tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(io(&tmp))?;
    fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bzImage's setup header pointing at `release`.
    fn bzimage(release: &str) -> Vec<u8> {
        let mut k = vec![0u8; 0x1000];
        k[0x202..0x206].copy_from_slice(b"HdrS");
        let at = 0x400usize;
        k[0x20E..0x210].copy_from_slice(&((at - 0x200) as u16).to_le_bytes());
        let text = format!("{release} (builder) #1 SMP");
        k[at..at + text.len()].copy_from_slice(text.as_bytes());
        k
    }

    fn stock() -> Uname {
        Uname {
            release: "6.1.0-41-amd64".into(),
            version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-11-09)".into(),
            machine: "x86_64".into(),
        }
    }

    #[test]
    fn the_records_say_what_the_restore_kernel_and_42_snapboot_read() {
        let record = image_kernel_record(&stock());
        let running = snapimg::Identity {
            release: "6.1.158-snapboot-restore".into(),
            version: "#1".into(),
            machine: "x86_64".into(),
            ram_bytes: 1 << 30,
            memory: snapimg::MemoryMap::default(),
        };
        let taken = devsys::system::image_kernel(running, Some(&record));
        assert_eq!(taken.release, stock().release);
        assert_eq!(taken.version, stock().version);
        let grub = grub_record("6.1.0-41-amd64", Path::new("/dev/vda3"));
        assert!(
            grub.contains("\nrelease=6.1.0-41-amd64\npack=/dev/vda3\n"),
            "{grub}"
        );
    }

    #[test]
    fn only_a_restore_kernel_is_installed_and_only_from_the_stock_kernel() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let rk = root.join("bzImage");
        fs::write(&rk, bzimage("6.1.158-snapboot-restore")).unwrap();
        let pack = Path::new("/dev/vda3");
        // The stock kernel's files are not in /boot yet: refused, nothing written.
        let e = write_files(root, &rk, &stock(), pack).unwrap_err();
        assert!(
            matches!(e, RestoreEntryError::StockMissing { what: "kernel", .. }),
            "{e}"
        );
        assert!(!root.join(KERNEL_PATH).exists());
        fs::create_dir_all(root.join("boot")).unwrap();
        fs::write(
            root.join("boot/vmlinuz-6.1.0-41-amd64"),
            bzimage("6.1.0-41-amd64"),
        )
        .unwrap();
        fs::write(root.join("boot/initrd.img-6.1.0-41-amd64"), b"initramfs").unwrap();
        // Run from the restore kernel: refused.
        let mut on_rk = stock();
        on_rk.release = "6.1.158-snapboot-restore".into();
        let e = write_files(root, &rk, &on_rk, pack).unwrap_err();
        assert!(matches!(e, RestoreEntryError::OnRestoreKernel(_)), "{e}");
        // The stock kernel given as the restore kernel: refused by its release.
        let e = write_files(
            root,
            &root.join("boot/vmlinuz-6.1.0-41-amd64"),
            &stock(),
            pack,
        )
        .unwrap_err();
        assert!(e.to_string().contains("is not a restore kernel"), "{e}");

        let w = write_files(root, &rk, &stock(), pack).unwrap();
        assert_eq!(w.release, "6.1.158-snapboot-restore");
        assert_eq!(
            fs::read(root.join(KERNEL_PATH)).unwrap(),
            fs::read(&rk).unwrap()
        );
        assert_eq!(
            fs::read_to_string(root.join(IMAGE_KERNEL_PATH)).unwrap(),
            image_kernel_record(&stock())
        );
        assert!(fs::read_to_string(root.join(GRUB_RECORD_PATH))
            .unwrap()
            .contains("pack=/dev/vda3"));
        assert_eq!(
            stock_files(root, &stock()).unwrap().1,
            root.join("boot/initrd.img-6.1.0-41-amd64")
        );
        assert_eq!(remove_files(root).unwrap(), w.paths);
        assert!(remove_files(root).unwrap().is_empty());
        assert!(root.join("boot/vmlinuz-6.1.0-41-amd64").is_file());
    }
}
