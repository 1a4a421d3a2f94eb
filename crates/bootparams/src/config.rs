//! The config file `/etc/snapboot/snapboot.conf`, and the device's effective settings: the
//! built-in defaults, under the file, under the kernel command line, key by key.
//!
//! ```text
//! # a comment                    whole lines only; blank lines are skipped
//! store = PARTLABEL=snapstore    KEY = VALUE: the kernel word snapboot.KEY=VALUE
//! encrypt = tpm
//! noverity = yes                 a flag: yes, no, true or false
//! ```
//!
//! Each line is read by [`BootParams::apply`], the parser of the kernel words, so the file
//! and the command line take the same values. The file is refused as a whole, naming its
//! path and line, for a line that is not `KEY = VALUE`, an unknown key (with the closest
//! known one), a key the file may not carry (one boot's or a measurement's: [`Scope`]), a
//! key set twice, or a value that does not parse. A missing file is no settings; one that
//! cannot be read is an error, never half a config.

mod doc;

pub use doc::{default_file, man_page, markdown_table};

use crate::settings::{Scope, Setting, SETTINGS};
use crate::{BootParams, BootParamsError, PREFIX};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
#[cfg(feature = "std")]
use std::path::Path;
use thiserror::Error;

pub use crate::settings::CONFIG_PATH;

/// The largest config file read (a config file is a few hundred bytes).
pub const CONFIG_MAX_BYTES: u64 = 64 << 10;

/// A config file that cannot be used. The file is named as [`ConfigFile::path`] is.
/// Without the `std` feature only its text's refusals exist (`non_exhaustive`: a crate that
/// matches them still builds when another turns `std` on).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// It exists but cannot be read.
    #[cfg(feature = "std")]
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is larger than [`CONFIG_MAX_BYTES`].
    #[cfg(feature = "std")]
    #[error("{path}: {bytes} bytes, more than a config file's {CONFIG_MAX_BYTES}")]
    TooBig {
        /// The file.
        path: String,
        /// Its size.
        bytes: u64,
    },
    /// A line that is not `KEY = VALUE`, a comment or blank.
    #[error("{path}:{line}: expected `key = value`, found {text:?}")]
    Syntax {
        /// The file.
        path: String,
        /// The line's number, from 1.
        line: usize,
        /// The line.
        text: String,
    },
    /// A key no setting has.
    #[error("{path}:{line}: unknown key {key:?}{}",
            closest.map(|c| format!(" (did you mean {c}?)")).unwrap_or_default())]
    Unknown {
        /// The file.
        path: String,
        /// The line's number.
        line: usize,
        /// The key as written.
        key: String,
        /// The known key it is closest to, if one is close.
        closest: Option<&'static str>,
    },
    /// A key the file may not carry.
    #[error("{path}:{line}: {key} is only on the kernel command line ({PREFIX}{key}): {reason}")]
    KernelOnly {
        /// The file.
        path: String,
        /// The line's number.
        line: usize,
        /// The key.
        key: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A key set on two lines.
    #[error("{path}:{line}: {key} is set again (first on line {first})")]
    Duplicate {
        /// The file.
        path: String,
        /// The second line's number.
        line: usize,
        /// The key.
        key: &'static str,
        /// The first line's number.
        first: usize,
    },
    /// A value the key does not take, or more than one word.
    #[error("{path}:{line}: {key} = {value}: {reason}")]
    Value {
        /// The file.
        path: String,
        /// The line's number.
        line: usize,
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What the key takes.
        reason: String,
    },
}

/// The device's settings cannot be known: its config file or its command line is bad.
#[derive(Debug, Error)]
pub enum SettingsError {
    /// The config file.
    #[error(transparent)]
    File(#[from] ConfigError),
    /// A word of the kernel command line.
    #[error(transparent)]
    Cmdline(#[from] BootParamsError),
}

/// One setting of a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its line's number, from 1.
    pub line: usize,
    /// The setting.
    pub setting: &'static Setting,
    /// The value as written.
    pub value: String,
}

impl Entry {
    /// The kernel word that says the same.
    pub fn word(&self) -> String {
        format!("{}={}", self.setting.key, self.value)
    }
}

/// A config file that parsed: its settings in the file's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// Where it was read, as messages name it.
    pub path: String,
    /// Its settings.
    pub entries: Vec<Entry>,
}

impl ConfigFile {
    /// Parses the text of the config file at `path` (the path is for the errors; usually
    /// [`CONFIG_PATH`]).
    pub fn parse(path: &str, text: &str) -> Result<ConfigFile, ConfigError> {
        let path = path.to_string();
        let mut entries: Vec<Entry> = Vec::new();
        let mut params = BootParams::default();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let text = raw.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let syntax = || ConfigError::Syntax {
                path: path.clone(),
                line,
                text: raw.to_string(),
            };
            let (key, value) = text.split_once('=').ok_or_else(syntax)?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() || key.contains(char::is_whitespace) {
                return Err(syntax());
            }
            let setting = setting_of(key).ok_or_else(|| ConfigError::Unknown {
                path: path.clone(),
                line,
                key: key.to_string(),
                closest: closest(key),
            })?;
            if let Scope::KernelOnly(reason) = setting.scope {
                return Err(ConfigError::KernelOnly {
                    path,
                    line,
                    key: setting.name(),
                    reason,
                });
            }
            if let Some(first) = entries.iter().find(|e| e.setting.key == setting.key) {
                return Err(ConfigError::Duplicate {
                    path,
                    line,
                    key: setting.name(),
                    first: first.line,
                });
            }
            let refuse = |reason: String| ConfigError::Value {
                path: path.clone(),
                line,
                key: setting.name(),
                value: value.to_string(),
                reason,
            };
            if value.is_empty() {
                return Err(refuse(format!("no value: takes {}", setting.values)));
            }
            if value.contains(char::is_whitespace) {
                return Err(refuse(
                    "a value is one word (comments go on lines of their own)".into(),
                ));
            }
            let entry = Entry {
                line,
                setting,
                value: value.to_string(),
            };
            params.apply(&entry.word()).map_err(|e| {
                refuse(match e {
                    BootParamsError::BadValue { expected, .. } => expected.to_string(),
                    BootParamsError::StoreAddress { source, .. } => source.to_string(),
                    BootParamsError::ImageName { source, .. } => source.to_string(),
                    BootParamsError::Unknown { word } => format!("unknown word {word}"),
                })
            })?;
            entries.push(entry);
        }
        Ok(ConfigFile { path, entries })
    }

    /// Reads and parses the config file at `path`; `None` when there is none.
    #[cfg(feature = "std")]
    pub fn read(path: &Path) -> Result<Option<ConfigFile>, ConfigError> {
        let shown = path.display().to_string();
        let read = |source| ConfigError::Read {
            path: shown.clone(),
            source,
        };
        let bytes = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read(e)),
        };
        if bytes > CONFIG_MAX_BYTES {
            return Err(ConfigError::TooBig { path: shown, bytes });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        ConfigFile::parse(&shown, &text).map(Some)
    }
}

/// The setting a config file's key names: the kernel word without `snapboot.`.
fn setting_of(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.name() == key)
}

/// The known key closest to an unknown one: the same without `snapboot.`, or one at most
/// two letters away.
fn closest(key: &str) -> Option<&'static str> {
    if let Some(s) = key.strip_prefix(PREFIX).and_then(setting_of) {
        return Some(s.name());
    }
    SETTINGS
        .iter()
        .map(|s| (edit_distance(key, s.name()), s.name()))
        .filter(|&(d, _)| d <= 2)
        .min_by_key(|&(d, _)| d)
        .map(|(_, name)| name)
}

/// Levenshtein distance (insertions, deletions, substitutions) between two short words.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Where a setting's effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Nobody set it.
    Default,
    /// The config file.
    File,
    /// The kernel command line.
    Kernel,
}

impl Source {
    /// The word `snapboot config check` prints.
    pub fn word(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::File => "file",
            Source::Kernel => "kernel",
        }
    }
}

/// The settings in effect, and where each came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    /// The settings.
    pub params: BootParams,
    /// The config file they include, if there was one.
    pub file: Option<ConfigFile>,
    /// The keys the kernel command line set.
    kernel_keys: Vec<String>,
}

impl Effective {
    /// Where the setting with this key came from.
    pub fn source(&self, key: &str) -> Source {
        if self.kernel_keys.iter().any(|k| k == key) {
            Source::Kernel
        } else if self
            .file
            .iter()
            .flat_map(|f| &f.entries)
            .any(|e| e.setting.key == key)
        {
            Source::File
        } else {
            Source::Default
        }
    }

    /// A setting's value in effect, as the file would write it (the table's default when it
    /// is not set).
    pub fn value(&self, s: &Setting) -> String {
        let words = self.params.render();
        let word = words
            .iter()
            .find(|w| w.split('=').next() == Some(s.key))
            .map(|w| w.split_once('=').map(|(_, v)| v.to_string()));
        match word {
            Some(Some(v)) => v,
            Some(None) if s.is_flag() => "yes".into(),
            Some(None) => "max".into(),
            None if s.is_flag() => "no".into(),
            None => s.default.into(),
        }
    }

    /// Every setting, one a line: key, value in effect, where it came from.
    pub fn report(&self) -> String {
        let width = SETTINGS.iter().map(|s| s.name().len()).max().unwrap_or(0);
        SETTINGS
            .iter()
            .map(|s| {
                let from = self.source(s.key);
                let from = match (&self.file, from) {
                    (Some(f), Source::File) => {
                        let line = f.entries.iter().find(|e| e.setting.key == s.key);
                        let line = line.map_or(0, |e| e.line);
                        format!("file {}:{line}", f.path)
                    }
                    _ => from.word().to_string(),
                };
                format!("{:width$} = {}  ({from})\n", s.name(), self.value(s))
            })
            .collect()
    }
}

/// The effective settings of a boot with this kernel command line and config file: the
/// file's settings, then the command line's words, each over the one before for its key.
pub fn effective(cmdline: &str, file: Option<ConfigFile>) -> Result<Effective, BootParamsError> {
    let mut params = BootParams::default();
    for e in file.iter().flat_map(|f| &f.entries) {
        params.apply(&e.word())?;
    }
    let mut kernel_keys = Vec::new();
    for word in cmdline.split_whitespace() {
        if word == crate::NORESUME {
            params.resume = false;
        } else if word.starts_with(PREFIX) {
            params.apply(word)?;
            kernel_keys.push(word.split('=').next().unwrap_or(word).to_string());
        }
    }
    Ok(Effective {
        params,
        file,
        kernel_keys,
    })
}

/// The settings of a boot with this kernel command line and the config file's text (`None`:
/// there is none), read from [`CONFIG_PATH`]: [`load`] without a file system, for the
/// freestanding restorer, which reads the file out of the initramfs itself.
pub fn from_text(cmdline: &str, file: Option<&str>) -> Result<Effective, SettingsError> {
    let file = file
        .map(|t| ConfigFile::parse(CONFIG_PATH, t))
        .transpose()?;
    Ok(effective(cmdline, file)?)
}

/// What the device calls for its settings: the config file at `path` (none is fine) under
/// the kernel command line `cmdline`.
#[cfg(feature = "std")]
pub fn load(cmdline: &str, path: &Path) -> Result<Effective, SettingsError> {
    let file = ConfigFile::read(path)?;
    Ok(effective(cmdline, file)?)
}

#[cfg(test)]
mod tests;
