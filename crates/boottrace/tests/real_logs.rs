//! The timeline parser against consoles captured from the real board (tests/data).

use boottrace::{MilestoneKind as K, Timeline};

fn load(name: &str) -> Timeline {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    Timeline::parse(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn shell_cold_boot_log_has_every_milestone_in_order() {
    let tl = load("shell-cold.log");
    for k in [
        K::KernelStart,
        K::LinuxVersion,
        K::InitStart,
        K::RootMounted,
        K::AppStart,
        K::AppReady,
        K::ProbeAnswered,
    ] {
        assert!(tl.first(k).is_some(), "{k} missing");
    }
    tl.check_order().unwrap();
    let p = tl.phases();
    assert!(p.firmware.unwrap() > 0.0 && p.kernel.unwrap() > p.root_mount.unwrap());
    assert_eq!(tl.tti, tl.first(K::ProbeAnswered));
}

#[test]
fn app_cold_boot_log_shows_the_long_application_start() {
    let tl = load("app-cold.log");
    tl.check_order().unwrap();
    let p = tl.phases();
    assert!(p.app_start.unwrap() > 10.0 * p.kernel.unwrap(), "{p:?}");
    assert!(tl
        .lines
        .iter()
        .any(|l| l.text.starts_with("app: ready rss=")));
}

#[test]
fn panic_log_is_recognised_with_its_reason() {
    let tl = load("panic.log");
    let m = tl.milestone(K::KernelPanic).unwrap();
    assert!(m
        .detail
        .as_deref()
        .unwrap()
        .contains("Unable to mount root fs"));
    assert!(tl.tti.is_none());
    assert!(!tl.outcome.is_success());
}

#[test]
fn raw_console_without_host_stamps_still_parses() {
    // Strip the host stamps: what a plain serial capture or dmesg gives.
    let stamped = std::fs::read_to_string(format!(
        "{}/tests/data/shell-cold.log",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let raw: String = stamped
        .lines()
        .filter_map(|l| l.split_once(" | ").map(|(_, t)| format!("{t}\n")))
        .collect();
    let tl = Timeline::from_console_log(&raw);
    assert!(tl.first(K::LinuxVersion).is_some());
    assert!(tl.first(K::AppReady).is_some());
    tl.check_order().unwrap();
}

#[test]
fn snapboot_resume_log_has_the_resume_milestones() {
    let tl = load("app-snapboot.log");
    for k in [
        K::KernelStart,
        K::InitStart,
        K::ResumeStart,
        K::ResumeLoaded,
        K::Restored,
        K::ProbeAnswered,
    ] {
        assert!(tl.first(k).is_some(), "{k} missing");
    }
    assert!(
        tl.first(K::AppStart).is_none(),
        "a restore does not start the app again"
    );
    tl.check_order().unwrap();
    let load = tl.phases().resume_load.unwrap();
    assert!(load > 0.5 && load < tl.tti.unwrap(), "{load}");
}

/// The restored kernel prints with its own clock (tens of seconds from the captured boot):
/// kernel start must still come from the boot kernel's lines.
#[test]
fn kernel_native_resume_log_infers_kernel_start_from_the_boot_kernel() {
    let tl = load("app-kernel-resume.log");
    let start = tl.first(K::KernelStart).unwrap();
    assert!(start > 0.05 && start < 1.0, "kernel start {start}");
    assert!(tl.first(K::Restored).is_some());
    assert!(tl.first(K::ResumeFallback).is_none());
    tl.check_order().unwrap();
}
