//! `snapboot bench compare`: in one run, the same workload brought up four ways, each N
//! times: cold boot, the kernel's own hibernation resume from swap, snapboot's snapshot
//! boot, and snapboot's lazy snapshot boot (user memory paged in on demand). Images are
//! made once per method and reused for every run (the kernel-native one is restored from a
//! saved copy of the swap device, because the kernel consumes it on resume).

use crate::bench::{progress, publish};
use crate::boardopts::BoardOpts;
use anyhow::{bail, Context, Result};
use board::capture::{attach_store, capture_boot};
use board::home::bundle_or_build;
use board::native;
use board::qemu::run_probe;
use board::{Bundle, RunOptions};
use boottrace::report::summarize;
use boottrace::{MilestoneKind, Timeline};
use clap::Args;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    capture_opts.params.lazy = lazy.then_some(bootparams::Reclaim::Max);
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
        .unwrap_or_else(|| board::home::home().join("bench"));
    std::fs::create_dir_all(&work)?;
    let pb = progress(4 * a.runs as u64 + 3, "compare");

    let mut cold = Vec::new();
    for _ in 0..a.runs {
        cold.push(measured_boot(&bundle, &opts, false).context("cold boot")?);
        pb.inc(1);
    }

    let swap_saved = work.join("kernel-native.swap");
    let swap = work.join("kernel-native.swap.run");
    native::make_swap(&swap, opts.mem_mib)?;
    let native_raw = native::hibernate(&bundle, &opts, &swap)?;
    native::sparse_copy(&swap, &swap_saved)?;
    let native_disk = std::fs::metadata(&swap_saved).map(|m| m.blocks() * 512)?;
    pb.inc(1);
    let mut resumed = Vec::new();
    for _ in 0..a.runs {
        native::sparse_copy(&swap_saved, &swap)?;
        let o = native::with_swap(&opts, &swap, false);
        resumed.push(measured_boot(&bundle, &o, true).context("kernel-native resume")?);
        pb.inc(1);
    }

    let (info, snap) = snapboot_method(&bundle, &opts, &work, false, a.runs, &pb)?;
    let (image_raw, image_stored) = (info.stats.raw_bytes, info.image_bytes);
    let (lazy_info, lazy) = snapboot_method(&bundle, &opts, &work, true, a.runs, &pb)?;
    pb.finish_and_clear();

    if let Some(p) = &a.analyze {
        let runs = [
            ("cold", &cold),
            ("kernel-resume", &resumed),
            ("snapboot", &snap),
            ("snapboot-lazy", &lazy),
        ]
        .into_iter()
        .filter_map(|(name, tls)| tls.first().map(|t| (name.to_string(), t.clone())))
        .collect();
        crate::analyzecmd::report_runs(runs, p)?;
    }
    let mut methods = vec![summarize("cold", &cold)];
    let mut m = summarize("kernel-resume", &resumed);
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
