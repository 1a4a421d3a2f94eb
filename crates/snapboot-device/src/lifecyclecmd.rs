//! A device's life in the field: `snapboot status` (what this boot did), `snapboot confirm`
//! (the application's health check passed on a restored system) and `snapboot invalidate`
//! (an update made the images stale). [`ondevice::lifecycle`] and [`ondevice::status`] act.

use crate::exit::Exit;
use anyhow::{Context, Result};
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

/// `snapboot confirm`.
#[derive(Args, Debug)]
pub struct StoreArg {
    /// The store: a path, PARTUUID=, PARTLABEL= or LABEL= (default: the configured one,
    /// `store =` in /etc/snapboot/snapboot.conf or `snapboot.store=` on the kernel command
    /// line).
    #[arg(long)]
    store: Option<StoreAddress>,
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
    let store = ondevice::command_store::from_system(a.store)?;
    let image = ondevice::lifecycle::confirm(&store)?;
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
    let through = ondevice::lifecycle::invalidate(&store).context("images not marked stale")?;
    println!(
        "images on {store} up to store generation {through} are stale: the next boot boots \
         cold and captures a new image at its ready point"
    );
    Ok(Exit::Success.into())
}
