//! Boot milestones and the [`Timeline`] that holds them. Milestones are recognised in console
//! lines by [`detect`]: kernel messages (`Linux version`, `Kernel panic - not syncing`,
//! `reboot: Power down`), the markers snapboot's own guest code prints, which share one
//! definition here ([`MARKER_PREFIX`], [`marker`]), and the restorer's lines
//! ([`RestorerLine`]). Host-side events such as probes are added
//! by the runner with [`Timeline::push_event`], and [`Timeline::finalize`] infers when the
//! kernel started on the host time axis, then derives the TTI and the [`Outcome`].

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::marker::{Marker, MARKER_PREFIX};
use crate::recorder::ConsoleLine;
use crate::restorer::RestorerLine;

/// An error and every source under it, joined with ": " (the one rule: `bootstatus`).
pub use bootstatus::chain as error_chain;

/// A point of interest during boot. Declaration order is the expected order of a cold boot
/// (used to break ties between milestones at the same time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MilestoneKind {
    /// The boot loader hands over to the entry it boots: GRUB's `grub: booting ENTRY` line,
    /// which the UEFI PC's grub.cfg prints (detail = the entry).
    LoaderBooting,
    /// The restorer started: the firmware entered it in place of a kernel
    /// (`snapboot-restorer: started`; [`RestorerLine`]).
    RestorerStart,
    /// The restorer checked the image; placing its pages begins (`image checked`).
    RestorerChecked,
    /// The restorer placed every page and enters the image kernel (`entering the image`).
    RestorerEntered,
    /// The restorer refused the image (detail = the reason).
    RestorerRefused,
    /// After refusing, the restorer boots the stock kernel cold (`cold boot:`).
    RestorerColdBoot,
    /// The kernel started executing; inferred from printk timestamps by [`Timeline::finalize`].
    KernelStart,
    /// The kernel printed its `Linux version` banner.
    LinuxVersion,
    /// snapboot's init started (marker `init`).
    InitStart,
    /// The real root file system is mounted (marker `root-mounted`).
    RootMounted,
    /// The application is being started (marker `app-start`).
    AppStart,
    /// The application reported itself ready (marker `ready`).
    AppReady,
    /// The host sent its readiness probe (runner event).
    ProbeSent,
    /// The probe was answered (runner event).
    ProbeAnswered,
    /// Resume from a snapshot began (marker `resume-start`).
    ResumeStart,
    /// The snapshot image was loaded into memory (marker `resume-loaded`).
    ResumeLoaded,
    /// The snapshotted system is running again (marker `restored`).
    Restored,
    /// Resume was abandoned for a cold boot (marker `fallback`, detail = reason).
    ResumeFallback,
    /// One image of a flash store was refused and the next is tried (marker
    /// `image-refused`, detail = name and reason).
    ImageRefused,
    /// Snapshot capture began (marker `capture-start`).
    CaptureStart,
    /// Snapshot capture finished (marker `capture-done`).
    CaptureDone,
    /// `Kernel panic - not syncing` (detail = the panic message).
    KernelPanic,
    /// The guest is powering off (marker `poweroff` or the kernel's `reboot: Power down`).
    PowerOff,
    /// Deferred memory is all online (marker `memory`).
    MemoryOnline,
}

impl MilestoneKind {
    /// Every kind, in declaration order.
    pub const ALL: [MilestoneKind; 24] = [
        Self::LoaderBooting,
        Self::RestorerStart,
        Self::RestorerChecked,
        Self::RestorerEntered,
        Self::RestorerRefused,
        Self::RestorerColdBoot,
        Self::KernelStart,
        Self::LinuxVersion,
        Self::InitStart,
        Self::RootMounted,
        Self::AppStart,
        Self::AppReady,
        Self::ProbeSent,
        Self::ProbeAnswered,
        Self::ResumeStart,
        Self::ResumeLoaded,
        Self::Restored,
        Self::ResumeFallback,
        Self::ImageRefused,
        Self::CaptureStart,
        Self::CaptureDone,
        Self::KernelPanic,
        Self::PowerOff,
        Self::MemoryOnline,
    ];

    /// The snake_case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LoaderBooting => "loader_booting",
            Self::RestorerStart => "restorer_start",
            Self::RestorerChecked => "restorer_checked",
            Self::RestorerEntered => "restorer_entered",
            Self::RestorerRefused => "restorer_refused",
            Self::RestorerColdBoot => "restorer_cold_boot",
            Self::KernelStart => "kernel_start",
            Self::LinuxVersion => "linux_version",
            Self::InitStart => "init_start",
            Self::RootMounted => "root_mounted",
            Self::AppStart => "app_start",
            Self::AppReady => "app_ready",
            Self::ProbeSent => "probe_sent",
            Self::ProbeAnswered => "probe_answered",
            Self::ResumeStart => "resume_start",
            Self::ResumeLoaded => "resume_loaded",
            Self::Restored => "restored",
            Self::ResumeFallback => "resume_fallback",
            Self::ImageRefused => "image_refused",
            Self::CaptureStart => "capture_start",
            Self::CaptureDone => "capture_done",
            Self::KernelPanic => "kernel_panic",
            Self::PowerOff => "power_off",
            Self::MemoryOnline => "memory_online",
        }
    }

    /// The kind with snake_case name `name` (the inverse of [`as_str`](Self::as_str)).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The device marker that announces this kind, if the device reports it.
    pub fn marker(self) -> Option<Marker> {
        Some(match self {
            Self::InitStart => Marker::Init,
            Self::RootMounted => Marker::RootMounted,
            Self::AppStart => Marker::AppStart,
            Self::AppReady => Marker::Ready,
            Self::ResumeStart => Marker::ResumeStart,
            Self::ResumeLoaded => Marker::ResumeLoaded,
            Self::Restored => Marker::Restored,
            Self::ResumeFallback => Marker::Fallback,
            Self::ImageRefused => Marker::ImageRefused,
            Self::CaptureStart => Marker::CaptureStart,
            Self::CaptureDone => Marker::CaptureDone,
            Self::PowerOff => Marker::Poweroff,
            Self::MemoryOnline => Marker::Memory,
            _ => return None,
        })
    }

    /// The kind a device marker announces, if it is a milestone.
    pub fn from_marker(m: Marker) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.marker() == Some(m))
    }

    /// The kind a restorer line announces (every one is a milestone; an image refused is
    /// the same milestone as resume's `@image-refused`).
    pub fn from_restorer(l: RestorerLine) -> Self {
        match l {
            RestorerLine::Started => Self::RestorerStart,
            RestorerLine::ImageRefused => Self::ImageRefused,
            RestorerLine::ImageChecked => Self::RestorerChecked,
            RestorerLine::Entering => Self::RestorerEntered,
            RestorerLine::Refused => Self::RestorerRefused,
            RestorerLine::ColdBoot => Self::RestorerColdBoot,
        }
    }
}

impl fmt::Display for MilestoneKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Recognises a milestone in one console line (printk prefix or not). Returns its kind and
/// detail, or `None` for an ordinary line.
pub fn detect(line: &str) -> Option<(MilestoneKind, Option<String>)> {
    let nonempty = |s: &str| Some(s.trim()).filter(|s| !s.is_empty()).map(str::to_string);
    if let Some((l, detail)) = RestorerLine::parse(line) {
        return Some((MilestoneKind::from_restorer(l), detail.map(str::to_string)));
    }
    if line.contains(MARKER_PREFIX) {
        return Marker::parse(line).and_then(|(m, detail)| {
            MilestoneKind::from_marker(m).map(|k| (k, detail.map(str::to_string)))
        });
    }
    const LOADER: &str = "grub: booting ";
    if let Some(entry) = line.trim_start().strip_prefix(LOADER) {
        return Some((MilestoneKind::LoaderBooting, nonempty(entry)));
    }
    const PANIC: &str = "Kernel panic - not syncing";
    if let Some(pos) = line.find(PANIC) {
        let rest = line[pos + PANIC.len()..].trim_start_matches(':');
        let rest = rest.trim().trim_end_matches("]---");
        return Some((MilestoneKind::KernelPanic, nonempty(rest)));
    }
    const VERSION: &str = "Linux version ";
    if let Some(pos) = line.find(VERSION) {
        let rest = &line[pos + VERSION.len()..];
        let version = rest.split(" (").next().unwrap_or(rest);
        return Some((MilestoneKind::LinuxVersion, nonempty(version)));
    }
    if line.contains("reboot: Power down") {
        return Some((MilestoneKind::PowerOff, None));
    }
    None
}

/// One milestone on the host time axis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Milestone {
    /// What happened.
    pub kind: MilestoneKind,
    /// Host time, seconds since QEMU started.
    pub t: f64,
    /// Extra information: kernel version, fallback reason, panic message, ...
    #[serde(default)]
    pub detail: Option<String>,
}

/// How a boot ended. JSON: an object tagged by `"kind"` (snake_case), with a `reason` string
/// for the failure variants, e.g. `{"kind":"panic","reason":"Attempted to kill init!"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing conclusive (yet): no ready marker, probe answer, panic or power-off.
    #[default]
    Incomplete,
    /// The application reported ready (no probe answer recorded).
    Ready,
    /// The host's probe was answered.
    Answered,
    /// The guest powered off cleanly (e.g. after a snapshot capture).
    PoweredOff,
    /// The kernel panicked.
    Panic {
        /// The panic message.
        reason: String,
    },
    /// The runner gave up waiting.
    Timeout {
        /// What was being waited for.
        reason: String,
    },
    /// QEMU exited before the boot concluded.
    Exited {
        /// Exit status or other explanation.
        reason: String,
    },
}

impl Outcome {
    /// Whether the boot reached its goal (ready, answered or a clean power-off).
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Ready | Self::Answered | Self::PoweredOff)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete => f.write_str("incomplete"),
            Self::Ready => f.write_str("ready"),
            Self::Answered => f.write_str("answered"),
            Self::PoweredOff => f.write_str("powered off"),
            Self::Panic { reason } => write!(f, "kernel panic: {reason}"),
            Self::Timeout { reason } => write!(f, "timeout: {reason}"),
            Self::Exited { reason } => write!(f, "exited: {reason}"),
        }
    }
}

/// Printk timestamps may step back this much (seconds) between CPUs before a restart of the
/// kernel clock is assumed when inferring [`MilestoneKind::KernelStart`].
const CLOCK_JITTER: f64 = 0.1;

/// The power-on timeline of one boot: THE JSON contract between the runner, the CLI and the
/// benchmarks. All times are host seconds since QEMU was started.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Timeline {
    /// What was booted or where the log came from (board name, file name, ...).
    pub source: String,
    /// Every console line, in arrival order.
    #[serde(default)]
    pub lines: Vec<ConsoleLine>,
    /// Milestones, at most one per kind (the first occurrence), sorted by time once finalized.
    #[serde(default)]
    pub milestones: Vec<Milestone>,
    /// Time to interactive: the first probe answer, else the app's ready marker, else the
    /// restore marker; `None` if none was reached or the kernel panicked.
    #[serde(default)]
    pub tti: Option<f64>,
    /// How the boot ended.
    #[serde(default)]
    pub outcome: Outcome,
}

impl Timeline {
    /// An empty timeline for `source`.
    pub fn new(source: impl Into<String>) -> Self {
        Self {
            source: source.into(),
            ..Self::default()
        }
    }

    /// Appends a console line, recording the milestone it announces, if any.
    pub fn push_line(&mut self, line: ConsoleLine) {
        if let Some((kind, detail)) = detect(&line.text) {
            self.push_event(kind, line.t, detail);
        }
        self.lines.push(line);
    }

    /// Appends console lines in order (see [`push_line`](Self::push_line)).
    pub fn push_lines(&mut self, lines: impl IntoIterator<Item = ConsoleLine>) {
        for line in lines {
            self.push_line(line);
        }
    }

    /// Records a milestone observed outside the console (e.g. a probe) at host time `t`.
    /// Ignored if a milestone of this kind is already recorded: the first one counts.
    pub fn push_event(&mut self, kind: MilestoneKind, t: f64, detail: Option<String>) {
        if self.milestone(kind).is_none() {
            self.milestones.push(Milestone { kind, t, detail });
        }
    }

    /// Sets the outcome (e.g. [`Outcome::Timeout`] from the runner).
    pub fn set_outcome(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }

    /// The recorded milestone of `kind`.
    pub fn milestone(&self, kind: MilestoneKind) -> Option<&Milestone> {
        self.milestones.iter().find(|m| m.kind == kind)
    }

    /// The time of the first milestone of `kind`.
    pub fn first(&self, kind: MilestoneKind) -> Option<f64> {
        self.milestone(kind).map(|m| m.t)
    }

    /// The latest time seen in lines or milestones.
    pub fn end_time(&self) -> Option<f64> {
        let lines = self.lines.iter().map(|l| l.t);
        let events = self.milestones.iter().map(|m| m.t);
        lines.chain(events).reduce(f64::max)
    }

    /// Estimates when the kernel started, on the host axis. Early printk lines are buffered
    /// until the serial console registers, so each line only bounds the start from above:
    /// start ≤ `line.t - kernel_ts`; the minimum over the lines of the first kernel run
    /// (before a restored image takes over or the kernel clock restarts) is the estimate,
    /// clamped to ≥ 0. `None` without printk timestamps.
    pub fn infer_kernel_start(&self) -> Option<f64> {
        // Everything after resume starts (or the restorer enters the image) may come from
        // the restored kernel, whose clock counts from the captured boot.
        let cutoff = [
            MilestoneKind::RestorerEntered,
            MilestoneKind::ResumeStart,
            MilestoneKind::ResumeLoaded,
            MilestoneKind::Restored,
        ]
        .into_iter()
        .filter_map(|k| self.first(k))
        .fold(f64::INFINITY, f64::min);
        let mut prev = f64::NEG_INFINITY;
        let mut best: Option<f64> = None;
        for line in &self.lines {
            if line.t >= cutoff {
                break;
            }
            let Some(kts) = line.kernel_ts else { continue };
            if kts + CLOCK_JITTER < prev {
                break;
            }
            prev = prev.max(kts);
            let est = line.t - kts;
            if est < 0.0 {
                // A kernel cannot start before power-on: this is another kernel's clock.
                continue;
            }
            best = Some(best.map_or(est, |b| b.min(est)));
        }
        best
    }

    /// Completes the timeline once recording is over: infers [`MilestoneKind::KernelStart`]
    /// (unless one is recorded), sorts the milestones by time, fills in [`tti`](Self::tti)
    /// if unset and derives the [`outcome`](Self::outcome): a kernel panic always wins; an
    /// [`Outcome::Incomplete`] one becomes answered, ready or powered off as the milestones
    /// show. Calling it again is harmless.
    pub fn finalize(&mut self) {
        if self.milestone(MilestoneKind::KernelStart).is_none() {
            if let Some(t) = self.infer_kernel_start() {
                let detail = Some("inferred from printk timestamps".to_string());
                self.push_event(MilestoneKind::KernelStart, t, detail);
            }
        }
        self.milestones
            .sort_by(|a, b| a.t.total_cmp(&b.t).then(a.kind.cmp(&b.kind)));
        if let Some(panic) = self.milestone(MilestoneKind::KernelPanic) {
            let reason = panic.detail.clone().unwrap_or_default();
            self.outcome = Outcome::Panic { reason };
            self.tti = None;
            return;
        }
        if self.tti.is_none() {
            self.tti = [
                MilestoneKind::ProbeAnswered,
                MilestoneKind::AppReady,
                MilestoneKind::Restored,
            ]
            .into_iter()
            .find_map(|k| self.first(k));
        }
        if self.outcome == Outcome::Incomplete {
            let has = |k| self.milestone(k).is_some();
            self.outcome = if has(MilestoneKind::ProbeAnswered) {
                Outcome::Answered
            } else if has(MilestoneKind::AppReady) || has(MilestoneKind::Restored) {
                Outcome::Ready
            } else if has(MilestoneKind::PowerOff) {
                Outcome::PoweredOff
            } else {
                Outcome::Incomplete
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MilestoneKind as K;

    const VERSION_LINE: &str = "[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-10-01)";

    #[test]
    fn an_error_chain_names_each_cause_once_in_order() {
        #[derive(Debug, thiserror::Error)]
        #[error("reading the store")]
        struct Outer(#[source] std::io::Error);
        let e = Outer(std::io::Error::other("disk gone"));
        assert_eq!(error_chain(&e), "reading the store: disk gone");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }

    #[test]
    fn marker_format_and_detect_agree() {
        for kind in MilestoneKind::ALL {
            if let Some(m) = kind.marker() {
                assert_eq!(detect(&m.line(None)), Some((kind, None)), "{m}");
                let with = m.line(Some("why not"));
                assert_eq!(detect(&with), Some((kind, Some("why not".into()))));
            }
        }
        assert_eq!(
            Marker::Fallback.line(Some(" no image ")),
            "snapboot: @fallback no image"
        );
        assert_eq!(detect("snapboot: @bogus"), None);
        assert_eq!(
            detect("snapboot: @lazy 10 pages"),
            None,
            "a marker, no milestone"
        );
    }

    /// The image kernel's lines after the restorer enters it carry the captured boot's
    /// clock: no kernel start is inferred from them, even where that clock is behind the
    /// host's.
    #[test]
    fn no_kernel_start_is_inferred_from_the_image_kernel_the_restorer_entered() {
        let mut tl = Timeline::new("restorer");
        tl.push_lines([
            ConsoleLine::new(4.0, "snapboot-restorer: started"),
            ConsoleLine::new(4.5, "snapboot-restorer: image checked: 10 pages (10 data)"),
            ConsoleLine::new(
                5.0,
                "snapboot-restorer: 0 pages deferred; entering the image at 0x1",
            ),
            ConsoleLine::new(5.2, "[    3.938221] Disabling non-boot CPUs ..."),
            ConsoleLine::new(5.3, "snapboot: @restored"),
        ]);
        tl.finalize();
        assert_eq!(tl.first(K::KernelStart), None);
        assert_eq!(tl.first(K::RestorerEntered), Some(5.0));
        assert_eq!(
            tl.milestone(K::RestorerChecked)
                .and_then(|m| m.detail.as_deref()),
            Some("image checked: 10 pages (10 data)")
        );
        assert_eq!(tl.outcome, Outcome::Ready);
    }

    #[test]
    fn detect_markers_behind_printk_prefix() {
        assert_eq!(
            detect("[    1.600000] snapboot: @root-mounted"),
            Some((K::RootMounted, None))
        );
        assert_eq!(
            detect("<5>[    1.6] snapboot: @fallback image checksum mismatch"),
            Some((K::ResumeFallback, Some("image checksum mismatch".into())))
        );
    }

    #[test]
    fn detect_kernel_lines() {
        assert_eq!(
            detect(VERSION_LINE),
            Some((K::LinuxVersion, Some("6.1.0-56-amd64".into())))
        );
        let panic =
            "[    2.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100";
        assert_eq!(
            detect(panic),
            Some((
                K::KernelPanic,
                Some("Attempted to kill init! exitcode=0x00000100".into())
            ))
        );
        let end =
            "[    2.2] ---[ end Kernel panic - not syncing: VFS: Unable to mount root fs ]---";
        assert_eq!(
            detect(end),
            Some((K::KernelPanic, Some("VFS: Unable to mount root fs".into())))
        );
        assert_eq!(
            detect("[    3.0] reboot: Power down"),
            Some((K::PowerOff, None))
        );
        assert_eq!(detect("[    1.523339] Run /init as init process"), None);
    }

    #[test]
    fn names_roundtrip() {
        for kind in MilestoneKind::ALL {
            assert_eq!(MilestoneKind::from_name(kind.as_str()), Some(kind));
            let json = serde_json::to_string(&kind).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }

    fn cold_boot() -> Timeline {
        let mut tl = Timeline::new("test");
        tl.push_lines([
            ConsoleLine::new(0.05, "SeaBIOS (version 1.16.2-debian-1.16.2-1)"),
            ConsoleLine::new(0.90, VERSION_LINE),
            ConsoleLine::new(0.91, "[    0.004000] Command line: console=ttyS0"),
            ConsoleLine::new(1.40, "[    0.700000] printk: console [ttyS0] enabled"),
            ConsoleLine::new(1.45, "[    0.745000] Freeing unused kernel image memory"),
            ConsoleLine::new(2.23, "[    1.523339] Run /init as init process"),
            ConsoleLine::new(2.25, "snapboot: @init"),
            ConsoleLine::new(2.60, "[    1.900000] snapboot: @root-mounted"),
            ConsoleLine::new(2.70, "snapboot: @app-start /usr/bin/app"),
            ConsoleLine::new(3.10, "snapboot: @ready"),
        ]);
        tl.push_event(K::ProbeSent, 3.2, None);
        tl.push_event(K::ProbeAnswered, 3.25, Some("200 OK".into()));
        tl
    }

    #[test]
    fn finalize_infers_kernel_start_and_outcome() {
        let mut tl = cold_boot();
        tl.finalize();
        let ks = tl.first(K::KernelStart).unwrap_or(f64::NAN);
        assert!((ks - 0.70).abs() < 1e-9, "{ks}");
        assert_eq!(tl.milestones[0].kind, K::KernelStart);
        assert_eq!(tl.outcome, Outcome::Answered);
        assert_eq!(tl.tti, Some(3.25));
        assert_eq!(tl.first(K::AppStart), Some(2.70));
        let before = tl.clone();
        tl.finalize();
        assert_eq!(tl, before);
        assert_eq!(tl.end_time(), Some(3.25));
    }

    #[test]
    fn first_occurrence_wins() {
        let mut tl = Timeline::new("x");
        tl.push_event(K::ProbeSent, 1.0, None);
        tl.push_event(K::ProbeSent, 2.0, None);
        assert_eq!(tl.first(K::ProbeSent), Some(1.0));
        assert_eq!(tl.milestones.len(), 1);
    }

    #[test]
    fn panic_outcome_wins() {
        let mut tl = Timeline::new("x");
        tl.push_line(ConsoleLine::new(1.0, "[    0.5] Linux version 6.1.0 (x)"));
        tl.push_line(ConsoleLine::new(
            2.6,
            "[    2.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
        ));
        tl.set_outcome(Outcome::Exited {
            reason: "status 0".into(),
        });
        tl.finalize();
        assert_eq!(
            tl.outcome,
            Outcome::Panic {
                reason: "Attempted to kill init! exitcode=0x00000100".into()
            }
        );
        assert_eq!(tl.tti, None);
        assert_eq!(tl.first(K::KernelStart), Some(0.5));
        assert!(!tl.outcome.is_success());
    }

    #[test]
    fn kernel_start_ignores_restored_kernel_clock() {
        let mut tl = Timeline::new("resume");
        tl.push_lines([
            ConsoleLine::new(0.75, "[    0.250000] boot kernel"),
            ConsoleLine::new(1.0, "snapboot: @resume-start"),
            ConsoleLine::new(1.3, "snapboot: @resume-loaded"),
            // The restored kernel's clock continues from capture time.
            ConsoleLine::new(1.35, "[   42.000000] PM: restore of devices complete"),
            ConsoleLine::new(1.4, "snapboot: @restored"),
        ]);
        tl.finalize();
        assert_eq!(tl.first(K::KernelStart), Some(0.5));
        assert_eq!(tl.outcome, Outcome::Ready);
        assert_eq!(tl.tti, Some(1.4));

        let mut rebooted = Timeline::new("reboot");
        rebooted.push_lines([
            ConsoleLine::new(2.0, "[    1.500000] first kernel"),
            ConsoleLine::new(3.0, "[    0.000000] second kernel"),
        ]);
        rebooted.finalize();
        assert_eq!(rebooted.first(K::KernelStart), Some(0.5));
    }

    #[test]
    fn outcome_json_shape() {
        let o = Outcome::Timeout {
            reason: "no ready marker".into(),
        };
        let json = serde_json::to_string(&o).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"timeout","reason":"no ready marker"}"#);
        let ready: Outcome = serde_json::from_str(r#"{"kind":"ready"}"#).unwrap_or_default();
        assert_eq!(ready, Outcome::Ready);
        assert_eq!(o.to_string(), "timeout: no ready marker");
    }

    #[test]
    fn kernel_start_ignores_a_restored_kernels_clock() {
        let mut tl = Timeline::new("kernel-native resume");
        tl.push_line(ConsoleLine::new(0.40, "[    0.000000] Linux version 6.1.0"));
        tl.push_line(ConsoleLine::new(0.45, "[    0.010000] Command line: x"));
        tl.push_line(ConsoleLine::new(
            2.10,
            "[    1.900000] Run /init as init process",
        ));
        // No resume marker recorded yet: the restored kernel's clock reads ~29 s.
        tl.push_line(ConsoleLine::new(4.00, "[   29.447606] PM: Image created"));
        let start = tl.infer_kernel_start().unwrap();
        assert!((start - 0.2).abs() < 1e-9, "{start}");
    }
}
