//! The markers the device prints on its console, `snapboot: @<name>[ <detail>]`: one enum
//! that the device formats and the host parses, so a marker renamed on one side cannot
//! silently stop being seen on the other. The boot scripts in `guest/` and the board's
//! `/init` print some of them too; a test in `board` checks every name they print is here.

use std::fmt;

/// What every marker line starts with (after a printk prefix, if any).
pub const MARKER_PREFIX: &str = "snapboot: @";

macro_rules! markers {
    ($($(#[$doc:meta])* $v:ident = $name:literal,)*) => {
        /// A console marker of the device.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Marker {
            $($(#[$doc])* $v,)*
        }

        impl Marker {
            /// Every marker.
            pub const ALL: &'static [Marker] = &[$(Marker::$v,)*];

            /// Its name on the console (after [`MARKER_PREFIX`]).
            pub fn name(self) -> &'static str {
                match self {
                    $(Marker::$v => $name,)*
                }
            }
        }
    };
}

markers! {
    /// The initramfs's init started.
    Init = "init",
    /// This boot's setup was observed and recorded for a later capture.
    BootSetup = "boot-setup",
    /// This boot's setup could not be recorded (a capture later in this boot will refuse).
    BootSetupUnrecorded = "boot-setup-unrecorded",
    /// The root filesystem is mounted.
    RootMounted = "root-mounted",
    /// The application is being started.
    AppStart = "app-start",
    /// The application is ready.
    Ready = "ready",
    /// A restore begins (detail: the store).
    ResumeStart = "resume-start",
    /// The restore waits for udev (initramfs-tools); detail: why.
    ResumeAfterUdev = "resume-after-udev",
    /// The image's binding was checked.
    ResumeBound = "resume-bound",
    /// Every page of the image is in the kernel's hands.
    ResumeLoaded = "resume-loaded",
    /// The load phase's throughput, stage by stage (detail:
    /// `bootstatus::Throughput::line`).
    Throughput = "throughput",
    /// A plain sequential read of the store's image extent, the medium's baseline (detail:
    /// `bootstatus::Throughput::line` with only the read fields); the board then powers off.
    MediumBaseline = "medium-baseline",
    /// One image of the store was refused (detail: name and reason); the next is tried.
    ImageRefused = "image-refused",
    /// The system runs again from the image.
    Restored = "restored",
    /// The restored system's target could not be started.
    RestoredTargetFailed = "restored-target-failed",
    /// The outcome's systemd target (cold, fallback) could not be started.
    OutcomeTargetFailed = "outcome-target-failed",
    /// The images no longer fit this system (an update): the ready point captures a new
    /// one and goes on (detail: the image).
    Recapture = "recapture",
    /// This boot's outcome, as `/run/snapboot/status` records it (detail: the outcome word
    /// and, for a restore, the image and its unconfirmed restores).
    Status = "status",
    /// The restore was confirmed: the crash-loop guard's count of its image starts again
    /// (detail: the image and what proved it).
    Confirmed = "confirmed",
    /// The restored system did not prove itself alive: the restore stays unconfirmed and
    /// counts toward the crash-loop guard (detail: why).
    ConfirmFailed = "confirm-failed",
    /// What the hardware watchdog does across a restore: armed before it, fed by the
    /// restored system until the confirmation, then stopped (detail: which, or why not).
    Watchdog = "watchdog",
    /// A restore hook failed.
    HookFailed = "hook-failed",
    /// Nothing was restored; the cold boot continues (detail: why).
    Fallback = "fallback",
    /// A restore kernel hands the cold boot to the stock kernel.
    Handover = "handover",
    /// This cold boot was handed over by a restore kernel.
    HandedOver = "handed-over",
    /// The hand-over failed.
    HandoverFailed = "handover-failed",
    /// Swap areas were turned off before a capture.
    Swapoff = "swapoff",
    /// FAT-family filesystems were remounted read-only for a capture, or read-write after
    /// it (detail: which, or why not).
    Remount = "remount",
    /// A lazy image's swap region was filled.
    Lazy = "lazy",
    /// What the working-set profile did.
    Profile = "profile",
    /// How much of the profile is resident after a restore.
    ProfileResident = "profile-resident",
    /// Per-process faults after a restore.
    Faults = "faults",
    /// Device PM timing for every restore.
    PmTimes = "pm-times",
    /// A capture begins.
    CaptureStart = "capture-start",
    /// The image is committed.
    CaptureDone = "capture-done",
    /// A capture failed (detail: why).
    CaptureFailed = "capture-failed",
    /// The board powers off.
    Poweroff = "poweroff",
    /// Deferred memory is online.
    Memory = "memory",
    /// Deferred memory did not all come online.
    MemoryMissing = "memory-missing",
}

impl Marker {
    /// The marker named `name`.
    pub fn from_name(name: &str) -> Option<Marker> {
        Self::ALL.iter().copied().find(|m| m.name() == name)
    }

    /// Its console line, e.g. `Marker::Fallback.line(Some("no image"))` gives
    /// `snapboot: @fallback no image`; an empty detail is left out.
    pub fn line(self, detail: Option<&str>) -> String {
        match detail.map(str::trim).filter(|d| !d.is_empty()) {
            Some(d) => format!("{MARKER_PREFIX}{} {d}", self.name()),
            None => format!("{MARKER_PREFIX}{}", self.name()),
        }
    }

    /// The marker in one console line (a printk prefix before it is fine) and its detail;
    /// `None` for an ordinary line or an unknown name.
    pub fn parse(line: &str) -> Option<(Marker, Option<&str>)> {
        let pos = line.find(MARKER_PREFIX)?;
        let rest = line[pos + MARKER_PREFIX.len()..].trim_end();
        let (name, detail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let detail = Some(detail.trim()).filter(|d| !d.is_empty());
        Marker::from_name(name).map(|m| (m, detail))
    }

    /// Whether `line` carries this marker.
    pub fn in_line(self, line: &str) -> bool {
        Marker::parse(line).is_some_and(|(m, _)| m == self)
    }

    /// Every `@name` a text (a script, a template) prints after [`MARKER_PREFIX`], for
    /// checking that each is a known marker.
    pub fn names_in(text: &str) -> Vec<&str> {
        text.match_indices(MARKER_PREFIX)
            .map(|(i, _)| {
                let rest = &text[i + MARKER_PREFIX.len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect()
    }
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_round_trips_through_its_line() {
        let mut names: Vec<&str> = Marker::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Marker::ALL.len(), "two markers share a name");
        for &m in Marker::ALL {
            assert_eq!(Marker::parse(&m.line(None)), Some((m, None)));
            let line = format!("[    1.5] {}", m.line(Some("  a detail ")));
            assert_eq!(Marker::parse(&line), Some((m, Some("a detail"))));
            assert!(m.in_line(&line));
        }
    }

    #[test]
    fn unknown_names_and_ordinary_lines_are_not_markers() {
        assert_eq!(Marker::parse("snapboot: @bogus detail"), None);
        assert_eq!(Marker::parse("snapboot: store low on idle space"), None);
        assert!(!Marker::Ready.in_line("snapboot: @ready-ish"));
        assert!(!Marker::Restored.in_line("snapboot: @fallback restored nothing"));
        assert_eq!(
            Marker::names_in("echo \"snapboot: @init\"\necho 'snapboot: @root-mounted $x'"),
            ["init", "root-mounted"]
        );
    }
}
