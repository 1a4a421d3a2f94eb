//! Recording a real board's serial console (`snapboot trace`): every line stamped with the
//! host time since recording began, until a line matches or time runs out.
//!
//! The source is any byte stream (a configured tty, a pipe, a test's byte slice). A reader
//! thread stamps bytes as they arrive, so a slow consumer never delays a timestamp.

use rustix::termios::{tcgetattr, tcsetattr, OptionalActions};
use std::io::Read;
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::recorder::{ConsoleLine, LineRecorder};
use crate::timeline::{MilestoneKind, Outcome, Timeline};

/// Puts a serial port (a tty) into raw mode (no echo, no line editing, 8N1) at `baud`, so a
/// recording sees the console bytes exactly as the board sends them.
pub fn make_raw<Fd: AsFd>(fd: Fd, baud: u32) -> std::io::Result<()> {
    let mut t = tcgetattr(&fd)?;
    t.make_raw();
    t.set_speed(baud)?;
    tcsetattr(&fd, OptionalActions::Now, &t)?;
    Ok(())
}

/// Records `source` into a timeline named `name`. Every line goes to `on_line` as it is
/// recorded; the first line for which `until` is true ends the recording as the answer
/// (its time becomes the TTI). The recording also ends, without an answer, when the
/// source ends or `timeout` passes.
pub fn record<R: Read + Send + 'static>(
    source: R,
    name: &str,
    timeout: Duration,
    mut until: impl FnMut(&str) -> bool,
    mut on_line: impl FnMut(&ConsoleLine),
) -> Timeline {
    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut source = source;
        let mut buf = [0u8; 4096];
        while let Ok(n) = source.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    let mut rec = LineRecorder::new();
    let mut tl = Timeline::new(name.to_string());
    let deadline = t0 + timeout;
    let mut outcome = Outcome::Timeout {
        reason: format!("no line matched within {} s", timeout.as_secs_f64()),
    };
    'outer: while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok((at, bytes)) = rx.recv_timeout(left) else {
            if deadline > Instant::now() {
                outcome = Outcome::Exited {
                    reason: "the serial source ended before a line matched".into(),
                };
            }
            break;
        };
        for line in rec.feed(at.duration_since(t0).as_secs_f64(), &bytes) {
            on_line(&line);
            let hit = until(&line.text);
            let t = line.t;
            tl.push_line(line);
            if hit {
                tl.push_event(MilestoneKind::ProbeAnswered, t, None);
                tl.tti = Some(t);
                outcome = Outcome::Answered;
                break 'outer;
            }
        }
    }
    tl.outcome = outcome;
    tl.finalize();
    tl
}

#[cfg(test)]
mod tests {
    use super::*;

    fn console(bytes: &'static [u8]) -> &'static [u8] {
        bytes
    }

    #[test]
    fn stops_at_the_first_matching_line_and_stamps_it() {
        let src = console(b"[    0.000000] Linux version 6.1\r\nsnapboot: @ready\nafter\n");
        let mut seen = Vec::new();
        let tl = record(
            src,
            "ttyUSB0",
            Duration::from_secs(5),
            |l| l.contains("@ready"),
            |l| seen.push(l.text.clone()),
        );
        assert_eq!(
            seen,
            ["[    0.000000] Linux version 6.1", "snapboot: @ready"]
        );
        assert!(matches!(tl.outcome, Outcome::Answered), "{:?}", tl.outcome);
        let t = tl.tti.expect("answered");
        assert!((0.0..5.0).contains(&t), "{t}");
        assert_eq!(tl.first(MilestoneKind::ProbeAnswered), Some(t));
    }

    #[test]
    fn a_source_that_ends_without_a_match_is_not_an_answer() {
        let tl = record(
            console(b"one\ntwo\n"),
            "pipe",
            Duration::from_secs(5),
            |l| l == "never",
            |_| {},
        );
        assert_eq!(tl.tti, None);
        assert!(
            matches!(&tl.outcome, Outcome::Exited { reason } if reason.contains("source ended")),
            "{:?}",
            tl.outcome
        );
    }

    #[test]
    fn a_silent_source_times_out() {
        let (_keep_open, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let t = Instant::now();
        let tl = record(rx, "silent", Duration::from_millis(200), |_| true, |_| {});
        assert!(
            matches!(tl.outcome, Outcome::Timeout { .. }),
            "{:?}",
            tl.outcome
        );
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
