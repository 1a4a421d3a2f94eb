//! Host side of snapshot boot on the board: attaching a store disk, the capture boot.

use crate::cli::{resolve_bundle, BoardOpts};
use anyhow::{bail, Context, Result};
use board::qemu::{Disk, Session};
use board::{Bundle, RunOptions};
use boottrace::Outcome;
use clap::Args;
use regex::Regex;
use snapimg::Store;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// `snapboot board capture`.
#[derive(Args, Debug)]
pub struct BoardCaptureArgs {
    /// The bundle directory (or a built-in workload name).
    pub bundle: String,
    /// Store file (created if missing; sparse, twice the guest RAM).
    #[arg(long)]
    pub store: PathBuf,
    #[command(flatten)]
    pub board: BoardOpts,
    /// Write the capture boot's timeline as JSON.
    #[arg(long)]
    pub timeline: Option<PathBuf>,
    /// Copy the console to stdout.
    #[arg(long)]
    pub console: bool,
    /// Capture a lazy image: page user memory out to a swap region in the store first, so
    /// the image holds only what stays resident (max, or how much to page out, e.g. 96M).
    #[arg(long, num_args = 0..=1, default_missing_value = "max", value_name = "HOW_MUCH")]
    pub lazy: Option<String>,
}

/// Kernel command-line words that ask the capture for a lazy image.
pub fn lazy_cmdline(lazy: Option<&str>) -> Vec<String> {
    match lazy {
        None => Vec::new(),
        Some("max") | Some("") => vec!["snapboot.lazy".into()],
        Some(v) => vec![format!("snapboot.lazy={v}")],
    }
}

/// Bytes a store needs for a guest of `mem_mib`: two areas that each hold an image as large
/// as RAM, plus the header slots.
pub fn store_size(mem_mib: u32) -> u64 {
    2 * (u64::from(mem_mib) << 20) + (1 << 20)
}

/// Attaches `store` as `/dev/vdb` and names it on the kernel command line. For a capture the
/// file is created when missing; for a snapshot boot it must exist.
pub fn attach_store(opts: &mut RunOptions, store: &Path, capture: bool) -> Result<()> {
    if !store.exists() {
        if !capture {
            bail!(
                "no store at {}: capture an image first with `snapboot board capture BUNDLE --store {}`",
                store.display(),
                store.display()
            );
        }
        Store::create_file(store, store_size(opts.mem_mib))
            .with_context(|| format!("creating store {}", store.display()))?;
    }
    opts.disks.insert(
        0,
        Disk {
            path: store.to_path_buf(),
            readonly: false,
        },
    );
    opts.cmdline.push("snapboot.store=/dev/vdb".into());
    if capture {
        opts.cmdline.push("snapboot.capture".into());
    }
    Ok(())
}

/// Boots cold with capture requested and waits for the image and the power-off.
pub fn capture_boot(
    bundle: &Bundle,
    opts: &RunOptions,
    store: &Path,
) -> Result<boottrace::Timeline> {
    let mut opts = opts.clone();
    attach_store(&mut opts, store, true)?;
    let mut s = Session::start(bundle, &opts)?;
    let done = Regex::new(r"snapboot: @capture-(done|failed)")?;
    let (line, _) = match s.wait_for(&done, "the capture to finish", opts.timeout) {
        Ok(v) => v,
        Err(e) => {
            s.finish(Outcome::Exited {
                reason: e.to_string(),
            });
            bail!("capture boot failed: {e}");
        }
    };
    if line.contains("@capture-failed") {
        s.finish(Outcome::Exited {
            reason: line.clone(),
        });
        bail!("capture failed in the guest: {line}");
    }
    let powered_off = s.wait_exit(Duration::from_secs(60));
    let tl = s.finish(Outcome::PoweredOff);
    powered_off.context("image written, but the board did not power off")?;
    Ok(tl)
}

/// `snapboot board capture`.
pub fn board_capture(a: BoardCaptureArgs) -> Result<ExitCode> {
    if let Some(l) = &a.lazy {
        // The guest parses the same words; refuse a bad value before booting for nothing.
        crate::guestcmd::lazy_options(l, None).context("--lazy")?;
    }
    let bundle = resolve_bundle(&a.bundle)?;
    let mut opts = a.board.to_run_options(&bundle)?;
    opts.echo = a.console;
    opts.cmdline.extend(lazy_cmdline(a.lazy.as_deref()));
    let tl = capture_boot(&bundle, &opts, &a.store)?;
    println!("{}", tl.summary_text());
    if let Some(p) = &a.timeline {
        std::fs::write(p, serde_json::to_string_pretty(&tl)?)?;
    }
    let mut store = Store::open(&a.store, false)?;
    let info = store.newest()?;
    println!(
        "image generation {} on {}: {} kernel pages, {:.1} MiB on the store, kernel {}",
        info.generation,
        a.store.display(),
        info.stream.image_pages,
        info.image_bytes as f64 / 1048576.0,
        info.identity.release
    );
    Ok(ExitCode::SUCCESS)
}
