//! What stands between a system and its image on the real board: kernel lockdown, which
//! disables hibernation (resume falls back and capture fails, each naming it), and a
//! writable vfat filesystem, which capture remounts read-only around the image and
//! read-write again in the system that carries on and in the restored one.

use crate::common::{bundle, run, snapboot, store_options};
use crate::snapshot::{ask, board_session, captured, copy_store, expect_fallback};
use regex::Regex;
use std::time::Duration;

/// What capture and resume say under `lockdown=integrity`.
const LOCKED: &str = "kernel lockdown is 'integrity'";

/// With `lockdown=integrity` a valid image is not restored, the fallback names lockdown;
/// a capture boot fails with `@capture-failed` naming it, and `snapboot check` on that
/// system reports the blocker with exit status 7.
#[test]
fn lockdown_refuses_resume_and_capture_naming_it() {
    let good = captured("shell");
    let store = copy_store(&good, "test-lockdown.store");
    expect_fallback(&store, &["lockdown=integrity"], LOCKED);

    let mut s = board_session("shell", &store, &["snapboot.capture", "lockdown=integrity"]);
    let end = Regex::new(r"snapboot: @capture-(done|failed)").unwrap();
    let (line, _) = s
        .wait_for(&end, "the capture's end", Duration::from_secs(120))
        .unwrap();
    assert!(
        line.contains("@capture-failed") && line.contains(LOCKED),
        "{line}"
    );
    let disk = ask(&mut s, "cat /sys/power/disk", r"^\S*\[[a-z_]+\]");
    assert_eq!(disk, "[disabled]", "the kernel offers hibernation");
    let row = ask(
        &mut s,
        "/run/snapboot/bin/snapboot check | grep lockdown",
        "^BLOCKER +/sys/kernel/security/lockdown",
    );
    assert!(row.contains("integrity"), "{row}");
    let status = ask(
        &mut s,
        "/run/snapboot/bin/snapboot check >/dev/null; echo check-status-$?",
        r"^check-status-\d+$",
    );
    assert_eq!(
        status,
        format!("check-status-{}", snapboot_device::Exit::Blocked.code())
    );
    s.finish(boottrace::Outcome::Answered);
}

/// A vfat disk mounted read-write does not stop a capture: it is read-only for the capture
/// and read-write again after, in the system that carries on and in the restored one.
#[test]
fn a_writable_vfat_mount_is_read_only_only_for_the_capture() {
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let home = crate::common::home();
    let store = home.join("test-vfat.store");
    let _ = std::fs::remove_file(&store);
    let mut c = snapboot();
    c.args(["store", "init", "--size", "2G"]).arg(&store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "store init:\n{so}\n{se}");
    let esp = home.join("test-vfat.img");
    let f = std::fs::File::create(&esp).unwrap();
    f.set_len(32 << 20).unwrap();
    drop(f);
    let mut o = store_options(&b, &store);
    o.disks.push(board::run_options::Disk {
        path: esp,
        readonly: false,
        sd: false,
    });
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    let remount = Regex::new(r"snapboot: @remount").unwrap();
    let wait = Duration::from_secs(120);

    // A cold boot (the store holds no image): format /dev/vdc, mount it, capture, carry on.
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    s.wait_for(&ready, "ready", wait).unwrap();
    ask(
        &mut s,
        "for m in /lib/modules/*.ko; do insmod $m; done; mkdosfs /dev/vdc >/dev/null && \
         mkdir -p /run/esp && mount -t vfat /dev/vdc /run/esp && echo esp-mounted",
        "^esp-mounted$",
    );
    s.send("/run/snapboot/bin/snapboot capture --store /dev/vdb --then continue; echo capture-status-$?")
        .unwrap();
    let (ro, _) = s.wait_for(&remount, "remount read-only", wait).unwrap();
    assert!(
        ro.contains("read-only for the capture: /dev/vdc (vfat on /run/esp)"),
        "{ro}"
    );
    let (rw, _) = s.wait_for(&remount, "remount read-write", wait).unwrap();
    assert!(rw.contains("read-write again"), "{rw}");
    let done = Regex::new(r"^capture-status-\d+$").unwrap();
    let (status, _) = s
        .wait_for(&done, "the capture command's end", wait)
        .unwrap();
    assert_eq!(status, "capture-status-0");
    assert_writable(&mut s, "continued");
    s.finish(boottrace::Outcome::Answered);

    // The restored system starts from the capture's state, read-only, and is given it back.
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let (rw, _) = s.wait_for(&remount, "remount after restore", wait).unwrap();
    assert!(rw.contains("read-write again"), "{rw}");
    s.wait_for(&restored, "restored", wait).unwrap();
    assert_writable(&mut s, "restored");
    s.finish(boottrace::Outcome::Answered);
}

/// `/run/esp` is mounted read-write and takes a file.
fn assert_writable(s: &mut board::qemu::Session, which: &str) {
    let opts = ask(s, "grep /run/esp /proc/mounts", "^/dev/vdc /run/esp vfat ");
    assert!(opts.contains(" rw,"), "{which}: {opts}");
    let echo = format!("echo {which} > /run/esp/{which}.txt && sync && cat /run/esp/{which}.txt");
    ask(s, &echo, &format!("^{which}$"));
}
