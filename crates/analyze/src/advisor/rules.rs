//! The advisor's rules, one function each. A rule fires only when the log (or config) shows
//! its problem; its saving is measured on the log where possible and `None` where the log
//! cannot tell.

use boottrace::MilestoneKind;
use serde::Serialize;

use crate::analysis::{Analysis, PhaseKind};
use crate::kconfig::KernelConfig;

/// One piece of advice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule that fired (one of [`super::RULES`]).
    pub rule: String,
    /// One-line summary.
    pub title: String,
    /// Seconds the fix would save on this boot, when the log shows it.
    pub saving_s: Option<f64>,
    /// What in the log (or config) shows the problem.
    pub evidence: String,
    /// What to change.
    pub fix: String,
}

/// Initcalls at least this long (seconds) count as slow.
const SLOW_INITCALL_S: f64 = 0.02;
/// How many slow initcalls are listed.
const TOP_INITCALLS: usize = 5;
/// A silent stretch at least this long (seconds) is worth explaining.
const LONG_GAP_S: f64 = 0.5;
/// An initramfs unpack at least this long (seconds) is slow.
const SLOW_UNPACK_S: f64 = 0.1;
/// A root mount at least this long (seconds) is slow ...
const SLOW_MOUNT_S: f64 = 0.3;
/// ... and this is what a small read-only root takes.
const FAST_MOUNT_S: f64 = 0.05;
/// The console must cost at least this much (seconds) to be worth `quiet`.
const CONSOLE_MIN_S: f64 = 0.05;
/// Snapshot boot is worth suggesting from this gain (seconds).
const SNAPSHOT_MIN_GAIN_S: f64 = 0.5;
/// Fixed cost of a snapshot restore (seconds): open, header, device resume.
const RESTORE_BASE_S: f64 = 0.1;
/// Image read rate, MB/s (virtio or eMMC with a fast decompressor).
const RESTORE_MB_PER_S: f64 = 1000.0;
/// Image size assumed when the log does not show the app's memory (MB).
const DEFAULT_IMAGE_MB: f64 = 64.0;
/// A restore kernel's boot to `@resume-start`, as a share of the distribution kernel's:
/// 0.27-0.33 in `bench compare` on the snapboot board (2026-11-23); the larger is assumed.
const RESTORE_KERNEL_SHARE: f64 = 0.33;
/// A restore kernel is worth suggesting from this saving (seconds).
const RESTORE_KERNEL_MIN_GAIN_S: f64 = 0.3;
/// Device restore callbacks worth naming: together at least this long (seconds) ...
const SLOW_DEVICE_RESTORE_S: f64 = 0.01;
/// ... the devices at least this long (seconds), at most this many.
const SLOW_DEVICE_S: f64 = 0.002;
const TOP_DEVICES: usize = 3;

fn finding(
    rule: &str,
    title: String,
    saving_s: Option<f64>,
    evidence: String,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        rule: rule.to_string(),
        title,
        saving_s,
        evidence,
        fix: fix.into(),
    }
}

/// The printk time shown in evidence: `[   1.234567]` style, or the analysis time.
fn at(t: f64) -> String {
    format!("@{t:.3} s")
}

/// Whether the log has usable times (printk or host stamps).
fn timed(a: &Analysis) -> bool {
    a.has_printk_time || a.has_host_stamps
}

/// The time from line `i` to the next line, when the log is timed.
fn time_to_next(a: &Analysis, i: usize) -> Option<f64> {
    let next = a.lines.get(i + 1)?;
    timed(a).then(|| (next.t - a.lines[i].t).max(0.0))
}

/// Delay-loop calibration (`Calibrating delay loop...`) without `lpj=`.
pub(super) fn lpj(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let i = a.find_line("Calibrating delay loop")?;
    let msg = &a.lines[i].message;
    if msg.contains("(skipped)") || a.cmdline.as_ref().is_some_and(|c| c.has("lpj")) {
        return None;
    }
    let value = msg
        .split_once("lpj=")
        .map(|(_, v)| v.trim_end_matches(')').to_string());
    let fix = match &value {
        Some(v) => format!("add lpj={v} to the kernel command line (the value this boot calculated; ELC-E 2009 measured 0.18 s saved)"),
        None => "add lpj=<value printed by the calibration> to the kernel command line".to_string(),
    };
    Some(finding(
        "lpj",
        "The kernel calibrates its delay loop at every boot".to_string(),
        time_to_next(a, i),
        format!("{} {msg}", at(a.lines[i].t)),
        fix,
    ))
}

/// Kernel messages on a slow serial console without `quiet`.
pub(super) fn quiet(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let c = a.console.as_ref()?;
    if c.quiet || c.kernel_seconds < CONSOLE_MIN_S {
        return None;
    }
    let mut evidence = format!(
        "{} kernel lines, {} bytes on {} at {} baud{} = {:.2} s of UART time",
        c.kernel_lines,
        c.kernel_bytes,
        c.console.device,
        c.console.baud,
        if c.console.baud_given {
            ""
        } else {
            " (driver default)"
        },
        c.kernel_seconds
    );
    let saving = if c.virtual_uart {
        evidence.push_str(&format!(
            "; the kernel ran {:.2} s ahead of what {} baud allows: an emulated UART, so only real hardware saves this",
            c.ahead_s.unwrap_or(0.0),
            c.console.baud
        ));
        None
    } else {
        Some(c.kernel_seconds)
    };
    Some(finding(
        "quiet",
        "Kernel messages are printed on a slow serial console".to_string(),
        saving,
        evidence,
        "add `quiet` to the kernel command line (dmesg keeps every message); or raise the baud rate",
    ))
}

/// Kernel IP autoconfiguration (`IP-Config:` lines, `ip=` on the command line).
pub(super) fn ip_autoconfig(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let is_ipconfig = |m: &str| {
        m.contains("IP-Config:")
            || m.starts_with("Sending DHCP requests")
            || m.starts_with("Sending BOOTP requests")
    };
    let ip = a
        .cmdline
        .as_ref()
        .and_then(|c| c.value("ip"))
        .map(str::to_string);
    if ip.as_deref().is_some_and(|v| v == "off" || v == "none") {
        return None;
    }
    let first = a.lines.iter().position(|l| is_ipconfig(&l.message));
    // The block ends after the indented continuation lines of `IP-Config: Complete:`.
    let last = a
        .lines
        .iter()
        .rposition(|l| is_ipconfig(&l.message))
        .map(|l| {
            let more = a.lines[l + 1..]
                .iter()
                .take_while(|x| x.message.starts_with(char::is_whitespace))
                .count();
            l + more
        });
    let (saving, evidence) = match (first, last) {
        (Some(f), Some(l)) => {
            let from = a.lines[f.saturating_sub(1)].t;
            let saving = timed(a).then(|| (a.lines[l].t - from).max(0.0));
            (
                saving,
                format!(
                    "{} {} … {} {}",
                    at(a.lines[f].t),
                    a.lines[f].message,
                    at(a.lines[l].t),
                    a.lines[l].message
                ),
            )
        }
        _ => {
            let ip = ip?;
            (None, format!("ip={ip} on the command line"))
        }
    };
    Some(finding(
        "ip_autoconfig",
        "The kernel configures the network itself (IP autoconfiguration)".to_string(),
        saving,
        evidence,
        "drop ip= and CONFIG_IP_PNP; configure the network from user space in parallel with the app (ELC-E 2009 measured 1.56 s); for an NFS root give a static ip=<addr>:<server>:<gw>:<mask> to skip DHCP",
    ))
}

/// Legacy (BSD) PTYs: `CONFIG_LEGACY_PTYS=y`, or a slow `pty_init` initcall.
pub(super) fn legacy_ptys(a: &Analysis, cfg: Option<&KernelConfig>) -> Option<Finding> {
    let pty = a
        .initcalls
        .iter()
        .find(|c| c.name == "pty_init")
        .filter(|c| c.duration >= 0.01);
    let configured = cfg.is_some_and(|c| c.is_builtin("LEGACY_PTYS"));
    if pty.is_none() && !configured {
        return None;
    }
    let mut evidence = Vec::new();
    if configured {
        let count = cfg
            .and_then(|c| c.value("LEGACY_PTY_COUNT"))
            .unwrap_or("256");
        evidence.push(format!("CONFIG_LEGACY_PTYS=y with {count} PTYs"));
    }
    if let Some(p) = pty {
        evidence.push(format!("pty_init took {:.1} ms", p.duration * 1e3));
    }
    Some(finding(
        "legacy_ptys",
        "Legacy BSD PTYs are created at boot".to_string(),
        pty.map(|p| p.duration),
        evidence.join("; "),
        "disable CONFIG_LEGACY_PTYS (or lower CONFIG_LEGACY_PTY_COUNT); Unix98 PTYs (/dev/pts) suffice (ELC-E 2009 measured 0.64 s)",
    ))
}

/// The slowest initcalls, and whether the built-in ones could be modules or deferred.
pub(super) fn slow_initcalls(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let mut slow: Vec<_> = a
        .initcalls
        .iter()
        .filter(|c| {
            c.duration >= SLOW_INITCALL_S && c.name != "pty_init" && c.name != "populate_rootfs"
        })
        .collect();
    if slow.is_empty() {
        return None;
    }
    slow.sort_by(|x, y| y.duration.total_cmp(&x.duration));
    slow.truncate(TOP_INITCALLS);
    let evidence: Vec<String> = slow
        .iter()
        .map(|c| {
            let what = c
                .module
                .as_ref()
                .map_or_else(|| "built-in".to_string(), |m| format!("module {m}"));
            format!(
                "{} {:.1} ms ({what}, pid {})",
                c.name,
                c.duration * 1e3,
                c.pid
            )
        })
        .collect();
    // Built-in calls run by the init thread before user space can start are what a module
    // loaded later, or deferred, takes off the critical path.
    let deferrable: f64 = slow
        .iter()
        .filter(|c| c.is_builtin() && c.pid <= 1 && a.init_exec.is_none_or(|t| c.start < t))
        .map(|c| c.duration)
        .sum();
    Some(finding(
        "slow_initcalls",
        format!("{} slow initcall(s) of {} measured", slow.len(), a.initcalls.len()),
        (deferrable > 0.0).then_some(deferrable),
        evidence.join("; "),
        "build drivers that the app does not need at once as modules and load them after it is ready (or use async probing / deferred initcalls); drop what the board does not use",
    ))
}

/// Root-device probe delays: `rootdelay=`, `Waiting N sec before mounting root`, `rootwait`.
pub(super) fn probe_delay(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    if let Some(i) = a.find_line("before mounting root device") {
        let msg = &a.lines[i].message;
        let secs = msg
            .split_whitespace()
            .find_map(|w| w.trim_end_matches("sec").parse::<f64>().ok());
        let measured = time_to_next(a, i);
        return Some(finding(
            "probe_delay",
            "The kernel sleeps before mounting the root device".to_string(),
            measured.or(secs),
            format!("{} {msg}", at(a.lines[i].t)),
            "remove rootdelay= from the command line; use rootwait (waits only as long as the device needs) or a built-in storage driver",
        ));
    }
    if let Some(v) = a.cmdline.as_ref().and_then(|c| c.value("rootdelay")) {
        return Some(finding(
            "probe_delay",
            "The kernel sleeps before mounting the root device".to_string(),
            v.parse().ok(),
            format!("rootdelay={v} on the command line"),
            "remove rootdelay=; use rootwait instead",
        ));
    }
    let i = a.find_line("Waiting for root device")?;
    let wait = time_to_next(a, i).filter(|w| *w >= 0.1)?;
    Some(finding(
        "probe_delay",
        "The kernel waits for the root device to appear".to_string(),
        Some(wait),
        format!("{} {} (next line {:.3} s later)", at(a.lines[i].t), a.lines[i].message, wait),
        "build the storage controller driver in and probe it early (or synchronously); check why the device shows up late",
    ))
}

/// The longest silence before user space that no other rule explains.
pub(super) fn long_gap(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let until = a
        .init_exec
        .or_else(|| a.at(MilestoneKind::RootMounted))
        .unwrap_or(a.end);
    let explained = |before: &str| {
        before.contains("before mounting root")
            || before.contains("Calibrating delay loop")
            || before.contains("IP-Config")
            || before.starts_with("Sending DHCP")
            || before.contains("Waiting for root device")
    };
    let g = a
        .gaps
        .iter()
        .filter(|g| g.duration() >= LONG_GAP_S && g.end <= until && !explained(&g.before))
        .max_by(|x, y| x.duration().total_cmp(&y.duration()))?;
    let inside: Vec<&str> = a
        .initcalls
        .iter()
        .filter(|c| c.start < g.end && c.end() > g.start)
        .map(|c| c.name.as_str())
        .collect();
    let who = if inside.is_empty() {
        "no initcall_debug data covers it".to_string()
    } else {
        format!("initcalls running: {}", inside.join(", "))
    };
    Some(finding(
        "long_gap",
        format!("{:.2} s pass without a console line before user space", g.duration()),
        None,
        format!("{} after \"{}\" until {} \"{}\"; {who}", at(g.start), g.before, at(g.end), g.after),
        "find what the kernel waits for there (boot with initcall_debug, then look at the bars in the boot graph); probe timeouts and firmware loading are the usual suspects",
    ))
}

/// A slow initramfs unpack.
pub(super) fn initramfs_unpack(a: &Analysis, cfg: Option<&KernelConfig>) -> Option<Finding> {
    let p = a
        .phase(PhaseKind::Unpack)
        .filter(|p| p.duration() >= SLOW_UNPACK_S)?;
    let comp = cfg.and_then(KernelConfig::initramfs_compression);
    // Share of the unpack time a switch to LZ4 saves, by compressor.
    let (share, what) = match comp.as_deref() {
        Some("xz" | "lzma" | "bzip2") => (0.8, comp.clone().unwrap_or_default()),
        Some("gzip") => (0.6, "gzip".to_string()),
        Some(c @ ("lz4" | "lzo" | "zstd" | "none")) => (0.0, c.to_string()),
        _ => (0.5, "unknown compressor (assumed gzip-like)".to_string()),
    };
    Some(finding(
        "initramfs_unpack",
        format!("Unpacking the initramfs takes {:.2} s", p.duration()),
        (share > 0.0).then_some(p.duration() * share),
        format!("{} to {}: {:.3} s, {what}", at(p.start), at(p.end), p.duration()),
        "compress the initramfs with LZ4 (CONFIG_RD_LZ4, CONFIG_INITRAMFS_COMPRESSION_LZ4) and keep it small: move what is not needed before the root mount to the root file system",
    ))
}

/// A slow root file system mount.
pub(super) fn rootfs_mount(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let (dur, evidence) = if let Some(root) = a.at(MilestoneKind::RootMounted) {
        let from = a.init_exec.or_else(|| a.at(MilestoneKind::InitStart))?;
        (
            root - from,
            format!("init {} to root mounted {}", at(from), at(root)),
        )
    } else {
        let i = a.find_line("VFS: Mounted root")?;
        // From the line after a preceding probe delay, if there is one close by, else from
        // the line before.
        let is_delay =
            |m: &str| m.contains("before mounting root") || m.contains("Waiting for root device");
        let start = (i.saturating_sub(10)..i)
            .rev()
            .find(|&j| is_delay(&a.lines[j].message))
            .map_or(i.saturating_sub(1), |k| k + 1);
        let from = a.lines[start].t;
        (
            a.lines[i].t - from,
            format!(
                "{} {} … {} {}",
                at(from),
                a.lines[start].message,
                at(a.lines[i].t),
                a.lines[i].message
            ),
        )
    };
    if !timed(a) || dur < SLOW_MOUNT_S {
        return None;
    }
    let no_type = a.cmdline.as_ref().is_some_and(|c| !c.has("rootfstype"));
    let mut fix = "mount a small read-only root (squashfs/erofs) with its driver built in; avoid journal replay and fsck at boot".to_string();
    if no_type {
        fix.push_str("; give rootfstype= so the kernel does not try every file system");
    }
    Some(finding(
        "rootfs_mount",
        format!("Mounting the root file system takes {dur:.2} s"),
        Some(dur - FAST_MOUNT_S),
        evidence,
        fix,
    ))
}

/// A kernel compressed with a slow decompressor (config only: the log cannot show it).
pub(super) fn kernel_compression(_: &Analysis, cfg: Option<&KernelConfig>) -> Option<Finding> {
    let comp = cfg?.kernel_compression()?;
    if !matches!(comp.as_str(), "gzip" | "xz" | "lzma" | "bzip2") {
        return None;
    }
    Some(finding(
        "kernel_compression",
        format!("The kernel image is {comp}-compressed"),
        None,
        format!("CONFIG_KERNEL_{}=y (decompression runs before the first printk, inside the firmware phase)", comp.to_ascii_uppercase()),
        "build with CONFIG_KERNEL_LZ4 (or LZO): faster to decompress for a slightly bigger image (ELC-E 2009 measured 0.25 s for LZO over gzip)",
    ))
}

/// What snapshot boot would gain: user space start-up is skipped, an image load is paid.
pub(super) fn snapshot_gain(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    if a.at(MilestoneKind::Restored).is_some() {
        return None; // already a snapshot boot
    }
    let ready = a.ready_time()?;
    let from = a.init_exec.or_else(|| a.at(MilestoneKind::InitStart))?;
    let user = ready - from;
    let rss_mb = a.lines.iter().rev().find_map(|l| {
        let (_, v) = l.message.split_once("rss=")?;
        v.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse::<f64>()
            .ok()
    });
    let image_mb = rss_mb.map_or(DEFAULT_IMAGE_MB, |r| r + DEFAULT_IMAGE_MB);
    let load = RESTORE_BASE_S + image_mb / RESTORE_MB_PER_S;
    let gain = user - load;
    if gain < SNAPSHOT_MIN_GAIN_S {
        return None;
    }
    let share = a
        .tti
        .or(Some(ready))
        .filter(|t| *t > 0.0)
        .map_or(0.0, |t| user / t * 100.0);
    Some(finding(
        "snapshot_gain",
        format!("This system would gain {gain:.2} s from snapshot boot"),
        Some(gain),
        format!(
            "{user:.2} s ({share:.0}% of the boot) pass between init {} and ready {}; restoring a ~{image_mb:.0} MB image costs ~{load:.2} s",
            at(from),
            at(ready)
        ),
        "capture a snapshot at the ready point (`snapboot board capture`) and boot from it: the kernel still boots, user-space start-up is replaced by the image load",
    ))
}

/// A snapshot boot that first boots the whole distribution kernel, only to hand it the image.
pub(super) fn restore_kernel(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let resume = a.at(MilestoneKind::ResumeStart)?;
    let version = a.kernel_version.as_deref()?;
    if version.contains(bootparams::RESTORE_KERNEL_SUFFIX) {
        return None;
    }
    let start = a.kernel_start.unwrap_or(0.0);
    let boot = resume - start;
    let saving = boot * (1.0 - RESTORE_KERNEL_SHARE);
    if !timed(a) || saving < RESTORE_KERNEL_MIN_GAIN_S {
        return None;
    }
    let release = version.split_whitespace().next().unwrap_or(version);
    Some(finding(
        "restore_kernel",
        format!("A restore kernel would reach the image about {saving:.2} s sooner"),
        Some(saving),
        format!(
            "the distribution kernel {release} took {boot:.2} s from its start {} to `@resume-start` {}, only to hand the image to /dev/snapshot",
            at(start),
            at(resume)
        ),
        "restore with a small kernel built from the distribution's own source (`snapboot board restore-kernel`; on a device, docs/real-boards.md \"A restore kernel on a real board\"): on the snapboot board it reached `@resume-start` in 0.27-0.33× of the distribution kernel's time",
    ))
}

/// A restore kernel that could not restore, and handed a cold boot to the stock kernel.
pub(super) fn handover(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let i = a.find_line("@handover ")?;
    let reason = a
        .lines
        .iter()
        .find_map(|l| {
            l.message
                .split_once("@fallback ")
                .map(|(_, r)| r.to_string())
        })
        .unwrap_or_else(|| "not shown".into());
    // The stock kernel's banner, after the hand-over: until then the boot did nothing useful.
    let second = a.lines[i..]
        .iter()
        .find(|l| l.message.starts_with("Linux version"))?;
    let spent = (second.t - a.kernel_start.unwrap_or(0.0)).max(0.0);
    Some(finding(
        "handover",
        format!(
            "The image was refused: {spent:.2} s passed in the restore kernel and the hand-over before the cold boot began"
        ),
        timed(a).then_some(spent),
        format!("@fallback {reason}"),
        "fix what the reason names, or capture a new image (a boot with `snapboot.capture`): until then every power-on pays the restore kernel and the kexec on top of a cold boot",
    ))
}

/// The restorer refused the image and booted the stock kernel cold: the time from its start
/// to the stock kernel's is lost on every power-on until the image fits again.
pub(super) fn restorer_refused(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let refused = a
        .milestones
        .iter()
        .find(|m| m.kind == MilestoneKind::RestorerRefused)?;
    let reason = refused.detail.clone().unwrap_or_else(|| "not shown".into());
    let spent = a
        .phase(PhaseKind::RestorerFallback)
        .zip(a.at(MilestoneKind::RestorerStart))
        .map(|(p, start)| p.end - start);
    Some(finding(
        "restorer_refused",
        match spent {
            Some(s) => format!(
                "The restorer refused the image: {s:.2} s passed in it and loading the stock kernel before the cold boot began"
            ),
            None => "The restorer refused the image".into(),
        },
        spent,
        format!("snapboot-restorer: refused: {reason}"),
        "fix what the reason names, or capture a new image (a boot with `snapboot.capture`): until then every power-on pays the restorer's checks on top of a cold boot",
    ))
}

/// Device restore callbacks (`pm_print_times`, see `snapboot.pmtimes`) that take a visible
/// part of a snapshot boot, with the slowest devices named.
pub(super) fn slow_device_restore(a: &Analysis, _: Option<&KernelConfig>) -> Option<Finding> {
    let by = crate::devpm::restore_by_device(&a.device_pm);
    let total: f64 = by.iter().map(|d| d.duration).sum();
    if total < SLOW_DEVICE_RESTORE_S {
        return None;
    }
    let slow: Vec<_> = by
        .iter()
        .filter(|d| d.duration >= SLOW_DEVICE_S)
        .take(TOP_DEVICES)
        .collect();
    if slow.is_empty() {
        return None;
    }
    let named: f64 = slow.iter().map(|d| d.duration).sum();
    // Callbacks of different devices overlap where the kernel runs them asynchronously: no
    // fix saves more than the restore's wall time.
    let span = crate::devpm::restore_span(&a.device_pm);
    let saving = span.map_or(named, |s| named.min(s));
    let evidence: Vec<String> = slow
        .iter()
        .map(|d| {
            format!(
                "{} {:.1} ms ({})",
                d.who,
                d.duration * 1e3,
                d.callbacks.join(", ")
            )
        })
        .collect();
    Some(finding(
        "slow_device_restore",
        format!(
            "Restoring {} devices took {}{:.1} ms of callbacks; the slowest {} took {:.1} ms",
            by.len(),
            span.map_or_else(String::new, |s| format!("{:.1} ms, ", s * 1e3)),
            total * 1e3,
            slow.len(),
            named * 1e3
        ),
        Some(saving),
        evidence.join("; "),
        "every device in the image is restored at every boot: leave devices the application does not use off the board or unbind their drivers before the capture; for one it needs, look for a slow reset in its driver's restore callback (virtio: one queue set-up per virtqueue)",
    ))
}
