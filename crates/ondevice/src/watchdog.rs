//! The restored system's half of the hardware watchdog across a restore
//! (`snapboot.watchdog`): resume armed it before handing the machine to the image and said so
//! in the status it left in the store's boot log; here it is fed until the restore is
//! confirmed, then stopped. A restored system that hangs first stops feeding it, and the
//! machine resets: that restore stays unconfirmed, and after `snapboot.attempts` of them the
//! crash-loop guard boots cold, with no one at the device.
//!
//! ```text
//! resume: arm (timeout T) ─► count attempt, status.watchdog = T ─► atomic restore
//! restored: confirmed at once?  ── stop it now
//!           else `snapboot feed-watchdog T` (detached): feed every T/3 s while the status
//!             is this restore's and unconfirmed;
//!             confirmed ─► stop it;  confirmation failed ─► stop feeding: reset in T s;
//!             held by another process (systemd's RuntimeWatchdogSec) ─► it feeds it
//! ```

use crate::guest::print_marker;
use crate::status::BootStatus;
use boottrace::Marker;
use devsys::watchdog::{Watchdog, WATCHDOG0};
use std::path::Path;
use std::time::{Duration, Instant};

/// Written by a confirmation that failed (`snapboot confirm`'s `confirm-failed`): the
/// feeder stops feeding, so the machine resets and the next power-on tries again.
pub const CONFIRM_FAILED_FLAG: &str = "/run/snapboot/confirm-failed";

/// How often the feeder looks at the status between feeds.
const POLL: Duration = Duration::from_millis(500);

/// Right after a restore: what the status says about the watchdog, done. A restore
/// confirmed at once stops it here; otherwise the feeder takes over, detached.
pub fn after_restore(status: &BootStatus) {
    let Some(timeout) = status.watchdog else {
        return;
    };
    let _ = std::fs::remove_file(CONFIRM_FAILED_FLAG);
    if status.confirmed {
        let said = match Watchdog::open(Path::new(WATCHDOG0)).and_then(Watchdog::disarm) {
            Ok(()) => "stopped: the restore is confirmed".to_string(),
            Err(e) => format!("not stopped: {e}"),
        };
        print_marker(Marker::Watchdog, Some(&format!("{WATCHDOG0} {said}")));
    } else {
        crate::guest::spawn_detached(&["feed-watchdog", &timeout.to_string()]);
    }
}

/// What the feeder came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedEnd {
    /// The restore was confirmed: the watchdog is stopped.
    Confirmed,
    /// The confirmation failed: the watchdog runs on and resets the machine.
    Failed,
    /// Another restore's status replaced this one's (a capture took the feeder into its
    /// image): the watchdog is left to that restore's feeder.
    Superseded,
}

/// What the feeder does next, from this boot's status as it reads now.
pub fn next_step(started: &BootStatus, now: &BootStatus, failed: bool) -> Option<FeedEnd> {
    if !crate::lifecycle::same_restore(started, now) {
        Some(FeedEnd::Superseded)
    } else if now.confirmed {
        Some(FeedEnd::Confirmed)
    } else if failed {
        Some(FeedEnd::Failed)
    } else {
        None
    }
}

/// `snapboot feed-watchdog T`: feeds [`WATCHDOG0`] (timeout `timeout`) every third of it
/// until this restore is confirmed (then stops it), its confirmation fails (then leaves it
/// to reset the machine) or another restore's status replaces this one's. The markers say
/// which. A watchdog another process holds open (systemd's `RuntimeWatchdogSec=`) is left
/// to it.
pub fn feed_until_confirmed(timeout: u32) -> FeedEnd {
    let started = match crate::status::read() {
        Ok(s) => s,
        Err(e) => {
            print_marker(
                Marker::Watchdog,
                Some(&format!("{WATCHDOG0} not fed: this boot's status: {e}")),
            );
            return FeedEnd::Superseded;
        }
    };
    let w = match Watchdog::open(Path::new(WATCHDOG0)) {
        Ok(w) => w,
        Err(e) if e.raw_os_error() == Some(libc_ebusy()) => {
            print_marker(
                Marker::Watchdog,
                Some(&format!(
                    "{WATCHDOG0} is held by another process (systemd's RuntimeWatchdogSec?): \
                     it feeds it"
                )),
            );
            return FeedEnd::Superseded;
        }
        Err(e) => {
            print_marker(
                Marker::Watchdog,
                Some(&format!(
                    "{WATCHDOG0} not fed: {e}: the machine resets in {timeout} s"
                )),
            );
            return FeedEnd::Failed;
        }
    };
    let set = w.set_timeout(timeout).unwrap_or(timeout);
    let _ = w.keepalive();
    print_marker(
        Marker::Watchdog,
        Some(&format!(
            "{WATCHDOG0} fed by snapboot every {} s until the restore is confirmed (timeout {set} s)",
            feed_every(set).as_secs()
        )),
    );
    let mut fed = Instant::now();
    loop {
        std::thread::sleep(POLL);
        let now = crate::status::read().unwrap_or_else(|_| started.clone());
        let failed = Path::new(CONFIRM_FAILED_FLAG).exists();
        match next_step(&started, &now, failed) {
            None => {}
            Some(FeedEnd::Confirmed) => {
                let said = match w.disarm() {
                    Ok(()) => "stopped: the restore is confirmed".to_string(),
                    Err(e) => format!("not stopped after the confirmation: {e}"),
                };
                print_marker(Marker::Watchdog, Some(&format!("{WATCHDOG0} {said}")));
                return FeedEnd::Confirmed;
            }
            Some(end) => {
                if end == FeedEnd::Failed {
                    print_marker(
                        Marker::Watchdog,
                        Some(&format!(
                            "{WATCHDOG0} not fed any more: the restore's confirmation failed; \
                             the machine resets in {set} s"
                        )),
                    );
                }
                w.leave_running();
                return end;
            }
        }
        if fed.elapsed() >= feed_every(set) {
            let _ = w.keepalive();
            fed = Instant::now();
        }
    }
}

/// A third of the timeout, at least a second.
fn feed_every(timeout: u32) -> Duration {
    Duration::from_secs(u64::from((timeout / 3).max(1)))
}

/// `EBUSY`: the watchdog node is open elsewhere.
fn libc_ebusy() -> i32 {
    rustix::io::Errno::BUSY.raw_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ImageRef, Outcome};

    #[test]
    fn the_feeder_stops_on_the_confirmation_lets_a_failed_one_reset_and_yields_to_a_new_restore() {
        let mut s = crate::status::new(Outcome::Restored, &bootparams::BootParams::default());
        s.image = Some(ImageRef {
            name: "current".into(),
            generation: 2,
        });
        s.written_unix = 1000;
        s.timings.load = Some(0.5);
        s.watchdog = Some(10);
        assert_eq!(next_step(&s, &s, false), None);
        assert_eq!(next_step(&s, &s, true), Some(FeedEnd::Failed));
        let mut confirmed = s.clone();
        confirmed.confirmed = true;
        confirmed.written_unix = 1003;
        assert_eq!(next_step(&s, &confirmed, false), Some(FeedEnd::Confirmed));
        let mut later = s.clone();
        later.timings.load = Some(0.6);
        assert_eq!(next_step(&s, &later, true), Some(FeedEnd::Superseded));
        assert_eq!(feed_every(10), Duration::from_secs(3));
        assert_eq!(feed_every(2), Duration::from_secs(1));
    }
}
