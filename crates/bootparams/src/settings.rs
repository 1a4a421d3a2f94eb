//! The reference table of every setting: its key, the values it takes, its default, what
//! it means, and whether the config file may carry it or only the kernel command line.
//!
//! [`SETTINGS`] is the one place this is written; the man page `snapboot.conf(5)`, the
//! default config file `guest/snapboot.conf`, the table in docs/config.md and the refusals
//! of kernel-only keys in a config file are all made from it ([`crate::config`]), and a
//! unit test keeps it in step with [`crate::key::ALL`].

use crate::key;

/// Where the device reads its config file: on the root filesystem, and at the same path in
/// the initramfs, where resume runs.
pub const CONFIG_PATH: &str = "/etc/snapboot/snapboot.conf";

/// A lazy image's swap region when `swapsize` is not set: the store's idle space at the
/// capture divided by this.
pub const SWAP_REGION_IDLE_DIVISOR: u64 = 2;

/// [`SWAP_REGION_IDLE_DIVISOR`] in words: the table's default of `swapsize`, and what
/// `snapboot capture --swap-size` says it defaults to.
pub const SWAPSIZE_DEFAULT: &str = "half the store's idle space";

/// Where a setting may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In the config file or on the kernel command line (which wins).
    Anywhere,
    /// Only on the kernel command line, for this reason: it is about one boot, or it is
    /// for measuring and testing.
    KernelOnly(&'static str),
}

/// One setting of the reference table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The kernel word's key, `snapboot.` included (a [`key`] constant).
    pub key: &'static str,
    /// The values it takes, as a reader writes them.
    pub values: &'static str,
    /// A value it takes, for the default file and the man page.
    pub example: &'static str,
    /// What it is when nobody sets it.
    pub default: &'static str,
    /// What it means, in one sentence.
    pub meaning: &'static str,
    /// Where it may be written.
    pub scope: Scope,
}

impl Setting {
    /// The key without `snapboot.`: what the config file writes.
    pub fn name(&self) -> &'static str {
        self.key.strip_prefix(crate::PREFIX).unwrap_or(self.key)
    }

    /// Whether it is a flag (a bare kernel word, `yes` or `no` in the file).
    pub fn is_flag(&self) -> bool {
        self.values == FLAG
    }

    /// Whether the config file may carry it.
    pub fn in_file(&self) -> bool {
        self.scope == Scope::Anywhere
    }
}

/// What a flag takes in the table.
const FLAG: &str = "yes|no";

/// Why a word that asks one boot to do something is not in the file.
const ONE_BOOT: &str = "it asks one boot for something";
/// Why a measuring word is not in the file.
const MEASURING: &str = "it is for measuring one boot";

/// Every setting, in [`key::ALL`] order.
pub const SETTINGS: [Setting; 34] = [
    Setting {
        key: key::STORE,
        example: "PARTLABEL=snapstore",
        values: "/dev/NAME, PARTUUID=U, PARTLABEL=L, LABEL=L or none",
        default: "none",
        meaning: "the store: a device path, a partition's GPT UUID or name, or the store's own \
                  label; snapboot restores and captures only with a store (`none` on the \
                  kernel command line: this boot uses none, whatever the file names); one no \
                  disk has is reported at once when the disks are there and stopped changing, \
                  and waited for (2 s at most) only while disks are still appearing",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::CAPTURE,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "capture an image at the application's ready point (needs a store)",
        scope: Scope::KernelOnly(ONE_BOOT),
    },
    Setting {
        key: key::THEN,
        example: "continue",
        values: "poweroff|continue",
        default: "poweroff",
        meaning: "what a capture does once the image is on the store: power off, or let the \
                  application go on",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::FORCE,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "capture even while block filesystems are mounted writable (their later \
                  changes are not in the image)",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::NODROP,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "keep the clean page cache in the image instead of dropping it before capture",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::NOCOMPACT,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "skip memory compaction before capture",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::COMPRESS,
        example: "none",
        values: "lz4|none",
        default: "lz4",
        meaning: "how a capture compresses the image's chunks",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::LAZY,
        example: "max",
        values: "max or a size such as 96M",
        default: "off (an eager image)",
        meaning: "a lazy image: page out as much user memory as possible, or about SIZE, to a \
                  swap region the restored system pages back in on demand",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::SWAPSIZE,
        example: "1G",
        values: "a size such as 1G",
        default: SWAPSIZE_DEFAULT,
        meaning: "a lazy image's swap region size",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::NOVERITY,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "a lazy image without a dm-verity tree: page-ins are not verified",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::PROFILE,
        example: "prefetch",
        values: "eager|prefetch|off",
        default: "eager",
        meaning: "a lazy re-capture from a restored lazy system: keep the pages touched since \
                  the restore in the image, put them first in the swap region and read them back \
                  after each restore, or ignore them",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::PROFILECHECK,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "after each restore, report how much of a lazy image's profile is in memory \
                  and which processes took major faults",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::AFTERUDEV,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "initramfs-tools: restore after udev (local-premount), for a store whose \
                  driver udev loads",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::ONCE,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "restore an image once, then invalidate it",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::KHIBERNATE,
        example: "/dev/vdc",
        values: "/dev/NAME",
        default: "none",
        meaning: "baseline for benchmarks: at the ready point, the kernel's own hibernation to \
                  this swap device",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::KRESUME,
        example: "/dev/vdc",
        values: "/dev/NAME",
        default: "none",
        meaning: "baseline for benchmarks: the kernel's own resume from this swap device",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::COLDKERNEL,
        example: "/dev/vdc",
        values: "/dev/NAME",
        default: "none",
        meaning: "on a restore kernel: the kernel pack (stock kernel and initramfs) a cold boot \
                  is handed to when nothing is restored",
        scope: Scope::KernelOnly(
            "it belongs to the restore kernel's boot entry, and the file is read by both kernels",
        ),
    },
    Setting {
        key: key::HANDEDOVER,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "this cold boot was handed over by a restore kernel, which said why: do not \
                  resume (the restore kernel adds it)",
        scope: Scope::KernelOnly(ONE_BOOT),
    },
    Setting {
        key: key::IMAGE,
        example: "current,factory",
        values: "NAME[,NAME...]",
        default: "current; resume tries the newest first",
        meaning: "a capture's image name (the first); the images resume tries first, in order, \
                  before the store's others",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::DEDUPE,
        example: "selective:90",
        values: "off|full|selective|selective:USE|selective:USE:RUN",
        default: "selective:90",
        meaning: "storage dedupe at capture: reference an older image's chunk only when the new \
                  image uses at least USE percent of it (in runs of at least RUN pages)",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::PIN,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "pin the captured image: gc and later captures keep it",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::PMTIMES,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "the image times each device's restore (pm_print_times), for snapboot analyze",
        scope: Scope::KernelOnly(MEASURING),
    },
    Setting {
        key: key::DEFERMEM,
        example: "4G",
        values: "a size such as 4G",
        default: "off",
        meaning: "deferred memory: the system boots (and images hold) only its boot memory, and \
                  after ready or restored adds the rest until this much RAM is online",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::MEMONLINE,
        example: "kernel",
        values: "movable|kernel",
        default: "movable",
        meaning: "deferred memory goes online as movable (it can be taken offline again) or \
                  kernel memory",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::MEMDEADLINE,
        example: "30",
        values: "seconds, 1 or more",
        default: "30",
        meaning: "after this long the deferred memory is checked, and what is missing is onlined \
                  or requested again",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::MEMFAULT,
        example: "offline",
        values: "offline|noload",
        default: "none",
        meaning: "tests: break the first attempt to add deferred memory",
        scope: Scope::KernelOnly("it breaks one boot on purpose, for tests"),
    },
    Setting {
        key: key::BASELINE,
        example: "medium",
        values: "medium",
        default: "none",
        meaning: "benchmarks: instead of restoring, read the image's stored bytes with plain \
                  sequential reads, print the medium's throughput and power off",
        scope: Scope::KernelOnly("it replaces one boot's restore with a measurement"),
    },
    Setting {
        key: key::ATTEMPTS,
        example: "3",
        values: "a count, 1 or more",
        default: "2",
        meaning: "crash-loop guard: restore an image at most this many times without a \
                  confirmation, then skip it",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::CONFIRM,
        example: "boot-complete",
        values: "auto|boot-complete|up|app|restored",
        default: "auto",
        meaning: "when a restore of the captured image counts as confirmed: systemd reaches \
                  boot-complete.target after it (auto under systemd), the system stays up \
                  `grace` seconds (auto otherwise), the application runs snapboot confirm, or \
                  at once",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::GRACE,
        example: "30",
        values: "seconds, 1 or more",
        default: "15",
        meaning: "with confirm=up: how long a restored system must stay up to be confirmed",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::WATCHDOG,
        example: "30",
        values: "seconds, 1 or more",
        default: "off",
        meaning: "arm the hardware watchdog (/dev/watchdog0) with this timeout before each \
                  restore hands over to the image; the restored system feeds it until the \
                  restore is confirmed, so one that hangs first is reset",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::NORECAPTURE,
        example: "yes",
        values: FLAG,
        default: "no",
        meaning: "a boot whose images were refused because the system changed (an update) does \
                  not capture a new one at the ready point",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::ENCRYPT,
        example: "tpm",
        values: "tpm|tpm:PCR+PCR...|key",
        default: "off",
        meaning: "images are encrypted with the device key, and only those restore: a key sealed \
                  to the TPM (and to these PCRs), or the key file /etc/snapboot/device.key",
        scope: Scope::Anywhere,
    },
    Setting {
        key: key::ROLLBACK,
        example: "tpm",
        values: "auto|tpm|off",
        default: "auto (tpm with encrypt=tpm)",
        meaning: "rollback protection: each capture raises a TPM counter and records it in the \
                  image; an image below the counter (an older copy of the store written back) \
                  is refused",
        scope: Scope::Anywhere,
    },
];

/// The setting of a key, `snapboot.` or not.
pub fn setting(name: &str) -> Option<&'static Setting> {
    let name = name.strip_prefix(crate::PREFIX).unwrap_or(name);
    SETTINGS.iter().find(|s| s.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec::Vec;

    #[test]
    fn the_table_has_every_key_once_in_order() {
        let keys: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(keys, key::ALL);
    }

    #[test]
    fn each_default_the_table_writes_as_a_value_parses_to_the_default() {
        let plain = crate::BootParams::default();
        let mut checked = 0;
        for s in &SETTINGS {
            let described = s.default.contains(' ') || (!s.is_flag() && s.default == "none");
            if described || (!s.is_flag() && s.default == "off") {
                continue;
            }
            let mut p = crate::BootParams::default();
            p.apply(&format!("{}={}", s.key, s.default)).unwrap();
            match s.key {
                key::COMPRESS => assert_eq!(p.compression, Some(storelayout::Compression::Lz4)),
                key::DEDUPE => assert_eq!(p.dedupe, Some(storelayout::Dedupe::SELECTIVE)),
                _ => assert_eq!(p, plain, "{}", s.key),
            }
            checked += 1;
        }
        assert_eq!(checked, 21);
    }

    /// The defaults the table writes as words (`none`, `off`, a sentence) are what nobody
    /// setting the key means: the default settings carry no word for any of them.
    #[test]
    fn each_default_the_table_describes_is_the_unset_value() {
        let words = crate::BootParams::default().render();
        let mut checked = 0;
        for s in &SETTINGS {
            let described = s.default.contains(' ') || matches!(s.default, "none" | "off");
            if !described || s.is_flag() {
                continue;
            }
            let key = |w: &String| w.split('=').next() == Some(s.key);
            assert!(!words.iter().any(key), "{} has a default word", s.key);
            checked += 1;
        }
        assert_eq!(checked, 13);
    }

    /// `swapsize`'s default is said once, in words that match the divisor the capture uses.
    #[test]
    fn the_swapsize_default_says_the_divisor() {
        let word = match SWAP_REGION_IDLE_DIVISOR {
            2 => "half",
            3 => "a third",
            4 => "a quarter",
            d => panic!("no word for 1/{d}"),
        };
        assert_eq!(SWAPSIZE_DEFAULT, format!("{word} the store's idle space"));
        assert_eq!(setting("swapsize").unwrap().default, SWAPSIZE_DEFAULT);
    }
}
