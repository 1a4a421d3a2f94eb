//! The board's initramfs: an uncompressed cpio (newc) archive with busybox, the static
//! snapboot binary, the modules the board needs and an `/init` script that snapboot writes.
//!
//! It is left uncompressed on purpose: the kernel unpacks a plain cpio with a memcpy, while
//! a compressed one costs decompression time at every power-on.
//!
//! The `/init` is where snapshot resume runs: before any filesystem is mounted.

use bootparams::{EARLY_ENV, RESTORE_KERNEL_SUFFIX};
use std::collections::BTreeMap;
use std::io::Write;

/// One entry of the archive.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A directory.
    Dir,
    /// A regular file with its mode bits (e.g. 0o755) and contents.
    File { mode: u32, data: Vec<u8> },
    /// A symbolic link to `target`.
    Symlink { target: String },
    /// A character device node.
    CharDev { major: u32, minor: u32 },
}

/// An in-memory initramfs tree, written out as a newc cpio archive.
#[derive(Debug, Default, Clone)]
pub struct Initramfs {
    entries: BTreeMap<String, Entry>,
}

impl Initramfs {
    /// An empty tree with the directories every board needs and `/dev/console`, so that the
    /// kernel can give `/init` a console before devtmpfs is mounted.
    pub fn new() -> Self {
        let mut t = Self::default();
        for d in [
            "bin",
            "dev",
            "proc",
            "sys",
            "newroot",
            "lib/modules",
            "run",
            "tmp",
        ] {
            t.dir(d);
        }
        t.entries
            .insert("dev/console".into(), Entry::CharDev { major: 5, minor: 1 });
        t
    }

    /// Adds a directory and its parents.
    pub fn dir(&mut self, path: &str) {
        let mut acc = String::new();
        for part in path.trim_matches('/').split('/').filter(|p| !p.is_empty()) {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            self.entries.entry(acc.clone()).or_insert(Entry::Dir);
        }
    }

    fn parent_of(&mut self, path: &str) -> String {
        let path = path.trim_matches('/').to_string();
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        path
    }

    /// Adds a regular file (and its parent directories).
    pub fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) {
        let p = self.parent_of(path);
        self.entries.insert(p, Entry::File { mode, data });
    }

    /// Adds a symbolic link.
    pub fn symlink(&mut self, path: &str, target: &str) {
        let p = self.parent_of(path);
        self.entries.insert(
            p,
            Entry::Symlink {
                target: target.into(),
            },
        );
    }

    /// Looks an entry up.
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path.trim_matches('/'))
    }

    /// Paths in archive order (parents before children).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Writes the archive, zero-padded to whole pages. Directories sort before their
    /// contents because of the `BTreeMap` order of paths ("a" < "a/b").
    ///
    /// Why pages: QEMU puts the initrd right below the ACPI tables at the top of low memory,
    /// so an archive that ends inside a page ends in a page the e820 map reserves; the kernel
    /// then copies the whole initrd elsewhere before it can use it (`Move RAMDISK` in the
    /// log: 0.1 s for 11 MB under TCG). A whole number of pages ends right at the reserved
    /// area. The kernel's unpacker skips zeros after the trailer.
    pub fn write_to<W: Write>(&self, w: W) -> std::io::Result<W> {
        let mut w = Counted { inner: w, n: 0 };
        for (ino, (path, entry)) in self.entries.iter().enumerate() {
            let b = cpio::newc::Builder::new(path)
                .ino(ino as u32 + 1)
                .uid(0)
                .gid(0)
                .nlink(1);
            let (b, data): (_, &[u8]) = match entry {
                Entry::Dir => (b.mode(0o040755).nlink(2), &[]),
                Entry::File { mode, data } => (b.mode(0o100000 | mode), data),
                Entry::Symlink { target } => (b.mode(0o120777), target.as_bytes()),
                Entry::CharDev { major, minor } => {
                    (b.mode(0o020600).rdev_major(*major).rdev_minor(*minor), &[])
                }
            };
            let mut fw = b.write(&mut w, data.len() as u32);
            fw.write_all(data)?;
            fw.finish()?;
        }
        let mut w = cpio::newc::trailer(w)?;
        let pad = (PAGE - w.n % PAGE) % PAGE;
        w.write_all(&vec![0u8; pad as usize])?;
        Ok(w.inner)
    }
}

/// Page size the archive is padded to.
const PAGE: u64 = 4096;

/// A writer that counts the bytes written through it.
struct Counted<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Appends the lines that load `modules` in order when `grep -qs PATTERN` finds the device
/// (a PCI class or device id in sysfs); nothing for no module.
fn pci_modules(s: &mut String, pattern: &str, modules: &[String]) {
    if modules.is_empty() {
        return;
    }
    s.push_str(&format!("  if grep -qs {pattern}; then\n"));
    for module in modules {
        s.push_str(&format!(
            "    insmod /lib/modules/{module}.ko || echo \"snapboot: init: insmod {module} failed\"\n"
        ));
    }
    s.push_str("  fi\n");
}

/// Quotes `s` for a POSIX shell (single quotes).
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The PCI class of an SD host controller (base class 0x08 system peripheral, subclass
/// 0x05 SD host), as `/sys/bus/pci/devices/*/class` shows it without the interface byte.
pub const SD_HOST_CLASS: &str = "0x0805";

/// The PCI device id of Intel's 6300ESB watchdog (QEMU's `i6300esb`), as
/// `/sys/bus/pci/devices/*/device` shows it.
pub const I6300ESB_DEVICE: &str = "0x25ab";

/// What the generated `/init` does.
#[derive(Debug, Clone)]
pub struct InitScript {
    /// Module files under `/lib/modules`, in load order.
    pub modules: Vec<String>,
    /// Modules loaded only on a cold boot whose command line asks for a lazy capture
    /// (`snapboot.lazy`): device-mapper snapshot and zram, in load order.
    pub lazy_modules: Vec<String>,
    /// Modules loaded besides `lazy_modules` when the command line also has
    /// `snapboot.encrypt=`: dm-crypt and its cipher, for an encrypted swap region.
    pub lazy_crypt_modules: Vec<String>,
    /// Modules loaded (after `modules`, before resume) when the machine has an SD host
    /// controller on its PCI bus (class 0x0805): the store on an SD card (`mmcblk`).
    pub sd_modules: Vec<String>,
    /// Modules loaded (after `modules`, before resume) when the machine has an i6300esb
    /// watchdog on its PCI bus: resume arms it across the restore.
    pub watchdog_modules: Vec<String>,
    /// Modules copied to `/run/snapboot/modules` on a cold boot with deferred memory
    /// (`snapboot.defermem`), for `snapboot memory add` to load after ready or restored.
    pub late_modules: Vec<String>,
    /// The block device holding the root filesystem.
    pub root_dev: String,
    /// Filesystem type of the root (`squashfs` or `ext4`).
    pub root_fs: String,
    /// The application's start command, run by `snapboot start` in the new root.
    pub start: String,
    /// Environment for the application (`KEY=VALUE`).
    pub env: Vec<String>,
}

impl InitScript {
    /// Renders the `/init` shell script (run by busybox `sh`).
    pub fn render(&self) -> String {
        let m = |marker: boottrace::Marker| marker.line(None);
        let mut s = String::new();
        s.push_str("#!/bin/sh\n# Written by snapboot: first stage of the board's boot.\n");
        s.push_str("export PATH=/bin\n");
        s.push_str("fail() { echo \"snapboot: init: $*\"; exec sh; }\n");
        // With `rdinit=/bin/snapboot` (restore kernels on the board) snapboot ran first: it
        // mounted these, printed the init marker and ran resume, then started this script
        // with SNAPBOOT_EARLY set.
        s.push_str(&format!("if [ -z \"${EARLY_ENV}\" ]; then\n"));
        // The mounts the boot setup's listing skips (one table: snapimg::listing). /run is
        // a tmpfs from the start: `snapboot resume` records the boot setup there for a
        // capture later in this boot, and the same tmpfs moves into the root.
        for em in snapimg::listing::EARLY_MOUNTS {
            let opts = if em.data.is_empty() {
                String::new()
            } else {
                format!("-o {} ", em.data)
            };
            s.push_str(&format!(
                "mount -t {} {opts}{} {}\n",
                em.fstype, em.source, em.dir
            ));
        }
        s.push_str(&format!("echo \"{}\"\nfi\n", m(boottrace::Marker::Init)));
        // A restore kernel has its drivers built in and cannot load the stock kernel's
        // modules: it goes straight to resume (store discovery needs no module).
        s.push_str(&format!(
            "read release < /proc/sys/kernel/osrelease\ncase \"$release\" in *{}) ;; *)\n",
            RESTORE_KERNEL_SUFFIX
        ));
        for module in &self.modules {
            s.push_str(&format!(
                "  insmod /lib/modules/{module}.ko || echo \"snapboot: init: insmod {module} failed\"\n"
            ));
        }
        // As udev would: a device's driver only where the PCI bus has the device.
        pci_modules(
            &mut s,
            &format!("'^{SD_HOST_CLASS}' /sys/bus/pci/devices/*/class"),
            &self.sd_modules,
        );
        pci_modules(
            &mut s,
            &format!("'^{I6300ESB_DEVICE}' /sys/bus/pci/devices/*/device"),
            &self.watchdog_modules,
        );
        s.push_str(";; esac\n");
        s.push_str("# Snapshot resume runs here, before any filesystem is mounted.\n");
        s.push_str(&format!(
            "[ -n \"${EARLY_ENV}\" ] || /bin/snapboot resume --from-cmdline\n"
        ));
        s.push_str(&format!(
            "n=0; while [ ! -b {dev} ] && [ $n -lt 500 ]; do sleep 0.01; n=$((n+1)); done\n\
             mount -t {fs} -o ro {dev} /newroot || fail \"cannot mount root {dev} ({fs})\"\n",
            dev = self.root_dev,
            fs = self.root_fs
        ));
        if !self.lazy_modules.is_empty() || !self.late_modules.is_empty() {
            // The settings decide, the config file's too: `snapboot config words` prints
            // them as kernel words (nothing when they do not parse: resume said why).
            s.push_str(&format!(
                "words=\"$(cat /proc/cmdline)\"\n\
                 [ -e {} ] && words=\"$(/bin/snapboot config words)\"\n",
                bootparams::config::CONFIG_PATH
            ));
        }
        if !self.lazy_modules.is_empty() {
            s.push_str(&format!(
                "case \" $words \" in *\" {}\"*)\n",
                bootparams::key::LAZY
            ));
            for module in &self.lazy_modules {
                s.push_str(&format!(
                    "  insmod /lib/modules/{module}.ko || echo \"snapboot: init: insmod {module} failed\"\n"
                ));
            }
            if !self.lazy_crypt_modules.is_empty() {
                s.push_str(&format!(
                    "  case \" $words \" in *\" {}=\"*)\n",
                    bootparams::key::ENCRYPT
                ));
                for module in &self.lazy_crypt_modules {
                    s.push_str(&format!(
                        "    insmod /lib/modules/{module}.ko || echo \"snapboot: init: insmod {module} failed\"\n"
                    ));
                }
                s.push_str("  ;; esac\n");
            }
            s.push_str(";; esac\n");
        }
        if !self.late_modules.is_empty() {
            s.push_str(&format!(
                "case \" $words \" in *\" {}=\"*)\n  mkdir -p /run/snapboot/modules\n",
                bootparams::key::DEFERMEM
            ));
            for module in &self.late_modules {
                s.push_str(&format!(
                    "  cp /lib/modules/{module}.ko /run/snapboot/modules/ || echo \"snapboot: init: no {module}\"\n"
                ));
            }
            s.push_str(";; esac\n");
        }
        s.push_str(&format!("echo \"{}\"\n", m(boottrace::Marker::RootMounted)));
        s.push_str(
            "[ -d /newroot/run ] || fail 'root filesystem has no /run directory'\n\
             mkdir -p /run/snapboot/bin\n\
             cp /bin/snapboot /run/snapboot/bin/snapboot\n\
             for d in dev proc sys run; do [ -d /newroot/$d ] && mount --move /$d /newroot/$d; done\n",
        );
        let mut cmd = String::from("exec switch_root /newroot /run/snapboot/bin/snapboot start");
        for e in &self.env {
            cmd.push_str(&format!(" --env {}", sh_quote(e)));
        }
        cmd.push_str(&format!(" -- {}\n", sh_quote(&self.start)));
        s.push_str(&cmd);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `snapboot: @name` a boot script prints (the board's `/init` and the files in
    /// `guest/`) is a marker the host knows.
    #[test]
    fn every_marker_a_script_prints_is_known() {
        let init = InitScript {
            modules: vec!["virtio_blk".into()],
            lazy_modules: Vec::new(),
            lazy_crypt_modules: Vec::new(),
            sd_modules: Vec::new(),
            watchdog_modules: Vec::new(),
            late_modules: Vec::new(),
            root_dev: "/dev/vda".into(),
            root_fs: "squashfs".into(),
            start: "sh".into(),
            env: Vec::new(),
        }
        .render();
        let mut texts = vec![("/init".to_string(), init)];
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../guest"
        ))];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if let Ok(t) = std::fs::read_to_string(&p) {
                    texts.push((p.display().to_string(), t));
                }
            }
        }
        let mut seen = 0;
        for (file, text) in &texts {
            for name in boottrace::Marker::names_in(text) {
                assert!(
                    boottrace::Marker::from_name(name).is_some(),
                    "{file} prints marker @{name}, which the host does not know"
                );
                seen += 1;
            }
        }
        assert!(
            seen >= 4,
            "only {seen} markers found in {} files",
            texts.len()
        );
    }

    #[test]
    fn archive_has_parents_before_children_and_a_console() {
        let mut t = Initramfs::new();
        t.file("lib/modules/virtio.ko", 0o644, vec![1, 2, 3]);
        t.symlink("bin/sh", "busybox");
        let paths: Vec<&str> = t.paths().collect();
        let pos = |p: &str| paths.iter().position(|x| *x == p).unwrap();
        assert!(
            pos("lib") < pos("lib/modules") && pos("lib/modules") < pos("lib/modules/virtio.ko")
        );
        assert_eq!(
            t.get("/dev/console"),
            Some(&Entry::CharDev { major: 5, minor: 1 })
        );
        let bytes = t.write_to(Vec::new()).unwrap();
        assert!(bytes.starts_with(b"070701"), "newc magic");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("TRAILER!!!"));
        assert!(text.contains("lib/modules/virtio.ko"));
        assert_eq!(bytes.len() % 4, 0, "newc entries are 4-byte aligned");
    }

    #[test]
    fn archive_reads_back_with_cpio_reader() {
        let mut t = Initramfs::new();
        t.file("init", 0o755, b"#!/bin/sh\n".to_vec());
        let bytes = t.write_to(Vec::new()).unwrap();
        let mut rest = &bytes[..];
        let mut names = Vec::new();
        loop {
            let r = cpio::NewcReader::new(rest).unwrap();
            if r.entry().is_trailer() {
                break;
            }
            names.push((
                r.entry().name().to_string(),
                r.entry().mode(),
                r.entry().file_size(),
            ));
            rest = r.finish().unwrap();
        }
        assert!(names.contains(&("init".to_string(), 0o100755, 10)));
        assert!(names.contains(&("dev/console".to_string(), 0o020600, 0)));
        // Whole pages, and nothing but zeros after the trailer.
        assert_eq!(bytes.len() % 4096, 0, "{} bytes", bytes.len());
        let r = cpio::NewcReader::new(rest).unwrap();
        let after = r.finish().unwrap();
        assert!(after.iter().all(|&b| b == 0));
    }

    #[test]
    fn init_loads_modules_in_order_and_quotes_the_start_command() {
        let s = InitScript {
            modules: vec!["virtio_ring".into(), "virtio".into(), "virtio_blk".into()],
            lazy_modules: vec!["dm_mod".into(), "dm_snapshot".into()],
            lazy_crypt_modules: vec!["dm_crypt".into(), "xts".into()],
            sd_modules: vec!["sdhci_pci".into(), "mmc_block".into()],
            watchdog_modules: vec!["watchdog".into(), "i6300esb".into()],
            late_modules: vec!["virtio_mem".into()],
            root_dev: "/dev/vda".into(),
            root_fs: "squashfs".into(),
            start: "sh -c 'snapboot ready; exec sh'".into(),
            env: vec!["APP_READY_CMD=snapboot ready".into()],
        }
        .render();
        let ring = s.find("virtio_ring.ko").unwrap();
        let virtio = s.find("/virtio.ko").unwrap();
        let blk = s.find("virtio_blk.ko").unwrap();
        assert!(ring < virtio && virtio < blk);
        assert!(
            s.contains("-- 'sh -c '\\''snapboot ready; exec sh'\\'''"),
            "{s}"
        );
        assert!(s.contains("--env 'APP_READY_CMD=snapboot ready'"));
        assert!(s.find("resume").unwrap() < s.find("mount -t squashfs").unwrap());
        // The SD host's driver: after the board's modules, only where the PCI bus has an
        // SD host, and before resume (the store may be on the card).
        let sd = s
            .find("grep -qs '^0x0805' /sys/bus/pci/devices/*/class")
            .unwrap();
        assert!(blk < sd && sd < s.find("sdhci_pci.ko").unwrap());
        assert!(s.find("mmc_block.ko").unwrap() < s.find("resume --from-cmdline").unwrap());
        // The watchdog's driver, where the PCI bus has one, before resume arms it.
        let wd = s
            .find("grep -qs '^0x25ab' /sys/bus/pci/devices/*/device")
            .unwrap();
        assert!(wd < s.find("/watchdog.ko").unwrap());
        assert!(s.find("/watchdog.ko").unwrap() < s.find("i6300esb.ko").unwrap());
        assert!(s.find("i6300esb.ko").unwrap() < s.find("resume --from-cmdline").unwrap());
        // dm-crypt only for an encrypted lazy capture: inside the lazy case, after its modules.
        let lazy = s.find("\" snapboot.lazy\"").unwrap();
        let snap = s.find("dm_snapshot.ko").unwrap();
        let encrypt = s.find("\" snapboot.encrypt=\"").unwrap();
        let crypt = s.find("dm_crypt.ko").unwrap();
        assert!(lazy < snap && snap < encrypt && encrypt < crypt, "{s}");
        // Lazy-capture modules: only on a cold boot that asks for them, after resume.
        let lazy = s.find("*\" snapboot.lazy\"*)").unwrap();
        assert!(s.find("resume --from-cmdline").unwrap() < lazy);
        assert!(lazy < s.find("dm_mod.ko").unwrap());
        assert!(s.find("dm_mod.ko").unwrap() < s.find("dm_snapshot.ko").unwrap());
        // Deferred memory: the driver is kept for later, never loaded at boot.
        let late = s.find("*\" snapboot.defermem=\"*)").unwrap();
        assert!(
            late < s
                .find("cp /lib/modules/virtio_mem.ko /run/snapboot/modules/")
                .unwrap()
        );
        assert!(!s.contains("insmod /lib/modules/virtio_mem.ko"));
    }
}
