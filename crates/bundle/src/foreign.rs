//! Debian packages of an architecture other than the host's, unpacked without being
//! installed.
//!
//! The arm64 board's programs (busybox, python) come from Debian's arm64 packages, which
//! the amd64 host must not install (a multiarch python would conflict with its own). apt's
//! metadata still knows them (`dpkg --add-architecture arm64`, `apt-get update`), so a
//! package set is resolved, fetched and unpacked into one tree of its own:
//!
//! ```text
//!   apt-cache depends --recurse NAME:ARCH ...  -> the closure: real packages of ARCH only
//!   apt-cache show --no-all-versions ...       -> name=version list -> key (BLAKE3)
//!   apt-get download (the missing ones)        -> CACHE/debs/NAME_VERSION_ARCH.deb
//!   dpkg-deb -x each                           -> CACHE/trees/KEY/  (+ KEY.packages)
//! ```
//!
//! A resolution is remembered while apt's lists are unchanged (`CACHE/resolved`), and a
//! tree is reused for as long as the resolved name=version list is the same; new
//! versions in apt's lists give a new key and a new tree. Nothing is configured: no
//! maintainer script runs, so the tree is the packages' files as shipped.

use guestarch::Arch;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Packages never taken into a closure. They are Essential packages that a dependency
/// names for its maintainer scripts, which an unpacked tree never runs: `python3-minimal`
/// depends on `dpkg` (and through it tar, and half of Essential); on the native
/// architecture, where apt's names carry no `:ARCH`, arch-independent helpers lead to
/// perl, debconf and install-info as well.
pub const EXCLUDED: &[&str] = &[
    "dpkg",
    "debconf",
    "perl-base",
    "perl",
    "tar",
    "install-info",
];

/// Why a package set could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ForeignError {
    /// A host command (apt-cache, apt-get, dpkg-deb) failed.
    #[error("`{cmd}` failed: {reason}")]
    Command {
        /// The command line.
        cmd: String,
        /// Exit status and the end of its error output.
        reason: String,
    },
    /// apt knows no installable version of a package of that architecture.
    #[error(
        "apt has no {arch} package {name} (run `dpkg --add-architecture {arch}` and `apt-get update`)"
    )]
    NoCandidate {
        /// The package.
        name: String,
        /// Debian's architecture name.
        arch: &'static str,
    },
    /// `apt-get download` succeeded but the file it should have written is not there.
    #[error("apt-get download left no {file} in {}", dir.display())]
    NotDownloaded {
        /// The expected file name.
        file: String,
        /// The download directory.
        dir: PathBuf,
    },
    /// Filesystem error.
    #[error("{}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ForeignError + '_ {
    move |source| ForeignError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One resolved package.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Package {
    /// The package name, without an architecture.
    pub name: String,
    /// The version apt would install (with its epoch).
    pub version: String,
    /// The version of the source package it was built from: binary-only rebuilds
    /// (`+b1`) differ per architecture, the source version does not.
    pub source_version: String,
}

impl Package {
    /// The name `apt-get download` gives the file (an epoch's `:` written `%3a`).
    pub fn deb_file(&self, arch: Arch) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            arch.debian()
        )
    }
}

/// A package set unpacked into one tree.
#[derive(Debug, Clone)]
pub struct PackageTree {
    /// Their architecture.
    pub arch: Arch,
    /// The closure, sorted by name.
    pub packages: Vec<Package>,
    /// The unpacked tree (the packages' `/` ).
    pub root: PathBuf,
}

impl PackageTree {
    /// A package of the set by name.
    pub fn package(&self, name: &str) -> Option<&Package> {
        self.packages.iter().find(|p| p.name == name)
    }
}

/// Each package's dependencies as `apt-cache depends` prints them: a list of groups, each
/// the alternatives of one dependency in apt's order of preference.
pub type DepGraph = BTreeMap<String, Vec<Vec<String>>>;

/// Parses `apt-cache depends [--recurse]` output.
///
/// ```text
/// libreadline8:arm64            a package (column 0)
///   Depends: libc6:arm64        a dependency
///  |Depends: <media-types:arm64>  `|`: this or the next line's target
///     media-types               a provider of a virtual target (ignored)
/// ```
pub fn parse_depends(text: &str) -> DepGraph {
    let mut graph = DepGraph::new();
    let mut current: Option<String> = None;
    let mut or_next = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            let name = line.trim().to_string();
            graph.entry(name.clone()).or_default();
            current = Some(name);
            or_next = false;
            continue;
        }
        let field = line.trim_start();
        let (alternative, field) = match field.strip_prefix('|') {
            Some(rest) => (true, rest),
            None => (false, field),
        };
        let Some((kind, target)) = field.split_once(": ") else {
            continue; // a provider line
        };
        if !matches!(kind, "Depends" | "PreDepends") {
            continue;
        }
        let Some(groups) = current.as_ref().and_then(|c| graph.get_mut(c)) else {
            continue;
        };
        let target = target.trim().to_string();
        match groups.last_mut() {
            Some(group) if or_next => group.push(target),
            _ => groups.push(vec![target]),
        }
        or_next = alternative;
    }
    graph
}

/// apt's name of a package of `arch`: qualified (`libc6:arm64`) unless `arch` is the host's.
fn apt_name(name: &str, arch: Arch, native: bool) -> String {
    if native {
        name.to_string()
    } else {
        format!("{name}:{}", arch.debian())
    }
}

/// The bare name of a dependency target when it is a real package of `arch`: not virtual
/// (`<name>`), not of another architecture (on a foreign `arch`, apt qualifies its
/// packages and leaves the host's and arch-independent ones bare), not [`EXCLUDED`].
fn own_package(target: &str, arch: Arch, native: bool) -> Option<&str> {
    if target.starts_with('<') {
        return None;
    }
    let bare = if native {
        target
            .strip_suffix(&format!(":{}", arch.debian()))
            .unwrap_or(target)
    } else {
        target.strip_suffix(&format!(":{}", arch.debian()))?
    };
    (!bare.contains(':') && !EXCLUDED.contains(&bare)).then_some(bare)
}

/// The dependency closure of `roots` within `graph`: every real package of `arch` reached
/// through Depends and Pre-Depends, taking the first alternative of a group that is one.
/// Bare names, sorted.
pub fn closure(graph: &DepGraph, roots: &[&str], arch: Arch, native: bool) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = roots.iter().map(|r| r.to_string()).collect();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(groups) = graph.get(&apt_name(&name, arch, native)) else {
            continue;
        };
        for group in groups {
            if let Some(dep) = group.iter().find_map(|t| own_package(t, arch, native)) {
                todo.push(dep.to_string());
            }
        }
    }
    seen
}

/// Parses `apt-cache show --no-all-versions` output into the packages of `arch` it names
/// (arch-independent stanzas are left out).
pub fn parse_show(text: &str, arch: Arch) -> Vec<Package> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |key: &str| {
            stanza.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(str::trim)
            })
        };
        let (Some(name), Some(version), Some(a)) =
            (field("Package"), field("Version"), field("Architecture"))
        else {
            continue;
        };
        if a != arch.debian() {
            continue;
        }
        // `Source: busybox (1:1.35.0-4)` when the versions differ, `Source: glibc` or
        // nothing when they do not.
        let source_version = field("Source")
            .and_then(|s| s.split_once('(')?.1.strip_suffix(')'))
            .unwrap_or(version);
        out.push(Package {
            name: name.into(),
            version: version.into(),
            source_version: source_version.into(),
        });
    }
    out.sort();
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The cache key of a resolved set: its architecture and name=version list.
pub fn key(arch: Arch, packages: &[Package]) -> String {
    let mut text = format!("{}\n", arch.debian());
    for p in packages {
        text.push_str(&format!("{}={}\n", p.name, p.version));
    }
    blake3::hash(text.as_bytes()).to_hex()[..16].to_string()
}

/// Runs a host command and returns its standard output; a failure carries its status and
/// the last lines of its error output.
fn stdout_of(cmd: &mut Command) -> Result<String, ForeignError> {
    let line = format!("{cmd:?}").replace('"', "");
    let fail = |reason: String| ForeignError::Command {
        cmd: line.clone(),
        reason,
    };
    let out = cmd.output().map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(fail(format!("{}: {}", out.status, tail.join(" | "))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The host's own Debian architecture (`dpkg --print-architecture`).
fn host_debian_arch() -> Result<String, ForeignError> {
    Ok(stdout_of(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_string())
}

/// Resolves `names` of `arch` to their closure with the versions apt would take.
pub fn resolve(names: &[&str], arch: Arch) -> Result<Vec<Package>, ForeignError> {
    let native = host_debian_arch()? == arch.debian();
    let qualified: Vec<String> = names.iter().map(|n| apt_name(n, arch, native)).collect();
    let depends = stdout_of(
        Command::new("apt-cache")
            .args(["depends", "--recurse", "--no-recommends", "--no-suggests"])
            .args([
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
            ])
            .args(&qualified),
    )?;
    let wanted = closure(&parse_depends(&depends), names, arch, native);
    let show = stdout_of(
        Command::new("apt-cache")
            .args(["show", "--no-all-versions"])
            .args(wanted.iter().map(|n| apt_name(n, arch, native))),
    )?;
    let packages = parse_show(&show, arch);
    if let Some(missing) = wanted
        .iter()
        .find(|w| !packages.iter().any(|p| &p.name == *w))
    {
        return Err(ForeignError::NoCandidate {
            name: missing.clone(),
            arch: arch.debian(),
        });
    }
    Ok(packages)
}

/// The package set `names` of `arch` with its closure, unpacked under `cache` (made once per
/// name=version list; the `.deb` files are kept in `cache/debs` across versions of the set).
pub fn unpack(names: &[&str], arch: Arch, cache: &Path) -> Result<PackageTree, ForeignError> {
    unpack_resolved(resolve_cached(names, arch, cache)?, arch, cache)
}

/// apt's package lists: what a resolution depends on besides the names asked for.
const APT_LISTS: &str = "/var/lib/apt/lists";

/// A stamp of apt's package lists (names, sizes, modification times): `apt-get update`
/// that changes a list changes it.
fn lists_stamp(lists: &Path) -> String {
    let mut entries: Vec<String> = fs::read_dir(lists)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let t = m
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(format!("{:?} {} {}", e.file_name(), m.len(), t.as_nanos()))
        })
        .collect();
    entries.sort();
    entries.join("\n")
}

/// [`resolve`], remembered under `cache/resolved` for as long as apt's lists are unchanged:
/// each apt-cache run costs seconds where apt keeps no binary cache (container images).
pub fn resolve_cached(
    names: &[&str],
    arch: Arch,
    cache: &Path,
) -> Result<Vec<Package>, ForeignError> {
    let query = format!(
        "{}\n{}\n{}",
        arch.debian(),
        names.join(" "),
        lists_stamp(Path::new(APT_LISTS))
    );
    let dir = cache.join("resolved");
    let file = dir.join(&blake3::hash(query.as_bytes()).to_hex()[..16]);
    if let Some(known) = fs::read_to_string(&file)
        .ok()
        .and_then(|t| parse_resolved(&t))
    {
        return Ok(known);
    }
    let packages = resolve(names, arch)?;
    fs::create_dir_all(&dir).map_err(io(&dir))?;
    fs::write(&file, write_resolved(&packages)).map_err(io(&file))?;
    Ok(packages)
}

/// A resolved set as text: a line `NAME VERSION SOURCE-VERSION` a package.
fn write_resolved(packages: &[Package]) -> String {
    packages
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.version, p.source_version))
        .collect()
}

/// Reads [`write_resolved`]'s text back; `None` if any line is not one.
fn parse_resolved(text: &str) -> Option<Vec<Package>> {
    let packages: Option<Vec<Package>> = text
        .lines()
        .map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
            [name, version, source_version] => Some(Package {
                name: name.into(),
                version: version.into(),
                source_version: source_version.into(),
            }),
            _ => None,
        })
        .collect();
    packages.filter(|p| !p.is_empty())
}

/// [`unpack`] for a set already resolved.
pub fn unpack_resolved(
    packages: Vec<Package>,
    arch: Arch,
    cache: &Path,
) -> Result<PackageTree, ForeignError> {
    let trees = cache.join("trees");
    let key = key(arch, &packages);
    let root = trees.join(&key);
    let tree = PackageTree {
        arch,
        packages,
        root: root.clone(),
    };
    if root.is_dir() {
        return Ok(tree);
    }
    let debs = cache.join("debs");
    download(&tree.packages, arch, &debs)?;
    fs::create_dir_all(&trees).map_err(io(&trees))?;
    // A directory of this process's own: two builds (two tests, two commands) may unpack
    // the same set at once; the first to finish puts its tree in place.
    let partial = trees.join(format!("{key}.partial.{}", std::process::id()));
    let _ = fs::remove_dir_all(&partial);
    fs::create_dir_all(&partial).map_err(io(&partial))?;
    for p in &tree.packages {
        stdout_of(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(debs.join(p.deb_file(arch)))
                .arg(&partial),
        )?;
    }
    let list: String = tree
        .packages
        .iter()
        .map(|p| format!("{}={}\n", p.name, p.version))
        .collect();
    let listing = trees.join(format!("{key}.packages"));
    fs::write(&listing, list).map_err(io(&listing))?;
    match fs::rename(&partial, &root) {
        Ok(()) => Ok(tree),
        // Another build put the same tree in place first: keep that one.
        Err(_) if root.is_dir() => {
            let _ = fs::remove_dir_all(&partial);
            Ok(tree)
        }
        Err(e) => Err(io(&root)(e)),
    }
}

/// Fetches the `.deb` files of `packages` that `debs` does not have yet.
fn download(packages: &[Package], arch: Arch, debs: &Path) -> Result<(), ForeignError> {
    let missing: Vec<&Package> = packages
        .iter()
        .filter(|p| !debs.join(p.deb_file(arch)).is_file())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(debs).map_err(io(debs))?;
    eprintln!(
        "snapboot: downloading {} Debian {} packages into {}",
        missing.len(),
        arch.debian(),
        debs.display()
    );
    stdout_of(
        Command::new("apt-get")
            .current_dir(debs)
            // apt's download user cannot write a root-owned cache; root writes it.
            .args(["-q", "-o", "APT::Sandbox::User=root", "download"])
            .args(
                missing
                    .iter()
                    .map(|p| format!("{}:{}={}", p.name, arch.debian(), p.version)),
            ),
    )?;
    for p in missing {
        let file = p.deb_file(arch);
        if !debs.join(&file).is_file() {
            return Err(ForeignError::NotDownloaded {
                file,
                dir: debs.to_path_buf(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `apt-cache depends --recurse ... python3.11-minimal:arm64 libpython3.11-stdlib:arm64`
    /// on an amd64 bookworm host, shortened.
    const DEPENDS: &str = "\
python3.11-minimal:arm64
  PreDepends: libc6:arm64
  Depends: libpython3.11-minimal:arm64
  Depends: zlib1g:arm64
libpython3.11-stdlib:arm64
  Depends: libpython3.11-minimal:arm64
 |Depends: <media-types:arm64>
    media-types
  Depends: <mime-support:arm64>
    mime-support
  Depends: libreadline8:arm64
libc6:arm64
  Depends: libgcc-s1:arm64
libpython3.11-minimal:arm64
  Depends: libc6:arm64
  Depends: libssl3:arm64
zlib1g:arm64
  Depends: libc6:arm64
mime-support
  Depends: mailcap
libreadline8:arm64
  Depends: <readline-common:arm64>
    readline-common
  Depends: libc6:arm64
libgcc-s1:arm64
  Depends: libc6:arm64
libssl3:arm64
  Depends: libc6:arm64
mailcap
  Depends: perl
readline-common
 |Depends: dpkg
    dpkg:arm64
  Depends: install-info
    install-info:arm64
dpkg:arm64
  PreDepends: libbz2-1.0:arm64
  Depends: tar:arm64
<media-types:arm64>
<readline-common:arm64>
";

    #[test]
    fn depends_output_is_parsed_into_groups_of_alternatives() {
        let g = parse_depends(DEPENDS);
        assert_eq!(
            g["libpython3.11-stdlib:arm64"],
            vec![
                vec!["libpython3.11-minimal:arm64".to_string()],
                vec![
                    "<media-types:arm64>".to_string(),
                    "<mime-support:arm64>".to_string()
                ],
                vec!["libreadline8:arm64".to_string()],
            ]
        );
        assert_eq!(g["python3.11-minimal:arm64"][0], vec!["libc6:arm64"]);
        assert!(g["<media-types:arm64>"].is_empty());
        assert_eq!(
            g["readline-common"],
            vec![vec!["dpkg".to_string(), "install-info".to_string()]],
            "`dpkg | install-info`; the providers under them are not deps"
        );
    }

    #[test]
    fn the_closure_keeps_real_packages_of_the_arch_only() {
        let g = parse_depends(DEPENDS);
        let c = closure(
            &g,
            &["python3.11-minimal", "libpython3.11-stdlib"],
            Arch::Arm64,
            false,
        );
        let want: BTreeSet<String> = [
            "libc6",
            "libgcc-s1",
            "libpython3.11-minimal",
            "libpython3.11-stdlib",
            "libreadline8",
            "libssl3",
            "python3.11-minimal",
            "zlib1g",
        ]
        .map(String::from)
        .into();
        // Not media-types/mime-support (virtual here), readline-common and mailcap
        // (arch-independent), nor what only they lead to (dpkg, tar, perl).
        assert_eq!(c, want);
    }

    #[test]
    fn on_the_native_arch_bare_names_count_and_the_exclusions_hold() {
        let g = parse_depends("mailcap\n  Depends: perl\n  Depends: libc6\nlibc6\n");
        let c = closure(&g, &["mailcap"], Arch::X86_64, true);
        assert_eq!(c, ["libc6", "mailcap"].map(String::from).into());
        assert_eq!(
            own_package("libc6:arm64", Arch::X86_64, true),
            None,
            "another arch"
        );
        assert_eq!(
            own_package("libc6:amd64", Arch::X86_64, true),
            Some("libc6")
        );
        assert_eq!(own_package("libc6", Arch::Arm64, false), None);
    }

    const SHOW: &str = "\
Package: busybox-static
Source: busybox (1:1.35.0-4+deb12u1)
Version: 1:1.35.0-4+deb12u1+b1
Architecture: arm64
Filename: pool/main/b/busybox/busybox-static_1.35.0-4+deb12u1+b1_arm64.deb

Package: libc6
Source: glibc
Version: 2.36-9+deb12u14
Architecture: arm64

Package: media-types
Version: 10.0.0
Architecture: all
";

    #[test]
    fn show_output_gives_versions_and_source_versions() {
        let p = parse_show(SHOW, Arch::Arm64);
        assert_eq!(
            p,
            vec![
                Package {
                    name: "busybox-static".into(),
                    version: "1:1.35.0-4+deb12u1+b1".into(),
                    source_version: "1:1.35.0-4+deb12u1".into(),
                },
                Package {
                    name: "libc6".into(),
                    version: "2.36-9+deb12u14".into(),
                    source_version: "2.36-9+deb12u14".into(),
                },
            ]
        );
        assert_eq!(
            p[0].deb_file(Arch::Arm64),
            "busybox-static_1%3a1.35.0-4+deb12u1+b1_arm64.deb"
        );
        assert!(parse_show(SHOW, Arch::X86_64).is_empty());
    }

    #[test]
    fn the_key_follows_names_versions_and_arch() {
        let p = parse_show(SHOW, Arch::Arm64);
        let k = key(Arch::Arm64, &p);
        assert_eq!(k.len(), 16);
        assert_eq!(k, key(Arch::Arm64, &p.clone()));
        assert_ne!(k, key(Arch::X86_64, &p));
        let mut newer = p.clone();
        newer[1].version = "2.36-9+deb12u15".into();
        assert_ne!(k, key(Arch::Arm64, &newer));
        assert_ne!(k, key(Arch::Arm64, &p[..1]));
    }

    #[test]
    fn a_resolved_set_reads_back_and_a_damaged_one_does_not() {
        let p = parse_show(SHOW, Arch::Arm64);
        assert_eq!(parse_resolved(&write_resolved(&p)), Some(p));
        assert_eq!(parse_resolved("libc6 2.36\n"), None);
        assert_eq!(parse_resolved(""), None);
    }

    #[test]
    fn the_lists_stamp_changes_with_a_list() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("a_Packages"), "Package: a\n").unwrap();
        let before = lists_stamp(d.path());
        assert_eq!(before, lists_stamp(d.path()));
        fs::write(d.path().join("a_Packages"), "Package: a\nVersion: 2\n").unwrap();
        assert_ne!(before, lists_stamp(d.path()));
    }

    #[test]
    fn an_unpacked_tree_is_reused_without_downloading() {
        // A tree already under its key is the answer: no .deb is fetched or unpacked.
        let packages = parse_show(SHOW, Arch::Arm64);
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path().join("trees").join(key(Arch::Arm64, &packages));
        fs::create_dir_all(root.join("bin")).unwrap();
        let tree = unpack_resolved(packages.clone(), Arch::Arm64, cache.path()).unwrap();
        assert_eq!(tree.root, root);
        assert_eq!(tree.package("libc6"), Some(&packages[1]));
        assert!(!cache.path().join("debs").exists(), "nothing downloaded");
    }
}
