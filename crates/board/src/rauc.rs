//! RAUC on the UEFI PC's A/B disk (`crate::uefi::ensure_ab_disk`): the signed update bundle
//! the host makes for slot B, and the grub.cfg that chooses the slot, RAUC's own
//! `contrib/grub.conf` with an entry per slot.
//!
//! ```text
//! update.raucb (rauc bundle, format=verity, signed with guest/rauc/test-key.pem):
//!   manifest.raucm  [update] compatible=snapboot-board-uefi-pc version=V
//!                   [image.rootfs] filename=rootfs.squashfs
//!   rootfs.squashfs the bundle's root + /snapboot-update-version (V), appended
//!
//! grubenv (ESP)     ORDER=A B  A_OK A_TRY  B_OK B_TRY      RAUC's grub backend edits it
//! grub.cfg          first slot of ORDER with OK=1 TRY=0 -> its TRY=1, saved, booted:
//!   slot-a          /vmlinuz WORDS root=/dev/vda2 rauc.slot=A snapboot.image=slot-a
//!   slot-b          /vmlinuz WORDS root=/dev/vda5 rauc.slot=B snapboot.image=slot-b
//!                   none: the tries of good slots reset, slot A booted
//! ```
//!
//! Both slots boot the ESP's kernel and initramfs: RAUC updates the root only. Each slot's
//! entry names its image (`snapboot.image=`), so the store keeps one image per slot, each
//! bound to its root and its `rauc.slot=`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The compatible string of the PC's RAUC system (`/etc/rauc/system.conf` in the root) and of
/// every bundle made for it.
pub const COMPATIBLE: &str = "snapboot-board-uefi-pc";
/// The file at the root of an update's root filesystem naming its version.
pub const VERSION_FILE: &str = "snapboot-update-version";
/// The test signing certificate (self-signed; also the root's keyring), not a secret.
const TEST_CERT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../guest/rauc/test-cert.pem"
));
/// Its key.
const TEST_KEY: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../guest/rauc/test-key.pem"
));

/// A root slot of the A/B PC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// RAUC's `bootname=` and the grubenv's prefix (`A_OK`): `rauc.slot=`.
    pub bootname: &'static str,
    /// GRUB's entry id, also the name of the slot's image (`snapboot.image=`).
    pub entry: &'static str,
    /// The slot's root partition as the kernel sees it (`root=`).
    pub root: &'static str,
}

/// The PC's two root slots, in GRUB's default `ORDER`.
pub const SLOTS: [Slot; 2] = [
    Slot {
        bootname: "A",
        entry: "slot-a",
        root: "/dev/vda2",
    },
    Slot {
        bootname: "B",
        entry: "slot-b",
        root: "/dev/vda5",
    },
];

/// RAUC's slot selection (its contrib/grub.conf of v1.8), the slot's entry id in place of an
/// entry number, and in place of the rescue entry: the tries reset, slot A booted.
const SLOT_SELECTION: &str = r#"# Written by snapboot's board for one run: RAUC's slot selection (contrib/grub.conf), one entry per slot.
set ORDER="A B"; set A_OK=0; set B_OK=0; set A_TRY=0; set B_TRY=0
if [ -s $prefix/grubenv ]; then load_env; fi
set default=none
for SLOT in $ORDER; do
    if [ "$SLOT" == "A" ]; then
        INDEX=slot-a; OK=$A_OK; TRY=$A_TRY; A_TRY=1
    fi
    if [ "$SLOT" == "B" ]; then
        INDEX=slot-b; OK=$B_OK; TRY=$B_TRY; B_TRY=1
    fi
    if [ "$OK" -eq 1 -a "$TRY" -eq 0 ]; then default=$INDEX; break; fi
done
if [ "$default" == "none" ]; then
    if [ "$A_OK" -eq 1 -a "$A_TRY" -eq 1 ]; then A_TRY=0; fi
    if [ "$B_OK" -eq 1 -a "$B_TRY" -eq 1 ]; then B_TRY=0; fi
    echo "grub: no good slot: tries reset, booting slot A"
    default=slot-a
fi
save_env A_TRY A_OK B_TRY B_OK ORDER
set timeout=0
"#;

/// Whether the word `w` is one a slot's entry sets itself (or the capture word, which no A/B
/// run has): `root=`, `rauc.slot=`, `snapboot.image=`, `snapboot.capture`.
fn slot_owns(w: &str) -> bool {
    w == bootparams::key::CAPTURE
        || w.starts_with("root=")
        || w.starts_with("rauc.slot=")
        || w.strip_prefix(bootparams::key::IMAGE)
            .is_some_and(|r| r.starts_with('='))
}

/// The grub.cfg of a run on the A/B disk: RAUC's slot selection, then an entry per slot
/// ([`SLOTS`]) booting the ESP's kernel and initramfs with the run's `words` (those a slot
/// sets itself left out: `root=`, `rauc.slot=`, `snapboot.image=`, `snapboot.capture`) and
/// the slot's `root=`, `rauc.slot=` and `snapboot.image=`; then the grubenv's slot variables
/// and the entry booted, on the console: `tail`, the line every board grub.cfg ends with.
pub fn grub_cfg_ab(words: &[String], tail: &str) -> String {
    let common: String = words
        .iter()
        .filter(|w| !slot_owns(w))
        .map(|w| format!("{w} "))
        .collect();
    let mut cfg = String::from(SLOT_SELECTION);
    for s in SLOTS {
        cfg.push_str(&format!(
            "menuentry 'Slot {name}' --id {id} {{\n\
             \tlinux\t/vmlinuz {common}root={root} rauc.slot={name} {image}={id}\n\
             \tinitrd\t/initrd.img\n}}\n",
            name = s.bootname,
            id = s.entry,
            root = s.root,
            image = bootparams::key::IMAGE,
        ));
    }
    cfg.push_str(
        "echo \"grub: slots ORDER=${ORDER} A_OK=${A_OK} A_TRY=${A_TRY} B_OK=${B_OK} \
         B_TRY=${B_TRY}\"\n",
    );
    cfg.push_str(tail);
    cfg
}

/// Why an update bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RaucError {
    /// A host tool (`mksquashfs`, `rauc`) failed.
    #[error("`{cmd}` failed: {reason}")]
    Tool {
        /// The command line.
        cmd: String,
        /// Its status and the end of its error output.
        reason: String,
    },
    /// Reading or writing a file.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RaucError + '_ {
    move |source| RaucError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn tool(cmd: &mut Command) -> Result<Vec<u8>, RaucError> {
    hostcmd::output(cmd).map_err(|f| RaucError::Tool {
        cmd: f.cmd,
        reason: f.reason,
    })
}

/// The RAUC manifest of an update to `version` with one image, the root.
fn manifest(version: &str) -> String {
    format!(
        "[update]\ncompatible={COMPATIBLE}\nversion={version}\n\n\
         [bundle]\nformat=verity\n\n\
         [image.rootfs]\nfilename=rootfs.squashfs\n"
    )
}

/// Makes in `work` the signed RAUC bundle `work/update.raucb` updating the root slot to
/// `version`: the root squashfs `rootfs` with [`VERSION_FILE`] (holding `version` and a
/// newline) appended at its root, as `work/in/rootfs.squashfs`, and `work/in/manifest.raucm`
/// ([`COMPATIBLE`], `format=verity`); signed with the test key, whose certificate is written
/// as `work/test-cert.pem` (the root's keyring: `rauc info --keyring=` it).
pub fn make_update_bundle(rootfs: &Path, work: &Path, version: &str) -> Result<PathBuf, RaucError> {
    let input = work.join("in");
    let extra = work.join("extra");
    for dir in [&input, &extra] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(io(dir))?;
        }
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let image = input.join("rootfs.squashfs");
    fs::copy(rootfs, &image).map_err(io(rootfs))?;
    let marker = extra.join(VERSION_FILE);
    fs::write(&marker, format!("{version}\n")).map_err(io(&marker))?;
    // Appends (the image's compressor kept): the marker at the root beside what is there.
    // No recovery file (in $HOME): the image is a copy.
    tool(Command::new("mksquashfs").arg(&extra).arg(&image).args([
        "-all-root",
        "-no-progress",
        "-quiet",
        "-no-recovery",
    ]))?;
    let m = input.join("manifest.raucm");
    fs::write(&m, manifest(version)).map_err(io(&m))?;
    let cert = work.join("test-cert.pem");
    let key = work.join("test-key.pem");
    fs::write(&cert, TEST_CERT).map_err(io(&cert))?;
    fs::write(&key, TEST_KEY).map_err(io(&key))?;
    let bundle = work.join("update.raucb");
    // rauc refuses to overwrite a bundle.
    if bundle.exists() {
        fs::remove_file(&bundle).map_err(io(&bundle))?;
    }
    tool(
        Command::new("rauc")
            .arg("bundle")
            .arg(format!("--cert={}", cert.display()))
            .arg(format!("--key={}", key.display()))
            // The root is compressed already: lz4 (which the guest's squashfs reads) costs
            // least.
            .arg("--mksquashfs-args=-comp lz4")
            .arg(&input)
            .arg(&bundle),
    )?;
    Ok(bundle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uefi::{GRUB_TAIL, ROOT_PARTITION};

    #[test]
    fn slot_a_is_the_pcs_root_partition() {
        assert_eq!(SLOTS[0].root, ROOT_PARTITION);
        assert_eq!(SLOTS[1].root, crate::uefi::ROOT_B_PARTITION);
    }

    fn linux_lines(cfg: &str) -> Vec<&str> {
        cfg.lines()
            .filter(|l| l.trim_start().starts_with("linux"))
            .collect()
    }

    #[test]
    fn each_slots_entry_has_the_runs_words_and_only_its_own_root_slot_and_image() {
        let words: Vec<String> = "console=ttyS0 root=/dev/vda2 ro snapboot.capture \
                                  snapboot.image=other rauc.slot=X snapboot.grace=3"
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let cfg = grub_cfg_ab(&words, GRUB_TAIL);
        assert_eq!(
            linux_lines(&cfg),
            [
                "\tlinux\t/vmlinuz console=ttyS0 ro snapboot.grace=3 root=/dev/vda2 \
                 rauc.slot=A snapboot.image=slot-a",
                "\tlinux\t/vmlinuz console=ttyS0 ro snapboot.grace=3 root=/dev/vda5 \
                 rauc.slot=B snapboot.image=slot-b",
            ]
        );
        for id in ["slot-a", "slot-b"] {
            assert_eq!(cfg.matches(&format!("--id {id} {{")).count(), 1, "{cfg}");
        }
        assert_eq!(cfg.matches("\tinitrd\t/initrd.img\n").count(), 2, "{cfg}");
        // One quoted word per title: a stray quote ends GRUB's parse of the whole file.
        for line in cfg.lines().filter(|l| l.starts_with("menuentry ")) {
            assert_eq!(line.matches('\'').count(), 2, "{line}");
        }
        assert!(cfg.contains("load_env"), "{cfg}");
        assert!(
            cfg.contains("save_env A_TRY A_OK B_TRY B_OK ORDER\n"),
            "{cfg}"
        );
        assert!(cfg.contains("set timeout=0\n"), "{cfg}");
        assert!(
            cfg.ends_with("echo \"grub: booting ${default}\"\n"),
            "{cfg}"
        );
        assert!(cfg.ends_with(GRUB_TAIL), "{cfg}");

        // No words: still one space between the kernel and the slot's words.
        let bare = grub_cfg_ab(&[], GRUB_TAIL);
        assert_eq!(
            linux_lines(&bare)[0],
            "\tlinux\t/vmlinuz root=/dev/vda2 rauc.slot=A snapboot.image=slot-a"
        );
    }

    #[test]
    fn grub_parses_the_slot_selection() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("grub.cfg");
        fs::write(&cfg, grub_cfg_ab(&["console=ttyS0".to_string()], GRUB_TAIL)).unwrap();
        match Command::new("grub-script-check").arg(&cfg).output() {
            Err(_) => eprintln!("no grub-script-check (grub-common): skipped"),
            Ok(out) => assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    #[test]
    fn an_update_bundle_is_signed_for_the_pc_and_its_root_names_the_version() {
        for t in ["rauc", "mksquashfs"] {
            if Command::new(t).arg("--version").output().is_err() {
                eprintln!("no {t}: skipped");
                return;
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        fs::create_dir_all(tree.join("etc")).unwrap();
        fs::write(tree.join("etc/os-release"), "ID=test\n").unwrap();
        // Bytes no compressor shrinks: rauc wants a bundle larger than one 4 KiB block.
        let mut x = 0x2545_f491_u32;
        let noise: Vec<u8> = (0..64 << 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        fs::write(tree.join("etc/noise"), noise).unwrap();
        let root = dir.path().join("rootfs.img");
        tool(Command::new("mksquashfs").arg(&tree).arg(&root).args([
            "-comp",
            "lz4",
            "-all-root",
            "-no-progress",
            "-quiet",
        ]))
        .unwrap();
        let work = dir.path().join("work");
        fs::create_dir(&work).unwrap();
        let bundle = make_update_bundle(&root, &work, "2").unwrap();
        assert_eq!(bundle, work.join("update.raucb"));
        let info = tool(
            Command::new("rauc")
                .arg(format!(
                    "--keyring={}",
                    work.join("test-cert.pem").display()
                ))
                .arg("info")
                .arg(&bundle),
        )
        .unwrap();
        let info = String::from_utf8_lossy(&info);
        assert!(info.contains(&format!("'{COMPATIBLE}'")), "{info}");
        assert!(info.contains("Version:"), "{info}");
        assert!(info.contains("'2'"), "{info}");
        assert!(info.contains("rootfs.squashfs"), "{info}");
        // The appended root keeps what it had and names the version.
        if let Ok(out) = Command::new("unsquashfs")
            .args(["-cat"])
            .arg(work.join("in/rootfs.squashfs"))
            .arg(VERSION_FILE)
            .output()
        {
            assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n");
        }
        // A second bundle in the same place replaces the first.
        make_update_bundle(&root, &work, "3").unwrap();
    }
}
