//! Command-line definitions and dispatch. Exit codes: 0 success, 1 error (with a one-line
//! reason on stderr), 2 usage error (clap), 3 the board ran but did not become usable
//! (panic, hang, exit).

use anyhow::{bail, Context, Result};
use board::qemu::{run_probe, Disk, KernelImage};
use board::{Accel, BuildOptions, Bundle, KernelInfo, Probe, RunOptions, Workload};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Snapshot boot for Linux.
#[derive(Parser, Debug)]
#[command(name = "snapboot", version, about)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// The QEMU board: kernel, bundle, power-on.
    #[command(subcommand)]
    Board(BoardCmd),
    /// Record a real board's serial console with host timestamps (grabserial-style).
    Trace(TraceArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
    /// (guest) Second-stage init: start the application as PID 1's child.
    Start {
        /// Environment for the application, KEY=VALUE.
        #[arg(long)]
        env: Vec<String>,
        /// The application's start command.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// (guest) The application is ready: print the ready marker, capture if the kernel
    /// command line asks for it (snapboot.capture snapboot.store=DEV).
    Ready,
    /// (device) Freeze, create the hibernation image and write it to the store.
    Capture(crate::guestcmd::CaptureArgs),
    /// (device, initramfs) Validate the store's image and restore it; on any failure print
    /// the reason and return so the cold boot continues.
    Resume(crate::guestcmd::ResumeArgs),
    /// Images on a store.
    #[command(subcommand)]
    Image(ImageCmd),
    /// Boot graph, phases, initcalls and the advisor's cheap wins, from boot logs.
    Analyze(crate::analyzecmd::AnalyzeArgs),
    /// Can snapshot boot work with this kernel? Which boot-time options are set?
    CheckKernel(crate::analyzecmd::CheckKernelArgs),
}

#[derive(Subcommand, Debug)]
enum ImageCmd {
    /// Show an image: identity, counts, checksums verified.
    Inspect(crate::guestcmd::InspectArgs),
}

#[derive(Subcommand, Debug)]
enum BoardCmd {
    /// Download the distribution kernel (never installed on the host) into the cache.
    FetchKernel {
        /// Meta package whose dependency is the kernel.
        #[arg(long, default_value = "linux-image-amd64")]
        meta: String,
    },
    /// Build a guest bundle: vmlinux, initramfs, root filesystem.
    Build(BuildArgs),
    /// Power the board on.
    Run(RunArgs),
    /// Cold-boot with capture requested: the image is taken at ready, then the board powers off.
    Capture(crate::snapcmd::BoardCaptureArgs),
}

#[derive(Args, Debug)]
struct KernelArgs {
    /// A kernel image (bzImage or vmlinux) instead of the fetched one.
    #[arg(long, requires = "modules")]
    kernel: Option<PathBuf>,
    /// The kernel's modules directory (`/lib/modules/<release>`).
    #[arg(long, requires = "kernel")]
    modules: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct BuildArgs {
    /// Built-in workload: shell or app.
    #[arg(long, conflicts_with = "rootfs")]
    workload: Option<String>,
    /// Your own root filesystem tree.
    #[arg(long, requires = "start")]
    rootfs: Option<PathBuf>,
    /// The command that starts your application (it calls `snapboot ready` when ready).
    #[arg(long)]
    start: Option<String>,
    /// Name for your system (with --rootfs).
    #[arg(long, default_value = "custom")]
    name: String,
    /// Probe typed after ready (with --rootfs).
    #[arg(long, default_value = "echo probe-$((6*7))")]
    probe: String,
    /// Regex the probe's answer matches (with --rootfs).
    #[arg(long, default_value = "^probe-42$")]
    expect: String,
    /// Guest memory in MiB (default: the workload's).
    #[arg(long)]
    mem: Option<u32>,
    /// Output directory (default: .snapboot/bundles/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    kernel: KernelArgs,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum AccelArg {
    Auto,
    Tcg,
    Kvm,
}

#[derive(Args, Debug, Clone)]
pub(crate) struct BoardOpts {
    /// Guest memory, e.g. 512M or 1G (default: the workload's).
    #[arg(long)]
    mem: Option<String>,
    /// Virtual CPUs (1 to 64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    smp: u32,
    /// Extra kernel command-line words.
    #[arg(long, allow_hyphen_values = true)]
    cmdline: Vec<String>,
    /// Extra disk image (read-write), attached as /dev/vdb, /dev/vdc, ...
    #[arg(long)]
    disk: Vec<PathBuf>,
    /// Accelerator (auto: KVM only with real vmx/svm).
    #[arg(long, value_enum, default_value = "auto")]
    accel: AccelArg,
    /// Boot the compressed bzImage instead of the uncompressed vmlinux.
    #[arg(long)]
    bzimage: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

impl BoardOpts {
    pub(crate) fn to_run_options(&self, bundle: &Bundle) -> Result<RunOptions> {
        let mut o = RunOptions::for_bundle(bundle);
        if let Some(m) = &self.mem {
            o.mem_mib = parse_mem(m)?;
        }
        o.smp = self.smp;
        o.cmdline = self.cmdline.clone();
        o.disks = self
            .disk
            .iter()
            .map(|p| Disk {
                path: p.clone(),
                readonly: false,
            })
            .collect();
        match self.accel {
            AccelArg::Auto => {}
            AccelArg::Tcg => o.accel = Accel::Tcg,
            AccelArg::Kvm => o.accel = Accel::Kvm,
        }
        if self.bzimage {
            o.kernel = KernelImage::BzImage;
        }
        o.timeout = Duration::from_secs(self.timeout);
        Ok(o)
    }
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The bundle directory (or a built-in workload name).
    bundle: String,
    #[command(flatten)]
    board: BoardOpts,
    /// Scripted run: after ready, type a probe (default: the workload's) and time its answer.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    probe: Option<String>,
    /// Regex for the probe's answer (default: the workload's).
    #[arg(long)]
    expect: Option<String>,
    /// Write the timeline as JSON.
    #[arg(long)]
    timeline: Option<PathBuf>,
    /// Snapshot-boot from this store file (attached as /dev/vdb).
    #[arg(long)]
    store: Option<PathBuf>,
    /// Write the console as stamped text (`seconds | line`), grabserial-style.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Copy the console to stdout during a scripted run.
    #[arg(long)]
    console: bool,
    /// Write an HTML boot-analysis report of this run.
    #[arg(long)]
    analyze: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct TraceArgs {
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

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// N cold boots: median/min/max of each milestone and of TTI.
    Cold(crate::bench::ColdArgs),
    /// Cold boot vs kernel-native hibernation resume vs snapboot, N boots each.
    Compare(crate::compare::CompareArgs),
}

/// Where snapboot keeps kernels and bundles: `$SNAPBOOT_HOME` or `./.snapboot`.
pub fn home() -> PathBuf {
    let h = std::env::var_os("SNAPBOOT_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".snapboot"));
    // Absolute, because kernel.json and bundle.json record paths below it.
    std::path::absolute(&h).unwrap_or(h)
}

fn current_kernel_path() -> PathBuf {
    home().join("kernel.json")
}

/// The kernel to use: `--kernel/--modules`, or the fetched one.
fn kernel_from(args: &KernelArgs) -> Result<KernelInfo> {
    if let (Some(k), Some(m)) = (&args.kernel, &args.modules) {
        return Ok(KernelInfo::from_paths(k, m)?);
    }
    let p = current_kernel_path();
    KernelInfo::load(&p).with_context(|| {
        "no kernel fetched yet: run `snapboot board fetch-kernel` or pass --kernel and --modules"
    })
}

/// Smallest guest memory the board boots (Debian's kernel and initramfs need about this).
const MIN_MEM_MIB: u32 = 128;

/// Parses a guest memory size (`512M`, `1G`, MiB without a unit) into MiB.
pub(crate) fn parse_mem(s: &str) -> Result<u32> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('G' | 'g') => (&s[..s.len() - 1], 1024),
        Some('M' | 'm') => (&s[..s.len() - 1], 1),
        _ => (s, 1),
    };
    let n: u32 = num
        .parse()
        .with_context(|| format!("memory size {s:?}: expected e.g. 512M or 1G"))?;
    match n.checked_mul(mul) {
        Some(mib) if mib >= MIN_MEM_MIB => Ok(mib),
        _ => {
            bail!("memory size {s:?}: the board needs at least {MIN_MEM_MIB}M (and at most 4095G)")
        }
    }
}

/// A bundle by directory, or by built-in workload name under the home directory.
pub(crate) fn resolve_bundle(arg: &str) -> Result<Bundle> {
    let p = Path::new(arg);
    let dir = if p.join("bundle.json").exists() || arg.contains('/') {
        p.to_path_buf()
    } else {
        home().join("bundles").join(arg)
    };
    let b = Bundle::load(&dir)?;
    if let Ok(exe) = std::env::current_exe() {
        if !b.carries(&exe) {
            if Workload::builtin(arg).is_ok() && !arg.contains('/') {
                eprintln!("snapboot: bundle `{arg}` was built by another snapboot; rebuilding it");
                return build_builtin(arg);
            }
            eprintln!(
                "snapboot: warning: {} was built by another snapboot binary; rebuild it to run this one on the board",
                dir.display()
            );
        }
    }
    Ok(b)
}

/// Builds the built-in workload's bundle with the fetched kernel.
pub(crate) fn build_builtin(name: &str) -> Result<Bundle> {
    let kernel = kernel_from(&KernelArgs {
        kernel: None,
        modules: None,
    })?;
    let workload = Workload::builtin(name)?;
    let out = home().join("bundles").join(name);
    Ok(Bundle::build(&BuildOptions {
        kernel,
        workload,
        rootfs_dir: None,
        snapboot_bin: std::env::current_exe()?,
        out,
    })?)
}

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Board(BoardCmd::FetchKernel { meta }) => {
            let cache = home().join("kernels");
            let k = board::kernel::fetch_debian(&cache, &meta)?;
            std::fs::create_dir_all(home())?;
            std::fs::write(current_kernel_path(), serde_json::to_string_pretty(&k)?)?;
            println!("kernel {} from {}", k.release, k.source);
            println!("  image   {}", k.bzimage.display());
            println!("  modules {}", k.modules_dir.display());
            if let Some(c) = &k.config {
                println!("  config  {}", c.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Board(BoardCmd::Build(a)) => build(a),
        Cmd::Board(BoardCmd::Run(a)) => run(a),
        Cmd::Trace(a) => crate::bench::trace(a.tty, a.baud, a.until, a.timeout, a.timeline),
        Cmd::Bench(BenchCmd::Cold(a)) => crate::bench::cold(a),
        Cmd::Bench(BenchCmd::Compare(a)) => crate::compare::compare(a),
        Cmd::Start { env, cmd } => {
            let code = ondevice::guest::start(&cmd.join(" "), &env)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Cmd::Ready => crate::guestcmd::ready(),
        Cmd::Capture(a) => crate::guestcmd::capture_cmd(a),
        Cmd::Resume(a) => crate::guestcmd::resume_cmd(a),
        Cmd::Image(ImageCmd::Inspect(a)) => crate::guestcmd::inspect(a),
        Cmd::Analyze(a) => crate::analyzecmd::analyze(a),
        Cmd::CheckKernel(a) => crate::analyzecmd::check_kernel(a),
        Cmd::Board(BoardCmd::Capture(a)) => crate::snapcmd::board_capture(a),
    }
}

fn build(a: BuildArgs) -> Result<ExitCode> {
    let kernel = kernel_from(&a.kernel)?;
    let (mut workload, rootfs_dir) = match (&a.workload, &a.rootfs) {
        (Some(w), _) => (Workload::builtin(w)?, None),
        (None, Some(dir)) => (
            Workload {
                name: a.name.clone(),
                start: a.start.clone().unwrap_or_default(),
                env: vec![],
                probe: Probe {
                    send: a.probe.clone(),
                    expect: a.expect.clone(),
                },
                mem_mib: 512,
            },
            Some(dir.clone()),
        ),
        (None, None) => {
            bail!("say what to boot: --workload shell|app, or --rootfs DIR --start CMD")
        }
    };
    if let Some(m) = a.mem {
        workload.mem_mib = m;
    }
    let out = a
        .out
        .unwrap_or_else(|| home().join("bundles").join(&workload.name));
    let t = std::time::Instant::now();
    let b = Bundle::build(&BuildOptions {
        kernel,
        workload,
        rootfs_dir,
        snapboot_bin: std::env::current_exe()?,
        out,
    })?;
    println!(
        "bundle {} ({} on {}) built in {:.1} s",
        b.dir.display(),
        b.workload.name,
        b.kernel.release,
        t.elapsed().as_secs_f64()
    );
    println!("  modules   {}", b.modules.join(" "));
    println!(
        "  initramfs {:.1} MiB (uncompressed cpio)",
        mib(b.initramfs_bytes)
    );
    println!(
        "  rootfs    {:.1} MiB ({})",
        mib(b.rootfs_bytes),
        b.rootfs_type
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn run(a: RunArgs) -> Result<ExitCode> {
    let bundle = resolve_bundle(&a.bundle)?;
    let mut opts = a.board.to_run_options(&bundle)?;
    if let Some(store) = &a.store {
        crate::snapcmd::attach_store(&mut opts, store, false)?;
    }
    let Some(send) = a.probe else {
        return interactive(&bundle, &opts);
    };
    let mut probe = bundle.workload.probe.clone();
    if !send.is_empty() {
        probe.send = send;
    }
    if let Some(e) = a.expect {
        probe.expect = e;
    }
    opts.echo = a.console;
    let res = run_probe(&bundle, &opts, &probe)?;
    println!("{}", res.timeline.summary_text());
    if let Some(p) = &a.timeline {
        std::fs::write(p, serde_json::to_string_pretty(&res.timeline)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.log {
        std::fs::write(p, res.timeline.to_stamped_text())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &a.analyze {
        crate::analyzecmd::report_runs(
            vec![(bundle.workload.name.clone(), res.timeline.clone())],
            p,
        )?;
    }
    match res.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => {
            eprintln!("snapboot: board run failed: {e}");
            Ok(ExitCode::from(3))
        }
    }
}

/// Serial console on this terminal; Ctrl-A X powers the board off.
fn interactive(bundle: &Bundle, opts: &RunOptions) -> Result<ExitCode> {
    let mut cmd = board::qemu::qemu_command(bundle, opts);
    cmd.args(["-serial", "mon:stdio"]);
    eprintln!(
        "snapboot: console of {} (Ctrl-A X powers off)",
        bundle.workload.name
    );
    let status = cmd
        .status()
        .context("cannot start qemu-system-x86_64 (package qemu-system-x86)")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
