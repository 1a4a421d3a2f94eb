//! `bench endurance`: one image restored again and again, as a device restores it at every
//! power-on for years. The workload is captured once (a cold boot's capture), then restored
//! `restores` times in a row; every `recapture_every` restores the restored system
//! re-captures itself (`recapture` on its console, after the checks), so later restores
//! restore an image of a restored system, and so on. A restore that fails does not
//! re-capture; the next one restores the image it failed on.
//!
//! Every restore is checked, and a failed one is recorded with its reason while the run goes
//! on: it must restore (a fallback to a cold boot, a hang, a panic are failures), the
//! application must not start again, its state checksum must be the captured state's, its
//! clock within [`board::app_state::CLOCK_BOUND_S`] of the host's and its random bytes
//! unlike every earlier restore's. TTI is measured as every benchmark measures it: the
//! workload's probe, typed after `restored`.
//!
//! Every restore that answered must also be confirmed (snapboot's default confirmation:
//! boot-complete under systemd, up for `snapboot.grace` seconds otherwise). With
//! [`Plan::faults`], a share of the restores, spread evenly, are faults of
//! [`Plan::fault_kind`]: as soon as `restored` shows, the application is told to die
//! (`crash`), or to hang the whole system (`hang`: every process stopped). A death must end
//! without a confirmation (the board's init powers off, or `confirm-failed`); a hang must be
//! reset by the hardware watchdog (the board gets QEMU's i6300esb, the restores
//! `snapboot.watchdog=`[`HANG_WATCHDOG_S`], and the reset shows as the next boot's `init`
//! marker). Either way the restore after it must come up restored and confirmed again: a
//! recovery. A fault that was confirmed, or a restore after one that fell back, is a
//! failure.

use std::path::Path;
use std::time::{Duration, Instant};

use boottrace::{error_chain, Marker, MilestoneKind, Outcome, Stats, Timeline};
use regex::Regex;
use serde::Serialize;

use crate::measure::{check_boot, make_work, BenchError, BootError};
use board::app_state::{query_restored, repeated, RestoredApp};
use board::capture::{attach_store, capture_boot, recapture_now};
use board::qemu::Session;
use board::run_options::RunOptions;
use bundle::bundle::Bundle;

/// The method name of the restores in the report.
pub const ENDURANCE_METHOD: &str = "endurance";

/// What `endurance` does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Restores, in a row.
    pub restores: usize,
    /// Re-capture after every this many restores (0: never).
    pub recapture_every: usize,
    /// The state checksum every restore must answer (64 hex digits).
    pub checksum: String,
    /// How far the guest's clock may be from the host's, in seconds.
    pub clock_bound_s: f64,
    /// Percent of the restores made to fail right after the restore (0 to
    /// [`MAX_FAULT_PERCENT`]).
    pub faults: u32,
    /// How they fail.
    pub fault_kind: FaultKind,
}

/// How a fault restore fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The application dies (`crash`).
    Die,
    /// The whole restored system hangs (`hang`), and the watchdog resets it.
    Hang,
    /// Deaths and hangs in turn, a death first.
    Mixed,
}

/// The watchdog's timeout on the restores of a run with hangs, seconds.
pub const HANG_WATCHDOG_S: u32 = 5;

/// At most this share of faults: two in a row would reach the crash-loop guard's default
/// limit, and the device would boot cold (what the end-to-end tests check).
pub const MAX_FAULT_PERCENT: u32 = 50;

impl Plan {
    /// Whether the restored system re-captures itself after restore `i` (from 1): every
    /// `recapture_every` restores, never after the last.
    pub fn recaptures_after(&self, i: usize) -> bool {
        self.recapture_every > 0
            && i.is_multiple_of(self.recapture_every)
            && i < self.restores
            && !self.faulted(i)
    }

    /// Whether restore `i` (from 1) is a fault: spread evenly, the share [`Plan::faults`].
    pub fn faulted(&self, i: usize) -> bool {
        let p = self.faults as usize;
        i > 0 && i * p / 100 > (i - 1) * p / 100
    }

    /// How restore `i` (from 1) fails, if it is a fault.
    pub fn fault_at(&self, i: usize) -> Option<FaultKind> {
        if !self.faulted(i) {
            return None;
        }
        Some(match self.fault_kind {
            FaultKind::Mixed => {
                // The how-manieth fault this is, from 1.
                let n = i * self.faults as usize / 100;
                if n % 2 == 1 {
                    FaultKind::Die
                } else {
                    FaultKind::Hang
                }
            }
            k => k,
        })
    }

    /// Whether some restore of the plan hangs (the board then needs its watchdog).
    pub fn hangs(&self) -> bool {
        (1..=self.restores).any(|i| self.fault_at(i) == Some(FaultKind::Hang))
    }

    /// How many times `endurance` calls `tick`: the first capture and every restore.
    pub fn steps(&self) -> u64 {
        self.restores as u64 + 1
    }
}

/// What one restore showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreRecord {
    /// Which restore, from 1.
    pub restore: usize,
    /// Which capture's image it restored, from 1.
    pub image: usize,
    /// Why it did not come up restored and answering (fallback, hang, panic...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_error: Option<String>,
    /// Time to interactive, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tti_s: Option<f64>,
    /// The application's answers after the restore.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<RestoredApp>,
    /// Why the re-capture after this restore failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recapture_error: Option<String>,
    /// Whether the restore was confirmed (`None`: not looked at, a restore that re-captured
    /// itself before its confirmation was due, or one that did not come up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
    /// A fault restore: the application was told to die or the system to hang; how the boot
    /// ended (the marker: `poweroff` or `confirm-failed` after a death, `init` for the
    /// watchdog's reset after a hang, `confirmed`: a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault_end: Option<String>,
    /// Seconds the whole cycle took on the host: power-on to power-off, re-capture included.
    pub cycle_s: f64,
}

/// A failed restore and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// Which restore, from 1.
    pub restore: usize,
    /// Why, one line.
    pub reason: String,
}

/// The summary of an endurance run (the report's `summary`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Restores attempted.
    pub restores: usize,
    /// Restores that failed any check (each counted once).
    pub failed: usize,
    /// Every reason of every failed restore, in order.
    pub failures: Vec<Failure>,
    /// Restores that answered the captured state's checksum.
    pub checksum_right: usize,
    /// Restores that answered random bytes.
    pub random_answers: usize,
    /// Of those, answers unlike every earlier restore's.
    pub random_distinct: usize,
    /// |guest clock − host clock| over the restores that answered, seconds.
    pub clock_error: Option<Stats>,
    /// The bound on it, seconds.
    pub clock_bound_s: f64,
    /// Time to interactive over the restores that answered.
    pub tti: Option<Stats>,
    /// Seconds per restore cycle on the host (re-captures included).
    pub cycle: Option<Stats>,
    /// Images captured: the first and every successful re-capture.
    pub captures: usize,
    /// Fault restores (deaths and hangs).
    pub faults: usize,
    /// Of those, hangs the watchdog reset.
    pub hangs_reset: usize,
    /// Fault restores followed by a restore that came up and was confirmed.
    pub recovered: usize,
    /// Restores that were confirmed, of those looked at.
    pub confirmed: usize,
    /// Restores whose confirmation was looked at.
    pub confirm_checked: usize,
}

/// The JSON of `bench endurance`: the restores' benchmark report (TTI and phases, as every
/// benchmark writes it), the summary, and every restore.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The restores as one method of the shared benchmark report.
    pub restores: boottrace::report::BenchReport,
    /// What the checks found.
    pub summary: Summary,
    /// Every restore, in order.
    pub records: Vec<RestoreRecord>,
}

impl Summary {
    /// The summary as text, one finding a line, then every failure.
    pub fn text(&self) -> String {
        let s3 = |s: &Option<Stats>| {
            s.map_or("none".to_string(), |s| {
                format!(
                    "median {:.3} s  [min {:.3} .. max {:.3}]  n={}",
                    s.median, s.min, s.max, s.n
                )
            })
        };
        let mut out = format!(
            "endurance: {} restores, {} failed; {} image(s) captured\n",
            self.restores, self.failed, self.captures
        );
        let mut line = |k: &str, v: String| out.push_str(&format!("  {k:<14} {v}\n"));
        line(
            "state",
            format!(
                "{} of {} restores answered the captured checksum",
                self.checksum_right, self.restores
            ),
        );
        line(
            "RNG",
            format!(
                "{} distinct of {} answers",
                self.random_distinct, self.random_answers
            ),
        );
        line(
            "clock error",
            match self.clock_error {
                Some(c) => format!(
                    "median {:.3} s, max {:.3} s (bound {} s)",
                    c.median, c.max, self.clock_bound_s
                ),
                None => "none answered".into(),
            },
        );
        line(
            "confirmed",
            format!(
                "{} of {} restores looked at",
                self.confirmed, self.confirm_checked
            ),
        );
        if self.faults > 0 {
            let hangs = match self.hangs_reset {
                0 => String::new(),
                n => format!(" ({n} system hangs, each reset by the watchdog)"),
            };
            line(
                "faults",
                format!(
                    "{} faults after a restore{hangs}, {} recovered at the next restore",
                    self.faults, self.recovered
                ),
            );
        }
        line("TTI", s3(&self.tti));
        line("cycle", s3(&self.cycle));
        for f in &self.failures {
            out.push_str(&format!("  failed: restore {}: {}\n", f.restore, f.reason));
        }
        out
    }
}

/// What `endurance` measured.
#[derive(Debug)]
pub struct Endurance {
    /// Every restore, in order.
    pub records: Vec<RestoreRecord>,
    /// Every restore's timeline, in order, but the faults': the application died before it
    /// answered, so they measure no TTI (the table is of the restores that answered).
    pub timelines: Vec<Timeline>,
    /// Images captured.
    pub captures: usize,
}

/// Summarises `records` against the plan's checksum and clock bound.
pub fn summarize(records: &[RestoreRecord], plan: &Plan, captures: usize) -> Summary {
    let answered: Vec<&RestoredApp> = records.iter().filter_map(|r| r.app.as_ref()).collect();
    let randoms: Vec<&str> = answered.iter().map(|a| a.random.as_str()).collect();
    let repeats = repeated(&randoms);
    // The answers' restore numbers, to name the earlier restore a repeat matches.
    let answered_in: Vec<usize> = records
        .iter()
        .filter(|r| r.app.is_some())
        .map(|r| r.restore)
        .collect();
    let mut failures = Vec::new();
    let mut k = 0;
    for r in records {
        let mut fail = |reason: String| {
            failures.push(Failure {
                restore: r.restore,
                reason,
            })
        };
        if let Some(e) = &r.boot_error {
            fail(e.clone());
        }
        if let Some(app) = &r.app {
            for p in app.problems(&plan.checksum, plan.clock_bound_s) {
                fail(p.to_string());
            }
            for &(_, earlier) in repeats.iter().filter(|(i, _)| *i == k) {
                fail(format!(
                    "random bytes {} repeat restore {}'s",
                    app.random, answered_in[earlier]
                ));
            }
            k += 1;
        }
        if let Some(e) = &r.recapture_error {
            fail(format!("re-capture: {e}"));
        }
        match (&r.fault_end, r.confirmed) {
            (Some(_), Some(true)) => {
                fail("the application died, and the restore was confirmed".into())
            }
            (None, Some(false)) => fail("the restore was not confirmed".into()),
            _ => {}
        }
    }
    // A fault recovers when the restore after it came up and was confirmed.
    let recovered = records
        .windows(2)
        .filter(|w| w[0].fault_end.is_some())
        .filter(|w| {
            w[1].boot_error.is_none() && w[1].fault_end.is_none() && w[1].confirmed != Some(false)
        })
        .count();
    for w in records.windows(2).filter(|w| w[0].fault_end.is_some()) {
        if w[1].boot_error.is_some() {
            failures.push(Failure {
                restore: w[1].restore,
                reason: format!("did not recover from restore {}'s fault", w[0].restore),
            });
        }
    }
    failures.sort_by_key(|f| f.restore);
    let mut failed: Vec<usize> = failures.iter().map(|f| f.restore).collect();
    failed.dedup();
    let stats = |v: Vec<f64>| Stats::from_samples(&v);
    Summary {
        restores: records.len(),
        failed: failed.len(),
        failures,
        checksum_right: answered
            .iter()
            .filter(|a| a.checksum == plan.checksum)
            .count(),
        random_answers: randoms.len(),
        random_distinct: randoms.len() - repeats.len(),
        clock_error: stats(answered.iter().map(|a| a.clock_error_s.abs()).collect()),
        clock_bound_s: plan.clock_bound_s,
        tti: stats(records.iter().filter_map(|r| r.tti_s).collect()),
        cycle: stats(records.iter().map(|r| r.cycle_s).collect()),
        captures,
        faults: records.iter().filter(|r| r.fault_end.is_some()).count(),
        hangs_reset: records
            .iter()
            .filter(|r| r.fault_end.as_deref() == Some(Marker::Init.name()))
            .count(),
        recovered,
        confirmed: records.iter().filter(|r| r.confirmed == Some(true)).count(),
        confirm_checked: records.iter().filter(|r| r.confirmed.is_some()).count(),
    }
}

/// Runs the benchmark (see the module docs) with its store under `work`. Only what makes
/// the run impossible (the first capture, the store) stops it; a restore that fails is
/// recorded and the next one boots.
pub fn endurance(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    plan: &Plan,
    tick: &mut dyn FnMut(),
) -> Result<Endurance, BenchError> {
    if plan.restores == 0 {
        return Err(BenchError::NoRuns);
    }
    let probe = &bundle.workload.probe;
    let expect = Regex::new(&probe.expect)
        .map_err(|e| BenchError::BadRegex(probe.expect.clone(), e.to_string()))?;
    make_work(work)?;
    let store = work.join("endurance.store");
    let _ = std::fs::remove_file(&store);
    // A run with hangs has the watchdog from the capture on: the image is of that machine.
    let mut opts = opts.clone();
    opts.watchdog |= plan.hangs();
    let opts = &opts;
    capture_boot(bundle, opts, &store).map_err(|source| BenchError::Capture {
        method: ENDURANCE_METHOD,
        source,
    })?;
    tick();
    let mut restore_opts = opts.clone();
    attach_store(&mut restore_opts, &store, false)?;
    if plan.hangs() {
        restore_opts
            .cmdline
            .push(format!("{}={HANG_WATCHDOG_S}", bootparams::key::WATCHDOG));
    }
    let mut run = Endurance {
        records: Vec::new(),
        timelines: Vec::new(),
        captures: 1,
    };
    for i in 1..=plan.restores {
        let started = Instant::now();
        let (mut record, tl) = match plan.fault_at(i) {
            Some(kind) => fault_once(bundle, &restore_opts, kind),
            None => restore_once(bundle, &restore_opts, &expect, plan.recaptures_after(i)),
        };
        record.restore = i;
        record.image = run.captures;
        record.cycle_s = started.elapsed().as_secs_f64();
        if plan.recaptures_after(i) && record.app.is_some() && record.recapture_error.is_none() {
            run.captures += 1;
        }
        if record.fault_end.is_none() {
            run.timelines.push(tl);
        }
        run.records.push(record);
        tick();
    }
    Ok(run)
}

/// One restore: boots, waits for `restored` (or the fallback), types the probe, asks the
/// application's state, then powers off, or has it re-capture itself when `recapture`.
fn restore_once(
    bundle: &Bundle,
    opts: &RunOptions,
    expect: &Regex,
    recapture: bool,
) -> (RestoreRecord, Timeline) {
    let mut record = RestoreRecord::unknown();
    let mut s = match Session::start(bundle, opts) {
        Ok(s) => s,
        Err(e) => return not_started(bundle, record, &e),
    };
    let deadline = Instant::now() + opts.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    match restored_app(&mut s, &bundle.workload.probe.send, expect, left) {
        Err(e) => {
            record.boot_error = Some(error_chain(&e));
            let outcome = outcome_of(&e);
            let mut tl = s.finish(outcome);
            // TTI only where the probe was answered (not a `restored` that answered nothing).
            tl.tti = tl.first(MilestoneKind::ProbeAnswered);
            record.tti_s = tl.tti;
            (record, tl)
        }
        Ok(app) => {
            record.tti_s = s.timeline().tti;
            record.app = Some(app);
            // The restore's timeline ends with the answers: a re-capture adds markers of its
            // own (`ready` again) that are not this restore's.
            let mut tl = s.timeline().clone();
            tl.outcome = Outcome::Answered;
            tl.finalize();
            if !recapture {
                // `finish` waits for a confirmation still due.
                record.confirmed = Some(confirmed(&s.finish(Outcome::Answered)));
            } else if let Err(e) = recapture_now(s, left()) {
                record.recapture_error = Some(error_chain(&e));
            }
            (record, tl)
        }
    }
}

impl RestoreRecord {
    /// A restore nothing is known of yet (its numbers are filled in by `endurance`).
    fn unknown() -> Self {
        RestoreRecord {
            restore: 0,
            image: 0,
            boot_error: None,
            tti_s: None,
            app: None,
            recapture_error: None,
            confirmed: None,
            fault_end: None,
            cycle_s: 0.0,
        }
    }
}

/// A restore whose board did not start: the reason, and a timeline with just its outcome.
fn not_started(
    bundle: &Bundle,
    mut record: RestoreRecord,
    e: &board::RunError,
) -> (RestoreRecord, Timeline) {
    record.boot_error = Some(error_chain(e));
    let mut tl = Timeline::new(&bundle.workload.name);
    tl.outcome = e.outcome();
    tl.finalize();
    (record, tl)
}

/// How a restore that ended with `e` ended, for its timeline.
fn outcome_of(e: &BootError) -> Outcome {
    match e {
        BootError::Run(r) => r.outcome(),
        other => Outcome::Exited {
            reason: other.to_string(),
        },
    }
}

/// Whether the timeline shows the restore confirmed: at once (the status marker), or later
/// (the `confirmed` marker).
fn confirmed(tl: &Timeline) -> bool {
    tl.lines.iter().any(|l| match Marker::parse(&l.text) {
        Some((Marker::Confirmed, _)) => true,
        Some((Marker::Status, Some(d))) => d.starts_with("restored ") && d.ends_with(" confirmed"),
        _ => false,
    })
}

/// A fault restore: waits for `restored`, tells the application to die at once (or the
/// system to hang) and waits for the boot to end: the board's init powering off or the
/// confirmation failing (a hang: the watchdog's reset, the next boot's `init`), or, a
/// failure, the confirmation succeeding. No TTI: the application never answers.
fn fault_once(bundle: &Bundle, opts: &RunOptions, kind: FaultKind) -> (RestoreRecord, Timeline) {
    let (query, ends): (&str, &[Marker]) = match kind {
        FaultKind::Hang => (HANG_QUERY, &[Marker::Init, Marker::Confirmed]),
        _ => (
            FAULT_QUERY,
            &[Marker::Poweroff, Marker::ConfirmFailed, Marker::Confirmed],
        ),
    };
    let mut record = RestoreRecord::unknown();
    let mut s = match Session::start(bundle, opts) {
        Ok(s) => s,
        Err(e) => return not_started(bundle, record, &e),
    };
    let deadline = Instant::now() + opts.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let ended = s
        .wait_for_marker(
            &[Marker::Restored, Marker::Fallback],
            "the restored (or fallback) marker",
            left(),
        )
        .map_err(BootError::from)
        .and_then(|_| check_boot(s.timeline(), true))
        .and_then(|()| s.send(query).map_err(BootError::from))
        .and_then(|()| {
            s.wait_for_marker(ends, "the end of a restore made to fail", left())
                .map_err(BootError::from)
        });
    match ended {
        Ok((marker, _, _)) => {
            record.fault_end = Some(marker.name().to_string());
            record.confirmed = Some(marker == Marker::Confirmed);
            (record, s.finish(Outcome::Answered))
        }
        Err(e) => {
            record.boot_error = Some(error_chain(&e));
            let outcome = outcome_of(&e);
            (record, s.finish(outcome))
        }
    }
}

/// What the `app` program answers by dying at once (exit status 70).
pub const FAULT_QUERY: &str = "crash";
/// What the `app` program answers by stopping every process of the system, itself last.
pub const HANG_QUERY: &str = "hang";

/// Waits for the restore, types the probe and asks the restored application its state.
fn restored_app(
    s: &mut Session,
    probe: &str,
    expect: &Regex,
    left: impl Fn() -> Duration,
) -> Result<RestoredApp, BootError> {
    s.wait_for_marker(
        &[Marker::Restored, Marker::Fallback],
        "the restored (or fallback) marker",
        left(),
    )?;
    check_boot(s.timeline(), true)?;
    s.probe(probe, expect, left())?;
    Ok(query_restored(s, left())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUM: &str = "5e";

    fn plan() -> Plan {
        Plan {
            restores: 5,
            recapture_every: 2,
            checksum: SUM.into(),
            clock_bound_s: 2.0,
            faults: 0,
            fault_kind: FaultKind::Die,
        }
    }

    fn good(restore: usize, random: &str, clock_error_s: f64, tti: f64) -> RestoreRecord {
        RestoreRecord {
            restore,
            image: 1,
            boot_error: None,
            tti_s: Some(tti),
            app: Some(RestoredApp {
                started_again: false,
                checksum: SUM.into(),
                clock_error_s,
                random: random.into(),
            }),
            recapture_error: None,
            confirmed: Some(true),
            fault_end: None,
            cycle_s: 10.0,
        }
    }

    fn fault(restore: usize, end: &str, confirmed: bool) -> RestoreRecord {
        RestoreRecord {
            tti_s: None,
            app: None,
            confirmed: Some(confirmed),
            fault_end: Some(end.into()),
            ..good(restore, "", 0.0, 0.0)
        }
    }

    #[test]
    fn faults_are_spread_evenly_never_recapture_and_each_needs_a_recovery() {
        let p = Plan {
            restores: 10,
            faults: 20,
            ..plan()
        };
        let faulted: Vec<usize> = (1..=10).filter(|&i| p.faulted(i)).collect();
        assert_eq!(faulted, [5, 10]);
        let half = Plan {
            faults: 50,
            ..p.clone()
        };
        assert_eq!((1..=6).filter(|&i| half.faulted(i)).count(), 3);
        assert!((1..=100).all(|i| !plan().faulted(i)));
        // Restore 4 would re-capture, restore 10 is a fault: never after a fault.
        let p = Plan {
            recapture_every: 5,
            ..p
        };
        assert!(!p.recaptures_after(5));

        let records = [
            good(1, "aa", 0.1, 10.0),
            fault(2, "poweroff", false),
            good(3, "bb", 0.1, 10.0),
            fault(4, "confirm-failed", false),
            good(5, "cc", 0.1, 10.0),
        ];
        let s = summarize(&records, &plan(), 1);
        assert_eq!(
            (s.failed, s.faults, s.recovered),
            (0, 2, 2),
            "{:?}",
            s.failures
        );
        assert_eq!((s.confirmed, s.confirm_checked), (3, 5));
        let t = s.text();
        assert!(
            t.contains("  confirmed      3 of 5 restores looked at\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "  faults         2 faults after a restore, 2 recovered at the next restore\n"
            ),
            "{t}"
        );

        // A dead application confirmed, an answering one not, and no recovery after a fault.
        let mut unconfirmed = good(2, "bb", 0.1, 10.0);
        unconfirmed.confirmed = Some(false);
        let mut cold = good(4, "", 0.0, 0.0);
        cold.app = None;
        cold.boot_error = Some("expected a restore, got a cold boot: crash-loop guard".into());
        let records = [
            fault(1, "confirmed", true),
            unconfirmed,
            fault(3, "poweroff", false),
            cold,
        ];
        let s = summarize(&records, &plan(), 1);
        let reasons: Vec<(usize, &str)> = s
            .failures
            .iter()
            .map(|f| (f.restore, f.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (1, "the application died, and the restore was confirmed"),
                (2, "the restore was not confirmed"),
                (4, "expected a restore, got a cold boot: crash-loop guard"),
                (4, "did not recover from restore 3's fault"),
            ]
        );
        assert_eq!((s.failed, s.recovered), (3, 0));
    }

    #[test]
    fn mixed_faults_take_turns_and_hangs_reset_by_the_watchdog_count_as_recovered() {
        let p = Plan {
            restores: 8,
            faults: 50,
            fault_kind: FaultKind::Mixed,
            ..plan()
        };
        let kinds: Vec<Option<FaultKind>> = (1..=8).map(|i| p.fault_at(i)).collect();
        use FaultKind::{Die, Hang};
        assert_eq!(
            kinds,
            [
                None,
                Some(Die),
                None,
                Some(Hang),
                None,
                Some(Die),
                None,
                Some(Hang)
            ]
        );
        assert!(p.hangs());
        let die = Plan {
            fault_kind: Die,
            ..p.clone()
        };
        assert!(!die.hangs());
        assert!(!Plan {
            faults: 0,
            fault_kind: Hang,
            ..p
        }
        .hangs());
        let records = [
            good(1, "aa", 0.1, 10.0),
            fault(2, "poweroff", false),
            good(3, "bb", 0.1, 10.0),
            fault(4, "init", false),
            good(5, "cc", 0.1, 10.0),
        ];
        let s = summarize(&records, &plan(), 1);
        assert_eq!(
            (s.failed, s.faults, s.hangs_reset, s.recovered),
            (0, 2, 1, 2)
        );
        let t = s.text();
        assert!(
            t.contains("  faults         2 faults after a restore (1 system hangs, each reset by the watchdog), 2 recovered at the next restore\n"),
            "{t}"
        );
    }

    #[test]
    fn recaptures_come_every_k_restores_but_never_after_the_last() {
        let p = plan();
        let after: Vec<usize> = (1..=5).filter(|&i| p.recaptures_after(i)).collect();
        assert_eq!(after, [2, 4]);
        let never = Plan {
            recapture_every: 0,
            ..plan()
        };
        assert!((1..=5).all(|i| !never.recaptures_after(i)));
        assert_eq!(p.steps(), 6);
    }

    #[test]
    fn a_clean_run_has_no_failures_and_every_count_full() {
        let records = [
            good(1, "aa", 0.3, 12.0),
            good(2, "bb", -0.5, 11.0),
            good(3, "cc", 0.1, 13.0),
        ];
        let s = summarize(&records, &plan(), 2);
        assert_eq!((s.restores, s.failed, s.checksum_right), (3, 0, 3));
        assert_eq!((s.random_answers, s.random_distinct), (3, 3));
        let clock = s.clock_error.unwrap();
        assert_eq!((clock.median, clock.max), (0.3, 0.5));
        assert_eq!(s.tti.unwrap().median, 12.0);
        assert_eq!(s.captures, 2);
        assert!(s.failures.is_empty());
    }

    #[test]
    fn every_failure_is_counted_once_per_restore_with_each_reason() {
        let mut fell_back = good(2, "", 0.0, 0.0);
        fell_back.app = None;
        fell_back.tti_s = None;
        fell_back.boot_error = Some("expected a restore, got a cold boot: no image".into());
        let mut wrong = good(4, "aa", 2.5, 12.0);
        if let Some(a) = wrong.app.as_mut() {
            a.checksum = "00".into();
        }
        let mut recapture = good(5, "dd", 0.2, 12.0);
        recapture.recapture_error = Some("capture failed in the guest: no space".into());
        let records = [
            good(1, "aa", 0.3, 11.0),
            fell_back,
            good(3, "cc", -1.9, 13.0),
            wrong,
            recapture,
        ];
        let s = summarize(&records, &plan(), 1);
        assert_eq!(s.restores, 5);
        assert_eq!(s.failed, 3, "{:?}", s.failures);
        let reasons: Vec<(usize, &str)> = s
            .failures
            .iter()
            .map(|f| (f.restore, f.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (2, "expected a restore, got a cold boot: no image"),
                (4, "state checksum 00 differs from the captured state's 5e"),
                (4, "guest clock off the host's by +2.500 s (bound ±2 s)"),
                (4, "random bytes aa repeat restore 1's"),
                (5, "re-capture: capture failed in the guest: no space"),
            ]
        );
        // A clock 1.9 s off is within the bound; the fallback answered nothing.
        assert_eq!(s.checksum_right, 3);
        assert_eq!((s.random_answers, s.random_distinct), (4, 3));
        assert_eq!(s.clock_error.unwrap().max, 2.5);
        assert_eq!(s.tti.unwrap().n, 4);
        let t = s.text();
        assert!(
            t.starts_with("endurance: 5 restores, 3 failed; 1 image(s) captured\n"),
            "{t}"
        );
        assert!(
            t.contains("  RNG            3 distinct of 4 answers\n"),
            "{t}"
        );
        assert!(t.contains("  failed: restore 2: expected a restore"), "{t}");
    }
}
