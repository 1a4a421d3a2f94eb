//! The boot graph as SVG, bootgraph.pl's idea redrawn: time runs left to right on one axis
//! shared by every boot shown; each boot gets a group of rows — its phases as coloured bands,
//! a detail band (initcalls span, initramfs unpack), a console row with a tick per line and
//! the silent gaps shaded, then one row of initcall bars per process (`@ pid`), as
//! bootgraph.pl draws them. Milestones are marked on top and the TTI is a red line.
//! [`render`] gives a standalone document (for papers and docs); the HTML report embeds the
//! same drawing and makes it interactive. Every drawn element carries `data-start` /
//! `data-dur` (seconds) and `data-name`, so a script can re-lay it out or explain it.

use std::fmt::Write as _;

use crate::analysis::{Analysis, PhaseKind};

/// Drawing options.
#[derive(Debug, Clone, PartialEq)]
pub struct SvgOptions {
    /// Total width, pixels.
    pub width: f64,
    /// Element id of the `<svg>`.
    pub id: String,
    /// Whether to write a standalone document (XML declaration and namespace).
    pub standalone: bool,
}

impl Default for SvgOptions {
    fn default() -> Self {
        Self {
            width: 1200.0,
            id: "bootgraph".to_string(),
            standalone: true,
        }
    }
}

/// Left margin for row labels, pixels.
pub const LEFT: f64 = 150.0;
/// Right margin, pixels.
const RIGHT: f64 = 30.0;
const TITLE_H: f64 = 20.0;
const BAND_H: f64 = 18.0;
const DETAIL_H: f64 = 12.0;
const CONSOLE_H: f64 = 10.0;
const ROW_H: f64 = 11.0;
const RUN_GAP: f64 = 16.0;
const AXIS_H: f64 = 24.0;

/// The colour of each phase kind (also used by the HTML legend).
pub fn phase_color(kind: PhaseKind) -> &'static str {
    match kind {
        PhaseKind::Firmware => "#9e9e9e",
        PhaseKind::RestorerCheck => "#5fa8b8",
        PhaseKind::RestorerPlace => "#2b7f93",
        PhaseKind::RestorerFallback => "#b04a5a",
        PhaseKind::Kernel => "#4f7cc4",
        PhaseKind::Initcalls => "#8fb0e3",
        PhaseKind::Unpack => "#c58fd6",
        PhaseKind::Initramfs => "#e0a030",
        PhaseKind::Resume => "#2fa37a",
        PhaseKind::Userspace => "#d8c246",
        PhaseKind::App => "#d9674c",
    }
}

/// The stylesheet shared by the standalone SVG and the HTML report.
pub const STYLE: &str = "
.run-title{font:bold 12px sans-serif;fill:#222}
.row-label{font:10px sans-serif;fill:#555}
.phase-label{font:10px sans-serif;fill:#fff;pointer-events:none}
.phase{stroke:#fff;stroke-width:0.5}
.initcall{fill:#4f7cc4;stroke:#27457a;stroke-width:0.3}
.initcall.module{fill:#e0a030;stroke:#8a5d10}
.initcall.failed{fill:#d04040}
.tick{stroke:#777;stroke-width:0.6}
.gap{fill:#f3d2d2}
.milestone{stroke:#444;stroke-width:0.8;stroke-dasharray:2,2}
.milestone-dot{fill:#444}
.tti{stroke:#d00;stroke-width:1.6}
.tti-label{font:bold 10px sans-serif;fill:#d00}
.axis line{stroke:#ddd;stroke-width:0.6}
.axis text{font:10px sans-serif;fill:#666}
.bg{fill:#fafafa}
";

/// Escapes text for XML content and attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The end of the shared time axis: the latest time of any boot, rounded up to a tick.
pub fn axis_end(runs: &[&Analysis]) -> f64 {
    let end = runs
        .iter()
        .map(|a| a.end.max(a.tti.unwrap_or(0.0)))
        .fold(0.0, f64::max);
    let step = tick_step(end.max(0.001));
    ((end / step).ceil() * step).max(step)
}

/// A tick spacing giving about 10 ticks over `span` seconds (1, 2 or 5 × 10^n).
pub fn tick_step(span: f64) -> f64 {
    let raw = span / 10.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Maps seconds to pixels.
struct Scale {
    px_per_s: f64,
}

impl Scale {
    fn x(&self, t: f64) -> f64 {
        LEFT + t * self.px_per_s
    }
    fn w(&self, d: f64) -> f64 {
        (d * self.px_per_s).max(0.5)
    }
}

/// The pid rows of a boot's initcalls: pid 1 (the init thread) first, then by first call.
fn pid_rows(a: &Analysis) -> Vec<u32> {
    let mut rows: Vec<u32> = Vec::new();
    for c in &a.initcalls {
        if !rows.contains(&c.pid) {
            rows.push(c.pid);
        }
    }
    // Stable: pid 1 first, the others keep their order of first call.
    rows.sort_by_key(|p| *p != 1);
    rows
}

/// The height of one boot's group, pixels.
fn run_height(a: &Analysis) -> f64 {
    let detail = if a.phases.iter().any(|p| p.kind.is_detail()) {
        DETAIL_H + 2.0
    } else {
        0.0
    };
    TITLE_H + BAND_H + 2.0 + detail + CONSOLE_H + 4.0 + pid_rows(a).len() as f64 * ROW_H
}

/// `data-*` attributes of a drawn span.
fn data(name: &str, start: f64, dur: f64) -> String {
    format!(
        r#"data-name="{}" data-start="{start:.6}" data-dur="{dur:.6}""#,
        esc(name)
    )
}

/// Draws the runs on one shared time axis; see the module documentation.
pub fn render(runs: &[&Analysis], opts: &SvgOptions) -> String {
    let t_end = axis_end(runs);
    let scale = Scale {
        px_per_s: (opts.width - LEFT - RIGHT).max(100.0) / t_end,
    };
    let body_h: f64 = runs.iter().map(|a| run_height(a) + RUN_GAP).sum();
    let height = AXIS_H + body_h + 4.0;
    let mut s = String::new();
    if opts.standalone {
        s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    }
    let _ = writeln!(
        s,
        r#"<svg id="{}" xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{height:.0}" viewBox="0 0 {w:.0} {height:.0}" data-end="{t_end:.6}" data-left="{LEFT}" data-right="{RIGHT}">"#,
        esc(&opts.id),
        w = opts.width,
    );
    let _ = writeln!(s, "<style>{STYLE}</style>");
    let _ = writeln!(
        s,
        r#"<rect class="bg" x="0" y="0" width="{:.0}" height="{height:.0}"/>"#,
        opts.width
    );
    // Axis: grid lines over the whole height, labels on top.
    let step = tick_step(t_end);
    let _ = writeln!(s, r#"<g class="axis" data-height="{height:.0}">"#);
    let mut t = 0.0;
    while t <= t_end + step * 1e-6 {
        let x = scale.x(t);
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{AXIS_H}" x2="{x:.1}" y2="{height:.0}" data-t="{t:.6}"/><text x="{x:.1}" y="14" text-anchor="middle" data-t="{t:.6}">{}</text>"#,
            fmt_tick(t, step)
        );
        t += step;
    }
    s.push_str("</g>\n");
    let mut y = AXIS_H;
    for a in runs {
        draw_run(&mut s, a, &scale, y);
        y += run_height(a) + RUN_GAP;
    }
    s.push_str("</svg>\n");
    s
}

/// A tick label: `1.5 s`, with as many decimals as the step needs.
fn fmt_tick(t: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{t:.decimals$} s")
}

fn draw_run(s: &mut String, a: &Analysis, sc: &Scale, y0: f64) {
    let h = run_height(a);
    let _ = writeln!(
        s,
        r#"<g class="run" data-source="{}" transform="translate(0,{y0:.1})" data-height="{h:.1}">"#,
        esc(&a.source)
    );
    let tti = a
        .tti
        .map_or_else(|| "no TTI".to_string(), |t| format!("TTI {t:.3} s"));
    let _ = writeln!(
        s,
        r#"<text class="run-title" x="4" y="14">{} — {} — {tti}</text>"#,
        esc(&a.source),
        esc(&a.outcome)
    );
    let mut y = TITLE_H;
    let _ = writeln!(
        s,
        r#"<text class="row-label" x="4" y="{:.1}">phases</text>"#,
        y + 12.0
    );
    for p in a.phases.iter().filter(|p| !p.kind.is_detail()) {
        draw_phase(s, p.kind, p.start, p.duration(), y, BAND_H, sc);
    }
    y += BAND_H + 2.0;
    if a.phases.iter().any(|p| p.kind.is_detail()) {
        let _ = writeln!(
            s,
            r#"<text class="row-label" x="4" y="{:.1}">kernel detail</text>"#,
            y + 10.0
        );
        for p in a.phases.iter().filter(|p| p.kind.is_detail()) {
            draw_phase(s, p.kind, p.start, p.duration(), y, DETAIL_H, sc);
        }
        y += DETAIL_H + 2.0;
    }
    let _ = writeln!(
        s,
        r#"<text class="row-label" x="4" y="{:.1}">console ({} lines)</text>"#,
        y + 9.0,
        a.lines.len()
    );
    for g in &a.gaps {
        let _ = writeln!(
            s,
            r#"<rect class="gap" x="{:.2}" y="{y:.1}" width="{:.2}" height="{CONSOLE_H}" {}><title>silent {:.3} s after: {}</title></rect>"#,
            sc.x(g.start),
            sc.w(g.duration()),
            data(
                &format!("silence after \"{}\"", g.before),
                g.start,
                g.duration()
            ),
            g.duration(),
            esc(&g.before)
        );
    }
    let mut last_px = f64::NEG_INFINITY;
    for l in &a.lines {
        let x = sc.x(l.t);
        if (x - last_px).abs() < 0.5 {
            continue; // one tick per half pixel is enough
        }
        last_px = x;
        let _ = writeln!(
            s,
            r#"<line class="tick" x1="{x:.2}" x2="{x:.2}" y1="{y:.1}" y2="{:.1}" data-start="{:.6}" data-dur="0"/>"#,
            y + CONSOLE_H,
            l.t
        );
    }
    y += CONSOLE_H + 4.0;
    for (row, pid) in pid_rows(a).into_iter().enumerate() {
        let ry = y + row as f64 * ROW_H;
        let label = if pid == 0 {
            "pid ?".to_string()
        } else {
            format!("pid {pid}")
        };
        let _ = writeln!(
            s,
            r#"<text class="row-label" x="4" y="{:.1}">initcalls {label}</text>"#,
            ry + 9.0
        );
        for c in a.initcalls.iter().filter(|c| c.pid == pid) {
            let mut class = "initcall".to_string();
            if c.module.is_some() {
                class.push_str(" module");
            }
            if c.ret.is_some_and(|r| r < 0) {
                class.push_str(" failed");
            }
            let name = match &c.module {
                Some(m) => format!("{} [{m}]", c.name),
                None => c.name.clone(),
            };
            let _ = writeln!(
                s,
                r#"<rect class="{class}" x="{:.2}" y="{ry:.1}" width="{:.2}" height="{:.1}" {}><title>{} @ {:.6} s, {:.3} ms</title></rect>"#,
                sc.x(c.start),
                sc.w(c.duration),
                ROW_H - 2.0,
                data(&name, c.start, c.duration),
                esc(&name),
                c.start,
                c.duration * 1e3
            );
        }
    }
    for m in &a.milestones {
        let x = sc.x(m.t);
        let name = match &m.detail {
            Some(d) => format!("{}: {d}", m.kind),
            None => m.kind.to_string(),
        };
        let _ = writeln!(
            s,
            r#"<g class="milestone-mark" {}><line class="milestone" x1="{x:.2}" x2="{x:.2}" y1="{TITLE_H}" y2="{h:.1}"/><circle class="milestone-dot" cx="{x:.2}" cy="{TITLE_H}" r="2.5"/><title>{} @ {:.3} s</title></g>"#,
            data(&name, m.t, 0.0),
            esc(&name),
            m.t
        );
    }
    if let Some(t) = a.tti {
        let x = sc.x(t);
        let _ = writeln!(
            s,
            r#"<g class="tti-mark" {}><line class="tti" x1="{x:.2}" x2="{x:.2}" y1="{:.1}" y2="{h:.1}"/><text class="tti-label" x="{:.2}" y="{:.1}">TTI</text></g>"#,
            data("TTI", t, 0.0),
            TITLE_H - 4.0,
            x + 3.0,
            TITLE_H - 2.0
        );
    }
    s.push_str("</g>\n");
}

fn draw_phase(s: &mut String, kind: PhaseKind, start: f64, dur: f64, y: f64, h: f64, sc: &Scale) {
    let x = sc.x(start);
    let w = sc.w(dur);
    let name = kind.as_str();
    let _ = writeln!(
        s,
        r#"<rect class="phase phase-{name}" fill="{}" x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{h:.1}" {}><title>{name} {start:.3}–{:.3} s ({dur:.3} s)</title></rect>"#,
        phase_color(kind),
        data(name, start, dur),
        start + dur
    );
    let label = format!("{name} {dur:.2}s");
    let fits = w > label.len() as f64 * 5.5 + 4.0;
    let _ = writeln!(
        s,
        r#"<text class="phase-label" x="{:.2}" y="{:.1}" {}{}>{label}</text>"#,
        x + 3.0,
        y + h - 4.0,
        data(name, start, dur),
        if fits { "" } else { r#" display="none""# }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use boottrace::Timeline;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(2.5), 0.5);
        assert_eq!(tick_step(30.0), 5.0);
        assert_eq!(tick_step(0.09), 0.01);
        assert_eq!(fmt_tick(1.5, 0.5), "1.5 s");
        assert_eq!(fmt_tick(10.0, 5.0), "10 s");
    }

    #[test]
    fn renders_phases_initcalls_and_escapes() {
        let tl = Timeline::from_console_log(
            "[    0.000000] Linux version 6.1 (<x>)\n[    0.100000] calling  a_init+0x0/0x10 @ 1\n[    0.300000] initcall a_init+0x0/0x10 returned -19 after 200000 usecs\n[    0.500000] Run /init as init process\n",
        );
        let mut a = Analysis::from_timeline(&tl);
        a.source = "a&b".into();
        let svg = render(&[&a], &SvgOptions::default());
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains(r#"<svg id="bootgraph" xmlns="http://www.w3.org/2000/svg""#));
        assert!(svg.contains(r#"<g class="run" data-source="a&amp;b""#));
        assert!(svg.contains(r#"class="initcall failed""#));
        assert!(svg.contains(r#"class="phase phase-kernel""#));
        assert!(svg.contains(r#"class="phase phase-initcalls""#));
        assert!(svg.contains("initcalls pid 1"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("</svg>").count(), 1);
    }
}
