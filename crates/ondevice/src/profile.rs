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

use boottrace::Marker;
use devsys::sys::mm::{Pidfd, MADV_PAGEOUT, MADV_WILLNEED};
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
    parse_maps(&text, |_| true)
}

/// The ranges of `/proc/PID/maps` text whose line passes `keep` (without `[vsyscall]`).
fn parse_maps(text: &str, keep: impl Fn(&[&str]) -> bool) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| !l.ends_with("[vsyscall]"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 5 || !keep(&f) {
                return None;
            }
            let (a, b) = f[0].split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// Private, writable anonymous memory (no file, or the heap or a stack): where a page
/// brought back by a read is mapped read-only and the application's first write faults.
fn writable_anon(maps: &str) -> Vec<(u64, u64)> {
    parse_maps(maps, |f| {
        let perms = f[1].as_bytes();
        let anon = f.len() == 5 || f[5].starts_with("[heap]") || f[5].starts_with("[stack");
        perms.len() == 4 && perms[1] == b'w' && perms[3] == b'p' && anon
    })
}

/// This process's readable mappings (without the kernel's `[vsyscall]`, `[vvar]` and
/// `[vdso]`), from `/proc/self/maps` text.
fn own_readable(maps: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter(|l| !l.ends_with(']') || l.ends_with("[heap]") || l.ends_with("[stack]"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (a, b) = f.next()?.split_once('-')?;
            f.next()?.starts_with('r').then_some(())?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect()
}

/// The pages of this process's own mappings that are in memory now. For its executable
/// that includes what an earlier snapboot process touched: the binary lives on /run (a
/// tmpfs), so after a restore the `snapboot ready` that resumed left the code it ran after
/// the restore in memory, and a re-capture run now finds it resident.
pub fn own_resident() -> Vec<(u64, u64)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out = Vec::new();
    for (start, end) in own_readable(&maps) {
        let pages = (end - start) / PAGE;
        let Ok(v) = devsys::sys::mm::mincore(start, pages) else {
            continue;
        };
        out.extend(runs(
            v.into_iter()
                .enumerate()
                .map(|(i, r)| (start + i as u64 * PAGE, u64::from(r))),
            |r| r != 0,
        ));
    }
    normalize(out)
}

/// Adds this process's resident pages ([`own_resident`]) to a profile; returns how many.
/// The process that captures is the one that resumes after each restore (it prints
/// `restored`, runs the hooks and exits), and its code is not in any profile: profiles name
/// the processes of the system they were recorded in, and each capture is a new process.
pub fn add_own_pages(p: &mut PageSet) -> u64 {
    let own = own_resident();
    let n = own.iter().map(|r| r.1).sum();
    p.procs.insert(std::process::id() as i32, own);
    n
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

/// Address ranges (start, end) as (first page, pages).
fn pages_of(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    ranges.iter().map(|&(a, b)| (a, (b - a) / PAGE)).collect()
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
///
/// With `wait`, the profile's private anonymous pages are then written back unchanged while
/// the process is held still ([`devsys::sys::mm::Stopped`]): a page read back is mapped
/// read-only, and the application's first write to each would be one more fault after the
/// restore (the image keeps the page tables as they are).
pub fn bring_in(p: &PageSet, wait: bool) -> BringIn {
    for (pid, ranges) in &p.procs {
        if let Ok(fd) = Pidfd::open(*pid) {
            let r = to_bytes(ranges);
            let _ = fd.madvise(&r, MADV_WILLNEED);
            if wait {
                let _ = fd.touch(&r);
                let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
                let writable = intersect(ranges, &pages_of(&writable_anon(&maps)));
                if !writable.is_empty() {
                    if let Ok(held) = devsys::sys::mm::Stopped::stop(*pid) {
                        let _ =
                            devsys::sys::mm::rewrite_in_place(&held, *pid, &to_bytes(&writable));
                    }
                }
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
        crate::guest::print_marker(Marker::ProfileResident, Some(&residency_text(&r)));
    }
}

/// Where [`check_after_restore`] leaves the fault counters of the moment of restore.
pub const FAULTS_BASE_PATH: &str = "/run/snapboot/faults-at-restore";

/// What one process has waited for and run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcCounts {
    /// Command name.
    pub comm: String,
    /// Minor faults (mapped without a read).
    pub minor: u64,
    /// Major faults (waited for a read).
    pub major: u64,
    /// Major faults of its children that ended and were waited for.
    pub children_major: u64,
    /// Nanoseconds on a CPU (`/proc/PID/schedstat`).
    pub cpu_ns: u64,
}

/// Page faults and CPU time: the system's swap-ins and every process's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// `pswpin` of /proc/vmstat: pages read from swap.
    pub swapped_in: u64,
    /// `pgmajfault` of /proc/vmstat: faults that waited for a read.
    pub major: u64,
    /// `pgpgin` of /proc/vmstat: KiB read from block devices (swap and files).
    pub read_kib: u64,
    /// Every process (kernel threads included).
    pub procs: BTreeMap<i32, ProcCounts>,
}

/// The counts of a `/proc/PID/stat` line (CPU time comes from elsewhere).
fn stat_counts(stat: &str) -> Option<ProcCounts> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    // After the name: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    // cmajflt.
    let f: Vec<&str> = stat.get(close + 1..)?.split_whitespace().take(11).collect();
    let n = |i: usize| f.get(i)?.parse().ok();
    Some(ProcCounts {
        comm,
        minor: n(7)?,
        major: n(9)?,
        children_major: n(10)?,
        cpu_ns: 0,
    })
}

/// A counter of /proc/vmstat text.
fn vmstat_value(vmstat: &str, key: &str) -> u64 {
    vmstat
        .lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

impl FaultCounts {
    /// The counters now.
    pub fn now() -> FaultCounts {
        let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
        let procs = processes()
            .into_iter()
            .filter_map(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let mut c = stat_counts(&stat)?;
                c.cpu_ns = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0);
                Some((pid, c))
            })
            .collect();
        FaultCounts {
            swapped_in: vmstat_value(&vmstat, "pswpin"),
            major: vmstat_value(&vmstat, "pgmajfault"),
            read_kib: vmstat_value(&vmstat, "pgpgin"),
            procs,
        }
    }

    /// What happened since `base`: the system's deltas, every process that took major
    /// faults (most first), and the processes that ran longest, with their minor faults
    /// (processes that started since count from zero).
    pub fn since_text(&self, base: &FaultCounts) -> String {
        let zero = ProcCounts::default();
        let delta: Vec<(i32, &str, ProcCounts)> = self
            .procs
            .iter()
            .map(|(pid, c)| {
                let b = base.procs.get(pid).unwrap_or(&zero);
                let d = ProcCounts {
                    comm: String::new(),
                    minor: c.minor.saturating_sub(b.minor),
                    major: c.major.saturating_sub(b.major),
                    children_major: c.children_major.saturating_sub(b.children_major),
                    cpu_ns: c.cpu_ns.saturating_sub(b.cpu_ns),
                };
                (*pid, c.comm.as_str(), d)
            })
            .collect();
        let mut faulted: Vec<&(i32, &str, ProcCounts)> = delta
            .iter()
            .filter(|(_, _, d)| d.major + d.children_major > 0)
            .collect();
        faulted.sort_by_key(|(pid, _, d)| (std::cmp::Reverse(d.major + d.children_major), *pid));
        let faulted: Vec<String> = faulted
            .iter()
            .map(|(pid, comm, d)| match d.children_major {
                0 => format!("{comm}[{pid}] {}", d.major),
                c => format!("{comm}[{pid}] {} (+{c} in its ended children)", d.major),
            })
            .collect();
        let mut busy: Vec<&(i32, &str, ProcCounts)> =
            delta.iter().filter(|(_, _, d)| d.cpu_ns > 0).collect();
        busy.sort_by_key(|(pid, _, d)| (std::cmp::Reverse(d.cpu_ns), *pid));
        let busy: Vec<String> = busy
            .iter()
            .take(6)
            .map(|(pid, comm, d)| {
                format!(
                    "{comm}[{pid}] {:.1} ms, {} minor faults",
                    d.cpu_ns as f64 / 1e6,
                    d.minor
                )
            })
            .collect();
        let list = |l: Vec<String>| {
            if l.is_empty() {
                "none".to_string()
            } else {
                l.join(", ")
            }
        };
        format!(
            "{} pages swapped in, {} KiB read from disks, {} major faults since the restore; \
             by process: {}; most CPU: {}",
            self.swapped_in.saturating_sub(base.swapped_in),
            self.read_kib.saturating_sub(base.read_kib),
            self.major.saturating_sub(base.major),
            list(faulted),
            list(busy)
        )
    }
}

/// With `snapboot.profilecheck`, right after a restore: keeps the fault counters of this
/// moment and starts a detached `snapboot profile faults`, which reports after `wait_secs`
/// which processes still had to wait for the store (what the eager image lacked).
pub fn start_fault_watch(wait_secs: u32) {
    let base = FaultCounts::now();
    let Ok(bytes) = postcard::to_allocvec(&base) else {
        return;
    };
    if std::fs::write(FAULTS_BASE_PATH, bytes).is_err() {
        return;
    }
    crate::guest::spawn_detached(&["profile", "faults", "--wait", &wait_secs.to_string()]);
}

/// The major faults since the restore (from the counters [`start_fault_watch`] kept).
pub fn faults_since_restore() -> Result<String, ProfileError> {
    let path = Path::new(FAULTS_BASE_PATH);
    let bytes = std::fs::read(path).map_err(|err| ProfileError::Io {
        step: "reading the fault counters of the restore",
        path: path.to_path_buf(),
        err,
    })?;
    let base: FaultCounts = postcard::from_bytes(&bytes).map_err(|e| ProfileError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(FaultCounts::now().since_text(&base))
}

/// After a restore, after the `restored` marker: a prefetch-mode image starts reading its
/// profile back in, in the background (it must not delay the application).
pub fn start_prefetch() {
    if Path::new(PREFETCH_PATH).exists() {
        // The binary that captured is the one restored; it runs the prefetch detached.
        crate::guest::spawn_detached(&["profile", "prefetch"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_mappings_are_the_readable_ones_without_kernel_pages() {
        let maps = "\
55d0a000-55d0c000 r--p 00000000 00:19 12 /run/snapboot/bin/snapboot
55d0c000-55d0f000 r-xp 00002000 00:19 12 /run/snapboot/bin/snapboot
55d10000-55d11000 ---p 00000000 00:00 0
55d11000-55d13000 rw-p 00000000 00:00 0 [heap]
7ffd000-7fff000 rw-p 00000000 00:00 0 [stack]
7fff100-7fff200 r--p 00000000 00:00 0 [vvar]
7fff200-7fff300 r-xp 00000000 00:00 0 [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]";
        assert_eq!(
            own_readable(maps),
            [
                (0x55d0a000, 0x55d0c000),
                (0x55d0c000, 0x55d0f000),
                (0x55d11000, 0x55d13000),
                (0x7ffd000, 0x7fff000)
            ]
        );
    }

    #[test]
    fn own_resident_pages_include_what_this_test_just_touched() {
        let buf = vec![7u8; 64 * 4096];
        let at = buf.as_ptr() as u64;
        let own = own_resident();
        let first = at.div_ceil(PAGE) * PAGE;
        assert!(
            own.iter().any(|&(a, n)| a <= first && first < a + n * PAGE),
            "{first:#x} not in {own:x?}"
        );
        let mut p = PageSet::default();
        assert_eq!(add_own_pages(&mut p), p.pages());
        assert!(p.pages() >= 64, "{p:?}");
        drop(buf);
    }

    #[test]
    fn stat_lines_give_name_and_fault_counts() {
        let line = "312 (python3 (x)) S 1 312 312 34816 312 4194304 9000 0 57 3 120 30";
        let c = stat_counts(line).unwrap();
        assert_eq!(
            (c.comm.as_str(), c.minor, c.major, c.children_major),
            ("python3 (x)", 9000, 57, 3)
        );
        assert_eq!(stat_counts("312 (sh) S 1"), None);
        let vm = "pgpgin 10\npswpin 42\npgmajfault 7\n";
        assert_eq!(
            (vmstat_value(vm, "pswpin"), vmstat_value(vm, "pgmajfault")),
            (42, 7)
        );
        assert_eq!(vmstat_value(vm, "nothing"), 0);
    }

    #[test]
    fn fault_report_lists_faults_most_first_and_the_busiest_processes() {
        let p = |comm: &str, minor, major, children_major, cpu_ms: u64| ProcCounts {
            comm: comm.into(),
            minor,
            major,
            children_major,
            cpu_ns: cpu_ms * 1_000_000,
        };
        let base = FaultCounts {
            swapped_in: 100,
            major: 50,
            read_kib: 1000,
            procs: [(1, p("init", 0, 5, 0, 10)), (7, p("app", 100, 10, 0, 500))].into(),
        };
        let now = FaultCounts {
            swapped_in: 130,
            major: 62,
            read_kib: 1200,
            procs: [
                (1, p("init", 0, 5, 0, 10)),
                (7, p("app", 160, 13, 20, 540)),
                (9, p("new", 3, 9, 0, 2)),
            ]
            .into(),
        };
        assert_eq!(
            now.since_text(&base),
            "30 pages swapped in, 200 KiB read from disks, 12 major faults since the \
             restore; by process: app[7] 3 (+20 in its ended children), new[9] 9; \
             most CPU: app[7] 40.0 ms, 60 minor faults, new[9] 2.0 ms, 3 minor faults"
        );
        assert!(base
            .since_text(&base)
            .ends_with("by process: none; most CPU: none"));
    }

    #[test]
    fn the_counters_of_this_process_are_readable() {
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(stat_counts(&me).is_some(), "{me}");
        let c = FaultCounts::now();
        assert!(c.procs.contains_key(&1) && c.major > 0, "{c:?}");
    }

    #[test]
    fn intersect_keeps_the_common_pages() {
        let a = [(0x1000, 4), (0x10000, 2)];
        let b = [(0x3000, 10), (0x11000, 1)];
        assert_eq!(intersect(&a, &b), [(0x3000, 2), (0x11000, 1)]);
        assert!(intersect(&a, &[]).is_empty());
    }

    #[test]
    fn only_private_writable_anonymous_memory_is_rewritten() {
        let maps = "\
00400000-00401000 r-xp 00000000 fe:00 12 /usr/bin/python3
00600000-00602000 rw-p 00002000 fe:00 12 /usr/bin/python3
01000000-01100000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000010000 rw-p 00000000 00:00 0
7f0000010000-7f0000011000 ---p 00000000 00:00 0
7f0000020000-7f0000030000 rw-s 00000000 00:01 5 /dev/zero (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
";
        assert_eq!(
            writable_anon(maps),
            [
                (0x0100_0000, 0x0110_0000),
                (0x7f00_0000_0000, 0x7f00_0001_0000),
                (0x7ffd_0000_0000, 0x7ffd_0002_1000)
            ]
        );
        assert_eq!(parse_maps(maps, |_| true).len(), 7);
        assert_eq!(pages_of(&[(0x1000, 0x3000)]), [(0x1000, 2)]);
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
