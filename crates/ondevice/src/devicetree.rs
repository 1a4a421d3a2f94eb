//! What the boot device tree says that resume compares with an image: the memory it
//! reserves and the CPUs the machine has. Read from the raw blob the kernel was booted with
//! (`/sys/firmware/fdt`, parsed with the `fdt` crate), so `/memreserve/` entries, which the
//! live tree under `/proc/device-tree` does not show, are included.
//!
//! A machine without a device tree (x86, an ACPI-booted arm64 board) has no blob: it
//! reserves nothing here and lists no CPUs, and the checks that use them stand aside.

use fdt::Fdt;
use snapimg::PhysRange;
use std::path::Path;

/// The raw device tree blob the running kernel was booted with.
pub const BOOT_FDT: &str = "/sys/firmware/fdt";

/// What was found in a device tree blob.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootDeviceTree {
    /// `/memreserve/` entries and the `reg` ranges of `/reserved-memory`'s children (those
    /// without `reg` are placed by the kernel at boot and have no fixed range).
    pub reserved: Vec<PhysRange>,
    /// The `reg` of each `/cpus/cpu@*` node: the CPU's MPIDR affinity bits on arm64.
    pub cpus: Vec<u64>,
}

/// Why the device tree blob cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceTreeError {
    /// The blob could not be read.
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a device tree blob.
    #[error("{path} is not a device tree blob ({len} bytes): {why}")]
    Parse {
        path: String,
        len: usize,
        why: String,
    },
}

/// The reserved memory and CPUs of device tree blob `blob` (read from `path`, named in
/// errors).
pub fn parse(blob: &[u8], path: &str) -> Result<BootDeviceTree, DeviceTreeError> {
    let fdt = Fdt::new(blob).map_err(|e| DeviceTreeError::Parse {
        path: path.into(),
        len: blob.len(),
        why: e.to_string(),
    })?;
    let mut reserved: Vec<PhysRange> = fdt
        .memory_reservations()
        .map(|r| PhysRange {
            base: r.address() as u64,
            size: r.size() as u64,
        })
        .collect();
    let regs = |parent: &str, child_prefix: &str| -> Vec<PhysRange> {
        let Some(node) = fdt.find_node(parent) else {
            return Vec::new();
        };
        node.children()
            .filter(|c| c.name.starts_with(child_prefix))
            .filter_map(|c| c.reg())
            .flatten()
            .map(|r| PhysRange {
                base: r.starting_address as u64,
                size: r.size.unwrap_or(0) as u64,
            })
            .collect()
    };
    reserved.extend(regs("/reserved-memory", ""));
    let cpus = regs("/cpus", "cpu@").into_iter().map(|r| r.base).collect();
    Ok(BootDeviceTree { reserved, cpus })
}

/// The running kernel's boot device tree ([`BOOT_FDT`]); empty when the machine was booted
/// without one.
pub fn boot_device_tree() -> Result<BootDeviceTree, DeviceTreeError> {
    read_blob(Path::new(BOOT_FDT))
}

fn read_blob(path: &Path) -> Result<BootDeviceTree, DeviceTreeError> {
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(blob) => parse(&blob, &name),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BootDeviceTree::default()),
        Err(source) => Err(DeviceTreeError::Read { path: name, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `testdata/uboot-virt.dts`, compiled.
    const UBOOT_VIRT: &[u8] = include_bytes!("../testdata/uboot-virt.dtb");

    #[test]
    fn reserved_ranges_and_cpu_ids_are_read_from_the_blob() {
        let dt = parse(UBOOT_VIRT, "uboot-virt.dtb").unwrap();
        assert_eq!(
            dt.reserved,
            vec![
                PhysRange::inclusive(0x5ff0_0000, 0x5fff_ffff),
                PhysRange::inclusive(0x4e00_0000, 0x4e1f_ffff),
            ]
        );
        assert_eq!(dt.cpus, vec![0, 0x100]);
    }

    #[test]
    fn no_blob_is_an_empty_tree_and_a_bad_one_is_named() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            read_blob(&d.path().join("fdt")).unwrap(),
            Default::default()
        );
        let bad = d.path().join("bad");
        std::fs::write(&bad, b"not a device tree").unwrap();
        let e = read_blob(&bad).unwrap_err().to_string();
        assert!(e.contains("not a device tree blob (17 bytes)"), "{e}");
    }
}
