//! After a restore, before the application continues: the restored system believes it is
//! still capture time, its random generator is in the captured state, and the integrator
//! may need to mount writable data. This module steps the wall clock from the RTC, reseeds
//! the kernel RNG with fresh entropy and runs the hook directory.

use crate::guest::print_marker;
use bootparams::Confirm;
use boottrace::Marker;
use devinstall::install::{CONFIRM_UNIT_NAME, RESTORED_TARGET_NAME};
use devsys::sys::random::{cpu_random, RandomDev};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::hooks::RESTORE_DIR as HOOK_DIR;

/// With `snapboot.profilecheck`: how long after the restore the major faults are counted
/// (long enough for a probe's first requests).
const FAULT_WATCH_SECS: u32 = 5;

/// What the post-restore steps did.
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    /// Seconds the wall clock was stepped by (0 when it was already right).
    pub clock_step: f64,
    /// Bytes of fresh entropy credited to the kernel.
    pub entropy_bytes: usize,
    /// Hooks run, with their exit status.
    pub hooks: Vec<(String, i32)>,
    /// Whether systemd took the request to start `snapboot-restored.target`.
    pub systemd: bool,
}

/// Runs every post-restore step and prints the `restored` marker.
pub fn after_restore() -> RestoreReport {
    let cmdline = devsys::system::kernel_cmdline();
    let settings = crate::settings::load_from(&cmdline, Path::new(bootparams::config::CONFIG_PATH));
    let params = crate::settings::for_the_record(&settings, &cmdline);
    let profile_check = params.profile_check;
    if profile_check {
        crate::profile::start_fault_watch(FAULT_WATCH_SECS);
    }
    let started = std::time::Instant::now();
    let clock_step = step_clock_from_rtc().unwrap_or(0.0);
    let clock_secs = started.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let entropy_bytes = reseed_rng();
    let reseed_secs = t.elapsed().as_secs_f64();
    let mut r = RestoreReport {
        clock_step,
        entropy_bytes,
        hooks: Vec::new(),
        systemd: false,
    };
    r.hooks = crate::hooks::run(Path::new(HOOK_DIR), crate::hooks::Event::Restored, &[]);
    // The status before the target: units started by it may read it.
    let t = std::time::Instant::now();
    let mut status = crate::lifecycle::restored_status(&params);
    status.timings.after_restore = Some(started.elapsed().as_secs_f64());
    crate::status::write(&status);
    if status.confirmed {
        crate::hooks::after_confirmation(&status, "restored");
    }
    let status_secs = t.elapsed().as_secs_f64();
    // The request to systemd goes out before the marker, but `restored` does not wait for
    // it: the application runs since the restore, and `systemctl` takes ~0.4 s under TCG.
    // The confirmation, when snapboot proves the restore by itself, starts with it.
    let mode = params.confirm.resolve(crate::lifecycle::under_systemd());
    let proving = status.image.is_some() && !status.confirmed;
    let t = std::time::Instant::now();
    let target = start_restored_target(proving && mode == Confirm::BootComplete);
    if proving && mode == Confirm::Up {
        crate::guest::spawn_detached(&["confirm", "--after-up", &params.grace.to_string()]);
    }
    crate::watchdog::after_restore(&status);
    let systemd_secs = t.elapsed().as_secs_f64();
    if profile_check && crate::profile::has_profile() {
        crate::profile::check_after_restore();
    }
    print_marker(
        Marker::Restored,
        Some(&format!(
            "clock stepped {:+.3} s, {} bytes entropy, {} hooks{}; these steps {:.3} s \
             (clock {:.3} s, reseed {:.3} s, status {:.3} s, systemctl {:.3} s)",
            r.clock_step,
            r.entropy_bytes,
            r.hooks.len(),
            match &target {
                Some(Ok(_)) => format!(", {TARGET_STARTING}"),
                Some(Err(e)) => format!(", {} not started: {e}", RESTORED_TARGET_NAME),
                None => String::new(),
            },
            started.elapsed().as_secs_f64(),
            clock_secs,
            reseed_secs,
            status_secs,
            systemd_secs,
        )),
    );
    crate::status::print_marker(&status);
    crate::profile::start_prefetch();
    crate::memory::start_add(&params);
    if let Some(Ok(child)) = target {
        // Waited for: the capture unit's processes end with it.
        r.systemd = match child.wait_with_output() {
            Ok(out) if out.status.success() => true,
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr);
                print_marker(
                    Marker::RestoredTargetFailed,
                    Some(&format!("systemctl: {}: {}", out.status, why.trim())),
                );
                false
            }
            Err(e) => {
                print_marker(
                    Marker::RestoredTargetFailed,
                    Some(&format!("systemctl: {e}")),
                );
                false
            }
        };
    }
    r
}

/// How the `restored` marker says that systemd was asked to start the target.
pub const TARGET_STARTING: &str = "snapboot-restored.target starting";

/// Under systemd: starts `snapboot-restored.target`, and `snapboot-confirm.service` when
/// the restore is to be confirmed at `boot-complete.target` ([`start_units`]).
fn start_restored_target(confirm: bool) -> Option<std::io::Result<std::process::Child>> {
    if confirm {
        start_units(&[RESTORED_TARGET_NAME, CONFIRM_UNIT_NAME])
    } else {
        start_units(&[RESTORED_TARGET_NAME])
    }
}

/// Under systemd: starts `TARGET` ([`start_units`]).
pub fn start_target(target: &str) -> Option<std::io::Result<std::process::Child>> {
    start_units(&[target])
}

/// Under systemd (`/run/systemd/system` exists): starts `systemctl start --no-block
/// UNIT...` and returns without waiting for it. `None` without systemd.
fn start_units(units: &[&str]) -> Option<std::io::Result<std::process::Child>> {
    if !crate::lifecycle::under_systemd() {
        return None;
    }
    Some(
        Command::new("systemctl")
            .args(["start", "--no-block"])
            .args(units)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn(),
    )
}

/// Steps CLOCK_REALTIME to the RTC when it is outside the second the RTC reads
/// ([`clock_step`]). Returns the step.
pub fn step_clock_from_rtc() -> Option<f64> {
    let rtc: u64 = std::fs::read_to_string("/sys/class/rtc/rtc0/since_epoch")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    let Some(step) = clock_step(rtc, now) else {
        return Some(0.0);
    };
    let ts = rustix::time::Timespec {
        tv_sec: rtc as i64,
        tv_nsec: 500_000_000,
    };
    rustix::time::clock_settime(rustix::time::ClockId::Realtime, ts).ok()?;
    Some(step)
}

/// The step that brings a clock reading `now` (seconds since the epoch) to an RTC whose
/// seconds counter reads `rtc`, or `None` when `now` is inside that second already. An RTC
/// counts whole seconds, so the time is somewhere in `[rtc, rtc + 1)`: a clock outside it is
/// set to its middle, which leaves it at most half a second off (the kernel's own resume,
/// which sets the clock from the RTC's whole seconds, can leave it almost two behind).
pub fn clock_step(rtc: u64, now: f64) -> Option<f64> {
    let rtc = rtc as f64;
    if (rtc..rtc + 1.0).contains(&now) {
        return None;
    }
    Some(rtc + 0.5 - now)
}

/// Mixes fresh entropy into the kernel pool, credits it and forces a reseed of the CRNG, so
/// that every boot of the same image produces different random numbers. Sources: the
/// hardware RNG (virtio-rng on the board), RDRAND where the CPU has it, and timing.
pub fn reseed_rng() -> usize {
    let mut fresh = Vec::with_capacity(96);
    if let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/hwrng")
    {
        let mut buf = [0u8; 64];
        if let Ok(n) = read_with_deadline(f, &mut buf, Duration::from_millis(200)) {
            fresh.extend_from_slice(&buf[..n]);
        }
    }
    fresh.extend(cpu_random(4).iter().flat_map(|w| w.to_le_bytes()));
    let credited = fresh.len();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    fresh.extend_from_slice(&now.as_nanos().to_le_bytes());
    fresh.extend_from_slice(&std::process::id().to_le_bytes());
    let Ok(random) = RandomDev::open() else {
        return 0;
    };
    let added = random.add_entropy(&fresh, credited).is_ok();
    // Reseeding matters even when nothing was credited: the mix-in above is fresh.
    let _ = random.reseed_crng();
    if added {
        credited
    } else {
        0
    }
}

fn read_with_deadline(
    mut f: std::fs::File,
    buf: &mut [u8],
    wait: Duration,
) -> std::io::Result<usize> {
    let end = std::time::Instant::now() + wait;
    let mut n = 0;
    while n < buf.len() && std::time::Instant::now() < end {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return if n > 0 { Ok(n) } else { Err(e) },
        }
    }
    Ok(n)
}

/// Drops the kernel's cached blocks of a block device (no-op for plain files).
pub fn flush_block_cache(path: &Path) {
    // Best effort: BLKFLSBUF needs CAP_SYS_ADMIN, which capture (run as root) has.
    let _ = devsys::sys::block::flush_buffers(path);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_clock_is_stepped_only_when_outside_the_rtcs_second_and_then_to_its_middle() {
        use super::clock_step;
        assert_eq!(clock_step(100, 100.0), None);
        assert_eq!(clock_step(100, 100.99), None);
        assert_eq!(clock_step(100, 101.0), Some(-0.5));
        assert_eq!(clock_step(100, 98.75), Some(1.75));
        // An image captured an hour ago.
        assert_eq!(clock_step(7200, 3600.0), Some(3600.5));
    }
}
