//! Deferred memory: the system boots, and its images are captured and restored,
//! with only its boot memory; the rest of the RAM is added after the application is ready
//! (cold boot) or after `restored` (snapshot boot), in the background, and a deadline check
//! makes sure it really arrives.
//!
//! ```text
//! power-on ── kernel (boot memory only: less memmap to initialise) ── app ready / restored
//!                                                                        │
//!            snapboot memory add (detached, SCHED_IDLE) ◄────────────────┘
//!              1. load virtio_mem from /run/snapboot/modules: the device plugs the rest,
//!                 the driver adds it as offline memory blocks
//!              2. online every new block (online_movable or online_kernel), at idle
//!                 priority, so the application keeps the CPU
//!              3. at the deadline: whatever is still missing is fixed (offline blocks
//!                 onlined, the driver loaded) and reported; then wait once more
//! ```
//!
//! Memory goes online from this process, not by the kernel's auto-online: onlining (the
//! struct-page initialisation of each block) then runs at this process's idle priority
//! instead of in a kernel worker beside the application. An image must hold only the boot
//! memory, since the restoring kernel sees only that: [`check_capture`] refuses a capture
//! while the deferred memory's driver is loaded (virtio-mem refuses hibernation anyway).

use crate::guest::print_marker;
use bootparams::{MemFault, MemOnline};
use boottrace::Marker;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the initramfs leaves the late modules.
pub const MODULE_DIR: &str = "/run/snapboot/modules";
/// The memory block devices.
pub const MEMORY_SYS: &str = "/sys/devices/system/memory";
/// The driver that brings the deferred memory.
pub const DRIVER: &str = "virtio_mem";

/// Errors of deferred memory.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A sysfs or module file could not be read or written.
    #[error("{step}: {path}")]
    Io {
        step: &'static str,
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    /// The kernel refused the module.
    #[error("loading {path}: {err}")]
    Module { path: PathBuf, err: nix::Error },
    /// The deferred memory's driver is loaded: an image taken now would hold memory the
    /// restoring kernel does not have.
    #[error(
        "deferred memory is in use ({DRIVER} is loaded, {online_mib} MiB online): an image \
         holds only the boot memory, so capture on a cold boot before the memory is added \
         (`snapboot ready` captures before it adds it)"
    )]
    DeferredOnline { online_mib: u64 },
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MemoryError {
    let path = path.to_path_buf();
    move |err| MemoryError::Io { step, path, err }
}

/// The memory blocks and their states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Blocks {
    /// Bytes per block.
    pub block_bytes: u64,
    /// Blocks online.
    pub online: u64,
    /// Names (`memory42`) of the blocks that are offline.
    pub offline: Vec<String>,
}

impl Blocks {
    /// Bytes online.
    pub fn online_bytes(&self) -> u64 {
        self.online * self.block_bytes
    }
}

/// Reads the memory blocks under `root` (normally [`MEMORY_SYS`]).
pub fn blocks(root: &Path) -> Result<Blocks, MemoryError> {
    let size_path = root.join("block_size_bytes");
    let size = std::fs::read_to_string(&size_path).map_err(io("reading", &size_path))?;
    let block_bytes = u64::from_str_radix(size.trim(), 16).map_err(|e| MemoryError::Io {
        step: "parsing",
        path: size_path.clone(),
        err: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    let mut b = Blocks {
        block_bytes,
        ..Blocks::default()
    };
    let rd = std::fs::read_dir(root).map_err(io("listing", root))?;
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            n.strip_prefix("memory")
                .is_some_and(|i| i.parse::<u64>().is_ok())
        })
        .collect();
    names.sort_by_key(|n| n["memory".len()..].parse::<u64>().unwrap_or(0));
    for n in names {
        let state = std::fs::read_to_string(root.join(&n).join("state")).unwrap_or_default();
        match state.trim() {
            "offline" => b.offline.push(n),
            s if s.starts_with("online") => b.online += 1,
            _ => {}
        }
    }
    Ok(b)
}

/// Brings every offline block under `root` online in `zone`; returns how many went
/// online (a block the kernel refuses stays offline and is counted out).
pub fn online_offline_blocks(root: &Path, zone: MemOnline) -> Result<u64, MemoryError> {
    let b = blocks(root)?;
    let mut n = 0;
    for name in &b.offline {
        let p = root.join(name).join("state");
        if std::fs::write(&p, zone.sysfs()).is_ok() {
            n += 1;
        }
    }
    Ok(n)
}

/// Whether the deferred memory's driver is loaded.
pub fn driver_loaded() -> bool {
    Path::new("/sys/module").join(DRIVER).exists()
}

/// Loads the deferred memory's driver from [`MODULE_DIR`].
pub fn load_driver() -> Result<(), MemoryError> {
    let path = Path::new(MODULE_DIR).join(format!("{DRIVER}.ko"));
    let f = std::fs::File::open(&path).map_err(io("opening", &path))?;
    match nix::kmod::finit_module(&f, c"", nix::kmod::ModuleInitFlags::empty()) {
        Ok(()) | Err(nix::Error::EEXIST) => Ok(()),
        Err(err) => Err(MemoryError::Module { path, err }),
    }
}

/// Refuses a capture while deferred memory is in use.
pub fn check_capture() -> Result<(), MemoryError> {
    if !driver_loaded() {
        return Ok(());
    }
    let online_mib = blocks(Path::new(MEMORY_SYS))
        .map(|b| b.online_bytes() >> 20)
        .unwrap_or(0);
    Err(MemoryError::DeferredOnline { online_mib })
}

/// What `snapboot memory add` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Bytes of RAM to end up with.
    pub total: u64,
    /// Zone the memory goes online in.
    pub zone: MemOnline,
    /// When to check that it arrived.
    pub deadline: Duration,
    /// A broken first attempt (tests).
    pub fault: Option<MemFault>,
}

impl Plan {
    /// The plan of a kernel command line, `None` without `snapboot.defermem`.
    pub fn from_params(p: &bootparams::BootParams) -> Option<Plan> {
        Some(Plan {
            total: p.defer_mem?,
            zone: p.mem_online,
            deadline: Duration::from_secs(p.mem_deadline.into()),
            fault: p.mem_fault,
        })
    }
}

/// What [`add`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Bytes online at the start.
    pub start_bytes: u64,
    /// Bytes online at the end.
    pub end_bytes: u64,
    /// Bytes wanted.
    pub total: u64,
    /// Seconds until everything was online (or until it gave up).
    pub secs: f64,
    /// What the deadline check had to do (empty when the first attempt was complete).
    pub repairs: Vec<String>,
    /// `MemTotal` of /proc/meminfo at the end, KiB.
    pub mem_total_kib: u64,
}

/// `MemTotal` of /proc/meminfo text, KiB.
fn mem_total_kib(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Report {
    /// Whether all of the memory arrived.
    pub fn complete(&self) -> bool {
        self.end_bytes >= self.total
    }

    /// One line for the `memory` marker.
    pub fn text(&self, zone: MemOnline) -> String {
        let mib = |b: u64| b >> 20;
        let mut t = format!(
            "{} of {} MiB online: {} MiB added ({}) in {:.2} s, MemTotal {} MiB",
            mib(self.end_bytes),
            mib(self.total),
            mib(self.end_bytes.saturating_sub(self.start_bytes)),
            zone.sysfs(),
            self.secs,
            self.mem_total_kib >> 10
        );
        if !self.repairs.is_empty() {
            t += &format!(
                "; the first attempt missed its deadline: {}",
                self.repairs.join(", ")
            );
        }
        t
    }
}

/// How often the blocks are looked at.
const POLL: Duration = Duration::from_millis(20);

/// Onlines new blocks as the driver adds them until `total` bytes are online or `until`;
/// returns whether everything arrived. With `online` false it only watches.
fn follow(root: &Path, plan: &Plan, until: Instant, online: bool) -> Result<bool, MemoryError> {
    loop {
        if online {
            online_offline_blocks(root, plan.zone)?;
        }
        if blocks(root)?.online_bytes() >= plan.total {
            return Ok(true);
        }
        if Instant::now() >= until {
            return Ok(false);
        }
        std::thread::sleep(POLL);
    }
}

/// Adds the deferred memory (see the module documentation). `root` is normally
/// [`MEMORY_SYS`]; `load` loads the driver ([`load_driver`]).
pub fn add(
    root: &Path,
    plan: &Plan,
    load: &dyn Fn() -> Result<(), MemoryError>,
    loaded: &dyn Fn() -> bool,
) -> Result<Report, MemoryError> {
    let t0 = Instant::now();
    let start_bytes = blocks(root)?.online_bytes();
    let mut repairs = Vec::new();
    // First attempt: request the memory, online what arrives.
    if plan.fault != Some(MemFault::NoLoad) && !loaded() {
        load()?;
    }
    let online = plan.fault != Some(MemFault::Offline);
    let mut done = follow(root, plan, t0 + plan.deadline, online)?;
    if !done {
        // The deadline check: whatever is missing is fixed here, and said.
        let n = online_offline_blocks(root, plan.zone)?;
        if n > 0 {
            repairs.push(format!("onlined {n} offline blocks"));
        }
        if !loaded() {
            load()?;
            repairs.push(format!("loaded {DRIVER}, which had not been"));
        }
        if repairs.is_empty() {
            repairs.push("nothing to fix, waited once more".into());
        }
        done = follow(root, plan, Instant::now() + plan.deadline, true)?;
    }
    let end_bytes = blocks(root)?.online_bytes();
    let _ = done;
    Ok(Report {
        start_bytes,
        end_bytes,
        total: plan.total,
        secs: t0.elapsed().as_secs_f64(),
        repairs,
        mem_total_kib: mem_total_kib(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default()),
    })
}

/// `snapboot memory add`: adds the deferred memory the settings ask for and prints
/// the `memory` marker (or `memory-missing`).
pub fn add_from_cmdline() -> Result<Option<Report>, MemoryError> {
    let Some(plan) = crate::settings::load()
        .ok()
        .as_ref()
        .and_then(Plan::from_params)
    else {
        return Ok(None);
    };
    // Best effort: at normal priority it would still work, only compete with the app.
    let _ = devsys::sys::mm::idle_priority();
    let r = add(Path::new(MEMORY_SYS), &plan, &load_driver, &driver_loaded)?;
    let marker = if r.complete() {
        Marker::Memory
    } else {
        Marker::MemoryMissing
    };
    print_marker(marker, Some(&r.text(plan.zone)));
    Ok(Some(r))
}

/// After ready (cold boot) or `restored`: starts `snapboot memory add` detached when the
/// command line defers memory. Its marker goes to the console.
pub fn start_add(params: &bootparams::BootParams) {
    if params.defer_mem.is_none() {
        return;
    }
    crate::guest::spawn_detached(&["memory", "add"]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A fake `/sys/devices/system/memory` with 128 MiB blocks in the given states.
    fn fake(states: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("block_size_bytes"), "8000000\n").unwrap();
        for (i, s) in states.iter().enumerate() {
            let b = d.path().join(format!("memory{i}"));
            std::fs::create_dir(&b).unwrap();
            std::fs::write(b.join("state"), format!("{s}\n")).unwrap();
        }
        std::fs::write(d.path().join("auto_online_blocks"), "offline\n").unwrap();
        d
    }

    fn plan(total_blocks: u64, fault: Option<MemFault>) -> Plan {
        Plan {
            total: total_blocks * (128 << 20),
            zone: MemOnline::Movable,
            deadline: Duration::from_millis(100),
            fault,
        }
    }

    #[test]
    fn blocks_are_counted_by_state_and_named_in_order() {
        let d = fake(&["online", "online", "offline", "going-offline", "offline"]);
        std::fs::create_dir(d.path().join("power")).unwrap();
        let b = blocks(d.path()).unwrap();
        assert_eq!(b.block_bytes, 128 << 20);
        assert_eq!(b.online, 2);
        assert_eq!(b.offline, ["memory2", "memory4"]);
        assert_eq!(b.online_bytes(), 256 << 20);
        assert_eq!(
            online_offline_blocks(d.path(), MemOnline::Kernel).unwrap(),
            2
        );
        let s = std::fs::read_to_string(d.path().join("memory2/state")).unwrap();
        assert_eq!(s, "online_kernel");
    }

    #[test]
    fn a_missing_sysfs_is_a_named_error() {
        let e = blocks(Path::new("/nonexistent/memory")).unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/memory/block_size_bytes"),
            "{e}"
        );
    }

    #[test]
    fn memory_that_is_already_there_needs_nothing() {
        let d = fake(&["online", "online"]);
        let loads = Cell::new(0);
        let r = add(
            d.path(),
            &plan(2, None),
            &|| {
                loads.set(loads.get() + 1);
                Ok(())
            },
            &|| true,
        )
        .unwrap();
        assert!(r.complete() && r.repairs.is_empty(), "{r:?}");
        assert_eq!(loads.get(), 0, "the driver was loaded already");
        assert!(r
            .text(MemOnline::Movable)
            .starts_with("256 of 256 MiB online: 0 MiB added"));
    }

    #[test]
    fn left_offline_by_the_first_attempt_the_deadline_check_onlines_it() {
        // The driver added two blocks but the first attempt does not online them.
        let d = fake(&["online", "offline", "offline"]);
        let root = d.path().to_path_buf();
        let loaded = Cell::new(false);
        let r = add(
            &root,
            &plan(3, Some(MemFault::Offline)),
            &|| {
                loaded.set(true);
                Ok(())
            },
            &|| loaded.get(),
        )
        .unwrap();
        assert!(r.complete(), "{r:?}");
        assert_eq!(r.repairs, ["onlined 2 offline blocks"]);
        assert_eq!(blocks(&root).unwrap().online, 3);
        assert!(r
            .text(MemOnline::Movable)
            .contains("missed its deadline: onlined 2"));
    }

    #[test]
    fn never_requested_the_deadline_check_loads_the_driver() {
        let d = fake(&["online"]);
        let root = d.path().to_path_buf();
        let loaded = Cell::new(false);
        let r = add(
            &root,
            &plan(2, Some(MemFault::NoLoad)),
            &|| {
                // The "driver" adds a block, offline, when it loads.
                let b = root.join("memory1");
                std::fs::create_dir(&b).unwrap();
                std::fs::write(b.join("state"), "offline\n").unwrap();
                loaded.set(true);
                Ok(())
            },
            &|| loaded.get(),
        );
        let r = r.unwrap();
        assert!(r.complete(), "{r:?}");
        assert_eq!(r.repairs, [format!("loaded {DRIVER}, which had not been")]);
        assert_eq!(blocks(&root).unwrap().online, 2);
    }

    #[test]
    fn memory_that_never_comes_is_reported_missing() {
        let d = fake(&["online"]);
        let r = add(d.path(), &plan(4, None), &|| Ok(()), &|| true).unwrap();
        assert!(!r.complete());
        assert_eq!(r.repairs, ["nothing to fix, waited once more"]);
        assert!(r
            .text(MemOnline::Kernel)
            .starts_with("128 of 512 MiB online"));
    }

    #[test]
    fn memtotal_is_read_from_meminfo() {
        let m = "MemTotal:       16655004 kB\nMemFree:        16000000 kB\n";
        assert_eq!(mem_total_kib(m), 16655004);
        assert_eq!(mem_total_kib("nothing"), 0);
    }

    #[test]
    fn a_plan_comes_only_with_defermem() {
        let p =
            bootparams::BootParams::parse("snapboot.defermem=16G snapboot.memdeadline=5").unwrap();
        let plan = Plan::from_params(&p).unwrap();
        assert_eq!(plan.total, 16 << 30);
        assert_eq!(plan.deadline, Duration::from_secs(5));
        assert_eq!(plan.zone, MemOnline::Movable);
        assert!(Plan::from_params(&bootparams::BootParams::default()).is_none());
    }
}
