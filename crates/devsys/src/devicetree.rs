//! What the boot device tree says that resume compares with an image: the memory it
//! reserves and the CPUs the machine has.
//!
//! Two sources, both as the kernel exports them: the `/memreserve/` block of the raw blob
//! the kernel was booted with (`/sys/firmware/fdt`; the live tree does not show it), read
//! from the blob's header, and the live tree (`/proc/device-tree`) for `/reserved-memory`'s
//! children and `/cpus/cpu@*`, whose `reg` files are big-endian cells sized by the parent's
//! `#address-cells`/`#size-cells`. (A general FDT parser crate was tried first: it panicked
//! on the tree QEMU's `virt` machine and U-Boot produce. Nothing here can panic on input.)
//!
//! A machine without a device tree (x86, an ACPI-booted arm64 board) has neither: it
//! reserves nothing here and lists no CPUs, and the checks that use them stand aside.

use snapimg::PhysRange;
use std::path::Path;

/// The raw device tree blob the running kernel was booted with.
pub const BOOT_FDT: &str = "/sys/firmware/fdt";
/// The live device tree.
pub const LIVE_TREE: &str = "/proc/device-tree";

/// A device tree blob's magic.
const FDT_MAGIC: u32 = 0xd00d_feed;

/// What was found in the device tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BootDeviceTree {
    /// `/memreserve/` entries and the `reg` ranges of `/reserved-memory`'s children (those
    /// without `reg` are placed by the kernel at boot and have no fixed range).
    pub reserved: Vec<PhysRange>,
    /// The `reg` of each `/cpus/cpu@*` node: the CPU's MPIDR affinity bits on arm64.
    pub cpus: Vec<u64>,
}

/// Why the device tree cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceTreeError {
    /// A file could not be read.
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not what the device tree format says.
    #[error("{path} ({len} bytes): {why}")]
    Parse {
        path: String,
        len: usize,
        why: String,
    },
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The `/memreserve/` entries of a device tree blob: pairs of big-endian u64 (address,
/// size) at the header's `off_mem_rsvmap`, up to a pair of zeros.
pub fn memreserve(blob: &[u8], path: &str) -> Result<Vec<PhysRange>, DeviceTreeError> {
    let bad = |why: String| DeviceTreeError::Parse {
        path: path.into(),
        len: blob.len(),
        why,
    };
    match be32(blob, 0) {
        Some(FDT_MAGIC) => {}
        m => {
            return Err(bad(format!(
                "not a device tree blob (magic {:#010x})",
                m.unwrap_or(0)
            )))
        }
    }
    let total = be32(blob, 4).unwrap_or(0) as usize;
    let mut at = be32(blob, 16).unwrap_or(0) as usize;
    let end = total.min(blob.len());
    let mut out = Vec::new();
    loop {
        let (Some(base), Some(size)) = (be64(blob, at), be64(blob, at + 8)) else {
            return Err(bad(format!(
                "memory reservation block runs past byte {end}"
            )));
        };
        if at + 16 > end {
            return Err(bad(format!(
                "memory reservation block runs past byte {end}"
            )));
        }
        if base == 0 && size == 0 {
            return Ok(out);
        }
        out.push(PhysRange { base, size });
        at += 16;
    }
}

/// A number of `cells` big-endian u32 cells as one integer (at most two cells).
fn cells_value(b: &[u8], cells: usize) -> Option<u64> {
    match cells {
        0 => Some(0),
        1 => be32(b, 0).map(u64::from),
        2 => be64(b, 0),
        _ => None,
    }
}

/// The `(address, size)` entries of a `reg` property with these cell counts.
pub fn reg_entries(reg: &[u8], address_cells: usize, size_cells: usize) -> Option<Vec<PhysRange>> {
    let entry = 4 * (address_cells + size_cells);
    if entry == 0 || !reg.len().is_multiple_of(entry) || address_cells > 2 || size_cells > 2 {
        return None;
    }
    reg.chunks(entry)
        .map(|e| {
            Some(PhysRange {
                base: cells_value(e, address_cells)?,
                size: cells_value(&e[4 * address_cells..], size_cells)?,
            })
        })
        .collect()
}

/// The `reg` ranges of the children of `node` in a live tree whose names start with
/// `prefix`, in name order; a node that is not there has none.
fn child_regs(node: &Path, prefix: &str) -> Result<Vec<PhysRange>, DeviceTreeError> {
    let read_cells = |name: &str, default: usize| -> usize {
        std::fs::read(node.join(name))
            .ok()
            .and_then(|b| be32(&b, 0))
            .map_or(default, |v| v as usize)
    };
    let (ac, sc) = (
        read_cells("#address-cells", 2),
        read_cells("#size-cells", 1),
    );
    let Ok(dir) = std::fs::read_dir(node) else {
        return Ok(Vec::new());
    };
    let mut children: Vec<_> = dir
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    children.sort();
    let mut out = Vec::new();
    for child in children {
        let reg_path = child.join("reg");
        let Ok(reg) = std::fs::read(&reg_path) else {
            continue;
        };
        let entries = reg_entries(&reg, ac, sc).ok_or_else(|| DeviceTreeError::Parse {
            path: reg_path.display().to_string(),
            len: reg.len(),
            why: format!("not a whole number of ({ac} address, {sc} size) cell entries"),
        })?;
        out.extend(entries);
    }
    Ok(out)
}

/// The running kernel's device tree; empty when the machine was booted without one.
pub fn boot_device_tree() -> Result<BootDeviceTree, DeviceTreeError> {
    read(Path::new(BOOT_FDT), Path::new(LIVE_TREE))
}

fn read(blob: &Path, live: &Path) -> Result<BootDeviceTree, DeviceTreeError> {
    let name = blob.display().to_string();
    let mut reserved = match std::fs::read(blob) {
        Ok(b) => memreserve(&b, &name)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(DeviceTreeError::Read { path: name, source }),
    };
    reserved.extend(child_regs(&live.join("reserved-memory"), "")?);
    let cpus = child_regs(&live.join("cpus"), "cpu@")?
        .into_iter()
        .map(|r| r.base)
        .collect();
    Ok(BootDeviceTree { reserved, cpus })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A blob with the given `/memreserve/` pairs (header and reservation block only).
    fn blob(pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 40];
        b[0..4].copy_from_slice(&FDT_MAGIC.to_be_bytes());
        b[16..20].copy_from_slice(&40u32.to_be_bytes());
        for (a, s) in pairs.iter().chain([&(0, 0)]) {
            b.extend_from_slice(&a.to_be_bytes());
            b.extend_from_slice(&s.to_be_bytes());
        }
        let len = b.len() as u32;
        b[4..8].copy_from_slice(&len.to_be_bytes());
        b
    }

    fn cells(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|c| c.to_be_bytes()).collect()
    }

    #[test]
    fn memreserve_pairs_are_read_and_a_bad_blob_is_named() {
        let b = blob(&[(0x5ff0_0000, 0x10_0000)]);
        assert_eq!(
            memreserve(&b, "fdt").unwrap(),
            vec![PhysRange::inclusive(0x5ff0_0000, 0x5fff_ffff)]
        );
        assert_eq!(memreserve(&blob(&[]), "fdt").unwrap(), vec![]);
        let e = memreserve(b"not a device tree", "fdt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a device tree blob"), "{e}");
        let mut cut = b.clone();
        cut.truncate(50);
        assert!(memreserve(&cut, "fdt").is_err());
    }

    #[test]
    fn reg_cells_follow_the_parent_counts() {
        let r = reg_entries(&cells(&[0, 0x4e00_0000, 0, 0x20_0000]), 2, 2).unwrap();
        assert_eq!(r, vec![PhysRange::inclusive(0x4e00_0000, 0x4e1f_ffff)]);
        let cpus = reg_entries(&cells(&[0x100]), 1, 0).unwrap();
        assert_eq!(cpus[0].base, 0x100);
        assert_eq!(reg_entries(&cells(&[1, 2, 3]), 2, 2), None);
        assert_eq!(reg_entries(&cells(&[1, 2, 3, 4]), 3, 1), None);
    }

    #[test]
    fn live_tree_gives_reserved_ranges_and_cpu_ids_and_no_tree_is_empty() {
        let d = tempfile::tempdir().unwrap();
        let live = d.path().join("device-tree");
        let rm = live.join("reserved-memory");
        fs::create_dir_all(rm.join("optee@4e000000")).unwrap();
        fs::create_dir_all(rm.join("linux,cma")).unwrap(); // dynamic: no reg
        fs::write(rm.join("#address-cells"), cells(&[2])).unwrap();
        fs::write(rm.join("#size-cells"), cells(&[2])).unwrap();
        fs::write(
            rm.join("optee@4e000000/reg"),
            cells(&[0, 0x4e00_0000, 0, 0x20_0000]),
        )
        .unwrap();
        let cpus = live.join("cpus");
        for (n, id) in [("cpu@0", 0u32), ("cpu@100", 0x100)] {
            fs::create_dir_all(cpus.join(n)).unwrap();
            fs::write(cpus.join(n).join("reg"), cells(&[id])).unwrap();
        }
        fs::create_dir_all(cpus.join("cpu-map")).unwrap();
        fs::write(cpus.join("#address-cells"), cells(&[1])).unwrap();
        fs::write(cpus.join("#size-cells"), cells(&[0])).unwrap();
        let fdt = d.path().join("fdt");
        fs::write(&fdt, blob(&[(0x5ff0_0000, 0x10_0000)])).unwrap();
        let dt = read(&fdt, &live).unwrap();
        assert_eq!(
            dt.reserved,
            vec![
                PhysRange::inclusive(0x5ff0_0000, 0x5fff_ffff),
                PhysRange::inclusive(0x4e00_0000, 0x4e1f_ffff),
            ]
        );
        assert_eq!(dt.cpus, vec![0, 0x100]);
        let none = read(&d.path().join("nofdt"), &d.path().join("notree")).unwrap();
        assert_eq!(none, BootDeviceTree::default());
    }
}
