//! End-to-end tests of snapshot boot on the real board: capture once, restore many times,
//! refuse bad images and what is not a store with the right reason and cold-boot instead.
//! (A capture killed in the middle: flash.rs.)

use crate::common::{bundle, run, snapboot};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Captures `workload` once per test binary; returns the store file.
pub(crate) fn captured(workload: &str) -> PathBuf {
    captured_with_timeline(workload).0
}

/// [`captured`], and the capture boot's timeline (`board capture --timeline`): the cold boot
/// to the ready point that tests of the cold boot read instead of booting it again.
pub(crate) fn captured_with_timeline(workload: &str) -> (PathBuf, serde_json::Value) {
    static STORES: crate::common::OnceByKey<(PathBuf, serde_json::Value)> =
        crate::common::OnceByKey::new();
    STORES.get(workload, || {
        let b = bundle(workload);
        let home = crate::common::home();
        let store = home.join(format!("test-{workload}.store"));
        let timeline = home.join(format!("test-{workload}-capture.json"));
        let _ = std::fs::remove_file(&store);
        let so =
            crate::common::board_capture(&b, &store, &["--timeline", timeline.to_str().unwrap()]);
        assert!(so.contains("image current generation 2"), "{so}");
        let tl = serde_json::from_str(&std::fs::read_to_string(&timeline).unwrap()).unwrap();
        (store, tl)
    })
}

/// A sparse copy of a store, to damage without touching the shared one.
pub(crate) fn copy_store(src: &Path, name: &str) -> PathBuf {
    let dst = crate::common::home().join(name);
    let st = Command::new("cp")
        .args(["--sparse=always", "-f"])
        .arg(src)
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success());
    dst
}

pub(crate) fn board_session(
    workload: &str,
    store: &Path,
    extra_cmdline: &[&str],
) -> board::qemu::Session {
    crate::common::store_session(&bundle(workload), store, extra_cmdline)
}

pub(crate) fn ask(s: &mut board::qemu::Session, query: &str, answer: &str) -> String {
    board::app_state::ask(s, query, answer, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("query {query}: {e}"))
}

/// The `app` program's `checksum` answer at scale 1.0, computed on the host.
pub(crate) fn host_checksum() -> String {
    host_checksum_at(crate::common::APP_SCALE)
}

/// The `app` program's `checksum` answer at `scale` (`APP_SCALE`), computed on the host.
pub(crate) fn host_checksum_at(scale: &str) -> String {
    let sum = board::app_state::host_checksum(scale).unwrap_or_else(|e| panic!("{e}"));
    format!("checksum {sum}")
}

/// How far a restored guest's clock may be from the host's here. Looser than
/// `board::app_state::CLOCK_BOUND_S`, which `bench endurance` holds every restore to: the
/// device steps its clock to the RTC's whole second only when it is more than a second
/// off, so a restored clock is up to ~2 s behind (measured 0.3-1.7 s on the restore
/// kernel), and a test must not fail by a hair; the benchmark reports how close it comes.
const CLOCK_BOUND_S: f64 = 10.0;

/// Checks a restored `app` board (after its `@restored`): the app was not started again, its
/// state is the one captured (`expected`, a `checksum` answer), its clock is current.
/// Returns the random bytes it answers with, which must differ between boots.
pub(crate) fn check_restored_app(
    s: &mut board::qemu::Session,
    boot: usize,
    expected: &str,
) -> String {
    let app = board::app_state::query_restored(s, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("boot {boot}: {e}"));
    let want = expected.trim_start_matches("checksum ");
    let problems = app.problems(want, CLOCK_BOUND_S);
    assert!(problems.is_empty(), "boot {boot}: {problems:?}");
    app.random
}

/// Asserts no two boots answered with the same random bytes.
pub(crate) fn assert_all_differ(randoms: Vec<String>) {
    let all: Vec<&str> = randoms.iter().map(String::as_str).collect();
    let repeats = board::app_state::repeated(&all);
    assert!(
        repeats.is_empty(),
        "RNG output repeated between boots (boot, earlier boot): {repeats:?} of {randoms:?}"
    );
}

/// The `app` cold boot (the shared capture's) builds its state before its ready point (at
/// least 30 MiB and 100 MiB per unit of the tests' scale, [`crate::common::APP_SCALE`]); the image of it boots again and again: the state is the one the same program
/// builds natively on the host (so the guest really built the whole state, and the restore
/// kept it), the clock current, the RNG fresh.
#[test]
fn app_snapshot_boots_repeatedly_from_one_image() {
    let (store, capture) = captured_with_timeline("app");
    let ready = capture["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["text"].as_str())
        .find(|l| l.starts_with("app: ready"))
        .unwrap_or_else(|| panic!("no `app: ready` line in the capture boot: {capture}"));
    let rss: u32 = ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rss="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no rss= in {ready:?}"));
    // Resident at ready: 47 MiB at 0.1, 64 MiB at 0.25, 150-220 MiB at 1.0 (the interpreter
    // and its modules about 36 MiB of it).
    let least = 30 + crate::common::at_test_scale(100);
    assert!(
        u64::from(rss) >= least,
        "application state is at least {least} MiB at scale {} (rss={rss})",
        crate::common::APP_SCALE
    );
    let expected = host_checksum();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    let mut randoms = Vec::new();
    for boot in 0..2 {
        let mut s = board_session("app", &store, &[]);
        s.wait_for(&restored, "restored marker", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("boot {boot}: {e}"));
        randoms.push(check_restored_app(&mut s, boot, &expected));
        s.finish(boottrace::Outcome::Answered);
    }
    assert_all_differ(randoms);
}

/// Runs the shell board on `store` and expects a cold boot whose fallback reason matches.
pub(crate) fn expect_fallback(store: &Path, extra: &[&str], reason: &str) {
    let mut s = board_session("shell", store, extra);
    let fb = Regex::new(r"snapboot: @fallback").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback marker", Duration::from_secs(120))
        .unwrap();
    assert!(
        line.contains(reason),
        "fallback reason {line:?} lacks {reason:?}"
    );
    // ...and the cold boot carries on to a usable system.
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "cold boot after fallback", Duration::from_secs(120))
        .unwrap();
    let tl = s.finish(boottrace::Outcome::Ready);
    let m = tl
        .milestone(boottrace::MilestoneKind::ResumeFallback)
        .unwrap();
    assert!(m.detail.as_deref().unwrap_or_default().contains(reason));
}

/// Flips a byte in the middle of the last chunk of the store's newest image; returns the
/// chunk's id.
pub(crate) fn damage_newest_image(store: &Path) -> u64 {
    let s = ondevice::store::open_store(store, false).unwrap();
    let (id, at) = newest_chunk_middle(&s);
    drop(s);
    flip(store, at);
    id
}

/// The last chunk of the newest image in `s`, and the store's byte in the middle of its
/// stored data.
pub(crate) fn newest_chunk_middle<M: flashstore::Medium>(s: &flashstore::Store<M>) -> (u64, u64) {
    let rec = s.newest().unwrap();
    let id = *rec.chunks.last().unwrap();
    let c = *s.catalog().chunks.iter().find(|c| c.id == id).unwrap();
    let at = c.cluster * s.cluster_bytes() + u64::from(c.offset) + u64::from(c.stored_len) / 2;
    (id, at)
}

#[test]
fn corrupted_data_is_refused_naming_the_chunk() {
    let good = captured("shell");
    let bad = copy_store(&good, "test-bad-data.store");
    let chunk = damage_newest_image(&bad);
    expect_fallback(&bad, &[], &format!("checksum mismatch in chunk {chunk}"));
}

/// A misspelt boot parameter is never ignored: with it, the good image is not restored,
/// the word is named, and the board boots cold.
#[test]
fn a_misspelt_boot_parameter_is_named_and_boots_cold() {
    let good = captured("shell");
    expect_fallback(
        &good,
        &["snapboot.onse"],
        "unknown boot parameter \"snapboot.onse\"",
    );
}

/// BLAKE3 of a whole file.
fn file_hash(path: &Path) -> String {
    let len = std::fs::metadata(path).unwrap().len();
    region_hash(path, 0, len)
}

/// What is not a store is never restored from and never written to: a device without the
/// store's magic (a renumbered disk), an old two-slot store and a truncated store each boot
/// cold with their reason and keep every byte; a capture onto the device without the magic
/// fails with the reason and writes nothing either.
#[test]
fn what_is_not_a_store_is_refused_and_left_as_it_was() {
    let good = captured("shell");
    let zeroed = copy_store(&good, "test-no-magic.store");
    let old = copy_store(&good, "test-two-slot.store");
    let truncated = copy_store(&good, "test-truncated.store");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&zeroed)
            .unwrap();
        f.write_all_at(&[0u8; 8192], 0).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&old).unwrap();
        f.write_all_at(&[0u8; 8192], 0).unwrap();
        f.write_all_at(b"SNAPBOOT", 0).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&truncated)
            .unwrap();
        f.set_len(f.metadata().unwrap().len() / 2).unwrap();
    }
    for (store, reason) in [
        (&zeroed, "no snapboot store here"),
        (&old, "a two-slot store of an older snapboot"),
        (&truncated, "store is truncated"),
    ] {
        let before = file_hash(store);
        expect_fallback(store, &[], reason);
        assert_eq!(file_hash(store), before, "{} was written", store.display());
    }
    let before = file_hash(&zeroed);
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(bundle("shell"))
        .arg("--store")
        .arg(&zeroed);
    let (out, so, se) = run(c);
    assert!(
        !out.status.success(),
        "a capture onto no store succeeded:\n{so}"
    );
    assert!(se.contains("no snapboot store here"), "{se}");
    assert_eq!(
        file_hash(&zeroed),
        before,
        "the capture wrote to the device"
    );
}

/// Rewrites the newest image's description with `change` applied to its identity, as if
/// another kernel build had captured it (the image is otherwise valid: checksums, catalog).
pub(crate) fn rewrite_identity(store: &Path, change: impl FnOnce(&mut snapimg::Identity)) {
    let mut s = ondevice::store::open_store(store, true).unwrap();
    rewrite_identity_in(&mut s, change);
}

/// [`rewrite_identity`] on an open store (the UEFI PC's is a partition of its disk).
pub(crate) fn rewrite_identity_in<M: flashstore::Medium>(
    s: &mut flashstore::Store<M>,
    change: impl FnOnce(&mut snapimg::Identity),
) {
    rewrite_description_in(s, |d| change(&mut d.identity));
}

/// Rewrites the newest image's description with `change` applied (the image is otherwise
/// valid: checksums, catalog).
pub(crate) fn rewrite_description(store: &Path, change: impl FnOnce(&mut snapimg::Description)) {
    let mut s = ondevice::store::open_store(store, true).unwrap();
    rewrite_description_in(&mut s, change);
}

/// [`rewrite_description`] on an open store.
pub(crate) fn rewrite_description_in<M: flashstore::Medium>(
    s: &mut flashstore::Store<M>,
    change: impl FnOnce(&mut snapimg::Description),
) {
    let rec = s.newest().unwrap().clone();
    let meta = s.image_meta(&rec).unwrap();
    let mut d = snapimg::Description::decode(&meta.user).unwrap();
    change(&mut d);
    let mut pages = Vec::new();
    let mut r = s.reader(&rec.name).unwrap();
    let mut page = [0u8; flashstore::PAGE];
    while r.next_page(&mut page).unwrap() {
        pages.push(page);
    }
    drop(r);
    let mut w = s
        .writer(&rec.name, flashstore::WriteOptions::default())
        .unwrap();
    for p in &pages {
        w.push_page(p).unwrap();
    }
    w.commit(d.encode()).unwrap();
}

/// Rewrites the newest image with another kernel release in its description.
pub(crate) fn rename_release(store: &Path) {
    rewrite_identity(store, another_release);
}

/// The identity of an image of another kernel build: release 9.x instead of 6.x.
pub(crate) fn another_release(id: &mut snapimg::Identity) {
    assert!(id.release.starts_with("6."), "{id:?}");
    id.release.replace_range(0..1, "9");
}

/// An image from another kernel: the header names another release (and is otherwise valid,
/// checksum included), as if captured on a different kernel build.
#[test]
fn foreign_kernel_image_is_refused_naming_the_field() {
    let good = captured("shell");
    let bad = copy_store(&good, "test-foreign.store");
    rename_release(&bad);
    expect_fallback(&bad, &[], "kernel release differs");
}

#[test]
fn different_ram_size_is_refused() {
    let good = captured("shell");
    let copy = copy_store(&good, "test-ram.store");
    let b = bundle::Bundle::load(&bundle("shell")).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.mem_mib += 128;
    o.disks.push(board::run_options::Disk {
        path: copy,
        readonly: false,
        sd: false,
    });
    o.cmdline.push("snapboot.store=/dev/vdb".into());
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    let fb = Regex::new(r"snapboot: @fallback").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback", Duration::from_secs(120))
        .unwrap();
    assert!(line.contains("RAM size differs"), "{line}");
    s.finish(boottrace::Outcome::Ready);
}

pub(crate) fn flip(path: &Path, at: u64) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    b[0] ^= 0x5a;
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&b).unwrap();
}

/// Cuts the power (kills QEMU) of a capture boot as soon as `written` says the new image's
/// first bytes reached the store, and checks the capture had not finished by then.
pub(crate) fn cut_power_mid_capture(mut s: board::qemu::Session, written: impl Fn() -> bool) {
    let started = Regex::new(r"snapboot: @capture-start").unwrap();
    s.wait_for(&started, "capture start", Duration::from_secs(120))
        .unwrap();
    let t = std::time::Instant::now();
    while !written() {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the new image never reached the store"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let tl = s.finish(boottrace::Outcome::Exited {
        reason: "power cut".into(),
    });
    assert!(
        tl.first(boottrace::MilestoneKind::CaptureDone).is_none(),
        "the capture finished before the power cut"
    );
}

/// `snapboot.once`: the image boots exactly once, then the board cold-boots with the reason.
#[test]
fn boot_once_image_is_invalidated_by_its_restore() {
    let good = captured("shell");
    let store = copy_store(&good, "test-once.store");
    let mut s = board_session("shell", &store, &["snapboot.once"]);
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(&restored, "the one restore", Duration::from_secs(120))
        .unwrap();
    s.finish(boottrace::Outcome::Ready);
    expect_fallback(&store, &[], "the store holds no image");
}

/// The newest image of `snapboot image inspect --json` of a store.
pub(crate) fn inspect(store: &Path) -> serde_json::Value {
    let mut c = snapboot();
    c.args(["image", "inspect", "--json"]).arg(store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "inspect failed:\n{so}\n{se}");
    let v: serde_json::Value =
        serde_json::from_str(&so).unwrap_or_else(|e| panic!("inspect JSON: {e}\n{so}"));
    assert_eq!(v[0]["verify"], "ok", "{v}");
    v[0].clone()
}

/// BLAKE3 of `len` bytes of `path` from `offset`.
pub(crate) fn region_hash(path: &Path, offset: u64, len: u64) -> String {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(std::io::SeekFrom::Start(offset)).unwrap();
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut (&mut f).take(len), &mut h).unwrap();
    h.finalize().to_hex().to_string()
}

/// A fresh `app` capture into store `name` under the test home, with `board capture` flags.
fn capture_app(name: &str, flags: &[&str]) -> PathBuf {
    let store = crate::common::home().join(name);
    let _ = std::fs::remove_file(&store);
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(bundle("app"))
        .arg("--store")
        .arg(&store)
        .args(flags);
    let (out, so, se) = run(c);
    assert!(
        out.status.success(),
        "capture {flags:?} failed:\n{so}\n{se}"
    );
    store
}

/// A fresh lazy capture of `app` into `name` under the snapboot home, with `extra` flags.
fn lazy_capture(name: &str, extra: &[&str]) -> PathBuf {
    let flags: Vec<&str> = std::iter::once("--lazy")
        .chain(extra.iter().copied())
        .collect();
    capture_app(name, &flags)
}

/// One lazy capture of `app` per test binary (`test-app-lazy.store`), never booted: tests
/// that boot it (each boot writes its boot log) boot a [`copy_store`] of it. Captured with
/// `snapboot.profilecheck`, which a restored system reads from its own (the capture boot's)
/// command line and which only adds console reports after a restore: the profiled test
/// needs it, and the other tests restore the same kind of image with it.
pub(crate) fn captured_lazy() -> PathBuf {
    static STORE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STORE
        .get_or_init(|| {
            lazy_capture(
                "test-app-lazy.store",
                &["--cmdline", "snapboot.profilecheck"],
            )
        })
        .clone()
}

/// Improved snapshot boot: a lazy image holds only what stayed resident; the rest comes
/// back from the store's swap region on demand, with the state intact. The region is
/// clusters the store gave the image (a raw region no other image or chunk touches), and it
/// is never written after capture, even when the restored system itself swaps under
/// pressure, so the next power-on restores the same state again (the region is compared
/// byte for byte after the boot, and the store checks clean before and after).
#[test]
fn lazy_image_pages_in_on_demand_and_its_swap_region_stays_pristine() {
    let full = inspect(&captured("app"));
    let store = copy_store(&captured_lazy(), "test-app-lazy-boot.store");
    let lazy = inspect(&store);
    let swap = &lazy["swap"];
    let used = swap["used_pages"].as_u64().unwrap();
    let (full_raw, lazy_raw) = (
        full["raw_bytes"].as_u64().unwrap(),
        lazy["raw_bytes"].as_u64().unwrap(),
    );
    let least = crate::common::at_test_scale(10_000);
    assert!(
        used > least,
        "only {used} pages were paged out (at least {least}): {lazy}"
    );
    // What paging out saved grows with the application's state: at full scale the lazy
    // image was under half the full one (about 250 MB); at a quarter scale it was 118 of
    // 171 MB (2026-11-30).
    let saved = full_raw.saturating_sub(lazy_raw);
    let least = crate::common::at_test_scale(100 << 20);
    assert!(
        saved > least,
        "lazy image {lazy_raw} bytes is only {saved} under the full {full_raw} (at least {least})"
    );
    let (off, len) = (
        swap["offset"].as_u64().unwrap(),
        swap["bytes"].as_u64().unwrap(),
    );
    let list = crate::flash::images(&store);
    let raw = &list[0]["raw_region"];
    assert_eq!(raw["offset"].as_u64().unwrap(), off, "{list:?}");
    assert!(raw["bytes"].as_u64().unwrap() >= len, "{list:?}");
    let fsck = || {
        let (ok, text) = crate::flash::store_cmd(&["fsck"], &store);
        assert!(ok && text.contains("clean"), "{text}");
    };
    fsck();
    let pristine = region_hash(&store, off, len);
    let expected = host_checksum();
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    // One power-on: with the swap region byte for byte as captured after it (and the
    // image's own pages checksummed at every restore), the next power-on starts from the
    // same bytes; the profiled test below powers the same kind of image on again.
    let mut s = board_session("app", &store, &[]);
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap();
    ask(&mut s, "ping", "^pong ");
    // Touches every record: pages everything back in from the swap region.
    let sum = ask(&mut s, "checksum", "^checksum [0-9a-f]{64}$");
    assert_eq!(sum, expected, "state differs from before capture");
    // Memory pressure in the restored system: it swaps, into the RAM copy-on-write.
    ask(&mut s, "squeeze 700", "^squeezed 700$");
    let sum = ask(&mut s, "checksum", "^checksum [0-9a-f]{64}$");
    assert_eq!(sum, expected, "state differs after swapping");
    s.finish(boottrace::Outcome::Answered);
    assert_eq!(
        region_hash(&store, off, len),
        pristine,
        "the restored system wrote to the image's swap region"
    );
    fsck();
}

/// The swap region's pages, as `inspect` shows the image: (offset, bytes, used pages).
pub(crate) fn swap_of(store: &Path) -> (u64, u64, u64) {
    let swap = inspect(store)["swap"].clone();
    (
        swap["offset"].as_u64().unwrap(),
        swap["bytes"].as_u64().unwrap(),
        swap["used_pages"].as_u64().unwrap(),
    )
}

/// Working-set profile, then verified page-ins. A lazy image is restored, answers a ping
/// (its working set is paged in) and re-captures itself: the new image keeps exactly what
/// the restored system touched. Right after its restore those pages are in memory and the
/// rest of what was paged out is not (pagemap, reported by `snapboot.profilecheck`). Then
/// bytes of its swap region are flipped on the host: dm-verity fails the page-ins loudly,
/// no wrong checksum is ever answered, and the next power-on behaves the same (the store
/// was not modified).
#[test]
fn a_profiled_lazy_image_keeps_its_working_set_and_a_damaged_swap_page_fails_loudly() {
    let store = copy_store(&captured_lazy(), "test-app-profile.store");
    let first = inspect(&store);
    assert!(
        first["swap"]["verity"]["root"]
            .as_str()
            .is_some_and(|r| r.len() == 64),
        "no verity root in the header: {first}"
    );
    let expected = host_checksum();
    let restored = Regex::new(r"snapboot: @restored").unwrap();

    // Restore, serve the first request, re-capture from the restored system.
    let mut s = board_session("app", &store, &[]);
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap();
    ask(&mut s, "ping", "^pong ");
    s.send("recapture").unwrap();
    let done = Regex::new(r"snapboot: @(capture-done|capture-failed).*").unwrap();
    let profile =
        Regex::new(r"snapboot: @profile (\d+) pages .* (\d+) of these (\d+) pages kept").unwrap();
    let (line, _) = s
        .wait_for(
            &profile,
            "the profile of the re-capture",
            Duration::from_secs(180),
        )
        .unwrap();
    eprintln!("re-capture: {line}");
    let caps = profile.captures(&line).unwrap();
    let n = |i: usize| -> u64 { caps[i].parse().unwrap() };
    let (touched, kept, all) = (n(1), n(2), n(3));
    assert!(
        touched > 50,
        "the ping touched only {touched} swapped pages: {line}"
    );
    assert!(all >= touched && kept * 100 >= all * 95, "{line}");
    let (line, _) = s
        .wait_for(&done, "the re-capture", Duration::from_secs(180))
        .unwrap();
    assert!(line.contains("@capture-done"), "{line}");
    s.wait_exit(Duration::from_secs(60)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);

    // Right after the restore: the profile is resident, the rest is not.
    let mut s = board_session("app", &store, &[]);
    let resident = Regex::new(
        r"@profile-resident (\d+) of (\d+) profiled pages in memory; (\d+) of (\d+) other",
    )
    .unwrap();
    let (line, _) = s
        .wait_for(&resident, "profile residency", Duration::from_secs(120))
        .unwrap();
    eprintln!("restored: {line}");
    let n: Vec<u64> = resident
        .captures(&line)
        .unwrap()
        .iter()
        .skip(1)
        .map(|m| m.unwrap().as_str().parse().unwrap())
        .collect();
    let (p_in, p_all, o_in, o_all) = (n[0], n[1], n[2], n[3]);
    assert!(p_all >= touched && p_in * 100 >= p_all * 95, "{line}");
    let least = crate::common::at_test_scale(10_000);
    assert!(
        o_all > least && o_in * 100 <= o_all,
        "{line} (other pages: at least {least})"
    );
    s.wait_for(&restored, "restored marker", Duration::from_secs(60))
        .unwrap();
    check_restored_app(&mut s, 1, &expected);
    s.finish(boottrace::Outcome::Answered);

    // Damage: one byte in every 16th used page of the swap region.
    let (off, len, used) = swap_of(&store);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&store)
            .unwrap();
        for slot in (1..=used).step_by(16) {
            let at = off + slot * 4096 + 1000;
            let mut b = [0u8];
            f.read_exact_at(&mut b, at).unwrap();
            f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
        }
    }
    let damaged = region_hash(&store, off, len);
    let outcome = Regex::new(
        r"^checksum [0-9a-f]{64}$|verity: .*data block \d+ is corrupted|@poweroff|Kernel panic",
    )
    .unwrap();
    let corrupted = Regex::new(r"verity: .*data block \d+ is corrupted").unwrap();
    let sum = Regex::new(r"^checksum [0-9a-f]{64}$").unwrap();
    // One damaged power-on: the region is unchanged after it (checked below), so the next
    // one reads the same damaged bytes and fails the same way.
    {
        let boot = 0;
        let mut s = board_session("app", &store, &[]);
        s.wait_for(&restored, "restored marker", Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("damaged boot {boot}: {e}"));
        s.send("checksum").unwrap();
        let (line, _) = s
            .wait_for(
                &outcome,
                "checksum or a loud failure",
                Duration::from_secs(180),
            )
            .unwrap_or_else(|e| panic!("damaged boot {boot}: {e}"));
        eprintln!("damaged boot {boot}: {line}");
        assert!(
            !line.starts_with("checksum "),
            "damaged boot {boot} answered a checksum ({}) from a damaged swap region",
            if line == expected {
                "the right one, so no damaged page was read"
            } else {
                "a WRONG one"
            }
        );
        // The kernel names the bad block, and the checksum never comes.
        if !corrupted.is_match(&line) {
            s.wait_for(&corrupted, "dm-verity's report", Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("damaged boot {boot}: {e}"));
        }
        assert!(
            s.wait_for(&sum, "a checksum", Duration::from_secs(20))
                .is_err(),
            "damaged boot {boot} answered a checksum after the verity error"
        );
        s.finish(boottrace::Outcome::Answered);
        assert_eq!(
            region_hash(&store, off, len),
            damaged,
            "damaged boot {boot} modified the swap region"
        );
    }
}

/// Deferred memory: an image captured on a board that boots with 1 GiB of its
/// 3 GiB restores with the application's state intact, the other 2 GiB arrive after
/// `restored` even though the first attempt leaves them offline (the deadline check onlines
/// them), and the same image on a board with another boot memory is refused.
#[test]
fn deferred_memory_arrives_after_restore_and_a_wrong_boot_memory_is_refused() {
    let store = capture_app(
        "test-app-defer.store",
        &[
            "--mem",
            "1024M",
            "--max-mem",
            "3072M",
            "--cmdline",
            "snapboot.memfault=offline",
            "--cmdline",
            "snapboot.memdeadline=3",
        ],
    );
    let expected = host_checksum();
    let b = bundle::Bundle::load(&bundle("app")).unwrap();
    let board = |mem: u32| {
        let mut o = board::RunOptions::for_bundle(&b);
        o.mem_mib = mem;
        o.max_mem_mib = Some(3072);
        o.disks.push(board::run_options::Disk {
            path: store.clone(),
            readonly: false,
            sd: false,
        });
        o.cmdline.push("snapboot.store=/dev/vdb".into());
        board::qemu::Session::start(&b, &o).unwrap()
    };

    let mut s = board(1024);
    let restored = Regex::new(r"snapboot: @restored").unwrap();
    s.wait_for(&restored, "restored marker", Duration::from_secs(120))
        .unwrap();
    let memory = Regex::new(r"snapboot: @memory(-missing)? .*").unwrap();
    let (line, _) = s
        .wait_for(&memory, "the deferred memory", Duration::from_secs(60))
        .unwrap();
    eprintln!("{line}");
    assert!(line.contains("@memory 3072 of 3072 MiB online"), "{line}");
    assert!(
        line.contains("the first attempt missed its deadline: onlined"),
        "the broken first attempt was not repaired: {line}"
    );
    let total: u64 = Regex::new(r"MemTotal (\d+) MiB")
        .unwrap()
        .captures(&line)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal in {line}"));
    assert!(
        (2900..=3072).contains(&total),
        "MemTotal {total} MiB: {line}"
    );
    check_restored_app(&mut s, 1, &expected);
    s.finish(boottrace::Outcome::Answered);

    // The same image on a board that boots with more memory: refused, cold boot instead.
    let mut s = board(1152);
    let fb = Regex::new(r"snapboot: @fallback.*").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback", Duration::from_secs(120))
        .unwrap();
    assert!(line.contains("RAM size differs"), "{line}");
    s.finish(boottrace::Outcome::Ready);
}
