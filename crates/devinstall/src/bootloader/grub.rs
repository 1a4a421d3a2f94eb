//! GRUB's environment block, `grubenv`: the file `grub-editenv` edits and GRUB's
//! `load_env`/`save_env` read and write. Setting `next_entry` in it is what `grub-reboot ID`
//! does; the `00_header` part of a grub.cfg boots that entry once and clears it
//! (`save_env next_entry`). Written here without GRUB's tools, which a read-only device
//! root need not carry.
//!
//! ```text
//! +----------------------------+--------------------------+------------------------------+
//! | "# GRUB Environment Block\n" | name=value\n, # comment\n | '#' up to the block's size   |
//! | 25 bytes                     | a value escapes \ and \n  | (1024 bytes when GRUB makes it) |
//! +----------------------------+--------------------------+------------------------------+
//! ```
//!
//! The block is rewritten in place, at the same size: GRUB's `save_env` writes the file's
//! own sectors and refuses a block whose size or place changed under it.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The block's first line.
pub const SIGNATURE: &str = "# GRUB Environment Block\n";
/// The size of a block GRUB (`grub-editenv create`) makes.
pub const BLOCK_BYTES: usize = 1024;
/// The id of the capture entry (guest/grub/42_snapboot, installed as /etc/grub.d/42_snapboot).
pub const CAPTURE_ENTRY: &str = "snapboot-capture";
/// The variable GRUB boots once.
pub const NEXT_ENTRY: &str = "next_entry";

/// Why `grubenv` could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum GrubEnvError {
    /// Reading or writing the file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an environment block.
    #[error("{} is not a GRUB environment block: {reason}", path.display())]
    NotABlock {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The variables do not fit the block.
    #[error("{}: the variables need {bytes} bytes, the block has {size}", path.display())]
    Full {
        /// The file.
        path: PathBuf,
        /// Bytes needed.
        bytes: usize,
        /// The block's size.
        size: usize,
    },
    /// A menu entry id GRUB's `default` cannot hold as it is.
    #[error("menu entry id {0:?}: expected 1 to 128 of A-Z a-z 0-9 _ . -")]
    BadId(String),
}

/// An empty block of [`BLOCK_BYTES`], as `grub-editenv FILE create` writes it.
pub fn empty_block() -> Vec<u8> {
    let mut b = SIGNATURE.as_bytes().to_vec();
    b.resize(BLOCK_BYTES, b'#');
    b
}

/// A line of a block: a comment (Debian's `grub-editenv` writes a warning under the
/// signature) or a variable, its value as written (escapes kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `# ...`, without its newline.
    Comment(String),
    /// `name=value`.
    Var(String, String),
}

/// The lines of a block after its signature, up to the padding.
pub fn parse(block: &[u8]) -> Result<Vec<Line>, String> {
    let text = std::str::from_utf8(block).map_err(|e| format!("not UTF-8 ({e})"))?;
    let mut rest = text
        .strip_prefix(SIGNATURE)
        .ok_or_else(|| format!("it does not start with {:?}", SIGNATURE.trim_end()))?;
    let mut lines = Vec::new();
    while !rest.is_empty() {
        // A value's newline is escaped as "\\\n": a line ends at the first bare newline.
        let bytes = rest.as_bytes();
        let mut i = 0;
        let mut end = None;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'\n' => {
                    end = Some(i);
                    break;
                }
                _ => i += 1,
            }
        }
        let Some(end) = end else {
            // The padding: '#' to the end.
            if rest.bytes().all(|b| b == b'#') {
                break;
            }
            return Err(format!(
                "{:?} is neither a line nor the padding",
                rest.trim_end_matches('#')
            ));
        };
        let line = &rest[..end];
        if line.starts_with('#') {
            lines.push(Line::Comment(line.to_string()));
        } else {
            let (name, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not name=value"))?;
            lines.push(Line::Var(name.to_string(), value.to_string()));
        }
        rest = &rest[end + 1..];
    }
    Ok(lines)
}

/// The block of `size` bytes holding `lines`, or the bytes they need when they do not fit.
pub fn render(lines: &[Line], size: usize) -> Result<Vec<u8>, usize> {
    let mut b = SIGNATURE.as_bytes().to_vec();
    for line in lines {
        let text = match line {
            Line::Comment(c) => format!("{c}\n"),
            Line::Var(name, value) => format!("{name}={value}\n"),
        };
        b.extend_from_slice(text.as_bytes());
    }
    if b.len() > size {
        return Err(b.len());
    }
    b.resize(size, b'#');
    Ok(b)
}

fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Sets `next_entry=id` in the block at `path` (what `grub-reboot id` does), keeping its
/// other variables and its size.
pub fn set_next_entry(path: &Path, id: &str) -> Result<(), GrubEnvError> {
    if !valid_id(id) {
        return Err(GrubEnvError::BadId(id.to_string()));
    }
    let io = |source| GrubEnvError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let mut block = Vec::new();
    f.read_to_end(&mut block).map_err(io)?;
    let mut lines = parse(&block).map_err(|reason| GrubEnvError::NotABlock {
        path: path.to_path_buf(),
        reason,
    })?;
    lines.retain(|l| !matches!(l, Line::Var(n, _) if n == NEXT_ENTRY));
    lines.push(Line::Var(NEXT_ENTRY.to_string(), id.to_string()));
    let new = render(&lines, block.len()).map_err(|bytes| GrubEnvError::Full {
        path: path.to_path_buf(),
        bytes,
        size: block.len(),
    })?;
    f.seek(SeekFrom::Start(0)).map_err(io)?;
    f.write_all(&new).map_err(io)?;
    f.sync_all().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_entry_is_set_in_place_keeping_the_rest_and_the_size() {
        let d = tempfile::tempdir().unwrap();
        let env = d.path().join("grubenv");
        let warning = Line::Comment("# WARNING: written by grub-editenv".into());
        let saved = Line::Var("saved_entry".into(), "gnulinux-simple".into());
        let lines = vec![warning.clone(), saved.clone()];
        std::fs::write(&env, render(&lines, BLOCK_BYTES).unwrap()).unwrap();
        set_next_entry(&env, "snapboot-capture").unwrap();
        set_next_entry(&env, "snapboot-capture").unwrap();
        let block = std::fs::read(&env).unwrap();
        assert_eq!(block.len(), BLOCK_BYTES);
        assert_eq!(
            parse(&block).unwrap(),
            [
                warning,
                saved,
                Line::Var("next_entry".into(), "snapboot-capture".into())
            ]
        );
    }

    #[test]
    fn what_grub_editenv_writes_is_read_and_bad_input_is_refused_with_the_reason() {
        // Debian's `grub-editenv F create; grub-editenv F set a=1 'b=x\ny'` (the newline
        // escaped).
        let mut block =
            b"# GRUB Environment Block\n# WARNING: Do not edit\na=1\nb=x\\\ny\n".to_vec();
        block.resize(BLOCK_BYTES, b'#');
        assert_eq!(
            parse(&block).unwrap(),
            [
                Line::Comment("# WARNING: Do not edit".into()),
                Line::Var("a".into(), "1".into()),
                Line::Var("b".into(), "x\\\ny".into())
            ]
        );
        assert!(parse(b"hello").unwrap_err().contains("does not start with"));
        let d = tempfile::tempdir().unwrap();
        let env = d.path().join("grubenv");
        std::fs::write(&env, empty_block()).unwrap();
        let bad = set_next_entry(&env, "a b").unwrap_err().to_string();
        assert!(bad.contains("\"a b\""), "{bad}");
        let big = vec![Line::Var("x".into(), "y".repeat(2000))];
        assert_eq!(render(&big, BLOCK_BYTES), Err(2028));
    }

    #[test]
    fn grubs_own_tool_reads_what_is_written_into_its_block() {
        let d = tempfile::tempdir().unwrap();
        let env = d.path().join("grubenv");
        let made = std::process::Command::new("grub-editenv")
            .arg(&env)
            .arg("create")
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("no grub-editenv (package grub-common): skipped");
            return;
        }
        set_next_entry(&env, CAPTURE_ENTRY).unwrap();
        let out = std::process::Command::new("grub-editenv")
            .arg(&env)
            .arg("list")
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "next_entry=snapboot-capture\n"
        );
    }
}
