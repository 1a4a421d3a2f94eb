//! `snapboot image inspect`: every image of a store, checked.

use crate::Exit;
use anyhow::Result;
use bootparams::StoreAddress;
use boottrace::error_chain as chain;
use clap::Args;
use std::process::ExitCode;

/// `snapboot image inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[arg(value_name = "STORE", help = crate::storecmd::STORE_HELP)]
    store: Option<StoreAddress>,
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
    /// The kernel's header page (page 0 of the stream), with its arch record.
    stream_header: Option<snapimg::StreamHeader>,
    /// Why the header page could not be read or parsed.
    stream_header_error: Option<String>,
}

/// `snapboot image inspect`: every image of the store, each read whole unless `--no-verify`;
/// exit status 5 ([`Exit::Damaged`]) when a chunk fails its check.
pub fn inspect(a: InspectArgs) -> Result<ExitCode> {
    let (s, at) = crate::storecmd::open(a.store, false)?;
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
        let header = ondevice::store::stream_header(&s, &r.name);
        out.push((
            Inspected {
                image: ondevice::store::summary(&s, r),
                verify,
                stream_header_error: header.as_ref().err().map(|e| chain(e)),
                stream_header: header.ok(),
            },
            read,
        ));
    }
    if a.json {
        let v: Vec<&Inspected> = out.iter().map(|(i, _)| i).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("store {at}, generation {}", s.generation());
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
                "image {} generation {}{}{}{}: {} pages ({} zero, {} shared), {:.1} MiB stored, \
                 kernel {kernel}{}; checksums: {checked}",
                r.name,
                r.generation,
                if r.pinned { ", pinned" } else { "" },
                if r.signed { ", signed" } else { "" },
                r.encrypted.as_deref().map_or(String::new(), |k| format!(
                    ", encrypted with device key {k}"
                )),
                r.stats.pages,
                r.stats.zero_pages,
                r.stats.shared_pages,
                r.stats.stored_bytes as f64 / MIB,
                r.swap.as_ref().map_or(String::new(), |w| format!(
                    ", lazy: {} pages in its swap region",
                    w.used_pages
                )),
            );
            let header = i.stream_header.as_ref();
            println!(
                "  {}",
                header_line(header.ok_or(i.stream_header_error.as_deref()))
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

/// What `image inspect` says of an image's header page: its arch record and counts, or
/// why it could not be read.
fn header_line(header: Result<&snapimg::StreamHeader, Option<&str>>) -> String {
    use snapimg::ArchRecord;
    let h = match header {
        Ok(h) => h,
        Err(why) => {
            return format!("stream header: unreadable ({})", why.unwrap_or("not read"));
        }
    };
    let arch = match &h.arch {
        ArchRecord::X86_64 {
            jump_address,
            cr3,
            e820_checksum,
            ..
        } => format!(
            "x86_64, jump address {jump_address:#x}, cr3 {cr3:#x}, e820 checksum {e820_checksum:#010x}"
        ),
        ArchRecord::Arm64 {
            uts_version,
            ttbr1_el1,
            reenter_kernel,
            hyp_stub_vectors,
            sleep_cpu_mpidr,
        } => format!(
            "arm64, uts version {uts_version:?}, ttbr1_el1 {ttbr1_el1:#x}, re-entry {reenter_kernel:#x}, \
             hyp stub vectors {hyp_stub_vectors:#x}, sleep CPU MPIDR {sleep_cpu_mpidr:#x}"
        ),
        ArchRecord::Utsname {
            release, version, ..
        } => format!("utsname {release} {version:?}"),
    };
    format!(
        "stream header: {arch}; {} data pages, {} pages in all, num_physpages {}",
        h.image_pages, h.pages, h.num_physpages
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_line_shows_every_arm64_field() {
        let h = snapimg::StreamHeader::arm64(100, 131072, "#1 SMP Debian 6.1.192-2", 0x101);
        let line = header_line(Ok(&h));
        for want in [
            "arm64, uts version \"#1 SMP Debian 6.1.192-2\"",
            "ttbr1_el1 0x4213a000",
            "re-entry 0xffff800008021000",
            "hyp stub vectors 0x40200800",
            "sleep CPU MPIDR 0x101",
            "100 data pages",
        ] {
            assert!(line.contains(want), "{want}: {line}");
        }
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["arch"]["kind"], "arm64");
        assert_eq!(json["arch"]["sleep_cpu_mpidr"], 0x101);
        assert_eq!(json["arch"]["uts_version"], "#1 SMP Debian 6.1.192-2");
        let bad = header_line(Err(Some("chunk 3 failed its checksum")));
        assert!(
            bad.ends_with("unreadable (chunk 3 failed its checksum)"),
            "{bad}"
        );
    }
}
