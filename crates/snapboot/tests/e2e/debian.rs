//! The `debian` workload on the real board: a Debian root built from Debian's packages with
//! systemd as PID 1, snapboot put in by its Debian package (apt), an initramfs made by
//! Debian's initramfs-tools with snapboot's hook and scripts (or, `debian-dracut`, by dracut
//! with snapboot's dracut module), and the capture taken by `snapboot-capture.service` once
//! the application's service is ready.

use crate::common::{bundle, run, snapboot};
use crate::snapshot::{
    ask, assert_all_differ, check_restored_app, copy_store, damage_newest_image,
};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Captures `workload` (`debian` or `debian-overlayroot`) by its systemd unit, with `data`
/// attached as /dev/vdc but not mounted (the board's devices, and so its memory map, must be
/// the same at restore).
pub(crate) fn capture_debian(workload: &str, data: Option<&Path>) -> PathBuf {
    let store = crate::common::home().join(format!("test-{workload}.store"));
    let _ = std::fs::remove_file(&store);
    let mut c = snapboot();
    c.args(["board", "capture"])
        .arg(bundle(workload))
        .arg("--store")
        .arg(&store);
    if let Some(data) = data {
        c.arg("--disk").arg(data);
    }
    let (out, so, se) = run(c);
    assert!(out.status.success(), "capture failed:\n{so}\n{se}");
    assert!(so.contains("image current generation 2"), "{so}");
    store
}

/// The `debian` root captured once for the tests that restore it (this module's and
/// `debian_paths`'): its store and its data disk as they were right after the capture.
/// Each caller gets its own copies of both (`tag` names them), so one test's restores
/// (which count boots on the data disk) and damage never reach another's.
pub(crate) fn captured_debian(tag: &str) -> (PathBuf, PathBuf) {
    static CAPTURED: crate::common::OnceByKey<(PathBuf, PathBuf)> = crate::common::OnceByKey::new();
    let (store, data) = CAPTURED.get("debian", || {
        let data = data_disk("test-debian-data.img");
        let store = capture_debian("debian", Some(&data));
        (store, data)
    });
    (
        copy_store(&store, &format!("test-debian-{tag}.store")),
        copy_store(&data, &format!("test-debian-{tag}-data.img")),
    )
}

/// What systemd and the service say after a boot: the service answers, the system is
/// `running` with no failed unit, the journal takes and returns a new entry.
pub(crate) fn check_system(s: &mut board::qemu::Session, boot: &str) {
    let sys = ask(s, "system", "^system .*");
    assert_eq!(
        sys, "system running journal=ok",
        "{boot}: systemd or the journal is not well"
    );
}

/// Captured by the systemd unit, restored once by the stock kernel and once by the restore
/// kernel (on its first try, snapboot being its first process): the service's state intact, systemd `running`, the journal working, the clock
/// current and the RNG fresh at each restore; `snapboot-restored.target` started each time,
/// and with it the mount of a writable ext4 data disk that was attached but not mounted at
/// capture, whose restore count grows 1, 2 (the writes persist; the image does not
/// change). A damaged copy of the image is refused and the same system boots cold through
/// initramfs-tools, as if snapboot were not there.
#[test]
fn debian_with_systemd_restores_on_both_kernels_and_a_damaged_image_boots_cold() {
    // The writable data disk (ext4, label snapdata): attached at capture and at every
    // restore, mounted only after a restore by a unit of snapboot-restored.target, which
    // appends a line to it.
    let (store, data) = captured_debian("systemd");
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    let restored = Regex::new(r"snapboot: @restored .*").unwrap();
    let mut randoms = Vec::new();
    // A restore on the stock kernel, then one on the restore kernel (it unpacks the same
    // zstd initramfs-tools archive, starts snapboot in it and restores the stock kernel's
    // image).
    let counted = Regex::new(DATA_LINE).unwrap();
    for boot in 1..=2 {
        let mut s = data_session(&store, &data, boot == 2);
        let (line, _) = s
            .wait_for(&restored, "restored marker", Duration::from_secs(180))
            .unwrap();
        assert!(
            line.contains(ondevice::after_restore::TARGET_STARTING),
            "boot {boot}: {line}"
        );
        if boot == 2 {
            // snapboot, the restore kernel's first process in initramfs-tools' archive,
            // mounted what it needs and restored at once: no fallback to a second try.
            crate::restore_kernel::assert_restored_on_first_try(&s, "restore kernel");
        }
        if boot == 1 {
            // initramfs-tools' init-top script restored before udev started.
            crate::debian_config::assert_resumed_before_udev(&s, "initramfs-tools");
        }
        let (line, _) = s
            .wait_for(
                &counted,
                "the data partition's restore count",
                Duration::from_secs(60),
            )
            .unwrap();
        let c = counted.captures(&line).unwrap();
        assert_eq!(&c[1], "/dev/vdc", "{line}");
        assert_eq!(
            c[2].parse::<usize>().unwrap(),
            boot,
            "writes to /data must persist: {line}"
        );
        assert_eq!(&c[3], "restored", "{line}");
        randoms.push(check_restored_app(&mut s, boot, &expected));
        check_system(&mut s, &format!("restore {boot}"));
        s.finish(boottrace::Outcome::Answered);
    }
    assert_all_differ(randoms);

    // One damaged byte in the image's data: refused with the reason, then a cold boot of
    // the same system (systemd, the service, the probe) that never saw snapboot restore.
    let bad = copy_store(&store, "test-debian-bad.store");
    let chunk = damage_newest_image(&bad);
    let mut s = data_session(&bad, &data, false);
    let fb = Regex::new(r"snapboot: @fallback .*").unwrap();
    let (line, _) = s
        .wait_for(&fb, "fallback", Duration::from_secs(180))
        .unwrap();
    assert!(
        line.contains(&format!("checksum mismatch in chunk {chunk}")),
        "fallback without the damaged part named: {line}"
    );
    let ready = Regex::new(r"snapboot: @ready").unwrap();
    s.wait_for(&ready, "the cold boot's ready", Duration::from_secs(300))
        .unwrap();
    // The data is there on the fallback too (snapboot-fallback.target wants
    // snapboot-cold.target, which mounts it), after the two restores' writes.
    let (line, _) = s
        .wait_for(
            &counted,
            "the data partition on the fallback",
            Duration::from_secs(120),
        )
        .unwrap();
    let c = counted.captures(&line).unwrap();
    assert_eq!((&c[2], &c[3]), ("3", "fallback"), "{line}");
    ask(&mut s, "ping", r"^pong \d+$");
    check_system(&mut s, "cold boot after the fallback");
    s.finish(boottrace::Outcome::Answered);
}

/// What `snapboot-data-log.service` prints on every boot after the capture point: the data
/// partition's device, its boot count, and `snapboot status`'s outcome.
pub(crate) const DATA_LINE: &str = r"snapboot-data: (\S+) ext4 boots=(\d+) outcome: (\w+)";

/// A 16 MiB ext4 image labelled `snapdata` under the test home as `name`, fresh.
pub(crate) fn data_disk(name: &str) -> PathBuf {
    let path = crate::common::home().join(name);
    let _ = std::fs::remove_file(&path);
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(16 << 20).unwrap();
    let (out, so, se) = run({
        let mut c = std::process::Command::new("mkfs.ext4");
        c.args(["-q", "-F", "-L", bundle::debian::DATA_LABEL])
            .arg(&path);
        c
    });
    assert!(out.status.success(), "mkfs.ext4: {so}{se}");
    path
}

/// The `debian` board with `store` as /dev/vdb and `data` as /dev/vdc, on the stock kernel
/// or the restore kernel.
fn data_session(store: &Path, data: &Path, restore_kernel: bool) -> board::qemu::Session {
    let b = bundle::Bundle::load(&bundle("debian")).unwrap();
    let mut o = data_options(&b, store, data);
    if restore_kernel {
        o.kernel =
            board::run_options::KernelImage::Restore(crate::restore_kernel::restore_kernel());
    }
    board::qemu::Session::start(&b, &o).unwrap()
}

/// Run options of a `debian` bundle with `store` as /dev/vdb and `data` as /dev/vdc.
pub(crate) fn data_options(b: &bundle::Bundle, store: &Path, data: &Path) -> board::RunOptions {
    let mut o = crate::common::store_options(b, store);
    o.disks.push(board::run_options::Disk {
        path: data.to_path_buf(),
        readonly: false,
        sd: false,
    });
    o
}
