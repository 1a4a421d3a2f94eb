//! The `cold` and `compare` benchmarks and the report they write.
//!
//! `compare` brings the workload up five ways in one run: cold boot, the kernel's own
//! hibernation resume from swap ([`crate::native`]), snapboot's snapshot boot, snapboot's
//! lazy snapshot boot (user memory paged in on demand) and the lazy image re-captured with
//! the working set of its first request (profiled; made by the restored workload itself,
//! so only where it answers `recapture`). Given a restore kernel
//! (`hostkernel::restore_kernel`), it adds three more: the same snapboot images restored by
//! the restore kernel instead of the stock one. On the PC booted through PVH it adds the
//! `snapboot` image restored by the restorer, with no kernel before the image
//! ([`board::restorer_boot`]). With a restore kernel it also reads the `snapboot` image's
//! extent on the store once per round with plain sequential reads, the medium's baseline
//! ([`crate::MEDIUM_BASELINE`]) every method's load phase is set against. [`ComparePlan`]
//! says which methods a run measures and notes the ones it leaves out. Images are made once
//! per method and reused for every run; the kernel-native one is restored from a saved copy
//! of the swap device, because the kernel consumes it on resume.
//!
//! Progress is reported through a `tick` callback, once per boot, so the caller decides how
//! to show it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bootparams::Reclaim;
use boottrace::report::{boot_throughput, BenchReport, MediumBaseline, MethodResult};
use boottrace::{Marker, Timeline};

use crate::measure::{
    make_work, measured_boot, medium_boot, profiled_image, resume_boot, BenchError, Captured,
    MethodRuns,
};
use crate::native;
use crate::plan::{
    ComparePlan, COMPARE_METHODS, ENCRYPTED_METHODS, MEDIUM_BASELINE, RESTORER_METHODS,
    RESTORE_KERNEL_METHODS,
};
use board::capture::{attach_store, capture_boot};
use board::qemu::run_probe;
use board::restorer_boot::restorer_options;
use board::run_options::{KernelImage, RunOptions};
use bundle::bundle::Bundle;

/// `bench cold`: `runs` cold boots with the workload's probe.
pub fn cold(
    bundle: &Bundle,
    opts: &RunOptions,
    runs: usize,
    tick: &mut dyn FnMut(),
) -> Result<Vec<Timeline>, BenchError> {
    if runs == 0 {
        return Err(BenchError::NoRuns);
    }
    let mut timelines = Vec::new();
    for i in 0..runs {
        let res = run_probe(bundle, opts, &bundle.workload.probe).map_err(|source| {
            BenchError::ColdRun {
                run: i + 1,
                runs,
                source,
            }
        })?;
        if let Some(source) = res.error {
            return Err(BenchError::ColdRun {
                run: i + 1,
                runs,
                source,
            });
        }
        timelines.push(res.timeline);
        tick();
    }
    Ok(timelines)
}

/// How a `compare` method brings the workload up.
enum Boot<'a> {
    /// A cold boot.
    Cold,
    /// The kernel's own resume from the saved swap device.
    KernelNative,
    /// A snapshot boot of the image in this store, with these options (which kernel).
    Image(&'a Path, &'a RunOptions),
    /// The same, of another bundle (the encrypted image's, which holds its device key).
    ImageOf(&'a Bundle, &'a Path, &'a RunOptions),
    /// A restore by the restorer: these options start it on the image's store.
    Restorer(&'a RunOptions),
    /// The medium baseline: these options (the restore kernel, the store,
    /// `snapboot.baseline=medium`) read the image's extent instead of restoring it.
    Medium(&'a RunOptions),
}

/// What `compare` measured: every method's boots, and the medium baseline's.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The methods of the plan, in its order.
    pub methods: Vec<MethodRuns>,
    /// The medium baseline's boots, one per round (none unless the plan measures it).
    pub medium: Vec<Timeline>,
}

impl Compared {
    /// The medium baseline of the run: the `snapboot` image's extent read once per round.
    pub fn medium_baseline(&self) -> Option<MediumBaseline> {
        let reads: Vec<_> = self
            .medium
            .iter()
            .filter_map(|tl| boot_throughput(tl, Marker::MediumBaseline))
            .collect();
        MediumBaseline::from_runs(COMPARE_METHODS[2], &reads)
    }
}

/// `bench compare`: the methods of `plan` ([`ComparePlan::methods`]), `runs` boots each,
/// and the medium baseline once per round when the plan measures it, with the stores and
/// swap images under `work` (created if missing). Calls `tick` [`ComparePlan::steps`]
/// times. `encrypted`: the bundle with a device key and how images are encrypted, for the
/// encrypted methods. Every boot of the run, the captures too, has `opts`'s CPUs.
pub fn compare(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    runs: usize,
    plan: &ComparePlan,
    encrypted: Option<(&Bundle, &bootparams::Encrypt)>,
    tick: &mut dyn FnMut(),
) -> Result<Compared, BenchError> {
    if runs == 0 {
        return Err(BenchError::NoRuns);
    }
    make_work(work)?;
    let boot = |o: &RunOptions, want_restore: bool, what: &str| {
        measured_boot(bundle, o, want_restore).map_err(|source| BenchError::Boot {
            what: what.to_string(),
            source,
        })
    };

    // First every image: the kernel's own hibernation to swap, a snapboot image and a lazy
    // one (and its profiled re-capture, where the workload re-captures itself). Then the
    // boots, in rounds of one boot per method, each round starting with the next method:
    // the host's drift (this one is shared and noisy) and the position after another
    // method's boot hit every method alike.
    let cold = opts.without_store();
    let swap_saved = work.join("kernel-native.swap");
    let swap = work.join("kernel-native.swap.run");
    native::make_swap(&swap, opts.mem_mib)?;
    let native_raw = native::hibernate(bundle, opts, &swap)?;
    native::sparse_copy(&swap, &swap_saved)?;
    let native_disk = std::fs::metadata(&swap_saved)
        .map(|m| m.blocks() * 512)
        .map_err(|source| BenchError::WorkFile {
            what: "reading",
            path: swap_saved.clone(),
            source,
        })?;
    tick();
    let snap = snapboot_image(bundle, opts, work, false)?;
    tick();
    let lazy = snapboot_image(bundle, opts, work, true)?;
    tick();
    let profiled = if plan.profiled {
        let p = profiled_image(bundle, opts, work, &lazy, COMPARE_METHODS[4])?;
        tick();
        Some(p)
    } else {
        None
    };

    // The restorer restores the full image and the profiled lazy one, from their stores.
    let restorer = |image: &Captured| {
        plan.restorer
            .as_ref()
            .map(|elf| restorer_options(bundle, opts, elf, &image.store))
            .transpose()
    };
    let restorer = [
        restorer(&snap)?,
        profiled.as_ref().map(restorer).transpose()?.flatten(),
    ];
    let rk_opts = plan.restore_kernel.as_ref().map(|vmlinux| {
        let mut o = opts.clone();
        o.kernel = KernelImage::Restore(vmlinux.clone());
        o
    });
    let medium_opts = rk_opts
        .as_ref()
        .filter(|_| plan.medium_baseline)
        .map(|rk| medium_options(rk, &snap.store))
        .transpose()?;
    // Each method, and how it boots.
    let mut methods = vec![
        (
            MethodRuns {
                method: COMPARE_METHODS[0],
                timelines: Vec::new(),
                image_bytes: None,
                stored_bytes: None,
            },
            Boot::Cold,
        ),
        (
            MethodRuns {
                method: COMPARE_METHODS[1],
                timelines: Vec::new(),
                image_bytes: Some(native_raw),
                stored_bytes: Some(native_disk),
            },
            Boot::KernelNative,
        ),
    ];
    let images = [Some(&snap), Some(&lazy), profiled.as_ref()];
    for (image, name) in images.iter().zip(&COMPARE_METHODS[2..]) {
        if let Some(image) = image {
            methods.push((image.runs(name), Boot::Image(&image.store, opts)));
        }
    }
    if let Some(rk) = rk_opts.as_ref() {
        for (image, name) in images.iter().zip(RESTORE_KERNEL_METHODS) {
            if let Some(image) = image {
                methods.push((image.runs(name), Boot::Image(&image.store, rk)));
            }
        }
    }
    for ((image, name), r) in [Some(&snap), profiled.as_ref()]
        .iter()
        .zip(RESTORER_METHODS)
        .zip(&restorer)
    {
        if let (Some(image), Some(r)) = (image, r) {
            methods.push((image.runs(name), Boot::Restorer(r)));
        }
    }
    // The encrypted images, full and lazy: captured from the keyed bundle with
    // `snapboot.encrypt=`, which every boot of them carries; restored by the restore kernel.
    let mut enc = Vec::new();
    let rk_enc = rk_opts.as_ref().zip(encrypted).map(|(rk, (_, how))| {
        let mut o = rk.clone();
        o.params.encrypt = how.clone();
        o
    });
    if let (Some((b, how)), Some(rk), true) = (encrypted, rk_enc.as_ref(), plan.encrypted) {
        for (method, lazy) in ENCRYPTED_METHODS.into_iter().zip([false, true]) {
            let mut o = opts.clone();
            o.params.encrypt = how.clone();
            o.params.lazy = lazy.then_some(Reclaim::Max);
            let store = work.join(format!("{method}.store"));
            let _ = std::fs::remove_file(&store);
            capture_boot(b, &o, &store).map_err(|source| BenchError::Capture { method, source })?;
            tick();
            enc.push((method, b, Captured::open(store)?));
        }
        for (method, b, image) in &enc {
            methods.push((image.runs(method), Boot::ImageOf(b, &image.store, rk)));
        }
    }
    if let Some(o) = medium_opts.as_ref() {
        methods.push((snap.runs(MEDIUM_BASELINE), Boot::Medium(o)));
    }
    let n = methods.len();
    for round in 0..runs {
        for j in 0..n {
            let k = (round + j) % n;
            let t = match methods[k].1 {
                Boot::Image(store, o) => resume_boot(bundle, o, store, methods[k].0.method)?,
                Boot::ImageOf(b, store, o) => resume_boot(b, o, store, methods[k].0.method)?,
                Boot::Cold => boot(&cold, false, "cold boot")?,
                Boot::Restorer(o) => boot(o, true, "restorer restore")?,
                Boot::Medium(o) => medium_boot(bundle, o).map_err(|source| BenchError::Boot {
                    what: "medium baseline read".into(),
                    source,
                })?,
                Boot::KernelNative => {
                    native::sparse_copy(&swap_saved, &swap)?;
                    let o = native::with_swap(opts, &swap, false);
                    boot(&o, true, "kernel-native resume")?
                }
            };
            methods[k].0.timelines.push(t);
            tick();
        }
    }
    let (medium, methods): (Vec<_>, Vec<_>) = methods
        .into_iter()
        .map(|(m, _)| m)
        .partition(|m| m.method == MEDIUM_BASELINE);
    Ok(Compared {
        methods,
        medium: medium.into_iter().flat_map(|m| m.timelines).collect(),
    })
}

/// The medium baseline's boot: the restore kernel's options `rk`, on the full image's
/// `store`, told to read the image's extent instead of restoring it
/// (`snapboot.baseline=medium`).
fn medium_options(rk: &RunOptions, store: &Path) -> Result<RunOptions, BenchError> {
    let mut o = rk.clone();
    attach_store(&mut o, store, false)?;
    o.params.medium_baseline = true;
    Ok(o)
}

/// Captures one snapboot image (full or lazy) into its own store under `work`.
fn snapboot_image(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    lazy: bool,
) -> Result<Captured, BenchError> {
    let method = if lazy {
        COMPARE_METHODS[3]
    } else {
        COMPARE_METHODS[2]
    };
    let store = work.join(format!("{method}.store"));
    let _ = std::fs::remove_file(&store);
    let mut capture_opts = opts.clone();
    capture_opts.params.lazy = lazy.then_some(Reclaim::Max);
    capture_boot(bundle, &capture_opts, &store)
        .map_err(|source| BenchError::Capture { method, source })?;
    Captured::open(store)
}

/// The report of a benchmark run of `bundle` with `opts`, finished now; `notes` say what
/// the run left out and why.
pub fn report(
    bench: &str,
    bundle: &Bundle,
    opts: &RunOptions,
    runs: usize,
    methods: Vec<MethodResult>,
    notes: Vec<String>,
) -> BenchReport {
    let finished_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut r = report_at(bench, bundle, opts, runs, methods, finished_unix);
    r.notes = notes;
    r
}

fn report_at(
    bench: &str,
    bundle: &Bundle,
    opts: &RunOptions,
    runs: usize,
    methods: Vec<MethodResult>,
    finished_unix: u64,
) -> BenchReport {
    BenchReport {
        bench: bench.into(),
        workload: bundle.workload.name.clone(),
        kernel: bundle.kernel.release.clone(),
        accel: format!("{:?}", opts.accel).to_lowercase(),
        mem_mib: opts.mem_mib,
        max_mem_mib: board::run_options::deferred_mib(opts).and(opts.max_mem_mib),
        smp: Some(opts.smp),
        finished_unix,
        runs,
        methods,
        medium_baseline: None,
        notes: Vec::new(),
    }
}

/// Writes `report` as pretty JSON to `path`.
pub fn write_json(report: &BenchReport, path: &Path) -> Result<(), BenchError> {
    write_json_value(report, path)
}

/// Writes a benchmark's own report (one that carries a [`BenchReport`] and more) as pretty
/// JSON to `path`.
pub fn write_json_value(report: &impl serde::Serialize, path: &Path) -> Result<(), BenchError> {
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other);
    json.and_then(|j| std::fs::write(path, j))
        .map_err(|source| BenchError::WorkFile {
            what: "writing",
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests;
