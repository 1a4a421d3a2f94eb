//! A device's life in the field: `snapboot status` (what this boot did), `snapboot confirm`
//! (the application's health check passed on a restored system) and `snapboot invalidate`
//! (an update made the images stale). [`ondevice::lifecycle`] and [`ondevice::status`] act.

use crate::exit::Exit;
use anyhow::{Context, Result};
use bootparams::StoreAddress;
use clap::Args;
use ondevice::status::{BootStatus, Outcome, StatusError};
use std::process::ExitCode;

/// `snapboot status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print the status as JSON, on one line (the fields of `/run/snapboot/status`); with
    /// --history, a JSON list of the boots.
    #[arg(long)]
    json: bool,
    /// Show the last N boots instead (default 10), newest first, one line each: when, what
    /// each came to, the image restored or why not; from the history in the store's boot
    /// log, which every boot with a store adds to and which survives reboots.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "10")]
    history: Option<usize>,
    /// With --history, the store: a path, PARTUUID=, PARTLABEL= or LABEL= (default: the one
    /// the config file or the kernel command line names).
    #[arg(long, requires = "history")]
    store: Option<StoreAddress>,
}

/// `snapboot confirm`.
#[derive(Args, Debug)]
pub struct StoreArg {
    /// The store: a path, PARTUUID=, PARTLABEL= or LABEL= (default: the configured one,
    /// `store =` in /etc/snapboot/snapboot.conf or `snapboot.store=` on the kernel command
    /// line).
    #[arg(long)]
    store: Option<StoreAddress>,
}

/// `snapboot confirm`.
#[derive(Args, Debug)]
pub struct ConfirmArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Confirm only once boot-complete.target is reached again: restart it and wait, so the
    /// health checks it requires run on the restored system (snapboot-confirm.service, for
    /// snapboot.confirm=boot-complete).
    #[arg(long, conflicts_with = "after_up")]
    after_boot_complete: bool,
    /// Confirm only after the system stayed up SECONDS more (snapboot.confirm=up, run by
    /// snapboot right after the restore).
    #[arg(long, value_name = "SECONDS")]
    after_up: Option<u32>,
}

/// `snapboot invalidate`.
#[derive(Args, Debug)]
pub struct InvalidateArgs {
    #[command(flatten)]
    store: StoreArg,
    /// For the kernel and initramfs update hooks: with no store given or configured, do
    /// nothing and exit 0 without a word; a configured store that is not on this system
    /// (an image build, a chroot) is one line on stderr, and exit 1.
    #[arg(long, conflicts_with = "store")]
    if_configured: bool,
}

/// Shows what this boot did, or with `--history` the last boots. Exits 0 when this boot was
/// restored, with [`Exit::NotRestored`] when it booted cold or fell back, or when resume did
/// not run on it (then nothing was restored); with `--history`, 0 once it is shown.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    if let Some(n) = a.history {
        let store = ondevice::command_store::from_system(a.store)?;
        let boots = ondevice::lifecycle::history(&store, n)?;
        let text = if a.json {
            serde_json::to_string(&boots)?
        } else if boots.is_empty() {
            "no boot in the store's history yet".into()
        } else {
            boots
                .iter()
                .map(|b| b.line())
                .collect::<Vec<_>>()
                .join("\n")
        };
        show(&text);
        return Ok(Exit::Success.into());
    }
    let s = this_boot(ondevice::status::read())?;
    show(&if a.json {
        serde_json::to_string(&s)?
    } else {
        s.human()
    });
    Ok(exit_of(&s).into())
}

/// Prints `text` and a newline on stdout; a reader that stops early (`snapboot status |
/// head -n 1`) changes nothing, the exit status included.
fn show(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// This boot's status as read: a missing status file is a boot resume did not run on,
/// which restored nothing and booted cold (said as its reason); a file that cannot be read
/// is an error.
fn this_boot(read: Result<BootStatus, StatusError>) -> Result<BootStatus, StatusError> {
    match read {
        Err(StatusError::Missing(path)) => {
            let mut s = BootStatus::new(
                Outcome::Cold,
                bootparams::DEFAULT_ATTEMPTS,
                bootparams::Confirm::Restored.word(),
                devsys::system::running_release(),
            );
            s.reason = Some(format!(
                "snapboot resume did not run on this boot (no {path}): nothing was restored"
            ));
            Ok(s)
        }
        other => other,
    }
}

/// `snapboot status`'s exit status for this boot: 0 restored, 4 not.
fn exit_of(s: &BootStatus) -> Exit {
    match s.outcome {
        Outcome::Restored => Exit::Success,
        Outcome::Cold | Outcome::Fallback => Exit::NotRestored,
    }
}

/// Confirms this boot's restore on the store, after what proves it alive; the markers say
/// which (`confirmed`) or why not (`confirm-failed`).
pub fn confirm(a: ConfirmArgs) -> Result<ExitCode> {
    use ondevice::lifecycle::Proof;
    let proof = match (a.after_boot_complete, a.after_up) {
        (true, _) => Proof::BootComplete,
        (false, Some(secs)) => Proof::Up(secs),
        (false, None) => Proof::Asked,
    };
    let confirmed = ondevice::command_store::from_system(a.store.store)
        .map_err(anyhow::Error::from)
        .and_then(|store| {
            let image = ondevice::lifecycle::confirm_after(&store, proof)?;
            Ok((store, image))
        });
    let (store, image) = match confirmed {
        Ok(done) => done,
        Err(e) => {
            ondevice::guest::print_marker(
                boottrace::Marker::ConfirmFailed,
                Some(&format!("{:#}", e)),
            );
            if proof != Proof::Asked {
                // The watchdog's feeder (snapboot.watchdog) stops: the machine resets and
                // the next power-on counts this restore as unconfirmed.
                let _ = std::fs::write(ondevice::watchdog::CONFIRM_FAILED_FLAG, format!("{e:#}\n"));
            }
            return Err(e.context("the restore is not confirmed"));
        }
    };
    ondevice::guest::print_marker(
        boottrace::Marker::Confirmed,
        Some(&format!(
            "{} generation {}: {}",
            image.name,
            image.generation,
            proof.said()
        )),
    );
    println!(
        "confirmed the restore of {} (generation {}) on {store}: the crash-loop guard's count \
         starts again",
        image.name, image.generation
    );
    Ok(Exit::Success.into())
}

/// Marks every image of the store stale; with `--if-configured`, exits 0 silently when no
/// store is configured.
pub fn invalidate(a: InvalidateArgs) -> Result<ExitCode> {
    let store = match ondevice::command_store::from_system(a.store.store) {
        Err(e) if a.if_configured && e.is_unconfigured() => return Ok(Exit::Success.into()),
        chosen => chosen.context("images not marked stale")?,
    };
    let (through, raised) =
        ondevice::lifecycle::invalidate(&store).context("images not marked stale")?;
    println!(
        "images on {store} up to store generation {through} are stale: the next boot boots \
         cold and captures a new image at its ready point"
    );
    if !raised.is_empty() {
        println!(
            "rollback counters raised in the TPM for {}: an older copy of the store written \
             back is refused too",
            raised.join(", ")
        );
    }
    Ok(Exit::Success.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(outcome: Outcome) -> BootStatus {
        BootStatus::new(outcome, 2, "restored", "6.1.0".into())
    }

    #[test]
    fn status_exits_0_only_for_a_restored_boot_and_4_for_any_other_even_without_a_status() {
        assert_eq!(exit_of(&status(Outcome::Restored)), Exit::Success);
        assert_eq!(exit_of(&status(Outcome::Cold)), Exit::NotRestored);
        assert_eq!(exit_of(&status(Outcome::Fallback)), Exit::NotRestored);
        let missing = this_boot(Err(StatusError::Missing("/run/snapboot/status".into()))).unwrap();
        assert_eq!(exit_of(&missing), Exit::NotRestored);
        assert_eq!(missing.outcome, Outcome::Cold);
        assert_eq!(
            missing.reason.as_deref(),
            Some(
                "snapboot resume did not run on this boot (no /run/snapboot/status): nothing \
                 was restored"
            )
        );
        // A status that cannot be read fails (exit 1), naming the file.
        let bad = serde_json::from_str::<BootStatus>("{").unwrap_err();
        let e = this_boot(Err(StatusError::Parse {
            path: "/run/snapboot/status".into(),
            source: bad,
        }))
        .unwrap_err();
        assert_eq!(e.to_string(), "/run/snapboot/status is not a boot status");
        let read = this_boot(Ok(status(Outcome::Fallback))).unwrap();
        assert_eq!(read, status(Outcome::Fallback));
    }
}
