//! The command line on its own (no board boot): errors name their cause once, bad options
//! are refused before QEMU starts, and `image inspect` speaks to people.

use crate::common::{run, snapboot};
use std::time::{Duration, Instant};

#[test]
fn inspect_of_a_missing_store_says_the_cause_once() {
    let mut c = snapboot();
    c.args(["image", "inspect", "/nonexistent/x"]);
    let (out, _, se) = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        se.trim_end(),
        "snapboot: I/O error while opening /nonexistent/x: No such file or directory (os error 2)"
    );
}

/// Runs a board command that must be refused quickly (before any guest boots).
fn refused(args: &[&str], reason: &str) {
    let t = Instant::now();
    let mut c = snapboot();
    c.args(args);
    let (out, so, se) = run(c);
    assert!(!out.status.success(), "{args:?} was accepted:\n{so}\n{se}");
    assert!(se.contains(reason), "{args:?}: {se:?} lacks {reason:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{args:?} took {:?}: it booted before refusing",
        t.elapsed()
    );
}

#[test]
fn bad_board_options_are_refused_before_qemu_starts() {
    crate::common::bundle("shell");
    let store = crate::common::home().join("test-refused.store");
    let s = store.to_str().unwrap();
    refused(
        &[
            "board", "capture", "shell", "--store", s, "--lazy", "garbage",
        ],
        "--lazy garbage: expected max or a size such as 96M",
    );
    refused(
        &["board", "capture", "shell", "--store", s, "--mem", "0M"],
        "the board needs at least 128M",
    );
    refused(
        &["board", "run", "shell", "--mem", "lots"],
        "expected e.g. 512M or 1G",
    );
    refused(
        &["board", "run", "shell", "--smp", "0"],
        "0 is not in 1..=64",
    );
    refused(
        &[
            "board",
            "run",
            "shell",
            "--store",
            s,
            "--stock-kernel",
            "--restore-kernel",
        ],
        "'--stock-kernel' cannot be used with '--restore-kernel'",
    );
    assert!(!store.exists(), "a refused capture created its store");
}

#[test]
fn a_capture_error_in_the_guest_ends_the_run_at_once_with_its_reason() {
    crate::common::bundle("shell");
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.store");
    let t = Instant::now();
    let mut c = snapboot();
    // A setting only the guest checks: the run must end with its reason, not a timeout.
    c.args(["board", "capture", "shell", "--timeout", "120", "--store"])
        .arg(&store)
        .args(["--cmdline", "snapboot.compress=brotli"]);
    let (out, so, se) = run(c);
    assert!(!out.status.success(), "{so}\n{se}");
    assert!(
        se.contains("capture failed in the guest")
            && se.contains("snapboot.compress=brotli: expected lz4 or none"),
        "{se}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
}
