//! The benchmark report: every benchmark (`snapboot bench cold`, `bench compare`) summarises
//! each method's timelines the same way and writes the same JSON.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::stats::Stats;
use crate::timeline::Timeline;

/// One method's results over all runs.
#[derive(Debug, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<u64>,
    /// Bytes the image occupies on its storage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
}

/// The JSON contract of every benchmark.
#[derive(Debug, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_mem_mib: Option<u32>,
    /// Unix time the benchmark finished.
    pub finished_unix: u64,
    /// Runs per method.
    pub runs: usize,
    /// Results, the baseline first.
    pub methods: Vec<MethodResult>,
    /// What the run left out and why (a method this workload or host cannot support), one
    /// line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Summarises a method's timelines.
pub fn summarize(method: &str, timelines: &[Timeline]) -> MethodResult {
    let mut milestones: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut phases: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut samples = Vec::new();
    for tl in timelines {
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
    }
}

impl BenchReport {
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
        writeln!(
            out,
            "{} boots of `{}` ({} on {}, {mem}, {} runs each)",
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
            finished_unix: 1_795_400_000,
            runs: 3,
            methods,
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
                "compare boots of `app` (6.1.0-56-amd64 on tcg, 1024 MiB, 3 runs each)\n"
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
        assert!(v.get("max_mem_mib").is_none());
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
}
