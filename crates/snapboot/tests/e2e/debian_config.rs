//! The path the documentation gives a Debian device, on the UEFI PC: the store is named only
//! in `/etc/snapboot/snapboot.conf` (the package's file with its `store =` line filled in,
//! `bundle::debian::STORE_ADDRESS`), no `snapboot.*` word on GRUB's lines, and the
//! distribution's initramfs restores the image **before udev**, with its markers on the
//! console and in the journal. One test per initramfs generator: initramfs-tools (in
//! `debian_uefi`'s test, whose capture it shares), dracut's shell init, and dracut with
//! systemd in the initramfs (Debian's default once systemd is installed), where snapboot's
//! hooks run as dracut's services. And the read-only root README.Debian gives an installed
//! system: an ext4 root kept read-only by Debian's `overlayroot`.

use crate::debian_uefi::{captures_through_grubs_entry, expect, expect_grub_entry, uefi_session};
use crate::snapshot::{ask, check_restored_app};
use board::uefi::{CAPTURE_ENTRY, NORMAL_ENTRY, RESTORE_ENTRY};
use std::path::PathBuf;

/// Asserts this boot's resume ran before udev: `@resume-start` says so (the resume looks
/// for udev's daemon among the processes), on the console no sign of udev's daemon comes
/// before it (systemd's `Starting systemd-udevd.service` in an initramfs with systemd), and
/// nothing said `@resume-after-udev`.
pub(crate) fn assert_resumed_before_udev(s: &board::qemu::Session, boot: &str) {
    let lines: Vec<&str> = s.timeline().lines.iter().map(|l| l.message()).collect();
    let start = lines
        .iter()
        .position(|l| l.contains("snapboot: @resume-start"))
        .unwrap_or_else(|| panic!("{boot}: no @resume-start on the console: {lines:?}"));
    assert!(
        lines[start].ends_with("(before udev)"),
        "{boot}: {}",
        lines[start]
    );
    let udev = lines
        .iter()
        .position(|l| l.contains("Starting systemd-udevd") || l.contains("Started systemd-udevd"));
    assert!(
        udev.is_none_or(|u| u > start),
        "{boot}: udev started before the resume: {:?} before {:?}",
        udev.map(|u| lines[u]),
        lines[start]
    );
    assert!(
        !lines.iter().any(|l| l.contains("@resume-after-udev")),
        "{boot}: the resume waited for udev: {:?}",
        lines.iter().find(|l| l.contains("@resume-after-udev"))
    );
}

/// Asks the restored service for this boot's journal lines holding `word`; asserts there
/// is at least one and that one of them holds `want`. Returns them.
pub(crate) fn assert_in_journal(s: &mut board::qemu::Session, word: &str, want: &str) -> String {
    let answer = ask(s, &format!("journal {word}"), r"^journal \d+");
    let n: usize = answer
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        n > 0 && answer.contains(want),
        "`journalctl -b` has no line with {want:?}: {answer}"
    );
    eprintln!("journalctl -b, lines with {word}: {answer}");
    answer
}

/// Asks the restored service for `snapboot status --history 5`; asserts it exits 0 and
/// its newest line is this restore of `image`. Returns the answer.
pub(crate) fn assert_history_restored(s: &mut board::qemu::Session, image: &str) -> String {
    let answer = ask(s, "history", r"^history exit=");
    eprintln!("snapboot status --history 5: {answer}");
    let newest = answer
        .strip_prefix("history exit=0 ")
        .and_then(|rest| rest.split(" | ").next())
        .unwrap_or_else(|| panic!("status --history failed: {answer}"));
    assert!(
        newest.contains("restored") && newest.contains(image),
        "the newest boot in the history is not this restore: {answer}"
    );
    answer
}

/// Captures `workload` on the UEFI PC through GRUB's capture entry (the stock kernel, its
/// initramfs, the store named only in the config file); returns the PC's disk.
fn capture_on_the_pc(workload: &str) -> (bundle::Bundle, PathBuf) {
    let b = bundle::Bundle::load(&crate::common::bundle(workload)).unwrap();
    board::uefi::set_next_entry(&board::uefi::ensure_disk(&b).unwrap(), None).unwrap();
    let disk = crate::common::home().join(format!("test-uefi-{workload}.img"));
    let _ = std::fs::remove_file(&disk);
    let mem = board::RunOptions::for_bundle(&b).mem_mib;
    board::uefi::ensure_store_disk(&b, &disk, true, board::capture::store_size(mem)).unwrap();
    board::uefi::set_next_entry(&disk, Some(CAPTURE_ENTRY)).unwrap();
    captures_through_grubs_entry(uefi_session(&b, &disk, None));
    (b, disk)
}

/// GRUB's normal entry (the stock kernel) restores `disk`'s image before udev, systemd is
/// `running` with the journal working, and the restored system's journal has the outcome.
/// Returns the boot's timeline.
fn restores_before_udev_on_the_normal_entry(
    b: &bundle::Bundle,
    disk: &std::path::Path,
) -> boottrace::Timeline {
    let workload = &b.workload.name;
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    let mut s = uefi_session(b, disk, None);
    expect_grub_entry(&mut s, NORMAL_ENTRY);
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    assert_resumed_before_udev(&s, workload);
    check_restored_app(&mut s, 1, &expected);
    crate::debian::check_system(&mut s, workload);
    assert_in_journal(&mut s, "@status", "@status restored");
    assert_history_restored(&mut s, "current");
    s.finish(boottrace::Outcome::Answered)
}

/// dracut without systemd in the initramfs: the pre-udev hook restores a store named only
/// in the config file (module-setup.sh copied the file in), with the markers the
/// initramfs-tools scripts print (`init` first), and systemd settles (`running`, the journal
/// working). The EFI restorer then restores the same image: it reads dracut's zstd archive
/// from the kernel pack. (The restore kernel on a dracut archive: the dracut-with-systemd
/// test below, whose archive is the same kind.)
#[test]
fn debian_dracut_restores_a_config_only_store_before_udev() {
    let (b, disk) = capture_on_the_pc("debian-dracut");
    let s = restores_before_udev_on_the_normal_entry(&b, &disk);
    let lines: Vec<&str> = s.lines.iter().map(|l| l.message()).collect();
    let at = |marker: &str| lines.iter().position(|l| l.starts_with(marker));
    let (init, resume) = (at("snapboot: @init"), at("snapboot: @resume-start"));
    assert!(
        matches!((init, resume), (Some(i), Some(r)) if i < r),
        "dracut's hook prints @init before the resume: {lines:?}"
    );
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    crate::debian_uefi::restorer_restores(
        crate::debian_uefi::restorer_session(&b, &disk, |_| {}),
        2,
        &expected,
    );
}

/// dracut with systemd in the initramfs: snapboot's hooks run as dracut-pre-udev.service
/// and dracut-pre-mount.service, whose output goes to the journal; the markers reach the
/// console all the same. The restore kernel restores the same image on its first try
/// (systemd's transient /etc/machine-id in the capture boot's initramfs is no difference).
#[test]
fn debian_dracut_systemd_restores_a_config_only_store_before_udev() {
    let (b, disk) = capture_on_the_pc("debian-dracut-systemd");
    restores_before_udev_on_the_normal_entry(&b, &disk);
    let rk = crate::restore_kernel::restore_kernel();
    let mut s = uefi_session(&b, &disk, Some(&rk));
    expect_grub_entry(&mut s, RESTORE_ENTRY);
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    crate::restore_kernel::assert_restored_on_first_try(&s, "the restore kernel's entry");
    ask(&mut s, "ping", r"^pong \d+$");
    s.finish(boottrace::Outcome::Answered);
}

/// An installed Debian system made read-only the way README.Debian tells its administrator:
/// its root an ext4 filesystem, Debian's `overlayroot` with `overlayroot="tmpfs"` (the root
/// mounted read-only under an overlay whose writes go to a tmpfs). The capture unit captures
/// it (the only block filesystem is mounted read-only), the stock kernel restores it before
/// udev, and the restored system's root is the overlay over the untouched ext4.
#[test]
fn debian_overlayroot_captures_and_restores_an_installed_root_kept_read_only() {
    let store = crate::debian::capture_debian("debian-overlayroot", None);
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    let mut s =
        crate::common::store_session(&crate::common::bundle("debian-overlayroot"), &store, &[]);
    expect(&mut s, r"snapboot: @restored ", "restored marker", 300);
    assert_resumed_before_udev(&s, "overlayroot");
    check_restored_app(&mut s, 1, &expected);
    let root = ask(&mut s, "mount /", r"^mount / ");
    assert!(root.starts_with("mount / overlay "), "{root}");
    let lower = ask(&mut s, "mount /media/root-ro", r"^mount /media/root-ro ");
    assert!(
        lower.starts_with("mount /media/root-ro ext4 ro,"),
        "the root's ext4 is not read-only under the overlay: {lower}"
    );
    assert_history_restored(&mut s, "current");
    s.finish(boottrace::Outcome::Answered);
}
