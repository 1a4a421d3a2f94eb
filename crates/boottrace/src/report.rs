//! The benchmark report: every benchmark (`snapboot bench cold`, `bench compare`) summarises
//! each method's timelines the same way and writes the same JSON. A restore's load phase
//! reports its throughput on the console (the `throughput` marker, [`Throughput::line`]); a
//! method's runs are summarised as [`ThroughputStats`], and `bench compare` sets them against
//! the medium's own sequential read in the same run ([`MediumBaseline`], the
//! `medium-baseline` marker). Fields added after the first reports are optional, so every
//! report written before them still reads.

/// A load phase's throughput, as every restoring path prints it (re-exported for the
/// benchmarks, which read it from the console).
pub use bootstatus::Throughput;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::marker::Marker;
use crate::stats::Stats;
use crate::timeline::Timeline;

/// One method's results over all runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct MethodResult {
    /// Method name: `cold`, `kernel-resume`, `snapboot`, ...
    pub method: String,
    /// Time to interactive.
    pub tti: Option<Stats>,
    /// Per milestone: time since power-on.
    pub milestones: BTreeMap<String, Stats>,
    /// Per phase: duration.
    pub phases: BTreeMap<String, Stats>,
    /// Every run's TTI, in order.
    pub samples: Vec<f64>,
    /// Bytes of the image as the kernel produced it (methods that restore an image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<u64>,
    /// Bytes the image occupies on its storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
    /// The load phase's throughput over the runs that printed it (restoring methods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputStats>,
}

/// A method's load phase over its runs: the median of each run's rates (MB are 10^6 bytes),
/// from the `throughput` marker of every run that printed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputStats {
    /// Runs that printed the marker.
    pub n: usize,
    /// MB/s of pages loaded over the whole phase (placed bytes over its wall time): median
    /// and spread.
    pub load_mbps: Stats,
    /// MB/s of stored bytes over the whole phase (read bytes over its wall time): what
    /// [`ThroughputStats::of_medium`] compares with the medium's baseline.
    pub stored_load_mbps: f64,
    /// MB/s the medium delivered while a read was in flight.
    pub medium_mbps: f64,
    /// MB/s of stored bytes one CPU checks or opens.
    pub check_mbps_per_cpu: f64,
    /// MB/s of decompressed bytes one CPU produces.
    pub decode_mbps_per_cpu: f64,
    /// MB/s of pages placed.
    pub place_mbps: f64,
    /// Share of the stored bytes read in requests of at least 1 MiB, 0 to 1.
    pub large_share: f64,
    /// CPUs that read, checked and decompressed.
    pub workers: u32,
    /// MB read from the medium.
    pub read_mb: f64,
    /// The bound of the run with the median load MB/s: `medium`, `cpu` or `memory`.
    pub bound: String,
    /// [`ThroughputStats::stored_load_mbps`] over the medium baseline's median MB/s (1.0:
    /// the load phase reads as fast as a plain sequential read), when the run measured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_medium: Option<f64>,
}

/// The medium's baseline: what a plain sequential read (1 MiB requests) of an image's
/// extent on the store delivers, measured on the same board in the same run (`bench
/// compare`'s `medium` boots, `snapboot.baseline=medium`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MediumBaseline {
    /// The method whose image's extent was read.
    pub image: String,
    /// MB/s of each read (bytes over its wall time): median and spread.
    pub mbps: Stats,
    /// Every run's MB/s, in order.
    pub samples: Vec<f64>,
    /// MB read (median): the image's extent.
    pub read_mb: f64,
    /// Read requests (median).
    pub requests: u64,
}

/// The JSON contract of every benchmark.
#[derive(Debug, Serialize, Deserialize)]
pub struct BenchReport {
    /// Which benchmark.
    pub bench: String,
    /// Workload name.
    pub workload: String,
    /// Kernel release.
    pub kernel: String,
    /// Accelerator.
    pub accel: String,
    /// Guest memory in MiB (what the board boots with).
    pub mem_mib: u32,
    /// Deferred memory: the board's total RAM in MiB, when it boots with less.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_mem_mib: Option<u32>,
    /// Virtual CPUs of every boot of the run, captures included (`--smp`); `None` in a
    /// report written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smp: Option<u32>,
    /// Unix time the benchmark finished.
    pub finished_unix: u64,
    /// Runs per method.
    pub runs: usize,
    /// Results, the baseline first.
    pub methods: Vec<MethodResult>,
    /// The medium's sequential read, when the run measured it (`bench compare` with a
    /// restore kernel); every method's [`ThroughputStats::of_medium`] is against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub medium_baseline: Option<MediumBaseline>,
    /// What the run left out and why (a method this workload or host cannot support), one
    /// line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn median(v: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.into_iter().collect();
    Stats::from_samples(&v).map_or(0.0, |s| s.median)
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// The throughput a console line carries: a `throughput` or `medium-baseline` marker whose
/// detail reads back as [`Throughput::line`] (a printk prefix before it is fine).
pub fn line_throughput(line: &str) -> Option<(Marker, Throughput)> {
    match Marker::parse(line)? {
        (m @ (Marker::Throughput | Marker::MediumBaseline), Some(detail)) => {
            Throughput::parse_line(detail).map(|t| (m, t))
        }
        _ => None,
    }
}

/// The last `marker` line's throughput in a boot (`throughput`: the load phase of the restore
/// that took, after any image refused before it; `medium-baseline`: the medium's read).
pub fn boot_throughput(tl: &Timeline, marker: Marker) -> Option<Throughput> {
    tl.lines
        .iter()
        .rev()
        .filter_map(|l| line_throughput(&l.text))
        .find_map(|(m, t)| (m == marker).then_some(t))
}

impl ThroughputStats {
    /// The summary of `runs` (one load phase each); `None` without any.
    pub fn from_runs(runs: &[Throughput]) -> Option<Self> {
        let load: Vec<f64> = runs.iter().map(Throughput::load_mbps).collect();
        let load_mbps = Stats::from_samples(&load)?;
        // The run with the median load rate (the lower middle one of an even count).
        let mut order: Vec<&Throughput> = runs.iter().collect();
        order.sort_by(|a, b| a.load_mbps().total_cmp(&b.load_mbps()));
        let mid = order[(order.len() - 1) / 2];
        let each = |f: fn(&Throughput) -> f64| median(runs.iter().map(f));
        Some(Self {
            n: runs.len(),
            load_mbps,
            stored_load_mbps: each(|t| mbps(t.read_bytes, t.wall_s)),
            medium_mbps: each(Throughput::medium_mbps),
            check_mbps_per_cpu: each(Throughput::check_mbps),
            decode_mbps_per_cpu: each(Throughput::decode_mbps),
            place_mbps: each(Throughput::place_mbps),
            large_share: each(Throughput::large_share),
            workers: each(|t| f64::from(t.workers)).round() as u32,
            read_mb: each(|t| t.read_bytes as f64 / 1e6),
            bound: mid.bound().word().to_string(),
            of_medium: None,
        })
    }
}

impl MediumBaseline {
    /// The baseline of `runs` (each boot's `medium-baseline` line), reading the image of
    /// method `image`; `None` without any. A run's MB/s is its bytes over its wall time, as
    /// [`ThroughputStats::stored_load_mbps`] counts a load phase (over the read time when
    /// the line has no wall time).
    pub fn from_runs(image: &str, runs: &[Throughput]) -> Option<Self> {
        let samples: Vec<f64> = runs
            .iter()
            .map(|t| {
                let secs = if t.wall_s > 0.0 { t.wall_s } else { t.read_s };
                mbps(t.read_bytes, secs)
            })
            .collect();
        Some(Self {
            image: image.to_string(),
            mbps: Stats::from_samples(&samples)?,
            samples,
            read_mb: median(runs.iter().map(|t| t.read_bytes as f64 / 1e6)),
            requests: median(runs.iter().map(|t| t.requests as f64)).round() as u64,
        })
    }
}

/// Summarises a method's timelines.
pub fn summarize(method: &str, timelines: &[Timeline]) -> MethodResult {
    let mut milestones: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut phases: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut loads = Vec::new();
    for tl in timelines {
        loads.extend(boot_throughput(tl, Marker::Throughput));
        if let Some(t) = tl.tti {
            samples.push(t);
        }
        for m in &tl.milestones {
            if tl.first(m.kind) == Some(m.t) {
                milestones
                    .entry(m.kind.as_str().to_string())
                    .or_default()
                    .push(m.t);
            }
        }
        for (name, d) in tl.phases().entries() {
            if let Some(d) = d {
                phases.entry(name.to_string()).or_default().push(d);
            }
        }
    }
    let stats = |m: BTreeMap<String, Vec<f64>>| {
        m.into_iter()
            .filter_map(|(k, v)| Stats::from_samples(&v).map(|s| (k, s)))
            .collect()
    };
    MethodResult {
        method: method.to_string(),
        tti: Stats::from_samples(&samples),
        milestones: stats(milestones),
        phases: stats(phases),
        samples,
        image_bytes: None,
        stored_bytes: None,
        throughput: ThroughputStats::from_runs(&loads),
    }
}

impl BenchReport {
    /// The report with the medium's `baseline` (if any), every method's load phase set
    /// against it ([`ThroughputStats::of_medium`]).
    pub fn with_medium_baseline(mut self, baseline: Option<MediumBaseline>) -> Self {
        let base = baseline
            .as_ref()
            .map(|b| b.mbps.median)
            .filter(|&b| b > 0.0);
        for t in self
            .methods
            .iter_mut()
            .filter_map(|m| m.throughput.as_mut())
        {
            t.of_medium = base.map(|b| t.stored_load_mbps / b);
        }
        self.medium_baseline = baseline;
        self
    }

    /// The method table: median [min..max] per phase and TTI, with the ratio to the first
    /// method (the baseline).
    pub fn table(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = self.write_table(&mut out);
        out
    }

    fn write_table(&self, out: &mut String) -> std::fmt::Result {
        let mem = match self.max_mem_mib {
            Some(max) => format!("{} MiB at boot of {max} MiB", self.mem_mib),
            None => format!("{} MiB", self.mem_mib),
        };
        let cpus = match self.smp {
            Some(1) => ", 1 CPU".to_string(),
            Some(n) => format!(", {n} CPUs"),
            None => String::new(),
        };
        writeln!(
            out,
            "{} boots of `{}` ({} on {}, {mem}{cpus}, {} runs each)",
            self.bench, self.workload, self.kernel, self.accel, self.runs
        )?;
        for n in &self.notes {
            writeln!(out, "  note: {n}")?;
        }
        let base = self
            .methods
            .first()
            .and_then(|m| m.tti.as_ref())
            .map(|s| s.median);
        for m in &self.methods {
            writeln!(out, "  {}:", m.method)?;
            for (name, s) in &m.phases {
                writeln!(out, "    {name:<14} {}", fmt_stats(s))?;
            }
            if let (Some(raw), Some(stored)) = (m.image_bytes, m.stored_bytes) {
                writeln!(
                    out,
                    "    {:<14} {:.1} MiB raw, {:.1} MiB stored",
                    "image",
                    raw as f64 / 1048576.0,
                    stored as f64 / 1048576.0
                )?;
            }
            if let Some(s) = &m.tti {
                let ratio = base
                    .filter(|b| *b > 0.0)
                    .map(|b| format!("  ({:.2}x baseline)", s.median / b))
                    .unwrap_or_default();
                writeln!(out, "    {:<14} {}{ratio}", "TTI", fmt_stats(s))?;
            }
        }
        self.write_load_table(out)
    }

    /// The load phase of every method that printed its throughput, one row each, and the
    /// medium baseline below it; the "of medium" column only with a baseline (the notes of
    /// `bench compare` say why a run has none).
    fn write_load_table(&self, out: &mut String) -> std::fmt::Result {
        let rows: Vec<(&str, &ThroughputStats)> = self
            .methods
            .iter()
            .filter_map(|m| m.throughput.as_ref().map(|t| (m.method.as_str(), t)))
            .collect();
        let base = self.medium_baseline.as_ref();
        if rows.is_empty() && base.is_none() {
            return Ok(());
        }
        let w = rows.iter().map(|(m, _)| m.len()).max().unwrap_or(0).max(6);
        writeln!(out, "  load phase (medians of the runs; MB = 10^6 bytes):")?;
        let of_medium = if base.is_some() { "  of medium" } else { "" };
        writeln!(
            out,
            "    {:<w$}  {:>9}  {:>11}  {:>15}  {:>8}  {:>4}  {:<6}{of_medium}",
            "method", "load MB/s", "medium MB/s", "decode MB/s/CPU", ">= 1 MiB", "CPUs", "bound",
        )?;
        for (method, t) in &rows {
            let of = match (base, t.of_medium) {
                (None, _) => String::new(),
                (Some(_), None) => format!("  {:>9}", "-"),
                (Some(_), Some(f)) => format!("  {:>8.0}%", f * 100.0),
            };
            writeln!(
                out,
                "    {method:<w$}  {:>9.1}  {:>11.1}  {:>15.1}  {:>7.0}%  {:>4}  {:<6}{of}",
                t.load_mbps.median,
                t.medium_mbps,
                t.decode_mbps_per_cpu,
                t.large_share * 100.0,
                t.workers,
                t.bound
            )?;
        }
        if let Some(b) = base {
            writeln!(
                out,
                "  medium baseline: {:.1} MB/s [min {:.1} .. max {:.1}] n={}: the `{}` image's \
                 {:.1} MB on the store read sequentially in 1 MiB requests\n  \
                 of medium: a load phase's stored bytes per second (MB read over its wall \
                 time) as a share of the baseline",
                b.mbps.median, b.mbps.min, b.mbps.max, b.mbps.n, b.image, b.read_mb
            )?;
        }
        Ok(())
    }
}

fn fmt_stats(s: &Stats) -> String {
    format!(
        "median {:7.3} s  [min {:.3} .. max {:.3}]  n={}",
        s.median, s.min, s.max, s.n
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{MilestoneKind, Outcome};

    fn run(tti: f64, ready: f64) -> Timeline {
        let mut tl = Timeline::new("test");
        tl.push_event(MilestoneKind::AppReady, ready, None);
        tl.push_event(MilestoneKind::ProbeAnswered, tti, None);
        tl.tti = Some(tti);
        tl.outcome = Outcome::Answered;
        tl.finalize();
        tl
    }

    fn report(methods: Vec<MethodResult>) -> BenchReport {
        BenchReport {
            bench: "compare".into(),
            workload: "app".into(),
            kernel: "6.1.0-56-amd64".into(),
            accel: "tcg".into(),
            mem_mib: 1024,
            max_mem_mib: None,
            smp: Some(2),
            finished_unix: 1_795_400_000,
            runs: 3,
            methods,
            medium_baseline: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn summarize_takes_median_min_max_of_every_run() {
        let m = summarize("cold", &[run(30.0, 29.0), run(29.0, 28.0), run(31.0, 30.5)]);
        assert_eq!(m.samples, [30.0, 29.0, 31.0]);
        let tti = m.tti.expect("tti");
        assert_eq!((tti.median, tti.min, tti.max, tti.n), (30.0, 29.0, 31.0, 3));
        let ready = &m.milestones["app_ready"];
        assert_eq!((ready.median, ready.n), (29.0, 3));
    }

    #[test]
    fn a_run_without_an_answer_adds_no_sample() {
        let mut lost = Timeline::new("lost");
        lost.outcome = Outcome::Timeout { reason: "x".into() };
        lost.finalize();
        let m = summarize("snapboot", &[run(5.0, 4.0), lost]);
        assert_eq!(m.samples, [5.0]);
        assert_eq!(m.tti.map(|s| s.n), Some(1));
    }

    #[test]
    fn table_gives_ratios_to_the_first_method_and_json_keeps_the_contract() {
        let mut fast = summarize("snapboot", &[run(6.0, 5.0)]);
        fast.image_bytes = Some(100 << 20);
        fast.stored_bytes = Some(50 << 20);
        let r = report(vec![summarize("cold", &[run(30.0, 29.0)]), fast]);
        let t = r.table();
        assert!(
            t.starts_with(
                "compare boots of `app` (6.1.0-56-amd64 on tcg, 1024 MiB, 2 CPUs, 3 runs each)\n"
            ),
            "{t}"
        );
        assert!(t.contains("(0.20x baseline)"), "{t}");
        assert!(
            t.contains("image          100.0 MiB raw, 50.0 MiB stored"),
            "{t}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["methods"][0]["method"], "cold");
        assert_eq!(v["methods"][1]["tti"]["median"], 6.0);
        assert_eq!(v["methods"][1]["stored_bytes"], 50 << 20);
        assert!(v["methods"][0].get("image_bytes").is_none());
        assert!(v["methods"][0].get("throughput").is_none());
        assert!(v.get("max_mem_mib").is_none());
        assert!(v.get("medium_baseline").is_none());
        assert_eq!(v["smp"], 2);
        assert!(
            !t.contains("load phase"),
            "no method printed a throughput: {t}"
        );
        let deferred = BenchReport {
            mem_mib: 512,
            max_mem_mib: Some(16384),
            ..r
        };
        assert!(deferred.table().contains("512 MiB at boot of 16384 MiB"));
        assert_eq!(
            serde_json::to_value(&deferred).unwrap()["max_mem_mib"],
            16384
        );
    }

    #[test]
    fn what_a_run_left_out_is_in_the_table_and_the_json() {
        let r = report(vec![summarize("cold", &[run(30.0, 29.0)])]);
        assert!(!r.table().contains("note:"));
        assert!(serde_json::to_value(&r).unwrap().get("notes").is_none());
        let why = "snapboot-lazy-profiled left out: workload `kiosk` does not answer `recapture`";
        let r = BenchReport {
            notes: vec![why.into()],
            ..r
        };
        let t = r.table();
        assert_eq!(
            t.lines().nth(1),
            Some(format!("  note: {why}").as_str()),
            "{t}"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["notes"][0], why);
    }

    /// A load phase as the device prints it: 40 MB read in 20 requests (95 % of them in
    /// requests of >= 1 MiB), 100 MB decoded, 120 MB placed, `wall` seconds on 2 CPUs.
    fn load(wall: f64) -> Throughput {
        Throughput {
            read_bytes: 40_000_000,
            requests: 20,
            large_bytes: 38_000_000,
            decoded_bytes: 100_000_000,
            placed_bytes: 120_000_000,
            read_s: 0.5,
            check_s: 0.4,
            decode_s: 1.0,
            place_s: 0.2,
            wall_s: wall,
            workers: 2,
        }
    }

    /// A restore whose console carries the `throughput` marker after `resume-loaded`.
    fn restore(tti: f64, wall: f64) -> Timeline {
        let mut tl = Timeline::new("restore");
        tl.push_lines([
            crate::ConsoleLine::new(0.9, "snapboot: @resume-start /dev/vdb"),
            crate::ConsoleLine::new(1.6, "snapboot: @resume-loaded 23014 pages (89.9 MiB)"),
            crate::ConsoleLine::new(
                1.6,
                format!(
                    "[    1.2] {}",
                    Marker::Throughput.line(Some(&load(wall).line()))
                ),
            ),
            crate::ConsoleLine::new(1.8, "snapboot: @restored"),
        ]);
        tl.push_event(MilestoneKind::ProbeAnswered, tti, None);
        tl.tti = Some(tti);
        tl.finalize();
        tl
    }

    #[test]
    fn each_run_s_throughput_marker_becomes_the_method_s_load_phase() {
        let m = summarize(
            "snapboot",
            &[restore(2.0, 1.0), restore(2.1, 2.0), restore(2.2, 0.5)],
        );
        let t = m.throughput.expect("three runs printed the marker");
        assert_eq!(t.n, 3);
        // 120 MB placed in 0.5, 1 and 2 s.
        assert_eq!(
            (t.load_mbps.median, t.load_mbps.min, t.load_mbps.max),
            (120.0, 60.0, 240.0)
        );
        assert_eq!(t.stored_load_mbps, 40.0, "40 MB over the median 1 s");
        assert_eq!((t.medium_mbps, t.check_mbps_per_cpu), (80.0, 100.0));
        assert_eq!((t.decode_mbps_per_cpu, t.place_mbps), (100.0, 600.0));
        assert_eq!((t.large_share, t.workers, t.read_mb), (0.95, 2, 40.0));
        assert_eq!(t.bound, "cpu");
        assert_eq!(t.of_medium, None);
        // A cold boot prints none: no load phase.
        assert_eq!(summarize("cold", &[run(30.0, 29.0)]).throughput, None);
    }

    #[test]
    fn only_the_two_throughput_markers_read_back() {
        let line = Marker::MediumBaseline.line(Some(&load(1.0).line()));
        assert_eq!(
            line_throughput(&line).map(|(m, t)| (m, t.read_bytes)),
            Some((Marker::MediumBaseline, 40_000_000))
        );
        assert_eq!(line_throughput("snapboot: @throughput garbled"), None);
        assert_eq!(
            line_throughput(&Marker::Lazy.line(Some(&load(1.0).line()))),
            None
        );
        // The restore that took is the last one.
        let mut tl = restore(2.0, 1.0);
        tl.push_line(crate::ConsoleLine::new(
            3.0,
            Marker::Throughput.line(Some(&load(4.0).line())),
        ));
        assert_eq!(
            boot_throughput(&tl, Marker::Throughput).map(|t| t.wall_s),
            Some(4.0)
        );
        assert_eq!(boot_throughput(&tl, Marker::MediumBaseline), None);
    }

    /// The medium reads 40 MB in 0.25 s, 0.2 s and 0.5 s: 160 MB/s median. A load phase
    /// that reads its 40 MB in 1 s wall runs at 40 MB/s of stored bytes: 25 % of it.
    #[test]
    fn of_medium_is_the_stored_bytes_rate_over_the_baseline_s_median() {
        let read = |wall: f64| Throughput {
            read_bytes: 40_000_000,
            requests: 39,
            large_bytes: 40_000_000,
            read_s: wall,
            wall_s: wall,
            workers: 1,
            ..Throughput::default()
        };
        let runs: Vec<Throughput> = [0.25, 0.2, 0.5].map(read).to_vec();
        let b = MediumBaseline::from_runs("snapboot", &runs).expect("three reads");
        assert_eq!(
            (b.mbps.median, b.mbps.min, b.mbps.max),
            (160.0, 80.0, 200.0)
        );
        assert_eq!(b.samples, [160.0, 200.0, 80.0]);
        assert_eq!((b.read_mb, b.requests), (40.0, 39));
        // What the device prints reads back the same.
        let back = Throughput::parse_line(&read(0.25).line()).expect("its own line");
        assert_eq!(
            MediumBaseline::from_runs("x", &[back]).map(|b| b.mbps.median),
            Some(160.0)
        );
        assert_eq!(MediumBaseline::from_runs("snapboot", &[]), None);

        let r = report(vec![
            summarize("cold", &[run(30.0, 29.0)]),
            summarize("snapboot", &[restore(2.0, 1.0)]),
        ])
        .with_medium_baseline(Some(b));
        let t = r.methods[1].throughput.as_ref().expect("throughput");
        assert_eq!(t.of_medium, Some(0.25));
        assert!(r.methods[0].throughput.is_none());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["medium_baseline"]["mbps"]["median"], 160.0);
        assert_eq!(v["methods"][1]["throughput"]["of_medium"], 0.25);
        assert_eq!(v["methods"][1]["throughput"]["bound"], "cpu");
        let table = r.table();
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with("snapboot "))
            .unwrap_or_default();
        assert_eq!(
            row.split_whitespace().collect::<Vec<_>>(),
            ["snapboot", "120.0", "80.0", "100.0", "95%", "2", "cpu", "25%"],
            "{table}"
        );
        assert!(
            table.contains("medium baseline: 160.0 MB/s [min 80.0 .. max 200.0] n=3"),
            "{table}"
        );
        // Without a baseline there is no column to fill.
        let r =
            report(vec![summarize("snapboot", &[restore(2.0, 1.0)])]).with_medium_baseline(None);
        assert_eq!(
            r.methods[0].throughput.as_ref().and_then(|t| t.of_medium),
            None
        );
        let table = r.table();
        assert!(
            !table.contains("of medium") && !table.contains("baseline:"),
            "{table}"
        );
        let row = table
            .lines()
            .find(|l| l.trim_start().starts_with("snapboot "));
        assert_eq!(
            row.and_then(|l| l.split_whitespace().last()),
            Some("cpu"),
            "{table}"
        );
    }

    /// A report written before the throughput, the CPUs and the medium baseline were
    /// recorded still reads, without them.
    #[test]
    fn a_report_without_the_newer_fields_still_reads() {
        let old = r#"{
          "bench": "compare", "workload": "app", "kernel": "6.1.0-56-amd64", "accel": "tcg",
          "mem_mib": 1024, "finished_unix": 1795400000, "runs": 1,
          "methods": [{
            "method": "snapboot",
            "tti": {"n": 1, "median": 2.0, "min": 2.0, "max": 2.0, "mean": 2.0, "stddev": 0.0},
            "milestones": {}, "phases": {}, "samples": [2.0], "stored_bytes": 41943040
          }]
        }"#;
        let r: BenchReport = serde_json::from_str(old).expect("an old report");
        assert_eq!((r.smp, r.max_mem_mib), (None, None));
        assert!(r.medium_baseline.is_none() && r.notes.is_empty());
        let m = &r.methods[0];
        assert_eq!((m.image_bytes, m.stored_bytes), (None, Some(41943040)));
        assert!(m.throughput.is_none());
        assert!(r
            .table()
            .contains("(6.1.0-56-amd64 on tcg, 1024 MiB, 1 runs each)"));

        // And a new one reads back whole.
        let new = report(vec![summarize("snapboot", &[restore(2.0, 1.0)])]);
        let back: BenchReport =
            serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(back.smp, Some(2));
        assert_eq!(back.methods[0].throughput, new.methods[0].throughput);
    }
}
