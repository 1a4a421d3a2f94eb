//! The restore kernel: a small kernel built from the distribution's own kernel source, only
//! to restore hibernation images that the distribution's kernel made (on x86_64 the image
//! need not be restored by the kernel that made it: arch/x86/power/hibernate.c carries the
//! image kernel's entry point and page tables in the image header).
//!
//! It is `make allnoconfig` plus the fragment in `kernel/restore.config`, everything built
//! in. Its release string is its own (`…-snapboot-restore`): what the image must match is
//! recorded separately, never forged into `uname`. A build is cached under a key of the
//! source package version, the fragment and the compiler, and is never on the resume path.
//!
//! ```text
//! apt-get download linux-source-X.Y  ->  usr/src/linux-source-X.Y.tar.xz  ->  tree
//! make allnoconfig KCONFIG_ALLCONFIG=restore.config  ->  .config (every fragment line checked)
//! make vmlinux  ->  CACHE/restore-KEY/vmlinux + restore.json
//! ```

use serde::{Deserialize, Serialize};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use thiserror::Error;

use crate::kernel::{run, KernelError};

/// The configuration fragment, applied on top of `allnoconfig`.
pub const FRAGMENT: &str = include_str!("../kernel/restore.config");

/// Why no restore kernel could be built.
#[derive(Debug, Error)]
pub enum RestoreKernelError {
    /// A host step (apt-get, dpkg-deb, tar, make) failed.
    #[error(transparent)]
    Step(#[from] KernelError),
    /// `make allnoconfig` did not give the fragment's values (a dependency is missing or the
    /// source is of another version).
    #[error("the restore kernel's configuration lacks what the fragment asks for: {}", .0.join(", "))]
    Config(Vec<String>),
    /// A file of the build could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RestoreKernelError + '_ {
    move |source| RestoreKernelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A built restore kernel.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestoreKernel {
    /// The uncompressed ELF kernel QEMU boots (PVH).
    pub vmlinux: PathBuf,
    /// Its own `uname -r`.
    pub release: String,
    /// The source package and version it was built from.
    pub source: String,
    /// Seconds the build took (configure + compile), when it was built.
    pub build_secs: f64,
}

/// One `CONFIG_X=value` line of a fragment (`n` for "is not set").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// `CONFIG_X`.
    pub name: String,
    /// `y`, a number, a quoted string, or `n`.
    pub value: String,
}

/// The settings of a fragment or `.config`, in order (`# CONFIG_X is not set` is `n`).
pub fn settings(text: &str) -> Vec<Setting> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(name) = l
                .strip_prefix("# ")
                .and_then(|r| r.strip_suffix(" is not set"))
            {
                return Some((name, "n"));
            }
            if l.starts_with('#') {
                return None;
            }
            l.split_once('=')
        })
        .filter(|(name, _)| name.starts_with("CONFIG_"))
        .map(|(name, value)| Setting {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect()
}

/// The fragment's settings that `config` does not have, as `CONFIG_X=want (got …)`.
pub fn missing(fragment: &str, config: &str) -> Vec<String> {
    let have = settings(config);
    settings(fragment)
        .into_iter()
        .filter_map(|want| {
            let got = have
                .iter()
                .rev()
                .find(|s| s.name == want.name)
                .map(|s| s.value.as_str())
                .unwrap_or("n");
            (got != want.value).then(|| format!("{}={} (got {got})", want.name, want.value))
        })
        .collect()
}

/// The cache key of a build: BLAKE3 of the source package file name (it carries the
/// version), the fragment and the compiler's version, 16 hex digits.
pub fn cache_key(source_deb: &str, fragment: &str, compiler: &str) -> String {
    let mut h = blake3::Hasher::new();
    for part in [source_deb, fragment, compiler] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex()[..16].to_string()
}

/// The source package for a distribution kernel release: `6.1.0-56-amd64` → `linux-source-6.1`.
pub fn source_package(image_release: &str) -> Option<String> {
    let mut parts = image_release.split(['.', '-']);
    let (major, minor) = (parts.next()?, parts.next()?);
    (major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok())
        .then(|| format!("linux-source-{major}.{minor}"))
}

/// The restore kernel already built in `cache` for `image_release` with this fragment and
/// compiler, if any.
pub fn cached(cache: &Path, image_release: &str) -> Option<RestoreKernel> {
    let pkg = source_package(image_release)?;
    let deb = find_deb(&cache.join("source"), &pkg)?;
    let deb_name = deb.file_name()?.to_string_lossy().into_owned();
    let compiler = run(Command::new("gcc").arg("--version")).ok()?;
    let key = cache_key(&deb_name, FRAGMENT, compiler.lines().next().unwrap_or(""));
    let text = fs::read_to_string(cache.join(format!("restore-{key}/restore.json"))).ok()?;
    serde_json::from_str::<RestoreKernel>(&text)
        .ok()
        .filter(|k| k.vmlinux.is_file())
}

/// Builds (or reuses from `cache`) the restore kernel for the distribution kernel
/// `image_release`, with `jobs` parallel compile jobs. Progress goes to stderr.
pub fn build(
    cache: &Path,
    image_release: &str,
    jobs: usize,
) -> Result<RestoreKernel, RestoreKernelError> {
    let pkg = source_package(image_release).ok_or_else(|| {
        RestoreKernelError::Step(KernelError::Command {
            cmd: "restore kernel".into(),
            reason: format!("cannot tell the source package of release {image_release:?}"),
        })
    })?;
    let dl = cache.join("source");
    fs::create_dir_all(&dl).map_err(io_err(&dl))?;
    let deb = match find_deb(&dl, &pkg) {
        Some(d) => d,
        None => {
            eprintln!("snapboot: downloading {pkg} (the distribution's kernel source)");
            run(Command::new("apt-get")
                .args(["download", "-q", &pkg])
                .current_dir(&dl))?;
            find_deb(&dl, &pkg).ok_or(KernelError::Missing {
                what: "downloaded kernel source .deb",
                path: dl.clone(),
            })?
        }
    };
    let deb_name = deb
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(k) = cached(cache, image_release) {
        return Ok(k);
    }
    let compiler = run(Command::new("gcc").arg("--version"))?;
    let key = cache_key(&deb_name, FRAGMENT, compiler.lines().next().unwrap_or(""));
    let out = cache.join(format!("restore-{key}"));
    let record = out.join("restore.json");
    let t = Instant::now();
    let work = cache.join(format!("build-{key}"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).map_err(io_err(&work))?;
    eprintln!("snapboot: unpacking {deb_name}");
    let tarball = unpack_source(&deb, &work)?;
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&work))?;
    let _ = fs::remove_file(&tarball);
    let tree = fs::read_dir(&work)
        .map_err(io_err(&work))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.join("Makefile").is_file())
        .ok_or(KernelError::Missing {
            what: "kernel source tree",
            path: work.clone(),
        })?;
    let fragment = work.join("restore.config");
    fs::write(&fragment, FRAGMENT).map_err(io_err(&fragment))?;
    run(Command::new("make")
        .arg("-s")
        .arg("allnoconfig")
        .arg(format!("KCONFIG_ALLCONFIG={}", fragment.display()))
        .current_dir(&tree))?;
    let config_path = tree.join(".config");
    let config = fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
    let lacking = missing(FRAGMENT, &config);
    if !lacking.is_empty() {
        return Err(RestoreKernelError::Config(lacking));
    }
    eprintln!("snapboot: compiling the restore kernel ({jobs} jobs, a few minutes)");
    run(Command::new("make")
        .arg("-s")
        .arg(format!("-j{}", jobs.max(1)))
        .arg("vmlinux")
        .current_dir(&tree))?;
    let release = run(Command::new("make")
        .args(["-s", "kernelrelease"])
        .current_dir(&tree))?
    .trim()
    .to_string();
    fs::create_dir_all(&out).map_err(io_err(&out))?;
    let vmlinux = out.join("vmlinux");
    fs::copy(tree.join("vmlinux"), &vmlinux).map_err(io_err(&vmlinux))?;
    let config_out = out.join("config");
    fs::write(&config_out, &config).map_err(io_err(&config_out))?;
    let k = RestoreKernel {
        vmlinux,
        release,
        source: deb_name.trim_end_matches(".deb").to_string(),
        build_secs: t.elapsed().as_secs_f64(),
    };
    let json = serde_json::to_string_pretty(&k).unwrap_or_default();
    fs::write(&record, json).map_err(io_err(&record))?;
    let _ = fs::remove_dir_all(&work);
    Ok(k)
}

fn find_deb(dir: &Path, pkg: &str) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(&format!("{pkg}_")) && n.ends_with(".deb")
            })
        })
}

/// Extracts `usr/src/*.tar.*` from the source package into `work`; returns its path.
fn unpack_source(deb: &Path, work: &Path) -> Result<PathBuf, RestoreKernelError> {
    let pkg_root = work.join("pkg");
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&pkg_root))?;
    let src = pkg_root.join("usr/src");
    let tarball = fs::read_dir(&src)
        .map_err(io_err(&src))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains(".tar"))
        .ok_or(KernelError::Missing {
            what: "usr/src/linux-source-*.tar.*",
            path: src.clone(),
        })?;
    let moved = work.join(tarball.file_name().unwrap_or_default());
    fs::rename(&tarball, &moved).map_err(io_err(&moved))?;
    let _ = fs::remove_dir_all(&pkg_root);
    Ok(moved)
}

/// Which kernel the user asked a board run to boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KernelChoice {
    /// A snapshot boot restores with the restore kernel when one is built for the bundle's
    /// kernel (the fast path); every other boot (cold, capture) is the stock kernel's.
    #[default]
    Default,
    /// The stock kernel, whatever the boot (`--stock-kernel`, `--bzimage`).
    Stock,
    /// The restore kernel, whatever the boot (`--restore-kernel`); an error when none is
    /// built.
    Restore,
}

/// The kernel a board run boots, as [`boot_kernel`] picks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootKernel {
    /// The bundle's own (stock) kernel.
    Stock,
    /// The stock kernel for a snapshot boot that would restore with the restore kernel by
    /// default, but none is built for `release`.
    StockNoRestoreKernel {
        /// The bundle's kernel release.
        release: String,
    },
    /// A restore kernel.
    Restore {
        /// Its vmlinux.
        vmlinux: PathBuf,
        /// Whether it was picked by default (not asked for by name).
        by_default: bool,
    },
}

impl BootKernel {
    /// A one-line note for the user when the pick was the default's: which kernel restores,
    /// and how to get the other.
    pub fn note(&self) -> Option<String> {
        match self {
            BootKernel::Stock
            | BootKernel::Restore {
                by_default: false, ..
            } => None,
            BootKernel::StockNoRestoreKernel { release } => Some(format!(
                "restoring with the stock kernel: no restore kernel built for {release} \
                 (`snapboot board restore-kernel` builds it, once; snapshot boots then use it)"
            )),
            BootKernel::Restore { .. } => Some(
                "restoring with the restore kernel (--stock-kernel restores with the stock \
                 kernel)"
                    .into(),
            ),
        }
    }
}

/// `--restore-kernel` without a restore kernel built.
#[derive(Debug, Error)]
#[error("no restore kernel built for {release}: run `snapboot board restore-kernel`")]
pub struct NotBuilt {
    /// The bundle's kernel release.
    pub release: String,
}

/// The kernel a board run of a bundle whose kernel is `release` boots: `choice`, for a
/// snapshot boot (a store attached, no capture) or not. `built` finds the restore kernel
/// built for `release` ([`cached`]); it is asked only when the answer depends on it.
pub fn boot_kernel(
    choice: KernelChoice,
    snapshot_boot: bool,
    release: &str,
    built: impl FnOnce() -> Option<RestoreKernel>,
) -> Result<BootKernel, NotBuilt> {
    match choice {
        KernelChoice::Stock => Ok(BootKernel::Stock),
        KernelChoice::Default if !snapshot_boot => Ok(BootKernel::Stock),
        KernelChoice::Restore => match built() {
            Some(k) => Ok(BootKernel::Restore {
                vmlinux: k.vmlinux,
                by_default: false,
            }),
            None => Err(NotBuilt {
                release: release.to_string(),
            }),
        },
        KernelChoice::Default => Ok(match built() {
            Some(k) => BootKernel::Restore {
                vmlinux: k.vmlinux,
                by_default: true,
            },
            None => BootKernel::StockNoRestoreKernel {
                release: release.to_string(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built() -> Option<RestoreKernel> {
        Some(RestoreKernel {
            vmlinux: PathBuf::from("/rk/vmlinux"),
            release: "6.1.192-snapboot-restore".into(),
            source: "linux-source-6.1_6.1.192-2_all.deb".into(),
            build_secs: 200.0,
        })
    }

    #[test]
    fn a_snapshot_boot_restores_with_the_restore_kernel_by_default_when_one_is_built() {
        let k = boot_kernel(KernelChoice::Default, true, "6.1.0-56-amd64", built).unwrap();
        assert_eq!(
            k,
            BootKernel::Restore {
                vmlinux: PathBuf::from("/rk/vmlinux"),
                by_default: true
            }
        );
        assert_eq!(
            k.note().unwrap(),
            "restoring with the restore kernel (--stock-kernel restores with the stock kernel)"
        );
    }

    #[test]
    fn without_a_restore_kernel_a_snapshot_boot_takes_the_stock_kernel_and_says_how_to_build_one() {
        let k = boot_kernel(KernelChoice::Default, true, "6.1.0-56-amd64", || None).unwrap();
        assert_eq!(
            k,
            BootKernel::StockNoRestoreKernel {
                release: "6.1.0-56-amd64".into()
            }
        );
        let note = k.note().unwrap();
        assert!(
            note.contains("no restore kernel built for 6.1.0-56-amd64")
                && note.contains("`snapboot board restore-kernel`")
                && !note.contains('\n'),
            "{note}"
        );
    }

    #[test]
    fn cold_and_capture_boots_and_stock_kernel_runs_never_look_for_a_restore_kernel() {
        let never = || -> Option<RestoreKernel> { panic!("looked for a restore kernel") };
        for (choice, snapshot) in [
            (KernelChoice::Default, false),
            (KernelChoice::Stock, true),
            (KernelChoice::Stock, false),
        ] {
            let k = boot_kernel(choice, snapshot, "6.1.0-56-amd64", never).unwrap();
            assert_eq!(k, BootKernel::Stock, "{choice:?} snapshot={snapshot}");
            assert_eq!(k.note(), None);
        }
    }

    #[test]
    fn an_explicit_restore_kernel_is_used_on_any_boot_and_refused_when_not_built() {
        for snapshot in [false, true] {
            let k = boot_kernel(KernelChoice::Restore, snapshot, "6.1.0-56-amd64", built);
            assert!(
                matches!(
                    k,
                    Ok(BootKernel::Restore {
                        by_default: false,
                        ..
                    })
                ),
                "{k:?}"
            );
            assert_eq!(k.unwrap().note(), None, "asked for by name: nothing to say");
        }
        let err = boot_kernel(KernelChoice::Restore, true, "6.1.0-56-amd64", || None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no restore kernel built for 6.1.0-56-amd64: run `snapboot board restore-kernel`"
        );
    }

    #[test]
    fn fragment_and_config_lines_parse() {
        let s = settings("# a comment\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=\"x y\"\nX=1\n");
        let names: Vec<_> = s
            .iter()
            .map(|s| (s.name.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("CONFIG_A", "y"),
                ("CONFIG_B", "n"),
                ("CONFIG_C", "\"x y\"")
            ]
        );
    }

    #[test]
    fn missing_names_each_setting_the_config_lacks() {
        let fragment = "CONFIG_A=y\nCONFIG_B=n\nCONFIG_C=0x8000000\nCONFIG_D=y\n";
        let config = "CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=0x1000000\n";
        assert_eq!(
            missing(fragment, config),
            ["CONFIG_C=0x8000000 (got 0x1000000)", "CONFIG_D=y (got n)"]
        );
        assert!(missing("CONFIG_B=n\n", "").is_empty());
    }

    #[test]
    fn the_project_fragment_asks_for_what_restoring_needs() {
        let s = settings(FRAGMENT);
        for need in [
            "CONFIG_HIBERNATION",
            "CONFIG_HIBERNATION_SNAPSHOT_DEV",
            "CONFIG_PVH",
            "CONFIG_VIRTIO_BLK",
            "CONFIG_X86_5LEVEL",
        ] {
            assert!(s.iter().any(|x| x.name == need && x.value == "y"), "{need}");
        }
        assert!(s
            .iter()
            .any(|x| x.name == "CONFIG_MODULES" && x.value == "n"));
        // ondevice::system::RESTORE_KERNEL_SUFFIX recognises a restore kernel by this.
        assert!(s.iter().any(|x| x.name == "CONFIG_LOCALVERSION"
            && x.value == format!("\"{}\"", bootparams::RESTORE_KERNEL_SUFFIX)));
    }

    #[test]
    fn keys_and_packages() {
        let a = cache_key("linux-source-6.1_6.1.192-2_all.deb", "F", "gcc 12");
        assert_eq!(a.len(), 16);
        assert_ne!(
            a,
            cache_key("linux-source-6.1_6.1.193-1_all.deb", "F", "gcc 12")
        );
        assert_ne!(
            a,
            cache_key("linux-source-6.1_6.1.192-2_all.deb", "F2", "gcc 12")
        );
        assert_eq!(
            source_package("6.1.0-56-amd64").as_deref(),
            Some("linux-source-6.1")
        );
        assert_eq!(
            source_package("6.12.9+bpo-amd64").as_deref(),
            Some("linux-source-6.12")
        );
        assert_eq!(source_package("custom"), None);
    }
}
