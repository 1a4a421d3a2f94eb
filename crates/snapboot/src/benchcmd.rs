//! `snapboot bench cold`, `compare`, `lazy`, `memory`, `recapture` and `endurance`: the
//! flags, then `bench` does the boots and makes the
//! [`boottrace::report::BenchReport`] (median and spread of every milestone and of TTI per
//! method), which is printed and written as JSON.

use crate::boardopts::BoardOpts;
use crate::output::{progress, publish, report_runs};
use anyhow::{bail, Context, Result};
use bench::{self, MethodRuns};
use bundle::home::bundle_or_build;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `snapboot bench cold`.
/// Where a benchmark writes: its JSON report and its stores.
#[derive(Args, Debug)]
pub struct ReportOpts {
    /// Write the report as JSON (TTI and phases, and what the benchmark adds).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Working directory for the stores and swap images (default: SNAPBOOT_HOME/bench).
    #[arg(long)]
    workdir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ColdArgs {
    /// Built-in workload name or bundle directory (built on first use if missing).
    #[arg(long, default_value = "shell")]
    workload: String,
    /// Number of boots.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an HTML boot-analysis report with every run side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    #[command(flatten)]
    board: BoardOpts,
}

/// Arguments of `snapboot bench compare`.
#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// Boots per method.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    out: ReportOpts,
    /// Write an HTML report with one boot of each method side by side.
    #[arg(long)]
    analyze: Option<PathBuf>,
    /// Leave out the restore-kernel methods even when a restore kernel is built.
    #[arg(long)]
    no_restore_kernel: bool,
    /// Leave out the restorer's method (measured with the restorer `make build` builds: on
    /// the PC through PVH, or $SNAPBOOT_RESTORER; under UEFI the EFI application, or
    /// $SNAPBOOT_RESTORER_EFI; on the arm64 board the arm64 EFI application U-Boot starts,
    /// or $SNAPBOOT_RESTORER_EFI_ARM64).
    #[arg(long)]
    no_restorer: bool,
    /// Leave out the medium baseline: once per round the restore kernel reads the
    /// `snapboot` image's extent on the store with plain sequential 1 MiB reads
    /// (`snapboot.baseline=medium`), and every method's load phase is reported as a share
    /// of that ("of medium"). Without a restore kernel there is none.
    #[arg(long)]
    no_medium_baseline: bool,
    #[command(flatten)]
    board: BoardOpts,
}

/// Arguments of `snapboot bench lazy`.
#[derive(Args, Debug)]
pub struct LazyArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// How much each lazy capture pages out (as `--lazy` takes it), comma separated.
    #[arg(long, default_value = "64M,128M,max", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Restores per image.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    out: ReportOpts,
    #[command(flatten)]
    board: BoardOpts,
}

/// `snapboot bench lazy`: a lazy image per size and its profiled re-capture, restored in
/// turn (on the restore kernel with `--restore-kernel`).
pub fn lazy(a: LazyArgs) -> Result<ExitCode> {
    let sizes = a
        .sizes
        .iter()
        .map(|w| {
            bootparams::parse_reclaim(w)
                .ok_or_else(|| anyhow::anyhow!("--sizes {w}: expected max or a size such as 96M"))
        })
        .collect::<Result<Vec<_>>>()?;
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let opts = a.board.to_run_options(&bundle)?;
    let work = workdir(&a.out.workdir);
    let steps = bench::lazy_steps(&bundle.workload, sizes.len(), a.runs);
    let notes = bench::lazy_notes(&bundle.workload, &sizes);
    boot_and_publish(
        "lazy",
        steps,
        (&bundle, &opts),
        a.runs,
        notes,
        a.out.json.as_deref(),
        |tick| bench::lazy_sizes(&bundle, &opts, &work, &sizes, a.runs, tick),
    )
}

/// The benchmarks' working directory: `--workdir`, else SNAPBOOT_HOME/bench.
fn workdir(given: &Option<PathBuf>) -> PathBuf {
    given
        .clone()
        .unwrap_or_else(|| bundle::home::home().join("bench"))
}

/// Runs a benchmark's `steps` boots of `board` (bundle and options) under a progress bar,
/// then prints (and writes as JSON) the summary of every method. The `notes` (what the run
/// leaves out) are printed before the boots and go into the report.
fn boot_and_publish(
    name: &str,
    steps: u64,
    (bundle, opts): (&bundle::Bundle, &board::RunOptions),
    runs: usize,
    notes: Vec<String>,
    json: Option<&std::path::Path>,
    boots: impl FnOnce(&mut dyn FnMut()) -> Result<Vec<MethodRuns>, bench::BenchError>,
) -> Result<ExitCode> {
    print_notes(&notes);
    let pb = progress(steps, name);
    let methods = boots(&mut || pb.inc(1));
    pb.finish_and_clear();
    let methods = methods?.iter().map(MethodRuns::summary).collect();
    publish(name, bundle, opts, runs, methods, notes, json)?;
    Ok(ExitCode::SUCCESS)
}

/// What a benchmark leaves out, on stderr before its boots (the report repeats it).
fn print_notes(notes: &[String]) {
    for n in notes {
        eprintln!("snapboot: note: {n}");
    }
}

/// Arguments of `snapboot bench memory`.
#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// Board sizes (total RAM), comma separated; each above --mem is also measured booting
    /// with --mem and deferring the rest.
    #[arg(long, default_value = "512M,4G,16G", value_delimiter = ',')]
    sizes: Vec<String>,
    /// Cold and snapshot boots per board.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    out: ReportOpts,
    /// The boot memory of the deferring boards (--mem; default 512M).
    #[command(flatten)]
    board: BoardOpts,
}

/// `snapboot bench memory`: boards of each size with and without deferred memory, a cold
/// and a snapshot boot of each per round.
pub fn memory(a: MemoryArgs) -> Result<ExitCode> {
    let sizes = a
        .sizes
        .iter()
        .map(|w| {
            anyhow::Context::with_context(board::run_options::parse_mem_mib(w), || {
                format!("--sizes {w}")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let mut opts = a.board.to_run_options(&bundle)?;
    if !a.board.mem_given() {
        opts.mem_mib = 512;
    }
    for &s in sizes.iter().filter(|&&s| s > opts.mem_mib) {
        board::run_options::check_max_mem(opts.mem_mib, s)?;
    }
    let boards = bench::memory_board_list(&sizes, opts.mem_mib);
    let work = workdir(&a.out.workdir);
    let steps = bench::memory_steps(boards.len(), a.runs);
    boot_and_publish(
        "memory",
        steps,
        (&bundle, &opts),
        a.runs,
        Vec::new(),
        a.out.json.as_deref(),
        |tick| bench::memory_boards(&bundle, &opts, &work, &boards, a.runs, tick),
    )
}

/// Arguments of `snapboot bench recapture`.
#[derive(Args, Debug)]
pub struct RecaptureArgs {
    /// Built-in workload name or bundle directory.
    #[arg(long, default_value = "app")]
    workload: String,
    /// Captures (the first, a cold boot's, becomes the pinned factory image).
    #[arg(long, default_value_t = 10)]
    captures: usize,
    /// Where re-captures come from: `restored` (snapshot-boot the last image, change the
    /// state with --change-records, re-capture) or `cold` (each from its own cold boot).
    #[arg(long, value_parser = ["restored", "cold"], default_value = "restored")]
    from: String,
    /// Records the `app` workload changes (`update N`) before each re-capture.
    #[arg(long, default_value_t = 100)]
    change_records: u32,
    /// The selective store's policy: selective:USE or selective:USE:RUN (default: selective,
    /// i.e. selective:90).
    #[arg(long, value_name = "POLICY")]
    selective: Option<String>,
    /// Pages per chunk in the stores.
    #[arg(long, default_value_t = flashstore::DEFAULT_CHUNK_PAGES,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    chunk_pages: u16,
    /// Restores of the last image from each store.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(flatten)]
    out: ReportOpts,
    #[command(flatten)]
    board: BoardOpts,
}

/// `snapboot bench recapture`: bytes written per re-capture under each dedupe policy, and
/// the restore time of the last image from each store against a fresh store.
pub fn recapture(a: RecaptureArgs) -> Result<ExitCode> {
    if a.runs == 0 || a.captures == 0 {
        bail!(bench::BenchError::NoRuns);
    }
    let selective = match &a.selective {
        None => flashstore::Dedupe::SELECTIVE,
        Some(w) => match bootparams::parse_dedupe(w) {
            Some(d @ flashstore::Dedupe::Selective { .. }) => d,
            _ => anyhow::bail!(
                "--selective {w}: expected selective, selective:USE or selective:USE:RUN (or runs:N)"
            ),
        },
    };
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let opts = a.board.to_run_options(&bundle)?;
    let work = workdir(&a.out.workdir);
    let from = match a.from.as_str() {
        "cold" => bench::RecaptureSource::Cold,
        _ => {
            anyhow::ensure!(
                bundle.workload.name == "app",
                "--from restored needs a workload that changes its state on request (`app`); \
                 use --from cold"
            );
            bench::RecaptureSource::app_update(a.change_records)
        }
    };
    let pb = progress(bench::recapture_steps(a.captures, a.runs), "recapture");
    let plan = bench::RecapturePlan {
        captures: a.captures,
        runs: a.runs,
        from: from.clone(),
        chunk_pages: a.chunk_pages,
        selective,
    };
    let r = bench::recapture(&bundle, &opts, &work, &plan, &mut || pb.inc(1));
    pb.finish_and_clear();
    let r = r?;
    let mib = |b: u64| b as f64 / 1048576.0;
    // A full image's stored bytes: the first capture with dedupe off.
    let full = r
        .costs
        .iter()
        .find(|c| c.capture == 1 && c.policy == "off")
        .map_or(1, |c| c.chunk_bytes.max(1));
    match &from {
        bench::RecaptureSource::Cold => println!("re-captures: each from its own cold boot"),
        bench::RecaptureSource::Restored { change, .. } => println!(
            "re-captures: in the system restored from the previous image, after `{change}`"
        ),
    }
    match selective {
        flashstore::Dedupe::Selective { min_use, min_run } => println!(
            "chunks of {} pages; selective dedupe ({}) references an old chunk only when the \
             image uses {min_use} % of it, in runs of {min_run} page(s) or more",
            a.chunk_pages,
            bootparams::dedupe_word(selective),
        ),
        other => println!(
            "chunks of {} pages; selective store: {other:?}",
            a.chunk_pages
        ),
    }
    println!(
        "bytes written per capture (MiB; % of a full image's {:.1} MiB of chunks)",
        mib(full)
    );
    println!(
        "{:>7}  {:>22} {:>22} {:>22}",
        "capture", "full", "selective", "off"
    );
    for i in 1..=a.captures {
        let cell = |p: &str| {
            r.costs
                .iter()
                .find(|c| c.capture == i && c.policy == p)
                .map_or(String::new(), |c| {
                    format!(
                        "{:.1} ({:.1}%, {} shared)",
                        mib(c.written_bytes),
                        100.0 * c.written_bytes as f64 / full as f64,
                        c.shared_pages
                    )
                })
        };
        println!(
            "{i:>7}  {:>22} {:>22} {:>22}",
            cell("full"),
            cell("selective"),
            cell("off")
        );
    }
    for p in ["full", "selective", "off"] {
        let re: Vec<f64> = r
            .costs
            .iter()
            .filter(|c| c.policy == p && c.capture > 1)
            .map(|c| 100.0 * c.written_bytes as f64 / full as f64)
            .collect();
        let chunks: u64 = r
            .costs
            .iter()
            .filter(|c| c.policy == p)
            .map(|c| c.chunk_bytes)
            .sum();
        let written: u64 = r
            .costs
            .iter()
            .filter(|c| c.policy == p)
            .map(|c| c.written_bytes)
            .sum();
        if let Some(st) = boottrace::Stats::from_samples(&re) {
            println!(
                "{p:>9}: a re-capture writes {:.1}% of a full image (median; {:.1}..{:.1}%); \
                 metadata adds {:.1}% to the chunk bytes written",
                st.median,
                st.min,
                st.max,
                100.0 * written.saturating_sub(chunks) as f64 / chunks.max(1) as f64
            );
        }
    }
    let methods: Vec<_> = r.methods.iter().map(MethodRuns::summary).collect();
    let report = publish(
        "recapture",
        &bundle,
        &opts,
        a.runs,
        methods,
        Vec::new(),
        None,
    )?;
    if let Some(p) = &a.out.json {
        /// The JSON of `bench recapture`: the restores' report and what each capture wrote.
        #[derive(serde::Serialize)]
        struct RecaptureJson<'a> {
            restores: &'a boottrace::report::BenchReport,
            captures: &'a [bench::CaptureCost],
        }
        let v = RecaptureJson {
            restores: &report,
            captures: &r.costs,
        };
        std::fs::write(p, serde_json::to_string_pretty(&v)?)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot bench cold`: N cold boots with the workload's probe.
pub fn cold(a: ColdArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!(bench::BenchError::NoRuns);
    }
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let opts = a.board.to_run_options(&bundle)?;
    let pb = progress(a.runs as u64, "cold boots");
    let timelines = bench::cold(&bundle, &opts, a.runs, &mut || pb.inc(1));
    pb.finish_and_clear();
    let timelines = timelines?;
    if let Some(p) = &a.analyze {
        let runs = timelines
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("cold #{}", i + 1), t.clone()))
            .collect();
        report_runs(runs, p)?;
    }
    let cold = MethodRuns {
        method: "cold",
        timelines,
        image_bytes: None,
        stored_bytes: None,
    };
    let methods = vec![cold.summary()];
    publish(
        "cold",
        &bundle,
        &opts,
        a.runs,
        methods,
        Vec::new(),
        a.json.as_deref(),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `snapboot bench compare`: cold, kernel-native resume, snapboot, lazy and profiled lazy
/// snapboot, the snapboot images restored by the restore kernel when one is built, and the
/// snapboot image restored by the restorer on the PC booted through PVH; what the workload,
/// board or host cannot support is left out with a note ([`bench::ComparePlan`]). With a
/// restore kernel, the medium baseline every load phase is set against. Every boot, the
/// captures too, has `--smp` CPUs; the report records them.
pub fn compare(a: CompareArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!(bench::BenchError::NoRuns);
    }
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let mut opts = a.board.to_run_options(&bundle)?;
    // --encrypt adds the encrypted methods; every other method stays in the clear.
    opts.params.encrypt = bootparams::Encrypt::Off;
    // With --restore-kernel every boot would start on the restore kernel: the cold baseline
    // would be a hand-over to the stock kernel, and no method would use the stock kernel.
    anyhow::ensure!(
        !matches!(opts.kernel, board::run_options::KernelImage::Restore(_)),
        "bench compare measures the restore kernel as methods of its own (restore-kernel, \
         restore-kernel-lazy) beside the stock kernel's; drop --restore-kernel"
    );
    let work = workdir(&a.out.workdir);
    let restore_kernel = if a.no_restore_kernel {
        bench::RestoreKernelUse::Declined
    } else {
        let release = &bundle.kernel.release;
        match hostkernel::restore_kernel::cached(
            &bundle::home::restore_kernel_cache(),
            &bundle.kernel,
        ) {
            Some(k) => bench::RestoreKernelUse::Measured(k.image),
            None => bench::RestoreKernelUse::NotBuilt(release.clone()),
        }
    };
    let restorer = if a.no_restorer {
        bench::RestorerUse::Declined
    } else if let Some(why) = board::restorer_boot::unsupported(&bundle) {
        bench::RestorerUse::Unsupported(why)
    } else {
        let uefi = opts.firmware == board::run_options::Firmware::Uefi;
        let elf = bundle::home::restorer_program(bundle.kernel.arch, uefi).context(
            "bench compare measures the restorer on this board (--no-restorer leaves it out)",
        )?;
        bench::RestorerUse::Measured(elf)
    };
    let mut plan = bench::ComparePlan::new(&bundle.workload, restore_kernel)
        .with_restorer(restorer)
        .with_medium_baseline(!a.no_medium_baseline);
    let keyed = match a.board.encrypt() {
        None => None,
        Some(how @ bootparams::Encrypt::KeyFile) => {
            plan = plan.with_encrypted();
            // A device key of this run, and the bundle that carries it.
            std::fs::create_dir_all(&work).with_context(|| format!("making {}", work.display()))?;
            let key = work.join("device.key");
            let _ = std::fs::remove_file(&key);
            imagekey::DeviceSecret::generate()?.save(&key)?;
            let b = bundle::home::build_keyed(&bundle, &key, &work.join("bundle-encrypted"))?;
            Some((b, how.clone()))
        }
        Some(other) => bail!(
            "bench compare --encrypt {}: only `key` is measured (a key file in the bundle)",
            other.word()
        ),
    };
    print_notes(&plan.notes);
    let pb = progress(plan.steps(a.runs), "compare");
    let encrypted = keyed.as_ref().map(|(b, how)| (b, how));
    let compared = bench::compare(&bundle, &opts, &work, a.runs, &plan, encrypted, &mut || {
        pb.inc(1)
    });
    pb.finish_and_clear();
    let compared = compared?;

    if let Some(p) = &a.analyze {
        let medium = compared.medium.first().map(|t| (bench::MEDIUM_BASELINE, t));
        let runs = compared
            .methods
            .iter()
            .filter_map(|m| m.timelines.first().map(|t| (m.method, t)))
            .chain(medium)
            .map(|(name, t)| (name.to_string(), t.clone()))
            .collect();
        report_runs(runs, p)?;
    }
    let methods = compared.methods.iter().map(MethodRuns::summary).collect();
    let report = bench::report("compare", &bundle, &opts, a.runs, methods, plan.notes)
        .with_medium_baseline(compared.medium_baseline());
    print!("{}", report.table());
    if let Some(p) = &a.out.json {
        bench::write_json(&report, p)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `snapboot bench endurance`.
#[derive(Args, Debug)]
pub struct EnduranceArgs {
    /// Built-in workload name or bundle directory: `app` or `debian` (their application
    /// answers `checksum`, `time` and `random`).
    #[arg(long, default_value = "app")]
    workload: String,
    /// Restores of the image, in a row.
    #[arg(long, default_value_t = 100)]
    restores: usize,
    /// The restored system re-captures itself after every this many restores (0: never).
    #[arg(long, default_value_t = 10)]
    recapture_every: usize,
    /// Percent of the restores, spread evenly, whose application is made to die right
    /// after the restore (its `crash` query; at most 50): each must stay unconfirmed and
    /// the next restore must come up and be confirmed (a recovery).
    #[arg(long, value_name = "PERCENT", default_value_t = 0)]
    faults: u32,
    /// How the faults fail: `die` (the application exits), `hang` (every process of the
    /// restored system stops; the board gets its watchdog, the restores
    /// `snapboot.watchdog=5`, and the watchdog must reset it) or `mixed` (in turn).
    #[arg(long, value_enum, default_value_t = FaultArg::Die)]
    fault_kind: FaultArg,
    /// Restore with the stock kernel even when a restore kernel is built (the default is
    /// the restore kernel, when one is built).
    #[arg(long, conflicts_with = "restore_kernel")]
    stock_kernel: bool,
    #[command(flatten)]
    out: ReportOpts,
    #[command(flatten)]
    board: BoardOpts,
}

/// `bench endurance --fault-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultArg {
    /// The application dies.
    Die,
    /// The restored system hangs.
    Hang,
    /// Deaths and hangs in turn.
    Mixed,
}

/// `snapboot bench endurance`: one image restored `--restores` times in a row, re-captured
/// every `--recapture-every`, every restore checked (restored, state, clock, RNG, TTI).
/// Exits with [`Exit::NotUsable`](snapboot_device::Exit::NotUsable) when any restore failed.
pub fn endurance(a: EnduranceArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.restores > 0, "--restores must be at least 1");
    anyhow::ensure!(
        a.faults <= bench::MAX_FAULT_PERCENT,
        "--faults {} is more than {}%: two faults in a row reach the crash-loop guard's \
         limit and the device boots cold, which the end-to-end tests check",
        a.faults,
        bench::MAX_FAULT_PERCENT
    );
    let bundle = bundle_or_build(&a.workload, a.board.arch())?;
    let scale = match bundle.workload.name.as_str() {
        // `board build --env APP_SCALE=…` builds it smaller.
        "app" => bundle.workload.env_value("APP_SCALE").unwrap_or("1.0"),
        "debian" => bundle::debian::APP_SCALE,
        other => bail!(
            "bench endurance checks the application's state, clock and RNG, which workload \
             `{other}` does not answer; use `app` or `debian`"
        ),
    };
    let choice = a.board.kernel_choice(a.stock_kernel);
    let (opts, kernel) = a.board.to_run_options_for(&bundle, choice, true)?;
    if let Some(note) = kernel.note() {
        eprintln!("snapboot: {note}");
    }
    let plan = bench::EndurancePlan {
        restores: a.restores,
        recapture_every: a.recapture_every,
        checksum: board::app_state::host_checksum(scale)?,
        clock_bound_s: board::app_state::CLOCK_BOUND_S,
        faults: a.faults,
        fault_kind: match a.fault_kind {
            FaultArg::Die => bench::FaultKind::Die,
            FaultArg::Hang => bench::FaultKind::Hang,
            FaultArg::Mixed => bench::FaultKind::Mixed,
        },
    };
    let work = workdir(&a.out.workdir);
    let pb = progress(plan.steps(), "endurance");
    let run = bench::endurance(&bundle, &opts, &work, &plan, &mut || pb.inc(1));
    pb.finish_and_clear();
    let run = run?;
    let measured = run.timelines.len();
    let restores = MethodRuns {
        method: bench::ENDURANCE_METHOD,
        timelines: run.timelines,
        image_bytes: None,
        stored_bytes: None,
    };
    let restores = publish(
        "endurance",
        &bundle,
        &opts,
        measured,
        vec![restores.summary()],
        Vec::new(),
        None,
    )?;
    let summary = bench::endurance_summary(&run.records, &plan, run.captures);
    print!("{}", summary.text());
    let failed = summary.failed > 0;
    if let Some(p) = &a.out.json {
        let report = bench::EnduranceReport {
            restores,
            summary,
            records: run.records,
        };
        bench::write_json_value(&report, p)?;
    }
    Ok(if failed {
        snapboot_device::Exit::NotUsable.into()
    } else {
        ExitCode::SUCCESS
    })
}
