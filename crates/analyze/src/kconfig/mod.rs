//! The kernel's build configuration: whether snapshot boot can work with this kernel and
//! which boot-time options are set. [`KernelConfig::parse`] reads `.config` text
//! (`CONFIG_X=y`, `=m`, `="string"`, numbers, `# CONFIG_X is not set`); [`load_config`] reads
//! a file, gzip-compressed or not, or `/proc/config.gz` of the running kernel. [`check_config`]
//! gives one [`KernelCheck`] per relevant option with a [`Verdict`] and the reason.

use flate2::read::GzDecoder;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::AnalyzeError;

/// Where the running kernel exposes its config (with `CONFIG_IKCONFIG_PROC`).
pub const PROC_CONFIG: &str = "/proc/config.gz";

/// One option's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum ConfigValue {
    /// Built in (`=y`).
    Yes,
    /// Built as a module (`=m`).
    Module,
    /// Explicitly off (`# CONFIG_X is not set`).
    NotSet,
    /// A string (quotes removed) or number.
    Value(String),
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Yes => f.write_str("y"),
            Self::Module => f.write_str("m"),
            Self::NotSet => f.write_str("is not set"),
            Self::Value(v) => write!(f, "{v:?}"),
        }
    }
}

/// A parsed kernel `.config`. Option names are kept without the `CONFIG_` prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct KernelConfig {
    /// Every option mentioned, by name without `CONFIG_`.
    pub options: BTreeMap<String, ConfigValue>,
}

impl KernelConfig {
    /// Parses `.config` text; lines that are neither assignments nor `is not set` comments
    /// are ignored.
    pub fn parse(text: &str) -> Self {
        let mut options = BTreeMap::new();
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("# CONFIG_") {
                if let Some(name) = rest.strip_suffix(" is not set") {
                    options.insert(name.to_string(), ConfigValue::NotSet);
                }
                continue;
            }
            let Some((name, value)) = line.strip_prefix("CONFIG_").and_then(|r| r.split_once('='))
            else {
                continue;
            };
            let value = match value {
                "y" => ConfigValue::Yes,
                "m" => ConfigValue::Module,
                v => ConfigValue::Value(
                    v.strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .unwrap_or(v)
                        .to_string(),
                ),
            };
            options.insert(name.to_string(), value);
        }
        Self { options }
    }

    /// The value of `name` (with or without the `CONFIG_` prefix); `None` if not mentioned.
    pub fn get(&self, name: &str) -> Option<&ConfigValue> {
        self.options
            .get(name.strip_prefix("CONFIG_").unwrap_or(name))
    }

    /// Whether `name` is built in.
    pub fn is_builtin(&self, name: &str) -> bool {
        self.get(name) == Some(&ConfigValue::Yes)
    }

    /// Whether `name` is built in or a module.
    pub fn is_enabled(&self, name: &str) -> bool {
        matches!(self.get(name), Some(ConfigValue::Yes | ConfigValue::Module))
    }

    /// The string or number value of `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(ConfigValue::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// The value as shown in a check: `y`, `m`, `is not set`, `"lz4"`, or `absent`.
    fn shown(&self, name: &str) -> String {
        self.get(name)
            .map_or_else(|| "absent".to_string(), ToString::to_string)
    }

    /// The first of `CONFIG_<prefix><choice>` that is built in, lower-cased (e.g. the
    /// kernel's compressor from prefix `KERNEL_`).
    pub fn choice(&self, prefix: &str, choices: &[&str]) -> Option<String> {
        choices
            .iter()
            .find(|c| self.is_builtin(&format!("{prefix}{c}")))
            .map(|c| c.to_ascii_lowercase())
    }

    /// The kernel image's compressor (`CONFIG_KERNEL_*`).
    pub fn kernel_compression(&self) -> Option<String> {
        self.choice("KERNEL_", KERNEL_COMPRESSORS)
    }

    /// The built-in initramfs's compressor (`CONFIG_INITRAMFS_COMPRESSION_*`).
    pub fn initramfs_compression(&self) -> Option<String> {
        self.choice("INITRAMFS_COMPRESSION_", INITRAMFS_COMPRESSORS)
    }
}

/// `CONFIG_KERNEL_*` choices.
const KERNEL_COMPRESSORS: &[&str] = &["GZIP", "BZIP2", "LZMA", "XZ", "LZO", "LZ4", "ZSTD"];
/// `CONFIG_INITRAMFS_COMPRESSION_*` choices.
const INITRAMFS_COMPRESSORS: &[&str] =
    &["GZIP", "BZIP2", "LZMA", "XZ", "LZO", "LZ4", "ZSTD", "NONE"];

/// Reads a kernel config: `path`, or [`PROC_CONFIG`] when `None`; gzip is recognised by its
/// magic bytes.
pub fn load_config(path: Option<&Path>) -> Result<KernelConfig, AnalyzeError> {
    let path: PathBuf = path.map_or_else(|| PathBuf::from(PROC_CONFIG), Path::to_path_buf);
    let bytes = std::fs::read(&path).map_err(|source| AnalyzeError::Read {
        path: path.clone(),
        source,
    })?;
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .map_err(|e| AnalyzeError::Config {
                path: path.clone(),
                reason: format!("gzip data cannot be decompressed to text: {e}"),
            })?;
        text
    } else {
        String::from_utf8(bytes).map_err(|e| AnalyzeError::Config {
            path: path.clone(),
            reason: format!("not text: {e}"),
        })?
    };
    let config = KernelConfig::parse(&text);
    if config.options.is_empty() {
        return Err(AnalyzeError::Config {
            path,
            reason: "no CONFIG_ lines: not a kernel .config".to_string(),
        });
    }
    Ok(config)
}

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
    /// The option, with its `CONFIG_` prefix.
    pub option: String,
    /// Its value as shown in `.config` (`y`, `m`, `is not set`, `"lz4"`, `absent`).
    pub value: String,
    /// What it means.
    pub verdict: Verdict,
    /// What the check is about.
    pub area: CheckArea,
    /// Why.
    pub reason: String,
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

/// Checks `.config` text (see [`check_config`]).
pub fn check_kernel(config_text: &str) -> Vec<KernelCheck> {
    check_config(&KernelConfig::parse(config_text))
}

/// Checks a config for snapshot boot and boot time; one entry per relevant option.
pub fn check_config(cfg: &KernelConfig) -> Vec<KernelCheck> {
    use CheckArea::{BootTime, Snapshot};
    use Verdict::{Blocker, Ok, Warn};
    let mut out = Vec::new();
    let mut add = |option: &str, area, verdict, reason: &str| {
        out.push(KernelCheck {
            option: format!("CONFIG_{option}"),
            value: cfg.shown(option),
            verdict,
            area,
            reason: reason.to_string(),
        });
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
            "without it there is no snapshot image to create or restore",
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
            "snapboot captures and restores through /dev/snapshot",
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
            "devices must be quiesced and restored around the image",
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
            "virtual machines: virtio-mem brings the rest (the board's route; keep it a module \
             so it loads after ready, not at boot)",
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
            Some(ConfigValue::Module) if crypto == "LZO" => (Ok, format!("zram's default compressor ({def}) is a module: the board's initramfs loads lzo-rle for lazy captures, and snapboot picks a compressor the kernel has registered")),
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
            "lockdown is forced on at boot, and lockdown disables hibernation",
        );
    } else if cfg.is_builtin("SECURITY_LOCKDOWN_LSM") {
        add("SECURITY_LOCKDOWN_LSM", Snapshot, Warn, "lockdown is not forced, but `lockdown=` or Secure Boot can enable it, which disables hibernation");
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
    for (opt, what) in [
        ("VIRTIO_BLK", "the board's disks"),
        ("SQUASHFS", "the board's read-only root"),
    ] {
        match cfg.get(opt) {
            Some(ConfigValue::Yes) => add(
                opt,
                Snapshot,
                Ok,
                &format!("built in: {what} are usable before any module loads"),
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
                &format!("missing: {what} are unusable (fine on boards that use other drivers)"),
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
            "snapboot's restore runs from an initramfs",
        );
    }

    if cfg.is_builtin("PRINTK_TIME") {
        add(
            "PRINTK_TIME",
            BootTime,
            Ok,
            "printk timestamps are on: boot logs can be analysed",
        );
    } else {
        add("PRINTK_TIME", BootTime, Warn, "no printk timestamps by default: add printk.time=1 to the command line to measure the kernel");
    }
    match cfg.kernel_compression().as_deref() {
        Some("lzo") => add(
            "KERNEL_LZO",
            BootTime,
            Warn,
            "fast to decompress, but `snapboot board build` cannot extract an LZO bzImage: pass a vmlinux extracted with the kernel's scripts/extract-vmlinux",
        ),
        Some(c @ ("lz4" | "zstd")) => {
            add(
                &format!("KERNEL_{}", c.to_ascii_uppercase()),
                BootTime,
                Ok,
                "a fast decompressor for the kernel image",
            );
        }
        Some(c) => {
            add(&format!("KERNEL_{}", c.to_ascii_uppercase()), BootTime, Warn, "slower to decompress than LZ4/LZO (LZO saved 0.25 s over gzip on an ARM board, ELC-E 2009)");
        }
        None => {}
    }
    if cfg.is_builtin("LEGACY_PTYS") {
        let count = cfg.value("LEGACY_PTY_COUNT").unwrap_or("256");
        add("LEGACY_PTYS", BootTime, Warn, &format!("{count} BSD PTYs are created at boot (0.64 s on an ARM board, ELC-E 2009); Unix98 PTYs suffice"));
    } else {
        add(
            "LEGACY_PTYS",
            BootTime,
            Ok,
            "no legacy PTYs to create at boot",
        );
    }
    if cfg.is_builtin("IP_PNP") {
        add("IP_PNP", BootTime, Warn, "kernel IP autoconfiguration: with ip= on the command line the kernel waits for DHCP/BOOTP (1.56 s on an ARM board, ELC-E 2009)");
    } else {
        add("IP_PNP", BootTime, Ok, "no kernel IP autoconfiguration");
    }
    if cfg.is_builtin("DEFERRED_STRUCT_PAGE_INIT") {
        add(
            "DEFERRED_STRUCT_PAGE_INIT",
            BootTime,
            Ok,
            "struct page initialisation is deferred to parallel threads",
        );
    } else if cfg.get("DEFERRED_STRUCT_PAGE_INIT").is_some() {
        add("DEFERRED_STRUCT_PAGE_INIT", BootTime, Warn, "all struct pages are initialised before the kernel starts init: slow on machines with much RAM");
    }
    if let Some(c) = cfg.initramfs_compression() {
        let verdict = if matches!(c.as_str(), "lz4" | "lzo" | "zstd" | "none") {
            Ok
        } else {
            Warn
        };
        let reason = if verdict == Ok {
            "the built-in initramfs unpacks quickly"
        } else {
            "the built-in initramfs decompresses slowly; LZ4 unpacks several times faster"
        };
        add(
            &format!("INITRAMFS_COMPRESSION_{}", c.to_ascii_uppercase()),
            BootTime,
            verdict,
            reason,
        );
    }
    if !cfg.is_builtin("KALLSYMS") {
        add(
            "KALLSYMS",
            BootTime,
            Warn,
            "initcall_debug will print addresses instead of function names",
        );
    }
    out
}

#[cfg(test)]
mod tests;
