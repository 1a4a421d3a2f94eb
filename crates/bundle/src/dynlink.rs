//! What a dynamically linked program needs from a root filesystem, read from its ELF file
//! rather than by running it (`ldd` cannot run an arm64 program on an amd64 host): its
//! program interpreter (`PT_INTERP`) and the shared objects it names (`DT_NEEDED`), found
//! where Debian's dynamic loader looks for them without an `ld.so.cache`:
//! `/lib/TRIPLET`, `/usr/lib/TRIPLET`, `/lib`, `/usr/lib`.
//!
//! Paths inside a root are resolved as the device would see them: a symbolic link is
//! followed within the root, an absolute target taken from the root's `/`.
//! `DT_RUNPATH`/`DT_RPATH` are not read: Debian's python and its libraries have none.

use guestarch::Arch;
use object::elf;
use object::read::elf::{Dyn, ElfFile64, ProgramHeader};
use object::Endianness;
use std::collections::VecDeque;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// What the dynamic loader must find for one ELF file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// The program interpreter (absolute path), for an executable.
    pub interp: Option<String>,
    /// The `DT_NEEDED` names, in order.
    pub needed: Vec<String>,
}

/// Why a root's programs cannot all be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A file starts like an ELF file but cannot be read as one.
    #[error("{}: not a readable 64-bit ELF file: {reason}", path.display())]
    BadElf {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// A shared object a program needs is nowhere the loader looks.
    #[error(
        "{needed}, which {} needs, is not where the loader looks in its root ({})",
        by.display(), search_dirs(*arch).iter().map(|d| format!("/{d}")).collect::<Vec<_>>().join(", ")
    )]
    MissingLibrary {
        /// The `DT_NEEDED` name.
        needed: String,
        /// The program or library that needs it.
        by: PathBuf,
        /// The root's architecture (which names the loader's directories).
        arch: Arch,
    },
    /// A program's interpreter is not in the root.
    #[error("the program interpreter {interp} of {} is not in its root", by.display())]
    MissingInterpreter {
        /// The `PT_INTERP` path.
        interp: String,
        /// The program.
        by: PathBuf,
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

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LinkError + '_ {
    move |source| LinkError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `data` is an ELF file.
pub fn is_elf(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

/// The interpreter and `DT_NEEDED` names of a 64-bit ELF file (both empty for a static one).
pub fn needs(data: &[u8]) -> Result<Needs, String> {
    let file = ElfFile64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = file.endian();
    let mut out = Needs::default();
    for ph in file.elf_program_headers() {
        if let Some(interp) = ph.interpreter(endian, data).map_err(|e| e.to_string())? {
            out.interp = Some(String::from_utf8_lossy(interp).into_owned());
        }
    }
    let sections = file.elf_section_table();
    if let Some((dyns, link)) = sections.dynamic(endian, data).map_err(|e| e.to_string())? {
        let strings = sections
            .strings(endian, data, link)
            .map_err(|e| e.to_string())?;
        for d in dyns {
            if d.tag32(endian) == Some(elf::DT_NEEDED) {
                let name = d.string(endian, strings).map_err(|e| e.to_string())?;
                out.needed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok(out)
}

/// Reads the needs of the ELF file at `path`; `None` when it is not an ELF file.
pub fn needs_of(path: &Path) -> Result<Option<Needs>, LinkError> {
    let data = fs::read(path).map_err(io(path))?;
    if !is_elf(&data) {
        return Ok(None);
    }
    needs(&data).map(Some).map_err(|reason| LinkError::BadElf {
        path: path.to_path_buf(),
        reason,
    })
}

/// Where the loader looks for `DT_NEEDED` names, relative to the root, in its order.
pub fn search_dirs(arch: Arch) -> Vec<String> {
    let t = arch.multiarch();
    vec![
        format!("lib/{t}"),
        format!("usr/lib/{t}"),
        "lib".into(),
        "usr/lib".into(),
    ]
}

/// Resolves `rel` (relative to `root`, or absolute meaning the root's `/`) following
/// symbolic links within the root; the real file's path relative to the root, or `None`
/// when it does not exist (or the links loop).
pub fn resolve_in(root: &Path, rel: &Path) -> Option<PathBuf> {
    let mut todo: VecDeque<PathBuf> = rel.components().map(|c| c.as_os_str().into()).collect();
    let mut cur = PathBuf::new();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        match Path::new(&part).components().next() {
            Some(Component::RootDir) | Some(Component::CurDir) | None => continue,
            Some(Component::ParentDir) => {
                cur.pop();
                continue;
            }
            _ => {}
        }
        cur.push(&part);
        let meta = fs::symlink_metadata(root.join(&cur)).ok()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return None;
            }
            let target = fs::read_link(root.join(&cur)).ok()?;
            cur.pop();
            if target.is_absolute() {
                cur = PathBuf::new();
            }
            for c in target.components().rev() {
                todo.push_front(c.as_os_str().into());
            }
        }
    }
    Some(cur)
}

/// Finds the shared object `name` where the loader would: its directory in [`search_dirs`]
/// and the real file it resolves to, both relative to the root.
pub fn find_library(root: &Path, arch: Arch, name: &str) -> Option<(String, PathBuf)> {
    search_dirs(arch).into_iter().find_map(|dir| {
        let real = resolve_in(root, &Path::new(&dir).join(name))?;
        root.join(&real).is_file().then_some((dir, real))
    })
}

/// Checks that every ELF file in the root can be loaded there: its interpreter exists and
/// every `DT_NEEDED` name is found where the loader looks. Returns how many ELF files it
/// checked; the first unmet need is the error, naming the library and who needs it.
pub fn check_root(root: &Path, arch: Arch) -> Result<usize, LinkError> {
    let mut checked = 0;
    let mut dirs = vec![PathBuf::new()];
    while let Some(dir) = dirs.pop() {
        let here = root.join(&dir);
        let mut entries: Vec<_> = fs::read_dir(&here)
            .map_err(io(&here))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel = dir.join(e.file_name());
            let kind = e.file_type().map_err(io(&e.path()))?;
            if kind.is_dir() {
                dirs.push(rel);
                continue;
            }
            if !kind.is_file() {
                continue; // a link's target is checked as the file it is
            }
            let Some(n) = needs_of(&e.path())? else {
                continue;
            };
            checked += 1;
            if let Some(interp) = &n.interp {
                if !resolve_in(root, Path::new(interp)).is_some_and(|p| root.join(p).is_file()) {
                    return Err(LinkError::MissingInterpreter {
                        interp: interp.clone(),
                        by: e.path(),
                    });
                }
            }
            if let Some(lib) = n
                .needed
                .iter()
                .find(|l| find_library(root, arch, l).is_none())
            {
                return Err(LinkError::MissingLibrary {
                    needed: lib.clone(),
                    by: e.path(),
                    arch,
                });
            }
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_dynamic_program_names_its_interpreter_and_libraries() {
        // The host's /bin/ls, an x86_64 Debian program linked against libc.
        let n = needs(&fs::read("/bin/ls").unwrap()).unwrap();
        assert_eq!(n.interp.as_deref(), Some("/lib64/ld-linux-x86-64.so.2"));
        assert!(n.needed.iter().any(|l| l == "libc.so.6"), "{n:?}");
        assert!(needs(b"\x7fELF not really").is_err());
    }

    #[test]
    fn links_resolve_inside_the_root() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("usr/lib/aarch64-linux-gnu")).unwrap();
        fs::write(r.join("usr/lib/aarch64-linux-gnu/libz.so.1.2.13"), b"z").unwrap();
        symlink("usr/lib", r.join("lib")).unwrap();
        symlink(
            "libz.so.1.2.13",
            r.join("usr/lib/aarch64-linux-gnu/libz.so.1"),
        )
        .unwrap();
        // Absolute: the root's /, never the host's.
        symlink(
            "/lib/aarch64-linux-gnu/libz.so.1",
            r.join("usr/lib/libz-abs"),
        )
        .unwrap();
        symlink("/etc/hostname", r.join("usr/lib/host-file")).unwrap();
        let real = PathBuf::from("usr/lib/aarch64-linux-gnu/libz.so.1.2.13");
        assert_eq!(
            resolve_in(r, Path::new("/lib/aarch64-linux-gnu/libz.so.1")),
            Some(real.clone())
        );
        assert_eq!(resolve_in(r, Path::new("usr/lib/libz-abs")), Some(real));
        assert_eq!(resolve_in(r, Path::new("usr/lib/host-file")), None);
        symlink("loop", r.join("loop")).unwrap();
        assert_eq!(resolve_in(r, Path::new("loop")), None);
        assert_eq!(
            find_library(r, Arch::Arm64, "libz.so.1").map(|f| f.0),
            Some("lib/aarch64-linux-gnu".into()),
            "the loader's first directory, through the usrmerge link"
        );
        assert_eq!(find_library(r, Arch::Arm64, "libm.so.6"), None);
    }

    #[test]
    fn a_root_missing_a_library_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("bin")).unwrap();
        fs::copy("/bin/ls", r.join("bin/ls")).unwrap();
        fs::write(r.join("bin/script"), "#!/bin/sh\n").unwrap();
        let err = check_root(r, Arch::X86_64).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "program interpreter /lib64/ld-linux-x86-64.so.2 of {}/bin/ls is not",
                r.display()
            )),
            "{err}"
        );
        // The interpreter where the host has it, reached through an absolute link as there.
        let host = Path::new("/");
        let interp = resolve_in(host, Path::new("/lib64/ld-linux-x86-64.so.2")).unwrap();
        fs::create_dir_all(r.join(&interp).parent().unwrap()).unwrap();
        fs::copy(host.join(&interp), r.join(&interp)).unwrap();
        fs::create_dir_all(r.join("lib64")).unwrap();
        symlink(host.join(&interp), r.join("lib64/ld-linux-x86-64.so.2")).unwrap();
        let err = check_root(r, Arch::X86_64).unwrap_err().to_string();
        assert!(
            err.contains(&format!("which {}/bin/ls needs", r.display()))
                && err.ends_with(
                    "(/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib, /usr/lib)"
                ),
            "{err}"
        );
        // Then the libraries, as the host's loader finds them, and theirs in turn.
        let mut todo = vec![PathBuf::from("bin/ls")];
        while let Some(f) = todo.pop() {
            for lib in needs_of(&r.join(&f)).unwrap().unwrap().needed {
                if find_library(r, Arch::X86_64, &lib).is_none() {
                    let (dir, real) = find_library(host, Arch::X86_64, &lib).unwrap();
                    fs::create_dir_all(r.join(&dir)).unwrap();
                    fs::copy(host.join(real), r.join(&dir).join(&lib)).unwrap();
                    todo.push(Path::new(&dir).join(&lib));
                }
            }
        }
        assert!(check_root(r, Arch::X86_64).unwrap() >= 2);
    }
}
