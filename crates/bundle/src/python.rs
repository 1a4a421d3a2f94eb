//! The `app` workload's python: Debian's interpreter, its standard library without what a
//! device would not ship, and the shared objects they load, staged so that
//! `/usr/bin/python3 /opt/app/app.py` runs in the root.
//!
//! On x86_64 they are the host's own (an x86_64 Debian), the libraries found by `ldd` and
//! staged where the host has them. On arm64 they come from Debian's arm64 packages,
//! unpacked by [`crate::foreign`]; an arm64 program cannot run here, so the libraries are
//! found by reading `PT_INTERP` and `DT_NEEDED` ([`crate::dynlink`]) and staged in the
//! merged-`/usr` layout Debian's loader expects (`/lib` a link to `usr/lib`); the workload
//! then checks the staged root for every library its programs need
//! ([`crate::dynlink::check_root`]).

use crate::dynlink::{self, LinkError};
use crate::foreign;
use crate::workload_error::{io, WorkloadError};
use guestarch::Arch;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's packages of python for a foreign architecture: the interpreter and the standard
/// library of the release's default python (their closure is the rest).
pub const FOREIGN_PACKAGES: &[&str] = &["python3-minimal", "libpython3-stdlib"];

/// Directories of the python stdlib that a device image would not ship.
const PY_SKIP: &[&str] = &[
    "test",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "config-3",
    "site-packages",
    "dist-packages",
];

/// Stages python for `arch` into `stage`; a foreign architecture's packages are unpacked
/// under `debs`.
pub fn stage_python(stage: &Path, arch: Arch, debs: &Path) -> Result<(), WorkloadError> {
    let (root, what) = match arch {
        Arch::X86_64 => (
            PathBuf::from("/"),
            "Debian's python3 (package python3)".into(),
        ),
        _ => (
            foreign::unpack(FOREIGN_PACKAGES, arch, debs)?.root,
            format!("python3 in Debian's {arch} packages"),
        ),
    };
    let (bin, lib) = find_python(&root, what)?;
    copy_file(&root.join(&bin), &stage.join("usr/bin/python3"))?;
    let mut elves = vec![root.join(&bin)];
    copy_tree(&root, &lib, &stage.join(&lib), &mut elves)?;
    if arch == Arch::X86_64 {
        let mut libs = BTreeSet::new();
        for elf in &elves {
            libs.extend(shared_libs(elf)?);
        }
        for l in libs {
            copy_file(&l, &stage.join(l.strip_prefix("/").unwrap_or(&l)))?;
        }
        return Ok(());
    }
    stage_libraries(&root, arch, &elves, stage)
}

/// The interpreter `/usr/bin/python3` of `root` and its standard library, both relative to
/// the root (`usr/bin/python3.11`, `usr/lib/python3.11`).
fn find_python(root: &Path, what: String) -> Result<(PathBuf, PathBuf), WorkloadError> {
    let py = root.join("usr/bin/python3");
    let bin = dynlink::resolve_in(root, Path::new("usr/bin/python3"))
        .filter(|b| root.join(b).is_file())
        .ok_or_else(|| WorkloadError::Missing {
            what,
            path: py.clone(),
        })?;
    let ver = bin
        .file_name()
        .map(|n| n.to_string_lossy().trim_start_matches("python").to_string())
        .unwrap_or_default();
    let lib = PathBuf::from(format!("usr/lib/python{ver}"));
    if !root.join(&lib).join("os.py").is_file() {
        return Err(WorkloadError::Missing {
            what: format!("python {ver} standard library"),
            path: root.join(lib),
        });
    }
    Ok((bin, lib))
}

fn copy_file(src: &Path, dst: &Path) -> Result<(), WorkloadError> {
    if let Some(p) = dst.parent() {
        fs::create_dir_all(p).map_err(io(p))?;
    }
    fs::copy(src, dst).map_err(io(src))?;
    Ok(())
}

/// Copies the tree `src` (relative to `root`) to `dst`, links followed within `root`,
/// leaving out [`PY_SKIP`]; the extension modules' real paths go to `elves`.
fn copy_tree(
    root: &Path,
    src: &Path,
    dst: &Path,
    elves: &mut Vec<PathBuf>,
) -> Result<(), WorkloadError> {
    fs::create_dir_all(dst).map_err(io(dst))?;
    let here = root.join(src);
    for e in fs::read_dir(&here)
        .map_err(io(&here))?
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if PY_SKIP.iter().any(|s| name.starts_with(s)) {
            continue;
        }
        let rel = src.join(&name);
        let real = dynlink::resolve_in(root, &rel)
            .map(|r| root.join(r))
            .ok_or_else(|| WorkloadError::Io {
                path: e.path(),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        let meta = fs::metadata(&real).map_err(io(&real))?;
        if meta.is_dir() {
            copy_tree(root, &rel, &dst.join(&name), elves)?;
        } else {
            copy_file(&real, &dst.join(&name))?;
            if name.ends_with(".so") {
                elves.push(real);
            }
        }
    }
    Ok(())
}

/// The shared libraries (and the dynamic loader) an ELF file needs, as `ldd` reports them.
pub fn shared_libs(elf: &Path) -> Result<Vec<PathBuf>, WorkloadError> {
    let out = Command::new("ldd")
        .arg(elf)
        .output()
        .map_err(|e| WorkloadError::Command {
            cmd: format!("ldd {}", elf.display()),
            reason: e.to_string(),
        })?;
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Where a path of a package's tree goes in the merged-`/usr` root: `lib/...` moves to
/// `usr/lib/...` (the root's `/lib` is a link there).
pub fn usr_merged(rel: &Path) -> PathBuf {
    match rel.strip_prefix("lib") {
        Ok(rest) => Path::new("usr/lib").join(rest),
        Err(_) => rel.to_path_buf(),
    }
}

/// Stages the interpreters and shared objects `elves` need, and theirs in turn, from the
/// package tree `root` into `stage`, and links the stage's `/lib` to `usr/lib`.
fn stage_libraries(
    root: &Path,
    arch: Arch,
    elves: &[PathBuf],
    stage: &Path,
) -> Result<(), WorkloadError> {
    let mut todo = elves.to_vec();
    let mut staged = BTreeSet::new();
    while let Some(elf) = todo.pop() {
        let Some(needs) = dynlink::needs_of(&elf)? else {
            continue;
        };
        let mut wanted: Vec<PathBuf> = needs.interp.iter().map(PathBuf::from).collect();
        for name in needs.needed {
            let (dir, _) = dynlink::find_library(root, arch, &name).ok_or_else(|| {
                LinkError::MissingLibrary {
                    needed: name.clone(),
                    by: elf.clone(),
                    arch,
                }
            })?;
            wanted.push(Path::new(&dir).join(name));
        }
        for rel in wanted {
            if staged.insert(rel.clone()) {
                todo.push(root.join(place(root, &rel, stage)?));
            }
        }
    }
    let lib = stage.join("lib");
    if lib.symlink_metadata().is_err() {
        symlink("usr/lib", &lib).map_err(io(&lib))?;
    }
    Ok(())
}

/// Stages the file `rel` of the package tree `root`: its real file at its merged-`/usr`
/// place, and `rel` as a link to it where Debian has a link. Returns the real file,
/// relative to the root.
fn place(root: &Path, rel: &Path, stage: &Path) -> Result<PathBuf, WorkloadError> {
    let rel = rel.strip_prefix("/").unwrap_or(rel);
    let real = dynlink::resolve_in(root, rel).ok_or_else(|| WorkloadError::Io {
        path: root.join(rel),
        source: std::io::ErrorKind::NotFound.into(),
    })?;
    let to = usr_merged(&real);
    copy_file(&root.join(&real), &stage.join(&to))?;
    let from = usr_merged(rel);
    if from != to {
        let link = stage.join(&from);
        if let Some(p) = link.parent() {
            fs::create_dir_all(p).map_err(io(p))?;
        }
        let _ = fs::remove_file(&link);
        let dir = from.parent().unwrap_or(Path::new(""));
        symlink(relative(dir, &to), &link).map_err(io(&link))?;
    }
    Ok(real)
}

/// The path of `to` from the directory `dir`, both relative to one root (`../lib/x`): a
/// link that holds in the device's root, in a chroot and under `qemu-aarch64 -L` alike.
fn relative(dir: &Path, to: &Path) -> PathBuf {
    let dir: Vec<_> = dir.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = dir.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out: PathBuf = dir[common..].iter().map(|_| "..").collect();
    out.extend(&to[common..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_parsed() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        assert_eq!(
            parse_ldd(out),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libm.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn lib_merges_into_usr_lib() {
        assert_eq!(
            usr_merged(Path::new("lib/aarch64-linux-gnu/libc.so.6")),
            PathBuf::from("usr/lib/aarch64-linux-gnu/libc.so.6")
        );
        assert_eq!(
            usr_merged(Path::new("lib/ld-linux-aarch64.so.1")),
            PathBuf::from("usr/lib/ld-linux-aarch64.so.1")
        );
        assert_eq!(
            usr_merged(Path::new("usr/lib/aarch64-linux-gnu/libffi.so.8")),
            PathBuf::from("usr/lib/aarch64-linux-gnu/libffi.so.8")
        );
        assert_eq!(
            usr_merged(Path::new("lib64/x")),
            PathBuf::from("lib64/x"),
            "only the lib directory"
        );
    }

    #[test]
    fn links_are_relative_to_their_directory() {
        let r = |d: &str, t: &str| relative(Path::new(d), Path::new(t));
        assert_eq!(
            r("usr/lib/x", "usr/lib/x/libz.so.1.2"),
            PathBuf::from("libz.so.1.2")
        );
        assert_eq!(r("usr/lib", "usr/lib/x/ld.so"), PathBuf::from("x/ld.so"));
        assert_eq!(r("usr/lib/x", "usr/lib/y/l.so"), PathBuf::from("../y/l.so"));
        assert_eq!(r("", "usr/lib/l.so"), PathBuf::from("usr/lib/l.so"));
    }

    #[test]
    fn a_library_keeps_debians_link_and_its_real_file() {
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        fs::create_dir_all(t.join("lib/aarch64-linux-gnu")).unwrap();
        fs::write(t.join("lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"), b"ld").unwrap();
        symlink(
            "aarch64-linux-gnu/ld-linux-aarch64.so.1",
            t.join("lib/ld-linux-aarch64.so.1"),
        )
        .unwrap();
        let stage = tempfile::tempdir().unwrap();
        let s = stage.path();
        let real = place(t, Path::new("/lib/ld-linux-aarch64.so.1"), s).unwrap();
        assert_eq!(
            real,
            PathBuf::from("lib/aarch64-linux-gnu/ld-linux-aarch64.so.1")
        );
        assert_eq!(
            fs::read(s.join("usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1")).unwrap(),
            b"ld"
        );
        assert_eq!(
            fs::read_link(s.join("usr/lib/ld-linux-aarch64.so.1")).unwrap(),
            PathBuf::from("aarch64-linux-gnu/ld-linux-aarch64.so.1")
        );
        // With the stage's /lib linked to usr/lib, the program interpreter's path holds.
        symlink("usr/lib", s.join("lib")).unwrap();
        assert_eq!(
            dynlink::resolve_in(s, Path::new("/lib/ld-linux-aarch64.so.1")),
            Some(PathBuf::from(
                "usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1"
            ))
        );
    }

    #[test]
    fn the_stdlib_is_pruned_and_its_links_resolve_in_the_tree() {
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        let lib = t.join("usr/lib/python3.11");
        for d in ["test", "idlelib", "json", "lib-dynload"] {
            fs::create_dir_all(lib.join(d)).unwrap();
        }
        fs::write(lib.join("os.py"), "os").unwrap();
        fs::write(lib.join("json/__init__.py"), "json").unwrap();
        fs::write(lib.join("test/test_os.py"), "t").unwrap();
        fs::write(
            lib.join("lib-dynload/_ssl.cpython-311-aarch64-linux-gnu.so"),
            b"so",
        )
        .unwrap();
        fs::create_dir_all(t.join("etc/python3.11")).unwrap();
        fs::write(t.join("etc/python3.11/sitecustomize.py"), "tree's").unwrap();
        symlink(
            "/etc/python3.11/sitecustomize.py",
            lib.join("sitecustomize.py"),
        )
        .unwrap();
        fs::create_dir_all(t.join("usr/bin")).unwrap();
        fs::write(t.join("usr/bin/python3.11"), b"py").unwrap();
        symlink("python3.11", t.join("usr/bin/python3")).unwrap();

        let (bin, rel) = find_python(t, "python3".into()).unwrap();
        assert_eq!(bin, PathBuf::from("usr/bin/python3.11"));
        assert_eq!(rel, PathBuf::from("usr/lib/python3.11"));
        let stage = tempfile::tempdir().unwrap();
        let dst = stage.path().join(&rel);
        let mut elves = vec![];
        copy_tree(t, &rel, &dst, &mut elves).unwrap();
        assert!(dst.join("json/__init__.py").is_file());
        assert!(!dst.join("test").exists() && !dst.join("idlelib").exists());
        assert_eq!(
            fs::read_to_string(dst.join("sitecustomize.py")).unwrap(),
            "tree's",
            "an absolute link is the tree's file, not the host's"
        );
        assert_eq!(
            elves,
            vec![lib.join("lib-dynload/_ssl.cpython-311-aarch64-linux-gnu.so")]
        );
        fs::remove_file(lib.join("os.py")).unwrap();
        let err = find_python(t, "python3".into()).unwrap_err().to_string();
        assert!(err.contains("python 3.11 standard library"), "{err}");
    }
}
