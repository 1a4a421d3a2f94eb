use super::*;
use devsys::system::parse_mountinfo;
use std::collections::HashMap;

/// Debian's mount table lines: `/` on ext4, and what a read-only set-up adds.
const EXT4_RW: &str = "23 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro";
const EXT4_RO: &str = "23 1 254:1 / / ro,relatime shared:1 - ext4 /dev/vda1 ro,errors=remount-ro";
const PROC: &str = "24 23 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw";
const BOOT_ESP: &str =
    "30 23 254:2 / /boot/efi rw,relatime shared:5 - vfat /dev/vda2 rw,fmask=0077";
const DATA_RW: &str = "31 23 254:3 / /srv rw,relatime shared:6 - ext4 /dev/vda3 rw";

fn device(s: &str) -> bool {
    s.starts_with("/dev/")
}

fn verdicts(f: &[Finding]) -> Vec<Verdict> {
    f.iter().map(|f| f.verdict).collect()
}

#[test]
fn a_writable_root_blocks_with_how_to_make_it_read_only() {
    let m = parse_mountinfo(&[EXT4_RW, PROC].join("\n"));
    let f = root(&m, device);
    assert_eq!(verdicts(&f), [Verdict::Blocker]);
    assert_eq!(
        f[0].line(),
        format!(
            "BLOCKER  root          / is mounted read-write (ext4 on /dev/vda1): capture refuses \
             it: {READ_ONLY_ROOT}"
        )
    );
}

#[test]
fn a_read_only_root_is_fine_and_the_esp_too_but_another_writable_disk_is_not() {
    let m = parse_mountinfo(&[EXT4_RO, PROC, BOOT_ESP].join("\n"));
    let f = root(&m, device);
    assert_eq!(verdicts(&f), [Verdict::Ok], "{f:?}");
    assert!(f[0].found.contains("/ is read-only (ext4 on /dev/vda1)"));
    let m = parse_mountinfo(&[EXT4_RO, DATA_RW].join("\n"));
    let f = root(&m, device);
    assert_eq!(verdicts(&f), [Verdict::Ok, Verdict::Blocker]);
    assert!(f[1]
        .found
        .starts_with("/srv is mounted read-write (ext4 on /dev/vda3)"));
}

#[test]
fn an_overlay_root_is_judged_by_where_its_writes_go() {
    // The overlay over the read-only disk, its upper directory on a tmpfs (mounted over the
    // overlay in /run, as an initramfs overlay script leaves it visible).
    let overlay = |upper: &str| {
        format!(
            "40 1 0:40 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/run/ro,upperdir={upper}/upper,workdir={upper}/work"
        )
    };
    let lower = "41 40 254:1 / /run/ro ro,relatime - ext4 /dev/vda1 ro";
    let tmpfs = "42 40 0:41 / /run/rw rw,relatime - tmpfs tmpfs rw,size=65536k";
    let m = parse_mountinfo(&[overlay("/run/rw"), lower.into(), tmpfs.into()].join("\n"));
    let f = root(&m, device);
    assert_eq!(verdicts(&f), [Verdict::Ok], "{f:?}");
    assert_eq!(
        f[0].found,
        "/ is an overlay whose writes go to tmpfs (/run/rw/upper)"
    );
    let disk = "42 40 254:3 / /run/rw rw,relatime - ext4 /dev/vda3 rw";
    let m = parse_mountinfo(&[overlay("/run/rw"), lower.into(), disk.into()].join("\n"));
    let f = root(&m, device);
    assert_eq!(verdicts(&f), [Verdict::Blocker, Verdict::Blocker], "{f:?}");
    assert!(
        f[0].found.contains("writes go to ext4 on /dev/vda3"),
        "{f:?}"
    );
    let m = parse_mountinfo(&overlay("/gone"));
    assert_eq!(verdicts(&root(&m, device)), [Verdict::Warn]);
}

#[test]
fn the_store_is_named_found_a_store_and_large_enough() {
    let none = StoreState::NotConfigured(
        "no store given and none in /etc/snapboot/snapboot.conf (`store = …`)".into(),
    );
    let f = store(&none, Some(1 << 30));
    assert_eq!(f.verdict, Verdict::Blocker);
    assert!(f.fix.as_deref().unwrap().contains("store = PARTLABEL=NAME"));
    let blank = StoreState::Unusable {
        why: "store PARTLABEL=snapstore (/dev/vdb2): no snapboot store here".into(),
        no_magic: true,
        address: "PARTLABEL=snapstore".into(),
    };
    let f = store(&blank, None);
    assert_eq!(f.verdict, Verdict::Blocker);
    assert!(f
        .fix
        .unwrap()
        .starts_with("`snapboot store init PARTLABEL=snapstore`"));
    let found = |mib: u64| StoreState::Found {
        at: "the configured store PARTLABEL=snapstore (/etc/snapboot/snapboot.conf) on /dev/vdb2"
            .into(),
        bytes: mib << 20,
        images: 1,
    };
    let small = store(&found(512), Some(1 << 30));
    assert_eq!(small.verdict, Verdict::Warn);
    assert_eq!(
        small.found,
        "the configured store PARTLABEL=snapstore (/etc/snapboot/snapboot.conf) on /dev/vdb2: \
         512 MiB, 1 image(s), smaller than the RAM (1024 MiB)"
    );
    assert_eq!(store(&found(2048), Some(1 << 30)).verdict, Verdict::Ok);
}

/// An initramfs and a root as maps of path to bytes.
struct Trees {
    initramfs: HashMap<&'static str, Vec<u8>>,
    root: HashMap<&'static str, Vec<u8>>,
    modules: Vec<&'static str>,
}

impl Trees {
    /// What the package's hook makes of a root with a config and store-modules.
    fn complete() -> Self {
        let conf = b"store = PARTLABEL=snapstore\n".to_vec();
        let mods = b"virtio_pci\nvirtio_blk\n".to_vec();
        let root = HashMap::from([
            ("/etc/snapboot/snapboot.conf", conf),
            ("/etc/snapboot/store-modules", mods),
        ]);
        let mut initramfs = root.clone();
        initramfs.insert("/bin/snapboot", b"\x7fELF".to_vec());
        Trees {
            initramfs,
            root,
            modules: vec!["virtio_pci", "virtio_blk"],
        }
    }

    fn check(
        &self,
        drivers: Option<&[String]>,
        encrypt_key: bool,
        how: Installation,
    ) -> Vec<Finding> {
        let initramfs = |p: &str| self.initramfs.get(p).cloned();
        let root = |p: &str| self.root.get(p).cloned();
        let has_module = |m: &str| self.modules.contains(&m);
        initramfs_check(&InitramfsInputs {
            path: "/boot/initrd.img-6.1.0-28-amd64",
            initramfs: &initramfs,
            root: &root,
            has_module: &has_module,
            store_drivers: drivers,
            store: "PARTLABEL=snapstore",
            encrypt_key,
            rebuild: "update-initramfs -u",
            installation: how,
        })
    }
}

use super::initramfs as initramfs_check;

#[test]
fn an_initramfs_made_from_this_root_is_fine() {
    let t = Trees::complete();
    let drivers = ["virtio_blk".to_string()];
    let f = t.check(Some(&drivers), false, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Ok], "{f:?}");
    assert_eq!(
        f[0].found,
        "/boot/initrd.img-6.1.0-28-amd64: /bin/snapboot, snapboot.conf, store-modules as on the \
         root, drivers virtio_pci virtio_blk"
    );
}

#[test]
fn an_initramfs_built_before_the_config_changed_blocks_until_rebuilt() {
    let mut t = Trees::complete();
    t.root.insert(
        "/etc/snapboot/snapboot.conf",
        b"store = LABEL=other\n".to_vec(),
    );
    let f = t.check(None, false, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Blocker]);
    assert_eq!(
        f[0].line(),
        "BLOCKER  initramfs     /boot/initrd.img-6.1.0-28-amd64 has another \
         /etc/snapboot/snapboot.conf than the root: the boot restores by the initramfs's \
         settings: run `update-initramfs -u`"
    );
    t.initramfs.remove("/bin/snapboot");
    t.root = t.initramfs.clone();
    let f = t.check(None, false, Installation::Package);
    assert!(
        f[0].found
            .ends_with("has no /bin/snapboot: it cannot restore"),
        "{f:?}"
    );
}

#[test]
fn the_stores_drivers_are_listed_as_this_installation_does_it() {
    let mut t = Trees::complete();
    t.root.remove("/etc/snapboot/store-modules");
    t.initramfs.remove("/etc/snapboot/store-modules");
    let drivers = ["virtio_pci".to_string(), "virtio_blk".to_string()];
    let f = t.check(Some(&drivers), false, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Warn]);
    assert_eq!(
        f[0].fix.as_deref(),
        Some(
            "list virtio_pci virtio_blk in /etc/snapboot/store-modules, one a line, and run \
             `update-initramfs -u`"
        )
    );
    let f = t.check(Some(&drivers), false, Installation::Command);
    assert!(f[0]
        .fix
        .as_deref()
        .unwrap()
        .starts_with("`snapboot install --store PARTLABEL=snapstore`"));
    // Listed, but the initramfs was built without one of them.
    let mut t = Trees::complete();
    t.modules = vec!["virtio_pci"];
    let f = t.check(Some(&drivers), false, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Warn]);
    assert!(f[0].found.ends_with("lists: virtio_blk"), "{f:?}");
}

#[test]
fn encrypt_key_needs_the_key_file_in_the_initramfs() {
    let mut t = Trees::complete();
    let f = t.check(None, true, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Blocker]);
    assert!(
        f[0].found
            .contains("the root has no /etc/snapboot/device.key"),
        "{f:?}"
    );
    t.root.insert("/etc/snapboot/device.key", vec![7; 32]);
    let f = t.check(None, true, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Blocker]);
    assert!(
        f[0].found.contains("has no /etc/snapboot/device.key"),
        "{f:?}"
    );
    t.initramfs.insert("/etc/snapboot/device.key", vec![7; 32]);
    assert_eq!(
        verdicts(&t.check(None, true, Installation::Package)),
        [Verdict::Ok]
    );
}

#[test]
fn the_capture_unit_is_enabled_and_after_the_application() {
    let defaults =
        "system.slice basic.target sysinit.target systemd-journald.socket multi-user.target";
    let f = capture_unit(Some("disabled"), defaults, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Blocker, Verdict::Warn]);
    assert_eq!(
        f[0].fix.as_deref(),
        Some("`systemctl enable snapboot-capture.service`")
    );
    assert!(!f[1].fix.as_deref().unwrap().contains("snapboot install"));
    let f = capture_unit(Some("enabled"), defaults, Installation::Command);
    assert_eq!(verdicts(&f), [Verdict::Warn]);
    assert_eq!(
        f[0].fix.as_deref(),
        Some("`snapboot install --after APP.service`")
    );
    let files = [
        "[Unit]\nAfter=multi-user.target\n".to_string(),
        "[Unit]\nAfter=snapboot-app.service\nRequires=snapboot-app.service\n".to_string(),
    ];
    let after = after_from_unit_files(&files);
    assert_eq!(after, "multi-user.target snapboot-app.service");
    let f = capture_unit(Some("enabled"), &after, Installation::Neither);
    assert_eq!(
        verdicts(&f),
        [Verdict::Ok],
        "the board's application is snapboot-app"
    );
    let with_app = format!("{defaults} myapp.service");
    let f = capture_unit(Some("enabled"), &with_app, Installation::Package);
    assert_eq!(verdicts(&f), [Verdict::Ok]);
    assert_eq!(
        f[0].found,
        "snapboot-capture.service is enabled, after myapp.service"
    );
}

#[test]
fn grubs_capture_entry_is_in_grub_cfg_and_uboots_label_in_its_menu() {
    let cfg = |text: &str| Some(("/boot/grub/grub.cfg".to_string(), text.to_string()));
    let mut b = BootLoaderInputs {
        grub_script: true,
        grub_cfg: cfg("menuentry 'Debian' --id gnulinux-simple {\n}\n"),
        extlinux: None,
        next_boot_error: None,
    };
    let f = boot_loader(&b);
    assert_eq!(verdicts(&f), [Verdict::Warn]);
    assert_eq!(f[0].fix.as_deref(), Some("run `update-grub`"));
    b.grub_cfg = cfg("menuentry 'snapboot: capture' --id snapboot-capture {\n}\n");
    assert_eq!(verdicts(&boot_loader(&b)), [Verdict::Ok]);
    b.next_boot_error = Some("no grub/grubenv under /boot".into());
    assert_eq!(verdicts(&boot_loader(&b)), [Verdict::Ok, Verdict::Warn]);
    let menu = |text: &str| Some(("/boot/snapboot/extlinux.conf".to_string(), text.to_string()));
    let uboot = BootLoaderInputs {
        extlinux: menu("label normal\n  kernel /Image\nlabel capture\n  kernel /Image\n  append ${snapboot_cmdline} snapboot.capture\n"),
                ..Default::default()
    };
    assert_eq!(verdicts(&boot_loader(&uboot)), [Verdict::Ok]);
    let no_label = BootLoaderInputs {
        extlinux: menu("label normal\n  kernel /Image\n"),
        ..Default::default()
    };
    assert_eq!(verdicts(&boot_loader(&no_label)), [Verdict::Warn]);
    let neither = boot_loader(&BootLoaderInputs {
        next_boot_error: Some("none".into()),
        ..Default::default()
    });
    assert_eq!(verdicts(&neither), [Verdict::Ok]);
}
