//! Encrypted images on the real board (`snapboot.encrypt=`): what a store shows of the
//! application's memory, restores with state intact, and every image the device key does
//! not authenticate refused with its reason and a cold boot. The board's TPM (`--tpm`), seen
//! by both kernels, holds a sealed device key.

use crate::common::{bundle, home, run, snapboot, store_session};
use crate::snapshot::{check_restored_app, copy_store, damage_newest_image, host_checksum};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the `app` program holds in memory, built at run time (guest/app/app.py).
const APP_SECRET: &[u8] = b"0123456789aabbccddeeff-snapboot-app-secret";

/// Whether the file at `path` holds `needle` anywhere (a sparse store reads its holes as
/// zeros, quickly).
fn file_holds(path: &Path, needle: &[u8]) -> bool {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; 8 << 20];
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return false;
        }
        let mut window = std::mem::take(&mut carry);
        window.extend_from_slice(&buf[..n]);
        if window.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        carry = window[window.len().saturating_sub(needle.len() - 1)..].to_vec();
    }
}

/// Whether the pages of `store`'s newest image, read back through the store (checked and
/// decompressed), hold `needle` anywhere.
fn image_holds(store: &Path, needle: &[u8]) -> bool {
    let s = ondevice::store::open_store(store, false).unwrap();
    let name = s.newest().unwrap().name.clone();
    let mut r = s.reader(&name).unwrap();
    let mut page = [0u8; flashstore::PAGE];
    let mut window: Vec<u8> = Vec::new();
    while r.next_page(&mut page).unwrap() {
        window.extend_from_slice(&page);
        if window.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
        window.drain(..window.len() - (needle.len() - 1));
    }
    false
}

/// The `app` bundle with a device key, built once for the tests of encrypted `app` images:
/// the bundle, and the key's id.
fn keyed_app() -> (PathBuf, String) {
    static BUILT: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let (key, id) = device_key("test-enc-app.key");
            (keyed_bundle("app", "app-enc", &key), id)
        })
        .clone()
}

/// A new device key file `name` in the test home; returns its path and key id.
fn device_key(name: &str) -> (PathBuf, String) {
    let path = home().join(name);
    let _ = std::fs::remove_file(&path);
    let mut c = snapboot();
    c.args(["key", "device"]).arg(&path);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "key device:\n{so}\n{se}");
    let id = so
        .split_whitespace()
        .nth(2)
        .map(|s| s.trim_end_matches(':').to_string())
        .unwrap_or_else(|| panic!("no key id in {so:?}"));
    (path, id)
}

/// Builds `workload` with the device key `key` into bundles/`name`.
fn keyed_bundle(workload: &str, name: &str, key: &Path) -> PathBuf {
    bundle(workload); // the kernel fetched and the device binary built by this test binary
    let out = home().join("bundles").join(name);
    let mut c = snapboot();
    c.args(["board", "build", "--workload", workload])
        .args(crate::common::test_settings(workload))
        .arg("--device-key")
        .arg(key)
        .arg("--out")
        .arg(&out);
    let (o, so, se) = run(c);
    assert!(o.status.success(), "build {name}:\n{so}\n{se}");
    out
}

/// The key id each image of `store` is encrypted with (`None`: in the clear).
fn encrypted_with(store: &Path) -> Vec<Option<String>> {
    let mut c = snapboot();
    c.args(["store", "ls", "--json"]).arg(store);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "store ls:\n{so}\n{se}");
    let v: serde_json::Value = serde_json::from_str(&so).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i["encrypted"].as_str().map(String::from))
        .collect()
}

/// Boots `bundle` on `store` with `extra` words and expects a refusal naming `reason`, and
/// the boot to go on cold with the status `fallback` (the app's cold start itself takes
/// minutes under TCG: other tests wait for it).
fn expect_refused(bundle: &Path, store: &Path, extra: &[&str], reason: &str) {
    let mut s = store_session(bundle, store, extra);
    let fb = Regex::new(r"snapboot: @fallback").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback marker", Duration::from_secs(120))
        .unwrap();
    assert!(line.contains(reason), "fallback {line:?} lacks {reason:?}");
    let status = Regex::new(r"snapboot: @status").unwrap();
    let (line, _) = s
        .wait_for(&status, "the boot's status", Duration::from_secs(120))
        .unwrap();
    assert!(line.contains("@status fallback"), "{line}");
    s.finish(boottrace::Outcome::Ready);
}

/// With a key file: the `app` image is encrypted (its secret, plain in a clear image's
/// pages, is in none of the encrypted store's bytes), restores with its state intact, and a
/// flipped ciphertext byte or an image in the clear is refused with the reason. The clear
/// image is the shared capture of the same `app` bundle.
#[test]
fn an_encrypted_app_image_hides_its_secret_restores_and_refuses_what_is_not_its_own() {
    // The clear image's pages as the kernel gave them (the store's LZ4 undone) hold the
    // secret; the encrypted store holds its pages uncompressed, so that the secret's absence
    // from its bytes is the encryption's doing: LZ4 may turn it into back-references (it did
    // once the image's other text changed), and then the check would mean nothing.
    let raw = ["--cmdline", "snapboot.compress=none"];
    let clear = copy_store(
        &crate::snapshot::captured("app"),
        "test-enc-app-clear.store",
    );
    assert!(
        image_holds(&clear, APP_SECRET),
        "the app's secret is not in a clear image's pages: the test would prove nothing"
    );
    let (b, id) = keyed_app();
    let store = home().join("test-enc-app.store");
    let _ = std::fs::remove_file(&store);
    crate::common::board_capture(&b, &store, &["--encrypt", "key", raw[0], raw[1]]);
    assert_eq!(encrypted_with(&store), vec![Some(id.clone())]);
    assert!(
        !file_holds(&store, APP_SECRET),
        "the app's secret is readable in the encrypted store"
    );

    let restored = Regex::new(r"snapboot: @restored").unwrap();
    let mut s = store_session(&b, &store, &["snapboot.encrypt=key"]);
    let (line, _) = s
        .wait_for(&restored, "restored marker", Duration::from_secs(180))
        .unwrap();
    check_restored_app(&mut s, 0, &host_checksum());
    s.finish(boottrace::Outcome::Answered);
    assert!(line.contains("restored"), "{line}");

    // A flipped ciphertext byte: the tag refuses the chunk.
    let bad = copy_store(&store, "test-enc-app-flipped.store");
    let chunk = damage_newest_image(&bad);
    expect_refused(
        &b,
        &bad,
        &["snapboot.encrypt=key"],
        &format!("chunk {chunk} (cluster"),
    );
    let _ = std::fs::remove_file(&bad);

    // The clear image on a device that encrypts: refused, not restored.
    expect_refused(
        &b,
        &clear,
        &["snapboot.encrypt=key"],
        "the image is not encrypted",
    );
    let _ = std::fs::remove_file(&clear);
}

/// A device that enforces signatures and encrypts: the factory image (signed on the host,
/// encrypted on the device) and the device's own unsigned re-capture (authenticated by its
/// key) restore; a re-capture under another device's key is refused, naming both keys, and
/// the factory image restores instead.
#[test]
fn a_signing_device_restores_its_own_encrypted_recapture_and_refuses_another_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = snapboot();
    c.args(["key", "gen"]).arg(dir.path().join("k"));
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}{se}");
    let (secret, public) = (dir.path().join("k.secret"), dir.path().join("k.pub"));
    let (key_a, id_a) = device_key("test-enc-sign-a.key");
    let (key_b, id_b) = device_key("test-enc-sign-b.key");
    bundle("shell");
    let build = |key: &Path, name: &str| {
        let out = dir.path().join(name);
        let mut c = snapboot();
        c.args(["board", "build", "--workload", "shell", "--image-key"])
            .arg(&public)
            .arg("--device-key")
            .arg(key)
            .arg("--out")
            .arg(&out);
        let (o, so, se) = run(c);
        assert!(o.status.success(), "build {name}:\n{so}\n{se}");
        out
    };
    let (a, b) = (build(&key_a, "a"), build(&key_b, "b"));
    let store = dir.path().join("s.store");
    let capture = |bundle: &Path, args: &[&str]| {
        let mut all = vec!["--encrypt", "key"];
        all.extend_from_slice(args);
        crate::common::board_capture(bundle, &store, &all)
    };
    let so = capture(
        &a,
        &[
            "--image",
            "factory",
            "--sign-key",
            secret.to_str().unwrap(),
            "--cmdline",
            "loglevel=4",
        ],
    );
    assert!(so.contains(", signed;"), "{so}");
    capture(&a, &["--image", "current", "--cmdline", "loglevel=5"]);
    assert_eq!(encrypted_with(&store), vec![Some(id_a.clone()); 2]);

    let on_a = ["snapboot.encrypt=key", "snapboot.image=current"];
    let (level, console) = crate::flash::restored_loglevel(&a, &store, &on_a);
    assert_eq!(level, "loglevel=5", "the device's own re-capture restores");
    assert!(
        console
            .iter()
            .any(|l| l.contains("@resume-loaded") && l.contains("encrypted with the device key")),
        "{console:#?}"
    );

    // Another device's key writes `current`: refused by key, the factory image restores.
    capture(&b, &["--image", "current", "--cmdline", "loglevel=6"]);
    let (level, console) = crate::flash::restored_loglevel(&a, &store, &on_a);
    assert_eq!(level, "loglevel=4", "the factory image restores instead");
    let want = format!("is encrypted with device key {id_b}, this device's key is {id_a}");
    assert!(
        console
            .iter()
            .any(|l| l.contains("@image-refused") && l.contains("current:") && l.contains(&want)),
        "{console:#?}"
    );
}

/// An encrypted lazy `app` image: its swap region, which holds most of the app's memory,
/// reaches the store encrypted with the image's swap key (the secret is nowhere in the
/// store), and the restored app pages its state back in through dm-crypt intact.
#[test]
fn an_encrypted_lazy_app_image_hides_its_swap_region_and_restores() {
    let (b, id) = keyed_app();
    let store = home().join("test-enc-lazy.store");
    let _ = std::fs::remove_file(&store);
    // Uncompressed, so that the secret's absence is the encryption's doing, not LZ4's.
    crate::common::board_capture(
        &b,
        &store,
        &[
            "--encrypt",
            "key",
            "--lazy",
            "--cmdline",
            "snapboot.compress=none",
        ],
    );
    assert_eq!(encrypted_with(&store), vec![Some(id)]);
    assert!(
        !file_holds(&store, APP_SECRET),
        "the app's secret is readable in the encrypted lazy store"
    );

    let restored = Regex::new(r"snapboot: @restored").unwrap();
    let mut s = store_session(&b, &store, &["snapboot.encrypt=key"]);
    s.wait_for(&restored, "restored marker", Duration::from_secs(180))
        .unwrap();
    check_restored_app(&mut s, 0, &host_checksum());
    s.finish(boottrace::Outcome::Answered);
}

/// `board run` of `bundle` on `store` with the TPM in `tpm` and `snapboot.encrypt=tpm`, on
/// the restore kernel, with `probe` (`--probe` and its words); returns its console and
/// timeline as printed.
fn run_with_tpm(bundle: &Path, store: &Path, tpm: &Path, probe: &[&str]) -> String {
    let mut c = snapboot();
    c.args(["board", "run"])
        .arg(bundle)
        .arg("--store")
        .arg(store)
        .arg("--tpm")
        .arg(tpm)
        .args(["--encrypt", "tpm", "--console"])
        .args(probe);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}\n{se}");
    so
}

/// The `@fallback` line of a console: every image was refused.
fn fallback_of(console: &str) -> &str {
    console
        .lines()
        .find(|l| l.contains("@fallback"))
        .unwrap_or_else(|| panic!("no fallback:\n{console}"))
}

/// The rollback counter and value a capture's console says it stamped its image with.
fn rollback_stamp(console: &str) -> (String, u64) {
    let at = console
        .split_once(", rollback counter ")
        .unwrap_or_else(|| panic!("no rollback counter in the capture:\n{console}"))
        .1;
    let mut words = at.split([' ', ',', '\n']);
    let counter = words.next().unwrap().to_string();
    assert_eq!(words.next(), Some("at"), "{at}");
    (counter, words.next().unwrap().trim().parse().unwrap())
}

/// The probe line of the TPM driver, the stock kernel's and the restore kernel's alike.
const TPM2_PROBED: &str = "tpm_tis MSFT0101:00: 2.0 TPM";

/// The board's TPM (`--tpm DIR`) and a key sealed to it. Both kernels of the PC see a TPM
/// 2.0: the stock kernel in the capture boot (its ACPI tables intact), the restore kernel
/// before it restores, and the restored system has `/dev/tpmrm0`; the TPM's state is kept
/// in DIR. The image restores on the restore kernel with that TPM; on a board with another
/// TPM (cleared, replaced, the store moved) it is refused with the TPM's reason and the
/// board boots cold; the next capture there makes a new key, sealed to the new TPM, which
/// replaces the store's key slot, and its image restores. An older copy of the store written
/// back after a newer capture is refused as a rollback (the TPM's counter moved past it).
#[test]
fn both_kernels_see_the_tpm_and_a_key_sealed_to_it_restores_there_only_and_a_new_tpm_gets_a_new_key(
) {
    crate::restore_kernel::restore_kernel(); // a snapshot boot then restores with it
    let b = bundle("shell");
    let dir = tempfile::tempdir_in(home()).unwrap();
    let (tpm_a, tpm_b) = (dir.path().join("tpm-a"), dir.path().join("tpm-b"));
    let store = dir.path().join("s.store");
    let capture = |tpm: &Path| {
        let t = tpm.to_str().unwrap();
        crate::common::board_capture(&b, &store, &["--tpm", t, "--encrypt", "tpm", "--console"])
    };
    let first_capture = capture(&tpm_a);
    let so = first_capture.as_str();
    assert!(so.contains("encrypted with new device key"), "{so}");
    assert!(
        so.contains(TPM2_PROBED),
        "the stock kernel saw no TPM:\n{so}"
    );
    assert!(
        !so.contains("Invalid table length"),
        "the capture boot's ACPI tables were overwritten:\n{so}"
    );
    assert!(
        tpm_a.join("tpm2-00.permall").is_file(),
        "swtpm keeps the TPM's state in DIR"
    );
    let first = encrypted_with(&store);
    let Some(Some(id_a)) = first.first().cloned() else {
        panic!("not encrypted: {first:?}");
    };
    let tpmrm = ["--probe", "ls /dev/tpmrm0", "--expect", "^/dev/tpmrm0$"];
    let so = run_with_tpm(&b, &store, &tpm_a, &tpmrm);
    let restore = so
        .split_once("-snapboot-restore")
        .unwrap_or_else(|| panic!("not the restore kernel:\n{so}"))
        .1;
    let (before, after) = restore
        .split_once("snapboot: @restored")
        .unwrap_or_else(|| panic!("not restored:\n{so}"));
    assert!(
        before.contains(TPM2_PROBED),
        "the restore kernel saw no TPM:\n{so}"
    );
    assert!(
        restore.contains("encrypted with the device key"),
        "not restored by the restore kernel with the TPM's key:\n{so}"
    );
    assert!(after.contains("probe_answered"), "{so}");

    // Rollback protection (on by default with a TPM-sealed key): a copy of the store taken
    // now, written back after a newer capture, is refused as a rollback and boots cold.
    let older = dir.path().join("older.store");
    let cp = |from: &Path, to: &Path| {
        let st = std::process::Command::new("cp")
            .args(["--sparse=always", "-f"])
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(st.success());
    };
    cp(&store, &older);
    let (counter, old_value) = rollback_stamp(&first_capture);
    let so = capture(&tpm_a);
    let (again, new_value) = rollback_stamp(&so);
    assert_eq!(counter, again, "one image name, one counter");
    assert!(new_value > old_value, "{old_value} then {new_value}");
    cp(&older, &store);
    let so = run_with_tpm(&b, &store, &tpm_a, &["--probe"]);
    let fallback = fallback_of(&so);
    assert!(
        fallback.contains(&format!(
            "rollback: the image was captured at {counter} value {old_value}, and this \
             device's TPM counter is at {new_value}"
        )),
        "{fallback}"
    );
    assert!(!so.contains("snapboot: @restored"), "{so}");
    cp(&older, &store);

    // Another TPM: the key does not unseal; every image refused with why; a cold boot.
    let so = run_with_tpm(&b, &store, &tpm_b, &["--probe"]);
    let fallback = fallback_of(&so);
    assert!(
        fallback.contains(&format!(
            "this TPM cannot unseal the store's device key {id_a}"
        )) && fallback.contains("sealed by another TPM"),
        "{fallback}"
    );
    assert!(!so.contains("snapboot: @restored"), "{so}");

    // The capture on the new TPM makes a new key and replaces the slot.
    let so = capture(&tpm_b);
    assert!(
        so.contains("which this TPM cannot unseal") && so.contains(&id_a),
        "the new key does not say it replaces {id_a}:\n{so}"
    );
    let Some(Some(id_b)) = encrypted_with(&store).first().cloned() else {
        panic!("not encrypted");
    };
    assert_ne!(id_a, id_b);
    let s = ondevice::store::open_store(&store, false).unwrap();
    let slots: Vec<String> = s.key_slots().iter().map(|k| k.id.to_string()).collect();
    assert_eq!(slots, vec![id_b.clone()]);
    drop(s);
    let so = run_with_tpm(&b, &store, &tpm_b, &["--probe"]);
    assert!(so.contains("snapboot: @restored"), "{so}");
}
