//! The command line on its own (no board boot): errors name their cause once, bad options
//! are refused before QEMU starts, and `image inspect` speaks to people.

use crate::common::{run, snapboot};
use std::os::unix::fs::PermissionsExt;

#[test]
fn inspect_of_a_missing_store_says_the_cause_once() {
    let mut c = snapboot();
    c.args(["image", "inspect", "/nonexistent/x"]);
    let (out, _, se) = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        se.trim_end(),
        "snapboot: opening /nonexistent/x: No such file or directory (os error 2)"
    );
}

/// Runs a board command that must be refused before any guest boots: `qemu-system-x86_64`
/// is a stand-in on `PATH` that leaves a file behind if it is ever started.
fn refused(args: &[&str], reason: &str) {
    let fake = tempfile::tempdir().unwrap();
    let started = fake.path().join("qemu-started");
    let qemu = fake.path().join("qemu-system-x86_64");
    std::fs::write(
        &qemu,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", started.display()),
    )
    .unwrap();
    std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut search = vec![fake.path().to_path_buf()];
    search.extend(std::env::split_paths(&path));
    let mut c = snapboot();
    c.args(args)
        .env("PATH", std::env::join_paths(search).unwrap());
    let (out, so, se) = run(c);
    assert!(!out.status.success(), "{args:?} was accepted:\n{so}\n{se}");
    assert!(se.contains(reason), "{args:?}: {se:?} lacks {reason:?}");
    assert!(
        !started.exists(),
        "{args:?} started QEMU before refusing:\n{se}"
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
        "expected a number with a unit, e.g. 512M or 1G",
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
        !se.contains("timed out"),
        "ended by the guest's reason, not by waiting: {se}"
    );
}

/// Every path under `dir`, directories too, sorted.
fn tree(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        out.push(p.clone());
        if p.is_dir() && !p.is_symlink() {
            out.extend(tree(&p));
        }
    }
    out.sort();
    out
}

/// `snapboot install --root` on a root with initramfs-tools and systemd (their marker
/// files): `--dry-run` prints exactly the paths the install then writes and its manifest
/// lists, `--uninstall` leaves the root as it was, and with the package installed the
/// command says so and writes nothing.
#[test]
fn install_writes_what_dry_run_lists_and_uninstall_removes_it() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    for p in [
        "usr/share/initramfs-tools/hook-functions",
        "usr/lib/systemd/systemd",
    ] {
        std::fs::create_dir_all(root.join(p).parent().unwrap()).unwrap();
        std::fs::write(root.join(p), "").unwrap();
    }
    let before = tree(root);
    let install = |extra: &[&str]| {
        let mut c = snapboot();
        c.arg("install").arg("--root").arg(root);
        c.args(["--after", "app.service", "--store-module", "virtio_blk"]);
        c.args(extra);
        run(c)
    };
    let paths = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    let (out, dry, se) = install(&["--dry-run"]);
    assert!(out.status.success(), "{dry}{se}");
    assert_eq!(tree(root), before, "--dry-run wrote something");
    let mut listed = paths(&dry, "would write ");
    listed.extend(paths(&dry, "would link "));
    let (out, so, se) = install(&[]);
    assert!(out.status.success(), "{so}{se}");
    let written = paths(&so, "installed ");
    assert_eq!(written, listed);
    assert!(
        so.contains("next: chroot "),
        "no initramfs rebuild with --root: {so}"
    );
    let manifest = std::fs::read_to_string(root.join("etc/snapboot/installed.manifest")).unwrap();
    let recorded: Vec<String> = manifest
        .lines()
        .filter(|l| l.starts_with("file ") || l.starts_with("link "))
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(recorded, written);

    let mut c = snapboot();
    c.args(["install", "--uninstall", "--root"]).arg(root);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");
    assert_eq!(tree(root), before, "--uninstall left something: {so}");

    let status = root.join("var/lib/dpkg/status");
    std::fs::create_dir_all(status.parent().unwrap()).unwrap();
    std::fs::write(&status, "Package: snapboot\nStatus: install ok installed\n").unwrap();
    let before = tree(root);
    let (out, _, se) = install(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(se.contains("the snapboot package is installed"), "{se}");
    assert_eq!(tree(root), before);
}
