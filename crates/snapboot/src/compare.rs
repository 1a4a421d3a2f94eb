//! `snapboot bench compare`: in one run, the same workload brought up four ways, each N
//! times: cold boot, the kernel's own hibernation resume from swap, snapboot's snapshot
//! boot, and snapboot's lazy snapshot boot (user memory paged in on demand). Images are made once per method and reused for every run (the kernel-native one is
//! restored from a saved copy of the swap device, because the kernel consumes it on resume).

use crate::bench::{bundle_or_build, progress, publish, summarize};
use crate::cli::BoardOpts;
use crate::snapcmd::{attach_store, capture_boot, lazy_cmdline};
use anyhow::{bail, Context, Result};
use board::qemu::{run_probe, Disk, Session};
use board::{Bundle, RunOptions};
use boottrace::{MilestoneKind, Outcome, Timeline};
use clap::Args;
use regex::Regex;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

/// Arguments of `snapboot bench compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// Boots per method.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Working directory for the store and swap images (default: SNAPBOOT_HOME/bench).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Write an HTML report with one boot of each method side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    #[command(flatten)]
    board: BoardOpts,
}

/// Runs one scripted boot and insists it came up the expected way.
fn measured_boot(bundle: &Bundle, opts: &RunOptions, want_restore: bool) -> Result<Timeline> {
    let res = run_probe(bundle, opts, &bundle.workload.probe)?;
    if let Some(e) = res.error {
        bail!("{e}");
    }
    let tl = res.timeline;
    if let Some(m) = tl.milestone(MilestoneKind::ResumeFallback) {
        bail!(
            "expected a restore, got a cold boot: {}",
            m.detail.clone().unwrap_or_default()
        );
    }
    if want_restore && tl.first(MilestoneKind::Restored).is_none() {
        bail!("the board came up without restoring an image");
    }
    Ok(tl)
}

/// Makes an empty swap device file of `mib` MiB.
fn make_swap(path: &Path, mib: u32) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.set_len(u64::from(mib) << 20)?;
    let out = Command::new("mkswap")
        .arg(path)
        .output()
        .context("running mkswap (package util-linux)")?;
    if !out.status.success() {
        bail!("mkswap failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn sparse_copy(from: &Path, to: &Path) -> Result<()> {
    let st = Command::new("cp")
        .args(["--sparse=always", "-f"])
        .arg(from)
        .arg(to)
        .status()?;
    if !st.success() {
        bail!("copying {} to {} failed", from.display(), to.display());
    }
    Ok(())
}

/// Hibernates the workload with the kernel's own mechanism into `swap`; returns the raw
/// image size the kernel reported.
fn kernel_hibernate(bundle: &Bundle, opts: &RunOptions, swap: &Path) -> Result<u64> {
    let mut o = opts.clone();
    o.disks.insert(
        0,
        Disk {
            path: swap.to_path_buf(),
            readonly: false,
        },
    );
    o.cmdline.push("snapboot.khibernate=/dev/vdb".into());
    let mut s = Session::start(bundle, &o)?;
    let wrote = Regex::new(r"PM: hibernation: Wrote (\d+) kbytes")?;
    let line = s.wait_for(&wrote, "the kernel to write its image", o.timeout);
    let _ = s.wait_exit(Duration::from_secs(60));
    s.finish(Outcome::PoweredOff);
    let (line, _) = line.context("kernel-native hibernation")?;
    let kb: u64 = wrote
        .captures(&line)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or(0);
    Ok(kb * 1024)
}

/// Captures one snapboot image (full or lazy) into its own store under `work`, then boots
/// it `runs` times.
fn snapboot_method(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    lazy: bool,
    runs: usize,
    pb: &indicatif::ProgressBar,
) -> Result<(snapimg::ImageInfo, Vec<Timeline>)> {
    let name = if lazy { "snapboot-lazy" } else { "snapboot" };
    let store = work.join(format!("{name}.store"));
    let _ = std::fs::remove_file(&store);
    let mut capture_opts = opts.clone();
    capture_opts
        .cmdline
        .extend(lazy_cmdline(lazy.then_some("max")));
    capture_boot(bundle, &capture_opts, &store).with_context(|| format!("{name} capture"))?;
    let info = snapimg::Store::open(&store, false)?.newest()?;
    pb.inc(1);
    let mut tls = Vec::new();
    for _ in 0..runs {
        let mut o = opts.clone();
        attach_store(&mut o, &store, false)?;
        tls.push(measured_boot(bundle, &o, true).with_context(|| format!("{name} resume"))?);
        pb.inc(1);
    }
    Ok((info, tls))
}

/// `snapboot bench compare`.
pub fn compare(a: CompareArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let bundle = bundle_or_build(&a.workload)?;
    let opts = a.board.to_run_options(&bundle)?;
    let work = a
        .workdir
        .clone()
        .unwrap_or_else(|| crate::cli::home().join("bench"));
    std::fs::create_dir_all(&work)?;
    let pb = progress(4 * a.runs as u64 + 3, "compare");

    let mut cold = Vec::new();
    for _ in 0..a.runs {
        cold.push(measured_boot(&bundle, &opts, false).context("cold boot")?);
        pb.inc(1);
    }

    let swap_saved = work.join("kernel-native.swap");
    let swap = work.join("kernel-native.swap.run");
    make_swap(&swap, opts.mem_mib)?;
    let native_raw = kernel_hibernate(&bundle, &opts, &swap)?;
    sparse_copy(&swap, &swap_saved)?;
    let native_disk = std::fs::metadata(&swap_saved).map(|m| m.blocks() * 512)?;
    pb.inc(1);
    let mut native = Vec::new();
    for _ in 0..a.runs {
        sparse_copy(&swap_saved, &swap)?;
        let mut o = opts.clone();
        o.disks.insert(
            0,
            Disk {
                path: swap.clone(),
                readonly: false,
            },
        );
        o.cmdline.push("snapboot.kresume=/dev/vdb".into());
        native.push(measured_boot(&bundle, &o, true).context("kernel-native resume")?);
        pb.inc(1);
    }

    let (info, snap) = snapboot_method(&bundle, &opts, &work, false, a.runs, &pb)?;
    let (image_raw, image_stored) = (info.stats.raw_bytes, info.image_bytes);
    let (lazy_info, lazy) = snapboot_method(&bundle, &opts, &work, true, a.runs, &pb)?;
    pb.finish_and_clear();

    if let Some(p) = &a.analyze {
        let runs = [
            ("cold", &cold),
            ("kernel-resume", &native),
            ("snapboot", &snap),
            ("snapboot-lazy", &lazy),
        ]
        .into_iter()
        .filter_map(|(name, tls)| tls.first().map(|t| (name.to_string(), t.clone())))
        .collect();
        crate::analyzecmd::report_runs(runs, p)?;
    }
    let mut methods = vec![summarize("cold", &cold)];
    let mut m = summarize("kernel-resume", &native);
    m.image_bytes = Some(native_raw);
    m.stored_bytes = Some(native_disk);
    methods.push(m);
    let mut m = summarize("snapboot", &snap);
    m.image_bytes = Some(image_raw);
    m.stored_bytes = Some(image_stored);
    methods.push(m);
    let mut m = summarize("snapboot-lazy", &lazy);
    m.image_bytes = Some(lazy_info.stats.raw_bytes);
    m.stored_bytes = Some(lazy_info.image_bytes);
    methods.push(m);
    publish(
        "compare",
        &bundle,
        &opts,
        a.runs,
        methods,
        a.json.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}
