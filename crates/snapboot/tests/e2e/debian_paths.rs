//! A Debian root (initramfs-tools, zstd) on every restoring path of the PC: the freestanding
//! restorer restores it, and a changed file of the initramfs is refused by name on each path
//! (the stock kernel's resume, the restore kernel's, the restorer), since all three compute
//! the boot setup's manifest of the same archive (`snapimg::listing`).

use crate::common::{bundle, run};
use crate::debian::check_system;
use crate::snapshot::{ask, check_restored_app, copy_store};
use regex::Regex;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file the changed initramfs replaces: initramfs-tools' settings, which its `/init`
/// sources; the change is a comment line, so the cold boot after the refusal is the same.
const CHANGED: &str = "conf/initramfs.conf";

/// A copy of the bundle at `from` under `dir` whose initramfs is Debian's with [`CHANGED`]
/// holding its own text and a comment. The kernel pack is made again from it.
fn changed_initramfs_bundle(from: &Path, dir: &Path) -> PathBuf {
    let to = dir.join("debian-changed");
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name();
        // The UEFI disk and the old pack are not needed (the pack is made anew), nor the
        // temporary files a test building the UEFI disk beside this one keeps there for a
        // moment (`snapboot-uefi-*`: gone by the time `cp` looks, 2026-11-29).
        if name == "uefi-disk.img"
            || name == "coldkernel.pack"
            || name.to_string_lossy().starts_with("snapboot-uefi-")
        {
            continue;
        }
        let (out, so, se) = run({
            let mut c = std::process::Command::new("cp");
            c.arg("--sparse=always").arg(e.path()).arg(to.join(&name));
            c
        });
        assert!(out.status.success(), "cp: {so}{se}");
    }
    // Written again as one uncompressed archive with the file changed: the kernel does not
    // go on after a zstd stream with an archive appended to it ("invalid magic at start of
    // compressed archive", 6.1), so a later archive cannot replace the file.
    let path = to.join("initramfs.cpio");
    let bytes = std::fs::read(&path).unwrap();
    let root = initramfs::unpack(&bytes).unwrap();
    let conf = {
        let mut text = root
            .get(CHANGED)
            .expect("initramfs-tools' settings")
            .data()
            .to_vec();
        text.extend_from_slice(b"\n# changed after the capture (e2e)\n");
        text
    };
    let members: Vec<initramfs::testing::Member> = root
        .iter()
        .filter(|e| e.kind() != initramfs::Kind::Other)
        .enumerate()
        .map(|(i, e)| initramfs::testing::Member {
            ino: i as u32 + 1,
            mtime: e.mtime,
            ..initramfs::testing::Member::new(
                e.path,
                e.mode,
                if e.path == CHANGED { &conf } else { e.data() },
            )
        })
        .collect();
    std::fs::write(&path, initramfs::testing::archive_of(&members)).unwrap();
    let b = bundle::Bundle::load(&to).unwrap();
    b.ensure_kernel_pack().unwrap();
    to
}

/// Captured once on the stock kernel (initramfs-tools' scripts); the restorer restores it
/// with the application's state, clock and RNG, and systemd running. Then the initramfs
/// gains a changed settings file: the stock kernel, the restore kernel and the restorer each
/// refuse the image naming that file, and boot on cold.
#[test]
fn debian_restorer_restores_and_every_path_names_a_changed_initramfs_file() {
    let dir = tempfile::tempdir().unwrap();
    // The capture `debian`'s test restores too, with its data disk attached here as there.
    let (store, data) = crate::debian::captured_debian("paths");
    let with_data = |mut o: board::RunOptions| {
        o.disks.push(board::run_options::Disk {
            path: data.clone(),
            readonly: false,
            sd: false,
        });
        o
    };

    let b = bundle::Bundle::load(&bundle("debian")).unwrap();
    let mut s = board::qemu::Session::start(
        &b,
        &with_data(crate::restorer::restorer_options(&b, &store)),
    )
    .unwrap();
    let restored = Regex::new(r"snapboot: @restored .*").unwrap();
    s.wait_for(
        &restored,
        "the restorer's restore",
        Duration::from_secs(180),
    )
    .unwrap();
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);
    check_restored_app(&mut s, 1, &expected);
    ask(&mut s, "ping", r"^pong \d+$");
    check_system(&mut s, "restore by the restorer");
    s.finish(boottrace::Outcome::Answered);

    let changed =
        bundle::Bundle::load(&changed_initramfs_bundle(&bundle("debian"), dir.path())).unwrap();
    let named = Regex::new(&format!(
        r"the initramfs differs \(changed: /{}\)",
        regex::escape(CHANGED)
    ))
    .unwrap();
    for path in ["stock kernel", "restore kernel", "restorer"] {
        let copy = copy_store(&store, "test-debian-paths-refused.store");
        let o = match path {
            "restorer" => crate::restorer::restorer_options(&changed, &copy),
            _ => {
                let mut o = crate::common::store_options(&changed, &copy);
                if path == "restore kernel" {
                    o.kernel = board::run_options::KernelImage::Restore(
                        crate::restore_kernel::restore_kernel(),
                    );
                }
                o
            }
        };
        let mut s = board::qemu::Session::start(&changed, &with_data(o)).unwrap();
        let (line, _) = s
            .wait_for(&named, path, Duration::from_secs(180))
            .unwrap_or_else(|e| panic!("{path}: the changed file is not named: {e}"));
        assert!(!line.contains("@restored"), "{path}: {line}");
        let lines = &s.timeline().lines;
        assert!(
            !lines.iter().any(|l| l.text.contains("@restored")),
            "{path}: restored a changed system"
        );
        s.finish(boottrace::Outcome::Incomplete);
    }
}
