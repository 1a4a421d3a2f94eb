//! Disk images with a GPT partition table, for boards whose store lives in a partition (as on
//! a real device: `snapboot.store=PARTUUID=…`) rather than on a whole extra disk. The table
//! is written by `sfdisk`; a store is laid out inside a partition through a
//! [`flashstore::Window`] on the image, as `snapboot store init` does on the device.

use flashstore::{ChunkCheck, FormatOptions, Label, Store, StoreError, Window};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use thiserror::Error;

/// A partition to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GptPartition {
    /// Its GPT name (`PARTLABEL=`).
    pub name: String,
    /// Its unique GUID (`PARTUUID=`).
    pub uuid: String,
    /// Its size, rounded up to whole MiB.
    pub bytes: u64,
}

/// Where a partition was put.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Byte offset in the image.
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Why a disk image could not be made.
#[derive(Debug, Error)]
pub enum DiskError {
    /// Creating or sizing the image.
    #[error("creating disk image {}", path.display())]
    Create {
        /// The image.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// sfdisk could not be run.
    #[error("running sfdisk (is util-linux installed?)")]
    Spawn(#[source] std::io::Error),
    /// sfdisk refused the table.
    #[error("sfdisk on {} exited with {status}: {stderr}", path.display())]
    Sfdisk {
        /// The image.
        path: PathBuf,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
    /// The store could not be laid out in its partition.
    #[error("formatting a store at byte {offset} of {}", path.display())]
    Format {
        /// The image.
        path: PathBuf,
        /// The partition's offset.
        offset: u64,
        /// Why.
        #[source]
        source: StoreError,
    },
}

const MIB: u64 = 1 << 20;

/// Makes a sparse disk image at `path` (replacing any file there) holding a GPT with
/// `parts` in order, the first at 1 MiB, each aligned to 1 MiB. Returns where each is.
pub fn gpt_disk(path: &Path, parts: &[GptPartition]) -> Result<Vec<Placed>, DiskError> {
    let mut script = String::from("label: gpt\n");
    let mut placed = Vec::new();
    let mut at = MIB;
    for p in parts {
        let bytes = p.bytes.div_ceil(MIB).max(1) * MIB;
        script.push_str(&format!(
            "start={}, size={}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid={}, name=\"{}\"\n",
            at / 512,
            bytes / 512,
            p.uuid,
            p.name
        ));
        placed.push(Placed { offset: at, bytes });
        at += bytes;
    }
    let create = |source| DiskError::Create {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).map_err(create)?;
    f.set_len(at + MIB).map_err(create)?;
    drop(f);
    let mut child = Command::new("sfdisk")
        .args(["--quiet", "--no-reread", "--no-tell-kernel"])
        .arg(path)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(DiskError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(DiskError::Spawn)?;
    }
    let out = child.wait_with_output().map_err(DiskError::Spawn)?;
    if !out.status.success() {
        return Err(DiskError::Sfdisk {
            path: path.to_path_buf(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(placed)
}

/// Lays out an empty store labelled `label` in partition `at` of the image at `path`.
pub fn format_store_in(path: &Path, at: &Placed, label: &str) -> Result<(), DiskError> {
    let format = |source| DiskError::Format {
        path: path.to_path_buf(),
        offset: at.offset,
        source,
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| DiskError::Create {
            path: path.to_path_buf(),
            source,
        })?;
    let opts = FormatOptions {
        check: ChunkCheck::Xxh3,
        label: Label::new(label).map_err(|e| format(e.into()))?,
        ..FormatOptions::default()
    };
    Store::format(Window::new(f, at.offset, at.bytes), opts).map_err(format)?;
    Ok(())
}

/// Opens the store in partition `at` of the image at `path` (read-only), to look at what a
/// boot wrote.
pub fn open_store_in(path: &Path, at: &Placed) -> Result<Store<Window<std::fs::File>>, StoreError> {
    let f = std::fs::File::open(path).map_err(|source| StoreError::Io {
        context: format!("opening {}", path.display()),
        source,
    })?;
    Store::open(Window::new(f, at.offset, at.bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_placed_where_sfdisk_puts_them_and_a_store_fits_in_one() {
        if Command::new("sfdisk").arg("--version").output().is_err() {
            eprintln!("no sfdisk: skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk.img");
        let parts = [
            GptPartition {
                name: "boot".into(),
                uuid: "00112233-4455-6677-8899-AABBCCDDEEFF".into(),
                bytes: 1,
            },
            GptPartition {
                name: "snapstore".into(),
                uuid: "5c3a0f6e-1d2b-4c8e-9f00-0123456789ab".into(),
                bytes: 8 * MIB,
            },
        ];
        let placed = gpt_disk(&disk, &parts).unwrap();
        assert_eq!(
            placed,
            [
                Placed {
                    offset: MIB,
                    bytes: MIB
                },
                Placed {
                    offset: 2 * MIB,
                    bytes: 8 * MIB
                }
            ]
        );
        format_store_in(&disk, &placed[1], "factory").unwrap();
        let s = open_store_in(&disk, &placed[1]).unwrap();
        assert_eq!(s.label(), "factory");
        // The table is intact: the store stayed inside its partition.
        let out = Command::new("sfdisk")
            .arg("--dump")
            .arg(&disk)
            .output()
            .unwrap();
        let dump = String::from_utf8_lossy(&out.stdout).to_lowercase();
        assert!(
            dump.contains("5c3a0f6e-1d2b-4c8e-9f00-0123456789ab"),
            "{dump}"
        );
        assert!(dump.contains("name=\"snapstore\""), "{dump}");
    }
}
