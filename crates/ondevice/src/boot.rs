//! The device's boot: what `snapboot resume` does at power-on, what `snapboot ready` does at
//! the application's ready point, when a restore waits for udev, and when a restore kernel
//! hands a cold boot to the stock kernel.
//!
//! Each decision is a pure function of the settings (the config file under the kernel
//! command line: [`crate::settings`]) and what the caller observed ([`power_on`],
//! [`at_ready`], [`before_udev`], [`hand_over_pack`]), tested below; the
//! `run_*` functions carry them out and print the markers. The binaries only parse their
//! arguments and call these.

use crate::capture::{capture, CaptureOptions, CaptureOutcome};
use crate::guest::print_marker;
use crate::resume::{resume, ResumeError, ResumeOptions};
use crate::settings::{refusal, Settings};
use crate::status::{recapture_after, BootStatus, Outcome, Recapture};
use bootparams::{BootParams, StoreAddress};
use bootstatus::{Held, RecapturePolicy};
use boottrace::{error_chain as chain, Marker};
use snapimg::BootSetup;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Exit status of `snapboot resume --before-udev` when the restore has to wait for udev
/// (initramfs-tools' init-top script then leaves it to the local-premount one).
pub const EXIT_AFTER_UDEV: u8 = 3;
/// Exit status of `snapboot resume` when nothing was restored and the cold boot continues
/// (the reason is on the console as the `fallback` marker).
pub const EXIT_NOT_RESTORED: u8 = 4;

/// How long `--before-udev` waits for the store's device node when the initramfs loaded the
/// store's drivers (/etc/snapboot/store-modules, which `snapboot install --store` writes): a node that
/// takes longer comes from a driver udev loads.
pub const BEFORE_UDEV_WAIT: Duration = Duration::from_secs(1);
/// ... and when it did not: only a node a built-in or already loaded driver made is there.
pub const BEFORE_UDEV_WAIT_UNKNOWN: Duration = Duration::from_millis(100);
pub use devsys::locate::NODE_WAIT;

/// The status's reason on a boot with `noresume` on the kernel command line.
pub const NORESUME_REASON: &str =
    "noresume on the kernel command line: nothing is restored this boot";

/// What a power-on with this command line does, before any filesystem is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerOn {
    /// No store named: an ordinary boot.
    Nothing,
    /// A cold boot a restore kernel handed over: it said why already.
    HandedOver,
    /// A capture boot: the image is taken at the ready point, nothing is restored.
    CaptureBoot,
    /// `noresume` on the kernel command line: nothing is restored this once.
    NoResume,
    /// Boot cold for this reason (a word or a config file that does not parse, a restore
    /// kernel asked to capture).
    Cold(String),
    /// The benchmarks' baseline: the kernel's own resume from this swap device.
    KernelNative(PathBuf),
    /// Restore from the store.
    Restore {
        /// The store's address.
        store: StoreAddress,
        /// Remove the image as it is restored.
        once: bool,
        /// Images to try first.
        images: Vec<String>,
    },
}

/// What the settings ask of a power-on.
pub fn power_on(settings: &Settings) -> PowerOn {
    let p = match settings {
        Ok(p) => p.clone(),
        Err(e) => return PowerOn::Cold(refusal(e)),
    };
    // Before a hand-over: the restore kernel or the restorer did not restore for this word
    // either, and the stock kernel says so itself.
    if !p.resume {
        return PowerOn::NoResume;
    }
    if p.handed_over {
        return PowerOn::HandedOver;
    }
    if p.capture {
        return match p.cold_kernel {
            Some(_) => {
                PowerOn::Cold("a restore kernel does not capture: the stock kernel does".into())
            }
            None => PowerOn::CaptureBoot,
        };
    }
    if let Some(dev) = p.kresume {
        return PowerOn::KernelNative(dev.into());
    }
    match p.store {
        Some(store) => PowerOn::Restore {
            store,
            once: p.once,
            images: p.images,
        },
        None => PowerOn::Nothing,
    }
}

/// Before udev (initramfs-tools' init-top): why this boot's resume must wait for udev, if it
/// must. The kernel's own resume (the baseline) waits, to run where initramfs-tools runs
/// it; so does a restore that asks for it, and one from a store whose node does not appear
/// in time: within [`BEFORE_UDEV_WAIT`] when the initramfs loaded the store's drivers
/// (`store_modules_loaded`), [`BEFORE_UDEV_WAIT_UNKNOWN`] otherwise (`appears` waits, and
/// says whether the address resolved: [`devsys::locate::resolve`], where two matching
/// devices count as there, since waiting for udev would not change that).
pub fn before_udev(
    settings: &Settings,
    store_modules_loaded: bool,
    appears: impl Fn(&StoreAddress, Duration) -> bool,
) -> Option<String> {
    let params = settings.as_ref().ok()?;
    if !params.resume {
        return None;
    }
    if params.kresume.is_some() {
        return Some("the kernel's own resume runs where initramfs-tools runs it".into());
    }
    if params.after_udev {
        return Some(format!("{} asks for it", bootparams::key::AFTERUDEV));
    }
    if params.capture || params.handed_over {
        return None;
    }
    let store = params.store.as_ref()?;
    let wait = if store_modules_loaded {
        BEFORE_UDEV_WAIT
    } else {
        BEFORE_UDEV_WAIT_UNKNOWN
    };
    (!appears(store, wait)).then(|| {
        format!(
            "{store} is not there before udev: restoring after udev (the initramfs loads \
             its drivers first when /{} lists them; `snapboot check` names them)",
            devinstall::install::STORE_MODULES_PATH
        )
    })
}

/// The kernel pack a cold boot is handed to: on a restore kernel (`release` ends in
/// [`bootparams::RESTORE_KERNEL_SUFFIX`]) that names one with `snapboot.coldkernel=`; other
/// kernels boot cold themselves.
pub fn hand_over_pack<'a>(cmdline: &'a str, release: &str) -> Option<&'a str> {
    bootparams::value_of(cmdline, bootparams::key::COLDKERNEL)
        .filter(|_| release.ends_with(bootparams::RESTORE_KERNEL_SUFFIX))
}

/// What `snapboot resume` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeRequest {
    /// What the kernel command line says (the boot scripts' call); `before_udev`: from
    /// initramfs-tools' init-top, which leaves the restore to a later script when it must
    /// wait for udev ([`before_udev`]).
    FromCmdline { before_udev: bool },
    /// This store (a user's call).
    Store { store: StoreAddress, once: bool },
}

/// Runs `snapboot resume`: records this boot's setup, restores (never returning then), or
/// prints why not as the `fallback` marker and, on a restore kernel, hands the cold boot to
/// the stock kernel. Returns the exit status: 0 when this boot asked for no restore,
/// [`EXIT_NOT_RESTORED`], or [`EXIT_AFTER_UDEV`].
pub fn run_resume(req: ResumeRequest) -> u8 {
    if matches!(req, ResumeRequest::FromCmdline { .. }) && resumed_as_first_process() {
        println!("snapboot: resume ran as this boot's first process already (above)");
        return EXIT_NOT_RESTORED;
    }
    let started = Instant::now();
    let this_boot = matches!(req, ResumeRequest::FromCmdline { .. });
    let cmdline = devsys::system::kernel_cmdline();
    let settings = crate::settings::load_from(&cmdline, Path::new(bootparams::config::CONFIG_PATH));
    if req == (ResumeRequest::FromCmdline { before_udev: true }) {
        let modules = Path::new("/").join(devinstall::install::STORE_MODULES_PATH);
        let appears = |a: &StoreAddress, wait| match devsys::locate::resolve(a, wait) {
            Ok(at) => at.path.exists(),
            Err(e) => !e.is_missing(),
        };
        if let Some(why) = before_udev(&settings, modules.exists(), appears) {
            print_marker(Marker::ResumeAfterUdev, Some(&why));
            return EXIT_AFTER_UDEV;
        }
    }
    // Every boot records its setup, for the capture that may follow in this boot.
    let t = Instant::now();
    let boot_setup = match crate::resume::observe_and_record_boot() {
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
    let params = crate::settings::for_the_record(&settings, &cmdline);
    let plan = match req {
        // A store given by hand is restored under the same settings (the device key, the
        // crash-loop guard): not when they cannot be known.
        ResumeRequest::Store { .. } if settings.is_err() => power_on(&settings),
        ResumeRequest::FromCmdline { .. } => power_on(&settings),
        ResumeRequest::Store { store, once } => PowerOn::Restore {
            store,
            once,
            images: Vec::new(),
        },
    };
    let mut status = carry_out(plan, boot_setup, &params, started);
    status.timings.resume = Some(started.elapsed().as_secs_f64());
    if status.outcome == Outcome::Fallback && !status.handed_over {
        print_marker(Marker::Fallback, status.reason.as_deref());
    }
    let release = devsys::system::running_release();
    if let Some(pack) = hand_over_pack(&cmdline, &release) {
        let why = status
            .reason
            .clone()
            .unwrap_or_else(|| "this boot asks for no restore".into());
        keep_for_the_next_kernel(&params, &status);
        hand_over(Path::new(pack), &cmdline, &why);
    }
    if this_boot {
        keep_in_history(&params, &status);
    }
    crate::status::write(&status);
    crate::status::print_marker(&status);
    match status.outcome {
        Outcome::Fallback => EXIT_NOT_RESTORED,
        _ => 0,
    }
}

/// Carries out a power-on plan; returns only if nothing was restored, with what the boot
/// came to.
fn carry_out(
    plan: PowerOn,
    boot_setup: Option<BootSetup>,
    params: &BootParams,
    started: Instant,
) -> BootStatus {
    let cold = |outcome: Outcome, why: String| {
        let mut s = crate::status::new(outcome, params);
        s.reason = Some(why);
        s
    };
    match plan {
        PowerOn::Nothing => cold(
            Outcome::Cold,
            format!(
                "no store: no {}= on the kernel command line, no store = in {}",
                bootparams::key::STORE,
                bootparams::config::CONFIG_PATH
            ),
        ),
        PowerOn::CaptureBoot => cold(
            Outcome::Cold,
            "a capture boot: the image is taken at the ready point".into(),
        ),
        PowerOn::NoResume => cold(Outcome::Cold, NORESUME_REASON.into()),
        PowerOn::HandedOver => {
            let (status, by) = handed_over_status(params);
            print_marker(
                Marker::HandedOver,
                Some(&format!(
                    "cold boot handed over by {by}, which said why above"
                )),
            );
            status
        }
        PowerOn::Cold(why) => cold(Outcome::Fallback, why),
        PowerOn::KernelNative(dev) => {
            devsys::system::wait_for_node(&dev, NODE_WAIT);
            let why = match crate::kernel_native::resume(&dev) {
                Ok(()) => "kernel-native: no hibernation image on the swap device".to_string(),
                Err(e) => format!("kernel-native: {}", chain(&e)),
            };
            cold(Outcome::Fallback, why)
        }
        PowerOn::Restore {
            store,
            once,
            images,
        } => {
            if params.medium_baseline {
                crate::baseline::measure_and_power_off(&store, &images, NODE_WAIT);
            }
            let err = resume(&ResumeOptions {
                store,
                once,
                wait: NODE_WAIT,
                boot_setup,
                images,
                public_key: None,
                key: crate::devicekey::KeyConfig::with_rollback(
                    params.encrypt.clone(),
                    params.rollback,
                ),
                attempts: params.attempts,
                watchdog: params.watchdog,
                started: Some(started),
            });
            let mut s = cold(Outcome::Fallback, chain(&err));
            let empty = matches!(err, ResumeError::NoImage { .. });
            if let ResumeError::NoneRestorable { refused, .. } = err {
                s.refused = refused;
            }
            s.recapture = recapture_after(&s.refused, Held::empty_if(empty), policy(params));
            s
        }
    }
}

/// This device's settings for a capture after a fallback: `snapboot.norecapture`, and
/// whether only images it cannot make restore here (signed ones: a public key is in the
/// initramfs, and no device key authenticates the device's own captures).
fn policy(params: &BootParams) -> RecapturePolicy {
    RecapturePolicy {
        allowed: params.recapture,
        signed_only: Path::new(crate::store::PUBLIC_KEY_FILE).exists() && !params.encrypt.on(),
    }
}

/// On a restore kernel about to hand the cold boot over: keeps its status in the store's
/// boot log, where the stock kernel reads it back ([`handed_over_status`]).
fn keep_for_the_next_kernel(params: &BootParams, status: &BootStatus) {
    let Some(store) = &params.store else { return };
    let kept = crate::store::update_boot_log(store, NODE_WAIT, |log| {
        log.last_boot = crate::status::to_boot_log(status);
    });
    if let Err(e) = kept {
        eprintln!(
            "snapboot: the stock kernel will not know why: {}",
            chain(&e)
        );
    }
}

/// Adds this boot, which was not restored, to the history in the store's boot log (a
/// restored boot is added by the restored system: [`crate::lifecycle::restored_status`]).
/// Nothing when no store is named or its device is not there (the status says why); a
/// store that cannot be written is named, and the boot goes on.
pub(crate) fn keep_in_history(params: &BootParams, status: &BootStatus) {
    let Some(store) = &params.store else { return };
    let kept = crate::store::update_boot_log(store, Duration::ZERO, |log| {
        crate::status::remember(log, status);
    });
    match kept {
        Ok(()) | Err(crate::store::StoreUseError::Locate { .. }) => {}
        Err(e) => eprintln!(
            "snapboot: this boot is not kept in the store's history: {}",
            chain(&e)
        ),
    }
}

/// The status of a cold boot a restore kernel or the restorer handed over: theirs, read back
/// from the store's boot log (and cleared there), with this kernel's own re-capture policy.
/// Also returns who handed over, as its status names it (the restorer, or the restore
/// kernel by its release).
fn handed_over_status(params: &BootParams) -> (BootStatus, String) {
    let kept = params.store.as_ref().map(|store| {
        crate::store::update_boot_log(store, NODE_WAIT, |log| {
            crate::status::from_boot_log(&std::mem::take(&mut log.last_boot))
        })
    });
    let mut s = match kept {
        Some(Ok(Some(s))) => s,
        other => {
            let why = match other {
                Some(Err(e)) => format!("the store's boot log cannot be read: {}", chain(&e)),
                _ => "the restore kernel or the restorer left no status in the store's boot log"
                    .into(),
            };
            let mut s = crate::status::new(Outcome::Fallback, params);
            s.reason = Some(format!(
                "handed over by a restore kernel or the restorer; {why}"
            ));
            s
        }
    };
    let by = handed_over_by(&s.kernel);
    s.handed_over = true;
    s.kernel = devsys::system::running_release();
    if s.recapture == Recapture::Planned || s.recapture == Recapture::Off {
        let held = Held::empty_if(s.refused.is_empty());
        s.recapture = recapture_after(&s.refused, held, policy(params));
    }
    (s, by)
}

/// Who handed the cold boot over, from the kernel its status names.
fn handed_over_by(writer: &str) -> String {
    if writer == bootstatus::RESTORER {
        "the restorer".into()
    } else if writer.is_empty() {
        "a restore kernel or the restorer".into()
    } else {
        format!("the restore kernel {writer}")
    }
}

/// A restore kernel's fallback: kexec into the stock kernel of the kernel pack at `pack`.
/// Returns only if that failed; the console then says why, and the boot cannot go on.
fn hand_over(pack: &Path, cmdline: &str, why: &str) {
    let cold = kernelpack::cmdline::cold_cmdline(cmdline);
    match crate::handover::load(pack, &cold, NODE_WAIT) {
        Ok(loaded) => {
            print_marker(
                Marker::Handover,
                Some(&format!("{}; because: {why}", loaded.describe())),
            );
            let e = crate::handover::jump();
            print_marker(Marker::HandoverFailed, Some(&chain(&e)));
        }
        Err(e) => print_marker(Marker::HandoverFailed, Some(&chain(&e))),
    }
}

/// snapboot as the kernel's first process (`rdinit=/bin/snapboot`: what the board and
/// `snapboot restore-kernel install` give a restore kernel), in the board's initramfs or a
/// distribution's (initramfs-tools, dracut): mounts what `/init` would (making the mount
/// points the archive lacks), resumes with the settings resume reads (the command line over
/// the initramfs's config file) and the store found as resume finds it; when nothing is
/// restored, [`run_resume`] hands the cold boot to the stock kernel of the kernel pack.
/// Only when there is no pack, or the hand-over failed, does it run the initramfs's `/init`
/// on this kernel, saying why, and telling it the first steps are done ([`bootparams::EARLY_ENV`]).
/// Never returns: process 1 must not exit.
pub fn early_init() -> ! {
    for f in crate::guest::early_mounts() {
        eprintln!("snapboot: early init: cannot mount {f}");
    }
    print_marker(Marker::Init, None);
    run_resume(ResumeRequest::FromCmdline { before_udev: false });
    let why = init_runs_here(
        &devsys::system::kernel_cmdline(),
        &devsys::system::running_release(),
    );
    eprintln!("snapboot: early init: running /init on this kernel: {why}");
    use std::os::unix::process::CommandExt;
    // `/init` itself: initramfs-tools' and the board's are scripts, dracut's may be systemd.
    let err = std::process::Command::new("/init")
        .env(bootparams::EARLY_ENV, "1")
        .env("PATH", "/bin")
        .exec();
    eprintln!("snapboot: early init: cannot run /init: {err}");
    let err = std::process::Command::new("/bin/sh").exec();
    eprintln!("snapboot: early init: cannot run a shell either: {err}");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Why the first process runs the initramfs's `/init` on this kernel after a resume that
/// neither restored nor handed the boot to another kernel (`release`: this kernel's).
pub fn init_runs_here(cmdline: &str, release: &str) -> &'static str {
    if !release.ends_with(bootparams::RESTORE_KERNEL_SUFFIX) {
        "it is not a restore kernel: it boots the system itself"
    } else if hand_over_pack(cmdline, release).is_none() {
        "no kernel pack to hand the cold boot to (no snapboot.coldkernel=)"
    } else {
        "the hand-over to the stock kernel failed (above)"
    }
}

/// Whether this `snapboot resume` runs under an initramfs `/init` that snapboot started as
/// the kernel's first process, which resumed already ([`early_init`]): a distribution's
/// boot scripts call resume again, and it stands down.
fn resumed_as_first_process() -> bool {
    std::env::var_os(bootparams::EARLY_ENV).is_some() && std::process::id() != 1
}

/// What the application's ready point does on a boot with this command line.
#[derive(Debug, Clone)]
pub enum AtReady {
    /// Print the ready marker only.
    Nothing,
    /// A capture was asked for with a word that does not parse: fail at once with it, so
    /// the host sees a capture failure instead of waiting past a console line.
    Refuse(String),
    /// The benchmarks' baseline: the kernel's own hibernation to this swap device.
    KernelNative(PathBuf),
    /// Capture with these settings.
    Capture(Box<CaptureOptions>),
}

/// What the settings ask of the ready point (`cmdline`: the kernel command line they
/// include). A word or a config file that does not parse on a boot that asks for no
/// capture is ignored here: resume named it at power-on (`fallback`).
pub fn at_ready(cmdline: &str, settings: &Settings) -> AtReady {
    let p = match settings {
        Ok(p) => p,
        Err(e) if asks_for_capture(cmdline) => return AtReady::Refuse(refusal(e)),
        Err(_) => return AtReady::Nothing,
    };
    if let Some(dev) = &p.khibernate {
        return AtReady::KernelNative(dev.into());
    }
    match (&p.store, p.capture) {
        (Some(store), true) => AtReady::Capture(Box::new(capture_options(p, store))),
        _ => AtReady::Nothing,
    }
}

/// Whether the command line asks for a capture, even if another of its words is bad.
fn asks_for_capture(cmdline: &str) -> bool {
    cmdline
        .split_whitespace()
        .any(|w| w.split('=').next() == Some(bootparams::key::CAPTURE))
}

/// Capture settings from the boot parameters.
pub fn capture_options(p: &BootParams, store: &StoreAddress) -> CaptureOptions {
    let mut o = CaptureOptions::new(store.clone());
    o.then = p.then;
    o.force = p.force;
    o.drop_caches = p.drop_caches;
    o.compact = p.compact;
    if let Some(c) = p.compression {
        o.compression = c;
    }
    o.lazy = p.lazy.map(|reclaim| crate::lazy::LazyOptions {
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
    o.key = crate::devicekey::KeyConfig::with_rollback(p.encrypt.clone(), p.rollback);
    o
}

/// Why the ready point failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    /// A capture was asked for with a bad word.
    #[error("{0}")]
    BadWord(String),
    /// The kernel's own hibernation failed.
    #[error("kernel-native hibernation")]
    KernelNative(#[source] crate::kernel_native::NativeError),
    /// The capture failed.
    #[error(transparent)]
    Capture(#[from] crate::capture::CaptureError),
}

/// What the ready point ended with.
#[derive(Debug)]
pub enum Ready {
    /// Nothing to capture (or captured and running on, [`crate::capture::Then::Continue`]:
    /// the image's generation).
    Running(Option<u64>),
    /// This is a system restored from an image taken at this point.
    Restored,
}

/// Runs `snapboot ready`: prints the ready marker, captures when the command line asks,
/// and on a cold boot that goes on starts adding deferred memory. A failure is printed as
/// the `capture-failed` marker too.
pub fn run_ready() -> Result<Ready, ReadyError> {
    crate::guest::ready();
    let cmdline = devsys::system::kernel_cmdline();
    let settings = crate::settings::load_from(&cmdline, Path::new(bootparams::config::CONFIG_PATH));
    let (result, powers_off) = match at_ready(&cmdline, &settings) {
        AtReady::Nothing => match &settings {
            Ok(params) => (Ok(recapture_if_planned(params)), false),
            Err(_) => (Ok(Ready::Running(None)), false),
        },
        AtReady::Refuse(why) => (Err(ReadyError::BadWord(why)), false),
        AtReady::KernelNative(dev) => (
            crate::kernel_native::hibernate(&dev)
                .map(|()| {
                    print_marker(Marker::Restored, Some("kernel-native"));
                    Ready::Restored
                })
                .map_err(ReadyError::KernelNative),
            true,
        ),
        AtReady::Capture(o) => {
            let powers_off = o.then == crate::capture::Then::PowerOff;
            let r = match capture(&o) {
                Ok(CaptureOutcome::Restored(_)) => Ok(Ready::Restored),
                Ok(CaptureOutcome::Captured(generation)) => Ok(Ready::Running(Some(generation))),
                Err(e) => Err(e.into()),
            };
            (r, powers_off)
        }
    };
    if let Err(e) = &result {
        print_marker(Marker::CaptureFailed, Some(&chain(e)));
    }
    // A cold boot that is ready (and captured, if asked, and goes on): its outcome's target
    // starts (units that must run on every boot after the capture point, such as a data
    // mount), and the deferred memory comes now. The restored side does both after the
    // restore.
    if let (Ok(Ready::Running(_)), false) = (&result, powers_off) {
        start_outcome_target();
        if let Ok(p) = &settings {
            crate::memory::start_add(p);
        }
    }
    result
}

/// The systemd target of a boot that was not restored: `snapboot-fallback.target` when a
/// restore was refused (it wants `snapboot-cold.target`), `snapboot-cold.target` otherwise.
fn start_outcome_target() {
    let outcome = crate::status::read().map_or(Outcome::Cold, |s| s.outcome);
    let target = match outcome {
        Outcome::Fallback => devinstall::install::FALLBACK_TARGET_NAME,
        _ => devinstall::install::COLD_TARGET_NAME,
    };
    match crate::after_restore::start_target(target) {
        None => {}
        Some(Ok(child)) => match child.wait_with_output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => print_marker(
                Marker::OutcomeTargetFailed,
                Some(&format!(
                    "systemctl start {target}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            ),
            Err(e) => print_marker(Marker::OutcomeTargetFailed, Some(&format!("{target}: {e}"))),
        },
        Some(Err(e)) => print_marker(Marker::OutcomeTargetFailed, Some(&format!("{target}: {e}"))),
    }
}

/// A ready point with no capture asked: when this boot found its images stale or changed
/// (an update), captures a new one with this boot's settings and goes on, so the next
/// power-on restores the updated system. A failure is the `capture-failed` marker and the
/// status's; the application goes on either way.
fn recapture_if_planned(params: &BootParams) -> Ready {
    let Some(status) = crate::lifecycle::planned_recapture() else {
        return Ready::Running(None);
    };
    let Some(store) = &params.store else {
        crate::lifecycle::record_recapture(status, "", Err("no store named".into()));
        return Ready::Running(None);
    };
    let mut o = capture_options(params, store);
    o.then = crate::capture::Then::Continue;
    print_marker(
        Marker::Recapture,
        Some(&format!(
            "the images no longer fit this system: capturing {} and going on",
            o.image
        )),
    );
    match capture(&o) {
        Ok(CaptureOutcome::Restored(_)) => Ready::Restored,
        Ok(CaptureOutcome::Captured(generation)) => {
            crate::lifecycle::record_recapture(status, &o.image, Ok(generation));
            Ready::Running(Some(generation))
        }
        Err(e) => {
            let why = chain(&e);
            print_marker(Marker::CaptureFailed, Some(&why));
            crate::lifecycle::record_recapture(status, &o.image, Err(why));
            Ready::Running(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handover_names_who_handed_over() {
        assert_eq!(handed_over_by(bootstatus::RESTORER), "the restorer");
        assert_eq!(
            handed_over_by("6.1.0-56-amd64-snapboot-restore"),
            "the restore kernel 6.1.0-56-amd64-snapboot-restore"
        );
        assert_eq!(handed_over_by(""), "a restore kernel or the restorer");
    }
    use bootparams::config::{effective, ConfigFile};

    /// The settings of `cmdline` over the config file `text` (none when empty).
    fn with_file(cmdline: &str, text: &str) -> Settings {
        let file = match text {
            "" => None,
            t => Some(ConfigFile::parse(bootparams::config::CONFIG_PATH, t)?),
        };
        Ok(effective(cmdline, file)?.params)
    }

    fn power_on(cmdline: &str) -> PowerOn {
        super::power_on(&with_file(cmdline, ""))
    }

    fn before_udev(
        cmdline: &str,
        modules: bool,
        appears: impl Fn(&StoreAddress, Duration) -> bool,
    ) -> Option<String> {
        super::before_udev(&with_file(cmdline, ""), modules, appears)
    }

    fn at_ready(cmdline: &str) -> AtReady {
        super::at_ready(cmdline, &with_file(cmdline, ""))
    }

    #[test]
    fn the_config_files_store_restores_and_a_bad_file_restores_nothing_and_captures_nothing() {
        let file = "store = /dev/vdb\nimage = factory\n";
        assert_eq!(
            super::power_on(&with_file("quiet", file)),
            restore("/dev/vdb", false, &["factory"])
        );
        // The command line's store wins over the file's.
        assert_eq!(
            super::power_on(&with_file("snapboot.store=/dev/vdc", file)),
            restore("/dev/vdc", false, &["factory"])
        );
        let capture = "snapboot.capture";
        let AtReady::Capture(o) = super::at_ready(capture, &with_file(capture, file)) else {
            panic!("no capture with the file's store")
        };
        assert_eq!(
            (o.store, o.image.as_str()),
            (StoreAddress::path("/dev/vdb"), "factory")
        );
        let bad = "store = /dev/vdb\nstroe = /dev/vdc\n";
        let why = "/etc/snapboot/snapboot.conf:2: unknown key \"stroe\" (did you mean store?): \
                   a config file that does not parse is not acted on (snapboot config check)";
        assert_eq!(
            super::power_on(&with_file("snapboot.store=/dev/vdb", bad)),
            PowerOn::Cold(why.into())
        );
        match super::at_ready(capture, &with_file(capture, bad)) {
            AtReady::Refuse(w) => assert_eq!(w, why),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            super::at_ready("quiet", &with_file("quiet", bad)),
            AtReady::Nothing
        ));
        assert_eq!(
            super::before_udev(&with_file("quiet", bad), true, |_, _| false),
            None
        );
    }

    fn restore(store: &str, once: bool, images: &[&str]) -> PowerOn {
        PowerOn::Restore {
            store: StoreAddress::path(store),
            once,
            images: images.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn power_on_restores_only_what_the_command_line_names() {
        assert_eq!(power_on("root=/dev/vda ro quiet"), PowerOn::Nothing);
        assert_eq!(
            power_on("ro snapboot.store=/dev/vdb"),
            restore("/dev/vdb", false, &[])
        );
        assert_eq!(
            power_on("snapboot.store=/dev/vdb snapboot.once snapboot.image=a,b"),
            restore("/dev/vdb", true, &["a", "b"])
        );
        assert_eq!(
            power_on("snapboot.store=/dev/vdb snapboot.capture"),
            PowerOn::CaptureBoot
        );
        assert_eq!(
            power_on("snapboot.kresume=/dev/vdc"),
            PowerOn::KernelNative("/dev/vdc".into())
        );
        assert_eq!(
            power_on("snapboot.store=/dev/vdb snapboot.handedover"),
            PowerOn::HandedOver
        );
    }

    #[test]
    fn noresume_restores_nothing_whatever_names_a_store_and_waits_for_nothing() {
        let file = "store = /dev/vdb\n";
        assert_eq!(
            super::power_on(&with_file("ro quiet noresume", file)),
            PowerOn::NoResume
        );
        assert_eq!(
            power_on("noresume snapboot.store=/dev/vdb"),
            PowerOn::NoResume
        );
        assert_eq!(
            power_on("snapboot.kresume=/dev/vdc noresume"),
            PowerOn::NoResume
        );
        // Only the whole word: not a value, nor another word that contains it.
        assert_eq!(
            power_on("snapboot.store=/dev/vdb resume=noresume noresume=1"),
            restore("/dev/vdb", false, &[])
        );
        assert_eq!(
            power_on("noresume snapboot.store=/dev/vdb snapboot.handedover"),
            PowerOn::NoResume
        );
        let never = |_: &StoreAddress, _: Duration| false;
        assert_eq!(
            super::before_udev(&with_file("noresume", file), true, never),
            None
        );
        let params = with_file("noresume", file).unwrap();
        let s = carry_out(PowerOn::NoResume, None, &params, Instant::now());
        assert_eq!(s.outcome, Outcome::Cold);
        assert_eq!(
            s.reason.as_deref(),
            Some("noresume on the kernel command line: nothing is restored this boot")
        );
    }

    #[test]
    fn power_on_boots_cold_with_the_reason_for_a_bad_word_or_a_capturing_restore_kernel() {
        match power_on("snapboot.store=/dev/vdb snapboot.onse") {
            PowerOn::Cold(why) => assert!(
                why.starts_with("unknown boot parameter \"snapboot.onse\""),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            power_on("snapboot.store=/dev/vdb snapboot.capture snapboot.coldkernel=/dev/vdc"),
            PowerOn::Cold("a restore kernel does not capture: the stock kernel does".into())
        );
    }

    #[test]
    fn before_udev_waits_only_for_the_kernels_resume_and_a_missing_store() {
        let never = |_: &StoreAddress, _: Duration| false;
        let there = |_: &StoreAddress, _: Duration| true;
        let kernel = before_udev("quiet snapboot.kresume=/dev/vdb", true, there).unwrap();
        assert!(kernel.contains("where initramfs-tools runs it"), "{kernel}");
        let missing = before_udev("snapboot.store=/dev/vdz", true, never).unwrap();
        assert!(
            missing.starts_with("/dev/vdz is not there before udev"),
            "{missing}"
        );
        // A store that is there, a capture boot and a boot asking for nothing go on now.
        assert_eq!(before_udev("ro snapboot.store=/dev/vdb", true, there), None);
        assert_eq!(
            before_udev("snapboot.capture snapboot.store=/dev/vdz", true, never),
            None
        );
        assert_eq!(before_udev("root=/dev/vda ro", true, never), None);
        let asked = before_udev("snapboot.store=/dev/vdb snapboot.afterudev", true, there);
        assert_eq!(asked.as_deref(), Some("snapboot.afterudev asks for it"));
        // Any address is looked for as it is written.
        let sought = std::cell::RefCell::new(String::new());
        let look = |a: &StoreAddress, _: Duration| {
            sought.replace(a.to_string());
            false
        };
        let missing = before_udev("snapboot.store=PARTLABEL=snapstore", true, look).unwrap();
        assert_eq!(sought.borrow().as_str(), "PARTLABEL=snapstore");
        assert!(
            missing.starts_with("PARTLABEL=snapstore is not there before udev"),
            "{missing}"
        );
    }

    #[test]
    fn before_udev_waits_longer_when_the_initramfs_loaded_the_stores_drivers() {
        let waited = std::cell::Cell::new(Duration::ZERO);
        let record = |_: &StoreAddress, d: Duration| {
            waited.set(d);
            true
        };
        before_udev("snapboot.store=/dev/vdb", true, record);
        assert_eq!(waited.get(), BEFORE_UDEV_WAIT);
        before_udev("snapboot.store=/dev/vdb", false, record);
        assert_eq!(waited.get(), BEFORE_UDEV_WAIT_UNKNOWN);
    }

    #[test]
    fn the_first_process_says_why_it_runs_init_on_this_kernel() {
        let rk = format!("6.1.0{}", bootparams::RESTORE_KERNEL_SUFFIX);
        let with_pack = "snapboot.store=/dev/vdb snapboot.coldkernel=/dev/vdc";
        assert_eq!(
            init_runs_here(with_pack, &rk),
            "the hand-over to the stock kernel failed (above)"
        );
        assert_eq!(
            init_runs_here("snapboot.store=/dev/vdb", &rk),
            "no kernel pack to hand the cold boot to (no snapboot.coldkernel=)"
        );
        assert!(init_runs_here(with_pack, "6.1.0-56-amd64").starts_with("it is not a restore"));
    }

    #[test]
    fn only_a_restore_kernel_hands_a_cold_boot_over() {
        let cmdline = "snapboot.store=/dev/vdb snapboot.coldkernel=/dev/vdc";
        let rk = format!("6.1.0{}", bootparams::RESTORE_KERNEL_SUFFIX);
        assert_eq!(hand_over_pack(cmdline, &rk), Some("/dev/vdc"));
        assert_eq!(hand_over_pack(cmdline, "6.1.0-56-amd64"), None);
        assert_eq!(hand_over_pack("snapboot.store=/dev/vdb", &rk), None);
    }

    #[test]
    fn the_ready_point_captures_with_the_command_lines_settings() {
        assert!(matches!(at_ready("root=/dev/vda"), AtReady::Nothing));
        assert!(matches!(
            at_ready("snapboot.store=/dev/vdb"),
            AtReady::Nothing
        ));
        let AtReady::Capture(o) = at_ready(
            "snapboot.store=/dev/vdb snapboot.capture snapboot.then=continue snapboot.force \
             snapboot.nodrop snapboot.compress=none snapboot.lazy=96M snapboot.swapsize=1G \
             snapboot.image=factory,other snapboot.pin",
        ) else {
            panic!("no capture")
        };
        assert_eq!(o.store, StoreAddress::path("/dev/vdb"));
        assert_eq!(o.then, crate::capture::Then::Continue);
        assert!(o.force && !o.drop_caches && o.compact && o.pin);
        assert_eq!(o.compression, flashstore::Compression::None);
        assert_eq!(o.image, "factory");
        let lazy = o.lazy.expect("lazy");
        assert_eq!(lazy.region_bytes, Some(1 << 30));
        assert!(matches!(
            at_ready("snapboot.khibernate=/dev/vdc"),
            AtReady::KernelNative(d) if d == Path::new("/dev/vdc")
        ));
    }

    #[test]
    fn a_bad_word_fails_the_ready_point_only_when_a_capture_is_asked_for() {
        match at_ready("snapboot.store=/dev/vdb snapboot.capture snapboot.compress=brotli") {
            AtReady::Refuse(why) => {
                assert_eq!(why, "snapboot.compress=brotli: expected lz4 or none")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            at_ready("snapboot.store=/dev/vdb snapboot.compress=brotli"),
            AtReady::Nothing
        ));
    }
}
