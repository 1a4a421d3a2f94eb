//! End-to-end tests of the board: real QEMU (TCG here), Debian's stock kernel, the real CLI.

use crate::common::{bundle, run, snapboot};
use serde_json::Value;

fn timeline(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn milestone(tl: &Value, kind: &str) -> Option<(f64, String)> {
    tl["milestones"].as_array()?.iter().find_map(|m| {
        (m["kind"] == kind).then(|| {
            (
                m["t"].as_f64().unwrap(),
                m["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

#[test]
fn shell_answers_probe_with_milestones_in_order() {
    let b = bundle("shell");
    let dir = tempfile::tempdir().unwrap();
    let tl_path = dir.path().join("tl.json");
    let mut c = snapboot();
    c.args(["board", "run"])
        .arg(&b)
        .args(["--probe", "--timeline"])
        .arg(&tl_path);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}\n{se}");
    assert!(so.contains("TTI:"), "summary printed: {so}");
    let tl = timeline(&tl_path);
    assert_eq!(tl["outcome"]["kind"], "answered");
    let order = [
        "kernel_start",
        "linux_version",
        "init_start",
        "root_mounted",
        "app_start",
        "app_ready",
        "probe_sent",
        "probe_answered",
    ];
    let mut last = 0.0;
    for kind in order {
        let (t, _) = milestone(&tl, kind).unwrap_or_else(|| panic!("milestone {kind} missing"));
        assert!(
            t >= last,
            "{kind} at {t} before the previous milestone at {last}"
        );
        last = t;
    }
    assert_eq!(milestone(&tl, "probe_answered").unwrap().1, "probe-42");
    let tti = tl["tti"].as_f64().unwrap();
    assert!((tti - last).abs() < 1e-9, "TTI is the probe's answer time");
    assert!(tti > 0.5 && tti < 120.0, "plausible TTI {tti}");
}

// The `app` cold boot's state (its checksum against the host's, its size) is checked on the
// shared capture's cold boot and its restores: snapshot.rs,
// `app_snapshot_boots_repeatedly_from_one_image`.

#[test]
fn kernel_panic_ends_the_run_with_a_reason() {
    let b = bundle("shell");
    let mut c = snapboot();
    c.args(["board", "run"]).arg(&b);
    c.args([
        "--probe",
        "--cmdline",
        "rdinit=/nonexistent",
        "--timeout",
        "120",
    ]);
    let (out, so, se) = run(c);
    assert_eq!(
        out.status.code(),
        Some(snapboot_device::Exit::NotUsable.code().into()),
        "{so}\n{se}"
    );
    assert!(se.contains("guest kernel panic"), "{se}");
    assert!(se.contains("Unable to mount root fs"), "{se}");
    assert!(
        so.contains("kernel panic"),
        "summary names the outcome: {so}"
    );
}

#[test]
fn hang_ends_the_run_with_a_timeout() {
    let b = bundle("shell");
    let mut c = snapboot();
    // A shell as init never reaches the ready marker.
    c.args(["board", "run"]).arg(&b);
    c.args(["--probe", "--cmdline", "rdinit=/bin/sh", "--timeout", "10"]);
    let (out, so, se) = run(c);
    assert_eq!(
        out.status.code(),
        Some(snapboot_device::Exit::NotUsable.code().into()),
        "{so}\n{se}"
    );
    assert!(
        se.contains(
            "timed out after 10.0 s waiting for the application's ready (or restored) marker"
        ),
        "{se}"
    );
}

#[test]
fn missing_bundle_and_kernel_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = snapboot();
    c.env("SNAPBOOT_HOME", dir.path());
    c.args(["board", "run", "shell", "--probe"]);
    let (out, _, se) = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert!(se.contains("not a snapboot bundle"), "{se}");

    let mut c = snapboot();
    c.env("SNAPBOOT_HOME", dir.path());
    c.args(["board", "build", "--workload", "shell"]);
    let (out, _, se) = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert!(se.contains("no kernel fetched yet"), "{se}");

    let mut c = snapboot();
    c.args([
        "board",
        "build",
        "--workload",
        "shell",
        "--kernel",
        "/nonexistent/bzImage",
    ]);
    c.args(["--modules", "/nonexistent/modules", "--out"])
        .arg(dir.path().join("b"));
    let (out, _, se) = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        se.contains("kernel image not found at /nonexistent/bzImage"),
        "{se}"
    );
}

/// A user's own system: their root filesystem tree and start command.
#[test]
fn custom_rootfs_boots_with_its_own_start_command() {
    crate::common::bundle("shell"); // kernel fetched
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    for d in ["bin", "dev", "proc", "sys", "run", "etc"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).unwrap();
    std::fs::write(root.join("etc/motd"), "custom-system-42\n").unwrap();
    let out_dir = dir.path().join("bundle");
    let mut c = snapboot();
    c.args(["board", "build", "--name", "kiosk", "--rootfs"])
        .arg(&root);
    c.args([
        "--start",
        "/bin/sh -c 'snapboot ready; exec /bin/sh'",
        "--out",
    ])
    .arg(&out_dir);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}\n{se}");
    let mut c = snapboot();
    c.args(["board", "run"]).arg(&out_dir);
    c.args([
        "--probe",
        "read l < /etc/motd; echo $l",
        "--expect",
        "^custom-system-42$",
    ]);
    let (out, so, se) = run(c);
    assert!(out.status.success(), "{so}\n{se}");
}

/// The stock kernel's bzImage with its payload recompressed the way `CONFIG_KERNEL_LZ4`
/// builds it (`lz4 -l`: legacy frame, 8 MiB blocks, then the size word), as Debian's cloud
/// kernel ships.
fn lz4_bzimage(stock: &std::path::Path, out: &std::path::Path) {
    let data = std::fs::read(stock).unwrap();
    let vmlinux = out.with_extension("elf");
    hostkernel::kernel::extract_vmlinux(stock, &vmlinux).unwrap();
    let elf = std::fs::read(&vmlinux).unwrap();
    let word = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) as usize;
    let setup = match data[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let start = (setup + 1) * 512 + word(0x248);
    let mut payload = 0x184C_2102u32.to_le_bytes().to_vec();
    for block in elf.chunks(8 << 20) {
        let c = lz4_flex::block::compress(block);
        payload.extend_from_slice(&(c.len() as u32).to_le_bytes());
        payload.extend_from_slice(&c);
    }
    payload.extend_from_slice(&(elf.len() as u32).to_le_bytes());
    let mut img = data[..start].to_vec();
    img[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    img.extend_from_slice(&payload);
    std::fs::write(out, img).unwrap();
}

#[test]
fn lz4_compressed_kernel_extracts_and_boots() {
    bundle("shell"); // kernel fetched
    let k: Value = serde_json::from_str(
        &std::fs::read_to_string(crate::common::home().join("kernel.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bz = dir.path().join("vmlinuz-lz4");
    lz4_bzimage(std::path::Path::new(k["bzimage"].as_str().unwrap()), &bz);
    assert_eq!(
        &std::fs::read(&bz).unwrap()[..0x210][0x202..0x206],
        b"HdrS",
        "still a bzImage"
    );
    let out = dir.path().join("bundle");
    let mut c = snapboot();
    c.args(["board", "build", "--workload", "shell", "--kernel"])
        .arg(&bz)
        .arg("--modules")
        .arg(k["modules_dir"].as_str().unwrap())
        .arg("--out")
        .arg(&out);
    let (o, so, se) = run(c);
    assert!(o.status.success(), "build with an LZ4 kernel:\n{so}\n{se}");
    let mut c = snapboot();
    c.args(["board", "run"]).arg(&out).arg("--probe");
    let (o, so, se) = run(c);
    assert!(o.status.success(), "boot of the LZ4 kernel:\n{so}\n{se}");
    assert!(so.contains("probe-42"), "{so}");
}
