//! Benchmarks on the board: the same workload booted N times per method, each boot checked
//! to have come up the way its method promises, and the [`BenchReport`] every benchmark
//! writes (`snapboot bench cold`, `snapboot bench compare`).
//!
//! `compare` brings the workload up five ways in one run: cold boot, the kernel's own
//! hibernation resume from swap ([`crate::native`]), snapboot's snapshot boot, snapboot's
//! lazy snapshot boot (user memory paged in on demand) and the lazy image re-captured with
//! the working set of its first request (profiled; made by the restored workload itself,
//! so only where it answers `recapture`). Given a restore kernel
//! ([`crate::restore_kernel`]), it adds three more: the same snapboot images restored by
//! the restore kernel instead of the stock one. [`ComparePlan`] says which methods a run
//! measures and notes the ones it leaves out. Images are made once per method and
//! reused for every run; the kernel-native one is restored from a saved copy of the swap
//! device, because the kernel consumes it on resume.
//!
//! Progress is reported through a `tick` callback, once per boot, so the caller decides how
//! to show it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use thiserror::Error;

use bootparams::Reclaim;
use boottrace::report::{summarize, BenchReport, MethodResult};
use boottrace::{MilestoneKind, Timeline};

mod plan;
pub use plan::{no_recapture_note, ComparePlan, RestoreKernelUse, PROFILED_METHODS};

mod recapture;
pub use recapture::{
    recapture, recapture_steps, CaptureCost, Plan as RecapturePlan, Recapture,
    Source as RecaptureSource, RECAPTURE_METHODS,
};

use crate::bundle::Bundle;
use crate::capture::{attach_store, capture_boot, recapture_boot, CaptureBootError};
use crate::native::{self, NativeError};
use crate::qemu::{run_probe, KernelImage, RunError, RunOptions};

/// Why a measured boot does not count.
#[derive(Debug, Error)]
pub enum BootError {
    /// The board did not answer the probe.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A restore was expected; the device fell back to a cold boot.
    #[error("expected a restore, got a cold boot: {0}")]
    FellBack(String),
    /// A restore was expected; the board came up without one and without saying why.
    #[error("the board came up without restoring an image")]
    NotRestored,
}

/// Why a benchmark stopped.
#[derive(Debug, Error)]
pub enum BenchError {
    /// Zero runs per method were asked for.
    #[error("--runs must be at least 1")]
    NoRuns,
    /// A cold boot of `bench cold` failed.
    #[error("cold boot {run} of {runs} failed")]
    ColdRun {
        /// Which boot (from 1).
        run: usize,
        /// Of how many.
        runs: usize,
        /// Why.
        #[source]
        source: RunError,
    },
    /// A boot of a method did not count.
    #[error("{what}")]
    Boot {
        /// The method and step (`cold boot`, `snapboot resume`, ...).
        what: String,
        /// Why.
        #[source]
        source: BootError,
    },
    /// A snapboot method's capture boot produced no image.
    #[error("{method} capture")]
    Capture {
        /// `snapboot` or `snapboot-lazy`.
        method: &'static str,
        /// Why.
        #[source]
        source: CaptureBootError,
    },
    /// A snapshot boot's store could not be attached.
    #[error(transparent)]
    Store(#[from] CaptureBootError),
    /// The store holds no image after a capture that reported one.
    #[error("{} holds no image after the capture", .0.display())]
    NoImage(PathBuf),
    /// The kernel-native baseline could not be set up.
    #[error(transparent)]
    Native(#[from] NativeError),
    /// A store of the benchmark failed.
    #[error("{what}")]
    StoreFile {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: flashstore::StoreError,
    },
    /// A regex the benchmark waits for is invalid.
    #[error("invalid regex {0:?}: {1}")]
    BadRegex(String, String),
    /// A file of the work directory could not be made or read.
    #[error("{what} {}", path.display())]
    WorkFile {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The methods `compare` measures, the baseline first.
pub const COMPARE_METHODS: [&str; 5] = [
    "cold",
    "kernel-resume",
    "snapboot",
    "snapboot-lazy",
    "snapboot-lazy-profiled",
];

/// The methods `compare` adds with a restore kernel: the `snapboot`, `snapboot-lazy` and
/// `snapboot-lazy-profiled` images, restored by it. Which of all these a run measures:
/// [`ComparePlan`].
pub const RESTORE_KERNEL_METHODS: [&str; 3] = [
    "restore-kernel",
    "restore-kernel-lazy",
    "restore-kernel-lazy-profiled",
];

/// One method's boots, and the size of its image where it has one.
#[derive(Debug, Clone)]
pub struct MethodRuns {
    /// Method name (one of [`COMPARE_METHODS`] for `compare`).
    pub method: &'static str,
    /// Every boot's timeline, in order.
    pub timelines: Vec<Timeline>,
    /// Bytes of the image as the kernel produced it.
    pub image_bytes: Option<u64>,
    /// Bytes the image occupies on its storage.
    pub stored_bytes: Option<u64>,
}

impl MethodRuns {
    /// The method's summary for the report.
    pub fn summary(&self) -> MethodResult {
        let mut m = summarize(self.method, &self.timelines);
        m.image_bytes = self.image_bytes;
        m.stored_bytes = self.stored_bytes;
        m
    }
}

/// Checks that a boot came up the expected way: never through a resume fallback, and with a
/// restore when `want_restore`.
pub fn check_boot(tl: &Timeline, want_restore: bool) -> Result<(), BootError> {
    if let Some(m) = tl.milestone(MilestoneKind::ResumeFallback) {
        return Err(BootError::FellBack(m.detail.clone().unwrap_or_default()));
    }
    if want_restore && tl.first(MilestoneKind::Restored).is_none() {
        return Err(BootError::NotRestored);
    }
    Ok(())
}

/// Runs one scripted boot with the workload's probe and insists it came up the expected way.
pub fn measured_boot(
    bundle: &Bundle,
    opts: &RunOptions,
    want_restore: bool,
) -> Result<Timeline, BootError> {
    let res = run_probe(bundle, opts, &bundle.workload.probe)?;
    if let Some(e) = res.error {
        return Err(e.into());
    }
    check_boot(&res.timeline, want_restore)?;
    Ok(res.timeline)
}

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
}

/// `bench compare`: the methods of `plan` ([`ComparePlan::methods`]), `runs` boots each,
/// with the stores and swap images under `work` (created if missing). Calls `tick`
/// [`ComparePlan::steps`] times.
pub fn compare(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    runs: usize,
    plan: &ComparePlan,
    tick: &mut dyn FnMut(),
) -> Result<Vec<MethodRuns>, BenchError> {
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

    let rk_opts = plan.restore_kernel.as_ref().map(|vmlinux| {
        let mut o = opts.clone();
        o.kernel = KernelImage::Restore(vmlinux.clone());
        o
    });
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
    let n = methods.len();
    for round in 0..runs {
        for j in 0..n {
            let k = (round + j) % n;
            let t = match methods[k].1 {
                Boot::Image(store, o) => resume_boot(bundle, o, store, methods[k].0.method)?,
                Boot::Cold => boot(opts, false, "cold boot")?,
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
    Ok(methods.into_iter().map(|(m, _)| m).collect())
}

/// Profiling rounds of the benchmarks' profiled images. One round profiles what the first
/// request touches after a restore of the plain lazy image; but a profiled image resumes in
/// the re-capture that made it, and the few pages that path touches on its way back to the
/// application were never touched in the first round's window. A second round (restore the
/// profiled image, probe, re-capture; profiles accumulate) adds them: measured 2026-11-24 on
/// `app` with the restore kernel, first request 0.093 s after one round, 0.074 s after two,
/// 0.062 s on the full image (docs/measuring.md).
pub const PROFILE_ROUNDS: usize = 2;

/// The profiled lazy image: a copy of the `lazy` image's store, restored; the workload's
/// probe is its first request (what it touches is the working set), then the restored
/// system re-captures itself with that profile (`snapboot.profile=eager`, the default);
/// [`PROFILE_ROUNDS`] times.
fn profiled_image(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    lazy: &Captured,
    method: &'static str,
) -> Result<Captured, BenchError> {
    let store = work.join(format!("{method}.store"));
    native::sparse_copy(&lazy.store, &store)?;
    let probe = &bundle.workload.probe;
    let answer = regex::Regex::new(&probe.expect)
        .map_err(|e| BenchError::BadRegex(probe.expect.clone(), e.to_string()))?;
    for _ in 0..PROFILE_ROUNDS {
        recapture_boot(bundle, opts, &store, &probe.send, &answer)
            .map_err(|source| BenchError::Capture { method, source })?;
    }
    Captured::open(store)
}

/// Creates the benchmark's work directory if it is missing.
fn make_work(work: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(work).map_err(|source| BenchError::WorkFile {
        what: "creating",
        path: work.to_path_buf(),
        source,
    })
}

/// One measured snapshot boot of the image in `store`.
fn resume_boot(
    bundle: &Bundle,
    opts: &RunOptions,
    store: &Path,
    method: &str,
) -> Result<Timeline, BenchError> {
    let mut o = opts.clone();
    attach_store(&mut o, store, false)?;
    measured_boot(bundle, &o, true).map_err(|source| BenchError::Boot {
        what: format!("{method} resume"),
        source,
    })
}

/// A snapboot image captured for `compare`: its store and sizes.
struct Captured {
    store: PathBuf,
    raw: u64,
    stored: u64,
}

impl Captured {
    /// The newest image of the store at `store`.
    fn open(store: PathBuf) -> Result<Self, BenchError> {
        let f = std::fs::File::open(&store).map_err(|source| BenchError::WorkFile {
            what: "opening",
            path: store.clone(),
            source,
        })?;
        let s = flashstore::Store::open(f).map_err(|source| BenchError::StoreFile {
            what: format!("opening {}", store.display()),
            source,
        })?;
        let image = s
            .newest()
            .ok_or_else(|| BenchError::NoImage(store.clone()))?;
        Ok(Captured {
            raw: image.stats.pages * flashstore::PAGE as u64,
            stored: image.stats.stored_bytes,
            store,
        })
    }

    /// An empty run list for `method`, restoring this image.
    fn runs(&self, method: &'static str) -> MethodRuns {
        MethodRuns {
            method,
            timelines: Vec::new(),
            image_bytes: Some(self.raw),
            stored_bytes: Some(self.stored),
        }
    }
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
        max_mem_mib: crate::qemu::deferred_mib(opts).and(opts.max_mem_mib),
        finished_unix,
        runs,
        methods,
        notes: Vec::new(),
    }
}

/// Writes `report` as pretty JSON to `path`.
pub fn write_json(report: &BenchReport, path: &Path) -> Result<(), BenchError> {
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

mod lazy;
pub use lazy::{lazy_notes, lazy_sizes, lazy_steps, size_word};

mod memory;
pub use memory::{boards as memory_board_list, memory_boards, memory_steps, mib_word, MemBoard};
