//! The EFI runtime map of this boot: the firmware regions UEFI runtime services use, at the
//! virtual addresses the kernel gave the firmware (`SetVirtualAddressMap`). x86_64 Linux
//! exports it with `CONFIG_EFI_RUNTIME_MAP` (Debian's kernels have it) as one directory per
//! region, each file one hex value:
//!
//! ```text
//! /sys/firmware/efi/runtime-map/N/phys_addr   0x3f4e0000
//!                                /virt_addr   0xfffffffeff4e0000
//!                                /num_pages   0x20
//!                                /type        0x5
//!                                /attribute   0x800000000000000f
//! ```
//!
//! The directory is absent on a boot without EFI, on a kernel whose runtime services are off
//! (`CONFIG_EFI_DISABLE_RUNTIME`, `efi=noruntime`), and on arm64 (whose EFI stub sets the map
//! before the kernel starts): that boot's map is empty.

use snapimg::EfiRuntimeRegion;
use std::path::Path;
use thiserror::Error;

/// Where the running kernel exports its EFI runtime map.
pub const RUNTIME_MAP: &str = "/sys/firmware/efi/runtime-map";

/// A region directory that does not read as the kernel writes it.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("EFI runtime map: {dir}/{file} {what}")]
pub struct BadRegion {
    /// The region's directory.
    pub dir: String,
    /// The file.
    pub file: &'static str,
    /// What is wrong with it (`is unreadable`, `holds "…", not a hex number`).
    pub what: String,
}

/// The regions under `dir` (`RUNTIME_MAP` on a device), sorted by physical address; empty
/// when `dir` is absent. A region directory missing a file or holding something that is not
/// a hex number is an error: a map read in part would refuse (or admit) an image for a reason
/// that is not the firmware's.
pub fn read_runtime_map(dir: &Path) -> Result<Vec<EfiRuntimeRegion>, BadRegion> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut regions = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| read_region(&e.path()))
        .collect::<Result<Vec<_>, _>>()?;
    regions.sort_unstable();
    Ok(regions)
}

fn read_region(dir: &Path) -> Result<EfiRuntimeRegion, BadRegion> {
    let value = |file: &'static str| -> Result<u64, BadRegion> {
        let bad = |what: String| BadRegion {
            dir: dir.display().to_string(),
            file,
            what,
        };
        let text = std::fs::read_to_string(dir.join(file))
            .map_err(|e| bad(format!("is unreadable ({e})")))?;
        let t = text.trim();
        let digits = t.strip_prefix("0x").unwrap_or(t);
        u64::from_str_radix(digits, 16).map_err(|_| bad(format!("holds {t:?}, not a hex number")))
    };
    let kind = value("type")?;
    Ok(EfiRuntimeRegion {
        phys: value("phys_addr")?,
        virt: value("virt_addr")?,
        pages: value("num_pages")?,
        kind: u32::try_from(kind).map_err(|_| BadRegion {
            dir: dir.display().to_string(),
            file: "type",
            what: format!("holds {kind:#x}, more than a UEFI memory type"),
        })?,
        attribute: value("attribute")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(root: &Path, n: u32, values: [&str; 5]) {
        let d = root.join(n.to_string());
        std::fs::create_dir_all(&d).unwrap();
        for (file, v) in ["phys_addr", "virt_addr", "num_pages", "type", "attribute"]
            .iter()
            .zip(values)
        {
            std::fs::write(d.join(file), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn the_kernels_directories_read_as_regions_sorted_by_physical_address() {
        let t = tempfile::tempdir().unwrap();
        // The kernel numbers regions in its memory map's order, not by address.
        region(
            t.path(),
            0,
            [
                "0x3f5ec000",
                "0xfffffffeff5ec000",
                "0x4c",
                "0x6",
                "0x800000000000000f",
            ],
        );
        region(
            t.path(),
            1,
            [
                "0x3f4e0000",
                "0xfffffffeff4e0000",
                "0x20",
                "0x5",
                "0x800000000000000f",
            ],
        );
        let map = read_runtime_map(t.path()).unwrap();
        assert_eq!(
            map,
            vec![
                EfiRuntimeRegion {
                    phys: 0x3f4e_0000,
                    virt: 0xffff_fffe_ff4e_0000,
                    pages: 0x20,
                    kind: 5,
                    attribute: 0x8000_0000_0000_000f,
                },
                EfiRuntimeRegion {
                    phys: 0x3f5e_c000,
                    virt: 0xffff_fffe_ff5e_c000,
                    pages: 0x4c,
                    kind: 6,
                    attribute: 0x8000_0000_0000_000f,
                },
            ]
        );
    }

    #[test]
    fn no_directory_is_no_runtime_and_a_bad_file_is_named() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(read_runtime_map(&t.path().join("absent")), Ok(vec![]));
        region(t.path(), 0, ["0x1000", "0x1000", "zz", "0x5", "0x0"]);
        let e = read_runtime_map(t.path()).unwrap_err();
        assert_eq!(e.file, "num_pages");
        assert!(
            e.to_string()
                .ends_with("/0/num_pages holds \"zz\", not a hex number"),
            "{e}"
        );
        std::fs::remove_file(t.path().join("0/num_pages")).unwrap();
        let e = read_runtime_map(t.path()).unwrap_err();
        assert!(e.to_string().contains("/0/num_pages is unreadable"), "{e}");
    }
}
