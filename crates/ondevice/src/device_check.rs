//! What `snapboot check` checks of the device beside its kernel ([`kernelcheck`]): each
//! check is a function over what the command read (mount table, the store's header, the
//! initramfs's files, systemd's answers, the boot loader's files), so every rule has its
//! unit test; the command gathers the inputs.
//!
//! ```text
//!   root         / read-only, an overlay whose writes go to tmpfs, or in RAM; no other
//!                writable block filesystem (capture refuses them: capture_mounts)
//!   store        configured, on this device, a snapboot store, as large as the RAM
//!   initramfs    /bin/snapboot; the root's /etc/snapboot files, identical; the store's
//!                drivers; the device key with encrypt = key
//!   capture unit enabled, ordered after the application
//!   boot loader  GRUB's capture entry in grub.cfg (42_snapboot), U-Boot's capture label
//! ```
//!
//! Every finding is one line: what was found and, when it is not fine, what to do for this
//! installation ([`Installation`]: the package's way, or `snapboot install`'s).

use crate::capture_mounts;
use devinstall::install::system::Installation;
use devsys::system::Mount;
use kernelcheck::check::Verdict;
use serde::Serialize;

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    /// The root filesystem and the other mounts.
    Root,
    /// The configured store.
    Store,
    /// The initramfs the running kernel boots with.
    Initramfs,
    /// The capture unit (systemd).
    CaptureUnit,
    /// The boot loader's capture entry.
    BootLoader,
}

impl Area {
    /// The word the table prints.
    pub fn word(self) -> &'static str {
        match self {
            Area::Root => "root",
            Area::Store => "store",
            Area::Initramfs => "initramfs",
            Area::CaptureUnit => "capture unit",
            Area::BootLoader => "boot loader",
        }
    }
}

/// One finding: what was found, and what to do when it is not fine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What it is about.
    pub area: Area,
    /// Whether it blocks snapshot boot.
    pub verdict: Verdict,
    /// What was found.
    pub found: String,
    /// What to do (`None`: nothing).
    pub fix: Option<String>,
}

impl Finding {
    fn ok(area: Area, found: impl Into<String>) -> Self {
        Self {
            area,
            verdict: Verdict::Ok,
            found: found.into(),
            fix: None,
        }
    }

    fn bad(area: Area, verdict: Verdict, found: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            area,
            verdict,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }

    /// The finding on one line: verdict, area, what was found, the fix.
    pub fn line(&self) -> String {
        let fix = self
            .fix
            .as_ref()
            .map_or(String::new(), |f| format!(": {f}"));
        format!(
            "{:<8} {:<13} {}{fix}",
            self.verdict.to_string(),
            self.area.word(),
            self.found
        )
    }
}

/// The mount a path is on: the last mount (mountinfo order) whose target is the longest
/// prefix of `path`.
fn mount_of<'m>(mounts: &'m [Mount], path: &str) -> Option<&'m Mount> {
    let under = |m: &&Mount| {
        let t = m.target.trim_end_matches('/');
        path == m.target || path.starts_with(&format!("{t}/"))
    };
    mounts
        .iter()
        .filter(under)
        .fold(None, |best: Option<&Mount>, m| match best {
            Some(b) if b.target.len() > m.target.len() => Some(b),
            _ => Some(m),
        })
}

/// How to make the root read-only, for the fixes.
const READ_ONLY_ROOT: &str = "mount it read-only (`ro` on the kernel command line and in \
                              /etc/fstab) with a tmpfs overlay for what the system writes \
                              (docs/real-boards.md: read-only root, tmpfs where the \
                              system writes)";

/// The root and the other mounts (`mounts`: /proc/self/mountinfo; `is_device`: whether a
/// mount's source is a block device, as capture decides it): capture refuses a writable
/// block-backed filesystem, so each is a blocker.
pub fn root(mounts: &[Mount], is_device: impl Fn(&str) -> bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let plan = capture_mounts::plan(mounts, &is_device);
    match mount_of(mounts, "/") {
        None => out.push(Finding::bad(
            Area::Root,
            Verdict::Warn,
            "/ is not in the mount table",
            "run the check on the device itself",
        )),
        Some(m) if !m.rw() => out.push(Finding::ok(
            Area::Root,
            format!("/ is read-only ({} on {})", m.fstype, m.source),
        )),
        Some(m) if m.fstype == "overlay" => {
            let upper = m
                .super_options
                .split(',')
                .find_map(|o| o.strip_prefix("upperdir="))
                .unwrap_or("");
            match mount_of(mounts, upper) {
                Some(u) if matches!(u.fstype.as_str(), "tmpfs" | "ramfs") => out.push(Finding::ok(
                    Area::Root,
                    format!("/ is an overlay whose writes go to {} ({upper})", u.fstype),
                )),
                Some(u) if u.rw() && is_device(&u.source) => out.push(Finding::bad(
                    Area::Root,
                    Verdict::Blocker,
                    format!(
                        "/ is an overlay whose writes go to {} on {} ({upper})",
                        u.fstype, u.source
                    ),
                    "put the overlay's upper directory on a tmpfs",
                )),
                _ => out.push(Finding::bad(
                    Area::Root,
                    Verdict::Warn,
                    format!("/ is an overlay; where its writes go ({upper:?}) is not mounted here"),
                    "make sure its upper directory is on a tmpfs",
                )),
            }
        }
        Some(m) if !is_device(&m.source) => out.push(Finding::ok(
            Area::Root,
            format!("/ is {} ({}), not on a disk", m.fstype, m.source),
        )),
        Some(m) => out.push(Finding::bad(
            Area::Root,
            Verdict::Blocker,
            format!(
                "/ is mounted read-write ({} on {}): capture refuses it",
                m.fstype, m.source
            ),
            READ_ONLY_ROOT,
        )),
    }
    for m in plan.refused.iter().filter(|m| m.target != "/") {
        out.push(Finding::bad(
            Area::Root,
            Verdict::Blocker,
            format!(
                "{} is mounted read-write ({} on {}): capture refuses it",
                m.target, m.fstype, m.source
            ),
            "mount it read-only, or put what is written there on a tmpfs",
        ));
    }
    out
}

/// The configured store as the command found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreState {
    /// None given or configured (the error's words).
    NotConfigured(String),
    /// The config file or the kernel command line does not parse (the error's words).
    BadSettings(String),
    /// Configured but not usable: not on this device, not a store, a bad config file (the
    /// error's words).
    Unusable {
        /// What is wrong.
        why: String,
        /// Whether the device holds no store's magic (`store init` makes one).
        no_magic: bool,
        /// The store's address.
        address: String,
    },
    /// A store.
    Found {
        /// Which store and where it is (its address, where the address came from, the
        /// device).
        at: String,
        /// Its bytes (clusters times cluster size).
        bytes: u64,
        /// Its images.
        images: usize,
    },
}

const MIB: u64 = 1 << 20;

/// The store: configured, there, a store, and as large as the RAM (`ram`, bytes; an image
/// holds the memory in use, compressed, so a store smaller than the RAM may not take one of
/// a full memory).
pub fn store(state: &StoreState, ram: Option<u64>) -> Finding {
    match state {
        StoreState::NotConfigured(why) => Finding::bad(
            Area::Store,
            Verdict::Blocker,
            why.clone(),
            "name it in /etc/snapboot/snapboot.conf (`store = PARTLABEL=NAME`), then \
             `snapboot store init`",
        ),
        StoreState::BadSettings(why) => Finding::bad(
            Area::Store,
            Verdict::Blocker,
            why.clone(),
            "`snapboot config check` names the line",
        ),
        StoreState::Unusable {
            why,
            no_magic: true,
            address,
        } => Finding::bad(
            Area::Store,
            Verdict::Blocker,
            why.clone(),
            format!("`snapboot store init {address}` makes one (what the device holds is lost)"),
        ),
        StoreState::Unusable { why, .. } => Finding::bad(
            Area::Store,
            Verdict::Blocker,
            why.clone(),
            "fix the address in /etc/snapboot/snapboot.conf (`store =`) or the device",
        ),
        StoreState::Found { at, bytes, images } => {
            let found = format!("{at}: {} MiB, {images} image(s)", bytes / MIB);
            match ram {
                Some(ram) if *bytes < ram => Finding::bad(
                    Area::Store,
                    Verdict::Warn,
                    format!("{found}, smaller than the RAM ({} MiB)", ram / MIB),
                    "an image of a system using most of its memory may not fit: a store at \
                     least as large as the RAM",
                ),
                _ => Finding::ok(Area::Store, found),
            }
        }
    }
}

/// What the initramfs check reads.
pub struct InitramfsInputs<'a> {
    /// The initramfs's path (for the findings).
    pub path: &'a str,
    /// A file of the initramfs, by its absolute path (`None`: not there).
    pub initramfs: &'a dyn Fn(&str) -> Option<Vec<u8>>,
    /// A file of the running root, by its absolute path.
    pub root: &'a dyn Fn(&str) -> Option<Vec<u8>>,
    /// Whether the initramfs has the kernel module `name` (a `.ko` file under lib/modules)
    /// or the kernel has it built in.
    pub has_module: &'a dyn Fn(&str) -> bool,
    /// The drivers the store's device needs (`None`: not known, no store here).
    pub store_drivers: Option<&'a [String]>,
    /// The store's address, for the fix.
    pub store: &'a str,
    /// The settings say `encrypt = key`.
    pub encrypt_key: bool,
    /// How to rebuild the initramfs (`update-initramfs -u`).
    pub rebuild: &'a str,
    /// How snapboot was installed.
    pub installation: Installation,
}

/// The files of the root the initramfs must carry the same, with the verdict when it does
/// not: the config and the signing key decide what is restored; the others cost time.
const COPIED: [(&str, Verdict, &str); 4] = [
    (
        bootparams::config::CONFIG_PATH,
        Verdict::Blocker,
        "the boot restores by the initramfs's settings",
    ),
    (
        crate::store::PUBLIC_KEY_FILE,
        Verdict::Blocker,
        "the boot checks signatures with the initramfs's key",
    ),
    (
        "/etc/snapboot/image-kernel",
        Verdict::Warn,
        "a restore kernel reads the initramfs's record",
    ),
    (
        "/etc/snapboot/store-modules",
        Verdict::Warn,
        "the initramfs loads the drivers it lists",
    ),
];

/// The initramfs the running kernel boots with: the binary, the root's snapboot files
/// copied unchanged, the store's drivers listed and in it, the device key for
/// `encrypt = key`.
pub fn initramfs(i: &InitramfsInputs) -> Vec<Finding> {
    let mut out = Vec::new();
    let rebuild = format!("run `{}`", i.rebuild);
    let bad = |v, found: String, fix: &str| Finding::bad(Area::Initramfs, v, found, fix);
    if (i.initramfs)("/bin/snapboot").is_none() {
        out.push(bad(
            Verdict::Blocker,
            format!("{} has no /bin/snapboot: it cannot restore", i.path),
            &rebuild,
        ));
    }
    let mut same = Vec::new();
    for (path, verdict, why) in COPIED {
        match ((i.root)(path), (i.initramfs)(path)) {
            (None, None) => {}
            (Some(r), Some(f)) if r == f => same.push(path),
            (Some(_), None) => out.push(bad(
                verdict,
                format!("{} has no {path}: {why}", i.path),
                &rebuild,
            )),
            (None, Some(_)) => out.push(bad(
                verdict,
                format!("{} has a {path} the root no longer has: {why}", i.path),
                &rebuild,
            )),
            (Some(_), Some(_)) => out.push(bad(
                verdict,
                format!("{} has another {path} than the root: {why}", i.path),
                &rebuild,
            )),
        }
    }
    if i.encrypt_key {
        let key = crate::devicekey::DEVICE_KEY_FILE;
        match ((i.root)(key), (i.initramfs)(key)) {
            (Some(r), Some(f)) if r == f => same.push(key),
            (None, _) => out.push(bad(
                Verdict::Blocker,
                format!("encrypt = key, and the root has no {key}"),
                "`snapboot key device /etc/snapboot/device.key`, then rebuild the initramfs",
            )),
            (Some(_), found) => out.push(bad(
                Verdict::Blocker,
                format!(
                    "encrypt = key, and {} has {} {key}: encrypted images do not restore",
                    i.path,
                    if found.is_some() { "another" } else { "no" }
                ),
                &format!("have the initramfs carry {key} (an initramfs hook), then {rebuild}"),
            )),
        }
    }
    let listed: Vec<String> = (i.root)("/etc/snapboot/store-modules")
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if let Some(drivers) = i.store_drivers {
        let unlisted: Vec<String> = drivers
            .iter()
            .filter(|d| !listed.contains(d))
            .cloned()
            .collect();
        if !unlisted.is_empty() {
            out.push(bad(
                Verdict::Warn,
                format!(
                    "the store's drivers {} are not in /etc/snapboot/store-modules: the \
                     restore waits for udev",
                    unlisted.join(" ")
                ),
                &i.installation
                    .store_modules_fix(i.store, drivers, i.rebuild),
            ));
        }
    }
    let missing: Vec<&String> = listed.iter().filter(|m| !(i.has_module)(m)).collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|m| m.as_str()).collect();
        out.push(bad(
            Verdict::Warn,
            format!(
                "{} lacks the modules /etc/snapboot/store-modules lists: {}",
                i.path,
                names.join(" ")
            ),
            &rebuild,
        ));
    }
    if out.is_empty() {
        let files: Vec<&str> = same
            .iter()
            .map(|p| p.trim_start_matches("/etc/snapboot/"))
            .collect();
        out.push(Finding::ok(
            Area::Initramfs,
            format!(
                "{}: /bin/snapboot{}{}",
                i.path,
                if files.is_empty() {
                    String::new()
                } else {
                    format!(", {} as on the root", files.join(", "))
                },
                if listed.is_empty() {
                    String::new()
                } else {
                    format!(", drivers {}", listed.join(" "))
                }
            ),
        ));
    }
    out
}

/// The units every service is ordered after by default (targets, slices, sockets,
/// systemd's own services) and the capture unit itself: an `After=` of only these orders
/// the capture after no application.
fn is_system_unit(u: &str) -> bool {
    !u.ends_with(".service")
        || u.starts_with("systemd-")
        || u == devinstall::install::CAPTURE_UNIT_NAME
}

/// The `After=` of a unit from its files (the unit, then its drop-ins), for a system whose
/// manager is not running (a chroot) and cannot be asked: every `After=` line's units.
pub fn after_from_unit_files(texts: &[String]) -> String {
    let units: Vec<&str> = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.trim().strip_prefix("After="))
        .flat_map(str::split_whitespace)
        .collect();
    units.join(" ")
}

/// The capture unit: `enabled` is `systemctl is-enabled`'s answer (`None`: no systemctl),
/// `after` its `After=` (`systemctl show -p After --value`).
pub fn capture_unit(
    enabled: Option<&str>,
    after: &str,
    installation: Installation,
) -> Vec<Finding> {
    let unit = devinstall::install::CAPTURE_UNIT_NAME;
    let Some(enabled) = enabled else {
        return vec![Finding::bad(
            Area::CaptureUnit,
            Verdict::Warn,
            "no systemctl: the capture point is a systemd unit",
            "run `snapboot ready` once the application is ready",
        )];
    };
    let mut out = Vec::new();
    if !matches!(enabled, "enabled" | "enabled-runtime" | "static" | "alias") {
        out.push(Finding::bad(
            Area::CaptureUnit,
            Verdict::Blocker,
            format!("{unit} is {enabled}: no boot reaches the ready point"),
            format!("`systemctl enable {unit}`"),
        ));
    }
    let apps: Vec<&str> = after
        .split_whitespace()
        .filter(|u| !is_system_unit(u))
        .collect();
    if apps.is_empty() {
        out.push(Finding::bad(
            Area::CaptureUnit,
            Verdict::Warn,
            format!("{unit} is ordered after no application: it may capture before yours is ready"),
            installation.capture_after_fix("APP.service"),
        ));
    } else if out.is_empty() {
        out.push(Finding::ok(
            Area::CaptureUnit,
            format!("{unit} is {enabled}, after {}", apps.join(" ")),
        ));
    }
    out
}

/// What the boot loader check reads.
#[derive(Debug, Default)]
pub struct BootLoaderInputs {
    /// /etc/grub.d/42_snapboot is there.
    pub grub_script: bool,
    /// GRUB's grub.cfg (path and text), if there is one.
    pub grub_cfg: Option<(String, String)>,
    /// U-Boot's snapboot menu (path and text), if there is one.
    pub extlinux: Option<(String, String)>,
    /// Why `capture --next-boot` cannot ask the boot loader (`None`: it can).
    pub next_boot_error: Option<String>,
}

/// The boot loader's capture entry: GRUB's from 42_snapboot in grub.cfg, U-Boot's
/// `capture` label; and where `snapboot capture --next-boot` asks for it.
pub fn boot_loader(b: &BootLoaderInputs) -> Vec<Finding> {
    let mut out = Vec::new();
    let entry = devinstall::bootloader::grub::CAPTURE_ENTRY;
    if b.grub_script {
        match &b.grub_cfg {
            Some((path, text)) if text.contains(entry) => out.push(Finding::ok(
                Area::BootLoader,
                format!("GRUB's capture entry {entry} is in {path}"),
            )),
            Some((path, _)) => out.push(Finding::bad(
                Area::BootLoader,
                Verdict::Warn,
                format!("{path} has no capture entry {entry} (/etc/grub.d/42_snapboot writes it)"),
                "run `update-grub`",
            )),
            None => out.push(Finding::bad(
                Area::BootLoader,
                Verdict::Warn,
                "/etc/grub.d/42_snapboot is there, and no grub.cfg under /boot",
                "run `update-grub` (is /boot mounted?)",
            )),
        }
    }
    if let Some((path, text)) = &b.extlinux {
        let capture = text.lines().any(|l| l.trim() == "label capture")
            && text.contains(bootparams::key::CAPTURE);
        out.push(match capture {
            true => Finding::ok(
                Area::BootLoader,
                format!("U-Boot's capture label is in {path}"),
            ),
            false => Finding::bad(
                Area::BootLoader,
                Verdict::Warn,
                format!(
                    "{path} has no `label capture` with {}",
                    bootparams::key::CAPTURE
                ),
                "add it (docs/real-boards.md, U-Boot)",
            ),
        });
    }
    if out.is_empty() {
        out.push(Finding::ok(
            Area::BootLoader,
            "no capture entry (GRUB's /etc/grub.d/42_snapboot, U-Boot's snapboot/extlinux.conf): \
             the first image comes from `snapboot capture` or a boot with snapboot.capture",
        ));
    } else if let Some(why) = &b.next_boot_error {
        out.push(Finding::bad(
            Area::BootLoader,
            Verdict::Warn,
            format!("`snapboot capture --next-boot` cannot ask for the entry: {why}"),
            "mount the boot loader's environment (the ESP, /boot)",
        ));
    }
    out
}

#[cfg(test)]
mod tests;
