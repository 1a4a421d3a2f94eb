//! The flash store on the real board: two named images on one store, each restored on
//! request; a damaged image falls back to the other with the reason on the console; signed
//! stores refuse unsigned and tampered images; a capture killed mid-write leaves the store
//! consistent and its newest committed image bootable.
//!
//! The images tell themselves apart by their kernel command line: a restored system's
//! `/proc/cmdline` is the one it was captured with, and `loglevel=` is not part of what an
//! image is bound to.

use crate::common::{board_capture as capture, bundle, run, snapboot};
use crate::snapshot::{ask, copy_store, flip};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The shell workload's flash store with image `a` (captured at `loglevel=4`) and then `b`
/// (`loglevel=5`, deduped against `a`), made once per test binary.
fn two_images() -> PathBuf {
    static STORE: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let mut g = STORE
        .get_or_init(|| Mutex::new(None))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &*g {
        return p.clone();
    }
    let b = bundle("shell");
    let store = crate::common::home().join("test-flash-two.store");
    let _ = std::fs::remove_file(&store);
    let so = capture(&b, &store, &["--image", "a", "--cmdline", "loglevel=4"]);
    assert!(so.contains("image a generation 2"), "{so}");
    let so = capture(&b, &store, &["--image", "b", "--cmdline", "loglevel=5"]);
    assert!(so.contains("image b generation 3"), "{so}");
    *g = Some(store.clone());
    store
}

pub(crate) fn store_cmd(args: &[&str], store: &Path) -> (bool, String) {
    let mut c = snapboot();
    c.arg("store").args(args).arg(store);
    let (out, so, se) = run(c);
    (out.status.success(), format!("{so}{se}"))
}

pub(crate) fn images(store: &Path) -> Vec<serde_json::Value> {
    let (ok, text) = store_cmd(&["ls", "--json"], store);
    assert!(ok, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// Boots `bundle` with `store` and `extra` words, waits for the restore and returns the
/// restored system's `loglevel=` word, and the console up to the restore.
pub(crate) fn restored_loglevel(
    bundle: &Path,
    store: &Path,
    extra: &[&str],
) -> (String, Vec<String>) {
    let mut s = crate::common::store_session(bundle, store, extra);
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("no restore with {extra:?}: {e}"));
    let console: Vec<String> = s.timeline().lines.iter().map(|l| l.text.clone()).collect();
    let line = ask(
        &mut s,
        "for w in $(cat /proc/cmdline); do case $w in loglevel=*) echo got-$w;; esac; done",
        "^got-loglevel=",
    );
    s.finish(boottrace::Outcome::Answered);
    (line.trim_start_matches("got-").to_string(), console)
}

/// [`restored_loglevel`] with the restorer (crates/restorer) in place of the kernel.
fn restorer_loglevel(bundle: &Path, store: &Path, extra: &[&str]) -> (String, Vec<String>) {
    let b = bundle::Bundle::load(bundle).unwrap();
    let mut o = crate::restorer::restorer_options(&b, store);
    o.cmdline.extend(extra.iter().map(|w| w.to_string()));
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("no restore from the restorer with {extra:?}: {e}"));
    let console: Vec<String> = s.timeline().lines.iter().map(|l| l.text.clone()).collect();
    let line = ask(
        &mut s,
        "for w in $(cat /proc/cmdline); do case $w in loglevel=*) echo got-$w;; esac; done",
        "^got-loglevel=",
    );
    let tl = s.finish(boottrace::Outcome::Answered);
    eprintln!(
        "restorer boot with {extra:?}: restored and answered in {:.2} s",
        tl.tti.unwrap_or_default()
    );
    (line.trim_start_matches("got-").to_string(), console)
}

/// Whether `console` has a line holding every one of `parts`.
fn has_line(console: &[String], parts: &[&str]) -> bool {
    console.iter().any(|l| parts.iter().all(|p| l.contains(p)))
}

#[test]
fn two_named_images_restore_on_request_and_a_damaged_one_falls_back_to_the_other() {
    let store = copy_store(&two_images(), "test-flash-damage.store");
    let b = bundle("shell");
    let list = images(&store);
    assert_eq!(list.len(), 2, "{list:?}");
    let rec = |n: &str| list.iter().find(|i| i["name"] == n).unwrap().clone();
    // b shares what did not change with a (storage dedupe) and stores much less.
    assert!(
        rec("b")["stats"]["shared_pages"].as_u64().unwrap() > 0,
        "{list:?}"
    );
    assert!(
        rec("b")["stats"]["stored_bytes"].as_u64().unwrap() * 2
            < rec("a")["stats"]["stored_bytes"].as_u64().unwrap(),
        "{list:?}"
    );
    let (ok, text) = store_cmd(&["fsck"], &store);
    assert!(ok && text.contains("clean"), "{text}");

    assert_eq!(
        restored_loglevel(&b, &store, &["snapboot.image=a"]).0,
        "loglevel=4"
    );
    assert_eq!(
        restored_loglevel(&b, &store, &["snapboot.image=b"]).0,
        "loglevel=5"
    );
    // Without a choice, the newest: the killed-capture test below restores this store's
    // images so.

    // Damage a chunk only b uses: b is refused, naming the chunk, and a restores.
    let s = ondevice::store::open_store(&store, false).unwrap();
    let ia = s.image("a").unwrap().chunks.clone();
    let ib = s.image("b").unwrap();
    let own = *ib.chunks.iter().rev().find(|c| !ia.contains(c)).unwrap();
    let c = *s.catalog().chunks.iter().find(|c| c.id == own).unwrap();
    flip(
        &store,
        c.cluster * s.cluster_bytes() + u64::from(c.offset) + 10,
    );
    drop(s);
    let (level, console) = restored_loglevel(&b, &store, &["snapboot.image=b"]);
    assert_eq!(level, "loglevel=4");
    let refused = console
        .iter()
        .find(|l| l.contains("@image-refused"))
        .unwrap_or_else(|| panic!("no refusal on the console: {console:#?}"));
    assert!(
        refused.contains(&format!(
            "b: store is damaged: checksum mismatch in chunk {own}"
        )),
        "{refused}"
    );
    let (ok, text) = store_cmd(&["fsck"], &store);
    assert!(!ok && text.contains(&format!("chunk {own}")), "{text}");
}

#[test]
fn a_signed_store_refuses_unsigned_and_tampered_images() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let mut c = snapboot();
    c.args(["key", "gen"]).arg(&key);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");
    let (secret, public) = (dir.path().join("k.secret"), dir.path().join("k.pub"));
    bundle("shell"); // the kernel is fetched
    let signed_bundle = dir.path().join("bundle");
    let mut c = snapboot();
    c.args(["board", "build", "--workload", "shell", "--image-key"])
        .arg(&public)
        .arg("--out")
        .arg(&signed_bundle);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");

    let store = dir.path().join("signed.store");
    let so = capture(
        &signed_bundle,
        &store,
        &[
            "--image",
            "good",
            "--sign-key",
            secret.to_str().unwrap(),
            "--cmdline",
            "loglevel=4",
        ],
    );
    assert!(so.contains(", signed;"), "{so}");
    capture(
        &signed_bundle,
        &store,
        &["--image", "mine", "--cmdline", "loglevel=5"],
    );

    // Unsigned: refused, and the signed image restores.
    let (level, console) = restored_loglevel(&signed_bundle, &store, &["snapboot.image=mine"]);
    assert_eq!(level, "loglevel=4");
    assert!(
        console
            .iter()
            .any(|l| l.contains("@image-refused") && l.contains("mine: the image is not signed")),
        "{console:#?}"
    );
    // The restorer applies the same rule with the key in the kernel pack's initramfs (taken
    // from the pack's initramfs summary), in resume's words, and checks the initramfs the
    // image is bound to against the pack's.
    let unsigned =
        "the image is not signed (a public key is configured: only signed images restore)";
    let (level, console) = restorer_loglevel(&signed_bundle, &store, &["snapboot.image=mine"]);
    assert_eq!(level, "loglevel=4");
    assert!(
        has_line(
            &console,
            &[
                "snapboot-restorer: the kernel pack's initramfs summary read",
                "images must be signed by key"
            ]
        ) && has_line(
            &console,
            &["snapboot-restorer: image-refused mine: ", unsigned]
        ) && has_line(&console, &["snapboot-restorer: image checked: good"]),
        "{console:#?}"
    );

    // Tampered: the good image's signature grafted onto the other one.
    let mut s = ondevice::store::open_store(&store, true).unwrap();
    let sig = s.image("good").unwrap().signature.clone();
    assert_eq!(sig.len(), 64);
    s.set_signature("mine", sig).unwrap();
    drop(s);
    let (level, console) = restored_loglevel(&signed_bundle, &store, &["snapboot.image=mine"]);
    assert_eq!(level, "loglevel=4");
    assert!(
        console.iter().any(|l| l.contains("@image-refused")
            && l.contains("mine: the image's signature does not verify")),
        "{console:#?}"
    );
    let (level, console) = restorer_loglevel(&signed_bundle, &store, &["snapboot.image=mine"]);
    assert_eq!(level, "loglevel=4");
    assert!(
        has_line(
            &console,
            &["snapboot-restorer: image-refused mine: the image's signature does not verify with public key"]
        ) && has_line(&console, &["snapboot-restorer: image checked: good"]),
        "{console:#?}"
    );
}

/// The power is cut (QEMU killed) as soon as the new image's first bytes reach the store
/// file, observed by its allocated blocks growing: the store stays consistent, the image
/// being written is not there, and the newest committed one (`b`) restores when the boot
/// names no image.
#[test]
fn a_capture_killed_mid_write_leaves_a_clean_store_and_the_last_image_boots() {
    let store = copy_store(&two_images(), "test-flash-killed.store");
    let b = bundle("shell");
    use std::os::unix::fs::MetadataExt;
    let blocks = || std::fs::metadata(&store).unwrap().blocks();
    let before = blocks();
    crate::snapshot::cut_power_mid_capture(
        crate::common::store_session(&b, &store, &["snapboot.capture", "snapboot.image=c"]),
        || blocks() != before,
    );
    let (ok, text) = store_cmd(&["fsck"], &store);
    assert!(ok && text.contains("2 image(s)"), "{text}");
    let names: Vec<_> = images(&store).iter().map(|i| i["name"].clone()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(restored_loglevel(&b, &store, &[]).0, "loglevel=5");
}

/// The `store` and `key` commands on a file, with images written through the library (no
/// board): every command's effect is checked through another command.
#[test]
fn store_commands_manage_images_on_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s.store");
    let st = |args: &[&str]| store_cmd(args, &store);
    let (ok, text) = st(&[
        "init",
        "--size",
        "32M",
        "--checksum",
        "blake3",
        "--label",
        "lab-1",
    ]);
    assert!(
        ok && text
            .contains(", label lab-1: 128 clusters of 256 KiB (32.0 MiB), blake3 chunk checksums"),
        "{text}"
    );
    let (ok, text) = st(&["init", "--size", "32M"]);
    assert!(!ok && text.contains("already holds a store"), "{text}");

    // Two images, the second sharing most pages with the first.
    let mut s = ondevice::store::open_store(&store, true).unwrap();
    let page = |i: u64, v: u8| {
        let mut p = [v; 4096];
        p[..8].copy_from_slice(&i.to_le_bytes());
        p
    };
    for (name, changed) in [("factory", 0u64), ("current", 40)] {
        let mut w = s.writer(name, flashstore::WriteOptions::default()).unwrap();
        for i in 0..400u64 {
            w.push_page(&page(i, if i < changed { 2 } else { 1 }))
                .unwrap();
        }
        w.commit(b"not a description".to_vec()).unwrap();
    }
    drop(s);
    let list = images(&store);
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["name"], "current", "newest first: {list:?}");
    assert!(
        list[0]["stats"]["shared_pages"].as_u64().unwrap() >= 300,
        "{list:?}"
    );
    let (ok, text) = st(&["stats"]);
    assert!(
        ok && text.contains("factory") && text.contains("UNIQUE MiB"),
        "{text}"
    );
    let (ok, text) = st(&["ls"]);
    assert!(ok && text.contains(", label lab-1, generation 3"), "{text}");
    let (ok, text) = st(&["stats", "--json"]);
    assert!(ok && text.contains("\"label\": \"lab-1\""), "{text}");

    // `store pin [STORE] NAME`: nothing is no name; one word is the name, on the
    // configured store (this host names none).
    let mut c = snapboot();
    c.args(["store", "pin"]);
    let (out, so, se) = run(c);
    assert!(
        !out.status.success() && format!("{so}{se}").contains("[STORE] NAME"),
        "pin needs a name: {so}{se}"
    );
    let (ok, text) = st(&["pin"]);
    assert!(
        !ok && text.contains("no store given and none in /etc/snapboot/snapboot.conf"),
        "one word is the image's name, on the configured store: {text}"
    );
    let run_named = |args: &[&str]| {
        let mut c = snapboot();
        c.arg("store").arg(args[0]).arg(&store).args(&args[1..]);
        let (out, so, se) = run(c);
        (out.status.success(), format!("{so}{se}"))
    };
    assert!(run_named(&["pin", "factory"]).0);
    let (ok, text) = run_named(&["rm", "factory"]);
    assert!(!ok && text.contains("image `factory` is pinned"), "{text}");
    assert!(run_named(&["unpin", "factory"]).0);

    // Signing, seen by ls and inspect.
    let mut c = snapboot();
    c.args(["key", "gen"]).arg(dir.path().join("k"));
    assert!(run(c).0.status.success());
    let key = dir.path().join("k.secret");
    let (ok, text) = run_named(&["sign", "current", "--key", key.to_str().unwrap()]);
    assert!(ok, "{text}");
    assert_eq!(images(&store)[0]["signed"], true);
    let mut c = snapboot();
    c.args(["image", "inspect"]).arg(&store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");
    assert!(so.contains("image current generation 3, signed"), "{so}");
    assert!(so.contains("checksums: all verified"), "{so}");

    // rm, then gc discards what only the removed image used; fsck stays clean.
    let (ok, text) = run_named(&["rm", "factory"]);
    assert!(ok, "{text}");
    // Both images wrote a cluster of chunks; with `factory` gone, `current` keeps a few of
    // each, which gc compacts into one (the signature stays valid: only locations change).
    let (ok, text) = st(&["stats"]);
    assert!(
        ok && text.contains("chunks fill 2 cluster(s)") && text.contains("2 under 50%"),
        "{text}"
    );
    let (ok, text) = st(&["gc"]);
    assert!(
        ok && text.contains("compacted: 2 partly live cluster(s) emptied into 1")
            && text.contains("discarded"),
        "{text}"
    );
    let (ok, text) = st(&["stats"]);
    assert!(ok && text.contains("chunks fill 1 cluster(s)"), "{text}");
    let mut c = snapboot();
    c.args(["image", "inspect"]).arg(&store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");
    assert!(
        so.contains("signed") && so.contains("checksums: all verified"),
        "{so}"
    );
    let (ok, text) = st(&["fsck"]);
    assert!(
        ok && text.contains("1 image(s)") && text.contains("clean"),
        "{text}"
    );
    let (ok, text) = run_named(&["rm", "factory"]);
    assert!(!ok && text.contains("no image named `factory`"), "{text}");
}

/// Re-capture without a cold boot: a system restored from image `current` (a copy of the
/// shared `shell` capture, generation 2) changes its state and captures itself again (the
/// restored system keeps the capture boot's command line, so `snapboot ready` captures to
/// the same store and name). The new image replaces `current`, shares most pages with the
/// one it replaces, and the next power-on restores the change.
#[test]
fn a_restored_system_recaptures_itself_and_the_next_boot_restores_the_change() {
    let b = bundle("shell");
    let store = copy_store(
        &crate::snapshot::captured("shell"),
        "test-flash-recapture.store",
    );
    let restored = Regex::new(r"snapboot: @restored").unwrap();

    let mut s = crate::common::store_session(&b, &store, &["snapboot.image=current"]);
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap();
    ask(
        &mut s,
        "echo changed-after-restore > /run/mark; echo marked",
        "^marked$",
    );
    s.send("/run/snapboot/bin/snapboot ready").unwrap();
    let done = Regex::new(r"snapboot: @capture-(done|failed)").unwrap();
    let (line, _) = s
        .wait_for(&done, "the re-capture", Duration::from_secs(120))
        .unwrap();
    assert!(
        line.contains("@capture-done") && line.contains("image current"),
        "{line}"
    );
    s.wait_exit(Duration::from_secs(60)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);

    let list = images(&store);
    assert_eq!(list.len(), 1, "the new image replaced the old: {list:?}");
    assert_eq!(list[0]["generation"], 3, "{list:?}");
    let (pages, shared) = (
        list[0]["stats"]["pages"].as_u64().unwrap(),
        list[0]["stats"]["shared_pages"].as_u64().unwrap(),
    );
    assert!(
        shared * 2 > pages,
        "only {shared} of {pages} pages shared: {list:?}"
    );

    let mut s = crate::common::store_session(&b, &store, &["snapboot.image=current"]);
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap();
    ask(&mut s, "cat /run/mark", "^changed-after-restore$");
    s.finish(boottrace::Outcome::Answered);
    let (ok, text) = store_cmd(&["fsck"], &store);
    assert!(ok && text.contains("clean"), "{text}");
}
