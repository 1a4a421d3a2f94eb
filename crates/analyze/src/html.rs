//! The self-contained HTML report: one page, no network (CSS, script and the SVG are inline),
//! showing one or more boots side by side on one shared time axis (e.g. cold boot,
//! kernel-native resume and snapboot). It holds the interactive boot graph (the [`svg`]
//! drawing with a hover tooltip naming each bar, band and marker with its start and duration,
//! and a zoom slider that re-lays the graph out), a milestone and phase table with one column
//! per boot, each boot's slowest initcalls, the advisor's findings with their savings, and
//! the kernel config checks when a config was given.
//!
//! [`svg`]: crate::svg

use std::fmt::Write as _;

use crate::advisor::{total_saving, Finding};
use crate::analysis::{Analysis, PhaseKind};
use crate::kconfig::{KernelCheck, Verdict};
use crate::svg::{self, esc, SvgOptions};

/// One boot to show: its analysis and the advisor's findings.
#[derive(Debug, Clone, Copy)]
pub struct HtmlRun<'a> {
    /// The analysis.
    pub analysis: &'a Analysis,
    /// The findings for it.
    pub findings: &'a [Finding],
}

const PAGE_CSS: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:20px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:4px 0 12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
#graph-wrap{overflow-x:auto;border:1px solid #ddd}
#tooltip{position:fixed;display:none;background:#222;color:#fff;padding:4px 8px;border-radius:4px;font:12px sans-serif;pointer-events:none;max-width:520px;z-index:10}
.controls{margin:8px 0}.legend span{display:inline-block;padding:1px 6px;margin:0 4px 0 0;color:#fff;border-radius:3px;font-size:12px}
.saving{font-weight:bold;color:#1a7f37}.verdict-blocker{color:#c00;font-weight:bold}.verdict-warn{color:#b36b00}.verdict-ok{color:#1a7f37}
.muted{color:#777}code{background:#f4f4f4;padding:0 3px}
";

const PAGE_JS: &str = r#"
(function(){
  var svgEl=document.getElementById('bootgraph');
  var tip=document.getElementById('tooltip');
  if(!svgEl){return;}
  var NS='http://www.w3.org/2000/svg';
  var left=+svgEl.dataset.left, right=+svgEl.dataset.right, end=+svgEl.dataset.end;
  var baseW=+svgEl.getAttribute('width');
  // Fit the unzoomed graph to the page.
  var wrap=document.getElementById('graph-wrap');
  if(wrap&&wrap.clientWidth>600){baseW=wrap.clientWidth-2;}
  // Native <title> tooltips would double ours: keep their text as data-title.
  svgEl.querySelectorAll('title').forEach(function(t){
    var p=t.parentNode; p.setAttribute('data-title',t.textContent); p.removeChild(t);
  });
  function fmt(s){return s<1?(s*1000).toFixed(2)+' ms':s.toFixed(3)+' s';}
  svgEl.addEventListener('mousemove',function(e){
    var el=e.target.closest('[data-name]');
    if(!el){tip.style.display='none';return;}
    var run=el.closest('g.run');
    var start=+el.dataset.start, dur=+el.dataset.dur;
    var txt='<b>'+el.dataset.name.replace(/&/g,'&amp;').replace(/</g,'&lt;')+'</b><br>start '+start.toFixed(6)+' s';
    if(dur>0){txt+=', duration '+fmt(dur);}
    if(run){txt+='<br><i>'+run.dataset.source.replace(/</g,'&lt;')+'</i>';}
    tip.innerHTML=txt; tip.style.display='block';
    tip.style.left=(e.clientX+14)+'px'; tip.style.top=(e.clientY+14)+'px';
  });
  svgEl.addEventListener('mouseleave',function(){tip.style.display='none';});
  function step(span){var raw=span/10,mag=Math.pow(10,Math.floor(Math.log10(raw)));
    var c=[1,2,5,10].map(function(m){return m*mag;}).filter(function(s){return s>=raw;});return c[0];}
  function layout(zoom){
    var width=left+right+(baseW-left-right)*zoom, pps=(width-left-right)/end;
    svgEl.setAttribute('width',width.toFixed(0));
    var h=svgEl.getAttribute('height');
    svgEl.setAttribute('viewBox','0 0 '+width.toFixed(0)+' '+h);
    svgEl.querySelector('rect.bg').setAttribute('width',width.toFixed(0));
    svgEl.querySelectorAll('[data-start]').forEach(function(el){
      var x=left+(+el.dataset.start)*pps, w=Math.max((+el.dataset.dur)*pps,0.5);
      if(el.tagName==='rect'){el.setAttribute('x',x.toFixed(2));el.setAttribute('width',w.toFixed(2));}
      else if(el.tagName==='line'){el.setAttribute('x1',x.toFixed(2));el.setAttribute('x2',x.toFixed(2));}
      else if(el.tagName==='text'){el.setAttribute('x',(x+3).toFixed(2));
        el.style.display=(w>el.textContent.length*5.5+4)?'':'none';}
      else if(el.tagName==='g'){el.querySelectorAll('line').forEach(function(l){l.setAttribute('x1',x.toFixed(2));l.setAttribute('x2',x.toFixed(2));});
        el.querySelectorAll('circle').forEach(function(c){c.setAttribute('cx',x.toFixed(2));});
        el.querySelectorAll('text').forEach(function(t){t.setAttribute('x',(x+3).toFixed(2));});}
    });
    var axis=svgEl.querySelector('g.axis'), ah=axis.dataset.height;
    while(axis.firstChild){axis.removeChild(axis.firstChild);}
    var st=step(end/zoom), dec=st>=1?0:Math.ceil(-Math.log10(st)-1e-9);
    for(var t=0;t<=end+st*1e-6;t+=st){
      var x=(left+t*pps).toFixed(1);
      var ln=document.createElementNS(NS,'line');
      ln.setAttribute('x1',x);ln.setAttribute('x2',x);ln.setAttribute('y1','24');ln.setAttribute('y2',ah);axis.appendChild(ln);
      var tx=document.createElementNS(NS,'text');
      tx.setAttribute('x',x);tx.setAttribute('y','14');tx.setAttribute('text-anchor','middle');
      tx.textContent=t.toFixed(dec)+' s';axis.appendChild(tx);
    }
    document.getElementById('zoomval').textContent=zoom+'\u00d7';
  }
  var zoom=document.getElementById('zoom');
  zoom.addEventListener('input',function(){layout(+zoom.value);});
  layout(1);
  var status=document.getElementById('js-status');
  status.textContent='interactive: '+svgEl.querySelectorAll('.initcall').length+' initcall bars, '+
    svgEl.querySelectorAll('.phase').length+' phase bands in '+svgEl.querySelectorAll('g.run').length+' runs';
  document.body.setAttribute('data-ready','1');
})();
"#;

fn secs(t: Option<f64>) -> String {
    t.map_or_else(|| "–".to_string(), |t| format!("{t:.3}"))
}

/// Renders the report page for `runs` (shown in this order) and optional kernel checks.
pub fn render(runs: &[HtmlRun<'_>], checks: &[KernelCheck]) -> String {
    let analyses: Vec<&Analysis> = runs.iter().map(|r| r.analysis).collect();
    let graph = svg::render(
        &analyses,
        &SvgOptions {
            width: 1300.0,
            id: "bootgraph".to_string(),
            standalone: false,
        },
    );
    let names: Vec<String> = analyses.iter().map(|a| esc(&a.source)).collect();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>snapboot boot analysis: {}</title>\n<style>{PAGE_CSS}</style></head>\n<body>\n",
        names.join(" vs ")
    );
    let _ = writeln!(h, "<h1>Boot analysis: {}</h1>", names.join(" vs "));
    let _ = writeln!(
        h,
        "<p class=\"muted\">{} boot(s) on one time axis (seconds since power-on for host-stamped logs, since kernel start otherwise). Hover a bar for its name, start and duration. <span id=\"js-status\">static (script not run)</span></p>",
        runs.len()
    );
    h.push_str("<div class=\"controls\">zoom <input type=\"range\" id=\"zoom\" min=\"1\" max=\"40\" step=\"1\" value=\"1\"> <span id=\"zoomval\">1×</span> &nbsp; <span class=\"legend\">");
    for k in PhaseKind::ALL {
        let _ = write!(
            h,
            "<span style=\"background:{}\">{}</span>",
            svg::phase_color(k),
            k.as_str()
        );
    }
    h.push_str("<span style=\"background:#4f7cc4\">built-in initcall</span><span style=\"background:#e0a030\">module initcall</span><span style=\"background:#e9a0a0\">silent gap</span><span style=\"background:#d00\">TTI</span></span></div>\n");
    let _ = writeln!(
        h,
        "<div id=\"graph-wrap\">\n{graph}</div>\n<div id=\"tooltip\"></div>"
    );

    milestone_table(&mut h, &analyses, &names);
    for (run, name) in runs.iter().zip(&names) {
        run_section(&mut h, run, name);
    }
    if !checks.is_empty() {
        checks_table(&mut h, checks);
    }
    let _ = write!(h, "<script>{PAGE_JS}</script>\n</body></html>\n");
    h
}

fn milestone_table(h: &mut String, analyses: &[&Analysis], names: &[String]) {
    h.push_str("<h2>Milestones and phases</h2>\n<table><tr><th>seconds</th>");
    for n in names {
        let _ = write!(h, "<th>{n}</th>");
    }
    h.push_str("</tr>\n");
    let mut kinds: Vec<_> = analyses
        .iter()
        .flat_map(|a| a.milestones.iter().map(|m| m.kind))
        .collect();
    kinds.sort();
    kinds.dedup();
    for k in kinds {
        let _ = write!(h, "<tr><td>{k}</td>");
        for a in analyses {
            let _ = write!(h, "<td class=\"num\">{}</td>", secs(a.at(k)));
        }
        h.push_str("</tr>\n");
    }
    let mut phases: Vec<_> = analyses
        .iter()
        .flat_map(|a| a.phases.iter().map(|p| p.kind))
        .collect();
    phases.sort();
    phases.dedup();
    for k in phases {
        let _ = write!(h, "<tr><td><i>{} phase</i></td>", k.as_str());
        for a in analyses {
            let _ = write!(
                h,
                "<td class=\"num\">{}</td>",
                secs(a.phase(k).map(|p| p.duration()))
            );
        }
        h.push_str("</tr>\n");
    }
    throughput_rows(h, analyses);
    h.push_str("<tr><th>TTI</th>");
    for a in analyses {
        let _ = write!(h, "<th class=\"num\">{}</th>", secs(a.tti));
    }
    h.push_str("</tr>\n<tr><td>outcome</td>");
    for a in analyses {
        let _ = write!(h, "<td>{}</td>", esc(&a.outcome));
    }
    h.push_str("</tr>\n</table>\n");
}

/// The load phase beside the restore's phases, one column per boot: its MB/s, bound and
/// share read in large requests (the last `throughput` line of each boot), and the medium
/// baseline's MB/s; nothing when no boot printed either.
fn throughput_rows(h: &mut String, analyses: &[&Analysis]) {
    use crate::throughput::{ThroughputKind as K, ThroughputLine};
    let last = |a: &Analysis, k: K| -> Option<ThroughputLine> {
        a.throughput.iter().rev().find(|l| l.kind == k).cloned()
    };
    type Cell = fn(&ThroughputLine) -> String;
    let rows: [(K, &str, Cell); 5] = [
        (K::Load, "load phase MB/s", |l| {
            format!("{:.1}", l.load_mbps)
        }),
        (K::Load, "load phase medium MB/s", |l| {
            format!("{:.1}", l.medium_mbps)
        }),
        (K::Load, "load phase &ge; 1 MiB reads", |l| {
            format!("{:.0}%", l.large_share * 100.0)
        }),
        (K::Load, "load phase bound by", |l| l.bound.to_string()),
        (K::MediumBaseline, "medium baseline MB/s", |l| {
            format!("{:.1}", l.stored_mbps)
        }),
    ];
    for (kind, name, cell) in rows {
        if analyses.iter().all(|a| last(a, kind).is_none()) {
            continue;
        }
        let _ = write!(h, "<tr><td><i>{name}</i></td>");
        for a in analyses {
            let v = last(a, kind).map_or_else(|| "–".to_string(), |l| esc(&cell(&l)));
            let _ = write!(h, "<td class=\"num\">{v}</td>");
        }
        h.push_str("</tr>\n");
    }
}

fn run_section(h: &mut String, run: &HtmlRun<'_>, name: &str) {
    let a = run.analysis;
    let _ = writeln!(h, "<h2>{name}</h2>");
    let yn = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        h,
        "<p class=\"muted\">kernel {}; printk time: {}; host stamps: {}; initcall_debug: {}; {} console lines, {} gaps ≥ {:.2} s</p>",
        esc(a.kernel_version.as_deref().unwrap_or("unknown")),
        yn(a.has_printk_time),
        yn(a.has_host_stamps),
        yn(a.has_initcall_debug),
        a.lines.len(),
        a.gaps.len(),
        a.gap_threshold
    );
    if let Some(c) = &a.console {
        let _ = writeln!(
            h,
            "<p>Console {} at {} baud{}: {} kernel lines, {} bytes = {:.2} s of UART time{}.</p>",
            esc(&c.console.device),
            c.console.baud,
            if c.quiet { " (quiet)" } else { "" },
            c.kernel_lines,
            c.kernel_bytes,
            c.kernel_seconds,
            if c.virtual_uart {
                " (emulated UART: printed faster than the baud rate allows)"
            } else {
                ""
            }
        );
    }
    crate::throughput::html(h, &a.throughput);
    if !a.initcalls.is_empty() {
        let mut top: Vec<_> = a.initcalls.iter().collect();
        top.sort_by(|x, y| y.duration.total_cmp(&x.duration));
        h.push_str("<table><tr><th>slowest initcalls</th><th>ms</th><th>start s</th><th>pid</th><th>kind</th></tr>\n");
        for c in top.into_iter().take(10) {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"num\">{:.3}</td><td class=\"num\">{:.6}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(&c.name),
                c.duration * 1e3,
                c.start,
                c.pid,
                c.module.as_ref().map_or_else(|| "built-in".to_string(), |m| format!("module {}", esc(m)))
            );
        }
        h.push_str("</table>\n");
    }
    let restores = crate::devpm::restore_by_device(&a.device_pm);
    if !restores.is_empty() {
        h.push_str("<table><tr><th>slowest device restores (pm_print_times)</th><th>ms</th><th>callbacks</th></tr>\n");
        for d in restores.iter().take(10) {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"num\">{:.3}</td><td><code>{}</code>{}</td></tr>",
                esc(&d.who),
                d.duration * 1e3,
                esc(&d.callbacks.join(" ")),
                d.failed.map_or_else(String::new, |r| format!(" (returned {r})"))
            );
        }
        h.push_str("</table>\n");
    }
    if run.findings.is_empty() {
        h.push_str("<p>The advisor found nothing to suggest for this boot.</p>\n");
        return;
    }
    let _ = writeln!(
        h,
        "<table class=\"findings\"><tr><th>finding</th><th>saves</th><th>evidence</th><th>fix</th></tr>"
    );
    for f in run.findings {
        let saving = f.saving_s.map_or_else(
            || "<span class=\"muted\">not measurable here</span>".to_string(),
            |s| format!("<span class=\"saving\">{s:.3} s</span>"),
        );
        let _ = writeln!(
            h,
            "<tr class=\"finding\" data-rule=\"{}\"><td>{}<br><span class=\"muted\">{}</span></td><td class=\"num\">{saving}</td><td>{}</td><td>{}</td></tr>",
            esc(&f.rule),
            esc(&f.title),
            esc(&f.rule),
            esc(&f.evidence),
            esc(&f.fix)
        );
    }
    let _ = writeln!(
        h,
        "</table>\n<p>Known savings add up to <span class=\"saving\">{:.2} s</span> (they may overlap).</p>",
        total_saving(run.findings)
    );
}

fn checks_table(h: &mut String, checks: &[KernelCheck]) {
    h.push_str("<h2>Kernel config</h2>\n<table><tr><th>option</th><th>value</th><th>verdict</th><th>why</th></tr>\n");
    for c in checks {
        let class = match c.verdict {
            Verdict::Ok => "verdict-ok",
            Verdict::Warn => "verdict-warn",
            Verdict::Blocker => "verdict-blocker",
        };
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td class=\"{class}\">{}</td><td>{}</td></tr>",
            esc(&c.option),
            esc(&c.value),
            c.verdict,
            esc(&c.reason)
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kconfig::check_kernel;
    use boottrace::Timeline;

    #[test]
    fn page_is_self_contained_and_queryable() {
        let a = Analysis::from_timeline(&Timeline::from_console_log(
            "[    0.000000] Linux version 6.1 (x)\n[    0.000000] Command line: console=ttyS0,9600\n[    0.100000] calling  a_init+0x0/0x10 @ 1\n[    0.300000] initcall a_init+0x0/0x10 returned 0 after 200000 usecs\n[    0.500000] Run /init as init process\n",
        ));
        let findings = crate::advisor::advise(&a, None);
        let checks = check_kernel("CONFIG_HIBERNATION=y\n");
        let page = render(
            &[HtmlRun {
                analysis: &a,
                findings: &findings,
            }],
            &checks,
        );
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<svg id=\"bootgraph\""));
        assert!(page.contains("class=\"initcall\""));
        assert!(page.contains("<g class=\"run\" data-source=\"console log\""));
        assert!(page.contains("data-rule=\"quiet\""));
        assert!(page.contains("CONFIG_HIBERNATION_SNAPSHOT_DEV"));
        for banned in ["http://", "https://", "<link", "src="] {
            let hits = page.matches(banned).count();
            // The SVG namespace, in the markup and in the script.
            let allowed = if banned == "http://" { 2 } else { 0 };
            assert_eq!(hits, allowed, "{banned}");
        }
    }
}
