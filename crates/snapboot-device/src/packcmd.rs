//! `snapboot kernel-pack`: the stock kernel and its initramfs as one checked file, on the
//! raw partition a restore kernel hands cold boots to (`snapboot.coldkernel=`), written
//! and checked on the device itself.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `snapboot kernel-pack`.
#[derive(Subcommand, Debug)]
pub enum KernelPackCmd {
    /// Write a pack of KERNEL (x86 bzImage or arm64 Image) and INITRD to OUT: a file
    /// (written beside and renamed, never half a pack) or a partition (written in place,
    /// then read back and checked).
    Write(WriteArgs),
    /// Check a pack (header checksum, both payloads' BLAKE3) and show what it holds.
    Show {
        /// The pack: a file or a partition.
        pack: PathBuf,
    },
}

/// `snapboot kernel-pack write`.
#[derive(Args, Debug)]
pub struct WriteArgs {
    /// The stock kernel the cold boot runs.
    #[arg(long)]
    kernel: PathBuf,
    /// Its initramfs (the one the images are bound to).
    #[arg(long)]
    initrd: PathBuf,
    /// Where the pack goes.
    out: PathBuf,
}

/// Runs `snapboot kernel-pack`.
pub fn kernel_pack(cmd: KernelPackCmd) -> Result<ExitCode> {
    match cmd {
        KernelPackCmd::Write(a) => write(&a),
        KernelPackCmd::Show { pack } => {
            let p = read(&pack)?;
            let summary = match &p.summary {
                Some(s) => {
                    match restorer::stockinit::StockInit::of_summary(s, &p.header.initrd_hash) {
                        Ok(stock) => format!(
                            "its summary for the restorer {} bytes ({})",
                            s.len(),
                            stock.trust.describe()
                        ),
                        Err(e) => format!("{e}"),
                    }
                }
                None => "no summary for the restorer (it reads the initramfs)".to_string(),
            };
            println!(
                "kernel pack {}: kernel {} ({} bytes), initramfs {} bytes, {summary}; checked",
                pack.display(),
                p.header.release,
                p.header.kernel_len,
                p.header.initrd_len
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn read(path: &Path) -> Result<kernelpack::Pack> {
    let f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    kernelpack::read(std::io::BufReader::new(f))
        .with_context(|| format!("{} is not a good kernel pack", path.display()))
}

/// Writes the pack of `kernel` and `initrd` to `out` (`snapboot kernel-pack write`).
pub(crate) fn write_pack(kernel: &Path, initrd: &Path, out: &Path) -> Result<ExitCode> {
    write(&WriteArgs {
        kernel: kernel.to_path_buf(),
        initrd: initrd.to_path_buf(),
        out: out.to_path_buf(),
    })
}

fn write(a: &WriteArgs) -> Result<ExitCode> {
    let kernel = fs::read(&a.kernel).with_context(|| format!("reading {}", a.kernel.display()))?;
    let initrd = fs::read(&a.initrd).with_context(|| format!("reading {}", a.initrd.display()))?;
    let is_device = fs::metadata(&a.out).is_ok_and(|m| m.file_type().is_block_device());
    let target = if is_device {
        a.out.clone()
    } else {
        a.out.with_extension("pack-new")
    };
    let mut bytes = Vec::with_capacity(kernel.len() + initrd.len() + 3 * kernelpack::HEADER_LEN);
    // What the freestanding restorer takes from the initramfs, taken out once here so it
    // does not unpack the archive at every boot.
    let summary = match restorer::stockinit::summary(&initrd) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!(
                "snapboot: {}: no initramfs summary in the pack ({e}); the restorer reads the initramfs itself",
                a.initrd.display()
            );
            None
        }
    };
    let header = kernelpack::write_with_summary(&mut bytes, &kernel, &initrd, summary.as_deref())
        .with_context(|| format!("packing {}", a.kernel.display()))?;
    if is_device {
        let room = device_bytes(&a.out)?;
        if bytes.len() as u64 > room {
            bail!(
                "{} has {room} bytes, the pack needs {}: nothing written",
                a.out.display(),
                bytes.len()
            );
        }
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(!is_device)
        .truncate(!is_device)
        .open(&target)
        .with_context(|| format!("opening {}", target.display()))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", target.display()))?;
    drop(f);
    if !is_device {
        fs::rename(&target, &a.out).with_context(|| format!("renaming to {}", a.out.display()))?;
    }
    read(&a.out).context("reading the pack back")?;
    println!(
        "kernel pack {}: kernel {} ({} bytes), initramfs {} bytes, written and checked",
        a.out.display(),
        header.release,
        header.kernel_len,
        header.initrd_len
    );
    Ok(ExitCode::SUCCESS)
}

/// Bytes of a block device (its end, found by seeking).
fn device_bytes(path: &Path) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    f.seek(SeekFrom::End(0))
        .with_context(|| format!("sizing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm64_image() -> Vec<u8> {
        let mut k = vec![0u8; 4096];
        k[56..60].copy_from_slice(b"ARM\x64");
        let banner = b"Linux version 6.1.0-56-arm64 (x) #1 SMP";
        k[100..100 + banner.len()].copy_from_slice(banner);
        k
    }

    #[test]
    fn a_file_pack_is_written_whole_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let (k, i, out) = (
            d.path().join("Image"),
            d.path().join("initrd"),
            d.path().join("cold.pack"),
        );
        fs::write(&k, arm64_image()).unwrap();
        fs::write(&i, b"initramfs").unwrap();
        write(&WriteArgs {
            kernel: k.clone(),
            initrd: i,
            out: out.clone(),
        })
        .unwrap();
        let p = read(&out).unwrap();
        assert_eq!(p.header.release, "6.1.0-56-arm64");
        assert!(!d.path().join("cold.pack-new").exists());
        // Not a kernel: refused, the good pack left as it was.
        fs::write(&k, b"not a kernel").unwrap();
        let before = fs::read(&out).unwrap();
        let bad = d.path().join("x");
        fs::write(&bad, b"initramfs").unwrap();
        assert!(write(&WriteArgs {
            kernel: k,
            initrd: bad,
            out: out.clone()
        })
        .is_err());
        assert_eq!(fs::read(&out).unwrap(), before);
    }
}
