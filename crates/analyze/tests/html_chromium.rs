//! The HTML report in a real browser: a side-by-side report of the three board logs is
//! rendered by headless Chromium, which must run its script (the dumped DOM shows the graph
//! re-laid out and the status line filled in) and paint a non-blank page. Chromium is a
//! project dependency (`make deps` installs the Debian package); without it this test fails.
//! Set `SNAPBOOT_REPORT_SCREENSHOT=<path>` to keep the screenshot (docs/analysis-report.png
//! is made that way).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHROMIUM: &str = "/usr/bin/chromium";
const RUNS: [&str; 3] = ["shell-cold.log", "app-cold.log", "panic.log"];
const TIMEOUT: Duration = Duration::from_secs(120);

fn chromium() -> &'static str {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} not found: the HTML report test needs headless Chromium. Install it with \
         `apt-get install chromium` (Debian; the project's `make deps` does this)"
    );
    CHROMIUM
}

/// Runs Chromium headless on `url` with `extra` arguments; returns its stdout.
fn run_chromium(profile: &Path, extra: &[String], url: &str) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {CHROMIUM}: {e}"));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
    });
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(status) => {
                assert!(status.success(), "chromium failed: {status}");
                break;
            }
            None if started.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium did not finish within {TIMEOUT:?}");
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    reader
        .join()
        .expect("reader thread")
        .expect("chromium output is text")
}

/// The report of the three board logs, written to `dir/report.html`.
fn write_report(dir: &Path) -> PathBuf {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../boottrace/tests/data");
    let paths: Vec<PathBuf> = RUNS.iter().map(|r| data.join(r)).collect();
    let report = analyze::analyze_files(&paths, None).expect("analyse the board logs");
    let path = dir.join("report.html");
    std::fs::write(&path, report.to_html()).expect("write report.html");
    path
}

/// Number of distinct RGBA colours in a PNG file.
fn distinct_colors(path: &Path) -> usize {
    let file = std::fs::File::open(path).expect("open screenshot");
    let mut decoder = png::Decoder::new(file);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let channels = info.color_type.samples();
    buf[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|px| px.to_vec())
        .collect::<HashSet<_>>()
        .len()
}

#[test]
fn report_renders_in_headless_chromium() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let html = write_report(tmp.path());
    let url = format!("file://{}", html.display());

    let dom = run_chromium(
        &tmp.path().join("profile-dom"),
        &["--dump-dom".to_string()],
        &url,
    );
    assert!(
        dom.contains("<svg id=\"bootgraph\""),
        "no boot graph in the DOM:\n{dom}"
    );
    assert!(
        dom.contains("data-ready=\"1\""),
        "the report's script did not run"
    );
    assert!(
        dom.contains("interactive: 0 initcall bars, 15 phase bands in 3 runs"),
        "status line"
    );
    for run in RUNS {
        let marker = format!("<g class=\"run\" data-source=\"{run}\"");
        let start = dom
            .find(&marker)
            .unwrap_or_else(|| panic!("no run group for {run}"));
        let rest = &dom[start + marker.len()..];
        let end = rest
            .find("<g class=\"run\"")
            .or_else(|| rest.find("</svg>"))
            .unwrap_or(rest.len());
        let group = &rest[..end];
        let drawn =
            group.matches("class=\"initcall").count() + group.matches("class=\"phase ").count();
        assert!(drawn >= 1, "{run}: no initcall or phase elements");
        // The script turned the native tooltips into data attributes.
        assert!(
            !group.contains("<title>") && group.contains("data-title="),
            "{run}"
        );
    }

    let shot = tmp.path().join("shot.png");
    run_chromium(
        &tmp.path().join("profile-shot"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,900".to_string(),
        ],
        &url,
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10 * 1024, "screenshot is {size} bytes");
    let colors = distinct_colors(&shot);
    assert!(colors > 16, "screenshot has {colors} colours: blank page?");
    if let Some(keep) = std::env::var_os("SNAPBOOT_REPORT_SCREENSHOT") {
        std::fs::copy(&shot, &keep).expect("keep the screenshot");
    }
}
