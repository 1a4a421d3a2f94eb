//! `bench recapture`: what a re-capture costs a flash store, on the board. A device re-captures (after an
//! update, a new app version, a calibration) and keeps a pinned factory image besides its
//! current one. How much does each re-capture write with storage dedupe, and does dedupe
//! slow the restore down?
//!
//! The workload is captured `captures` times. The first capture is a cold boot's. Every
//! later one comes either from a restored system ([`Source::Restored`], the default): the
//! last image is snapshot-booted, a small change is made to the application's state, and the
//! application re-captures; or from its own cold boot ([`Source::Cold`]: a new boot's memory
//! layout differs from the last one even when its contents do not). Each
//! image is replayed page by page, as it came from the kernel, into three stores that differ
//! only in their dedupe policy (full, selective: the default, off); the first capture
//! becomes the pinned `factory` image, every later one replaces `current`. Every commit's
//! bytes written are recorded. Then the last image is restored `runs` times from each
//! store, and from a fresh store holding only that image (the layout dedupe cannot spoil),
//! the stores taking turns, each round starting with the next one, so drift and the
//! position in a round hit all of them alike.

use crate::measure::{make_work, measured_boot, BenchError, MethodRuns};
use board::capture::{attach_store, capture_boot, create_store, recapture_boot, store_size};
use board::run_options::RunOptions;
use bundle::bundle::Bundle;
use flashstore::{Dedupe, Store, StoreError, WriteOptions};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The stores `recapture` restores from, the baseline (fresh) first.
pub const RECAPTURE_METHODS: [&str; 3] = ["fresh", "selective", "full"];

/// The policies the captures are replayed with.
const POLICIES: [(&str, Option<Dedupe>); 3] = [
    ("full", Some(Dedupe::Full)),
    ("selective", None),
    ("off", Some(Dedupe::Off)),
];

/// Where the re-captures come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Each capture is a cold boot's.
    Cold,
    /// Each re-capture is taken in the system restored from the previous image, after the
    /// application received this console query (for `app`: `update N`), answered by a line
    /// matching `answer`.
    Restored {
        /// The change, typed on the console.
        change: String,
        /// Regex of its answer.
        answer: String,
    },
}

impl Source {
    /// The default change for the `app` workload: `update N` records.
    pub fn app_update(records: u32) -> Self {
        Self::Restored {
            change: format!("update {records}"),
            answer: format!("^updated {records}$"),
        }
    }
}

/// What `recapture` does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Captures (the first is a cold boot's and becomes the pinned factory image).
    pub captures: usize,
    /// Restores of the last image from each store.
    pub runs: usize,
    /// Where re-captures come from.
    pub from: Source,
    /// Pages per chunk in the stores.
    pub chunk_pages: u16,
    /// The policy of the `selective` store ([`Dedupe::SELECTIVE`] by default): compare
    /// floors and run lengths on a workload of one's own.
    pub selective: Dedupe,
}

/// What one capture cost under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureCost {
    /// Capture number, from 1.
    pub capture: usize,
    /// `full`, `selective` or `off`.
    pub policy: &'static str,
    /// `factory` or `current`.
    pub image: &'static str,
    /// Pages of the kernel's stream.
    pub pages: u64,
    /// Pages referenced in chunks other images wrote.
    pub shared_pages: u64,
    /// Bytes of new chunks (compressed).
    pub chunk_bytes: u64,
    /// Every byte the commit wrote: chunks, page list, dedupe table, catalog, superblock.
    pub written_bytes: u64,
}

/// What `recapture` measured.
#[derive(Debug)]
pub struct Recapture {
    /// Every capture under every policy.
    pub costs: Vec<CaptureCost>,
    /// Restores of the last image, per [`RECAPTURE_METHODS`].
    pub methods: Vec<MethodRuns>,
}

/// How many times `recapture` calls `tick`: every capture and every restore.
pub fn recapture_steps(captures: usize, runs: usize) -> u64 {
    (captures + RECAPTURE_METHODS.len() * runs) as u64
}

fn store_err(what: String) -> impl FnOnce(StoreError) -> BenchError {
    move |source| BenchError::StoreFile { what, source }
}

/// A fresh store file of `bytes` (sparse).
fn new_store(path: &Path, bytes: u64) -> Result<Store<File>, BenchError> {
    Ok(create_store(path, bytes, flashstore::ChunkCheck::Xxh3)?)
}

fn open(path: &Path) -> Result<Store<File>, BenchError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|source| BenchError::WorkFile {
            what: "opening",
            path: path.to_path_buf(),
            source,
        })?;
    Store::open(f).map_err(store_err(format!("opening {}", path.display())))
}

/// Copies image `from` of `src` into `dst` as `name`, page by page, with `opts`.
fn replay(
    src: &Store<File>,
    from: &str,
    dst: &mut Store<File>,
    name: &str,
    opts: WriteOptions,
) -> Result<flashstore::Committed, StoreError> {
    let mut r = src.reader(from)?;
    let user = r.user().to_vec();
    let mut w = dst.writer(name, opts)?;
    loop {
        let run = r.next_run(256)?;
        if run.is_empty() {
            break;
        }
        for p in run {
            w.push_page(p)?;
        }
    }
    w.commit(user)
}

/// Runs the benchmark (see the module docs) with its stores under `work`.
pub fn recapture(
    bundle: &Bundle,
    opts: &RunOptions,
    work: &Path,
    plan: &Plan,
    tick: &mut dyn FnMut(),
) -> Result<Recapture, BenchError> {
    let (captures, runs, from) = (plan.captures, plan.runs, &plan.from);
    let base = WriteOptions {
        chunk_pages: plan.chunk_pages,
        dedupe: plan.selective,
        ..WriteOptions::default()
    };
    if runs == 0 || captures == 0 {
        return Err(BenchError::NoRuns);
    }
    let answer = match from {
        Source::Cold => None,
        Source::Restored { answer, .. } => Some(
            regex::Regex::new(answer)
                .map_err(|e| BenchError::BadRegex(answer.clone(), e.to_string()))?,
        ),
    };
    make_work(work)?;
    let size = store_size(opts.mem_mib);
    let path = |n: &str| work.join(format!("recapture-{n}.store"));
    let source = path("source");
    let mut stores: Vec<PathBuf> = Vec::new();
    for (policy, _) in POLICIES {
        // Room for the factory image, the current one and the one replacing it.
        new_store(&path(policy), size)?;
        stores.push(path(policy));
    }
    let mut costs = Vec::new();
    for i in 1..=captures {
        let mut o = opts.clone();
        o.params.images = vec!["src".into()];
        let captured = match (from, &answer) {
            (Source::Restored { change, .. }, Some(answer)) if i > 1 => {
                // The source store keeps the last image until the new one commits.
                recapture_boot(bundle, &o, &source, change, answer)
            }
            _ => {
                // Room for the image and the re-capture replacing it.
                new_store(&source, size)?;
                capture_boot(bundle, &o, &source)
            }
        };
        captured.map_err(|source| BenchError::Capture {
            method: "recapture",
            source,
        })?;
        let src = open(&source)?;
        let image = if i == 1 { "factory" } else { "current" };
        for ((policy, dedupe), store) in POLICIES.iter().zip(&stores) {
            let mut dst = open(store)?;
            let wo = WriteOptions {
                dedupe: dedupe.unwrap_or(base.dedupe),
                pin: i == 1,
                ..base
            };
            let c = replay(&src, "src", &mut dst, image, wo)
                .map_err(store_err(format!("capture {i} into the {policy} store")))?;
            costs.push(CaptureCost {
                capture: i,
                policy,
                image,
                pages: c.image.stats.pages,
                shared_pages: c.image.stats.shared_pages,
                chunk_bytes: c.image.stats.stored_bytes,
                written_bytes: c.written_bytes,
            });
        }
        if i == captures {
            let mut fresh = new_store(&path("fresh"), size)?;
            replay(&src, "src", &mut fresh, "current", base)
                .map_err(store_err("the last capture into a fresh store".into()))?;
        }
        tick();
    }
    // fresh, selective, full: the order of RECAPTURE_METHODS.
    let restore_from = [path("fresh"), path("selective"), path("full")];
    let mut timelines: Vec<Vec<boottrace::Timeline>> = vec![Vec::new(); restore_from.len()];
    for round in 0..runs {
        // Each round starts with another store, so no store always follows the same one.
        for j in 0..restore_from.len() {
            let k = (round + j) % restore_from.len();
            let store = &restore_from[k];
            let mut o = opts.clone();
            attach_store(&mut o, store, false)?;
            o.params.images = vec!["current".into()];
            let method = RECAPTURE_METHODS[k];
            timelines[k].push(measured_boot(bundle, &o, true).map_err(|source| {
                BenchError::Boot {
                    what: format!("restore from the {method} store"),
                    source,
                }
            })?);
            tick();
        }
    }
    let methods = timelines
        .into_iter()
        .zip(RECAPTURE_METHODS)
        .zip(&restore_from)
        .map(|((timelines, method), store)| {
            // What a restore of `current` reads: every chunk it references, whole.
            let (raw, read) = open(store)
                .ok()
                .and_then(|s| {
                    let r = s.image("current")?;
                    let read = s
                        .catalog()
                        .chunks
                        .iter()
                        .filter(|c| r.chunks.binary_search(&c.id).is_ok())
                        .map(|c| u64::from(c.stored_len))
                        .sum();
                    Some((r.stats.pages * flashstore::PAGE as u64, read))
                })
                .unzip();
            MethodRuns {
                method,
                timelines,
                image_bytes: raw,
                stored_bytes: read,
            }
        })
        .collect();
    Ok(Recapture { costs, methods })
}
