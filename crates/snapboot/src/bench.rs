//! Benchmarks and the serial-port tracer. Every benchmark writes one [`BenchReport`]: the JSON
//! contract for all of them, with median and spread of every milestone and of TTI per method.

use crate::cli::{build_builtin, resolve_bundle, BoardOpts};
use anyhow::{bail, Context, Result};
use board::qemu::run_probe;
use board::Bundle;
use boottrace::{LineRecorder, MilestoneKind, Outcome, Stats, Timeline};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Arguments of `snapboot bench cold`.
#[derive(Args, Debug)]
pub struct ColdArgs {
    /// Built-in workload name or bundle directory (built on first use if missing).
    #[arg(long, default_value = "shell")]
    workload: String,
    /// Number of boots.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HTML boot-analysis report with every run side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    #[command(flatten)]
    board: BoardOpts,
}

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
    /// Guest memory in MiB.
    pub mem_mib: u32,
    /// Unix time the benchmark finished.
    pub finished_unix: u64,
    /// Runs per method.
    pub runs: usize,
    /// Results, the baseline first.
    pub methods: Vec<MethodResult>,
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

/// Prints a method table: median [min..max] per phase and TTI, with the ratio to the first.
pub fn print_report(r: &BenchReport) {
    println!(
        "{} boots of `{}` ({} on {}, {} MiB, {} runs each)",
        r.bench, r.workload, r.kernel, r.accel, r.mem_mib, r.runs
    );
    let base = r
        .methods
        .first()
        .and_then(|m| m.tti.as_ref())
        .map(|s| s.median);
    for m in &r.methods {
        println!("  {}:", m.method);
        for (name, s) in &m.phases {
            println!("    {name:<14} {}", fmt_stats(s));
        }
        if let (Some(raw), Some(stored)) = (m.image_bytes, m.stored_bytes) {
            println!(
                "    {:<14} {:.1} MiB raw, {:.1} MiB stored",
                "image",
                raw as f64 / 1048576.0,
                stored as f64 / 1048576.0
            );
        }
        if let Some(s) = &m.tti {
            let ratio = base
                .filter(|b| *b > 0.0)
                .map(|b| format!("  ({:.2}x baseline)", s.median / b))
                .unwrap_or_default();
            println!("    {:<14} {}{ratio}", "TTI", fmt_stats(s));
        }
    }
}

/// Builds the report of a benchmark run, prints it and writes its JSON to `json`.
pub fn publish(
    bench: &str,
    bundle: &Bundle,
    opts: &board::RunOptions,
    runs: usize,
    methods: Vec<MethodResult>,
    json: Option<&std::path::Path>,
) -> Result<BenchReport> {
    let report = BenchReport {
        bench: bench.into(),
        workload: bundle.workload.name.clone(),
        kernel: bundle.kernel.release.clone(),
        accel: format!("{:?}", opts.accel).to_lowercase(),
        mem_mib: opts.mem_mib,
        finished_unix: now_unix(),
        runs,
        methods,
    };
    print_report(&report);
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

fn fmt_stats(s: &Stats) -> String {
    format!(
        "median {:7.3} s  [min {:.3} .. max {:.3}]  n={}",
        s.median, s.min, s.max, s.n
    )
}

pub(crate) fn progress(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb.set_message(what.to_string());
    pb
}

pub(crate) fn bundle_or_build(name: &str) -> Result<Bundle> {
    match resolve_bundle(name) {
        Ok(b) => Ok(b),
        Err(_) if board::Workload::builtin(name).is_ok() => {
            eprintln!("snapboot: building the `{name}` bundle first");
            build_builtin(name)
        }
        Err(e) => Err(e),
    }
}

pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `snapboot bench cold`: N cold boots with the workload's probe.
pub fn cold(a: ColdArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let bundle = bundle_or_build(&a.workload)?;
    let opts = a.board.to_run_options(&bundle)?;
    let pb = progress(a.runs as u64, "cold boots");
    let mut timelines = Vec::new();
    for i in 0..a.runs {
        let res = run_probe(&bundle, &opts, &bundle.workload.probe)?;
        if let Some(e) = res.error {
            pb.finish_and_clear();
            bail!("cold boot {} of {} failed: {e}", i + 1, a.runs);
        }
        timelines.push(res.timeline);
        pb.inc(1);
    }
    pb.finish_and_clear();
    if let Some(p) = &a.analyze {
        let runs = timelines
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("cold #{}", i + 1), t.clone()))
            .collect();
        crate::analyzecmd::report_runs(runs, p)?;
    }
    publish(
        "cold",
        &bundle,
        &opts,
        a.runs,
        vec![summarize("cold", &timelines)],
        a.json.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `snapboot trace`: timestamps a real board's serial console from the moment it is opened
/// (power the board on right after starting it), until `until` matches or the timeout.
pub fn trace(
    tty: PathBuf,
    baud: u32,
    until: Option<String>,
    timeout: u64,
    out: Option<PathBuf>,
) -> Result<ExitCode> {
    let until = regex::Regex::new(
        &until.unwrap_or_else(|| regex::escape(&boottrace::marker("ready", None))),
    )
    .context("--until")?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&tty)
        .with_context(|| format!("opening {}", tty.display()))?;
    ondevice::serial::make_raw(&file, baud)
        .with_context(|| format!("configuring {}", tty.display()))?;
    let t0 = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut reader = file;
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let mut rec = LineRecorder::new();
    let mut tl = Timeline::new(tty.display().to_string());
    let deadline = t0 + Duration::from_secs(timeout);
    let mut outcome = Outcome::Timeout {
        reason: format!("no line matched {:?} within {timeout} s", until.as_str()),
    };
    'outer: while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok((at, bytes)) = rx.recv_timeout(left) else {
            break;
        };
        for line in rec.feed(at.duration_since(t0).as_secs_f64(), &bytes) {
            println!("{:10.6} | {}", line.t, line.text);
            let hit = until.is_match(&line.text);
            let t = line.t;
            tl.push_line(line);
            if hit {
                tl.push_event(MilestoneKind::ProbeAnswered, t, None);
                tl.tti = Some(t);
                outcome = Outcome::Answered;
                break 'outer;
            }
        }
    }
    tl.outcome = outcome;
    tl.finalize();
    println!("{}", tl.summary_text());
    if let Some(p) = out {
        std::fs::write(&p, serde_json::to_string_pretty(&tl)?)?;
    }
    Ok(if tl.tti.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
