//! Values the unit tests of several modules share.

use crate::bundle::Bundle;
use crate::kernel::KernelInfo;
use crate::run_options::{Accel, KernelImage, RunOptions};
use crate::workload::Workload;
use bootparams::BootParams;
use std::path::PathBuf;
use std::time::Duration;

/// A bundle that exists only on paper (nothing is read from its directory).
pub fn bundle() -> Bundle {
    Bundle {
        dir: PathBuf::from("/nonexistent/bundle"),
        kernel: KernelInfo {
            release: "6.1.0-56-amd64".into(),
            bzimage: PathBuf::from("/nonexistent/vmlinuz"),
            modules_dir: PathBuf::from("/nonexistent/modules"),
            config: None,
            source: "user".into(),
            arch: crate::Arch::X86_64,
            image: None,
            version: None,
        },
        workload: Workload::shell(),
        modules: Vec::new(),
        rootfs_type: "squashfs".into(),
        initramfs_bytes: 0,
        rootfs_bytes: 0,
        snapboot_blake3: String::new(),
    }
}

/// Run options of a plain TCG boot.
pub fn opts() -> RunOptions {
    RunOptions {
        mem_mib: 512,
        max_mem_mib: None,
        smp: 1,
        accel: Accel::Tcg,
        kernel: KernelImage::Vmlinux,
        firmware: crate::run_options::Firmware::Direct,
        params: BootParams::default(),
        cmdline: Vec::new(),
        disks: Vec::new(),
        tpm: None,
        boot_disk: None,
        timeout: Duration::from_secs(1),
        echo: false,
    }
}

/// A store file at `path` (16 MiB, sparse) holding one image: a synthetic x86_64 kernel
/// stream of `pages` data pages.
pub fn store_with_image(path: &std::path::Path, pages: u64) {
    let mut s = crate::capture::create_store(path, 16 << 20, flashstore::ChunkCheck::Xxh3).unwrap();
    let stream = snapimg::SyntheticStream::new(pages, 7);
    let mut w = s
        .writer("image", flashstore::WriteOptions::default())
        .unwrap();
    for page in stream.to_bytes().chunks_exact(4096) {
        w.push_page(page.try_into().unwrap()).unwrap();
    }
    w.commit(Vec::new()).unwrap();
}
