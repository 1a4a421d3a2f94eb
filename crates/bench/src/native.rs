//! The baseline every snapshot boot is measured against besides a cold boot: the kernel's
//! own hibernation to a swap device and its own resume from it (`snapboot.khibernate`,
//! `snapboot.kresume`; the device side is `ondevice::kernel_native`).

use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use thiserror::Error;

use boottrace::Outcome;

use board::qemu::{RunError, Session};
use board::run_options::{Disk, RunOptions};
use bundle::bundle::Bundle;

/// Why the kernel-native baseline could not be set up.
#[derive(Debug, Error)]
pub enum NativeError {
    /// A file could not be made or copied.
    #[error("{what} {}", path.display())]
    File {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A host tool failed.
    #[error("{tool} failed: {reason}")]
    Tool {
        /// The command (and its package).
        tool: &'static str,
        /// Its stderr or exit status.
        reason: String,
    },
    /// The board did not hibernate.
    #[error("kernel-native hibernation")]
    Hibernate(#[source] RunError),
}

fn file_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NativeError {
    let path = path.to_path_buf();
    move |source| NativeError::File { what, path, source }
}

/// Makes an empty swap device file of `mib` MiB (`mkswap`).
pub fn make_swap(path: &Path, mib: u32) -> Result<(), NativeError> {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).map_err(file_err("creating", path))?;
    f.set_len(u64::from(mib) << 20)
        .map_err(file_err("sizing", path))?;
    let out = Command::new("mkswap")
        .arg(path)
        .output()
        .map_err(file_err("running mkswap (package util-linux) on", path))?;
    if !out.status.success() {
        return Err(NativeError::Tool {
            tool: "mkswap",
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Copies a swap device file keeping it sparse (each resume consumes the image, so every
/// run starts from a saved copy).
pub fn sparse_copy(from: &Path, to: &Path) -> Result<(), NativeError> {
    let st = Command::new("cp")
        .args(["--sparse=always", "-f"])
        .arg(from)
        .arg(to)
        .status()
        .map_err(file_err("copying", from))?;
    if !st.success() {
        return Err(NativeError::Tool {
            tool: "cp",
            reason: format!("copying {} to {}: {st}", from.display(), to.display()),
        });
    }
    Ok(())
}

/// `opts` with `swap` attached as `/dev/vdb`, the kernel asked to `hibernate` to it at the
/// ready point or else to resume from it; snapboot uses no store on these boots.
pub fn with_swap(opts: &RunOptions, swap: &Path, hibernate: bool) -> RunOptions {
    let mut o = opts.without_store();
    o.disks.insert(
        0,
        Disk {
            path: swap.to_path_buf(),
            readonly: false,
            sd: false,
        },
    );
    let dev = Some("/dev/vdb".to_string());
    if hibernate {
        o.params.khibernate = dev;
    } else {
        o.params.kresume = dev;
    }
    o
}

/// Hibernates the workload with the kernel's own mechanism into `swap`; returns the raw
/// image size the kernel reported.
pub fn hibernate(bundle: &Bundle, opts: &RunOptions, swap: &Path) -> Result<u64, NativeError> {
    let o = with_swap(opts, swap, true);
    let mut s = Session::start(bundle, &o).map_err(NativeError::Hibernate)?;
    let wrote = Regex::new(r"PM: hibernation: Wrote (\d+) kbytes").expect("a valid regex");
    let line = s.wait_for(&wrote, "the kernel to write its image", o.timeout);
    let _ = s.wait_exit(Duration::from_secs(60));
    s.finish(Outcome::PoweredOff);
    let (line, _) = line.map_err(NativeError::Hibernate)?;
    let kb: u64 = wrote
        .captures(&line)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or(0);
    Ok(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_is_attached_first_and_named_for_the_kernel() {
        let opts = RunOptions {
            mem_mib: 128,
            max_mem_mib: None,
            smp: 1,
            accel: board::run_options::Accel::Tcg,
            kernel: board::run_options::KernelImage::Vmlinux,
            firmware: board::run_options::Firmware::Direct,
            params: bootparams::BootParams::default(),
            cmdline: vec!["quiet".into()],
            disks: vec![Disk {
                path: "data.img".into(),
                readonly: false,
                sd: false,
            }],
            tpm: None,
            boot_disk: None,
            acpi_tables: Vec::new(),
            store_on_sd: false,
            watchdog: false,
            timeout: Duration::from_secs(1),
            echo: false,
        };
        let h = with_swap(&opts, Path::new("s.swap"), true);
        assert_eq!(h.disks[0].path, PathBuf::from("s.swap"));
        assert_eq!(h.disks.len(), 2);
        assert_eq!(h.params.render(), ["snapboot.khibernate=/dev/vdb"]);
        let r = with_swap(&opts, Path::new("s.swap"), false);
        assert_eq!(r.params.render(), ["snapboot.kresume=/dev/vdb"]);
        assert_eq!(
            r.cmdline.last().map(String::as_str),
            Some("snapboot.store=none")
        );
    }

    #[test]
    fn a_missing_source_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = sparse_copy(&dir.path().join("none"), &dir.path().join("to")).unwrap_err();
        assert!(matches!(err, NativeError::Tool { tool: "cp", .. }), "{err}");
    }
}
