//! The restore kernel's fallback: when it has nothing to restore (no image, a damaged one,
//! one for another kernel, machine or root filesystem), it hands the cold boot to the stock
//! kernel. It reads the kernel pack (the stock bzImage and its initramfs, checked; see the
//! `kernelpack` crate) from the device named by `snapboot.coldkernel=`, loads both with
//! `kexec_file_load` and jumps. The stock kernel boots with this boot's command line plus
//! `snapboot.handedover`, so its own `snapboot resume` does not try the image a second time
//! (`kernelpack::cmdline::cold_cmdline`, which the restorer uses too).
//!
//! ```text
//! restore kernel: /init -> snapboot resume -> refused: @fallback REASON
//!                   -> read + check the kernel pack -> kexec_file_load -> @handover -> kexec
//! stock kernel:   /init (modules) -> snapboot resume: handed over -> cold boot -> ready
//! ```

use devsys::sys::kexec;
use devsys::system::wait_for_node;
use kernelpack::PackError;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why the cold boot could not be handed to the stock kernel.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The kernel pack's device never appeared.
    #[error("kernel pack device {0} not found")]
    NoDevice(PathBuf),
    /// The kernel pack's device could not be opened.
    #[error("cannot open the kernel pack {}", path.display())]
    Open {
        /// The device or file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The kernel pack is damaged or not one.
    #[error("kernel pack {}", path.display())]
    Pack {
        /// The device or file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: PackError,
    },
    /// The kernel or initramfs could not be put in a memory file for the kernel to read.
    #[error("cannot stage the {what} in memory")]
    Stage {
        /// Kernel or initramfs.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The command line has a NUL byte.
    #[error("the command line holds a NUL byte")]
    Cmdline,
    /// `kexec_file_load` refused the kernel (not a bzImage, no KEXEC_FILE, no memory).
    #[error("kexec_file_load refused the stock kernel {release}")]
    Load {
        /// The stock kernel's release.
        release: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The jump into the loaded kernel failed.
    #[error("reboot into the loaded kernel failed")]
    Exec(#[source] std::io::Error),
}

/// A stock kernel loaded for the jump.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Its release.
    pub release: String,
    /// Bytes of kernel and of initramfs.
    pub bytes: (u64, u64),
    /// Reading and checking the pack, then loading it into the kernel.
    pub read: Duration,
    /// `kexec_file_load`.
    pub load: Duration,
}

impl Loaded {
    /// One line for the `handover` console marker.
    pub fn describe(&self) -> String {
        format!(
            "kexec into {} (kernel {:.1} MiB, initramfs {:.1} MiB; read+check {:.2} s, load {:.2} s)",
            self.release,
            self.bytes.0 as f64 / 1048576.0,
            self.bytes.1 as f64 / 1048576.0,
            self.read.as_secs_f64(),
            self.load.as_secs_f64()
        )
    }
}

fn stage(name: &str, data: &[u8], what: &'static str) -> Result<std::fs::File, HandoverError> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC).map_err(|e| {
        HandoverError::Stage {
            what,
            source: e.into(),
        }
    })?;
    let mut f = std::fs::File::from(fd);
    f.write_all(data)
        .map_err(|source| HandoverError::Stage { what, source })?;
    Ok(f)
}

/// Reads and checks the kernel pack at `pack`, and loads it with `cmdline` for [`jump`].
pub fn load(pack: &Path, cmdline: &str, wait: Duration) -> Result<Loaded, HandoverError> {
    let t = Instant::now();
    if !wait_for_node(pack, wait) {
        return Err(HandoverError::NoDevice(pack.to_path_buf()));
    }
    let file = std::fs::File::open(pack).map_err(|source| HandoverError::Open {
        path: pack.to_path_buf(),
        source,
    })?;
    let p =
        kernelpack::read(std::io::BufReader::with_capacity(1 << 20, file)).map_err(|source| {
            HandoverError::Pack {
                path: pack.to_path_buf(),
                source,
            }
        })?;
    let kernel = stage("snapboot-kernel", &p.kernel, "kernel")?;
    let initrd = stage("snapboot-initramfs", &p.initrd, "initramfs")?;
    let read = t.elapsed();
    let cmdline = CString::new(cmdline).map_err(|_| HandoverError::Cmdline)?;
    let t = Instant::now();
    kexec::load_file(kernel.as_fd(), initrd.as_fd(), &cmdline).map_err(|source| {
        HandoverError::Load {
            release: p.header.release.to_string(),
            source,
        }
    })?;
    Ok(Loaded {
        release: p.header.release.to_string(),
        bytes: (p.kernel.len() as u64, p.initrd.len() as u64),
        read,
        load: t.elapsed(),
    })
}

/// Jumps into the kernel [`load`] loaded. Returns only if that failed.
pub fn jump() -> HandoverError {
    rustix::fs::sync();
    HandoverError::Exec(kexec::exec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_damaged_pack_is_named() {
        let e = load(Path::new("/nonexistent/pack"), "x", Duration::ZERO).unwrap_err();
        assert!(matches!(e, HandoverError::NoDevice(_)), "{e}");
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), vec![0u8; 8192]).unwrap();
        let e = load(f.path(), "x", Duration::ZERO).unwrap_err();
        assert!(
            matches!(
                e,
                HandoverError::Pack {
                    source: PackError::NotAPack(_),
                    ..
                }
            ),
            "{e}"
        );
    }
}
