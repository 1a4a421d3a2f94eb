//! What a timeline says at a glance: the boot split into [`Phases`] between milestones, a
//! sanity check that the cold-boot milestones came in the expected order
//! ([`Timeline::check_order`]), and a short human-readable report
//! ([`Timeline::summary_text`]).

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use thiserror::Error;

use crate::timeline::{MilestoneKind, Timeline};

/// The order cold-boot milestones must appear in (missing ones are skipped).
pub const EXPECTED_ORDER: [MilestoneKind; 8] = [
    MilestoneKind::KernelStart,
    MilestoneKind::LinuxVersion,
    MilestoneKind::InitStart,
    MilestoneKind::RootMounted,
    MilestoneKind::AppStart,
    MilestoneKind::AppReady,
    MilestoneKind::ProbeSent,
    MilestoneKind::ProbeAnswered,
];

/// Why a timeline's milestones are implausible.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum OrderError {
    /// `first` should come no later than `second`, but it was recorded after it.
    #[error("milestones out of order: {first} at +{first_t:.6} s comes after {second} at +{second_t:.6} s")]
    OutOfOrder {
        /// The milestone expected earlier.
        first: MilestoneKind,
        /// Its time.
        first_t: f64,
        /// The milestone expected later.
        second: MilestoneKind,
        /// Its time.
        second_t: f64,
    },
}

/// Durations (seconds) of the boot's phases; `None` when a bounding milestone is missing.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Phases {
    /// Power-on (QEMU start, t = 0) to the first program the firmware starts: the boot
    /// loader's hand-over when one reports it (GRUB on the UEFI PC), else the kernel, or the
    /// restorer when it runs in place of one.
    pub firmware: Option<f64>,
    /// The boot loader: its hand-over line to the kernel or the restorer starting (GRUB
    /// reading the kernel and initramfs, or loading the EFI restorer).
    pub loader: Option<f64>,
    /// The restorer: started to the image checked (reading and checking the image).
    pub image_check: Option<f64>,
    /// The restorer: image checked to entering the image (every page put in place).
    pub page_placing: Option<f64>,
    /// The restorer entering the image to the snapshotted system restored (the image
    /// kernel's own resume: its devices' restore callbacks).
    pub image_resume: Option<f64>,
    /// The restorer refused the image to the stock kernel starting cold.
    pub cold_fallback: Option<f64>,
    /// Kernel start to snapboot's init.
    pub kernel: Option<f64>,
    /// Init start to the root file system mounted (initramfs work).
    pub root_mount: Option<f64>,
    /// Root mounted (else app start) to the app's ready marker.
    pub app_start: Option<f64>,
    /// App ready (else restored) to the probe being answered.
    pub probe: Option<f64>,
    /// Resume start to the snapshotted system restored.
    pub resume_load: Option<f64>,
    /// Power-on to snapboot's init: what RAM size costs before the initramfs runs.
    pub to_initramfs: Option<f64>,
    /// App ready (else restored) to all deferred memory online (marker `memory`).
    pub memory_online: Option<f64>,
}

impl Phases {
    /// The phases of `tl`, from the first milestone of each kind.
    pub fn from_timeline(tl: &Timeline) -> Self {
        use MilestoneKind as K;
        let at = |kinds: &[K]| kinds.iter().find_map(|k| tl.first(*k));
        let span = |from: &[K], to: &[K]| Some(at(to)? - at(from)?);
        Self {
            firmware: at(&[K::LoaderBooting, K::RestorerStart, K::KernelStart]),
            loader: span(&[K::LoaderBooting], &[K::RestorerStart, K::KernelStart]),
            image_check: span(&[K::RestorerStart], &[K::RestorerChecked]),
            page_placing: span(&[K::RestorerChecked], &[K::RestorerEntered]),
            image_resume: span(&[K::RestorerEntered], &[K::Restored]),
            cold_fallback: span(&[K::RestorerRefused], &[K::KernelStart]),
            kernel: span(&[K::KernelStart], &[K::InitStart]),
            root_mount: span(&[K::InitStart], &[K::RootMounted]),
            app_start: span(&[K::RootMounted, K::AppStart], &[K::AppReady]),
            probe: span(&[K::AppReady, K::Restored], &[K::ProbeAnswered]),
            resume_load: span(&[K::ResumeStart], &[K::Restored]),
            to_initramfs: tl.first(K::InitStart),
            memory_online: span(&[K::AppReady, K::Restored], &[K::MemoryOnline]),
        }
    }

    /// The phases with display labels, in boot order.
    pub fn entries(&self) -> [(&'static str, Option<f64>); 13] {
        [
            ("to initramfs", self.to_initramfs),
            ("firmware", self.firmware),
            ("boot loader", self.loader),
            ("image check", self.image_check),
            ("page placing", self.page_placing),
            ("image resume", self.image_resume),
            ("cold fallback", self.cold_fallback),
            ("kernel", self.kernel),
            ("root mount", self.root_mount),
            ("app start", self.app_start),
            ("probe", self.probe),
            ("resume load", self.resume_load),
            ("memory online", self.memory_online),
        ]
    }
}

impl Timeline {
    /// The boot's phases (see [`Phases::from_timeline`]).
    pub fn phases(&self) -> Phases {
        Phases::from_timeline(self)
    }

    /// Checks that the milestones of [`EXPECTED_ORDER`] that are present are in that order,
    /// naming the first pair that is not.
    pub fn check_order(&self) -> Result<(), OrderError> {
        let mut present = EXPECTED_ORDER
            .into_iter()
            .filter_map(|k| self.first(k).map(|t| (k, t)));
        let Some(mut prev) = present.next() else {
            return Ok(());
        };
        for next in present {
            if prev.1 > next.1 {
                return Err(OrderError::OutOfOrder {
                    first: prev.0,
                    first_t: prev.1,
                    second: next.0,
                    second_t: next.1,
                });
            }
            prev = next;
        }
        Ok(())
    }

    /// A short human-readable report: outcome, milestones with their times, phases and TTI.
    pub fn summary_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "boot trace: {}", self.source);
        let _ = writeln!(out, "outcome:    {}", self.outcome);
        if !self.milestones.is_empty() {
            let _ = writeln!(out, "milestones:");
            let mut ms: Vec<_> = self.milestones.iter().collect();
            ms.sort_by(|a, b| a.t.total_cmp(&b.t).then(a.kind.cmp(&b.kind)));
            for m in ms {
                let line = format!("  {:<16} {:>+10.3} s  {}", m.kind, m.t, detail(&m.detail));
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
        let phases: Vec<_> = self
            .phases()
            .entries()
            .into_iter()
            .filter_map(|(name, d)| d.map(|d| (name, d)))
            .collect();
        if !phases.is_empty() {
            let _ = writeln!(out, "phases:");
            for (name, d) in phases {
                let _ = writeln!(out, "  {name:<16} {d:>10.3} s");
            }
        }
        match self.tti {
            Some(tti) => {
                let _ = writeln!(out, "TTI:        {tti:.3} s");
            }
            None => {
                let _ = writeln!(out, "TTI:        -");
            }
        }
        if let Err(e) = self.check_order() {
            let _ = writeln!(out, "warning:    {e}");
        }
        out
    }
}

/// A milestone's detail for the report, shortened to keep the table readable.
fn detail(d: &Option<String>) -> String {
    const MAX: usize = 60;
    match d {
        Some(d) if d.chars().count() > MAX => {
            let cut: String = d.chars().take(MAX - 1).collect();
            format!("{cut}…")
        }
        Some(d) => d.clone(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::ConsoleLine;
    use MilestoneKind as K;

    fn approx(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    fn timeline() -> Timeline {
        let mut tl = Timeline::new("qemu-x86_64");
        tl.push_lines([
            ConsoleLine::new(0.90, "[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) (gcc-12)"),
            ConsoleLine::new(1.50, "[    1.000000] printk: console [ttyS0] enabled"),
            ConsoleLine::new(2.00, "[    1.523339] Run /init as init process"),
            ConsoleLine::new(2.25, "snapboot: @init"),
            ConsoleLine::new(2.75, "snapboot: @root-mounted"),
            ConsoleLine::new(3.00, "snapboot: @app-start"),
            ConsoleLine::new(3.50, "snapboot: @ready"),
        ]);
        tl.push_event(K::ProbeSent, 3.5, None);
        tl.push_event(K::ProbeAnswered, 3.75, Some("pong".into()));
        tl.finalize();
        tl
    }

    #[test]
    fn cold_boot_phases() {
        let p = timeline().phases();
        assert!(approx(p.firmware, 0.476661), "{p:?}");
        assert!(approx(p.kernel, 2.25 - 0.476661));
        assert!(approx(p.root_mount, 0.5));
        assert!(approx(p.app_start, 0.75));
        assert!(approx(p.probe, 0.25));
        assert_eq!(p.resume_load, None);
    }

    #[test]
    fn resume_phases() {
        let mut tl = Timeline::new("resume");
        tl.push_lines([
            ConsoleLine::new(1.0, "snapboot: @init"),
            ConsoleLine::new(1.25, "snapboot: @resume-start"),
            ConsoleLine::new(1.5, "snapboot: @resume-loaded"),
            ConsoleLine::new(1.75, "snapboot: @restored"),
        ]);
        tl.push_event(K::ProbeAnswered, 2.0, None);
        tl.finalize();
        let p = tl.phases();
        assert_eq!(p.resume_load, Some(0.5));
        assert_eq!(p.probe, Some(0.25));
        assert_eq!(p.app_start, None);
        assert_eq!(p.firmware, None);
    }

    /// The EFI restorer through GRUB (the UEFI PC, 2026-11-28): the firmware ends at GRUB's
    /// hand-over, the boot loader's phase runs to the restorer's start.
    #[test]
    fn the_boot_loader_is_its_own_phase() {
        let mut tl = Timeline::new("efi restorer");
        for l in [
            ConsoleLine::new(3.144893, "grub: booting snapboot-restorer"),
            ConsoleLine::new(3.180079, "snapboot-restorer: started (EFI)"),
            ConsoleLine::new(
                5.105438,
                "snapboot-restorer: image checked: current, 46036 pages",
            ),
            ConsoleLine::new(
                6.022279,
                "snapboot-restorer: 79 MiB read; entering the image at 0xffffffffb3fd5000",
            ),
        ] {
            tl.push_line(l);
        }
        tl.finalize();
        let p = tl.phases();
        let near = |a: Option<f64>, b: f64| (a.unwrap() - b).abs() < 1e-6;
        assert!(near(p.firmware, 3.144893), "{p:?}");
        assert!(near(p.loader, 3.180079 - 3.144893), "{p:?}");
        assert!(near(p.image_check, 5.105438 - 3.180079), "{p:?}");
        assert!(near(p.page_placing, 6.022279 - 5.105438), "{p:?}");
        let first = tl.first(MilestoneKind::LoaderBooting);
        assert!(near(first, 3.144893));
    }

    /// A restore by the restorer, as the board printed it (2026-11-26, `shell`): no kernel
    /// boots before the image, so the firmware ends where the restorer starts.
    #[test]
    fn restorer_phases() {
        let mut tl = Timeline::new("restorer");
        tl.push_lines([
            ConsoleLine::new(0.172328, "snapboot-restorer: started"),
            ConsoleLine::new(0.251496, "snapboot-restorer: image checked: 22240 pages (22240 data), e820 0xb9b0357f; restoring"),
            ConsoleLine::new(0.404334, "snapboot-restorer: 4117 pages deferred, 4143 safe pages; entering the image at 0xffffffff819d5000"),
            ConsoleLine::new(0.553705, "[    3.938221] Disabling non-boot CPUs ..."),
            ConsoleLine::new(0.694171, "snapboot: @restored clock stepped +0.000 s, 64 bytes entropy, 0 hooks"),
        ]);
        tl.push_event(K::ProbeAnswered, 0.833164, None);
        tl.finalize();
        let p = tl.phases();
        assert!(approx(p.firmware, 0.172328), "{p:?}");
        assert!(approx(p.image_check, 0.251496 - 0.172328));
        assert!(approx(p.page_placing, 0.404334 - 0.251496));
        assert!(approx(p.image_resume, 0.694171 - 0.404334));
        assert!(approx(p.probe, 0.833164 - 0.694171));
        assert_eq!(
            (p.kernel, p.resume_load, p.cold_fallback),
            (None, None, None)
        );
        assert_eq!(tl.tti, Some(0.833164));
    }

    /// A refusal, then the stock kernel cold: the fallback lasts from the refusal to the
    /// stock kernel's start, and the cold boot's phases follow.
    #[test]
    fn restorer_fallback_phases() {
        let mut tl = Timeline::new("restorer refused");
        tl.push_lines([
            ConsoleLine::new(0.2, "snapboot-restorer: started"),
            ConsoleLine::new(0.25, "snapboot-restorer: refused: memory map: image's e820 checksum 0xb9b0357f, this machine's 0x33aa71bf"),
            ConsoleLine::new(0.3, "snapboot-restorer: cold boot: the stock kernel"),
            ConsoleLine::new(0.9, "[    0.000000] Linux version 6.1.0-56-amd64 (x)"),
            ConsoleLine::new(1.3, "[    1.000000] Run /init as init process"),
            ConsoleLine::new(1.4, "snapboot: @init"),
        ]);
        tl.finalize();
        assert_eq!(
            tl.milestone(K::RestorerRefused)
                .and_then(|m| m.detail.as_deref()),
            Some("memory map: image's e820 checksum 0xb9b0357f, this machine's 0x33aa71bf")
        );
        let p = tl.phases();
        assert!(approx(p.firmware, 0.2), "{p:?}");
        assert!(approx(p.cold_fallback, 0.3 - 0.25), "{p:?}");
        assert!(approx(p.kernel, 1.4 - 0.3));
        assert_eq!(
            (p.image_check, p.page_placing, p.image_resume),
            (None, None, None)
        );
    }

    #[test]
    fn order_ok_and_broken() {
        let tl = timeline();
        assert_eq!(tl.check_order(), Ok(()));
        let mut bad = Timeline::new("bad");
        bad.push_event(K::InitStart, 2.0, None);
        bad.push_event(K::AppReady, 5.0, None);
        bad.push_event(K::ProbeAnswered, 4.0, None);
        bad.push_event(K::ProbeSent, 4.5, None);
        let err = bad.check_order().err();
        assert_eq!(
            err,
            Some(OrderError::OutOfOrder {
                first: K::AppReady,
                first_t: 5.0,
                second: K::ProbeSent,
                second_t: 4.5,
            })
        );
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("app_ready at +5.000000 s comes after probe_sent"),
            "{msg}"
        );
        assert_eq!(Timeline::new("empty").check_order(), Ok(()));
    }

    #[test]
    fn summary_mentions_everything() {
        let text = timeline().summary_text();
        assert!(text.contains("boot trace: qemu-x86_64"), "{text}");
        assert!(text.contains("outcome:    answered"), "{text}");
        assert!(
            text.contains("  linux_version        +0.900 s  6.1.0-56-amd64"),
            "{text}"
        );
        assert!(
            text.contains("  probe_answered       +3.750 s  pong"),
            "{text}"
        );
        assert!(text.contains("  root mount            0.500 s"), "{text}");
        assert!(text.contains("TTI:        3.750 s"), "{text}");
        assert!(!text.contains("resume load"));
        assert!(!text.contains("warning"));
    }

    #[test]
    fn summary_of_empty_timeline() {
        let text = Timeline::new("nothing").summary_text();
        assert_eq!(
            text,
            "boot trace: nothing\noutcome:    incomplete\nTTI:        -\n"
        );
    }

    #[test]
    fn long_detail_is_shortened() {
        let d = detail(&Some("x".repeat(100)));
        assert_eq!(d.chars().count(), 60);
        assert!(d.ends_with('…'));
    }
}
