//! An image is bound to the system it was captured on: restored on a bundle whose root
//! filesystem or start command differs, it is refused before any page reaches the kernel,
//! with the difference named, and the board cold-boots that bundle to a usable system.

use crate::common::{run, snapboot};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) const START: &str = "/bin/sh -c 'snapboot ready; exec /bin/sh'";

/// A minimal busybox root whose `/etc/motd` says `motd`.
pub(crate) fn root(dir: &Path, motd: &str) -> PathBuf {
    let root = dir.join(format!("root-{motd}"));
    for d in ["bin", "dev", "proc", "sys", "run", "etc"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).unwrap();
    std::fs::write(root.join("etc/motd"), format!("{motd}\n")).unwrap();
    root
}

pub(crate) fn build(root: &Path, start: &str, out: &Path) {
    let mut c = snapboot();
    c.args(["board", "build", "--name", "bound", "--rootfs"])
        .arg(root)
        .args(["--start", start, "--out"])
        .arg(out);
    let (o, so, se) = run(c);
    assert!(o.status.success(), "build failed:\n{so}\n{se}");
}

fn session(bundle: &Path, store: &Path) -> board::qemu::Session {
    crate::common::store_session(bundle, store, &[])
}

/// Boots `bundle` with `store`; the image must be refused with a reason containing every
/// `named` text and none of `not_named`, and the cold boot must answer with `motd`.
fn expect_refused(bundle: &Path, store: &Path, named: &[&str], not_named: &[&str], motd: &str) {
    let mut s = session(bundle, store);
    let fb = Regex::new(r"snapboot: @fallback").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback marker", Duration::from_secs(120))
        .unwrap();
    for n in named {
        assert!(line.contains(n), "fallback {line:?} does not name {n:?}");
    }
    for n in not_named {
        assert!(!line.contains(n), "fallback {line:?} names {n:?}");
    }
    assert!(
        !s.timeline()
            .lines
            .iter()
            .any(|l| l.text.contains("@resume-loaded")),
        "pages were loaded before the refusal"
    );
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "cold boot after refusal", Duration::from_secs(120))
        .unwrap();
    s.send("read l < /etc/motd; echo motd-$l").unwrap();
    let want = Regex::new(&format!("^motd-{motd}$")).unwrap();
    s.wait_for(&want, "the new system's answer", Duration::from_secs(60))
        .unwrap();
    s.finish(boottrace::Outcome::Answered);
}

#[test]
fn image_is_refused_on_another_root_filesystem_or_start_command() {
    crate::common::bundle("shell"); // kernel fetched
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    let root_a = root(dir.path(), "one");
    build(&root_a, START, &a);
    let store = dir.path().join("a.store");
    let mut cap = snapboot();
    cap.args(["board", "capture"])
        .arg(&a)
        .arg("--store")
        .arg(&store);
    let (o, so, se) = run(cap);
    assert!(o.status.success(), "capture failed:\n{so}\n{se}");

    // The same initramfs with an updated root filesystem: only the root is named.
    assert!(Command::new("cp")
        .arg("-r")
        .arg(&a)
        .arg(&b)
        .status()
        .unwrap()
        .success());
    let root_b = root(dir.path(), "two");
    bundle::bundle::mksquashfs(&root_b, &b.join("rootfs.img")).unwrap();
    expect_refused(
        &b,
        &store,
        &[
            "captured on a different system",
            "root filesystem / (vda) differs",
        ],
        &["/init"],
        "two",
    );

    // The same root tree started with another command: the initramfs's /init is named as the
    // file that changed.
    build(
        &root_a,
        "/bin/sh -c 'echo other; snapboot ready; exec /bin/sh'",
        &c,
    );
    expect_refused(
        &c,
        &store,
        &["the initramfs differs (changed: /init)"],
        &[],
        "one",
    );

    // The bundle it was captured on still restores, state intact.
    let mut s = session(&a, &store);
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(
        &restored,
        "restore on its own bundle",
        Duration::from_secs(120),
    )
    .unwrap();
    s.send("read l < /etc/motd; echo motd-$l").unwrap();
    let want = Regex::new("^motd-one$").unwrap();
    s.wait_for(&want, "restored answer", Duration::from_secs(60))
        .unwrap();
    s.finish(boottrace::Outcome::Answered);
}
