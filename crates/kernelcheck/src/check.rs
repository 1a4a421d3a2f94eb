//! What snapboot needs of a kernel, one list for the device (`snapboot check`, on the
//! running kernel) and the host (`snapboot check-kernel`, on a config file, which adds its
//! boot-time advice): [`requirements`] gives one [`KernelCheck`] per option that capture and
//! restore depend on, with a [`Verdict`] and the reason (for a blocker, what to change).
//! [`running`] adds what only the running kernel shows: its lockdown state
//! ([`devsys::lockdown`]) and whether it offers hibernation at all (`/sys/power/disk`).

use crate::config::{ConfigValue, KernelConfig, KernelConfigError};
use devsys::lockdown::{self, Lockdown, LOCKDOWN_FILE};
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;

/// How an option affects snapshot boot or boot time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Fine as it is.
    Ok,
    /// Works, but costs time or limits something.
    Warn,
    /// Snapshot boot cannot work.
    Blocker,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Blocker => "BLOCKER",
        })
    }
}

/// What a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckArea {
    /// Whether snapshot boot (and the kernel-native baseline) can work.
    Snapshot,
    /// Boot-time options.
    BootTime,
}

/// The verdict on one option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelCheck {
    /// What is checked: an option with its `CONFIG_` prefix, or a file of the running
    /// kernel (`/sys/kernel/security/lockdown`).
    pub option: String,
    /// Its value as shown in `.config` (`y`, `m`, `is not set`, `"lz4"`, `absent`) or read.
    pub value: String,
    /// What it means.
    pub verdict: Verdict,
    /// What the check is about.
    pub area: CheckArea,
    /// Why, and for a blocker what to do.
    pub reason: String,
}

impl KernelCheck {
    /// The check of `option` (without `CONFIG_`) in `cfg`.
    pub fn of(
        cfg: &KernelConfig,
        option: &str,
        area: CheckArea,
        verdict: Verdict,
        reason: &str,
    ) -> Self {
        Self {
            option: format!("CONFIG_{option}"),
            value: cfg.shown(option),
            verdict,
            area,
            reason: reason.to_string(),
        }
    }
}

/// An option one feature needs (built in or a module): its verdict and reason.
fn feature_option(
    cfg: &KernelConfig,
    opt: &str,
    feature: &str,
    unavailable: &str,
    what: &str,
) -> (Verdict, String) {
    if cfg.is_builtin(opt) || cfg.get(opt) == Some(&ConfigValue::Module) {
        (Verdict::Ok, format!("{feature}: {what}"))
    } else {
        (Verdict::Warn, format!("{unavailable}: {what}"))
    }
}

/// What snapshot boot needs of a kernel config: one entry per relevant option, all of area
/// [`CheckArea::Snapshot`].
pub fn requirements(cfg: &KernelConfig) -> Vec<KernelCheck> {
    use CheckArea::Snapshot;
    use Verdict::{Blocker, Ok, Warn};
    let mut out = Vec::new();
    let mut add = |option: &str, area, verdict, reason: &str| {
        out.push(KernelCheck::of(cfg, option, area, verdict, reason));
    };
    let hib = cfg.is_builtin("HIBERNATION");
    if hib {
        add(
            "HIBERNATION",
            Snapshot,
            Ok,
            "hibernation images can be created and restored",
        );
    } else {
        add(
            "HIBERNATION",
            Snapshot,
            Blocker,
            "without it there is no snapshot image to create or restore: build the kernel with CONFIG_HIBERNATION=y",
        );
    }
    match cfg.get("HIBERNATION_SNAPSHOT_DEV") {
        Some(ConfigValue::Yes) => add(
            "HIBERNATION_SNAPSHOT_DEV",
            Snapshot,
            Ok,
            "/dev/snapshot exists: snapboot's capture and restore interface",
        ),
        None if hib => add(
            "HIBERNATION_SNAPSHOT_DEV",
            Snapshot,
            Ok,
            "option absent (kernel before 5.13): /dev/snapshot comes with HIBERNATION",
        ),
        _ => add(
            "HIBERNATION_SNAPSHOT_DEV",
            Snapshot,
            Blocker,
            "snapboot captures and restores through /dev/snapshot: build the kernel with CONFIG_HIBERNATION_SNAPSHOT_DEV=y",
        ),
    }
    if cfg.is_builtin("PM_SLEEP") {
        add(
            "PM_SLEEP",
            Snapshot,
            Ok,
            "device suspend/resume callbacks are available",
        );
    } else {
        add(
            "PM_SLEEP",
            Snapshot,
            Blocker,
            "devices must be quiesced and restored around the image: build the kernel with CONFIG_PM_SLEEP=y (HIBERNATION selects it)",
        );
    }
    if cfg.is_builtin("SWAP") {
        add(
            "SWAP",
            Snapshot,
            Ok,
            "the kernel-native hibernation baseline can write to swap (snapboot itself needs none)",
        );
    } else {
        add("SWAP", Snapshot, Warn, "no swap: the kernel-native baseline (resume=) cannot be measured; snapboot itself needs none");
    }
    // Lazy images (improved snapshot boot): swap area in the store behind a device-mapper
    // snapshot whose writes go to zram, paged out through cgroup v2 memory.reclaim.
    for (opt, what) in [
        ("SWAP", "user memory is paged out to swap"),
        ("MEMCG", "memory.reclaim pages memory out before capture"),
        (
            "BLK_DEV_DM",
            "the swap area is a device-mapper stack on the store",
        ),
        (
            "DM_SNAPSHOT",
            "the snapshot target keeps the swap area unchanged after restore",
        ),
        ("ZRAM", "zram holds the snapshot's copy-on-write data"),
        (
            "DM_VERITY",
            "dm-verity checks every page read back from the swap region (without it: --no-verity)",
        ),
    ] {
        let (verdict, reason) = feature_option(
            cfg,
            opt,
            "lazy images (capture --lazy)",
            "lazy images (capture --lazy) unavailable",
            what,
        );
        add(opt, Snapshot, verdict, &reason);
    }
    // Deferred memory (snapboot.defermem): each route to the RAM added later.
    for (opt, what) in [
        (
            "MEMORY_HOTPLUG",
            "every route: memory blocks are added and onlined after boot",
        ),
        (
            "VIRTIO_MEM",
            "virtual machines: virtio-mem brings the rest (keep it a module so it loads after \
             ready, not at boot)",
        ),
        (
            "ACPI_HOTPLUG_MEMORY",
            "machines with hot-pluggable DIMMs: ACPI memory devices added after boot",
        ),
        (
            "X86_PMEM_LEGACY",
            "real hardware without hotplug: memmap=SIZE!OFFSET keeps RAM from the kernel at boot",
        ),
        (
            "DEV_DAX_KMEM",
            "real hardware: that RAM goes online later through device-dax kmem",
        ),
    ] {
        let (verdict, reason) = feature_option(
            cfg,
            opt,
            "deferred memory",
            "deferred memory, this route unavailable",
            what,
        );
        add(opt, Snapshot, verdict, &reason);
    }
    // zram fails its disksize with a bare EINVAL when its compressor is not registered.
    let zram_comp = [
        ("LZORLE", "LZO"),
        ("LZO", "LZO"),
        ("LZ4", "LZ4"),
        ("LZ4HC", "LZ4HC"),
        ("ZSTD", "ZSTD"),
        ("842", "842"),
    ];
    let names: Vec<&str> = zram_comp.iter().map(|(n, _)| *n).collect();
    if let Some(def) = cfg.choice("ZRAM_DEF_COMP_", &names) {
        let upper = def.to_ascii_uppercase();
        let crypto = zram_comp
            .iter()
            .find(|(n, _)| *n == upper)
            .map_or("LZO", |(_, c)| *c);
        let opt = format!("CRYPTO_{crypto}");
        let (verdict, reason) = match cfg.get(&opt) {
            Some(ConfigValue::Yes) => (Ok, format!("zram's default compressor ({def}) is built in")),
            Some(ConfigValue::Module) if crypto == "LZO" => (Ok, format!("zram's default compressor ({def}) is a module: the capture unit loads lzo_rle before a lazy capture, and snapboot picks a compressor the kernel has registered")),
            Some(ConfigValue::Module) => (Warn, format!("zram's default compressor ({def}) is a module: load it before a lazy capture (snapboot picks any compressor registered in /proc/crypto, and names what is missing)")),
            _ => (Warn, format!("zram's default compressor ({def}) is missing: a lazy capture needs another one registered in /proc/crypto")),
        };
        add(&opt, Snapshot, verdict, &reason);
    }
    let forced = [
        "LOCK_DOWN_KERNEL_FORCE_INTEGRITY",
        "LOCK_DOWN_KERNEL_FORCE_CONFIDENTIALITY",
    ]
    .into_iter()
    .find(|o| cfg.is_builtin(o));
    if let Some(o) = forced {
        add(
            o,
            Snapshot,
            Blocker,
            "lockdown is forced on at boot, and lockdown disables hibernation: build the kernel with CONFIG_LOCK_DOWN_KERNEL_FORCE_NONE=y",
        );
    } else if cfg.is_builtin("SECURITY_LOCKDOWN_LSM") {
        add("SECURITY_LOCKDOWN_LSM", Snapshot, Warn, "lockdown is not forced, but `lockdown=` or UEFI Secure Boot can enable it, which disables hibernation (`snapboot check` on the device reads the running state)");
    } else {
        add(
            "SECURITY_LOCKDOWN_LSM",
            Snapshot,
            Ok,
            "no kernel lockdown to disable hibernation",
        );
    }
    if let Some(comp) = cfg.choice("HIBERNATION_COMP_", &["LZ4", "LZO"]) {
        add(
            &format!("HIBERNATION_COMP_{}", comp.to_ascii_uppercase()),
            Snapshot,
            Ok,
            "kernel-native images are compressed with this by default (hibernate.compressor=)",
        );
    }
    // Drivers a virtual machine's store and a squashfs root need before the root is
    // mounted (a device's own store drivers are `snapboot check`'s store-modules finding).
    for (opt, what, elsewhere) in [
        (
            "VIRTIO_BLK",
            "a virtual machine's virtio disks",
            "fine on a device whose disks use other drivers",
        ),
        (
            "SQUASHFS",
            "a squashfs root",
            "fine with another read-only root",
        ),
    ] {
        match cfg.get(opt) {
            Some(ConfigValue::Yes) => add(
                opt,
                Snapshot,
                Ok,
                &format!("built in: {what} can be used before any module loads"),
            ),
            Some(ConfigValue::Module) => add(
                opt,
                Snapshot,
                Warn,
                &format!("a module: the initramfs must load it before {what} can be used"),
            ),
            _ => add(
                opt,
                Snapshot,
                Warn,
                &format!("missing: {what} cannot be used ({elsewhere})"),
            ),
        }
    }
    if cfg.is_builtin("BLK_DEV_INITRD") {
        add(
            "BLK_DEV_INITRD",
            Snapshot,
            Ok,
            "an initramfs can run snapboot's restore before the root is mounted",
        );
    } else {
        add(
            "BLK_DEV_INITRD",
            Snapshot,
            Blocker,
            "snapboot's restore runs from an initramfs: build the kernel with CONFIG_BLK_DEV_INITRD=y",
        );
    }

    out
}

/// The verdict on `option` (with its `CONFIG_` prefix, or a file) in `checks`.
pub fn verdict_of(checks: &[KernelCheck], option: &str) -> Option<Verdict> {
    checks
        .iter()
        .find(|c| c.option == option)
        .map(|c| c.verdict)
}

/// The kernel's switch for hibernation: `[disabled]` when the kernel refuses it (lockdown,
/// `nohibernate`, secret memory in use), otherwise the modes it offers.
pub const POWER_DISK: &str = "/sys/power/disk";

/// The check of the lockdown state.
pub fn lockdown_check(state: Result<Lockdown, lockdown::LockdownError>) -> KernelCheck {
    let (value, verdict, reason) = match state {
        Err(e) => (
            "unknown".to_string(),
            Verdict::Warn,
            format!(
                "{}: if the kernel is locked down, hibernation is disabled",
                boottrace::error_chain(&e)
            ),
        ),
        Result::Ok(s) => match lockdown::check(s) {
            Err(why) => (s.to_string(), Verdict::Blocker, why.to_string()),
            Result::Ok(()) => (
                s.to_string(),
                Verdict::Ok,
                "hibernation is not disabled by lockdown".to_string(),
            ),
        },
    };
    KernelCheck {
        option: LOCKDOWN_FILE.into(),
        value,
        verdict,
        area: CheckArea::Snapshot,
        reason,
    }
}

/// The check of [`POWER_DISK`]'s text (`None`: not there, a kernel without hibernation).
pub fn power_disk_check(text: Option<&str>) -> KernelCheck {
    // The mode in use, in brackets (`[platform] shutdown reboot`), is what the table shows.
    let value = text.map_or("absent".to_string(), |t| {
        let t = t.trim();
        t.split_whitespace()
            .find(|w| w.starts_with('['))
            .unwrap_or(t)
            .to_string()
    });
    let (verdict, reason) = match text.map(str::trim) {
        None => (Verdict::Blocker, "the kernel has no hibernation: build it with CONFIG_HIBERNATION=y"),
        Some("[disabled]") => (Verdict::Blocker, "the kernel refuses hibernation now: lockdown (see its line), `nohibernate` or `hibernate=no` on the command line, or secret memory (memfd_secret) in use"),
        Some(_) => (Verdict::Ok, "the kernel offers hibernation"),
    };
    KernelCheck {
        option: POWER_DISK.into(),
        value,
        verdict,
        area: CheckArea::Snapshot,
        reason: reason.to_string(),
    }
}

/// What `snapboot check` reports on the running kernel.
#[derive(Debug, Clone, Serialize)]
pub struct RunningCheck {
    /// Where the config was read (`None`: none was found; then `checks` says why).
    pub config: Option<PathBuf>,
    /// Each requirement.
    pub checks: Vec<KernelCheck>,
}

impl RunningCheck {
    /// Whether a blocker was found.
    pub fn blocked(&self) -> bool {
        self.checks.iter().any(|c| c.verdict == Verdict::Blocker)
    }
}

/// Checks the running kernel: its config ([`crate::config::load_running`]), its
/// lockdown state and [`POWER_DISK`].
pub fn running() -> RunningCheck {
    let (config, mut checks) = match crate::config::load_running() {
        Result::Ok((path, cfg)) => (Some(path), requirements(&cfg)),
        Err(e) => (None, vec![no_config(&e)]),
    };
    checks.push(lockdown_check(lockdown::running()));
    let disk = std::fs::read_to_string(POWER_DISK).ok();
    checks.push(power_disk_check(disk.as_deref()));
    RunningCheck { config, checks }
}

/// The entry standing for the config checks when no config could be read.
fn no_config(e: &KernelConfigError) -> KernelCheck {
    KernelCheck {
        option: "kernel config".into(),
        value: "absent".into(),
        verdict: Verdict::Warn,
        area: CheckArea::Snapshot,
        reason: format!(
            "{}: the options cannot be checked (the lines below still can)",
            boottrace::error_chain(e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel snapshot boot works with, as a distribution's `.config` says it.
    const GOOD: &str = "\
CONFIG_HIBERNATION=y
CONFIG_HIBERNATION_SNAPSHOT_DEV=y
CONFIG_PM_SLEEP=y
CONFIG_SWAP=y
# CONFIG_SECURITY_LOCKDOWN_LSM is not set
CONFIG_VIRTIO_BLK=y
CONFIG_SQUASHFS=m
CONFIG_BLK_DEV_INITRD=y
";

    #[test]
    fn a_good_config_has_no_blockers() {
        let checks = requirements(&KernelConfig::parse(GOOD));
        assert!(
            checks.iter().all(|c| c.verdict != Verdict::Blocker),
            "{checks:#?}"
        );
        assert!(checks.iter().all(|c| c.area == CheckArea::Snapshot));
        assert_eq!(verdict_of(&checks, "CONFIG_SQUASHFS"), Some(Verdict::Warn));
    }

    #[test]
    fn each_blocker_names_its_fix() {
        let cfg = KernelConfig::parse(
            "# CONFIG_HIBERNATION is not set\nCONFIG_SECURITY_LOCKDOWN_LSM=y\n\
             CONFIG_LOCK_DOWN_KERNEL_FORCE_INTEGRITY=y\n",
        );
        let checks = requirements(&cfg);
        for o in [
            "CONFIG_HIBERNATION",
            "CONFIG_HIBERNATION_SNAPSHOT_DEV",
            "CONFIG_PM_SLEEP",
            "CONFIG_LOCK_DOWN_KERNEL_FORCE_INTEGRITY",
            "CONFIG_BLK_DEV_INITRD",
        ] {
            let c = checks.iter().find(|c| c.option == o).expect(o);
            assert_eq!(c.verdict, Verdict::Blocker, "{o}");
            assert!(
                c.reason.contains("build the kernel with"),
                "{o}: {}",
                c.reason
            );
        }
        let old = requirements(&KernelConfig::parse(
            "CONFIG_HIBERNATION=y\nCONFIG_SECURITY_LOCKDOWN_LSM=y\n",
        ));
        assert_eq!(
            verdict_of(&old, "CONFIG_HIBERNATION_SNAPSHOT_DEV"),
            Some(Verdict::Ok)
        );
        assert_eq!(
            verdict_of(&old, "CONFIG_SECURITY_LOCKDOWN_LSM"),
            Some(Verdict::Warn)
        );
    }

    #[test]
    fn the_running_state_lockdown_and_power_disk() {
        let locked = lockdown_check(lockdown::parse("none [integrity] confidentiality"));
        assert_eq!(
            (locked.verdict, locked.value.as_str()),
            (Verdict::Blocker, "integrity")
        );
        assert!(locked.reason.contains("Secure Boot"), "{}", locked.reason);
        let open = lockdown_check(Result::Ok(Lockdown::None));
        assert_eq!(open.verdict, Verdict::Ok);
        assert_eq!(
            lockdown_check(Result::Ok(Lockdown::Absent)).value,
            "no lockdown LSM"
        );
        let odd = lockdown_check(lockdown::parse("garbage"));
        assert_eq!(odd.verdict, Verdict::Warn);
        let disabled = power_disk_check(Some("[disabled]\n"));
        assert_eq!(
            (disabled.verdict, disabled.value.as_str()),
            (Verdict::Blocker, "[disabled]")
        );
        let offered = power_disk_check(Some("[platform] shutdown reboot\n"));
        assert_eq!(
            (offered.verdict, offered.value.as_str()),
            (Verdict::Ok, "[platform]")
        );
        assert_eq!(power_disk_check(None).verdict, Verdict::Blocker);
        let report = RunningCheck {
            config: None,
            checks: vec![open, disabled],
        };
        assert!(report.blocked());
    }
}
