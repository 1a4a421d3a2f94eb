//! The `snapboot.*` kernel command-line protocol.
//!
//! The host (the board, the benchmarks) asks the device for a capture, a snapshot boot or a
//! baseline through words on the kernel command line; the device (`snapboot ready`,
//! `snapboot resume` in the initramfs) reads them back. [`BootParams`] is both ends: the
//! board builds one and appends [`BootParams::render`], the device calls
//! [`BootParams::parse`] on `/proc/cmdline`. Every key is a constant in [`key`]; a
//! `snapboot.*` word that is not one of them, or a value that does not parse, is an error
//! that names the word, never silently ignored.
//!
//! ```text
//! snapboot.store=WHERE      the store: a device path, PARTUUID=, PARTLABEL= or LABEL=
//!                           (the store's own label); resolved before udev from sysfs and
//!                           the partition tables, a store is only used if it has the magic
//! snapboot.capture          capture at the ready point (needs snapboot.store)
//! snapboot.then=continue    keep running after the capture (default: power off)
//! snapboot.force            capture even with writable block filesystems mounted
//! snapboot.nodrop           keep the clean page cache (measuring only)
//! snapboot.nocompact        skip memory compaction (measuring only)
//! snapboot.compress=C       chunk compression: lz4 (default) or none
//! snapboot.lazy[=SIZE]      lazy image: page out as much as possible, or about SIZE
//! snapboot.swapsize=SIZE    lazy image: size of the swap region
//! snapboot.noverity         lazy image: no dm-verity tree (page-ins are not verified)
//! snapboot.profile=P        lazy re-capture from a restored lazy system: what to do with
//!                           the pages touched since the restore: eager (default: keep them
//!                           in the image), prefetch (first in the swap region, read back
//!                           right after restore) or off
//! snapboot.profilecheck     after each restore: how much of a lazy image's profile and of
//!                           the rest is in memory, and 5 s later which processes took
//!                           major faults (what the eager image lacked)
//! snapboot.once             restore the image once, then invalidate it
//! snapboot.afterudev        initramfs-tools: restore after udev (local-premount), not
//!                           before it (init-top): for a store whose driver udev loads
//! snapboot.khibernate=DEV   baseline: the kernel's own hibernation to swap DEV
//! snapboot.kresume=DEV      baseline: the kernel's own resume from swap DEV
//! snapboot.coldkernel=DEV   on a restore kernel: the kernel pack (stock kernel and
//!                           initramfs) to hand a cold boot to when there is nothing to restore
//! snapboot.handedover       this cold boot was handed over by a restore kernel: do not resume
//! snapboot.image=N[,N...]   capture as image N (the first); at resume try
//!                           these images in order, then the store's others, newest first
//! snapboot.dedupe=D         storage dedupe at capture: off, full, selective
//!                           (the default: selective:90), selective:USE or selective:USE:RUN
//! snapboot.pin              pin the captured image (gc and captures keep it)
//! snapboot.pmtimes          the image times each device's restore (pm_print_times), for
//!                           `snapboot analyze` to name the slowest devices
//! snapboot.defermem=SIZE    deferred memory: the system boots (and images hold) only its
//!                           boot memory; after ready or restored it adds the rest until
//!                           SIZE of RAM is online (virtio-mem on the board)
//! snapboot.memonline=Z      deferred memory goes online as movable (default: it can be
//!                           taken offline again) or kernel memory
//! snapboot.memdeadline=S    seconds after which the deferred memory is checked and what is
//!                           missing is onlined or requested again (default 30)
//! snapboot.memfault=F       tests: break the first attempt to add deferred memory:
//!                           offline (added but left offline) or noload (never requested)
//! snapboot.baseline=medium  benchmarks: instead of restoring, read the stored bytes of the
//!                           image resume would restore with plain sequential reads, print
//!                           the medium's throughput and power off
//! snapboot.attempts=N       crash-loop guard: restore an image at most N times without a
//!                           confirmation from the restored system (default 2), then skip it
//! snapboot.confirm=C        at capture: when a restore of the image counts as confirmed:
//!                           auto (the default: boot-complete under systemd, else up),
//!                           boot-complete (systemd reaches boot-complete.target again after
//!                           the restore: the units ordered before it passed), up (the
//!                           restored system stays up snapboot.grace seconds), app (the
//!                           application's health check runs `snapboot confirm`) or restored
//!                           (at once, as soon as the restored system runs)
//! snapboot.grace=S          at capture: seconds a restored system must stay up to be
//!                           confirmed with confirm=up (default 15)
//! snapboot.watchdog=S       arm the hardware watchdog (/dev/watchdog0) with an S-second
//!                           timeout before each restore hands over to the image; the
//!                           restored system feeds it until the restore is confirmed, so a
//!                           restored system that hangs first is reset (default off)
//! snapboot.norecapture      a boot whose images were refused because the system changed
//!                           (an update) does not capture a new one at the ready point
//! snapboot.encrypt=E        images are encrypted with the device key, and only images
//!                           encrypted with it restore: tpm (a key sealed to the TPM, kept in
//!                           the store), tpm:N+N (sealed to those SHA-256 PCRs too) or key
//!                           (the key file /etc/snapboot/device.key in the initramfs)
//! snapboot.rollback=R       rollback protection: tpm (each capture raises a TPM NV counter
//!                           of its image's name and records the value in the image; an
//!                           image with a lower value than the counter is an older copy
//!                           written back, and refused), off, or auto (the default: tpm
//!                           when snapboot.encrypt=tpm, else off)
//! noresume                  the kernel's own word: restore nothing this boot (a cold boot
//!                           that says so), whatever names a store
//! ```
//!
//! Sizes are `123`, `64K`, `96M` or `1G` (binary units).
//!
//! `no_std` with `alloc`: the freestanding restorer reads its command line and the
//! initramfs's config file with this crate too. The `std` feature (on by default) adds
//! reading the config file from a path ([`config::load`]).
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;
#[cfg(all(test, not(feature = "std")))]
extern crate std;

mod address;
pub mod config;
pub mod settings;

pub use address::{partition_ids_text, StoreAddress, StoreAddressError, LABEL_MAX, STORE_FORMS};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use storelayout::Compression;
pub use storelayout::{BadImageName, Dedupe};
use thiserror::Error;

/// The keys, each once.
pub mod key {
    /// Store device.
    pub const STORE: &str = "snapboot.store";
    /// Capture at the ready point.
    pub const CAPTURE: &str = "snapboot.capture";
    /// What to do after the capture.
    pub const THEN: &str = "snapboot.then";
    /// Capture despite writable mounts.
    pub const FORCE: &str = "snapboot.force";
    /// Keep the page cache.
    pub const NODROP: &str = "snapboot.nodrop";
    /// Skip compaction.
    pub const NOCOMPACT: &str = "snapboot.nocompact";
    /// Chunk compression.
    pub const COMPRESS: &str = "snapboot.compress";
    /// Lazy image.
    pub const LAZY: &str = "snapboot.lazy";
    /// Lazy image's swap region size.
    pub const SWAPSIZE: &str = "snapboot.swapsize";
    /// Boot-once image.
    pub const ONCE: &str = "snapboot.once";
    /// Baseline: kernel-native hibernation.
    pub const KHIBERNATE: &str = "snapboot.khibernate";
    /// Baseline: kernel-native resume.
    pub const KRESUME: &str = "snapboot.kresume";
    /// On a restore kernel: where the kernel pack for a cold boot is.
    pub const COLDKERNEL: &str = kernelpack::cmdline::COLDKERNEL;
    /// This cold boot was handed over by a restore kernel, which already said why.
    pub const HANDEDOVER: &str = kernelpack::cmdline::HANDEDOVER;
    /// Image names (capture's, then resume's order).
    pub const IMAGE: &str = "snapboot.image";
    /// Storage dedupe policy of a capture.
    pub const DEDUPE: &str = "snapboot.dedupe";
    /// Pin the captured image.
    pub const PIN: &str = "snapboot.pin";
    /// Capture an image that times every device's restore callback.
    pub const PMTIMES: &str = "snapboot.pmtimes";
    /// Lazy image without a dm-verity tree.
    pub const NOVERITY: &str = "snapboot.noverity";
    /// Lazy re-capture: what to do with the working-set profile.
    pub const PROFILE: &str = "snapboot.profile";
    /// Report the profile's residency after each restore.
    pub const PROFILECHECK: &str = "snapboot.profilecheck";
    /// initramfs-tools: restore after udev, not before it.
    pub const AFTERUDEV: &str = "snapboot.afterudev";
    /// Deferred memory: the RAM to end up with.
    pub const DEFERMEM: &str = "snapboot.defermem";
    /// Deferred memory: the zone it goes online in.
    pub const MEMONLINE: &str = "snapboot.memonline";
    /// Deferred memory: when to check that it arrived.
    pub const MEMDEADLINE: &str = "snapboot.memdeadline";
    /// Deferred memory: break the first attempt (tests).
    pub const MEMFAULT: &str = "snapboot.memfault";
    /// Benchmarks: the medium's baseline instead of a restore.
    pub const BASELINE: &str = "snapboot.baseline";
    /// Crash-loop guard: unconfirmed restores before an image is skipped.
    pub const ATTEMPTS: &str = "snapboot.attempts";
    /// Who confirms a restore.
    pub const CONFIRM: &str = "snapboot.confirm";
    /// How long a restored system stays up before `confirm=up` confirms it.
    pub const GRACE: &str = "snapboot.grace";
    /// The hardware watchdog across a restore.
    pub const WATCHDOG: &str = "snapboot.watchdog";
    /// No capture after an update made the images unusable.
    pub const NORECAPTURE: &str = "snapboot.norecapture";
    /// Encrypted images, and where the device key comes from.
    pub const ENCRYPT: &str = "snapboot.encrypt";
    /// Rollback protection.
    pub const ROLLBACK: &str = "snapboot.rollback";
    /// Every key.
    pub const ALL: [&str; 34] = [
        STORE,
        CAPTURE,
        THEN,
        FORCE,
        NODROP,
        NOCOMPACT,
        COMPRESS,
        LAZY,
        SWAPSIZE,
        NOVERITY,
        PROFILE,
        PROFILECHECK,
        AFTERUDEV,
        ONCE,
        KHIBERNATE,
        KRESUME,
        COLDKERNEL,
        HANDEDOVER,
        IMAGE,
        DEDUPE,
        PIN,
        PMTIMES,
        DEFERMEM,
        MEMONLINE,
        MEMDEADLINE,
        MEMFAULT,
        BASELINE,
        ATTEMPTS,
        CONFIRM,
        GRACE,
        WATCHDOG,
        NORECAPTURE,
        ENCRYPT,
        ROLLBACK,
    ];
}

/// Environment variable snapboot sets when it ran as the kernel's first process
/// (`rdinit=/bin/snapboot`) and then starts the `/init` script: the filesystems are mounted,
/// the init marker is printed and resume has run.
pub const EARLY_ENV: &str = "SNAPBOOT_EARLY";

/// How a restore kernel's release ends (`CONFIG_LOCALVERSION` in the board's
/// `kernel/restore.config`): the initramfs and `snapboot resume` tell by it that the running
/// kernel is a restore kernel, not the one that made the image.
pub const RESTORE_KERNEL_SUFFIX: &str = "-snapboot-restore";

/// A word of the command line that does not parse.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BootParamsError {
    /// A `snapboot.*` key this build does not know.
    #[error("unknown boot parameter {word:?} (known: {})", key::ALL.join(", "))]
    Unknown {
        /// The whole word.
        word: String,
    },
    /// A known key with a value it cannot take.
    #[error("{word}: {expected}")]
    BadValue {
        /// The whole word.
        word: String,
        /// What the key takes.
        expected: &'static str,
    },
    /// `snapboot.store=` with an address that does not parse.
    #[error("{word}: {source}")]
    StoreAddress {
        /// The whole word.
        word: String,
        /// Why.
        source: StoreAddressError,
    },
    /// `snapboot.image=` with a name an image cannot have ([`storelayout::check_image_name`]).
    #[error("{word}: {source}")]
    ImageName {
        /// The whole word.
        word: String,
        /// Which name, and why.
        source: BadImageName,
    },
}

/// What to do once the image is safely on the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Then {
    /// Power the board off (the usual semi-permanent capture).
    #[default]
    PowerOff,
    /// Thaw and let the application continue.
    Continue,
}

/// How much user memory a lazy capture pages out before the image is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// As much as the kernel can reclaim: the smallest image.
    Max,
    /// About this many bytes, least recently used first (the kernel's LRU).
    Bytes(u64),
}

/// Everything the `snapboot.*` words say. `Default` is a plain boot: no capture, no store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootParams {
    /// `snapboot.store=WHERE`.
    pub store: Option<StoreAddress>,
    /// `snapboot.capture`.
    pub capture: bool,
    /// `snapboot.then=continue|poweroff`.
    pub then: Then,
    /// `snapboot.force`.
    pub force: bool,
    /// Not `snapboot.nodrop`.
    pub drop_caches: bool,
    /// Not `snapboot.nocompact`.
    pub compact: bool,
    /// `snapboot.compress=C`; `None`: the capture's default.
    pub compression: Option<Compression>,
    /// `snapboot.lazy[=SIZE]`.
    pub lazy: Option<Reclaim>,
    /// `snapboot.swapsize=SIZE`.
    pub swap_size: Option<u64>,
    /// Not `snapboot.noverity`.
    pub verity: bool,
    /// `snapboot.profile=P`.
    pub profile: ProfileMode,
    /// `snapboot.profilecheck`.
    pub profile_check: bool,
    /// `snapboot.afterudev`.
    pub after_udev: bool,
    /// `snapboot.once`.
    pub once: bool,
    /// `snapboot.khibernate=DEV`.
    pub khibernate: Option<String>,
    /// `snapboot.kresume=DEV`.
    pub kresume: Option<String>,
    /// `snapboot.coldkernel=DEV`.
    pub cold_kernel: Option<String>,
    /// `snapboot.handedover`.
    pub handed_over: bool,
    /// `snapboot.image=N[,N...]` (empty: capture `current`, resume the newest first).
    pub images: Vec<String>,
    /// `snapboot.dedupe=D`; `None`: the store's default.
    pub dedupe: Option<Dedupe>,
    /// `snapboot.pin`.
    pub pin: bool,
    /// `snapboot.pmtimes`.
    pub pm_times: bool,
    /// `snapboot.defermem=SIZE`: the bytes of RAM to end up with.
    pub defer_mem: Option<u64>,
    /// `snapboot.memonline=Z`.
    pub mem_online: MemOnline,
    /// `snapboot.memdeadline=S`.
    pub mem_deadline: u32,
    /// `snapboot.memfault=F`.
    pub mem_fault: Option<MemFault>,
    /// `snapboot.baseline=medium`: read the image's stored bytes, report, power off.
    pub medium_baseline: bool,
    /// `snapboot.attempts=N`.
    pub attempts: u32,
    /// `snapboot.confirm=C`.
    pub confirm: Confirm,
    /// `snapboot.grace=S`.
    pub grace: u32,
    /// `snapboot.watchdog=S`: the watchdog's timeout across a restore (`None`: not armed).
    pub watchdog: Option<u32>,
    /// Not `snapboot.norecapture`.
    pub recapture: bool,
    /// `snapboot.encrypt=E`.
    pub encrypt: Encrypt,
    /// `snapboot.rollback=R`.
    pub rollback: Rollback,
    /// Not [`NORESUME`] (the kernel's own word): this boot may restore.
    pub resume: bool,
}

/// Whether images are encrypted, and where the device key comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Encrypt {
    /// Images in the clear (the default).
    #[default]
    Off,
    /// A key sealed to the device's TPM (and to these SHA-256 PCRs), kept in the store.
    Tpm { pcrs: Vec<u32> },
    /// The key file in the initramfs.
    KeyFile,
}

impl Encrypt {
    /// Parses `tpm`, `tpm:N+N...` (PCRs 0 to 23) or `key`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "key" => Some(Encrypt::KeyFile),
            "tpm" => Some(Encrypt::Tpm { pcrs: Vec::new() }),
            _ => {
                let list = s.strip_prefix("tpm:")?;
                let mut pcrs = Vec::new();
                for n in list.split('+') {
                    let n: u32 = n.parse().ok().filter(|&n| n < 24)?;
                    if !pcrs.contains(&n) {
                        pcrs.push(n);
                    }
                }
                pcrs.sort_unstable();
                Some(Encrypt::Tpm { pcrs })
            }
        }
    }

    /// The word [`Encrypt::parse`] reads (`off` for [`Encrypt::Off`]).
    pub fn word(&self) -> String {
        match self {
            Encrypt::Off => "off".into(),
            Encrypt::KeyFile => "key".into(),
            Encrypt::Tpm { pcrs } if pcrs.is_empty() => "tpm".into(),
            Encrypt::Tpm { pcrs } => format!(
                "tpm:{}",
                pcrs.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("+")
            ),
        }
    }

    /// Images are encrypted.
    pub fn on(&self) -> bool {
        *self != Encrypt::Off
    }
}

/// Whether images carry, and must carry, a TPM counter value that an older copy of the store
/// written back cannot match.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Rollback {
    /// [`Rollback::Tpm`] when images are encrypted with a key sealed to the TPM (the device
    /// has one), else [`Rollback::Off`].
    #[default]
    Auto,
    /// Each capture raises the image name's TPM NV counter and records the new value in
    /// the image; resume refuses an image whose value is below the counter, or that has
    /// none.
    Tpm,
    /// No counter: an older copy of the store written back restores if it authenticates.
    Off,
}

impl Rollback {
    /// Every mode, in the order the word list names them.
    pub const ALL: [Self; 3] = [Self::Auto, Self::Tpm, Self::Off];

    /// The word, as `snapboot.rollback=` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Tpm => "tpm",
            Self::Off => "off",
        }
    }

    /// Parses [`Rollback::word`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.word() == s)
    }

    /// Whether the TPM counter is kept, with `encrypt` in effect.
    pub fn on(self, encrypt: &Encrypt) -> bool {
        match self {
            Self::Auto => matches!(encrypt, Encrypt::Tpm { .. }),
            Self::Tpm => true,
            Self::Off => false,
        }
    }
}

/// Unconfirmed restores of one image before the crash-loop guard skips it (the restorer,
/// which reads no config file, takes it from the same place).
pub use bootstatus::DEFAULT_ATTEMPTS;

/// When a restore counts as confirmed, so the crash-loop guard's count of its image starts
/// again (fixed at capture: the restored system reads its capture's command line). Only a
/// restore that proved the application alive should count: one that dies before this point
/// is an unconfirmed restore, and after `snapboot.attempts` of them the image is skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Confirm {
    /// [`Confirm::BootComplete`] when the restored system runs systemd, else [`Confirm::Up`].
    #[default]
    Auto,
    /// systemd reaches `boot-complete.target` again after the restore: every unit ordered
    /// before it and required by it (the application's health checks) passed.
    BootComplete,
    /// The restored system stays up `snapboot.grace` seconds (for an init that powers off
    /// or reboots when the application dies, as the board's does).
    Up,
    /// The application, with `snapboot confirm` once its health check passes.
    App,
    /// snapboot, as soon as the restored system runs (the `restored` marker): for a system
    /// with nothing to prove, such as a shell.
    Restored,
}

impl Confirm {
    /// Every mode, in the order the word list names them.
    pub const ALL: [Self; 5] = [
        Self::Auto,
        Self::BootComplete,
        Self::Up,
        Self::App,
        Self::Restored,
    ];

    /// The word, as `snapboot.confirm=` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::BootComplete => "boot-complete",
            Self::Up => "up",
            Self::App => "app",
            Self::Restored => "restored",
        }
    }

    /// Parses [`Confirm::word`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.word() == s)
    }

    /// The mode in effect on a restored system: [`Confirm::Auto`] made
    /// [`Confirm::BootComplete`] under systemd, [`Confirm::Up`] otherwise.
    pub fn resolve(self, systemd: bool) -> Self {
        match (self, systemd) {
            (Self::Auto, true) => Self::BootComplete,
            (Self::Auto, false) => Self::Up,
            (c, _) => c,
        }
    }
}

/// Seconds a restored system must stay up before `snapboot.confirm=up` confirms it.
pub const DEFAULT_GRACE: u32 = 15;

/// Seconds after ready (or restored) by which deferred memory must be online.
pub const DEFAULT_MEM_DEADLINE: u32 = 30;

/// The zone deferred memory goes online in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MemOnline {
    /// `ZONE_MOVABLE`: only movable allocations (user pages, page cache), so the memory
    /// can be taken offline again.
    #[default]
    Movable,
    /// `ZONE_NORMAL`: the kernel may place its own data there too; it stays for good.
    Kernel,
}

impl MemOnline {
    /// The word, as `snapboot.memonline=` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Movable => "movable",
            Self::Kernel => "kernel",
        }
    }

    /// What `/sys/devices/system/memory/*/state` and `auto_online_blocks` take.
    pub fn sysfs(self) -> &'static str {
        match self {
            Self::Movable => "online_movable",
            Self::Kernel => "online_kernel",
        }
    }

    /// Parses [`MemOnline::word`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Movable, Self::Kernel]
            .into_iter()
            .find(|m| m.word() == s)
    }
}

/// A broken first attempt at adding deferred memory (for tests of the deadline check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemFault {
    /// The memory is added but left offline.
    Offline,
    /// The memory is never requested.
    NoLoad,
}

impl MemFault {
    /// The word, as `snapboot.memfault=` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Offline => "offline",
            Self::NoLoad => "noload",
        }
    }

    /// Parses [`MemFault::word`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Offline, Self::NoLoad]
            .into_iter()
            .find(|m| m.word() == s)
    }
}

impl Default for BootParams {
    fn default() -> Self {
        BootParams {
            store: None,
            capture: false,
            then: Then::PowerOff,
            force: false,
            drop_caches: true,
            compact: true,
            compression: None,
            lazy: None,
            verity: true,
            profile: ProfileMode::Eager,
            profile_check: false,
            after_udev: false,
            swap_size: None,
            once: false,
            khibernate: None,
            kresume: None,
            cold_kernel: None,
            handed_over: false,
            images: Vec::new(),
            dedupe: None,
            pin: false,
            pm_times: false,
            defer_mem: None,
            mem_online: MemOnline::Movable,
            mem_deadline: DEFAULT_MEM_DEADLINE,
            mem_fault: None,
            medium_baseline: false,
            attempts: DEFAULT_ATTEMPTS,
            confirm: Confirm::Auto,
            grace: DEFAULT_GRACE,
            watchdog: None,
            recapture: true,
            encrypt: Encrypt::Off,
            rollback: Rollback::Auto,
            resume: true,
        }
    }
}

/// What a dedupe word may be.
pub const DEDUPE_WORDS: &str = "off, full, selective, selective:USE% or selective:USE%:RUN";

/// Parses `off`, `full`, `selective` (the default policy), `selective:USE` (reference an
/// old chunk only when the image uses at least USE percent of it, 0-100),
/// `selective:USE:RUN` (and only runs of at least RUN ≥ 1 pages), or `runs:N` (the same as
/// `selective:0:N`).
pub fn parse_dedupe(s: &str) -> Option<Dedupe> {
    let percent = |u: &str| {
        u.trim_end_matches('%')
            .parse::<u8>()
            .ok()
            .filter(|&u| u <= 100)
    };
    let run = |n: &str| n.parse::<u16>().ok().filter(|&n| n >= 1);
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        ["off"] => Some(Dedupe::Off),
        ["full"] => Some(Dedupe::Full),
        ["selective"] => Some(Dedupe::SELECTIVE),
        ["selective", u] => Some(Dedupe::Selective {
            min_use: percent(u)?,
            min_run: 1,
        }),
        ["selective", u, n] => Some(Dedupe::Selective {
            min_use: percent(u)?,
            min_run: run(n)?,
        }),
        ["runs", n] => Some(Dedupe::Selective {
            min_use: 0,
            min_run: run(n)?,
        }),
        _ => None,
    }
}

/// A value a command-line flag does not take: the value, and what it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{given:?}: expected {expected}")]
pub struct BadValue {
    /// The value given.
    pub given: String,
    /// What the flag takes.
    pub expected: &'static str,
}

/// What `--dedupe` and `snapboot.dedupe=` take.
pub const DEDUPE_VALUES: &str = "off, full, selective, selective:USE or selective:USE:RUN";

/// [`parse_dedupe`] for a command-line flag (clap's `value_parser`).
pub fn dedupe_value(s: &str) -> Result<Dedupe, BadValue> {
    parse_dedupe(s).ok_or_else(|| BadValue {
        given: s.into(),
        expected: DEDUPE_VALUES,
    })
}

/// The word form of a dedupe policy, as [`parse_dedupe`] reads it.
pub fn dedupe_word(d: Dedupe) -> String {
    match d {
        Dedupe::Off => "off".into(),
        Dedupe::Full => "full".into(),
        Dedupe::Selective {
            min_use,
            min_run: 1,
        } => format!("selective:{min_use}"),
        Dedupe::Selective { min_use, min_run } => format!("selective:{min_use}:{min_run}"),
    }
}

/// Parses `NAME[,NAME...]`, each a valid image name ([`storelayout::check_image_name`]):
/// the first name that is not one is refused, saying why.
pub fn parse_images(s: &str) -> Result<Vec<String>, BadImageName> {
    s.split(',')
        .map(|n| storelayout::check_image_name(n).map(|()| n.to_string()))
        .collect()
}

/// Parses `123`, `64K`, `96M`, `1G` (binary units) into bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// What a lazy re-capture does with the pages the restored system touched since its
/// restore (its working set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProfileMode {
    /// Keep them in the eager image.
    #[default]
    Eager,
    /// Page them out first (to the front of the swap region) and read them back in right
    /// after each restore, beside the application.
    Prefetch,
    /// Ignore them: the kernel's LRU decides, as for a first capture.
    Off,
}

impl ProfileMode {
    /// The word, as `snapboot.profile=` takes it.
    pub fn word(self) -> &'static str {
        match self {
            Self::Eager => "eager",
            Self::Prefetch => "prefetch",
            Self::Off => "off",
        }
    }

    /// Parses [`ProfileMode::word`].
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Eager, Self::Prefetch, Self::Off]
            .into_iter()
            .find(|m| m.word() == s)
    }
}

/// Parses a lazy capture's amount: empty or `max`, or a size like `96M`.
pub fn parse_reclaim(s: &str) -> Option<Reclaim> {
    let s = s.trim();
    if s.is_empty() || s == "max" {
        return Some(Reclaim::Max);
    }
    parse_size(s).map(Reclaim::Bytes)
}

/// Parses `none` or `lz4`.
pub fn parse_compression(s: &str) -> Option<Compression> {
    Compression::from_name(s)
}

/// The word form of a compression, as [`parse_compression`] reads it.
pub fn compression_word(c: Compression) -> String {
    c.name().into()
}

pub use kernelpack::cmdline::value_of;

/// What a size-taking key expects.
const SIZE: &str = "expected a size such as 96M";

/// What a flag takes after `=`, if anything.
const FLAG_VALUES: &str = "expected no value, or yes, no, true or false";

/// What every key starts with on the kernel command line.
pub const PREFIX: &str = "snapboot.";

/// `snapboot.store=none`: this boot uses no store, whatever the config file names (a
/// maintenance boot, or a cold boot measured as the system boots without snapboot).
pub const NO_STORE: &str = "none";

/// `noresume`, the kernel's word for "do not resume this once" (Debian's initramfs-tools
/// and the kernel's own resume honour it): snapboot restores nothing on such a boot either,
/// and says so as the status's reason. Not a `snapboot.*` key, and not in the config file.
pub const NORESUME: &str = "noresume";

impl BootParams {
    /// Reads the `snapboot.*` words of a kernel command line, and [`NORESUME`]; other words
    /// are not ours and are skipped. A later word overrides an earlier one with the same key, as the kernel's
    /// own parameters do.
    pub fn parse(cmdline: &str) -> Result<BootParams, BootParamsError> {
        let mut p = BootParams::default();
        for word in cmdline.split_whitespace() {
            if word.starts_with(PREFIX) {
                p.apply(word)?;
            } else if word == NORESUME {
                p.resume = false;
            }
        }
        Ok(p)
    }

    /// Sets what one `snapboot.*` word says (`snapboot.KEY` or `snapboot.KEY=VALUE`): the
    /// one parser of every value, for the kernel command line and the config file
    /// ([`crate::config`]) alike. A flag takes no value, or `yes`, `no`, `true` or `false`
    /// (so a command line can turn off what a config file turned on).
    pub fn apply(&mut self, word: &str) -> Result<(), BootParamsError> {
        let p = self;
        let (k, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        let bad = |expected| BootParamsError::BadValue {
            word: word.to_string(),
            expected,
        };
        let flag = |v: Option<&str>| match v {
            None | Some("yes" | "true") => Ok(true),
            Some("no" | "false") => Ok(false),
            Some(_) => Err(bad(FLAG_VALUES)),
        };
        let text = |v: Option<&str>| match v {
            Some(v) if !v.is_empty() => Ok(v.to_string()),
            _ => Err(bad("expected a device such as /dev/vdb")),
        };
        match k {
            key::STORE if value == Some(NO_STORE) => p.store = None,
            key::STORE => {
                let a = StoreAddress::parse(value.unwrap_or_default());
                p.store = Some(a.map_err(|source| BootParamsError::StoreAddress {
                    word: word.to_string(),
                    source,
                })?);
            }
            key::CAPTURE => p.capture = flag(value)?,
            key::FORCE => p.force = flag(value)?,
            key::NODROP => p.drop_caches = !flag(value)?,
            key::NOCOMPACT => p.compact = !flag(value)?,
            key::ONCE => p.once = flag(value)?,
            key::THEN => {
                p.then = match value {
                    Some("continue") => Then::Continue,
                    Some("poweroff") => Then::PowerOff,
                    _ => return Err(bad("expected continue or poweroff")),
                }
            }
            key::COMPRESS => {
                let c = value.and_then(parse_compression);
                p.compression = Some(c.ok_or_else(|| bad("expected lz4 or none"))?);
            }
            key::LAZY => {
                let r = parse_reclaim(value.unwrap_or(""));
                p.lazy = Some(r.ok_or_else(|| bad("expected max or a size such as 96M"))?);
            }
            key::SWAPSIZE => {
                p.swap_size = Some(value.and_then(parse_size).ok_or_else(|| bad(SIZE))?);
            }
            key::NOVERITY => p.verity = !flag(value)?,
            key::PROFILECHECK => p.profile_check = flag(value)?,
            key::AFTERUDEV => p.after_udev = flag(value)?,
            key::PROFILE => {
                p.profile = value
                    .and_then(ProfileMode::parse)
                    .ok_or_else(|| bad("expected eager, prefetch or off"))?;
            }
            key::KHIBERNATE => p.khibernate = Some(text(value)?),
            key::KRESUME => p.kresume = Some(text(value)?),
            key::COLDKERNEL => p.cold_kernel = Some(text(value)?),
            key::HANDEDOVER => p.handed_over = flag(value)?,
            key::IMAGE => {
                let names = value.ok_or_else(|| {
                    bad("expected image names such as current or current,factory \
                             (each 1 to 64 of A-Z a-z 0-9 . _ -)")
                })?;
                p.images = parse_images(names).map_err(|source| BootParamsError::ImageName {
                    word: word.to_string(),
                    source,
                })?;
            }
            key::DEDUPE => {
                let d = value.and_then(parse_dedupe);
                p.dedupe = Some(d.ok_or_else(|| {
                    bad("expected off, full, selective, selective:USE or selective:USE:RUN")
                })?);
            }
            key::PIN => p.pin = flag(value)?,
            key::PMTIMES => p.pm_times = flag(value)?,
            key::DEFERMEM => {
                p.defer_mem = Some(value.and_then(parse_size).ok_or_else(|| bad(SIZE))?);
            }
            key::MEMONLINE => {
                p.mem_online = value
                    .and_then(MemOnline::parse)
                    .ok_or_else(|| bad("expected movable or kernel"))?;
            }
            key::MEMDEADLINE => {
                let n = value.and_then(|v| v.parse().ok()).filter(|&n| n > 0);
                p.mem_deadline = n.ok_or_else(|| bad("expected seconds (1 or more)"))?;
            }
            key::MEMFAULT => {
                let f = value.and_then(MemFault::parse);
                p.mem_fault = Some(f.ok_or_else(|| bad("expected offline or noload"))?);
            }
            key::BASELINE => {
                if value != Some("medium") {
                    return Err(bad("expected medium"));
                }
                p.medium_baseline = true;
            }
            key::ATTEMPTS => {
                let n = value.and_then(|v| v.parse().ok()).filter(|&n| n > 0);
                p.attempts = n.ok_or_else(|| bad("expected a count (1 or more)"))?;
            }
            key::CONFIRM => {
                p.confirm = value
                    .and_then(Confirm::parse)
                    .ok_or_else(|| bad("expected auto, boot-complete, up, app or restored"))?;
            }
            key::GRACE => {
                let n = value.and_then(|v| v.parse().ok()).filter(|&n| n > 0);
                p.grace = n.ok_or_else(|| bad("expected seconds (1 or more)"))?;
            }
            key::WATCHDOG => {
                p.watchdog = match value {
                    Some("off") => None,
                    v => Some(
                        v.and_then(|v| v.parse().ok())
                            .filter(|&n| n > 0)
                            .ok_or_else(|| bad("expected seconds (1 or more) or off"))?,
                    ),
                };
            }
            key::NORECAPTURE => p.recapture = !flag(value)?,
            key::ENCRYPT => {
                p.encrypt = value
                    .and_then(Encrypt::parse)
                    .ok_or_else(|| bad("expected tpm, tpm:PCR+PCR... (0-23) or key"))?;
            }
            key::ROLLBACK => {
                p.rollback = value
                    .and_then(Rollback::parse)
                    .ok_or_else(|| bad("expected auto, tpm or off"))?;
            }
            _ => {
                return Err(BootParamsError::Unknown {
                    word: word.to_string(),
                })
            }
        }
        Ok(())
    }

    /// The words that say all of this (none for a default value), in [`key::ALL`] order.
    pub fn render(&self) -> Vec<String> {
        let with = |k: &str, v: &dyn core::fmt::Display| format!("{k}={v}");
        let words = [
            self.store.as_ref().map(|d| with(key::STORE, d)),
            self.capture.then(|| key::CAPTURE.to_string()),
            (self.then == Then::Continue).then(|| with(key::THEN, &"continue")),
            self.force.then(|| key::FORCE.to_string()),
            (!self.drop_caches).then(|| key::NODROP.to_string()),
            (!self.compact).then(|| key::NOCOMPACT.to_string()),
            self.compression
                .map(|c| with(key::COMPRESS, &compression_word(c))),
            self.lazy.map(|r| match r {
                Reclaim::Max => key::LAZY.to_string(),
                Reclaim::Bytes(b) => with(key::LAZY, &b),
            }),
            self.swap_size.map(|s| with(key::SWAPSIZE, &s)),
            (!self.verity).then(|| key::NOVERITY.to_string()),
            (self.profile != ProfileMode::Eager).then(|| with(key::PROFILE, &self.profile.word())),
            self.profile_check.then(|| key::PROFILECHECK.to_string()),
            self.after_udev.then(|| key::AFTERUDEV.to_string()),
            self.once.then(|| key::ONCE.to_string()),
            self.khibernate.as_ref().map(|d| with(key::KHIBERNATE, d)),
            self.kresume.as_ref().map(|d| with(key::KRESUME, d)),
            self.cold_kernel.as_ref().map(|d| with(key::COLDKERNEL, d)),
            self.handed_over.then(|| key::HANDEDOVER.to_string()),
            (!self.images.is_empty()).then(|| with(key::IMAGE, &self.images.join(","))),
            self.dedupe.map(|d| with(key::DEDUPE, &dedupe_word(d))),
            self.pin.then(|| key::PIN.to_string()),
            self.pm_times.then(|| key::PMTIMES.to_string()),
            self.defer_mem.map(|b| with(key::DEFERMEM, &b)),
            (self.mem_online != MemOnline::Movable)
                .then(|| with(key::MEMONLINE, &self.mem_online.word())),
            (self.mem_deadline != DEFAULT_MEM_DEADLINE)
                .then(|| with(key::MEMDEADLINE, &self.mem_deadline)),
            self.mem_fault.map(|f| with(key::MEMFAULT, &f.word())),
            self.medium_baseline.then(|| with(key::BASELINE, &"medium")),
            (self.attempts != DEFAULT_ATTEMPTS).then(|| with(key::ATTEMPTS, &self.attempts)),
            (self.confirm != Confirm::Auto).then(|| with(key::CONFIRM, &self.confirm.word())),
            (self.grace != DEFAULT_GRACE).then(|| with(key::GRACE, &self.grace)),
            self.watchdog.map(|t| with(key::WATCHDOG, &t)),
            (!self.recapture).then(|| key::NORECAPTURE.to_string()),
            self.encrypt
                .on()
                .then(|| with(key::ENCRYPT, &self.encrypt.word())),
            (self.rollback != Rollback::Auto).then(|| with(key::ROLLBACK, &self.rollback.word())),
            (!self.resume).then(|| NORESUME.to_string()),
        ];
        words.into_iter().flatten().collect()
    }
}

#[cfg(test)]
mod tests;
