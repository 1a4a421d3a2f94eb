//! The `debian` workload on the real board: a Debian root built from Debian's packages with
//! systemd as PID 1, an initramfs made by Debian's initramfs-tools carrying snapboot's hook
//! and boot script (`snapboot install`), and the capture taken by
//! `snapboot-capture.service` once the application's service is ready.

use crate::common::{bundle, run, snapboot};
use crate::snapshot::{
    ask, assert_all_differ, board_session, check_restored_app, copy_store, flip, image_extent,
};
use regex::Regex;
use std::path::PathBuf;
use std::time::Duration;

fn capture_debian() -> PathBuf {
    let store = crate::common::home().join("test-debian.store");
    let _ = std::fs::remove_file(&store);
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(bundle("debian"))
        .arg("--store")
        .arg(&store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "capture failed:\n{so}\n{se}");
    assert!(so.contains("image generation 1"), "{so}");
    store
}

/// What systemd and the service say after a boot: the service answers, the system is
/// `running` with no failed unit, the journal takes and returns a new entry.
fn check_system(s: &mut board::qemu::Session, boot: &str) {
    let sys = ask(s, "system", "^system .*");
    assert_eq!(
        sys, "system running journal=ok",
        "{boot}: systemd or the journal is not well"
    );
}

/// Captured by the systemd unit, restored twice by the stock kernel and once by the restore
/// kernel: the service's state intact, systemd `running`, the journal working, the clock
/// current and the RNG fresh at each restore; `snapboot-restored.target` started each time. A damaged copy of the image is refused
/// and the same system boots cold through initramfs-tools, as if snapboot were not there.
#[test]
fn debian_with_systemd_restores_three_times_and_a_damaged_image_boots_cold() {
    let store = capture_debian();
    let expected = crate::snapshot::host_checksum_at(board::debian::APP_SCALE);
    let restored = Regex::new(r"snapboot: @restored .*").unwrap();
    let mut randoms = Vec::new();
    // Two restores on the stock kernel, a third on the restore kernel (it unpacks the same
    // zstd initramfs-tools archive and restores the stock kernel's image).
    for boot in 1..=3 {
        let mut s = if boot < 3 {
            board_session("debian", &store, &[])
        } else {
            crate::restore_kernel::restore_session("debian", &store, 0)
        };
        let (line, _) = s
            .wait_for(&restored, "restored marker", Duration::from_secs(180))
            .unwrap();
        assert!(
            line.contains("snapboot-restored.target started"),
            "boot {boot}: {line}"
        );
        randoms.push(check_restored_app(&mut s, boot, &expected));
        check_system(&mut s, &format!("restore {boot}"));
        s.finish(boottrace::Outcome::Answered);
    }
    assert_all_differ(randoms);

    // One damaged byte in the image's data: refused with the reason, then a cold boot of
    // the same system (systemd, the service, the probe) that never saw snapboot restore.
    let bad = copy_store(&store, "test-debian-bad.store");
    let (area, bytes) = image_extent(&bad);
    flip(&bad, area + bytes / 4 * 3 + 123);
    let mut s = board_session("debian", &bad, &[]);
    let fb = Regex::new(r"snapboot: @fallback .*").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback", Duration::from_secs(180))
        .unwrap();
    assert!(
        line.contains("checksum mismatch in chunk"),
        "fallback without the damaged part named: {line}"
    );
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "the cold boot's ready", Duration::from_secs(300))
        .unwrap();
    ask(&mut s, "ping", r"^pong \d+$");
    check_system(&mut s, "cold boot after the fallback");
    s.finish(boottrace::Outcome::Answered);
}
