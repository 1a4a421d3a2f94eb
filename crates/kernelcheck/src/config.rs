//! A kernel's build configuration (`.config`): [`KernelConfig::parse`] reads its text
//! (`CONFIG_X=y`, `=m`, `="string"`, numbers, `# CONFIG_X is not set`, read by
//! [`kernelpack::kconfig`]) into a map, [`load`] a file,
//! gzip-compressed or not, and [`load_running`] the running kernel's: the distribution's
//! `/boot/config-<release>` first, then the kernel's own `/proc/config.gz`.

use flate2::read::GzDecoder;
use kernelpack::kconfig;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the running kernel exposes its config (with `CONFIG_IKCONFIG_PROC`).
pub const PROC_CONFIG: &str = "/proc/config.gz";

/// Where distributions install a kernel's config, for a release.
pub fn boot_config(release: &str) -> PathBuf {
    PathBuf::from(format!("/boot/config-{release}"))
}

/// Why a kernel config could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KernelConfigError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The file is unusable (gzip that does not decompress, not text, not a `.config`).
    #[error("kernel config {path}: {reason}")]
    Unusable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// None of the places the running kernel's config can be is there.
    #[error(
        "no config of the running kernel: {} is missing and so is {PROC_CONFIG} (a kernel \
         without CONFIG_IKCONFIG_PROC, or its `configs` module is not loaded)", boot.display()
    )]
    NotFound {
        /// The distribution's place that was tried first.
        boot: PathBuf,
    },
}

/// One option's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum ConfigValue {
    /// Built in (`=y`).
    Yes,
    /// Built as a module (`=m`).
    Module,
    /// Explicitly off (`# CONFIG_X is not set`).
    NotSet,
    /// A string (quotes removed) or number.
    Value(String),
}

impl From<kconfig::Value<'_>> for ConfigValue {
    fn from(v: kconfig::Value<'_>) -> Self {
        match v {
            kconfig::Value::Yes => Self::Yes,
            kconfig::Value::Module => Self::Module,
            kconfig::Value::NotSet => Self::NotSet,
            kconfig::Value::Str(s) | kconfig::Value::Number(s) => Self::Value(s.to_string()),
        }
    }
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Yes => f.write_str("y"),
            Self::Module => f.write_str("m"),
            Self::NotSet => f.write_str("is not set"),
            Self::Value(v) => write!(f, "{v:?}"),
        }
    }
}

/// A parsed kernel `.config`. Option names are kept without the `CONFIG_` prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct KernelConfig {
    /// Every option mentioned, by name without `CONFIG_`.
    pub options: BTreeMap<String, ConfigValue>,
}

impl KernelConfig {
    /// Parses `.config` text ([`kernelpack::kconfig`]: `=n` is not set like `# CONFIG_X is
    /// not set`); lines that are neither assignments nor `is not set` comments are ignored.
    pub fn parse(text: &str) -> Self {
        let options = kconfig::settings(text)
            .map(|s| (s.name.to_string(), ConfigValue::from(s.value)))
            .collect();
        Self { options }
    }

    /// The value of `name` (with or without the `CONFIG_` prefix); `None` if not mentioned.
    pub fn get(&self, name: &str) -> Option<&ConfigValue> {
        self.options
            .get(name.strip_prefix("CONFIG_").unwrap_or(name))
    }

    /// Whether `name` is built in.
    pub fn is_builtin(&self, name: &str) -> bool {
        self.get(name) == Some(&ConfigValue::Yes)
    }

    /// Whether `name` is built in or a module.
    pub fn is_enabled(&self, name: &str) -> bool {
        matches!(self.get(name), Some(ConfigValue::Yes | ConfigValue::Module))
    }

    /// The string or number value of `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        match self.get(name) {
            Some(ConfigValue::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// The value as shown in a check: `y`, `m`, `is not set`, `"lz4"`, or `absent`.
    pub fn shown(&self, name: &str) -> String {
        self.get(name)
            .map_or_else(|| "absent".to_string(), ToString::to_string)
    }

    /// The first of `CONFIG_<prefix><choice>` that is built in, lower-cased (e.g. the
    /// kernel's compressor from prefix `KERNEL_`).
    pub fn choice(&self, prefix: &str, choices: &[&str]) -> Option<String> {
        choices
            .iter()
            .find(|c| self.is_builtin(&format!("{prefix}{c}")))
            .map(|c| c.to_ascii_lowercase())
    }

    /// The kernel image's compressor (`CONFIG_KERNEL_*`).
    pub fn kernel_compression(&self) -> Option<String> {
        self.choice("KERNEL_", KERNEL_COMPRESSORS)
    }

    /// The built-in initramfs's compressor (`CONFIG_INITRAMFS_COMPRESSION_*`).
    pub fn initramfs_compression(&self) -> Option<String> {
        self.choice("INITRAMFS_COMPRESSION_", INITRAMFS_COMPRESSORS)
    }
}

/// `CONFIG_KERNEL_*` choices.
const KERNEL_COMPRESSORS: &[&str] = &["GZIP", "BZIP2", "LZMA", "XZ", "LZO", "LZ4", "ZSTD"];
/// `CONFIG_INITRAMFS_COMPRESSION_*` choices.
const INITRAMFS_COMPRESSORS: &[&str] =
    &["GZIP", "BZIP2", "LZMA", "XZ", "LZO", "LZ4", "ZSTD", "NONE"];

/// Reads a kernel config file; gzip is recognised by its magic bytes.
pub fn load(path: &Path) -> Result<KernelConfig, KernelConfigError> {
    let unusable = |reason: String| KernelConfigError::Unusable {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|source| KernelConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .map_err(|e| unusable(format!("gzip data cannot be decompressed to text: {e}")))?;
        text
    } else {
        String::from_utf8(bytes).map_err(|e| unusable(format!("not text: {e}")))?
    };
    let config = KernelConfig::parse(&text);
    if config.options.is_empty() {
        return Err(unusable("no CONFIG_ lines: not a kernel .config".into()));
    }
    Ok(config)
}

/// Reads the first of `paths` that exists; `NotFound` names the first when none does.
pub fn load_first(paths: &[PathBuf]) -> Result<(PathBuf, KernelConfig), KernelConfigError> {
    for p in paths {
        match load(p) {
            Err(KernelConfigError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            other => return other.map(|c| (p.clone(), c)),
        }
    }
    Err(KernelConfigError::NotFound {
        boot: paths.first().cloned().unwrap_or_default(),
    })
}

/// The running kernel's config and where it was found: `/boot/config-<release>`, then
/// [`PROC_CONFIG`].
pub fn load_running() -> Result<(PathBuf, KernelConfig), KernelConfigError> {
    let release = devsys::system::running_release();
    load_first(&[boot_config(&release), PathBuf::from(PROC_CONFIG)])
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const CONFIG: &str = "\
# Automatically generated file; DO NOT EDIT.
CONFIG_LOCALVERSION=\"-snap\"
CONFIG_LOG_BUF_SHIFT=17
CONFIG_HIBERNATION=y
# CONFIG_SECURITY_LOCKDOWN_LSM is not set
CONFIG_SQUASHFS=m
CONFIG_MODULES=n
CONFIG_KERNEL_LZ4=y
CONFIG_INITRAMFS_COMPRESSION_GZIP=y
";

    #[test]
    fn parses_values() {
        let c = KernelConfig::parse(CONFIG);
        assert_eq!(c.value("LOCALVERSION"), Some("-snap"));
        assert_eq!(c.value("CONFIG_LOG_BUF_SHIFT"), Some("17"));
        assert_eq!(c.get("SECURITY_LOCKDOWN_LSM"), Some(&ConfigValue::NotSet));
        assert_eq!(c.shown("MODULES"), "is not set", "=n as Kconfig reads it");
        assert!(c.is_enabled("SQUASHFS") && !c.is_builtin("SQUASHFS"));
        assert_eq!(c.kernel_compression().as_deref(), Some("lz4"));
        assert_eq!(c.initramfs_compression().as_deref(), Some("gzip"));
        assert_eq!(c.get("NOPE"), None);
    }

    #[test]
    fn loads_plain_and_gzip_files_the_boot_one_first() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("config");
        std::fs::write(&plain, CONFIG).expect("write");
        assert!(load(&plain).expect("plain").is_builtin("HIBERNATION"));
        let gz = dir.path().join("config.gz");
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(b"CONFIG_PRINTK_TIME=y\n").expect("compress");
        std::fs::write(&gz, enc.finish().expect("finish")).expect("write");
        assert!(load(&gz).expect("gzip").is_builtin("PRINTK_TIME"));
        let junk = dir.path().join("junk");
        std::fs::write(&junk, "hello\n").expect("write");
        let err = load(&junk).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not a kernel .config"), "{err}");
        let missing = dir.path().join("none");
        assert!(matches!(
            load(&missing),
            Err(KernelConfigError::Read { .. })
        ));

        let (found, c) = load_first(&[missing.clone(), gz.clone()]).expect("second");
        assert_eq!(found, gz);
        assert!(!c.is_builtin("HIBERNATION"));
        assert_eq!(load_first(&[plain.clone(), gz]).expect("first").0, plain);
        let e = load_first(std::slice::from_ref(&missing))
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("is missing")));
        assert!(matches!(
            load_first(&[junk, missing]),
            Err(KernelConfigError::Unusable { .. })
        ));
    }
}
