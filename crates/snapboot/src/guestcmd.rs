//! Commands that run on the device: `ready`, `capture`, `resume`, and `image inspect`
//! (which also runs on the host).

use anyhow::{Context, Result};
use bootparams::{parse_reclaim, parse_size, BootParams};
use boottrace::Marker;
use clap::{Args, ValueEnum};
use ondevice::capture::{capture, CaptureOptions, CaptureOutcome, Then};
use ondevice::guest::print_marker;
use ondevice::resume::{resume, ResumeOptions};
use ondevice::system::kernel_cmdline;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// After the image is written.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ThenArg {
    /// Power off.
    Poweroff,
    /// Thaw and continue running.
    Continue,
}

/// `snapboot capture`.
#[derive(Args, Debug)]
pub struct CaptureArgs {
    /// Store device (or file) to write the image to.
    #[arg(long)]
    store: PathBuf,
    /// What to do after the image is written.
    #[arg(long, value_enum, default_value = "poweroff")]
    then: ThenArg,
    /// Capture even with writable block-backed filesystems mounted.
    #[arg(long)]
    force: bool,
    /// Keep the page cache (to measure what dropping it saves).
    #[arg(long)]
    keep_caches: bool,
    /// Chunk compression.
    #[arg(long, value_enum, default_value = "lz4")]
    compress: CompressArg,
    /// Lazy image: page user memory out to a swap region in the store first, so the image
    /// holds only what stays resident (max, or how much to page out, e.g. 96M).
    #[arg(long, num_args = 0..=1, default_missing_value = "max", value_name = "HOW_MUCH")]
    lazy: Option<String>,
    /// Size of the lazy image's swap region (default: half the store's idle space).
    #[arg(long, value_name = "SIZE", requires = "lazy")]
    swap_size: Option<String>,
    /// Lazy image without a dm-verity tree: page-ins are not verified.
    #[arg(long, requires = "lazy")]
    no_verity: bool,
    /// Re-capture from a restored lazy system: eager keeps the pages touched since the
    /// restore in the image, prefetch reads them back right after each restore, off ignores
    /// them.
    #[arg(long, value_name = "MODE", default_value = "eager", requires = "lazy")]
    profile: String,
    /// The image's name.
    #[arg(long, default_value = ondevice::store::DEFAULT_IMAGE)]
    image: String,
    /// Storage dedupe against the store's other images: off, full, selective,
    /// selective:USE or selective:USE:RUN (default: selective, which references an old chunk
    /// only when the image uses 90 % of it).
    #[arg(long)]
    dedupe: Option<String>,
    /// Pin the image (captures and gc leave it alone until unpinned).
    #[arg(long)]
    pin: bool,
    /// Sign the image with this secret key (`snapboot key gen`); the store must checksum
    /// chunks with BLAKE3 (`snapboot store init --checksum blake3`).
    #[arg(long, value_name = "SECRET_KEY")]
    sign_key: Option<PathBuf>,
    /// Every restore of the image prints how long each device's restore took (the kernel's
    /// pm_print_times), for `snapboot analyze`.
    #[arg(long)]
    pm_times: bool,
}

/// Chunk compression of `snapboot capture --compress`.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum CompressArg {
    /// LZ4 (a chunk that does not shrink is stored as it is).
    Lz4,
    /// None.
    None,
}

/// `snapboot resume`.
#[derive(Args, Debug, PartialEq)]
pub struct ResumeArgs {
    /// Store device holding the image.
    #[arg(long, required_unless_present = "from_cmdline")]
    store: Option<PathBuf>,
    /// Invalidate the image as it is restored (boot it once).
    #[arg(long)]
    once: bool,
    /// Take the settings from the kernel command line (snapboot.store=, snapboot.once);
    /// does nothing when snapboot.capture is set.
    #[arg(long)]
    from_cmdline: bool,
    /// Run before udev (initramfs-tools' init-top, right after the essential drivers are
    /// loaded): when the store does not appear in time (1 s when the initramfs loaded the
    /// store's drivers, 0.1 s otherwise), or the boot asks for the kernel's own resume or
    /// for `snapboot.afterudev`, exit with status 3 and do nothing, so that the boot script
    /// tries again after udev.
    #[arg(long, requires = "from_cmdline")]
    before_udev: bool,
}

/// How long `--before-udev` waits for the store's device node when the initramfs loaded
/// the store's drivers (`snapboot install --store`: /etc/snapboot/store-modules): a node
/// that takes longer comes from a driver udev loads.
const BEFORE_UDEV_WAIT: Duration = Duration::from_secs(1);
/// ... and when it did not: only a node a built-in or already loaded driver made is there.
const BEFORE_UDEV_WAIT_UNKNOWN: Duration = Duration::from_millis(100);

/// snapboot as the kernel's first process (`rdinit=/bin/snapboot`, what the board gives a
/// restore kernel): mounts what `/init` would, resumes, and when this boot was not restored
/// (and not handed to another kernel) runs the `/init` script for the rest of the boot,
/// telling it the first steps are done. Saves starting a shell and four `mount` processes
/// before the image is read. Never returns: process 1 must not exit.
pub fn early_init() -> ! {
    for f in ondevice::guest::early_mounts() {
        eprintln!("snapboot: early init: cannot mount {f}");
    }
    print_marker(Marker::Init, None);
    if let Err(e) = resume_cmd(ResumeArgs::from_cmdline()) {
        eprintln!("snapboot: {e:#}");
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new("/bin/sh")
        .arg("/init")
        .env(bootparams::EARLY_ENV, "1")
        .env("PATH", "/bin")
        .exec();
    eprintln!("snapboot: early init: cannot run /init: {err}");
    let err = std::process::Command::new("/bin/sh").exec();
    eprintln!("snapboot: early init: cannot run a shell either: {err}");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

impl ResumeArgs {
    /// `snapboot resume --from-cmdline`, what the board's `/init` runs.
    pub fn from_cmdline() -> Self {
        Self {
            store: None,
            once: false,
            from_cmdline: true,
            before_udev: false,
        }
    }

    /// `snapboot resume --from-cmdline --before-udev`, what initramfs-tools' init-top
    /// script runs.
    pub fn from_cmdline_before_udev() -> Self {
        Self {
            before_udev: true,
            ..Self::from_cmdline()
        }
    }
}

use boottrace::error_chain as chain;

/// `snapboot image inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Store file or device.
    store: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Skip reading every chunk (catalog and descriptions only).
    #[arg(long)]
    no_verify: bool,
}

/// Whether the command line asks for a capture, even if another of its words is bad.
fn asks_for_capture(cmdline: &str) -> bool {
    cmdline
        .split_whitespace()
        .any(|w| w.split('=').next() == Some(bootparams::key::CAPTURE))
}

/// The application's ready hook. When the kernel command line asks for a capture
/// (`snapboot.capture snapboot.store=DEV`), captures here; prints `restored` on the
/// restored side so the application's script can tell.
pub fn ready() -> Result<ExitCode> {
    ondevice::guest::ready();
    let cmdline = kernel_cmdline();
    let params = match BootParams::parse(&cmdline) {
        Ok(p) => p,
        // A bad setting must reach the host as a capture failure at once, not as a console
        // line the host waits past until its timeout.
        Err(e) if asks_for_capture(&cmdline) => {
            print_marker(Marker::CaptureFailed, Some(&e.to_string()));
            return Err(e.into());
        }
        // No capture asked for: resume already named the word at this boot (@fallback).
        Err(_) => return Ok(ExitCode::SUCCESS),
    };
    if let Some(dev) = &params.khibernate {
        // Baseline for the benchmarks: the kernel's own hibernation to swap.
        if let Err(e) = ondevice::kernel_native::hibernate(std::path::Path::new(dev)) {
            print_marker(Marker::CaptureFailed, Some(&chain(&e)));
            return Err(e.into());
        }
        print_marker(Marker::Restored, Some("kernel-native"));
        println!("restored");
        return Ok(ExitCode::SUCCESS);
    }
    let code = match (&params.store, params.capture) {
        (Some(store), true) => run_capture(&capture_options(&params, store))?,
        _ => ExitCode::SUCCESS,
    };
    // A cold boot that is ready (and captured, if asked, and goes on): the deferred memory
    // comes now. The restored side starts it in `after_restore`.
    let powers_off = params.capture && params.then == bootparams::Then::PowerOff;
    if !powers_off && !restored_now() {
        ondevice::memory::start_add(&params);
    }
    Ok(code)
}

/// Capture settings from the kernel command line.
fn capture_options(p: &BootParams, store: &str) -> CaptureOptions {
    let mut o = CaptureOptions::new(PathBuf::from(store));
    o.then = p.then;
    o.force = p.force;
    o.drop_caches = p.drop_caches;
    o.compact = p.compact;
    if let Some(c) = p.compression {
        o.compression = c;
    }
    o.lazy = p.lazy.map(|reclaim| ondevice::lazy::LazyOptions {
        reclaim,
        region_bytes: p.swap_size,
        verity: p.verity,
        profile: p.profile,
    });
    if let Some(name) = p.images.first() {
        o.image = name.clone();
    }
    o.dedupe = p.dedupe;
    o.pin = p.pin;
    o.pm_times = p.pm_times;
    o
}

/// Lazy-capture settings from the `--lazy` and `--swap-size` flags (the same values as
/// `snapboot.lazy` and `snapboot.swapsize`).
pub fn lazy_options(
    reclaim: &str,
    region: Option<&str>,
    verity: bool,
    profile: &str,
) -> Result<ondevice::lazy::LazyOptions> {
    let reclaim = parse_reclaim(reclaim)
        .with_context(|| format!("lazy={reclaim}: expected max or a size such as 96M"))?;
    let region_bytes = match region {
        None => None,
        Some(r) => Some(
            parse_size(r)
                .with_context(|| format!("swap size {r}: expected a size such as 512M"))?,
        ),
    };
    let profile = bootparams::ProfileMode::parse(profile)
        .with_context(|| format!("--profile {profile}: expected eager, prefetch or off"))?;
    Ok(ondevice::lazy::LazyOptions {
        reclaim,
        region_bytes,
        verity,
        profile,
    })
}

/// Whether this process just returned from a restore (`after_restore` ran in it).
fn restored_now() -> bool {
    RESTORED.load(std::sync::atomic::Ordering::Relaxed)
}

static RESTORED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn run_capture(o: &CaptureOptions) -> Result<ExitCode> {
    match capture(o) {
        Ok(CaptureOutcome::Restored(_)) => {
            RESTORED.store(true, std::sync::atomic::Ordering::Relaxed);
            println!("restored");
            Ok(ExitCode::SUCCESS)
        }
        Ok(CaptureOutcome::Captured(generation)) => {
            println!("captured generation {generation}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            print_marker(Marker::CaptureFailed, Some(&chain(&e)));
            Err(e.into())
        }
    }
}

/// `snapboot capture`.
pub fn capture_cmd(a: CaptureArgs) -> Result<ExitCode> {
    let mut o = CaptureOptions::new(a.store);
    o.then = match a.then {
        ThenArg::Poweroff => Then::PowerOff,
        ThenArg::Continue => Then::Continue,
    };
    o.force = a.force;
    o.drop_caches = !a.keep_caches;
    o.compression = match a.compress {
        CompressArg::Lz4 => flashstore::Compression::Lz4,
        CompressArg::None => flashstore::Compression::None,
    };
    if let Some(l) = &a.lazy {
        o.lazy = Some(lazy_options(
            l,
            a.swap_size.as_deref(),
            !a.no_verity,
            &a.profile,
        )?);
    }
    anyhow::ensure!(
        flashstore::valid_name(&a.image),
        "--image {}: 1 to 64 characters of A-Z a-z 0-9 . _ -",
        a.image
    );
    o.image = a.image;
    if let Some(d) = &a.dedupe {
        o.dedupe = Some(bootparams::parse_dedupe(d).with_context(|| {
            format!(
                "--dedupe {d}: expected off, full, selective, selective:USE or selective:USE:RUN"
            )
        })?);
    }
    o.pin = a.pin;
    o.sign_key = a.sign_key;
    o.pm_times = a.pm_times;
    run_capture(&o)
}

/// `snapboot resume`: returns only when the image was not restored; prints the reason as
/// a `fallback` marker so the cold boot that follows carries it in its timeline. On a restore
/// kernel (its release ends in `-snapboot-restore`; `snapboot.coldkernel=` names its kernel
/// pack) the cold boot is handed to the stock kernel instead: a restore kernel cannot boot
/// the system itself. Other kernels ignore `snapboot.coldkernel`.
pub fn resume_cmd(a: ResumeArgs) -> Result<ExitCode> {
    if a.before_udev {
        if let Some(why) = wait_for_udev(&kernel_cmdline()) {
            print_marker(Marker::ResumeAfterUdev, Some(&why));
            return Ok(ExitCode::from(ondevice::resume::EXIT_AFTER_UDEV));
        }
    }
    // Every boot records its setup, for the capture that may follow in this boot.
    let t = std::time::Instant::now();
    let boot_setup = match ondevice::resume::observe_and_record_boot() {
        Ok(s) => {
            let secs = t.elapsed().as_secs_f64();
            print_marker(Marker::BootSetup, Some(&format!("recorded in {secs:.3} s")));
            Some(s)
        }
        Err(e) => {
            print_marker(Marker::BootSetupUnrecorded, Some(&chain(&e)));
            None
        }
    };
    let cmdline = kernel_cmdline();
    let reason = try_resume(a, &cmdline, boot_setup);
    if let Some(why) = &reason {
        print_marker(Marker::Fallback, Some(why));
    }
    let on_restore_kernel = ondevice::system::running_identity()
        .release
        .ends_with(bootparams::RESTORE_KERNEL_SUFFIX);
    let pack = bootparams::value_of(&cmdline, bootparams::key::COLDKERNEL);
    if let Some(pack) = pack.filter(|_| on_restore_kernel) {
        let why = reason.as_deref().unwrap_or("this boot asks for no restore");
        hand_over(std::path::Path::new(pack), &cmdline, why);
    }
    Ok(match reason {
        Some(_) => ExitCode::from(4),
        None => ExitCode::SUCCESS,
    })
}

/// Before udev: why this boot's resume must wait for udev, if it must. The kernel's own
/// resume (`snapboot.kresume`, the baseline) waits, to run where initramfs-tools runs it;
/// so does a restore from a store whose node is not there yet.
fn wait_for_udev(cmdline: &str) -> Option<String> {
    let params = BootParams::parse(cmdline).ok()?;
    if params.kresume.is_some() {
        return Some("the kernel's own resume runs where initramfs-tools runs it".into());
    }
    if params.after_udev {
        return Some(format!("{} asks for it", bootparams::key::AFTERUDEV));
    }
    if params.capture || params.handed_over {
        return None;
    }
    let store = params.store.as_deref()?;
    let modules = std::path::Path::new("/").join(ondevice::install::STORE_MODULES_PATH);
    let wait = if modules.exists() {
        BEFORE_UDEV_WAIT
    } else {
        BEFORE_UDEV_WAIT_UNKNOWN
    };
    (!ondevice::resume::wait_for_node(std::path::Path::new(store), wait)).then(|| {
        format!(
            "{store} is not there before udev: restoring after udev (`snapboot install \
             --store {store}` has the initramfs load its drivers first)"
        )
    })
}

/// Restores the image the command line or the flags point at; returns only if it was not
/// restored, with the reason (`None`: this boot asked for no restore).
fn try_resume(
    a: ResumeArgs,
    cmdline: &str,
    boot_setup: Option<snapimg::BootSetup>,
) -> Option<String> {
    // A word that does not parse means no image is restored: the boot continues cold.
    let params = match BootParams::parse(cmdline) {
        Ok(p) => p,
        Err(e) => return Some(e.to_string()),
    };
    let images = params.images.clone();
    let (store, once) = if a.from_cmdline {
        if params.handed_over {
            print_marker(
                Marker::HandedOver,
                Some("cold boot handed over by the restore kernel, which said why above"),
            );
            return None;
        }
        if params.capture {
            return params
                .cold_kernel
                .is_some()
                .then(|| "a restore kernel does not capture: the stock kernel does".into());
        }
        if let Some(dev) = &params.kresume {
            let dev = std::path::Path::new(dev);
            ondevice::resume::wait_for_node(dev, Duration::from_secs(2));
            return Some(match ondevice::kernel_native::resume(dev) {
                Ok(()) => "kernel-native: no hibernation image on the swap device".to_string(),
                Err(e) => format!("kernel-native: {}", chain(&e)),
            });
        }
        let Some(s) = &params.store else {
            return None;
        };
        (PathBuf::from(s), params.once)
    } else {
        (a.store.unwrap_or_default(), a.once)
    };
    let err = resume(&ResumeOptions {
        store,
        once,
        wait: Duration::from_secs(2),
        boot_setup,
        images,
        public_key: None,
    });
    Some(chain(&err))
}

/// A restore kernel's fallback: kexec into the stock kernel of the kernel pack at `pack`.
/// Returns only if that failed; the console then says why, and the boot cannot go on.
fn hand_over(pack: &std::path::Path, cmdline: &str, why: &str) {
    let cold = ondevice::handover::cold_cmdline(cmdline);
    match ondevice::handover::load(pack, &cold, Duration::from_secs(2)) {
        Ok(loaded) => {
            print_marker(
                Marker::Handover,
                Some(&format!("{}; because: {why}", loaded.describe())),
            );
            let e = ondevice::handover::jump();
            print_marker(Marker::HandoverFailed, Some(&chain(&e)));
        }
        Err(e) => print_marker(Marker::HandoverFailed, Some(&chain(&e))),
    }
}

/// An image as `snapboot image inspect` shows it: the store's summary and the check of
/// every chunk.
#[derive(serde::Serialize)]
struct Inspected {
    #[serde(flatten)]
    image: ondevice::store::ImageSummary,
    /// `ok`, `not verified`, or why a chunk failed.
    verify: String,
}

/// `snapboot image inspect`: every image of the store, each read whole unless `--no-verify`;
/// exit status 1 when a chunk fails its check.
pub fn inspect(a: InspectArgs) -> Result<ExitCode> {
    let s = ondevice::store::open_store(&a.store, false)?;
    let mut all_ok = true;
    let mut out = Vec::new();
    let mut images: Vec<_> = s.images().iter().collect();
    images.sort_by_key(|r| std::cmp::Reverse(r.generation));
    for r in images {
        let (verify, read) = if a.no_verify {
            ("not verified".to_string(), None)
        } else {
            match s.verify_image(&r.name) {
                Ok(bytes) => ("ok".to_string(), Some(bytes)),
                Err(e) => {
                    all_ok = false;
                    (chain(&e), None)
                }
            }
        };
        out.push((
            Inspected {
                image: ondevice::store::summary(&s, r),
                verify,
            },
            read,
        ));
    }
    if a.json {
        let v: Vec<&Inspected> = out.iter().map(|(i, _)| i).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("store {}, generation {}", a.store.display(), s.generation());
        for (i, read) in &out {
            let r = &i.image;
            let kernel = match (&r.identity, &r.description_error) {
                (Some(id), _) => format!("{} {}", id.release, id.machine),
                (None, Some(e)) => format!("unknown ({e})"),
                (None, None) => "unknown".into(),
            };
            let checked = match read {
                Some(bytes) => format!("all verified ({:.1} MiB read)", *bytes as f64 / MIB),
                None if a.no_verify => "not verified (--no-verify)".into(),
                None => format!("FAILED: {}", i.verify),
            };
            println!(
                "image {} generation {}{}{}: {} pages ({} zero, {} shared), {:.1} MiB stored, \
                 kernel {kernel}{}; checksums: {checked}",
                r.name,
                r.generation,
                if r.pinned { ", pinned" } else { "" },
                if r.signed { ", signed" } else { "" },
                r.stats.pages,
                r.stats.zero_pages,
                r.stats.shared_pages,
                r.stats.stored_bytes as f64 / MIB,
                r.swap.as_ref().map_or(String::new(), |w| format!(
                    ", lazy: {} pages in its swap region",
                    w.used_pages
                )),
            );
        }
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

const MIB: f64 = 1048576.0;

/// `snapboot memory`.
pub fn memory(c: crate::device::MemoryCmd) -> Result<ExitCode> {
    use crate::device::MemoryCmd;
    use ondevice::memory;
    match c {
        MemoryCmd::Add => match memory::add_from_cmdline()? {
            None => println!("no deferred memory on this boot (no snapboot.defermem)"),
            Some(r) if !r.complete() => return Ok(ExitCode::from(1)),
            Some(_) => {}
        },
        MemoryCmd::Status => {
            let b = memory::blocks(std::path::Path::new(memory::MEMORY_SYS))?;
            println!(
                "{} MiB online in {} blocks of {} MiB, {} blocks offline; {} {}",
                b.online_bytes() >> 20,
                b.online,
                b.block_bytes >> 20,
                b.offline.len(),
                memory::DRIVER,
                if memory::driver_loaded() {
                    "loaded"
                } else {
                    "not loaded"
                }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot profile`.
pub fn profile(c: crate::device::ProfileCmd) -> Result<ExitCode> {
    use crate::device::ProfileCmd;
    use ondevice::profile;
    let mib = |pages: u64| pages as f64 * 4096.0 / 1048576.0;
    match c {
        ProfileCmd::Record { wait } => {
            anyhow::ensure!(
                wait.is_finite() && wait >= 0.0,
                "--wait {wait}: expected seconds"
            );
            std::thread::sleep(std::time::Duration::from_secs_f64(wait));
            let p = profile::touched_since_restore()?;
            p.save(std::path::Path::new(profile::PROFILE_PATH))?;
            println!(
                "profile: {} pages ({:.1} MiB) touched since the restore, {} processes, {} ranges -> {} (the next capture uses it)",
                p.pages(),
                mib(p.pages()),
                p.processes(),
                p.ranges(),
                profile::PROFILE_PATH
            );
        }
        ProfileCmd::Status => match profile::residency()? {
            None => println!("this image was captured without a profile"),
            Some(r) => println!("{}", profile::residency_text(&r)),
        },
        ProfileCmd::Prefetch => {
            let b = profile::prefetch()?;
            println!("prefetch: {} of {} pages in memory", b.present, b.pages);
        }
        ProfileCmd::Faults { wait } => {
            std::thread::sleep(std::time::Duration::from_secs(wait.into()));
            let text = profile::faults_since_restore()?;
            ondevice::guest::print_marker(Marker::Faults, Some(&text));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `snapboot install`.
pub fn install(a: crate::device::InstallArgs) -> Result<ExitCode> {
    let binary = std::env::current_exe().context("cannot find the running snapboot binary")?;
    let mut store_modules = a.store_module.clone();
    if let Some(dev) = &a.store {
        let found = ondevice::install::store_driver_modules(std::path::Path::new("/sys"), dev)?;
        println!(
            "{}: drivers {}",
            dev.display(),
            if found.is_empty() {
                "built in (no module to load)".to_string()
            } else {
                found.join(", ")
            }
        );
        for m in found {
            if !store_modules.contains(&m) {
                store_modules.push(m);
            }
        }
    }
    let written = ondevice::install::install(&ondevice::install::InstallOptions {
        root: a.root.clone(),
        binary,
        after: a.after.clone(),
        store_modules,
    })?;
    for p in &written {
        println!("installed {}", p.display());
    }
    if a.after.is_empty() {
        println!(
            "note: no --after UNIT: the capture waits only for multi-user.target, not for \
             your application's readiness"
        );
    }
    let chroot = if a.root == std::path::Path::new("/") {
        String::new()
    } else {
        format!("chroot {} ", a.root.display())
    };
    println!(
        "next: {chroot}update-initramfs -u (the initramfs resumes only once it carries \
         snapboot), then boot once with `snapboot.capture snapboot.store=DEV` on the kernel \
         command line and at every power-on with `snapboot.store=DEV` (docs/real-boards.md)"
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::wait_for_udev;

    #[test]
    fn before_udev_waits_only_for_the_kernels_resume_and_a_missing_store() {
        let kernel = wait_for_udev("quiet snapboot.kresume=/dev/vdb").unwrap();
        assert!(kernel.contains("where initramfs-tools runs it"), "{kernel}");
        let missing = wait_for_udev("snapboot.store=/dev/snapboot-no-such-disk").unwrap();
        assert!(missing.contains("/dev/snapboot-no-such-disk is not there before udev"));
        // A store that is there, a capture boot and a boot asking for nothing go on now.
        assert_eq!(wait_for_udev("ro snapboot.store=/dev/null"), None);
        assert_eq!(
            wait_for_udev("snapboot.capture snapboot.store=/dev/snapboot-no-such-disk"),
            None
        );
        assert_eq!(wait_for_udev("root=/dev/vda ro"), None);
        let asked = wait_for_udev("snapboot.store=/dev/null snapboot.afterudev").unwrap();
        assert_eq!(asked, "snapboot.afterudev asks for it");
    }
}
