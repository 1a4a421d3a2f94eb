//! A kernel's build configuration judged for snapshot boot and boot time. The config itself
//! and what snapshot boot needs of it are the device's ([`kernelcheck::config`],
//! [`kernelcheck::check::requirements`], the list `snapboot check` uses on the device);
//! this module adds the boot-time advice and reads the file the host names ([`load_config`]).

use std::path::Path;

use crate::error::AnalyzeError;
pub use kernelcheck::check::{CheckArea, KernelCheck, Verdict};
pub use kernelcheck::config::{ConfigValue, KernelConfig, PROC_CONFIG};

/// Reads a kernel config: `path`, or [`PROC_CONFIG`] when `None`; gzip is recognised by its
/// magic bytes.
pub fn load_config(path: Option<&Path>) -> Result<KernelConfig, AnalyzeError> {
    let path = path.unwrap_or(Path::new(PROC_CONFIG));
    Ok(kernelcheck::config::load(path)?)
}

/// Checks `.config` text (see [`check_config`]).
pub fn check_kernel(config_text: &str) -> Vec<KernelCheck> {
    check_config(&KernelConfig::parse(config_text))
}

/// Checks a config for snapshot boot (the device's list) and boot time; one entry per
/// relevant option.
pub fn check_config(cfg: &KernelConfig) -> Vec<KernelCheck> {
    let mut out = kernelcheck::check::requirements(cfg);
    out.extend(boot_time(cfg));
    out
}

/// The boot-time options of a config.
fn boot_time(cfg: &KernelConfig) -> Vec<KernelCheck> {
    use CheckArea::BootTime;
    use Verdict::{Ok, Warn};
    let mut out = Vec::new();
    let mut add = |option: &str, area, verdict, reason: &str| {
        out.push(KernelCheck::of(cfg, option, area, verdict, reason));
    };
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
