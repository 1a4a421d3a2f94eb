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
}

impl Plan {
    /// Whether the restored system re-captures itself after restore `i` (from 1): every
    /// `recapture_every` restores, never after the last.
    pub fn recaptures_after(&self, i: usize) -> bool {
        self.recapture_every > 0 && i.is_multiple_of(self.recapture_every) && i < self.restores
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
    /// Every restore's timeline, in order.
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
    }
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
    capture_boot(bundle, opts, &store).map_err(|source| BenchError::Capture {
        method: ENDURANCE_METHOD,
        source,
    })?;
    tick();
    let mut restore_opts = opts.clone();
    attach_store(&mut restore_opts, &store, false)?;
    let mut run = Endurance {
        records: Vec::new(),
        timelines: Vec::new(),
        captures: 1,
    };
    for i in 1..=plan.restores {
        let started = Instant::now();
        let (mut record, tl) =
            restore_once(bundle, &restore_opts, &expect, plan.recaptures_after(i));
        record.restore = i;
        record.image = run.captures;
        record.cycle_s = started.elapsed().as_secs_f64();
        if plan.recaptures_after(i) && record.app.is_some() && record.recapture_error.is_none() {
            run.captures += 1;
        }
        run.records.push(record);
        run.timelines.push(tl);
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
    let mut record = RestoreRecord {
        restore: 0,
        image: 0,
        boot_error: None,
        tti_s: None,
        app: None,
        recapture_error: None,
        cycle_s: 0.0,
    };
    let mut s = match Session::start(bundle, opts) {
        Ok(s) => s,
        Err(e) => {
            record.boot_error = Some(error_chain(&e));
            let mut tl = Timeline::new(&bundle.workload.name);
            tl.outcome = e.outcome();
            tl.finalize();
            return (record, tl);
        }
    };
    let deadline = Instant::now() + opts.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    match restored_app(&mut s, &bundle.workload.probe.send, expect, left) {
        Err(e) => {
            record.boot_error = Some(error_chain(&e));
            let outcome = match &e {
                BootError::Run(r) => r.outcome(),
                other => Outcome::Exited {
                    reason: other.to_string(),
                },
            };
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
                s.finish(Outcome::Answered);
            } else if let Err(e) = recapture_now(s, left()) {
                record.recapture_error = Some(error_chain(&e));
            }
            (record, tl)
        }
    }
}

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
            cycle_s: 10.0,
        }
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
