//! The `debian` workload on the UEFI PC (`--firmware uefi`): OVMF boots GRUB from the disk's
//! ESP, GRUB boots the entries snapboot ships (`guest/grub/42_snapboot`). The capture boot is
//! GRUB's capture entry chosen once through `next_entry` in the ESP's grubenv; the boots after
//! it are the normal entry, which restores, or, with a damaged image, boots cold. The store is
//! the PC disk's partition `snapstore`, which the root's config file names: no kernel word.

use crate::common::{bundle, run, snapboot};
use crate::snapshot::{ask, check_restored_app, copy_store, flip, newest_chunk_middle};
use board::run_options::Firmware;
use regex::Regex;
use std::path::Path;
use std::time::Duration;

/// The `debian` board on UEFI booting `disk`, the PC's disk with the store partition.
fn uefi_session(disk: &Path) -> board::qemu::Session {
    let b = board::Bundle::load(&bundle("debian")).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    o.firmware = Firmware::Uefi;
    board::capture::attach_store(&mut o, disk, false).unwrap();
    board::qemu::Session::start(&b, &o).unwrap()
}

/// Damages the newest image in the store partition of the PC's disk `disk` (one byte in
/// the middle of its last chunk); returns that chunk's id.
fn damage_newest_image_on(disk: &Path) -> u64 {
    let part = board::uefi::store_partition(disk).unwrap();
    let s = board::uefi::open_store(disk, false).unwrap();
    let (id, at) = newest_chunk_middle(&s);
    drop(s);
    flip(disk, part.offset + at);
    id
}

/// Captured through GRUB's capture entry (chosen once, then cleared by GRUB itself),
/// restored by the normal entry with the service's state intact; a damaged image is refused
/// with the reason and the normal entry boots cold.
#[test]
fn debian_on_uefi_captures_through_grubs_entry_once_and_restores() {
    let dir = bundle("debian");
    // The PC's whole disk: ESP, root, and the store in its partition.
    let store = crate::common::home().join("test-uefi-debian.img");
    let _ = std::fs::remove_file(&store);
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(&dir)
        .arg("--store")
        .arg(&store)
        .args(["--firmware", "uefi"]);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "capture failed:\n{so}\n{se}");
    assert!(so.contains("image current generation 2"), "{so}");
    // GRUB booted the capture entry and cleared next_entry (save_env on the ESP).
    let disk = &store;
    let next = board::uefi::grubenv_var(disk, "next_entry").unwrap();
    assert!(
        next.as_deref().unwrap_or("").is_empty(),
        "next_entry left set: {next:?}"
    );

    let expected = crate::snapshot::host_checksum_at(board::debian::APP_SCALE);
    let mut s = uefi_session(&store);
    let grub = Regex::new(r"grub: booting (\S+)").unwrap();
    let (line, _) = s
        .wait_for(&grub, "GRUB's entry", Duration::from_secs(120))
        .unwrap();
    assert!(
        line.ends_with(&format!("booting {}", board::uefi::NORMAL_ENTRY)),
        "{line}"
    );
    let restored = Regex::new(r"snapboot: @restored .*").unwrap();
    s.wait_for(&restored, "restored marker", Duration::from_secs(300))
        .unwrap();
    check_restored_app(&mut s, 1, &expected);
    s.finish(boottrace::Outcome::Answered);

    let bad = copy_store(&store, "test-uefi-debian-bad.img");
    let chunk = damage_newest_image_on(&bad);
    let mut s = uefi_session(&bad);
    let fb = Regex::new(r"snapboot: @fallback .*").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback", Duration::from_secs(300))
        .unwrap();
    assert!(
        line.contains(&format!("checksum mismatch in chunk {chunk}")),
        "fallback without the damaged part named: {line}"
    );
    // No store word on the kernel line: the config file's PARTLABEL found the partition.
    let found = format!("store PARTLABEL={} (/dev/vda3)", board::uefi::STORE_NAME);
    assert!(line.contains(&found), "{found} not in {line}");
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "the cold boot's ready", Duration::from_secs(400))
        .unwrap();
    ask(&mut s, "ping", r"^pong \d+$");
    s.finish(boottrace::Outcome::Answered);
}
