//! What every benchmark method is made of: a boot measured and checked to have come up the
//! way its method promises, a captured image with its sizes, and the errors of both. The
//! benchmarks (`compare` in the parent module, and the `lazy`, `memory` and `recapture`
//! modules beside this one) are built from these, so none of them imports another.

use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

use boottrace::report::{boot_throughput, line_throughput, summarize, MethodResult, Throughput};
use boottrace::{Marker, MilestoneKind, Outcome, Timeline};

use crate::native::{self, NativeError};
use board::capture::{attach_store, recapture_boot, CaptureBootError};
use board::qemu::{run_probe, RunError, Session};
use board::run_options::RunOptions;
use bundle::bundle::Bundle;

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
    /// The medium baseline was asked for (`snapboot.baseline=medium`); the boot did not
    /// print a `medium-baseline` line that reads back.
    #[error("expected the medium-baseline marker (snapboot.baseline=medium): {0}")]
    NoBaseline(String),
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
    /// The restorer's boot could not be set up.
    #[error(transparent)]
    Restorer(#[from] board::restorer_boot::RestorerBootError),
    /// The store holds no image after a capture that reported one.
    #[error("{} holds no image after the capture", .0.display())]
    NoImage(PathBuf),
    /// The kernel-native baseline could not be set up.
    #[error(transparent)]
    Native(#[from] NativeError),
    /// The UEFI PC's disk holds no readable store in its partition.
    #[error("the store on the UEFI PC's disk {}: {why}", path.display())]
    Uefi {
        /// The disk.
        path: PathBuf,
        /// Why it cannot be read.
        why: String,
    },
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

/// One method's boots, and the size of its image where it has one.
#[derive(Debug, Clone)]
pub struct MethodRuns {
    /// Method name (one of [`crate::COMPARE_METHODS`] for `compare`).
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

/// Checks that a boot came up the expected way: never through a resume fallback or a
/// refusal of the restorer, and with a restore when `want_restore`.
pub fn check_boot(tl: &Timeline, want_restore: bool) -> Result<(), BootError> {
    if let Some(m) = tl.milestone(MilestoneKind::RestorerRefused) {
        let why = m.detail.clone().unwrap_or_default();
        return Err(BootError::FellBack(format!("the restorer refused: {why}")));
    }
    if let Some(m) = tl.milestone(MilestoneKind::ResumeFallback) {
        return Err(BootError::FellBack(m.detail.clone().unwrap_or_default()));
    }
    if want_restore && tl.first(MilestoneKind::Restored).is_none() {
        return Err(BootError::NotRestored);
    }
    Ok(())
}

/// Checks that a medium-baseline boot read the medium: its console carries a
/// `medium-baseline` marker whose detail reads back as a throughput line; returns it.
/// Otherwise the reason names what the device did instead (fell back, restored, printed
/// something else).
pub fn check_medium_baseline(tl: &Timeline) -> Result<Throughput, BootError> {
    if let Some(t) = boot_throughput(tl, Marker::MediumBaseline) {
        return Ok(t);
    }
    let unreadable = tl.lines.iter().find_map(|l| match Marker::parse(&l.text) {
        Some((Marker::MediumBaseline, d)) if line_throughput(&l.text).is_none() => {
            Some(d.unwrap_or("").to_string())
        }
        _ => None,
    });
    let why = if let Some(d) = unreadable {
        format!("its detail does not read as a throughput line: {d:?}")
    } else if let Some(m) = tl.milestone(MilestoneKind::ResumeFallback) {
        format!(
            "the device fell back to a cold boot: {}",
            m.detail.as_deref().unwrap_or("no reason given")
        )
    } else if tl.milestone(MilestoneKind::Restored).is_some() {
        "the device restored the image instead (a device without the medium baseline?)".into()
    } else {
        "the console has none".into()
    };
    Err(BootError::NoBaseline(why))
}

/// How long a medium-baseline boot may take to power off after its marker.
const BASELINE_POWEROFF: Duration = Duration::from_secs(30);

/// Runs one medium-baseline boot (`opts` carry the store and `snapboot.baseline=medium`):
/// waits for the `medium-baseline` marker, or for the first sign that none is coming (a
/// fallback, a restore, a hand-over, the application ready), then for the power-off, and
/// checks it ([`check_medium_baseline`]).
pub fn medium_boot(bundle: &Bundle, opts: &RunOptions) -> Result<Timeline, BootError> {
    let mut s = Session::start(bundle, opts)?;
    let ends = [
        Marker::MediumBaseline,
        Marker::Fallback,
        Marker::Restored,
        Marker::Handover,
        Marker::HandoverFailed,
        Marker::Ready,
    ];
    let res = s.wait_for_marker(&ends, "the medium-baseline marker", opts.timeout);
    let outcome = match &res {
        Ok((Marker::MediumBaseline, ..)) => match s.wait_exit(BASELINE_POWEROFF) {
            Ok(()) => Outcome::PoweredOff,
            Err(e) => e.outcome(),
        },
        Ok(_) => Outcome::Incomplete,
        Err(e) => e.outcome(),
    };
    let tl = s.finish(outcome);
    res?;
    check_medium_baseline(&tl)?;
    Ok(tl)
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
pub(super) fn profiled_image(
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
pub(super) fn make_work(work: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(work).map_err(|source| BenchError::WorkFile {
        what: "creating",
        path: work.to_path_buf(),
        source,
    })
}

/// One measured snapshot boot of the image in `store`.
pub(super) fn resume_boot(
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
pub(super) struct Captured {
    pub(super) store: PathBuf,
    raw: u64,
    stored: u64,
}

impl Captured {
    /// The newest image of the store at `store`: a store file, or the UEFI PC's disk with
    /// the store in its partition.
    pub(super) fn open(store: PathBuf) -> Result<Self, BenchError> {
        if board::uefi::store_partition(&store).is_ok() {
            let s = board::uefi::open_store(&store, false).map_err(|e| BenchError::Uefi {
                path: store.clone(),
                why: e.to_string(),
            })?;
            return Self::of(&s, store);
        }
        let f = std::fs::File::open(&store).map_err(|source| BenchError::WorkFile {
            what: "opening",
            path: store.clone(),
            source,
        })?;
        let s = flashstore::Store::open(f).map_err(|source| BenchError::StoreFile {
            what: format!("opening {}", store.display()),
            source,
        })?;
        Self::of(&s, store)
    }

    /// The newest image of `s`, the store at `store`.
    fn of<M: flashstore::Medium>(
        s: &flashstore::Store<M>,
        store: PathBuf,
    ) -> Result<Self, BenchError> {
        let image = s
            .newest()
            .ok_or_else(|| BenchError::NoImage(store.clone()))?;
        // What the image takes on the store is every chunk a restore of it reads, shared
        // or not: an image re-captured into its store writes only the chunks it changed
        // (its `stored_bytes`), but needs the others as much.
        // An encrypted image's page list does not open here (the host has no device key):
        // it reads every chunk it lists, whole.
        let cost = match s.read_cost(image) {
            Err(flashstore::StoreError::Locked { .. }) => flashstore::ReadCost {
                chunks: image.chunks.len() as u64,
                chunk_bytes: s
                    .catalog()
                    .chunks
                    .iter()
                    .filter(|c| image.chunks.binary_search(&c.id).is_ok())
                    .map(|c| u64::from(c.stored_len))
                    .sum(),
                used_bytes: 0.0,
            },
            other => other.map_err(|source| BenchError::StoreFile {
                what: format!("reading image {} of {}", image.name, store.display()),
                source,
            })?,
        };
        Ok(Captured {
            raw: image.stats.pages * flashstore::PAGE as u64,
            stored: cost.chunk_bytes,
            store,
        })
    }

    /// An empty run list for `method`, restoring this image.
    pub(super) fn runs(&self, method: &'static str) -> MethodRuns {
        MethodRuns {
            method,
            timelines: Vec::new(),
            image_bytes: Some(self.raw),
            stored_bytes: Some(self.stored),
        }
    }
}
