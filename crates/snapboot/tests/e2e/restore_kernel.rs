//! End-to-end tests of the restore kernel (`snapboot board restore-kernel`): a small kernel
//! built from the distribution's source restores the stock kernel's images, and hands every
//! boot it cannot restore to the stock kernel (kexec), which boots cold to a usable system.

use crate::common::{bundle, run, snapboot};
use crate::snapshot::{
    assert_all_differ, captured, check_restored_app, copy_store, damage_newest_image, host_checksum,
};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Builds the restore kernel once (minutes on a fresh machine, then cached) and returns its
/// vmlinux.
pub(crate) fn restore_kernel() -> PathBuf {
    static K: OnceLock<PathBuf> = OnceLock::new();
    K.get_or_init(|| {
        bundle("shell"); // fetches the stock kernel the restore kernel is built for
        let mut c = snapboot();
        c.args(["board", "restore-kernel"]);
        let (out, so, se) = run(c);
        assert!(out.status.success(), "restore-kernel failed:\n{so}\n{se}");
        let path = so
            .lines()
            .find_map(|l| l.trim().strip_prefix("vmlinux "))
            .and_then(|rest| rest.split(" (").next())
            .unwrap_or_else(|| panic!("no vmlinux line in:\n{so}"));
        PathBuf::from(path)
    })
    .clone()
}

/// Powers on `workload` with the restore kernel, `store` as `/dev/vdb`, and `mem_extra` MiB
/// more RAM than the workload's.
pub(crate) fn restore_session(
    workload: &str,
    store: &Path,
    mem_extra: u32,
) -> board::qemu::Session {
    let vmlinux = restore_kernel();
    let b = bundle::Bundle::load(&bundle(workload)).unwrap();
    let mut o = crate::common::store_options(&b, store);
    o.kernel = board::run_options::KernelImage::Restore(vmlinux);
    o.mem_mib += mem_extra;
    board::qemu::Session::start(&b, &o).unwrap()
}

/// The restore kernel restored on its first try: up to `@restored`, its console has no
/// `@fallback` (nor a hand-over, nor a second `@resume-start` from the initramfs's `/init`):
/// snapboot, the kernel's first process, found its settings and the store itself.
pub(crate) fn assert_restored_on_first_try(s: &board::qemu::Session, boot: &str) {
    // Without the printk prefix of a marker the kernel echoed from its log.
    let lines: Vec<&str> = s.timeline().lines.iter().map(|l| l.message()).collect();
    let end = lines
        .iter()
        .position(|l| l.starts_with("snapboot: @restored"))
        .unwrap_or_else(|| panic!("{boot}: no @restored in {lines:?}"));
    let before = &lines[..end];
    let tries = before
        .iter()
        .filter(|l| l.starts_with("snapboot: @resume-start"))
        .count();
    let fell_back = before
        .iter()
        .any(|l| l.starts_with("snapboot: @fallback") || l.starts_with("snapboot: @handover"));
    assert!(
        tries == 1 && !fell_back,
        "{boot}: not restored on the first try: {before:?}"
    );
}

fn expect(s: &mut board::qemu::Session, pattern: &str, what: &str) -> String {
    let re = Regex::new(pattern).unwrap();
    s.wait_for(&re, what, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
        .0
}

/// The restore kernel restores the same image again and again: the application's state is
/// intact, its clock current, its RNG fresh, and it was never started again.
#[test]
fn restore_kernel_restores_the_app_repeatedly() {
    // A copy: QEMU locks a disk image, and other tests boot the shared store meanwhile.
    let store = copy_store(&captured("app"), "test-rk-app.store");
    let expected = host_checksum();
    let mut randoms = Vec::new();
    for boot in 0..2 {
        let mut s = restore_session("app", &store, 0);
        expect(
            &mut s,
            r"Linux version \S+-snapboot-restore",
            "restore kernel banner",
        );
        let t = throughput_of(&mut s);
        assert_eq!(t.workers, 1, "one CPU: {t:?}");
        expect(&mut s, r"snapboot: @restored", "restored marker");
        assert_restored_on_first_try(&s, &format!("restore {boot}"));
        randoms.push(check_restored_app(&mut s, boot, &expected));
        s.finish(boottrace::Outcome::Answered);
    }
    assert_all_differ(randoms);
}

/// The `throughput` line of a restore: it parses, and its numbers add up.
pub(crate) fn throughput_of(s: &mut board::qemu::Session) -> bootstatus::Throughput {
    let line = expect(s, r"snapboot: @throughput ", "throughput marker");
    let detail = line.split("@throughput ").nth(1).unwrap_or_default();
    let t = bootstatus::Throughput::parse_line(detail)
        .unwrap_or_else(|| panic!("the throughput line does not parse: {line}"));
    assert!(
        t.read_bytes > 0 && t.requests > 0 && t.large_bytes <= t.read_bytes,
        "{line}"
    );
    assert!(
        t.placed_bytes >= t.decoded_bytes / 2 && t.wall_s > 0.0,
        "{line}"
    );
    assert!(t.place_s <= t.wall_s + 0.001, "{line}");
    t
}

/// A board of 2 CPUs captures; the restore kernel (built with SMP) restores on 2 CPUs with
/// both decoding (the throughput line says so); so does the restorer, which starts the
/// other CPU through the local APIC and parks it again with INIT before the image is
/// entered (the image kernel brings it back online itself); a board of 1 CPU refuses the
/// image by the CPUs it records and boots cold.
#[test]
fn two_cpus_capture_restore_on_two_and_are_refused_on_one() {
    let b = bundle("shell");
    restore_kernel();
    let store = crate::common::home().join("test-rk-smp2.store");
    let _ = std::fs::remove_file(&store);
    crate::common::board_capture(&b, &store, &["--smp", "2"]);
    let bundle = bundle::Bundle::load(&b).unwrap();
    let start = |cpus: u32| {
        let mut o = crate::common::store_options(&bundle, &store);
        o.kernel = board::run_options::KernelImage::Restore(restore_kernel());
        o.smp = cpus;
        board::qemu::Session::start(&bundle, &o).unwrap()
    };
    let mut s = start(2);
    let t = throughput_of(&mut s);
    assert_eq!(t.workers, 2, "both CPUs decode: {t:?}");
    expect(&mut s, r"snapboot: @restored", "restored marker");
    assert_restored_on_first_try(&s, "2 CPUs");
    s.finish(boottrace::Outcome::Answered);

    let mut o = crate::restorer::restorer_options(&bundle, &store);
    o.smp = 2;
    let mut s = board::qemu::Session::start(&bundle, &o).unwrap();
    let t = throughput_of(&mut s);
    assert_eq!(t.workers, 2, "the restorer decodes on both CPUs: {t:?}");
    expect(&mut s, r"snapboot: @restored", "restored marker");
    s.send("cat /sys/devices/system/cpu/online\n").unwrap();
    expect(
        &mut s,
        r"^0-1\s*$",
        "both CPUs online after the restorer's restore",
    );
    s.finish(boottrace::Outcome::Answered);

    let mut s = start(1);
    let fallback = expect(&mut s, r"snapboot: @fallback", "fallback marker");
    assert!(
        fallback.contains("captured with 2 CPUs online and this machine has 1"),
        "{fallback}"
    );
    expect(&mut s, r"snapboot: @ready", "the cold boot reaching ready");
    s.finish(boottrace::Outcome::Ready);
}

/// A refused image on the restore kernel: the reason is on the console, the cold boot is
/// handed to the stock kernel, which does not try the image again and reaches ready.
fn expect_handover(store: &Path, mem_extra: u32, reason: &str) {
    let mut s = restore_session("shell", store, mem_extra);
    expect(
        &mut s,
        r"Linux version \S+-snapboot-restore",
        "restore kernel banner",
    );
    let fallback = expect(&mut s, r"snapboot: @fallback", "fallback marker");
    assert!(
        fallback.contains(reason),
        "fallback {fallback:?} lacks {reason:?}"
    );
    let handover = expect(&mut s, r"snapboot: @handover", "handover marker");
    assert!(
        handover.contains("kexec into 6.1") && !handover.contains("handover-failed"),
        "{handover}"
    );
    expect(
        &mut s,
        r"Linux version 6\.1\.\S+-amd64 ",
        "stock kernel banner",
    );
    expect(
        &mut s,
        r"snapboot: @handed-over",
        "the stock kernel's resume standing down",
    );
    expect(&mut s, r"snapboot: @ready", "the cold boot reaching ready");
    s.finish(boottrace::Outcome::Ready);
}

#[test]
fn restore_kernel_hands_a_corrupt_image_to_a_cold_boot_of_the_stock_kernel() {
    let bad = copy_store(&captured("shell"), "test-rk-bad-data.store");
    let chunk = damage_newest_image(&bad);
    expect_handover(&bad, 0, &format!("checksum mismatch in chunk {chunk}"));
}

#[test]
fn restore_kernel_hands_another_ram_size_to_a_cold_boot_of_the_stock_kernel() {
    let copy = copy_store(&captured("shell"), "test-rk-ram.store");
    expect_handover(&copy, 128, "RAM size differs");
}

/// An image whose header names another kernel release (checksum valid): the restore kernel
/// compares it with the image kernel its initramfs records, and refuses.
#[test]
fn restore_kernel_hands_another_kernels_image_to_a_cold_boot_of_the_stock_kernel() {
    let bad = copy_store(&captured("shell"), "test-rk-foreign.store");
    crate::snapshot::rename_release(&bad);
    expect_handover(&bad, 0, "kernel release differs");
}

/// An image captured with `--pm-times` times every device's restore at each restore, and
/// `snapboot analyze` names the devices from the console log. The restore is `board run
/// --store`'s default: through the restore kernel, once one is built.
#[test]
fn a_pm_times_image_shows_its_device_restores_to_analyze() {
    let b = bundle("shell");
    restore_kernel();
    let store = crate::common::home().join("test-rk-pm-times.store");
    let log = crate::common::home().join("test-rk-pm-times.log");
    let _ = std::fs::remove_file(&store);
    let so = crate::common::board_capture(&b, &store, &["--pm-times", "--console"]);
    assert!(
        so.contains("@pm-times every restore of this image times its devices"),
        "the capture says it turned timing on:\n{so}"
    );
    // No --restore-kernel: a snapshot boot restores with it by default once it is built.
    let mut c = snapboot();
    c.args(["board", "run"])
        .arg(&b)
        .args(["--probe", "--store"])
        .arg(&store)
        .arg("--log")
        .arg(&log);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "restore failed:\n{so}\n{se}");
    assert!(
        se.contains("snapboot: restoring with the restore kernel")
            && Regex::new(r"linux_version +\+[0-9.]+ s +\S+-snapboot-restore")
                .unwrap()
                .is_match(&so),
        "restored through the restore kernel by default:\n{so}\n{se}"
    );
    let mut c = snapboot();
    c.arg("analyze").arg(&log);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "analyze failed:\n{so}\n{se}");
    let re = Regex::new(r"device restore \(pm_print_times\): (\d+) devices, [0-9.]+ ms in their callbacks, [0-9.]+ ms from first to last").unwrap();
    let devices: u32 = re
        .captures(&so)
        .unwrap_or_else(|| panic!("no device restore summary in:\n{so}"))[1]
        .parse()
        .unwrap();
    // Four virtio functions (root, store, kernel pack, RNG), the PCI host bridge, serial...
    assert!(devices >= 6, "{devices} devices:\n{so}");
    assert!(
        so.contains("virtio-pci 0000:00:0"),
        "virtio disks named:\n{so}"
    );
}
