//! `/etc/snapboot/installed.manifest`: what `snapboot install` wrote, so `--uninstall`
//! removes exactly that, and keeps (with a warning) a file changed since.
//!
//! ```text
//!   # a comment
//!   file <blake3 of the content, hex> /usr/local/sbin/snapboot
//!   link <target> /etc/systemd/system/multi-user.target.wants/snapboot-capture.service
//!   dir  - /etc/snapboot            a directory the install created (removed when empty)
//! ```
//!
//! Paths are absolute as the installed system sees them (the root given to `--root` is not
//! part of them) and have no whitespace.

use std::path::{Path, PathBuf};

/// Where the manifest is, relative to the root.
pub const MANIFEST_PATH: &str = "etc/snapboot/installed.manifest";

/// One thing the install made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A file with this content hash.
    File {
        /// Absolute path in the installed system.
        path: PathBuf,
        /// blake3 of the content, hex.
        hash: String,
    },
    /// A symbolic link to `target`.
    Link {
        /// Absolute path in the installed system.
        path: PathBuf,
        /// What it points to.
        target: PathBuf,
    },
    /// A directory the install created.
    Dir {
        /// Absolute path in the installed system.
        path: PathBuf,
    },
}

impl Record {
    /// The path it records.
    pub fn path(&self) -> &Path {
        match self {
            Record::File { path, .. } | Record::Link { path, .. } | Record::Dir { path } => path,
        }
    }
}

/// A manifest line that is not one.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {text:?} is not `file HASH PATH`, `link TARGET PATH` or `dir - PATH`")]
pub struct BadManifest {
    /// 1-based line number.
    pub line: usize,
    /// The line.
    pub text: String,
}

/// The hash a manifest records for `data`.
pub fn hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// The manifest's text.
pub fn render(records: &[Record]) -> String {
    let mut out = String::from(
        "# Written by `snapboot install`: what it wrote, for `snapboot install --uninstall`.\n",
    );
    for r in records {
        let line = match r {
            Record::File { path, hash } => format!("file {hash} {}\n", path.display()),
            Record::Link { path, target } => {
                format!("link {} {}\n", target.display(), path.display())
            }
            Record::Dir { path } => format!("dir - {}\n", path.display()),
        };
        out.push_str(&line);
    }
    out
}

/// Reads a manifest's text.
pub fn parse(text: &str) -> Result<Vec<Record>, BadManifest> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let bad = || BadManifest {
            line: i + 1,
            text: l.to_string(),
        };
        let f: Vec<&str> = t.split_whitespace().collect();
        let [kind, what, path] = f[..] else {
            return Err(bad());
        };
        if !path.starts_with('/') {
            return Err(bad());
        }
        let path = PathBuf::from(path);
        out.push(match kind {
            "file" if what.len() == 64 && what.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Record::File {
                    path,
                    hash: what.to_string(),
                }
            }
            "link" => Record::Link {
                path,
                target: PathBuf::from(what),
            },
            "dir" => Record::Dir { path },
            _ => return Err(bad()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_reads_back_as_written() {
        let records = vec![
            Record::Dir {
                path: "/etc/snapboot".into(),
            },
            Record::File {
                path: "/usr/local/sbin/snapboot".into(),
                hash: hash(b"binary"),
            },
            Record::Link {
                path: "/etc/systemd/system/multi-user.target.wants/x.service".into(),
                target: "/etc/systemd/system/x.service".into(),
            },
        ];
        assert_eq!(parse(&render(&records)).unwrap(), records);
        let e = parse("file abc /x\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse("dir - relative\n").is_err());
    }
}
