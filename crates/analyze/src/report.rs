//! The entry point for the CLI: [`analyze_files`] reads boot logs (any format
//! [`Timeline::parse`] understands) and optionally a kernel config, analyses every log, runs the
//! advisor on each and checks the config. The [`Report`] renders as a human summary
//! ([`Report::to_text`]), JSON ([`Report::to_json`]), a standalone SVG boot graph
//! ([`Report::to_svg`]) or the interactive HTML page ([`Report::to_html`]); all boots share
//! one time axis.

use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use boottrace::Timeline;

use crate::advisor::{advise, total_saving, Finding};
use crate::analysis::{Analysis, AnalysisOptions};
use crate::error::AnalyzeError;
use crate::html::{self, HtmlRun};
use crate::kconfig::{check_config, load_config, KernelCheck, KernelConfig, Verdict};
use crate::svg::{self, SvgOptions};

/// One analysed boot and the advisor's findings for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The analysis.
    pub analysis: Analysis,
    /// The findings, largest saving first.
    pub findings: Vec<Finding>,
}

/// Everything the analysis of one or more boots found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The boots, in the order given.
    pub runs: Vec<RunReport>,
    /// Kernel config checks (empty without a config).
    pub kernel_checks: Vec<KernelCheck>,
}

/// The name a log file is shown under: its file name.
fn display_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Reads and analyses boot logs; `config` is a kernel `.config` (plain or gzip) to check and
/// to inform the advisor. Without a config path no config is read: call
/// [`load_config`]`(None)` and [`Report::from_timelines`] to use the running kernel's.
pub fn analyze_files(paths: &[PathBuf], config: Option<&Path>) -> Result<Report, AnalyzeError> {
    if paths.is_empty() {
        return Err(AnalyzeError::NoInput);
    }
    let config = config.map(|p| load_config(Some(p))).transpose()?;
    let mut timelines = Vec::with_capacity(paths.len());
    for path in paths {
        let text = std::fs::read(path).map_err(|source| AnalyzeError::Read {
            path: path.clone(),
            source,
        })?;
        let text = String::from_utf8_lossy(&text);
        let tl = Timeline::parse(&text).map_err(|source| AnalyzeError::Parse {
            path: path.clone(),
            source,
        })?;
        timelines.push((display_name(path), tl));
    }
    Ok(Report::from_timelines(timelines, config.as_ref()))
}

/// Analyses log texts given as `(name, text)` pairs (see [`analyze_files`]).
pub fn analyze_texts(
    logs: &[(String, String)],
    config: Option<&KernelConfig>,
) -> Result<Report, AnalyzeError> {
    if logs.is_empty() {
        return Err(AnalyzeError::NoInput);
    }
    let mut timelines = Vec::with_capacity(logs.len());
    for (name, text) in logs {
        let tl = Timeline::parse(text).map_err(|source| AnalyzeError::Parse {
            path: PathBuf::from(name),
            source,
        })?;
        timelines.push((name.clone(), tl));
    }
    Ok(Report::from_timelines(timelines, config))
}

impl Report {
    /// Analyses timelines, each shown under its name, with the default options.
    pub fn from_timelines(
        timelines: impl IntoIterator<Item = (String, Timeline)>,
        config: Option<&KernelConfig>,
    ) -> Self {
        let runs = timelines
            .into_iter()
            .map(|(name, tl)| {
                let mut analysis = Analysis::from_timeline_with(&tl, &AnalysisOptions::default());
                analysis.source = name;
                let findings = advise(&analysis, config);
                RunReport { analysis, findings }
            })
            .collect();
        Self {
            runs,
            kernel_checks: config.map(check_config).unwrap_or_default(),
        }
    }

    /// The analyses, in order.
    pub fn analyses(&self) -> Vec<&Analysis> {
        self.runs.iter().map(|r| &r.analysis).collect()
    }

    /// The self-contained interactive HTML page.
    pub fn to_html(&self) -> String {
        let runs: Vec<HtmlRun<'_>> = self
            .runs
            .iter()
            .map(|r| HtmlRun {
                analysis: &r.analysis,
                findings: &r.findings,
            })
            .collect();
        html::render(&runs, &self.kernel_checks)
    }

    /// The standalone SVG boot graph.
    pub fn to_svg(&self) -> String {
        svg::render(&self.analyses(), &SvgOptions::default())
    }

    /// The JSON form (console lines left out).
    pub fn to_json(&self) -> Result<String, AnalyzeError> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// A human summary: per boot its phases, a restore's load-phase throughput, slowest
    /// initcalls, gaps, console cost and the findings with their savings; then the kernel
    /// checks that are not ok.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for r in &self.runs {
            run_text(&mut out, r);
        }
        if !self.kernel_checks.is_empty() {
            let blockers = self
                .kernel_checks
                .iter()
                .filter(|c| c.verdict == Verdict::Blocker)
                .count();
            let _ = writeln!(
                out,
                "kernel config: {} checks, {blockers} blocker(s) for snapshot boot",
                self.kernel_checks.len()
            );
            for c in self
                .kernel_checks
                .iter()
                .filter(|c| c.verdict != Verdict::Ok)
            {
                let _ = writeln!(
                    out,
                    "  {:<7} {} ({}): {}",
                    c.verdict, c.option, c.value, c.reason
                );
            }
        }
        out
    }
}

fn run_text(out: &mut String, r: &RunReport) {
    let a = &r.analysis;
    let tti = a
        .tti
        .map_or_else(|| "-".to_string(), |t| format!("{t:.3} s"));
    let _ = writeln!(out, "== {}  (outcome: {}, TTI {tti})", a.source, a.outcome);
    let yn = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "kernel {}; printk time: {}; host stamps: {}; initcall_debug: {}",
        a.kernel_version.as_deref().unwrap_or("unknown"),
        yn(a.has_printk_time),
        yn(a.has_host_stamps),
        yn(a.has_initcall_debug)
    );
    if !a.phases.is_empty() {
        let _ = writeln!(out, "phases:");
        for p in &a.phases {
            let indent = if p.kind.is_detail() { "    " } else { "  " };
            let _ = writeln!(
                out,
                "{indent}{:<17} {:>9.3} → {:>9.3}  {:>8.3} s",
                p.kind.as_str(),
                p.start,
                p.end,
                p.duration()
            );
        }
    }
    crate::throughput::text(out, &a.throughput);
    if a.has_initcall_debug {
        let mut top: Vec<_> = a.initcalls.iter().collect();
        top.sort_by(|x, y| y.duration.total_cmp(&x.duration));
        let _ = writeln!(out, "slowest initcalls (of {}):", a.initcalls.len());
        for c in top.into_iter().take(5) {
            let kind = c
                .module
                .as_ref()
                .map_or_else(|| "built-in".to_string(), |m| format!("[{m}]"));
            let _ = writeln!(
                out,
                "  {:<28} {:>9.3} ms  {kind}, pid {}",
                c.name,
                c.duration * 1e3,
                c.pid
            );
        }
    } else {
        let _ = writeln!(
            out,
            "no initcall_debug output (boot with initcall_debug to time every initcall)"
        );
    }
    let restores = crate::devpm::restore_by_device(&a.device_pm);
    if !restores.is_empty() {
        let total: f64 = restores.iter().map(|d| d.duration).sum();
        let span = crate::devpm::restore_span(&a.device_pm).map_or_else(String::new, |s| {
            format!(", {:.3} ms from first to last", s * 1e3)
        });
        let _ = writeln!(
            out,
            "device restore (pm_print_times): {} devices, {:.3} ms in their callbacks{span}; slowest:",
            restores.len(),
            total * 1e3
        );
        for d in restores.iter().take(5) {
            let failed = d
                .failed
                .map_or_else(String::new, |r| format!(", returned {r}"));
            let _ = writeln!(
                out,
                "  {:<28} {:>9.3} ms  {}{failed}",
                d.who,
                d.duration * 1e3,
                d.callbacks.join(" ")
            );
        }
    }
    if let Some(g) = a
        .gaps
        .iter()
        .max_by(|x, y| x.duration().total_cmp(&y.duration()))
    {
        let _ = writeln!(
            out,
            "gaps ≥ {:.2} s: {} (longest {:.3} s at {:.3} s after \"{}\")",
            a.gap_threshold,
            a.gaps.len(),
            g.duration(),
            g.start,
            g.before
        );
    }
    if let Some(c) = &a.console {
        let _ = writeln!(
            out,
            "console: {} at {} baud{}: {} kernel lines, {} bytes = {:.2} s of UART time{}",
            c.console.device,
            c.console.baud,
            if c.quiet { ", quiet" } else { "" },
            c.kernel_lines,
            c.kernel_bytes,
            c.kernel_seconds,
            if c.virtual_uart {
                " (emulated UART)"
            } else {
                ""
            }
        );
    }
    if r.findings.is_empty() {
        let _ = writeln!(out, "findings: none\n");
        return;
    }
    let _ = writeln!(
        out,
        "findings (known savings {:.2} s, may overlap):",
        total_saving(&r.findings)
    );
    for f in &r.findings {
        let saving = f.saving_s.map_or_else(
            || "saving not measurable here".to_string(),
            |s| format!("saves {s:.3} s"),
        );
        let _ = writeln!(out, "  [{}] {} — {saving}", f.rule, f.title);
        let _ = writeln!(out, "      evidence: {}", f.evidence);
        let _ = writeln!(out, "      fix:      {}", f.fix);
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_input_is_an_error() {
        assert!(matches!(
            analyze_files(&[], None),
            Err(AnalyzeError::NoInput)
        ));
        assert!(matches!(
            analyze_texts(&[], None),
            Err(AnalyzeError::NoInput)
        ));
        let err = analyze_files(&[PathBuf::from("/nonexistent/boot.log")], None).err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("cannot read /nonexistent/boot.log"),
            "{msg}"
        );
    }

    #[test]
    fn bad_json_names_the_file() {
        let err = analyze_texts(&[("x.json".into(), "{ nope".into())], None).err();
        assert!(matches!(err, Some(AnalyzeError::Parse { .. })));
    }

    #[test]
    fn text_summary_mentions_findings() {
        let log = "[    0.000000] Linux version 5.4 (x)\n[    0.000000] Command line: console=ttyS0,115200 rootdelay=3\n[    0.000100] Calibrating delay loop... 100.00 BogoMIPS (lpj=500000)\n[    0.250000] pid_max: default: 32768\n";
        let report = analyze_texts(&[("b.log".into(), log.into())], None).expect("report");
        let text = report.to_text();
        assert!(
            text.starts_with("== b.log  (outcome: incomplete, TTI -)"),
            "{text}"
        );
        assert!(
            text.contains(
                "[lpj] The kernel calibrates its delay loop at every boot — saves 0.250 s"
            ),
            "{text}"
        );
        assert!(text.contains("[probe_delay]"), "{text}");
        assert!(text.contains("no initcall_debug output"));
        let json = report.to_json().expect("json");
        assert!(json.contains("\"rule\": \"lpj\""));
    }

    /// A restore's console with the device's throughput line: the text and the HTML page
    /// show its stages, its bound and its share of large reads beside the restore's phases.
    #[test]
    fn a_restore_s_throughput_line_is_in_the_text_and_the_page() {
        let load = boottrace::report::Throughput {
            read_bytes: 40_000_000,
            requests: 20,
            large_bytes: 38_000_000,
            decoded_bytes: 100_000_000,
            placed_bytes: 120_000_000,
            read_s: 0.5,
            check_s: 0.4,
            decode_s: 1.0,
            place_s: 0.2,
            wall_s: 1.0,
            workers: 2,
        };
        let marker = boottrace::Marker::Throughput.line(Some(&load.line()));
        let log = format!(
            "[    0.000000] Linux version 6.1.0 (x)\n[    0.500000] Run /init as init process\n\
             snapboot: @resume-start /dev/vdb\n\
             snapboot: @resume-loaded 23014 pages (89.9 MiB)\n{marker}\nsnapboot: @restored\n"
        );
        let report = analyze_texts(&[("restore.log".into(), log)], None).expect("report");
        let text = report.to_text();
        assert!(
            text.contains("load phase at ")
                && text.contains(
                    "bound by cpu\n  read        40.0 MB in 20 requests (95% in >= 1 MiB)"
                ),
            "{text}"
        );
        let page = report.to_html();
        assert!(page.contains("<table class=\"throughput\">"), "{page}");
        assert!(
            page.contains("<tr><td><i>load phase MB/s</i></td><td class=\"num\">120.0</td></tr>"),
            "{page}"
        );
        assert!(
            page.contains("<tr><td><i>load phase bound by</i></td><td class=\"num\">cpu</td></tr>"),
            "{page}"
        );
        assert!(
            !page.contains("medium baseline MB/s"),
            "no baseline in this log"
        );
        let json = report.to_json().expect("json");
        assert!(json.contains("\"bound\": \"cpu\""), "{json}");
    }
}
