//! Kernel modules for the initramfs: finding them in a release's module tree, reading their
//! dependencies from each module's own `.modinfo` section (a downloaded package ships no
//! `modules.dep`), and ordering them so every module is loaded after what it depends on.

use object::{Object, ObjectSection};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Errors while resolving modules.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// No module file and no built-in entry of that name.
    #[error("kernel module `{0}` is neither built in nor present in the modules tree")]
    NotFound(String),
    /// A module file could not be read or parsed.
    #[error("module {path}: {reason}")]
    Bad { path: PathBuf, reason: String },
    /// Dependencies form a cycle.
    #[error("module dependency cycle through `{0}`")]
    Cycle(String),
}

/// One module to load, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleFile {
    /// Canonical name (underscores), e.g. `virtio_blk`.
    pub name: String,
    /// The `.ko` file (possibly compressed).
    pub path: PathBuf,
}

/// Canonical module name: file stem without `.ko*`, dashes as underscores.
pub fn canonical(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

/// The module tree of one kernel release.
#[derive(Debug)]
pub struct ModuleTree {
    files: BTreeMap<String, PathBuf>,
    builtin: HashSet<String>,
}

impl ModuleTree {
    /// Indexes `dir` (the `/lib/modules/<release>` directory).
    pub fn open(dir: &Path) -> Result<Self, ModuleError> {
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.join("kernel")];
        while let Some(d) = stack.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.filter_map(Result::ok) {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.to_string_lossy().contains(".ko") {
                    let name = canonical(&p.file_name().unwrap_or_default().to_string_lossy());
                    files.insert(name, p);
                }
            }
        }
        let builtin = fs::read_to_string(dir.join("modules.builtin"))
            .unwrap_or_default()
            .lines()
            .map(canonical)
            .collect();
        Ok(Self { files, builtin })
    }

    /// Whether the kernel has `name` built in.
    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.contains(&canonical(name))
    }

    /// The modules needed for `wanted`, dependencies first; built-in ones are skipped.
    pub fn resolve(&self, wanted: &[&str]) -> Result<Vec<ModuleFile>, ModuleError> {
        let mut order = Vec::new();
        let mut done = HashSet::new();
        for w in wanted {
            self.visit(&canonical(w), &mut done, &mut Vec::new(), &mut order)?;
        }
        Ok(order)
    }

    fn visit(
        &self,
        name: &str,
        done: &mut HashSet<String>,
        path: &mut Vec<String>,
        order: &mut Vec<ModuleFile>,
    ) -> Result<(), ModuleError> {
        if done.contains(name) {
            return Ok(());
        }
        if path.iter().any(|p| p == name) {
            return Err(ModuleError::Cycle(name.to_string()));
        }
        let Some(file) = self.files.get(name) else {
            if self.is_builtin(name) {
                done.insert(name.to_string());
                return Ok(());
            }
            return Err(ModuleError::NotFound(name.to_string()));
        };
        path.push(name.to_string());
        for dep in depends_of(file)? {
            self.visit(&dep, done, path, order)?;
        }
        path.pop();
        done.insert(name.to_string());
        order.push(ModuleFile {
            name: name.to_string(),
            path: file.clone(),
        });
        Ok(())
    }
}

/// Reads a module file, decompressing `.ko.xz`, `.ko.zst` and `.ko.gz`.
pub fn read_module(path: &Path) -> Result<Vec<u8>, ModuleError> {
    let bad = |reason: String| ModuleError::Bad {
        path: path.to_path_buf(),
        reason,
    };
    let raw = fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut out = Vec::new();
    let name = path.to_string_lossy();
    let res = if name.ends_with(".xz") {
        xz2::read::XzDecoder::new(&raw[..]).read_to_end(&mut out)
    } else if name.ends_with(".zst") {
        zstd::stream::read::Decoder::new(&raw[..]).and_then(|mut d| d.read_to_end(&mut out))
    } else if name.ends_with(".gz") {
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out)
    } else {
        return Ok(raw);
    };
    res.map_err(|e| bad(format!("decompress: {e}")))?;
    Ok(out)
}

/// The `depends=` list from a module's `.modinfo` section.
pub fn depends_of(path: &Path) -> Result<Vec<String>, ModuleError> {
    let data = read_module(path)?;
    let file = object::File::parse(&*data).map_err(|e| ModuleError::Bad {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let Some(sec) = file.section_by_name(".modinfo") else {
        return Ok(Vec::new());
    };
    let bytes = sec.data().map_err(|e| ModuleError::Bad {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(parse_modinfo_depends(bytes))
}

fn parse_modinfo_depends(modinfo: &[u8]) -> Vec<String> {
    modinfo
        .split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(b"depends="))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .filter(|s| !s.is_empty())
                .map(canonical)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names() {
        assert_eq!(
            canonical("kernel/drivers/virtio/virtio_pci.ko"),
            "virtio_pci"
        );
        assert_eq!(canonical("crc-t10dif.ko.xz"), "crc_t10dif");
        assert_eq!(canonical("squashfs"), "squashfs");
    }

    #[test]
    fn modinfo_depends_parsed() {
        let info = b"license=GPL\0depends=virtio_ring,virtio\0retpoline=Y\0";
        assert_eq!(parse_modinfo_depends(info), vec!["virtio_ring", "virtio"]);
        assert!(parse_modinfo_depends(b"depends=\0").is_empty());
    }

    #[test]
    fn missing_module_is_named() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("kernel")).unwrap();
        fs::write(
            dir.path().join("modules.builtin"),
            "kernel/fs/ext4/ext4.ko\n",
        )
        .unwrap();
        let tree = ModuleTree::open(dir.path()).unwrap();
        assert!(
            tree.resolve(&["ext4"]).unwrap().is_empty(),
            "builtin skipped"
        );
        let err = tree.resolve(&["virtio_blk"]).unwrap_err();
        assert!(err.to_string().contains("virtio_blk"), "{err}");
    }
}
