//! `snapboot install` on a system without the package: the plan (exactly the files it will
//! write, which `--dry-run` prints), carrying it out with a manifest of what was written,
//! and `--uninstall`, which removes what the manifest lists and keeps what changed since.

use super::files::{Generator, Part, ADMIN_BINARY_PATH, CAPTURE_UNIT_NAME, SHIPPED};
use super::manifest::{self, Record, MANIFEST_PATH};
use super::options::{
    after_dropin, io_err, valid_module_name, valid_unit_name, InstallError, InstallOptions,
    DROPIN_PATH, STORE_MODULES_PATH, WANTS_DIR,
};
use super::system::{self, PACKAGE};
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

/// What goes at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A file with these bytes and permission bits.
    File {
        /// The bytes.
        data: Vec<u8>,
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link to this target.
    Link(PathBuf),
}

/// One path the install writes (absolute in the installed system).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// Where, as the installed system sees it.
    pub path: PathBuf,
    /// What.
    pub content: Content,
}

/// Everything an install will do, decided before anything is written.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The system's root.
    pub root: PathBuf,
    /// The system's initramfs generator (only its files are written).
    pub generator: Generator,
    /// The paths written, in order.
    pub writes: Vec<Planned>,
    /// What an earlier install wrote that this one no longer does (an `--after` drop-in,
    /// the store's module list), removed unless changed since.
    pub removes: Vec<Record>,
    /// The configuration, there already and left as it is.
    pub kept: Vec<PathBuf>,
    /// Directories the install creates (and `--uninstall` removes when empty).
    pub dirs: Vec<PathBuf>,
}

/// What `--uninstall` did.
#[derive(Debug, Clone, Default)]
pub struct Uninstalled {
    /// Paths removed.
    pub removed: Vec<PathBuf>,
    /// Paths left, each with the reason.
    pub kept: Vec<(PathBuf, &'static str)>,
}

fn inside(root: &Path, abs: &Path) -> PathBuf {
    root.join(abs.strip_prefix("/").unwrap_or(abs))
}

fn read_manifest(root: &Path) -> Result<Option<Vec<Record>>, InstallError> {
    let path = root.join(MANIFEST_PATH);
    match fs::read_to_string(&path) {
        Ok(text) => manifest::parse(&text)
            .map(Some)
            .map_err(|source| InstallError::BadManifest { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", &path)(e)),
    }
}

/// Whether what is at `path` now is what `record` says was written.
fn unchanged(path: &Path, record: &Record) -> bool {
    match record {
        Record::File { hash, .. } => fs::read(path).is_ok_and(|d| manifest::hash(&d) == *hash),
        Record::Link { target, .. } => fs::read_link(path).is_ok_and(|t| t == *target),
        Record::Dir { .. } => path.is_dir(),
    }
}

fn same_content(path: &Path, content: &Content) -> bool {
    match content {
        Content::File { data, .. } => fs::read(path).is_ok_and(|d| d == *data),
        Content::Link(target) => fs::read_link(path).is_ok_and(|t| t == *target),
    }
}

/// Decides what `install` writes; writes nothing. Refuses (with the reason) when the
/// snapboot package is installed, when the system has no initramfs-tools or dracut or no
/// systemd, when a path belongs to a package, or when a file is there that an earlier
/// install did not write.
pub fn plan(o: &InstallOptions) -> Result<Plan, InstallError> {
    let root = &o.root;
    if !root.is_dir() {
        return Err(InstallError::NoRoot(root.clone()));
    }
    if let Some(bad) = o.after.iter().find(|u| !valid_unit_name(u)) {
        return Err(InstallError::BadUnit(bad.clone()));
    }
    if let Some(bad) = o.store_modules.iter().find(|m| !valid_module_name(m)) {
        return Err(InstallError::BadModule(bad.clone()));
    }
    let exe = fs::read(&o.binary).map_err(io_err("read", &o.binary))?;
    if !kernelpack::is_static_elf(&exe) {
        return Err(InstallError::NotStatic(o.binary.clone()));
    }
    if system::package_installed(root, PACKAGE) {
        return Err(InstallError::PackageInstalled);
    }
    let generator = system::generator(root).ok_or(InstallError::NoGenerator)?;
    if !system::has_systemd(root) {
        return Err(InstallError::NoSystemd);
    }
    let old = read_manifest(root)?.unwrap_or_default();
    let abs = |rel: &str| Path::new("/").join(rel);
    let file = |rel: &str, data: Vec<u8>, mode: u32| Planned {
        path: abs(rel),
        content: Content::File { data, mode },
    };
    let mut writes = vec![file(ADMIN_BINARY_PATH, exe, 0o755)];
    let mut kept = Vec::new();
    for f in SHIPPED {
        match f.part {
            Part::Initramfs(g) if g != generator => continue,
            Part::Grub if !root.join("etc/grub.d").is_dir() => continue,
            Part::Config => {
                let there = root.join(f.admin);
                let ours = old
                    .iter()
                    .any(|r| r.path() == abs(f.admin) && unchanged(&there, r));
                if there.exists() && !ours {
                    kept.push(abs(f.admin));
                    continue;
                }
            }
            _ => {}
        }
        writes.push(file(
            f.admin,
            f.admin_text().into_owned().into_bytes(),
            f.mode,
        ));
    }
    if !o.after.is_empty() {
        writes.push(file(
            DROPIN_PATH,
            after_dropin(&o.after).into_bytes(),
            0o644,
        ));
    }
    if !o.store_modules.is_empty() {
        let list: String = o.store_modules.iter().map(|m| format!("{m}\n")).collect();
        writes.push(file(STORE_MODULES_PATH, list.into_bytes(), 0o644));
    }
    // Enabled the way `systemctl enable` does it, which works in a tree that is not running.
    let unit = SHIPPED
        .iter()
        .find(|f| f.admin.ends_with(CAPTURE_UNIT_NAME))
        .map(|f| abs(f.admin))
        .unwrap_or_default();
    writes.push(Planned {
        path: abs(&format!("{WANTS_DIR}/{CAPTURE_UNIT_NAME}")),
        content: Content::Link(unit),
    });

    let paths: Vec<PathBuf> = writes.iter().map(|w| w.path.clone()).collect();
    if let Some((path, package)) = system::owners(root, &paths).into_iter().next() {
        return Err(InstallError::OwnedByPackage { path, package });
    }
    for w in &writes {
        let there = inside(root, &w.path);
        let known = old.iter().any(|r| r.path() == w.path);
        if there.symlink_metadata().is_ok() && !known && !same_content(&there, &w.content) {
            return Err(InstallError::NotOurs(w.path.clone()));
        }
    }
    let planned: HashSet<&Path> = writes.iter().map(|w| w.path.as_path()).collect();
    let removes = old
        .iter()
        .filter(|r| !matches!(r, Record::Dir { .. }) && !planned.contains(r.path()))
        .filter(|r| !kept.iter().any(|k| k == r.path()))
        .cloned()
        .collect();
    let mut dirs: Vec<PathBuf> = old
        .iter()
        .filter(|r| matches!(r, Record::Dir { .. }))
        .map(|r| r.path().to_path_buf())
        .collect();
    for w in writes
        .iter()
        .map(|w| w.path.as_path())
        .chain([abs(MANIFEST_PATH).as_path()])
    {
        for d in w.ancestors().skip(1) {
            if d == Path::new("/") || inside(root, d).exists() || dirs.iter().any(|x| x == d) {
                continue;
            }
            dirs.push(d.to_path_buf());
        }
    }
    dirs.sort_by_key(|d| d.components().count());
    Ok(Plan {
        root: root.clone(),
        generator,
        writes,
        removes,
        kept,
        dirs,
    })
}

/// Carries out `plan`: creates its directories, removes what an earlier install wrote that
/// this one does not, writes every file (atomically) and the manifest. Returns the paths
/// written, in the plan's order, and the removed paths that had changed and were kept.
pub fn apply(plan: &Plan) -> Result<(Vec<PathBuf>, Vec<PathBuf>), InstallError> {
    let root = &plan.root;
    for d in &plan.dirs {
        let p = inside(root, d);
        fs::create_dir_all(&p).map_err(io_err("create", &p))?;
    }
    let mut changed = Vec::new();
    for r in &plan.removes {
        let p = inside(root, r.path());
        if unchanged(&p, r) {
            remove_if_there(&p)?;
        } else if p.symlink_metadata().is_ok() {
            changed.push(r.path().to_path_buf());
        }
    }
    let mut records: Vec<Record> = plan
        .dirs
        .iter()
        .map(|d| Record::Dir { path: d.clone() })
        .collect();
    let mut written = Vec::new();
    for w in &plan.writes {
        let p = inside(root, &w.path);
        match &w.content {
            Content::File { data, mode } => {
                write_replacing(&p, data, *mode)?;
                records.push(Record::File {
                    path: w.path.clone(),
                    hash: manifest::hash(data),
                });
            }
            Content::Link(target) => {
                remove_if_there(&p)?;
                symlink(target, &p).map_err(io_err("link", &p))?;
                records.push(Record::Link {
                    path: w.path.clone(),
                    target: target.clone(),
                });
            }
        }
        written.push(w.path.clone());
    }
    let m = root.join(MANIFEST_PATH);
    write_replacing(&m, manifest::render(&records).as_bytes(), 0o644)?;
    Ok((written, changed))
}

/// Removes what the manifest at `root` lists (files and links unchanged since the install,
/// then its directories when empty) and the manifest itself.
pub fn uninstall(root: &Path) -> Result<Uninstalled, InstallError> {
    let records = read_manifest(root)?.ok_or_else(|| InstallError::NotInstalled {
        manifest: root.join(MANIFEST_PATH),
    })?;
    let mut done = Uninstalled::default();
    for r in records.iter().filter(|r| !matches!(r, Record::Dir { .. })) {
        let p = inside(root, r.path());
        if p.symlink_metadata().is_err() {
            continue;
        }
        if unchanged(&p, r) {
            remove_if_there(&p)?;
            done.removed.push(r.path().to_path_buf());
        } else {
            done.kept
                .push((r.path().to_path_buf(), "changed since the install"));
        }
    }
    let m = root.join(MANIFEST_PATH);
    remove_if_there(&m)?;
    done.removed.push(Path::new("/").join(MANIFEST_PATH));
    let mut dirs: Vec<&Path> = records
        .iter()
        .filter(|r| matches!(r, Record::Dir { .. }))
        .map(Record::path)
        .collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let p = inside(root, d);
        if fs::remove_dir(&p).is_ok() {
            done.removed.push(d.to_path_buf());
        } else if p.is_dir() {
            done.kept.push((d.to_path_buf(), "not empty"));
        }
    }
    Ok(done)
}

fn remove_if_there(path: &Path) -> Result<(), InstallError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}

/// Writes `data` to `path` through a temporary file and a rename, so a power cut leaves
/// the old file or the new one, never a torn one.
fn write_replacing(path: &Path, data: &[u8], mode: u32) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let tmp = path.with_extension("snapboot-new");
    fs::write(&tmp, data).map_err(io_err("write", &tmp))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of", &tmp))?;
    fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_err("sync", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("rename into", path))
}
