//! What a restored `app` must answer: the state it was captured with, a current clock and
//! fresh random bytes. The `app` program (`guest/app/app.py`, also the `debian` workload's
//! service) answers `checksum`, `time` and `random` on its console; this module asks them
//! on a running board, computes the expected checksum by running the same program on the
//! host, and judges the answers. The end-to-end tests and `bench endurance` both use it.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use boottrace::MilestoneKind;
use regex::Regex;
use serde::Serialize;
use thiserror::Error;

use crate::qemu::{RunError, Session};

/// How far a restored guest's clock may be from the host's: the device steps its clock
/// after the restore, before `restored`.
pub const CLOCK_BOUND_S: f64 = 2.0;

/// The host's Python, which runs the `app` program for the expected checksum.
const HOST_PYTHON: &str = "/usr/bin/python3";

/// Why the expected checksum could not be computed on the host.
#[derive(Debug, Error)]
pub enum HostChecksumError {
    /// The program could not be written or run.
    #[error("running the app program on the host with {HOST_PYTHON}")]
    Run(#[source] std::io::Error),
    /// It ran, but gave no `checksum` answer.
    #[error("the app program on the host ({status}) answered no checksum; stderr: {stderr}")]
    NoAnswer {
        /// Its exit status.
        status: String,
        /// The last line of its stderr.
        stderr: String,
    },
}

/// The `app` program's state checksum (64 hex digits) at `scale` (`APP_SCALE`: "1.0" for
/// `app`, [`bundle::debian::APP_SCALE`] for `debian`), computed by running the program the
/// bundles carry on the host: the same program builds the same state everywhere.
pub fn host_checksum(scale: &str) -> Result<String, HostChecksumError> {
    let dir = tempfile::tempdir().map_err(HostChecksumError::Run)?;
    let app = dir.path().join("app.py");
    std::fs::write(&app, bundle::workload::APP_PY).map_err(HostChecksumError::Run)?;
    let mut ch = Command::new(HOST_PYTHON)
        .arg(&app)
        .env("APP_SCALE", scale)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(HostChecksumError::Run)?;
    if let Some(mut stdin) = ch.stdin.take() {
        stdin
            .write_all(b"checksum\n")
            .map_err(HostChecksumError::Run)?;
    }
    let out = ch.wait_with_output().map_err(HostChecksumError::Run)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|l| l.strip_prefix("checksum ")) {
        Some(sum) => Ok(sum.trim().to_string()),
        None => Err(HostChecksumError::NoAnswer {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
                .to_string(),
        }),
    }
}

/// Types `query` on the board's console and returns the first later line matching
/// `answer` (a regex), waiting up to `timeout`.
pub fn ask(
    s: &mut Session,
    query: &str,
    answer: &str,
    timeout: Duration,
) -> Result<String, RunError> {
    let re = Regex::new(answer).map_err(|e| RunError::BadRegex(answer.to_string(), e))?;
    s.send(query)?;
    Ok(s.wait_for(&re, query, timeout)?.0)
}

/// What a restored `app` answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoredApp {
    /// The board started the application again (a restore never does).
    pub started_again: bool,
    /// The state checksum (64 hex digits).
    pub checksum: String,
    /// The guest's clock minus the host's, in seconds, at the middle of the `time` query.
    pub clock_error_s: f64,
    /// 16 random bytes from the guest's RNG (32 hex digits).
    pub random: String,
}

/// A restored `app`'s answer that is wrong.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StateError {
    /// The application was started again instead of restored.
    #[error("the application was started again, not restored")]
    StartedAgain,
    /// The state differs from the captured one.
    #[error("state checksum {got} differs from the captured state's {want}")]
    Checksum {
        /// Answered.
        got: String,
        /// Expected.
        want: String,
    },
    /// The clock was not stepped to the current time.
    #[error("guest clock off the host's by {error_s:+.3} s (bound ±{bound_s} s)")]
    Clock {
        /// Guest minus host, seconds.
        error_s: f64,
        /// The bound it broke.
        bound_s: f64,
    },
}

/// Asks a restored `app` (a session past its `restored` marker) for its checksum, clock and
/// random bytes, each answer awaited up to `timeout`.
pub fn query_restored(s: &mut Session, timeout: Duration) -> Result<RestoredApp, RunError> {
    let started_again = s.timeline().first(MilestoneKind::AppStart).is_some();
    let checksum = ask(s, "checksum", "^checksum [0-9a-f]{64}$", timeout)?;
    let sent = unix_now();
    let time = ask(s, "time", r"^time \d+\.\d+$", timeout)?;
    let host = (sent + unix_now()) / 2.0;
    let random = ask(s, "random", "^random [0-9a-f]{32}$", timeout)?;
    // The regexes matched, so every answer has its word and a number.
    let guest: f64 = time[5..].parse().unwrap_or(f64::NAN);
    Ok(RestoredApp {
        started_again,
        checksum: checksum["checksum ".len()..].to_string(),
        clock_error_s: guest - host,
        random: random["random ".len()..].to_string(),
    })
}

impl RestoredApp {
    /// What is wrong with these answers, for a state whose checksum is `expected` and a
    /// clock bound of `clock_bound_s` seconds; empty when nothing is.
    pub fn problems(&self, expected: &str, clock_bound_s: f64) -> Vec<StateError> {
        let mut p = Vec::new();
        if self.started_again {
            p.push(StateError::StartedAgain);
        }
        if self.checksum != expected {
            p.push(StateError::Checksum {
                got: self.checksum.clone(),
                want: expected.to_string(),
            });
        }
        // NaN (an unparsable time) is out of every bound.
        let within = self.clock_error_s.abs() <= clock_bound_s;
        if !within {
            p.push(StateError::Clock {
                error_s: self.clock_error_s,
                bound_s: clock_bound_s,
            });
        }
        p
    }
}

/// For every answer in `randoms` equal to an earlier one: its index and the earlier one's.
/// A restored RNG must never repeat itself, so this is empty for a good run.
pub fn repeated(randoms: &[&str]) -> Vec<(usize, usize)> {
    randoms
        .iter()
        .enumerate()
        .filter_map(|(i, r)| randoms[..i].iter().position(|e| e == r).map(|j| (i, j)))
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(clock_error_s: f64) -> RestoredApp {
        RestoredApp {
            started_again: false,
            checksum: "ab".repeat(32),
            clock_error_s,
            random: "00".repeat(16),
        }
    }

    #[test]
    fn right_answers_have_no_problems_and_each_wrong_one_is_named() {
        let want = "ab".repeat(32);
        assert!(answers(-1.9).problems(&want, 2.0).is_empty());
        let mut bad = answers(2.5);
        bad.started_again = true;
        bad.checksum = "cd".repeat(32);
        let p = bad.problems(&want, CLOCK_BOUND_S);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(p[0], StateError::StartedAgain);
        assert!(
            p[1].to_string().starts_with("state checksum cdcd"),
            "{}",
            p[1]
        );
        assert_eq!(
            p[2].to_string(),
            "guest clock off the host's by +2.500 s (bound ±2 s)"
        );
        assert_eq!(answers(f64::NAN).problems(&want, 2.0).len(), 1);
    }

    #[test]
    fn repeats_name_the_earlier_answer() {
        assert!(repeated(&["a", "b", "c"]).is_empty());
        assert_eq!(
            repeated(&["a", "b", "a", "b", "a"]),
            [(2, 0), (3, 1), (4, 0)]
        );
    }
}
