//! Hardware watchdogs across a restore: what `/sys/class/watchdog` says about each (the
//! capture refuses one that would fire while the image is written), and the watchdog
//! snapboot arms before it hands the machine to the image and feeds on the restored system
//! until the restore is confirmed ([`crate::sys::watchdog`] does the ioctls).

use std::path::Path;

pub use crate::sys::watchdog::{Watchdog, WATCHDOG0};

/// Where the kernel lists its watchdogs.
pub const SYSFS: &str = "/sys/class/watchdog";

/// One watchdog as sysfs shows it (with `CONFIG_WATCHDOG_SYSFS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchdogState {
    /// `watchdog0`, ...
    pub name: String,
    /// The driver's name for it (`i6300ESB timer`, `imx2+ watchdog`).
    pub identity: String,
    /// Whether it is counting down (`state` is `active`).
    pub active: bool,
    /// Its timeout in seconds, when sysfs says.
    pub timeout: Option<u32>,
}

/// Every watchdog under `sysfs` (normally [`SYSFS`]), by name; none when the directory is
/// missing (no watchdog driver, or no sysfs attributes).
pub fn watchdogs(sysfs: &Path) -> Vec<WatchdogState> {
    let Ok(dir) = std::fs::read_dir(sysfs) else {
        return Vec::new();
    };
    let mut found: Vec<WatchdogState> = dir
        .flatten()
        .map(|e| {
            let p = e.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).unwrap_or_default();
            WatchdogState {
                name: e.file_name().to_string_lossy().into_owned(),
                identity: read("identity").trim().to_string(),
                active: read("state").trim() == "active",
                timeout: read("timeout").trim().parse().ok(),
            }
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// The shortest timeout a watchdog already running at a capture may have: the capture
/// freezes every other process (systemd, the usual feeder) while it writes the image, which
/// takes seconds to minutes with the store's speed and the image's size.
pub const CAPTURE_MIN_TIMEOUT: u32 = 120;

/// Why a capture must not start with `w` running: it would reset the machine while the image
/// is written, because nothing feeds it then. `None` when it is stopped, or its timeout is at
/// least [`CAPTURE_MIN_TIMEOUT`].
pub fn fires_during_capture(w: &WatchdogState) -> Option<String> {
    if !w.active {
        return None;
    }
    match w.timeout {
        Some(t) if t >= CAPTURE_MIN_TIMEOUT => None,
        t => Some(format!(
            "{} ({}) is running with a timeout of {}: nothing feeds it while every process is \
             frozen for the capture, and it would reset the machine before the image is \
             written; give it at least {CAPTURE_MIN_TIMEOUT} s (systemd: RuntimeWatchdogSec=) \
             or stop it for the capture boot (snapboot.watchdog= arms one across each restore)",
            w.name,
            if w.identity.is_empty() {
                "unknown driver"
            } else {
                &w.identity
            },
            t.map_or("unknown length".to_string(), |t| format!("{t} s")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_is_read_per_watchdog_and_only_a_short_running_one_stops_a_capture() {
        let d = tempfile::tempdir().unwrap();
        assert!(watchdogs(&d.path().join("none")).is_empty());
        for (name, identity, state, timeout) in [
            ("watchdog1", "imx2+ watchdog", "inactive", "60"),
            ("watchdog0", "i6300ESB timer", "active", "30"),
        ] {
            let w = d.path().join(name);
            std::fs::create_dir(&w).unwrap();
            std::fs::write(w.join("identity"), format!("{identity}\n")).unwrap();
            std::fs::write(w.join("state"), format!("{state}\n")).unwrap();
            std::fs::write(w.join("timeout"), format!("{timeout}\n")).unwrap();
        }
        let found = watchdogs(d.path());
        assert_eq!(
            found,
            [
                WatchdogState {
                    name: "watchdog0".into(),
                    identity: "i6300ESB timer".into(),
                    active: true,
                    timeout: Some(30),
                },
                WatchdogState {
                    name: "watchdog1".into(),
                    identity: "imx2+ watchdog".into(),
                    active: false,
                    timeout: Some(60),
                },
            ]
        );
        let why = fires_during_capture(&found[0]).unwrap();
        assert!(
            why.starts_with(
                "watchdog0 (i6300ESB timer) is running with a timeout of 30 s: nothing feeds it"
            ),
            "{why}"
        );
        assert_eq!(fires_during_capture(&found[1]), None);
        let long = WatchdogState {
            timeout: Some(CAPTURE_MIN_TIMEOUT),
            ..found[0].clone()
        };
        assert_eq!(fires_during_capture(&long), None);
        let unknown = WatchdogState {
            timeout: None,
            identity: String::new(),
            ..found[0].clone()
        };
        assert!(fires_during_capture(&unknown)
            .unwrap()
            .contains("(unknown driver) is running with a timeout of unknown length"));
    }
}
