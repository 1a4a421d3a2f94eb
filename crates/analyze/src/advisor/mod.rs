//! The boot-time advisor: rules that read an [`Analysis`] (and, when given, the kernel's
//! [`KernelConfig`]) and name the cheap wins of the "boot time reduction techniques" toolbox
//! (Opdenacker, ELC-E 2009), each with the time it would save *on this log* when the log
//! shows it: preset `lpj=` instead of calibrating the delay loop, `quiet` on a slow serial
//! console, no kernel IP autoconfiguration, no legacy PTYs, the slowest built-in initcalls,
//! root-device probe delays, long unexplained silences, a slow initramfs unpack, a slow root
//! mount, a slowly decompressed kernel, what snapshot boot would gain by skipping user-space
//! start-up altogether, what a restore kernel would gain over restoring with the distribution
//! kernel, and what a refused image costs a restore kernel that hands the boot over.

mod rules;
#[cfg(test)]
mod tests;

pub use rules::Finding;

use crate::analysis::Analysis;
use crate::kconfig::KernelConfig;

/// A rule: looks at an analysis and maybe a config, and returns its finding if it fires.
type Rule = fn(&Analysis, Option<&KernelConfig>) -> Option<Finding>;

/// Every rule, by name, in the order they are evaluated.
const ALL: &[(&str, Rule)] = &[
    ("lpj", rules::lpj),
    ("quiet", rules::quiet),
    ("ip_autoconfig", rules::ip_autoconfig),
    ("legacy_ptys", rules::legacy_ptys),
    ("slow_initcalls", rules::slow_initcalls),
    ("probe_delay", rules::probe_delay),
    ("long_gap", rules::long_gap),
    ("initramfs_unpack", rules::initramfs_unpack),
    ("rootfs_mount", rules::rootfs_mount),
    ("kernel_compression", rules::kernel_compression),
    ("snapshot_gain", rules::snapshot_gain),
    ("restore_kernel", rules::restore_kernel),
    ("slow_device_restore", rules::slow_device_restore),
    ("handover", rules::handover),
    ("restorer_refused", rules::restorer_refused),
];

/// The names of all rules.
pub const RULES: [&str; 15] = [
    "lpj",
    "quiet",
    "ip_autoconfig",
    "legacy_ptys",
    "slow_initcalls",
    "probe_delay",
    "long_gap",
    "initramfs_unpack",
    "rootfs_mount",
    "kernel_compression",
    "snapshot_gain",
    "restore_kernel",
    "slow_device_restore",
    "handover",
    "restorer_refused",
];

/// Runs every rule; findings come sorted by saving, largest first (unknown savings last).
pub fn advise(analysis: &Analysis, config: Option<&KernelConfig>) -> Vec<Finding> {
    let mut out: Vec<Finding> = ALL
        .iter()
        .filter_map(|(_, rule)| rule(analysis, config))
        .collect();
    out.sort_by(|a, b| {
        let key = |f: &Finding| f.saving_s.unwrap_or(-1.0);
        key(b).total_cmp(&key(a))
    });
    out
}

/// Runs the rule called `name` alone (`None` if there is no such rule or it does not fire).
pub fn run_rule(name: &str, analysis: &Analysis, config: Option<&KernelConfig>) -> Option<Finding> {
    let (_, rule) = ALL.iter().find(|(n, _)| *n == name)?;
    rule(analysis, config)
}

/// The sum of the known savings, seconds.
pub fn total_saving(findings: &[Finding]) -> f64 {
    findings
        .iter()
        .filter_map(|f| f.saving_s)
        .fold(0.0, |a, b| a + b)
}
