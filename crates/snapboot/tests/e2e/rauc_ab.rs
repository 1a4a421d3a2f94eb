//! A/B updates with RAUC on the UEFI PC: two root slots (`/dev/vda2` A, `/dev/vda5` B), GRUB
//! choosing between them with RAUC's slot-selection script (`ORDER`, `X_OK`, `X_TRY` in the
//! ESP's grubenv; each entry passes `rauc.slot=X` and `snapboot.image=slot-x`), RAUC 1.8
//! (Debian's `rauc` and `rauc-service`) in the `debian` root with the grub backend, and a
//! signed RAUC bundle (the same root plus a version file) on the disk's `rauc-update`
//! partition. snapboot keeps one image per slot, named by the boot loader's entry, each
//! bound to its own root; after a confirmed restore its confirmed.d hook runs `rauc status
//! mark-good` (RAUC's own mark-good unit ran before the capture, so it never runs after a
//! restore), so GRUB's one try per boot and snapboot's crash-loop count do not fight.
//!
//! ```text
//! boot 1  slot A, cold (empty store)      captures slot-a at the ready point
//! boot 2  slot A, restores slot-a         confirmed -> mark-good; rauc install -> B primary
//! boot 3  slot B, first boot              slot-a refused (another root): cold, captures slot-b
//! boot 4  slot B, restores slot-b         confirmed -> mark-good; B_TRY back to 0; mark-bad B
//! boot 5  slot A (rollback)               restores slot-a: A's state of boot 1
//! ```

use crate::debian_uefi::{expect, expect_grub_entry};
use crate::snapshot::{ask, check_restored_app};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What the root's `device slot` query prints: `slot=X root=DEV version=V boot_id=U`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    slot: String,
    root: String,
    version: String,
    boot_id: String,
}

impl Slot {
    /// Asserts the slot, its root device and its root's version.
    fn is(&self, slot: &str, root: &str, version: &str) {
        assert_eq!(
            (
                self.slot.as_str(),
                self.root.as_str(),
                self.version.as_str()
            ),
            (slot, root, version),
            "{self:?}"
        );
    }
}

fn slot_of(s: &mut board::qemu::Session) -> Slot {
    let line = ask(
        s,
        "device slot",
        r"slot=\S+ root=\S+ version=\S+ boot_id=\S+",
    );
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {line}"))
            .to_string()
    };
    Slot {
        slot: field("slot"),
        root: field("root"),
        version: field("version"),
        boot_id: field("boot_id"),
    }
}

/// The grubenv's RAUC variables, as `K=V` words.
fn slots(disk: &Path) -> BTreeMap<String, String> {
    let all = board::uefi::grubenv_vars(disk).unwrap();
    all.into_iter()
        .filter(|(k, _)| ["ORDER", "A_OK", "A_TRY", "B_OK", "B_TRY"].contains(&k.as_str()))
        .collect()
}

fn assert_env(disk: &Path, when: &str, want: &[(&str, &str)]) {
    let env = slots(disk);
    for (k, v) in want {
        assert_eq!(
            env.get(*k).map(String::as_str),
            Some(*v),
            "{when}: {k} in {env:?}"
        );
    }
}

fn session(b: &bundle::Bundle, disk: &Path) -> board::qemu::Session {
    let mut o = board::RunOptions::for_bundle(b);
    o.timeout = Duration::from_secs(900);
    o.firmware = board::run_options::Firmware::Uefi;
    board::capture::attach_store(&mut o, disk, false).unwrap();
    // On A/B the images are the re-captures of each slot's first cold boot.
    o.params.recapture = true;
    board::qemu::Session::start(b, &o).unwrap()
}

/// Waits for the restore's confirmation and the confirmed.d hook that marks slot `slot`
/// good for image `image`.
fn confirmed_and_marked_good(s: &mut board::qemu::Session, image: &str, slot: &str) {
    expect(
        s,
        &format!(r"rauc-mark-good: slot {slot} good after snapboot confirmed {image}"),
        "the confirmed.d hook's mark-good",
        240,
    );
    let line = expect(
        s,
        r"snapboot: @confirm(ed|-failed) ",
        "the confirmation",
        120,
    );
    assert!(line.contains(&format!("@confirmed {image} ")), "{line}");
}

/// The device's own power-off (a planned one: the next power-on is the boot loader's).
fn power_off(mut s: board::qemu::Session) {
    ask(&mut s, "device poweroff", r"^device poweroff exit \d+$");
    s.wait_exit(Duration::from_secs(120)).unwrap();
    s.finish(boottrace::Outcome::PoweredOff);
}

/// Waits for the status of a restore of `image`.
fn restores(s: &mut board::qemu::Session, image: &str) {
    let line = expect(s, r"snapboot: @status restored ", image, 300);
    assert!(line.contains(&format!("restored {image} ")), "{line}");
}

/// Waits for the ready point's capture of `image`.
fn captures(s: &mut board::qemu::Session, image: &str) {
    let line = expect(s, r"snapboot: @capture-(done|failed)", image, 600);
    assert!(line.contains(&format!("image {image}")), "{line}");
}

#[test]
fn rauc_installs_slot_b_which_captures_its_own_image_and_a_rollback_restores_slot_as() {
    let b = bundle::Bundle::load(&crate::common::bundle("debian")).unwrap();
    let work = tempfile::tempdir_in(crate::common::home()).unwrap();
    let update = board::rauc::make_update_bundle(&b.rootfs(), work.path(), "2").unwrap();
    let disk = crate::common::home().join("test-rauc-ab.img");
    let _ = std::fs::remove_file(&disk);
    board::uefi::ensure_ab_disk(&b, &disk, &update).unwrap();
    let expected = crate::snapshot::host_checksum_at(bundle::debian::APP_SCALE);

    // 1. Slot A, cold on an empty store: RAUC's mark-good unit runs, then the ready point
    // captures slot A's image and the system goes on.
    let mut s = session(&b, &disk);
    expect_grub_entry(&mut s, "slot-a");
    captures(&mut s, "slot-a");
    let a = slot_of(&mut s);
    a.is("A", "/dev/vda2", "1");
    power_off(s);
    assert_env(
        &disk,
        "after A's first boot",
        &[("A_OK", "1"), ("A_TRY", "0")],
    );

    // 2. Slot A restores its image; the confirmation marks A good; RAUC installs the bundle
    // into slot B and makes it the primary.
    let mut s = session(&b, &disk);
    expect_grub_entry(&mut s, "slot-a");
    expect(&mut s, r"snapboot: @restored ", "slot A restored", 300);
    check_restored_app(&mut s, 2, &expected);
    confirmed_and_marked_good(&mut s, "slot-a", "A");
    let install = board::app_state::ask(
        &mut s,
        "device rauc-install",
        r"^device rauc-install exit \d+$",
        Duration::from_secs(900),
    )
    .unwrap();
    assert_eq!(install, "device rauc-install exit 0", "rauc install failed");
    power_off(s);
    assert_env(
        &disk,
        "after the install",
        &[("ORDER", "B A"), ("B_OK", "1"), ("B_TRY", "0")],
    );

    // 3. Slot B's first boot: slot A's image is bound to another root and command line, so
    // it is refused and B boots cold, and captures its own image.
    let mut s = session(&b, &disk);
    expect_grub_entry(&mut s, "slot-b");
    let fallback = expect(
        &mut s,
        r"snapboot: @fallback ",
        "slot A's image refused",
        300,
    );
    assert!(
        fallback.contains("slot-a") && fallback.contains("captured on a different system"),
        "{fallback}"
    );
    captures(&mut s, "slot-b");
    let bslot = slot_of(&mut s);
    bslot.is("B", "/dev/vda5", "2");
    assert_ne!(bslot.boot_id, a.boot_id);
    power_off(s);
    assert_env(
        &disk,
        "after B's first boot",
        &[("B_OK", "1"), ("B_TRY", "0")],
    );

    // 4. Slot B restores its image (GRUB set B_TRY=1 for this boot); only snapboot's
    // confirmed.d hook sets it back. Then B is marked bad, as a failed health check would.
    let mut s = session(&b, &disk);
    expect_grub_entry(&mut s, "slot-b");
    restores(&mut s, "slot-b");
    assert_eq!(slot_of(&mut s), bslot, "slot B's state of its first boot");
    confirmed_and_marked_good(&mut s, "slot-b", "B");
    let env = ask(&mut s, "device grubenv", r"B_TRY=\d");
    assert!(env.contains("B_TRY=0"), "{env}");
    let bad = ask(&mut s, "device rauc-mark-bad", r"^rauc-mark-bad exit \d+$");
    assert_eq!(bad, "rauc-mark-bad exit 0");
    power_off(s);
    assert_env(&disk, "after B was marked bad", &[("B_OK", "0")]);

    // 5. The rollback: GRUB boots slot A, which restores slot A's image with A's state of
    // boot 1; slot B's image is never tried.
    let mut s = session(&b, &disk);
    expect_grub_entry(&mut s, "slot-a");
    restores(&mut s, "slot-a");
    check_restored_app(&mut s, 5, &expected);
    assert_eq!(slot_of(&mut s), a, "slot A's state of its first boot");
    confirmed_and_marked_good(&mut s, "slot-a", "A");
    let tl = s.finish(boottrace::Outcome::Answered);
    assert!(
        !tl.lines.iter().any(|l| l.text.contains("slot-b")),
        "slot B's image was looked at on slot A"
    );
    assert_env(
        &disk,
        "after the rollback",
        &[("A_OK", "1"), ("A_TRY", "0")],
    );
}
