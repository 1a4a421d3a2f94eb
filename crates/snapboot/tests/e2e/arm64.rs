//! End-to-end tests on the arm64 board (QEMU `virt`, powered on into U-Boot, which boots the
//! partitioned boot disk): capture and restore on Debian's arm64 kernel and on the arm64
//! restore kernel, and the refusals that must end in a cold boot with the reason.

use crate::common::{board_capture, home, kernel_fetched, run, snapboot, store_options, OnceByKey};
use crate::snapshot::{
    assert_all_differ, check_restored_app, copy_store, damage_newest_image, host_checksum,
    host_checksum_at, region_hash, rewrite_description, rewrite_identity, swap_of,
};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Runs `scripts/NAME` once per test binary (`done` keeps that), failing with `what`.
fn script_once(done: &'static OnceLock<()>, name: &str, what: &str) {
    done.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts")
            .join(name);
        let (out, so, se) = run(Command::new(script));
        assert!(out.status.success(), "{what}:\n{so}\n{se}");
    });
}

/// The arm64 device binary, cross-built once per test binary from the code under test.
fn device_binary_built() {
    static DONE: OnceLock<()> = OnceLock::new();
    script_once(&DONE, "device-arm64.sh", "cross-building snapboot-device");
}

/// The arm64 bundle of `workload`, built once by this test binary.
pub(crate) fn arm64_bundle(workload: &str) -> PathBuf {
    static BUILT: OnceByKey<PathBuf> = OnceByKey::new();
    BUILT.get(workload, || {
        device_binary_built();
        kernel_fetched("arm64", "kernel-arm64.json");
        let dir = crate::common::test_bundle_dir(
            workload,
            home().join("bundles").join("arm64").join(workload),
        );
        let mut c = snapboot();
        c.args(["board", "build", "--workload", workload, "--arch", "arm64"])
            .args(crate::common::test_settings(workload))
            .arg("--out")
            .arg(&dir);
        let (out, so, se) = run(c);
        assert!(out.status.success(), "arm64 build failed:\n{so}\n{se}");
        dir
    })
}

/// The arm64 restore kernel, built once (minutes on a fresh machine, then cached).
fn arm64_restore_kernel() -> PathBuf {
    static K: OnceLock<PathBuf> = OnceLock::new();
    K.get_or_init(|| {
        arm64_bundle("shell");
        let mut c = snapboot();
        c.args(["board", "restore-kernel", "--arch", "arm64"]);
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "restore-kernel --arch arm64 failed:\n{so}\n{se}"
        );
        let path = so
            .lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix("Image ")
                    .or_else(|| l.strip_prefix("vmlinux "))
            })
            .and_then(|rest| rest.split(" (").next())
            .unwrap_or_else(|| panic!("no kernel line in:\n{so}"));
        PathBuf::from(path)
    })
    .clone()
}

/// Captures `workload` on the arm64 board once; returns the store.
fn captured(workload: &str) -> PathBuf {
    static STORES: OnceByKey<PathBuf> = OnceByKey::new();
    STORES.get(workload, || {
        let b = arm64_bundle(workload);
        let store = home().join(format!("test-arm64-{workload}.store"));
        let _ = std::fs::remove_file(&store);
        let so = board_capture(&b, &store, &[]);
        assert!(so.contains("image current generation 2"), "{so}");
        store
    })
}

/// Powers on the arm64 `workload` with `store` as its second disk.
fn session(
    workload: &str,
    store: &Path,
    restore_kernel: bool,
    mem_extra: u32,
) -> board::qemu::Session {
    let b = bundle::Bundle::load(&arm64_bundle(workload)).unwrap();
    assert_eq!(b.kernel.arch, guestarch::Arch::Arm64);
    let mut o = store_options(&b, store);
    if restore_kernel {
        o.kernel = board::run_options::KernelImage::Restore(arm64_restore_kernel());
    }
    o.mem_mib += mem_extra;
    board::qemu::Session::start(&b, &o).unwrap()
}

fn expect(s: &mut board::qemu::Session, pattern: &str, what: &str) -> String {
    let re = Regex::new(pattern).unwrap();
    s.wait_for(&re, what, Duration::from_secs(180))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .0
}

/// The arm64 `app` image restores through U-Boot, on the stock kernel and then on the
/// restore kernel (the same image twice in a row), with the application's state intact, its
/// clock current and its RNG fresh.
#[test]
fn arm64_app_restores_on_the_stock_and_the_restore_kernel() {
    let store = copy_store(&captured("app"), "test-arm64-app-restores.store");
    let expected = host_checksum();
    let mut randoms = Vec::new();
    for (boot, rk) in [false, true].into_iter().enumerate() {
        let mut s = session("app", &store, rk, 0);
        expect(&mut s, r"U-Boot 20\d\d", "U-Boot's banner");
        let banner = expect(&mut s, r"Linux version \S+", "kernel banner");
        assert_eq!(
            banner.contains("snapboot-restore"),
            rk,
            "boot {boot} booted the wrong kernel: {banner}"
        );
        expect(&mut s, r"snapboot: @restored", "restored marker");
        randoms.push(check_restored_app(&mut s, boot, &expected));
        s.finish(boottrace::Outcome::Answered);
    }
    assert_all_differ(randoms);
}

/// Runs the arm64 shell on `store` and expects a refusal naming `reason`, then a cold boot
/// that reaches ready (on the restore kernel: handed to the stock kernel first).
fn expect_fallback(store: &Path, restore_kernel: bool, mem_extra: u32, reason: &str) {
    let mut s = session("shell", store, restore_kernel, mem_extra);
    let line = expect(&mut s, r"snapboot: @fallback", "fallback marker");
    assert!(line.contains(reason), "fallback {line:?} lacks {reason:?}");
    if restore_kernel {
        expect(
            &mut s,
            r"snapboot: @handover",
            "hand-over to the stock kernel",
        );
    }
    stock_boots_cold(s, restore_kernel);
}

/// The stock kernel of a fallback boots cold to ready (`banner`: its banner is still to
/// come).
fn stock_boots_cold(mut s: board::qemu::Session, banner: bool) {
    if banner {
        expect(
            &mut s,
            r"Linux version 6\.1\.\S+-arm64 ",
            "stock kernel banner",
        );
    }
    expect(&mut s, r"snapboot: @ready", "the cold boot reaching ready");
    s.finish(boottrace::Outcome::Ready);
}

/// An image whose kernel build differs (the uts version arm64 compares, recorded in the
/// image's identity) is refused before any page is written, on both kernels.
#[test]
fn arm64_image_of_another_kernel_build_is_refused_and_boots_cold() {
    let bad = copy_store(&captured("shell"), "test-arm64-foreign.store");
    rewrite_version(&bad);
    expect_fallback(&bad, false, 0, "kernel version differs");
    expect_fallback(&bad, true, 0, "kernel version differs");
}

#[test]
fn arm64_other_ram_size_is_refused_and_boots_cold() {
    let copy = copy_store(&captured("shell"), "test-arm64-ram.store");
    expect_fallback(&copy, false, 128, "differs");
}

/// Rewrites the newest image's description as if another build of the same release had
/// captured it (`uname -v` differs).
fn rewrite_version(store: &Path) {
    rewrite_identity(store, |id| {
        assert!(id.version.starts_with("#1 "), "{id:?}");
        id.version.replace_range(0..2, "#2");
    });
}

/// A lazy image on the arm64 board (zram, dm-snapshot, dm-verity over the store's swap
/// region): it restores through U-Boot with the application's state intact; with bytes of
/// its swap region flipped, dm-verity fails the page-ins loudly and no checksum is answered.
#[test]
fn arm64_lazy_image_restores_and_a_flipped_swap_byte_fails_loudly() {
    let b = arm64_bundle("app");
    let store = home().join("test-arm64-app-lazy.store");
    let _ = std::fs::remove_file(&store);
    board_capture(&b, &store, &["--lazy"]);
    let (off, len, used) = swap_of(&store);
    let least = crate::common::at_test_scale(1000);
    assert!(
        used > least,
        "the lazy image swapped out only {used} pages (at least {least})"
    );
    let expected = host_checksum();

    let mut s = session("app", &store, false, 0);
    expect(&mut s, r"snapboot: @restored", "restored marker");
    check_restored_app(&mut s, 0, &expected);
    s.finish(boottrace::Outcome::Answered);
    let pristine = region_hash(&store, off, len);

    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&store)
            .unwrap();
        for slot in (1..=used).step_by(16) {
            let at = off + slot * 4096 + 1000;
            let mut byte = [0u8];
            f.read_exact_at(&mut byte, at).unwrap();
            f.write_all_at(&[byte[0] ^ 0x5a], at).unwrap();
        }
    }
    assert_ne!(region_hash(&store, off, len), pristine);
    let mut s = session("app", &store, false, 0);
    expect(&mut s, r"snapboot: @restored", "restored marker");
    s.send("checksum").unwrap();
    let outcome = Regex::new(
        r"^checksum [0-9a-f]{64}$|verity: .*data block \d+ is corrupted|@poweroff|Kernel panic",
    )
    .unwrap();
    let (line, _) = s
        .wait_for(
            &outcome,
            "checksum or a loud failure",
            Duration::from_secs(180),
        )
        .unwrap();
    assert!(
        !line.starts_with("checksum "),
        "a damaged swap region answered a checksum: {line}"
    );
    let sum = Regex::new(r"^checksum [0-9a-f]{64}$").unwrap();
    assert!(
        s.wait_for(&sum, "a checksum", Duration::from_secs(20))
            .is_err(),
        "a checksum came after the failure {line:?}"
    );
    s.finish(boottrace::Outcome::Answered);
}

/// Deferred memory on the arm64 board: captured booting with 512 MiB of 768, restored by the
/// restore kernel and then by the restorer, the other 256 MiB arrive after `restored`.
#[test]
fn arm64_deferred_memory_arrives_after_restore_on_the_restore_kernel_and_the_restorer() {
    let b = bundle::Bundle::load(&arm64_bundle("shell")).unwrap();
    let store = home().join("test-arm64-defer.store");
    let _ = std::fs::remove_file(&store);
    board_capture(
        &b.dir,
        &store,
        &["--arch", "arm64", "--mem", "512M", "--max-mem", "768M"],
    );
    let mut o = store_options(&b, &store);
    o.kernel = board::run_options::KernelImage::Restore(arm64_restore_kernel());
    o.mem_mib = 512;
    o.max_mem_mib = Some(768);
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(&mut s, r"snapboot: @restored", "restored marker");
    let line = expect(&mut s, r"snapboot: @memory ", "deferred memory online");
    assert!(line.contains("768 of 768 MiB online"), "{line}");
    s.finish(boottrace::Outcome::Answered);
    // The same image from the restorer U-Boot starts: it places the pages in the boot
    // RAM the device tree names, and the rest arrives after the restore as above.
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    o.mem_mib = 512;
    o.max_mem_mib = Some(768);
    let o = board::restorer_boot::restorer_options(&b, &o, &arm64_restorer(), &store)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(
        &mut s,
        r"snapboot-restorer: .*entering the image",
        "the restorer entering the image",
    );
    expect(&mut s, r"snapboot: @restored", "restored marker");
    let line = expect(&mut s, r"snapboot: @memory ", "deferred memory online");
    assert!(line.contains("768 of 768 MiB online"), "{line}");
    s.finish(boottrace::Outcome::Answered);
}

/// The `debian` workload on the arm64 board: a Debian arm64 root built by mmdebstrap from
/// Debian's arm64 packages (configured under qemu-user), snapboot installed from its arm64
/// package with apt, the initramfs made by the root's initramfs-tools; U-Boot boots the
/// stock kernel. Captured by the systemd unit with a data disk attached but not mounted,
/// restored once on the stock kernel: the service's state intact, its clock current,
/// systemd `running`, and `snapboot status` saying `restored` on the data partition it
/// mounted after the restore. (A damaged image's refusal and the cold boot after it, with
/// `snapboot status` saying `fallback`, are the x86 `debian` test's: the same code on both
/// boards, and an arm64 Debian cold boot costs CI minutes; the arm64 board's refusals and
/// cold boots are its `shell` tests'.)
#[test]
fn arm64_debian_restores_on_the_stock_kernel() {
    let b = bundle::Bundle::load(&arm64_bundle("debian")).unwrap();
    assert_eq!(b.kernel.arch, guestarch::Arch::Arm64);
    let data = crate::debian::data_disk("test-arm64-debian-data.img");
    let store = home().join("test-arm64-debian.store");
    let _ = std::fs::remove_file(&store);
    let so = board_capture(&b.dir, &store, &["--disk", data.to_str().unwrap()]);
    assert!(so.contains("image current generation 2"), "{so}");
    let counted = Regex::new(crate::debian::DATA_LINE).unwrap();
    let session = |store: &Path| {
        let o = crate::debian::data_options(&b, store, &data);
        board::qemu::Session::start(&b, &o).unwrap()
    };

    let mut s = session(&store);
    expect(&mut s, r"U-Boot 20\d\d", "U-Boot's banner");
    let line = expect(&mut s, r"snapboot: @restored .*", "restored marker");
    assert!(
        line.contains(ondevice::after_restore::TARGET_STARTING),
        "{line}"
    );
    let line = expect(
        &mut s,
        crate::debian::DATA_LINE,
        "the data partition's count",
    );
    let c = counted.captures(&line).unwrap();
    assert_eq!(
        (&c[1], &c[2], &c[3]),
        ("/dev/vdc", "1", "restored"),
        "{line}"
    );
    let expected = host_checksum_at(bundle::debian::APP_SCALE);
    check_restored_app(&mut s, 1, &expected);
    crate::debian::check_system(&mut s, "restore on the stock kernel");
    s.finish(boottrace::Outcome::Answered);
}

/// Where the boot disk's U-Boot request partition (`ubootenv`) starts, in bytes.
fn request_offset(disk: &Path) -> usize {
    let (out, so, se) = run({
        let mut c = Command::new("sfdisk");
        c.arg("--json").arg(disk);
        c
    });
    assert!(out.status.success(), "sfdisk --json: {se}");
    let table: serde_json::Value = serde_json::from_str(&so).unwrap();
    let n = board::bootdisk::ENV_PARTITION_NUMBER as usize;
    let part = &table["partitiontable"]["partitions"][n - 1];
    assert_eq!(part["name"], board::bootdisk::ENV_PARTITION_NAME, "{part}");
    usize::try_from(part["start"].as_u64().unwrap() * 512).unwrap()
}

/// The bytes of the boot disk's U-Boot request area.
fn request_area(disk: &Path) -> Vec<u8> {
    let at = request_offset(disk);
    let data = std::fs::read(disk).unwrap();
    data[at..at + devinstall::bootloader::uboot::AREA_BYTES].to_vec()
}

/// What U-Boot says when `env import -c` finds a damaged environment.
const BAD_CRC: &str = "bad CRC, import failed";

/// What U-Boot said of the request area on the session's console so far: [`BAD_CRC`], or
/// its warning for a variable `env import` was asked for and did not find. A normal boot
/// says neither.
fn env_complaints(s: &board::qemu::Session) -> Vec<String> {
    let warning = format!("'{}' neither", devinstall::bootloader::uboot::ONCE_VAR);
    s.timeline()
        .lines
        .iter()
        .filter(|l| l.text.contains(BAD_CRC) || l.text.contains(&warning))
        .map(|l| l.text.clone())
        .collect()
}

/// A device on U-Boot asks for its own capture, as it would in the field: booted normally
/// with no image (cold), `snapboot capture --next-boot` writes the request to the boot disk's
/// `ubootenv` partition; the next power-on U-Boot's boot script clears it and boots the
/// capture entry once, which captures; the power-on after that takes the normal entry again
/// and restores the capture boot's system. A damaged image on the normal entry (the stock
/// kernel) is refused naming the damaged chunk and boots cold to ready: the arm64 board's
/// test of a corrupt image. The request area is a valid environment without the request before and
/// after (U-Boot imports it in silence); a damaged one is reported by U-Boot and the boot
/// goes on normally.
#[test]
fn arm64_uboot_boots_the_capture_entry_once_when_the_device_asks() {
    let b = bundle::Bundle::load(&arm64_bundle("shell")).unwrap();
    let store = home().join("test-arm64-next-boot.store");
    let disk = home().join("test-arm64-next-boot.bootdisk.img");
    let _ = std::fs::remove_file(&disk);
    let mut o = store_options(&b, &store);
    board::capture::create_store(
        &store,
        board::capture::store_size(o.mem_mib),
        flashstore::ChunkCheck::Xxh3,
    )
    .unwrap();
    o.boot_disk = Some(disk.clone());
    let ready = r"snapboot: @ready";

    // 1. Normal boot, no image: cold; the device asks for a capture on its next boot.
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(&mut s, ready, "the cold boot reaching ready");
    s.send("/run/snapboot/bin/snapboot capture --next-boot; echo next-boot-status-$?")
        .unwrap();
    let answer = expect(
        &mut s,
        r"next-boot-status-\d+",
        "capture --next-boot's status",
    );
    assert!(answer.ends_with("status-0"), "{answer}");
    let said = env_complaints(&s);
    assert!(
        said.is_empty(),
        "the new disk's request area is not an environment: {said:?}"
    );
    s.send("reboot -f").unwrap();
    s.wait_exit(Duration::from_secs(60)).unwrap();
    s.finish(boottrace::Outcome::Ready);
    assert!(
        devinstall::bootloader::uboot::requested(&request_area(&disk)),
        "no request in the ubootenv partition"
    );

    // 2. U-Boot clears the request and boots the capture entry, which captures.
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(
        &mut s,
        r"snapboot: a capture was asked for",
        "boot.scr taking the request",
    );
    let line = expect(&mut s, r"snapboot: @capture-(done|failed)", "the capture");
    assert!(line.contains("@capture-done"), "{line}");
    s.wait_exit(Duration::from_secs(60)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);
    let area = request_area(&disk);
    let env = board::uboot::Env::from_area(&area, area.len());
    assert!(
        env.as_ref().is_ok_and(|e| e.is_empty()),
        "the capture boot left no empty environment: {env:?}"
    );

    // 3. The normal entry again: it restores the capture boot's system.
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(&mut s, r"snapboot: @restored", "restored marker");
    s.send("echo cmdline-$(grep -c snapboot.capture /proc/cmdline)")
        .unwrap();
    let answer = expect(&mut s, r"^cmdline-\d", "the restored system's command line");
    assert_eq!(answer, "cmdline-1", "not the capture boot's system");
    let said = env_complaints(&s);
    assert!(
        said.is_empty(),
        "the cleared request area is not an environment: {said:?}"
    );
    s.finish(boottrace::Outcome::Answered);

    // 4. A damaged image on the normal entry: refused with the reason, cold boot; a damaged
    // request area on the same power-on: U-Boot says so and boots the normal entry.
    let chunk = damage_newest_image(&store);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&disk).unwrap();
        f.seek(SeekFrom::Start(request_offset(&disk) as u64 + 100))
            .unwrap();
        f.write_all(b"damaged").unwrap();
    }
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    expect(&mut s, BAD_CRC, "U-Boot reporting the damaged request area");
    let line = expect(&mut s, r"snapboot: @fallback", "fallback marker");
    let reason = format!("checksum mismatch in chunk {chunk}");
    assert!(line.contains(&reason), "fallback {line:?} lacks {reason:?}");
    expect(&mut s, ready, "the cold boot reaching ready");
    s.finish(boottrace::Outcome::Ready);
}

/// Builds the arm64 restorer once (`scripts/restorer.sh efi-arm64`) and returns its PE file.
fn arm64_restorer() -> PathBuf {
    static EFI: OnceLock<PathBuf> = OnceLock::new();
    EFI.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/restorer.sh");
        let mut c = Command::new(script);
        c.arg("efi-arm64");
        let (out, so, se) = run(c);
        assert!(
            out.status.success(),
            "arm64 restorer build failed:\n{so}\n{se}"
        );
        PathBuf::from(so.trim())
    })
    .clone()
}

/// Powers on the arm64 `workload` whose boot script starts the restorer first (U-Boot's
/// `bootefi`), on `store`, with `mem_extra` MiB more RAM than the capture had.
fn restorer_session(workload: &str, store: &Path, mem_extra: u32) -> board::qemu::Session {
    restorer_session_on(workload, store, mem_extra, 1)
}

/// [`restorer_session`] on a board of `cpus` CPUs.
fn restorer_session_on(
    workload: &str,
    store: &Path,
    mem_extra: u32,
    cpus: u32,
) -> board::qemu::Session {
    let b = bundle::Bundle::load(&arm64_bundle(workload)).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.timeout = Duration::from_secs(300);
    o.mem_mib += mem_extra;
    o.smp = cpus;
    let o = board::restorer_boot::restorer_options(&b, &o, &arm64_restorer(), store)
        .unwrap_or_else(|e| panic!("{e}"));
    board::qemu::Session::start(&b, &o).unwrap()
}

/// Restores of one arm64 `app` image in a row from the restorer U-Boot starts (2, or
/// SNAPBOOT_ARM64_RESTORER_ROUNDS; `make soak` runs 20), no kernel booting before the
/// image: each with the application's state, its clock current (the timer), its RNG fresh,
/// answered over the console and its disk, and the restorer's phases on the console.
#[test]
fn arm64_restorer_restores_the_app_repeatedly_with_state_clock_and_rng() {
    let rounds: usize = std::env::var("SNAPBOOT_ARM64_RESTORER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let store = copy_store(&captured("app"), "test-arm64-restorer-app.store");
    let expected = host_checksum();
    let mut randoms = Vec::new();
    for boot in 0..rounds {
        let mut s = restorer_session("app", &store, 0);
        expect(&mut s, r"U-Boot 20\d\d", "U-Boot's banner");
        expect(
            &mut s,
            r"snapboot-restorer: image checked: current",
            "the restorer's checks",
        );
        let entered = expect(
            &mut s,
            r"snapboot-restorer: .*entering the image at 0x[0-9a-f]+",
            "the restorer entering the image",
        );
        let t = crate::restore_kernel::throughput_of(&mut s);
        assert_eq!(t.workers, 1, "restore {boot}: one CPU: {t:?}");
        expect(&mut s, r"snapboot: @restored", "restored marker");
        randoms.push(check_restored_app(&mut s, boot, &expected));
        let tl = s.finish(boottrace::Outcome::Answered);
        assert!(
            !tl.lines.iter().any(|l| l.text.contains("Starting kernel")),
            "restore {boot}: U-Boot booted a kernel before the image ({entered})"
        );
    }
    assert_all_differ(randoms);
}

/// The restorer decodes on both CPUs of a 2-CPU board: a `shell` image captured on 2 CPUs
/// (its kernel's second CPU then off, as the image kernel expects it at a restore) is
/// restored by the restorer, which starts the other CPU by PSCI `CPU_ON` and has it
/// unpack chunks beside the boot CPU (its throughput line says 2 CPUs decoded); the CPU is
/// off again when the image is entered, and the image kernel brings it back online itself.
#[test]
fn arm64_restorer_decodes_on_both_cpus_of_a_two_cpu_board() {
    let b = arm64_bundle("shell");
    let store = home().join("test-arm64-restorer-smp2.store");
    let _ = std::fs::remove_file(&store);
    board_capture(&b, &store, &["--smp", "2"]);
    let mut s = restorer_session_on("shell", &store, 0, 2);
    expect(
        &mut s,
        r"snapboot-restorer: .*entering the image at 0x[0-9a-f]+",
        "the restorer entering the image",
    );
    let t = crate::restore_kernel::throughput_of(&mut s);
    assert_eq!(t.workers, 2, "both CPUs decode: {t:?}");
    expect(&mut s, r"snapboot: @restored", "restored marker");
    s.send("cat /sys/devices/system/cpu/online\n").unwrap();
    expect(&mut s, r"^0-1\s*$", "both CPUs online after the restore");
    s.finish(boottrace::Outcome::Answered);
}

/// Runs the arm64 shell with the restorer on `store` and expects it to refuse naming
/// `reason`, return to U-Boot's script, and the stock kernel to boot cold to ready.
fn expect_restorer_refusal(store: &Path, mem_extra: u32, reason: &str) {
    expect_restorer_refusal_on(store, mem_extra, 1, reason);
}

/// [`expect_restorer_refusal`] on a board of `cpus` CPUs.
fn expect_restorer_refusal_on(store: &Path, mem_extra: u32, cpus: u32, reason: &str) {
    let mut s = restorer_session_on("shell", store, mem_extra, cpus);
    let line = expect(
        &mut s,
        r"snapboot-restorer: refused: .*",
        "the restorer's refusal",
    );
    assert!(line.contains(reason), "refusal {line:?} lacks {reason:?}");
    expect(
        &mut s,
        r"snapboot: the restorer did not restore: booting the stock kernel",
        "the boot script's fallback",
    );
    stock_boots_cold(s, true);
}

/// The restorer refuses, before any page is written, a damaged image, an image of another
/// kernel build, one captured with another RAM size, one captured under another boot
/// path (a kernel QEMU loaded directly, no U-Boot: the description says how the image
/// kernel was booted) and one captured on 1 CPU restored on a board of 2 (restored so on
/// any path, the image kernel hung after restarting its tasks); each boots cold with the
/// reason.
#[test]
fn arm64_restorer_refuses_damaged_foreign_wrong_ram_and_other_boot_path_images() {
    let damaged = copy_store(&captured("shell"), "test-arm64-restorer-bad.store");
    let chunk = damage_newest_image(&damaged);
    expect_restorer_refusal(&damaged, 0, &format!("chunk {chunk}"));
    let foreign = copy_store(&captured("shell"), "test-arm64-restorer-foreign.store");
    rewrite_version(&foreign);
    expect_restorer_refusal(&foreign, 0, "kernel version differs");
    let ram = copy_store(&captured("shell"), "test-arm64-restorer-ram.store");
    expect_restorer_refusal(&ram, 128, "differs");
    let direct = copy_store(&captured("shell"), "test-arm64-restorer-path.store");
    rewrite_description(&direct, |d| {
        let path = d.boot_path.as_deref().unwrap_or("none");
        assert!(
            path.starts_with("U-Boot 20") && path.ends_with(", booti"),
            "{path}"
        );
        d.boot_path = Some("no U-Boot, direct".into());
    });
    expect_restorer_refusal(
        &direct,
        0,
        "captured under another boot path: no U-Boot, direct; this boot: U-Boot 20",
    );
    let more = copy_store(&captured("shell"), "test-arm64-restorer-cpus.store");
    expect_restorer_refusal_on(
        &more,
        0,
        2,
        "captured with 1 CPU(s) online and this arm64 machine has 2",
    );
}

/// Builds the arm64 board's U-Boot with SD card support once (`scripts/u-boot-mmc.sh`:
/// Debian's source, cached under the snapboot home).
fn u_boot_mmc_built() {
    static DONE: OnceLock<()> = OnceLock::new();
    script_once(&DONE, "u-boot-mmc.sh", "building U-Boot with MMC");
}

/// The store on an SD card (`--store-on sd`: QEMU's `sdhci-pci` with an `sd-card`, the
/// kernel's `/dev/mmcblk0`, found by its label): the stock kernel captures onto it, then
/// the restorer, which has no SD driver of its own, reads the image through U-Boot's MMC
/// driver (EFI Block I/O) and restores it; the restored system confirms the restore in the
/// store on the card and answers.
#[test]
fn arm64_store_on_an_sd_card_is_captured_and_restored_through_u_boots_mmc_driver() {
    u_boot_mmc_built();
    let dir = arm64_bundle("shell");
    let store = home().join("test-arm64-sd.store");
    let _ = std::fs::remove_file(&store);
    let so = board_capture(&dir, &store, &["--store-on", "sd"]);
    assert!(so.contains("image current generation 2"), "{so}");
    let size = std::fs::metadata(&store).unwrap().len();
    assert!(size.is_power_of_two(), "an SD card of {size} bytes");

    let b = bundle::Bundle::load(&dir).unwrap();
    let mut o = board::RunOptions::for_bundle(&b);
    o.store_on_sd = true;
    let o = board::restorer_boot::restorer_options(&b, &o, &arm64_restorer(), &store)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        o.disks.iter().any(|d| d.sd && d.path == store),
        "{:?}",
        o.disks
    );
    let mut s = board::qemu::Session::start(&b, &o).unwrap();
    // The boot disk (virtio) and the card (U-Boot's SDHCI driver).
    expect(
        &mut s,
        r"snapboot-restorer: loaded at 0x[0-9a-f]+, 2 firmware disks",
        "the restorer seeing the boot disk and the SD card",
    );
    expect(
        &mut s,
        r"snapboot-restorer: read \d+ MiB of chunks",
        "the restorer reading the image from the card",
    );
    expect(
        &mut s,
        r"snapboot-restorer: .*entering the image at 0x[0-9a-f]+",
        "the restorer entering the image",
    );
    expect(&mut s, r"snapboot: @restored", "restored marker");
    // The restore counted as confirmed: written to the store on /dev/mmcblk0.
    expect(
        &mut s,
        r"snapboot: @status restored current .*confirmed",
        "the confirmation written to the card",
    );
    let probe = &b.workload.probe;
    s.probe(
        &probe.send,
        &Regex::new(&probe.expect).unwrap(),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("the probe after the restore: {e}"));
    let tl = s.finish(boottrace::Outcome::Answered);
    assert!(
        !tl.lines.iter().any(|l| l.text.contains("Starting kernel")),
        "U-Boot booted a kernel before the image"
    );
    // The capture found the store on the card by its label.
    let status = flashstore::Store::open(std::fs::File::open(&store).unwrap()).unwrap();
    assert_eq!(status.label(), board::capture::SD_STORE_LABEL);
}
