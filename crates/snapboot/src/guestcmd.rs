//! Commands that run on the device: `ready`, `capture`, `resume`, and `image inspect`
//! (which also runs on the host).

use anyhow::{Context, Result};
use bootparams::{parse_reclaim, parse_size};
use boottrace::Marker;
use clap::{Args, ValueEnum};
use ondevice::boot::{Ready, ResumeRequest};
use ondevice::capture::{capture, CaptureOptions, CaptureOutcome, Then};
use ondevice::guest::print_marker;
use std::path::PathBuf;
use std::process::ExitCode;

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

impl ResumeArgs {
    /// The request this command line makes of the device's boot.
    fn request(self) -> ResumeRequest {
        if self.from_cmdline {
            ResumeRequest::FromCmdline {
                before_udev: self.before_udev,
            }
        } else {
            ResumeRequest::Store {
                store: self.store.unwrap_or_default(),
                once: self.once,
            }
        }
    }

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

/// The application's ready hook (`snapboot ready`): the device's boot decides and captures
/// ([`ondevice::boot::run_ready`]); prints `restored` on the restored side so the
/// application's script can tell.
pub fn ready() -> Result<ExitCode> {
    match ondevice::boot::run_ready()? {
        Ready::Restored => println!("restored"),
        Ready::Running(Some(generation)) => println!("captured generation {generation}"),
        Ready::Running(None) => {}
    }
    Ok(ExitCode::SUCCESS)
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

fn run_capture(o: &CaptureOptions) -> Result<ExitCode> {
    match capture(o) {
        Ok(CaptureOutcome::Restored(_)) => println!("restored"),
        Ok(CaptureOutcome::Captured(generation)) => println!("captured generation {generation}"),
        Err(e) => {
            print_marker(Marker::CaptureFailed, Some(&chain(&e)));
            return Err(e.into());
        }
    }
    Ok(ExitCode::SUCCESS)
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

/// `snapboot resume`: returns only when the image was not restored
/// ([`ondevice::boot::run_resume`] says what it does), with its exit status.
pub fn resume_cmd(a: ResumeArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(ondevice::boot::run_resume(a.request())))
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
