//! A device's life in the field: `snapboot status` (what this boot did), `snapboot confirm`
//! (the application's health check passed on a restored system) and `snapboot invalidate`
//! (an update made the images stale). [`ondevice::lifecycle`] and [`ondevice::status`] act.

use crate::exit::Exit;
use anyhow::Result;
use bootparams::StoreAddress;
use clap::Args;
use ondevice::status::Outcome;
use std::process::ExitCode;

/// `snapboot status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print the status as JSON, on one line (the fields of `/run/snapboot/status`).
    #[arg(long)]
    json: bool,
}

/// `snapboot confirm` and `snapboot invalidate`.
#[derive(Args, Debug)]
pub struct StoreArg {
    /// The store: a path, PARTUUID=, PARTLABEL= or LABEL= (default: the one
    /// `snapboot.store=` names on the kernel command line).
    #[arg(long)]
    store: Option<StoreAddress>,
}

/// Shows what this boot did; exits 0 when it was restored, with [`Exit::NotRestored`] when
/// it booted cold or fell back.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let s = ondevice::status::read()?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        println!("{}", s.human());
    }
    Ok(match s.outcome {
        Outcome::Restored => Exit::Success,
        Outcome::Cold | Outcome::Fallback => Exit::NotRestored,
    }
    .into())
}

/// Confirms this boot's restore on the store.
pub fn confirm(a: StoreArg) -> Result<ExitCode> {
    let image = ondevice::lifecycle::confirm(a.store.as_ref())?;
    println!(
        "confirmed the restore of {} (generation {}): the crash-loop guard's count starts again",
        image.name, image.generation
    );
    Ok(Exit::Success.into())
}

/// Marks every image of the store stale.
pub fn invalidate(a: StoreArg) -> Result<ExitCode> {
    let through = ondevice::lifecycle::invalidate(a.store.as_ref())?;
    println!(
        "images up to store generation {through} are stale: the next boot boots cold and \
         captures a new image at its ready point"
    );
    Ok(Exit::Success.into())
}
