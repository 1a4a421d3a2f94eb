//! Device power-management callbacks as the kernel times them. With `pm_print_times` on
//! (`/sys/power/pm_print_times`, or `initcall_debug` at boot; `snapboot.pmtimes` turns it on
//! in an image) every device callback of a system transition prints a line such as
//! `virtio_blk virtio1: virtio_dev_restore+0x0/0x80 [virtio] returned 0 after 1234 usecs`
//! (driver or bus, device, callback, return value, the kernel's own measure). A snapshot
//! boot's restore is the image kernel running its devices' `*restore*` callbacks (noirq,
//! early, then the main ones; some buses and classes use their `*resume*` callbacks for it);
//! the boot kernel's quiesce before the jump runs the `*freeze*` ones. A restore's console
//! also shows the capture's freeze lines, which were still in the image's log buffer. [`parse`] reads one line; [`DeviceCallback::kind`] says which of the
//! transition's steps a callback belongs to.

use serde::Serialize;

/// One timed device callback.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceCallback {
    /// When its line arrived, seconds on the analysis axis (lines printed while the console
    /// was suspended arrive together, so only `duration` is the callback's own time).
    pub t: f64,
    /// The line's printk time: when the callback returned, on the kernel's clock.
    pub kernel_end: Option<f64>,
    /// Driver, bus or class name the kernel prints before the device (`virtio_blk`, `pci`).
    pub subsystem: String,
    /// The device (`virtio1`, `0000:00:02.0`).
    pub device: String,
    /// The callback without its offset (`virtio_dev_restore`).
    pub callback: String,
    /// Its module, for a callback in a module.
    pub module: Option<String>,
    /// Its return value.
    pub ret: i64,
    /// How long it ran, seconds (the kernel's `after N usecs`).
    pub duration: f64,
}

/// Which step of a system transition a callback is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CallbackKind {
    /// Restoring a device from a hibernation image (`*restore*`, in the image kernel).
    Restore,
    /// Quiescing or freezing devices for the image or the jump (`*freeze*`, `*quiesce*`).
    Freeze,
    /// Thawing after an image was made (`*thaw*`).
    Thaw,
    /// Powering down (`*poweroff*`, `*suspend*`).
    PowerOff,
    /// Resuming from suspend (`*resume*`).
    Resume,
    /// `prepare` and `complete`, around any transition.
    PrepareComplete,
    /// Anything else.
    Other,
}

impl DeviceCallback {
    /// Which step of a transition the callback is, from its name.
    pub fn kind(&self) -> CallbackKind {
        let n = self.callback.as_str();
        if n.contains("restore") {
            CallbackKind::Restore
        } else if n.contains("freeze") || n.contains("quiesce") {
            CallbackKind::Freeze
        } else if n.contains("thaw") {
            CallbackKind::Thaw
        } else if n.contains("poweroff") || n.contains("suspend") {
            CallbackKind::PowerOff
        } else if n.contains("resume") {
            CallbackKind::Resume
        } else if n.contains("prepare") || n.contains("complete") {
            CallbackKind::PrepareComplete
        } else {
            CallbackKind::Other
        }
    }

    /// Whether it brings a device back: a `*restore*` callback, or a `*resume*` one (buses
    /// and classes such as pnp, serio, input and rtc restore with their resume callback).
    pub fn is_restore(&self) -> bool {
        matches!(self.kind(), CallbackKind::Restore | CallbackKind::Resume)
    }

    /// `subsystem device`, as the kernel names the device.
    pub fn who(&self) -> String {
        format!("{} {}", self.subsystem, self.device)
    }
}

/// Parses `SUBSYSTEM DEVICE: [PM: ]CALLBACK+off/len [module] returned RET after N usecs`
/// (6.1 prints the `PM: ` part; the subsystem may be two words, as `i8042 kbd 00:00`).
/// `kernel_ts` is the line's printk time, if any.
pub fn parse(t: f64, kernel_ts: Option<f64>, msg: &str) -> Option<DeviceCallback> {
    let (head, tail) = msg.rsplit_once(" returned ")?;
    let (ret, usecs) = tail.split_once(" after ")?;
    let usecs: u64 = usecs.strip_suffix(" usecs")?.trim().parse().ok()?;
    let ret: i64 = ret.trim().parse().ok()?;
    let mut words: Vec<&str> = head.split_whitespace().collect();
    let module = match words.last() {
        Some(m) if m.starts_with('[') && m.ends_with(']') => {
            let m = m[1..m.len() - 1].to_string();
            words.pop();
            Some(m)
        }
        _ => None,
    };
    // Callbacks are printed with %pS: `name+0xOFF/0xLEN`.
    let (name, offset) = words.pop()?.split_once('+')?;
    if !offset.starts_with("0x") || name.is_empty() {
        return None;
    }
    if words.last() == Some(&"PM:") {
        words.pop();
    }
    // What is left is `SUBSYSTEM... DEVICE:`; an initcall line (`initcall NAME returned`)
    // has no device.
    let device = words.pop()?.strip_suffix(':')?;
    if words.is_empty() || device.is_empty() {
        return None;
    }
    Some(DeviceCallback {
        t,
        kernel_end: kernel_ts,
        subsystem: words.join(" "),
        device: device.to_string(),
        callback: name.to_string(),
        module,
        ret,
        duration: usecs as f64 * 1e-6,
    })
}

/// The kernel time from the first restore callback's start to the last one's end, seconds:
/// the restore's wall time (callbacks of different devices run in parallel where the kernel
/// allows, so their sum can be more). `None` without printk times.
pub fn restore_span(calls: &[DeviceCallback]) -> Option<f64> {
    let mut span: Option<(f64, f64)> = None;
    for c in calls.iter().filter(|c| c.is_restore()) {
        let end = c.kernel_end?;
        let start = end - c.duration;
        span = Some(span.map_or((start, end), |(a, b)| (a.min(start), b.max(end))));
    }
    span.map(|(a, b)| b - a)
}

/// One device's restore: every restore callback it ran, summed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceRestore {
    /// `subsystem device`.
    pub who: String,
    /// Its callbacks, in order (`pci_pm_restore_noirq`, `pci_pm_restore`).
    pub callbacks: Vec<String>,
    /// Their time together, seconds.
    pub duration: f64,
    /// The first non-zero return value, if a callback failed.
    pub failed: Option<i64>,
}

/// The restore callbacks of `calls` by device, slowest first.
pub fn restore_by_device(calls: &[DeviceCallback]) -> Vec<DeviceRestore> {
    let mut out: Vec<DeviceRestore> = Vec::new();
    for c in calls.iter().filter(|c| c.is_restore()) {
        let who = c.who();
        let i = match out.iter().position(|d| d.who == who) {
            Some(i) => i,
            None => {
                out.push(DeviceRestore {
                    who,
                    callbacks: Vec::new(),
                    duration: 0.0,
                    failed: None,
                });
                out.len() - 1
            }
        };
        let d = &mut out[i];
        d.callbacks.push(c.callback.clone());
        d.duration += c.duration;
        if c.ret != 0 && d.failed.is_none() {
            d.failed = Some(c.ret);
        }
    }
    out.sort_by(|a, b| b.duration.total_cmp(&a.duration).then(a.who.cmp(&b.who)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lines_parse_and_other_lines_do_not() {
        let c = parse(
            1.5,
            Some(4.0),
            "virtio_blk virtio1: virtio_dev_restore+0x0/0x80 [virtio] returned 0 after 1234 usecs",
        )
        .unwrap();
        assert_eq!(c.kernel_end, Some(4.0));
        assert_eq!(c.subsystem, "virtio_blk");
        assert_eq!(c.device, "virtio1");
        assert_eq!(c.callback, "virtio_dev_restore");
        assert_eq!(c.module.as_deref(), Some("virtio"));
        assert_eq!(c.ret, 0);
        assert!((c.duration - 0.001234).abs() < 1e-12);
        assert_eq!(c.kind(), CallbackKind::Restore);

        let c = parse(
            0.0,
            None,
            "pci 0000:00:02.0: pci_pm_restore_noirq+0x0/0xd0 returned -5 after 17 usecs",
        )
        .unwrap();
        assert_eq!(
            (c.subsystem.as_str(), c.device.as_str()),
            ("pci", "0000:00:02.0")
        );
        assert_eq!((c.module, c.ret), (None, -5));
        // 6.1's form, with `PM: `, and a driver name of two words.
        let c = parse(
            0.0,
            None,
            "i8042 kbd 00:00: PM: pnp_bus_resume+0x0/0xa0 returned 0 after 202 usecs",
        )
        .unwrap();
        assert_eq!(
            (c.subsystem.as_str(), c.device.as_str()),
            ("i8042 kbd", "00:00")
        );
        assert_eq!(
            (c.callback.as_str(), c.kind()),
            ("pnp_bus_resume", CallbackKind::Resume)
        );
        assert!(c.is_restore());

        for other in [
            "initcall virtio_blk_init+0x0/0x72 returned 0 after 24113 usecs",
            "calling  virtio_blk_init+0x0/0x72 @ 1",
            "pci 0000:00:02.0: calling pci_pm_restore+0x0/0xe0 @ 1, parent: pci0000:00",
            "PM: restore of devices complete after 23.456 msecs",
            "snapboot: @restored clock stepped +0.000 s",
            "x y: not a symbol returned 0 after 5 usecs",
        ] {
            assert_eq!(parse(0.0, None, other), None, "{other}");
        }
    }

    #[test]
    fn callbacks_are_told_apart_by_their_names() {
        let kind = |name: &str| {
            parse(
                0.0,
                None,
                &format!("pci 0000:00:01.0: {name}+0x0/0x10 returned 0 after 1 usecs"),
            )
            .unwrap()
            .kind()
        };
        assert_eq!(kind("pci_pm_restore_noirq"), CallbackKind::Restore);
        assert_eq!(kind("pci_pm_freeze"), CallbackKind::Freeze);
        assert_eq!(kind("pci_pm_thaw_early"), CallbackKind::Thaw);
        assert_eq!(kind("pci_pm_poweroff"), CallbackKind::PowerOff);
        assert_eq!(kind("pci_pm_resume"), CallbackKind::Resume);
        assert_eq!(kind("pci_pm_complete"), CallbackKind::PrepareComplete);
        assert_eq!(kind("acpi_subsys_whatever"), CallbackKind::Other);
    }

    #[test]
    fn restores_are_summed_per_device_slowest_first() {
        let lines = [
            "pci 0000:00:02.0: pci_pm_restore_noirq+0x0/0xd0 returned 0 after 100 usecs",
            "pci 0000:00:03.0: pci_pm_restore_noirq+0x0/0xd0 returned 0 after 50 usecs",
            "pci 0000:00:02.0: pci_pm_freeze+0x0/0xd0 returned 0 after 9000 usecs",
            "pci 0000:00:02.0: pci_pm_restore+0x0/0xe0 returned 0 after 300 usecs",
            "pci 0000:00:03.0: pci_pm_restore+0x0/0xe0 returned -19 after 2000 usecs",
        ];
        let calls: Vec<_> = lines
            .iter()
            .enumerate()
            .filter_map(|(i, l)| parse(0.0, Some(1.0 + i as f64 * 0.01), l))
            .collect();
        let by = restore_by_device(&calls);
        assert_eq!(by.len(), 2);
        assert_eq!(by[0].who, "pci 0000:00:03.0");
        assert!((by[0].duration - 0.00205).abs() < 1e-12);
        assert_eq!(by[0].failed, Some(-19));
        assert_eq!(by[1].callbacks, ["pci_pm_restore_noirq", "pci_pm_restore"]);
        assert!(
            (by[1].duration - 0.0004).abs() < 1e-12,
            "freeze is not restore"
        );
        assert_eq!(by[1].failed, None);
        // From the first restore's start (1.0 s - 100 us) to the last one's end (1.04 s).
        let span = restore_span(&calls).unwrap();
        assert!((span - 0.0401).abs() < 1e-9, "{span}");
    }
}
