//! A device's life on the real board: every boot leaves its outcome in
//! `/run/snapboot/status` (`snapboot status`) and the store's history (`--history`), a restore no one confirms is retried only
//! `snapboot.attempts` times, and after an update the first boot captures the updated
//! system and goes on, so the second restores it.

use crate::common::board_capture;
use crate::snapshot::ask;
use regex::Regex;
use std::path::Path;
use std::time::Duration;

/// `snapboot status --json` on the board's shell: the status and the command's exit status.
fn status(s: &mut board::qemu::Session) -> (serde_json::Value, u8) {
    let line = ask(
        s,
        "snapboot status --json > /run/st; c=$?; read j < /run/st; echo \"status-exit-$c $j\"",
        r"^status-exit-\d+ \{.*\}$",
    );
    let (code, json) = line["status-exit-".len()..].split_once(' ').unwrap();
    (
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}")),
        code.parse().unwrap(),
    )
}

/// The outcomes of the boots in the history of the store on /dev/vdb, newest first.
fn history(s: &mut board::qemu::Session) -> Vec<String> {
    let line = ask(
        s,
        "snapboot status --history --store /dev/vdb --json",
        r"^\[.*\]$",
    );
    let boots: Vec<serde_json::Value> =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    boots
        .iter()
        .map(|b| b["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A boot of `bundle` on `store` (none: no store named) with `extra` words, after its
/// `pattern` line (a marker): the session and that line.
fn boot_until(
    bundle: &Path,
    store: Option<&Path>,
    extra: &[&str],
    recapture: bool,
    pattern: &str,
) -> (board::qemu::Session, String) {
    let b = bundle::Bundle::load(bundle).unwrap();
    let mut o = match store {
        Some(store) => crate::common::store_options(&b, store),
        None => board::RunOptions::for_bundle(&b),
    };
    o.params.recapture = recapture;
    o.cmdline.extend(extra.iter().map(|s| s.to_string()));
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let re = Regex::new(pattern).unwrap();
    let (line, _) = s
        .wait_for(&re, pattern, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("waiting for {pattern}: {e}"));
    (s, line)
}

/// Waits for the shell after the ready point.
fn wait_ready(s: &mut board::qemu::Session) {
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "ready", Duration::from_secs(180))
        .unwrap();
}

/// An image captured with `snapboot.confirm=app` whose application never confirms: each
/// restore is counted on the store before the kernel takes over, `snapboot confirm` resets
/// the count, and after two unconfirmed restores the image is skipped with the reason and
/// the board boots cold. The status is right after each restore, the fallback and a boot
/// that names no store.
#[test]
fn an_unconfirmed_image_is_restored_twice_then_skipped_and_every_boot_has_a_status() {
    let b = crate::common::bundle("shell");
    let store = crate::common::home().join("test-crash-loop.store");
    let _ = std::fs::remove_file(&store);
    board_capture(&b, &store, &["--cmdline", "snapboot.confirm=app"]);

    // Restore 1: confirmed by the application (here, by hand).
    let restored = r"snapboot: @status restored .*";
    let (mut s, line) = boot_until(&b, Some(&store), &[], false, restored);
    assert!(
        line.contains("current generation 2 restore 1 of 2 unconfirmed"),
        "{line}"
    );
    let (st, code) = status(&mut s);
    assert_eq!(code, 0, "{st}");
    assert_eq!(st["outcome"], "restored", "{st}");
    assert_eq!(st["image"]["name"], "current", "{st}");
    assert_eq!(st["attempt"], 1, "{st}");
    assert_eq!(st["confirmed"], false, "{st}");
    assert_eq!(st["confirm_by"], "app", "{st}");
    assert!(st["timings"]["load"].as_f64().unwrap() > 0.0, "{st}");
    ask(
        &mut s,
        "snapboot confirm >/dev/null && echo confirmed-ok",
        "^confirmed-ok$",
    );
    let (st, _) = status(&mut s);
    assert_eq!(st["confirmed"], true, "{st}");
    s.finish(boottrace::Outcome::Answered);

    // Restores 2 and 3 are the first and second since the confirmation; neither confirms.
    for attempt in 1..=2 {
        let (s, line) = boot_until(&b, Some(&store), &[], false, restored);
        assert!(
            line.contains(&format!("restore {attempt} of 2 unconfirmed")),
            "{line}"
        );
        s.finish(boottrace::Outcome::Answered);
    }

    // Then the guard skips it: a cold boot with the reason, on the console and in the status.
    let (mut s, line) = boot_until(&b, Some(&store), &[], false, r"snapboot: @fallback .*");
    assert!(
        line.contains("crash-loop guard: restored 2 times without a confirmation"),
        "{line}"
    );
    assert!(
        !s.timeline()
            .lines
            .iter()
            .any(|l| l.text.contains("@resume-loaded")),
        "the skipped image's pages were loaded"
    );
    wait_ready(&mut s);
    let (st, code) = status(&mut s);
    assert_eq!(code, ondevice::boot::EXIT_NOT_RESTORED, "{st}");
    assert_eq!(st["outcome"], "fallback", "{st}");
    assert_eq!(st["refused"][0]["kind"], "crash-loop", "{st}");
    assert_eq!(
        st["recapture"], "no",
        "a crash-looping system is not captured again: {st}"
    );
    // Every boot so far is in the store's history, newest first, and this one's reason is
    // in the kernel log.
    assert_eq!(
        history(&mut s),
        ["fallback", "restored", "restored", "restored", "cold"]
    );
    ask(
        &mut s,
        "dmesg | grep -q 'snapboot: @status fallback:.*crash-loop guard' && echo in-kmsg",
        "^in-kmsg$",
    );
    s.finish(boottrace::Outcome::Answered);

    // `noresume` restores nothing, says why and is kept too.
    let (mut s, line) = boot_until(
        &b,
        Some(&store),
        &["noresume"],
        false,
        r"snapboot: @status .*",
    );
    assert!(
        line.contains(&format!(
            "@status cold: {}",
            ondevice::boot::NORESUME_REASON
        )),
        "{line}"
    );
    wait_ready(&mut s);
    assert_eq!(history(&mut s)[..2], ["cold", "fallback"]);
    s.finish(boottrace::Outcome::Answered);

    // A boot that names no store: cold, and says why.
    let (mut s, line) = boot_until(&b, None, &[], false, r"snapboot: @status .*");
    let why = "no store: no snapboot.store= on the kernel command line, \
               no store = in /etc/snapboot/snapboot.conf";
    assert!(line.contains(&format!("@status cold: {why}")), "{line}");
    wait_ready(&mut s);
    let (st, code) = status(&mut s);
    assert_eq!((st["outcome"].as_str(), code), (Some("cold"), 4), "{st}");
    s.finish(boottrace::Outcome::Answered);
}

/// An update of the root filesystem: the first boot refuses the image as captured on
/// another system, captures the updated one at its ready point and goes on (one cold
/// boot); the second restores the updated system. `snapboot invalidate` (what the update
/// hooks run) makes the next boot skip the images as stale and capture again.
#[test]
fn after_an_update_the_first_boot_captures_and_the_second_restores_the_updated_system() {
    crate::common::bundle("shell"); // kernel fetched
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (dir.path().join("v1"), dir.path().join("v2"));
    crate::binding::build(
        &crate::binding::root(dir.path(), "one"),
        crate::binding::START,
        &v1,
    );
    assert!(std::process::Command::new("cp")
        .arg("-r")
        .arg(&v1)
        .arg(&v2)
        .status()
        .unwrap()
        .success());
    let root_two = crate::binding::root(dir.path(), "two");
    bundle::bundle::mksquashfs(&root_two, &v2.join("rootfs.img")).unwrap();
    let store = dir.path().join("update.store");
    board_capture(&v1, &store, &[]);

    // First boot of the update: refused, cold, captured at the ready point, and going on.
    let (mut s, line) = boot_until(&v2, Some(&store), &[], true, r"snapboot: @fallback .*");
    assert!(line.contains("root filesystem / (vda) differs"), "{line}");
    let done = Regex::new(r"snapboot: @capture-(done|failed).*").unwrap();
    let (line, _) = s
        .wait_for(&done, "the re-capture", Duration::from_secs(180))
        .unwrap();
    // (`@ready` came before the capture: the ready point prints it, then captures.)
    assert!(line.contains("@capture-done"), "{line}");
    ask(&mut s, "read l < /etc/motd; echo motd-$l", "^motd-two$");
    let (st, _) = status(&mut s);
    assert_eq!(st["outcome"], "fallback", "{st}");
    assert_eq!(st["refused"][0]["kind"], "changed", "{st}");
    assert_eq!(st["recapture"]["captured"]["name"], "current", "{st}");
    s.finish(boottrace::Outcome::Answered);

    // Second boot: the updated system is restored. Its application marks the update.
    let (mut s, _) = boot_until(
        &v2,
        Some(&store),
        &[],
        true,
        r"snapboot: @status restored .*",
    );
    ask(&mut s, "read l < /etc/motd; echo motd-$l", "^motd-two$");
    ask(
        &mut s,
        "snapboot invalidate >/dev/null && echo invalidated",
        "^invalidated$",
    );
    s.finish(boottrace::Outcome::Answered);

    // After `snapboot invalidate` the image is skipped as stale and captured again.
    let (mut s, line) = boot_until(&v2, Some(&store), &[], true, r"snapboot: @fallback .*");
    assert!(line.contains("the image is stale"), "{line}");
    let (line, _) = s
        .wait_for(&done, "the re-capture", Duration::from_secs(180))
        .unwrap();
    assert!(line.contains("@capture-done"), "{line}");
    s.finish(boottrace::Outcome::Ready);
}

/// One restore of `bundle` from `store` that must come up unconfirmed, waiting for
/// `pending` (what snapboot proves it by): with `crash`, the application is told to die at
/// once and the boot must end with that line (a marker) and no confirmation; without, it
/// answers and the restore must be confirmed.
fn restore_once(bundle: &Path, store: &Path, attempt: u32, pending: &str, crash: Option<&str>) {
    let (mut s, line) = boot_until(bundle, Some(store), &[], false, r"snapboot: @status .*");
    assert!(
        line.contains(&format!(
            "@status restored current generation 2 restore {attempt} of 2 unconfirmed until {pending}"
        )),
        "restore {attempt}: {line}"
    );
    match crash {
        Some(ends) => {
            s.send("crash").unwrap();
            let re = Regex::new(ends).unwrap();
            s.wait_for(&re, ends, Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("restore {attempt}: {e}"));
            let confirmed = s
                .timeline()
                .lines
                .iter()
                .any(|l| boottrace::Marker::Confirmed.in_line(&l.text));
            assert!(
                !confirmed,
                "restore {attempt}: a dead application was confirmed"
            );
        }
        None => {
            ask(&mut s, "ping", r"^pong \d+$");
            if pending == "boot-complete.target" {
                // The debian root's confirmed.d hook (where a device tells its boot loader
                // the boot is good) runs once the store has the confirmation.
                let hook =
                    "snapboot-board: confirmed.d: current generation 2, confirmed by boot-complete";
                let re = Regex::new(&regex::escape(hook)).unwrap();
                s.wait_for(&re, hook, Duration::from_secs(120))
                    .unwrap_or_else(|e| panic!("restore {attempt}: {e}"));
            }
            let re = Regex::new(r"snapboot: @confirm(ed|-failed) .*").unwrap();
            let (line, _) = s
                .wait_for(&re, "the confirmation", Duration::from_secs(120))
                .unwrap();
            assert!(
                line.contains("@confirmed current generation 2: ")
                    && line.ends_with(" after the restore"),
                "restore {attempt}: {line}"
            );
        }
    }
    s.finish(boottrace::Outcome::Answered);
}

/// The third power-on after two unconfirmed restores: the crash-loop guard skips the
/// image with the reason, and the board boots cold.
fn boots_cold_as_a_crash_loop(bundle: &Path, store: &Path) {
    let (s, line) = boot_until(bundle, Some(store), &[], false, r"snapboot: @status .*");
    assert!(
        line.contains("@status fallback: ")
            && line.contains("crash-loop guard: restored 2 times without a confirmation"),
        "{line}"
    );
    s.finish(boottrace::Outcome::Answered);
}

/// The `app` board (its own init, no systemd) with the default confirmation: `auto` is `up`
/// there, so a restore is confirmed once the system stayed up `snapboot.grace` seconds (3 on
/// the board). A restore that answers is confirmed that way; an application that dies right
/// after each restore takes the board down first (its init powers off), so those restores
/// stay unconfirmed, and after two the board boots cold with `crash-loop` in the status.
#[test]
fn an_app_that_dies_after_each_restore_is_restored_twice_then_the_board_boots_cold() {
    let b = crate::common::bundle("app");
    let store =
        crate::snapshot::copy_store(&crate::snapshot::captured("app"), "test-app-dies.store");
    restore_once(&b, &store, 1, "up 3 s", None);
    let exited = r"snapboot: @poweroff application exited with 70";
    restore_once(&b, &store, 1, "up 3 s", Some(exited));
    restore_once(&b, &store, 2, "up 3 s", Some(exited));
    boots_cold_as_a_crash_loop(&b, &store);
}

/// The `debian` board (systemd) with the default confirmation: `auto` is `boot-complete`
/// there, so after a restore snapboot restarts `boot-complete.target` and the application's
/// health check (`snapboot-app-check.service`, required by the target) runs on the restored
/// system. It passes while the application runs: confirmed. An application that dies right
/// after the restore fails the check, the target is not reached (`confirm-failed`, naming
/// the failed service), and after two such restores the board boots cold.
#[test]
fn a_debian_service_that_dies_after_each_restore_fails_boot_complete_and_the_board_boots_cold() {
    let b = crate::common::bundle("debian");
    let store = crate::common::home().join("test-debian-dies.store");
    let _ = std::fs::remove_file(&store);
    let so = board_capture(&b, &store, &[]);
    assert!(so.contains("image current generation 2"), "{so}");
    let pending = "boot-complete.target";
    restore_once(&b, &store, 1, pending, None);
    // The check's `Requisite=` fails it without running it; the failed unit is the service.
    let failed = r"snapboot: @confirm-failed .*boot-complete\.target was not reached after the restore: .*failed units: .*snapboot-app\.service";
    restore_once(&b, &store, 1, pending, Some(failed));
    restore_once(&b, &store, 2, pending, Some(failed));
    boots_cold_as_a_crash_loop(&b, &store);
}

/// The hardware watchdog across a restore (`board --watchdog`: QEMU's i6300esb, whose reset
/// boots the board again by itself; `snapboot.watchdog=5` on the restoring boots). Resume
/// arms it before the restore; the restored system feeds it until the restore is
/// confirmed (here `up` for 3 s, as the app board's default), then stops it. A restored
/// system that hangs before that (every process stopped) is reset by the watchdog and
/// restored again, the count growing, until the crash-loop guard boots it cold: one power
/// cycle of the board, no one touching it after the first hang.
#[test]
fn a_restored_system_that_hangs_before_its_confirmation_is_reset_by_the_watchdog_until_it_boots_cold(
) {
    let b = crate::common::bundle("shell");
    let store = crate::common::home().join("test-watchdog.store");
    let _ = std::fs::remove_file(&store);
    board_capture(
        &b,
        &store,
        &["--watchdog", "--cmdline", "snapboot.confirm=up"],
    );
    let bundle = bundle::Bundle::load(&b).unwrap();
    let mut o = crate::common::store_options(&bundle, &store);
    o.watchdog = true;
    o.cmdline.push("snapboot.watchdog=5".into());
    let mut s = board::qemu::Session::start(&bundle, &o).unwrap();
    let expect = |s: &mut board::qemu::Session, pattern: &str| {
        let re = Regex::new(pattern).unwrap();
        s.wait_for(&re, pattern, Duration::from_secs(180))
            .unwrap_or_else(|e| panic!("{e}"))
            .0
    };
    // A restore that comes up: fed until its confirmation, then the watchdog is stopped,
    // and the board runs on well past the timeout.
    expect(
        &mut s,
        r"@watchdog /dev/watchdog0 armed for 5 s across the restore",
    );
    expect(
        &mut s,
        r"@status restored current generation 2 restore 1 of 2 unconfirmed until up 3 s",
    );
    expect(
        &mut s,
        r"@watchdog /dev/watchdog0 fed by snapboot every 1 s",
    );
    expect(
        &mut s,
        r"@confirmed current generation 2: up 3 s after the restore",
    );
    expect(
        &mut s,
        r"@watchdog /dev/watchdog0 stopped: the restore is confirmed",
    );
    let again = Regex::new(r"snapboot: @init").unwrap();
    assert!(
        s.wait_for(&again, "a reset", Duration::from_secs(15))
            .is_err(),
        "the board was reset after the watchdog was stopped"
    );
    ask(&mut s, "echo probe-$((6*7))", "^probe-42$");
    // A reboot (the board resets rather than ends, with a watchdog): two restores that
    // hang before their confirmation, each reset by the watchdog.
    s.send("reboot -f").unwrap();
    for attempt in 1..=2 {
        let status = expect(&mut s, r"snapboot: @status .*");
        assert!(
            status.contains(&format!(
                "@status restored current generation 2 restore {attempt} of 2 unconfirmed until up 3 s"
            )),
            "{status}"
        );
        expect(&mut s, r"@watchdog /dev/watchdog0 fed by snapboot");
        s.send("kill -STOP -1; kill -STOP $$").unwrap();
        expect(&mut s, r"snapboot: @init");
    }
    // The third power-on after the confirmation: skipped as a crash loop, booted cold.
    let status = expect(&mut s, r"snapboot: @status .*");
    assert!(
        status.contains("@status fallback: ")
            && status.contains("crash-loop guard: restored 2 times without a confirmation"),
        "{status}"
    );
    expect(&mut s, r"snapboot: @ready");
    ask(&mut s, "echo probe-$((6*7))", "^probe-42$");
    let tl = s.finish(boottrace::Outcome::Answered);
    let confirmed = tl
        .lines
        .iter()
        .filter(|l| boottrace::Marker::Confirmed.in_line(&l.text))
        .count();
    assert_eq!(confirmed, 1, "a hung restore was confirmed");
}
