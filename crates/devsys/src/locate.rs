//! Finding the store's block device from its address ([`StoreAddress`]: a path,
//! `PARTUUID=`, `PARTLABEL=` or `LABEL=`), the one way every store user on the device does
//! it: resume at power-on, capture at the ready point, the `store` and `image` commands.
//!
//! It runs before udev and without blkid: it lists `/sys/class/block`, reads a partition's
//! number (`partition`), its parent disk (the directory above it) and first sector (`start`),
//! reads the parent disk's partition table itself ([`parttable`], CRC32-checked GPT or
//! MBR) and opens the kernel's own node (`/dev/NAME`, devtmpfs). For `LABEL=` it reads the
//! superblocks of every block device with a size. Disks appear while drivers probe, so it
//! polls until one device matches, or until no device has it while no more are appearing
//! (the rule is [`crate::settle`]: the devices listed, unchanged, no uevent, udev idle for
//! [`crate::settle::SETTLED`]), or the wait is over; two devices that match are an error
//! naming both, none an error naming what was searched. What is found is then opened as a
//! store by its magic as before: resolving never writes, and never makes a device a store.

use crate::settle::{Absence, Look};
use bootparams::StoreAddress;
use parttable::{read_table, Table, TableError};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How often a scan is repeated while nothing matches.
const POLL: Duration = Duration::from_millis(20);

/// How long a restore or a capture waits at most for the store's (or the swap device's)
/// node to appear, while block devices are still appearing ([`crate::settle`]).
pub const NODE_WAIT: Duration = Duration::from_secs(2);

/// A store address and the device it resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// What was asked for.
    pub address: StoreAddress,
    /// The device node (or file) it names now.
    pub path: PathBuf,
}

impl fmt::Display for Located {
    /// A path says itself; another address says what it resolved to.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.address {
            StoreAddress::Path(_) => write!(f, "{}", self.path.display()),
            a => write!(f, "{a} ({})", self.path.display()),
        }
    }
}

/// Why an address names no device.
#[derive(Debug, Error)]
pub enum LocateError {
    /// The node never appeared.
    #[error("{} did not appear within {} ms", path.display(), waited.as_millis())]
    NoNode {
        /// The node.
        path: PathBuf,
        /// How long it was waited for.
        waited: Duration,
    },
    /// No block device has the address.
    #[error(
        "no block device has it {} (searched: {})",
        absence_text(absence),
        if searched.is_empty() { "no candidates".to_string() } else { searched.join(", ") }
    )]
    NoMatch {
        /// Why the search ended.
        absence: Absence,
        /// Each device looked at, with what it has.
        searched: Vec<String>,
    },
    /// Two block devices have it: using either could be the wrong one.
    #[error("two block devices have it, {} and {}: refusing to guess", first.display(), second.display())]
    Ambiguous {
        /// One.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// The block device list could not be read.
    #[error("listing {}", dir.display())]
    Sysfs {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// When the search ended, for the error's text.
fn absence_text(a: &Absence) -> String {
    match a {
        Absence::Settled { devices, quiet } => format!(
            "among the {devices} block devices, which stayed as they were for {} ms",
            quiet.as_millis()
        ),
        Absence::Waited { waited } => format!("after {} ms", waited.as_millis()),
    }
}

impl LocateError {
    /// Whether the device may yet appear (a later look, after udev, may find it).
    pub fn is_missing(&self) -> bool {
        matches!(self, Self::NoNode { .. } | Self::NoMatch { .. })
    }
}

/// Where block devices are listed and their nodes are: the system's, or a test's tree.
#[derive(Debug, Clone)]
pub struct Roots {
    /// `/sys/class/block`.
    pub class_block: PathBuf,
    /// `/dev`.
    pub dev: PathBuf,
    /// `/sys/kernel/uevent_seqnum`: the kernel's count of device events.
    pub uevent_seqnum: PathBuf,
    /// `/run/udev/queue`: there while udev has events to handle.
    pub udev_queue: PathBuf,
}

impl Roots {
    /// The running system's.
    pub fn system() -> Self {
        Roots {
            class_block: "/sys/class/block".into(),
            dev: "/dev".into(),
            uevent_seqnum: "/sys/kernel/uevent_seqnum".into(),
            udev_queue: "/run/udev/queue".into(),
        }
    }

    /// One look at the block devices, `at` into the search: their names (none when they
    /// cannot be listed), the uevent count, udev's queue.
    fn look(&self, at: Duration) -> Look {
        let mut devices: Vec<String> = std::fs::read_dir(&self.class_block)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        devices.sort();
        Look {
            at,
            devices,
            uevents: std::fs::read_to_string(&self.uevent_seqnum)
                .ok()
                .and_then(|s| s.trim().parse().ok()),
            udev_busy: self.udev_queue.exists(),
        }
    }
}

/// Resolves `address` on this system, waiting up to `wait` for its device to appear while
/// block devices are still appearing ([`crate::settle`]; a path is waited for so, then
/// taken as it is).
pub fn resolve(address: &StoreAddress, wait: Duration) -> Result<Located, LocateError> {
    resolve_in(&Roots::system(), address, wait)
}

/// [`resolve`] in `roots`.
pub fn resolve_in(
    roots: &Roots,
    address: &StoreAddress,
    wait: Duration,
) -> Result<Located, LocateError> {
    let start = Instant::now();
    let node = |path: PathBuf| {
        let left = wait.saturating_sub(start.elapsed());
        match crate::system::wait_for_node(&path, left) {
            true => Ok(Located {
                address: address.clone(),
                path,
            }),
            false => Err(LocateError::NoNode { path, waited: wait }),
        }
    };
    let mut looks = Vec::new();
    if let Some(p) = address.as_path() {
        // A path is what it says, there or not: opening it says why it is not.
        while !Path::new(p).exists() {
            looks.push(roots.look(start.elapsed()));
            if crate::settle::absent(&looks, wait).is_some() {
                break;
            }
            std::thread::sleep(POLL);
        }
        return Ok(Located {
            address: address.clone(),
            path: p.into(),
        });
    }
    loop {
        let (found, searched) = scan(roots, address)?;
        match found.as_slice() {
            [one] => return node(roots.dev.join(one)),
            [a, b, ..] => {
                return Err(LocateError::Ambiguous {
                    first: roots.dev.join(a),
                    second: roots.dev.join(b),
                })
            }
            [] => {
                looks.push(roots.look(start.elapsed()));
                if let Some(absence) = crate::settle::absent(&looks, wait) {
                    return Err(LocateError::NoMatch { absence, searched });
                }
                std::thread::sleep(POLL);
            }
        }
    }
}

/// One look at every block device: the names that have `address`, and what each device
/// looked at has.
fn scan(roots: &Roots, address: &StoreAddress) -> Result<(Vec<String>, Vec<String>), LocateError> {
    let sysfs = |source| LocateError::Sysfs {
        dir: roots.class_block.clone(),
        source,
    };
    let mut names: Vec<String> = std::fs::read_dir(&roots.class_block)
        .map_err(sysfs)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut tables: BTreeMap<String, Result<Table, TableError>> = BTreeMap::new();
    let (mut found, mut searched) = (Vec::new(), Vec::new());
    for name in names {
        let sys = roots.class_block.join(&name);
        let has = match address {
            StoreAddress::Path(_) => None,
            StoreAddress::Label(want) => store_label(roots, &sys, &name)
                .map(|l| (l.as_deref() == Ok(want), l.map(|l| format!("LABEL={l}")))),
            StoreAddress::PartUuid(_) | StoreAddress::PartLabel(_) => {
                partition_ids(roots, &sys, &mut tables).map(|ids| {
                    let hit = ids
                        .as_ref()
                        .is_ok_and(|(u, l)| address.names_partition(u, l.as_deref()) == Some(true));
                    let said = ids.map(|(u, l)| bootparams::partition_ids_text(&u, l.as_deref()));
                    (hit, said)
                })
            }
        };
        if let Some((hit, said)) = has {
            searched.push(format!("{name}: {}", said.unwrap_or_else(|e| e)));
            if hit {
                found.push(name);
            }
        }
    }
    Ok((found, searched))
}

/// A sysfs attribute of `sys`, trimmed.
fn attr(sys: &Path, name: &str) -> Option<String> {
    Some(
        std::fs::read_to_string(sys.join(name))
            .ok()?
            .trim()
            .to_string(),
    )
}

/// For a block device with a size: the label of the store on it, or why it has none.
fn store_label(roots: &Roots, sys: &Path, name: &str) -> Option<Result<String, String>> {
    if attr(sys, "size")?.parse::<u64>().ok()? == 0 {
        return None;
    }
    let f = match std::fs::File::open(roots.dev.join(name)) {
        Ok(f) => f,
        Err(e) => return Some(Err(format!("cannot open: {e}"))),
    };
    Some(match flashstore::read_label(&f) {
        Ok(l) if l.is_empty() => Err("a store without a label".into()),
        Ok(l) => Ok(l),
        Err(flashstore::StoreError::NotAStore) => Err("no store".into()),
        Err(e) => Err(e.to_string()),
    })
}

/// For a partition: its PARTUUID and PARTLABEL from its disk's table (read once per scan),
/// or why they cannot be known.
fn partition_ids(
    roots: &Roots,
    sys: &Path,
    tables: &mut BTreeMap<String, Result<Table, TableError>>,
) -> Option<Result<(String, Option<String>), String>> {
    let number: u32 = attr(sys, "partition")?.parse().ok()?;
    let disk_sys = std::fs::canonicalize(sys).ok()?.parent()?.to_path_buf();
    let disk = disk_sys.file_name()?.to_str()?.to_string();
    let table = tables
        .entry(disk.clone())
        .or_insert_with(|| disk_table(roots, &disk_sys, &disk));
    let table = match table {
        Ok(t) => t,
        Err(e) => return Some(Err(format!("{disk}: {e}"))),
    };
    let Some(ids) = table.partition(number) else {
        return Some(Err(format!("partition {number} is not in {disk}'s table")));
    };
    let start = attr(sys, "start").and_then(|s| s.parse::<u64>().ok());
    if let (Some(table_start), Some(kernel_start)) = (ids.start_sector, start) {
        if table_start != kernel_start {
            return Some(Err(format!(
                "{disk}'s table says sector {table_start}, the kernel {kernel_start}"
            )));
        }
    }
    Some(Ok((ids.uuid, ids.label)))
}

/// The partition table of disk `disk` (sysfs directory `disk_sys`), read from its node.
fn disk_table(roots: &Roots, disk_sys: &Path, disk: &str) -> Result<Table, TableError> {
    use std::os::unix::fs::FileExt;
    let lbs = attr(disk_sys, "queue/logical_block_size")
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&b| b >= 512 && b.is_power_of_two())
        .unwrap_or(512);
    let f = std::fs::File::open(roots.dev.join(disk)).map_err(|e| TableError::Read {
        what: "the disk",
        at: 0,
        reason: e.to_string(),
    })?;
    read_table(lbs, |b, at| f.read_exact_at(b, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parttable::testdisk::gpt;

    const STORE_UUID: &str = "5c3a0f6e-1d2b-4c8e-9f00-0123456789ab";
    const OTHER_UUID: &str = "00112233-4455-6677-8899-aabbccddeeff";

    /// A fake system: `disks` are (name, image, partitions as (number, first sector)),
    /// `whole` are unpartitioned devices (name, contents).
    struct Fake {
        dir: tempfile::TempDir,
    }

    impl Fake {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            for d in ["sys/class/block", "sys/devices", "dev"] {
                std::fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            Fake { dir }
        }

        fn roots(&self) -> Roots {
            Roots {
                class_block: self.dir.path().join("sys/class/block"),
                dev: self.dir.path().join("dev"),
                uevent_seqnum: self.dir.path().join("sys/kernel/uevent_seqnum"),
                udev_queue: self.dir.path().join("run/udev/queue"),
            }
        }

        fn device(&self, sys_rel: &str, name: &str, contents: &[u8], attrs: &[(&str, u64)]) {
            let sys = self.dir.path().join("sys/devices").join(sys_rel);
            std::fs::create_dir_all(&sys).unwrap();
            for (k, v) in attrs {
                std::fs::write(sys.join(k), format!("{v}\n")).unwrap();
            }
            let link = self.dir.path().join("sys/class/block").join(name);
            std::os::unix::fs::symlink(&sys, link).unwrap();
            std::fs::write(self.dir.path().join("dev").join(name), contents).unwrap();
        }

        /// A GPT disk `name` whose partition 1 starts at sector 2048 and has `uuid`, `label`.
        fn gpt_disk(&self, name: &str, uuid: &str, label: &str) {
            let image = gpt(&[Some((uuid, label, 2048))]);
            self.device(name, name, &image, &[("size", 2048)]);
            let part = format!("{name}1");
            let at = format!("{name}/{part}");
            self.device(
                &at,
                &part,
                b"",
                &[("partition", 1), ("start", 2048), ("size", 8)],
            );
        }
    }

    fn labelled_store(label: &str) -> Vec<u8> {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(4 << 20).unwrap();
        let opts = flashstore::FormatOptions {
            label: flashstore::Label::new(label).unwrap(),
            ..flashstore::FormatOptions::default()
        };
        flashstore::Store::format(f.reopen().unwrap(), opts).unwrap();
        std::fs::read(f.path()).unwrap()
    }

    fn addr(s: &str) -> StoreAddress {
        StoreAddress::parse(s).unwrap()
    }

    #[test]
    fn a_partition_is_found_by_partuuid_and_partlabel_whatever_its_disk_is_called() {
        let f = Fake::new();
        f.gpt_disk("vdb", OTHER_UUID, "decoy");
        f.gpt_disk("vdc", STORE_UUID, "snapstore");
        let at = |a: &str| resolve_in(&f.roots(), &addr(a), Duration::ZERO).unwrap();
        let l = at(&format!("PARTUUID={}", STORE_UUID.to_uppercase()));
        assert_eq!(l.path, f.roots().dev.join("vdc1"));
        assert_eq!(
            l.to_string(),
            format!("PARTUUID={STORE_UUID} ({})", l.path.display())
        );
        assert_eq!(at("PARTLABEL=snapstore").path, f.roots().dev.join("vdc1"));
    }

    #[test]
    fn no_match_names_what_was_searched_and_two_matches_name_both() {
        let f = Fake::new();
        f.gpt_disk("vdb", OTHER_UUID, "snapstore");
        let e = resolve_in(&f.roots(), &addr(&format!("PARTUUID={STORE_UUID}")), POLL).unwrap_err();
        assert!(e.is_missing());
        assert_eq!(
            e.to_string(),
            format!(
                "no block device has it after 20 ms (searched: vdb1: PARTUUID={OTHER_UUID} \
                 PARTLABEL=snapstore)"
            )
        );
        f.gpt_disk("vdc", STORE_UUID, "snapstore");
        let e = resolve_in(&f.roots(), &addr("PARTLABEL=snapstore"), Duration::ZERO).unwrap_err();
        assert!(!e.is_missing());
        let d = f.roots().dev;
        assert_eq!(
            e.to_string(),
            format!(
                "two block devices have it, {} and {}: refusing to guess",
                d.join("vdb1").display(),
                d.join("vdc1").display()
            )
        );
    }

    #[test]
    fn a_store_the_disks_there_do_not_have_is_absent_at_once_and_a_path_too() {
        let f = Fake::new();
        f.gpt_disk("vdb", OTHER_UUID, "decoy");
        let t = Instant::now();
        let e = resolve_in(&f.roots(), &addr("PARTLABEL=snapstore"), NODE_WAIT).unwrap_err();
        assert!(t.elapsed() < NODE_WAIT / 2, "waited {:?}", t.elapsed());
        assert!(e.is_missing());
        let text = e.to_string();
        assert!(
            text.starts_with(
                "no block device has it among the 2 block devices, which stayed as they were for 1"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "(searched: vdb1: PARTUUID=00112233-4455-6677-8899-aabbccddeeff PARTLABEL=decoy)"
            ),
            "{text}"
        );
        let t = Instant::now();
        let gone = f.roots().dev.join("vdz");
        let a = StoreAddress::path(gone.to_str().unwrap());
        assert_eq!(resolve_in(&f.roots(), &a, NODE_WAIT).unwrap().path, gone);
        assert!(t.elapsed() < NODE_WAIT / 2, "waited {:?}", t.elapsed());
        // udev with events queued: the search goes on until the limit.
        std::fs::create_dir_all(f.roots().udev_queue.parent().unwrap()).unwrap();
        std::fs::write(f.roots().udev_queue, b"").unwrap();
        let limit = Duration::from_millis(300);
        let t = Instant::now();
        let e = resolve_in(&f.roots(), &addr("PARTLABEL=snapstore"), limit).unwrap_err();
        assert!(t.elapsed() >= limit);
        assert!(
            e.to_string()
                .starts_with("no block device has it after 300 ms"),
            "{e}"
        );
    }

    #[test]
    fn a_partition_the_kernel_places_elsewhere_than_the_table_is_not_taken() {
        let f = Fake::new();
        let image = gpt(&[Some((STORE_UUID, "snapstore", 4096))]);
        f.device("vdb", "vdb", &image, &[("size", 2048)]);
        f.device(
            "vdb/vdb1",
            "vdb1",
            b"",
            &[("partition", 1), ("start", 2048)],
        );
        let e = resolve_in(
            &f.roots(),
            &addr(&format!("PARTUUID={STORE_UUID}")),
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("vdb1: vdb's table says sector 4096, the kernel 2048"),
            "{e}"
        );
    }

    #[test]
    fn a_store_is_found_by_its_label_among_devices_without_one() {
        let f = Fake::new();
        f.device("vdb", "vdb", &vec![0u8; 8192], &[("size", 16)]);
        f.device("vdc", "vdc", &labelled_store("factory"), &[("size", 8192)]);
        f.device("vdd", "vdd", &labelled_store(""), &[("size", 8192)]);
        f.device("loop0", "loop0", b"", &[("size", 0)]);
        let l = resolve_in(&f.roots(), &addr("LABEL=factory"), Duration::ZERO).unwrap();
        assert_eq!(l.path, f.roots().dev.join("vdc"));
        let e = resolve_in(&f.roots(), &addr("LABEL=other"), Duration::ZERO).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no block device has it after 0 ms (searched: vdb: no store, vdc: LABEL=factory, \
             vdd: a store without a label)"
        );
    }

    #[test]
    fn a_path_is_waited_for_and_taken_as_it_is() {
        let f = Fake::new();
        let p = f.roots().dev.join("vdz");
        let a = StoreAddress::path(p.to_str().unwrap());
        let t = Instant::now();
        let l = resolve_in(&f.roots(), &a, POLL).unwrap();
        assert!(t.elapsed() >= POLL, "not waited for");
        assert_eq!(l.to_string(), p.display().to_string());
        assert!(!l.path.exists());
    }
}
