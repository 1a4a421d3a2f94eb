//! A restore's load phase as the device measured it: the `throughput` marker every restoring
//! path prints after loading the image (stage by stage: read, check, decode, place; the
//! share read in requests of at least 1 MiB; which stage bounds the phase), and the
//! `medium-baseline` marker of a boot that only read the image's extent on the store
//! (`snapboot.baseline=medium`). [`find`] reads them from an analysed boot's lines; the text
//! and HTML reports show them beside the restore's phases. MB are 10^6 bytes, as the device
//! prints them.

use std::fmt::Write as _;

use boottrace::report::{line_throughput, Throughput};
use boottrace::Marker;
use serde::Serialize;

/// Which measurement a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputKind {
    /// A restore's load phase (marker `throughput`).
    Load,
    /// A plain sequential read of the image's extent (marker `medium-baseline`).
    MediumBaseline,
}

impl ThroughputKind {
    /// How the reports name it.
    pub fn title(self) -> &'static str {
        match self {
            Self::Load => "load phase",
            Self::MediumBaseline => "medium baseline",
        }
    }
}

/// One throughput line of the console, with the rates the reports show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputLine {
    /// When it was printed, seconds.
    pub t: f64,
    /// Which measurement.
    pub kind: ThroughputKind,
    /// The bytes, seconds and CPUs as printed.
    pub throughput: Throughput,
    /// The stage that bounds it: `medium`, `cpu` or `memory`.
    pub bound: &'static str,
    /// Share of the stored bytes read in requests of at least 1 MiB, 0 to 1.
    pub large_share: f64,
    /// MB/s of pages loaded over the whole phase.
    pub load_mbps: f64,
    /// MB/s of stored bytes over the whole phase (the medium baseline's rate, for one).
    pub stored_mbps: f64,
    /// MB/s the medium delivered while a read was in flight.
    pub medium_mbps: f64,
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

impl ThroughputLine {
    /// The line for `throughput`, printed at `t` with `marker`; `None` for another marker.
    pub fn new(t: f64, marker: Marker, throughput: Throughput) -> Option<Self> {
        let kind = match marker {
            Marker::Throughput => ThroughputKind::Load,
            Marker::MediumBaseline => ThroughputKind::MediumBaseline,
            _ => return None,
        };
        let secs = if throughput.wall_s > 0.0 {
            throughput.wall_s
        } else {
            throughput.read_s
        };
        Some(Self {
            t,
            kind,
            bound: throughput.bound().word(),
            large_share: throughput.large_share(),
            load_mbps: throughput.load_mbps(),
            stored_mbps: mbps(throughput.read_bytes, secs),
            medium_mbps: throughput.medium_mbps(),
            throughput,
        })
    }
}

/// Every throughput line among `lines` (each its time and message), in log order.
pub fn find<'a>(lines: impl IntoIterator<Item = (f64, &'a str)>) -> Vec<ThroughputLine> {
    lines
        .into_iter()
        .filter_map(|(at, message)| {
            let (m, t) = line_throughput(message)?;
            ThroughputLine::new(at, m, t)
        })
        .collect()
}

/// The share of the medium's baseline a load phase's stored bytes ran at, when `lines`
/// hold both (the last of each).
pub fn of_medium(lines: &[ThroughputLine]) -> Option<f64> {
    let last = |k| lines.iter().rev().find(|l| l.kind == k);
    let load = last(ThroughputKind::Load)?;
    let base = last(ThroughputKind::MediumBaseline)?;
    (base.stored_mbps > 0.0).then(|| load.stored_mbps / base.stored_mbps)
}

/// The text report's lines for `lines` (nothing without any).
pub fn text(out: &mut String, lines: &[ThroughputLine]) {
    for l in lines {
        let t = &l.throughput;
        let mb = |b: u64| b as f64 / 1e6;
        let _ = match l.kind {
            ThroughputKind::Load => writeln!(
                out,
                "load phase at {:.3} s: {:.1} MB/s loaded ({:.3} s wall, {} CPU(s)), \
                 bound by {}\n  \
                 read    {:>8.1} MB in {} requests ({:.0}% in >= 1 MiB), {:.3} s at {:.1} MB/s\n  \
                 check   {:>8.1} MB in {:.3} s at {:.1} MB/s per CPU\n  \
                 decode  {:>8.1} MB in {:.3} s at {:.1} MB/s per CPU\n  \
                 place   {:>8.1} MB in {:.3} s at {:.1} MB/s",
                l.t,
                l.load_mbps,
                t.wall_s,
                t.workers,
                l.bound,
                mb(t.read_bytes),
                t.requests,
                l.large_share * 100.0,
                t.read_s,
                l.medium_mbps,
                mb(t.read_bytes),
                t.check_s,
                t.check_mbps(),
                mb(t.decoded_bytes),
                t.decode_s,
                t.decode_mbps(),
                mb(t.placed_bytes),
                t.place_s,
                t.place_mbps()
            ),
            ThroughputKind::MediumBaseline => writeln!(
                out,
                "medium baseline at {:.3} s: {:.1} MB in {} requests ({:.0}% in >= 1 MiB) in \
                 {:.3} s: {:.1} MB/s sequential",
                l.t,
                mb(t.read_bytes),
                t.requests,
                l.large_share * 100.0,
                t.wall_s.max(t.read_s),
                l.stored_mbps
            ),
        };
    }
    if let Some(f) = of_medium(lines) {
        let _ = writeln!(
            out,
            "the load phase read its stored bytes at {:.0}% of the medium baseline",
            f * 100.0
        );
    }
}

/// The HTML report's table for `lines` (nothing without any).
pub fn html(h: &mut String, lines: &[ThroughputLine]) {
    if lines.is_empty() {
        return;
    }
    h.push_str(
        "<table class=\"throughput\"><tr><th>throughput (MB = 10<sup>6</sup> bytes)</th>\
         <th>MB</th><th>s</th><th>MB/s</th><th>notes</th></tr>\n",
    );
    for l in lines {
        let t = &l.throughput;
        let mb = |b: u64| b as f64 / 1e6;
        let row = |h: &mut String, stage: &str, mbs: f64, s: f64, rate: f64, note: &str| {
            let _ = writeln!(
                h,
                "<tr><td>{stage}</td><td class=\"num\">{mbs:.1}</td><td class=\"num\">{s:.3}</td>\
                 <td class=\"num\">{rate:.1}</td><td>{note}</td></tr>"
            );
        };
        let _ = writeln!(
            h,
            "<tr data-kind=\"{}\"><th colspan=\"5\">{} at {:.3} s: bound by <b>{}</b>, {:.0}% \
             read in requests of &ge; 1 MiB, {} CPU(s)</th></tr>",
            // Fixed words: nothing to escape.
            match l.kind {
                ThroughputKind::Load => "load",
                ThroughputKind::MediumBaseline => "medium_baseline",
            },
            l.kind.title(),
            l.t,
            l.bound,
            l.large_share * 100.0,
            t.workers
        );
        let reads = format!("{} requests", t.requests);
        row(h, "read", mb(t.read_bytes), t.read_s, l.medium_mbps, &reads);
        if l.kind == ThroughputKind::MediumBaseline {
            let secs = t.wall_s.max(t.read_s);
            row(
                h,
                "sequential read, wall",
                mb(t.read_bytes),
                secs,
                l.stored_mbps,
                "",
            );
            continue;
        }
        let per_cpu = "per CPU";
        row(
            h,
            "check",
            mb(t.read_bytes),
            t.check_s,
            t.check_mbps(),
            per_cpu,
        );
        let decoded = mb(t.decoded_bytes);
        row(h, "decode", decoded, t.decode_s, t.decode_mbps(), per_cpu);
        row(
            h,
            "place",
            mb(t.placed_bytes),
            t.place_s,
            t.place_mbps(),
            "",
        );
        row(
            h,
            "loaded, wall",
            mb(t.placed_bytes),
            t.wall_s,
            l.load_mbps,
            "",
        );
    }
    if let Some(f) = of_medium(lines) {
        let _ = writeln!(
            h,
            "<tr><td colspan=\"5\">the load phase read its stored bytes at <b>{:.0}%</b> of the \
             medium baseline</td></tr>",
            f * 100.0
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::Analysis;
    use boottrace::{ConsoleLine, Timeline};

    pub(crate) fn load() -> Throughput {
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
            wall_s: 1.0,
            workers: 2,
        }
    }

    pub(crate) fn baseline() -> Throughput {
        Throughput {
            read_bytes: 40_000_000,
            requests: 39,
            large_bytes: 40_000_000,
            read_s: 0.25,
            wall_s: 0.25,
            workers: 1,
            ..Throughput::default()
        }
    }

    fn analysed(lines: &[(f64, String)]) -> Analysis {
        let mut tl = Timeline::new("restore");
        tl.push_lines(lines.iter().map(|(t, l)| ConsoleLine::new(*t, l)));
        tl.finalize();
        Analysis::from_timeline(&tl)
    }

    #[test]
    fn both_markers_are_found_with_their_time_and_nothing_else() {
        let a = analysed(&[
            (1.0, "snapboot: @resume-start /dev/vdb".into()),
            (
                1.6,
                format!(
                    "[    1.2] {}",
                    Marker::Throughput.line(Some(&load().line()))
                ),
            ),
            (1.7, "snapboot: @throughput not a throughput line".into()),
            (2.0, Marker::MediumBaseline.line(Some(&baseline().line()))),
        ]);
        let found = &a.throughput;
        assert_eq!(found.len(), 2, "{found:?}");
        // At the line's place on the analysis axis (its printk time here).
        assert_eq!(
            (found[0].t, found[0].kind),
            (a.lines[1].t, ThroughputKind::Load)
        );
        assert_eq!(found[0].throughput, load());
        assert_eq!((found[0].bound, found[0].large_share), ("cpu", 0.95));
        assert_eq!((found[0].load_mbps, found[0].stored_mbps), (120.0, 40.0));
        assert_eq!(found[1].kind, ThroughputKind::MediumBaseline);
        assert_eq!((found[1].stored_mbps, found[1].bound), (160.0, "medium"));
        assert_eq!(of_medium(found), Some(0.25));
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["throughput"][0]["kind"], "load");
        assert_eq!(json["throughput"][0]["throughput"]["requests"], 20);
        assert_eq!(json["throughput"][1]["bound"], "medium");
    }

    #[test]
    fn the_text_shows_every_stage_the_bound_and_the_large_share() {
        let lines = [
            ThroughputLine::new(1.6, Marker::Throughput, load()).unwrap(),
            ThroughputLine::new(2.0, Marker::MediumBaseline, baseline()).unwrap(),
        ];
        let mut out = String::new();
        text(&mut out, &lines);
        assert_eq!(
            out,
            "load phase at 1.600 s: 120.0 MB/s loaded (1.000 s wall, 2 CPU(s)), bound by cpu\n  \
             read        40.0 MB in 20 requests (95% in >= 1 MiB), 0.500 s at 80.0 MB/s\n  \
             check       40.0 MB in 0.400 s at 100.0 MB/s per CPU\n  \
             decode     100.0 MB in 1.000 s at 100.0 MB/s per CPU\n  \
             place      120.0 MB in 0.200 s at 600.0 MB/s\n\
             medium baseline at 2.000 s: 40.0 MB in 39 requests (100% in >= 1 MiB) in 0.250 s: \
             160.0 MB/s sequential\n\
             the load phase read its stored bytes at 25% of the medium baseline\n"
        );
        let mut none = String::new();
        text(&mut none, &[]);
        html(&mut none, &[]);
        assert!(none.is_empty());
        assert_eq!(ThroughputLine::new(1.0, Marker::Lazy, load()), None);
    }

    #[test]
    fn the_html_table_has_a_row_per_stage() {
        let lines = [ThroughputLine::new(1.6, Marker::Throughput, load()).unwrap()];
        let mut h = String::new();
        html(&mut h, &lines);
        assert!(h.starts_with("<table class=\"throughput\">"), "{h}");
        assert!(h.contains("<tr data-kind=\"load\"><th colspan=\"5\">load phase at 1.600 s: bound by <b>cpu</b>, 95% read in requests of &ge; 1 MiB, 2 CPU(s)</th></tr>"), "{h}");
        assert!(h.contains("<tr><td>decode</td><td class=\"num\">100.0</td><td class=\"num\">1.000</td><td class=\"num\">100.0</td><td>per CPU</td></tr>"), "{h}");
        assert!(
            h.contains("<td>loaded, wall</td><td class=\"num\">120.0</td>"),
            "{h}"
        );
        assert!(!h.contains("medium baseline</td>"), "{h}");
    }
}
