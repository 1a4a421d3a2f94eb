//! Working-set profiles of lazy images: which swapped-out pages the restored system touched.
//!
//! A lazy capture leaves most user memory in the swap region; after a restore the kernel
//! pages it back in when the application touches it, one fault at a time. The pages the
//! application needs for its first requests are its *working set*: keeping exactly those in
//! the eager image (instead of what the kernel's LRU happened to keep) makes the first
//! requests as fast as on a full image while the image stays small.
//!
//! Everything here uses `/proc/PID/pagemap` (bit 63: present), which a stock kernel gives
//! root. "Not present" covers both swapped-out anonymous memory and file pages (the
//! application's code, its data files) that reclaim dropped: both cost a read from storage
//! when touched after a restore.
//!
//! ```text
//! lazy capture, after paging out       /run/snapboot/lazy-map: for every process, the
//!   (record_map)                         address ranges not in memory. The file
//!                                        is in the image, so every restore starts with it
//! restored system, while the app        nothing runs: the kernel maps what is touched
//!   serves its first requests
//! `snapboot profile` or the next        ranges of the map that are present now = touched
//!   capture (touched_since_restore)      -> /run/snapboot/profile
//! the next (re-)capture                 pages the profile out first (they land together at
//!   (layout, keep)                       the front of the new swap region), then the
//!                                        rest; then reads the profile back in (eager), or
//!                                        leaves it to the prefetch after restore
//! ```
//!
//! Profiles name processes by pid and addresses: they hold for the system they were taken
//! in and for images captured from it, which is exactly what a re-capture from a restored
//! system is. Memory of tmpfs files (shmem) has no pagemap entries and is not profiled.

use crate::sys::mm::{Pidfd, MADV_PAGEOUT, MADV_WILLNEED};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// What was swapped out when this image was captured (in the image, on /run).
pub const MAP_PATH: &str = "/run/snapboot/lazy-map";
/// A profile recorded by `snapboot profile` (used by the next capture).
pub const PROFILE_PATH: &str = "/run/snapboot/profile";
/// The profile the image was captured with (in the image, on /run).
pub const APPLIED_PATH: &str = "/run/snapboot/profile-applied";
/// Present when the image was captured in prefetch mode: every restore reads the profile
/// back in.
pub const PREFETCH_PATH: &str = "/run/snapboot/profile-prefetch";

const PAGE: u64 = 4096;
const PM_PRESENT: u64 = 1 << 63;
#[cfg(test)]
const PM_SWAPPED: u64 = 1 << 62;

/// Page ranges of processes: pid -> sorted, disjoint (first page address, pages).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageSet {
    /// The ranges of each process.
    pub procs: BTreeMap<i32, Vec<(u64, u64)>>,
}

/// Errors of profile steps.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// A file could not be read or written.
    #[error("{step}: {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    /// A saved set does not decode.
    #[error("{path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    /// No map: the running system was not restored from a lazy image of this snapboot.
    #[error("{MAP_PATH} is missing: profiles are recorded in a system restored from a lazy image")]
    NoMap,
}

impl PageSet {
    /// Pages in the set.
    pub fn pages(&self) -> u64 {
        self.procs.values().flatten().map(|r| r.1).sum()
    }

    /// Processes with at least one page.
    pub fn processes(&self) -> usize {
        self.procs.values().filter(|r| !r.is_empty()).count()
    }

    /// Ranges in the set.
    pub fn ranges(&self) -> usize {
        self.procs.values().map(Vec::len).sum()
    }

    /// The union of two sets.
    pub fn union(&self, other: &PageSet) -> PageSet {
        let mut out = self.clone();
        for (pid, r) in &other.procs {
            let e = out.procs.entry(*pid).or_default();
            e.extend_from_slice(r);
            *e = normalize(std::mem::take(e));
        }
        out
    }

    /// Saves the set to `path` (postcard).
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let io = |err| ProfileError::Io {
            step: "saving page set",
            path: path.to_path_buf(),
            err,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let bytes = postcard::to_allocvec(self).map_err(|e| ProfileError::Damaged {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        std::fs::write(path, bytes).map_err(io)
    }

    /// Loads a set saved by [`PageSet::save`]; `None` if there is no file.
    pub fn load(path: &Path) -> Result<Option<PageSet>, ProfileError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => {
                return Err(ProfileError::Io {
                    step: "reading page set",
                    path: path.to_path_buf(),
                    err,
                })
            }
        };
        postcard::from_bytes(&bytes)
            .map(Some)
            .map_err(|e| ProfileError::Damaged {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
    }
}

/// Sorts ranges and merges overlapping and adjacent ones.
fn normalize(mut r: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(r.len());
    for (start, pages) in r {
        match out.last_mut() {
            Some(last) if start <= last.0 + last.1 * PAGE => {
                let end = (last.0 + last.1 * PAGE).max(start + pages * PAGE);
                last.1 = (end - last.0) / PAGE;
            }
            _ => out.push((start, pages)),
        }
    }
    out
}

/// Ranges of `(address, entry)` pairs whose entry passes `keep`, as (first page, pages).
fn runs(entries: impl Iterator<Item = (u64, u64)>, keep: impl Fn(u64) -> bool) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (addr, e) in entries {
        if !keep(e) {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.0 + last.1 * PAGE == addr => last.1 += 1,
            _ => out.push((addr, 1)),
        }
    }
    out
}

/// The user processes (not kernel threads, not this process).
fn processes() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|&p| p != me)
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    pids
}

/// The address ranges of a process's mappings (without `[vsyscall]`).
fn mappings(pid: i32) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.ends_with("[vsyscall]"))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// Reads the pagemap entries of `[start, start + pages*4096)` of a process.
fn pagemap(pm: &std::fs::File, start: u64, pages: u64, out: &mut Vec<(u64, u64)>) {
    const BATCH: u64 = 4096;
    let mut buf = vec![0u8; (BATCH * 8) as usize];
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(BATCH);
        let addr = start + done * PAGE;
        let bytes = &mut buf[..(n * 8) as usize];
        if pm.read_exact_at(bytes, addr / PAGE * 8).is_err() {
            return; // the process exited or unmapped the range
        }
        for (i, e) in bytes.chunks_exact(8).enumerate() {
            let e = u64::from_le_bytes(e.try_into().unwrap_or([0; 8]));
            out.push((addr + i as u64 * PAGE, e));
        }
        done += n;
    }
}

fn open_pagemap(pid: i32) -> Option<std::fs::File> {
    std::fs::File::open(format!("/proc/{pid}/pagemap")).ok()
}

/// Every page of every user process's mappings that is not in memory now: swapped out, or
/// a file page the kernel dropped (the application's code and data files are read back from
/// the root filesystem when touched, which costs as much as a swap-in).
pub fn absent_now() -> PageSet {
    let mut set = PageSet::default();
    for pid in processes() {
        let Some(pm) = open_pagemap(pid) else {
            continue;
        };
        let mut ranges = Vec::new();
        for (a, b) in mappings(pid) {
            let mut entries = Vec::new();
            pagemap(&pm, a, (b - a) / PAGE, &mut entries);
            ranges.extend(runs(entries.into_iter(), |e| e & PM_PRESENT == 0));
        }
        if !ranges.is_empty() {
            set.procs.insert(pid, ranges);
        }
    }
    set
}

/// The part of `set` whose pages are present (mapped in memory) now.
pub fn present(set: &PageSet) -> PageSet {
    select(set, |e| e & PM_PRESENT != 0)
}

fn select(set: &PageSet, keep: impl Fn(u64) -> bool + Copy) -> PageSet {
    let mut out = PageSet::default();
    for (pid, ranges) in &set.procs {
        let Some(pm) = open_pagemap(*pid) else {
            continue;
        };
        let mut mine = Vec::new();
        for &(start, pages) in ranges {
            let mut entries = Vec::new();
            pagemap(&pm, start, pages, &mut entries);
            mine.extend(runs(entries.into_iter(), keep));
        }
        if !mine.is_empty() {
            out.procs.insert(*pid, mine);
        }
    }
    out
}

/// Records what is not in memory now as the map later profiles are taken against
/// ([`MAP_PATH`]); returns its pages.
pub fn record_map() -> Result<u64, ProfileError> {
    let map = absent_now();
    map.save(Path::new(MAP_PATH))?;
    Ok(map.pages())
}

/// The pages the running system touched since it was restored: the part of the capture's
/// map that is present now, with the profile the image was captured with (its pages were
/// never swapped out, so the map cannot see them; a re-capture keeps them).
pub fn touched_since_restore() -> Result<PageSet, ProfileError> {
    let map = PageSet::load(Path::new(MAP_PATH))?.ok_or(ProfileError::NoMap)?;
    let touched = present(&map);
    let applied = PageSet::load(Path::new(APPLIED_PATH))?.unwrap_or_default();
    // Of the earlier profile, what still exists and is in memory.
    Ok(touched.union(&present(&applied)))
}

/// The profile the next capture should use: a recorded one ([`PROFILE_PATH`]) if there is
/// one, else what was touched since the restore; `None` when this system was not restored
/// from a lazy image.
pub fn for_capture() -> Result<Option<PageSet>, ProfileError> {
    if let Some(p) = PageSet::load(Path::new(PROFILE_PATH))? {
        return Ok(Some(p));
    }
    match touched_since_restore() {
        Ok(p) => Ok(Some(p)),
        Err(ProfileError::NoMap) => Ok(None),
        Err(e) => Err(e),
    }
}

fn to_bytes(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    ranges.iter().map(|&(a, n)| (a, n * PAGE)).collect()
}

/// Pages the profile out first, so its pages take the first slots of a fresh swap area
/// and a later read of them is one sequential pass. Returns the bytes advised.
pub fn page_out_first(p: &PageSet) -> u64 {
    let mut done = 0;
    for (pid, ranges) in &p.procs {
        if let Ok(fd) = Pidfd::open(*pid) {
            done += fd.madvise(&to_bytes(ranges), MADV_PAGEOUT).unwrap_or(0);
        }
    }
    done
}

/// What [`bring_in`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BringIn {
    /// Pages of the profile.
    pub pages: u64,
    /// Of those, present afterwards.
    pub present: u64,
}

/// Reads the profile's pages back in and maps them: `MADV_WILLNEED` first (the kernel
/// queues all reads at once), then a read of every page through `process_vm_readv`, which
/// waits for them and maps them. With `wait` false only the first step runs (a prefetch
/// that does not wait).
pub fn bring_in(p: &PageSet, wait: bool) -> BringIn {
    for (pid, ranges) in &p.procs {
        if let Ok(fd) = Pidfd::open(*pid) {
            let r = to_bytes(ranges);
            let _ = fd.madvise(&r, MADV_WILLNEED);
            if wait {
                let _ = fd.touch(&r);
            }
        }
    }
    BringIn {
        pages: p.pages(),
        present: if wait { present(p).pages() } else { 0 },
    }
}

/// How much of the image's profile and of the rest of its swapped memory is in memory now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency {
    /// Pages of the profile the image was captured with.
    pub profile_pages: u64,
    /// Of those, present.
    pub profile_present: u64,
    /// Pages not in memory at capture (the map).
    pub swapped_pages: u64,
    /// Of those, present.
    pub swapped_present: u64,
}

/// Residency of the image's profile and map, `None` without a profile.
pub fn residency() -> Result<Option<Residency>, ProfileError> {
    let Some(applied) = PageSet::load(Path::new(APPLIED_PATH))? else {
        return Ok(None);
    };
    let map = PageSet::load(Path::new(MAP_PATH))?.unwrap_or_default();
    Ok(Some(Residency {
        profile_pages: applied.pages(),
        profile_present: present(&applied).pages(),
        swapped_pages: map.pages(),
        swapped_present: present(&map).pages(),
    }))
}

/// One line about [`Residency`].
pub fn residency_text(r: &Residency) -> String {
    format!(
        "{} of {} profiled pages in memory; {} of {} other pages not in memory at capture are now",
        r.profile_present, r.profile_pages, r.swapped_present, r.swapped_pages
    )
}

/// Reads the image's profile back in, the part not in memory yet, and waits for it.
pub fn prefetch() -> Result<BringIn, ProfileError> {
    let applied = PageSet::load(Path::new(APPLIED_PATH))?.unwrap_or_default();
    let map = PageSet::load(Path::new(MAP_PATH))?.unwrap_or_default();
    // What of the profile is still swapped out: its part in the map, minus what is present.
    let mut want = PageSet::default();
    for (pid, ranges) in &applied.procs {
        let Some(m) = map.procs.get(pid) else {
            continue;
        };
        let overlap = intersect(ranges, m);
        if !overlap.is_empty() {
            want.procs.insert(*pid, overlap);
        }
    }
    let want = select(&want, |e| e & PM_PRESENT == 0);
    bring_in(&want, true);
    Ok(BringIn {
        pages: applied.pages(),
        present: present(&applied).pages(),
    })
}

/// The pages in both of two sorted, disjoint range lists.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (a0, a1) = (a[i].0, a[i].0 + a[i].1 * PAGE);
        let (b0, b1) = (b[j].0, b[j].0 + b[j].1 * PAGE);
        let (lo, hi) = (a0.max(b0), a1.min(b1));
        if lo < hi {
            out.push((lo, (hi - lo) / PAGE));
        }
        if a1 < b1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Whether the running system was captured with a profile.
pub fn has_profile() -> bool {
    Path::new(APPLIED_PATH).exists()
}

/// After a restore, before the `restored` marker: prints the profile's residency as the
/// `profile-resident` marker (when the capture's command line asked for it).
pub fn check_after_restore() {
    if let Ok(Some(r)) = residency() {
        crate::guest::print_marker("profile-resident", Some(&residency_text(&r)));
    }
}

/// After a restore, after the `restored` marker: a prefetch-mode image starts reading its
/// profile back in, in the background (it must not delay the application).
pub fn start_prefetch() {
    if Path::new(PREFETCH_PATH).exists() {
        // The binary that captured is the one restored; it runs the prefetch detached.
        let _ = std::process::Command::new("/proc/self/exe")
            .args(["profile", "prefetch"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intersect_keeps_the_common_pages() {
        let a = [(0x1000, 4), (0x10000, 2)];
        let b = [(0x3000, 10), (0x11000, 1)];
        assert_eq!(intersect(&a, &b), [(0x3000, 2), (0x11000, 1)]);
        assert!(intersect(&a, &[]).is_empty());
    }

    #[test]
    fn runs_join_neighbouring_pages_that_pass() {
        let e = [
            (0x1000, PM_SWAPPED),
            (0x2000, PM_SWAPPED),
            (0x3000, PM_PRESENT),
            (0x4000, PM_SWAPPED),
            (0x9000, PM_SWAPPED),
            (0xA000, PM_SWAPPED | 5),
        ];
        let r = runs(e.into_iter(), |x| x & PM_SWAPPED != 0);
        assert_eq!(r, [(0x1000, 2), (0x4000, 1), (0x9000, 2)]);
        let p = runs(e.into_iter(), |x| x & PM_PRESENT != 0);
        assert_eq!(p, [(0x3000, 1)]);
    }

    #[test]
    fn union_merges_overlaps_and_neighbours() {
        let mut a = PageSet::default();
        a.procs.insert(7, vec![(0x1000, 2), (0x8000, 1)]);
        let mut b = PageSet::default();
        b.procs
            .insert(7, vec![(0x2000, 3), (0x9000, 1), (0x20000, 1)]);
        b.procs.insert(9, vec![(0x5000, 4)]);
        let u = a.union(&b);
        assert_eq!(u.procs[&7], [(0x1000, 4), (0x8000, 2), (0x20000, 1)]);
        assert_eq!(u.procs[&9], [(0x5000, 4)]);
        assert_eq!((u.pages(), u.processes(), u.ranges()), (11, 2, 4));
    }

    #[test]
    fn sets_survive_a_save_and_a_damaged_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/set");
        assert_eq!(PageSet::load(&path).unwrap(), None);
        let mut s = PageSet::default();
        s.procs.insert(1, vec![(0x7f00_0000_0000, 12)]);
        s.save(&path).unwrap();
        assert_eq!(PageSet::load(&path).unwrap(), Some(s));
        std::fs::write(&path, [0xff; 3]).unwrap();
        let err = PageSet::load(&path).unwrap_err().to_string();
        assert!(err.contains("is damaged"), "{err}");
    }

    /// This test's own memory: a page it touched is present, and the pagemap reader finds it
    /// at its address.
    #[test]
    fn pagemap_sees_this_process_memory() {
        let v = vec![1u8; 64 * 1024];
        let addr = v.as_ptr() as u64 / PAGE * PAGE;
        let pm = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut entries = Vec::new();
        pagemap(&pm, addr, 4, &mut entries);
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0].0, addr);
        assert!(entries.iter().all(|(_, e)| e & PM_PRESENT != 0));
        assert!(!mappings(std::process::id() as i32).is_empty());
        drop(v);
    }
}
