//! `snapboot board fetch-kernel | build | run | capture`: the board's own commands.

use crate::boardopts::BoardOpts;
use anyhow::{bail, Context, Result};
use board::capture::{attach_store, capture_boot, create_store_for};
use board::qemu::run_probe;
use board::RunOptions;
use bootparams::parse_reclaim;
use bundle::home;
use bundle::{BuildOptions, Bundle, Probe, Workload};
use clap::Args;
use ondevice::store::DEFAULT_IMAGE;
use snapboot_device::Exit;
use std::path::PathBuf;
use std::process::ExitCode;

/// `snapboot board fetch-kernel`.
pub fn fetch_kernel(arch: guestarch::Arch, meta: Option<&str>) -> Result<ExitCode> {
    let meta = meta.unwrap_or(arch.kernel_meta());
    let k = hostkernel::kernel::fetch_debian(&home::kernel_cache(), arch, meta)?;
    std::fs::create_dir_all(home::home())?;
    std::fs::write(home::kernel_record(arch), serde_json::to_string_pretty(&k)?)?;
    println!("kernel {} ({arch}) from {}", k.release, k.source);
    println!("  image   {}", k.bzimage.display());
    if let Some(image) = &k.image {
        println!("  Image   {} (uncompressed)", image.display());
    }
    if let Some(v) = &k.version {
        println!("  version {v}");
    }
    println!("  modules {}", k.modules_dir.display());
    if let Some(c) = &k.config {
        println!("  config  {}", c.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot board restore-kernel`.
pub fn restore_kernel(arch: guestarch::Arch, jobs: Option<usize>) -> Result<ExitCode> {
    let stock = home::fetched_kernel(arch)?;
    let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let k = hostkernel::restore_kernel::build(&home::restore_kernel_cache(), &stock, jobs)?;
    println!(
        "restore kernel {} ({arch}) from {} for images of {}",
        k.release, k.source, stock.release
    );
    let (name, _) = hostkernel::restore_kernel::product(arch);
    println!(
        "  {name} {} ({:.1} MiB, built in {:.0} s)",
        k.image.display(),
        std::fs::metadata(&k.image).map_or(0.0, |m| mib(m.len())),
        k.build_secs
    );
    for (extra, _) in hostkernel::restore_kernel::extra_products(arch) {
        println!("  {extra} {}", k.image.with_file_name(extra).display());
    }
    if let Some(v) = &k.version {
        println!("  version {v} (the stock kernel's)");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct KernelArgs {
    /// A kernel image (bzImage or vmlinux) instead of the fetched one.
    #[arg(long, requires = "modules")]
    kernel: Option<PathBuf>,
    /// The kernel's modules directory (`/lib/modules/<release>`).
    #[arg(long, requires = "kernel")]
    modules: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
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
    /// Your application answers `recapture` on its console by running `snapboot ready`
    /// again (with --rootfs; as the built-in workloads do): the benchmarks then make
    /// profiled lazy images of it. Without it they leave those methods out.
    #[arg(long, requires = "rootfs")]
    recapture: bool,
    /// Guest memory, e.g. 512M or 1G (default: the workload's).
    #[arg(long, value_parser = board::run_options::parse_mem_mib)]
    mem: Option<u32>,
    /// Add KEY=VALUE to the application's environment (repeatable; after the workload's
    /// own, so it wins): `--workload app --env APP_SCALE=0.25` builds the `app` program's
    /// state at a quarter of its size. For the board's own init (shell, app, --rootfs).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Put this public key (`snapboot key gen`) in the initramfs: the board then restores
    /// only images signed with its secret key.
    #[arg(long, value_name = "PUBLIC_KEY")]
    image_key: Option<PathBuf>,
    /// Put this device key file (`snapboot key device`) in the initramfs as
    /// /etc/snapboot/device.key, for `--encrypt key` (`snapboot.encrypt=key`).
    #[arg(long, value_name = "KEY_FILE")]
    device_key: Option<PathBuf>,
    /// Put this config file (snapboot.conf(5)) in the initramfs and the built-in workload's
    /// root as /etc/snapboot/snapboot.conf. It goes in as it is; one that does not parse is
    /// named here, and the board then boots cold saying why.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Output directory (default: .snapboot/bundles/NAME, or bundles/arm64/NAME).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The board: x86_64 (the PC) or arm64 (booted by U-Boot); its fetched kernel
    /// (`board fetch-kernel --arch`) and device binary go into the bundle.
    #[arg(long, default_value = "x86_64", value_parser = crate::boardopts::arch_parser())]
    arch: guestarch::Arch,
    #[command(flatten)]
    kernel: KernelArgs,
}

#[derive(Args, Debug)]
pub struct RunArgs {
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
    /// Snapshot-boot from this store file (attached as /dev/vdb; with `--firmware uefi` the
    /// PC's disk that `board capture --firmware uefi` made). It restores with the restore
    /// kernel when one is built (`board restore-kernel`), else with the stock kernel.
    #[arg(long)]
    store: Option<PathBuf>,
    /// Snapshot boot: restore with the stock kernel even when a restore kernel is built.
    #[arg(long, conflicts_with = "restore_kernel")]
    stock_kernel: bool,
    /// Snapshot boot from the restorer, which restores the store's image itself with no
    /// kernel before it. With --firmware direct the firmware starts it in place of a kernel
    /// (`scripts/restorer.sh`, or $SNAPBOOT_RESTORER) and it boots the stock kernel cold
    /// when it refuses; with --firmware uefi GRUB chainloads the EFI application
    /// (`scripts/restorer.sh efi`, or $SNAPBOOT_RESTORER_EFI) from the ESP, and a refusal
    /// returns to GRUB, which boots the stock kernel's entry. On the arm64 board U-Boot's
    /// boot script starts the arm64 EFI application (`scripts/restorer.sh efi-arm64`, or
    /// $SNAPBOOT_RESTORER_EFI_ARM64), and a refusal returns to the script, which boots the
    /// stock kernel.
    #[arg(long, requires = "store", conflicts_with_all = ["restore_kernel", "stock_kernel"])]
    restorer: bool,
    /// The images to try first, in order (NAME[,NAME...]); then the others,
    /// newest first.
    #[arg(long, requires = "store")]
    image: Option<String>,
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

/// `snapboot board build`.
pub fn build(a: BuildArgs) -> Result<ExitCode> {
    let kernel = home::kernel(
        a.kernel.kernel.as_deref(),
        a.kernel.modules.as_deref(),
        a.arch,
    )?;
    let arch = kernel.arch;
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
                init: Default::default(),
                recapture: a.recapture,
                alive_when_restored: false,
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
    workload.add_env(&a.env)?;
    let out = a
        .out
        .unwrap_or_else(|| home::builtin_bundle_dir(&workload.name, arch));
    if let Some(k) = &a.image_key {
        imagekey::PublicKey::load(k)?;
    }
    if let Some(k) = &a.device_key {
        imagekey::DeviceSecret::load(k)?;
    }
    if let Some(c) = &a.config {
        if let Err(e) = bootparams::config::ConfigFile::read(c) {
            eprintln!("snapboot: warning: {e}: the board will boot cold, saying so");
        }
    }
    let t = std::time::Instant::now();
    let b = Bundle::build(&BuildOptions {
        kernel,
        workload,
        rootfs_dir,
        snapboot_bin: bundle::home::device_binary(arch)?,
        image_key: a.image_key.clone(),
        device_key: a.device_key.clone(),
        config: a.config.clone(),
        out,
        cache_dir: home::debian_cache(),
        debs_dir: home::debs_cache(arch),
    })?;
    println!(
        "bundle {} ({} on {}) built in {:.1} s",
        b.dir.display(),
        b.workload.name,
        b.kernel.release,
        t.elapsed().as_secs_f64()
    );
    println!("  modules   {}", b.modules.join(" "));
    let made_by = match b.workload.init {
        bundle::workload::InitKind::Board => "the board's, uncompressed cpio",
        bundle::workload::InitKind::Debian => "initramfs-tools' mkinitramfs, zstd",
        bundle::workload::InitKind::DebianDracut => "dracut, zstd",
        bundle::workload::InitKind::DebianDracutSystemd => "dracut with systemd, zstd",
        bundle::workload::InitKind::DebianOverlayroot => {
            "initramfs-tools' mkinitramfs with overlayroot, zstd"
        }
    };
    println!("  initramfs {:.1} MiB ({made_by})", mib(b.initramfs_bytes));
    println!(
        "  rootfs    {:.1} MiB ({})",
        mib(b.rootfs_bytes),
        b.rootfs_type
    );
    Ok(ExitCode::SUCCESS)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// `snapboot board run`.
pub fn run(a: RunArgs) -> Result<ExitCode> {
    let bundle = home::resolve_bundle(&a.bundle, a.board.arch())?;
    let choice = a.board.kernel_choice(a.stock_kernel || a.restorer);
    let (mut opts, kernel) = a
        .board
        .to_run_options_for(&bundle, choice, a.store.is_some())?;
    match &a.store {
        Some(store) if a.restorer => {
            let uefi = opts.firmware == board::run_options::Firmware::Uefi;
            let elf = bundle::home::restorer_program(bundle.kernel.arch, uefi)?;
            opts = board::restorer_boot::restorer_options(&bundle, &opts, &elf, store)?;
        }
        Some(store) => attach_store(&mut opts, store, false)?,
        None => {}
    }
    if let (Some(note), false) = (kernel.note(), a.restorer) {
        eprintln!("snapboot: {note}");
    }
    if let Some(i) = &a.image {
        opts.params.images = bootparams::parse_images(i)
            .with_context(|| format!("--image {i}: names of 1 to 64 of A-Z a-z 0-9 . _ -"))?;
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
        crate::output::report_runs(
            vec![(bundle.workload.name.clone(), res.timeline.clone())],
            p,
        )?;
    }
    match res.error {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => {
            eprintln!("snapboot: board run failed: {e}");
            Ok(Exit::NotUsable.into())
        }
    }
}

/// Serial console on this terminal; Ctrl-A X powers the board off.
fn interactive(bundle: &Bundle, opts: &RunOptions) -> Result<ExitCode> {
    let (mut cmd, _run_files) = board::qemu::board_command(bundle, opts)?;
    cmd.args(["-serial", "mon:stdio"]);
    eprintln!(
        "snapboot: console of {} (Ctrl-A X powers off)",
        bundle.workload.name
    );
    let status = cmd.status().with_context(|| {
        format!("cannot start {cmd:?} (package qemu-system-x86 or qemu-system-arm)")
    })?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        Exit::NotUsable.into()
    })
}

/// `snapboot board capture`.
#[derive(Args, Debug)]
pub struct BoardCaptureArgs {
    /// The bundle directory (or a built-in workload name).
    pub bundle: String,
    /// Store file (created if missing: sparse, three times the guest RAM). With
    /// `--firmware uefi`: the PC's whole disk (ESP, root, and the store in its partition
    /// `snapstore`), made from the bundle's when missing or of another build.
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
    /// The image's name (default: current).
    #[arg(long)]
    pub image: Option<String>,
    /// Storage dedupe against the store's other images: off, full, selective,
    /// selective:USE or selective:USE:RUN.
    #[arg(long, value_parser = bootparams::dedupe_value)]
    pub dedupe: Option<flashstore::Dedupe>,
    /// Pin the image.
    #[arg(long)]
    pub pin: bool,
    /// Sign the image on the host after the capture, with this secret key (it never enters
    /// the board). A store this command creates then checksums chunks with BLAKE3, which
    /// signatures need.
    #[arg(long, value_name = "SECRET_KEY")]
    pub sign_key: Option<PathBuf>,
    /// Every restore of the image prints how long each device's restore took (the kernel's
    /// pm_print_times): `board run --analyze` then names the slowest devices.
    #[arg(long)]
    pub pm_times: bool,
}

/// `snapboot board capture`.
pub fn board_capture(a: BoardCaptureArgs) -> Result<ExitCode> {
    // The guest reads the same value; refuse a bad one before booting for nothing.
    let lazy = match &a.lazy {
        None => None,
        Some(l) => Some(
            parse_reclaim(l)
                .with_context(|| format!("--lazy {l}: expected max or a size such as 96M"))?,
        ),
    };
    let name = a.image.clone().unwrap_or_else(|| DEFAULT_IMAGE.into());
    if !flashstore::valid_name(&name) {
        bail!("--image {name}: 1 to 64 characters of A-Z a-z 0-9 . _ -");
    }
    let dedupe = a.dedupe;
    let sign_key = match &a.sign_key {
        None => None,
        Some(k) => Some(imagekey::SecretKey::load(k)?),
    };
    let bundle = home::resolve_bundle(&a.bundle, a.board.arch())?;
    let mut opts = a.board.to_run_options(&bundle)?;
    opts.echo = a.console;
    opts.params.lazy = lazy;
    opts.params.pm_times = a.pm_times;
    let uefi = opts.firmware == board::run_options::Firmware::Uefi;
    if uefi && sign_key.is_some() {
        bail!(
            "--sign-key with --firmware uefi: the PC's disk gets a store with fast chunk \
             checksums, and signatures need BLAKE3 ones"
        );
    }
    if !a.store.exists() && !uefi {
        // Signed images need cryptographic chunk checksums; others get the fast ones.
        let check = if sign_key.is_some() {
            flashstore::ChunkCheck::Blake3
        } else {
            flashstore::ChunkCheck::Xxh3
        };
        create_store_for(&opts, &a.store, check)?;
    }
    opts.params.images = vec![name.clone()];
    opts.params.dedupe = dedupe;
    opts.params.pin = a.pin;
    let tl = capture_boot(&bundle, &opts, &a.store)?;
    println!("{}", tl.summary_text());
    if let Some(p) = &a.timeline {
        std::fs::write(p, serde_json::to_string_pretty(&tl)?)?;
    }
    if let Some(k) = &sign_key {
        ondevice::store::sign_image(&a.store, &name, k)?;
    }
    if uefi {
        let s = board::uefi::open_store(&a.store, false)?;
        print_captured(&s, &name, &a.store)
    } else {
        let s = ondevice::store::open_store(&a.store, false)?;
        print_captured(&s, &name, &a.store)
    }
}

/// What `board capture` says of the image it left on the store `s` at `store`.
fn print_captured<M: flashstore::Medium>(
    s: &flashstore::Store<M>,
    name: &str,
    store: &std::path::Path,
) -> Result<ExitCode> {
    let r = s
        .image(name)
        .with_context(|| format!("the capture did not leave image {name} on the store"))?;
    let u = s.usage();
    println!(
        "image {name} generation {} on {}: {} pages, {} shared with other images, \
         {:.1} MiB of new chunks{}{}; store {} of {} clusters used",
        r.generation,
        store.display(),
        r.stats.pages,
        r.stats.shared_pages,
        r.stats.stored_bytes as f64 / 1048576.0,
        if r.pinned { ", pinned" } else { "" },
        if r.signature.is_empty() {
            ""
        } else {
            ", signed"
        },
        u.used,
        u.clusters
    );
    Ok(ExitCode::SUCCESS)
}
