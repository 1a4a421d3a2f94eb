//! `snapboot check`: whether this device can snapshot-boot. The running kernel (its config,
//! its lockdown state, whether it offers hibernation: [`kernelcheck`]) and the device
//! around it (the root read-only, the configured store, the initramfs's contents, the
//! capture unit, the boot loader's capture entry: [`ondevice::device_check`]), each
//! requirement met or not with what to do. This module reads the inputs; the rules are
//! those crates'. It also prints the kernel table the host's `check-kernel` shares.

use anyhow::Result;
use devinstall::install::system::{generator, Installation};
use kernelcheck::check::{KernelCheck, RunningCheck, Verdict};
use ondevice::command_store::{self, CommandStoreError};
use ondevice::device_check::{self as dc, BootLoaderInputs, Finding, InitramfsInputs, StoreState};
use ondevice::store::StoreUseError;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::exit::Exit;

/// `snapboot check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Print JSON: the kernel config read (`config`, null when none was found), the kernel's
    /// checks (`checks`) and the device's findings (`device`).
    #[arg(long)]
    pub json: bool,
    /// The initramfs to look into (default: the running kernel's, /boot/initrd.img-RELEASE
    /// or /boot/initramfs-RELEASE.img).
    #[arg(long, value_name = "FILE")]
    pub initramfs: Option<PathBuf>,
}

/// Prints `checks` as a table, one line each.
fn print_table(checks: &[KernelCheck]) {
    for c in checks {
        println!(
            "{:<8} {:<40} {:<12} {}",
            c.verdict.to_string(),
            c.option,
            c.value,
            c.reason
        );
    }
}

/// Prints `checks` as a table, one line each, and the verdict on the kernel; returns
/// [`Exit::Blocked`] when a blocker was found, success otherwise (the host's
/// `check-kernel`).
pub fn print_checks(checks: &[KernelCheck]) -> ExitCode {
    print_table(checks);
    let blocked = checks.iter().any(|c| c.verdict == Verdict::Blocker);
    if blocked {
        println!("snapshot boot cannot work with this kernel (see BLOCKER lines)");
    } else {
        println!("snapshot boot can work with this kernel");
    }
    status(blocked)
}

/// The exit status for a check.
pub fn status(blocked: bool) -> ExitCode {
    if blocked {
        Exit::Blocked.into()
    } else {
        ExitCode::SUCCESS
    }
}

/// `snapboot check --json`.
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    kernel: &'a RunningCheck,
    device: &'a [Finding],
}

/// `snapboot check`: exit 0 when snapshot boot can work here, [`Exit::Blocked`] otherwise.
pub fn check(a: CheckArgs) -> Result<ExitCode> {
    let kernel = kernelcheck::check::running();
    let device = device_findings(a.initramfs.as_deref());
    let blocked = kernel.blocked() || device.iter().any(|f| f.verdict == Verdict::Blocker);
    if a.json {
        let r = Report {
            kernel: &kernel,
            device: &device,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(status(blocked));
    }
    match &kernel.config {
        Some(p) => println!("kernel config: {}", p.display()),
        None => println!("kernel config: not found"),
    }
    print_table(&kernel.checks);
    for f in &device {
        println!("{}", f.line());
    }
    if blocked {
        println!("snapshot boot cannot work on this device yet (see the BLOCKER lines)");
    } else {
        println!("snapshot boot can work on this device");
    }
    Ok(status(blocked))
}

/// Reads what the device checks need and runs them.
fn device_findings(initramfs: Option<&Path>) -> Vec<Finding> {
    let root = Path::new("/");
    let installation = Installation::of(root);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts = devsys::system::parse_mountinfo(&mountinfo);
    let mut out = dc::root(&mounts, ondevice::capture_mounts::is_device_source);

    let (state, located) = store_state();
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| devsys::system::meminfo_bytes(&m, "MemTotal"));
    out.push(dc::store(&state, ram));

    let settings = ondevice::settings::load().ok();
    let encrypt_key = settings
        .as_ref()
        .is_some_and(|p| p.encrypt == bootparams::Encrypt::KeyFile);
    let store_address = settings
        .as_ref()
        .and_then(|p| p.store.as_ref())
        .map_or("STORE".to_string(), |s| s.to_string());
    let drivers = located
        .as_ref()
        .and_then(|at| devinstall::install::store_driver_modules(Path::new("/sys"), at).ok());
    let rebuild = generator(root)
        .unwrap_or(devinstall::install::Generator::InitramfsTools)
        .rebuild_command()
        .join(" ");
    let release = devsys::system::running_release();
    let path = initramfs.map(Path::to_path_buf).unwrap_or_else(|| {
        [
            format!("/boot/initrd.img-{release}"),
            format!("/boot/initramfs-{release}.img"),
        ]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from(format!("/boot/initrd.img-{release}")))
    });
    out.extend(initramfs_findings(&path, &release, |files| {
        dc::initramfs(&InitramfsInputs {
            path: &path.display().to_string(),
            initramfs: files.0,
            root: &|p: &str| std::fs::read(p).ok(),
            has_module: files.1,
            store_drivers: drivers.as_deref(),
            store: &store_address,
            encrypt_key,
            rebuild: &rebuild,
            installation,
        })
    }));

    let unit = devinstall::install::CAPTURE_UNIT_NAME;
    let enabled = systemctl(&["is-enabled", unit]);
    // A manager that is not running (a chroot) cannot be asked: the unit's files then.
    let after = systemctl(&["show", "-p", "After", "--value", unit])
        .unwrap_or_else(|| dc::after_from_unit_files(&unit_files(unit)));
    out.extend(dc::capture_unit(enabled.as_deref(), &after, installation));

    let first = |paths: &[&str]| {
        paths
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok().map(|t| (p.to_string(), t)))
    };
    out.extend(dc::boot_loader(&BootLoaderInputs {
        grub_script: Path::new("/etc/grub.d/42_snapboot").exists(),
        grub_cfg: first(&["/boot/grub/grub.cfg", "/boot/efi/grub/grub.cfg"]),
        extlinux: first(&[
            "/boot/snapboot/extlinux.conf",
            "/boot/firmware/snapboot/extlinux.conf",
        ]),
        next_boot_error: devinstall::bootloader::Loader::detect(root, None)
            .err()
            .map(|e| e.to_string()),
    }));
    out
}

/// The initramfs's files and modules, handed to `check` as lookups; a file that cannot be
/// read or unpacked is a finding of its own.
fn initramfs_findings(
    path: &Path,
    release: &str,
    check: impl FnOnce((&dyn Fn(&str) -> Option<Vec<u8>>, &dyn Fn(&str) -> bool)) -> Vec<Finding>,
) -> Vec<Finding> {
    let unreadable = |why: String| {
        vec![Finding {
            area: dc::Area::Initramfs,
            verdict: Verdict::Warn,
            found: format!("{}: {why}", path.display()),
            fix: Some("name the initramfs the boot loader loads with --initramfs FILE".into()),
        }]
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => return unreadable(e.to_string()),
    };
    let tree = match initramfs::unpack(&bytes) {
        Ok(t) => t,
        Err(e) => return unreadable(e.to_string()),
    };
    let builtin = std::fs::read_to_string(format!("/lib/modules/{release}/modules.builtin"))
        .unwrap_or_default();
    let files = |p: &str| file_of(&tree, p).map(<[u8]>::to_vec);
    let has_module = |name: &str| module_in(tree.iter().map(|e| e.path), &builtin, name);
    check((&files, &has_module))
}

/// The regular file at `path` in `tree`, through its symbolic links (a merged-/usr
/// initramfs has `bin -> usr/bin`), as the kernel's lookup would.
fn file_of<'t>(tree: &'t initramfs::Root<'_>, path: &str) -> Option<&'t [u8]> {
    let mut todo: Vec<String> = path.split('/').rev().map(String::from).collect();
    let mut at: Vec<String> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "" | "." => continue,
            ".." => {
                at.pop();
                continue;
            }
            _ => at.push(c),
        }
        let e = tree.get(&at.join("/"))?;
        if e.kind() == initramfs::Kind::Symlink {
            links += 1;
            if links > 16 {
                return None;
            }
            let target = std::str::from_utf8(e.data()).ok()?;
            at.pop();
            if target.starts_with('/') {
                at.clear();
            }
            todo.extend(target.split('/').rev().map(String::from));
        }
    }
    let e = tree.get(&at.join("/"))?;
    (e.kind() == initramfs::Kind::Regular).then(|| e.data())
}

/// Whether a module is among the `.ko` files of `paths` or in `modules.builtin`'s text
/// (`-` and `_` are one in module names).
fn module_in<'p>(paths: impl Iterator<Item = &'p str>, builtin: &'p str, name: &str) -> bool {
    let norm = |s: &str| s.replace('-', "_");
    let want = norm(name);
    let stem = |p: &str| {
        let file = p.rsplit('/').next().unwrap_or(p);
        let base = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
            .iter()
            .find_map(|ext| file.strip_suffix(ext));
        base.map(norm)
    };
    builtin
        .lines()
        .chain(paths)
        .any(|p| stem(p).as_deref() == Some(want.as_str()))
}

/// The configured store as this system has it, and its device when found.
fn store_state() -> (StoreState, Option<PathBuf>) {
    let chosen = match command_store::from_system(None) {
        Ok(c) => c,
        Err(e) if e.is_unconfigured() => return (StoreState::NotConfigured(e.to_string()), None),
        Err(e) => return (StoreState::BadSettings(boottrace::error_chain(&e)), None),
    };
    match chosen.open(false) {
        Ok((s, at)) => {
            let u = s.usage();
            let device = at.path.display().to_string();
            let state = StoreState::Found {
                at: match chosen.address.as_path() {
                    Some(p) if p == device => chosen.to_string(),
                    _ => format!("{chosen} on {device}"),
                },
                bytes: u.clusters * s.cluster_bytes(),
                images: s.images().len(),
            };
            (state, Some(at.path))
        }
        Err(e) => {
            let no_magic = matches!(
                &e,
                CommandStoreError::Use(StoreUseError::Store {
                    source: flashstore::StoreError::NotAStore,
                    ..
                })
            );
            let state = StoreState::Unusable {
                why: boottrace::error_chain(&e),
                no_magic,
                address: chosen.address.to_string(),
            };
            (state, None)
        }
    }
}

/// The texts of a unit's file and its drop-ins, in the order systemd reads them.
fn unit_files(unit: &str) -> Vec<String> {
    let dirs = [
        "/usr/lib/systemd/system",
        "/lib/systemd/system",
        "/etc/systemd/system",
    ];
    let mut texts: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_to_string(format!("{d}/{unit}")).ok())
        .collect();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(format!("{d}/{unit}.d")) else {
            continue;
        };
        let mut confs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "conf"))
            .collect();
        confs.sort();
        texts.extend(confs.iter().filter_map(|p| std::fs::read_to_string(p).ok()));
    }
    texts
}

/// `systemctl ARGS`'s first line of output (`None`: no systemctl, or it said nothing).
fn systemctl(args: &[&str]) -> Option<String> {
    let out = Command::new("systemctl").args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next()?.trim().to_string();
    (!line.is_empty()).then_some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_found_through_a_merged_usr_link() {
        let (dir, link, file) = (0o040755, 0o120777, 0o100644);
        let bytes = initramfs::testing::archive(&[
            ("bin", link, b"usr/bin"),
            ("usr", dir, b""),
            ("usr/bin", dir, b""),
            ("usr/bin/snapboot", file, b"ELF"),
            ("etc", dir, b""),
            ("etc/alias", link, b"/usr/bin/snapboot"),
        ]);
        let tree = initramfs::unpack(&bytes).unwrap();
        assert_eq!(file_of(&tree, "/bin/snapboot"), Some(&b"ELF"[..]));
        assert_eq!(file_of(&tree, "/etc/alias"), Some(&b"ELF"[..]));
        assert_eq!(file_of(&tree, "/usr/bin"), None, "a directory");
        assert_eq!(file_of(&tree, "/bin/other"), None);
    }

    #[test]
    fn a_module_is_in_the_initramfs_by_any_compression_or_built_in() {
        let paths = [
            "usr/lib/modules/6.1.0-28-amd64/kernel/drivers/block/virtio_blk.ko.xz",
            "usr/lib/modules/6.1.0-28-amd64/kernel/drivers/md/dm-mod.ko",
            "bin/snapboot",
        ];
        let builtin = "kernel/drivers/virtio/virtio_pci.ko\n";
        let has = |m| module_in(paths.iter().copied(), builtin, m);
        assert!(has("virtio_blk"));
        assert!(has("dm_mod"), "- and _ are one");
        assert!(has("virtio_pci"), "built in");
        assert!(!has("nvme"));
        assert!(!has("snapboot"));
    }
}
