//! Running a host tool (dpkg-deb, mtools, sfdisk, apt-cache, ...) the one way the board's
//! builders do: its standard output when it succeeds; otherwise the command line and why,
//! its exit status and the last lines of its error output, for the caller's error to carry.

use std::process::Command;

/// Lines of a failed tool's error output kept in the reason.
const TAIL_LINES: usize = 8;

/// A host tool that could not be run or did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// The command line, as run.
    pub cmd: String,
    /// Why: the spawn error, or the exit status and the end of its error output.
    pub reason: String,
}

/// Runs `cmd` to completion; its standard output, or why it failed.
pub fn output(cmd: &mut Command) -> Result<Vec<u8>, Failed> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| Failed {
        cmd: line.clone(),
        reason: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(TAIL_LINES)..];
    Err(Failed {
        cmd: line,
        reason: format!("{}: {}", out.status, tail.join(" | ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_gives_stdout_and_failure_the_status_and_the_last_error_lines() {
        let ok = output(Command::new("sh").args(["-c", "echo out"])).unwrap();
        assert_eq!(ok, b"out\n");
        let script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i >&2; done; exit 3";
        let f = output(Command::new("sh").args(["-c", script])).unwrap_err();
        assert!(f.cmd.starts_with("sh -c"), "{}", f.cmd);
        assert!(f.reason.contains("exit status: 3"), "{}", f.reason);
        assert!(
            f.reason
                .ends_with("line3 | line4 | line5 | line6 | line7 | line8 | line9 | line10"),
            "{}",
            f.reason
        );
        let f = output(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(f.reason.contains("No such file"), "{}", f.reason);
    }
}
