//! `snapboot image inspect`: every image of a store, checked.

use crate::Exit;
use anyhow::Result;
use boottrace::error_chain as chain;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

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
/// exit status 5 ([`Exit::Damaged`]) when a chunk fails its check.
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
        Exit::Damaged.into()
    })
}

const MIB: f64 = 1048576.0;
