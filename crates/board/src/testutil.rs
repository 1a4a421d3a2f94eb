//! Values the unit tests of several modules share, and (with the `testutil` feature) the
//! unit tests of the crates above the board (`bench`).

use crate::run_options::{Accel, KernelImage, RunOptions};
use bootparams::BootParams;
use bundle::bundle::Bundle;
use bundle::workload::Workload;
use hostkernel::kernel::KernelInfo;
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
            arch: guestarch::Arch::X86_64,
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
        acpi_tables: Vec::new(),
        store_on_sd: false,
        watchdog: false,
        timeout: Duration::from_secs(1),
        echo: false,
    }
}
