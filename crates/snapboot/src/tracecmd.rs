//! `snapboot trace`: a real board's serial console, timestamped on the host.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Serial device of the real board.
    #[arg(long)]
    tty: PathBuf,
    /// Baud rate.
    #[arg(long, default_value_t = 115200)]
    baud: u32,
    /// Stop when a line matches this regex (default: the ready marker).
    #[arg(long)]
    until: Option<String>,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Write the timeline as JSON.
    #[arg(long)]
    timeline: Option<PathBuf>,
}

/// Timestamps the console from the moment it is opened (power the board on right after
/// starting this), until `--until` matches or the timeout.
pub fn trace(a: TraceArgs) -> Result<ExitCode> {
    let until = a
        .until
        .unwrap_or_else(|| regex::escape(&boottrace::Marker::Ready.line(None)));
    let until = regex::Regex::new(&until).context("--until")?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&a.tty)
        .with_context(|| format!("opening {}", a.tty.display()))?;
    boottrace::serial::make_raw(&file, a.baud)
        .with_context(|| format!("configuring {}", a.tty.display()))?;
    // The port is open and set up: from here every byte is stamped (a test waits for this).
    eprintln!(
        "snapboot: listening on {} at {} baud until /{until}/ or {} s: power the board on",
        a.tty.display(),
        a.baud,
        a.timeout
    );
    let tl = boottrace::serial::record(
        file,
        &a.tty.display().to_string(),
        Duration::from_secs(a.timeout),
        |line| until.is_match(line),
        |line| println!("{:10.6} | {}", line.t, line.text),
    );
    println!("{}", tl.summary_text());
    if let Some(p) = &a.timeline {
        std::fs::write(p, serde_json::to_string_pretty(&tl)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if tl.tti.is_some() {
        ExitCode::SUCCESS
    } else {
        snapboot_device::Exit::NotUsable.into()
    })
}
