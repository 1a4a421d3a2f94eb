//! Reading and writing timelines as text. Three formats are understood:
//!
//! * JSON, the serde form of [`Timeline`] ([`Timeline::from_json`], [`Timeline::to_json`]);
//! * the stamped text format written by [`Timeline::to_stamped_text`], grabserial-like: one
//!   `12.345678 | <text>` line per console line, `12.345678 @ <kind> [detail]` for milestones
//!   that no console line announces (probes, inferred kernel start), and `# key: value`
//!   headers for the source, outcome and TTI;
//! * a raw console log without host timestamps (a serial capture, `dmesg` or `dmesg -r`
//!   output) via [`Timeline::from_console_log`], where printk timestamps stand in for host
//!   time.
//!
//! [`Timeline::parse`] picks the format by looking at the text.

use std::fmt::Write as _;
use thiserror::Error;

use crate::recorder::{ConsoleLine, LineRecorder};
use crate::timeline::{Milestone, MilestoneKind, Timeline};

/// First line of the stamped text format.
const STAMPED_HEADER: &str = "# boottrace stamped v1";

/// Why a timeline could not be read.
#[derive(Debug, Error)]
pub enum ParseError {
    /// The JSON is malformed or does not match the [`Timeline`] contract.
    #[error("invalid timeline JSON")]
    Json(#[from] serde_json::Error),
    /// A line of the stamped text format is malformed.
    #[error("stamped text line {line}: {reason}")]
    Stamped {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

/// One parsed line of the stamped format.
enum Stamped<'a> {
    Line(f64, &'a str),
    Event(f64, MilestoneKind, Option<String>),
}

/// Parses `T | text` or `T @ kind [detail]`; `Err` carries the reason.
fn parse_stamped_line(line: &str) -> Result<Stamped<'_>, String> {
    let line = line.trim_start();
    let (ts, rest) = line
        .split_once(' ')
        .ok_or_else(|| "expected `<seconds> | <text>` or `<seconds> @ <kind>`".to_string())?;
    let t: f64 = ts
        .parse()
        .map_err(|e| format!("bad timestamp {ts:?}: {e}"))?;
    if rest == "|" {
        return Ok(Stamped::Line(t, ""));
    }
    if let Some(text) = rest.strip_prefix("| ") {
        return Ok(Stamped::Line(t, text));
    }
    if let Some(event) = rest.strip_prefix("@ ") {
        let (name, detail) = event.split_once(' ').unwrap_or((event, ""));
        let kind =
            MilestoneKind::from_name(name).ok_or_else(|| format!("unknown milestone {name:?}"))?;
        let detail = Some(detail.trim())
            .filter(|d| !d.is_empty())
            .map(str::to_string);
        return Ok(Stamped::Event(t, kind, detail));
    }
    Err(format!(
        "expected `|` or `@` after the timestamp, found {rest:?}"
    ))
}

impl Timeline {
    /// Reads a raw console log that has no host timestamps. Lines are cleaned as by
    /// [`LineRecorder`]; a line's time is its printk timestamp, or else that of the last line
    /// that had one (0 before the first). The result is finalized; its source is
    /// `"console log"`.
    pub fn from_console_log(text: &str) -> Timeline {
        let mut rec = LineRecorder::new();
        let mut lines = rec.feed(0.0, text.as_bytes());
        lines.extend(rec.finish(0.0));
        let mut tl = Timeline::new("console log");
        let mut last = 0.0;
        for mut line in lines {
            if let Some(ts) = line.kernel_ts {
                last = ts;
            }
            line.t = last;
            tl.push_line(line);
        }
        tl.finalize();
        tl
    }

    /// Reads the stamped text format written by [`to_stamped_text`](Self::to_stamped_text).
    /// Milestone lines take precedence over milestones the console lines announce; the result
    /// is finalized.
    pub fn from_stamped_text(text: &str) -> Result<Timeline, ParseError> {
        let mut tl = Timeline::new("");
        let mut lines = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let err = |reason: String| ParseError::Stamped {
                line: i + 1,
                reason,
            };
            if raw.trim().is_empty() {
                continue;
            }
            if let Some(header) = raw.strip_prefix('#') {
                let Some((key, value)) = header.trim_start().split_once(": ") else {
                    continue;
                };
                match key {
                    "source" => tl.source = value.to_string(),
                    "outcome" => {
                        tl.outcome = serde_json::from_str(value)
                            .map_err(|e| err(format!("bad outcome: {e}")))?;
                    }
                    "tti" => {
                        let tti = value
                            .trim()
                            .parse()
                            .map_err(|e| err(format!("bad TTI: {e}")))?;
                        tl.tti = Some(tti);
                    }
                    _ => {}
                }
                continue;
            }
            match parse_stamped_line(raw).map_err(err)? {
                Stamped::Line(t, text) => lines.push(ConsoleLine::new(t, text)),
                Stamped::Event(t, kind, detail) => tl.push_event(kind, t, detail),
            }
        }
        tl.push_lines(lines);
        tl.finalize();
        Ok(tl)
    }

    /// Reads a timeline from its JSON form, as is (not re-finalized).
    pub fn from_json(text: &str) -> Result<Timeline, ParseError> {
        Ok(serde_json::from_str(text)?)
    }

    /// The JSON form, pretty-printed. Non-finite times would be written as `null` and not
    /// read back.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// Reads any of the three formats: JSON if the text starts with `{`, stamped text if it
    /// carries the stamped header or its first line parses as a stamped line, else a raw
    /// console log.
    pub fn parse(text: &str) -> Result<Timeline, ParseError> {
        if text.trim_start().starts_with('{') {
            return Self::from_json(text);
        }
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        if first.starts_with(STAMPED_HEADER) || parse_stamped_line(first).is_ok() {
            return Self::from_stamped_text(text);
        }
        Ok(Self::from_console_log(text))
    }

    /// Writes the stamped text format: headers, then console lines as `T | text`, with the
    /// milestones that no line announces interleaved as `T @ kind [detail]`. Times are
    /// written with microsecond precision.
    pub fn to_stamped_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{STAMPED_HEADER}");
        let source = self.source.replace(['\n', '\r'], " ");
        let _ = writeln!(out, "# source: {source}");
        if let Ok(outcome) = serde_json::to_string(&self.outcome) {
            let _ = writeln!(out, "# outcome: {outcome}");
        }
        if let Some(tti) = self.tti {
            let _ = writeln!(out, "# tti: {tti:.6}");
        }
        let mut from_lines = Timeline::new("");
        from_lines.push_lines(self.lines.iter().cloned());
        let mut events: Vec<&Milestone> = self
            .milestones
            .iter()
            .filter(|m| from_lines.milestone(m.kind).map(|l| l.t) != Some(m.t))
            .collect();
        events.sort_by(|a, b| a.t.total_cmp(&b.t));
        let mut events = events.into_iter().peekable();
        let write_event = |out: &mut String, m: &Milestone| {
            let line = format!(
                "{:.6} @ {} {}",
                m.t,
                m.kind,
                m.detail.as_deref().unwrap_or("")
            );
            let _ = writeln!(out, "{}", line.trim_end());
        };
        for line in &self.lines {
            while let Some(m) = events.next_if(|m| m.t < line.t) {
                write_event(&mut out, m);
            }
            let _ = writeln!(out, "{:.6} | {}", line.t, line.text);
        }
        for m in events {
            write_event(&mut out, m);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Outcome;
    use MilestoneKind as K;

    const LOG: &str = "\
SeaBIOS (version 1.16.2-debian-1.16.2-1)\r
\x1b[2J\x1b[01;01HBooting from ROM...\r
[    0.000000] Linux version 6.1.0-56-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14+deb12u1) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-2 (2026-10-01)\r
[    0.000000] Command line: console=ttyS0 quiet\r
[    1.523339] Run /init as init process\r
snapboot: @init\r
[    1.701000] EXT4-fs (vda): mounted filesystem with ordered data mode.\r
<5>[    1.702000] snapboot: @root-mounted\r
snapboot: @app-start /srv/app\r
app listening on :8080\r
snapboot: @ready\r
";

    fn approx_eq(a: &Timeline, b: &Timeline) {
        assert_eq!(a.source, b.source);
        assert_eq!(a.outcome, b.outcome);
        assert_eq!(a.lines.len(), b.lines.len());
        for (x, y) in a.lines.iter().zip(&b.lines) {
            assert_eq!(x.text, y.text);
            assert_eq!(x.kernel_ts, y.kernel_ts);
            assert!((x.t - y.t).abs() < 1e-6, "{} vs {}", x.t, y.t);
        }
        assert_eq!(a.milestones.len(), b.milestones.len(), "{a:?}\n{b:?}");
        for (x, y) in a.milestones.iter().zip(&b.milestones) {
            assert_eq!((x.kind, &x.detail), (y.kind, &y.detail));
            assert!((x.t - y.t).abs() < 1e-6);
        }
        match (a.tti, b.tti) {
            (Some(x), Some(y)) => assert!((x - y).abs() < 1e-6),
            (x, y) => assert_eq!(x, y),
        }
    }

    #[test]
    fn console_log_uses_kernel_time() {
        let tl = Timeline::from_console_log(LOG);
        assert_eq!(tl.lines.len(), 11);
        assert_eq!(tl.lines[1].text, "Booting from ROM...");
        assert_eq!(tl.lines[0].t, 0.0);
        assert_eq!(tl.first(K::KernelStart), Some(0.0));
        assert_eq!(tl.first(K::InitStart), Some(1.523339));
        assert_eq!(tl.first(K::RootMounted), Some(1.702));
        assert_eq!(tl.first(K::AppReady), Some(1.702));
        assert_eq!(
            tl.milestone(K::AppStart).and_then(|m| m.detail.as_deref()),
            Some("/srv/app")
        );
        assert_eq!(tl.outcome, Outcome::Ready);
        assert_eq!(tl.check_order(), Ok(()));
    }

    #[test]
    fn dmesg_raw_and_unterminated_last_line() {
        let tl = Timeline::from_console_log(
            "<6>[    0.000000] Linux version 6.1.0 (x)\n<0>[    2.1] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100",
        );
        assert_eq!(tl.first(K::KernelPanic), Some(2.1));
        assert!(matches!(tl.outcome, Outcome::Panic { .. }));
    }

    #[test]
    fn stamped_roundtrip() {
        let mut tl = Timeline::new("qemu board\nx86_64");
        let mut rec = LineRecorder::new();
        let mut t = 0.25;
        for chunk in LOG.as_bytes().chunks(37) {
            tl.push_lines(rec.feed(t, chunk));
            t += 0.125;
        }
        tl.push_lines(rec.finish(t));
        tl.push_event(K::ProbeSent, 2.5, None);
        tl.push_event(K::ProbeAnswered, 2.75, Some("HTTP/1.1 200 OK".into()));
        // An event that also appears later on the console: the event counts.
        tl.push_event(K::PowerOff, 3.0, Some("qemu exited".into()));
        tl.push_line(ConsoleLine::new(3.5, "[    3.000000] reboot: Power down"));
        tl.finalize();
        assert_eq!(tl.outcome, Outcome::Answered);

        let text = tl.to_stamped_text();
        assert!(text.starts_with("# boottrace stamped v1\n# source: qemu board x86_64\n"));
        assert!(text.contains("\n2.500000 @ probe_sent\n"), "{text}");
        assert!(text.contains("| [    1.523339] Run /init as init process\n"));
        assert!(!text.contains("@ init_start"));
        let back = Timeline::from_stamped_text(&text).expect("parse stamped");
        let mut expected = tl.clone();
        expected.source = "qemu board x86_64".into();
        approx_eq(&back, &expected);
        let again = Timeline::parse(&text).expect("auto-detect stamped");
        approx_eq(&again, &expected);
    }

    #[test]
    fn json_roundtrip_and_autodetect() {
        let mut tl = Timeline::from_console_log(LOG);
        tl.set_outcome(Outcome::Timeout {
            reason: "probe never answered".into(),
        });
        let json = tl.to_json().expect("serialize");
        assert!(json.contains(r#""kind": "timeout""#), "{json}");
        let back = Timeline::from_json(&json).expect("parse json");
        assert_eq!(back, tl);
        assert_eq!(Timeline::parse(&json).expect("auto-detect json"), tl);
        assert_eq!(
            Timeline::parse(LOG).expect("auto-detect log").lines.len(),
            11
        );
    }

    #[test]
    fn json_minimal_contract() {
        let tl = Timeline::from_json(r#"{"source":"s"}"#).expect("defaults");
        assert_eq!(tl, Timeline::new("s"));
        assert!(matches!(Timeline::from_json("{"), Err(ParseError::Json(_))));
    }

    #[test]
    fn stamped_errors_name_the_line() {
        let err = Timeline::from_stamped_text("# boottrace stamped v1\n1.0 | ok\nabc | x\n").err();
        let msg = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("stamped text line 3: bad timestamp \"abc\""),
            "{msg}"
        );
        let err = Timeline::from_stamped_text("1.0 @ nonsense\n").err();
        assert!(matches!(err, Some(ParseError::Stamped { line: 1, .. })));
        let err = Timeline::from_stamped_text("1.0 ? x\n").err();
        assert!(matches!(err, Some(ParseError::Stamped { line: 1, .. })));
        let err = Timeline::from_stamped_text("# outcome: {bad\n").err();
        assert!(matches!(err, Some(ParseError::Stamped { line: 1, .. })));
    }

    #[test]
    fn empty_stamped_line_text() {
        let tl = Timeline::from_stamped_text("1.5 |\n2.0 | [    1.000000] x\n").expect("parse");
        assert_eq!(tl.lines[0].text, "");
        assert_eq!(tl.lines[1].kernel_ts, Some(1.0));
        assert_eq!(tl.first(K::KernelStart), Some(1.0));
    }
}
