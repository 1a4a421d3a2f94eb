//! How many CPUs are online: what capture records in an image ([`snapimg::Description`]'s
//! `online_cpus`) and what resume compares it with. The kernel writes the set as a CPU
//! list, ranges and single CPUs separated by commas:
//!
//! ```text
//! /sys/devices/system/cpu/online   0-1,3      (3 CPUs: 0, 1 and 3)
//! ```
//!
//! The kernel's own hibernation header does not help: its `cpus` field is always zero.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Where the running kernel lists its online CPUs.
pub const ONLINE: &str = "/sys/devices/system/cpu/online";

/// Why the online CPUs cannot be counted.
#[derive(Debug, Error)]
pub enum CpuCountError {
    /// The list is there and cannot be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not hold a CPU list.
    #[error("{} holds {text:?}, not a CPU list", .path.display())]
    NotAList {
        /// The file.
        path: PathBuf,
        /// What it holds.
        text: String,
    },
    /// The list is absent and the fallback could not count either.
    #[error("{} is absent, and the CPUs this process may run on cannot be counted", .path.display())]
    Uncounted {
        /// The file.
        path: PathBuf,
        /// Why the fallback failed.
        #[source]
        source: std::io::Error,
    },
}

/// The number of CPUs online now ([`ONLINE`]).
pub fn online_cpus() -> Result<u32, CpuCountError> {
    online_cpus_at(Path::new(ONLINE))
}

/// [`online_cpus`] from the list at `path`.
///
/// Only when that file is absent (no sysfs mounted) does it fall back to
/// [`std::thread::available_parallelism`], which counts the CPUs *this process may run on*:
/// its affinity mask and cgroup quota can make that fewer than are online, so an image
/// recording it may be admitted on a machine with fewer CPUs than the capture had. A file
/// that is there but unreadable or malformed is an error, never a guess.
pub fn online_cpus_at(path: &Path) -> Result<u32, CpuCountError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return std::thread::available_parallelism()
                .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
                .map_err(|source| CpuCountError::Uncounted {
                    path: path.into(),
                    source,
                });
        }
        Err(source) => {
            return Err(CpuCountError::Read {
                path: path.into(),
                source,
            })
        }
    };
    parse_cpu_list(&text).ok_or_else(|| CpuCountError::NotAList {
        path: path.into(),
        text: text.trim_end().into(),
    })
}

/// The number of CPUs a kernel CPU list names (`0-1,3` → 3); `None` when `text` is not one
/// (empty, a range that runs backwards, anything but digits, `-` and `,`). A trailing newline
/// is allowed, as the kernel writes one.
pub fn parse_cpu_list(text: &str) -> Option<u32> {
    let text = text.trim_end_matches('\n');
    let mut count: u32 = 0;
    for part in text.split(',') {
        let cpu = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (cpu(a)?, cpu(b)?),
            None => {
                let c = cpu(part)?;
                (c, c)
            }
        };
        let n = last.checked_sub(first)?.checked_add(1)?;
        count = count.checked_add(n)?;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_counts_its_ranges_and_single_cpus() {
        for (text, n) in [
            ("0\n", 1),
            ("0", 1),
            ("0-1\n", 2),
            ("0-1,3\n", 3),
            ("0,2,4-7\n", 6),
            ("1-1", 1),
            ("0-255\n", 256),
        ] {
            assert_eq!(parse_cpu_list(text), Some(n), "{text:?}");
        }
    }

    #[test]
    fn anything_but_a_cpu_list_is_none() {
        for text in [
            "", "\n", "3-1", "0-", "-1", "0,,1", "0,", "a", "0 1", " 0", "0-1-2", "+1",
        ] {
            assert_eq!(parse_cpu_list(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_file_is_read_and_its_absence_falls_back_to_what_this_process_may_use() {
        let dir = tempfile::tempdir().unwrap();
        let online = dir.path().join("online");
        std::fs::write(&online, "0-1,3\n").unwrap();
        assert_eq!(online_cpus_at(&online).unwrap(), 3);
        std::fs::write(&online, "garbage\n").unwrap();
        let e = online_cpus_at(&online).unwrap_err().to_string();
        assert!(e.ends_with("holds \"garbage\", not a CPU list"), "{e}");
        let absent = dir.path().join("absent");
        let n = std::thread::available_parallelism().unwrap().get() as u32;
        assert_eq!(online_cpus_at(&absent).unwrap(), n);
    }
}
